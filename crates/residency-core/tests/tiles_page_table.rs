//! Page tables: mapping consistency against a model, residency queries, mip tails and the
//! min-LOD map against a brute-force reference.

use proptest::prelude::*;
use residency_core::format::Format;
use residency_core::tiles::{
    HeapIndex, ImageId, LayoutLimits, MipTailModel, PageTable, PageTableError, PhysicalTile,
    SparseFormatInfo, SparseImageDesc, SparseImageLayout, SparseResidency, TexelRegion, TileCoord, TileIndex,
    TilePool, TilePoolDesc, TileRange, MIN_LOD_NONE,
};
use std::collections::HashMap;

fn layout(desc: SparseImageDesc, no_tail: bool) -> SparseImageLayout {
    let mut info = SparseFormatInfo::standard(desc.format, desc.dimension).unwrap();
    if no_tail {
        info = info.with_mip_tail_model(MipTailModel::NoTail);
    }
    SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap()
}

fn phys(tile: u32) -> PhysicalTile {
    PhysicalTile { heap: HeapIndex(0), tile }
}

#[test]
fn map_unmap_and_queries() {
    // 1024² RGBA8: mips 0..=3 tiled (8², 4², 2², 1), tail from mip 4.
    let l = layout(SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024), false);
    let mut t = PageTable::new(&l);
    let tile = l.tile_index(TileCoord { layer: 0, mip: 0, x: 3, y: 2, z: 0 }).unwrap();
    t.map(tile, phys(9)).unwrap();
    assert_eq!(t.map(tile, phys(10)), Err(PageTableError::AlreadyMapped { tile: tile.0, current: phys(9) }));
    assert_eq!(t.get(tile), Some(phys(9)));
    assert!(t.is_resident(tile));
    assert_eq!(t.resident_in_mip(0, 0), 1);
    assert!(t.is_range_resident(0, 0, TileRange { start: [3, 2, 0], end: [4, 3, 1] }));
    assert!(!t.is_range_resident(0, 0, TileRange { start: [2, 2, 0], end: [4, 3, 1] }));
    assert_eq!(t.unmap(tile), Ok(phys(9)));
    assert_eq!(t.unmap(tile), Err(PageTableError::NotMapped { tile: tile.0 }));
    assert_eq!(
        t.map(TileIndex(l.tile_count()), phys(0)),
        Err(PageTableError::TileOutOfRange { tile: 85, count: 85 })
    );
    // The mip tail is one unit.
    assert!(!t.is_mip_resident(0, 5));
    assert_eq!(t.map_tail(0, vec![]), Err(PageTableError::TailSizeMismatch { tail: 0, expected: 1, got: 0 }));
    t.map_tail(0, vec![phys(1)]).unwrap();
    assert!(t.is_mip_resident(0, 4) && t.is_mip_resident(0, 9));
    assert_eq!(t.map_tail(0, vec![phys(2)]), Err(PageTableError::TailAlreadyMapped { tail: 0 }));
    t.check_invariants().unwrap();
}

#[test]
fn min_lod_map_falls_back_to_coarser_mips() {
    let l = layout(SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024), false);
    let mut t = PageTable::new(&l);
    assert_eq!(t.min_lod_extent(), [8, 8, 1]);
    assert!(t.min_lod_layer(0).iter().all(|&v| v == MIN_LOD_NONE), "nothing resident");
    t.map_tail(0, vec![phys(0)]).unwrap();
    let updates = t.refresh_min_lod();
    assert_eq!(updates.len(), 1);
    assert!(t.min_lod_layer(0).iter().all(|&v| v == 4), "only the tail (LOD 4)");
    // Mip 3 (one tile) and mip 2's tile (1, 0) make LOD 2 available over the top-right quarter.
    let mut n = 10;
    let mut map = |t: &mut PageTable, mip, x, y| {
        n += 1;
        t.map(l.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap(), phys(n)).unwrap();
    };
    map(&mut t, 3, 0, 0);
    map(&mut t, 2, 1, 0);
    map(&mut t, 0, 5, 1);
    t.refresh_min_lod();
    assert_eq!(t.min_lod(0, [0, 0, 0]), 3);
    assert_eq!(t.min_lod(0, [4, 0, 0]), 2);
    assert_eq!(t.min_lod(0, [5, 1, 0]), 2, "mip 0 without mip 1 below it is no chain");
    map(&mut t, 1, 2, 0);
    let updates = t.refresh_min_lod();
    assert_eq!(updates[0].regions, TileRange { start: [4, 0, 0], end: [6, 2, 1] }, "only mip 1's footprint");
    assert_eq!(t.min_lod(0, [5, 1, 0]), 0);
    assert_eq!(t.min_lod(0, [4, 1, 0]), 1);
    assert_eq!(t.finest_resident_lod(0, TileRange { start: [4, 0, 0], end: [6, 2, 1] }), Some(1));
    assert_eq!(t.finest_resident_lod(0, TileRange { start: [0, 0, 0], end: [8, 8, 1] }), Some(3));
    t.unmap_tail(0).unwrap();
    t.refresh_min_lod();
    assert!(t.min_lod_layer(0).iter().all(|&v| v == MIN_LOD_NONE), "no tail, no chain");
    t.check_invariants().unwrap();
}

#[test]
fn commit_and_release_through_the_pool() {
    let l = layout(SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 16384, 16384), false);
    let mut pool = TilePool::new(TilePoolDesc::default());
    let mut img = SparseResidency::new(pool.id(), ImageId(7), &l);
    let region = TexelRegion { offset: [0, 0, 0], extent: [1024, 512, 1] };
    let c = img.commit_region(&mut pool, 0, 0, region).unwrap();
    assert_eq!(c.tiles.len(), 8 * 4);
    assert_eq!(c.heaps_added, vec![HeapIndex(0)]);
    let again = img.commit_region(&mut pool, 0, 0, region).unwrap();
    assert!(again.is_empty(), "resident tiles are not committed twice");
    let tail = img.commit_region(&mut pool, 0, 12, TexelRegion { offset: [0; 3], extent: [1; 3] }).unwrap();
    assert_eq!(tail.tails.len(), 1);
    assert_eq!(pool.owned_tiles(ImageId(7)), 33);
    // Release is idempotent and returns tiles to the pool.
    let r = img
        .release_region(&mut pool, 0, 0, TexelRegion { offset: [0, 0, 0], extent: [128, 128, 1] })
        .unwrap();
    assert_eq!(r.tiles.len(), 1);
    assert!(img
        .release_region(&mut pool, 0, 0, TexelRegion { offset: [0, 0, 0], extent: [128, 128, 1] })
        .unwrap()
        .is_empty());
    assert_eq!(pool.used_tiles(), 32);
    let all = img.release_all(&mut pool).unwrap();
    assert_eq!((all.tiles.len(), all.tails.len()), (31, 1));
    assert_eq!(pool.used_tiles(), 0);
    assert!(pool.leaks().is_empty());
    pool.check_invariants().unwrap();
    img.page_table().check_invariants().unwrap();
}

#[test]
fn commit_is_all_or_nothing_when_the_pool_is_exhausted() {
    let l = layout(SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 4096, 4096), false);
    let mut pool = TilePool::new(TilePoolDesc::default().with_budget_tiles(100));
    let mut img = SparseResidency::new(pool.id(), ImageId(1), &l);
    let (first, n) = l.mip_tile_span(0, 0).unwrap();
    let tiles: Vec<TileIndex> = (first.0..first.0 + n).map(TileIndex).collect();
    let err = img.commit(&mut pool, &tiles).unwrap_err();
    assert!(err.to_string().contains("1024 tiles requested, 100 free"), "{err}");
    assert_eq!(img.page_table().resident_tiles(), 0);
    assert_eq!(pool.used_tiles(), 0);
}

/// Reference min-LOD: chain from the coarsest level, checking every tile of each mip that the
/// region's texels fall into (by texel arithmetic, independent of the table's cover tables).
fn reference_min_lod(t: &PageTable, layer: u32, r: [u32; 3]) -> u8 {
    let l = t.layout();
    let tile = l.tile_shape().to_array();
    let e0 = l.mips()[0].extent;
    let mut best = MIN_LOD_NONE;
    if let Some(tail) = l.tail_of_layer(layer) {
        if !t.is_tail_resident(tail) {
            return MIN_LOD_NONE;
        }
        best = l.first_tail_lod() as u8;
    }
    for mip in (0..l.first_tail_lod()).rev() {
        let em = l.mips()[mip as usize].extent;
        let mut ok = true;
        let lo = |a: usize| (u64::from(r[a] * tile[a]) * u64::from(em[a]) / u64::from(e0[a])) as u32;
        let hi = |a: usize| {
            let end = ((r[a] + 1) * tile[a]).min(e0[a]);
            ((u64::from(end) * u64::from(em[a])).div_ceil(u64::from(e0[a])) as u32).max(lo(a) + 1).min(em[a])
        };
        for z in lo(2)..hi(2) {
            for y in lo(1)..hi(1) {
                for x in lo(0)..hi(0) {
                    let c = TileCoord { layer, mip, x: x / tile[0], y: y / tile[1], z: z / tile[2] };
                    ok &= t.is_resident(l.tile_index(c).unwrap());
                }
            }
        }
        if !ok {
            break;
        }
        best = mip as u8;
    }
    best
}

#[derive(Clone, Debug)]
enum Op {
    Map(u32),
    Unmap(u32),
    MapTail(u32),
    UnmapTail(u32),
    Refresh,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random map/unmap against a model map; after each refresh the min-LOD map equals the
    /// brute-force reference for every region; counts and bitmaps agree with the model.
    #[test]
    fn page_table_matches_a_model(
        w in 1u32..1200, h in 1u32..1200, d in 1u32..70, volume in any::<bool>(), layers in 1u32..3,
        no_tail in any::<bool>(),
        ops in prop::collection::vec(prop_oneof![
            6 => any::<u32>().prop_map(Op::Map),
            3 => any::<u32>().prop_map(Op::Unmap),
            1 => any::<u32>().prop_map(Op::MapTail),
            1 => any::<u32>().prop_map(Op::UnmapTail),
            2 => Just(Op::Refresh),
        ], 1..120),
    ) {
        let desc = if volume {
            SparseImageDesc::new_3d(Format::R32Float, w / 6 + 1, h / 6 + 1, d)
        } else {
            SparseImageDesc::new_2d(Format::R32Float, w, h).with_array_layers(layers)
        };
        let l = layout(desc, no_tail);
        let mut t = PageTable::new(&l);
        let mut model: HashMap<u32, PhysicalTile> = HashMap::new();
        let mut next = 0;
        let count = l.tile_count();
        let tails = l.mip_tail_count();
        for op in ops {
            match op {
                Op::Map(i) => {
                    let i = i % (count + 1);
                    next += 1;
                    let r = t.map(TileIndex(i), phys(next));
                    if i >= count {
                        prop_assert!(r.is_err());
                    } else if let std::collections::hash_map::Entry::Vacant(slot) = model.entry(i) {
                        r.unwrap();
                        slot.insert(phys(next));
                    } else {
                        prop_assert!(matches!(r, Err(PageTableError::AlreadyMapped { .. })), "double map refused");
                    }
                }
                Op::Unmap(_) if count == 0 => {}
                Op::Unmap(i) => {
                    let i = i % count;
                    prop_assert_eq!(t.unmap(TileIndex(i)).ok(), model.remove(&i));
                }
                Op::MapTail(i) if tails > 0 => {
                    let tail = i % tails;
                    let n = l.mip_tail().unwrap().tiles;
                    let was = t.is_tail_resident(tail);
                    let r = t.map_tail(tail, (0..n).map(phys).collect());
                    prop_assert_eq!(r.is_ok(), !was);
                    prop_assert!(t.is_tail_resident(tail));
                }
                Op::UnmapTail(i) if tails > 0 => {
                    let _ = t.unmap_tail(i % tails);
                }
                Op::MapTail(_) | Op::UnmapTail(_) => {}
                Op::Refresh => {
                    t.refresh_min_lod();
                    let [rx, ry, rz] = t.min_lod_extent();
                    for layer in 0..l.array_layers() {
                        for r in (TileRange { start: [0; 3], end: [rx, ry, rz] }).iter() {
                            prop_assert_eq!(t.min_lod(layer, r), reference_min_lod(&t, layer, r), "layer {} region {:?}", layer, r);
                        }
                    }
                }
            }
            prop_assert_eq!(t.resident_tiles() as usize, model.len());
            t.check_invariants().map_err(TestCaseError::fail)?;
        }
        for (&i, &p) in &model {
            prop_assert_eq!(t.get(TileIndex(i)), Some(p));
        }
        prop_assert_eq!(t.mapped().count(), model.len());
        for layer in 0..l.array_layers() {
            for mip in 0..l.first_tail_lod() {
                let (first, n) = l.mip_tile_span(layer, mip).unwrap();
                let m = (first.0..first.0 + n).filter(|i| model.contains_key(i)).count() as u32;
                prop_assert_eq!(t.resident_in_mip(layer, mip), m);
                prop_assert_eq!(t.is_mip_resident(layer, mip), m == n);
            }
        }
    }
}
