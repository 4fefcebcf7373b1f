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

use crate::device::life::Life;
use crate::error::{ErrorClass, ResidencyError};
use crate::format_map::aspect;
use crate::resources::buffer::{Buffer, BufferPlacement};
use crate::resources::image::{Image, Layouts};
use crate::sync::recording::{check_scope, BarrierError, Recording};
use ash::vk;
use residency_core::device_mask::DeviceIndex;
use residency_core::sync::{ImageAspects, PagedBufferDesc, QueueFamily, TrackedBufferDesc, TrackedImageDesc};
// The core's tracking types this module's signatures take, and the uses and regions a `Batch`
// declares, re-exported here once (crate docs: "The core's types").
pub use residency_core::sync::{
    AccessFlags, BarrierBatch, Batch, CustomUse, ImageLayout, PipelineStages, Region, ResourceId,
    StateTracker, SyncError, TrackerOptions, Use,
};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

#[derive(Clone, Copy, Debug)]
enum Handle {
    Buffer(vk::Buffer),
    Image(vk::Image),
}

/// What a barrier may cover of a tracked resource: its handle's bytes, or its image's
/// subresources, aspects, usage and sharing mode (a barrier is checked against these before
/// Vulkan sees it, whoever wrote it).
#[derive(Clone, Copy, Debug)]
enum Extent {
    /// The `VkBuffer`'s size (a page's whole buffer for a known-flags pool page).
    Bytes(u64),
    Image {
        mips: u32,
        layers: u32,
        aspects: vk::ImageAspectFlags,
        usage: vk::ImageUsageFlags,
        /// Created with `VK_SHARING_MODE_CONCURRENT`: no ownership transfers.
        concurrent: bool,
    },
}

/// A handle barriers may name, and what keeps it alive: the resource itself, or for a pool page
/// the tracked buffers placed in it (each keeps its place in the page, so the page stays).
#[derive(Debug)]
struct Tracked {
    handle: Handle,
    /// For error messages.
    name: String,
    extent: Extent,
    /// The device's process-unique id (indices repeat across device sets).
    device: u64,
    keep: Vec<(ResourceId, Arc<Life>)>,
    /// An image's layout record (its barriers' old layouts are checked against it at submission).
    layouts: Option<Arc<Layouts>>,
}

/// A barrier batch could not be recorded; nothing was recorded.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A barrier names a resource the tracker holds no handle for on the recording's device
    /// ([`SyncError::UnknownResource`]), a buffer barrier covers bytes outside its buffer
    /// ([`SyncError::BytesOutOfBounds`]: `offset + size` past the end, wrapped, or an empty range;
    /// `VK_WHOLE_SIZE`, `u64::MAX`, covers from `offset` to the end), or an image barrier covers
    /// subresources outside its image ([`SyncError::SubresourcesOutOfBounds`]: a count of 0, a
    /// base past the end, `base + count` past the end or wrapped; `VK_REMAINING_*`, `u32::MAX`,
    /// covers from the base to the end).
    #[error(transparent)]
    Sync(#[from] SyncError),
    /// A barrier's stages, accesses or queue families are not allowed on the recording's device.
    #[error(transparent)]
    Barrier(#[from] BarrierError),
    /// An image barrier's old layout is not what an earlier command of the recording left the
    /// image in ([`VulkanError::ImageLayout`](crate::VulkanError::ImageLayout)).
    #[error("{0}")]
    ImageLayout(crate::error::VulkanError),
    /// An image barrier's aspects are not its image's aspects.
    #[error("a barrier of image {resource:?} ({name}) names aspects {given:?}; the image has {image:?}")]
    Aspects {
        /// The image.
        resource: ResourceId,
        /// Its name.
        name: String,
        /// The barrier's aspects.
        given: vk::ImageAspectFlags,
        /// The image's aspects.
        image: vk::ImageAspectFlags,
    },
    /// An image barrier's layout is not one the image may be in: not a layout residency knows,
    /// `UNDEFINED` or `PREINITIALIZED` as the new layout, or a layout whose usage the image was
    /// not created with (`COLOR_ATTACHMENT_OPTIMAL` without colour-attachment usage, …).
    #[error("a barrier of image {resource:?} ({name}) uses layout {layout:?}: {reason}")]
    Layout {
        /// The image.
        resource: ResourceId,
        /// Its name.
        name: String,
        /// The offending layout.
        layout: vk::ImageLayout,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A barrier's queue families are not an ownership transfer Vulkan allows for the resource:
    /// one side `QUEUE_FAMILY_IGNORED` and the other not, or a transfer of a resource created
    /// with `VK_SHARING_MODE_CONCURRENT`.
    #[error(
        "a barrier of {resource:?} ({name}) transfers ownership from queue family {src} to {dst}: {reason}"
    )]
    Ownership {
        /// The resource.
        resource: ResourceId,
        /// Its name.
        name: String,
        /// The releasing family (`u32::MAX`: ignored).
        src: u32,
        /// The acquiring family (`u32::MAX`: ignored).
        dst: u32,
        /// Why it is refused.
        reason: &'static str,
    },
}

impl ResidencyError for RecordError {
    fn class(&self) -> ErrorClass {
        match self {
            RecordError::Sync(e) => e.class(),
            RecordError::Barrier(e) => e.class(),
            RecordError::ImageLayout(e) => e.class(),
            RecordError::Aspects { .. } | RecordError::Layout { .. } | RecordError::Ownership { .. } => {
                ErrorClass::Refused
            }
        }
    }
}

/// The range `base..base + count` of `total` (mips or layers) a barrier covers, `count` being
/// `VK_REMAINING_*` (`u32::MAX`) for "to the end"; `None` when it is empty, starts past the end,
/// ends past it or wraps.
fn covered(base: u32, count: u32, total: u32) -> Option<Range<u32>> {
    // VK_REMAINING_MIP_LEVELS and VK_REMAINING_ARRAY_LAYERS are both !0.
    let end = if count == vk::REMAINING_MIP_LEVELS { total } else { base.checked_add(count)? };
    (base < end && end <= total).then_some(base..end)
}

/// The image usage a layout needs (any of these bits), for the layouts that need one
/// (`VUID-VkImageMemoryBarrier2-oldLayout-01208` to `-01213` and the synchronization2 layouts);
/// `Err` for a layout residency does not know.
fn layout_usage(layout: vk::ImageLayout) -> Result<vk::ImageUsageFlags, &'static str> {
    use vk::ImageLayout as L;
    use vk::ImageUsageFlags as U;
    Ok(match layout {
        L::UNDEFINED | L::GENERAL | L::PREINITIALIZED | L::READ_ONLY_OPTIMAL => U::empty(),
        L::COLOR_ATTACHMENT_OPTIMAL => U::COLOR_ATTACHMENT,
        L::DEPTH_STENCIL_ATTACHMENT_OPTIMAL | L::DEPTH_STENCIL_READ_ONLY_OPTIMAL => {
            U::DEPTH_STENCIL_ATTACHMENT
        }
        L::SHADER_READ_ONLY_OPTIMAL => U::SAMPLED | U::INPUT_ATTACHMENT,
        L::TRANSFER_SRC_OPTIMAL => U::TRANSFER_SRC,
        L::TRANSFER_DST_OPTIMAL => U::TRANSFER_DST,
        L::ATTACHMENT_OPTIMAL => U::COLOR_ATTACHMENT | U::DEPTH_STENCIL_ATTACHMENT,
        _ => return Err("not a layout residency records barriers for"),
    })
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
            self.core.register_buffer(device, id, TrackedBufferDesc::new(name.clone(), buffer.size()))?;
            let keep = vec![(id, life)];
            self.handles.insert(
                (device, id),
                Tracked {
                    handle: Handle::Buffer(buffer.raw()),
                    name,
                    extent: Extent::Bytes(buffer.size()),
                    device: uid,
                    keep,
                    layouts: None,
                },
            );
            return Ok(id);
        }
        let page = page_id(buffer.raw());
        let page_name = format!("page of {name}");
        let registered_page = !self.core.contains(device, page);
        if registered_page {
            self.core.register_page(
                device,
                page,
                TrackedBufferDesc::new(page_name.clone(), buffer.memory_size()),
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
            name: page_name,
            extent: Extent::Bytes(buffer.memory_size()),
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
        let extent = Extent::Image {
            mips: d.mip_levels,
            layers: d.array_layers,
            aspects: aspect(d.format),
            usage: d.create_info().usage,
            concurrent: !d.queue_families.is_empty(),
        };
        let tracked = Tracked {
            handle: Handle::Image(image.raw()),
            name: d.name.clone(),
            extent,
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
    /// A [`BarrierBatch`] is plain data whose fields anyone can write, so every barrier is checked
    /// against what this tracker knows of the resource it names before Vulkan sees it, and the
    /// first that does not fit refuses the whole batch with nothing recorded:
    ///
    /// - a buffer or image barrier of a resource this tracker holds no handle of that kind for on
    ///   the recording's device (never tracked, untracked since, or tracked on another device):
    ///   [`SyncError::UnknownResource`] naming it;
    /// - stages or accesses the device does not allow, or a queue family it does not have:
    ///   [`BarrierError`];
    /// - bytes outside the buffer ([`SyncError::BytesOutOfBounds`]; `VK_WHOLE_SIZE` is to the
    ///   end);
    /// - mips or layers outside the image, with checked arithmetic
    ///   ([`SyncError::SubresourcesOutOfBounds`];
    ///   `VK_REMAINING_MIP_LEVELS` / `VK_REMAINING_ARRAY_LAYERS` are resolved against the image,
    ///   so the layout record covers exactly what the GPU transitions);
    /// - aspects other than the image's ([`RecordError::Aspects`]);
    /// - an unknown layout, `UNDEFINED` or `PREINITIALIZED` as the new layout, or a layout the
    ///   image's usage does not allow ([`RecordError::Layout`]);
    /// - queue families that are not both ignored, the same, or a transfer between two real
    ///   families of an exclusive resource ([`RecordError::Ownership`]).
    ///
    /// The recording holds every resource a barrier names until its submission.
    pub fn record(&self, rec: &mut Recording<'_>, barriers: &BarrierBatch) -> Result<usize, RecordError> {
        if barriers.is_empty() {
            return Ok(0);
        }
        let device = rec.device();
        let index = device.index();
        let unknown = |resource| SyncError::UnknownResource { device: index, resource };
        let stages = |s: residency_core::sync::PipelineStages| vk::PipelineStageFlags2::from_raw(s.bits());
        let access = |a: residency_core::sync::AccessFlags| vk::AccessFlags2::from_raw(a.bits());
        // Asked only when a barrier names a queue family.
        let families = std::cell::OnceCell::new();
        let family_count = || {
            *families.get_or_init(|| {
                // SAFETY: a pure query of the recording device's physical device.
                unsafe { device.instance().get_physical_device_queue_family_properties(device.physical()) }
                    .len()
            })
        };
        let features = device.features();
        let check =
            |src: residency_core::sync::Scope, dst: residency_core::sync::Scope| -> Result<(), RecordError> {
                check_scope(&features, stages(src.stages), access(src.access))?;
                check_scope(&features, stages(dst.stages), access(dst.access))?;
                Ok(())
            };
        // Ownership: no transfer (both ignored, or the same family), or a transfer between two
        // real families of an exclusive resource (VUID-VkBufferMemoryBarrier2-buffer-04088/04089,
        // VUID-VkImageMemoryBarrier2-image-04071/04072).
        let ownership = |resource: ResourceId,
                         tracked: &Tracked,
                         concurrent: bool,
                         src: QueueFamily,
                         dst: QueueFamily|
         -> Result<(u32, u32), RecordError> {
            let (src, dst) = (src.index(), dst.index());
            let refuse =
                |reason| RecordError::Ownership { resource, name: tracked.name.clone(), src, dst, reason };
            for family in [src, dst] {
                if family != vk::QUEUE_FAMILY_IGNORED && family as usize >= family_count() {
                    return Err(BarrierError::QueueFamily { family }.into());
                }
            }
            if src == dst {
                return Ok((src, dst));
            }
            if src == vk::QUEUE_FAMILY_IGNORED || dst == vk::QUEUE_FAMILY_IGNORED {
                return Err(refuse("one side of a transfer is QUEUE_FAMILY_IGNORED and the other is not"));
            }
            if concurrent {
                return Err(refuse("the resource is shared concurrently: it has no owner to transfer"));
            }
            Ok((src, dst))
        };
        let mut kept: Vec<&Arc<Life>> = Vec::new();
        let mut image_layouts: Vec<&Arc<Layouts>> = Vec::new();
        let tracked_of = |resource| -> Option<&Tracked> {
            self.handles.get(&(index, resource)).filter(|t| t.device == device.uid())
        };
        for b in &barriers.memory {
            check(b.src, b.dst)?;
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
            check(b.src, b.dst)?;
            let Some(tracked) = tracked_of(b.resource) else { return Err(unknown(b.resource).into()) };
            let (Handle::Buffer(raw), Extent::Bytes(buffer_size)) = (tracked.handle, tracked.extent) else {
                return Err(unknown(b.resource).into());
            };
            let fits = if b.size == vk::WHOLE_SIZE {
                b.offset < buffer_size
            } else {
                b.size > 0 && b.offset.checked_add(b.size).is_some_and(|end| end <= buffer_size)
            };
            if !fits {
                return Err(RecordError::Sync(SyncError::BytesOutOfBounds {
                    resource: b.resource,
                    name: tracked.name.clone(),
                    offset: b.offset,
                    size: b.size,
                    buffer_size,
                }));
            }
            let (src_family, dst_family) =
                ownership(b.resource, tracked, false, b.src_queue_family, b.dst_queue_family)?;
            kept.extend(tracked.keep.iter().map(|(_, life)| life));
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
        // Per image barrier: the mips and layers it covers, and its old and new layouts.
        let mut transitions = Vec::with_capacity(barriers.images.len());
        for b in &barriers.images {
            check(b.src, b.dst)?;
            let Some(tracked) = tracked_of(b.resource) else { return Err(unknown(b.resource).into()) };
            let (Handle::Image(raw), Extent::Image { mips, layers, aspects, usage, concurrent }) =
                (tracked.handle, tracked.extent)
            else {
                return Err(unknown(b.resource).into());
            };
            let name = || tracked.name.clone();
            let r = &b.range;
            let (Some(mip_range), Some(layer_range)) =
                (covered(r.base_mip, r.mip_count, mips), covered(r.base_layer, r.layer_count, layers))
            else {
                return Err(RecordError::Sync(SyncError::SubresourcesOutOfBounds {
                    resource: b.resource,
                    name: name(),
                    range: *r,
                    mip_levels: mips,
                    array_layers: layers,
                }));
            };
            let given = vk::ImageAspectFlags::from_raw(b.aspects.bits());
            if given != aspects {
                return Err(RecordError::Aspects {
                    resource: b.resource,
                    name: name(),
                    given,
                    image: aspects,
                });
            }
            let (old, new) = (
                vk::ImageLayout::from_raw(b.old_layout.as_raw()),
                vk::ImageLayout::from_raw(b.new_layout.as_raw()),
            );
            for layout in [old, new] {
                let refuse =
                    |reason| RecordError::Layout { resource: b.resource, name: name(), layout, reason };
                let needs = layout_usage(layout).map_err(refuse)?;
                if !needs.is_empty() && !usage.intersects(needs) {
                    return Err(refuse("the image was not created with the usage this layout needs"));
                }
            }
            if new == vk::ImageLayout::UNDEFINED || new == vk::ImageLayout::PREINITIALIZED {
                return Err(RecordError::Layout {
                    resource: b.resource,
                    name: name(),
                    layout: new,
                    reason: "an image cannot be transitioned into it",
                });
            }
            let (src_family, dst_family) =
                ownership(b.resource, tracked, concurrent, b.src_queue_family, b.dst_queue_family)?;
            kept.extend(tracked.keep.iter().map(|(_, life)| life));
            image_layouts.extend(tracked.layouts.as_ref());
            images.push(
                vk::ImageMemoryBarrier2::default()
                    .src_stage_mask(stages(b.src.stages))
                    .src_access_mask(access(b.src.access))
                    .dst_stage_mask(stages(b.dst.stages))
                    .dst_access_mask(access(b.dst.access))
                    .old_layout(old)
                    .new_layout(new)
                    .src_queue_family_index(src_family)
                    .dst_queue_family_index(dst_family)
                    .image(raw)
                    .subresource_range(vk::ImageSubresourceRange {
                        aspect_mask: aspects,
                        base_mip_level: mip_range.start,
                        level_count: mip_range.len() as u32,
                        base_array_layer: layer_range.start,
                        layer_count: layer_range.len() as u32,
                    }),
            );
            transitions.push((mip_range, layer_range, old, new));
        }
        debug_assert_eq!(image_layouts.len(), transitions.len());
        for (layouts, (mips, layers, old, _)) in image_layouts.iter().zip(&transitions) {
            rec.check_layout(layouts, mips.clone(), layers.clone(), *old)
                .map_err(RecordError::ImageLayout)?;
        }
        let kept: Vec<Arc<Life>> = kept.into_iter().cloned().collect();
        for life in &kept {
            rec.keep(life);
        }
        // Only images have a layout record: one per image barrier, in order.
        for (layouts, (mips, layers, old, new)) in image_layouts.into_iter().zip(transitions) {
            rec.transition(layouts, mips, layers, old, new);
        }
        let info = vk::DependencyInfo::default()
            .memory_barriers(&memory)
            .buffer_memory_barriers(&buffers)
            .image_memory_barriers(&images);
        // SAFETY: the recording is on `rec.device()` outside a render pass (the `Recording`
        // invariant). Every buffer and image handle is one this tracker holds for that device
        // (checked above by index and by the device's unique id) and keeps alive while tracked;
        // the recording now holds them until its submission. Stages and accesses are core ones
        // the device allows, paired as Vulkan requires; queue families exist and form no transfer
        // or one Vulkan allows for the resource's sharing mode (checked above). Every buffer range
        // lies within its buffer and every subresource range within its image, with the image's
        // aspects, as checked above with checked arithmetic (whatever wrote the batch). Layouts
        // are ones the image's usage allows, never UNDEFINED or PREINITIALIZED as the new layout.
        // Each image barrier's old layout is noted above as a requirement (unless UNDEFINED,
        // which discards and fits any layout, or set by an earlier command of this recording),
        // which the submitter checks against the image's layouts in submission order before
        // submitting; its new layout is noted as the effect, over exactly the subresources the
        // barrier covers.
        unsafe { rec.device().raw().cmd_pipeline_barrier2(rec.raw(), &info) };
        rec.recorded();
        Ok(memory.len() + buffers.len() + images.len())
    }
}
