//! Binding: planned tile changes of several images turned into one `vkQueueBindSparse`
//! (unbinds first, binds after), waited for.

use super::*;

/// Binds planned changes of several images in one `vkQueueBindSparse` on the sparse queue (unbinds
/// in a first batch, binds in a second that waits on it) and waits for the fence.
pub(super) fn submit_plans(
    device: &Device,
    plans: &[(vk::Image, vk::ImageAspectFlags, residency_core::tiles::BindPlan)],
    heaps: &HeapsState,
    tile_bytes: u64,
) -> Result<BindStats, SparseError> {
    let mut stats = BindStats::default();
    let mut unbind_regions: Vec<Vec<vk::SparseImageMemoryBind>> = Vec::new();
    let mut bind_regions: Vec<Vec<vk::SparseImageMemoryBind>> = Vec::new();
    let mut unbind_opaque: Vec<Vec<vk::SparseMemoryBind>> = Vec::new();
    let mut bind_opaque: Vec<Vec<vk::SparseMemoryBind>> = Vec::new();
    for (_, aspect_mask, plan) in plans {
        let (mut u, mut b) = (Vec::new(), Vec::new());
        for bind in &plan.image_binds {
            let tiles = bind.tiles.count();
            let (memory, offset) = match bind.memory {
                Some(m) => {
                    stats.tiles_bound += tiles;
                    (heaps.memory(m.heap), m.offset)
                }
                None => {
                    stats.tiles_unbound += tiles;
                    (vk::DeviceMemory::null(), 0)
                }
            };
            let entry = vk::SparseImageMemoryBind {
                subresource: vk::ImageSubresource {
                    aspect_mask: *aspect_mask,
                    mip_level: bind.mip,
                    array_layer: bind.layer,
                },
                offset: vk::Offset3D {
                    x: bind.offset[0] as i32,
                    y: bind.offset[1] as i32,
                    z: bind.offset[2] as i32,
                },
                extent: vk::Extent3D { width: bind.extent[0], height: bind.extent[1], depth: bind.extent[2] },
                memory,
                memory_offset: offset,
                flags: vk::SparseMemoryBindFlags::empty(),
            };
            if bind.memory.is_some() {
                b.push(entry)
            } else {
                u.push(entry)
            }
        }
        let (mut ou, mut ob) = (Vec::new(), Vec::new());
        for bind in &plan.opaque_binds {
            let tiles = bind.size.div_ceil(tile_bytes);
            let entry = vk::SparseMemoryBind {
                resource_offset: bind.resource_offset,
                size: bind.size,
                memory: bind.memory.map_or(vk::DeviceMemory::null(), |m| heaps.memory(m.heap)),
                memory_offset: bind.memory.map_or(0, |m| m.offset),
                flags: vk::SparseMemoryBindFlags::empty(),
            };
            if bind.memory.is_some() {
                stats.tiles_bound += tiles;
                ob.push(entry);
            } else {
                stats.tiles_unbound += tiles;
                ou.push(entry);
            }
        }
        stats.bind_entries += (u.len() + b.len() + ou.len() + ob.len()) as u64;
        unbind_regions.push(u);
        bind_regions.push(b);
        unbind_opaque.push(ou);
        bind_opaque.push(ob);
    }
    let raws: Vec<vk::Image> = plans.iter().map(|(raw, ..)| *raw).collect();
    let (unbind_images, unbind_tails) =
        (image_infos(&raws, &unbind_regions), opaque_infos(&raws, &unbind_opaque));
    let (bind_images, bind_tails) = (image_infos(&raws, &bind_regions), opaque_infos(&raws, &bind_opaque));
    if !unbind_images.is_empty()
        || !unbind_tails.is_empty()
        || !bind_images.is_empty()
        || !bind_tails.is_empty()
    {
        let started = Instant::now();
        submit_binds(device, (&unbind_images, &unbind_tails), (&bind_images, &bind_tails))?;
        stats.micros = started.elapsed().as_micros() as u64;
    }
    Ok(stats)
}

pub(super) fn submit_binds(
    device: &Device,
    unbinds: (&[vk::SparseImageMemoryBindInfo<'_>], &[vk::SparseImageOpaqueMemoryBindInfo<'_>]),
    binds: (&[vk::SparseImageMemoryBindInfo<'_>], &[vk::SparseImageOpaqueMemoryBindInfo<'_>]),
) -> Result<(), SparseError> {
    let queue = device.sparse_queue().ok_or(SparseError::NoSparseQueue)?;
    let has_unbinds = !unbinds.0.is_empty() || !unbinds.1.is_empty();
    let has_binds = !binds.0.is_empty() || !binds.1.is_empty();
    // SAFETY: valid device; the semaphore and fence are destroyed below after the fence wait.
    let (semaphore, fence) = unsafe {
        let semaphore = device
            .raw()
            .create_semaphore(&vk::SemaphoreCreateInfo::default(), None)
            .during("vkCreateSemaphore")?;
        match device.raw().create_fence(&vk::FenceCreateInfo::default(), None) {
            Ok(fence) => (semaphore, fence),
            Err(r) => {
                device.raw().destroy_semaphore(semaphore, None);
                return Err(VulkanError::from_vk("vkCreateFence", r).into());
            }
        }
    };
    let semaphores = [semaphore];
    let mut batches = Vec::new();
    if has_unbinds {
        let mut batch = vk::BindSparseInfo::default().image_binds(unbinds.0).image_opaque_binds(unbinds.1);
        if has_binds {
            batch = batch.signal_semaphores(&semaphores);
        }
        batches.push(batch);
    }
    if has_binds {
        let mut batch = vk::BindSparseInfo::default().image_binds(binds.0).image_opaque_binds(binds.1);
        if has_unbinds {
            batch = batch.wait_semaphores(&semaphores);
        }
        batches.push(batch);
    }
    let submitted = {
        let queue = queue.lock();
        device.ledger().guard(FaultSite::BindSparse, || {
            // SAFETY: the queue is locked and supports sparse binding; every image is a live sparse
            // image of this device, every memory a live heap of this pool, and the regions are
            // tile-aligned (or reach the mip edge) as the planner guarantees.
            unsafe { device.raw().queue_bind_sparse(*queue, &batches, fence) }
        })
    }
    .during("vkQueueBindSparse");
    let was_submitted = submitted.is_ok();
    let result = submitted.and_then(|()| {
        device
            .ledger()
            .guard(FaultSite::Wait, || {
                // SAFETY: the fence belongs to this device and was just submitted.
                unsafe { device.raw().wait_for_fences(&[fence], true, u64::MAX) }
            })
            .during("vkWaitForFences")
    });
    if was_submitted && result.is_err() {
        // The wait failed (device lost): the binds may still run; wait for them, bounded.
        device.settle_fences(&[fence]);
    }
    // SAFETY: the fence has signalled, was never submitted, or the device is lost; the semaphore
    // is only used by the batches that completed with it.
    unsafe {
        device.raw().destroy_fence(fence, None);
        device.raw().destroy_semaphore(semaphore, None);
    }
    result.map_err(SparseError::from)
}

pub(super) fn image_infos<'a>(
    images: &[vk::Image],
    regions: &'a [Vec<vk::SparseImageMemoryBind>],
) -> Vec<vk::SparseImageMemoryBindInfo<'a>> {
    images
        .iter()
        .zip(regions)
        .filter(|(_, r)| !r.is_empty())
        .map(|(&image, r)| vk::SparseImageMemoryBindInfo::default().image(image).binds(r))
        .collect()
}

pub(super) fn opaque_infos<'a>(
    images: &[vk::Image],
    regions: &'a [Vec<vk::SparseMemoryBind>],
) -> Vec<vk::SparseImageOpaqueMemoryBindInfo<'a>> {
    images
        .iter()
        .zip(regions)
        .filter(|(_, r)| !r.is_empty())
        .map(|(&image, r)| vk::SparseImageOpaqueMemoryBindInfo::default().image(image).binds(r))
        .collect()
}
