//! The image half of a defragmentation pass: which images may move, their new `VkImage`s, the
//! copies with their layout transitions, and the swap.

use super::{Candidate, DefragStats, Defragmenter, Heaps, Staged, Target, Unmovable};
use crate::device::blocks::MemoryError;
use crate::device::blocks::ResourceMemory;
use crate::device::ledger::FaultSite;
use crate::device::life::Garbage;
use crate::device::Device;
use crate::error::VulkanError;
use crate::resources::image::{Image, Layouts, MovedImage};
use ash::vk;
use residency_core::usage::ImageUsage;
use std::sync::Arc;

/// One subresource's layout change around its copy.
pub(super) struct ImageTransition {
    pub(super) old: Arc<Layouts>,
    pub(super) new: Arc<Layouts>,
    pub(super) mip: u32,
    pub(super) layer: u32,
    /// The layout it is in (submission order) when the copy runs.
    pub(super) layout: vk::ImageLayout,
    /// The layout the new image is left in (`layout`, or `GENERAL` for `PREINITIALIZED`).
    pub(super) final_layout: vk::ImageLayout,
}

/// The image copies of a pass: barriers before and after, regions, and layout bookkeeping.
#[derive(Default)]
pub(super) struct ImageCopies {
    pub(super) before: Vec<vk::ImageMemoryBarrier2<'static>>,
    pub(super) after: Vec<vk::ImageMemoryBarrier2<'static>>,
    pub(super) copies: Vec<(vk::Image, vk::Image, Vec<vk::ImageCopy>)>,
    pub(super) transitions: Vec<ImageTransition>,
}

impl ImageCopies {
    /// Every subresource of `image` that is not `UNDEFINED` (as its layouts stand in submission
    /// order: nothing else can record it while the pass holds it) copied into move `m`'s image.
    pub(super) fn add(&mut self, image: &Image, m: &Staged) {
        let desc = image.desc();
        let aspect = image.full_range().aspect_mask;
        let new = m.layouts.as_ref().expect("a staged image has its layout record");
        let now = image.layouts().lock().clone();
        let mut regions = Vec::new();
        for mip in 0..desc.mip_levels {
            let extent = desc.extent.map(|e| (e >> mip).max(1));
            for layer in 0..desc.array_layers {
                let layout = now[(mip * desc.array_layers + layer) as usize];
                if layout == vk::ImageLayout::UNDEFINED {
                    continue;
                }
                let final_layout =
                    if layout == vk::ImageLayout::PREINITIALIZED { vk::ImageLayout::GENERAL } else { layout };
                let range = vk::ImageSubresourceRange {
                    aspect_mask: aspect,
                    base_mip_level: mip,
                    level_count: 1,
                    base_array_layer: layer,
                    layer_count: 1,
                };
                let barrier = vk::ImageMemoryBarrier2::default()
                    .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                    .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                    .subresource_range(range);
                self.before.push(
                    barrier
                        .image(image.raw())
                        .src_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
                        .src_access_mask(vk::AccessFlags2::MEMORY_WRITE)
                        .dst_stage_mask(vk::PipelineStageFlags2::COPY)
                        .dst_access_mask(vk::AccessFlags2::TRANSFER_READ)
                        .old_layout(layout)
                        .new_layout(vk::ImageLayout::TRANSFER_SRC_OPTIMAL),
                );
                self.before.push(
                    barrier
                        .image(m.image)
                        .src_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
                        .src_access_mask(vk::AccessFlags2::MEMORY_WRITE)
                        .dst_stage_mask(vk::PipelineStageFlags2::COPY)
                        .dst_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                        .old_layout(vk::ImageLayout::UNDEFINED)
                        .new_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL),
                );
                self.after.push(
                    barrier
                        .image(m.image)
                        .src_stage_mask(vk::PipelineStageFlags2::COPY)
                        .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                        .dst_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
                        .dst_access_mask(vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE)
                        .old_layout(vk::ImageLayout::TRANSFER_DST_OPTIMAL)
                        .new_layout(final_layout),
                );
                let layers = vk::ImageSubresourceLayers {
                    aspect_mask: aspect,
                    mip_level: mip,
                    base_array_layer: layer,
                    layer_count: 1,
                };
                regions.push(vk::ImageCopy {
                    src_subresource: layers,
                    src_offset: vk::Offset3D::default(),
                    dst_subresource: layers,
                    dst_offset: vk::Offset3D::default(),
                    extent: vk::Extent3D { width: extent[0], height: extent[1], depth: extent[2] },
                });
                self.transitions.push(ImageTransition {
                    old: Arc::clone(image.layouts()),
                    new: Arc::clone(new),
                    mip,
                    layer,
                    layout,
                    final_layout,
                });
            }
        }
        if !regions.is_empty() {
            self.copies.push((image.raw(), m.image, regions));
        }
    }
}

impl Defragmenter {
    /// The images that may move, with their place; the others go to `stats.unmovable_images`.
    pub(super) fn image_candidates(&self, images: &[&mut Image], stats: &mut DefragStats) -> Vec<Candidate> {
        let mut out = Vec::new();
        for (index, image) in images.iter().enumerate() {
            let copy = ImageUsage::COPY_SRC | ImageUsage::COPY_DST;
            let refused = if !image.device().is(&self.device) {
                Some(Unmovable::OtherDevice)
            } else if image.is_committed() {
                Some(Unmovable::NotPlaced)
            } else if !image.desc().usage.contains(copy) {
                Some(Unmovable::NoCopyUsage)
            } else if Arc::strong_count(image.life()) != 1
                || Arc::weak_count(image.life()) != 0
                || Arc::strong_count(image.layouts()) != 1
            {
                // A view (which holds the image and shares its layouts), a descriptor set, a
                // tracker, a recording or a queued upload names the old `VkImage`.
                Some(Unmovable::Shared)
            } else {
                None
            };
            if let Some(reason) = refused {
                stats.unmovable_images.push((index, reason));
                continue;
            }
            let Some(Garbage::Image { memory: ResourceMemory::General { list, allocation }, .. }) =
                image.life().garbage()
            else {
                stats.unmovable_images.push((index, Unmovable::NotPlaced));
                continue;
            };
            let waits = match self.copy_waits(image.life()) {
                Ok(waits) => waits,
                Err(reason) => {
                    stats.unmovable_images.push((index, reason));
                    continue;
                }
            };
            out.push(Candidate {
                target: Target::Image(index),
                heaps: Heaps::General(*list),
                block: allocation.block,
                offset: allocation.allocation.offset(),
                size: allocation.allocation.size(),
                waits,
            });
        }
        out
    }

    /// Creates the new image of one move with the same description and binds it at the planned
    /// place. `Ok(false)`: its requirements do not fit (the move is dropped); an error fails the
    /// pass.
    pub(super) fn create_image(device: &Device, image: &Image, m: &mut Staged) -> Result<bool, MemoryError> {
        let desc = image.desc();
        let name = desc.name.as_str();
        let mut list = vk::ImageFormatListCreateInfo::default().view_formats(&desc.view_formats);
        let mut info = desc.create_info();
        if !desc.view_formats.is_empty() {
            info = info.push_next(&mut list);
        }
        let created = device.ledger().guard(FaultSite::CreateResource, || {
            // SAFETY: the description is the live image's, checked against the device when it
            // was created; the chained format list outlives the call.
            unsafe { device.raw().create_image(&info, None) }
        });
        let raw = created.map_err(|r| match r {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                MemoryError::OutOfDeviceMemory { name: name.to_owned(), requested: image.size() }
            }
            r => MemoryError::Vulkan(VulkanError::from_vk("vkCreateImage", r)),
        })?;
        device.set_name(raw, name);
        m.image = raw;
        // SAFETY: raw was just created on this device (never disjoint: residency sets no such flag).
        let requirements =
            unsafe { crate::device::profile_capture::requirements_of_image_object(device, raw) };
        let room = m.destination.as_ref().map_or(0, |d| d.allocation.size());
        if requirements.memory_type_bits & (1 << m.heaps.type_index(device)) == 0
            || m.offset % requirements.alignment.max(1) != 0
            || requirements.size > room
        {
            return Ok(false);
        }
        // SAFETY: raw is unbound; the planned place has its alignment, lies inside `memory` and
        // holds its size (checked above), of a memory type it allows.
        unsafe { device.raw().bind_image_memory(raw, m.memory, m.offset) }
            .map_err(|r| MemoryError::Vulkan(VulkanError::from_vk("vkBindImageMemory", r)))?;
        m.image_size = requirements.size;
        m.layouts = Some(Layouts::new(name, desc.mip_levels, desc.array_layers, vk::ImageLayout::UNDEFINED));
        Ok(true)
    }

    /// Swaps an image's internals for its new place; the old life retires behind the copy.
    pub(super) fn commit_image(image: &mut Image, mut m: Staged) {
        let destination = m.destination.take().expect("a staged move has its destination");
        let layouts = m.layouts.take().expect("a staged image has its layout record");
        // The old image and range wait for the copy (submitted before the rebind drops them) and
        // for the uses declared on them.
        image.rebind(MovedImage {
            raw: m.image,
            owner: m.heaps.memory(destination),
            parent: None,
            memory: m.memory,
            memory_offset: m.offset,
            size: m.image_size,
            layouts,
        });
    }
}
