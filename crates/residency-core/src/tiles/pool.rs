//! The physical tile pool: fixed-size tiles carved out of large heaps, under a budget, shared by
//! many sparse images. Accounting only — the backend owns the `VkDeviceMemory` of each heap.
//!
//! # Contract
//! - A heap is `tiles` consecutive tiles of `tile_bytes` each; tile `t` is at byte `t × tile_bytes`.
//!   Heaps are added when the free tiles of the existing heaps cannot serve a request, never one per
//!   tile, and only while the total stays within the budget.
//! - Every tile is either allocated (tagged with its owner [`ImageId`]) or inside exactly one free
//!   run. Free runs are maximal: no two free runs touch, so the number of free runs is at most the
//!   number of allocated runs plus the number of heaps (this bounds fragmentation).
//! - Allocation of a run of `k` tiles is O(1) in the pool size: free runs sit in 32 size classes
//!   (`floor(log2(len))`) with a bitmap of non-empty classes; the request takes the first run of
//!   the smallest class that surely fits, splitting off the rest. When no run fits it falls back to
//!   several smaller runs (largest class first) — fragmentation costs bind entries, never a failure
//!   while free tiles remain. Freeing coalesces with both neighbours in O(1) through boundary tags.
//! - [`TilePool::check_invariants`] verifies all of this; the tests call it after every operation.

use super::page_table::PhysicalTile;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Index of a heap in a [`TilePool`]. Stable while the heap lives; reused after a
/// [`trim`](TilePool::trim) released it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HeapIndex(pub u32);

/// The identity of a [`TilePool`]: unique in the process, given by [`TilePool::new`] (a clone is
/// another pool and gets its own). A [`SparseResidency`](super::residency::SparseResidency)
/// remembers its pool's id and refuses every other pool, so tiles of one pool are never mapped,
/// freed or bound through another's heaps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolId(u64);

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

impl PoolId {
    /// No pool: no [`TilePool`] carries it, so a residency made with it is refused by every pool
    /// (an image whose tiles another owner keeps), and changes stamped with it name no pool.
    pub const NONE: PoolId = PoolId(0);

    fn next() -> PoolId {
        PoolId(NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed))
    }

    /// The number behind the id (0 for [`PoolId::NONE`]), for logs and reports.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for PoolId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == PoolId::NONE {
            f.write_str("no pool")
        } else {
            write!(f, "pool #{}", self.0)
        }
    }
}

/// The sparse image that owns a tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ImageId(pub u32);

/// A run of physically consecutive tiles in one heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TileRun {
    /// The heap.
    pub heap: HeapIndex,
    /// First tile in the heap.
    pub first: u32,
    /// Number of tiles (at least 1).
    pub len: u32,
}

impl TileRun {
    /// Tile `i` of the run.
    pub fn tile(&self, i: u32) -> PhysicalTile {
        debug_assert!(i < self.len);
        PhysicalTile { heap: self.heap, tile: self.first + i }
    }

    /// Every tile of the run, in order.
    pub fn tiles(&self) -> impl Iterator<Item = PhysicalTile> + '_ {
        (0..self.len).map(|i| self.tile(i))
    }
}

/// How a [`TilePool`] sizes its heaps and budget. Defaults: 64 KiB tiles, 2048 tiles (128 MiB) per
/// heap, a budget of 16384 tiles (1 GiB).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TilePoolDesc {
    /// The pool's name, for logs, errors and leak reports. Default `"tile pool"`.
    pub name: String,
    /// Bytes per tile (the sparse block size). Default 65536.
    pub tile_bytes: u64,
    /// Tiles per heap. Default 2048.
    pub tiles_per_heap: u32,
    /// Most tiles in all heaps together. Default 16384.
    pub budget_tiles: u32,
}

impl Default for TilePoolDesc {
    fn default() -> Self {
        Self {
            name: "tile pool".to_owned(),
            tile_bytes: super::shape::STANDARD_TILE_BYTES,
            tiles_per_heap: 2048,
            budget_tiles: 16384,
        }
    }
}

impl TilePoolDesc {
    /// Checks the description against a device's `limits`, as the backend's pools do before
    /// consuming it: a tile of at least one byte, and heaps (`tiles_per_heap × tile_bytes`, a
    /// `tiles_per_heap` of 0 counting as 1) that fit one `VkDeviceMemory`
    /// (`maxMemoryAllocationSize`), computed without wrapping.
    pub fn validate(&self, limits: &crate::profile::Limits) -> Result<(), crate::desc::DescError> {
        const DESC: &str = "TilePoolDesc";
        crate::desc::check_range(DESC, &self.name, "tile_bytes", self.tile_bytes, 1, u64::MAX, "")?;
        let heap = u64::from(self.tiles_per_heap.max(1)).saturating_mul(self.tile_bytes);
        crate::desc::check_range(
            DESC,
            &self.name,
            "tiles_per_heap × tile_bytes",
            heap,
            1,
            limits.max_memory_allocation_size,
            "a heap is one allocation: maxMemoryAllocationSize",
        )
    }

    /// Sets the name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the tiles per heap (at least 1; clamped and logged).
    pub fn with_tiles_per_heap(mut self, tiles: u32) -> Self {
        if tiles == 0 {
            tracing::debug!(pool = %self.name, "TilePoolDesc: tiles per heap 0 raised to 1");
        }
        self.tiles_per_heap = tiles.max(1);
        self
    }

    /// Sets the heap size in bytes, rounded down to whole tiles (at least one; logged when adjusted).
    pub fn with_heap_bytes(self, bytes: u64) -> Self {
        // A zero tile size (a struct literal) counts as one byte here; `validate` refuses it.
        let tile_bytes = self.tile_bytes.max(1);
        let tiles = (bytes / tile_bytes).clamp(1, u64::from(u32::MAX)) as u32;
        if u64::from(tiles).checked_mul(tile_bytes) != Some(bytes) {
            tracing::debug!(pool = %self.name, bytes, tiles, "TilePoolDesc: heap size rounded to whole tiles");
        }
        self.with_tiles_per_heap(tiles)
    }

    /// Sets the budget in tiles.
    pub fn with_budget_tiles(mut self, tiles: u32) -> Self {
        self.budget_tiles = tiles;
        self
    }

    /// Sets the budget in bytes, rounded down to whole tiles (logged when adjusted).
    pub fn with_budget_bytes(mut self, bytes: u64) -> Self {
        let tile_bytes = self.tile_bytes.max(1);
        let tiles = (bytes / tile_bytes).min(u64::from(u32::MAX)) as u32;
        if u64::from(tiles).checked_mul(tile_bytes) != Some(bytes) {
            tracing::debug!(pool = %self.name, bytes, tiles, "TilePoolDesc: budget rounded down to whole tiles");
        }
        self.budget_tiles = tiles;
        self
    }
}

/// The tiles an allocation got, and the heaps that were added for it (the backend allocates
/// their memory before binding).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TileAllocation {
    /// Runs in the order their tiles should be used; their lengths sum to the request.
    pub runs: Vec<TileRun>,
    /// Heaps created by this allocation.
    pub heaps_added: Vec<HeapIndex>,
}

/// One tile of a compaction: its contents go from `from` to `to`, which becomes the owner's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileMove {
    /// The image that owns the tile.
    pub owner: ImageId,
    /// Where it is.
    pub from: PhysicalTile,
    /// Where it goes (a free tile of a fuller heap).
    pub to: PhysicalTile,
}

/// What [`TilePool::plan_compaction`] proposes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionPlan {
    /// The tiles to move.
    pub moves: Vec<TileMove>,
    /// Heaps the moves leave empty.
    pub heaps_emptied: Vec<HeapIndex>,
}

/// A run of a [`CompactionPlan`]'s moves that one copy region carries: `len` moves in a row of
/// the plan whose sources are consecutive tiles of one heap and whose destinations are
/// consecutive tiles of one heap ([`CompactionPlan::runs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MoveRun {
    /// Index of the run's first move in [`CompactionPlan::moves`].
    pub first: usize,
    /// Moves in the run (at least 1).
    pub len: u32,
    /// Where the first move's tile is; the run's sources are the `len` tiles from here.
    pub from: PhysicalTile,
    /// Where it goes; the run's destinations are the `len` tiles from here.
    pub to: PhysicalTile,
}

impl CompactionPlan {
    /// The plan's moves as runs, in the order of [`moves`](Self::moves): consecutive moves join
    /// a run while both their source and their destination tiles follow the run's last ones in
    /// the same heaps and `class` gives them the class of the run's first move (the backend's
    /// copies need one image format per run). Every move is in exactly one run; a plan of `n`
    /// moves whose sources and destinations are each one stretch of one heap is one run.
    pub fn runs<K: PartialEq>(&self, class: impl Fn(&TileMove) -> K) -> Vec<MoveRun> {
        let mut runs: Vec<MoveRun> = Vec::new();
        let mut last_class: Option<K> = None;
        for (i, m) in self.moves.iter().enumerate() {
            let k = class(m);
            if let (Some(run), Some(lc)) = (runs.last_mut(), last_class.as_ref()) {
                let follows = |start: PhysicalTile, next: PhysicalTile| {
                    next.heap == start.heap
                        && u64::from(next.tile) == u64::from(start.tile) + u64::from(run.len)
                };
                if *lc == k && follows(run.from, m.from) && follows(run.to, m.to) {
                    run.len += 1;
                    continue;
                }
            }
            runs.push(MoveRun { first: i, len: 1, from: m.from, to: m.to });
            last_class = Some(k);
        }
        runs
    }
}

/// A pool operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// Not enough tiles are free within the budget.
    #[error(
        "tile pool exhausted: {requested} tiles requested, {free} free within a budget of {budget} tiles"
    )]
    PoolExhausted {
        /// Tiles asked for.
        requested: u64,
        /// Tiles free in the heaps plus tiles the budget still allows to add.
        free: u64,
        /// The budget in tiles.
        budget: u64,
    },
    /// The heap does not exist (never added, or trimmed).
    #[error("heap {0} does not exist in the tile pool")]
    UnknownHeap(u32),
    /// The run goes past the end of its heap.
    #[error("tiles {first}..{end} are outside heap {heap} of {tiles} tiles")]
    OutOfBounds {
        /// The heap.
        heap: u32,
        /// First tile of the run.
        first: u32,
        /// One past its last tile.
        end: u64,
        /// Tiles in the heap.
        tiles: u32,
    },
    /// A tile of the run is not allocated (double free).
    #[error("tile {tile} of heap {heap} is not allocated (double free?)")]
    NotAllocated {
        /// The heap.
        heap: u32,
        /// The tile.
        tile: u32,
    },
    /// A compaction's destination is not free (or is named twice, or is another move's source).
    #[error("tile {tile} of heap {heap} is not free for a move")]
    TileTaken {
        /// The heap.
        heap: u32,
        /// The tile.
        tile: u32,
    },
    /// `ImageId(u32::MAX)` is reserved for free tiles.
    #[error("image id {0} is reserved")]
    ReservedOwner(u32),
}

/// A pool invariant is broken: a bug in this crate, reported with what was found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tile pool invariant broken{}: {message}", heap.map(|h| format!(" in heap {h}")).unwrap_or_default())]
pub struct PoolInvariantError {
    /// The heap concerned, if one.
    pub heap: Option<u32>,
    /// What was found.
    pub message: String,
}

/// Statistics of one heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapStats {
    /// The heap.
    pub heap: HeapIndex,
    /// Tiles in the heap.
    pub tiles: u32,
    /// Allocated tiles.
    pub used: u32,
    /// Free tiles.
    pub free: u32,
    /// Free runs.
    pub free_runs: u32,
    /// The longest free run.
    pub largest_free_run: u32,
}

/// Statistics of a pool, for reports, JSON dumps and the CLI.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolStats {
    /// The pool's name.
    pub name: String,
    /// Bytes per tile.
    pub tile_bytes: u64,
    /// The budget in tiles.
    pub budget_tiles: u64,
    /// Tiles in all heaps.
    pub capacity_tiles: u64,
    /// Allocated tiles.
    pub used_tiles: u64,
    /// Free tiles in the heaps.
    pub free_tiles: u64,
    /// Free runs over all heaps.
    pub free_runs: u64,
    /// The longest free run of any heap.
    pub largest_free_run: u32,
    /// `1 − largest_free_run / free_tiles` (0 when nothing is free): 0 means all free tiles are
    /// one run, values near 1 mean they are scattered.
    pub fragmentation: f64,
    /// Per heap.
    pub heaps: Vec<HeapStats>,
    /// Tiles per owner image.
    pub owners: Vec<(ImageId, u32)>,
}

const NIL: u32 = u32::MAX;
const NIL_LINK: u64 = u64::MAX;
const FREE: u32 = u32::MAX;
const BINS: usize = 32;

#[derive(Clone, Debug)]
struct Heap {
    tiles: u32,
    used: u32,
    owner: Vec<u32>,
    /// At the first tile of a free run: its length; elsewhere 0.
    run_len: Vec<u32>,
    /// At the last tile of a free run: its first tile; elsewhere NIL.
    run_start: Vec<u32>,
    /// Size-class list links at a free run's first tile (packed heap << 32 | tile).
    next: Vec<u64>,
    prev: Vec<u64>,
}

impl Heap {
    fn new(tiles: u32) -> Self {
        let n = tiles as usize;
        Self {
            tiles,
            used: 0,
            owner: vec![FREE; n],
            run_len: vec![0; n],
            run_start: vec![NIL; n],
            next: vec![NIL_LINK; n],
            prev: vec![NIL_LINK; n],
        }
    }
}

fn pack(heap: u32, tile: u32) -> u64 {
    (u64::from(heap) << 32) | u64::from(tile)
}

fn unpack(link: u64) -> (u32, u32) {
    ((link >> 32) as u32, link as u32)
}

fn class(len: u32) -> usize {
    debug_assert!(len > 0);
    (31 - len.leading_zeros()) as usize
}

/// Physical tiles in heaps under a budget; see the [module documentation](self) for the contract.
///
/// # Algorithm
///
/// Each heap keeps, per tile, its owner (or free) and boundary tags: at the first tile of a free
/// run its length, at the last its first tile. Free runs are on 32 doubly linked size-class
/// lists (`floor(log2(len))`, across all heaps) with a 32-bit mask of the non-empty ones.
/// **Allocate** of `k` tiles takes the head of class `floor(log2(k))` if it is long enough, else
/// the head of the first non-empty class above (every run there fits), splitting off the rest as
/// a new free run; when no free run fits and the free tiles are too few, it adds a heap (within
/// the budget); when the free tiles suffice but no run fits, it takes the largest runs one after
/// another, so a request fails only when the budget has fewer free tiles than it asks
/// ([`PoolError::PoolExhausted`], changing nothing). **Free** marks the tiles free and merges
/// the run with the free runs ending just below and starting just above it, found through the
/// boundary tags, so free runs are always maximal.
///
/// ```
/// use residency_core::tiles::{ImageId, TilePool, TilePoolDesc, TileRun};
///
/// let mut pool = TilePool::new(TilePoolDesc::default().with_tiles_per_heap(8).with_budget_tiles(8));
/// let runs: Vec<TileRun> =
///     (0..3).map(|i| pool.allocate(ImageId(i), 2).unwrap().runs[0]).collect();
/// assert_eq!(runs[0].len, 2, "one contiguous run");
/// pool.free(runs[0])?;
/// pool.free(runs[2])?; // joins the free tail
/// assert_eq!(pool.stats().free_runs, 2);
/// pool.free(runs[1])?; // joins both neighbours: one run, the whole heap
/// assert_eq!((pool.stats().free_runs, pool.stats().largest_free_run), (1, 8));
/// # Ok::<(), residency_core::tiles::PoolError>(())
/// ```
///
/// # Efficiency
///
/// - [`allocate`](Self::allocate): O(k) to tag the `k` tiles with their owner, plus O(1) per run
///   taken (a mask scan, an unlink, a link) and O(log images) for the per-owner count; adding a
///   heap is O(tiles per heap). [`free`](Self::free): O(k) plus O(1) for the merge and O(log
///   images) per owner in the run. [`free_owner`](Self::free_owner) walks every heap's tiles.
/// - Memory: 28 bytes per tile of heap capacity (owner, two boundary tags, two list links),
///   allocated with the heap; nothing per allocation beyond the returned [`TileAllocation`].
/// - Locking: none; it takes `&mut self`. The backend's `SparseTilePool` keeps it under a mutex,
///   taken once per commit or release of a batch of an image's tiles, not per tile; the
///   streaming manager owns its pool outright. `docs/benchmarks.md`
///   has no figure for it alone (the `sparse` rows time the binds; the `defrag` tile-pool row a
///   compaction pass: 239 tiles planned and accounted in 0.20–0.25 ms of CPU).
#[derive(Debug)]
pub struct TilePool {
    id: PoolId,
    desc: TilePoolDesc,
    heaps: Vec<Option<Heap>>,
    bins: [u64; BINS],
    bin_mask: u32,
    capacity: u64,
    used: u64,
    free_runs: u64,
    owners: BTreeMap<u32, u32>,
}

/// A copy of the accounting under a new [`PoolId`]: the copy is another pool, and residency made
/// against the original refuses it.
impl Clone for TilePool {
    fn clone(&self) -> Self {
        Self {
            id: PoolId::next(),
            desc: self.desc.clone(),
            heaps: self.heaps.clone(),
            bins: self.bins,
            bin_mask: self.bin_mask,
            capacity: self.capacity,
            used: self.used,
            free_runs: self.free_runs,
            owners: self.owners.clone(),
        }
    }
}

impl TilePool {
    /// An empty pool with a new [`PoolId`]: no heaps until the first allocation.
    pub fn new(desc: TilePoolDesc) -> Self {
        let desc = TilePoolDesc { tiles_per_heap: desc.tiles_per_heap.max(1), ..desc };
        Self {
            id: PoolId::next(),
            desc,
            heaps: Vec::new(),
            bins: [NIL_LINK; BINS],
            bin_mask: 0,
            capacity: 0,
            used: 0,
            free_runs: 0,
            owners: BTreeMap::new(),
        }
    }

    /// The pool's identity.
    pub fn id(&self) -> PoolId {
        self.id
    }

    /// The description the pool was made with.
    pub fn desc(&self) -> &TilePoolDesc {
        &self.desc
    }

    /// Bytes per tile.
    pub fn tile_bytes(&self) -> u64 {
        self.desc.tile_bytes
    }

    /// Allocated tiles.
    pub fn used_tiles(&self) -> u64 {
        self.used
    }

    /// Tiles in all heaps.
    pub fn capacity_tiles(&self) -> u64 {
        self.capacity
    }

    /// Tiles an allocation can still get: free tiles in the heaps plus room left in the budget.
    pub fn available_tiles(&self) -> u64 {
        self.capacity - self.used + u64::from(self.desc.budget_tiles).saturating_sub(self.capacity)
    }

    /// Changes the budget. Heaps beyond a lowered budget stay until they are empty and trimmed.
    pub fn set_budget_tiles(&mut self, tiles: u32) {
        self.desc.budget_tiles = tiles;
    }

    /// Tiles in heap `heap`, if it exists.
    pub fn heap_tiles(&self, heap: HeapIndex) -> Option<u32> {
        self.heaps.get(heap.0 as usize)?.as_ref().map(|h| h.tiles)
    }

    /// Indices of the live heaps.
    pub fn heap_indices(&self) -> impl Iterator<Item = HeapIndex> + '_ {
        self.heaps.iter().enumerate().filter(|(_, h)| h.is_some()).map(|(i, _)| HeapIndex(i as u32))
    }

    /// Byte offset of `tile` in its heap's memory.
    pub fn byte_offset(&self, tile: PhysicalTile) -> u64 {
        u64::from(tile.tile) * self.desc.tile_bytes
    }

    /// The owner of a physical tile, if allocated.
    pub fn owner_of(&self, tile: PhysicalTile) -> Option<ImageId> {
        let h = self.heaps.get(tile.heap.0 as usize)?.as_ref()?;
        h.owner.get(tile.tile as usize).copied().filter(|&o| o != FREE).map(ImageId)
    }

    /// Tiles allocated to `owner`.
    pub fn owned_tiles(&self, owner: ImageId) -> u32 {
        self.owners.get(&owner.0).copied().unwrap_or(0)
    }

    /// Owners that still hold tiles, with their counts — the leak report at teardown.
    pub fn leaks(&self) -> Vec<(ImageId, u32)> {
        self.owners.iter().map(|(&o, &n)| (ImageId(o), n)).collect()
    }

    fn heap_mut(&mut self, heap: u32) -> &mut Heap {
        self.heaps[heap as usize].as_mut().expect("live heap")
    }

    fn heap_ref(&self, heap: u32) -> &Heap {
        self.heaps[heap as usize].as_ref().expect("live heap")
    }

    fn bin_insert(&mut self, heap: u32, start: u32, len: u32) {
        let c = class(len);
        let head = self.bins[c];
        let link = pack(heap, start);
        {
            let h = self.heap_mut(heap);
            h.run_len[start as usize] = len;
            h.run_start[(start + len - 1) as usize] = start;
            h.next[start as usize] = head;
            h.prev[start as usize] = NIL_LINK;
        }
        if head != NIL_LINK {
            let (hh, ht) = unpack(head);
            self.heap_mut(hh).prev[ht as usize] = link;
        }
        self.bins[c] = link;
        self.bin_mask |= 1 << c;
        self.free_runs += 1;
    }

    fn bin_remove(&mut self, heap: u32, start: u32) -> u32 {
        let (len, next, prev) = {
            let h = self.heap_mut(heap);
            let len = h.run_len[start as usize];
            let (next, prev) = (h.next[start as usize], h.prev[start as usize]);
            h.run_len[start as usize] = 0;
            h.run_start[(start + len - 1) as usize] = NIL;
            h.next[start as usize] = NIL_LINK;
            h.prev[start as usize] = NIL_LINK;
            (len, next, prev)
        };
        let c = class(len);
        if prev == NIL_LINK {
            self.bins[c] = next;
        } else {
            let (ph, pt) = unpack(prev);
            self.heap_mut(ph).next[pt as usize] = next;
        }
        if next != NIL_LINK {
            let (nh, nt) = unpack(next);
            self.heap_mut(nh).prev[nt as usize] = prev;
        }
        if self.bins[c] == NIL_LINK {
            self.bin_mask &= !(1 << c);
        }
        self.free_runs -= 1;
        len
    }

    fn run_len_at(&self, link: u64) -> u32 {
        let (h, t) = unpack(link);
        self.heap_ref(h).run_len[t as usize]
    }

    /// A free run that holds `k` tiles, in O(1): the head of `k`'s own class if it is long enough,
    /// else the head of the smallest larger non-empty class.
    fn find_fitting(&self, k: u32) -> Option<u64> {
        let c = class(k);
        let head = self.bins[c];
        if head != NIL_LINK && self.run_len_at(head) >= k {
            return Some(head);
        }
        let above = if c + 1 >= BINS { 0 } else { self.bin_mask & !((1u32 << (c + 1)) - 1) };
        (above != 0).then(|| self.bins[above.trailing_zeros() as usize])
    }

    fn find_largest(&self) -> Option<u64> {
        (self.bin_mask != 0).then(|| self.bins[(31 - self.bin_mask.leading_zeros()) as usize])
    }

    fn carve(&mut self, link: u64, k: u32, owner: u32) -> TileRun {
        let (heap, start) = unpack(link);
        let len = self.bin_remove(heap, start);
        let take = k.min(len);
        {
            let h = self.heap_mut(heap);
            h.owner[start as usize..(start + take) as usize].fill(owner);
            h.used += take;
        }
        if len > take {
            self.bin_insert(heap, start + take, len - take);
        }
        self.used += u64::from(take);
        *self.owners.entry(owner).or_insert(0) += take;
        TileRun { heap: HeapIndex(heap), first: start, len: take }
    }

    fn add_heap(&mut self) -> Option<HeapIndex> {
        let room = u64::from(self.desc.budget_tiles).saturating_sub(self.capacity);
        let tiles = room.min(u64::from(self.desc.tiles_per_heap)) as u32;
        if tiles == 0 {
            return None;
        }
        let index = match self.heaps.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.heaps.push(None);
                self.heaps.len() - 1
            }
        };
        self.heaps[index] = Some(Heap::new(tiles));
        self.capacity += u64::from(tiles);
        self.bin_insert(index as u32, 0, tiles);
        tracing::debug!(pool = %self.desc.name, heap = index, tiles, "tile pool: heap added");
        Some(HeapIndex(index as u32))
    }

    /// Allocates `k` tiles for `owner`, as few physically contiguous runs as the free space allows
    /// (one when a free run of `k` exists). Adds heaps when the free tiles are too few, within
    /// the budget; fails with [`PoolError::PoolExhausted`] (changing nothing) when even that is
    /// not enough.
    pub fn allocate(&mut self, owner: ImageId, k: u32) -> Result<TileAllocation, PoolError> {
        if owner.0 == FREE {
            return Err(PoolError::ReservedOwner(owner.0));
        }
        let mut out = TileAllocation::default();
        if k == 0 {
            return Ok(out);
        }
        let available = self.available_tiles();
        if available < u64::from(k) {
            return Err(PoolError::PoolExhausted {
                requested: u64::from(k),
                free: available,
                budget: u64::from(self.desc.budget_tiles),
            });
        }
        let mut remaining = k;
        while remaining > 0 {
            if let Some(link) = self.find_fitting(remaining) {
                out.runs.push(self.carve(link, remaining, owner.0));
                break;
            }
            if self.capacity - self.used < u64::from(remaining) {
                if let Some(h) = self.add_heap() {
                    out.heaps_added.push(h);
                    continue;
                }
            }
            let link = self.find_largest().expect("available tiles were counted");
            let run = self.carve(link, remaining, owner.0);
            remaining -= run.len;
            out.runs.push(run);
        }
        Ok(out)
    }

    /// Like [`allocate`](Self::allocate), but when the pool is exhausted calls `evict(pool,
    /// shortfall)` so the caller can free tiles (e.g. least recently used ones) and retries;
    /// `evict` returns `false` to give up. Gives up too when an eviction freed nothing.
    pub fn allocate_or_evict(
        &mut self,
        owner: ImageId,
        k: u32,
        mut evict: impl FnMut(&mut TilePool, u64) -> bool,
    ) -> Result<TileAllocation, PoolError> {
        loop {
            match self.allocate(owner, k) {
                Err(PoolError::PoolExhausted { requested, free, budget }) => {
                    if !evict(self, requested - free) || self.available_tiles() <= free {
                        return Err(PoolError::PoolExhausted {
                            requested,
                            free: self.available_tiles(),
                            budget,
                        });
                    }
                }
                other => return other,
            }
        }
    }

    /// Frees the tiles of `run` (any sub-run of allocated tiles, whatever their owners). Checks
    /// first and changes nothing on error: unknown heap, out of bounds, or a tile already free.
    pub fn free(&mut self, run: TileRun) -> Result<(), PoolError> {
        let heap = run.heap.0;
        let h = self.heaps.get(heap as usize).and_then(Option::as_ref).ok_or(PoolError::UnknownHeap(heap))?;
        let end = u64::from(run.first) + u64::from(run.len);
        if end > u64::from(h.tiles) {
            return Err(PoolError::OutOfBounds { heap, first: run.first, end, tiles: h.tiles });
        }
        if run.len == 0 {
            return Ok(());
        }
        let range = run.first as usize..end as usize;
        if let Some(i) = h.owner[range.clone()].iter().position(|&o| o == FREE) {
            return Err(PoolError::NotAllocated { heap, tile: run.first + i as u32 });
        }
        let mut i = range.start;
        while i < range.end {
            let o = h.owner[i];
            let n = h.owner[i..range.end].iter().take_while(|&&x| x == o).count() as u32;
            let count = self.owners.get_mut(&o).expect("owner counted");
            *count -= n;
            if *count == 0 {
                self.owners.remove(&o);
            }
            i += n as usize;
        }
        let h = self.heap_mut(heap);
        h.owner[range].fill(FREE);
        h.used -= run.len;
        self.used -= u64::from(run.len);
        let mut start = run.first;
        let mut stop = run.first + run.len;
        let (left, right) = {
            let h = self.heap_ref(heap);
            let left = if start > 0 { h.run_start[(start - 1) as usize] } else { NIL };
            let right = if stop < h.tiles && h.run_len[stop as usize] != 0 { stop } else { NIL };
            (left, right)
        };
        if left != NIL {
            self.bin_remove(heap, left);
            start = left;
        }
        if right != NIL {
            stop += self.bin_remove(heap, right);
        }
        self.bin_insert(heap, start, stop - start);
        Ok(())
    }

    /// Frees every tile of `owner` (an image being destroyed); returns how many.
    pub fn free_owner(&mut self, owner: ImageId) -> u32 {
        let mut freed = 0;
        for heap in 0..self.heaps.len() as u32 {
            let Some(h) = &self.heaps[heap as usize] else { continue };
            let mut runs = Vec::new();
            let mut i = 0;
            while i < h.tiles {
                if h.owner[i as usize] == owner.0 {
                    let n = h.owner[i as usize..].iter().take_while(|&&o| o == owner.0).count() as u32;
                    runs.push(TileRun { heap: HeapIndex(heap), first: i, len: n });
                    i += n;
                } else {
                    i += 1;
                }
            }
            for run in runs {
                self.free(run).expect("tiles owned are allocated");
                freed += run.len;
            }
        }
        freed
    }

    /// Releases every empty heap; returns their indices so the backend frees their memory.
    pub fn trim(&mut self) -> Vec<HeapIndex> {
        let mut released = Vec::new();
        for heap in 0..self.heaps.len() as u32 {
            if self.heaps[heap as usize].as_ref().is_some_and(|h| h.used == 0) {
                self.bin_remove(heap, 0);
                let tiles = self.heaps[heap as usize].take().map_or(0, |h| h.tiles);
                self.capacity -= u64::from(tiles);
                released.push(HeapIndex(heap));
            }
        }
        released
    }

    /// Plans a compaction: moves of allocated tiles out of the least used heaps into the free
    /// tiles of the fuller ones, so that the heaps moved out of become empty and can be released
    /// ([`trim_heaps`](Self::trim_heaps)). Pure: nothing changes until
    /// [`apply_compaction`](Self::apply_compaction).
    ///
    /// Sources are taken least used first while the free tiles of the heaps that stay (ones
    /// holding tiles, never an empty heap) can take every tile of them; a heap with a tile
    /// `movable` refuses (a mip tail's, an image the caller did not hand over) is never a source.
    /// At most `max_moves` tiles move: the last source may move only in part (a later pass
    /// continues with it, then the least used heap). Destinations are the fullest heaps' free
    /// tiles, in tile order, so moved tiles stay in runs. Tiles move in their source's tile order.
    pub fn plan_compaction(
        &self,
        max_moves: u32,
        movable: impl Fn(PhysicalTile, ImageId) -> bool,
    ) -> CompactionPlan {
        let mut plan = CompactionPlan::default();
        // (used, free, heap) of every heap that holds tiles.
        let mut held: Vec<(u32, u32, u32)> = self
            .heaps
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                h.as_ref().filter(|h| h.used > 0).map(|h| (h.used, h.tiles - h.used, i as u32))
            })
            .collect();
        if held.len() < 2 || max_moves == 0 {
            return plan;
        }
        // Least used first; among equals the later heap (so heap 0 tends to stay).
        held.sort_by(|a, b| a.0.cmp(&b.0).then(b.2.cmp(&a.2)));
        let all_movable = |heap: u32| {
            let h = self.heap_ref(heap);
            (0..h.tiles).all(|t| {
                let o = h.owner[t as usize];
                o == FREE || movable(PhysicalTile { heap: HeapIndex(heap), tile: t }, ImageId(o))
            })
        };
        let mut sources: Vec<(u32, u32)> = Vec::new(); // (heap, tiles to move)
        let mut moving = 0u64;
        let mut taken = vec![false; held.len()];
        for (i, &(used, _, heap)) in held.iter().enumerate() {
            if moving >= u64::from(max_moves) {
                break;
            }
            if !all_movable(heap) {
                continue;
            }
            let room: u64 = held
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i && !taken[j])
                .map(|(_, &(_, free, _))| u64::from(free))
                .sum();
            if moving + u64::from(used) > room {
                break;
            }
            let tiles = (u64::from(max_moves) - moving).min(u64::from(used)) as u32;
            taken[i] = true;
            moving += u64::from(tiles);
            sources.push((heap, tiles));
            if tiles == used {
                plan.heaps_emptied.push(HeapIndex(heap));
            }
        }
        // Destinations: the heaps that stay, fullest first, their free tiles in order.
        let mut stay: Vec<(u32, u32)> =
            held.iter().zip(&taken).filter(|(_, &t)| !t).map(|(&(used, _, heap), _)| (used, heap)).collect();
        stay.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut holes = stay.iter().flat_map(|&(_, heap)| {
            let h = self.heap_ref(heap);
            (0..h.tiles)
                .filter(move |&t| h.owner[t as usize] == FREE)
                .map(move |t| PhysicalTile { heap: HeapIndex(heap), tile: t })
        });
        for (heap, tiles) in sources {
            let h = self.heap_ref(heap);
            let from = (0..h.tiles).filter(|&t| h.owner[t as usize] != FREE).take(tiles as usize);
            for t in from {
                let to = holes.next().expect("sources were sized to the holes");
                let from = PhysicalTile { heap: HeapIndex(heap), tile: t };
                plan.moves.push(TileMove { owner: ImageId(h.owner[t as usize]), from, to });
            }
        }
        plan
    }

    /// Carries out `plan` in the accounting: each destination tile is allocated to the tile's
    /// owner and each source tile freed. All checked first (every source allocated to the move's
    /// owner, every destination free and named once, in live heaps): on error nothing changed.
    pub fn apply_compaction(&mut self, plan: &CompactionPlan) -> Result<(), PoolError> {
        let mut seen = std::collections::HashSet::new();
        for m in &plan.moves {
            for p in [m.from, m.to] {
                let tiles = self.heap_tiles(p.heap).ok_or(PoolError::UnknownHeap(p.heap.0))?;
                if p.tile >= tiles {
                    return Err(PoolError::OutOfBounds {
                        heap: p.heap.0,
                        first: p.tile,
                        end: u64::from(p.tile) + 1,
                        tiles,
                    });
                }
            }
            if self.owner_of(m.from) != Some(m.owner) {
                return Err(PoolError::NotAllocated { heap: m.from.heap.0, tile: m.from.tile });
            }
            if self.owner_of(m.to).is_some()
                || !seen.insert(m.to)
                || plan.moves.iter().any(|o| o.from == m.to)
            {
                return Err(PoolError::TileTaken { heap: m.to.heap.0, tile: m.to.tile });
            }
        }
        for m in &plan.moves {
            self.take_free_tile(m.to, m.owner.0);
        }
        for m in &plan.moves {
            self.free(TileRun { heap: m.from.heap, first: m.from.tile, len: 1 }).expect("checked allocated");
        }
        Ok(())
    }

    /// Undoes [`apply_compaction`](Self::apply_compaction) of `plan` (a backend whose GPU work
    /// failed after it applied the plan): the tiles go back to their sources.
    pub fn revert_compaction(&mut self, plan: &CompactionPlan) -> Result<(), PoolError> {
        let back = CompactionPlan {
            moves: plan.moves.iter().map(|m| TileMove { owner: m.owner, from: m.to, to: m.from }).collect(),
            heaps_emptied: Vec::new(),
        };
        self.apply_compaction(&back)
    }

    /// Allocates the free tile `tile` to `owner`, splitting the free run that holds it.
    fn take_free_tile(&mut self, tile: PhysicalTile, owner: u32) {
        let (heap, t) = (tile.heap.0, tile.tile);
        let mut start = t;
        while self.heap_ref(heap).run_len[start as usize] == 0 {
            start -= 1;
        }
        let len = self.bin_remove(heap, start);
        if t > start {
            self.bin_insert(heap, start, t - start);
        }
        if start + len > t + 1 {
            self.bin_insert(heap, t + 1, start + len - t - 1);
        }
        let h = self.heap_mut(heap);
        h.owner[t as usize] = owner;
        h.used += 1;
        self.used += 1;
        *self.owners.entry(owner).or_insert(0) += 1;
    }

    /// Releases those of `heaps` that are empty (a compaction's emptied heaps); returns them, so
    /// the backend frees their memory. Other empty heaps stay (trimming them is
    /// [`trim`](Self::trim)).
    pub fn trim_heaps(&mut self, heaps: &[HeapIndex]) -> Vec<HeapIndex> {
        let mut released = Vec::new();
        for &heap in heaps {
            if self.heaps.get(heap.0 as usize).and_then(Option::as_ref).is_some_and(|h| h.used == 0) {
                self.bin_remove(heap.0, 0);
                let tiles = self.heaps[heap.0 as usize].take().map_or(0, |h| h.tiles);
                self.capacity -= u64::from(tiles);
                released.push(heap);
            }
        }
        released
    }

    /// Statistics of the pool and each heap.
    pub fn stats(&self) -> PoolStats {
        let mut heaps = Vec::new();
        for (i, h) in self.heaps.iter().enumerate() {
            let Some(h) = h else { continue };
            let (mut runs, mut largest) = (0, 0);
            for &len in &h.run_len {
                if len > 0 {
                    runs += 1;
                    largest = largest.max(len);
                }
            }
            heaps.push(HeapStats {
                heap: HeapIndex(i as u32),
                tiles: h.tiles,
                used: h.used,
                free: h.tiles - h.used,
                free_runs: runs,
                largest_free_run: largest,
            });
        }
        let free = self.capacity - self.used;
        let largest = heaps.iter().map(|h| h.largest_free_run).max().unwrap_or(0);
        PoolStats {
            name: self.desc.name.clone(),
            tile_bytes: self.desc.tile_bytes,
            budget_tiles: u64::from(self.desc.budget_tiles),
            capacity_tiles: self.capacity,
            used_tiles: self.used,
            free_tiles: free,
            free_runs: self.free_runs,
            largest_free_run: largest,
            fragmentation: if free == 0 { 0.0 } else { 1.0 - f64::from(largest) / free as f64 },
            heaps,
            owners: self.leaks(),
        }
    }

    /// Checks every invariant of the [module contract](self).
    pub fn check_invariants(&self) -> Result<(), PoolInvariantError> {
        let err = |heap: Option<u32>, message: String| Err(PoolInvariantError { heap, message });
        let (mut capacity, mut used, mut runs) = (0u64, 0u64, 0u64);
        let mut owners: BTreeMap<u32, u32> = BTreeMap::new();
        let mut run_starts = std::collections::HashSet::new();
        for (hi, h) in self.heaps.iter().enumerate() {
            let Some(h) = h else { continue };
            let hid = Some(hi as u32);
            capacity += u64::from(h.tiles);
            let mut heap_used = 0;
            let mut i = 0u32;
            let mut prev_free = false;
            while i < h.tiles {
                let len = h.run_len[i as usize];
                if len > 0 {
                    if prev_free {
                        return err(hid, format!("free runs touch at tile {i}"));
                    }
                    let end = i.checked_add(len).filter(|&e| e <= h.tiles);
                    let Some(end) = end else {
                        return err(hid, format!("free run at {i} overruns the heap"));
                    };
                    if h.run_start[(end - 1) as usize] != i {
                        return err(
                            hid,
                            format!("free run {i}+{len}: end tag {}", h.run_start[(end - 1) as usize]),
                        );
                    }
                    for t in i..end {
                        if h.owner[t as usize] != FREE {
                            return err(
                                hid,
                                format!("tile {t} in a free run has owner {}", h.owner[t as usize]),
                            );
                        }
                        if t != i && h.run_len[t as usize] != 0 {
                            return err(hid, format!("stray start tag inside free run at {t}"));
                        }
                        if t != end - 1 && h.run_start[t as usize] != NIL {
                            return err(hid, format!("stray end tag inside free run at {t}"));
                        }
                    }
                    runs += 1;
                    run_starts.insert(pack(hi as u32, i));
                    prev_free = true;
                    i = end;
                } else {
                    let o = h.owner[i as usize];
                    if o == FREE {
                        return err(hid, format!("free tile {i} is in no free run"));
                    }
                    if h.run_start[i as usize] != NIL {
                        return err(hid, format!("allocated tile {i} carries an end tag"));
                    }
                    *owners.entry(o).or_insert(0) += 1;
                    heap_used += 1;
                    prev_free = false;
                    i += 1;
                }
            }
            if heap_used != h.used {
                return err(hid, format!("used {} but {heap_used} tiles allocated", h.used));
            }
            used += u64::from(heap_used);
        }
        if capacity != self.capacity || used != self.used || runs != self.free_runs {
            return err(
                None,
                format!(
                    "totals capacity {}/{capacity}, used {}/{used}, free runs {}/{runs} (kept/recounted)",
                    self.capacity, self.used, self.free_runs
                ),
            );
        }
        if owners != self.owners {
            return err(None, format!("owner counts {:?} != recount {owners:?}", self.owners));
        }
        let mut listed = 0u64;
        for (c, &head) in self.bins.iter().enumerate() {
            if (head != NIL_LINK) != (self.bin_mask & (1 << c) != 0) {
                return err(None, format!("size class {c}: mask bit disagrees with its list"));
            }
            let (mut link, mut prev) = (head, NIL_LINK);
            while link != NIL_LINK {
                if !run_starts.remove(&link) {
                    return err(None, format!("size class {c} lists {link:#x}, not a free run (or twice)"));
                }
                let (h, t) = unpack(link);
                let heap = self.heap_ref(h);
                if class(heap.run_len[t as usize]) != c {
                    return err(
                        Some(h),
                        format!("run at {t} of length {} in class {c}", heap.run_len[t as usize]),
                    );
                }
                if heap.prev[t as usize] != prev {
                    return err(Some(h), format!("run at {t}: broken back link"));
                }
                listed += 1;
                prev = link;
                link = heap.next[t as usize];
            }
        }
        if listed != runs {
            return err(None, format!("{listed} runs listed in size classes, {runs} exist"));
        }
        Ok(())
    }
}
