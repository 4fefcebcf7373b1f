//! Sizes, offsets, extents and counts from a caller are checked with checked arithmetic and
//! against the device's limits before Vulkan sees them (issue #29, cause 2). Each test would have
//! crashed, panicked or reached the driver with a wrapped or over-limit value before; now it is a
//! typed error that changes nothing, or a documented clamp. The harness fails a test on any
//! validation message or leaked object.

use residency_core::format::Format;
use residency_core::streaming::{FeedbackSampling, FnSource, TileSource};
use residency_core::tiles::{ResidencyPath, SparseImageDesc, TexelRegion, TilePoolDesc};
use residency_core::usage::BufferUsage;
use residency_core::vt_file::VtDesc;
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::recording::Timestamps;
use residency_vulkan::shaders;
use residency_vulkan::sparse::software::SoftwareTexture;
use residency_vulkan::sparse::{SparseError, SparseImage, SparseTilePool};
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    BufferDesc, BufferInit, CommandContext, Device, ImageRegion, LinearPool, LinearPoolDesc, MemoryError,
    UploadError, Uploader,
};
use std::sync::Arc;

const SIZE: u32 = 512;

fn sparse_image(device: &Arc<Device>) -> (SparseTilePool, SparseImage) {
    let pool = SparseTilePool::new(
        Arc::clone(device),
        TilePoolDesc::default().with_name("arith pool").with_tiles_per_heap(8).with_budget_tiles(32),
    )
    .unwrap();
    let image = SparseImage::new(
        &pool,
        "arith image",
        &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIZE, SIZE),
        false,
    )
    .unwrap();
    (pool, image)
}

fn texels(region: &TexelRegion) -> Vec<u8> {
    let [w, h, _] = region.extent;
    (0..w * h).flat_map(|i| [i as u8, (i >> 8) as u8, 0x5a, 0xff]).collect()
}

#[test]
fn misuse_sparse_read_region_whose_offset_plus_extent_wraps_u32_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let (pool, mut image) = sparse_image(device);
        let tile = TexelRegion { offset: [0; 3], extent: [64, 64, 1] };
        image.commit_region(&pool, 0, 0, tile).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();
        let uploader = Uploader::new(device, "arith uploader", 1 << 20).unwrap();
        let data = texels(&tile);
        uploader.write_image(&ImageRegion::new(&image, 0, tile.offset, tile.extent), &data).unwrap();
        uploader.wait_idle().unwrap();

        // `offset + extent` wrapped to 0 on the old code (inside the mip), and the copy read from
        // a negative offset: the driver segfaulted.
        let wrapping = [
            ([0, u32::MAX, 0], [1, 1, 1]),
            ([u32::MAX, 0, 0], [2, 1, 1]),
            ([0, 0, u32::MAX], [1, 1, 2]),
            ([1, 0, 0], [u32::MAX, 1, 1]),
        ];
        for (offset, extent) in wrapping {
            let result = image.read_region(0, 0, TexelRegion { offset, extent }, u64::MAX);
            match result {
                Err(SparseError::Upload(UploadError::RegionOutsideImage {
                    offset: o,
                    extent: e,
                    mip_extent,
                    ..
                })) => {
                    assert_eq!((o, e, mip_extent), (offset, extent, [SIZE, SIZE, 1]));
                }
                other => panic!("{offset:?} + {extent:?}: expected RegionOutsideImage, got {other:?}"),
            }
        }
        // The upload path refuses the same boxes with the same error (one validation).
        for (offset, extent) in wrapping {
            let region = ImageRegion::new(&image, 0, offset, extent);
            let result = uploader.write_image(&region, &[]);
            assert!(matches!(result, Err(UploadError::RegionOutsideImage { .. })), "{result:?}");
        }
        // A layer or mip the image lacks, and an empty box, are refused too.
        let one = TexelRegion { offset: [0; 3], extent: [1, 1, 1] };
        assert!(matches!(
            image.read_region(1, 0, one, u64::MAX),
            Err(SparseError::Upload(UploadError::RegionOutsideImage { layer: 1, .. }))
        ));
        assert!(matches!(
            image.read_region(0, 99, one, u64::MAX),
            Err(SparseError::Upload(UploadError::RegionOutsideImage { mip: 99, mip_extent: [0, 0, 0], .. }))
        ));
        let empty = TexelRegion { offset: [3, 3, 0], extent: [0, 1, 1] };
        assert!(matches!(
            image.read_region(0, 0, empty, u64::MAX),
            Err(SparseError::EmptyRegion { extent: [0, 1, 1], .. })
        ));
        // Nothing changed: the committed tile still reads back what was written.
        assert_eq!(image.read_region(0, 0, tile, u64::MAX).unwrap(), data);
        image.release_all(&pool).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();
    });
}

#[test]
fn misuse_linear_pool_of_u64_max_bytes_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let live = device.ledger().live_objects().len();
        // The rounding up to 64 KiB wrapped to 0 on the old code: vkAllocateMemory(0), then a
        // crash mapping it.
        for size in [u64::MAX, u64::MAX - (32 << 10)] {
            let result = LinearPool::new(Arc::clone(device), LinearPoolDesc::new("huge ring", size));
            // `LinearPoolDesc::validate` (over maxMemoryAllocationSize) answers first; the checked
            // rounding behind it is the second line.
            match result {
                Err(MemoryError::TooLarge { requested, .. }) => assert_eq!(requested, size),
                Err(MemoryError::Desc(e)) => assert!(e.to_string().contains(&size.to_string()), "{e}"),
                other => panic!("{size}: expected TooLarge, got {other:?}"),
            }
        }
        // Beyond the device's allocation limit (or the heap) after rounding: refused before
        // vkAllocateMemory.
        let max = device.profile().limits.max_memory_allocation_size;
        let result = LinearPool::new(Arc::clone(device), LinearPoolDesc::new("over the limit", max + 1));
        assert!(matches!(result, Err(MemoryError::TooLarge { .. } | MemoryError::Desc(_))), "{result:?}");
        assert_eq!(device.ledger().live_objects().len(), live, "nothing was created");
        // A valid pool still works.
        let ring = LinearPool::new(Arc::clone(device), LinearPoolDesc::new("fine ring", 1)).unwrap();
        assert_eq!(ring.desc().size, 64 << 10);
        let buffer =
            ring.create_buffer(&BufferInit::new("fine", 256).with_usage(BufferUsage::UNIFORM)).unwrap();
        drop(buffer);
    });
}

#[test]
fn misuse_buffer_over_max_buffer_size_is_a_typed_error_before_vulkan() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let limit = device.profile().limits.max_buffer_size;
        let live = device.ledger().live_objects().len();
        for size in [u64::MAX, limit.saturating_add(1)] {
            let result = device.create_buffer(&BufferDesc::new("huge", size, BufferUsage::STORAGE));
            match result {
                Err(MemoryError::TooLarge { requested, limit_name, limit: l, .. }) => {
                    assert_eq!((requested, limit_name, l), (size, "maxBufferSize", limit));
                }
                other => panic!("{size}: expected TooLarge, got {other:?}"),
            }
        }
        // A staging ring is a buffer too: the same check.
        let result = Uploader::new(device, "huge uploader", u64::MAX);
        assert!(matches!(result, Err(UploadError::Memory(MemoryError::TooLarge { .. }))), "{result:?}");
        assert_eq!(device.ledger().live_objects().len(), live, "nothing was created");
    });
}

#[test]
fn misuse_compute_program_of_u32_max_sets_clamps_its_pool_and_works() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // Three storage buffers: the pool's STORAGE_BUFFER count was 3 × u32::MAX (an overflow
        // panic in debug, a wrapped count in release).
        let program =
            ComputeProgram::new(device, "feedback_sampling.comp", &shaders::FEEDBACK_SAMPLING, u32::MAX)
                .unwrap();
        let out =
            device.create_buffer(&BufferDesc::new("arith sets", 64 * 64 * 4, BufferUsage::STORAGE)).unwrap();
        let sets: Vec<_> = (0..3)
            .map(|_| {
                program
                    .descriptor_set(&[Binding::Buffer(&out), Binding::Buffer(&out), Binding::Buffer(&out)])
                    .unwrap()
            })
            .collect();
        assert_eq!(sets.len(), 3);
    });
}

/// `Timestamps::new(u32::MAX)` aborted the process inside lavapipe; beyond the maximum is a
/// typed error now (`misuse_twins.rs` checks the error), and the maximum itself works.
#[test]
fn misuse_timestamp_pool_of_u32_max_queries_is_refused_and_the_maximum_works() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        assert!(Timestamps::new(device, "arith timestamps", u32::MAX).is_err());
        let most = Timestamps::new(device, "arith timestamps", Timestamps::MAX_COUNT).unwrap();
        assert_eq!(most.count(), Timestamps::MAX_COUNT);
        let none = Timestamps::new(device, "arith no timestamps", 0).unwrap();
        assert_eq!(none.count(), 1);
    });
}

#[test]
fn misuse_software_capacity_for_a_u32_max_budget_saturates() {
    // `budget.div_ceil(per_heap) + 1` overflowed for a budget of u32::MAX in heaps of one tile.
    assert_eq!(SoftwareTexture::capacity_for_budget(u32::MAX, 1), u32::MAX);
    assert_eq!(SoftwareTexture::capacity_for_budget(u32::MAX, 16), u32::MAX);
    assert_eq!(SoftwareTexture::capacity_for_budget(32, 16), 48);
}

#[test]
fn misuse_software_streamer_of_a_u32_max_budget_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let live = device.ledger().live_objects().len();
        // The budget's rounding to whole heaps of 16 overflowed (a panic in debug).
        let desc = StreamerDesc::default()
            .with_name("arith streamer")
            .with_path(ResidencyPath::Software)
            .with_budget_tiles(u32::MAX)
            .with_workers(1);
        let result = Streamer::new(device, desc);
        assert!(matches!(result, Err(StreamError::Software(_))), "{result:?}");
        assert_eq!(device.ledger().live_objects().len(), live, "nothing was left behind");
    });
}

/// A small procedural RGBA8 texture.
fn source() -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, 256, 256, 128, 128);
    Arc::new(FnSource::new("arith source", desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok(vec![0x7f; (w * h * 4) as usize])
    }))
}

#[test]
fn misuse_streamer_feedback_words_with_a_feedback_stride_of_65536() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let commands = CommandContext::new(device, "arith frames").unwrap();
        // `new` clamps the stride; a description written by hand keeps 65 536, whose square wrapped
        // to 0 in u32 (an overflow panic in debug, a division by zero in release) when the frame's
        // feedback words were made.
        let clamped = FeedbackSampling::new(65536, 1);
        assert_eq!(clamped.pixel_stride, FeedbackSampling::MAX_PIXEL_STRIDE);
        // A description written by hand with 65 536 is refused where it is consumed.
        let literal = FeedbackSampling { pixel_stride: 65536, frame_interval: 1, block: 1 };
        let refused = Streamer::new(device, StreamerDesc::default().with_sampling(literal)).unwrap_err();
        assert!(refused.to_string().contains("pixel_stride"), "{refused}");
        for sampling in [clamped] {
            let desc = StreamerDesc::default()
                .with_name("arith stride streamer")
                .with_budget_tiles(32)
                .with_workers(1)
                .with_sampling(sampling);
            let mut streamer = Streamer::new(device, desc).unwrap();
            let texture = streamer.add_texture("arith texture", source()).unwrap();
            for _ in 0..3 {
                let bindings = streamer.begin_frame().unwrap();
                let binding = bindings.texture(&texture).expect("the texture is in the frame");
                let words = bindings.feedback_words(&binding, true);
                assert_eq!(words[2], sampling.pixel_stride);
                let [x, y] = sampling.phase(bindings.frame);
                if words[7] & 1 == 1 {
                    assert_eq!(words[6], x | y << 16, "the shader's phase is the CPU rule's");
                }
                drop(bindings);
                let bindings = streamer.frame_bindings().unwrap();
                let submission = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
                drop(bindings);
                streamer.end_frame(submission.gpu_use()).unwrap();
            }
            streamer.remove_texture(texture).unwrap();
        }
    });
}

/// `fill_buffer`/`update_buffer` on a range of a page buffer (offset > 0 in its `VkBuffer`)
/// at an offset near `u64::MAX`: the alignment check added the page offset first and overflowed
/// (found by the safe-API fuzzer, `transfer-offset-wrap-1.bin`); the range is checked first now.
#[test]
fn misuse_fill_or_update_at_an_offset_near_u64_max_is_refused() {
    use residency_core::usage::BufferPoolUsage;
    use residency_vulkan::{BufferPool, BufferPoolDesc};
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
        let pool = BufferPool::new(
            Arc::clone(&device),
            BufferPoolDesc::new("arith ranges", BufferPoolUsage::Known(usage)),
        )
        .unwrap();
        let _first = pool.init_buffer(&BufferInit::new("arith first", 256)).unwrap();
        let second = pool.init_buffer(&BufferInit::new("arith second", 256)).unwrap();
        assert!(second.offset() > 0, "a range after the first");
        let commands = CommandContext::new(&device, "arith fills").unwrap();
        let done = commands
            .submit(&[], |rec| {
                for offset in [u64::MAX - 3, u64::MAX - 255, 1 << 63] {
                    assert!(rec.fill_buffer(&second, offset, 4, 0).is_err(), "{offset}");
                    assert!(rec.update_buffer(&second, offset, &[0; 4]).is_err(), "{offset}");
                }
                assert_eq!(rec.helper_commands(), 0, "nothing recorded");
            })
            .unwrap();
        commands.wait(done).unwrap();
    });
}

/// More mips than the extent has (`VUID-VkImageCreateInfo-mipLevels-00958`) or an image past the
/// format's `maxResourceSize` reached `vkCreateImage` (found by the safe-API fuzzer,
/// `image-mips-1.bin`, `image-limits-1.bin`); both are refused before it, nothing created.
#[test]
fn misuse_images_with_too_many_mips_or_past_max_resource_size_are_refused() {
    use residency_core::usage::ImageUsage;
    use residency_vulkan::ImageDesc;
    with_gpu(|set| {
        let device = &set.devices()[0];
        let live = device.ledger().live_objects().len();
        let desc = |w: u32, h: u32| {
            ImageDesc::new_2d("arith image", Format::R8G8B8A8Unorm, w, h, ImageUsage::SAMPLED)
        };
        // 256 × 64 has 9 mips (256 → 1).
        assert!(device.create_image(&desc(256, 64).with_mip_levels(9)).is_ok());
        let err = device.create_image(&desc(256, 64).with_mip_levels(10)).unwrap_err();
        assert!(err.to_string().contains("at most 9"), "{err}");
        // Within every per-dimension limit, but 16k × 16k × 2048 layers × 4 B is far past any
        // maxResourceSize.
        let err = device.create_image(&desc(16384, 16384).with_array_layers(2048)).unwrap_err();
        assert!(err.to_string().contains("maxResourceSize") || err.to_string().contains("limits"), "{err}");
        assert_eq!(device.ledger().live_objects().len(), live, "nothing was created");
    });
}
