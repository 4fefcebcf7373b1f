//! The sparse tile pool: physical 64 KiB tiles in heaps shared by a device's sparse images, and
//! the flush that binds every queued change.

use super::*;
use crate::poison::PoisonFree;

/// The physical tiles shared by a device's sparse images.
///
/// **Lifetimes.** Its images keep its state alive (the core pool, the heaps and their memory):
/// dropping the pool while images hold tiles is safe, and the memory goes with the last image.
/// A dropped image's tiles come back to the pool once the GPU work that may use the image has
/// completed (it retires through the device's retire queue), whether or not the pool handle is
/// still there.
pub struct SparseTilePool {
    pub(super) shared: Arc<SparsePoolShared>,
}

/// The state of a [`SparseTilePool`], shared with its images.
pub(crate) struct SparsePoolShared {
    pub(super) device: Arc<Device>,
    pub(super) name: String,
    pub(super) pool: Mutex<TilePool>,
    pub(super) heaps: Arc<HeapsShared>,
    /// Its images' owner ids in the core pool.
    pub(super) owners: super::owners::OwnerIds,
    /// The core pool's identity (it never changes).
    pub(super) tile_pool: PoolId,
    /// Live images of the pool.
    pub(super) images: AtomicU64,
    pub(super) id: ObjectId,
}

impl SparsePoolShared {
    pub(super) fn with_pool<R>(&self, f: impl FnOnce(&mut TilePool) -> R) -> R {
        f(&mut self.pool.locked())
    }

    /// The owner id of a new image of the pool ([`OwnerIds`](super::owners::OwnerIds)); give it
    /// back (`owners.give_back`) if the image is not made.
    pub(super) fn take_owner(&self, name: &str) -> Result<ImageId, SparseError> {
        self.owners.take().ok_or_else(|| SparseError::TooManyImages {
            name: name.to_owned(),
            pool: self.name.clone(),
            limit: super::owners::OWNER_SERIALS - 1,
        })
    }
}

impl TileOwner for SparsePoolShared {
    fn free_owner(&self, owner: ImageId) {
        self.with_pool(|p| p.free_owner(owner));
        // Nothing holds tiles under `owner` now: a later image may have it.
        self.owners.give_back(owner);
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

pub(super) static NEXT_POOL: AtomicU32 = AtomicU32::new(1);

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
    /// Creates a pool on `device`; heaps are allocated when tiles are first needed. A description
    /// that does not pass [`TilePoolDesc::validate`] against the device's limits is refused
    /// ([`SparseError::Desc`]).
    pub fn new(device: Arc<Device>, desc: TilePoolDesc) -> Result<SparseTilePool, SparseError> {
        desc.validate(&device.profile().limits)?;
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
                owners: super::owners::OwnerIds::new(NEXT_POOL.fetch_add(1, Ordering::Relaxed)),
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

    pub(super) fn with_pool<R>(&self, f: impl FnOnce(&mut TilePool) -> R) -> R {
        self.shared.with_pool(f)
    }

    /// Binds and unbinds everything the given images queued since their last flush, in one
    /// `vkQueueBindSparse` on the sparse queue, and waits for it to complete:
    /// [`ResidencyBackend::flush`] with the default planner options. A flush that unbinds waits
    /// on the GPU for every submission residency made to the device so far (a render or
    /// `imageStore` into the released tiles still running cannot reach their memory once it is
    /// bound elsewhere); work submitted outside residency must have completed.
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
    pub(super) fn flush_checked(
        &self,
        images: &mut [&mut SparseImage],
        options: BindPlanOptions,
    ) -> Result<BindStats, SparseError> {
        let shared = &*self.shared;
        let mut pool = shared.pool.locked();
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
pub(super) fn flush_pending(
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
    // Unbinding memory under GPU work that still reads or writes it (a render or `imageStore`
    // into the released tiles) would let that work touch the memory once it is bound elsewhere,
    // possibly to another image in this very flush: unbinds wait for every submission residency
    // made so far. Binds alone need no wait.
    let unbinds = plans.iter().any(|(_, _, plan)| {
        plan.image_binds.iter().any(|b| b.memory.is_none())
            || plan.opaque_binds.iter().any(|b| b.memory.is_none())
    });
    let waits = if unbinds { vec![shared.device.submitted_work()] } else { Vec::new() };
    let (mut stats, _) = submit_plans(&shared.device, &plans, heaps, pool.tile_bytes(), &waits, true)?;
    stats.heaps_added = heaps_added;
    Ok(stats)
}

impl SparseTilePool {
    /// Releases heaps that hold no tiles. Their memory is freed once no image still has tiles of
    /// them bound on the GPU (flush the images' releases first) and the GPU work that may use it
    /// has completed.
    pub fn trim(&self) {
        let mut pool = self.shared.pool.locked();
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
