//! Multi-device work items, views, timelines and sparse images on two logical devices.

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::format::Format;
use residency_core::tiles::{SparseImageDesc, TexelRegion, TilePoolDesc};
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::multi::work::{
    BufferView, CopyItem, DispatchItem, DrawItem, MultiBinding, MultiComputeProgram, MultiGraphicsProgram,
    MultiSubmitter, MultiTimeline, MultiTimestamps, RenderItem, ViewRangeError, WorkError, WorkItem,
};
use residency_vulkan::multi::{
    InitialData, MultiBufferPool, MultiDevice, MultiDeviceError, MultiSparseImage, MultiTilePool,
    MultiUploader,
};
use residency_vulkan::shaders::{self};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferInit, BufferPoolDesc, FaultSite, InjectedFault};

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

fn f32s(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

#[test]
fn work_items_resolve_per_device_at_submission_and_cache_their_form() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("work", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let n = 256u32;
        let storage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
        let vertices = pool
            .init_buffer(&BufferInit::new("vertices", u64::from(n) * 16).with_usage(storage), both)
            .unwrap();
        let indices = pool
            .init_buffer(&BufferInit::new("indices", u64::from(n) * 4).with_usage(storage), both)
            .unwrap();
        let params = pool
            .init_buffer(
                &BufferInit::new("params", 48).with_usage(BufferUsage::UNIFORM | BufferUsage::COPY_DST),
                both,
            )
            .unwrap();
        let results = pool
            .init_buffer(&BufferInit::new("results", u64::from(n) * 16).with_usage(storage), both)
            .unwrap();
        let copy =
            pool.init_buffer(&BufferInit::new("copy", u64::from(n) * 16).with_usage(storage), both).unwrap();
        uploader.broadcast(&vertices, 0, &f32s((0..n * 4).map(|i| i as f32))).unwrap();
        let idx: Vec<u8> = (0..n).rev().flat_map(u32::to_le_bytes).collect();
        uploader.broadcast(&indices, 0, &idx).unwrap();
        let mut p = f32s([1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5]);
        p.extend_from_slice(&n.to_le_bytes());
        p.resize(48, 0);
        uploader.broadcast(&params, 0, &p).unwrap();
        uploader.wait_idle().unwrap();

        let program =
            MultiComputeProgram::new(set, both, "placed_buffers.comp", &shaders::PLACED_BUFFERS, 4).unwrap();
        let dispatch = DispatchItem::new(
            &program,
            vec![
                MultiBinding::Buffer(BufferView::whole(&vertices)),
                MultiBinding::Buffer(BufferView::whole(&indices)),
                MultiBinding::Buffer(BufferView::whole(&params)),
                MultiBinding::Buffer(BufferView::whole(&results)),
            ],
            &[],
            [n.div_ceil(64), 1, 1],
        );
        let copy_item = CopyItem {
            src: BufferView::whole(&results),
            dst: BufferView::whole(&copy),
            src_offset: 0,
            dst_offset: 0,
            size: u64::from(n) * 16,
        };
        let submitter = MultiSubmitter::new(set, both).unwrap();
        assert_eq!(dispatch.cached_devices(), 0);
        for device in [d(1), d(0), d(1)] {
            let items = [WorkItem::Dispatch(&dispatch), WorkItem::Barrier, WorkItem::Copy(copy_item)];
            let submission = submitter.submit(device, &items).unwrap();
            submitter.wait(device, submission).unwrap();
        }
        assert_eq!(dispatch.cached_devices(), 2, "one cached form per device, reused");
        for device in [d(0), d(1)] {
            let dev = set.device(device).unwrap();
            let out = dev.read_back(copy.instance(device).unwrap(), 0, u64::from(n) * 16).unwrap();
            let floats: Vec<f32> =
                out.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            for i in 0..n as usize {
                let src = (n as usize - 1 - i) * 4;
                assert_eq!(floats[i * 4], src as f32 + 0.5, "{device} result {i}");
            }
        }

        // A buffer that is not on device 1 any more: submission there is a typed error.
        let mut partial =
            pool.init_buffer(&BufferInit::new("partial", 64).with_usage(storage), both).unwrap();
        pool.set_buffer_mask(&mut partial, d(0).mask(), InitialData::Undefined, &uploader).unwrap();
        let item = CopyItem {
            src: BufferView::whole(&partial),
            dst: BufferView::whole(&copy),
            src_offset: 0,
            dst_offset: 0,
            size: 64,
        };
        let err = submitter.submit(d(1), &[WorkItem::Copy(item)]).unwrap_err();
        assert!(matches!(err, WorkError::NotOnDevice { device, .. } if device == d(1)), "{err}");
        let ok = submitter.submit(d(0), &[WorkItem::Copy(item)]).unwrap();
        submitter.wait(d(0), ok).unwrap();

        submitter.destroy();
        drop(program);
        for b in [vertices, indices, params, results, copy, partial] {
            pool.free_buffer(b).unwrap();
        }
        uploader.destroy().unwrap();
    });
}

#[test]
fn timelines_signal_and_wait_per_device() {
    with_gpu(|set| {
        assert!(
            set.devices()[0].features().timeline_semaphore,
            "lavapipe and the H200 have timeline semaphores"
        );
        let both = DeviceMask::from_bits(0b11);
        let timeline = MultiTimeline::new(set, both, 0).unwrap();
        timeline.signal(d(1).mask(), 5).unwrap();
        let values = timeline.values().unwrap();
        assert_eq!(values, vec![(d(0), 0), (d(1), 5)]);
        timeline.wait(d(1).mask(), 5, 1_000_000_000).unwrap();
        timeline.signal(both, 7).unwrap();
        timeline.wait(both, 7, 1_000_000_000).unwrap();
        // SAFETY: only the handles are read; nothing is submitted with them.
        assert!(unsafe { timeline.semaphore(d(0)).is_some() && timeline.semaphore(d(2)).is_none() });
        drop(timeline);
    });
}

#[test]
fn sparse_images_on_two_devices_commit_per_device_or_broadcast() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pools = MultiTilePool::new(set, both, &TilePoolDesc::default().with_tiles_per_heap(64)).unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 4096, 4096);
        let mut image = MultiSparseImage::new(&pools, both, "multi sparse", &desc).unwrap();
        let tile = image.instance(d(0)).unwrap().layout().tile_shape();
        let first = TexelRegion { offset: [0; 3], extent: [tile.width, tile.height, 1] };
        let second = TexelRegion { offset: [tile.width, 0, 0], extent: [1, 1, 1] };
        image.commit_region(&pools, both, 0, 0, first).unwrap();
        image.commit_region(&pools, d(1).mask(), 0, 0, second).unwrap();
        assert_eq!(pools.used_tiles(), vec![(d(0), 1), (d(1), 2)], "per-device page tables and pools");
        let stats = image.flush_binds(&pools).unwrap();
        assert_eq!(stats.iter().map(|(_, s)| s.tiles_bound).collect::<Vec<_>>(), vec![1, 2]);
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let data: Vec<u8> = (0..tile.width * tile.height * 4).map(|i| (i % 253) as u8).collect();
        image.broadcast_region(&uploader, 0, [0; 3], [tile.width, tile.height, 1], &data).unwrap();
        for device in [d(0), d(1)] {
            let back = image.instance(device).unwrap().read_region(0, 0, first, 1 << 20).unwrap();
            assert_eq!(back, data, "{device}");
        }
        // Commit and release before a flush cancel out; a release then goes out as an unbind.
        image.commit_region(&pools, d(0).mask(), 0, 0, second).unwrap();
        image.release_region(&pools, d(0).mask(), 0, 0, second).unwrap();
        for s in set.devices().iter().take(2) {
            s.wait_idle().unwrap();
        }
        image.release_region(&pools, both, 0, 0, first).unwrap();
        let stats = image.flush_binds(&pools).unwrap();
        assert_eq!(
            stats.iter().map(|(_, s)| (s.tiles_bound, s.tiles_unbound)).collect::<Vec<_>>(),
            vec![(0, 1), (0, 1)]
        );
        let err =
            MultiSparseImage::new(&pools, DeviceMask::from_bits(0b100_0000), "nowhere", &desc).unwrap_err();
        // Device 6 does not exist on two devices (EmptyMask); where it does, the pools are not on it.
        assert!(
            matches!(err, MultiDeviceError::EmptyMask(_) | MultiDeviceError::MaskNotSubset { .. }),
            "{err}"
        );
        drop(image);
        uploader.destroy().unwrap();
    });
}

#[test]
fn a_mask_change_invalidates_the_cached_per_device_form() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("regen", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let storage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
        let n = 64u32;
        let mut vertices = pool
            .init_buffer(&BufferInit::new("vertices", u64::from(n) * 16).with_usage(storage), both)
            .unwrap();
        let indices = pool
            .init_buffer(&BufferInit::new("indices", u64::from(n) * 4).with_usage(storage), both)
            .unwrap();
        let params = pool
            .init_buffer(
                &BufferInit::new("params", 48).with_usage(BufferUsage::UNIFORM | BufferUsage::COPY_DST),
                both,
            )
            .unwrap();
        let results = pool
            .init_buffer(&BufferInit::new("results", u64::from(n) * 16).with_usage(storage), both)
            .unwrap();
        uploader.broadcast(&vertices, 0, &f32s((0..n * 4).map(|_| 1.0))).unwrap();
        uploader.broadcast(&indices, 0, &(0..n).flat_map(u32::to_le_bytes).collect::<Vec<_>>()).unwrap();
        let mut p = f32s([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        p.extend_from_slice(&n.to_le_bytes());
        p.resize(48, 0);
        uploader.broadcast(&params, 0, &p).unwrap();
        uploader.wait_idle().unwrap();
        let program =
            MultiComputeProgram::new(set, both, "placed_buffers.comp", &shaders::PLACED_BUFFERS, 8).unwrap();
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let run = |vertices: &residency_vulkan::multi::MultiBuffer| {
            let dispatch = DispatchItem::new(
                &program,
                vec![
                    MultiBinding::Buffer(BufferView::whole(vertices)),
                    MultiBinding::Buffer(BufferView::whole(&indices)),
                    MultiBinding::Buffer(BufferView::whole(&params)),
                    MultiBinding::Buffer(BufferView::whole(&results)),
                ],
                &[],
                [1, 1, 1],
            );
            let s = submitter.submit(d(1), &[WorkItem::Dispatch(&dispatch)]).unwrap();
            submitter.wait(d(1), s).unwrap();
            dispatch.cached_devices()
        };
        let first = run(&vertices);
        let generation = vertices.generation();
        // Drop device 1's instance and bring it back with new data: a new VkBuffer there.
        pool.set_buffer_mask(&mut vertices, d(0).mask(), InitialData::Undefined, &uploader).unwrap();
        let twos = f32s((0..n * 4).map(|_| 2.0));
        pool.set_buffer_mask(&mut vertices, both, InitialData::Bytes(&twos), &uploader).unwrap();
        assert_ne!(vertices.generation(), generation);
        assert_eq!(first, 1);
        assert_eq!(run(&vertices), 1);
        let out = set.device(d(1)).unwrap().read_back(results.instance(d(1)).unwrap(), 0, 16).unwrap();
        assert_eq!(f32::from_le_bytes([out[0], out[1], out[2], out[3]]), 2.0, "the new instance was read");

        // Device-level multi-device buffers and images with cached views.
        let placed = residency_vulkan::multi::MultiBuffer::create(
            set,
            both,
            &residency_vulkan::BufferDesc::new("placed everywhere", 4096, BufferUsage::STORAGE),
        )
        .unwrap();
        assert_eq!(placed.mask(), both);
        let image = residency_vulkan::multi::MultiImage::create(
            set,
            both,
            &residency_vulkan::ImageDesc::new_2d(
                "image everywhere",
                Format::R8G8B8A8Unorm,
                64,
                64,
                residency_core::usage::ImageUsage::SAMPLED,
            ),
        )
        .unwrap();
        let v0 = image.view(set, d(0), 0..1).unwrap();
        let v1 = image.view(set, d(1), 0..1).unwrap();
        assert_eq!(image.view(set, d(0), 0..1).unwrap().raw(), v0.raw(), "cached");
        assert_ne!(v0.raw(), v1.raw());
        assert_eq!(image.cached_views(), 2);
        // Dropping releases every instance and view (behind the GPU).
        drop((v0, v1, image, placed));

        submitter.destroy();
        drop(program);
        for b in [vertices, indices, params, results] {
            pool.free_buffer(b).unwrap();
        }
        uploader.destroy().unwrap();
    });
}

#[test]
fn transient_pools_exist_per_device_and_track_state_per_device() {
    use residency_core::sync::{Region, TrackerOptions, Use};
    use residency_vulkan::multi::MultiTransientPool;
    use residency_vulkan::tracking::ResourceTracker;
    use residency_vulkan::transient::TransientRequest;
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let mut pools = MultiTransientPool::new(set, both, "per-device transients").unwrap();
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        for (device, kib) in [(d(0), 64u64), (d(1), 128)] {
            let request = |name: &str, passes| TransientRequest::Buffer {
                name: name.into(),
                size: kib << 10,
                usage: BufferUsage::STORAGE,
                passes,
                uses: (Use::ComputeStorageWrite, Use::ComputeStorageWrite),
            };
            let pool = pools.pool_mut(device).unwrap();
            let frame = pool.begin_frame(&[request("a", 0..=0), request("b", 1..=1)]).unwrap();
            assert!(frame.report().peak_bytes < frame.report().sum_of_sizes, "a and b alias on {device}");
            let id = tracker.track_buffer(frame.buffer(0).unwrap()).unwrap();
            assert!(tracker.core().contains(device, id));
            let mut batch = tracker.batch(device, 0);
            batch.declare(id, Region::Whole, Use::ComputeStorageWrite).unwrap();
            let _ = batch.flush();
            tracker.untrack(device, id).unwrap();
            pool.end_frame(frame);
        }
        let heaps = pools.heap_bytes();
        assert_eq!(heaps.len(), 2);
        assert!(heaps[0].1 < heaps[1].1, "each device sized its own heaps: {heaps:?}");
    });
}

/// Each device's resident tiles (virtual indices), and its pool's tiles in use.
type Residency = (Vec<(DeviceIndex, Vec<u32>)>, Vec<(DeviceIndex, u64)>);

/// Each device's resident tiles (virtual indices) and pool tiles in use.
fn residency(image: &MultiSparseImage, pools: &MultiTilePool) -> Residency {
    let tables = image
        .iter()
        .map(|(i, instance)| (i, instance.residency().page_table().mapped().map(|(t, _)| t.0).collect()))
        .collect();
    (tables, pools.used_tiles())
}

#[test]
fn flush_binds_failing_on_device_1_rolls_back_to_the_page_tables_before_it() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pools = MultiTilePool::new(set, both, &TilePoolDesc::default().with_tiles_per_heap(64)).unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 2048, 2048);
        let mut image = MultiSparseImage::new(&pools, both, "flush rollback", &desc).unwrap();
        let tile = image.instance(d(0)).unwrap().layout().tile_shape();
        let first = TexelRegion { offset: [0; 3], extent: [tile.width, tile.height, 1] };
        let second = TexelRegion { offset: [tile.width, 0, 0], extent: [1, 1, 1] };
        image.commit_region(&pools, both, 0, 0, first).unwrap();
        image.commit_region(&pools, d(1).mask(), 0, 0, second).unwrap();
        let before = residency(&image, &pools);
        assert_eq!(before.1, vec![(d(0), 1), (d(1), 2)]);

        let d1 = set.device(d(1)).unwrap();
        d1.ledger().inject_fault(FaultSite::BindSparse, 0, InjectedFault::OutOfDeviceMemory);
        let err = image.flush_binds(&pools).unwrap_err();
        assert!(matches!(err, MultiDeviceError::Failed { device, .. } if device == d(1)), "{err}");
        assert_eq!(d1.ledger().faults_fired(FaultSite::BindSparse), 1);
        d1.ledger().clear_faults();
        assert_eq!(residency(&image, &pools), before, "every page table and pool as before the call");
        assert!(!image.instance(d(0)).unwrap().has_pending_binds(), "device 0 was flushed");
        assert!(image.instance(d(1)).unwrap().has_pending_binds(), "device 1's commits are queued again");

        // The retry binds device 1's tiles; device 0 has nothing left to bind.
        let stats = image.flush_binds(&pools).unwrap();
        assert_eq!(stats.iter().map(|(_, s)| s.tiles_bound).collect::<Vec<_>>(), vec![0, 2]);
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let data: Vec<u8> = (0..tile.width * tile.height * 4).map(|i| (i % 251) as u8).collect();
        image.broadcast_region(&uploader, 0, [0; 3], [tile.width, tile.height, 1], &data).unwrap();
        for device in [d(0), d(1)] {
            let back = image.instance(device).unwrap().read_region(0, 0, first, 1 << 20).unwrap();
            assert_eq!(back, data, "{device}: the tile is bound");
        }
        drop(image);
        uploader.destroy().unwrap();
    });
}

#[test]
fn release_region_rolls_back_a_refusal_on_any_device() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool_desc = TilePoolDesc::default().with_tiles_per_heap(16);
        let pools = MultiTilePool::new(set, both, &pool_desc).unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024);
        let mut image = MultiSparseImage::new(&pools, both, "release rollback", &desc).unwrap();
        let tile = image.instance(d(0)).unwrap().layout().tile_shape();
        let first = TexelRegion { offset: [0; 3], extent: [tile.width * 2, tile.height, 1] };
        image.commit_region(&pools, both, 0, 0, first).unwrap();
        image.flush_binds(&pools).unwrap();
        let before = residency(&image, &pools);
        assert_eq!(before.1, vec![(d(0), 2), (d(1), 2)]);

        // Pools without device 0 (this used to panic), other pools (the wrong pool on device 0
        // and 1), a region outside the mip: each refused before any device releases a tile.
        let on_1 = MultiTilePool::new(set, d(1).mask(), &pool_desc).unwrap();
        let err = image.release_region(&on_1, both, 0, 0, first).unwrap_err();
        assert!(matches!(err, MultiDeviceError::MaskNotSubset { .. }), "{err}");
        let other = MultiTilePool::new(set, both, &pool_desc).unwrap();
        let err = image.release_region(&other, both, 0, 0, first).unwrap_err();
        assert!(err.to_string().contains("pool"), "{err}");
        let outside = TexelRegion { offset: [1000, 0, 0], extent: [100, 1, 1] };
        let err = image.release_region(&pools, both, 0, 0, outside).unwrap_err();
        assert!(matches!(err, MultiDeviceError::Failed { device, .. } if device == d(0)), "{err}");
        assert_eq!(residency(&image, &pools), before, "nothing was released anywhere");
        assert!(image.iter().all(|(_, i)| !i.has_pending_binds()), "no unbind was queued");
        // The same checks guard commits and flushes.
        assert!(image.commit_region(&on_1, both, 0, 0, first).is_err());
        assert!(image.flush_binds(&other).is_err());
        assert_eq!(residency(&image, &pools), before);
        // Broadcast uploads check every device before staging (an uploader without device 1 used
        // to skip it silently).
        let only_0 = MultiUploader::new(set, d(0).mask(), 1 << 20).unwrap();
        let texels = vec![7u8; (tile.width * tile.height * 4) as usize];
        let extent = [tile.width, tile.height, 1];
        let err = image.broadcast_region(&only_0, 0, [0; 3], extent, &texels).unwrap_err();
        assert!(matches!(err, MultiDeviceError::MaskNotSubset { .. }), "{err}");
        assert_eq!(only_0.instance(d(0)).unwrap().staging_in_use(), (0, 0), "nothing staged");
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let err = image.broadcast_region(&uploader, 0, [0; 3], extent, &texels[1..]).unwrap_err();
        assert!(
            matches!(
                err,
                MultiDeviceError::Failed { source: residency_vulkan::UploadError::WrongSize { .. }, .. }
            ),
            "{err}"
        );
        assert!(uploader.iter().all(|(_, u)| u.staging_in_use() == (0, 0)), "nothing staged");
        image.broadcast_region(&uploader, 0, [0; 3], extent, &texels).unwrap();

        image.release_region(&pools, both, 0, 0, first).unwrap();
        let stats = image.flush_binds(&pools).unwrap();
        assert_eq!(stats.iter().map(|(_, s)| s.tiles_unbound).collect::<Vec<_>>(), vec![2, 2]);
        assert_eq!(pools.used_tiles(), vec![(d(0), 0), (d(1), 0)]);
        drop((image, on_1, other));
        only_0.destroy().unwrap();
        uploader.destroy().unwrap();
    });
}

/// `quads.vert`'s vertex: `vec2 position` (location 0), `vec4 color` (location 1).
const QUAD_STRIDE: u32 = 24;

fn quad_attributes() -> [residency_vulkan::graphics::VertexAttribute; 2] {
    use residency_vulkan::ash::vk::Format as F;
    use residency_vulkan::graphics::VertexAttribute;
    [
        VertexAttribute { location: 0, format: F::R32G32_SFLOAT, offset: 0 },
        VertexAttribute { location: 1, format: F::R32G32B32A32_SFLOAT, offset: 8 },
    ]
}

/// The corners (x0, y0), (x1, y0), (x0, y1), (x1, y1) of a rectangle in clip space, one colour.
fn corners(lo: [f32; 2], hi: [f32; 2], color: [f32; 4]) -> [[f32; 6]; 4] {
    let v = |x, y| [x, y, color[0], color[1], color[2], color[3]];
    [v(lo[0], lo[1]), v(hi[0], lo[1]), v(lo[0], hi[1]), v(hi[0], hi[1])]
}

fn vertex_bytes(vertices: &[[f32; 6]]) -> Vec<u8> {
    vertices.iter().flatten().flat_map(|f| f.to_le_bytes()).collect()
}

/// Where the geometry lies in its buffer: junk before it, so a draw that ignored its view's
/// offset would read junk.
const RED: u64 = 96;
const GREEN: u64 = 240;
const BLUE: u64 = 336;
const INDICES: u64 = 480;
const ARGS: u64 = 496;
const GEOMETRY: u64 = 512;

/// The geometry: a red quad of 6 vertices (top left), a green one of 4 corners drawn through 6
/// `u16` indices (top right), a blue one of 6 vertices drawn indirectly (bottom left).
fn geometry() -> Vec<u8> {
    let triangles = |c: [[f32; 6]; 4]| [0, 1, 2, 2, 1, 3].map(|i| c[i]);
    let mut bytes = vec![0xffu8; GEOMETRY as usize];
    let mut put = |at: u64, data: &[u8]| bytes[at as usize..at as usize + data.len()].copy_from_slice(data);
    put(RED, &vertex_bytes(&triangles(corners([-1.0, -1.0], [0.0, 0.0], [1.0, 0.0, 0.0, 1.0]))));
    put(GREEN, &vertex_bytes(&corners([0.0, -1.0], [1.0, 0.0], [0.0, 1.0, 0.0, 1.0])));
    put(BLUE, &vertex_bytes(&triangles(corners([-1.0, 0.0], [0.0, 1.0], [0.0, 0.0, 1.0, 1.0]))));
    put(INDICES, &[0u16, 1, 2, 2, 1, 3].iter().flat_map(|i| i.to_le_bytes()).collect::<Vec<_>>());
    put(ARGS, &[6u32, 1, 0, 0].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>());
    bytes
}

const SIDE: u32 = 32;

/// Copies mip 0 of `image` (in `layout`) to the host.
fn read_target(
    device: &residency_vulkan::Device,
    image: &residency_vulkan::Image,
    layout: residency_vulkan::ash::vk::ImageLayout,
) -> Vec<u8> {
    use residency_vulkan::ash::vk;
    use residency_vulkan::recording::MemoryDependency;
    let pixels = device
        .create_buffer(
            &residency_vulkan::BufferDesc::new(
                "target pixels",
                u64::from(SIDE * SIDE * 4),
                BufferUsage::COPY_DST,
            )
            .with_intent(residency_core::memory::MemoryIntent::Readback),
        )
        .unwrap();
    device
        .submit_once("read the target", |rec| {
            rec.copy_image_to_buffer(image, layout, &pixels).unwrap();
            rec.memory_barrier(MemoryDependency {
                src_stages: vk::PipelineStageFlags2::COPY,
                src_access: vk::AccessFlags2::TRANSFER_WRITE,
                dst_stages: vk::PipelineStageFlags2::HOST,
                dst_access: vk::AccessFlags2::HOST_READ,
            })
            .unwrap();
        })
        .unwrap();
    let mut out = vec![0u8; (SIDE * SIDE * 4) as usize];
    pixels.read(0, &mut out).unwrap();
    out
}

/// The same draws through a single-device `GraphicsProgram` and `Drawing` on `device`.
fn single_device_render(device: &residency_vulkan::Device) -> Vec<u8> {
    use residency_core::sync::{Region, TrackerOptions, Use};
    use residency_vulkan::ash::vk;
    use residency_vulkan::graphics::{GraphicsProgram, IndexFormat};
    use residency_vulkan::tracking::ResourceTracker;
    let program = GraphicsProgram::new(
        device,
        "reference quads",
        &shaders::QUADS_VERT,
        &shaders::QUADS_FRAG,
        QUAD_STRIDE,
        &quad_attributes(),
        vk::Format::R8G8B8A8_UNORM,
        1,
    )
    .unwrap();
    let mut buffer = device
        .create_buffer(
            &residency_vulkan::BufferDesc::new(
                "reference geometry",
                GEOMETRY,
                BufferUsage::VERTEX | BufferUsage::INDEX | BufferUsage::INDIRECT,
            )
            .with_intent(residency_core::memory::MemoryIntent::Upload),
        )
        .unwrap();
    buffer.write(0, &geometry()).unwrap();
    let image = device
        .create_image(&residency_vulkan::ImageDesc::new_2d(
            "reference target",
            Format::R8G8B8A8Unorm,
            SIDE,
            SIDE,
            residency_core::usage::ImageUsage::COLOR_ATTACHMENT | residency_core::usage::ImageUsage::COPY_SRC,
        ))
        .unwrap();
    let view = image.create_view(0..1).unwrap();
    let mut tracker = ResourceTracker::new(TrackerOptions::default());
    let id = tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap();
    let family = device.universal_queue().family();
    device
        .submit_once("reference render", |rec| {
            let mut batch = tracker.batch(device.index(), family);
            batch.declare_discard(id, Region::Whole, Use::ColorAttachmentWrite).unwrap();
            let flush = batch.flush();
            tracker.record(rec, &flush.barriers).unwrap();
            program
                .render(rec, &view, [SIDE; 2], [0.0, 0.0, 0.0, 1.0], |pass| {
                    pass.bind_vertex_buffer(&buffer, RED).unwrap();
                    pass.draw(6, 1).unwrap();
                    pass.bind_vertex_buffer(&buffer, GREEN).unwrap();
                    pass.bind_index_buffer(&buffer, INDICES, IndexFormat::U16).unwrap();
                    // SAFETY: the indices name the 4 corners bound.
                    unsafe { pass.draw_indexed(6, 1) }.unwrap();
                    pass.bind_vertex_buffer(&buffer, BLUE).unwrap();
                    // SAFETY: the command draws the 6 vertices bound, first instance 0.
                    unsafe { pass.draw_indirect(&buffer, ARGS) }.unwrap();
                })
                .unwrap();
            let mut batch = tracker.batch(device.index(), family);
            batch.declare(id, Region::Whole, Use::TransferSrc).unwrap();
            let flush = batch.flush();
            tracker.record(rec, &flush.barriers).unwrap();
        })
        .unwrap();
    let pixels = read_target(device, &image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL);
    tracker.untrack(device.index(), id).unwrap();
    pixels
}

#[test]
fn draw_items_render_the_same_pixels_on_both_devices_as_a_single_device_render() {
    use residency_vulkan::graphics::IndexFormat;
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("draw", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let usage = BufferUsage::VERTEX | BufferUsage::INDEX | BufferUsage::INDIRECT | BufferUsage::COPY_DST;
        let geo = pool.init_buffer(&BufferInit::new("geometry", GEOMETRY).with_usage(usage), both).unwrap();
        uploader.broadcast(&geo, 0, &geometry()).unwrap();
        uploader.wait_idle().unwrap();
        let target = residency_vulkan::multi::MultiImage::create(
            set,
            both,
            &residency_vulkan::ImageDesc::new_2d(
                "multi draw target",
                Format::R8G8B8A8Unorm,
                SIDE,
                SIDE,
                residency_core::usage::ImageUsage::COLOR_ATTACHMENT
                    | residency_core::usage::ImageUsage::COPY_SRC,
            ),
        )
        .unwrap();
        let program = MultiGraphicsProgram::new(
            set,
            both,
            "multi quads",
            &shaders::QUADS_VERT,
            &shaders::QUADS_FRAG,
            QUAD_STRIDE,
            &quad_attributes(),
            residency_vulkan::ash::vk::Format::R8G8B8A8_UNORM,
            1,
        )
        .unwrap();
        assert_eq!(program.created(), DeviceMask::NONE, "created on first use");

        // Views name ranges, checked against the buffer.
        let view = |offset, size| BufferView::range(&geo, offset, size).unwrap();
        assert_eq!(
            BufferView::range(&geo, ARGS, 32).unwrap_err(),
            ViewRangeError { name: "geometry".into(), offset: ARGS, size: 32, buffer_size: GEOMETRY }
        );
        assert!(BufferView::range(&geo, 0, 0).is_err(), "an empty view");
        let red = DrawItem::new(&program, vec![], Some(view(RED, 144)), 6, 1);
        // SAFETY: the indices name the 4 corners of the view.
        let green = unsafe {
            DrawItem::new_indexed(
                &program,
                vec![],
                Some(view(GREEN, 96)),
                view(INDICES, 12),
                IndexFormat::U16,
                6,
                1,
            )
        };
        // SAFETY: the command draws the 6 vertices of the view, first instance 0.
        let blue = unsafe { DrawItem::new_indirect(&program, vec![], Some(view(BLUE, 144)), view(ARGS, 16)) };
        let draws = [&red, &green, &blue];
        let render = RenderItem {
            program: &program,
            target: &target,
            extent: [SIDE; 2],
            clear: [0.0, 0.0, 0.0, 1.0],
            draws: &draws,
        };
        let submitter = MultiSubmitter::new(set, both).unwrap();

        // A draw reading past its vertex view is refused before anything is recorded.
        let past = DrawItem::new(&program, vec![], Some(view(RED, 144)), 7, 1);
        let refused = [&past];
        let err = submitter
            .submit(d(0), &[WorkItem::Render(RenderItem { draws: &refused, ..render })])
            .unwrap_err();
        assert!(
            matches!(
                err,
                WorkError::Draw(residency_vulkan::graphics::DrawError::OutOfRange {
                    needed: 168,
                    available: 144,
                    ..
                })
            ),
            "{err}"
        );

        // A target that cannot be an attachment: refused before anything is recorded.
        let sampled = residency_vulkan::multi::MultiImage::create(
            set,
            both,
            &residency_vulkan::ImageDesc::new_2d(
                "multi draw sampled",
                Format::R8G8B8A8Unorm,
                SIDE,
                SIDE,
                residency_core::usage::ImageUsage::SAMPLED,
            ),
        )
        .unwrap();
        let err = submitter
            .submit(d(1), &[WorkItem::Render(RenderItem { target: &sampled, ..render })])
            .unwrap_err();
        assert!(matches!(err, WorkError::Render(_)), "{err}");

        let mut images = Vec::new();
        for device in [d(0), d(1)] {
            let submission = submitter.submit(device, &[WorkItem::Render(render)]).unwrap();
            submitter.wait(device, submission).unwrap();
            images.push(read_target(
                set.device(device).unwrap(),
                target.instance(device).unwrap(),
                residency_vulkan::ash::vk::ImageLayout::GENERAL,
            ));
        }
        assert_eq!(program.created(), both);
        let pixel = |image: &[u8], x: u32, y: u32| {
            let at = ((y * SIDE + x) * 4) as usize;
            [image[at], image[at + 1], image[at + 2], image[at + 3]]
        };
        for (image, device) in images.iter().zip([d(0), d(1)]) {
            assert_eq!(pixel(image, 8, 8), [255, 0, 0, 255], "{device}: red, top left");
            assert_eq!(pixel(image, 24, 8), [0, 255, 0, 255], "{device}: green (indexed), top right");
            assert_eq!(pixel(image, 8, 24), [0, 0, 255, 255], "{device}: blue (indirect), bottom left");
            assert_eq!(pixel(image, 24, 24), [0, 0, 0, 255], "{device}: cleared, bottom right");
        }
        assert_eq!(images[0], images[1], "device 0 and device 1 render the same pixels");
        assert_eq!(images[0], single_device_render(set.device(d(0)).unwrap()), "as a single-device render");

        submitter.destroy();
        drop((red, green, blue, past));
        drop((program, target, sampled));
        pool.free_buffer(geo).unwrap();
        uploader.destroy().unwrap();
    });
}

#[test]
fn buffer_view_ranges_resolve_per_device_for_copies_and_bindings() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("ranges", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
        let buffer = pool.init_buffer(&BufferInit::new("ranged", 1024).with_usage(usage), both).unwrap();
        let source: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
        uploader.broadcast(&buffer, 0, &source).unwrap();
        uploader.wait_idle().unwrap();
        let program = MultiComputeProgram::new(set, both, "fill.comp", &shaders::FILL, 2).unwrap();
        let submitter = MultiSubmitter::new(set, both).unwrap();

        // A view of bytes 256..320 bound as the storage buffer: the fill writes only there.
        let words = BufferView::range(&buffer, 256, 64).unwrap();
        assert_eq!((words.offset(), words.size()), (256, 64));
        let push: Vec<u8> = [16u32, 1000].iter().flat_map(|w| w.to_le_bytes()).collect();
        let fill = DispatchItem::new(&program, vec![MultiBinding::Buffer(words)], &push, [1, 1, 1]);
        // Copies: offsets are bytes into the views (bytes 16..80 of 0..128 to 32.. of 512..640).
        let copy = CopyItem {
            src: BufferView::range(&buffer, 0, 128).unwrap(),
            dst: BufferView::range(&buffer, 512, 128).unwrap(),
            src_offset: 16,
            dst_offset: 32,
            size: 64,
        };
        let outside = CopyItem { dst_offset: 96, ..copy };
        let err = submitter.submit(d(0), &[WorkItem::Copy(outside)]).unwrap_err();
        assert!(matches!(err, WorkError::Copy { reason: "the range is outside a view", .. }), "{err}");

        let mut expected = source.clone();
        for i in 0..16u32 {
            expected[256 + 4 * i as usize..][..4].copy_from_slice(&(1000 + i).to_le_bytes());
        }
        expected.copy_within(16..80, 512 + 32);
        for device in [d(1), d(0)] {
            let items = [WorkItem::Dispatch(&fill), WorkItem::Barrier, WorkItem::Copy(copy)];
            let submission = submitter.submit(device, &items).unwrap();
            submitter.wait(device, submission).unwrap();
            let dev = set.device(device).unwrap();
            assert_eq!(
                dev.read_back(buffer.instance(device).unwrap(), 0, 1024).unwrap(),
                expected,
                "{device}"
            );
        }
        assert_eq!(fill.cached_devices(), 2);

        submitter.destroy();
        drop(fill);
        drop(program);
        pool.free_buffer(buffer).unwrap();
        uploader.destroy().unwrap();
    });
}

#[test]
fn timestamps_are_written_and_read_per_device() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("timed", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let buffer =
            pool.init_buffer(&BufferInit::new("timed", 4096).with_usage(BufferUsage::STORAGE), both).unwrap();
        let program = MultiComputeProgram::new(set, both, "fill.comp", &shaders::FILL, 1).unwrap();
        let push: Vec<u8> = [1024u32, 7].iter().flat_map(|w| w.to_le_bytes()).collect();
        let fill = DispatchItem::new(
            &program,
            vec![MultiBinding::Buffer(BufferView::whole(&buffer))],
            &push,
            [16, 1, 1],
        );
        let timestamps = MultiTimestamps::new(set, both, "multi timestamps", 2).unwrap();
        assert_eq!(timestamps.mask(), both);
        let submitter = MultiSubmitter::new(set, both).unwrap();

        // An index outside the pools is refused before anything is recorded.
        let err = submitter.submit(d(0), &[WorkItem::Timestamp(&timestamps, 2)]).unwrap_err();
        assert!(matches!(err, WorkError::Timestamp { index: 2, count: 2, .. }), "{err}");
        let only_0 = MultiTimestamps::new(set, d(0).mask(), "timestamps on 0", 1).unwrap();
        let err = submitter.submit(d(1), &[WorkItem::Timestamp(&only_0, 0)]).unwrap_err();
        assert!(matches!(err, WorkError::NotOnDevice { device, .. } if device == d(1)), "{err}");

        for device in [d(0), d(1)] {
            let items = [
                WorkItem::Timestamp(&timestamps, 0),
                WorkItem::Dispatch(&fill),
                WorkItem::Timestamp(&timestamps, 1),
            ];
            let submission = submitter.submit(device, &items).unwrap();
            submitter.wait(device, submission).unwrap();
        }
        assert!(timestamps.iter().all(|(_, t)| t.supported()), "lavapipe and the H200 have timestamps");
        for device in [d(0), d(1)] {
            let start = timestamps.at_ms(device, 0).expect("written and completed");
            let end = timestamps.at_ms(device, 1).expect("written and completed");
            assert!(end >= start, "{device}: the clock does not run backwards");
            assert!(timestamps.elapsed_ms(device, 0, 1).is_some(), "{device}");
        }
        assert_eq!(timestamps.at_ms(DeviceIndex::new(5).unwrap(), 0), None, "no such device");

        submitter.destroy();
        drop(fill);
        drop((program, timestamps, only_0));
        pool.free_buffer(buffer).unwrap();
    });
}

#[test]
fn a_textured_draw_item_binds_each_devices_view_and_push_constants() {
    use residency_vulkan::ash::vk;
    use residency_vulkan::compute::Binding;
    use residency_vulkan::graphics::VertexAttribute;
    use residency_vulkan::multi::work::PerDeviceImage;
    use residency_vulkan::multi::MultiImage;
    use residency_vulkan::{Filter, ImageDesc, ImageRegion};
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let image_usage =
            residency_core::usage::ImageUsage::SAMPLED | residency_core::usage::ImageUsage::COPY_DST;
        let texture = MultiImage::create(
            set,
            both,
            &ImageDesc::new_2d("multi texture", Format::R8G8B8A8Unorm, 16, 16, image_usage),
        )
        .unwrap();
        let texels: Vec<u8> = (0..16u32)
            .flat_map(|y| (0..16u32).flat_map(move |x| [x as u8 * 9, y as u8 * 13, 77, 255]))
            .collect();
        let uploader = MultiUploader::new(set, both, 1 << 20).unwrap();
        for (index, instance) in texture.iter() {
            set.device(index).unwrap().discard_to_general(&[instance]).unwrap();
            let up = uploader.instance(index).unwrap();
            up.write_image(&ImageRegion::new(instance, 0, [0; 3], [16, 16, 1]), &texels).unwrap();
            up.wait_idle().unwrap();
        }
        let samplers: Vec<_> =
            [d(0), d(1)].map(|i| set.device(i).unwrap().create_sampler(Filter::Nearest).unwrap()).into();
        let views: Vec<_> = [d(0), d(1)].map(|i| texture.view(set, i, 0..1).unwrap()).into();
        let general = vk::ImageLayout::GENERAL;
        let per_device = PerDeviceImage {
            views: vec![
                (d(0), Binding::sampled(&*views[0], &samplers[0], general)),
                (d(1), Binding::sampled(&*views[1], &samplers[1], general)),
            ],
        };
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("textured", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        // Two triangles over the unit square, position = uv (vt_quad.vert: vec3 position, vec2 uv).
        let square: Vec<u8> = [[0.0f32, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]
            .iter()
            .flat_map(|&[u, v]| [u, v, 0.0, u, v])
            .flat_map(f32::to_le_bytes)
            .collect();
        let vertices = pool
            .init_buffer(
                &BufferInit::new("textured vertices", square.len() as u64)
                    .with_usage(BufferUsage::VERTEX | BufferUsage::COPY_DST),
                both,
            )
            .unwrap();
        uploader.broadcast(&vertices, 0, &square).unwrap();
        uploader.wait_idle().unwrap();
        let program = MultiGraphicsProgram::new(
            set,
            both,
            "multi textured",
            &shaders::VT_QUAD_VERT,
            &shaders::VT_QUAD_REFERENCE_FRAG,
            20,
            &[
                VertexAttribute { location: 0, format: vk::Format::R32G32B32_SFLOAT, offset: 0 },
                VertexAttribute { location: 1, format: vk::Format::R32G32_SFLOAT, offset: 12 },
            ],
            vk::Format::R8G8B8A8_UNORM,
            2,
        )
        .unwrap();
        // A view-projection showing the unit square over the whole viewport.
        let ortho: Vec<u8> =
            [2.0f32, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, -1.0, -1.0, 0.0, 1.0]
                .iter()
                .flat_map(|f| f.to_le_bytes())
                .collect();
        let draw = DrawItem::new(
            &program,
            vec![MultiBinding::Image(per_device)],
            Some(BufferView::whole(&vertices)),
            6,
            1,
        )
        .with_push_constants(&ortho);
        let target_usage =
            residency_core::usage::ImageUsage::COLOR_ATTACHMENT | residency_core::usage::ImageUsage::COPY_SRC;
        let target = MultiImage::create(
            set,
            both,
            &ImageDesc::new_2d("multi textured target", Format::R8G8B8A8Unorm, 16, 16, target_usage),
        )
        .unwrap();
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let draws = [&draw];
        let pass = RenderItem {
            program: &program,
            target: &target,
            extent: [16, 16],
            clear: [0.0; 4],
            draws: &draws,
        };
        for device in [d(1), d(0)] {
            let submission = submitter.submit(device, &[WorkItem::Render(pass)]).unwrap();
            submitter.wait(device, submission).unwrap();
            let dev = set.device(device).unwrap();
            let pixels = read_target(dev, target.instance(device).unwrap(), general);
            // Pixel centres are texel centres at LOD 0: the texture, texel for texel.
            assert_eq!(pixels[..16 * 16 * 4], texels[..], "{device}");
        }
        assert_eq!(draw.cached_devices(), 2, "a descriptor set per device");

        submitter.destroy();
        drop(draw);
        drop((program, target, views, samplers, texture));
        pool.free_buffer(vertices).unwrap();
        uploader.destroy().unwrap();
    });
}
