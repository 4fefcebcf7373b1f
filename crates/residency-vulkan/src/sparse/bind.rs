//! Binding: planned tile changes of several images turned into one `vkQueueBindSparse`
//! (unbinds first, binds after) that signals the device's sparse timeline; waited for, or
//! returned as a [`GpuUse`] for the renderer's frame to wait on.

use super::*;

/// Binds planned changes of several images in one `vkQueueBindSparse` on the sparse queue (unbinds
/// in a first batch, binds in a second that waits on it), after `waits`; with `wait`, waits for
/// it. Returns the point of the sparse timeline it signals (`None`: nothing to bind).
pub(super) fn submit_plans(
    device: &Device,
    plans: &[(vk::Image, vk::ImageAspectFlags, residency_core::tiles::BindPlan)],
    heaps: &HeapsState,
    tile_bytes: u64,
    waits: &[GpuUse],
    wait: bool,
) -> Result<(BindStats, Option<GpuUse>), SparseError> {
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
        let done =
            submit_binds(device, (&unbind_images, &unbind_tails), (&bind_images, &bind_tails), waits, wait)?;
        stats.micros = started.elapsed().as_micros() as u64;
        return Ok((stats, Some(done)));
    }
    Ok((stats, None))
}

pub(super) fn submit_binds(
    device: &Device,
    unbinds: (&[vk::SparseImageMemoryBindInfo<'_>], &[vk::SparseImageOpaqueMemoryBindInfo<'_>]),
    binds: (&[vk::SparseImageMemoryBindInfo<'_>], &[vk::SparseImageOpaqueMemoryBindInfo<'_>]),
    waits: &[GpuUse],
    wait: bool,
) -> Result<GpuUse, SparseError> {
    let queue = device.sparse_queue().ok_or(SparseError::NoSparseQueue)?;
    let has_unbinds = !unbinds.0.is_empty() || !unbinds.1.is_empty();
    let has_binds = !binds.0.is_empty() || !binds.1.is_empty();
    // After the renderer frames submitted on its other queues too: they may use this memory.
    let frames = device.external_frame_waits();
    let infos = waits.iter().chain(&frames).map(|w| device.wait_info(w)).collect::<Result<Vec<_>, _>>()?;
    let mut wait_semaphores: Vec<vk::Semaphore> = infos.iter().map(|i| i.semaphore).collect();
    let mut wait_values: Vec<u64> = infos.iter().map(|i| i.value).collect();
    let sparse = [device.retirement().sparse];
    let done = {
        let queue = queue.lock()?;
        // Values of the device's sparse timeline are taken under the sparse queue lock, so they
        // grow in submission order; published only once the submission succeeded. Each bind
        // waits for the one before, so the timeline's signals also run in that order.
        let first = device.retirement().next_sparse();
        if first > 1 {
            wait_semaphores.push(sparse[0]);
            wait_values.push(first - 1);
        }
        let two = has_unbinds && has_binds;
        let last = first + u64::from(two);
        let (first_values, last_values) = ([first], [last]);
        let mut first_timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&first_values);
        let mut second_timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&first_values)
            .signal_semaphore_values(&last_values);
        // Unbinds first (a tile's memory leaves its old place before it is bound to a new one:
        // memory bound twice needs sparseResidencyAliased), binds in a batch that waits for them.
        let (a, b) = if has_unbinds { unbinds } else { binds };
        let mut batches = vec![vk::BindSparseInfo::default()
            .image_binds(a)
            .image_opaque_binds(b)
            .wait_semaphores(&wait_semaphores)
            .signal_semaphores(&sparse)
            .push_next(&mut first_timeline)];
        if two {
            batches.push(
                vk::BindSparseInfo::default()
                    .image_binds(binds.0)
                    .image_opaque_binds(binds.1)
                    .wait_semaphores(&sparse)
                    .signal_semaphores(&sparse)
                    .push_next(&mut second_timeline),
            );
        }
        device
            .ledger()
            .guard(FaultSite::BindSparse, || {
                // SAFETY: the queue is locked and supports sparse binding; every image is a live
                // sparse image of this device, every memory a live heap of this pool, and the
                // regions are tile-aligned (or reach the mip edge) as the planner guarantees. The
                // semaphores are timeline semaphores of this device: residency's sparse timeline
                // (its values above any signalled or pending, taken under the queue lock) and the
                // waits `wait_info` checked (residency's own timelines, whose waited values were
                // published after their submissions, or the renderer's timelines).
                unsafe { device.raw().queue_bind_sparse(*queue, &batches, vk::Fence::null()) }
            })
            .during("vkQueueBindSparse")?;
        device.retirement().published_sparse(last);
        GpuUse {
            device: device.uid(),
            point: residency_core::sync::GpuPoint::new(crate::device::life::SPARSE, last),
        }
    };
    if wait {
        wait_for_bind(device, &done)?;
    }
    Ok(done)
}

/// Waits on the host for a bind submitted by [`submit_binds`] (the fault hook's `Wait` site
/// first).
pub(super) fn wait_for_bind(device: &Device, done: &GpuUse) -> Result<(), SparseError> {
    device.ledger().guard(FaultSite::Wait, || Ok(())).during("vkWaitSemaphores")?;
    device.wait_until(done)?;
    Ok(())
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
