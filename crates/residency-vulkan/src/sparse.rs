//! Partially resident images on Vulkan sparse residency.
//!
//! A [`SparseTilePool`] owns the physical tiles: 64 KiB tiles carved out of large `VkDeviceMemory`
//! heaps (the core's [`TilePool`] does the accounting; never one allocation per tile), shared by
//! many [`SparseImage`]s. An image's commits and releases change its page table at once and queue
//! the tile changes; [`SparseTilePool::flush_binds`] turns every queued change of every image into
//! coalesced bind regions (rows, rectangles, whole mips: the driver charges per bind entry) and
//! issues them in one `vkQueueBindSparse` on the sparse queue: unbinds in a first batch, binds in a
//! second that waits on it, so memory released by one image can be bound to another in the same
//! flush. The flush waits for the binds to complete before it returns.
//!
//! Images stay in `GENERAL` layout for their whole life (one transition at creation): a layout
//! transition applies to whole subresources and would discard the contents of resident tiles.
//! Releasing tiles requires that GPU work reading them has completed (the streaming manager tracks
//! that per frame; tests wait for idle).

use crate::device::Device;
use crate::error::{VkResultExt, VulkanError};
use crate::format_map::{aspect, vk_format};
use crate::ledger::{FaultSite, ObjectId};
use crate::memory::{MemoryBlock, MemoryError, RawMemoryDesc};
use crate::residency_backend::{Checked, ResidencyBackend};
use ash::vk;
use residency_core::memory::{memory_type_candidates, MemoryIntent};
use residency_core::tiles::{
    plan_binds, BindPlanError, BindPlanOptions, CommitError, DeviceMipTail, HeapIndex, ImageId, LayoutError,
    LayoutLimits, PendingChanges, PoolError, PoolId, PoolStats, ResidencyChanges, ShapeError,
    SparseDimension, SparseFormatInfo, SparseImageDesc, SparseImageLayout, SparseResidency, TexelRegion,
    TileIndex, TilePool, TilePoolDesc,
};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A sparse operation failed; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum SparseError {
    /// The device cannot do sparse residency for this image; use the software residency path.
    #[error("{0}")]
    Unsupported(#[from] ShapeError),
    /// The image description is invalid or beyond the device's limits (e.g. `sparseAddressSpaceSize`).
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A commit or release was refused (the tile pool is exhausted, a region is wrong, …).
    #[error(transparent)]
    Commit(#[from] CommitError),
    /// Planning binds failed (a bug if it happens: the page table produced the changes).
    #[error(transparent)]
    Plan(#[from] BindPlanError),
    /// The image does not fit the pool (memory types or tile size differ).
    #[error("`{name}`: {reason}")]
    Incompatible {
        /// The image.
        name: String,
        /// Why.
        reason: String,
    },
    /// The device has no sparse-binding queue.
    #[error("the device has no sparse-binding queue; use the software residency path")]
    NoSparseQueue,
    /// A readback larger than the caller's limit.
    #[error("reading back {bytes} B exceeds the limit of {limit} B; read a smaller region")]
    ReadbackTooLarge {
        /// Bytes the readback would read.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// Memory for a heap could not be allocated.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// Reading texels back failed.
    #[error(transparent)]
    ReadBack(#[from] crate::commands::ReadBackError),
    /// Queueing an upload failed.
    #[error(transparent)]
    Upload(#[from] crate::upload::UploadError),
    /// A Vulkan call failed.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

struct PoolState {
    pool: TilePool,
    heaps: TileHeaps,
}

/// The `VkDeviceMemory` behind the heaps of a [`TilePool`]: one allocation per `HeapIndex`, made when
/// the pool adds the heap and freed when it releases it. A [`SparseTilePool`] has one for its own
/// pool; streaming keeps one for the streaming manager's pool.
///
/// The heaps serve one pool: the first one given to [`ensure`](Self::ensure) or
/// [`bind`](Self::bind). Any other pool is refused with [`CommitError::WrongPool`], changing
/// nothing: its heap indices would name this pool's memory.
pub struct TileHeaps {
    device: Arc<Device>,
    memory_type: u32,
    heaps: Vec<Option<MemoryBlock>>,
    pool: Option<PoolId>,
    /// Marks the images made for these heaps ([`SparseImage::new_external`]).
    serial: u64,
}

static NEXT_HEAPS: AtomicU64 = AtomicU64::new(1);

impl std::fmt::Debug for TileHeaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileHeaps")
            .field("memory_type", &self.memory_type)
            .field("heaps", &self.heaps.iter().flatten().count())
            .finish()
    }
}

impl TileHeaps {
    /// Heap memory for sparse images on `device` (device-local, of a type sparse images accept).
    pub fn new(device: Arc<Device>, name: &str) -> Result<TileHeaps, SparseError> {
        if device.sparse_queue().is_none() || !device.features().sparse_residency_image_2d {
            return Err(SparseError::NoSparseQueue);
        }
        // Sparse images of every format accept the same memory types on the devices we know; the
        // RGBA8 probe's types stand for all, and each image is checked when it is created.
        let bits = device
            .profile()
            .formats
            .iter()
            .find_map(|f| f.sparse_2d_probe.map(|p| p.requirements.memory_type_bits))
            .ok_or(SparseError::NoSparseQueue)?;
        let memory_type =
            *memory_type_candidates(&device.memory_properties().types, bits, MemoryIntent::DeviceLocal)
                .first()
                .ok_or_else(|| MemoryError::NoSuitableMemoryType {
                    name: name.to_owned(),
                    allowed_bits: bits,
                    intent: MemoryIntent::DeviceLocal,
                })?;
        Ok(TileHeaps {
            device,
            memory_type,
            heaps: Vec::new(),
            pool: None,
            serial: NEXT_HEAPS.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The pool these heaps serve, once one was given.
    pub fn pool(&self) -> Option<PoolId> {
        self.pool
    }

    /// Whether these heaps may serve `pool`: the pool they serve, or any while they serve none.
    fn check_serves(&self, pool: &TilePool) -> Result<(), CommitError> {
        match self.pool {
            Some(owner) if owner != pool.id() => {
                Err(CommitError::WrongPool { pool: pool.desc().name.clone(), given: pool.id(), owner })
            }
            _ => Ok(()),
        }
    }

    /// The memory type of the heaps.
    pub fn memory_type(&self) -> u32 {
        self.memory_type
    }

    /// Allocates the memory of `heaps` of `pool` that has none yet; returns how many were made.
    /// `pool` must be the pool these heaps serve (the first call makes it so) and `heaps` live heaps
    /// of it; else a typed error and nothing allocated.
    pub fn ensure(&mut self, pool: &TilePool, heaps: &[HeapIndex]) -> Result<u64, SparseError> {
        self.check_serves(pool)?;
        if let Some(missing) = heaps.iter().find(|&&h| pool.heap_tiles(h).is_none()) {
            return Err(CommitError::Pool(PoolError::UnknownHeap(missing.0)).into());
        }
        self.pool = Some(pool.id());
        let mut added = 0;
        for &heap in heaps {
            let index = heap.0 as usize;
            if self.heaps.len() <= index {
                self.heaps.resize_with(index + 1, || None);
            }
            if self.heaps[index].is_some() {
                continue;
            }
            let size = u64::from(pool.heap_tiles(heap).expect("checked live")) * pool.tile_bytes();
            let name = format!("{} heap {}", pool.desc().name, heap.0);
            let desc = RawMemoryDesc {
                name: &name,
                size,
                type_index: self.memory_type,
                allow_over_budget: false,
                dedicated: None,
            };
            self.heaps[index] = Some(MemoryBlock::new(&self.device, desc, 1)?);
            added += 1;
        }
        Ok(added)
    }

    /// Frees the memory of released heaps (nothing may be bound to them any more).
    pub fn release(&mut self, heaps: &[HeapIndex]) {
        for heap in heaps {
            if let Some(block) = self.heaps.get_mut(heap.0 as usize).and_then(Option::take) {
                block.destroy(&self.device);
            }
        }
    }

    fn memory(&self, heap: HeapIndex) -> vk::DeviceMemory {
        self.heaps
            .get(heap.0 as usize)
            .and_then(Option::as_ref)
            .map(|b| b.memory)
            .expect("heaps exist for every bound tile")
    }

    /// Applies residency changes made against `pool` (by a streaming manager, say) to images that
    /// have no residency of their own ([`SparseImage::new_external`]): heaps first (every heap of
    /// `pool` without memory), then one `vkQueueBindSparse` for all of them; waits for it. On an
    /// error nothing was bound (heaps allocated stay, as the pool has them); undoing the changes
    /// in the pool and the page tables is the caller's, who made them.
    ///
    /// Checked first, refused with nothing allocated or bound: `pool` is the pool these heaps
    /// serve ([`CommitError::WrongPool`]); every image was made for these heaps by
    /// [`SparseImage::new_external`] ([`SparseError::Incompatible`]); every non-empty change was
    /// made against `pool` ([`ResidencyChanges::pool`]; [`CommitError::WrongPool`]) and binds
    /// tiles of its live heaps ([`CommitError::Pool`]).
    pub fn bind(
        &mut self,
        pool: &TilePool,
        items: &[(&SparseImage, &ResidencyChanges)],
        options: BindPlanOptions,
    ) -> Result<BindStats, SparseError> {
        self.check_serves(pool)?;
        for (image, changes) in items {
            if image.external != Some(self.serial) {
                return Err(SparseError::Incompatible {
                    name: image.name.clone(),
                    reason: "bound through tile heaps it was not made for (SparseImage::new_external)".into(),
                });
            }
            if changes.tiles.is_empty() && changes.tails.is_empty() {
                continue;
            }
            if changes.pool != pool.id() {
                return Err(CommitError::WrongPool {
                    pool: pool.desc().name.clone(),
                    given: pool.id(),
                    owner: changes.pool,
                }
                .into());
            }
            let bound = changes
                .tiles
                .iter()
                .filter_map(|c| c.physical)
                .chain(changes.tails.iter().filter_map(|c| c.physical.as_deref()).flatten().copied());
            for p in bound {
                match pool.heap_tiles(p.heap) {
                    None => return Err(CommitError::Pool(PoolError::UnknownHeap(p.heap.0)).into()),
                    Some(tiles) if p.tile >= tiles => {
                        return Err(CommitError::Pool(PoolError::OutOfBounds {
                            heap: p.heap.0,
                            first: p.tile,
                            end: u64::from(p.tile) + 1,
                            tiles,
                        })
                        .into())
                    }
                    Some(_) => {}
                }
            }
        }
        let all: Vec<HeapIndex> = pool.heap_indices().collect();
        let heaps_added = self.ensure(pool, &all)?;
        let mut plans = Vec::with_capacity(items.len());
        for (image, changes) in items {
            plans.push((
                image.raw,
                aspect(image.desc.format),
                plan_binds(image.layout(), &changes.tiles, &changes.tails, options)?,
            ));
        }
        let mut stats = submit_plans(&self.device, &plans, self, pool.tile_bytes())?;
        stats.heaps_added = heaps_added;
        Ok(stats)
    }
}

impl Drop for TileHeaps {
    fn drop(&mut self) {
        for block in self.heaps.drain(..).flatten() {
            block.destroy(&self.device);
        }
    }
}

/// Binds planned changes of several images in one `vkQueueBindSparse` on the sparse queue (unbinds
/// in a first batch, binds in a second that waits on it) and waits for the fence.
fn submit_plans(
    device: &Device,
    plans: &[(vk::Image, vk::ImageAspectFlags, residency_core::tiles::BindPlan)],
    heaps: &TileHeaps,
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

/// The physical tiles shared by a device's sparse images.
pub struct SparseTilePool {
    device: Arc<Device>,
    memory_type: u32,
    state: Mutex<PoolState>,
    next_image: AtomicU32,
    pool_id: u32,
    /// The core pool's identity (it never changes).
    tile_pool: PoolId,
    id: ObjectId,
}

impl std::fmt::Debug for SparseTilePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparseTilePool").field("memory_type", &self.memory_type).finish_non_exhaustive()
    }
}

static NEXT_POOL: AtomicU32 = AtomicU32::new(1);

/// What one flush did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BindStats {
    /// Bind entries issued (what the driver charges for).
    pub bind_entries: u64,
    /// Tiles (and mip-tail tiles) bound.
    pub tiles_bound: u64,
    /// Tiles unbound.
    pub tiles_unbound: u64,
    /// Heaps allocated for this flush.
    pub heaps_added: u64,
    /// Wall time of the `vkQueueBindSparse` call(s) until the fence signalled, in microseconds.
    pub micros: u64,
}

impl SparseTilePool {
    /// Creates a pool on `device`; heaps are allocated when tiles are first needed.
    pub fn new(device: Arc<Device>, desc: TilePoolDesc) -> Result<SparseTilePool, SparseError> {
        let mut heaps = TileHeaps::new(Arc::clone(&device), &desc.name)?;
        let memory_type = heaps.memory_type();
        let id = device.ledger().track("sparse tile pool", desc.name.as_str());
        let pool = TilePool::new(desc);
        let tile_pool = pool.id();
        heaps.pool = Some(tile_pool);
        Ok(SparseTilePool {
            device,
            memory_type,
            state: Mutex::new(PoolState { pool, heaps }),
            next_image: AtomicU32::new(1),
            pool_id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
            tile_pool,
            id,
        })
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The identity of its core tile pool (what its images' residency names).
    pub fn id(&self) -> PoolId {
        self.tile_pool
    }

    /// The tile pool's statistics (tiles used and free per heap, runs, fragmentation).
    pub fn stats(&self) -> PoolStats {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).pool.stats()
    }

    /// Tiles in use.
    pub fn used_tiles(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).pool.used_tiles()
    }

    /// Checks the tile pool's invariants (runs in bounds, free lists and owners consistent). For
    /// tests and debugging; a failure is a bug in the library.
    pub fn check_invariants(&self) -> Result<(), residency_core::tiles::PoolInvariantError> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).pool.check_invariants()
    }

    /// Changes the budget (in tiles). Tiles already in use stay.
    pub fn set_budget_tiles(&self, tiles: u32) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).pool.set_budget_tiles(tiles);
    }

    fn with_pool<R>(&self, f: impl FnOnce(&mut TilePool) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()).pool)
    }

    /// Binds and unbinds everything the given images queued since their last flush, in one
    /// `vkQueueBindSparse` on the sparse queue, and waits for it to complete:
    /// [`ResidencyBackend::flush`] with the default planner options.
    pub fn flush_binds(&self, images: &mut [&mut SparseImage]) -> Result<BindStats, SparseError> {
        SparseImage::flush(self, BindPlanOptions::default(), images)
    }

    /// [`SparseTilePool::flush_binds`] with planner options (e.g. no coalescing, for benchmarks).
    pub fn flush_binds_with(
        &self,
        images: &mut [&mut SparseImage],
        options: BindPlanOptions,
    ) -> Result<BindStats, SparseError> {
        SparseImage::flush(self, options, images)
    }

    /// The flush after [`ResidencyBackend::flush`] checked that every image is this pool's.
    fn flush_checked(
        &self,
        images: &mut [&mut SparseImage],
        options: BindPlanOptions,
    ) -> Result<BindStats, SparseError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *state;
        match flush_pending(&self.device, state, images, options) {
            Ok(stats) => {
                for image in images.iter_mut() {
                    image.flushed();
                }
                Ok(stats)
            }
            Err(e) => {
                // Nothing was bound: undo the commits queued since the last flush, so that the page
                // tables and the pool are as they were before them (a retry commits again).
                let added: Vec<HeapIndex> =
                    images.iter().flat_map(|i| i.pending.changes().heaps_added.iter().copied()).collect();
                for image in images.iter_mut() {
                    image.roll_back(&mut state.pool);
                }
                // Heaps made for those commits go again, unless that would take heaps that were
                // empty before (trimming is the application's call).
                let empty: Vec<HeapIndex> =
                    state.pool.stats().heaps.iter().filter(|h| h.used == 0).map(|h| h.heap).collect();
                if !empty.is_empty() && empty.iter().all(|h| added.contains(h)) {
                    let released = state.pool.trim();
                    state.heaps.release(&released);
                }
                Err(e)
            }
        }
    }
}

/// Allocates memory for every heap of the pool that has none yet (a heap added by one image's
/// commit may already hold another image's tiles), plans every image's queued changes and binds
/// them in one submission.
fn flush_pending(
    device: &Device,
    state: &mut PoolState,
    images: &[&mut SparseImage],
    options: BindPlanOptions,
) -> Result<BindStats, SparseError> {
    let all: Vec<HeapIndex> = state.pool.heap_indices().collect();
    let heaps_added = state.heaps.ensure(&state.pool, &all)?;
    let mut plans = Vec::with_capacity(images.len());
    for image in images {
        let pending = image.pending.changes();
        let plan = plan_binds(image.residency.layout(), &pending.tiles, &pending.tails, options)?;
        plans.push((image.raw, aspect(image.desc.format), plan));
    }
    let mut stats = submit_plans(device, &plans, &state.heaps, state.pool.tile_bytes())?;
    stats.heaps_added = heaps_added;
    Ok(stats)
}

fn submit_binds(
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

impl SparseTilePool {
    /// Releases heaps that hold no tiles.
    pub fn trim(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let released = state.pool.trim();
        state.heaps.release(&released);
    }
}

impl Drop for SparseTilePool {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for (owner, tiles) in state.pool.leaks() {
            tracing::error!(
                owner = owner.0,
                tiles,
                "sparse tile pool dropped while an image still holds tiles"
            );
        }
        self.device.ledger().untrack(self.id);
    }
}

fn image_infos<'a>(
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

fn opaque_infos<'a>(
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

/// A partially resident image.
#[derive(Debug)]
#[must_use = "a sparse image is released only by destroying it through its pool"]
pub struct SparseImage {
    raw: vk::Image,
    view: vk::ImageView,
    desc: SparseImageDesc,
    name: String,
    residency: SparseResidency,
    /// Changes queued for the next flush, folded per tile.
    pending: PendingChanges,
    /// For an image made by [`SparseImage::new_external`]: the serial of its [`TileHeaps`].
    external: Option<u64>,
    id: ObjectId,
    /// Its device's process-unique id and its usage, for descriptor sets.
    device_uid: u64,
    usage: vk::ImageUsageFlags,
}

fn sparse_create_info(desc: &SparseImageDesc, storage: bool) -> vk::ImageCreateInfo<'static> {
    let mut usage =
        vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::TRANSFER_SRC;
    if storage {
        usage |= vk::ImageUsageFlags::STORAGE;
    }
    vk::ImageCreateInfo::default()
        .flags(vk::ImageCreateFlags::SPARSE_BINDING | vk::ImageCreateFlags::SPARSE_RESIDENCY)
        .image_type(match desc.dimension {
            SparseDimension::D2 => vk::ImageType::TYPE_2D,
            SparseDimension::D3 => vk::ImageType::TYPE_3D,
        })
        .format(vk_format(desc.format))
        .extent(vk::Extent3D { width: desc.width, height: desc.height, depth: desc.depth })
        .mip_levels(desc.mip_levels)
        .array_layers(desc.array_layers)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED)
}

impl SparseImage {
    /// Creates a partially resident image with nothing resident, in `GENERAL` layout, with a view of
    /// all its mips (and layers). `storage` adds storage-image usage (writes into resident tiles).
    pub fn new(
        pool: &SparseTilePool,
        name: &str,
        desc: &SparseImageDesc,
        storage: bool,
    ) -> Result<SparseImage, SparseError> {
        let owner = ImageId(pool.pool_id << 20 | pool.next_image.fetch_add(1, Ordering::Relaxed));
        let tile_bytes = pool.with_pool(|p| p.tile_bytes());
        let residency = (pool.tile_pool, owner);
        Self::create(&pool.device, pool.memory_type, tile_bytes, residency, None, name, desc, storage)
    }

    /// Creates an image whose residency someone else keeps (a streaming manager): its tiles are
    /// bound with [`TileHeaps::bind`] through `heaps` from that owner's changes, and its own page
    /// table stays empty (its residency names [`PoolId::NONE`]: every commit, release and flush
    /// through a [`SparseTilePool`] is refused).
    pub fn new_external(
        heaps: &TileHeaps,
        tile_bytes: u64,
        owner: ImageId,
        name: &str,
        desc: &SparseImageDesc,
        storage: bool,
    ) -> Result<SparseImage, SparseError> {
        let residency = (PoolId::NONE, owner);
        Self::create(
            &heaps.device,
            heaps.memory_type,
            tile_bytes,
            residency,
            Some(heaps.serial),
            name,
            desc,
            storage,
        )
    }

    #[allow(clippy::too_many_arguments, reason = "the private constructor behind `new` and `new_external`")]
    fn create(
        device: &Arc<Device>,
        memory_type: u32,
        tile_bytes: u64,
        (pool, owner): (PoolId, ImageId),
        external: Option<u64>,
        name: &str,
        desc: &SparseImageDesc,
        storage: bool,
    ) -> Result<SparseImage, SparseError> {
        let device = &**device;
        let profile = device.profile();
        let info = SparseFormatInfo::from_profile(profile, desc.format, desc.dimension)?;
        let limits = LayoutLimits::from_profile(profile);
        // Validate the description (limits, address space) before creating anything.
        SparseImageLayout::new(desc, &info, &limits)?;
        let create = sparse_create_info(desc, storage);
        // SAFETY: a pure query on this device's physical device.
        let supported = unsafe {
            device.instance().get_physical_device_image_format_properties(
                device.physical(),
                create.format,
                create.image_type,
                create.tiling,
                create.usage,
                create.flags,
            )
        };
        if supported.is_err() {
            return Err(SparseError::Unsupported(ShapeError::FormatUnsupported {
                device: device.name().to_owned(),
                format: desc.format,
                dimension: desc.dimension,
            }));
        }
        let raw = device
            .ledger()
            .guard(FaultSite::CreateResource, || {
                // SAFETY: the description was checked against the device's limits and format
                // properties.
                unsafe { device.raw().create_image(&create, None) }
            })
            .during("vkCreateImage")?;
        let destroy = |e: SparseError| {
            // SAFETY: created above, no memory bound, not used.
            unsafe { device.raw().destroy_image(raw, None) };
            e
        };
        device.set_name(raw, name);
        // SAFETY: raw is a sparse image of this device.
        let requirements = unsafe { device.raw().get_image_memory_requirements(raw) };
        if requirements.alignment != tile_bytes || requirements.memory_type_bits & (1 << memory_type) == 0 {
            return Err(destroy(SparseError::Incompatible {
                name: name.to_owned(),
                reason: format!(
                    "sparse block {} B and memory types {:#b} do not fit the pool ({} B tiles, type {})",
                    requirements.alignment, requirements.memory_type_bits, tile_bytes, memory_type
                ),
            }));
        }
        // SAFETY: raw is a sparse image of this device.
        let sparse_reqs = unsafe { device.raw().get_image_sparse_memory_requirements(raw) };
        let wanted = aspect(desc.format);
        let Some(req) = sparse_reqs.iter().find(|r| r.format_properties.aspect_mask.intersects(wanted))
        else {
            return Err(destroy(SparseError::Incompatible {
                name: name.to_owned(),
                reason: "the driver reports no sparse requirements for the image's aspect".into(),
            }));
        };
        let tail = DeviceMipTail {
            first_lod: req.image_mip_tail_first_lod,
            size: req.image_mip_tail_size,
            offset: req.image_mip_tail_offset,
            stride: req.image_mip_tail_stride,
        };
        let layout = SparseImageLayout::with_device_mip_tail(desc, &info, &limits, tail)
            .map_err(|e| destroy(e.into()))?;
        let view_info = vk::ImageViewCreateInfo::default()
            .image(raw)
            .view_type(match (desc.dimension, desc.array_layers) {
                (SparseDimension::D3, _) => vk::ImageViewType::TYPE_3D,
                (SparseDimension::D2, 1) => vk::ImageViewType::TYPE_2D,
                (SparseDimension::D2, _) => vk::ImageViewType::TYPE_2D_ARRAY,
            })
            .format(create.format)
            .subresource_range(vk::ImageSubresourceRange {
                aspect_mask: wanted,
                base_mip_level: 0,
                level_count: desc.mip_levels,
                base_array_layer: 0,
                layer_count: desc.array_layers,
            });
        // SAFETY: raw is live; the range covers exactly its mips and layers.
        let view = unsafe { device.raw().create_image_view(&view_info, None) }
            .map_err(|r| destroy(VulkanError::from_vk("vkCreateImageView", r).into()))?;
        device.set_name(view, &format!("{name} view"));
        let to_general = [vk::ImageMemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::NONE)
            .dst_stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)
            .dst_access_mask(vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE)
            .old_layout(vk::ImageLayout::UNDEFINED)
            .new_layout(vk::ImageLayout::GENERAL)
            .image(raw)
            .subresource_range(view_info.subresource_range)];
        let transitioned = device.submit_once("sparse image to GENERAL", |rec| {
            // SAFETY: `rec` is recording on this device outside a render pass; the image is live.
            unsafe {
                device.raw().cmd_pipeline_barrier2(
                    rec.raw(),
                    &vk::DependencyInfo::default().image_memory_barriers(&to_general),
                );
            }
        });
        if let Err(e) = transitioned {
            // SAFETY: the view was created above and is unused.
            unsafe { device.raw().destroy_image_view(view, None) };
            return Err(destroy(e.into()));
        }
        let id = device.ledger().track("sparse image", name);
        Ok(SparseImage {
            raw,
            view,
            desc: *desc,
            name: name.to_owned(),
            residency: SparseResidency::new(pool, owner, &layout),
            pending: PendingChanges::new(),
            external,
            id,
            device_uid: device.uid(),
            usage: create.usage,
        })
    }

    /// Queues changes for the next flush, folded ([`PendingChanges::queue`]).
    fn queue(&mut self, changes: ResidencyChanges) {
        self.pending.queue(changes);
    }

    /// The queued changes reached the GPU.
    fn flushed(&mut self) {
        self.pending.flushed();
    }

    /// A flush failed, so nothing queued reached the GPU: the commits queued since the last flush
    /// are undone and the unbinds of what the GPU still has bound stay queued
    /// ([`PendingChanges::roll_back`]).
    fn roll_back(&mut self, pool: &mut TilePool) {
        if let Err(e) = self.pending.roll_back(&mut self.residency, pool) {
            tracing::error!(image = %self.name, error = %e, "undoing the commits of a failed flush");
        }
    }

    /// The `VkImage`.
    pub fn raw(&self) -> vk::Image {
        self.raw
    }

    /// A view of all its mips and layers.
    pub fn view(&self) -> vk::ImageView {
        self.view
    }

    /// What a descriptor set binding the view needs: the view, its device's id, the usage.
    pub(crate) fn view_binding(&self) -> (vk::ImageView, u64, vk::ImageUsageFlags) {
        (self.view, self.device_uid, self.usage)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its description.
    pub fn desc(&self) -> &SparseImageDesc {
        &self.desc
    }

    /// Its layout (tile grid per mip, mip tail as the driver reported it).
    pub fn layout(&self) -> &SparseImageLayout {
        self.residency.layout()
    }

    /// Its residency: the page table, residency bitmaps and the min-LOD map.
    pub fn residency(&self) -> &SparseResidency {
        &self.residency
    }

    /// Mutable residency, for the streaming manager (min-LOD refresh).
    pub fn residency_mut(&mut self) -> &mut SparseResidency {
        &mut self.residency
    }

    /// Whether changes are queued for the next flush.
    pub fn has_pending_binds(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Makes every tile of (`layer`, `mip`) that `region` touches resident (a mip in the tail
    /// commits the tail). The binds happen at the next [`SparseTilePool::flush_binds`].
    /// [`ResidencyBackend::commit_region`], callable without the trait in scope.
    pub fn commit_region(
        &mut self,
        pool: &SparseTilePool,
        layer: u32,
        mip: u32,
        region: TexelRegion,
    ) -> Result<(), SparseError> {
        ResidencyBackend::commit_region(self, pool, layer, mip, region)
    }

    /// Makes specific tiles resident: [`ResidencyBackend::commit_tiles`].
    pub fn commit_tiles(&mut self, pool: &SparseTilePool, tiles: &[TileIndex]) -> Result<(), SparseError> {
        ResidencyBackend::commit_tiles(self, pool, tiles)
    }

    /// Makes mip tail `tail` resident (one unit, pinned until released explicitly):
    /// [`ResidencyBackend::commit_tail`].
    pub fn commit_tail(&mut self, pool: &SparseTilePool, tail: u32) -> Result<(), SparseError> {
        ResidencyBackend::commit_tail(self, pool, tail)
    }

    /// Releases the tiles of (`layer`, `mip`) that `region` touches (the seed's NULL upload). GPU work
    /// reading them must have completed. [`ResidencyBackend::release_region`].
    pub fn release_region(
        &mut self,
        pool: &SparseTilePool,
        layer: u32,
        mip: u32,
        region: TexelRegion,
    ) -> Result<(), SparseError> {
        ResidencyBackend::release_region(self, pool, layer, mip, region)
    }

    /// Releases specific tiles: [`ResidencyBackend::release_tiles`].
    pub fn release_tiles(&mut self, pool: &SparseTilePool, tiles: &[TileIndex]) -> Result<(), SparseError> {
        ResidencyBackend::release_tiles(self, pool, tiles)
    }

    /// Releases everything, tails included: [`ResidencyBackend::release_all`].
    pub fn release_all(&mut self, pool: &SparseTilePool) -> Result<(), SparseError> {
        ResidencyBackend::release_all(self, pool)
    }

    /// Destroys the image: its tiles go back to the pool (no unbind is needed for a destroyed image).
    /// GPU work using it must have completed.
    ///
    /// Through a pool other than its own (or for an image of [`SparseImage::new_external`]) it
    /// frees nothing and destroys nothing: freeing another pool's tiles would alias them and the
    /// other pool's device may not be the image's. The error is logged, and the image and its tiles
    /// stay behind as leaks (reported by name at teardown).
    pub fn destroy(self, pool: &SparseTilePool) {
        if let Err(e) = pool.with_pool(|p| self.residency.check_pool(p)) {
            tracing::error!(image = %self.name, error = %e, "sparse image destroyed through the wrong pool; leaked");
            return;
        }
        pool.with_pool(|p| p.free_owner(self.residency.owner()));
        self.destroy_objects(&pool.device);
    }

    /// Destroys an image made by [`SparseImage::new_external`] (its owner frees the tiles in its own
    /// pool). GPU work using it must have completed.
    pub fn destroy_external(self, device: &Device) {
        self.destroy_objects(device);
    }

    fn destroy_objects(self, device: &Device) {
        // SAFETY: the image and view belong to this device and no pending work uses them (caller's
        // contract); destroying a sparse image releases its bindings.
        unsafe {
            device.raw().destroy_image_view(self.view, None);
            device.raw().destroy_image(self.raw, None);
        }
        device.ledger().untrack(self.id);
    }
}

impl ResidencyBackend for SparseImage {
    type Pool = SparseTilePool;
    type FlushContext<'a> = BindPlanOptions;
    type FlushStats = BindStats;
    type Error = SparseError;
    const GLSL_INCLUDE: &'static str = "residency.glsl";

    fn name(&self) -> &str {
        &self.name
    }

    fn residency(&self) -> &SparseResidency {
        &self.residency
    }

    fn commit_error(error: &SparseError) -> Option<&CommitError> {
        match error {
            SparseError::Commit(e) => Some(e),
            _ => None,
        }
    }

    fn with_tile_pool_unchecked<R>(
        pool: &SparseTilePool,
        f: impl FnOnce(&mut TilePool) -> R,
        _: Checked,
    ) -> R {
        pool.with_pool(f)
    }

    fn residency_mut_unchecked(&mut self, _: Checked) -> &mut SparseResidency {
        &mut self.residency
    }

    fn queue_unchecked(&mut self, changes: ResidencyChanges, _: Checked) {
        self.queue(changes);
    }

    fn flush_unchecked(
        pool: &SparseTilePool,
        options: BindPlanOptions,
        images: &mut [&mut SparseImage],
        _: Checked,
    ) -> Result<BindStats, SparseError> {
        pool.flush_checked(images, options)
    }
}

impl SparseImage {
    /// Reads back the texels of `region` of (`layer`, `mip`), tightly packed. Non-resident texels read
    /// as whatever the device returns for unbound memory (zero with residencyNonResidentStrict;
    /// undefined elsewhere — never rely on it). A region of more than `limit` bytes is refused with
    /// the number of bytes it would read.
    pub fn read_region(
        &self,
        device: &Device,
        layer: u32,
        mip: u32,
        region: TexelRegion,
        limit: u64,
    ) -> Result<Vec<u8>, SparseError> {
        let info = *self.layout().mip(mip).ok_or(CommitError::NoSuchSubresource { layer, mip })?;
        if layer >= self.desc.array_layers
            || (0..3).any(|a| region.extent[a] == 0 || region.offset[a] + region.extent[a] > info.extent[a])
        {
            return Err(CommitError::NoSuchSubresource { layer, mip }.into());
        }
        let bytes = self.desc.format.region_bytes(region.extent[0], region.extent[1], region.extent[2]);
        if bytes > limit {
            return Err(SparseError::ReadbackTooLarge { bytes, limit });
        }
        let copy = crate::upload::ImageRegion {
            image: self.raw,
            layout: vk::ImageLayout::GENERAL,
            aspect: aspect(self.desc.format),
            mip,
            layer,
            offset: region.offset,
            extent: region.extent,
        }
        .buffer_image_copy(0);
        let bytes = device.copy_to_host(&self.name, bytes, |cmd, staging| {
            // SAFETY: `cmd` is recording on this device; the image (GENERAL layout) and the buffer are
            // live and the region lies in both.
            unsafe {
                device.raw().cmd_copy_image_to_buffer(
                    cmd,
                    self.raw,
                    vk::ImageLayout::GENERAL,
                    staging,
                    &[copy],
                )
            };
        })?;
        Ok(bytes)
    }
}

/// The per-region min-LOD map of a 2D sparse image as a texture: one `r8_uint` texel per mip-0
/// tile (per layer), the finest LOD whose chain down to the coarsest level is resident there
/// (255 = nothing resident). Shaders clamp to it (`residency.glsl`); [`MinLodMap::update`] uploads
/// the entries that changed, in the same frame as the binds.
#[derive(Debug)]
pub struct MinLodMap {
    image: crate::Image,
    view: crate::ImageView,
    uploaded: bool,
}

impl MinLodMap {
    /// Creates the map texture for `image` (2D images and 2D arrays). Its contents are undefined
    /// until the first [`upload_updates`](Self::upload_updates), which writes the whole map (pass
    /// no updates to initialize it before the first frame that samples it).
    pub fn new(device: &Device, image: &SparseImage) -> Result<MinLodMap, SparseError> {
        let [w, h, d] = image.residency().page_table().min_lod_extent();
        if image.desc.dimension != SparseDimension::D2 || d != 1 {
            return Err(SparseError::Incompatible {
                name: image.name.clone(),
                reason: "min-LOD map textures are made for 2D images".into(),
            });
        }
        let mut desc = crate::ImageDesc::new_2d(
            format!("{} min-LOD map", image.name),
            residency_core::format::Format::R8Uint,
            w,
            h,
            residency_core::usage::ImageUsage::SAMPLED | residency_core::usage::ImageUsage::COPY_DST,
        );
        desc.array_layers = image.desc.array_layers;
        let texture = device.create_image(&desc)?;
        let view = match device.create_image_view(&texture, 0..1) {
            Ok(v) => v,
            Err(e) => {
                drop(texture);
                return Err(e.into());
            }
        };
        if let Err(e) = device.discard_to_general(&[&texture]) {
            drop(view);
            drop(texture);
            return Err(e.into());
        }
        Ok(MinLodMap { image: texture, view, uploaded: false })
    }

    /// The view to bind as a `usampler2D` (or array), in `GENERAL` layout.
    pub fn view(&self) -> &crate::ImageView {
        &self.view
    }

    /// Refreshes `image`'s min-LOD entries changed since the last update and queues their upload
    /// (the whole map the first time). Returns the number of entries uploaded.
    pub fn update(
        &mut self,
        device: &Device,
        uploader: &crate::Uploader,
        image: &mut SparseImage,
    ) -> Result<u64, SparseError> {
        let updates = image.residency_mut().refresh_min_lod();
        self.upload_updates(device, uploader, image.residency().page_table(), &updates)
    }

    /// Queues the upload of the entries of `table`'s min-LOD map that `updates` name (all of them
    /// the first time): for images whose residency another owner keeps (a streaming manager's
    /// changes carry the updates).
    pub fn upload_updates(
        &mut self,
        _device: &Device,
        uploader: &crate::Uploader,
        table: &residency_core::tiles::PageTable,
        updates: &[residency_core::tiles::MinLodUpdate],
    ) -> Result<u64, SparseError> {
        let [w, h, _] = table.min_lod_extent();
        let boxes: Vec<(u32, [u32; 2], [u32; 2])> = if self.uploaded {
            updates
                .iter()
                .map(|u| {
                    (u.layer, [u.regions.start[0], u.regions.start[1]], [u.regions.end[0], u.regions.end[1]])
                })
                .collect()
        } else {
            (0..table.layout().array_layers()).map(|layer| (layer, [0, 0], [w, h])).collect()
        };
        let mut uploaded = 0;
        for (layer, start, end) in boxes {
            let entries = table.min_lod_layer(layer);
            let data: Vec<u8> = (start[1]..end[1])
                .flat_map(|y| (start[0]..end[0]).map(move |x| (y * w + x) as usize))
                .map(|i| entries[i])
                .collect();
            let region = crate::ImageRegion {
                image: self.image.raw(),
                layout: vk::ImageLayout::GENERAL,
                aspect: vk::ImageAspectFlags::COLOR,
                mip: 0,
                layer,
                offset: [start[0], start[1], 0],
                extent: [end[0] - start[0], end[1] - start[1], 1],
            };
            uploader.write_image(&region, &data)?;
            uploaded += data.len() as u64;
        }
        self.uploaded = true;
        Ok(uploaded)
    }

    /// Destroys the map texture.
    pub fn destroy(self, _device: &Device) {
        drop(self.view);
        drop(self.image);
    }
}
