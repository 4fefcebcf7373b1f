//! Pending tile changes (`PendingChanges`): the folding of an image's commits and releases between
//! flushes, against a reference model that keeps what the GPU has bound and replays the whole log
//! of changes since the last flush.

use proptest::prelude::*;
use residency_core::format::Format;
use residency_core::tiles::{
    LayoutLimits, PendingChanges, PhysicalTile, ResidencyChanges, SparseFormatInfo, SparseImageDesc,
    SparseImageLayout, SparseResidency, TileIndex, TilePool, TilePoolDesc,
};
use std::collections::BTreeMap;

/// 512² RGBA8 in two layers: 16 + 4 + 1 tiles per layer, a mip tail per layer.
fn layout() -> SparseImageLayout {
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 512, 512).with_array_layers(2);
    let info = SparseFormatInfo::standard(desc.format, desc.dimension).unwrap();
    SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Commit(Vec<u32>),
    Release(Vec<u32>),
    CommitTail(u32),
    ReleaseTail(u32),
    /// The flush reached the GPU.
    Flush,
    /// The flush failed: nothing reached the GPU.
    FailedFlush,
}

fn op(tiles: u32, tails: u32) -> impl Strategy<Value = Op> {
    // A few indices past the end: refused commits and releases queue nothing.
    let list = || proptest::collection::vec(0..tiles + 2, 0..6);
    prop_oneof![
        4 => list().prop_map(Op::Commit),
        4 => list().prop_map(Op::Release),
        1 => (0..tails + 1).prop_map(Op::CommitTail),
        1 => (0..tails + 1).prop_map(Op::ReleaseTail),
        1 => Just(Op::Flush),
        1 => Just(Op::FailedFlush),
    ]
}

/// What the GPU has bound: tiles and tails.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Bound {
    tiles: BTreeMap<u32, PhysicalTile>,
    tails: BTreeMap<u32, Vec<PhysicalTile>>,
}

/// Pending changes by tile and by tail.
type Folded = (BTreeMap<u32, Option<PhysicalTile>>, BTreeMap<u32, Option<Vec<PhysicalTile>>>);

/// The reference fold: per tile, the last change of the log, except a release of a tile the GPU
/// does not have bound (it cancels the commit before it).
fn fold(gpu: &Bound, log: &[ResidencyChanges]) -> Folded {
    let mut tiles = BTreeMap::new();
    let mut tails = BTreeMap::new();
    for changes in log {
        for c in &changes.tiles {
            tiles.insert(c.tile.0, c.physical);
        }
        for c in &changes.tails {
            tails.insert(c.tail, c.physical.clone());
        }
    }
    tiles.retain(|t, p| p.is_some() || gpu.tiles.contains_key(t));
    tails.retain(|t, p| p.is_some() || gpu.tails.contains_key(t));
    (tiles, tails)
}

fn apply(gpu: &Bound, pending: &ResidencyChanges) -> Bound {
    let mut out = gpu.clone();
    for c in &pending.tiles {
        match c.physical {
            Some(p) => out.tiles.insert(c.tile.0, p),
            None => out.tiles.remove(&c.tile.0),
        };
    }
    for c in &pending.tails {
        match &c.physical {
            Some(p) => out.tails.insert(c.tail, p.clone()),
            None => out.tails.remove(&c.tail),
        };
    }
    out
}

fn page_table(residency: &SparseResidency) -> Bound {
    let table = residency.page_table();
    Bound {
        tiles: table.mapped().map(|(t, p)| (t.0, p)).collect(),
        tails: (0..residency.layout().mip_tail_count())
            .filter_map(|t| table.tail_tiles(t).map(|p| (t, p.to_vec())))
            .collect(),
    }
}

fn check(
    pending: &PendingChanges,
    gpu: &Bound,
    log: &[ResidencyChanges],
    residency: &SparseResidency,
    pool: &TilePool,
) -> Result<(), TestCaseError> {
    let changes = pending.changes();
    let mut seen = std::collections::BTreeSet::new();
    prop_assert!(
        changes.tiles.iter().all(|c| seen.insert(c.tile.0)),
        "one pending change per tile: {changes:?}"
    );
    let mut seen = std::collections::BTreeSet::new();
    prop_assert!(
        changes.tails.iter().all(|c| seen.insert(c.tail)),
        "one pending change per tail: {changes:?}"
    );
    let tiles: BTreeMap<u32, Option<PhysicalTile>> =
        changes.tiles.iter().map(|c| (c.tile.0, c.physical)).collect();
    let tails: BTreeMap<u32, Option<Vec<PhysicalTile>>> =
        changes.tails.iter().map(|c| (c.tail, c.physical.clone())).collect();
    prop_assert_eq!((tiles, tails), fold(gpu, log), "the fold of the log since the last flush");
    prop_assert_eq!(apply(gpu, changes), page_table(residency), "the GPU after the flush is the page table");
    prop_assert_eq!(
        pending.is_empty(),
        changes.tiles.is_empty() && changes.tails.is_empty() && changes.heaps_added.is_empty()
    );
    let tail_tiles = u64::from(residency.layout().mip_tail().map_or(0, |t| t.tiles));
    let mapped = page_table(residency);
    prop_assert_eq!(pool.used_tiles(), mapped.tiles.len() as u64 + mapped.tails.len() as u64 * tail_tiles);
    pool.check_invariants().map_err(|e| TestCaseError::fail(e.to_string()))?;
    residency.page_table().check_invariants().map_err(TestCaseError::fail)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn pending_changes_are_the_fold_of_the_log_and_bring_the_gpu_to_the_page_table(
        ops in proptest::collection::vec(op(42, 2), 1..48),
        tiles_per_heap in 1u32..12,
        budget in 0u32..40,
    ) {
        let layout = layout();
        prop_assert_eq!((layout.tile_count(), layout.mip_tail_count()), (42, 2));
        let mut pool = TilePool::new(
            TilePoolDesc::default().with_tiles_per_heap(tiles_per_heap).with_budget_tiles(budget),
        );
        let mut residency = SparseResidency::new(pool.id(), residency_core::tiles::ImageId(7), &layout);
        let mut pending = PendingChanges::new();
        let mut gpu = Bound::default();
        let mut log: Vec<ResidencyChanges> = Vec::new();
        for op in ops {
            let made = match &op {
                Op::Commit(t) => Some(residency.commit(&mut pool, &t.iter().map(|&i| TileIndex(i)).collect::<Vec<_>>())),
                Op::Release(t) => Some(residency.release(&mut pool, &t.iter().map(|&i| TileIndex(i)).collect::<Vec<_>>())),
                Op::CommitTail(t) => Some(residency.commit_tail(&mut pool, *t)),
                Op::ReleaseTail(t) => Some(residency.release_tail(&mut pool, *t)),
                Op::Flush => {
                    gpu = apply(&gpu, pending.changes());
                    pending.flushed();
                    log.clear();
                    prop_assert!(pending.is_empty());
                    None
                }
                Op::FailedFlush => {
                    pending.roll_back(&mut residency, &mut pool).unwrap();
                    // What is left: unbinds of tiles the GPU has bound, as a log of releases.
                    prop_assert!(pending.changes().tiles.iter().all(|c| c.physical.is_none() && gpu.tiles.contains_key(&c.tile.0)));
                    prop_assert!(pending.changes().tails.iter().all(|c| c.physical.is_none() && gpu.tails.contains_key(&c.tail)));
                    prop_assert!(pending.changes().heaps_added.is_empty());
                    log = vec![pending.changes().clone()];
                    None
                }
            };
            if let Some(Ok(changes)) = made {
                log.push(changes.clone());
                pending.queue(changes);
            }
            check(&pending, &gpu, &log, &residency, &pool)?;
        }
    }
}

#[test]
fn a_commit_and_a_release_before_a_flush_cancel_out() {
    let layout = layout();
    let mut pool = TilePool::new(TilePoolDesc::default());
    let mut residency = SparseResidency::new(pool.id(), residency_core::tiles::ImageId(1), &layout);
    let mut pending = PendingChanges::new();
    let tiles = [TileIndex(3), TileIndex(4)];
    pending.queue(residency.commit(&mut pool, &tiles).unwrap());
    pending.queue(residency.commit_tail(&mut pool, 1).unwrap());
    pending.queue(residency.release(&mut pool, &tiles).unwrap());
    pending.queue(residency.release_tail(&mut pool, 1).unwrap());
    assert!(
        pending.changes().tiles.is_empty() && pending.changes().tails.is_empty(),
        "{:?}",
        pending.changes()
    );
    assert_eq!(pool.used_tiles(), 0);
}

#[test]
fn a_bound_tile_released_re_committed_and_released_again_is_one_unbind() {
    let layout = layout();
    let mut pool = TilePool::new(TilePoolDesc::default());
    let mut residency = SparseResidency::new(pool.id(), residency_core::tiles::ImageId(1), &layout);
    let mut pending = PendingChanges::new();
    let tile = [TileIndex(5)];
    pending.queue(residency.commit(&mut pool, &tile).unwrap());
    pending.flushed();
    pending.queue(residency.release(&mut pool, &tile).unwrap());
    pending.queue(residency.commit(&mut pool, &tile).unwrap());
    let rebound = pending.changes().tiles.clone();
    assert_eq!(rebound.len(), 1);
    assert!(rebound[0].physical.is_some(), "unbind then bind is a bind to the new memory");
    pending.queue(residency.release(&mut pool, &tile).unwrap());
    let tiles = &pending.changes().tiles;
    assert_eq!(tiles.len(), 1);
    assert_eq!((tiles[0].tile, tiles[0].physical), (TileIndex(5), None), "the GPU still has it bound");
}

#[test]
fn a_failed_flush_undoes_the_commits_and_keeps_the_unbinds() {
    let layout = layout();
    let mut pool = TilePool::new(TilePoolDesc::default().with_tiles_per_heap(8));
    let mut residency = SparseResidency::new(pool.id(), residency_core::tiles::ImageId(1), &layout);
    let mut pending = PendingChanges::new();
    pending.queue(residency.commit(&mut pool, &[TileIndex(0), TileIndex(1)]).unwrap());
    pending.flushed();
    pending.queue(residency.release(&mut pool, &[TileIndex(0)]).unwrap());
    pending.queue(residency.commit(&mut pool, &[TileIndex(0), TileIndex(9)]).unwrap());
    pending.queue(residency.commit_tail(&mut pool, 0).unwrap());
    assert!(!pending.changes().heaps_added.is_empty() || pool.capacity_tiles() == 8);
    pending.roll_back(&mut residency, &mut pool).unwrap();
    let table = residency.page_table();
    assert!(
        !table.is_resident(TileIndex(0))
            && table.is_resident(TileIndex(1))
            && !table.is_resident(TileIndex(9))
    );
    assert!(!table.is_tail_resident(0));
    assert_eq!(pool.used_tiles(), 1);
    let tiles = &pending.changes().tiles;
    assert_eq!(tiles.len(), 1);
    assert_eq!((tiles[0].tile, tiles[0].physical), (TileIndex(0), None));
    assert!(pending.changes().tails.is_empty() && pending.changes().heaps_added.is_empty());
}
