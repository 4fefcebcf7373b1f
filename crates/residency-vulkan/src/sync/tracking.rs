//! State tracking on real resources: the core's [`StateTracker`] and barrier batcher, with the
//! Vulkan handles its barriers name.
//!
//! A placed buffer (unknown-flags pool, general allocator, committed) is tracked on its own, per
//! byte range; a buffer that is a range of a known-flags pool page is tracked through its page (the
//! legacy per-page behaviour: a use of the buffer is a use of the whole page); an image per
//! subresource. Declare the next uses in a [`Batch`], flush it, and
//! [`ResourceTracker::record`] writes the barriers into a [`Recording`] as one
//! `vkCmdPipelineBarrier2`.
//!
//! The tracker keeps every resource it tracks alive until it is untracked (or the tracker is
//! dropped), so a barrier never names a destroyed buffer or image; dropping a tracked resource's
//! handle only releases it once the tracker lets go too.

use crate::buffer::{Buffer, BufferPlacement};
use crate::format_map::aspect;
use crate::image::{Image, Layouts};
use crate::recording::{check_scope, BarrierError, Recording};
use crate::retire::Life;
use ash::vk;
use residency_core::device_mask::DeviceIndex;
use residency_core::sync::{
    BarrierBatch, Batch, ImageAspects, ImageLayout, PagedBufferDesc, QueueFamily, ResourceId, StateTracker,
    SyncError, TrackedBufferDesc, TrackedImageDesc, TrackerOptions,
};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Clone, Copy, Debug)]
enum Handle {
    Buffer(vk::Buffer),
    Image(vk::Image),
}

/// A handle barriers may name, and what keeps it alive: the resource itself, or for a pool page
/// the tracked buffers placed in it (each keeps its place in the page, so the page stays).
#[derive(Debug)]
struct Tracked {
    handle: Handle,
    /// The device's process-unique id (indices repeat across device sets).
    device: u64,
    keep: Vec<(ResourceId, Arc<Life>)>,
    /// An image's layout record (its barriers' old layouts are checked against it at submission).
    layouts: Option<Arc<Layouts>>,
}

/// A barrier batch could not be recorded; nothing was recorded.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A barrier names a resource the tracker holds no handle for on the recording's device.
    #[error(transparent)]
    Sync(#[from] SyncError),
    /// A barrier's stages, accesses or queue families are not allowed on the recording's device.
    #[error(transparent)]
    Barrier(#[from] BarrierError),
    /// An image barrier's old layout is not what an earlier command of the recording left the
    /// image in ([`VulkanError::ImageLayout`](crate::VulkanError::ImageLayout)).
    #[error("{0}")]
    ImageLayout(crate::VulkanError),
}

/// The core state tracker plus the handles its barriers name, for every device.
#[derive(Debug)]
pub struct ResourceTracker {
    core: StateTracker,
    handles: HashMap<(DeviceIndex, ResourceId), Tracked>,
    /// The page of each tracked range of a known-flags pool page.
    pages: HashMap<(DeviceIndex, ResourceId), ResourceId>,
}

/// Pages are tracked under their `VkBuffer` handle with the top bit set, apart from the counter ids.
fn page_id(raw: vk::Buffer) -> ResourceId {
    use ash::vk::Handle as _;
    ResourceId::new(1 << 63 | raw.as_raw())
}

impl ResourceTracker {
    /// An empty tracker.
    pub fn new(options: TrackerOptions) -> ResourceTracker {
        ResourceTracker { core: StateTracker::new(options), handles: HashMap::new(), pages: HashMap::new() }
    }

    /// The core tracker (states, options).
    pub fn core(&self) -> &StateTracker {
        &self.core
    }

    /// Starts tracking `buffer` (its contents are undefined until first written): a placed or
    /// committed buffer on its own; a range of a known-flags page through its page (created on the
    /// page's first buffer). The tracker keeps the buffer alive until it is untracked.
    pub fn track_buffer(&mut self, buffer: &Buffer) -> Result<ResourceId, SyncError> {
        let device = buffer.device_index();
        let uid = buffer.device().uid();
        let id = buffer.resource_id();
        let name = buffer.name().to_owned();
        let life = Arc::clone(buffer.life());
        if buffer.placement() != BufferPlacement::Range {
            self.core.register_buffer(device, id, TrackedBufferDesc::new(name, buffer.size()))?;
            let keep = vec![(id, life)];
            self.handles.insert(
                (device, id),
                Tracked { handle: Handle::Buffer(buffer.raw()), device: uid, keep, layouts: None },
            );
            return Ok(id);
        }
        let page = page_id(buffer.raw());
        let registered_page = !self.core.contains(device, page);
        if registered_page {
            self.core.register_page(
                device,
                page,
                TrackedBufferDesc::new(format!("page of {name}"), buffer.memory_size),
            )?;
        }
        let paged = PagedBufferDesc { name, page, offset: buffer.offset(), size: buffer.size() };
        if let Err(e) = self.core.register_paged_buffer(device, id, paged) {
            if registered_page {
                let _ = self.core.unregister(device, page);
            }
            return Err(e);
        }
        let entry = self.handles.entry((device, page)).or_insert_with(|| Tracked {
            handle: Handle::Buffer(buffer.raw()),
            device: uid,
            keep: Vec::new(),
            layouts: None,
        });
        entry.keep.push((id, life));
        self.pages.insert((device, id), page);
        Ok(id)
    }

    /// Starts tracking `image`, whose layout is `initial` (the tracker's starting belief: the
    /// barriers it records take their old layouts from it, and each submission checks those
    /// against the image's real layouts in submission order, so a wrong `initial` is a
    /// [`VulkanError::ImageLayout`](crate::VulkanError::ImageLayout) at submission, never a wrong
    /// barrier on the GPU; `UNDEFINED` discards the contents and fits any layout).
    pub fn track_image(&mut self, image: &Image, initial: vk::ImageLayout) -> Result<ResourceId, SyncError> {
        let device = image.device_index();
        let id = image.resource_id();
        let d = image.desc();
        let desc = TrackedImageDesc::new(d.name.clone(), d.mip_levels, d.array_layers)
            .with_aspects(ImageAspects::from_raw(aspect(d.format).as_raw()))
            .with_initial_layout(ImageLayout::from_raw(initial.as_raw()));
        self.core.register_image(device, id, desc)?;
        let keep = vec![(id, Arc::clone(image.life()))];
        let tracked = Tracked {
            handle: Handle::Image(image.raw()),
            device: image.device().uid(),
            keep,
            layouts: Some(Arc::clone(image.layouts())),
        };
        self.handles.insert((device, id), tracked);
        Ok(id)
    }

    /// Stops tracking a resource, and stops keeping it alive.
    pub fn untrack(&mut self, device: DeviceIndex, id: ResourceId) -> Result<(), SyncError> {
        self.core.unregister(device, id)?;
        self.handles.remove(&(device, id));
        if let Some(page) = self.pages.remove(&(device, id)) {
            if let Some(tracked) = self.handles.get_mut(&(device, page)) {
                tracked.keep.retain(|(r, _)| *r != id);
                if tracked.keep.is_empty() {
                    // Nothing keeps the page any more: no barrier may name it.
                    self.handles.remove(&(device, page));
                }
            }
        }
        Ok(())
    }

    /// Opens a batch of next uses on `device`'s queue family `queue_family`.
    pub fn batch(&mut self, device: DeviceIndex, queue_family: u32) -> Batch<'_> {
        self.core.batch(device, QueueFamily::new(queue_family))
    }

    /// Records `barriers` (a flush's, or a release's) into `rec` as one `vkCmdPipelineBarrier2`.
    /// Returns how many barrier structures were recorded (0: nothing recorded).
    ///
    /// A buffer or image barrier of a resource this tracker holds no handle of that kind for on
    /// the recording's device (never tracked, untracked since, or tracked on another device) is
    /// [`SyncError::UnknownResource`] naming it; stages or accesses the device does not allow, or a
    /// queue family it does not have, are [`BarrierError`]s; nothing is recorded then. The
    /// recording holds every resource a barrier names until its submission.
    pub fn record(&self, rec: &mut Recording<'_>, barriers: &BarrierBatch) -> Result<usize, RecordError> {
        if barriers.is_empty() {
            return Ok(0);
        }
        let device = rec.device();
        let index = device.index();
        let unknown = |resource| SyncError::UnknownResource { device: index, resource };
        let stages = |s: residency_core::sync::PipelineStages| vk::PipelineStageFlags2::from_raw(s.bits());
        let access = |a: residency_core::sync::AccessFlags| vk::AccessFlags2::from_raw(a.bits());
        // Asked only when a barrier transfers ownership.
        let families = std::cell::OnceCell::new();
        let family_count = || {
            *families.get_or_init(|| {
                // SAFETY: a pure query of the recording device's physical device.
                unsafe { device.instance().get_physical_device_queue_family_properties(device.physical()) }
                    .len()
            })
        };
        let features = device.features();
        let check = |src: residency_core::sync::Scope,
                     dst: residency_core::sync::Scope,
                     families_of: Option<(u32, u32)>|
         -> Result<(), RecordError> {
            check_scope(&features, stages(src.stages), access(src.access))?;
            check_scope(&features, stages(dst.stages), access(dst.access))?;
            if let Some((a, b)) = families_of {
                for family in [a, b] {
                    if family != vk::QUEUE_FAMILY_IGNORED && family as usize >= family_count() {
                        return Err(BarrierError::QueueFamily { family }.into());
                    }
                }
            }
            Ok(())
        };
        let mut kept: Vec<&Arc<Life>> = Vec::new();
        let mut image_layouts: Vec<&Arc<Layouts>> = Vec::new();
        let mut handle = |resource| -> Option<Handle> {
            let tracked = self.handles.get(&(index, resource)).filter(|t| t.device == device.uid())?;
            kept.extend(tracked.keep.iter().map(|(_, life)| life));
            image_layouts.extend(tracked.layouts.as_ref());
            Some(tracked.handle)
        };
        for b in &barriers.memory {
            check(b.src, b.dst, None)?;
        }
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
        let mut buffers = Vec::with_capacity(barriers.buffers.len());
        for b in &barriers.buffers {
            let (src_family, dst_family) = (b.src_queue_family.index(), b.dst_queue_family.index());
            check(b.src, b.dst, Some((src_family, dst_family)))?;
            let Some(Handle::Buffer(raw)) = handle(b.resource) else {
                return Err(unknown(b.resource).into());
            };
            buffers.push(
                vk::BufferMemoryBarrier2::default()
                    .src_stage_mask(stages(b.src.stages))
                    .src_access_mask(access(b.src.access))
                    .dst_stage_mask(stages(b.dst.stages))
                    .dst_access_mask(access(b.dst.access))
                    .src_queue_family_index(src_family)
                    .dst_queue_family_index(dst_family)
                    .buffer(raw)
                    .offset(b.offset)
                    .size(b.size),
            );
        }
        let mut images = Vec::with_capacity(barriers.images.len());
        let mut transitions = Vec::with_capacity(barriers.images.len());
        for b in &barriers.images {
            let (src_family, dst_family) = (b.src_queue_family.index(), b.dst_queue_family.index());
            check(b.src, b.dst, Some((src_family, dst_family)))?;
            let Some(Handle::Image(raw)) = handle(b.resource) else { return Err(unknown(b.resource).into()) };
            transitions.push(b);
            images.push(
                vk::ImageMemoryBarrier2::default()
                    .src_stage_mask(stages(b.src.stages))
                    .src_access_mask(access(b.src.access))
                    .dst_stage_mask(stages(b.dst.stages))
                    .dst_access_mask(access(b.dst.access))
                    .old_layout(vk::ImageLayout::from_raw(b.old_layout.as_raw()))
                    .new_layout(vk::ImageLayout::from_raw(b.new_layout.as_raw()))
                    .src_queue_family_index(src_family)
                    .dst_queue_family_index(dst_family)
                    .image(raw)
                    .subresource_range(vk::ImageSubresourceRange {
                        aspect_mask: vk::ImageAspectFlags::from_raw(b.aspects.bits()),
                        base_mip_level: b.range.base_mip,
                        level_count: b.range.mip_count,
                        base_array_layer: b.range.base_layer,
                        layer_count: b.range.layer_count,
                    }),
            );
        }
        debug_assert_eq!(image_layouts.len(), transitions.len());
        for (layouts, b) in image_layouts.iter().zip(&transitions) {
            let r = &b.range;
            rec.check_layout(
                layouts,
                r.base_mip..r.base_mip + r.mip_count,
                r.base_layer..r.base_layer + r.layer_count,
                vk::ImageLayout::from_raw(b.old_layout.as_raw()),
            )
            .map_err(RecordError::ImageLayout)?;
        }
        let kept: Vec<Arc<Life>> = kept.into_iter().cloned().collect();
        for life in &kept {
            rec.keep(life);
        }
        // Only images have a layout record: one per image barrier, in order.
        for (layouts, b) in image_layouts.into_iter().zip(transitions) {
            let (mips, layers) = (
                b.range.base_mip..b.range.base_mip + b.range.mip_count,
                b.range.base_layer..b.range.base_layer + b.range.layer_count,
            );
            rec.transition(
                layouts,
                mips,
                layers,
                vk::ImageLayout::from_raw(b.old_layout.as_raw()),
                vk::ImageLayout::from_raw(b.new_layout.as_raw()),
            );
        }
        let info = vk::DependencyInfo::default()
            .memory_barriers(&memory)
            .buffer_memory_barriers(&buffers)
            .image_memory_barriers(&images);
        // SAFETY: the recording is on `rec.device()` outside a render pass (the `Recording`
        // invariant). Every buffer and image handle is one this tracker holds for that device
        // (checked above by index and by the device's unique id) and keeps alive while tracked;
        // the recording now holds them until its submission. Stages and accesses are core ones
        // the device allows, paired as Vulkan requires, and queue families exist (checked
        // above). Ranges come from the core tracker, within the sizes and subresources
        // registered. Each image barrier's old layout is noted above as a requirement (unless
        // UNDEFINED, which discards and fits any layout, or set by an earlier command of this
        // recording), which the submitter checks against the image's layouts in submission order
        // before submitting; its new layout is noted as the effect.
        unsafe { rec.device().raw().cmd_pipeline_barrier2(rec.raw(), &info) };
        rec.recorded();
        Ok(memory.len() + buffers.len() + images.len())
    }
}
