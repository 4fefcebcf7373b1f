//! Image layouts are checked at submission (issue #15): every helper notes the layout its command
//! needs (a sampled or storage binding, a render target, a copy, a tracked barrier's old layout)
//! and the one it leaves; `CommandContext::submit` checks the needs against each image's layouts
//! in submission order and refuses with `VulkanError::ImageLayout`, submitting nothing, when one
//! does not hold. Every test runs under synchronization validation: the harness fails a test on
//! any validation message (a submitted wrong layout would raise one) or leaked object.

use ash::vk;
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::sync::{PipelineStages, Region, TrackerOptions, Use};
use residency_core::tiles::{SparseImageDesc, TilePoolDesc};
use residency_core::usage::{BufferUsage, ImageUsage};
use residency_vulkan::compute::{Binding, BindingError, ComputeProgram, DescriptorSet};
use residency_vulkan::graphics::{GraphicsProgram, VertexAttribute};
use residency_vulkan::shaders;
use residency_vulkan::sparse::{SparseImage, SparseTilePool};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::tracking::ResourceTracker;
use residency_vulkan::{
    ash, Buffer, BufferDesc, CommandContext, Device, Filter, Image, ImageDesc, ImageRegion, ImageView,
    ImageViewDesc, Sampler, UploadError, Uploader, VulkanError,
};

mod common;

const SIZE: u32 = 16;

/// Asserts `result` is the layout error for mip 0, layer 0 of `image`.
fn assert_layout_error<T: std::fmt::Debug>(
    result: Result<T, VulkanError>,
    image: &str,
    expected: vk::ImageLayout,
    actual: vk::ImageLayout,
) {
    match result {
        Err(VulkanError::ImageLayout { image: name, mip: 0, layer: 0, expected: e, actual: a }) => {
            assert_eq!((name.as_str(), e, a), (image, expected, actual));
        }
        other => panic!("expected a layout error for `{image}`, got {other:?}"),
    }
}

fn results(device: &Device, name: &str) -> Buffer {
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
    device.create_buffer(&BufferDesc::new(name, 4096, usage).with_intent(MemoryIntent::Readback)).unwrap()
}

/// A sampled image with its view, a nearest sampler, and `sample_texels.comp` with a set that
/// samples the view in `layout`.
struct Sampling {
    image: Image,
    _view: ImageView,
    _sampler: Sampler,
    _out: Buffer,
    program: ComputeProgram,
    set: DescriptorSet,
}

fn sampling(device: &Device, name: &str, layout: vk::ImageLayout) -> Sampling {
    let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST | ImageUsage::COPY_SRC;
    let image =
        device.create_image(&ImageDesc::new_2d(name, Format::R8G8B8A8Unorm, SIZE, SIZE, usage)).unwrap();
    let view = image.create_view(0..1).unwrap();
    let sampler = device.create_sampler(Filter::Nearest).unwrap();
    let out = results(device, &format!("{name} results"));
    let program =
        ComputeProgram::new(device, &format!("{name} program"), &shaders::SAMPLE_TEXELS, 1).unwrap();
    let set =
        program.descriptor_set(&[Binding::sampled(&view, &sampler, layout), Binding::Buffer(&out)]).unwrap();
    Sampling { image, _view: view, _sampler: sampler, _out: out, program, set }
}

fn push() -> Vec<u8> {
    [64u32, SIZE].iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn quads(device: &Device) -> GraphicsProgram {
    GraphicsProgram::new(
        device,
        "misuse layouts quads",
        &shaders::QUADS_VERT,
        &shaders::QUADS_FRAG,
        24,
        &[
            VertexAttribute { location: 0, format: vk::Format::R32G32_SFLOAT, offset: 0 },
            VertexAttribute { location: 1, format: vk::Format::R32G32B32A32_SFLOAT, offset: 8 },
        ],
        vk::Format::R8G8B8A8_UNORM,
        1,
    )
    .unwrap()
}

fn target(device: &Device, name: &str) -> (Image, ImageView) {
    let usage = ImageUsage::COLOR_ATTACHMENT | ImageUsage::COPY_SRC;
    let image =
        device.create_image(&ImageDesc::new_2d(name, Format::R8G8B8A8Unorm, SIZE, SIZE, usage)).unwrap();
    let view = image.create_view(0..1).unwrap();
    (image, view)
}

/// Records the tracker's barriers that put `image` (tracked from `UNDEFINED`) in
/// `COLOR_ATTACHMENT_OPTIMAL`, its contents discarded.
fn to_attachment(
    rec: &mut residency_vulkan::recording::Recording<'_>,
    tracker: &mut ResourceTracker,
    image: &Image,
) {
    let device = rec.device();
    let mut batch = tracker.batch(device.index(), device.universal_queue().family());
    batch.declare_discard(image.resource_id(), Region::Whole, Use::ColorAttachmentWrite).unwrap();
    let flush = batch.flush();
    tracker.record(rec, &flush.barriers).unwrap();
}

#[test]
fn misuse_sampling_an_image_still_undefined_is_a_typed_error_and_submits_nothing() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let context = CommandContext::new(device, "misuse layouts").unwrap();
        let s = sampling(device, "misuse undefined sampled", vk::ImageLayout::GENERAL);
        let mut recorded = 0;
        let submitted = context.submit(&[], |rec| {
            s.program.dispatch(rec, &s.set, &push(), [1, 1, 1]).unwrap();
            recorded = rec.helper_commands();
        });
        assert_eq!(recorded, 1, "the dispatch itself is recorded: the layout is checked at submission");
        assert_layout_error(
            submitted,
            "misuse undefined sampled",
            vk::ImageLayout::GENERAL,
            vk::ImageLayout::UNDEFINED,
        );
        assert_eq!(s.image.layout(0, 0), Some(vk::ImageLayout::UNDEFINED), "nothing was submitted");
    });
}

#[test]
fn misuse_sampling_an_image_left_in_transfer_dst_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let context = CommandContext::new(device, "misuse layouts").unwrap();
        let s = sampling(device, "misuse transfer dst sampled", vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL);
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let id = tracker.track_image(&s.image, vk::ImageLayout::UNDEFINED).unwrap();
        let family = device.universal_queue().family();
        let first = context
            .submit(&[], |rec| {
                let mut batch = tracker.batch(device.index(), family);
                batch.declare_discard(id, Region::Whole, Use::TransferDst).unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
            })
            .unwrap();
        assert_eq!(s.image.layout(0, 0), Some(vk::ImageLayout::TRANSFER_DST_OPTIMAL));
        // The sampling forgets the transition to SHADER_READ_ONLY_OPTIMAL.
        let submitted =
            context.submit(&[], |rec| s.program.dispatch(rec, &s.set, &push(), [1, 1, 1]).unwrap());
        assert_layout_error(
            submitted,
            "misuse transfer dst sampled",
            vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL,
            vk::ImageLayout::TRANSFER_DST_OPTIMAL,
        );
        // The same, with the transition declared: submits.
        let second = context
            .submit(&[], |rec| {
                let mut batch = tracker.batch(device.index(), family);
                batch.declare(id, Region::Whole, Use::SampledRead(PipelineStages::COMPUTE_SHADER)).unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
                s.program.dispatch(rec, &s.set, &push(), [1, 1, 1]).unwrap();
            })
            .unwrap();
        assert_eq!(s.image.layout(0, 0), Some(vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL));
        context.wait(first).unwrap();
        context.wait(second).unwrap();
    });
}

#[test]
fn misuse_rendering_into_an_image_never_transitioned_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let context = CommandContext::new(device, "misuse layouts").unwrap();
        let program = quads(device);
        let (image, view) = target(device, "misuse untransitioned target");
        let submitted = context.submit(&[], |rec| {
            program.render(rec, &view, [SIZE, SIZE], [0.0; 4], |_| {}).unwrap();
        });
        assert_layout_error(
            submitted,
            "misuse untransitioned target",
            vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
            vk::ImageLayout::UNDEFINED,
        );
        assert_eq!(image.layout(0, 0), Some(vk::ImageLayout::UNDEFINED));
    });
}

#[test]
fn misuse_free_a_tracker_transition_then_a_matching_render_in_one_recording_submits() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let context = CommandContext::new(device, "misuse layouts").unwrap();
        let program = quads(device);
        let (image, view) = target(device, "misuse one recording target");
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap();
        let submission = context
            .submit(&[], |rec| {
                to_attachment(rec, &mut tracker, &image);
                program.render(rec, &view, [SIZE, SIZE], [0.0; 4], |_| {}).unwrap();
            })
            .unwrap();
        assert_eq!(image.layout(0, 0), Some(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL));
        context.wait(submission).unwrap();
    });
}

#[test]
fn misuse_free_a_transition_then_a_use_in_two_submissions_in_order_submits() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let context = CommandContext::new(device, "misuse layouts").unwrap();
        let other = CommandContext::new(device, "misuse layouts other context").unwrap();
        let program = quads(device);
        let (image, view) = target(device, "misuse two submissions target");
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap();
        let first = context.submit(&[], |rec| to_attachment(rec, &mut tracker, &image)).unwrap();
        // Another command context: layouts follow the queue's submission order, not the context.
        let second = other
            .submit(&[first.gpu_use()], |rec| {
                program.render(rec, &view, [SIZE, SIZE], [0.0; 4], |_| {}).unwrap();
            })
            .unwrap();
        other.wait(second).unwrap();
        context.wait(first).unwrap();
    });
}

#[test]
fn misuse_a_use_submitted_before_its_transition_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let context = CommandContext::new(device, "misuse layouts").unwrap();
        let program = quads(device);
        let (image, view) = target(device, "misuse reversed target");
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap();
        let render = |rec: &mut residency_vulkan::recording::Recording<'_>| {
            program.render(rec, &view, [SIZE, SIZE], [0.0; 4], |_| {}).unwrap();
        };
        assert_layout_error(
            context.submit(&[], render),
            "misuse reversed target",
            vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
            vk::ImageLayout::UNDEFINED,
        );
        let transition = context.submit(&[], |rec| to_attachment(rec, &mut tracker, &image)).unwrap();
        // Now in order: the render submits.
        let rendered = context.submit(&[], render).unwrap();
        context.wait(transition).unwrap();
        context.wait(rendered).unwrap();
    });
}

#[test]
fn misuse_a_tracker_told_a_wrong_initial_layout_is_a_typed_error_at_submission() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let context = CommandContext::new(device, "misuse layouts").unwrap();
        let (image, _view) = target(device, "misuse wrong initial target");
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        // The image is UNDEFINED; the tracker is told GENERAL, so its barrier reads from GENERAL.
        let id = tracker.track_image(&image, vk::ImageLayout::GENERAL).unwrap();
        let submitted = context.submit(&[], |rec| {
            let mut batch = tracker.batch(device.index(), device.universal_queue().family());
            batch.declare(id, Region::Whole, Use::TransferSrc).unwrap();
            let flush = batch.flush();
            tracker.record(rec, &flush.barriers).unwrap();
        });
        assert_layout_error(
            submitted,
            "misuse wrong initial target",
            vk::ImageLayout::GENERAL,
            vk::ImageLayout::UNDEFINED,
        );
    });
}

#[test]
fn misuse_copying_an_image_in_the_wrong_layout_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let context = CommandContext::new(device, "misuse layouts").unwrap();
        let (image, _view) = target(device, "misuse copy source");
        device.discard_to_general(&[&image]).unwrap();
        assert_eq!(image.layout(0, 0), Some(vk::ImageLayout::GENERAL));
        let pixels = device
            .create_buffer(
                &BufferDesc::new("misuse copy pixels", u64::from(SIZE * SIZE * 4), BufferUsage::COPY_DST)
                    .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let submitted = context.submit(&[], |rec| {
            rec.copy_image_to_buffer(&image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL, &pixels).unwrap();
        });
        assert_layout_error(
            submitted,
            "misuse copy source",
            vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
            vk::ImageLayout::GENERAL,
        );
        // Device::read_image checks the same way.
        assert!(matches!(
            device.read_image(&image, vk::ImageLayout::TRANSFER_SRC_OPTIMAL),
            Err(residency_vulkan::ReadBackError::Vulkan(VulkanError::ImageLayout { .. }))
        ));
        // In its real layout the copy submits.
        let copied = context
            .submit(&[], |rec| rec.copy_image_to_buffer(&image, vk::ImageLayout::GENERAL, &pixels).unwrap())
            .unwrap();
        context.wait(copied).unwrap();
    });
}

#[test]
fn misuse_a_use_contradicting_an_earlier_command_of_the_same_recording_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let context = CommandContext::new(device, "misuse layouts").unwrap();
        let s = sampling(device, "misuse same recording sampled", vk::ImageLayout::GENERAL);
        device.discard_to_general(&[&s.image]).unwrap();
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let id = tracker.track_image(&s.image, vk::ImageLayout::GENERAL).unwrap();
        let pixels = device
            .create_buffer(
                &BufferDesc::new(
                    "misuse same recording pixels",
                    u64::from(SIZE * SIZE * 4),
                    BufferUsage::COPY_DST,
                )
                .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let mut refusals = Vec::new();
        let submission = context
            .submit(&[], |rec| {
                let mut batch = tracker.batch(device.index(), device.universal_queue().family());
                batch.declare(id, Region::Whole, Use::TransferDst).unwrap();
                let flush = batch.flush();
                tracker.record(rec, &flush.barriers).unwrap();
                let recorded = rec.helper_commands();
                // Sampled, copied from and transitioned as if it were still in GENERAL right after
                // the barrier left it in TRANSFER_DST_OPTIMAL: each refused at once, nothing recorded.
                refusals
                    .push(format!("{:?}", s.program.dispatch(rec, &s.set, &push(), [1, 1, 1]).unwrap_err()));
                let copy = rec.copy_image_to_buffer(&s.image, vk::ImageLayout::GENERAL, &pixels);
                refusals.push(format!("{:?}", copy.unwrap_err()));
                let mut stale = ResourceTracker::new(TrackerOptions::default());
                let stale_id = stale.track_image(&s.image, vk::ImageLayout::GENERAL).unwrap();
                let mut batch = stale.batch(device.index(), device.universal_queue().family());
                batch.declare(stale_id, Region::Whole, Use::TransferSrc).unwrap();
                let flush = batch.flush();
                refusals.push(format!("{:?}", stale.record(rec, &flush.barriers).unwrap_err()));
                assert_eq!(rec.helper_commands(), recorded, "nothing recorded after the barrier");
            })
            .unwrap();
        assert_eq!(refusals.len(), 3);
        for refusal in &refusals {
            assert!(
                refusal.contains("ImageLayout") && refusal.contains("TRANSFER_DST_OPTIMAL"),
                "a layout refusal naming what the barrier left: {refusal}"
            );
        }
        context.wait(submission).unwrap();
        assert_eq!(s.image.layout(0, 0), Some(vk::ImageLayout::TRANSFER_DST_OPTIMAL));
    });
}

#[test]
fn misuse_an_upload_into_an_image_not_in_its_region_layout_is_a_typed_error() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let uploader = Uploader::new(device, "misuse layouts uploader", 1 << 16).unwrap();
        let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
        let image = device
            .create_image(&ImageDesc::new_2d("misuse upload image", Format::R8G8B8A8Unorm, SIZE, SIZE, usage))
            .unwrap();
        let data = vec![7u8; (SIZE * SIZE * 4) as usize];
        let region = ImageRegion::new(&image, 0, [0; 3], [SIZE, SIZE, 1]);
        // Not a copy-destination layout: refused when queued.
        assert!(matches!(
            uploader.write_image(&region.with_layout(vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL), &data),
            Err(UploadError::Layout { .. })
        ));
        // GENERAL, but the image is still UNDEFINED: refused at submission.
        uploader.write_image(&region, &data).unwrap();
        match uploader.flush() {
            Err(UploadError::Vulkan(VulkanError::ImageLayout { expected, actual, .. })) => {
                assert_eq!((expected, actual), (vk::ImageLayout::GENERAL, vk::ImageLayout::UNDEFINED));
            }
            other => panic!("expected a layout error, got {other:?}"),
        }
        // Once in GENERAL, the upload goes through.
        device.discard_to_general(&[&image]).unwrap();
        uploader.write_image(&region, &data).unwrap();
        // A second copy of the same batch into the same subresource in another layout: refused.
        match uploader.write_image(&region.with_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL), &data) {
            Err(UploadError::Vulkan(VulkanError::ImageLayout { expected, actual, .. })) => {
                assert_eq!(
                    (expected, actual),
                    (vk::ImageLayout::TRANSFER_DST_OPTIMAL, vk::ImageLayout::GENERAL)
                );
            }
            other => panic!("expected a layout error, got {other:?}"),
        }
        uploader.wait_idle().unwrap();
    });
}

#[test]
fn misuse_a_renderers_own_command_buffer_is_checked_by_submit_checked() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let program = quads(device);
        let (image, view) = target(device, "misuse own command buffer target");
        let (pool, cmd) = common::own_command_buffer(device);
        let fence_info = vk::FenceCreateInfo::default();
        // SAFETY: valid device.
        let fence = unsafe { device.raw().create_fence(&fence_info, None) }.unwrap();
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        tracker.track_image(&image, vk::ImageLayout::UNDEFINED).unwrap();
        let mut submit_called = false;
        // Twice: first rendering without the transition (refused, `submit` not called), then with it.
        for transition in [false, true] {
            // SAFETY: the command buffer is not pending (never submitted, or its fence waited below).
            unsafe {
                device.raw().reset_command_buffer(cmd, vk::CommandBufferResetFlags::empty()).unwrap();
                device.raw().begin_command_buffer(cmd, &begin).unwrap();
            }
            // SAFETY: `cmd` is a primary command buffer of this device's universal family, recording
            // outside a render pass until `submit_checked` ends it; nothing else records into it;
            // the fence is waited for before anything it used is dropped; its layouts are checked
            // by `submit_checked`.
            let mut rec = unsafe { residency_vulkan::recording::Recording::from_raw(device, cmd) };
            if transition {
                to_attachment(&mut rec, &mut tracker, &image);
            }
            program.render(&mut rec, &view, [SIZE, SIZE], [0.0; 4], |_| {}).unwrap();
            let submitted = rec.submit_checked(|queue, waits| {
                submit_called = true;
                let buffers = [vk::CommandBufferSubmitInfo::default().command_buffer(cmd)];
                let submit =
                    vk::SubmitInfo2::default().command_buffer_infos(&buffers).wait_semaphore_infos(waits);
                // SAFETY: recording began above; the queue is the locked universal queue; the
                // fence is unsignalled.
                unsafe {
                    device.raw().end_command_buffer(cmd)?;
                    device.raw().queue_submit2(queue, &[submit], fence)
                }
            });
            if transition {
                submitted.unwrap();
                assert!(submit_called);
            } else {
                assert_layout_error(
                    submitted,
                    "misuse own command buffer target",
                    vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL,
                    vk::ImageLayout::UNDEFINED,
                );
                assert!(!submit_called, "nothing submitted");
            }
        }
        assert_eq!(image.layout(0, 0), Some(vk::ImageLayout::COLOR_ATTACHMENT_OPTIMAL));
        // SAFETY: the fence belongs to this device and was submitted once above; after the wait
        // nothing of the pool is in use.
        unsafe {
            device.raw().wait_for_fences(&[fence], true, u64::MAX).unwrap();
            device.raw().destroy_fence(fence, None);
            device.raw().destroy_command_pool(pool, None);
        }
    });
}

#[test]
fn misuse_a_set_showing_one_subresource_in_two_layouts_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // One image seen through two views (a float one for binding 0's `sampler2D`, a uint one
        // for binding 1's `usampler2D`), in two layouts.
        let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
        let formats = [vk::Format::R8G8B8A8_UNORM, vk::Format::R32_UINT];
        let image = device
            .create_image(
                &ImageDesc::new_2d("misuse two layouts", Format::R8G8B8A8Unorm, SIZE, SIZE, usage)
                    .mutable_format(&formats),
            )
            .unwrap();
        let view = image.create_view(0..1).unwrap();
        let as_uint =
            image.create_view_as(&ImageViewDesc::of(&image).with_format(vk::Format::R32_UINT)).unwrap();
        let sampler = device.create_sampler(Filter::Nearest).unwrap();
        let out = results(device, "misuse two layouts out");
        let program =
            ComputeProgram::new(device, "misuse two layouts program", &shaders::SPARSE_FALLBACK, 32).unwrap();
        let refused = program.descriptor_set(&[
            Binding::sampled(&view, &sampler, vk::ImageLayout::GENERAL),
            Binding::sampled(&as_uint, &sampler, vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL),
            Binding::Buffer(&out),
            Binding::Buffer(&out),
        ]);
        assert!(matches!(refused, Err(BindingError::Invalid { binding: 1, .. })), "{refused:?}");
    });
}

#[test]
fn misuse_a_sparse_image_is_bound_and_uploaded_to_in_general_only() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = SparseTilePool::new(
            std::sync::Arc::clone(device),
            TilePoolDesc::default().with_name("misuse sparse tiles"),
        )
        .unwrap();
        let image = SparseImage::new(
            &pool,
            "misuse sparse",
            &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256),
            false,
        )
        .unwrap();
        let sampler = device.create_sampler(Filter::Nearest).unwrap();
        let out = results(device, "misuse sparse out");
        let program =
            ComputeProgram::new(device, "misuse sparse program", &shaders::SAMPLE_TEXELS, 1).unwrap();
        let refused = program.descriptor_set(&[
            Binding::sampled(&image, &sampler, vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL),
            Binding::Buffer(&out),
        ]);
        assert!(matches!(refused, Err(BindingError::Invalid { binding: 0, .. })), "{refused:?}");
        program
            .descriptor_set(&[
                Binding::sampled(&image, &sampler, vk::ImageLayout::GENERAL),
                Binding::Buffer(&out),
            ])
            .unwrap();
        let uploader = Uploader::new(device, "misuse sparse uploader", 1 << 16).unwrap();
        let region =
            ImageRegion::new(&image, 0, [0; 3], [4, 4, 1]).with_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL);
        assert!(matches!(uploader.write_image(&region, &[0; 64]), Err(UploadError::Layout { .. })));
    });
}

/// A batch dropped at submission (an image not in its region's layout: a retry would fail the
/// same way) gives its ring space back: many such drops never leave the ring full with nothing in
/// flight, which made the next write fail with `DeviceLost` on a healthy device.
#[test]
fn misuse_uploads_dropped_for_a_layout_give_their_ring_space_back() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let uploader = Uploader::new(device, "misuse dropped batches uploader", 16 << 10).unwrap();
        let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST | ImageUsage::COPY_SRC;
        let image = device
            .create_image(&ImageDesc::new_2d("misuse dropped image", Format::R8G8B8A8Unorm, 32, 32, usage))
            .unwrap();
        let data = vec![9u8; 32 * 32 * 4];
        let region = ImageRegion::new(&image, 0, [0; 3], [32, 32, 1]);
        // Four ring-fulls of writes into an image still UNDEFINED: each refused at submission.
        for round in 0..16 {
            uploader.write_image(&region, &data).unwrap_or_else(|e| panic!("round {round}: {e:?}"));
            assert!(
                matches!(uploader.flush(), Err(UploadError::Vulkan(VulkanError::ImageLayout { .. }))),
                "round {round}"
            );
        }
        // The uploader still works.
        device.discard_to_general(&[&image]).unwrap();
        uploader.write_image(&region, &data).unwrap();
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
        let back = device.read_image(&image, vk::ImageLayout::GENERAL).unwrap();
        assert!(back.iter().all(|&b| b == 9));
    });
}
