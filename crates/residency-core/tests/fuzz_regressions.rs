//! Regression tests for what fuzzing found (`docs/reliability.md`); each input also lives in
//! `fuzz/regressions/<target>/`, replayed by `crates/residency-fuzz/tests/bounded.rs`.

use residency_core::allocator::{LinearAllocator, LinearDesc, LinearError, LinearMode};
use residency_core::format::Format;
use residency_core::streaming::{FrameInput, StreamUnit, StreamingDesc, StreamingManager, TileKey};
use residency_core::tiles::{
    DeviceMipTail, ImageId, LayoutError, LayoutLimits, MipTailModel, ShapeSource, SparseDimension,
    SparseFormatInfo, SparseImageDesc, SparseImageLayout, TileShape,
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

/// tile_math finding (the H200 machine's 16-job run, 2026-12-01): a mip tail claimed at an
/// offset near u64::MAX made the bind plan's opaque offsets (tail offset + run start) overflow.
/// `tail-offset-past-u64-{a,b}.bin`.
#[test]
fn a_mip_tail_whose_range_runs_past_u64_is_refused() {
    let info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 16384, 16384);
    let tail = DeviceMipTail { first_lod: 9, size: 131072, offset: u64::MAX - 65536, stride: 0 };
    let err =
        SparseImageLayout::with_device_mip_tail(&desc, &info, &LayoutLimits::unbounded(), tail).unwrap_err();
    assert!(matches!(err, LayoutError::AddressSpaceExceeded { bytes: u64::MAX, .. }), "{err}");
    // A tail ending at the last byte of u64 is still a range.
    let tail = DeviceMipTail { first_lod: 9, size: 131072, offset: u64::MAX - 131072, stride: 0 };
    assert!(SparseImageLayout::with_device_mip_tail(&desc, &info, &LayoutLimits::unbounded(), tail).is_ok());
    // Per-layer tails: the last layer's (offset + stride × 3) past u64.
    let layers = desc.with_array_layers(4);
    let tail = DeviceMipTail { first_lod: 9, size: 131072, offset: 0, stride: u64::MAX / 3 };
    assert!(
        SparseImageLayout::with_device_mip_tail(&layers, &info, &LayoutLimits::unbounded(), tail).is_err()
    );
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

/// streaming_manager finding (180 s run): the tiles a frame evicted (and wanted) stayed listed as
/// "this frame's" after their image was unregistered. Registering the id again before the next
/// frame, with a layout in which those tile indices are pinned, made `check_invariants` report a
/// tile "evicted while in flight or pinned", and `wanted_this_frame` listed tiles of the
/// unregistered image.
#[test]
fn an_unregistered_image_leaves_nothing_in_this_frames_evictions_or_wants() {
    use residency_core::streaming::{RequestKind, TileRequest};
    use residency_core::tiles::TileIndex;
    let image = ImageId(3);
    let mut m = StreamingManager::new(StreamingDesc::default().with_budget_tiles(64).with_eviction_delay(1));
    m.register_image(image, &layout(512, 512)).unwrap();
    let mut loads = frame(&mut m, 0, &[]);
    // Mip 0 is tiles 0..16 (128 × 128 texels each), mip 1 16..20, mip 2 20, then the tail.
    let requests: Vec<TileRequest> = (0..16)
        .map(|t| TileRequest { image, tile: TileIndex(t), mip: 0, kind: RequestKind::Miss, pixels: 1 })
        .collect();
    for f in 1..4 {
        let out =
            m.update(&FrameInput { frame: f, requests: &requests, loaded: &loads, failed: &[] }).unwrap();
        m.check_invariants().unwrap();
        loads = out.loads.iter().map(|l| l.key).collect();
    }
    frame(&mut m, 4, &loads);
    assert!(m.is_resident(TileKey::tile(image, TileIndex(0))));
    // A budget cut: the next frame evicts idle tiles of mip 0 while the renderer wants tile 15.
    m.set_budget_tiles(4);
    let wanted = [TileRequest { image, tile: TileIndex(15), mip: 0, kind: RequestKind::Miss, pixels: 1 }];
    let out = m.update(&FrameInput { frame: 6, requests: &wanted, loaded: &[], failed: &[] }).unwrap();
    assert!(!out.evicted.is_empty());
    assert!(m.wanted_this_frame().count() > 0);
    m.check_invariants().unwrap();
    // The image goes, and its id comes back before the next frame as 32 layers of one tile each,
    // without a mip tail: every tile is pinned (single-tile mips stand in for the tail).
    m.unregister_image(image).unwrap();
    let info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2)
        .unwrap()
        .with_mip_tail_model(MipTailModel::NoTail);
    let desc =
        SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 128, 128).with_mip_levels(1).with_array_layers(32);
    let layers = SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap();
    assert!(out.evicted.iter().all(|k| matches!(k.unit, StreamUnit::Tile(t) if t.0 < layers.tile_count())));
    m.register_image(image, &layers).unwrap();
    m.check_invariants().unwrap();
    assert_eq!(m.wanted_this_frame().count(), 0, "wants of the unregistered image");
    frame(&mut m, 7, &[]);
}

/// streaming_manager finding (second 180 s run, after the fix above): the frame's eviction quota
/// was counted from the list of this frame's evictions, so dropping an unregistered image's keys
/// from it handed the frame back quota it had spent, and `check_invariants` then reported the
/// manager over budget "while a tile could still be evicted". The quota is now its own count.
#[test]
fn unregistering_an_image_does_not_refund_the_frames_evictions() {
    use residency_core::streaming::{RequestKind, TileRequest};
    use residency_core::tiles::TileIndex;
    let (a, b) = (ImageId(0), ImageId(1));
    let desc =
        StreamingDesc::default().with_budget_tiles(64).with_eviction_delay(1).with_evictions_per_frame(2);
    let mut m = StreamingManager::new(desc);
    m.register_image(a, &layout(512, 512)).unwrap();
    m.register_image(b, &layout(512, 512)).unwrap();
    let mut loads = frame(&mut m, 0, &[]);
    let mip0 = |image: ImageId| -> Vec<TileRequest> {
        (0..4)
            .map(|t| TileRequest { image, tile: TileIndex(t), mip: 0, kind: RequestKind::Miss, pixels: 1 })
            .collect()
    };
    // A's tiles first, then B's: A's are the least recently used.
    for (f, image) in [(1, a), (2, a), (3, a), (4, b), (5, b), (6, b)] {
        let requests = mip0(image);
        let out =
            m.update(&FrameInput { frame: f, requests: &requests, loaded: &loads, failed: &[] }).unwrap();
        m.check_invariants().unwrap();
        loads = out.loads.iter().map(|l| l.key).collect();
    }
    frame(&mut m, 7, &loads);
    assert!(m.is_resident(TileKey::tile(a, TileIndex(0))) && m.is_resident(TileKey::tile(b, TileIndex(0))));
    // The budget is cut far down: the next frame may evict two tiles, both A's.
    m.set_budget_tiles(2);
    let out = m.update(&FrameInput { frame: 9, requests: &[], loaded: &[], failed: &[] }).unwrap();
    assert_eq!(out.evicted.len(), 2);
    assert!(out.evicted.iter().all(|k| k.image == a), "{:?}", out.evicted);
    m.check_invariants().unwrap();
    // A goes; B alone is still over budget, and this frame's quota is still spent.
    m.unregister_image(a).unwrap();
    assert!(m.committed_tiles() > 2);
    m.check_invariants().unwrap();
    frame(&mut m, 10, &[]);
}

/// linear_allocator finding: in a ring of more than 2^63 bytes, `largest_free` added the head's
/// offset to the free bytes, which can pass `u64::MAX` (a panic in debug; in release the sum
/// wrapped and the whole of the free bytes was reported as one run).
#[test]
fn a_huge_rings_largest_free_run_does_not_overflow() {
    let capacity = 3 << 62;
    let mut ring = LinearAllocator::new(LinearDesc::new(capacity).with_mode(LinearMode::Ring)).unwrap();
    let a = ring.allocate(1 << 62, 1).unwrap();
    let b = ring.allocate(1 << 62, 1).unwrap();
    ring.free(a).unwrap();
    // 2^63 bytes free, in two runs of 2^62: after `b` up to the end, and from 0 up to `b`.
    assert_eq!(ring.free_bytes(), 1 << 63);
    assert_eq!(ring.largest_free(), 1 << 62);
    match ring.allocate((1 << 62) + 1, 1) {
        Err(LinearError::OutOfSpace { largest_free, free, .. }) => {
            assert_eq!((largest_free, free), (1 << 62, 1 << 63));
        }
        other => panic!("{other:?}"),
    }
    let c = ring.allocate(1 << 62, 1).unwrap();
    assert_eq!(c.offset(), 1 << 63);
    ring.check_invariants().unwrap();
    ring.free(b).unwrap();
    ring.free(c).unwrap();
    assert_eq!(ring.largest_free(), capacity);
}

/// linear_allocator finding (its first long run, after 9 s): a ring's virtual positions grow by
/// the capacity each lap and were `u64`, so a ring of more than 2^62 bytes that never empties
/// refused allocations it had room for after a few laps (`OutOfSpace` with a free run as large as
/// the request); a 1 GiB ring would have run out after 2^34 laps. Positions are `u128` now.
#[test]
fn a_huge_ring_keeps_allocating_lap_after_lap() {
    let capacity: u64 = 3 << 62;
    let mut ring = LinearAllocator::new(LinearDesc::new(capacity).with_mode(LinearMode::Ring)).unwrap();
    let mut live = std::collections::VecDeque::new();
    for i in 0..64 {
        let a = ring.allocate(1 << 62, 1).unwrap_or_else(|e| panic!("allocation {i}: {e}"));
        assert_eq!(a.offset(), (i % 3) << 62);
        live.push_back(a);
        if live.len() == 2 {
            ring.free(live.pop_front().unwrap()).unwrap();
        }
        ring.check_invariants().unwrap();
    }
    ring.free(live.pop_front().unwrap()).unwrap();
    assert_eq!((ring.used_bytes(), ring.largest_free()), (0, capacity));
}
