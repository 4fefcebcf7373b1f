//! `SparseResidency`'s checks: every commit and release through a pool other than the image's, of
//! tiles, tails, layers, mips or texel regions the image does not have, is a typed error that
//! changes neither the page table nor either pool.

use residency_core::format::Format;
use residency_core::tiles::{
    CommitError, ImageId, LayoutLimits, PageTableError, PoolId, SparseFormatInfo, SparseImageDesc,
    SparseImageLayout, SparseResidency, TexelRegion, TileIndex, TilePool, TilePoolDesc,
};

/// 512² RGBA8, one layer: 16 + 4 + 1 tiles and a mip tail from mip 3.
fn layout() -> SparseImageLayout {
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 512, 512);
    let info = SparseFormatInfo::standard(desc.format, desc.dimension).unwrap();
    SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap()
}

/// What a refused call must leave as it was.
#[derive(Debug, PartialEq)]
struct Snapshot {
    mapped: Vec<(TileIndex, residency_core::tiles::PhysicalTile)>,
    tail: bool,
    own: residency_core::tiles::PoolStats,
    other: residency_core::tiles::PoolStats,
}

fn snapshot(image: &SparseResidency, own: &TilePool, other: &TilePool) -> Snapshot {
    Snapshot {
        mapped: image.page_table().mapped().collect(),
        tail: image.page_table().is_tail_resident(0),
        own: own.stats(),
        other: other.stats(),
    }
}

#[test]
fn every_call_through_a_foreign_pool_is_refused_and_changes_nothing() {
    let layout = layout();
    let mut own = TilePool::new(TilePoolDesc::default().with_name("own"));
    let mut other = TilePool::new(TilePoolDesc::default().with_name("other"));
    assert_ne!(own.id(), other.id());
    let mut image = SparseResidency::new(own.id(), ImageId(1), &layout);
    let committed = image.commit(&mut own, &[TileIndex(0), TileIndex(1)]).unwrap();
    assert_eq!(committed.pool, own.id(), "changes name their pool");
    image.commit_tail(&mut own, 0).unwrap();
    // The other pool holds tiles of its own, under the same owner id.
    let mut neighbour = SparseResidency::new(other.id(), ImageId(1), &layout);
    neighbour.commit(&mut other, &[TileIndex(5)]).unwrap();
    let before = snapshot(&image, &own, &other);
    let (own_id, other_id) = (own.id(), other.id());
    let wrong = |e: Result<_, CommitError>| match e {
        Err(CommitError::WrongPool { pool, given, owner }) => {
            assert_eq!((pool.as_str(), given, owner), ("other", other_id, own_id));
            assert!(CommitError::WrongPool { pool, given, owner }.to_string().contains("`other`"));
        }
        other => panic!("{other:?}"),
    };
    let whole = TexelRegion { offset: [0; 3], extent: [512, 512, 1] };
    let other_ptr = &mut other;
    wrong(image.commit(other_ptr, &[TileIndex(2)]));
    wrong(image.commit_region(other_ptr, 0, 0, whole));
    wrong(image.commit_tail(other_ptr, 0));
    wrong(image.release(other_ptr, &[TileIndex(0)]));
    wrong(image.release_region(other_ptr, 0, 0, whole));
    wrong(image.release_tail(other_ptr, 0));
    wrong(image.release_all(other_ptr));
    assert_eq!(image.check_pool(&other).unwrap_err(), image.check_pool(&other).unwrap_err());
    assert_eq!(snapshot(&image, &own, &other), before);
    own.check_invariants().unwrap();
    other.check_invariants().unwrap();
    // A clone is another pool.
    let copy = own.clone();
    assert_ne!(copy.id(), own.id());
    assert!(matches!(image.check_pool(&copy), Err(CommitError::WrongPool { .. })));
    image.check_pool(&own).unwrap();
}

#[test]
fn residency_of_no_pool_is_refused_by_every_pool() {
    let layout = layout();
    let mut pool = TilePool::new(TilePoolDesc::default());
    let mut image = SparseResidency::new(PoolId::NONE, ImageId(1), &layout);
    assert!(matches!(
        image.commit(&mut pool, &[TileIndex(0)]),
        Err(CommitError::WrongPool { owner: PoolId::NONE, .. })
    ));
    assert_eq!(pool.used_tiles(), 0);
    assert_eq!(PoolId::NONE.to_string(), "no pool");
    assert!(pool.id().get() > 0 && pool.id().to_string().starts_with("pool #"));
}

#[test]
fn tiles_tails_mips_layers_and_regions_outside_the_image_are_refused_and_change_nothing() {
    let layout = layout();
    let mut pool = TilePool::new(TilePoolDesc::default());
    let spare = TilePool::new(TilePoolDesc::default());
    let mut image = SparseResidency::new(pool.id(), ImageId(1), &layout);
    image.commit(&mut pool, &[TileIndex(3)]).unwrap();
    let before = snapshot(&image, &pool, &spare);
    let count = layout.tile_count();
    assert_eq!(
        image.commit(&mut pool, &[TileIndex(0), TileIndex(count)]),
        Err(CommitError::PageTable(PageTableError::TileOutOfRange { tile: count, count }))
    );
    assert_eq!(
        image.release(&mut pool, &[TileIndex(3), TileIndex(count + 7)]),
        Err(CommitError::PageTable(PageTableError::TileOutOfRange { tile: count + 7, count }))
    );
    assert_eq!(
        image.commit_tail(&mut pool, 1),
        Err(CommitError::PageTable(PageTableError::TailOutOfRange { tail: 1, count: 1 }))
    );
    let mips = layout.mip_levels();
    let r = TexelRegion { offset: [0; 3], extent: [1, 1, 1] };
    assert_eq!(
        image.commit_region(&mut pool, 0, mips, r),
        Err(CommitError::NoSuchSubresource { layer: 0, mip: mips })
    );
    assert_eq!(
        image.release_region(&mut pool, 0, mips, r),
        Err(CommitError::NoSuchSubresource { layer: 0, mip: mips })
    );
    assert_eq!(
        image.commit_region(&mut pool, 1, 0, r),
        Err(CommitError::NoSuchSubresource { layer: 1, mip: 0 })
    );
    // Past the mip's edge (mip 1 is 256²), including an offset that overflows.
    for region in [
        TexelRegion { offset: [256, 0, 0], extent: [1, 1, 1] },
        TexelRegion { offset: [0, 200, 0], extent: [1, 57, 1] },
        TexelRegion { offset: [u32::MAX, 0, 0], extent: [2, 1, 1] },
        TexelRegion { offset: [0, 0, 1], extent: [1, 1, 1] },
    ] {
        let refused = CommitError::RegionOutOfRange { layer: 0, mip: 1, region, extent: [256, 256, 1] };
        assert_eq!(image.commit_region(&mut pool, 0, 1, region), Err(refused.clone()));
        assert_eq!(image.release_region(&mut pool, 0, 1, region), Err(refused));
    }
    assert_eq!(snapshot(&image, &pool, &spare), before);
    // An empty region inside the mip is no error and touches no tile; the edge is inside.
    assert!(image
        .commit_region(&mut pool, 0, 1, TexelRegion { offset: [10, 10, 0], extent: [0, 0, 0] })
        .unwrap()
        .is_empty());
    image.commit_region(&mut pool, 0, 1, TexelRegion { offset: [255, 255, 0], extent: [1, 1, 1] }).unwrap();
    pool.check_invariants().unwrap();
}
