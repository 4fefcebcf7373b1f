//! Residency's `Streamer` driven from a wgpu frame loop: the streamer's part of each frame
//! recorded into wgpu command buffers of its own, submitted in one batch with the renderer's.
//!
//! wgpu 30 leaves two facts that decide the design:
//!
//! - a sampled binding's descriptor names `SHADER_READ_ONLY_OPTIMAL` for a colour texture
//!   (wgpu-hal's `derive_image_layout(RESOURCE)`), whatever else the texture is bound as, so a
//!   wgpu bind group cannot sample an image that stays in `GENERAL`, where residency keeps the
//!   streamer's images (the copies of the streamer's frames write them there);
//! - an encoder used through `as_hal_mut` takes no wgpu commands afterwards (wgpu-core's
//!   `EncodingApi`: raw and wgpu encoding do not mix in one encoder).
//!
//! So a frame is three parts in one `vkQueueSubmit`, under residency's universal queue lock:
//! a raw encoder with the streamer's part (`FrameBindings::record` through
//! `Recording::from_raw`: bind waits, feedback reset, staged copies, barriers) and then a
//! transition of the streamer's images `GENERAL → SHADER_READ_ONLY_OPTIMAL`; the renderer's wgpu
//! command buffers, which sample them through textures wgpu believes to be in that layout
//! (state `RESOURCE`, never changed: wgpu records no barrier of its own for them); and a raw
//! encoder that transitions them back to `GENERAL`. Outside the submission, the images are in
//! the layouts residency recorded, so the streamer's own submissions (priming, abandoned frames)
//! find them where it expects.

use crate::open::Bridge;
use crate::{FrameTimeline, OpenError, Result};
use ash::vk;
use residency_vulkan::recording::Recording;
use residency_vulkan::streaming::{FrameBindings, TextureBinding, TextureViews};
use residency_vulkan::GpuUse;
use std::sync::Arc;
use wgpu::hal::api::Vulkan;

/// The streamer's part of one frame in wgpu command buffers ([`Bridge::record_streamer_part`]),
/// to submit with [`Bridge::submit_streamer_frame`]. Dropped without that, it declares nothing
/// (the streamer then queues the frame's copies again: `Streamer::abandon_frame`).
pub struct StreamerPart<'a> {
    rec: Recording<'a>,
    before: wgpu::CommandEncoder,
    after: wgpu::CommandEncoder,
}

impl std::fmt::Debug for StreamerPart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamerPart").field("helper_commands", &self.rec.helper_commands()).finish()
    }
}

/// One image of a streamer texture: its handle, subresources and wgpu shape.
struct SharedImage {
    raw: vk::Image,
    range: vk::ImageSubresourceRange,
    extent: [u32; 2],
    format: vk::Format,
}

/// The images a texture's views show (the sparse image and its min-LOD map, or the atlas and the
/// indirection texture).
fn shared_images(binding: &TextureBinding<'_>) -> [SharedImage; 2] {
    let of_view = |view: &residency_vulkan::ImageView| {
        let (mips, layers) = (view.mips(), view.layers());
        SharedImage {
            raw: view.raw_image(),
            range: vk::ImageSubresourceRange {
                aspect_mask: view.aspect(),
                base_mip_level: mips.start,
                level_count: mips.end - mips.start,
                base_array_layer: layers.start,
                layer_count: layers.end - layers.start,
            },
            extent: [view.extent()[0], view.extent()[1]],
            format: view.vk_format(),
        }
    };
    match binding.views {
        TextureViews::Hardware { image, min_lod } => {
            let d = image.desc();
            let sparse = SharedImage {
                raw: image.raw(),
                range: vk::ImageSubresourceRange {
                    aspect_mask: vk::ImageAspectFlags::COLOR,
                    base_mip_level: 0,
                    level_count: d.mip_levels,
                    base_array_layer: 0,
                    layer_count: d.array_layers,
                },
                extent: [d.width, d.height],
                format: residency_vulkan::format_map::vk_format(d.format),
            };
            [sparse, of_view(min_lod)]
        }
        TextureViews::Software { atlas, indirection } => [of_view(atlas), of_view(indirection)],
    }
}

/// The wgpu format of the streamer's image formats.
fn wgpu_format(format: vk::Format) -> Option<wgpu::TextureFormat> {
    Some(match format {
        vk::Format::R8G8B8A8_UNORM => wgpu::TextureFormat::Rgba8Unorm,
        vk::Format::R8G8B8A8_SRGB => wgpu::TextureFormat::Rgba8UnormSrgb,
        vk::Format::B8G8R8A8_UNORM => wgpu::TextureFormat::Bgra8Unorm,
        vk::Format::R8_UINT => wgpu::TextureFormat::R8Uint,
        vk::Format::R16_UINT => wgpu::TextureFormat::R16Uint,
        vk::Format::R32_UINT => wgpu::TextureFormat::R32Uint,
        vk::Format::R8_UNORM => wgpu::TextureFormat::R8Unorm,
        _ => return None,
    })
}

impl Bridge {
    /// A wgpu encoder with its raw command buffer begun.
    fn raw_encoder(&self, label: &str) -> Result<(wgpu::CommandEncoder, vk::CommandBuffer)> {
        let mut encoder =
            self.device().create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) });
        // SAFETY: only the handle of the encoder's command buffer is taken (wgpu begins it in
        // `as_hal_mut`), to be recorded into by residency; the encoder is not touched again
        // until `finish`, which ends it; nothing destroys it.
        let raw = unsafe { encoder.as_hal_mut::<Vulkan, _, _>(|hal| hal.map(|hal| hal.raw_handle())) };
        Ok((encoder, raw.ok_or(OpenError::NotVulkan)?))
    }

    /// Records an image barrier over every image of `bindings`' textures, `from` → `to`.
    fn transition(
        &self,
        cmd: vk::CommandBuffer,
        bindings: &FrameBindings<'_>,
        from: vk::ImageLayout,
        to: vk::ImageLayout,
    ) {
        use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
        // Once per image: on the software path the textures share the streamer's atlas.
        let mut seen = std::collections::HashSet::new();
        let barriers: Vec<_> = bindings
            .textures()
            .iter()
            .flat_map(shared_images)
            .filter(|image| seen.insert(image.raw))
            .map(|image| {
                vk::ImageMemoryBarrier2::default()
                    .src_stage_mask(S::ALL_COMMANDS)
                    .src_access_mask(A::MEMORY_WRITE)
                    .dst_stage_mask(S::ALL_COMMANDS)
                    .dst_access_mask(A::MEMORY_READ | A::MEMORY_WRITE)
                    .old_layout(from)
                    .new_layout(to)
                    .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                    .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                    .image(image.raw)
                    .subresource_range(image.range)
            })
            .collect();
        if barriers.is_empty() {
            return;
        }
        let dependency = vk::DependencyInfo::default().image_memory_barriers(&barriers);
        // SAFETY: `cmd` is an open command buffer of this device (a raw wgpu encoder's), outside
        // a render pass; the images are the streamer's, alive while recording (the bindings
        // borrow the streamer) and until the part's submission completes (`record_streamer_part`
        // keeps them in the part's recording: `FrameBindings::keep_textures`), and in `from` when
        // the barrier runs: residency records them in
        // `GENERAL` outside the frame's submission, and the frame's first part leaves them in
        // `SHADER_READ_ONLY_OPTIMAL` until its last part.
        unsafe { self.residency().raw().cmd_pipeline_barrier2(cmd, &dependency) };
    }

    /// Records the streamer's part of a frame ([`FrameBindings::record`]) into a wgpu command
    /// buffer of its own, followed by the transition of the streamer's images to
    /// `SHADER_READ_ONLY_OPTIMAL` (where the renderer's wgpu bind groups sample them), and a
    /// second one that takes them back to `GENERAL`. Refused as `FrameBindings::record` is.
    pub fn record_streamer_part<'a>(&'a self, bindings: &FrameBindings<'_>) -> Result<StreamerPart<'a>> {
        let (before, before_cmd) = self.raw_encoder("streamer part")?;
        let (after, after_cmd) = self.raw_encoder("streamer images back to GENERAL")?;
        // SAFETY: `before_cmd` is a primary command buffer of this device on wgpu's queue family
        // (residency's universal family, `open`), begun by wgpu and recorded into by nothing
        // else; it is submitted only through `submit_streamer_frame`'s `PendingFrame` (the
        // `StreamerPart` keeps its encoder until then; dropped, it is never submitted) and wgpu
        // resets it only once that submission completed. The transition recorded after the
        // helpers' commands leaves the streamer's images in `SHADER_READ_ONLY_OPTIMAL`, not the
        // `GENERAL` the helpers noted, but only within the one submission that carries it: the
        // `after` command buffer, last in that same submission (`submit_streamer_frame` submits
        // both or neither), takes them back before any other work on the queue.
        let mut rec = unsafe { Recording::from_raw(self.residency(), before_cmd) };
        bindings.record(&mut rec, |_| ())?;
        // The transitions below name every texture's images outside the helpers: the part holds
        // them until its submission completes, so a texture removed (or the streamer dropped)
        // before `submit_streamer_frame` is not destroyed under it.
        bindings.keep_textures(&mut rec)?;
        let (general, read_only) = (vk::ImageLayout::GENERAL, vk::ImageLayout::SHADER_READ_ONLY_OPTIMAL);
        self.transition(before_cmd, bindings, general, read_only);
        self.transition(after_cmd, bindings, read_only, general);
        if bindings.feedback_active && bindings.feedback.is_some() {
            // The renderer's feedback writes, for the streamer's host reads (what `record` puts
            // after its `draw`, which here runs in the renderer's wgpu command buffers).
            let barrier = [vk::MemoryBarrier2::default()
                .src_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
                .src_access_mask(vk::AccessFlags2::SHADER_WRITE)
                .dst_stage_mask(vk::PipelineStageFlags2::HOST)
                .dst_access_mask(vk::AccessFlags2::HOST_READ)];
            let dependency = vk::DependencyInfo::default().memory_barriers(&barrier);
            // SAFETY: an open command buffer of this device (the raw encoder's), outside a render
            // pass; a memory barrier names no object.
            unsafe { self.residency().raw().cmd_pipeline_barrier2(after_cmd, &dependency) };
        }
        Ok(StreamerPart { rec, before, after })
    }

    /// Submits a frame: the streamer's part, `buffers` (the renderer's wgpu work, which samples
    /// the streamer's textures and writes feedback) and the transition back, in one submission
    /// that waits for what the streamer's part needs (its sparse binds, residency's submissions)
    /// and signals `timeline` at its next value. Returns the point the frame ends at: pass it to
    /// `Streamer::end_frame`. Refused with nothing submitted where `Recording::finish_unended`
    /// refuses.
    pub fn submit_streamer_frame<I: IntoIterator<Item = wgpu::CommandBuffer>>(
        &self,
        part: StreamerPart<'_>,
        buffers: I,
        timeline: &FrameTimeline,
    ) -> Result<(wgpu::SubmissionIndex, GpuUse)> {
        if !Arc::ptr_eq(timeline.device(), self.residency()) {
            return Err(OpenError::ForeignTimeline);
        }
        let _guard = self.submit_guard()?;
        let StreamerPart { rec, before, after } = part;
        // wgpu ends the command buffers here.
        let (before, after) = (before.finish(), after.finish());
        let value = timeline.last() + 1;
        // Locks residency's universal queue (wgpu's, where it is shared) until `submitted`.
        let pending = rec.finish_unended(timeline.timeline(), value)?;
        // SAFETY: the hal queue is only used to stage waits and a signal on timeline semaphores
        // of this device, which outlive the submission.
        let queue = unsafe { self.queue_ref().as_hal::<Vulkan>() }.ok_or(OpenError::NotVulkan)?;
        for wait in pending.waits() {
            queue.add_wait_semaphore(wait.semaphore, Some(wait.value), vk::PipelineStageFlags::ALL_COMMANDS);
        }
        let signal = pending.signal();
        queue.add_signal_semaphore(signal.semaphore, Some(signal.value));
        drop(queue);
        let staged = crate::sync::Staged::new(self.queue_ref(), signal.semaphore);
        let index =
            self.queue_ref().submit(std::iter::once(before).chain(buffers).chain(std::iter::once(after)));
        if staged.take_back() {
            return Err(OpenError::Device("wgpu submitted nothing to signal the timeline".into()));
        }
        timeline.set_last(value);
        // SAFETY: the streamer part's command buffer was submitted (wgpu consumed the staged
        // signal in this submission), in a batch that waits for every entry of `waits` and
        // signals the timeline at `value`, above every earlier value.
        let point = unsafe { pending.submitted() };
        Ok((index, point))
    }

    /// wgpu buffers over a frame's feedback buffer and image table (`None` while the streamer
    /// has no texture), to bind as storage buffers (read-write and read-only) in frames
    /// submitted through [`Bridge::submit_streamer_frame`]. wgpu neither owns nor frees them.
    ///
    /// # Safety
    /// As [`Bridge::streamer_textures`]: used only in frames submitted through
    /// [`Bridge::submit_streamer_frame`] whose `FrameBindings` have the same `slot` and
    /// `generation` as `bindings`', and dropped before the streamer.
    pub unsafe fn streamer_buffers(&self, bindings: &FrameBindings<'_>) -> Result<Option<[wgpu::Buffer; 2]>> {
        let (Some(feedback), Some(table)) = (bindings.feedback, bindings.image_table) else {
            return Ok(None);
        };
        let wrap = |buffer: &residency_vulkan::Buffer| -> Result<wgpu::Buffer> {
            if buffer.placement() == residency_vulkan::BufferPlacement::Range {
                return Err(OpenError::Device(format!("{} is a range of a pool page", buffer.name())));
            }
            // SAFETY: the buffer's own VkBuffer (not a range, checked above) of `size()` bytes
            // with storage usage (the streamer makes it so); wgpu never maps nor destroys it (a
            // drop callback is given) and uses it only as the caller's contract says.
            let hal = unsafe {
                wgpu::hal::vulkan::Buffer::from_raw_externally_owned(buffer.raw(), Box::new(|| {}))
            };
            let desc = wgpu::BufferDescriptor {
                label: Some(buffer.name()),
                size: buffer.size(),
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            };
            // SAFETY: the hal buffer is this device's, respects `desc`, and is initialized (the
            // streamer writes the feedback buffer before each frame, the table at creation).
            Ok(unsafe { self.device().create_buffer_from_hal::<Vulkan>(hal, &desc) })
        };
        Ok(Some([wrap(feedback)?, wrap(table)?]))
    }

    /// wgpu textures over the images of a streamer texture (the sparse image and its min-LOD
    /// map, or the atlas and the indirection texture), to bind as sampled textures in frames
    /// submitted through [`Bridge::submit_streamer_frame`], where they are in
    /// `SHADER_READ_ONLY_OPTIMAL`. wgpu neither owns nor transitions them.
    ///
    /// # Safety
    /// The textures (and bind groups and views of them) are used only in frames submitted
    /// through [`Bridge::submit_streamer_frame`] whose `FrameBindings` have the same
    /// `generation` as `binding`'s, and are dropped before the streamer (whose images they show)
    /// is; the frames' ends are passed to `Streamer::end_frame`, so the streamer retires the
    /// images only after wgpu's work with them.
    pub unsafe fn streamer_textures(&self, binding: &TextureBinding<'_>) -> Result<[wgpu::Texture; 2]> {
        let wrap = |image: SharedImage| -> Result<wgpu::Texture> {
            let format = wgpu_format(image.format)
                .ok_or_else(|| OpenError::Device(format!("no wgpu format for {:?}", image.format)))?;
            let size = wgpu::Extent3d {
                width: image.extent[0],
                height: image.extent[1],
                depth_or_array_layers: image.range.layer_count,
            };
            let desc = wgpu::TextureDescriptor {
                label: Some(binding.name),
                size,
                mip_level_count: image.range.level_count,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format,
                usage: wgpu::TextureUsages::TEXTURE_BINDING,
                view_formats: &[],
            };
            // SAFETY: the streamer's image, made with the shape and format of `desc` (its views
            // show all of it) and sampled usage; wgpu never destroys it (a callback is given)
            // and uses it only as the caller's contract says: in frames of
            // `submit_streamer_frame`, whose transitions put it in `SHADER_READ_ONLY_OPTIMAL`
            // (the state `RESOURCE`) for the renderer's buffers.
            Ok(unsafe { self.texture_over(image.raw, &desc, Box::new(|| {}), wgpu::TextureUses::RESOURCE) })
        };
        let [a, b] = shared_images(binding);
        Ok([wrap(a)?, wrap(b)?])
    }
}
