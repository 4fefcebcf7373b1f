//! Arithmetic on caller input never wraps (issue #29, cause 2): the checked texel-box helper that
//! every region check shares (`TexelRegion::end` / `lies_within`), held against a 64-bit reference
//! model, and feedback sampling with strides whose square does not fit a `u32`.

use proptest::prelude::*;
use residency_core::format::Format;
use residency_core::streaming::FeedbackSampling;
use residency_core::tiles::{
    CommitError, ImageId, LayoutLimits, SparseFormatInfo, SparseImageDesc, SparseImageLayout,
    SparseResidency, TexelRegion, TilePool, TilePoolDesc,
};

/// The reference: the box's end per axis in 64 bits, inside `bounds` when every end is at most
/// the bound.
fn model_within(region: &TexelRegion, bounds: [u32; 3]) -> bool {
    (0..3).all(|a| u64::from(region.offset[a]) + u64::from(region.extent[a]) <= u64::from(bounds[a]))
}

/// Values that straddle the edges: small, near a bound, near `u32::MAX`.
fn edge() -> impl Strategy<Value = u32> {
    prop_oneof![0..8u32, 500..520u32, (u32::MAX - 8)..=u32::MAX, any::<u32>()]
}

fn region() -> impl Strategy<Value = TexelRegion> {
    ([edge(), edge(), edge()], [edge(), edge(), edge()])
        .prop_map(|(offset, extent)| TexelRegion { offset, extent })
}

proptest! {
    #[test]
    fn texel_region_end_is_the_64_bit_sum_or_none(region in region()) {
        let wide = [0, 1, 2].map(|a| u64::from(region.offset[a]) + u64::from(region.extent[a]));
        match region.end() {
            Some(end) => prop_assert!((0..3).all(|a| u64::from(end[a]) == wide[a])),
            None => prop_assert!(wide.iter().any(|&e| e > u64::from(u32::MAX))),
        }
    }

    #[test]
    fn texel_region_lies_within_matches_the_64_bit_model(region in region(), bounds in [edge(), edge(), edge()]) {
        prop_assert_eq!(region.lies_within(bounds), model_within(&region, bounds));
    }

    #[test]
    fn residency_region_checks_refuse_exactly_the_boxes_outside_the_mip(region in region(), mip in 0u32..4) {
        let layout = layout();
        let pool = TilePool::new(TilePoolDesc::default().with_name("props"));
        let image = SparseResidency::new(pool.id(), ImageId(1), &layout);
        let extent = layout.mip(mip).unwrap().extent;
        let result = image.check_region(0, mip, region);
        prop_assert_eq!(result.is_ok(), model_within(&region, extent), "{:?}", result);
    }

    #[test]
    fn feedback_sampling_never_wraps(stride in edge(), interval in edge(), block in edge(), frame in any::<u64>(), x in any::<u32>(), y in any::<u32>()) {
        // Written by hand (the fields are public): zeros and strides whose square overflows u32.
        let s = FeedbackSampling { pixel_stride: stride, frame_interval: interval, block };
        let [px, py] = s.phase(frame);
        let side = u64::from(stride.max(1));
        prop_assert!(u64::from(px) < side && u64::from(py) < side);
        prop_assert_eq!(s.pixel_weight(), side * side);
        let _ = s.pixel_writes(x, y, frame);
        let _ = s.frame_active(frame);
    }
}

/// 512² RGBA8, one layer.
fn layout() -> SparseImageLayout {
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 512, 512);
    let info = SparseFormatInfo::standard(desc.format, desc.dimension).unwrap();
    SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap()
}

#[test]
fn region_whose_offset_plus_extent_wraps_u32_is_out_of_range() {
    let layout = layout();
    let mut pool = TilePool::new(TilePoolDesc::default().with_name("wrap"));
    let mut image = SparseResidency::new(pool.id(), ImageId(1), &layout);
    let before = pool.stats();
    for (offset, extent) in [([0, u32::MAX, 0], [1, 1, 1]), ([u32::MAX, 0, 0], [2, 1, 1])] {
        let region = TexelRegion { offset, extent };
        assert!(matches!(
            image.commit_region(&mut pool, 0, 0, region),
            Err(CommitError::RegionOutOfRange { extent: [512, 512, 1], .. })
        ));
        assert!(matches!(
            image.release_region(&mut pool, 0, 0, region),
            Err(CommitError::RegionOutOfRange { .. })
        ));
    }
    assert_eq!(pool.stats(), before, "nothing was committed");
    assert_eq!(image.page_table().mapped().count(), 0);
}

#[test]
fn misuse_feedback_sampling_stride_65536_is_clamped_and_never_wraps() {
    // stride² = 2³² wrapped to 0 in u32: an overflow panic in debug, a division by zero in
    // release (in `pixel_writes` and in the streamer's frame words).
    let s = FeedbackSampling::new(65536, 1);
    assert_eq!(s.pixel_stride, FeedbackSampling::MAX_PIXEL_STRIDE);
    assert_eq!(FeedbackSampling::new(0, 0), FeedbackSampling::default());
    let literal = FeedbackSampling { pixel_stride: 65536, frame_interval: 1, block: 1 };
    assert_eq!(literal.pixel_weight(), 1 << 32);
    assert_eq!(literal.phase(65537), [1, 1]);
    assert!(literal.pixel_writes(1, 1, 65537));
    assert!(!literal.pixel_writes(0, 0, 65537));
    let zero = FeedbackSampling { pixel_stride: 0, frame_interval: 0, block: 0 };
    assert!(zero.frame_active(7), "zeros count as 1");
    assert!(zero.pixel_writes(3, 4, 7));
    assert_eq!(zero.pixel_weight(), 1);
}

/// `TilePoolDesc { tile_bytes: 0, .. }` (a struct literal) then `with_heap_bytes` or
/// `with_budget_bytes` divided by zero; they now treat the size as one byte, and the description
/// is refused where it is consumed (`TilePoolDesc::validate`: `misuse_internals.rs`).
#[test]
fn misuse_tile_pool_desc_setters_with_a_zero_tile_size_do_not_divide_by_zero() {
    let desc = TilePoolDesc { tile_bytes: 0, ..TilePoolDesc::default() }
        .with_heap_bytes(1 << 20)
        .with_budget_bytes(u64::MAX);
    assert_eq!(desc.budget_tiles, u32::MAX);
}
