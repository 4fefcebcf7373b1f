//! Rendering into a partially resident texture (the seed's "render to PRT"): storage writes from a
//! compute shader (`imageStore`) and, where the device makes sparse colour attachments, a render
//! pass with the PRT attached. Every texel is written, bound tiles and unbound ones: the bound
//! tiles read back the pattern; the unbound ones read zero on a `residencyNonResidentStrict`
//! device (writes dropped) and are undefined elsewhere, which the library says
//! ([`SparseImage::unbound_texels_read_zero`]).

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::sync::{Region, TrackerOptions, Use};
use residency_core::tiles::{CommitError, SparseImageDesc, TexelRegion, TilePoolDesc};
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::graphics::{GraphicsProgram, RenderError};
use residency_vulkan::shaders;
use residency_vulkan::sparse::{SparseError, SparseImage, SparseTilePool, SparseUsage};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::tracking::ResourceTracker;
use residency_vulkan::{BufferDesc, CommandContext, Device, ImageDesc};
use std::sync::Arc;

const SIDE: u32 = 512;

/// What `sparse_store.comp` and `prt_target.frag` write at (x, y).
fn pattern(x: u32, y: u32) -> [u8; 4] {
    [(x % 256) as u8, (y % 256) as u8, 255, 255]
}

/// Whether the device makes a sparse RGBA8 colour attachment that renders correctly: it reports
/// sparse residency for a 2D RGBA8 image with colour-attachment usage (the raw query, independent
/// of the library's own check) and is not lavapipe, which reports it and renders into the sparse
/// image as if it were linear (measured here with the Mesa 25.0.7 of docs/devices: the first row
/// of 128 texels of bound tile (0, 0) held x = 0..128 of row 0 and the next row x = 128..256, the
/// layout of a linear 512-wide image; the library refuses it since).
fn device_renders_sparse_attachments(device: &Device) -> bool {
    let usage = vk::ImageUsageFlags::SAMPLED
        | vk::ImageUsageFlags::TRANSFER_SRC
        | vk::ImageUsageFlags::TRANSFER_DST
        | vk::ImageUsageFlags::COLOR_ATTACHMENT;
    // SAFETY: pure queries of the device's physical device.
    let (features, sparse) = unsafe {
        (
            device
                .instance()
                .get_physical_device_format_properties(device.physical(), vk::Format::R8G8B8A8_UNORM),
            device.instance().get_physical_device_sparse_image_format_properties(
                device.physical(),
                vk::Format::R8G8B8A8_UNORM,
                vk::ImageType::TYPE_2D,
                vk::SampleCountFlags::TYPE_1,
                usage,
                vk::ImageTiling::OPTIMAL,
            ),
        )
    };
    let reported = features.optimal_tiling_features.contains(vk::FormatFeatureFlags::COLOR_ATTACHMENT)
        && !sparse.is_empty();
    reported && device.profile().identity.driver_name != "llvmpipe"
}

/// Commits a checkerboard of mip-0 tiles (tile (tx, ty) when tx + ty is even); returns the tile
/// grid and which tiles are bound.
fn commit_checkerboard(pool: &SparseTilePool, image: &mut SparseImage) -> (u32, u32, Vec<bool>) {
    let shape = image.layout().tile_shape();
    let (tw, th) = (SIDE / shape.width, SIDE / shape.height);
    let mut bound = Vec::new();
    for ty in 0..th {
        for tx in 0..tw {
            let on = (tx + ty) % 2 == 0;
            if on {
                let region =
                    TexelRegion { offset: [tx * shape.width, ty * shape.height, 0], extent: [1, 1, 1] };
                image.commit_region(pool, 0, 0, region).unwrap();
            }
            bound.push(on);
        }
    }
    pool.flush_binds(&mut [image]).unwrap();
    (tw, th, bound)
}

/// Reads every tile back: bound tiles must hold the pattern; unbound ones must read zero where the
/// device is strict (and are not looked at elsewhere). Returns (bound tiles checked, unbound
/// tiles checked).
fn check_tiles(image: &SparseImage, grid: (u32, u32, Vec<bool>), writer: &str) -> (usize, usize) {
    let shape = image.layout().tile_shape();
    let strict = image.unbound_texels_read_zero();
    let (tw, th, bound) = grid;
    let (mut checked_bound, mut checked_unbound) = (0, 0);
    for ty in 0..th {
        for tx in 0..tw {
            let (x0, y0) = (tx * shape.width, ty * shape.height);
            let region = TexelRegion { offset: [x0, y0, 0], extent: [shape.width, shape.height, 1] };
            let back = image.read_region(0, 0, region, 1 << 20).unwrap();
            if bound[(ty * tw + tx) as usize] {
                let want: Vec<u8> = (0..shape.height)
                    .flat_map(|y| (0..shape.width).flat_map(move |x| pattern(x0 + x, y0 + y)))
                    .collect();
                assert!(back == want, "{writer}: bound tile ({tx}, {ty}) holds what was written");
                checked_bound += 1;
            } else if strict {
                assert!(
                    back.iter().all(|&b| b == 0),
                    "{writer}: residencyNonResidentStrict: the write to unbound tile ({tx}, {ty}) was \
                     dropped and it reads zero"
                );
                checked_unbound += 1;
            }
        }
    }
    (checked_bound, checked_unbound)
}

fn release(device: &Device, pool: &SparseTilePool, mut image: SparseImage) {
    device.wait_idle().unwrap();
    image.release_all(pool).unwrap();
    pool.flush_binds(&mut [&mut image]).unwrap();
}

/// Writes every texel of a half-bound image through `imageStore`, and through a colour attachment
/// where the device makes sparse colour attachments; reads back every tile.
#[test]
fn render_into_prt_dropped_writes() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = SparseTilePool::new(Arc::clone(&device), TilePoolDesc::default().with_tiles_per_heap(16))
            .unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIDE, SIDE).with_mip_levels(1);
        let strict = device.profile().sparse.non_resident_strict;

        // Storage writes from a compute shader over the whole image.
        let mut image =
            SparseImage::new_with_usage(&pool, "imageStore target", &desc, SparseUsage::STORAGE).unwrap();
        assert_eq!(image.unbound_texels_read_zero(), strict, "the image says what the device does");
        assert!(image.is_storage() && !image.is_color_attachment());
        let grid = commit_checkerboard(&pool, &mut image);
        let program = ComputeProgram::new(&device, "sparse store", &shaders::SPARSE_STORE, 1).unwrap();
        let descriptors =
            program.descriptor_set(&[Binding::storage(&image, vk::ImageLayout::GENERAL)]).unwrap();
        let push: Vec<u8> =
            [0, 0, SIDE as i32, SIDE as i32].iter().flat_map(|v: &i32| v.to_le_bytes()).collect();
        device
            .submit_once("imageStore into every texel", |rec| {
                program.dispatch(rec, &descriptors, &push, [SIDE / 8, SIDE / 8, 1]).unwrap();
            })
            .unwrap();
        let tiles = grid.2.len();
        let (bound, unbound) = check_tiles(&image, grid, "imageStore");
        assert_eq!(bound, tiles / 2);
        drop((descriptors, program));
        release(&device, &pool, image);
        if strict {
            assert_eq!(unbound, tiles / 2);
            println!(
                "render_into_prt_dropped_writes: imageStore branch STRICT (residencyNonResidentStrict): \
                 {bound} bound tiles hold the writes, {unbound} unbound tiles read zero"
            );
        } else {
            assert_eq!(unbound, 0);
            println!(
                "render_into_prt_dropped_writes: imageStore branch NOT STRICT (no \
                 residencyNonResidentStrict, SparseImage::unbound_texels_read_zero() == false): {bound} \
                 bound tiles hold the writes, unbound tiles not read (undefined on this device)"
            );
        }

        // A colour attachment covering the whole image, where the device makes one sparse.
        let attachable = device_renders_sparse_attachments(&device);
        let made =
            SparseImage::new_with_usage(&pool, "attachment target", &desc, SparseUsage::COLOR_ATTACHMENT);
        match (attachable, made) {
            (true, Ok(mut image)) => {
                let grid = commit_checkerboard(&pool, &mut image);
                let program = GraphicsProgram::new(
                    &device,
                    "prt target",
                    &shaders::PRT_TARGET_VERT,
                    &shaders::PRT_TARGET_FRAG,
                    0,
                    &[],
                    vk::Format::R8G8B8A8_UNORM,
                    1,
                )
                .unwrap();
                let attachment = image.attachment(0, 0).unwrap();
                assert_eq!(attachment.extent(), [SIDE, SIDE]);
                device
                    .submit_once("render into every texel", |rec| {
                        program
                            .render_sparse(rec, &attachment, [SIDE, SIDE], [0.0; 4], |draw| draw.draw(3, 1))
                            .unwrap()
                            .unwrap();
                    })
                    .unwrap();
                let (bound, unbound) = check_tiles(&image, grid, "colour attachment");
                assert_eq!(bound, tiles / 2);
                assert_eq!(unbound, if strict { tiles / 2 } else { 0 });
                println!(
                    "render_into_prt_dropped_writes: colour-attachment branch {}: {bound} bound tiles \
                     hold the fragments, {unbound} unbound tiles read zero",
                    if strict { "STRICT" } else { "NOT STRICT (unbound tiles not read)" }
                );
                drop((attachment, program));
                release(&device, &pool, image);
            }
            (false, Err(SparseError::UsageUnsupported { usage, reason, .. })) => {
                assert_eq!(usage, "COLOR_ATTACHMENT");
                println!(
                    "render_into_prt_dropped_writes: colour-attachment branch REFUSED on {}: \
                     SparseError::UsageUnsupported ({reason})",
                    device.name()
                );
            }
            (attachable, other) => {
                panic!("the device makes sparse colour attachments: {attachable}; the library: {other:?}")
            }
        }
        assert_eq!(pool.used_tiles(), 0);
    });
}

/// The typed refusals around rendering into a PRT: an attachment of an image without the usage,
/// a 3D or block-compressed colour attachment, lavapipe's; where the device renders sparse
/// attachments, a mip or layer the image lacks, a render area outside the mip, another format.
#[test]
fn render_into_prt_refuses_misuse_with_nothing_created() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = SparseTilePool::new(Arc::clone(&device), TilePoolDesc::default().with_tiles_per_heap(16))
            .unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIDE, SIDE).with_mip_levels(2);
        let sampled = SparseImage::new(&pool, "sampled only", &desc, true).unwrap();
        match sampled.attachment(0, 0) {
            Err(SparseError::MissingUsage { name, usage }) => {
                assert_eq!((name.as_str(), usage), ("sampled only", "COLOR_ATTACHMENT"))
            }
            other => panic!("expected MissingUsage, got {other:?}"),
        }
        let volume = SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 64, 64, 64).with_mip_levels(1);
        match SparseImage::new_with_usage(&pool, "volume", &volume, SparseUsage::COLOR_ATTACHMENT) {
            Err(SparseError::UsageUnsupported { usage: "COLOR_ATTACHMENT", .. }) => {}
            other => panic!("a 3D colour attachment is refused, got {other:?}"),
        }
        let bc7 = SparseImageDesc::new_2d(Format::Bc7Unorm, 1024, 1024).with_mip_levels(1);
        match SparseImage::new_with_usage(&pool, "bc7", &bc7, SparseUsage::COLOR_ATTACHMENT) {
            Err(SparseError::UsageUnsupported { usage: "COLOR_ATTACHMENT", reason, .. }) => {
                assert!(reason.contains("COLOR_ATTACHMENT feature"), "{reason}")
            }
            other => panic!("a block-compressed colour attachment is refused, got {other:?}"),
        }
        let attachable =
            SparseImage::new_with_usage(&pool, "attachable", &desc, SparseUsage::COLOR_ATTACHMENT);
        if !device_renders_sparse_attachments(&device) {
            assert!(
                matches!(attachable, Err(SparseError::UsageUnsupported { usage: "COLOR_ATTACHMENT", .. })),
                "refused where the device does not render sparse attachments: {attachable:?}"
            );
        } else {
            let image = attachable.unwrap();
            match image.attachment(0, 2) {
                Err(SparseError::Commit(CommitError::NoSuchSubresource { layer: 0, mip: 2 })) => {}
                other => panic!("expected NoSuchSubresource, got {other:?}"),
            }
            match image.attachment(1, 0) {
                Err(SparseError::Commit(CommitError::NoSuchSubresource { layer: 1, mip: 0 })) => {}
                other => panic!("expected NoSuchSubresource, got {other:?}"),
            }
            let attachment = image.attachment(0, 1).unwrap();
            assert_eq!(attachment.extent(), [SIDE / 2, SIDE / 2]);
            let program = GraphicsProgram::new(
                &device,
                "prt target",
                &shaders::PRT_TARGET_VERT,
                &shaders::PRT_TARGET_FRAG,
                0,
                &[],
                vk::Format::R8G8B8A8_UNORM,
                1,
            )
            .unwrap();
            let bgra = GraphicsProgram::new(
                &device,
                "bgra target",
                &shaders::PRT_TARGET_VERT,
                &shaders::PRT_TARGET_FRAG,
                0,
                &[],
                vk::Format::B8G8R8A8_UNORM,
                1,
            )
            .unwrap();
            let mut commands = None;
            device
                .submit_once("refused passes", |rec| {
                    let outside =
                        program.render_sparse(rec, &attachment, [SIDE, SIDE / 2], [0.0; 4], |d| d.draw(3, 1));
                    let format = bgra.render_sparse(rec, &attachment, [8, 8], [0.0; 4], |d| d.draw(3, 1));
                    commands = Some((
                        matches!(outside, Err(RenderError::Target { .. })),
                        matches!(format, Err(RenderError::Target { .. })),
                    ));
                })
                .unwrap();
            assert_eq!(commands, Some((true, true)), "both passes refused, nothing recorded");
        }
    });
}

/// Tiles released while a write into them is still in flight: the flush's unbinds wait for the
/// write (every residency submission before), so the memory the write reaches is never bound
/// elsewhere under it. The submission is complete when the flush returns. (On lavapipe the sparse
/// queue is the universal queue, which orders the two anyway; on a device with a separate sparse
/// queue family, such as the H200, only the wait does.)
#[test]
fn render_into_prt_releasing_tiles_under_a_write_in_flight_unbinds_after_it() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = SparseTilePool::new(Arc::clone(&device), TilePoolDesc::default().with_tiles_per_heap(16))
            .unwrap();
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, SIDE, SIDE).with_mip_levels(1);
        let mut image =
            SparseImage::new_with_usage(&pool, "released under a write", &desc, SparseUsage::STORAGE)
                .unwrap();
        image.commit_region(&pool, 0, 0, TexelRegion { offset: [0; 3], extent: [SIDE, SIDE, 1] }).unwrap();
        pool.flush_binds(&mut [&mut image]).unwrap();
        let program = ComputeProgram::new(&device, "sparse store", &shaders::SPARSE_STORE, 1).unwrap();
        let descriptors =
            program.descriptor_set(&[Binding::storage(&image, vk::ImageLayout::GENERAL)]).unwrap();
        let push: Vec<u8> =
            [0, 0, SIDE as i32, SIDE as i32].iter().flat_map(|v: &i32| v.to_le_bytes()).collect();
        let context = CommandContext::new(&device, "writes in flight").unwrap();
        let submission = context
            .submit(&[], |rec| {
                for _ in 0..8 {
                    program.dispatch(rec, &descriptors, &push, [SIDE / 8, SIDE / 8, 1]).unwrap();
                }
            })
            .unwrap();
        // Released and unbound at once, without waiting for the writes.
        image.release_all(&pool).unwrap();
        let stats = pool.flush_binds(&mut [&mut image]).unwrap();
        assert!(stats.tiles_unbound > 0, "{stats:?}");
        assert!(context.is_complete(&submission).unwrap(), "the unbind waited for the writes");
        context.wait(submission).unwrap();
        drop((descriptors, program, context));
        assert_eq!(pool.used_tiles(), 0);
    });
}

/// The program the colour-attachment branch renders with (`prt_target.vert` + `.frag`, no vertex
/// buffer, no descriptors) draws `sparse_store.comp`'s pattern into a plain image: where lavapipe
/// refuses sparse attachments, this runs the same program and pass recording under validation.
#[test]
fn render_into_prt_target_program_draws_the_store_pattern_into_a_plain_image() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let side = 64;
        let usage = ImageUsage::COLOR_ATTACHMENT | ImageUsage::COPY_SRC;
        let image = device
            .create_image(&ImageDesc::new_2d("plain target", Format::R8G8B8A8Unorm, side, side, usage))
            .unwrap();
        let view = image.create_view(0..1).unwrap();
        let pixels = device
            .create_buffer(
                &BufferDesc::new("plain target pixels", u64::from(side * side * 4), BufferUsage::COPY_DST)
                    .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let program = GraphicsProgram::new(
            &device,
            "prt target",
            &shaders::PRT_TARGET_VERT,
            &shaders::PRT_TARGET_FRAG,
            0,
            &[],
            vk::Format::R8G8B8A8_UNORM,
            1,
        )
        .unwrap();
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let ids = [
            tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap(),
            tracker.track_buffer(&pixels).unwrap(),
        ];
        device
            .submit_once("draw the pattern", |rec| {
                let (index, family) = (rec.device().index(), rec.device().universal_queue().family());
                let mut batch = tracker.batch(index, family);
                batch.declare_discard(ids[0], Region::Whole, Use::ColorAttachmentWrite).unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
                program.render(rec, &view, [side; 2], [0.0; 4], |draw| draw.draw(3, 1)).unwrap().unwrap();
                let mut batch = tracker.batch(index, family);
                batch
                    .declare(ids[0], Region::Whole, Use::TransferSrc)
                    .unwrap()
                    .declare(ids[1], Region::Whole, Use::TransferDst)
                    .unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
                rec.copy_image_to_buffer(&image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, &pixels).unwrap();
                let mut batch = tracker.batch(index, family);
                batch.declare(ids[1], Region::Whole, Use::HostRead).unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
            })
            .unwrap();
        let mut back = vec![0u8; (side * side * 4) as usize];
        pixels.read(0, &mut back).unwrap();
        let want: Vec<u8> = (0..side).flat_map(|y| (0..side).flat_map(move |x| pattern(x, y))).collect();
        assert!(back == want, "every pixel holds the pattern");
        let index = device.index();
        for id in ids {
            tracker.untrack(index, id).unwrap();
        }
    });
}
