//! The software residency path's indirection: entries follow the chain rule, only changed rows are
//! reported, sample positions land inside the right slot, and bordered tiles clamp at the edges.

use residency_core::format::Format;
use residency_core::tiles::{
    bordered_tile, AtlasLayout, HeapIndex, Indirection, IndirectionError, LayoutLimits, MipTailModel,
    PageTable, PhysicalTile, SparseDimension, SparseFormatInfo, SparseImageDesc, SparseImageLayout,
    TileCoord, INDIRECTION_NONE, INDIRECTION_SOURCE_BORDERS,
};

fn layout(side: u32) -> SparseImageLayout {
    let mut info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    info.mip_tail_model = MipTailModel::NoTail;
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, side, side);
    let desc = desc.with_mip_levels(desc.full_mip_chain());
    SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap()
}

fn physical(i: u32) -> PhysicalTile {
    PhysicalTile { heap: HeapIndex(i / 16), tile: i % 16 }
}

#[test]
fn entries_follow_the_resident_chain() {
    let l = layout(512); // mips: 4×4, 2×2, 1, 1 (64), 1 (32) … 1 (1): 10 mips
    assert_eq!(l.mip_levels(), 10);
    let atlas = AtlasLayout::new(128, 4, 64, 16).unwrap();
    let mut ind = Indirection::new(&l, atlas).unwrap();
    assert_eq!(ind.extent(), [16, 1 + 4 + 2 + 8]);
    assert_eq!(ind.texels()[..6], [512, 512, 128, 4, 10, 8]);
    assert_eq!(ind.texels()[6..16], [1, 5, 7, 8, 9, 10, 11, 12, 13, 14], "each mip's first row");
    // A streamer's atlas: the border word carries the source-borders bit, the rest stays.
    let mut sourced = Indirection::new(&l, atlas).unwrap();
    sourced.set_source_borders();
    assert_eq!(sourced.texels()[..6], [512, 512, 128, 4 | INDIRECTION_SOURCE_BORDERS, 10, 8]);
    assert_eq!(sourced.texels()[6..], ind.texels()[6..]);
    let mut table = PageTable::new(&l);
    let tile = |mip, x, y| l.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap();
    // Nothing resident: every entry is NONE, and the first update changes nothing.
    assert_eq!(ind.update(&table).unwrap(), None);
    assert_eq!(ind.min_lod([0.5, 0.5]), INDIRECTION_NONE);
    // A mip-0 tile without its parents is not usable: no entry points at it.
    table.map(tile(0, 1, 1), physical(0)).unwrap();
    assert_eq!(ind.update(&table).unwrap(), None);
    // The whole chain from the coarsest mip to mip 1 (tile 0,0): now mip 0's tile (1,1) is usable.
    for (n, mip) in (1..).zip((1..10).rev()) {
        table.map(tile(mip, 0, 0), physical(n)).unwrap();
    }
    let rows = ind.update(&table).unwrap().expect("rows changed");
    assert_eq!(rows, 1..15, "every mip's rows changed");
    assert_eq!(ind.entry(0, 1, 1)[1], 0, "resident with its chain");
    assert_eq!(ind.entry(0, 0, 0)[1], 1, "falls back to the mip-1 parent");
    assert_eq!(ind.entry(0, 3, 3)[1], 2, "not under the resident mip-1 tile: the mip-2 one");
    assert_eq!(ind.entry(1, 1, 1)[1], 2);
    assert_eq!(ind.min_lod([0.3, 0.3]), 0);
    assert_eq!(ind.min_lod([0.9, 0.9]), 2);
    // The entry points at the slot the table maps: slot 0 is at the atlas origin.
    assert_eq!(ind.entry(0, 1, 1)[0], 0);
    assert_eq!(ind.entry(9, 0, 0), [atlas.slot(physical(1)).unwrap(), 9]);
    assert_eq!(atlas.slot_origin(physical(1)).unwrap(), [136, 0]);
    // Unmapping the mip-1 tile breaks the chain below it: only mip 0 and 1 rows change.
    table.unmap(tile(1, 0, 0)).unwrap();
    let rows = ind.update(&table).unwrap().unwrap();
    assert_eq!(rows, 1..6, "mip 0 rows 1..5 and the first mip-1 row");
    assert_eq!(ind.entry(0, 1, 1)[1], 2);
    assert_eq!(ind.update(&table).unwrap(), None, "no change, no rows");
}

#[test]
fn sample_positions_land_inside_the_slot_payload() {
    let l = layout(1024);
    let atlas = AtlasLayout::new(128, 4, 200, 16).unwrap();
    let mut ind = Indirection::new(&l, atlas).unwrap();
    let mut table = PageTable::new(&l);
    let mut n = 0;
    for mip in 0..l.mip_levels() {
        let info = l.mips()[mip as usize];
        for y in 0..info.tiles[1] {
            for x in 0..info.tiles[0] {
                table
                    .map(l.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap(), physical(n))
                    .unwrap();
                n += 1;
            }
        }
    }
    ind.update(&table).unwrap();
    for (uv, mip) in
        [([0.0, 0.0], 0), ([0.999, 0.5], 0), ([0.126, 0.874], 1), ([0.5, 0.5], 5), ([0.7, 0.2], 10)]
    {
        let (pos, data) = ind.sample_position(uv, mip).unwrap();
        assert_eq!(data, mip);
        let info = l.mips()[mip as usize];
        let (tx, ty) = (
            ((uv[0] * info.extent[0] as f32) as u32 / 128).min(info.tiles[0] - 1),
            ((uv[1] * info.extent[1] as f32) as u32 / 128).min(info.tiles[1] - 1),
        );
        let index =
            table.get(l.tile_index(TileCoord { layer: 0, mip, x: tx, y: ty, z: 0 }).unwrap()).unwrap();
        let [ox, oy] = atlas.slot_origin(index).unwrap();
        // Inside the payload (the border is only read by the filter footprint).
        assert!(
            pos[0] >= (ox + 4) as f32 && pos[0] <= (ox + 4 + 128) as f32,
            "{uv:?} {mip}: {pos:?} vs {ox}"
        );
        assert!(
            pos[1] >= (oy + 4) as f32 && pos[1] <= (oy + 4 + 128) as f32,
            "{uv:?} {mip}: {pos:?} vs {oy}"
        );
        let texel_x = pos[0] - (ox + 4) as f32 + (tx * 128) as f32;
        // Clamped to the edge texels' centres, as CLAMP_TO_EDGE reads.
        let extent = info.extent[0] as f32;
        assert!((texel_x - (uv[0] * extent).clamp(0.5, extent - 0.5)).abs() < 1e-3);
    }
}

#[test]
fn layouts_the_software_path_cannot_hold_are_refused() {
    let info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024).with_mip_levels(11);
    let tailed = SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap();
    let atlas = AtlasLayout::new(128, 4, 16, 16).unwrap();
    assert_eq!(Indirection::new(&tailed, atlas).unwrap_err(), IndirectionError::HasMipTail);
    assert!(matches!(AtlasLayout::new(128, 4, 1 << 20, 64), Err(IndirectionError::AtlasTooLarge { .. })));
    assert!(matches!(
        atlas.slot_origin(PhysicalTile { heap: HeapIndex(1), tile: 0 }),
        Err(IndirectionError::SlotOutOfRange { heap: 1, tile: 0, capacity: 16 })
    ));
}

#[test]
fn bordered_tiles_copy_neighbours_and_clamp_at_edges() {
    // A 6 × 5 mip with texel (x, y) = [x, y, 0, 255]; tiles of 4 with a border of 1.
    let texel = |x: u32, y: u32| [x as u8, y as u8, 0, 255];
    let t = bordered_tile(texel, [6, 5], 4, 1, 1, 0);
    assert_eq!(t.len(), 6 * 6 * 4);
    let at = |i: u32, j: u32| &t[((j * 6 + i) * 4) as usize..((j * 6 + i) * 4 + 2) as usize];
    assert_eq!(at(0, 1), [3, 0], "left border: the neighbour tile's last column");
    assert_eq!(at(1, 1), [4, 0], "first payload texel");
    assert_eq!(at(0, 0), [3, 0], "top border clamps to row 0");
    assert_eq!(at(3, 1), [5, 0], "past the mip's right edge: clamped");
    assert_eq!(at(5, 5), [5, 4]);
}

#[test]
fn the_path_resolves_from_device_support_and_can_be_forced() {
    use residency_core::tiles::{software_layout, HardwarePathUnsupported, ResidencyPath};
    assert_eq!(ResidencyPath::Auto.resolve(true), Ok(ResidencyPath::Hardware));
    assert_eq!(ResidencyPath::Auto.resolve(false), Ok(ResidencyPath::Software));
    assert_eq!(ResidencyPath::Software.resolve(true), Ok(ResidencyPath::Software));
    assert_eq!(ResidencyPath::Hardware.resolve(false), Err(HardwarePathUnsupported));
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 2048, 2048).with_path(ResidencyPath::Software);
    assert_eq!(desc.path, ResidencyPath::Software);
    let l = software_layout(&desc, 4).unwrap();
    assert!(l.mip_tail().is_none(), "every mip tiled");
    assert_eq!(l.tile_bytes(), 136 * 136 * 4, "a bordered slot");
    assert_eq!(l.mip_levels(), 12);
    assert_eq!(l.mips()[11].tiles, [1, 1, 1]);
    // The descriptor's JSON without a path still reads (auto).
    let json = serde_json::to_string(&SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 64, 64)).unwrap();
    let without: String = json.replace(",\"path\":\"auto\"", "");
    assert_ne!(json, without);
    let back: SparseImageDesc = serde_json::from_str(&without).unwrap();
    assert_eq!(back.path, ResidencyPath::Auto);
}

/// Filling slots from payloads with `border_copies` gives exactly `bordered_tile` over everything
/// a sample can read (payload plus border), for whole and partial tiles, every mip, when all
/// neighbours are resident; a missing neighbour only leaves its own block unfilled.
#[test]
fn border_copies_rebuild_bordered_tiles_from_payloads() {
    use residency_core::tiles::border_copies;
    let mut info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    info.mip_tail_model = MipTailModel::NoTail;
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 300, 130);
    let l = SparseImageLayout::new(
        &desc.with_mip_levels(desc.full_mip_chain()),
        &info,
        &LayoutLimits::unbounded(),
    )
    .unwrap();
    let (tile, border) = (128u32, 4u32);
    let side = (tile + 2 * border) as usize;
    let texel = |x: u32, y: u32, mip: u32| [x as u8, y as u8, mip as u8, 7];
    for mip in l.mips() {
        for y in 0..mip.tiles[1] {
            for x in 0..mip.tiles[0] {
                let c = TileCoord { layer: 0, mip: mip.lod, x, y, z: 0 };
                let want = bordered_tile(
                    |tx, ty| texel(tx, ty, mip.lod),
                    [mip.extent[0], mip.extent[1]],
                    tile,
                    border,
                    x,
                    y,
                );
                let mut slot = vec![0u8; side * side * 4];
                for copy in border_copies(&l, c, border, |_| true) {
                    for j in 0..copy.extent[1] {
                        for i in 0..copy.extent[0] {
                            let sx = copy.src_tile.x * tile + copy.src[0] + i;
                            let sy = copy.src_tile.y * tile + copy.src[1] + j;
                            let d = (((copy.dst[1] + j) as usize) * side + (copy.dst[0] + i) as usize) * 4;
                            slot[d..d + 4].copy_from_slice(&texel(sx, sy, mip.lod));
                        }
                    }
                }
                let pw = (mip.extent[0] - x * tile).min(tile);
                let ph = (mip.extent[1] - y * tile).min(tile);
                for j in 0..(ph + 2 * border) as usize {
                    for i in 0..(pw + 2 * border) as usize {
                        let k = (j * side + i) * 4;
                        assert_eq!(
                            slot[k..k + 4],
                            want[k..k + 4],
                            "mip {} tile ({x}, {y}) slot texel ({i}, {j})",
                            mip.lod
                        );
                    }
                }
            }
        }
    }
    // Tile (1, 0) of mip 0 without its right neighbour: that block is left out, the rest is there.
    let c = TileCoord { layer: 0, mip: 0, x: 1, y: 0, z: 0 };
    let all = border_copies(&l, c, border, |_| true);
    let some = border_copies(&l, c, border, |t| t.x != 2);
    assert!(some.len() < all.len());
    assert!(some.iter().all(|copy| copy.src_tile.x != 2));
    assert!(all.iter().any(|copy| copy.src_tile.x == 2));
}

/// A width that is not a power of two: where a coarser mip stands in, the position is taken in the
/// tile the indirection chose (by halving tile indices), which may lie a texel across a tile edge
/// of `uv` at that mip — it then lands in the slot's border, never in another slot.
#[test]
fn npot_fallback_positions_stay_inside_the_chosen_slot() {
    use residency_core::tiles::software_layout;
    let l = software_layout(&SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 2047, 256), 4).unwrap();
    let atlas = AtlasLayout::new(128, 4, 256, 16).unwrap();
    let mut ind = Indirection::new(&l, atlas).unwrap();
    let mut table = PageTable::new(&l);
    let mut n = 0;
    for mip in 2..l.mip_levels() {
        let info = l.mips()[mip as usize];
        for y in 0..info.tiles[1] {
            for x in 0..info.tiles[0] {
                table
                    .map(l.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap(), physical(n))
                    .unwrap();
                n += 1;
            }
        }
    }
    ind.update(&table).unwrap();
    let side = atlas.slot_side() as f32;
    for i in 0..2000 {
        let u = i as f32 / 2000.0;
        let (pos, data) = ind.sample_position([u, 0.3], 1).unwrap();
        assert_eq!(data, 2);
        // The slot the entry names, and the texel the position stands for.
        let (x1, _) = (((u * 1023.0) / 128.0).floor().min(7.0) as u32, 0);
        let tile = (x1 / 2).min(l.mips()[2].tiles[0] - 1);
        let [slot, _] = ind.entry(1, x1, 0);
        let [ox, _] = atlas.origin_of(slot);
        assert!(pos[0] >= ox as f32 && pos[0] < ox as f32 + side, "u {u}: {pos:?} outside slot at {ox}");
        let texel = pos[0] - ox as f32 - 4.0 + (tile * 128) as f32;
        // Clamped to the edge texels' centres, as CLAMP_TO_EDGE reads.
        let want = (u * 511.0).clamp(0.5, 510.5);
        assert!((texel - want).abs() < 1e-2, "u {u}: texel {texel} vs {want}");
    }
    assert_eq!(ind.sample_position([0.5, 0.5], 99), None, "a mip beyond the layout");
    assert_eq!(ind.entry(99, 0, 0)[1], INDIRECTION_NONE);
    assert_eq!(ind.entry(0, 1000, 0)[1], INDIRECTION_NONE);
}

#[test]
fn array_layers_have_indirections_of_their_own() {
    let mut info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    info.mip_tail_model = MipTailModel::NoTail;
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 256, 256).with_array_layers(3);
    let desc = desc.with_mip_levels(desc.full_mip_chain());
    let l = SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap();
    let atlas = AtlasLayout::new(128, 4, 64, 16).unwrap();
    let mut ind = Indirection::new(&l, atlas).unwrap();
    assert_eq!(ind.layers(), 3);
    let [w, rows] = ind.extent();
    assert_eq!(ind.texels().len() as u32, w * rows * 3, "one texture layer per array layer");
    for layer in 0..3 {
        let header = ind.layer_row_bytes(layer, 0..1);
        assert_eq!(header.len() as u32, w * 4);
        assert_eq!(u32::from_le_bytes(header[..4].try_into().unwrap()), 256, "every layer has the header");
    }
    assert!(ind.layer_row_bytes(3, 0..1).is_empty());
    // Layer 2's whole chain over mip-0 tile (1, 0); the other layers nothing.
    let mut table = PageTable::new(&l);
    let tile = |layer, mip, x, y| l.tile_index(TileCoord { layer, mip, x, y, z: 0 }).unwrap();
    table.map(tile(2, 0, 1, 0), physical(0)).unwrap();
    for (n, mip) in (1..).zip(1..l.mip_levels()) {
        table.map(tile(2, mip, 0, 0), physical(n)).unwrap();
    }
    assert!(ind.update(&table).unwrap().is_some());
    assert_eq!(ind.layer_entry(2, 0, 1, 0), [0, 0]);
    assert_eq!(ind.layer_entry(2, 0, 0, 0)[1], 1, "falls back within its layer");
    for layer in 0..2 {
        assert_eq!(ind.layer_entry(layer, 0, 1, 0)[1], INDIRECTION_NONE, "layer {layer} has nothing");
        assert_eq!(ind.layer_min_lod(layer, [0.75, 0.25]), INDIRECTION_NONE);
        assert_eq!(ind.layer_sample_position(layer, [0.75, 0.25], 0), None);
    }
    assert_eq!(ind.layer_min_lod(2, [0.75, 0.25]), 0);
    assert_eq!(ind.min_lod([0.75, 0.25]), INDIRECTION_NONE, "min_lod is layer 0's");
    let (pos, mip) = ind.layer_sample_position(2, [0.75, 0.25], 0).unwrap();
    assert_eq!(mip, 0);
    assert!(pos[0] >= 4.0 && pos[0] <= 132.0 && pos[1] >= 4.0 && pos[1] <= 132.0, "inside slot 0: {pos:?}");
    // Volumes stay refused.
    let info3 = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D3).unwrap();
    let vol = SparseImageLayout::new(
        &SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 64, 64, 64).with_mip_levels(1),
        &SparseFormatInfo { mip_tail_model: MipTailModel::NoTail, ..info3 },
        &LayoutLimits::unbounded(),
    )
    .unwrap();
    assert!(matches!(Indirection::new(&vol, atlas), Err(IndirectionError::NotPlain2d { depth: 64, .. })));
}
