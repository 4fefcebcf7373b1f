//! Parents and children of tiles across mips, with exact texel arithmetic (also right for
//! non-power-of-two extents, where a tile's parent region can straddle two tiles).

use crate::tiles::{SparseImageLayout, TileIndex, TileRange};

/// The tiles of mip `to` of the same layer whose texels cover the region of `tile`, mapped by
/// scaling texel coordinates between the two mips' extents. Empty when `to` is not a tiled mip.
pub fn covering_tiles(layout: &SparseImageLayout, tile: TileIndex, to: u32) -> Vec<TileIndex> {
    let Some(c) = layout.tile_coord(tile) else { return Vec::new() };
    let Some(target) = layout.mip(to).filter(|m| !m.in_tail) else { return Vec::new() };
    let from = &layout.mips()[c.mip as usize];
    let shape = layout.tile_shape().to_array();
    let pos = [c.x, c.y, c.z];
    let mut range = TileRange { start: [0; 3], end: [0; 3] };
    for a in 0..3 {
        let (ef, et, t) = (u64::from(from.extent[a]), u64::from(target.extent[a]), u64::from(shape[a]));
        let lo = u64::from(pos[a]) * t;
        let hi = (lo + t).min(ef);
        let lo_t = lo * et / ef;
        let hi_t = (hi * et).div_ceil(ef).max(lo_t + 1).min(et);
        range.start[a] = (lo_t / t) as u32;
        range.end[a] = ((hi_t - 1) / t + 1) as u32;
    }
    layout.tiles_in(c.layer, to, range).collect()
}

/// The parent tiles of `tile`: the tiles of the next coarser mip covering it. Empty when that
/// mip is in the mip tail (the tail is the parent) or `tile` is in the last mip.
pub fn parent_tiles(layout: &SparseImageLayout, tile: TileIndex) -> Vec<TileIndex> {
    match layout.tile_coord(tile) {
        Some(c) => covering_tiles(layout, tile, c.mip + 1),
        None => Vec::new(),
    }
}

/// The child tiles of `tile`: the tiles of the next finer mip it covers (4 in 2D, 8 in 3D for
/// power-of-two extents, fewer at the edges). Empty at mip 0.
pub fn child_tiles(layout: &SparseImageLayout, tile: TileIndex) -> Vec<TileIndex> {
    match layout.tile_coord(tile) {
        Some(c) if c.mip > 0 => covering_tiles(layout, tile, c.mip - 1),
        _ => Vec::new(),
    }
}
