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
//!
//! Ownership follows the crate's rules: pools, heaps, images and min-LOD maps are released on drop,
//! deferred until the GPU work that may use them has completed. An image keeps its pool's state and
//! heaps alive, and a heap's memory is freed only once no image has tiles of it bound on the GPU
//! ([`TileHeaps`] counts, per heap, the tiles its completed binds left bound), through the device's
//! retire queue. A dropped image's tiles go back to its pool when its garbage is destroyed.

pub mod backend;
pub mod software;

use crate::device::Device;
use crate::error::{VkResultExt, VulkanError};
use crate::format_map::{aspect, vk_format};
use crate::ledger::{FaultSite, ObjectId};
use crate::memory::{MemoryBlock, MemoryError, RawMemoryDesc};
use crate::residency_backend::{Checked, ResidencyBackend};
use crate::retire::{ForeignUse, Garbage, GpuUse, Life, Parent, PendingUses, TileOwner, TileReturn};
use ash::vk;
use residency_core::memory::{memory_type_candidates, MemoryIntent};
use residency_core::sync::LastUses;
use residency_core::tiles::{
    plan_binds, BindPlanError, BindPlanOptions, CommitError, DeviceMipTail, HeapIndex, ImageId, LayoutError,
    LayoutLimits, PendingChanges, PhysicalTile, PoolError, PoolId, PoolStats, ResidencyChanges, ShapeError,
    SparseDimension, SparseFormatInfo, SparseImageDesc, SparseImageLayout, SparseResidency, TexelRegion,
    TileIndex, TilePool, TilePoolDesc,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
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

/// One heap's memory, and the serial its bound tiles are counted under (the pool may reuse a heap
/// index while the memory it named before is still bound).
#[derive(Debug)]
struct Heap {
    block: MemoryBlock,
    serial: u64,
}

/// A tile, or a whole mip tail, of one image as the GPU has it bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Bound {
    Tile(u32),
    Tail(u32),
}

/// The heaps of a [`TileHeaps`] or a [`SparseTilePool`] and what the GPU has bound in them.
#[derive(Debug, Default)]
struct HeapsState {
    heaps: Vec<Option<Heap>>,
    pool: Option<PoolId>,
    /// Per image (its key): the heap serials of every tile and tail the GPU has bound (one per
    /// physical tile), as the last completed binds left them.
    bound: HashMap<u64, HashMap<Bound, Vec<u64>>>,
    /// Per heap serial: how many tiles the GPU has bound in it.
    counts: HashMap<u64, u64>,
    /// Heaps the pool released while the GPU still had tiles of an image bound in them (an unbind
    /// not flushed yet, an image not destroyed yet): freed when the last of those goes.
    released: Vec<Heap>,
    next_serial: u64,
}

impl HeapsState {
    fn memory(&self, heap: HeapIndex) -> vk::DeviceMemory {
        self.heaps
            .get(heap.0 as usize)
            .and_then(Option::as_ref)
            .map(|h| h.block.memory)
            .expect("heaps exist for every bound tile")
    }

    fn serial(&self, tile: PhysicalTile) -> u64 {
        self.heaps
            .get(tile.heap.0 as usize)
            .and_then(Option::as_ref)
            .map(|h| h.serial)
            .expect("heaps exist for every bound tile")
    }

    /// `image`'s `key` is now bound to the heaps `serials` (`None`: unbound).
    fn rebind(&mut self, image: u64, key: Bound, serials: Option<Vec<u64>>) {
        let map = self.bound.entry(image).or_default();
        let old = map.remove(&key);
        if let Some(serials) = serials {
            for &s in &serials {
                *self.counts.entry(s).or_default() += 1;
            }
            map.insert(key, serials);
        }
        if map.is_empty() {
            self.bound.remove(&image);
        }
        for s in old.into_iter().flatten() {
            self.unbound(s);
        }
    }

    fn unbound(&mut self, serial: u64) {
        if let Some(count) = self.counts.get_mut(&serial) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&serial);
            }
        }
    }

    /// Released heaps nothing is bound in any more.
    fn unbound_released(&mut self) -> Vec<Heap> {
        let (free, kept) = std::mem::take(&mut self.released)
            .into_iter()
            .partition(|h: &Heap| !self.counts.contains_key(&h.serial));
        self.released = kept;
        free
    }
}

/// The memory of a set of tile heaps, shared by their owner ([`TileHeaps`], [`SparseTilePool`]) and
/// the images bound to them, which keep it alive: memory bound to a live sparse image is never
/// freed.
pub(crate) struct HeapsShared {
    device: Arc<Device>,
    name: String,
    memory_type: u32,
    /// Marks the images made for these heaps ([`SparseImage::new_external`]).
    serial: u64,
    state: Mutex<HeapsState>,
    /// Uses declared on the heaps (or their pool) and the uses of deferred images bound to them.
    pending: PendingUses,
    /// Live images whose parent these heaps are.
    images: AtomicU64,
}

impl std::fmt::Debug for HeapsShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("TileHeaps")
            .field("name", &self.name)
            .field("memory_type", &self.memory_type)
            .field("heaps", &state.heaps.iter().flatten().count())
            .field("released_but_bound", &state.released.len())
            .finish()
    }
}

static NEXT_HEAPS: AtomicU64 = AtomicU64::new(1);

impl HeapsShared {
    fn new(device: Arc<Device>, name: &str) -> Result<HeapsShared, SparseError> {
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
        Ok(HeapsShared {
            device,
            name: name.to_owned(),
            memory_type,
            serial: NEXT_HEAPS.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(HeapsState::default()),
            pending: PendingUses::default(),
            images: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HeapsState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether these heaps may serve `pool`: the pool they serve, or any while they serve none.
    fn check_serves(state: &HeapsState, pool: &TilePool) -> Result<(), CommitError> {
        match state.pool {
            Some(owner) if owner != pool.id() => {
                Err(CommitError::WrongPool { pool: pool.desc().name.clone(), given: pool.id(), owner })
            }
            _ => Ok(()),
        }
    }

    fn ensure(
        &self,
        state: &mut HeapsState,
        pool: &TilePool,
        heaps: &[HeapIndex],
    ) -> Result<u64, SparseError> {
        Self::check_serves(state, pool)?;
        if let Some(missing) = heaps.iter().find(|&&h| pool.heap_tiles(h).is_none()) {
            return Err(CommitError::Pool(PoolError::UnknownHeap(missing.0)).into());
        }
        state.pool = Some(pool.id());
        let mut added = 0;
        for &heap in heaps {
            let index = heap.0 as usize;
            if state.heaps.len() <= index {
                state.heaps.resize_with(index + 1, || None);
            }
            if state.heaps[index].is_some() {
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
            let block = MemoryBlock::new(&self.device, desc, 1)?;
            state.next_serial += 1;
            state.heaps[index] = Some(Heap { block, serial: state.next_serial });
            added += 1;
        }
        Ok(added)
    }

    /// The pool released `heaps`: their memory retires after the work residency submitted so far
    /// and the uses declared, once no image has tiles bound in it.
    fn release(&self, state: &mut HeapsState, heaps: &[HeapIndex]) {
        for heap in heaps {
            if let Some(heap) = state.heaps.get_mut(heap.0 as usize).and_then(Option::take) {
                if state.counts.contains_key(&heap.serial) {
                    state.released.push(heap);
                } else {
                    self.retire(heap);
                }
            }
        }
    }

    /// Binds of `image` completed: the GPU has `changes` bound.
    fn record(&self, state: &mut HeapsState, image: u64, changes: &ResidencyChanges) {
        for change in &changes.tiles {
            let serials = change.physical.map(|p| vec![state.serial(p)]);
            state.rebind(image, Bound::Tile(change.tile.0), serials);
        }
        for change in &changes.tails {
            let serials = change.physical.as_ref().map(|p| p.iter().map(|&t| state.serial(t)).collect());
            state.rebind(image, Bound::Tail(change.tail), serials);
        }
        for heap in state.unbound_released() {
            self.retire(heap);
        }
    }

    /// `image` was destroyed: nothing of it is bound any more.
    fn forget(&self, image: u64) {
        let mut state = self.lock();
        for serial in state.bound.remove(&image).into_iter().flat_map(HashMap::into_values).flatten() {
            state.unbound(serial);
        }
        for heap in state.unbound_released() {
            self.retire(heap);
        }
    }

    fn retire(&self, heap: Heap) {
        self.device.retire(Garbage::Memory(Box::new(heap.block)), self.pending.get());
    }
}

impl Parent for HeapsShared {
    fn note_pending(&self, uses: &LastUses) {
        self.pending.note(uses);
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn child_released(&self) {
        self.images.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for HeapsShared {
    fn drop(&mut self) {
        // No image bound to these heaps is alive (each holds them); images still waiting for the
        // GPU retire before this memory, which waits for their uses too.
        let uses = self.pending.take();
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let heaps = state.heaps.drain(..).flatten().chain(state.released.drain(..));
        for heap in heaps.collect::<Vec<_>>() {
            self.device.retire(Garbage::Memory(Box::new(heap.block)), uses.clone());
        }
    }
}

/// The `VkDeviceMemory` behind the heaps of a [`TilePool`]: one allocation per `HeapIndex`, made when
/// the pool adds the heap and released when it releases it. A [`SparseTilePool`] has one for its own
/// pool; streaming keeps one for the streaming manager's pool.
///
/// The heaps serve one pool: the first one given to [`ensure`](Self::ensure) or
/// [`bind`](Self::bind). Any other pool is refused with [`CommitError::WrongPool`], changing
/// nothing: its heap indices would name this pool's memory.
///
/// **Lifetimes.** The images made for these heaps ([`SparseImage::new_external`]) keep their memory
/// alive: dropping the `TileHeaps` first is safe (the memory goes with the last image). A heap's
/// memory is freed only once no image has tiles of it bound on the GPU (as the completed binds
/// left them; a destroyed image has none) and, through the device's retire queue, after the work
/// residency submitted before its release and the uses declared with
/// [`used_until`](Self::used_until).
pub struct TileHeaps {
    shared: Arc<HeapsShared>,
}

impl std::fmt::Debug for TileHeaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

impl TileHeaps {
    /// Heap memory for sparse images on `device` (device-local, of a type sparse images accept).
    pub fn new(device: Arc<Device>, name: &str) -> Result<TileHeaps, SparseError> {
        Ok(TileHeaps { shared: Arc::new(HeapsShared::new(device, name)?) })
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.shared.device
    }

    /// The pool these heaps serve, once one was given.
    pub fn pool(&self) -> Option<PoolId> {
        self.shared.lock().pool
    }

    /// The memory type of the heaps.
    pub fn memory_type(&self) -> u32 {
        self.shared.memory_type
    }

    /// Declares that GPU work the renderer submitted itself uses the heaps' memory (through their
    /// images) until `until`: a heap released or dropped earlier is freed only then. Work residency
    /// submits needs no declaration. A use of another device is refused.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.shared.pending.used_until(&self.shared.device, until)
    }

    /// Allocates the memory of `heaps` of `pool` that has none yet; returns how many were made.
    /// `pool` must be the pool these heaps serve (the first call makes it so) and `heaps` live heaps
    /// of it; else a typed error and nothing allocated.
    pub fn ensure(&mut self, pool: &TilePool, heaps: &[HeapIndex]) -> Result<u64, SparseError> {
        let mut state = self.shared.lock();
        self.shared.ensure(&mut state, pool, heaps)
    }

    /// Releases the memory of heaps the pool released. It is freed once no image has tiles of it
    /// bound on the GPU (bind the pool's unbinds first, or drop the images) and the GPU work that
    /// may use it has completed (see the type's lifetimes).
    pub fn release(&mut self, heaps: &[HeapIndex]) {
        let mut state = self.shared.lock();
        self.shared.release(&mut state, heaps);
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
        let shared = &*self.shared;
        let mut state = shared.lock();
        HeapsShared::check_serves(&state, pool)?;
        for (image, changes) in items {
            if image.external != Some(shared.serial) {
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
        let heaps_added = shared.ensure(&mut state, pool, &all)?;
        let mut plans = Vec::with_capacity(items.len());
        for (image, changes) in items {
            plans.push((
                image.raw,
                aspect(image.desc.format),
                plan_binds(image.layout(), &changes.tiles, &changes.tails, options)?,
            ));
        }
        let mut stats = submit_plans(&shared.device, &plans, &state, pool.tile_bytes())?;
        for (image, changes) in items {
            shared.record(&mut state, image.key, changes);
        }
        stats.heaps_added = heaps_added;
        Ok(stats)
    }
}

impl Drop for TileHeaps {
    fn drop(&mut self) {
        let live = self.shared.images.load(Ordering::Relaxed);
        if live != 0 {
            tracing::warn!(
                heaps = %self.shared.name,
                images = live,
                "tile heaps dropped with live images: their memory stays until the last of them is released"
            );
        }
    }
}

/// Binds planned changes of several images in one `vkQueueBindSparse` on the sparse queue (unbinds
/// in a first batch, binds in a second that waits on it) and waits for the fence.
fn submit_plans(
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

/// The physical tiles shared by a device's sparse images.
///
/// **Lifetimes.** Its images keep its state alive (the core pool, the heaps and their memory):
/// dropping the pool while images hold tiles is safe, and the memory goes with the last image.
/// A dropped image's tiles come back to the pool once the GPU work that may use the image has
/// completed (it retires through the device's retire queue), whether or not the pool handle is
/// still there.
pub struct SparseTilePool {
    shared: Arc<SparsePoolShared>,
}

/// The state of a [`SparseTilePool`], shared with its images.
pub(crate) struct SparsePoolShared {
    device: Arc<Device>,
    name: String,
    pool: Mutex<TilePool>,
    heaps: Arc<HeapsShared>,
    next_image: AtomicU32,
    pool_id: u32,
    /// The core pool's identity (it never changes).
    tile_pool: PoolId,
    /// Live images of the pool.
    images: AtomicU64,
    id: ObjectId,
}

impl SparsePoolShared {
    fn with_pool<R>(&self, f: impl FnOnce(&mut TilePool) -> R) -> R {
        f(&mut self.pool.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl TileOwner for SparsePoolShared {
    fn free_owner(&self, owner: ImageId) {
        self.with_pool(|p| p.free_owner(owner));
    }
}

impl Parent for SparsePoolShared {
    fn note_pending(&self, uses: &LastUses) {
        // The pool's memory is its heaps': they wait for the deferred image.
        self.heaps.note_pending(uses);
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn child_released(&self) {
        self.images.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for SparsePoolShared {
    fn drop(&mut self) {
        // Tiles still counted in the pool belong to images waiting for the GPU; they never come
        // back (the pool is gone) and the heaps retire after those images.
        self.device.ledger().untrack(self.id);
    }
}

impl std::fmt::Debug for SparseTilePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparseTilePool")
            .field("name", &self.shared.name)
            .field("memory_type", &self.shared.heaps.memory_type)
            .finish_non_exhaustive()
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
        let heaps = HeapsShared::new(Arc::clone(&device), &desc.name)?;
        let name = desc.name.clone();
        let id = device.ledger().track("sparse tile pool", desc.name.as_str());
        let pool = TilePool::new(desc);
        let tile_pool = pool.id();
        heaps.lock().pool = Some(tile_pool);
        Ok(SparseTilePool {
            shared: Arc::new(SparsePoolShared {
                device,
                name,
                pool: Mutex::new(pool),
                heaps: Arc::new(heaps),
                next_image: AtomicU32::new(1),
                pool_id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
                tile_pool,
                images: AtomicU64::new(0),
                id,
            }),
        })
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.shared.device
    }

    /// The identity of its core tile pool (what its images' residency names).
    pub fn id(&self) -> PoolId {
        self.shared.tile_pool
    }

    /// The tile pool's statistics (tiles used and free per heap, runs, fragmentation).
    pub fn stats(&self) -> PoolStats {
        self.with_pool(|p| p.stats())
    }

    /// Tiles in use.
    pub fn used_tiles(&self) -> u64 {
        self.with_pool(|p| p.used_tiles())
    }

    /// Checks the tile pool's invariants (runs in bounds, free lists and owners consistent). For
    /// tests and debugging; a failure is a bug in the library.
    pub fn check_invariants(&self) -> Result<(), residency_core::tiles::PoolInvariantError> {
        self.with_pool(|p| p.check_invariants())
    }

    /// Changes the budget (in tiles). Tiles already in use stay.
    pub fn set_budget_tiles(&self, tiles: u32) {
        self.with_pool(|p| p.set_budget_tiles(tiles));
    }

    /// Declares that GPU work the renderer submitted itself uses the pool's memory (through its
    /// images) until `until`: a heap trimmed, or the pool's memory once the pool and its images
    /// are gone, is freed only then (declare per image with [`SparseImage::used_until`]). A use of
    /// another device is refused.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.shared.heaps.pending.used_until(&self.shared.device, until)
    }

    fn with_pool<R>(&self, f: impl FnOnce(&mut TilePool) -> R) -> R {
        self.shared.with_pool(f)
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
        let shared = &*self.shared;
        let mut pool = shared.pool.lock().unwrap_or_else(|e| e.into_inner());
        let mut heaps = shared.heaps.lock();
        match flush_pending(shared, &pool, &mut heaps, images, options) {
            Ok(stats) => {
                for image in images.iter_mut() {
                    shared.heaps.record(&mut heaps, image.key, image.pending.changes());
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
                    image.roll_back(&mut pool);
                }
                // Heaps made for those commits go again, unless that would take heaps that were
                // empty before (trimming is the application's call).
                let empty: Vec<HeapIndex> =
                    pool.stats().heaps.iter().filter(|h| h.used == 0).map(|h| h.heap).collect();
                if !empty.is_empty() && empty.iter().all(|h| added.contains(h)) {
                    let released = pool.trim();
                    shared.heaps.release(&mut heaps, &released);
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
    shared: &SparsePoolShared,
    pool: &TilePool,
    heaps: &mut HeapsState,
    images: &[&mut SparseImage],
    options: BindPlanOptions,
) -> Result<BindStats, SparseError> {
    let all: Vec<HeapIndex> = pool.heap_indices().collect();
    let heaps_added = shared.heaps.ensure(heaps, pool, &all)?;
    let mut plans = Vec::with_capacity(images.len());
    for image in images {
        let pending = image.pending.changes();
        let plan = plan_binds(image.residency.layout(), &pending.tiles, &pending.tails, options)?;
        plans.push((image.raw, aspect(image.desc.format), plan));
    }
    let mut stats = submit_plans(&shared.device, &plans, heaps, pool.tile_bytes())?;
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
    /// Releases heaps that hold no tiles. Their memory is freed once no image still has tiles of
    /// them bound on the GPU (flush the images' releases first) and the GPU work that may use it
    /// has completed.
    pub fn trim(&self) {
        let mut pool = self.shared.pool.lock().unwrap_or_else(|e| e.into_inner());
        let released = pool.trim();
        let mut heaps = self.shared.heaps.lock();
        self.shared.heaps.release(&mut heaps, &released);
    }
}

impl Drop for SparseTilePool {
    fn drop(&mut self) {
        let live = self.shared.images.load(Ordering::Relaxed);
        if live != 0 {
            tracing::warn!(
                pool = %self.shared.name,
                images = live,
                "sparse tile pool dropped with live images: its tiles and heaps stay until the last of them is released"
            );
        }
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

/// A partially resident image. It is released when dropped: its tiles go back to its pool, and its
/// `VkImage` and view are destroyed, once the GPU work that may use it has completed (residency's
/// own submissions before the drop and the uses declared with [`SparseImage::used_until`]). It
/// keeps what it points into alive: its device, and its pool's state and heaps (or the
/// [`TileHeaps`] it was made for), so memory bound to a live sparse image is never freed.
#[derive(Debug)]
pub struct SparseImage {
    life: Arc<Life>,
    raw: vk::Image,
    view: vk::ImageView,
    desc: SparseImageDesc,
    name: String,
    residency: SparseResidency,
    /// Changes queued for the next flush, folded per tile.
    pending: PendingChanges,
    /// For an image made by [`SparseImage::new_external`]: the serial of its [`TileHeaps`].
    external: Option<u64>,
    /// What its heaps know its bindings by.
    key: u64,
    /// Its device's process-unique id and its usage, for descriptor sets.
    device_uid: u64,
    usage: vk::ImageUsageFlags,
}

static NEXT_SPARSE_IMAGE: AtomicU64 = AtomicU64::new(1);

/// What a dropped sparse image leaves behind: destroyed once the GPU is done with it.
#[derive(Debug)]
pub(crate) struct SparseImageGarbage {
    raw: vk::Image,
    view: vk::ImageView,
    id: ObjectId,
    key: u64,
    /// Its heaps, to forget its bindings (weak: the retire queue keeps nothing alive).
    heaps: Weak<HeapsShared>,
    /// Its tiles, back to its pool (none for an image of [`SparseImage::new_external`]).
    tiles: Option<TileReturn>,
}

impl SparseImageGarbage {
    pub(crate) fn destroy(self, device: &Device) {
        // SAFETY: the image and view belong to this device, no handle to them is left and the GPU
        // work that used them has completed (the retire queue's contract); destroying a sparse
        // image releases its bindings.
        unsafe {
            device.raw().destroy_image_view(self.view, None);
            device.raw().destroy_image(self.raw, None);
        }
        device.ledger().untrack(self.id);
        if let Some(heaps) = self.heaps.upgrade() {
            heaps.forget(self.key);
        }
        if let Some(tiles) = self.tiles {
            tiles.give_back();
        }
    }
}

/// Where a new sparse image's memory comes from, and what it holds.
struct Origin {
    device: Arc<Device>,
    heaps: Arc<HeapsShared>,
    parent: Arc<dyn Parent>,
    tile_bytes: u64,
    pool: PoolId,
    owner: ImageId,
    /// Its tiles go back to this pool when it is destroyed.
    tiles: Option<Weak<dyn TileOwner>>,
    external: Option<u64>,
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
        let shared = &pool.shared;
        let owner = ImageId(shared.pool_id << 20 | shared.next_image.fetch_add(1, Ordering::Relaxed));
        let tiles: Weak<dyn TileOwner> = Arc::downgrade(shared) as Weak<dyn TileOwner>;
        let origin = Origin {
            device: Arc::clone(&shared.device),
            heaps: Arc::clone(&shared.heaps),
            parent: Arc::clone(shared) as Arc<dyn Parent>,
            tile_bytes: pool.with_pool(|p| p.tile_bytes()),
            pool: shared.tile_pool,
            owner,
            tiles: Some(tiles),
            external: None,
        };
        let image = Self::create(origin, name, desc, storage)?;
        shared.images.fetch_add(1, Ordering::Relaxed);
        Ok(image)
    }

    /// Creates an image whose residency someone else keeps (a streaming manager): its tiles are
    /// bound with [`TileHeaps::bind`] through `heaps` from that owner's changes, and its own page
    /// table stays empty (its residency names [`PoolId::NONE`]: every commit, release and flush
    /// through a [`SparseTilePool`] is refused). It keeps `heaps`' memory alive.
    pub fn new_external(
        heaps: &TileHeaps,
        tile_bytes: u64,
        owner: ImageId,
        name: &str,
        desc: &SparseImageDesc,
        storage: bool,
    ) -> Result<SparseImage, SparseError> {
        let shared = &heaps.shared;
        let origin = Origin {
            device: Arc::clone(&shared.device),
            heaps: Arc::clone(shared),
            parent: Arc::clone(shared) as Arc<dyn Parent>,
            tile_bytes,
            pool: PoolId::NONE,
            owner,
            tiles: None,
            external: Some(shared.serial),
        };
        let image = Self::create(origin, name, desc, storage)?;
        shared.images.fetch_add(1, Ordering::Relaxed);
        Ok(image)
    }

    fn create(
        origin: Origin,
        name: &str,
        desc: &SparseImageDesc,
        storage: bool,
    ) -> Result<SparseImage, SparseError> {
        let device = &*origin.device;
        let (memory_type, tile_bytes) = (origin.heaps.memory_type, origin.tile_bytes);
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
        let key = NEXT_SPARSE_IMAGE.fetch_add(1, Ordering::Relaxed);
        let garbage = SparseImageGarbage {
            raw,
            view,
            id,
            key,
            heaps: Arc::downgrade(&origin.heaps),
            tiles: origin.tiles.map(|pool| TileReturn { pool, owner: origin.owner }),
        };
        let life = Life::new(
            Arc::clone(&origin.device),
            Garbage::SparseImage(Box::new(garbage)),
            Some(origin.parent),
        );
        Ok(SparseImage {
            life,
            raw,
            view,
            desc: *desc,
            name: name.to_owned(),
            residency: SparseResidency::new(origin.pool, origin.owner, &layout),
            pending: PendingChanges::new(),
            external: origin.external,
            key,
            device_uid: origin.device.uid(),
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

    /// The device it lives on (kept alive by the image).
    pub fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    /// Declares that GPU work the renderer submitted itself uses this image (or its view) until
    /// `until`; see [`Buffer::used_until`](crate::Buffer::used_until). Dropping the image earlier
    /// defers its destruction, and the return of its tiles, until then; its pool's memory waits
    /// for it too.
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
    }

    /// A view of all its mips and layers.
    pub fn view(&self) -> vk::ImageView {
        self.view
    }

    /// What a descriptor set binding the view needs: the view, its device's id, the usage.
    pub(crate) fn view_binding(&self) -> (vk::ImageView, u64, vk::ImageUsageFlags, &Arc<Life>) {
        (self.view, self.device_uid, self.usage, &self.life)
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

    fn device(&self) -> &Arc<Device> {
        self.life.device()
    }

    fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.life.used_until(until)
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
        let copy = crate::upload::ImageRegion::new(self, mip, region.offset, region.extent)
            .with_layer(layer)
            .buffer_image_copy(0);
        let device = self.device();
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

impl crate::upload::Sealed for SparseImage {
    fn target(&self) -> crate::upload::TargetInfo<'_> {
        crate::upload::TargetInfo {
            raw: self.raw,
            name: &self.name,
            format: self.desc.format,
            extent: [self.desc.width, self.desc.height, self.desc.depth],
            mip_levels: self.desc.mip_levels,
            array_layers: self.desc.array_layers,
            copy_dst: true,
            life: &self.life,
        }
    }
}

impl crate::upload::ImageTarget for SparseImage {}

/// The per-region min-LOD map of a 2D sparse image as a texture: one `r8_uint` texel per mip-0
/// tile (per layer), the finest LOD whose chain down to the coarsest level is resident there
/// (255 = nothing resident). Shaders clamp to it (`residency.glsl`); [`MinLodMap::update`] uploads
/// the entries that changed, in the same frame as the binds. Released when dropped, once the GPU
/// work that may sample it has completed (declare the renderer's own with
/// [`MinLodMap::used_until`]).
#[derive(Debug)]
pub struct MinLodMap {
    image: crate::Image,
    view: crate::ImageView,
    uploaded: bool,
}

impl MinLodMap {
    /// Creates the map texture for `image` (2D images and 2D arrays), on its device. Its contents
    /// are undefined until the first [`upload_updates`](Self::upload_updates), which writes the
    /// whole map (pass no updates to initialize it before the first frame that samples it).
    pub fn new(image: &SparseImage) -> Result<MinLodMap, SparseError> {
        let device = image.device();
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
        // Dropped on error: nothing is left behind.
        let texture = device.create_image(&desc)?;
        let view = device.create_image_view(&texture, 0..1)?;
        device.discard_to_general(&[&texture])?;
        Ok(MinLodMap { image: texture, view, uploaded: false })
    }

    /// The view to bind as a `usampler2D` (or array), in `GENERAL` layout.
    pub fn view(&self) -> &crate::ImageView {
        &self.view
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.image.device()
    }

    /// Declares that GPU work the renderer submitted itself samples the map until `until` (see
    /// [`Buffer::used_until`](crate::Buffer::used_until)).
    pub fn used_until(&self, until: GpuUse) -> Result<(), ForeignUse> {
        self.view.used_until(until)?;
        self.image.used_until(until)
    }

    /// Refreshes `image`'s min-LOD entries changed since the last update and queues their upload
    /// (the whole map the first time). Returns the number of entries uploaded.
    pub fn update(
        &mut self,
        uploader: &crate::Uploader,
        image: &mut SparseImage,
    ) -> Result<u64, SparseError> {
        let updates = image.residency_mut().refresh_min_lod();
        self.upload_updates(uploader, image.residency().page_table(), &updates)
    }

    /// Queues the upload of the entries of `table`'s min-LOD map that `updates` name (all of them
    /// the first time): for images whose residency another owner keeps (a streaming manager's
    /// changes carry the updates). An uploader of another device is refused
    /// ([`UploadError::WrongDevice`](crate::UploadError::WrongDevice)), as is a table whose map is
    /// not this one's size, with nothing queued.
    pub fn upload_updates(
        &mut self,
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
            let region = crate::ImageRegion::new(
                &self.image,
                0,
                [start[0], start[1], 0],
                [end[0].saturating_sub(start[0]), end[1].saturating_sub(start[1]), 1],
            )
            .with_layer(layer);
            // The region is checked against the map before its entries are read.
            region.check()?;
            let data: Vec<u8> = (start[1]..end[1])
                .flat_map(|y| (start[0]..end[0]).map(move |x| (y * w + x) as usize))
                .map(|i| entries.get(i).copied().unwrap_or(u8::MAX))
                .collect();
            uploader.write_image(&region, &data)?;
            uploaded += data.len() as u64;
        }
        self.uploaded = true;
        Ok(uploaded)
    }
}
