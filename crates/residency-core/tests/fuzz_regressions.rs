//! Regression tests for what fuzzing found (`docs/reliability.md`); each input also lives in
//! `fuzz/regressions/<target>/`, replayed by `crates/residency-fuzz/tests/bounded.rs`.

use residency_core::format::Format;
use residency_core::streaming::{FrameInput, StreamUnit, StreamingDesc, StreamingManager, TileKey};
use residency_core::tiles::{
    ImageId, LayoutError, LayoutLimits, MipTailModel, ShapeSource, SparseDimension, SparseFormatInfo,
    SparseImageDesc, SparseImageLayout, TileShape,
};

/// What a device profile may claim: any non-empty tile shape, any power-of-two tile size.
fn device_info(tile: TileShape, tile_bytes: u64) -> SparseFormatInfo {
    SparseFormatInfo {
        tile,
        tile_bytes,
        source: ShapeSource::Device,
        ..SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap()
    }
}

/// tile_math finding: the tile count of a mip (three sides of up to 2^32 tiles) overflowed a u64.
#[test]
fn a_tile_grid_beyond_u64_is_too_many_tiles_not_an_overflow() {
    let info = device_info(TileShape::new(1, 1, 1), 1 << 16).with_mip_tail_model(MipTailModel::NoTail);
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, u32::MAX, u32::MAX).with_mip_levels(1);
    let err = SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap_err();
    assert!(matches!(err, LayoutError::TooManyTiles { .. }), "{err:?}");
}

/// tile_math finding: a tile size of 2^63 bytes (a profile's probe alignment) overflowed the
/// virtual size.
#[test]
fn a_virtual_size_beyond_u64_exceeds_the_address_space() {
    let info = device_info(TileShape::new(128, 128, 1), 1 << 63);
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024);
    let err = SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap_err();
    assert_eq!(err, LayoutError::AddressSpaceExceeded { bytes: u64::MAX, maximum: u64::MAX });
}

/// Byte counts of huge regions saturate instead of overflowing.
#[test]
fn region_bytes_saturate() {
    assert_eq!(Format::R32G32B32A32Float.region_bytes(u32::MAX, u32::MAX, u32::MAX), u64::MAX);
    assert_eq!(Format::R8G8B8A8Unorm.region_bytes(2, 2, 2), 32);
}

fn layout(width: u32, height: u32) -> SparseImageLayout {
    let info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    SparseImageLayout::new(
        &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, width, height),
        &info,
        &LayoutLimits::unbounded(),
    )
    .unwrap()
}

fn frame(m: &mut StreamingManager, frame: u64, loaded: &[TileKey]) -> Vec<TileKey> {
    let out = m.update(&FrameInput { frame, requests: &[], loaded, failed: &[] }).unwrap();
    m.check_invariants().unwrap_or_else(|e| panic!("frame {frame}: {e}"));
    out.loads.iter().map(|l| l.key).collect()
}

/// streaming_manager finding: an image unregistered twice with a load of the same key out each
/// time has two loads out; the renderer reports both, and the second report was refused (or,
/// in one frame, panicked on "checked in flight").
#[test]
fn two_cancelled_loads_of_one_key_are_both_accepted() {
    for same_frame in [false, true] {
        let mut m = StreamingManager::new(StreamingDesc::default());
        let image = ImageId(0);
        let tail = TileKey { image, unit: StreamUnit::Tail(0) };
        m.register_image(image, &layout(512, 512)).unwrap();
        assert_eq!(frame(&mut m, 0, &[]), [tail]);
        m.unregister_image(image).unwrap();
        m.register_image(image, &layout(512, 512)).unwrap();
        assert_eq!(frame(&mut m, 1, &[]), [tail]);
        m.unregister_image(image).unwrap();
        if same_frame {
            frame(&mut m, 2, &[tail, tail]);
        } else {
            frame(&mut m, 2, &[tail]);
            frame(&mut m, 3, &[tail]);
        }
        // A third report is one too many.
        assert!(m.update(&FrameInput { frame: 9, requests: &[], loaded: &[tail], failed: &[] }).is_err());
    }
}

/// streaming_manager finding: a pinned load (a new image's mip tail) started over the budget
/// while least recently used tiles could have been evicted, breaking "over budget only while
/// nothing more may be evicted this frame".
#[test]
fn a_pinned_load_over_budget_evicts_what_it_may() {
    use residency_core::streaming::{RequestKind, TileRequest};
    use residency_core::tiles::TileIndex;
    let mut m = StreamingManager::new(StreamingDesc::default().with_budget_tiles(6).with_eviction_delay(1));
    let a = ImageId(0);
    m.register_image(a, &layout(512, 512)).unwrap();
    let mut loads = frame(&mut m, 0, &[]);
    // Mip 2 is one tile (index 20), mip 1 four (16..20); the tail is their parent.
    let request = |tile: u32, mip: u32| TileRequest {
        image: a,
        tile: TileIndex(tile),
        mip,
        kind: RequestKind::Miss,
        pixels: 1,
    };
    let mut f = 1;
    for requests in [vec![request(20, 2)], (16..20).map(|t| request(t, 1)).collect()] {
        let out =
            m.update(&FrameInput { frame: f, requests: &requests, loaded: &loads, failed: &[] }).unwrap();
        m.check_invariants().unwrap();
        loads = out.loads.iter().map(|l| l.key).collect();
        f += 1;
    }
    frame(&mut m, f, &loads);
    assert_eq!(m.committed_tiles(), 6);
    // A new image's tail starts loading over the budget; A's idle tiles make room.
    m.register_image(ImageId(1), &layout(512, 512)).unwrap();
    let started = frame(&mut m, f + 2, &[]);
    assert_eq!(started, [TileKey { image: ImageId(1), unit: StreamUnit::Tail(0) }]);
    assert!(m.committed_tiles() <= 6, "{} tiles committed over a budget of 6", m.committed_tiles());
}

/// allocator finding: in a ring of nearly 2^64 bytes, the bytes consumed by an allocation that
/// skips to offset 0 overflowed and wrapped to a small number, so it was placed over a live one.
#[test]
fn a_huge_ring_allocation_that_cannot_fit_is_full_not_overlapping() {
    use residency_core::allocator::{RingAllocator, RingError};
    let capacity = u64::MAX - 4;
    let mut ring = RingAllocator::new(capacity).unwrap();
    let live = ring.allocate(1_048_582, 1).unwrap();
    assert_eq!(live.offset, 0);
    let err = ring.allocate(u64::MAX - 5, 1).unwrap_err();
    assert!(matches!(err, RingError::Full { .. }), "{err:?}");
    ring.check_invariants().unwrap();
}
