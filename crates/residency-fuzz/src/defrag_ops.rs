//! Random heaps built with the real TLSF allocator (allocations of random sizes, alignments, kinds
//! and movability, then random frees), planned by `plan_defragmentation_with` under a random
//! budget, with or without repacking (a random share, unit and largest new heap): the plan passes
//! `check_plan_with`, is the same twice, and carried out (its new heap made as the backend makes
//! it) with `allocate_at` in plan
//! order gets exactly the planned footprints with every allocator's invariants intact, conserves
//! the live bytes and leaves the emptied heaps with no allocation. Raw inputs the planner must
//! refuse (overlapping or out-of-bounds blocks) are a typed error, never a panic.

use crate::input::Input;
use residency_core::allocator::{
    check_plan_with, plan_defragmentation_with, Allocation, BlockState, DefragBudget, DefragHeap, LiveBlock,
    Repack, ResourceKind, TlsfAllocator, TlsfDesc,
};

struct Live {
    allocation: Allocation,
    size: u64,
    alignment: u64,
    kind: ResourceKind,
    movable: bool,
}

/// Runs one input.
pub(crate) fn run(data: &[u8]) {
    let mut input = Input::new(data);
    if input.below(8) == 0 {
        raw(&mut input);
        return;
    }
    let heap_count = 2 + input.below(5) as usize;
    let mut heaps: Vec<(TlsfAllocator, Vec<Live>)> = Vec::new();
    for _ in 0..heap_count {
        let capacity = 1024 + input.below(16 << 10);
        let granularity = 1 << input.below(9);
        let mut tlsf = TlsfAllocator::new(TlsfDesc::new(capacity).with_granularity(granularity))
            .expect("a valid heap description");
        let mut live = Vec::new();
        for _ in 0..input.below(24) {
            let size = 1 + input.below(1024);
            let alignment = 1 << input.below(10);
            let kind = match input.below(3) {
                0 => ResourceKind::Linear,
                1 => ResourceKind::Optimal,
                _ => ResourceKind::Unknown,
            };
            let movable = input.below(32) != 0;
            if let Ok(allocation) = tlsf.allocate(size, alignment, kind) {
                live.push(Live { allocation, size, alignment, kind, movable });
            }
        }
        for _ in 0..input.below(live.len() as u64 + 1) {
            let index = input.below(live.len() as u64) as usize;
            tlsf.free(live.swap_remove(index).allocation).expect("own allocation");
        }
        heaps.push((tlsf, live));
    }
    let budget = DefragBudget { bytes: 256 + input.below(1 << 16), moves: 1 + input.below(64) as u32 };
    let described: Vec<DefragHeap> = heaps.iter().map(|(tlsf, live)| describe(tlsf, live)).collect();
    let repack = input.bool().then(|| Repack {
        max_occupancy_percent: input.below(101) as u8,
        unit: 1 << input.below(12),
        max_heap: 1 + input.below(32 << 10),
    });
    let plan = plan_defragmentation_with(&described, budget, repack).expect("real heaps are valid input");
    assert_eq!(plan, plan_defragmentation_with(&described, budget, repack).expect("valid"), "deterministic");
    if let Err(e) = check_plan_with(&described, budget, repack, &plan) {
        panic!("{e}");
    }
    for new in &plan.new_heaps {
        let desc = TlsfDesc::new(new.capacity).with_granularity(new.granularity);
        heaps.push((TlsfAllocator::new(desc).expect("a valid new heap"), Vec::new()));
    }
    let live_before: u64 = heaps.iter().flat_map(|(_, l)| l.iter().map(|l| l.size)).sum();
    let mut moved = Vec::new();
    for m in &plan.moves {
        let l = &heaps[m.heap].1[m.block];
        let (size, alignment, kind) = (l.size, l.alignment, l.kind);
        let tlsf = &mut heaps[m.to_heap].0;
        let allocation =
            tlsf.allocate_at(m.to_offset, size, alignment, kind).unwrap_or_else(|e| panic!("{m:?}: {e}"));
        tlsf.check_invariants().expect("invariants after allocate_at");
        let footprint = tlsf.blocks().find(|b| b.offset == allocation.offset()).expect("its block").size;
        assert_eq!(footprint, m.to_footprint, "planned footprint of {m:?}");
        moved.push((m.to_heap, Live { allocation, size, alignment, kind, movable: true }));
    }
    let mut sources: Vec<(usize, usize)> = plan.moves.iter().map(|m| (m.heap, m.block)).collect();
    sources.sort_unstable_by(|a, b| b.cmp(a));
    for (h, b) in sources {
        let l = heaps[h].1.swap_remove(b);
        heaps[h].0.free(l.allocation).expect("own allocation");
        heaps[h].0.check_invariants().expect("invariants after free");
    }
    for (h, l) in moved {
        heaps[h].1.push(l);
    }
    let live_after: u64 = heaps.iter().flat_map(|(_, l)| l.iter().map(|l| l.size)).sum();
    assert_eq!(live_before, live_after, "live bytes conserved");
    for &h in &plan.emptied {
        assert_eq!(heaps[h].0.allocation_count(), 0, "heap {h} emptied");
    }
    // A plan that leaves nothing it moved out of part drained gives memory back (so passes converge).
    if !plan.moves.is_empty() && !plan.draining.iter().any(|&h| plan.moves.iter().any(|m| m.heap == h)) {
        let new: u64 = plan.new_heaps.iter().map(|n| n.capacity).sum();
        let freed: u64 = plan.emptied.iter().map(|&h| described[h].capacity).sum();
        assert!(new < freed, "{new} B made for {freed} B freed: {plan:?}");
    }
    for (tlsf, live) in heaps {
        let mut tlsf = tlsf;
        for l in live {
            tlsf.free(l.allocation).expect("own allocation");
        }
        assert_eq!(tlsf.allocation_count(), 0);
    }
}

fn describe(tlsf: &TlsfAllocator, live: &[Live]) -> DefragHeap {
    let blocks = live
        .iter()
        .map(|l| {
            let footprint = tlsf
                .blocks()
                .find(|b| b.offset == l.allocation.offset() && matches!(b.state, BlockState::Used { .. }))
                .expect("a live allocation is a used block")
                .size;
            LiveBlock {
                offset: l.allocation.offset(),
                footprint,
                size: l.size,
                alignment: l.alignment,
                kind: l.kind,
                movable: l.movable,
            }
        })
        .collect();
    DefragHeap { capacity: tlsf.capacity(), granularity: tlsf.granularity(), blocks, draining: false }
}

/// Arbitrary heap descriptions: a plan or a typed error, and a plan always passes `check_plan`.
fn raw(input: &mut Input<'_>) {
    let mut heaps = Vec::new();
    for _ in 0..1 + input.below(4) {
        let capacity = input.below(1 << 16);
        let granularity = input.below(4096);
        let mut blocks = Vec::new();
        for _ in 0..input.below(12) {
            blocks.push(LiveBlock {
                offset: input.below(1 << 16),
                footprint: input.below(4096),
                size: input.below(4096),
                alignment: input.below(512),
                kind: if input.bool() { ResourceKind::Linear } else { ResourceKind::Optimal },
                movable: input.bool(),
            });
        }
        heaps.push(DefragHeap { capacity, granularity, blocks, draining: input.bool() });
    }
    let budget = DefragBudget { bytes: input.u64(), moves: input.u32() };
    let repack = input.bool().then(|| Repack {
        max_occupancy_percent: input.below(256) as u8,
        unit: input.u64(),
        max_heap: input.u64(),
    });
    if let Ok(plan) = plan_defragmentation_with(&heaps, budget, repack) {
        if let Err(e) = check_plan_with(&heaps, budget, repack, &plan) {
            panic!("{e}");
        }
    }
}
