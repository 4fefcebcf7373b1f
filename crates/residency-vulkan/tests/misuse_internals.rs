//! Public internals that bypassed the checks their constructors make (issue #29, cause 3): plain
//! data a caller can write (a `BarrierBatch`'s barriers, a description's fields) is checked where
//! it is consumed, and internal state (a sparse image's residency) is no longer handed out
//! mutably (`tests/misuse_compile/sparse_residency_mut.rs`). Each forged value is a typed error
//! that records, creates or binds nothing; the harness fails a test on any validation message or
//! leaked object.

use residency_core::desc::DescError;
use residency_core::format::Format;
use residency_core::streaming::{FeedbackDesc, FeedbackSampling};
use residency_core::sync::{
    AccessFlags, BarrierBatch, BufferBarrier, ImageAspects, ImageBarrier, ImageLayout, PipelineStages,
    QueueFamily, ResourceId, Scope, SubresourceRange, SyncError, TrackerOptions,
};
use residency_core::tiles::{
    BindPlanOptions, ImageId, ResidencyChanges, SparseImageDesc, TilePool, TilePoolDesc,
};
use residency_core::usage::{BufferPoolUsage, BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::sparse::{SparseError, SparseImage, SparseTilePool, TileHeaps};
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::tracking::{RecordError, ResourceTracker};
use residency_vulkan::{
    BufferDesc, BufferPool, BufferPoolDesc, Device, ImageDesc, LinearPool, LinearPoolDesc, MemoryError,
};
use std::sync::Arc;

const BUFFER_BYTES: u64 = 1024;
const MIPS: u32 = 3;

fn transfer() -> Scope {
    Scope::new(PipelineStages::ALL_TRANSFER, AccessFlags::TRANSFER_WRITE)
}

fn buffer_barrier(resource: ResourceId, offset: u64, size: u64) -> BufferBarrier {
    BufferBarrier {
        resource,
        offset,
        size,
        src: transfer(),
        dst: transfer(),
        src_queue_family: QueueFamily::IGNORED,
        dst_queue_family: QueueFamily::IGNORED,
    }
}

/// `UNDEFINED` → `GENERAL` over `range` of a colour image.
fn image_barrier(resource: ResourceId, range: SubresourceRange) -> ImageBarrier {
    ImageBarrier {
        resource,
        aspects: ImageAspects::from_raw(vk::ImageAspectFlags::COLOR.as_raw()),
        range,
        old_layout: ImageLayout::UNDEFINED,
        new_layout: ImageLayout::GENERAL,
        src: Scope::NONE,
        dst: transfer(),
        src_queue_family: QueueFamily::IGNORED,
        dst_queue_family: QueueFamily::IGNORED,
    }
}

fn buffers(barriers: Vec<BufferBarrier>) -> BarrierBatch {
    BarrierBatch { buffers: barriers, ..BarrierBatch::default() }
}

fn images(barriers: Vec<ImageBarrier>) -> BarrierBatch {
    BarrierBatch { images: barriers, ..BarrierBatch::default() }
}

/// Records `batch` through `tracker` on `device`, checking that a refusal recorded nothing.
fn record(device: &Device, tracker: &ResourceTracker, batch: &BarrierBatch) -> Result<usize, RecordError> {
    let mut result = None;
    device
        .submit_once("misuse internals record", |rec| {
            let r = tracker.record(rec, batch);
            if r.is_err() {
                assert_eq!(rec.helper_commands(), 0, "a refused batch records nothing");
            }
            result = Some(r);
        })
        .unwrap();
    result.unwrap()
}

fn image(device: &Device, usage: ImageUsage) -> residency_vulkan::Image {
    device
        .create_image(
            &ImageDesc::new_2d("misuse internals image", Format::R8G8B8A8Unorm, 64, 64, usage)
                .with_mip_levels(MIPS),
        )
        .unwrap()
}

#[test]
fn misuse_barrier_batch_buffer_range_outside_the_buffer_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let buffer = device
            .create_buffer(&BufferDesc::new("misuse range", BUFFER_BYTES, BufferUsage::STORAGE))
            .unwrap();
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let id = tracker.track_buffer(&buffer).unwrap();
        for (offset, size) in
            [(0, BUFFER_BYTES + 1), (BUFFER_BYTES, vk::WHOLE_SIZE), (u64::MAX - 1, 4), (16, 0)]
        {
            match record(device, &tracker, &buffers(vec![buffer_barrier(id, offset, size)])) {
                Err(RecordError::Sync(SyncError::BytesOutOfBounds {
                    resource,
                    offset: o,
                    size: s,
                    buffer_size,
                    ..
                })) => {
                    assert_eq!((resource, o, s, buffer_size), (id, offset, size, BUFFER_BYTES));
                }
                other => panic!("{offset}+{size}: expected BytesOutOfBounds, got {other:?}"),
            }
        }
        // The whole buffer, either way, is fine.
        for (offset, size) in [(0, BUFFER_BYTES), (16, vk::WHOLE_SIZE)] {
            assert_eq!(
                record(device, &tracker, &buffers(vec![buffer_barrier(id, offset, size)])).unwrap(),
                1
            );
        }
        tracker.untrack(device.index(), id).unwrap();
    });
}

#[test]
fn misuse_barrier_batch_queue_family_transfer_from_ignored_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let buffer = device
            .create_buffer(&BufferDesc::new("misuse family", BUFFER_BYTES, BufferUsage::STORAGE))
            .unwrap();
        let img = image(device, ImageUsage::SAMPLED | ImageUsage::COPY_DST);
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let (b, i) = (
            tracker.track_buffer(&buffer).unwrap(),
            tracker.track_image(&img, vk::ImageLayout::UNDEFINED).unwrap(),
        );
        let family = device.universal_queue().family();
        for (src, dst) in [
            (QueueFamily::IGNORED, QueueFamily::new(family)),
            (QueueFamily::new(family), QueueFamily::IGNORED),
        ] {
            let buffer_batch = buffers(vec![BufferBarrier {
                src_queue_family: src,
                dst_queue_family: dst,
                ..buffer_barrier(b, 0, BUFFER_BYTES)
            }]);
            let image_batch = images(vec![ImageBarrier {
                src_queue_family: src,
                dst_queue_family: dst,
                ..image_barrier(i, SubresourceRange::all(MIPS, 1))
            }]);
            for (batch, resource) in [(buffer_batch, b), (image_batch, i)] {
                match record(device, &tracker, &batch) {
                    Err(RecordError::Ownership { resource: r, src: s, dst: d, .. }) => {
                        assert_eq!((r, s, d), (resource, src.index(), dst.index()));
                    }
                    other => panic!("{src:?} -> {dst:?}: expected Ownership, got {other:?}"),
                }
            }
        }
        assert_eq!(img.layout(0, 0), Some(vk::ImageLayout::UNDEFINED), "no transition reached the GPU");
        tracker.untrack(device.index(), b).unwrap();
        tracker.untrack(device.index(), i).unwrap();
    });
}

#[test]
fn misuse_barrier_batch_image_layouts_aspects_and_subresources_are_checked() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // Sampled and copied, never an attachment.
        let img = image(device, ImageUsage::SAMPLED | ImageUsage::COPY_DST);
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let id = tracker.track_image(&img, vk::ImageLayout::UNDEFINED).unwrap();
        let all = SubresourceRange::all(MIPS, 1);
        let layout = |old: ImageLayout, new: ImageLayout| ImageBarrier {
            old_layout: old,
            new_layout: new,
            ..image_barrier(id, all)
        };
        let layouts = [
            (layout(ImageLayout::UNDEFINED, ImageLayout::UNDEFINED), vk::ImageLayout::UNDEFINED),
            (layout(ImageLayout::UNDEFINED, ImageLayout::PREINITIALIZED), vk::ImageLayout::PREINITIALIZED),
            (layout(ImageLayout::UNDEFINED, ImageLayout::from_raw(12345)), vk::ImageLayout::from_raw(12345)),
            (
                layout(ImageLayout::UNDEFINED, ImageLayout::COLOR_ATTACHMENT_OPTIMAL),
                vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
            ),
            (
                layout(ImageLayout::TRANSFER_SRC_OPTIMAL, ImageLayout::GENERAL),
                vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
            ),
        ];
        for (barrier, bad) in layouts {
            match record(device, &tracker, &images(vec![barrier])) {
                Err(RecordError::Layout { resource, layout, .. }) => {
                    assert_eq!((resource, layout), (id, bad))
                }
                other => panic!("{barrier:?}: expected Layout, got {other:?}"),
            }
        }
        let depth = ImageBarrier {
            aspects: ImageAspects::from_raw(vk::ImageAspectFlags::DEPTH.as_raw()),
            ..image_barrier(id, all)
        };
        assert!(matches!(
            record(device, &tracker, &images(vec![depth])),
            Err(RecordError::Aspects {
                given: vk::ImageAspectFlags::DEPTH,
                image: vk::ImageAspectFlags::COLOR,
                ..
            })
        ));
        let range = |base_mip, mip_count, base_layer, layer_count| SubresourceRange {
            base_mip,
            mip_count,
            base_layer,
            layer_count,
        };
        for r in [
            range(0, MIPS + 1, 0, 1),
            range(0, 0, 0, 1),
            range(MIPS, vk::REMAINING_MIP_LEVELS, 0, 1),
            range(1, u32::MAX - 1, 0, 1),
            range(0, 1, 1, vk::REMAINING_ARRAY_LAYERS),
            range(0, 1, u32::MAX, 2),
        ] {
            match record(device, &tracker, &images(vec![image_barrier(id, r)])) {
                Err(RecordError::Sync(SyncError::SubresourcesOutOfBounds {
                    resource,
                    mip_levels,
                    array_layers,
                    ..
                })) => {
                    assert_eq!((resource, mip_levels, array_layers), (id, MIPS, 1));
                }
                other => panic!("{r:?}: expected SubresourcesOutOfBounds, got {other:?}"),
            }
        }
        for mip in 0..MIPS {
            assert_eq!(img.layout(mip, 0), Some(vk::ImageLayout::UNDEFINED), "nothing reached the GPU");
        }
        tracker.untrack(device.index(), id).unwrap();
    });
}

/// `VK_REMAINING_MIP_LEVELS` from mip 1 covers mips 1 and 2 and no more: the layout record follows
/// what the GPU transitions (the old code added `1 + u32::MAX`, which panics in a debug build and
/// wraps to a range of nothing in a release build, leaving the record behind the GPU).
#[test]
fn misuse_barrier_batch_remaining_mip_levels_resolve_against_the_image() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let img = image(device, ImageUsage::SAMPLED | ImageUsage::COPY_DST);
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let id = tracker.track_image(&img, vk::ImageLayout::UNDEFINED).unwrap();
        let rest = SubresourceRange {
            base_mip: 1,
            mip_count: vk::REMAINING_MIP_LEVELS,
            base_layer: 0,
            layer_count: vk::REMAINING_ARRAY_LAYERS,
        };
        assert_eq!(record(device, &tracker, &images(vec![image_barrier(id, rest)])).unwrap(), 1);
        assert_eq!(img.layout(0, 0), Some(vk::ImageLayout::UNDEFINED), "mip 0 is not covered");
        for mip in 1..MIPS {
            assert_eq!(img.layout(mip, 0), Some(vk::ImageLayout::GENERAL), "mip {mip} was transitioned");
        }
        tracker.untrack(device.index(), id).unwrap();
    });
}

fn too_small(result: Result<impl std::fmt::Debug, DescError>, field: &str, value: u64) {
    match result {
        Err(DescError::TooSmall { field: f, value: v, .. }) => assert_eq!((f, v), (field, value)),
        other => panic!("{field} = {value}: expected TooSmall, got {other:?}"),
    }
}

fn too_large(result: Result<impl std::fmt::Debug, DescError>, field: &str, value: u64) {
    match result {
        Err(DescError::TooLarge { field: f, value: v, .. }) => assert_eq!((f, v), (field, value)),
        other => panic!("{field} = {value}: expected TooLarge, got {other:?}"),
    }
}

fn desc_error<T: std::fmt::Debug>(result: Result<T, StreamError>) -> Result<T, DescError> {
    result.map_err(|e| match e {
        StreamError::Desc(e) => e,
        other => panic!("expected a description error, got {other:?}"),
    })
}

/// A sampling with a zero frame interval panicked in `begin_frame` (a division by zero); a
/// stride whose square wraps did too. Each field is refused by `Streamer::new`, which creates
/// nothing (no thread, no buffer: the harness's leak check).
#[test]
fn misuse_streamer_desc_fields_are_validated_by_streamer_new() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let sampling = |pixel_stride, frame_interval, block| StreamerDesc {
            sampling: FeedbackSampling { pixel_stride, frame_interval, block },
            ..StreamerDesc::default()
        };
        too_small(desc_error(Streamer::new(device, sampling(1, 0, 1))), "frame_interval", 0);
        too_small(desc_error(Streamer::new(device, sampling(0, 1, 1))), "pixel_stride", 0);
        too_small(desc_error(Streamer::new(device, sampling(1, 1, 0))), "block", 0);
        too_large(desc_error(Streamer::new(device, sampling(65536, 1, 1))), "pixel_stride", 65536);
        let records = FeedbackDesc::MAX_RECORD_CAPACITY + 1;
        let feedback = StreamerDesc {
            feedback: FeedbackDesc { record_capacity: records, count_pixels: true },
            ..StreamerDesc::default()
        };
        too_large(desc_error(Streamer::new(device, feedback)), "record_capacity", records.into());
        let workers = StreamerDesc { workers: usize::MAX, ..StreamerDesc::default() };
        too_large(desc_error(Streamer::new(device, workers)), "workers", u64::MAX);
        let heap = StreamerDesc { tiles_per_heap: u32::MAX, ..StreamerDesc::default() };
        too_large(
            desc_error(Streamer::new(device, heap)),
            "tiles_per_heap × 64 KiB",
            u64::from(u32::MAX) << 16,
        );
        // The defaults, and the sampling the setters make, pass.
        let limits = &device.profile().limits;
        StreamerDesc::default().validate(limits).unwrap();
        StreamerDesc::default()
            .with_sampling(FeedbackSampling::new(0, 0).with_block(0))
            .validate(limits)
            .unwrap();
    });
}

fn memory_desc_error<T: std::fmt::Debug>(result: Result<T, MemoryError>) -> Result<T, DescError> {
    result.map_err(|e| match e {
        MemoryError::Desc(e) => e,
        other => panic!("expected a description error, got {other:?}"),
    })
}

/// A page size near `u64::MAX` wrapped when rounded up to 64 KiB; `arenas: u32::MAX` made four
/// billion arenas; a linear pool of `u64::MAX` bytes wrapped to an allocation of 0.
#[test]
fn misuse_pool_desc_fields_are_validated_by_the_pools() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = |page_size, arenas| BufferPoolDesc {
            page_size,
            arenas,
            ..BufferPoolDesc::new("misuse pool", BufferPoolUsage::Unknown)
        };
        too_large(
            memory_desc_error(BufferPool::new(Arc::clone(device), pool(u64::MAX, 1))),
            "page_size",
            u64::MAX,
        );
        too_large(
            memory_desc_error(BufferPool::new(Arc::clone(device), pool(64 << 20, u32::MAX))),
            "arenas",
            u32::MAX.into(),
        );
        let linear = LinearPoolDesc::new("misuse linear", u64::MAX);
        too_large(memory_desc_error(LinearPool::new(Arc::clone(device), linear)), "size", u64::MAX);
        let max = device.profile().limits.max_memory_allocation_size;
        let over = LinearPoolDesc::new("misuse linear", max + 1);
        too_large(memory_desc_error(LinearPool::new(Arc::clone(device), over)), "size", max + 1);
    });
}

fn sparse_desc_error<T: std::fmt::Debug>(result: Result<T, SparseError>) -> Result<T, DescError> {
    result.map_err(|e| match e {
        SparseError::Desc(e) => e,
        other => panic!("expected a description error, got {other:?}"),
    })
}

/// A tile pool whose heaps cannot be allocations (zero-byte tiles, `tiles_per_heap × tile_bytes`
/// past `maxMemoryAllocationSize` or wrapping) is refused by `SparseTilePool::new` and by
/// `TileHeaps`; heaps bind an external image only through a pool of the image's tile size (a
/// pool of 4 KiB tiles placed 64 KiB tiles 4 KiB apart, overlapping and past the heap).
#[test]
fn misuse_tile_pool_desc_fields_are_validated_where_consumed() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let tiles = |tile_bytes, tiles_per_heap| TilePoolDesc {
            tile_bytes,
            tiles_per_heap,
            ..TilePoolDesc::default()
        };
        too_small(sparse_desc_error(SparseTilePool::new(Arc::clone(device), tiles(0, 8))), "tile_bytes", 0);
        too_large(
            sparse_desc_error(SparseTilePool::new(Arc::clone(device), tiles(u64::MAX, 2))),
            "tiles_per_heap × tile_bytes",
            u64::MAX,
        );
        let mut heaps = TileHeaps::new(Arc::clone(device), "misuse heaps").unwrap();
        let huge = TilePool::new(tiles(u64::MAX / 2, 4));
        too_large(sparse_desc_error(heaps.ensure(&huge, &[])), "tiles_per_heap × tile_bytes", u64::MAX);
        let owner = ImageId(1);
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 512, 512);
        let image = SparseImage::new_external(&heaps, 65536, owner, "misuse external", &desc, false).unwrap();
        let small = TilePool::new(tiles(4096, 8));
        let objects = device.ledger().live_objects().len();
        assert!(matches!(
            heaps.bind(&small, &[(&image, &ResidencyChanges::default())], BindPlanOptions::default()),
            Err(SparseError::Incompatible { .. })
        ));
        assert_eq!(device.ledger().live_objects().len(), objects, "no heap allocated");
    });
}
