//! Small command-recording helpers for callers that keep their own command buffers (a frame ring)
//! and want no `unsafe` of their own: a global memory barrier and a whole-image read-back copy.

use crate::buffer::Buffer;
use crate::device::Device;
use crate::format_map::aspect;
use crate::image::Image;
use crate::upload::ImageRegion;
use ash::vk;

/// One global memory dependency: `src` stages and accesses before, `dst` stages and accesses after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryDependency {
    /// Stages whose work comes first.
    pub src_stages: vk::PipelineStageFlags2,
    /// Their writes made available.
    pub src_access: vk::AccessFlags2,
    /// Stages that wait.
    pub dst_stages: vk::PipelineStageFlags2,
    /// Their accesses that see the writes.
    pub dst_access: vk::AccessFlags2,
}

/// A copy into a buffer too small for the image's mip 0.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{buffer} holds {size} bytes; mip 0 of {image} needs {needed}")]
pub struct CopyTooSmall {
    /// The image's name.
    pub image: String,
    /// The buffer's name.
    pub buffer: String,
    /// The buffer's size.
    pub size: u64,
    /// Bytes of the image's mip 0.
    pub needed: u64,
}

impl Device {
    /// Records one global memory barrier into `cmd`, a command buffer of this device that is
    /// recording.
    pub fn cmd_memory_barrier(&self, cmd: vk::CommandBuffer, dependency: MemoryDependency) {
        let barrier = [vk::MemoryBarrier2::default()
            .src_stage_mask(dependency.src_stages)
            .src_access_mask(dependency.src_access)
            .dst_stage_mask(dependency.dst_stages)
            .dst_access_mask(dependency.dst_access)];
        // SAFETY: `cmd` is recording on this device (the caller's contract, as for every `cmd_*`
        // helper of this crate); the barrier lives until the call returns.
        unsafe { self.raw().cmd_pipeline_barrier2(cmd, &vk::DependencyInfo::default().memory_barriers(&barrier)) };
    }

    /// Records a copy of mip 0, layer 0 of `image` (in `layout`) into the start of `buffer`,
    /// tightly packed; `cmd` is a recording command buffer of this device. The caller orders it
    /// against the image's writes and the host's read with barriers.
    pub fn cmd_copy_image_to_buffer(
        &self,
        cmd: vk::CommandBuffer,
        image: &Image,
        layout: vk::ImageLayout,
        buffer: &Buffer,
    ) -> Result<(), CopyTooSmall> {
        let d = image.desc();
        let needed = d.format.region_bytes(d.extent[0], d.extent[1], d.extent[2]);
        if buffer.size() < needed {
            return Err(CopyTooSmall {
                image: d.name.clone(),
                buffer: buffer.name().to_owned(),
                size: buffer.size(),
                needed,
            });
        }
        let copy = ImageRegion {
            image: image.raw(),
            layout,
            aspect: aspect(d.format),
            mip: 0,
            layer: 0,
            offset: [0; 3],
            extent: d.extent,
        }
        .buffer_image_copy(buffer.offset());
        // SAFETY: `cmd` is recording on this device; the image and buffer are live objects of this
        // device (borrowed for the call; the caller keeps them alive until the work completes) and
        // the buffer holds the whole mip (checked above).
        unsafe { self.raw().cmd_copy_image_to_buffer(cmd, image.raw(), layout, buffer.raw(), &[copy]) };
        Ok(())
    }
}
