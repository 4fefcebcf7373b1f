//! Sparse image layouts: index round trips, arrays and volumes, limits and typed errors.

use proptest::prelude::*;
use residency_core::format::Format;
use residency_core::profile::DeviceProfile;
use residency_core::tiles::{
    DeviceMipTail, LayoutError, LayoutLimits, MipTailModel, MipTailSource, SparseDimension, SparseFormatInfo,
    SparseImageDesc, SparseImageLayout, TexelRegion, TileCoord, TileIndex,
};

fn lavapipe() -> DeviceProfile {
    DeviceProfile::from_json(residency_core::profile::captured::LAVAPIPE_JSON).unwrap()
}

fn h200() -> DeviceProfile {
    DeviceProfile::from_json(residency_core::profile::captured::NVIDIA_H200_JSON).unwrap()
}

fn standard(desc: &SparseImageDesc) -> SparseImageLayout {
    let info = SparseFormatInfo::standard(desc.format, desc.dimension).unwrap();
    SparseImageLayout::new(desc, &info, &LayoutLimits::unbounded()).unwrap()
}

#[test]
fn bc7_16k_on_the_h200() {
    let desc = SparseImageDesc::new_2d(Format::Bc7Unorm, 16384, 16384);
    let layout = SparseImageLayout::for_device(&desc, &h200()).unwrap();
    assert_eq!(layout.mip(0).unwrap().tiles, [64, 64, 1]);
    assert_eq!(layout.first_tail_lod(), 7);
    assert_eq!(layout.virtual_bytes(), 357_957_632, "the driver's VkMemoryRequirements::size");
}

#[test]
fn lavapipe_address_space_limits_16k_rgba16f() {
    // 16k x 16k RGBA16F is 43697 tiles, 2.86 GB; lavapipe's sparseAddressSpaceSize is 2 GiB.
    let desc = SparseImageDesc::new_2d(Format::R16G16B16A16Float, 16384, 16384);
    let err = SparseImageLayout::for_device(&desc, &lavapipe()).unwrap_err();
    assert!(
        matches!(err, LayoutError::AddressSpaceExceeded { bytes, maximum: 2_147_483_648 } if bytes > 2_147_483_648),
        "{err}"
    );
    assert!(SparseImageLayout::for_device(&desc, &h200()).is_ok(), "the H200 has 1 TiB");
}

#[test]
fn typed_errors_for_bad_descriptions() {
    let info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    let limits = LayoutLimits::from_profile(&lavapipe());
    let zero = SparseImageDesc { width: 0, ..SparseImageDesc::default() };
    assert!(matches!(
        SparseImageLayout::new(&zero, &info, &limits),
        Err(LayoutError::ZeroExtent { width: 0, .. })
    ));
    let wide = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 32768, 16);
    assert_eq!(
        SparseImageLayout::new(&wide, &info, &limits),
        Err(LayoutError::DimensionTooLarge { axis: "width", value: 32768, maximum: 16384 })
    );
    let layers = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256).with_array_layers(4096);
    assert!(matches!(
        SparseImageLayout::new(&layers, &info, &limits),
        Err(LayoutError::DimensionTooLarge { axis: "array_layers", .. })
    ));
    let mips =
        SparseImageDesc { mip_levels: 12, ..SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024) };
    assert_eq!(
        SparseImageLayout::new(&mips, &info, &limits),
        Err(LayoutError::TooManyMips { requested: 12, maximum: 11 })
    );
    let deep = SparseImageDesc { depth: 4, ..SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256) };
    assert!(matches!(SparseImageLayout::new(&deep, &info, &limits), Err(LayoutError::BadShape { .. })));
    let bc7 = SparseImageDesc::new_2d(Format::Bc7Unorm, 256, 256);
    assert!(matches!(SparseImageLayout::new(&bc7, &info, &limits), Err(LayoutError::FormatMismatch { .. })));
    // The setters clamp.
    assert_eq!(SparseImageDesc::new_2d(Format::R8Unorm, 1024, 1024).with_mip_levels(99).mip_levels, 11);
    assert_eq!(SparseImageDesc::new_2d(Format::R8Unorm, 1024, 1024).with_mip_levels(0).mip_levels, 1);
}

#[test]
fn arrays_have_a_tail_per_layer_unless_single() {
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024).with_array_layers(6);
    let layout = SparseImageLayout::for_device(&desc, &h200()).unwrap();
    let tail = *layout.mip_tail().unwrap();
    assert_eq!((tail.count, tail.single, tail.first_lod), (6, false, 4), "64x64 is the first sub-tile mip");
    // Mips 0..=3: 64 + 16 + 4 + 1 tiles per layer.
    assert_eq!(layout.tiles_per_layer(), 85);
    assert_eq!(layout.tile_count(), 85 * 6);
    assert_eq!(tail.resource_offset(0), 85 * 65536);
    assert_eq!(tail.resource_offset(2), 85 * 65536 + 2 * (86 * 65536));
    assert_eq!(layout.virtual_bytes(), 6 * 86 * 65536);
    assert_eq!(layout.tail_of_layer(5), Some(5));

    let single = SparseFormatInfo {
        single_miptail: true,
        ..SparseFormatInfo::from_profile(&h200(), desc.format, desc.dimension).unwrap()
    };
    let layout = SparseImageLayout::new(&desc, &single, &LayoutLimits::unbounded()).unwrap();
    let tail = *layout.mip_tail().unwrap();
    assert_eq!((tail.count, tail.single, tail.stride), (1, true, 0));
    assert_eq!(tail.offset, 6 * 85 * 65536, "after every layer's tiles");
    assert_eq!(layout.tail_of_layer(5), Some(0));
}

#[test]
fn volumes_tile_in_three_dimensions() {
    let desc = SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 256, 128, 40);
    let layout = standard(&desc);
    // 32 x 32 x 16 tiles: 8 x 4 x 3 (partial in z) at mip 0.
    assert_eq!(layout.mip(0).unwrap().tiles, [8, 4, 3]);
    let c = TileCoord { layer: 0, mip: 0, x: 7, y: 3, z: 2 };
    let region = layout.tile_region(c).unwrap();
    assert_eq!(region, TexelRegion { offset: [224, 96, 32], extent: [32, 32, 8] }, "clamped at depth 40");
    assert_eq!(layout.tile_coord(layout.tile_index(c).unwrap()), Some(c));
    // Mip 2 is 64 x 32 x 10: 10 < 16 puts it in the tail.
    assert_eq!(layout.first_tail_lod(), 2);
}

#[test]
fn the_drivers_mip_tail_overrides_everything() {
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 16384, 16384);
    let info = SparseFormatInfo::from_profile(&h200(), desc.format, desc.dimension).unwrap();
    let tail = DeviceMipTail { first_lod: 9, size: 131072, offset: 123 * 65536, stride: 0 };
    let layout =
        SparseImageLayout::with_device_mip_tail(&desc, &info, &LayoutLimits::unbounded(), tail).unwrap();
    let t = layout.mip_tail().unwrap();
    assert_eq!(
        (t.first_lod, t.size, t.tiles, t.offset, t.source),
        (9, 131072, 2, 123 * 65536, MipTailSource::Device)
    );
    // A driver that says "no tail" (first LOD == mip count) removes it.
    let none = DeviceMipTail { first_lod: 15, size: 0, offset: 0, stride: 0 };
    let layout =
        SparseImageLayout::with_device_mip_tail(&desc, &info, &LayoutLimits::unbounded(), none).unwrap();
    assert!(layout.mip_tail().is_none());
}

#[test]
fn tiles_covering_clips_to_the_mip() {
    let layout = standard(&SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1000, 600));
    let r = layout.tiles_covering(0, TexelRegion { offset: [100, 0, 0], extent: [200, 129, 1] }).unwrap();
    assert_eq!((r.start, r.end), ([0, 0, 0], [3, 2, 1]));
    let r = layout.tiles_covering(0, TexelRegion { offset: [900, 500, 0], extent: [5000, 5000, 1] }).unwrap();
    assert_eq!((r.start, r.end), ([7, 3, 0], [8, 5, 1]));
    let r = layout.tiles_covering(0, TexelRegion { offset: [2000, 0, 0], extent: [10, 10, 1] }).unwrap();
    assert!(r.is_empty());
    assert!(layout
        .tiles_covering(layout.first_tail_lod(), TexelRegion { offset: [0; 3], extent: [1; 3] })
        .is_none());
}

fn arb_desc() -> impl Strategy<Value = (SparseImageDesc, bool)> {
    let formats = prop::sample::select(vec![
        Format::R8Unorm,
        Format::R16Float,
        Format::R8G8B8A8Unorm,
        Format::R16G16B16A16Float,
        Format::R32G32B32A32Float,
        Format::Bc1Unorm,
        Format::Bc7Unorm,
    ]);
    (formats, any::<bool>(), 1u32..2000, 1u32..2000, 1u32..160, 1u32..4, any::<bool>(), any::<bool>())
        .prop_map(|(format, volume, w, h, d, layers, truncate, no_tail)| {
            let desc = if volume {
                SparseImageDesc::new_3d(format, w, h, d)
            } else {
                SparseImageDesc::new_2d(format, w, h).with_array_layers(layers)
            };
            let mips = if truncate { desc.mip_levels.div_ceil(2) } else { desc.mip_levels };
            (desc.with_mip_levels(mips), no_tail)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every tile index maps to coordinates and back; every coordinate inside a tiled mip maps to
    /// an index and back; indices are dense and tile regions stay inside their mip.
    #[test]
    fn tile_index_round_trips((desc, no_tail) in arb_desc()) {
        let mut info = SparseFormatInfo::standard(desc.format, desc.dimension).unwrap();
        if no_tail {
            info = info.with_mip_tail_model(MipTailModel::NoTail);
        }
        let layout = SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap();
        let mut expected = 0u32;
        for layer in 0..desc.array_layers {
            for mip in 0..layout.first_tail_lod() {
                let m = *layout.mip(mip).unwrap();
                prop_assert_eq!(layout.mip_tile_span(layer, mip), Some((TileIndex(expected), m.tile_count())));
                for [x, y, z] in layout.mip_tile_range(mip).unwrap().iter() {
                    let c = TileCoord { layer, mip, x, y, z };
                    let i = layout.tile_index(c).unwrap();
                    prop_assert_eq!(i, TileIndex(expected));
                    prop_assert_eq!(layout.tile_coord(i), Some(c));
                    let r = layout.tile_region(c).unwrap();
                    for a in 0..3 {
                        prop_assert!(r.extent[a] > 0 && r.offset[a] + r.extent[a] <= m.extent[a]);
                    }
                    expected += 1;
                }
                let [tx, ty, tz] = m.tiles;
                prop_assert_eq!(layout.tile_index(TileCoord { layer, mip, x: tx, y: 0, z: 0 }), None);
                prop_assert_eq!(layout.tile_index(TileCoord { layer, mip, x: 0, y: ty, z: 0 }), None);
                prop_assert_eq!(layout.tile_index(TileCoord { layer, mip, x: 0, y: 0, z: tz }), None);
            }
        }
        prop_assert_eq!(expected, layout.tile_count());
        prop_assert_eq!(layout.tile_coord(TileIndex(expected)), None);
        if no_tail {
            prop_assert!(layout.mip_tail().is_none());
        }
        let tail_bytes = layout.mip_tail().map_or(0, |t| u64::from(t.tiles) * u64::from(t.count) * 65536);
        prop_assert_eq!(layout.virtual_bytes(), u64::from(layout.tile_count()) * 65536 + tail_bytes);
    }
}
