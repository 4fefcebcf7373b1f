//! The `allocator` target: random operation sequences against the TLSF heap allocator, the
//! per-frame ring and the physical tile pool, each checked after every operation against a
//! reference model of the live ranges, and by its own full invariant checker (a walk of every
//! block, list and heap) after each of the first [`FULL_CHECK_PREFIX`] operations, then every
//! [`FULL_CHECK_INTERVAL`] operations and at the end.

use crate::input::Input;
use residency_core::allocator::{
    AllocError, Allocation, BlockState, DescError, FrameId, ResourceKind, RingAllocation, RingAllocator,
    RingError, TlsfAllocator, TlsfDesc,
};
use residency_core::tiles::{HeapIndex, ImageId, PhysicalTile, PoolError, TilePool, TilePoolDesc, TileRun};
use std::collections::{BTreeMap, VecDeque};

/// Operations per input at most: a 4 KiB input (libFuzzer's default `-max_len`) holds hundreds;
/// beyond this many the bytes are ignored (the cap bounds an input's cost, see
/// `docs/reliability.md`, "harness speed"). A tile-pool operation moves up to 700 tiles, each
/// checked against the model.
const MAX_OPS: usize = 256;

/// Operations of an input after each of which the full invariant checkers run (an input's first
/// operations build the structure the later ones use). With 16, the walks of the inputs that
/// libFuzzer keeps (tens of operations) were a third of the target's time.
const FULL_CHECK_PREFIX: usize = 4;
/// Beyond [`FULL_CHECK_PREFIX`], the full checkers run after every this many operations (and
/// after the last one). The checkers walk the whole structure, so running them after each of up
/// to 4096 operations made the target quadratic (25 inputs/s); a corruption they would see
/// persists until the next check, and the model's checks still run after every operation.
const FULL_CHECK_INTERVAL: usize = 64;

/// Whether the full invariant checkers run after operation `op` (0-based).
fn full_check_due(op: usize) -> bool {
    op < FULL_CHECK_PREFIX || (op + 1) % FULL_CHECK_INTERVAL == 0
}

pub(crate) fn run(data: &[u8]) {
    let mut input = Input::new(data);
    match input.u8() % 3 {
        0 => tlsf(&mut input),
        1 => ring(&mut input),
        _ => tile_pool(&mut input),
    }
}

/// The largest alignment an allocation's end is rounded up to (`docs/allocator.md`).
const TAIL_ROUNDING_MAX: u64 = 256;

const KINDS: [ResourceKind; 3] = [ResourceKind::Linear, ResourceKind::Optimal, ResourceKind::Unknown];

fn align_up(v: u64, a: u64) -> Option<u64> {
    v.checked_add(a - 1).map(|x| x & !(a - 1))
}

fn align_down(v: u64, a: u64) -> u64 {
    v & !(a - 1)
}

/// The reference model of a TLSF heap: live allocations by offset (requested size, kind).
struct TlsfModel {
    live: BTreeMap<u64, (u64, ResourceKind)>,
    requested: u64,
}

fn tlsf(input: &mut Input<'_>) {
    let capacity = input.size();
    let granularity = match input.u8() % 8 {
        0 => 1,
        1 => input.u64(),
        _ => 1 << input.below(17),
    };
    let desc = TlsfDesc::new(capacity).with_granularity(granularity);
    let mut heap = match TlsfAllocator::new(desc) {
        Ok(heap) => heap,
        Err(DescError::ZeroCapacity) => return assert_eq!(capacity, 0),
        Err(DescError::GranularityNotPowerOfTwo { granularity: g }) => {
            assert_eq!(g, granularity);
            return assert!(!granularity.is_power_of_two());
        }
    };
    assert!(capacity > 0 && granularity.is_power_of_two(), "accepted {desc:?}");
    // A second heap, to hand the first one allocations it did not make.
    let mut other = TlsfAllocator::new(TlsfDesc::new(1 << 20)).expect("valid");
    let mut handles: Vec<Allocation> = Vec::new();
    let mut model = TlsfModel { live: BTreeMap::new(), requested: 0 };
    for op in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        match input.u8() % 8 {
            0..=3 => {
                let size = input.size();
                let alignment = input.alignment(20);
                let kind = input.pick(&KINDS);
                match heap.allocate(size, alignment, kind) {
                    Ok(a) => {
                        check_new_allocation(&heap, &model, &a, size, alignment);
                        model.live.insert(a.offset(), (size, kind));
                        model.requested += size;
                        handles.push(a);
                    }
                    Err(AllocError::ZeroSize) => assert_eq!(size, 0),
                    Err(AllocError::AlignmentNotPowerOfTwo { alignment: a }) => {
                        assert!(size != 0 && a == alignment && !alignment.is_power_of_two());
                    }
                    Err(AllocError::OutOfSpace { size: s, alignment: a, largest_free, free }) => {
                        assert_eq!((s, a), (size, alignment));
                        assert_eq!(largest_free, heap.largest_free());
                        assert_eq!(free, heap.capacity() - heap.used_bytes());
                        check_really_full(&heap, size, alignment, kind);
                    }
                    Err(e @ (AllocError::ForeignAllocation { .. } | AllocError::RangeUnavailable { .. })) => {
                        panic!("allocate returned {e}")
                    }
                }
            }
            4 | 5 => {
                if !handles.is_empty() {
                    let i = input.below(handles.len() as u64) as usize;
                    let a = handles.swap_remove(i);
                    let (size, _) = model.live.remove(&a.offset()).expect("model has every live allocation");
                    assert_eq!(size, a.size());
                    model.requested -= size;
                    heap.free(a).expect("freeing a live allocation");
                }
            }
            6 => {
                for a in handles.drain(..) {
                    heap.free(a).expect("freeing a live allocation");
                }
                model.live.clear();
                model.requested = 0;
                assert_empty(&heap);
            }
            _ => {
                if input.bool() {
                    heap.reserve(input.below(64) as usize);
                } else if let Ok(foreign) = other.allocate(1 + input.below(4096), 1, ResourceKind::Linear) {
                    let (offset, size) = (foreign.offset(), foreign.size());
                    assert_eq!(heap.free(foreign), Err(AllocError::ForeignAllocation { offset, size }));
                }
            }
        }
        check_stats(&heap, &model);
        if full_check_due(op) {
            check_heap(&heap, &model);
        }
    }
    check_heap(&heap, &model);
    for a in handles.drain(..) {
        heap.free(a).expect("freeing a live allocation");
    }
    check_heap(&heap, &TlsfModel { live: BTreeMap::new(), requested: 0 });
    assert_empty(&heap);
}

/// A fresh allocation is in bounds, aligned and overlaps no live allocation of the model.
fn check_new_allocation(heap: &TlsfAllocator, model: &TlsfModel, a: &Allocation, size: u64, alignment: u64) {
    assert_eq!(a.size(), size);
    assert_eq!(a.offset() % alignment, 0, "misaligned {a:?}");
    let end = a.offset().checked_add(size).expect("allocation end overflows");
    assert!(end <= heap.capacity(), "{a:?} beyond capacity {}", heap.capacity());
    if let Some((&o, &(s, _))) = model.live.range(..=a.offset()).next_back() {
        assert!(o + s <= a.offset(), "{a:?} overlaps [{o}, +{s})");
    }
    if let Some((&o, _)) = model.live.range(a.offset()..).next() {
        assert!(end <= o, "{a:?} overlaps the allocation at {o}");
    }
}

/// The allocator's counters agree with the model (cheap: after every operation).
fn check_stats(heap: &TlsfAllocator, model: &TlsfModel) {
    let stats = heap.stats();
    assert_eq!(stats.allocation_count, model.live.len() as u64);
    assert_eq!(stats.requested_bytes, model.requested);
    assert_eq!(stats.used_bytes + stats.free_bytes, stats.capacity);
    assert!(stats.used_bytes >= stats.requested_bytes);
    // Each footprint is its requested size plus at most the rounding of its end.
    let slack = (TAIL_ROUNDING_MAX - 1) * model.live.len() as u64;
    assert!(stats.used_bytes - stats.requested_bytes <= slack, "{stats:?}");
}

/// The allocator agrees with its own full checker, and its block list with the model (a walk of
/// every block: see [`full_check_due`]).
fn check_heap(heap: &TlsfAllocator, model: &TlsfModel) {
    if let Err(e) = heap.check_invariants() {
        panic!("invariant broken: {e}");
    }
    check_stats(heap, model);
    let stats = heap.stats();
    let mut largest = 0;
    let mut free_ranges = 0;
    let mut used = 0;
    let mut listed = 0;
    for block in heap.blocks() {
        match block.state {
            BlockState::Free => {
                largest = largest.max(block.size);
                free_ranges += 1;
            }
            BlockState::Used { kind, alignment } => {
                let &(size, model_kind) =
                    model.live.get(&block.offset).expect("every used block is a live allocation");
                assert_eq!(kind, model_kind);
                assert_eq!(block.offset % alignment, 0);
                assert!(block.size >= size);
                used += block.size;
                listed += 1;
            }
        }
    }
    assert_eq!(listed, model.live.len());
    assert_eq!(used, stats.used_bytes);
    assert_eq!(largest, stats.largest_free_bytes, "largest_free is the largest free block");
    assert_eq!(free_ranges, stats.free_range_count);
}

/// `OutOfSpace` is only returned when no free block can hold the request: the allocator's
/// promise, checked against the block list (granularity pages included).
fn check_really_full(heap: &TlsfAllocator, size: u64, alignment: u64, kind: ResourceKind) {
    let g = heap.granularity();
    let blocks: Vec<_> = heap.blocks().collect();
    for (i, b) in blocks.iter().enumerate() {
        if b.state != BlockState::Free {
            continue;
        }
        let Some(mut offset) = align_up(b.offset, alignment) else { continue };
        let mut limit = b.offset + b.size;
        if g > 1 {
            if let Some(BlockState::Used { kind: below, .. }) = i.checked_sub(1).map(|j| blocks[j].state) {
                let prev = &blocks[i - 1];
                if below.conflicts_with(kind)
                    && align_down(prev.offset + prev.size - 1, g) == align_down(offset, g)
                {
                    let Some(o) = align_up(offset, g) else { continue };
                    offset = o;
                }
            }
            if let Some(BlockState::Used { kind: above, .. }) = blocks.get(i + 1).map(|n| n.state) {
                if above.conflicts_with(kind) {
                    limit = align_down(limit, g);
                }
            }
        }
        let fits = offset.checked_add(size).is_some_and(|end| end <= limit);
        assert!(
            !fits,
            "out of space for {size} B aligned {alignment} ({kind:?}) but free block {b:?} holds it"
        );
    }
}

fn assert_empty(heap: &TlsfAllocator) {
    let stats = heap.stats();
    assert_eq!((stats.allocation_count, stats.used_bytes, stats.requested_bytes), (0, 0, 0));
    assert_eq!(stats.free_range_count, 1);
    assert_eq!(stats.largest_free_bytes, heap.capacity());
}

fn ring(input: &mut Input<'_>) {
    let capacity = input.size();
    let mut ring = match RingAllocator::new(capacity) {
        Ok(r) => r,
        Err(e) => return assert_eq!((capacity, e), (0, DescError::ZeroCapacity)),
    };
    // Live allocations, by frame, oldest first.
    let mut frames: VecDeque<(FrameId, Vec<RingAllocation>)> = VecDeque::new();
    frames.push_back((ring.open_frame(), Vec::new()));
    // The same live allocations by offset (size), for the overlap check, and their total size.
    let mut by_offset: BTreeMap<u64, u64> = BTreeMap::new();
    let mut live_bytes = 0u64;
    for op in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        match input.u8() % 6 {
            0..=2 => {
                let size = input.size();
                let alignment = input.alignment(16);
                match ring.allocate(size, alignment) {
                    Ok(a) => {
                        assert_eq!((a.size, a.frame), (size, ring.open_frame()));
                        assert_eq!(a.offset % alignment, 0);
                        let end = a.offset.checked_add(size).expect("end overflows");
                        assert!(end <= capacity, "{a:?} beyond capacity {capacity}");
                        if let Some((&o, &s)) = by_offset.range(..=a.offset).next_back() {
                            assert!(o + s <= a.offset, "{a:?} overlaps the live [{o}, +{s})");
                        }
                        if let Some((&o, _)) = by_offset.range(a.offset..).next() {
                            assert!(end <= o, "{a:?} overlaps the live allocation at {o}");
                        }
                        by_offset.insert(a.offset, size);
                        live_bytes += size;
                        frames.back_mut().expect("open frame").1.push(a);
                    }
                    Err(RingError::ZeroSize) => assert_eq!(size, 0),
                    Err(RingError::AlignmentNotPowerOfTwo { alignment: a }) => {
                        assert!(a == alignment && !a.is_power_of_two())
                    }
                    Err(RingError::TooLarge { .. }) => assert!(size > capacity),
                    Err(RingError::Full { size: s, free, .. }) => {
                        assert_eq!(s, size);
                        assert_eq!(free, ring.free_bytes());
                    }
                    Err(e @ RingError::FrameNotFinished { .. }) => panic!("allocate returned {e}"),
                }
            }
            3 => {
                let finished = ring.finish_frame();
                assert_eq!(Some(finished), frames.back().map(|f| f.0));
                frames.push_back((ring.open_frame(), Vec::new()));
            }
            _ => {
                let open = ring.open_frame().0;
                let frame = FrameId(match input.u8() % 4 {
                    0 => input.u64(),
                    _ => open.saturating_sub(input.below(4)),
                });
                match ring.retire(frame) {
                    Ok(_) => {
                        assert!(frame.0 < open);
                        while frames.front().is_some_and(|f| f.0 <= frame) {
                            for a in frames.pop_front().expect("checked").1 {
                                assert_eq!(by_offset.remove(&a.offset), Some(a.size));
                                live_bytes -= a.size;
                            }
                        }
                    }
                    Err(RingError::FrameNotFinished { frame: f, open: o }) => {
                        assert_eq!((f, o), (frame.0, open));
                        assert!(frame.0 >= open);
                    }
                    Err(e) => panic!("retire returned {e}"),
                }
            }
        }
        if full_check_due(op) {
            if let Err(e) = ring.check_invariants() {
                panic!("ring invariant broken: {e}");
            }
            let live: u64 = frames.iter().flat_map(|(_, v)| v).map(|a| a.size).sum();
            assert_eq!(live, live_bytes);
        }
        assert!(ring.used_bytes() >= live_bytes, "used {} < live {live_bytes}", ring.used_bytes());
        assert_eq!(ring.used_bytes() + ring.free_bytes(), capacity);
        assert_eq!(ring.pending_frames(), frames.len() - 1);
    }
    if let Err(e) = ring.check_invariants() {
        panic!("ring invariant broken: {e}");
    }
    let last = ring.finish_frame();
    ring.retire(last).expect("a finished frame retires");
    assert_eq!(ring.used_bytes(), 0, "everything retired, nothing used");
    assert_eq!(ring.pending_frames(), 0);
}

/// The reference model of a tile pool: the owner of every allocated tile, by heap and tile (a
/// flat table, not a map: the model is updated for every tile of every run, and the pool holds
/// thousands), and the tiles of each owner.
#[derive(Default)]
struct PoolModel {
    /// `owners[heap][tile]`: the owner, or [`NO_OWNER`].
    owners: Vec<Vec<u32>>,
    /// Tiles allocated in all.
    used: u64,
    /// Tiles per owner (owners are 0..8; `u32::MAX` is reserved and refused).
    counts: [u32; 8],
}

const NO_OWNER: u32 = u32::MAX;

impl PoolModel {
    fn slot(&mut self, t: PhysicalTile) -> &mut u32 {
        let (h, i) = (t.heap.0 as usize, t.tile as usize);
        if self.owners.len() <= h {
            self.owners.resize_with(h + 1, Vec::new);
        }
        let heap = &mut self.owners[h];
        if heap.len() <= i {
            heap.resize(i + 1, NO_OWNER);
        }
        &mut heap[i]
    }

    fn insert(&mut self, t: PhysicalTile, owner: u32) {
        let slot = self.slot(t);
        assert_eq!(*slot, NO_OWNER, "{t:?} handed out twice");
        *slot = owner;
        self.used += 1;
        self.counts[owner as usize] += 1;
    }

    fn remove(&mut self, t: PhysicalTile) -> u32 {
        let slot = self.slot(t);
        let owner = std::mem::replace(slot, NO_OWNER);
        assert_ne!(owner, NO_OWNER, "{t:?} freed but not allocated");
        self.used -= 1;
        self.counts[owner as usize] -= 1;
        owner
    }

    fn free_owner(&mut self, owner: u32) {
        for slot in self.owners.iter_mut().flatten().filter(|o| **o == owner) {
            *slot = NO_OWNER;
        }
        self.used -= u64::from(self.counts[owner as usize]);
        self.counts[owner as usize] = 0;
    }

    fn heap_is_empty(&self, heap: HeapIndex) -> bool {
        self.owners.get(heap.0 as usize).is_none_or(|h| h.iter().all(|&o| o == NO_OWNER))
    }

    fn tiles(&self) -> impl Iterator<Item = (PhysicalTile, u32)> + '_ {
        self.owners.iter().enumerate().flat_map(|(h, tiles)| {
            tiles
                .iter()
                .enumerate()
                .filter(|(_, &o)| o != NO_OWNER)
                .map(move |(i, &o)| (PhysicalTile { heap: HeapIndex(h as u32), tile: i as u32 }, o))
        })
    }
}

fn tile_pool(input: &mut Input<'_>) {
    // Tiles per heap stay small: the pool keeps an owner per tile of every heap.
    let tiles_per_heap = input.range(0, 600) as u32;
    let budget = input.range(0, 4000) as u32;
    let mut pool =
        TilePool::new(TilePoolDesc::default().with_tiles_per_heap(tiles_per_heap).with_budget_tiles(budget));
    let mut model = PoolModel::default();
    let mut runs: Vec<(TileRun, u32)> = Vec::new();
    for op in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        match input.u8() % 8 {
            0..=2 => {
                let owner = ImageId(match input.u8() {
                    255 => u32::MAX,
                    o => u32::from(o % 8),
                });
                let k = input.range(0, 700) as u32;
                let available = pool.available_tiles();
                let heaps_before: Vec<_> = pool.heap_indices().collect();
                match pool.allocate(owner, k) {
                    Ok(a) => {
                        assert!(owner.0 < 8, "the reserved owner {owner:?} was given tiles");
                        assert_eq!(a.runs.iter().map(|r| u64::from(r.len)).sum::<u64>(), u64::from(k));
                        for h in &a.heaps_added {
                            assert!(!heaps_before.contains(h), "heap {h:?} added twice");
                        }
                        for run in &a.runs {
                            assert!(run.len > 0);
                            let heap_tiles = pool.heap_tiles(run.heap).expect("run in a live heap");
                            assert!(u64::from(run.first) + u64::from(run.len) <= u64::from(heap_tiles));
                            for t in run.tiles() {
                                model.insert(t, owner.0);
                                assert_eq!(pool.owner_of(t), Some(owner));
                            }
                            runs.push((*run, owner.0));
                        }
                    }
                    Err(PoolError::PoolExhausted { requested, free, .. }) => {
                        assert_eq!(requested, u64::from(k));
                        assert!(
                            free < requested && free == available,
                            "exhausted with {free} of {available}"
                        );
                    }
                    Err(PoolError::ReservedOwner(o)) => assert_eq!(o, owner.0),
                    Err(e) => panic!("allocate returned {e}"),
                }
            }
            3 | 4 => {
                if !runs.is_empty() {
                    let i = input.below(runs.len() as u64) as usize;
                    let (run, owner) = runs.swap_remove(i);
                    // Free a piece of the run; the rest stays live.
                    let skip = input.below(u64::from(run.len)) as u32;
                    let len = 1 + input.below(u64::from(run.len - skip)) as u32;
                    let piece = TileRun { heap: run.heap, first: run.first + skip, len };
                    pool.free(piece).expect("freeing allocated tiles");
                    for t in piece.tiles() {
                        assert_eq!(model.remove(t), owner);
                        assert_eq!(pool.owner_of(t), None);
                    }
                    if skip > 0 {
                        runs.push((TileRun { len: skip, ..run }, owner));
                    }
                    if skip + len < run.len {
                        let first = run.first + skip + len;
                        runs.push((TileRun { heap: run.heap, first, len: run.len - skip - len }, owner));
                    }
                    // Freeing it again is refused and changes nothing.
                    assert!(matches!(pool.free(piece), Err(PoolError::NotAllocated { .. })));
                }
            }
            5 => {
                let owner = input.below(8) as u32;
                assert_eq!(pool.free_owner(ImageId(owner)), model.counts[owner as usize]);
                model.free_owner(owner);
                runs.retain(|(_, o)| *o != owner);
            }
            6 => {
                let released = pool.trim();
                for h in released {
                    assert!(model.heap_is_empty(h), "trimmed heap {h:?} had live tiles");
                }
            }
            _ => pool.set_budget_tiles(input.range(0, 4000) as u32),
        }
        assert_eq!(pool.used_tiles(), model.used);
        for (owner, &count) in model.counts.iter().enumerate() {
            assert_eq!(pool.owned_tiles(ImageId(owner as u32)), count);
        }
        if full_check_due(op) {
            check_pool(&pool, &model);
        }
    }
    check_pool(&pool, &model);
    for owner in 0..8 {
        pool.free_owner(ImageId(owner));
    }
    assert_eq!(pool.used_tiles(), 0);
    assert!(pool.leaks().is_empty());
    pool.trim();
    assert_eq!(pool.capacity_tiles(), 0);
    pool.check_invariants().expect("empty pool is consistent");
}

/// The pool agrees with its own full checker, and with the model tile by tile (a walk of every
/// tile: see [`full_check_due`]).
fn check_pool(pool: &TilePool, model: &PoolModel) {
    if let Err(e) = pool.check_invariants() {
        panic!("pool invariant broken: {e}");
    }
    let mut counts = [0u32; 8];
    let mut used = 0;
    for (t, o) in model.tiles() {
        counts[o as usize] += 1;
        used += 1;
        assert_eq!(pool.owner_of(t), Some(ImageId(o)));
    }
    assert_eq!((&counts, used), (&model.counts, model.used));
    assert_eq!(pool.used_tiles(), used);
}
