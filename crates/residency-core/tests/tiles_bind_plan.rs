//! The bind planner: coverage and mapping are exact, coalescing makes few binds, extents clamp,
//! mip tails bind opaquely.

use proptest::prelude::*;
use residency_core::format::Format;
use residency_core::tiles::{
    plan_binds, BindMemory, BindPlanError, BindPlanOptions, Coalesce, HeapIndex, ImageId, LayoutLimits,
    MipTailModel, PhysicalTile, SparseFormatInfo, SparseImageDesc, SparseImageLayout, SparseResidency,
    TailChange, TexelRegion, TileChange, TileCoord, TileIndex, TilePool, TilePoolDesc,
};
use std::collections::HashMap;

fn layout(desc: SparseImageDesc) -> SparseImageLayout {
    let info = SparseFormatInfo::standard(desc.format, desc.dimension).unwrap();
    SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap()
}

fn phys(heap: u32, tile: u32) -> Option<PhysicalTile> {
    Some(PhysicalTile { heap: HeapIndex(heap), tile })
}

fn opts(coalesce: Coalesce) -> BindPlanOptions {
    BindPlanOptions { coalesce }
}

#[test]
fn whole_mip0_of_16k_rgba8_is_one_bind_per_heap() {
    let l = layout(SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 16384, 16384));
    let mut pool = TilePool::new(TilePoolDesc::default());
    let mut img = SparseResidency::new(pool.id(), ImageId(1), &l);
    let all = TexelRegion { offset: [0; 3], extent: [16384, 16384, 1] };
    let c = img.commit_region(&mut pool, 0, 0, all).unwrap();
    assert_eq!(c.tiles.len(), 16384);
    assert_eq!(c.heaps_added.len(), 8, "8 heaps of 2048 tiles, not 16384 allocations");
    let boxes = plan_binds(&l, &c.tiles, &c.tails, opts(Coalesce::Boxes)).unwrap();
    let rows = plan_binds(&l, &c.tiles, &c.tails, opts(Coalesce::Rows)).unwrap();
    let single = plan_binds(&l, &c.tiles, &c.tails, opts(Coalesce::None)).unwrap();
    assert_eq!((boxes.bind_count(), rows.bind_count(), single.bind_count()), (8, 128, 16384));
    // Each heap is 16 whole rows: 16384 x 2048 texels.
    for b in &boxes.image_binds {
        assert_eq!(b.extent, [16384, 2048, 1]);
        assert_eq!(b.memory.unwrap().offset, 0);
    }
    let mut expanded = boxes.expand(&l);
    expanded.sort();
    let mut wanted: Vec<_> = c.tiles.iter().map(|t| (t.tile, t.physical)).collect();
    wanted.sort();
    assert_eq!(expanded, wanted);
}

#[test]
fn edge_tiles_clamp_to_the_mip() {
    let l = layout(SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1000, 600));
    let tiles: Vec<TileChange> = (0..8)
        .map(|x| TileChange {
            tile: l.tile_index(TileCoord { layer: 0, mip: 0, x, y: 4, z: 0 }).unwrap(),
            physical: phys(0, x),
        })
        .collect();
    let plan = plan_binds(&l, &tiles, &[], BindPlanOptions::default()).unwrap();
    assert_eq!(plan.image_binds.len(), 1);
    let b = plan.image_binds[0];
    assert_eq!((b.offset, b.extent), ([0, 512, 0], [1000, 88, 1]));
    assert_eq!(b.memory, Some(BindMemory { heap: HeapIndex(0), offset: 0 }));
}

#[test]
fn only_contiguous_memory_in_one_heap_merges() {
    let l = layout(SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024));
    let at = |x, y| l.tile_index(TileCoord { layer: 0, mip: 0, x, y, z: 0 }).unwrap();
    let tiles = [
        TileChange { tile: at(0, 0), physical: phys(0, 10) },
        TileChange { tile: at(1, 0), physical: phys(0, 11) },
        TileChange { tile: at(2, 0), physical: phys(1, 12) }, // other heap
        TileChange { tile: at(3, 0), physical: phys(1, 14) }, // gap
        TileChange { tile: at(0, 1), physical: phys(0, 12) }, // continues the first row: a rectangle
        TileChange { tile: at(1, 1), physical: phys(0, 13) },
        TileChange { tile: at(5, 5), physical: None },
        TileChange { tile: at(6, 5), physical: None },
        TileChange { tile: at(5, 6), physical: None },
        TileChange { tile: at(6, 6), physical: None },
    ];
    let plan = plan_binds(&l, &tiles, &[], BindPlanOptions::default()).unwrap();
    let summary: Vec<_> = plan
        .image_binds
        .iter()
        .map(|b| (b.offset, b.extent, b.memory.map(|m| (m.heap.0, m.offset / 65536))))
        .collect();
    assert_eq!(
        summary,
        vec![
            ([0, 0, 0], [256, 256, 1], Some((0, 10))),
            ([256, 0, 0], [128, 128, 1], Some((1, 12))),
            ([384, 0, 0], [128, 128, 1], Some((1, 14))),
            ([640, 640, 0], [256, 256, 1], None),
        ]
    );
}

#[test]
fn volumes_merge_into_boxes() {
    let l = layout(SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 128, 64, 64));
    // 32x32x16 tiles: 4 x 2 x 4 at mip 0, all in index order with consecutive memory.
    let (first, n) = l.mip_tile_span(0, 0).unwrap();
    let tiles: Vec<TileChange> =
        (0..n).map(|i| TileChange { tile: TileIndex(first.0 + i), physical: phys(3, 100 + i) }).collect();
    let plan = plan_binds(&l, &tiles, &[], BindPlanOptions::default()).unwrap();
    assert_eq!(plan.image_binds.len(), 1);
    assert_eq!(plan.image_binds[0].extent, [128, 64, 64]);
}

#[test]
fn mip_tails_bind_opaquely_per_layer() {
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024).with_array_layers(3);
    let l = layout(desc);
    let t = *l.mip_tail().unwrap();
    let tails = [
        TailChange { tail: 2, physical: Some(vec![phys(0, 7).unwrap()]) },
        TailChange { tail: 0, physical: None },
    ];
    let plan = plan_binds(&l, &[], &tails, BindPlanOptions::default()).unwrap();
    assert_eq!(plan.opaque_binds.len(), 2);
    assert_eq!(plan.opaque_binds[0].resource_offset, t.resource_offset(2));
    assert_eq!(plan.opaque_binds[0].size, 65536);
    assert_eq!(plan.opaque_binds[0].memory, Some(BindMemory { heap: HeapIndex(0), offset: 7 * 65536 }));
    assert_eq!(
        (plan.opaque_binds[1].resource_offset, plan.opaque_binds[1].memory),
        (t.resource_offset(0), None)
    );
    // Errors.
    let bad = [TailChange { tail: 3, physical: None }];
    assert_eq!(
        plan_binds(&l, &[], &bad, BindPlanOptions::default()),
        Err(BindPlanError::TailOutOfRange { tail: 3, count: 3 })
    );
    let twice = [TailChange { tail: 1, physical: None }, TailChange { tail: 1, physical: None }];
    assert_eq!(
        plan_binds(&l, &[], &twice, BindPlanOptions::default()),
        Err(BindPlanError::DuplicateTail { tail: 1 })
    );
    let short = [TailChange { tail: 1, physical: Some(vec![]) }];
    assert!(matches!(
        plan_binds(&l, &[], &short, BindPlanOptions::default()),
        Err(BindPlanError::TailSizeMismatch { .. })
    ));
}

#[test]
fn bad_tile_changes_are_typed_errors() {
    let l = layout(SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256));
    let dup = [
        TileChange { tile: TileIndex(1), physical: None },
        TileChange { tile: TileIndex(1), physical: phys(0, 0) },
    ];
    assert_eq!(
        plan_binds(&l, &dup, &[], BindPlanOptions::default()),
        Err(BindPlanError::DuplicateTile { tile: 1 })
    );
    let out = [TileChange { tile: TileIndex(99), physical: None }];
    assert_eq!(
        plan_binds(&l, &out, &[], BindPlanOptions::default()),
        Err(BindPlanError::TileOutOfRange { tile: 99, count: l.tile_count() })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// A random subset of tiles with physical tiles that are partly contiguous: every plan covers
    /// exactly the requested tiles, maps each to its physical tile, keeps extents inside the mip
    /// and tile-aligned, and coalescing never makes more binds than it would without.
    #[test]
    fn plans_cover_exactly_the_requested_tiles(
        w in 1u32..1500, h in 1u32..1500, d in 1u32..100, volume in any::<bool>(), layers in 1u32..3,
        no_tail in any::<bool>(), picks in prop::collection::vec((any::<u32>(), any::<bool>(), 0u32..4, any::<bool>()), 0..300),
    ) {
        let desc = if volume {
            SparseImageDesc::new_3d(Format::R16Float, w / 8 + 1, h / 8 + 1, d)
        } else {
            SparseImageDesc::new_2d(Format::R16Float, w, h).with_array_layers(layers)
        };
        let mut info = SparseFormatInfo::standard(desc.format, desc.dimension).unwrap();
        if no_tail {
            info = info.with_mip_tail_model(MipTailModel::NoTail);
        }
        let l = SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap();
        prop_assume!(l.tile_count() > 0);
        let mut wanted: HashMap<TileIndex, Option<PhysicalTile>> = HashMap::new();
        let mut next = 0u32;
        let mut sorted: Vec<(u32, bool, u32, bool)> = picks;
        sorted.sort_by_key(|p| p.0 % l.tile_count());
        for (i, unbind, heap, jump) in sorted {
            let tile = TileIndex(i % l.tile_count());
            next += if jump { 3 } else { 1 };
            let physical = if unbind { None } else { phys(heap / 3, next) };
            wanted.entry(tile).or_insert(physical);
        }
        let changes: Vec<TileChange> = wanted.iter().map(|(&tile, &physical)| TileChange { tile, physical }).collect();
        let mut counts = Vec::new();
        for coalesce in [Coalesce::None, Coalesce::Rows, Coalesce::Boxes] {
            let plan = plan_binds(&l, &changes, &[], opts(coalesce)).unwrap();
            let expanded = plan.expand(&l);
            prop_assert_eq!(expanded.len(), wanted.len(), "no tile twice, none missing");
            let got: HashMap<_, _> = expanded.into_iter().collect();
            prop_assert_eq!(&got, &wanted);
            let tile = l.tile_shape().to_array();
            for b in &plan.image_binds {
                let mip = l.mip(b.mip).unwrap().extent;
                for a in 0..3 {
                    prop_assert_eq!(b.offset[a] % tile[a], 0);
                    prop_assert!(b.extent[a] > 0 && b.offset[a] + b.extent[a] <= mip[a]);
                    prop_assert!(b.extent[a] % tile[a] == 0 || b.offset[a] + b.extent[a] == mip[a]);
                }
            }
            counts.push(plan.bind_count());
        }
        prop_assert_eq!(counts[0], wanted.len());
        prop_assert!(counts[1] <= counts[0] && counts[2] <= counts[1], "{:?}", counts);
    }
}
