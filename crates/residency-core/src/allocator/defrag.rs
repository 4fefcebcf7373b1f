//! Defragmentation planning: which live allocations to move where so that whole heaps empty.
//!
//! Plain data in, plain data out, deterministic: the backend describes its heaps (capacity,
//! granularity, every used block with whether it may move), [`plan_defragmentation`] answers moves
//! into the free ranges of other heaps, [`plan_defragmentation_with`] also drains sparsely used
//! heaps into new heaps sized to what they hold ([`Repack`]), and [`check_plan`] /
//! [`check_plan_with`] verify a plan against its input (the tests and the fuzz target run it on
//! every plan).
//!
//! # The rules of a plan
//! 1. A heap is emptied whole or not at all: the sources are heaps whose every block is movable,
//!    taken most-empty first (fewest used bytes), and a source's blocks all move or none does.
//! 2. Destinations are the fullest heaps first among those that hold something and are not
//!    sources nor [`DefragHeap::draining`]; a heap that received a move is never emptied by the
//!    same plan.
//! 3. A destination is a free range at the block's alignment that keeps off the granularity page
//!    of a conflicting neighbour ([`ResourceKind::conflicts_with`]); its footprint's end is rounded
//!    as [`TlsfAllocator::allocate`](super::TlsfAllocator::allocate) rounds it, so the backend
//!    can take each destination with [`TlsfAllocator::allocate_at`](super::TlsfAllocator::allocate_at)
//!    in plan order and get exactly the planned footprints. Destinations never overlap each other
//!    or a live block.
//! 4. The plan moves at most `budget.moves` blocks and `budget.bytes` bytes (the blocks' sizes).
//!
//! # Repacking ([`plan_defragmentation_with`] with a [`Repack`])
//! Emptying heaps into other heaps' holes cannot go below the heaps' own sizes: after random
//! churn every heap is part full, and the holes are single freed resources. Repacking, planned
//! after the moves above with the budget they left:
//! 5. Drained heaps are fully movable heaps that neither are sources nor received a move, whose
//!    used bytes (footprints) are under `max_occupancy_percent` of their capacity and, rounded up
//!    to `unit`, less than it, emptiest (lowest share) first. Their blocks (largest alignment, then largest size first) move into
//!    **one new heap** per plan ([`DefragPlan::new_heaps`], named `heaps.len()` in
//!    [`PlannedMove::to_heap`]), placed one after another from offset 0 as rule 3 places them;
//!    its capacity is the end of the last footprint rounded up to `unit`. A plan whose drains all
//!    complete and whose new heap is at least as large as the heaps they empty drains nothing.
//! 6. A drained heap may be left part drained when the budget runs out; it is listed in
//!    [`DefragPlan::emptied`] only when every block of it moved, else in [`DefragPlan::draining`]:
//!    the backend describes it as [`DefragHeap::draining`] to the next plan, which puts nothing
//!    into it (else emptying the new heap back into its holes would undo the drain) and drains
//!    it first, whatever its occupancy (a heap that got an unmovable block meanwhile loses the
//!    mark). Moves out of a heap the plan does not empty go only into
//!    the new heap.

use super::tlsf::TAIL_ROUNDING_MAX;
use super::ResourceKind;
use serde::{Deserialize, Serialize};

/// One used block of a heap, as the heap's allocator holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveBlock {
    /// First byte.
    pub offset: u64,
    /// Bytes the allocator holds for it (its footprint, end rounding included).
    pub footprint: u64,
    /// Bytes a new place must hold (the resource's size; at most `footprint`).
    pub size: u64,
    /// Alignment a new place needs (a power of two).
    pub alignment: u64,
    /// Its kind, for `bufferImageGranularity`.
    pub kind: ResourceKind,
    /// Whether it may move.
    pub movable: bool,
}

/// A heap: its size, granularity page and used blocks (in any order).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefragHeap {
    /// Size in bytes.
    pub capacity: u64,
    /// `bufferImageGranularity` (a power of two; 1: no rule).
    pub granularity: u64,
    /// Its used blocks.
    pub blocks: Vec<LiveBlock>,
    /// An earlier plan left it part drained (rule 6): it receives no move, and repacking goes on
    /// with it before any other heap.
    #[serde(default)]
    pub draining: bool,
}

/// What one pass may move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefragBudget {
    /// Bytes (sum of the moved blocks' sizes).
    pub bytes: u64,
    /// Moves.
    pub moves: u32,
}

/// Repacking (module documentation, rules 5 and 6): which heaps drain into a new heap sized to
/// what they hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repack {
    /// A fully movable heap drains when its used bytes are under this share of its capacity, in
    /// percent (0 drains nothing; 100 drains every heap not completely full).
    pub max_occupancy_percent: u8,
    /// New heaps' capacities are multiples of this (a power of two), unless that would pass
    /// `max_heap`.
    pub unit: u64,
    /// The largest new heap (the backend's largest heap size, at most the device's
    /// `maxMemoryAllocationSize`): a plan moves no more than fits in it.
    pub max_heap: u64,
}

impl Default for Repack {
    /// Heaps under 90 % full drain; new heaps in whole 2 MiB, at most 256 MiB. Once a repacking
    /// has run to its end every heap left is ≥ 90 % full or new, so the heaps hold at most ≈ 1.11×
    /// their used bytes (plus the unit per new heap). A higher share gets closer to 1.0× by moving
    /// more: draining a heap 90 % full copies 9 bytes for each byte it gives back.
    fn default() -> Self {
        Repack { max_occupancy_percent: 90, unit: 2 << 20, max_heap: 256 << 20 }
    }
}

/// A heap a plan asks the backend to create (rule 5): its moves are planned in it from offset 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewHeap {
    /// Size in bytes: the end of its last footprint rounded up to [`Repack::unit`], at most
    /// [`Repack::max_heap`].
    pub capacity: u64,
    /// Its `bufferImageGranularity` (the largest of the input heaps').
    pub granularity: u64,
}

/// One planned move: block `block` of heap `heap` to `to_offset` of heap `to_heap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedMove {
    /// The source heap (index in the input).
    pub heap: usize,
    /// The block (index in the source heap's `blocks`).
    pub block: usize,
    /// The destination heap: an index in the input, or `heaps.len() + k` for the plan's new heap
    /// `new_heaps[k]`.
    pub to_heap: usize,
    /// The destination offset (a multiple of the block's alignment).
    pub to_offset: u64,
    /// The destination's footprint (what `allocate_at` will hold).
    pub to_footprint: u64,
}

/// A plan: moves in the order to take their destinations, the heaps they empty, the bytes moved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefragPlan {
    /// The moves, in order.
    pub moves: Vec<PlannedMove>,
    /// Heaps the moves leave empty (indices in the input), in the order they were planned.
    pub emptied: Vec<usize>,
    /// Sum of the moved blocks' sizes.
    pub bytes: u64,
    /// Heaps to create before taking the destinations (repacking; at most one per plan).
    pub new_heaps: Vec<NewHeap>,
    /// Heaps the plan leaves part drained (rule 6), to describe as draining to the next plan.
    pub draining: Vec<usize>,
}

/// An input the planner cannot describe a heap with, or a plan that breaks a rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DefragError {
    /// A heap's granularity is not a power of two.
    #[error("heap {heap}: granularity {granularity} is not a power of two")]
    Granularity {
        /// The heap.
        heap: usize,
        /// Its granularity.
        granularity: u64,
    },
    /// A block is empty, misaligned, larger than its footprint, outside its heap, or overlaps
    /// another block.
    #[error("heap {heap}, block {block}: {reason}")]
    Block {
        /// The heap.
        heap: usize,
        /// The block.
        block: usize,
        /// Why.
        reason: &'static str,
    },
    /// A plan breaks one of the rules (see the module documentation).
    #[error("plan: {0}")]
    Plan(String),
}

fn align_up(value: u64, alignment: u64) -> Option<u64> {
    value.checked_add(alignment - 1).map(|v| v & !(alignment - 1))
}

fn align_down(value: u64, alignment: u64) -> u64 {
    value & !(alignment - 1)
}

/// A used range of a heap being planned.
#[derive(Clone, Copy, Debug)]
struct Used {
    start: u64,
    end: u64,
    kind: ResourceKind,
}

/// Checks the input; returns each heap's used ranges in address order.
fn occupancy(heaps: &[DefragHeap]) -> Result<Vec<Vec<Used>>, DefragError> {
    heaps
        .iter()
        .enumerate()
        .map(|(h, heap)| {
            if !heap.granularity.is_power_of_two() {
                return Err(DefragError::Granularity { heap: h, granularity: heap.granularity });
            }
            let bad = |block, reason| DefragError::Block { heap: h, block, reason };
            let mut used = Vec::with_capacity(heap.blocks.len());
            for (b, block) in heap.blocks.iter().enumerate() {
                if block.footprint == 0 || block.size == 0 {
                    return Err(bad(b, "empty"));
                }
                if block.size > block.footprint {
                    return Err(bad(b, "size larger than its footprint"));
                }
                if !block.alignment.is_power_of_two() {
                    return Err(bad(b, "alignment not a power of two"));
                }
                let end = block.offset.checked_add(block.footprint).filter(|&e| e <= heap.capacity);
                let Some(end) = end else { return Err(bad(b, "outside its heap")) };
                used.push((b, Used { start: block.offset, end, kind: block.kind }));
            }
            used.sort_by_key(|(_, u)| u.start);
            for pair in used.windows(2) {
                if pair[1].1.start < pair[0].1.end {
                    return Err(bad(pair[1].0, "overlaps another block"));
                }
            }
            Ok(used.into_iter().map(|(_, u)| u).collect())
        })
        .collect()
}

/// Where `size` bytes at `alignment` of `kind` go in `used` (a heap of `capacity` and
/// `granularity`): the lowest fitting offset, with the footprint `allocate_at` will give it.
fn fit(
    used: &[Used],
    capacity: u64,
    granularity: u64,
    size: u64,
    alignment: u64,
    kind: ResourceKind,
) -> Option<(usize, u64, u64)> {
    let g = granularity;
    for i in 0..=used.len() {
        let below = i.checked_sub(1).map(|j| used[j]);
        let above = used.get(i).copied();
        let start = below.map_or(0, |u| u.end);
        let hole_end = above.map_or(capacity, |u| u.start);
        if hole_end <= start {
            continue;
        }
        let Some(mut offset) = align_up(start, alignment) else { continue };
        if g > 1 {
            if let Some(b) = below {
                if b.kind.conflicts_with(kind) && align_down(b.end - 1, g) == align_down(offset, g) {
                    let Some(o) = align_up(offset, g) else { continue };
                    offset = o;
                }
            }
        }
        let mut limit = hole_end;
        if g > 1 && above.is_some_and(|a| a.kind.conflicts_with(kind)) {
            limit = align_down(limit, g);
        }
        let Some(end) = offset.checked_add(size) else { continue };
        if end > limit {
            continue;
        }
        // The end rounding of `TlsfAllocator::carve`: up to min(alignment, 256) inside the free
        // range, unless that crosses onto a conflicting neighbour's page.
        let mut footprint_end = end;
        if alignment > 1 {
            let rounded =
                align_up(end, alignment.min(TAIL_ROUNDING_MAX)).map_or(hole_end, |e| e.min(hole_end));
            let crosses = g > 1
                && above.is_some_and(|a| a.kind.conflicts_with(kind))
                && align_down(rounded - 1, g) == align_down(hole_end, g);
            if rounded > end && !crosses {
                footprint_end = rounded;
            }
        }
        return Some((i, offset, footprint_end - offset));
    }
    None
}

fn used_bytes(used: &[Used]) -> u64 {
    used.iter().map(|u| u.end - u.start).sum()
}

/// Plans moves that empty the most-empty fully movable heaps into the free ranges of the fullest
/// heaps, within `budget` (see the module documentation for the rules). Deterministic: the same
/// input gives the same plan. An invalid input (a block outside its heap, overlapping another,
/// misaligned, empty; a granularity not a power of two) is a typed error. Its algorithm and costs
/// are [`plan_defragmentation_with`]'s (`# Algorithm`, `# Efficiency`), without the repack.
pub fn plan_defragmentation(heaps: &[DefragHeap], budget: DefragBudget) -> Result<DefragPlan, DefragError> {
    plan_defragmentation_with(heaps, budget, None)
}

/// [`plan_defragmentation`], then, with `repack`, draining sparsely used heaps into one new heap
/// sized to what they hold (rules 5 and 6) with the budget left. A `unit` that is not a power of
/// two is a typed error.
///
/// # Algorithm
///
/// A greedy first fit over a snapshot. Each heap's used blocks become a list of footprints
/// sorted by offset (checked: in bounds, no overlap). The fully movable heaps are the candidate
/// sources, fewest used bytes first; for each, within the budget, its blocks (largest first) are
/// placed one by one into the destinations (heaps that hold something, are not sources and are
/// not draining, fullest first) at the lowest offset of the first hole that fits — aligned, off a
/// conflicting neighbour's granularity page, with the footprint end [`TlsfAllocator::allocate`]
/// would round to — on trial copies of the destinations' lists. Only if every block of the
/// source fits are the trial lists kept and the moves planned (a heap empties whole or not at
/// all), else the source is skipped. With a [`Repack`], the sparsely used heaps left are then
/// drained, emptiest first, into one new heap, their blocks packed from offset 0 (largest
/// alignment, then size, first). No free ranges are coalesced: holes are the gaps between sorted
/// footprints, so a planned footprint simply narrows one.
///
/// # Efficiency
///
/// - Time: O(H · (H log H + B_s · H · B_d)) for H heaps, B_s blocks per source and B_d blocks per
///   destination (each fit walks a destination's sorted list and inserts into it), plus the
///   sorts. `docs/benchmarks.md`'s `defrag` rows give a pass's CPU time over 290 resources in 5
///   heaps as 0.25–2.3 ms, planning, creating and recording the moves together (the planner alone
///   is not timed there).
/// - Memory: the occupancy lists (24 bytes per live block) and, per source tried, copies of the
///   destinations' lists; the plan holds one [`PlannedMove`] per move.
/// - Locking: none, a pure function of its input; the backend's `Defragmenter` builds the input
///   from its heaps under their lock and carries the moves out later.
///
/// [`TlsfAllocator::allocate`]: super::TlsfAllocator::allocate
pub fn plan_defragmentation_with(
    heaps: &[DefragHeap],
    budget: DefragBudget,
    repack: Option<Repack>,
) -> Result<DefragPlan, DefragError> {
    if let Some(r) = repack {
        if !r.unit.is_power_of_two() {
            return Err(DefragError::Plan(format!("repack unit {} is not a power of two", r.unit)));
        }
    }
    let mut used = occupancy(heaps)?;
    let mut plan = DefragPlan::default();
    let mut is_source = vec![false; heaps.len()];
    let mut received = vec![false; heaps.len()];
    // Most-empty first; ties by index, so the plan is deterministic.
    let mut sources: Vec<usize> = (0..heaps.len())
        .filter(|&h| !heaps[h].blocks.is_empty() && heaps[h].blocks.iter().all(|b| b.movable))
        .collect();
    sources.sort_by_key(|&h| (used_bytes(&used[h]), h));
    for source in sources {
        if received[source] {
            continue;
        }
        let heap = &heaps[source];
        let moves = heap.blocks.len() as u64;
        let bytes: u64 = heap.blocks.iter().map(|b| b.size).sum();
        if plan.moves.len() as u64 + moves > u64::from(budget.moves)
            || plan.bytes.saturating_add(bytes) > budget.bytes
        {
            continue;
        }
        // Destinations: heaps holding something, not sources, fullest first (as the heaps are now).
        let mut destinations: Vec<usize> = (0..heaps.len())
            .filter(|&h| h != source && !is_source[h] && !heaps[h].draining && !used[h].is_empty())
            .collect();
        destinations.sort_by_key(|&h| (std::cmp::Reverse(used_bytes(&used[h])), h));
        // Largest blocks first; ties by index.
        let mut order: Vec<usize> = (0..heap.blocks.len()).collect();
        order.sort_by_key(|&b| (std::cmp::Reverse(heap.blocks[b].size), b));
        let mut trial: Vec<(usize, Vec<Used>)> = Vec::new();
        let mut moves_here = Vec::with_capacity(order.len());
        let mut all_fit = true;
        for b in order {
            let block = heap.blocks[b];
            let mut placed = None;
            for &d in &destinations {
                let slot = match trial.iter().position(|(h, _)| *h == d) {
                    Some(slot) => slot,
                    None => {
                        trial.push((d, used[d].clone()));
                        trial.len() - 1
                    }
                };
                let ranges = &mut trial[slot].1;
                let dest = &heaps[d];
                if let Some((at, offset, footprint)) =
                    fit(ranges, dest.capacity, dest.granularity, block.size, block.alignment, block.kind)
                {
                    ranges.insert(at, Used { start: offset, end: offset + footprint, kind: block.kind });
                    placed = Some(PlannedMove {
                        heap: source,
                        block: b,
                        to_heap: d,
                        to_offset: offset,
                        to_footprint: footprint,
                    });
                    break;
                }
            }
            match placed {
                Some(m) => moves_here.push(m),
                None => {
                    all_fit = false;
                    break;
                }
            }
        }
        if !all_fit {
            continue;
        }
        for (d, ranges) in trial {
            if moves_here.iter().any(|m| m.to_heap == d) {
                used[d] = ranges;
                received[d] = true;
            }
        }
        used[source].clear();
        is_source[source] = true;
        plan.bytes += bytes;
        plan.moves.extend(moves_here);
        plan.emptied.push(source);
    }
    if let Some(repack) = repack {
        plan_repack(heaps, budget, repack, &used, &is_source, &received, &mut plan);
    }
    Ok(plan)
}

/// Rules 5 and 6: drains the sparsely used heaps that are left into one new heap.
fn plan_repack(
    heaps: &[DefragHeap],
    budget: DefragBudget,
    repack: Repack,
    used: &[Vec<Used>],
    is_source: &[bool],
    received: &[bool],
    plan: &mut DefragPlan,
) {
    let share = u128::from(repack.max_occupancy_percent);
    let mut drained: Vec<usize> = (0..heaps.len())
        .filter(|&h| {
            let heap = &heaps[h];
            !is_source[h]
                && !received[h]
                && !heap.blocks.is_empty()
                && heap.blocks.iter().all(|b| b.movable)
                && (heap.draining
                    || (u128::from(used_bytes(&used[h])) * 100 < share * u128::from(heap.capacity)
                        // What it holds, in whole units, must be less than it: else a drain
                        // makes a heap as large and the next plan drains that one again.
                        && align_up(used_bytes(&used[h]), repack.unit).is_some_and(|n| n < heap.capacity)))
        })
        .collect();
    // Heaps being drained first; then the lowest share (compared without division), then fewest
    // bytes, then index.
    drained.sort_by(|&a, &b| {
        let (ua, ca) = (u128::from(used_bytes(&used[a])), u128::from(heaps[a].capacity));
        let (ub, cb) = (u128::from(used_bytes(&used[b])), u128::from(heaps[b].capacity));
        heaps[b]
            .draining
            .cmp(&heaps[a].draining)
            .then((ua * cb).cmp(&(ub * ca)))
            .then(ua.cmp(&ub))
            .then(a.cmp(&b))
    });
    let granularity = heaps.iter().map(|h| h.granularity).max().unwrap_or(1);
    let new_index = heaps.len();
    let (moves_before, emptied_before, bytes_before) = (plan.moves.len(), plan.emptied.len(), plan.bytes);
    let mut ranges: Vec<Used> = Vec::new();
    let mut moves = plan.moves.len() as u64;
    let mut bytes = plan.bytes;
    let mut moved_any = false;
    'heaps: for h in drained {
        let heap = &heaps[h];
        let mut order: Vec<usize> = (0..heap.blocks.len()).collect();
        order.sort_by_key(|&b| {
            (std::cmp::Reverse(heap.blocks[b].alignment), std::cmp::Reverse(heap.blocks[b].size), b)
        });
        let mut all = true;
        for b in order {
            let block = heap.blocks[b];
            if moves + 1 > u64::from(budget.moves) || bytes.saturating_add(block.size) > budget.bytes {
                all = false;
                break;
            }
            // The new heap has no end yet: every block goes after the last one.
            let placed = fit(&ranges, u64::MAX >> 1, granularity, block.size, block.alignment, block.kind);
            let Some((at, offset, footprint)) = placed.filter(|&(_, o, f)| o + f <= repack.max_heap) else {
                all = false;
                break;
            };
            ranges.insert(at, Used { start: offset, end: offset + footprint, kind: block.kind });
            plan.moves.push(PlannedMove {
                heap: h,
                block: b,
                to_heap: new_index,
                to_offset: offset,
                to_footprint: footprint,
            });
            moves += 1;
            bytes += block.size;
            moved_any = true;
        }
        if all {
            plan.emptied.push(h);
        } else {
            break 'heaps;
        }
    }
    plan.draining = part_drained(heaps, plan);
    if !moved_any {
        return;
    }
    let end = ranges.iter().map(|u| u.end).max().unwrap_or(0);
    let capacity = align_up(end, repack.unit).unwrap_or(end).min(repack.max_heap.max(end));
    // A drain that empties its heaps into a new heap at least as large as they were gives nothing
    // back (packing padding can make it so): plan none of it.
    let left_part = plan.draining.iter().any(|&h| plan.moves[moves_before..].iter().any(|m| m.heap == h));
    let freed: u64 = plan.emptied[emptied_before..].iter().map(|&h| heaps[h].capacity).sum();
    if !left_part && capacity >= freed {
        plan.moves.truncate(moves_before);
        plan.emptied.truncate(emptied_before);
        plan.bytes = bytes_before;
        plan.draining = part_drained(heaps, plan);
        return;
    }
    plan.bytes = bytes;
    plan.new_heaps.push(NewHeap { capacity, granularity });
}

/// Rule 6's list: heaps drained before or by `plan` that it does not empty (and that may still
/// drain: fully movable).
fn part_drained(heaps: &[DefragHeap], plan: &DefragPlan) -> Vec<usize> {
    (0..heaps.len())
        .filter(|&h| {
            !plan.emptied.contains(&h)
                && (heaps[h].draining || plan.moves.iter().any(|m| m.heap == h))
                && !heaps[h].blocks.is_empty()
                && heaps[h].blocks.iter().all(|b| b.movable)
        })
        .collect()
}

/// Checks `plan` against its input and budget: every rule of the module documentation (moved
/// blocks movable and moved once, emptied heaps wholly moved and never destinations, destinations
/// in bounds, aligned, off conflicting neighbours' granularity pages and overlapping nothing,
/// footprints at least the size, the budget kept, the byte count right). The tests and the fuzz
/// target run it on every plan.
pub fn check_plan(heaps: &[DefragHeap], budget: DefragBudget, plan: &DefragPlan) -> Result<(), DefragError> {
    check_plan_with(heaps, budget, None, plan)
}

/// [`check_plan`] for a plan of [`plan_defragmentation_with`]: also rules 5 and 6 (at most one new
/// heap and only with `repack`, its capacity the end of its last footprint rounded up to the unit
/// and within `max_heap`, moves out of a heap the plan does not empty only into the new heap, no
/// heap both a source and a destination, every new heap used).
pub fn check_plan_with(
    heaps: &[DefragHeap],
    budget: DefragBudget,
    repack: Option<Repack>,
    plan: &DefragPlan,
) -> Result<(), DefragError> {
    let fail = |s: String| Err(DefragError::Plan(s));
    let mut used = occupancy(heaps)?;
    let allowed_new = usize::from(repack.is_some());
    if plan.new_heaps.len() > allowed_new {
        return fail(format!("{} new heaps, {allowed_new} allowed", plan.new_heaps.len()));
    }
    let granularity = heaps.iter().map(|h| h.granularity).max().unwrap_or(1);
    for (k, new) in plan.new_heaps.iter().enumerate() {
        if new.granularity != granularity {
            return fail(format!(
                "new heap {k} has granularity {}, the heaps {granularity}",
                new.granularity
            ));
        }
        used.push(Vec::new());
    }
    let capacity_of = |h: usize| match h.checked_sub(heaps.len()) {
        Some(k) => plan.new_heaps.get(k).map(|n| (n.capacity, n.granularity)),
        None => heaps.get(h).map(|d| (d.capacity, d.granularity)),
    };
    let sources: std::collections::HashSet<usize> = plan.moves.iter().map(|m| m.heap).collect();
    if plan.moves.len() as u64 > u64::from(budget.moves) {
        return fail(format!("{} moves over a budget of {}", plan.moves.len(), budget.moves));
    }
    if plan.bytes > budget.bytes {
        return fail(format!("{} B over a budget of {} B", plan.bytes, budget.bytes));
    }
    let mut moved = std::collections::HashSet::new();
    let mut bytes = 0u64;
    for m in &plan.moves {
        let Some(block) = heaps.get(m.heap).and_then(|h| h.blocks.get(m.block)) else {
            return fail(format!("{m:?} names no block"));
        };
        if !block.movable {
            return fail(format!("{m:?} moves an unmovable block"));
        }
        if !moved.insert((m.heap, m.block)) {
            return fail(format!("{m:?} moves a block twice"));
        }
        let into_new = m.to_heap >= heaps.len();
        if !plan.emptied.contains(&m.heap) && !into_new {
            return fail(format!("{m:?} moves out of a heap the plan does not empty"));
        }
        if plan.emptied.contains(&m.to_heap) || m.to_heap == m.heap || sources.contains(&m.to_heap) {
            return fail(format!("{m:?} moves into a heap the plan moves out of"));
        }
        if heaps.get(m.to_heap).is_some_and(|d| d.draining) {
            return fail(format!("{m:?} moves into a heap being drained"));
        }
        let Some((capacity, g)) = capacity_of(m.to_heap) else { return fail(format!("{m:?} names no heap")) };
        if m.to_offset % block.alignment != 0 {
            return fail(format!("{m:?} is misaligned"));
        }
        if m.to_footprint < block.size {
            return fail(format!("{m:?} has a footprint below the block's size"));
        }
        let Some(end) = m.to_offset.checked_add(m.to_footprint).filter(|&e| e <= capacity) else {
            return fail(format!("{m:?} leaves its heap"));
        };
        let ranges = &mut used[m.to_heap];
        let at = ranges.partition_point(|u| u.start < m.to_offset);
        if let Some(below) = at.checked_sub(1).map(|i| ranges[i]) {
            if below.end > m.to_offset {
                return fail(format!("{m:?} overlaps a block below"));
            }
            if g > 1
                && below.kind.conflicts_with(block.kind)
                && align_down(below.end - 1, g) == align_down(m.to_offset, g)
            {
                return fail(format!("{m:?} shares a granularity page with a conflicting block below"));
            }
        }
        if let Some(above) = ranges.get(at).copied() {
            if above.start < end {
                return fail(format!("{m:?} overlaps a block above"));
            }
            if g > 1
                && above.kind.conflicts_with(block.kind)
                && align_down(end - 1, g) == align_down(above.start, g)
            {
                return fail(format!("{m:?} shares a granularity page with a conflicting block above"));
            }
        }
        ranges.insert(at, Used { start: m.to_offset, end, kind: block.kind });
        bytes += block.size;
    }
    if bytes != plan.bytes {
        return fail(format!("the plan says {} B, its moves are {bytes} B", plan.bytes));
    }
    if let Some(repack) = repack {
        // A heap being drained keeps its mark until it is emptied (or cannot drain any more).
        if plan.draining != part_drained(heaps, plan) {
            return fail(format!(
                "draining heaps {:?}, expected {:?}",
                plan.draining,
                part_drained(heaps, plan)
            ));
        }
        for (k, new) in plan.new_heaps.iter().enumerate() {
            let Some(end) = used[heaps.len() + k].last().map(|u| u.end) else {
                return fail(format!("new heap {k} receives no move"));
            };
            let rounded = align_up(end, repack.unit).unwrap_or(end);
            if new.capacity < end || new.capacity > rounded || new.capacity > repack.max_heap.max(end) {
                return fail(format!(
                    "new heap {k} of {} B for moves ending at {end} B (unit {}, at most {} B)",
                    new.capacity, repack.unit, repack.max_heap
                ));
            }
            if end > repack.max_heap {
                return fail(format!("new heap {k}'s moves end at {end} B, past {} B", repack.max_heap));
            }
        }
    }
    for &h in &plan.emptied {
        let Some(heap) = heaps.get(h) else { return fail(format!("emptied heap {h} does not exist")) };
        if (0..heap.blocks.len()).any(|b| !moved.contains(&(h, b))) {
            return fail(format!("heap {h} is listed as emptied but keeps a block"));
        }
    }
    if repack.is_none() && !plan.draining.is_empty() {
        return fail(format!("draining heaps {:?} without repacking", plan.draining));
    }
    for &h in &plan.draining {
        let Some(heap) = heaps.get(h) else { return fail(format!("draining heap {h} does not exist")) };
        if plan.emptied.contains(&h) || (0..heap.blocks.len()).all(|b| moved.contains(&(h, b))) {
            return fail(format!("heap {h} is listed as draining but the plan empties it"));
        }
        if !heap.draining && !plan.moves.iter().any(|m| m.heap == h) {
            return fail(format!("heap {h} is listed as draining but nothing moves out of it"));
        }
    }
    Ok(())
}
