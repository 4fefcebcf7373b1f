//! Compaction planning of the tile pool: moves out of the least used heaps into the holes of the
//! fuller ones, applied and reverted exactly, refused when a source is pinned, bounded per pass;
//! invariants after every step, against random churn.

use proptest::prelude::*;
use residency_core::tiles::{
    CompactionPlan, HeapIndex, ImageId, PhysicalTile, PoolError, TileMove, TilePool, TilePoolDesc, TileRun,
};

fn pool(tiles_per_heap: u32, budget: u32) -> TilePool {
    TilePool::new(TilePoolDesc::default().with_tiles_per_heap(tiles_per_heap).with_budget_tiles(budget))
}

/// Three heaps of 8; frees every other tile of heaps 1 and 2 (so heap 0 is full, 1 and 2 half).
fn fragmented() -> TilePool {
    let mut p = pool(8, 24);
    p.allocate(ImageId(1), 24).unwrap();
    for heap in 1..3 {
        for t in (0..8).step_by(2) {
            p.free(TileRun { heap: HeapIndex(heap), first: t, len: 1 }).unwrap();
        }
    }
    p.check_invariants().unwrap();
    p
}

#[test]
fn the_least_used_heap_moves_into_the_holes_of_the_fuller_ones_and_is_released() {
    let mut p = fragmented();
    let plan = p.plan_compaction(u32::MAX, |_, _| true);
    // Heaps 1 and 2 hold 4 tiles each; only one of them fits into the other's holes.
    assert_eq!(plan.moves.len(), 4);
    assert_eq!(plan.heaps_emptied, vec![HeapIndex(2)], "the later of two equal heaps goes");
    assert!(plan.moves.iter().all(|m| m.from.heap == HeapIndex(2) && m.to.heap == HeapIndex(1)));
    let before = p.used_tiles();
    p.apply_compaction(&plan).unwrap();
    p.check_invariants().unwrap();
    assert_eq!(p.used_tiles(), before);
    assert_eq!(p.owned_tiles(ImageId(1)), 24 - 8);
    for m in &plan.moves {
        assert_eq!(p.owner_of(m.to), Some(m.owner));
        assert_eq!(p.owner_of(m.from), None);
    }
    assert_eq!(p.trim_heaps(&plan.heaps_emptied), vec![HeapIndex(2)]);
    assert_eq!(p.capacity_tiles(), 16);
    p.check_invariants().unwrap();
    // Nothing more to gain.
    assert!(p.plan_compaction(u32::MAX, |_, _| true).moves.is_empty());
}

#[test]
fn a_reverted_compaction_leaves_the_pool_as_it_was() {
    let mut p = fragmented();
    let owners = |p: &TilePool| {
        (0..3)
            .flat_map(|h| (0..8).map(move |t| PhysicalTile { heap: HeapIndex(h), tile: t }))
            .map(|t| p.owner_of(t))
            .collect::<Vec<_>>()
    };
    let before = (owners(&p), p.stats());
    let plan = p.plan_compaction(u32::MAX, |_, _| true);
    p.apply_compaction(&plan).unwrap();
    p.revert_compaction(&plan).unwrap();
    p.check_invariants().unwrap();
    assert_eq!((owners(&p), p.stats()), before);
}

#[test]
fn a_heap_with_a_pinned_tile_is_never_a_source() {
    let p = fragmented();
    let pinned = PhysicalTile { heap: HeapIndex(2), tile: 1 };
    let plan = p.plan_compaction(u32::MAX, |t, _| t != pinned);
    assert_eq!(plan.heaps_emptied, vec![HeapIndex(1)]);
    assert!(plan.moves.iter().all(|m| m.from.heap == HeapIndex(1) && m.to.heap == HeapIndex(2)));
    assert!(p.plan_compaction(u32::MAX, |_, _| false).moves.is_empty());
}

#[test]
fn a_pass_moves_at_most_its_limit_and_the_next_pass_continues() {
    let mut p = fragmented();
    let first = p.plan_compaction(3, |_, _| true);
    assert_eq!(first.moves.len(), 3);
    assert!(first.heaps_emptied.is_empty(), "a heap moved in part is not emptied");
    p.apply_compaction(&first).unwrap();
    p.check_invariants().unwrap();
    let second = p.plan_compaction(3, |_, _| true);
    assert_eq!(second.moves.len(), 1);
    assert_eq!(second.heaps_emptied, vec![HeapIndex(2)]);
    p.apply_compaction(&second).unwrap();
    assert_eq!(p.trim_heaps(&second.heaps_emptied).len(), 1);
    p.check_invariants().unwrap();
}

#[test]
fn a_wrong_plan_is_refused_and_changes_nothing() {
    let mut p = fragmented();
    let before = p.stats();
    let busy = PhysicalTile { heap: HeapIndex(0), tile: 0 };
    let hole = PhysicalTile { heap: HeapIndex(1), tile: 0 };
    let src = PhysicalTile { heap: HeapIndex(2), tile: 1 };
    let cases = [
        (TileMove { owner: ImageId(1), from: src, to: busy }, PoolError::TileTaken { heap: 0, tile: 0 }),
        (TileMove { owner: ImageId(9), from: src, to: hole }, PoolError::NotAllocated { heap: 2, tile: 1 }),
        (TileMove { owner: ImageId(1), from: hole, to: hole }, PoolError::NotAllocated { heap: 1, tile: 0 }),
        (
            TileMove { owner: ImageId(1), from: src, to: PhysicalTile { heap: HeapIndex(7), tile: 0 } },
            PoolError::UnknownHeap(7),
        ),
    ];
    for (m, want) in cases {
        let plan = CompactionPlan { moves: vec![m], heaps_emptied: vec![] };
        assert_eq!(p.apply_compaction(&plan), Err(want));
    }
    let twice = TileMove { owner: ImageId(1), from: PhysicalTile { heap: HeapIndex(2), tile: 3 }, to: hole };
    let plan = CompactionPlan {
        moves: vec![TileMove { owner: ImageId(1), from: src, to: hole }, twice],
        heaps_emptied: vec![],
    };
    assert_eq!(p.apply_compaction(&plan), Err(PoolError::TileTaken { heap: 1, tile: 0 }));
    assert_eq!(p.stats(), before);
    p.check_invariants().unwrap();
}

proptest! {
    /// Random churn, then passes until nothing moves: every tile kept its owner count, the
    /// invariants hold after every step, and the heaps left are as few as the tiles allow
    /// (within one heap of the optimum: sources are whole heaps).
    #[test]
    fn compaction_after_churn_keeps_every_tile_and_frees_heaps(
        ops in prop::collection::vec((1u32..5, 1u32..12, any::<bool>()), 1..80),
        limit in 1u32..40,
    ) {
        let mut p = pool(16, 256);
        let mut held: Vec<(ImageId, TileRun)> = Vec::new();
        for (owner, k, free) in ops {
            if free && !held.is_empty() {
                let (_, run) = held.remove((k as usize) % held.len());
                p.free(run).unwrap();
            } else if let Ok(a) = p.allocate(ImageId(owner), k) {
                held.extend(a.runs.into_iter().map(|r| (ImageId(owner), r)));
            }
        }
        p.trim();
        let counts: Vec<u32> = (1..5).map(|o| p.owned_tiles(ImageId(o))).collect();
        for _ in 0..64 {
            let plan = p.plan_compaction(limit, |_, _| true);
            if plan.moves.is_empty() {
                break;
            }
            prop_assert!(plan.moves.len() <= limit as usize);
            p.apply_compaction(&plan).unwrap();
            p.trim_heaps(&plan.heaps_emptied);
            p.check_invariants().unwrap();
        }
        let now: Vec<u32> = (1..5).map(|o| p.owned_tiles(ImageId(o))).collect();
        prop_assert_eq!(now, counts);
        let heaps = p.heap_indices().count() as u64;
        let needed = p.used_tiles().div_ceil(16);
        prop_assert!(heaps <= needed + 1, "{} heaps for {} tiles", heaps, p.used_tiles());
    }
}

fn mv(owner: u32, from: (u32, u32), to: (u32, u32)) -> TileMove {
    TileMove {
        owner: ImageId(owner),
        from: PhysicalTile { heap: HeapIndex(from.0), tile: from.1 },
        to: PhysicalTile { heap: HeapIndex(to.0), tile: to.1 },
    }
}

#[test]
fn consecutive_moves_between_one_heap_pair_are_one_run() {
    // 8 tiles of heap 3 (tiles 4..12) into heap 1 (tiles 0..8): one run.
    let plan =
        CompactionPlan { moves: (0..8).map(|i| mv(1, (3, 4 + i), (1, i))).collect(), heaps_emptied: vec![] };
    let runs = plan.runs(|_| ());
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].first, runs[0].len), (0, 8));
    assert_eq!(runs[0].from, PhysicalTile { heap: HeapIndex(3), tile: 4 });
    assert_eq!(runs[0].to, PhysicalTile { heap: HeapIndex(1), tile: 0 });
}

#[test]
fn runs_break_at_a_gap_a_heap_change_or_a_class_change_and_cover_every_move_once() {
    let moves = vec![
        mv(1, (3, 0), (1, 0)),
        mv(1, (3, 1), (1, 1)),
        // A gap in the source.
        mv(1, (3, 3), (1, 2)),
        // A gap in the destination.
        mv(1, (3, 4), (1, 4)),
        // Another destination heap, the tile numbers following.
        mv(1, (3, 5), (2, 5)),
        // Another class (image) at consecutive tiles.
        mv(2, (3, 6), (2, 6)),
        mv(2, (3, 7), (2, 7)),
        // Another source heap.
        mv(2, (4, 8), (2, 8)),
    ];
    let plan = CompactionPlan { moves, heaps_emptied: vec![] };
    let runs = plan.runs(|m| m.owner);
    let lens: Vec<(usize, u32)> = runs.iter().map(|r| (r.first, r.len)).collect();
    assert_eq!(lens, vec![(0, 2), (2, 1), (3, 1), (4, 1), (5, 2), (7, 1)]);
    // Without classes the owner change no longer breaks the run.
    let lens: Vec<u32> = plan.runs(|_| ()).iter().map(|r| r.len).collect();
    assert_eq!(lens, vec![2, 1, 1, 3, 1]);
    for runs in [plan.runs(|m| m.owner), plan.runs(|_| ())] {
        let mut next = 0;
        for r in &runs {
            assert_eq!(r.first, next, "runs are in order and cover every move once");
            for i in 0..r.len {
                let m = &plan.moves[r.first + i as usize];
                assert_eq!((m.from.heap, m.from.tile), (r.from.heap, r.from.tile + i));
                assert_eq!((m.to.heap, m.to.tile), (r.to.heap, r.to.tile + i));
            }
            next += r.len as usize;
        }
        assert_eq!(next, plan.moves.len());
    }
}

#[test]
fn a_planned_pass_out_of_a_run_of_tiles_into_a_run_of_holes_is_one_run() {
    // Heap 0 holds tiles 0..4, heap 1 tiles 2..6: the later of the two equal heaps moves into
    // the other's holes (4..8), in order, so the pass is one run.
    let mut p = pool(8, 16);
    p.allocate(ImageId(1), 16).unwrap();
    p.free(TileRun { heap: HeapIndex(0), first: 4, len: 4 }).unwrap();
    p.free(TileRun { heap: HeapIndex(1), first: 0, len: 2 }).unwrap();
    p.free(TileRun { heap: HeapIndex(1), first: 6, len: 2 }).unwrap();
    p.check_invariants().unwrap();
    let plan = p.plan_compaction(u32::MAX, |_, _| true);
    assert_eq!(plan.moves.len(), 4);
    let runs = plan.runs(|m| m.owner);
    assert_eq!(runs.len(), 1, "{:?}", plan.moves);
    assert_eq!(runs[0].len, 4);
}
