//! Tests of the defragmentation planner: named cases, and properties over random heaps built with
//! the real TLSF allocator, whose plans are then carried out with `allocate_at`.

use proptest::prelude::*;

use super::{
    check_plan, check_plan_with, plan_defragmentation, plan_defragmentation_with, Allocation, BlockState,
    DefragBudget, DefragError, DefragHeap, LiveBlock, NewHeap, Repack, ResourceKind, TlsfAllocator, TlsfDesc,
};

use ResourceKind::{Linear, Optimal};

const UNLIMITED: DefragBudget = DefragBudget { bytes: u64::MAX, moves: u32::MAX };

fn block(offset: u64, size: u64, movable: bool) -> LiveBlock {
    LiveBlock { offset, footprint: size, size, alignment: 1, kind: Linear, movable }
}

fn heap(capacity: u64, blocks: Vec<LiveBlock>) -> DefragHeap {
    DefragHeap { capacity, granularity: 1, blocks, draining: false }
}

/// A heap of the real allocator, with its live allocations and each one's (size, alignment).
struct Real {
    tlsf: TlsfAllocator,
    live: Vec<(Allocation, u64, u64, ResourceKind, bool)>,
}

impl Real {
    fn describe(&self) -> DefragHeap {
        let blocks = self
            .live
            .iter()
            .map(|(a, size, alignment, kind, movable)| {
                let footprint = self
                    .tlsf
                    .blocks()
                    .find(|b| b.offset == a.offset() && matches!(b.state, BlockState::Used { .. }))
                    .expect("a live allocation is a used block")
                    .size;
                LiveBlock {
                    offset: a.offset(),
                    footprint,
                    size: *size,
                    alignment: *alignment,
                    kind: *kind,
                    movable: *movable,
                }
            })
            .collect();
        DefragHeap {
            capacity: self.tlsf.capacity(),
            granularity: self.tlsf.granularity(),
            blocks,
            draining: false,
        }
    }
}

#[test]
fn the_most_empty_heap_moves_into_the_fullest_heaps_holes() {
    let heaps = vec![
        heap(1024, vec![block(0, 256, true), block(512, 256, true)]), // 50 % full, holes of 256
        heap(1024, vec![block(100, 100, true)]),                      // nearly empty
        heap(1024, vec![block(0, 200, true), block(600, 200, true)]), // 40 %
    ];
    let plan = plan_defragmentation(&heaps, UNLIMITED).unwrap();
    check_plan(&heaps, UNLIMITED, &plan).unwrap();
    // Heap 2's two 200 B blocks no longer fit heap 0's holes (156 B and 256 B) once heap 1's
    // block took the first: only the most-empty heap empties.
    assert_eq!(plan.emptied, vec![1], "most-empty first");
    assert_eq!(plan.moves[0].to_heap, 0, "into the fullest heap");
    assert_eq!(plan.moves[0].to_offset, 256, "its first hole");
    assert_eq!(plan.bytes, 100);
}

#[test]
fn a_heap_with_an_unmovable_block_is_never_a_source() {
    let heaps = vec![
        heap(1024, vec![block(0, 512, true)]),
        heap(1024, vec![block(0, 16, false), block(64, 16, true)]),
    ];
    let plan = plan_defragmentation(&heaps, UNLIMITED).unwrap();
    check_plan(&heaps, UNLIMITED, &plan).unwrap();
    assert!(plan.moves.iter().all(|m| m.heap != 1), "{plan:?}");
    // The fuller heap has no room anywhere else but in the pinned heap, which is a destination.
    assert_eq!(plan.emptied, vec![0]);
    assert_eq!(plan.moves[0].to_heap, 1);
}

#[test]
fn a_heap_is_emptied_whole_or_not_at_all_within_the_budget() {
    let heaps = vec![
        heap(1024, vec![block(0, 600, false)]),
        heap(1024, vec![block(0, 10, true), block(100, 10, true)]),
    ];
    let one_move = DefragBudget { bytes: u64::MAX, moves: 1 };
    let plan = plan_defragmentation(&heaps, one_move).unwrap();
    check_plan(&heaps, one_move, &plan).unwrap();
    assert!(plan.moves.is_empty(), "two moves needed, one allowed: nothing moves ({plan:?})");
    let few_bytes = DefragBudget { bytes: 19, moves: 10 };
    assert!(plan_defragmentation(&heaps, few_bytes).unwrap().moves.is_empty());
    let enough = DefragBudget { bytes: 20, moves: 2 };
    let plan = plan_defragmentation(&heaps, enough).unwrap();
    check_plan(&heaps, enough, &plan).unwrap();
    assert_eq!((plan.emptied.clone(), plan.moves.len(), plan.bytes), (vec![1], 2, 20));
}

#[test]
fn no_room_means_no_moves() {
    let heaps = vec![heap(100, vec![block(0, 90, true)]), heap(100, vec![block(0, 90, true)])];
    let plan = plan_defragmentation(&heaps, UNLIMITED).unwrap();
    assert!(plan.moves.is_empty() && plan.emptied.is_empty());
}

#[test]
fn granularity_keeps_linear_and_optimal_blocks_off_each_others_pages() {
    let g = 1024;
    let heaps = vec![
        DefragHeap {
            capacity: 8192,
            granularity: g,
            blocks: vec![LiveBlock {
                offset: 0,
                footprint: 100,
                size: 100,
                alignment: 1,
                kind: Optimal,
                movable: true,
            }],
            draining: false,
        },
        DefragHeap {
            capacity: 8192,
            granularity: g,
            blocks: vec![LiveBlock {
                offset: 0,
                footprint: 64,
                size: 64,
                alignment: 16,
                kind: Linear,
                movable: true,
            }],
            draining: false,
        },
    ];
    let plan = plan_defragmentation(&heaps, UNLIMITED).unwrap();
    check_plan(&heaps, UNLIMITED, &plan).unwrap();
    assert_eq!(plan.emptied, vec![1]);
    assert_eq!(plan.moves[0].to_offset, 1024, "the next page, not next to the optimal block");
}

#[test]
fn invalid_input_is_a_typed_error() {
    let overlapping = vec![heap(100, vec![block(0, 50, true), block(40, 20, true)])];
    assert!(matches!(
        plan_defragmentation(&overlapping, UNLIMITED),
        Err(DefragError::Block { block: 1, .. })
    ));
    let outside = vec![heap(100, vec![block(90, 20, true)])];
    assert!(matches!(plan_defragmentation(&outside, UNLIMITED), Err(DefragError::Block { .. })));
    let granularity = vec![DefragHeap { capacity: 100, granularity: 3, blocks: vec![], draining: false }];
    assert!(matches!(plan_defragmentation(&granularity, UNLIMITED), Err(DefragError::Granularity { .. })));
    let mut empty = block(0, 10, true);
    empty.size = 0;
    assert!(plan_defragmentation(&[heap(100, vec![empty])], UNLIMITED).is_err());
}

#[test]
fn check_plan_catches_a_broken_plan() {
    let heaps = vec![heap(1024, vec![block(0, 512, true)]), heap(1024, vec![block(0, 10, true)])];
    let mut plan = plan_defragmentation(&heaps, UNLIMITED).unwrap();
    check_plan(&heaps, UNLIMITED, &plan).unwrap();
    plan.moves[0].to_offset = 500; // onto the live block
    assert!(check_plan(&heaps, UNLIMITED, &plan).is_err());
}

#[test]
fn allocate_at_refuses_taken_misaligned_and_conflicting_ranges() {
    let mut h = TlsfAllocator::new(TlsfDesc::new(4096).with_granularity(1024)).unwrap();
    let a = h.allocate_at(100, 50, 4, Linear).unwrap();
    h.check_invariants().unwrap();
    assert_eq!(a.offset(), 100);
    assert!(h.allocate_at(120, 10, 1, Linear).is_err(), "taken");
    assert!(h.allocate_at(201, 10, 2, Linear).is_err(), "misaligned");
    assert!(h.allocate_at(512, 10, 1, Optimal).is_err(), "the linear block's page");
    assert!(h.allocate_at(4090, 10, 1, Linear).is_err(), "outside");
    let b = h.allocate_at(1024, 10, 1, Optimal).unwrap();
    h.check_invariants().unwrap();
    h.free(a).unwrap();
    h.free(b).unwrap();
    h.check_invariants().unwrap();
    assert_eq!(h.stats().largest_free_bytes, 4096);
}

fn repack(percent: u8, unit: u64, max_heap: u64) -> Option<Repack> {
    Some(Repack { max_occupancy_percent: percent, unit, max_heap })
}

#[test]
fn repacking_drains_sparsely_used_heaps_into_one_right_sized_new_heap() {
    // Two heaps half full whose holes (at most 300 B) cannot take the other heap's 400 B blocks:
    // emptying into holes moves nothing.
    let heaps = vec![
        heap(1000, vec![block(0, 400, true), block(600, 100, true)]),
        heap(1000, vec![block(300, 400, true)]),
    ];
    assert!(plan_defragmentation(&heaps, UNLIMITED).unwrap().moves.is_empty());
    let r = repack(92, 64, 1 << 20);
    let plan = plan_defragmentation_with(&heaps, UNLIMITED, r).unwrap();
    check_plan_with(&heaps, UNLIMITED, r, &plan).unwrap();
    assert_eq!(plan.emptied, vec![1, 0], "the emptiest share first, both drained");
    assert!(plan.moves.iter().all(|m| m.to_heap == 2), "all into the new heap: {plan:?}");
    // 400 (heap 1) + 400 + 100 (heap 0, largest first) packed from 0: ends at 900, rounded to 64.
    assert_eq!(plan.new_heaps, vec![NewHeap { capacity: 960, granularity: 1 }]);
    assert_eq!(plan.bytes, 900);
    assert_eq!(plan, plan_defragmentation_with(&heaps, UNLIMITED, r).unwrap(), "deterministic");
}

#[test]
fn repacking_keeps_full_heaps_pinned_heaps_and_the_budget() {
    let heaps = vec![
        heap(1000, vec![block(0, 950, true)]), // 95 %: kept
        heap(1000, vec![block(0, 100, false), block(200, 700, true)]), // pinned block: kept
        heap(1000, vec![block(0, 300, true), block(500, 300, true)]), // 60 %: drained
    ];
    let r = repack(92, 1, 1 << 20);
    let plan = plan_defragmentation_with(&heaps, UNLIMITED, r).unwrap();
    check_plan_with(&heaps, UNLIMITED, r, &plan).unwrap();
    assert!(plan.moves.iter().all(|m| m.heap == 2), "{plan:?}");
    assert_eq!(plan.new_heaps, vec![NewHeap { capacity: 600, granularity: 1 }]);
    // One move of budget: heap 2 is left part drained (not emptied), a later pass goes on.
    let one = DefragBudget { bytes: u64::MAX, moves: 1 };
    let plan = plan_defragmentation_with(&heaps, one, r).unwrap();
    check_plan_with(&heaps, one, r, &plan).unwrap();
    assert_eq!((plan.moves.len(), plan.emptied.len(), plan.new_heaps[0].capacity), (1, 0, 300));
    // A new heap is at most `max_heap`: nothing larger than it moves.
    let small = repack(92, 1, 299);
    let plan = plan_defragmentation_with(&heaps, UNLIMITED, small).unwrap();
    assert!(plan.moves.is_empty() && plan.new_heaps.is_empty(), "{plan:?}");
    // 0 % drains nothing; a unit that is not a power of two is refused.
    assert!(plan_defragmentation_with(&heaps, UNLIMITED, repack(0, 1, 1 << 20)).unwrap().moves.is_empty());
    assert!(plan_defragmentation_with(&heaps, UNLIMITED, repack(92, 3, 1 << 20)).is_err());
}

#[test]
fn a_part_drained_heap_receives_nothing_and_drains_first() {
    // Heap 0 was left part drained into heap 1 (a new heap, 94 % full). Were heap 0 a
    // destination, heap 1 (the emptiest by bytes) would empty back into its holes.
    let mut heaps = vec![
        heap(1000, vec![block(0, 300, true), block(600, 300, true)]),
        heap(320, vec![block(0, 300, true)]),
    ];
    let r = repack(50, 1, 1 << 20);
    let undo = plan_defragmentation_with(&heaps, UNLIMITED, r).unwrap();
    assert_eq!(undo.emptied, vec![1], "without the mark the drain is undone: {undo:?}");
    heaps[0].draining = true;
    let one = DefragBudget { bytes: u64::MAX, moves: 1 };
    let plan = plan_defragmentation_with(&heaps, one, r).unwrap();
    check_plan_with(&heaps, one, r, &plan).unwrap();
    // 60 % is over the 50 % share, but a heap being drained goes on draining.
    assert_eq!(plan.moves.len(), 1);
    assert!(plan.moves.iter().all(|m| m.heap == 0 && m.to_heap == 2), "{plan:?}");
    assert_eq!(plan.draining, vec![0], "still part drained");
    let plan = plan_defragmentation_with(&heaps, UNLIMITED, r).unwrap();
    check_plan_with(&heaps, UNLIMITED, r, &plan).unwrap();
    assert_eq!((plan.emptied.clone(), plan.draining.clone()), (vec![0], vec![]), "{plan:?}");
    // A plan that moves into it is caught.
    let mut wrong = undo.clone();
    wrong.draining.clear();
    assert!(check_plan_with(&heaps, UNLIMITED, r, &wrong).is_err());
}

#[test]
fn a_drain_that_gives_nothing_back_is_dropped_and_the_heap_keeps_its_mark() {
    // A heap being drained whose four 256 KiB blocks of unknown kind need a granularity page
    // each: packed into a new heap they end at 3.25 MiB, rounded to 4 MiB — as large as the heap
    // they would free. The drain is dropped, and the heap stays marked.
    const KIB: u64 = 1024;
    let unknown = |offset| LiveBlock {
        offset,
        footprint: 256 * KIB,
        size: 256 * KIB,
        alignment: 1,
        kind: ResourceKind::Unknown,
        movable: true,
    };
    let heaps = vec![
        DefragHeap {
            capacity: 4096 * KIB,
            granularity: 1024 * KIB,
            blocks: (0..4).map(|i| unknown(i * 1024 * KIB)).collect(),
            draining: true,
        },
        DefragHeap {
            capacity: 1024 * KIB,
            granularity: 1024 * KIB,
            blocks: vec![block(0, 1024 * KIB, false)],
            draining: false,
        },
    ];
    let r = repack(90, 1024 * KIB, 64 << 20);
    let plan = plan_defragmentation_with(&heaps, UNLIMITED, r).unwrap();
    check_plan_with(&heaps, UNLIMITED, r, &plan).unwrap();
    assert!(plan.moves.is_empty() && plan.new_heaps.is_empty(), "{plan:?}");
    assert_eq!(plan.draining, vec![0], "the mark stays");
    let mut lost = plan.clone();
    lost.draining.clear();
    assert!(check_plan_with(&heaps, UNLIMITED, r, &lost).is_err(), "a lost mark is caught");
}

#[test]
fn check_plan_with_catches_broken_repacking() {
    let heaps = vec![heap(1000, vec![block(0, 300, true), block(500, 300, true)])];
    let r = repack(92, 64, 1 << 20);
    let plan = plan_defragmentation_with(&heaps, UNLIMITED, r).unwrap();
    check_plan_with(&heaps, UNLIMITED, r, &plan).unwrap();
    assert!(check_plan(&heaps, UNLIMITED, &plan).is_err(), "a new heap without repacking");
    let mut wrong = plan.clone();
    wrong.new_heaps[0].capacity = 100;
    assert!(check_plan_with(&heaps, UNLIMITED, r, &wrong).is_err(), "too small");
    let mut wrong = plan.clone();
    wrong.new_heaps[0].capacity = 4096;
    assert!(check_plan_with(&heaps, UNLIMITED, r, &wrong).is_err(), "not right-sized");
    let mut wrong = plan.clone();
    wrong.emptied.clear();
    wrong.moves[0].to_heap = 0;
    assert!(check_plan_with(&heaps, UNLIMITED, r, &wrong).is_err(), "into the heap it drains");
}

/// One random heap: (capacity exponent, granularity exponent, allocations (size, alignment exp,
/// optimal, movable), frees).
type HeapSpec = (u32, u32, Vec<(u64, u32, bool, bool)>, Vec<usize>);

fn build(spec: &HeapSpec) -> Real {
    let (cap, gran, allocs, frees) = spec;
    let capacity = 1u64 << (10 + cap);
    let granularity = 1u64 << gran;
    let mut tlsf = TlsfAllocator::new(TlsfDesc::new(capacity).with_granularity(granularity)).unwrap();
    let mut live = Vec::new();
    for &(size, align, optimal, movable) in allocs {
        let alignment = 1u64 << align;
        let kind = if optimal { Optimal } else { Linear };
        if let Ok(a) = tlsf.allocate(size, alignment, kind) {
            live.push((a, size, alignment, kind, movable));
        }
    }
    for &f in frees {
        if !live.is_empty() {
            let (a, ..) = live.swap_remove(f % live.len());
            tlsf.free(a).unwrap();
        }
    }
    Real { tlsf, live }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any plan keeps the rules; carried out with `allocate_at` in plan order it gets exactly the
    /// planned footprints, keeps every allocator's invariants, conserves the live bytes and leaves
    /// the emptied heaps with no allocation.
    #[test]
    fn plans_are_valid_and_carry_out_exactly(
        specs in prop::collection::vec(
            (0u32..4, 0u32..11,
             prop::collection::vec((1u64..600, 0u32..9, any::<bool>(), prop::bool::weighted(0.97)), 0..24),
             prop::collection::vec(any::<usize>(), 0..20)),
            2..6),
        moves in 0u32..40,
        bytes in 0u64..20_000,
        repacking in prop::option::of((0u8..=100, 0u32..8, 64u64..8192)),
        draining in prop::collection::vec(prop::bool::weighted(0.2), 6),
    ) {
        let mut real: Vec<Real> = specs.iter().map(build).collect();
        let mut heaps: Vec<DefragHeap> = real.iter().map(Real::describe).collect();
        for (heap, &d) in heaps.iter_mut().zip(&draining) {
            heap.draining = d;
        }
        let budget = DefragBudget { bytes, moves };
        let repack = repacking.map(|(p, u, m)| Repack { max_occupancy_percent: p, unit: 1 << u, max_heap: m });
        let plan = plan_defragmentation_with(&heaps, budget, repack).unwrap();
        prop_assert_eq!(&plan, &plan_defragmentation_with(&heaps, budget, repack).unwrap(), "deterministic");
        if let Err(e) = check_plan_with(&heaps, budget, repack, &plan) {
            return Err(TestCaseError::fail(e.to_string()));
        }
        // The new heap, as the backend makes it.
        for new in &plan.new_heaps {
            let desc = TlsfDesc::new(new.capacity).with_granularity(new.granularity);
            real.push(Real { tlsf: TlsfAllocator::new(desc).unwrap(), live: Vec::new() });
        }
        let live_before: u64 = real.iter().flat_map(|r| r.live.iter().map(|l| l.1)).sum();
        // Carry it out: destinations first (as the backend does), then free the sources.
        let mut moved = Vec::new();
        for m in &plan.moves {
            let (_, size, alignment, kind, _) = &real[m.heap].live[m.block];
            let (size, alignment, kind) = (*size, *alignment, *kind);
            let a = real[m.to_heap].tlsf.allocate_at(m.to_offset, size, alignment, kind)
                .map_err(|e| TestCaseError::fail(format!("{m:?}: {e}")))?;
            real[m.to_heap].tlsf.check_invariants().unwrap();
            let footprint = real[m.to_heap].tlsf.blocks().find(|b| b.offset == a.offset()).unwrap().size;
            prop_assert_eq!(footprint, m.to_footprint, "planned footprint");
            moved.push((m.heap, m.block, m.to_heap, a, size, alignment, kind));
        }
        let mut sources: Vec<(usize, usize)> = plan.moves.iter().map(|m| (m.heap, m.block)).collect();
        sources.sort_unstable_by(|a, b| b.cmp(a)); // remove from the back so indices hold
        for (h, b) in sources {
            let (a, ..) = real[h].live.swap_remove(b);
            real[h].tlsf.free(a).unwrap();
            real[h].tlsf.check_invariants().unwrap();
        }
        for (_, _, to, a, size, alignment, kind) in moved {
            real[to].live.push((a, size, alignment, kind, true));
        }
        let live_after: u64 = real.iter().flat_map(|r| r.live.iter().map(|l| l.1)).sum();
        prop_assert_eq!(live_before, live_after, "live bytes conserved");
        for &h in &plan.emptied {
            prop_assert_eq!(real[h].tlsf.allocation_count(), 0, "heap {} emptied", h);
        }
        prop_assert!(plan.moves.len() as u64 <= u64::from(moves) && plan.bytes <= bytes, "budget");
        // A plan that leaves nothing it moved out of part drained gives memory back (so passes converge).
        if !plan.moves.is_empty() && !plan.draining.iter().any(|&h| plan.moves.iter().any(|m| m.heap == h)) {
            let new: u64 = plan.new_heaps.iter().map(|n| n.capacity).sum();
            let freed: u64 = plan.emptied.iter().map(|&h| heaps[h].capacity).sum();
            prop_assert!(new < freed, "{} B made for {} B freed: {:?}", new, freed, plan);
        }
    }
}
