//! The physical tile pool: contiguous runs, heaps under a budget, exact accounting after random
//! allocate/free sequences, eviction hook, trim, invariants after every operation.

use proptest::prelude::*;
use residency_core::tiles::{HeapIndex, ImageId, PoolError, TilePool, TilePoolDesc, TileRun};
use std::collections::HashMap;

fn pool(tiles_per_heap: u32, budget: u32) -> TilePool {
    TilePool::new(TilePoolDesc::default().with_tiles_per_heap(tiles_per_heap).with_budget_tiles(budget))
}

#[test]
fn a_request_that_fits_gets_one_contiguous_run() {
    let mut p = pool(2048, 8192);
    let a = p.allocate(ImageId(1), 128).unwrap();
    assert_eq!(a.runs, vec![TileRun { heap: HeapIndex(0), first: 0, len: 128 }]);
    assert_eq!(a.heaps_added, vec![HeapIndex(0)], "the first allocation adds a heap");
    let b = p.allocate(ImageId(1), 128).unwrap();
    assert_eq!(b.runs, vec![TileRun { heap: HeapIndex(0), first: 128, len: 128 }]);
    assert!(b.heaps_added.is_empty(), "never a heap per allocation");
    assert_eq!(p.capacity_tiles(), 2048);
    p.check_invariants().unwrap();
}

#[test]
fn heaps_are_added_only_when_free_tiles_run_out_and_never_beyond_the_budget() {
    let mut p = pool(1000, 2500);
    p.allocate(ImageId(1), 900).unwrap();
    // 100 free tiles in heap 0; 300 needed: a second heap is added.
    let a = p.allocate(ImageId(2), 300).unwrap();
    assert_eq!(a.heaps_added, vec![HeapIndex(1)]);
    assert_eq!(a.runs.iter().map(|r| r.len).sum::<u32>(), 300);
    p.allocate(ImageId(2), 1200).unwrap();
    assert_eq!(p.capacity_tiles(), 2500, "the last heap is cut to the budget");
    assert_eq!(p.heap_tiles(HeapIndex(2)), Some(500));
    let err = p.allocate(ImageId(3), 101).unwrap_err();
    assert_eq!(err, PoolError::PoolExhausted { requested: 101, free: 100, budget: 2500 });
    assert!(err.to_string().contains("101 tiles requested, 100 free"), "{err}");
    p.check_invariants().unwrap();
}

#[test]
fn fragmented_free_space_falls_back_to_smaller_runs() {
    let mut p = pool(64, 64);
    let runs: Vec<TileRun> = (0..64).map(|_| p.allocate(ImageId(1), 1).unwrap().runs[0]).collect();
    for r in runs.iter().step_by(2) {
        p.free(*r).unwrap();
    }
    let s = p.stats();
    assert_eq!((s.free_tiles, s.free_runs, s.largest_free_run), (32, 32, 1));
    assert!(s.fragmentation > 0.9);
    let a = p.allocate(ImageId(2), 5).unwrap();
    assert_eq!(a.runs.len(), 5, "no run of 5 exists: five runs of one");
    // Freeing neighbours coalesces: free runs never touch.
    for r in runs.iter().skip(1).step_by(2) {
        p.free(*r).unwrap();
        p.check_invariants().unwrap();
    }
    let s = p.stats();
    assert_eq!(s.used_tiles, 5);
    assert!(s.free_runs <= 6, "at most allocated runs + heaps: {}", s.free_runs);
}

#[test]
fn double_free_and_bad_runs_are_typed_errors() {
    let mut p = pool(16, 16);
    let a = p.allocate(ImageId(1), 4).unwrap().runs[0];
    p.free(TileRun { len: 2, ..a }).unwrap();
    assert_eq!(p.free(a), Err(PoolError::NotAllocated { heap: 0, tile: 0 }));
    assert_eq!(p.used_tiles(), 2, "a refused free changes nothing");
    assert_eq!(p.free(TileRun { heap: HeapIndex(7), first: 0, len: 1 }), Err(PoolError::UnknownHeap(7)));
    assert!(matches!(
        p.free(TileRun { heap: HeapIndex(0), first: 15, len: 2 }),
        Err(PoolError::OutOfBounds { .. })
    ));
    assert_eq!(p.allocate(ImageId(u32::MAX), 1), Err(PoolError::ReservedOwner(u32::MAX)));
    p.check_invariants().unwrap();
}

#[test]
fn eviction_hook_frees_tiles_and_the_allocation_retries() {
    let mut p = pool(32, 32);
    let old = p.allocate(ImageId(1), 32).unwrap().runs;
    let mut calls = 0;
    let got = p
        .allocate_or_evict(ImageId(2), 8, |pool, shortfall| {
            calls += 1;
            assert_eq!(shortfall, 8);
            pool.free(TileRun { len: 8, ..old[0] }).unwrap();
            true
        })
        .unwrap();
    assert_eq!((calls, got.runs.iter().map(|r| r.len).sum::<u32>()), (1, 8));
    // A hook that frees nothing ends the loop with the error.
    let err = p.allocate_or_evict(ImageId(2), 1, |_, _| true).unwrap_err();
    assert!(matches!(err, PoolError::PoolExhausted { requested: 1, free: 0, .. }));
    p.check_invariants().unwrap();
}

#[test]
fn owners_trim_and_leak_report() {
    let mut p = pool(100, 1000);
    p.allocate(ImageId(1), 150).unwrap();
    p.allocate(ImageId(2), 30).unwrap();
    assert_eq!(p.owned_tiles(ImageId(1)), 150);
    assert_eq!(p.leaks(), vec![(ImageId(1), 150), (ImageId(2), 30)]);
    assert_eq!(p.free_owner(ImageId(1)), 150);
    p.check_invariants().unwrap();
    let released = p.trim();
    assert_eq!(released.len(), 1, "one heap held only image 1's tiles");
    assert_eq!(p.capacity_tiles(), 100);
    assert_eq!(p.leaks(), vec![(ImageId(2), 30)]);
    // A later heap reuses the released slot.
    let a = p.allocate(ImageId(3), 100).unwrap();
    assert_eq!(a.heaps_added, released);
    p.check_invariants().unwrap();
    let json = serde_json::to_string(&p.stats()).unwrap();
    assert!(json.contains("\"largest_free_run\""));
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { owner: u32, tiles: u32 },
    Free { pick: usize, keep: u32 },
    FreeOwner { owner: u32 },
    Trim,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..4, 1u32..40).prop_map(|(owner, tiles)| Op::Alloc { owner, tiles }),
        4 => (any::<usize>(), 0u32..8).prop_map(|(pick, keep)| Op::Free { pick, keep }),
        1 => (0u32..4).prop_map(|owner| Op::FreeOwner { owner }),
        1 => Just(Op::Trim),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Against a reference model (a map tile → owner): allocations never hand out a tile twice,
    /// counts are exact, exhaustion happens exactly when the model says so, and the invariant
    /// checker passes after every operation.
    #[test]
    fn accounting_is_exact_after_random_operations(ops in prop::collection::vec(op(), 1..80), per_heap in 8u32..64) {
        let budget = per_heap * 3 + 5;
        let mut p = pool(per_heap, budget);
        let mut model: HashMap<(u32, u32), u32> = HashMap::new();
        let mut live: Vec<(u32, TileRun)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { owner, tiles } => {
                    let available = p.available_tiles();
                    match p.allocate(ImageId(owner), tiles) {
                        Ok(a) => {
                            prop_assert!(u64::from(tiles) <= available);
                            prop_assert_eq!(a.runs.iter().map(|r| r.len).sum::<u32>(), tiles);
                            for r in a.runs {
                                for t in r.tiles() {
                                    prop_assert!(model.insert((t.heap.0, t.tile), owner).is_none(), "tile handed out twice");
                                }
                                live.push((owner, r));
                            }
                        }
                        Err(PoolError::PoolExhausted { requested, free, .. }) => {
                            prop_assert_eq!((requested, free), (u64::from(tiles), available));
                            prop_assert!(u64::from(tiles) > available);
                        }
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::Free { pick, keep } => {
                    if live.is_empty() { continue; }
                    let i = pick % live.len();
                    let (owner, run) = live.swap_remove(i);
                    // Free the run's tail part and keep its head allocated (partial frees).
                    let keep = keep.min(run.len - 1);
                    let freed = TileRun { heap: run.heap, first: run.first + keep, len: run.len - keep };
                    p.free(freed).unwrap();
                    for t in freed.tiles() {
                        prop_assert_eq!(model.remove(&(t.heap.0, t.tile)), Some(owner));
                    }
                    if keep > 0 {
                        live.push((owner, TileRun { len: keep, ..run }));
                    }
                }
                Op::FreeOwner { owner } => {
                    let n = p.free_owner(ImageId(owner));
                    let before = model.len();
                    model.retain(|_, o| *o != owner);
                    live.retain(|(o, _)| *o != owner);
                    prop_assert_eq!(n as usize, before - model.len());
                }
                Op::Trim => {
                    for h in p.trim() {
                        prop_assert!(model.keys().all(|(heap, _)| *heap != h.0), "trimmed a heap in use");
                    }
                }
            }
            p.check_invariants().map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(p.used_tiles(), model.len() as u64);
            prop_assert!(p.capacity_tiles() <= u64::from(budget));
            for owner in 0..4 {
                let n = model.values().filter(|&&o| o == owner).count() as u32;
                prop_assert_eq!(p.owned_tiles(ImageId(owner)), n);
            }
            let s = p.stats();
            prop_assert_eq!(s.free_tiles + s.used_tiles, s.capacity_tiles);
            prop_assert!(s.free_runs <= live.len() as u64 + s.heaps.len() as u64);
        }
    }
}
