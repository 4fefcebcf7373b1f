//! Misuse of the sparse and software residency objects' lifetimes, and of image uploads: each
//! scenario is a typed error that changes nothing, or a documented safe outcome (an image keeps its
//! pool's memory alive; destruction, the return of tiles and the freeing of heaps wait for the GPU
//! work that samples them). Every test runs under synchronization validation and the harness's
//! leak check: freeing a heap the GPU still reads (`VUID-vkFreeMemory-memory-00677`), destroying an
//! image it still samples, or a copy past its staging slot would be reported and fail the test.

mod common;

use common::{region_texels, DEFAULT, HARDWARE_FALLBACK};
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::tiles::{
    ImageId, SparseImageDesc, SparseResidency, TexelRegion, TileIndex, TilePool, TilePoolDesc,
};
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram, ViewRef};
use residency_vulkan::sparse::software::{SoftwareImage, SoftwareTilePool, DEFAULT_BORDER};
use residency_vulkan::sparse::{MinLodMap, SparseImage, SparseTilePool, TileHeaps};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    BufferDesc, CommandContext, Device, Filter, Image, ImageDesc, ImageRegion, Submission, Timeline,
    UploadError, Uploader,
};
use std::sync::Arc;

const SIZE: u32 = 512;

fn live(device: &Device, name: &str) -> bool {
    device.ledger().live_objects().iter().any(|o| &*o.name == name)
}

fn count(device: &Device, name: &str) -> usize {
    device.ledger().live_objects().iter().filter(|o| &*o.name == name).count()
}

fn desc() -> SparseImageDesc {
    SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIZE, SIZE)
}

fn pool_desc(name: &str) -> TilePoolDesc {
    TilePoolDesc::default().with_name(name).with_tiles_per_heap(8)
}

/// Mip-0 tile `(x, y)` of a 128 × 128-tiled RGBA8 image.
fn tile(image: &SparseImage, x: u32, y: u32) -> TexelRegion {
    let shape = image.layout().tile_shape();
    TexelRegion { offset: [x * shape.width, y * shape.height, 0], extent: [shape.width, shape.height, 1] }
}

fn texels(region: TexelRegion) -> Vec<u8> {
    region_texels(0, [region.offset[0], region.offset[1]], [region.extent[0], region.extent[1]])
}

/// Uploads the test pattern into `region` of mip 0 and waits for it.
fn upload(uploader: &Uploader, image: &SparseImage, region: TexelRegion) {
    let target = ImageRegion::new(image, 0, region.offset, region.extent);
    uploader.write_image(&target, &texels(region)).unwrap();
    uploader.wait_idle().unwrap();
}

/// A timeline the test signals from the host, signalled on drop if it was not (a failing assertion
/// must not leave the GPU waiting forever).
struct Gate<'d> {
    device: &'d Device,
    timeline: Timeline,
    open: bool,
}

impl<'d> Gate<'d> {
    fn new(device: &'d Device, name: &str) -> Self {
        let timeline = device.create_timeline(name).unwrap();
        // SAFETY: the gate opens with a host signal (at the latest when it drops), which waits
        // for nothing that waits for it.
        unsafe { timeline.signal_submitted(1) };
        Gate { device, timeline, open: false }
    }

    /// Host-signals the timeline to 1: the gated work runs.
    fn open(&mut self) {
        if !self.open {
            self.open = true;
            let info = vk::SemaphoreSignalInfo::default().semaphore(self.timeline.raw()).value(1);
            // SAFETY: a timeline semaphore of this device, signalled once, from 0 to 1.
            unsafe { self.device.raw().signal_semaphore(&info) }.unwrap();
        }
    }
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        self.open();
    }
}

/// Submits a dispatch of the hardware path's fallback sampling over `views` (texture, min-LOD map)
/// that cannot start before `gate` opens: the GPU holds both for as long as the test wants. The
/// program is destroyed by the caller once the work is done (it is not released on drop yet).
fn gated_sample(
    context: &CommandContext,
    gate: &Gate<'_>,
    views: (ViewRef<'_>, ViewRef<'_>),
) -> (Submission, ComputeProgram) {
    let device = context.device();
    let program = ComputeProgram::new(device, "gated sample", HARDWARE_FALLBACK, 1).unwrap();
    let (linear, nearest) =
        (device.create_sampler(Filter::Trilinear).unwrap(), device.create_sampler(Filter::Nearest).unwrap());
    let mut input = device
        .create_buffer(
            &BufferDesc::new("gated probes", 64 * 16, BufferUsage::STORAGE).with_intent(MemoryIntent::Upload),
        )
        .unwrap();
    let output = device
        .create_buffer(
            &BufferDesc::new("gated results", 64 * 32, BufferUsage::STORAGE)
                .with_intent(MemoryIntent::Readback),
        )
        .unwrap();
    let probes: Vec<u8> =
        (0..64).flat_map(|i| [(i as f32 + 0.5) / 64.0, 0.1, 0.0, 0.0]).flat_map(f32::to_le_bytes).collect();
    input.write(0, &probes).unwrap();
    let general = vk::ImageLayout::GENERAL;
    let set = program
        .descriptor_set(&[
            Binding::sampled(views.0, &linear, general),
            Binding::sampled(views.1, &nearest, general),
            Binding::Buffer(&input),
            Binding::Buffer(&output),
        ])
        .unwrap();
    let mut push: Vec<u8> = DEFAULT.iter().flat_map(|f| f.to_le_bytes()).collect();
    push.extend_from_slice(&64u32.to_le_bytes());
    push.resize(32, 0);
    program.check_dispatch(&push, [1, 1, 1]).unwrap();
    let submission = context
        .submit(&[gate.timeline.at(1)], |rec| {
            program.dispatch(rec, &set, &push, [1, 1, 1]).expect("checked before the submission");
        })
        .unwrap();
    // The samplers and buffers retire after the dispatch like anything dropped after a residency
    // submission.
    drop((linear, nearest, input, output));
    (submission, program)
}

/// A pool's image with tile (0, 0) and every coarser mip resident and written, and its min-LOD map
/// uploaded: what a frame samples.
fn sampled_scene(
    device: &Arc<Device>,
    uploader: &Uploader,
    name: &str,
) -> (SparseTilePool, SparseImage, MinLodMap) {
    let pool = SparseTilePool::new(Arc::clone(device), pool_desc(&format!("{name} tiles"))).unwrap();
    let mut image = SparseImage::new(&pool, name, &desc(), false).unwrap();
    let first = tile(&image, 0, 0);
    image.commit_region(&pool, 0, 0, first).unwrap();
    pool.flush_binds(&mut [&mut image]).unwrap();
    upload(uploader, &image, first);
    let mut map = MinLodMap::new(&image).unwrap();
    map.update(uploader, &mut image).unwrap();
    uploader.wait_idle().unwrap();
    (pool, image, map)
}

#[test]
fn misuse_dropping_a_tile_pool_while_an_image_holds_tiles_keeps_the_memory_until_the_image_goes() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let uploader = Uploader::new(&device, "lifetimes uploads", 1 << 20).unwrap();
        let pool = SparseTilePool::new(Arc::clone(&device), pool_desc("orphaned tiles")).unwrap();
        let mut image = SparseImage::new(&pool, "outlives its pool", &desc(), false).unwrap();
        let region = tile(&image, 1, 1);
        image.commit_region(&pool, 0, 0, region).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();
        upload(&uploader, &image, region);
        drop(pool);
        assert!(live(&device, "orphaned tiles heap 0"), "the heap bound to the live image stays");
        assert!(live(&device, "orphaned tiles"), "the pool's state lives with its image");
        assert_eq!(image.read_region(0, 0, region, 1 << 20).unwrap(), texels(region), "bound and intact");
        drop(image);
        device.wait_submitted().unwrap();
        for name in ["orphaned tiles heap 0", "orphaned tiles", "outlives its pool"] {
            assert!(!live(&device, name), "{name} went with the last image");
        }

        // The same with tile heaps a streaming manager's pool fills.
        let mut heaps = TileHeaps::new(Arc::clone(&device), "orphaned heaps").unwrap();
        let image =
            SparseImage::new_external(&heaps, 65536, ImageId(7), "outlives its heaps", &desc(), false)
                .unwrap();
        let mut served = TilePool::new(pool_desc("served tiles"));
        let mut residency = SparseResidency::new(served.id(), ImageId(7), image.layout());
        let bound = residency.commit(&mut served, &[TileIndex(0)]).unwrap();
        heaps.bind(&served, &[(&image, &bound)], Default::default()).unwrap();
        let region = tile(&image, 0, 0);
        upload(&uploader, &image, region);
        // The pool releases the heap while the GPU still has the tile bound (its unbind not bound
        // yet): the memory stays, even with no GPU work pending, and the pool may make a new heap
        // of the same index meanwhile.
        let unbound = residency.release_all(&mut served).unwrap();
        heaps.release(&served.trim());
        device.wait_submitted().unwrap();
        assert_eq!(count(&device, "served tiles heap 0"), 1, "bound to a live image: not freed");
        let again = residency.commit(&mut served, &[TileIndex(1)]).unwrap();
        heaps.bind(&served, &[(&image, &unbound), (&image, &again)], Default::default()).unwrap();
        device.wait_submitted().unwrap();
        assert_eq!(
            count(&device, "served tiles heap 0"),
            1,
            "the old heap freed once unbound, the new one made"
        );
        let region = tile(&image, 1, 0);
        upload(&uploader, &image, region);
        drop(heaps);
        assert!(live(&device, "served tiles heap 0"), "the heaps' memory lives with their image");
        assert_eq!(image.read_region(0, 0, region, 1 << 20).unwrap(), texels(region));
        drop(image);
        device.wait_submitted().unwrap();
        assert!(!live(&device, "served tiles heap 0"), "freed after the last image");

        // And on the software path: the atlas lives while an image holds slots.
        let pool = SoftwareTilePool::new(
            Arc::clone(&device),
            Format::R8G8B8A8Unorm,
            DEFAULT_BORDER,
            pool_desc("orphaned slots").with_budget_tiles(16),
        )
        .unwrap();
        let mut image = SoftwareImage::new(&pool, "outlives its atlas", &desc()).unwrap();
        let region = TexelRegion { offset: [0; 3], extent: [128, 128, 1] };
        image.commit_region(&pool, 0, 0, region).unwrap();
        image.write_region(&pool, &uploader, 0, 0, region, &texels(region)).unwrap();
        pool.flush(&uploader, &mut [&mut image]).unwrap();
        drop(pool);
        assert!(live(&device, "orphaned slots atlas"), "the atlas lives with its image");
        drop(image);
        device.wait_submitted().unwrap();
        assert!(!live(&device, "orphaned slots atlas") && !live(&device, "outlives its atlas indirection"));
        uploader.destroy().unwrap();
    });
}

#[test]
fn misuse_dropping_a_sparse_image_the_gpu_still_samples_defers_it_and_the_return_of_its_tiles() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let uploader = Uploader::new(&device, "lifetimes uploads", 1 << 20).unwrap();
        let (pool, image, map) = sampled_scene(&device, &uploader, "sampled image");
        let used = pool.used_tiles();
        assert!(used > 0);
        let context = CommandContext::new(&device, "gated sampling").unwrap();
        let mut gate = Gate::new(&device, "image gate");
        let (submission, program) = gated_sample(&context, &gate, ((&image).into(), map.view().into()));
        drop(image);
        assert!(live(&device, "sampled image"), "still sampled: not destroyed");
        assert_eq!(pool.used_tiles(), used, "its tiles stay taken until the GPU is done with it");
        assert_eq!(device.maintain(), 0, "the dispatch has not run");
        gate.open();
        context.wait(submission).unwrap();
        device.maintain();
        assert!(!live(&device, "sampled image"), "destroyed once the dispatch completed");
        assert_eq!(pool.used_tiles(), 0, "its tiles are back in the pool");
        drop(program);
        drop((map, pool));
        uploader.destroy().unwrap();
    });
}

#[test]
fn misuse_dropping_a_min_lod_map_the_gpu_still_samples_defers_its_destruction() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let uploader = Uploader::new(&device, "lifetimes uploads", 1 << 20).unwrap();
        let (pool, image, map) = sampled_scene(&device, &uploader, "mapped image");
        let context = CommandContext::new(&device, "gated sampling").unwrap();
        let mut gate = Gate::new(&device, "map gate");
        let (submission, program) = gated_sample(&context, &gate, ((&image).into(), map.view().into()));
        drop(map);
        for name in ["mapped image min-LOD map", "mapped image min-LOD map view"] {
            assert!(live(&device, name), "{name} is still sampled: not destroyed");
        }
        gate.open();
        context.wait(submission).unwrap();
        device.maintain();
        for name in ["mapped image min-LOD map", "mapped image min-LOD map view"] {
            assert!(!live(&device, name), "{name} destroyed once the dispatch completed");
        }
        drop(program);
        drop((image, pool));
        uploader.destroy().unwrap();
    });
}

/// A renderer that returns early with `?` drops its pool (or heaps), image and map while its
/// frames are in flight: the heap memory is freed only after them.
#[test]
fn misuse_dropping_tile_heaps_or_a_pool_with_their_image_while_the_gpu_samples_them_keeps_the_memory() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let uploader = Uploader::new(&device, "lifetimes uploads", 1 << 20).unwrap();
        let context = CommandContext::new(&device, "gated sampling").unwrap();

        // A pool, its image and its map, all dropped at once.
        let (pool, image, map) = sampled_scene(&device, &uploader, "early return");
        let mut gate = Gate::new(&device, "pool gate");
        let (submission, program) = gated_sample(&context, &gate, ((&image).into(), map.view().into()));
        drop((pool, image, map));
        for name in ["early return tiles heap 0", "early return", "early return min-LOD map"] {
            assert!(live(&device, name), "{name} waits for the GPU");
        }
        gate.open();
        context.wait(submission).unwrap();
        device.maintain();
        for name in ["early return tiles heap 0", "early return", "early return min-LOD map"] {
            assert!(!live(&device, name), "{name} freed after the GPU");
        }
        drop(program);

        // Tile heaps and their external image.
        let mut heaps = TileHeaps::new(Arc::clone(&device), "early heaps").unwrap();
        let image =
            SparseImage::new_external(&heaps, 65536, ImageId(3), "early external", &desc(), false).unwrap();
        let mut served = TilePool::new(pool_desc("early served"));
        let mut residency = SparseResidency::new(served.id(), ImageId(3), image.layout());
        let mut changes = residency.commit(&mut served, &[TileIndex(0)]).unwrap();
        for mip in 1..image.layout().mip_levels() {
            let e = image.layout().mip(mip).unwrap().extent;
            let whole = TexelRegion { offset: [0; 3], extent: [e[0], e[1], 1] };
            changes.extend(residency.commit_region(&mut served, 0, mip, whole).unwrap());
        }
        heaps.bind(&served, &[(&image, &changes)], Default::default()).unwrap();
        upload(&uploader, &image, tile(&image, 0, 0));
        let mut map = MinLodMap::new(&image).unwrap();
        let updates = residency.refresh_min_lod();
        map.upload_updates(&uploader, residency.page_table(), &updates).unwrap();
        uploader.wait_idle().unwrap();
        let mut gate = Gate::new(&device, "heaps gate");
        let (submission, program) = gated_sample(&context, &gate, ((&image).into(), map.view().into()));
        // The pool releases its heaps (here: everything) while the frame is in flight.
        residency.release_all(&mut served).unwrap();
        heaps.release(&served.trim());
        assert!(live(&device, "early served heap 0"), "still bound to the live image: not freed");
        drop((heaps, image, map));
        for name in ["early served heap 0", "early external"] {
            assert!(live(&device, name), "{name} waits for the GPU");
        }
        gate.open();
        context.wait(submission).unwrap();
        device.maintain();
        for name in ["early served heap 0", "early external"] {
            assert!(!live(&device, name), "{name} freed after the GPU");
        }
        drop(program);
        uploader.destroy().unwrap();
    });
}

fn plain_image(device: &Device, name: &str, format: Format, side: u32, mips: u32) -> Image {
    let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST | ImageUsage::COPY_SRC;
    let image = device
        .create_image(&ImageDesc::new_2d(name, format, side, side, usage).with_mip_levels(mips))
        .unwrap();
    device.discard_to_general(&[&image]).unwrap();
    image
}

fn wrong_size(result: Result<(), UploadError>) -> (u64, u64) {
    match result {
        Err(UploadError::WrongSize { expected, got, .. }) => (expected, got),
        other => panic!("expected WrongSize, got {other:?}"),
    }
}

#[test]
fn misuse_uploads_of_the_wrong_byte_count_are_typed_errors_that_stage_nothing() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let uploader = Uploader::new(&device, "size checks", 1 << 20).unwrap();
        // A plain image: 64 × 64 RGBA8, written once, then refused writes of other texels.
        let image = plain_image(&device, "sized image", Format::R8G8B8A8Unorm, 64, 1);
        let whole = ImageRegion::new(&image, 0, [0; 3], [64, 64, 1]);
        assert_eq!(whole.bytes(), 64 * 64 * 4);
        let first = vec![0x5a; 64 * 64 * 4];
        uploader.write_image(&whole, &first).unwrap();
        uploader.wait_idle().unwrap();
        let other = vec![0xc3; 64 * 64 * 4 + 1];
        assert_eq!(wrong_size(uploader.write_image(&whole, &other[..64 * 64 * 4 - 1])), (16384, 16383));
        assert_eq!(wrong_size(uploader.write_image(&whole, &other)), (16384, 16385));
        assert_eq!(wrong_size(uploader.write_image(&whole, &[])), (16384, 0));
        uploader.wait_idle().unwrap();
        let back = device.read_image(&image, vk::ImageLayout::GENERAL).unwrap();
        assert!(back == first, "the refused writes changed nothing");

        // A sparse tile: 128 × 128 RGBA8.
        let pool = SparseTilePool::new(Arc::clone(&device), pool_desc("sized tiles")).unwrap();
        let mut sparse = SparseImage::new(&pool, "sized sparse", &desc(), false).unwrap();
        let region = tile(&sparse, 1, 0);
        sparse.commit_region(&pool, 0, 0, region).unwrap();
        pool.flush_binds(&mut [&mut sparse]).unwrap();
        upload(&uploader, &sparse, region);
        let target = ImageRegion::new(&sparse, 0, region.offset, region.extent);
        let other = vec![0xc3; 65536 + 4];
        assert_eq!(wrong_size(uploader.write_image(&target, &other[..65536 - 4])), (65536, 65532));
        assert_eq!(wrong_size(uploader.write_image(&target, &other)), (65536, 65540));
        uploader.wait_idle().unwrap();
        assert_eq!(sparse.read_region(0, 0, region, 1 << 20).unwrap(), texels(region), "unchanged");
        uploader.destroy().unwrap();
    });
}

fn outside(result: Result<(), UploadError>) -> [u32; 3] {
    match result {
        Err(UploadError::RegionOutsideImage { mip_extent, .. }) => mip_extent,
        other => panic!("expected RegionOutsideImage, got {other:?}"),
    }
}

#[test]
fn misuse_upload_regions_outside_the_mip_or_off_the_block_grid_are_typed_errors() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let uploader = Uploader::new(&device, "region checks", 1 << 20).unwrap();
        let image = plain_image(&device, "two mips", Format::R8G8B8A8Unorm, 64, 2);
        let data = vec![0u8; 32 * 32 * 4];
        // Mip 1 is 32 × 32: a 32² box at x = 16 runs 16 texels past its edge.
        let past = ImageRegion::new(&image, 1, [16, 0, 0], [32, 32, 1]);
        assert_eq!(outside(uploader.write_image(&past, &data)), [32, 32, 1]);
        // No mip 2, no layer 1; an offset that would overflow.
        assert_eq!(
            outside(uploader.write_image(&ImageRegion::new(&image, 2, [0; 3], [1, 1, 1]), &[0; 4])),
            [0; 3]
        );
        let layer = ImageRegion::new(&image, 0, [0; 3], [1, 1, 1]).with_layer(1);
        assert_eq!(outside(uploader.write_image(&layer, &[0; 4])), [64, 64, 1]);
        let overflow = ImageRegion::new(&image, 0, [u32::MAX, 0, 0], [2, 1, 1]);
        assert_eq!(outside(uploader.write_image(&overflow, &[0; 8])), [64, 64, 1]);
        // Inside: accepted.
        uploader.write_image(&ImageRegion::new(&image, 1, [0; 3], [32, 32, 1]), &data).unwrap();

        // A sparse image: past its 512² mip 0.
        let pool = SparseTilePool::new(Arc::clone(&device), pool_desc("region tiles")).unwrap();
        let sparse = SparseImage::new(&pool, "region sparse", &desc(), false).unwrap();
        let past = ImageRegion::new(&sparse, 0, [448, 0, 0], [128, 128, 1]);
        assert_eq!(outside(uploader.write_image(&past, &vec![0; 65536])), [512, 512, 1]);

        // Block-compressed: BC1 boxes start on 4 × 4 blocks.
        let bc1 = plain_image(&device, "bc1 image", Format::Bc1Unorm, 64, 1);
        let misaligned = ImageRegion::new(&bc1, 0, [2, 0, 0], [4, 4, 1]);
        assert!(
            matches!(
                uploader.write_image(&misaligned, &[0; 8]),
                Err(UploadError::RegionMisaligned { block: [4, 4], .. })
            ),
            "a box off the block grid is refused"
        );
        uploader.write_image(&ImageRegion::new(&bc1, 0, [4, 0, 0], [4, 4, 1]), &[0; 8]).unwrap();
        uploader.wait_idle().unwrap();
        uploader.destroy().unwrap();
    });
}

#[test]
fn misuse_uploading_to_an_image_of_another_device_is_a_typed_error() {
    with_gpu(|set| {
        let (d0, d1) = (&set.devices()[0], &set.devices()[1]);
        let uploader = Uploader::new(d0, "device 0 uploads", 1 << 20).unwrap();
        let image = plain_image(d1, "image on 1", Format::R8G8B8A8Unorm, 16, 1);
        let region = ImageRegion::new(&image, 0, [0; 3], [16, 16, 1]);
        match uploader.write_image(&region, &[0; 16 * 16 * 4]) {
            Err(UploadError::WrongDevice { owner, uploader: on, .. }) => {
                assert_eq!((owner, on), (d1.index(), d0.index()))
            }
            other => panic!("expected WrongDevice, got {other:?}"),
        }
        let pool = SparseTilePool::new(Arc::clone(d1), pool_desc("tiles on 1")).unwrap();
        let sparse = SparseImage::new(&pool, "sparse on 1", &desc(), false).unwrap();
        let region = ImageRegion::new(&sparse, 0, [0; 3], [128, 128, 1]);
        assert!(matches!(
            uploader.write_image(&region, &vec![0; 65536]),
            Err(UploadError::WrongDevice { .. })
        ));
        // Nothing was queued: the flush submits nothing that names device 1's images.
        uploader.wait_idle().unwrap();
        uploader.destroy().unwrap();
    });
}

#[test]
fn misuse_dropping_an_upload_destination_before_the_flush_keeps_it_until_the_copy_ran() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let uploader = Uploader::new(&device, "kept destinations", 1 << 20).unwrap();
        let pool = SparseTilePool::new(Arc::clone(&device), pool_desc("kept tiles")).unwrap();
        let mut sparse = SparseImage::new(&pool, "kept sparse", &desc(), false).unwrap();
        let region = tile(&sparse, 0, 0);
        sparse.commit_region(&pool, 0, 0, region).unwrap();
        pool.flush_binds(&mut [&mut sparse]).unwrap();
        let image = plain_image(&device, "kept image", Format::R8G8B8A8Unorm, 16, 1);
        uploader
            .write_image(&ImageRegion::new(&sparse, 0, region.offset, region.extent), &texels(region))
            .unwrap();
        uploader.write_image(&ImageRegion::new(&image, 0, [0; 3], [16, 16, 1]), &[9; 16 * 16 * 4]).unwrap();
        drop((sparse, pool, image));
        for name in ["kept sparse", "kept tiles heap 0", "kept image"] {
            assert!(live(&device, name), "{name} is kept for its queued copy");
        }
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
        device.maintain();
        for name in ["kept sparse", "kept tiles heap 0", "kept image"] {
            assert!(!live(&device, name), "{name} released after its copy");
        }
        uploader.destroy().unwrap();
    });
}
