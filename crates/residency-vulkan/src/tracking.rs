//! State tracking on real resources: the core's [`StateTracker`] and barrier batcher, with the
//! Vulkan handles its barriers name.
//!
//! A placed buffer (unknown-flags pool, general allocator, committed) is tracked on its own, per
//! byte range; a buffer that is a range of a known-flags pool page is tracked through its page (the
//! legacy per-page behaviour: a use of the buffer is a use of the whole page); an image per
//! subresource. Declare the next uses in a [`Batch`], flush it, and
//! [`ResourceTracker::record`] writes the barriers into a command buffer as one
//! `vkCmdPipelineBarrier2`.

use crate::buffer::{Buffer, BufferPlacement};
use crate::device::Device;
use crate::format_map::aspect;
use crate::image::Image;
use ash::vk;
use residency_core::device_mask::DeviceIndex;
use residency_core::sync::{
    BarrierBatch, Batch, ImageAspects, ImageLayout, PagedBufferDesc, QueueFamily, ResourceId, StateTracker,
    SyncError, TrackedBufferDesc, TrackedImageDesc, TrackerOptions,
};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug)]
enum Handle {
    Buffer(vk::Buffer),
    Image(vk::Image),
}

/// The core state tracker plus the handles its barriers name, for every device.
#[derive(Debug)]
pub struct ResourceTracker {
    core: StateTracker,
    handles: HashMap<(DeviceIndex, ResourceId), Handle>,
}

/// Pages are tracked under their `VkBuffer` handle with the top bit set, apart from the counter ids.
fn page_id(raw: vk::Buffer) -> ResourceId {
    use ash::vk::Handle as _;
    ResourceId::new(1 << 63 | raw.as_raw())
}

impl ResourceTracker {
    /// An empty tracker.
    pub fn new(options: TrackerOptions) -> ResourceTracker {
        ResourceTracker { core: StateTracker::new(options), handles: HashMap::new() }
    }

    /// The core tracker (states, options).
    pub fn core(&self) -> &StateTracker {
        &self.core
    }

    /// Starts tracking `buffer` (its contents are undefined until first written): a placed or
    /// committed buffer on its own; a range of a known-flags page through its page (created on the
    /// page's first buffer).
    pub fn track_buffer(&mut self, buffer: &Buffer) -> Result<ResourceId, SyncError> {
        let device = buffer.device_index();
        let id = buffer.resource_id();
        let name = buffer.name().to_owned();
        if buffer.placement() != BufferPlacement::Range {
            self.core.register_buffer(device, id, TrackedBufferDesc::new(name, buffer.size()))?;
            self.handles.insert((device, id), Handle::Buffer(buffer.raw()));
            return Ok(id);
        }
        let page = page_id(buffer.raw());
        if !self.core.contains(device, page) {
            self.core.register_page(
                device,
                page,
                TrackedBufferDesc::new(format!("page of {name}"), buffer.memory_size),
            )?;
            self.handles.insert((device, page), Handle::Buffer(buffer.raw()));
        }
        self.core.register_paged_buffer(
            device,
            id,
            PagedBufferDesc { name, page, offset: buffer.offset(), size: buffer.size() },
        )?;
        Ok(id)
    }

    /// Starts tracking `image`, whose layout is `initial`.
    pub fn track_image(&mut self, image: &Image, initial: vk::ImageLayout) -> Result<ResourceId, SyncError> {
        let device = image.device_index();
        let id = image.resource_id();
        let d = image.desc();
        let desc = TrackedImageDesc::new(d.name.clone(), d.mip_levels, d.array_layers)
            .with_aspects(ImageAspects::from_raw(aspect(d.format).as_raw()))
            .with_initial_layout(ImageLayout::from_raw(initial.as_raw()));
        self.core.register_image(device, id, desc)?;
        self.handles.insert((device, id), Handle::Image(image.raw()));
        Ok(id)
    }

    /// Stops tracking a resource.
    pub fn untrack(&mut self, device: DeviceIndex, id: ResourceId) -> Result<(), SyncError> {
        self.core.unregister(device, id)?;
        self.handles.remove(&(device, id));
        Ok(())
    }

    /// Opens a batch of next uses on `device`'s queue family `queue_family`.
    pub fn batch(&mut self, device: DeviceIndex, queue_family: u32) -> Batch<'_> {
        self.core.batch(device, QueueFamily::new(queue_family))
    }

    /// Records `barriers` (a flush's, or a release's) into `cmd` as one `vkCmdPipelineBarrier2`.
    /// Returns how many barrier structures were recorded (0: nothing recorded).
    ///
    /// A buffer or image barrier of a resource this tracker holds no handle of that kind for on
    /// `device` (never tracked, or untracked since) is [`SyncError::UnknownResource`] naming it,
    /// and nothing is recorded. `cmd` must be recording on `device`, and a tracked resource must
    /// not be destroyed before it is untracked.
    pub fn record(
        &self,
        device: &Device,
        cmd: vk::CommandBuffer,
        barriers: &BarrierBatch,
    ) -> Result<usize, SyncError> {
        if barriers.is_empty() {
            return Ok(0);
        }
        let index = device.index();
        let unknown = |resource| SyncError::UnknownResource { device: index, resource };
        let stages = |s: residency_core::sync::PipelineStages| vk::PipelineStageFlags2::from_raw(s.bits());
        let access = |a: residency_core::sync::AccessFlags| vk::AccessFlags2::from_raw(a.bits());
        let memory: Vec<_> = barriers
            .memory
            .iter()
            .map(|b| {
                vk::MemoryBarrier2::default()
                    .src_stage_mask(stages(b.src.stages))
                    .src_access_mask(access(b.src.access))
                    .dst_stage_mask(stages(b.dst.stages))
                    .dst_access_mask(access(b.dst.access))
            })
            .collect();
        let buffers = barriers
            .buffers
            .iter()
            .map(|b| match self.handles.get(&(index, b.resource)) {
                Some(Handle::Buffer(raw)) => Ok(vk::BufferMemoryBarrier2::default()
                    .src_stage_mask(stages(b.src.stages))
                    .src_access_mask(access(b.src.access))
                    .dst_stage_mask(stages(b.dst.stages))
                    .dst_access_mask(access(b.dst.access))
                    .src_queue_family_index(b.src_queue_family.index())
                    .dst_queue_family_index(b.dst_queue_family.index())
                    .buffer(*raw)
                    .offset(b.offset)
                    .size(b.size)),
                _ => Err(unknown(b.resource)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let images = barriers
            .images
            .iter()
            .map(|b| match self.handles.get(&(index, b.resource)) {
                Some(Handle::Image(raw)) => Ok(vk::ImageMemoryBarrier2::default()
                    .src_stage_mask(stages(b.src.stages))
                    .src_access_mask(access(b.src.access))
                    .dst_stage_mask(stages(b.dst.stages))
                    .dst_access_mask(access(b.dst.access))
                    .old_layout(vk::ImageLayout::from_raw(b.old_layout.as_raw()))
                    .new_layout(vk::ImageLayout::from_raw(b.new_layout.as_raw()))
                    .src_queue_family_index(b.src_queue_family.index())
                    .dst_queue_family_index(b.dst_queue_family.index())
                    .image(*raw)
                    .subresource_range(vk::ImageSubresourceRange {
                        aspect_mask: vk::ImageAspectFlags::from_raw(b.aspects.bits()),
                        base_mip_level: b.range.base_mip,
                        level_count: b.range.mip_count,
                        base_array_layer: b.range.base_layer,
                        layer_count: b.range.layer_count,
                    })),
                _ => Err(unknown(b.resource)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let info = vk::DependencyInfo::default()
            .memory_barriers(&memory)
            .buffer_memory_barriers(&buffers)
            .image_memory_barriers(&images);
        // SAFETY: every buffer and image handle is one this tracker holds for `device` (checked
        // above): a resource of that device, tracked and not untracked. That `cmd` is recording on
        // `device` and that no tracked resource was destroyed while tracked are the documented
        // requirements of `record`: raw handles and ownership this safe fn cannot check.
        unsafe { device.raw().cmd_pipeline_barrier2(cmd, &info) };
        Ok(memory.len() + buffers.len() + images.len())
    }
}
