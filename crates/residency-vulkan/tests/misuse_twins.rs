//! A check on one path and not its twin (issue #29, cause 6), on lavapipe under synchronization
//! validation (a validation message fails the test): each kind of check is one function that
//! every path calls, and each instance the red team found is refused with a typed error that
//! records or creates nothing. Every body runs under a watchdog (`common/watchdog.rs`).
//!
//! - copies: two transient buffers bound to the same bytes (`VUID-vkCmdCopyBuffer-pRegions-00117`),
//!   and a transient image and buffer that alias (`VUID-vkCmdCopyImageToBuffer-pRegions-00184`);
//! - draws: a vertex buffer bound at an offset that misaligns an attribute, and a stride that
//!   misaligns every second vertex (`VUID-vkCmdDraw-None-02721`);
//! - views: a `CUBE_ARRAY` view without `imageCubeArray`; a view format on an `EXTENDED_USAGE`
//!   image that cannot serve every usage of the image;
//! - queries: a timestamp pool of a count no driver should be asked for.

use ash::vk;
use residency_core::format::Format;
use residency_core::sync::{Region, TrackerOptions, Use};
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::graphics::{DrawError, GraphicsProgram, VertexAttribute};
use residency_vulkan::recording::{CopyError, Timestamps};
use residency_vulkan::shaders;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::tracking::ResourceTracker;
use residency_vulkan::transient::{TransientPool, TransientRequest};
use residency_vulkan::{ash, Buffer, Image, ImageDesc, ImageViewDesc, VulkanError};
use std::sync::Arc;

#[path = "common/watchdog.rs"]
mod watchdog;

/// Whether `a` and `b` are bound to overlapping bytes of one memory object.
fn alias(a: (vk::DeviceMemory, u64), a_len: u64, b: (vk::DeviceMemory, u64), b_len: u64) -> bool {
    a.0 == b.0 && a.1 < b.1 + b_len && b.1 < a.1 + a_len
}

#[test]
fn misuse_a_copy_between_transient_buffers_that_alias_is_refused() {
    watchdog::within("aliasing transient buffers", || {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut pool = TransientPool::new(Arc::clone(&device), "twins transients").unwrap();
            let request = |name: &str, pass: u32| TransientRequest::Buffer {
                name: name.into(),
                size: 4096,
                usage: BufferUsage::COPY_SRC | BufferUsage::COPY_DST,
                passes: pass..=pass,
                uses: (Use::TransferDst, Use::TransferSrc),
            };
            // Passes 0 and 1 do not overlap: the planner places both in the same bytes.
            let frame = pool.begin_frame(&[request("twins a", 0), request("twins b", 1)]).unwrap();
            let (a, b): (&Buffer, &Buffer) = (frame.buffer(0).unwrap(), frame.buffer(1).unwrap());
            assert_ne!(a.raw(), b.raw());
            assert!(alias(a.memory(), a.size(), b.memory(), b.size()), "the planner aliased them");
            device
                .submit_once("twins copies", |rec| {
                    let before = rec.helper_commands();
                    match rec.copy_buffer(a, 0, b, 0, 256) {
                        Err(CopyError::Invalid { reason, .. }) => {
                            assert!(reason.contains("alias"), "{reason}")
                        }
                        other => panic!("a copy within aliasing bytes: {other:?}"),
                    }
                    // Disjoint bytes of the two are fine (the same rule as within one buffer).
                    let (a_base, b_base) = (a.memory().1, b.memory().1);
                    let (src, dst) = if a_base <= b_base {
                        (0, b_base - a_base + 2048)
                    } else {
                        (a_base - b_base + 2048, 0)
                    };
                    assert_eq!(rec.helper_commands(), before, "nothing recorded");
                    rec.copy_buffer(a, src.min(2048), b, dst.min(2048), 1024).unwrap();
                })
                .unwrap();
            pool.end_frame(frame);
        })
    });
}

#[test]
fn misuse_a_copy_from_a_transient_image_into_a_buffer_that_aliases_it_is_refused() {
    watchdog::within("aliasing transient image and buffer", || {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut pool = TransientPool::new(Arc::clone(&device), "twins image transients").unwrap();
            let desc = ImageDesc::new_2d(
                "twins image",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::COPY_SRC | ImageUsage::SAMPLED,
            );
            let frame = pool
                .begin_frame(&[
                    TransientRequest::Image {
                        desc,
                        passes: 0..=0,
                        uses: (Use::TransferSrc, Use::TransferSrc),
                    },
                    TransientRequest::Buffer {
                        name: "twins image buffer".into(),
                        size: 16 * 16 * 4,
                        usage: BufferUsage::COPY_DST,
                        passes: 1..=1,
                        uses: (Use::TransferDst, Use::TransferDst),
                    },
                ])
                .unwrap();
            let (image, buffer): (&Image, &Buffer) = (frame.image(0).unwrap(), frame.buffer(1).unwrap());
            assert!(
                alias(image.memory(), image.size(), buffer.memory(), buffer.size()),
                "the planner aliased them"
            );
            device
                .submit_once("twins image copy", |rec| {
                    match rec.copy_image_to_buffer(image, vk::ImageLayout::GENERAL, buffer) {
                        Err(CopyError::Invalid { reason, .. }) => {
                            assert!(reason.contains("alias"), "{reason}")
                        }
                        other => panic!("a copy between aliasing image and buffer: {other:?}"),
                    }
                    assert_eq!(rec.helper_commands(), 0, "nothing recorded");
                })
                .unwrap();
            pool.end_frame(frame);
        })
    });
}

/// `quads.vert`'s layout: a `vec2` at location 0 and a `vec4` at location 1 (floats: 4-byte
/// components).
fn quad_attributes() -> [VertexAttribute; 2] {
    [
        VertexAttribute { location: 0, format: vk::Format::R32G32_SFLOAT, offset: 0 },
        VertexAttribute { location: 1, format: vk::Format::R32G32B32A32_SFLOAT, offset: 8 },
    ]
}

#[test]
fn misuse_a_vertex_buffer_offset_or_stride_that_misaligns_an_attribute_is_refused() {
    watchdog::within("misaligned vertex attributes", || {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let color = vk::Format::R8G8B8A8_UNORM;
            let quads = |name: &str, stride: u32| {
                GraphicsProgram::new(
                    &device,
                    name,
                    &shaders::QUADS_VERT,
                    &shaders::QUADS_FRAG,
                    stride,
                    &quad_attributes(),
                    color,
                    1,
                )
            };
            // A stride of 26 puts vertex 1's floats at bytes 26 and 34: refused when made.
            match quads("twins stride", 26) {
                Err(e) => assert!(e.to_string().contains("stride of 26"), "{e}"),
                Ok(_) => panic!("a stride that misaligns the attributes was accepted"),
            }
            let program = quads("twins quads", 24).unwrap();
            let image = device
                .create_image(&ImageDesc::new_2d(
                    "twins target",
                    Format::R8G8B8A8Unorm,
                    8,
                    8,
                    ImageUsage::COLOR_ATTACHMENT,
                ))
                .unwrap();
            let view = image.create_view(0..1).unwrap();
            let vertices = device
                .create_buffer(&residency_vulkan::BufferDesc::new(
                    "twins vertices",
                    24 * 6 + 8,
                    BufferUsage::VERTEX,
                ))
                .unwrap();
            let mut tracker = ResourceTracker::new(TrackerOptions::default());
            let id = tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap();
            device
                .submit_once("twins draw", |rec| {
                    let (index, family) = (rec.device().index(), rec.device().universal_queue().family());
                    let mut batch = tracker.batch(index, family);
                    batch.declare_discard(id, Region::Whole, Use::ColorAttachmentWrite).unwrap();
                    let flush = batch.flush();
                    tracker.record(rec, &flush.barriers).unwrap();
                    program
                        .render(rec, &view, [8, 8], [0.0; 4], |pass| {
                            let before = pass.helper_commands();
                            for offset in [1, 2, 6] {
                                match pass.bind_vertex_buffer(&vertices, offset) {
                                    Err(DrawError::Buffer { reason, .. }) => {
                                        assert!(reason.contains("alignment"), "{reason}")
                                    }
                                    other => panic!("offset {offset}: {other:?}"),
                                }
                            }
                            assert_eq!(pass.helper_commands(), before, "nothing recorded");
                            pass.bind_vertex_buffer(&vertices, 4).unwrap();
                            pass.bind_vertex_buffer(&vertices, 0).unwrap();
                        })
                        .unwrap();
                })
                .unwrap();
            tracker.untrack(device.index(), id).unwrap();
        })
    });
}

#[test]
fn misuse_a_cube_array_view_without_image_cube_array_is_refused() {
    watchdog::within("cube array views", || {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let image = device
                .create_image(
                    &ImageDesc::new_2d("twins cubes", Format::R8G8B8A8Unorm, 16, 16, ImageUsage::SAMPLED)
                        .cube(2),
                )
                .unwrap();
            match image.create_view_as(&ImageViewDesc::of(&image).with_type(vk::ImageViewType::CUBE_ARRAY)) {
                Err(VulkanError::Unsupported { reason, .. }) => {
                    assert!(reason.contains("imageCubeArray"), "{reason}")
                }
                other => panic!("a CUBE_ARRAY view: {other:?}"),
            }
            // Each cube on its own, and the layers as a 2D array, are views residency can make.
            let mut cube = ImageViewDesc::of(&image).with_type(vk::ImageViewType::CUBE);
            cube.layers = 6..12;
            assert_eq!(image.create_view_as(&cube).unwrap().view_type(), vk::ImageViewType::CUBE);
            image
                .create_view_as(&ImageViewDesc::of(&image).with_type(vk::ImageViewType::TYPE_2D_ARRAY))
                .unwrap();
        })
    });
}

#[test]
fn misuse_a_view_format_that_cannot_serve_an_extended_usage_image_s_usages_is_limited_or_refused() {
    watchdog::within("extended-usage views", || {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let (unorm, srgb) = (vk::Format::R8G8B8A8_UNORM, vk::Format::R8G8B8A8_SRGB);
            let mut desc = ImageDesc::new_2d(
                "twins extended",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::SAMPLED | ImageUsage::STORAGE,
            )
            .mutable_format(&[unorm, srgb]);
            desc.flags |= vk::ImageCreateFlags::EXTENDED_USAGE;
            let image = device.create_image(&desc).unwrap();
            // SAFETY: a pure query of the device's physical device.
            let features =
                unsafe { device.instance().get_physical_device_format_properties(device.physical(), srgb) }
                    .optimal_tiling_features;
            let view = image.create_view_as(&ImageViewDesc::of(&image).with_format(srgb)).unwrap();
            // The view serves only what its format supports (the layer would report a view whose
            // usage includes STORAGE on a format without STORAGE_IMAGE).
            assert_eq!(
                view.usage().contains(ImageUsage::STORAGE),
                features.contains(vk::FormatFeatureFlags::STORAGE_IMAGE)
            );
            assert!(view.usage().contains(ImageUsage::SAMPLED));
            // Without EXTENDED_USAGE such a format is refused (as before).
            let plain = device
                .create_image(
                    &ImageDesc::new_2d(
                        "twins plain",
                        Format::R8G8B8A8Unorm,
                        16,
                        16,
                        ImageUsage::SAMPLED | ImageUsage::STORAGE,
                    )
                    .mutable_format(&[unorm, srgb]),
                )
                .unwrap();
            let refused = plain.create_view_as(&ImageViewDesc::of(&plain).with_format(srgb));
            assert_eq!(refused.is_err(), !features.contains(vk::FormatFeatureFlags::STORAGE_IMAGE));
        })
    });
}

#[test]
fn misuse_a_timestamp_pool_beyond_the_maximum_is_refused() {
    watchdog::within("huge timestamp pools", || {
        with_gpu(|set| {
            let device = &set.devices()[0];
            for count in [Timestamps::MAX_COUNT + 1, u32::MAX] {
                match Timestamps::new(device, "twins timestamps", count) {
                    Err(VulkanError::Unsupported { reason, .. }) => {
                        assert!(reason.contains(&count.to_string()), "{reason}")
                    }
                    other => panic!("{count} timestamps: {other:?}"),
                }
            }
            let pool = Timestamps::new(device, "twins timestamps", 2).unwrap();
            assert_eq!(pool.count(), 2);
        })
    });
}
