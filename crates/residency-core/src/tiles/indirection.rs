//! The software residency path's page table on the GPU: an indirection texture that tells a shader,
//! for every tile of every mip, where in a physical tile-cache atlas (a normal image) the texels
//! to sample live.
//!
//! Devices without sparse residency (or a caller that forces it) keep a partially resident texture
//! as an atlas of *slots*: each slot holds one tile plus a border of `border` texels on every side
//! copied from its neighbours (clamped at the texture's edges), so bilinear, trilinear and
//! anisotropic footprints up to the border never read a neighbouring slot. The tile pool's
//! accounting is the same as the hardware path's: a [`PhysicalTile`] (heap, tile) *is* a slot.
//!
//! The indirection texture (`R32_UINT`, one level) is laid out as rows:
//! - row 0, the header: texture width, texture height, tile side, border (bit 31:
//!   [`INDIRECTION_SOURCE_BORDERS`]), mip levels, atlas columns (slots per atlas row), then the
//!   first row of each mip's entries;
//! - then, for each mip `m` in order, `tiles_y(m)` rows of `tiles_x(m)` entries.
//!
//! A 2D array has one such layer of the texture per array layer (the texture is a 2D array of
//! as many layers, each with the same header), so its layers stream independently.
//!
//! Entry `(m, x, y)` = `slot | data_mip << 24`: the atlas slot to read and the data mip, the finest
//! mip `d ≥ m` whose tile covering `(m, x, y)` is resident *with its whole chain of coarser tiles*
//! (the same rule as the hardware path's min-LOD map), or data mip [`INDIRECTION_NONE`] when
//! nothing covering it is resident. The GLSL helper
//! (`residency-vulkan`'s `shaders/include/residency_software.glsl`) follows [`Indirection::sample_position`]
//! exactly.

use super::layout::{SparseImageLayout, TileCoord};
use super::page_table::{PageTable, PhysicalTile};
use super::shape::MipTailModel;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Which residency mechanism backs a partially resident image ([`SparseImageDesc::path`](super::SparseImageDesc::path)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResidencyPath {
    /// Hardware sparse residency when the device has it for the format, else the software path.
    #[default]
    Auto,
    /// Vulkan sparse residency; a typed error on a device without it.
    Hardware,
    /// An indirection texture over a tile-cache atlas: works on every device.
    Software,
}

/// The hardware path was forced on a device or format without sparse residency.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
#[error("the hardware residency path was asked for, but the device has no sparse residency for this format")]
pub struct HardwarePathUnsupported;

impl ResidencyPath {
    /// The path to take given whether the device supports hardware residency for the image:
    /// `Hardware` or `Software`, never `Auto`.
    pub fn resolve(self, hardware_supported: bool) -> Result<ResidencyPath, HardwarePathUnsupported> {
        match self {
            ResidencyPath::Auto if hardware_supported => Ok(ResidencyPath::Hardware),
            ResidencyPath::Auto => Ok(ResidencyPath::Software),
            ResidencyPath::Hardware if !hardware_supported => Err(HardwarePathUnsupported),
            path => Ok(path),
        }
    }

    /// `"hardware"`, `"software"` or `"auto"`.
    pub fn name(self) -> &'static str {
        match self {
            ResidencyPath::Auto => "auto",
            ResidencyPath::Hardware => "hardware",
            ResidencyPath::Software => "software",
        }
    }
}

/// Tile side of the software path, for every format: square tiles keep the atlas, the
/// indirection and the shader's arithmetic the same on both axes.
pub const SOFTWARE_TILE_SIDE: u32 = 128;

/// The layout of `desc` on the software path: square [`SOFTWARE_TILE_SIDE`] tiles whatever the
/// format's hardware shape, every mip tiled (no mip tail), and the bytes of one bordered atlas
/// slot as the tile size (the pool's budget then counts atlas memory).
pub fn software_layout(
    desc: &super::SparseImageDesc,
    border: u32,
) -> Result<SparseImageLayout, super::LayoutError> {
    let mut info = super::SparseFormatInfo::standard(desc.format, desc.dimension)?;
    info.mip_tail_model = MipTailModel::NoTail;
    info.tile = super::TileShape::new(SOFTWARE_TILE_SIDE, SOFTWARE_TILE_SIDE, 1);
    info.tile_bytes = software_slot_bytes(desc.format, border);
    SparseImageLayout::new(desc, &info, &super::LayoutLimits::unbounded())
}

/// Bytes of one bordered software slot of `format`: [`SOFTWARE_TILE_SIDE`] plus `border` texels
/// (at most a tile) on each side, in whole blocks of the format (RGBA8 with the default border of
/// 4: 136² × 4 = 73 984 B; BC7 and BC3: 34² blocks × 16 = 18 496 B; BC1: 9 248 B).
pub fn software_slot_bytes(format: crate::format::Format, border: u32) -> u64 {
    let side = u64::from(SOFTWARE_TILE_SIDE) + 2 * u64::from(border.min(SOFTWARE_TILE_SIDE));
    let (bw, bh) = format.block_extent();
    side.div_ceil(u64::from(bw)) * side.div_ceil(u64::from(bh)) * u64::from(format.block_bytes())
}

/// The data mip of an entry that has nothing resident.
pub const INDIRECTION_NONE: u32 = 0xff;

/// Bit of the header's border word ([`Indirection::set_source_borders`]): the atlas's slot
/// borders hold the neighbouring tiles' texels whether or not those tiles are resident (a
/// streamer's atlas, whose borders are assembled from the source at load time). Shaders then read
/// a tap within its own slot's border as resident; without it a tap reaching a neighbour needs
/// the neighbour resident (a `SoftwareTilePool`'s borders are refilled from resident neighbours
/// only).
pub const INDIRECTION_SOURCE_BORDERS: u32 = 1 << 31;

/// Why a layout cannot back a software texture.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum IndirectionError {
    /// The software path lays out 2D images and 2D arrays.
    #[error(
        "the software residency path handles 2D images and 2D arrays (got {layers} layer(s), depth {depth})"
    )]
    NotPlain2d {
        /// Array layers.
        layers: u32,
        /// Depth of mip 0.
        depth: u32,
    },
    /// Every mip must be tiled: lay the image out with [`MipTailModel::NoTail`].
    #[error("the software residency path needs a layout without a mip tail (every mip tiled)")]
    HasMipTail,
    /// Atlas sides are at most 65535 texels.
    #[error("atlas of {width} × {height} texels: the software path addresses at most 65535 per side")]
    AtlasTooLarge {
        /// Atlas width.
        width: u32,
        /// Atlas height.
        height: u32,
    },
    /// The page table is not of the layout the indirection was made for (another image's): its
    /// tile indices would name other tiles.
    #[error("a page table of another layout ({table:?}) given to an indirection of {indirection:?}")]
    OtherLayout {
        /// The table's mip-0 extent, mips and layers.
        table: [u32; 3],
        /// The indirection's.
        indirection: [u32; 3],
    },
    /// A tile was mapped to a slot beyond the atlas.
    #[error("physical tile {tile} of heap {heap} lies beyond the atlas's {capacity} slots")]
    SlotOutOfRange {
        /// The heap.
        heap: u32,
        /// The tile within it.
        tile: u32,
        /// Slots in the atlas.
        capacity: u32,
    },
}

/// Where the slots of a tile-cache atlas are: `columns × rows` slots of `slot_side` texels, slot
/// `i` = heap `i / tiles_per_heap`, tile `i % tiles_per_heap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtlasLayout {
    /// Tile side in texels (the payload).
    pub tile_side: u32,
    /// Border texels on each side of a tile.
    pub border: u32,
    /// Slots per row.
    pub columns: u32,
    /// Rows of slots.
    pub rows: u32,
    /// Tiles per pool heap (slot numbering).
    pub tiles_per_heap: u32,
}

impl AtlasLayout {
    /// An atlas with room for at least `capacity` slots, as square as it gets.
    pub fn new(
        tile_side: u32,
        border: u32,
        capacity: u32,
        tiles_per_heap: u32,
    ) -> Result<Self, IndirectionError> {
        let capacity = capacity.max(1);
        let slot = u64::from(tile_side) + 2 * u64::from(border);
        if slot > 0xffff || capacity > 1 << 24 {
            let side = slot.max(u64::from(capacity)).min(u64::from(u32::MAX)) as u32;
            return Err(IndirectionError::AtlasTooLarge { width: side, height: side });
        }
        let columns = (f64::from(capacity).sqrt().ceil() as u32).max(1);
        let rows = capacity.div_ceil(columns);
        let layout = Self { tile_side, border, columns, rows, tiles_per_heap: tiles_per_heap.max(1) };
        let [width, height] = layout.extent();
        if width > 0xffff || height > 0xffff {
            return Err(IndirectionError::AtlasTooLarge { width, height });
        }
        Ok(layout)
    }

    /// Texels per slot side (tile plus both borders).
    pub fn slot_side(&self) -> u32 {
        self.tile_side + 2 * self.border
    }

    /// Slots in the atlas.
    pub fn capacity(&self) -> u32 {
        self.columns * self.rows
    }

    /// The atlas image's extent in texels.
    pub fn extent(&self) -> [u32; 2] {
        [self.columns * self.slot_side(), self.rows * self.slot_side()]
    }

    /// The slot that holds `physical`.
    pub fn slot(&self, physical: PhysicalTile) -> Result<u32, IndirectionError> {
        let index = u64::from(physical.heap.0) * u64::from(self.tiles_per_heap) + u64::from(physical.tile);
        if physical.tile >= self.tiles_per_heap || index >= u64::from(self.capacity()) {
            return Err(IndirectionError::SlotOutOfRange {
                heap: physical.heap.0,
                tile: physical.tile,
                capacity: self.capacity(),
            });
        }
        Ok(index as u32)
    }

    /// The atlas texel where slot `physical`'s bordered data starts (its top-left border texel).
    pub fn slot_origin(&self, physical: PhysicalTile) -> Result<[u32; 2], IndirectionError> {
        Ok(self.origin_of(self.slot(physical)?))
    }

    /// The atlas texel where slot `slot` starts.
    pub fn origin_of(&self, slot: u32) -> [u32; 2] {
        [(slot % self.columns) * self.slot_side(), (slot / self.columns) * self.slot_side()]
    }
}

/// The CPU copy of a software texture's indirection texture; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Indirection {
    layout: SparseImageLayout,
    atlas: AtlasLayout,
    width: u32,
    /// Rows of one layer.
    rows: u32,
    /// First row of each mip's entries.
    mip_rows: Vec<u32>,
    texels: Vec<u32>,
}

fn pack(slot: u32, data_mip: u32) -> u32 {
    slot | data_mip << 24
}

fn unpack(entry: u32) -> [u32; 2] {
    [entry & 0x00ff_ffff, entry >> 24]
}

impl Indirection {
    /// The indirection of `layout` (2D or a 2D array, no mip tail) over `atlas`, with nothing
    /// resident.
    pub fn new(layout: &SparseImageLayout, atlas: AtlasLayout) -> Result<Self, IndirectionError> {
        let desc = layout.desc();
        if desc.array_layers == 0 || desc.depth != 1 {
            return Err(IndirectionError::NotPlain2d { layers: desc.array_layers, depth: desc.depth });
        }
        if layout.mip_tail().is_some() || layout.format_info().mip_tail_model != MipTailModel::NoTail {
            return Err(IndirectionError::HasMipTail);
        }
        let width = layout.mips().iter().map(|m| m.tiles[0]).max().unwrap_or(1).max(6 + layout.mip_levels());
        let mut mip_rows = Vec::with_capacity(layout.mips().len());
        let mut rows = 1;
        for mip in layout.mips() {
            mip_rows.push(rows);
            rows += mip.tiles[1];
        }
        let per_layer = (width * rows) as usize;
        let mut texels = vec![pack(0, INDIRECTION_NONE); per_layer * desc.array_layers as usize];
        for layer in texels.chunks_exact_mut(per_layer) {
            layer[..6].copy_from_slice(&[
                desc.width,
                desc.height,
                atlas.tile_side,
                atlas.border,
                layout.mip_levels(),
                atlas.columns,
            ]);
            layer[6..6 + mip_rows.len()].copy_from_slice(&mip_rows);
        }
        Ok(Self { layout: layout.clone(), atlas, width, rows, mip_rows, texels })
    }

    /// Marks the header ([`INDIRECTION_SOURCE_BORDERS`] in the border word of every layer): the
    /// atlas's slot borders are filled from the source, neighbours resident or not. Set before the
    /// texture is first uploaded.
    pub fn set_source_borders(&mut self) {
        let per_layer = (self.width * self.rows) as usize;
        for layer in self.texels.chunks_exact_mut(per_layer) {
            layer[3] |= INDIRECTION_SOURCE_BORDERS;
        }
    }

    /// The texture's extent: `[width, rows]` (of each layer).
    pub fn extent(&self) -> [u32; 2] {
        [self.width, self.rows]
    }

    /// Its layers: the image's array layers (1 for a 2D image).
    pub fn layers(&self) -> u32 {
        self.layout.array_layers()
    }

    /// The atlas it points into.
    pub fn atlas(&self) -> &AtlasLayout {
        &self.atlas
    }

    /// All texels, row by row, layer after layer (what the texture holds).
    pub fn texels(&self) -> &[u32] {
        &self.texels
    }

    /// Rows `rows` of layer 0 as bytes (`R32_UINT`, little endian), for an upload (clamped to the
    /// rows there are).
    pub fn row_bytes(&self, rows: Range<u32>) -> Vec<u8> {
        self.layer_row_bytes(0, rows)
    }

    /// Rows `rows` of `layer` as bytes (empty for a layer it lacks).
    pub fn layer_row_bytes(&self, layer: u32, rows: Range<u32>) -> Vec<u8> {
        if layer >= self.layers() {
            return Vec::new();
        }
        let base = layer * self.rows;
        let (start, end) = (rows.start.min(self.rows), rows.end.min(self.rows));
        let range = ((base + start) * self.width) as usize..((base + end.max(start)) * self.width) as usize;
        self.texels[range].iter().flat_map(|t| t.to_le_bytes()).collect()
    }

    /// The entry of tile `(x, y)` of mip `mip` of layer 0: `[slot, data mip]` (data mip
    /// [`INDIRECTION_NONE`] for a tile outside the layout).
    pub fn entry(&self, mip: u32, x: u32, y: u32) -> [u32; 2] {
        self.layer_entry(0, mip, x, y)
    }

    /// The entry of tile `(x, y)` of mip `mip` of `layer` (data mip [`INDIRECTION_NONE`] outside
    /// the layout).
    pub fn layer_entry(&self, layer: u32, mip: u32, x: u32, y: u32) -> [u32; 2] {
        let Some(info) = self.layout.mips().get(mip as usize) else { return [0, INDIRECTION_NONE] };
        if x >= info.tiles[0] || y >= info.tiles[1] || layer >= self.layers() {
            return [0, INDIRECTION_NONE];
        }
        unpack(self.texels[((layer * self.rows + self.mip_rows[mip as usize] + y) * self.width + x) as usize])
    }

    /// Recomputes every entry from `table` (whose layout must be this one's: another is
    /// [`IndirectionError::OtherLayout`]); returns the rows that changed in any layer, if any
    /// (upload those of every layer). All or nothing: on error nothing changed.
    pub fn update(&mut self, table: &PageTable) -> Result<Option<Range<u32>>, IndirectionError> {
        let before = self.texels.clone();
        let result = self.update_in_place(table);
        if result.is_err() {
            self.texels = before;
        }
        result
    }

    fn update_in_place(&mut self, table: &PageTable) -> Result<Option<Range<u32>>, IndirectionError> {
        if table.layout() != &self.layout {
            let shape = |l: &SparseImageLayout| {
                [l.desc().width.max(l.desc().height), l.mip_levels(), l.array_layers()]
            };
            return Err(IndirectionError::OtherLayout {
                table: shape(table.layout()),
                indirection: shape(&self.layout),
            });
        }
        let mut changed: Option<Range<u32>> = None;
        let mips = self.layout.mips().to_vec();
        // Coarsest first: an entry that is not chain-resident inherits its parent's entry.
        for layer in 0..self.layers() {
            for mip in mips.iter().rev() {
                let [tx, ty, _] = mip.tiles;
                for y in 0..ty {
                    for x in 0..tx {
                        let index = self
                            .layout
                            .tile_index(TileCoord { layer, mip: mip.lod, x, y, z: 0 })
                            .expect("tiles of the layout's grid");
                        let parent = (mip.lod + 1 < self.layout.mip_levels()).then(|| {
                            self.layer_entry(
                                layer,
                                mip.lod + 1,
                                (x / 2).min(mips[mip.lod as usize + 1].tiles[0] - 1),
                                (y / 2).min(mips[mip.lod as usize + 1].tiles[1] - 1),
                            )
                        });
                        let parent_chain = parent.is_none_or(|p| p[1] == mip.lod + 1);
                        let entry = match table.get(index) {
                            Some(physical) if parent_chain => pack(self.atlas.slot(physical)?, mip.lod),
                            _ => parent.map_or(pack(0, INDIRECTION_NONE), |[slot, m]| pack(slot, m)),
                        };
                        let row = self.mip_rows[mip.lod as usize] + y;
                        let slot = &mut self.texels[((layer * self.rows + row) * self.width + x) as usize];
                        if *slot != entry {
                            *slot = entry;
                            changed = Some(match changed {
                                None => row..row + 1,
                                Some(r) => r.start.min(row)..r.end.max(row + 1),
                            });
                        }
                    }
                }
            }
        }
        Ok(changed)
    }

    /// The finest mip safe to sample at `uv` (the entry of mip 0 there), [`INDIRECTION_NONE`]
    /// when nothing is resident: the software twin of the hardware min-LOD map's value.
    pub fn min_lod(&self, uv: [f32; 2]) -> u32 {
        self.layer_min_lod(0, uv)
    }

    /// [`min_lod`](Self::min_lod) of `layer`.
    pub fn layer_min_lod(&self, layer: u32, uv: [f32; 2]) -> u32 {
        let (x, y) = self.tile_at(0, uv);
        self.layer_entry(layer, 0, x, y)[1]
    }

    fn tile_at(&self, mip: u32, uv: [f32; 2]) -> (u32, u32) {
        let info = &self.layout.mips()[mip as usize];
        let t = self.atlas.tile_side as f32;
        let x = ((uv[0] * info.extent[0] as f32) / t).floor().clamp(0.0, (info.tiles[0] - 1) as f32);
        let y = ((uv[1] * info.extent[1] as f32) / t).floor().clamp(0.0, (info.tiles[1] - 1) as f32);
        (x as u32, y as u32)
    }

    /// Where a bilinear sample of mip `mip` at `uv` reads in the atlas (texel coordinates, as
    /// `texture()` takes them times the atlas extent), and the mip it reads: `mip` itself when
    /// that tile's chain is resident, else the finest resident coarser one. `None`: nothing
    /// resident. The GLSL helper computes exactly this. The position is clamped to the centres of
    /// the data mip's edge texels, as a `CLAMP_TO_EDGE` sampler reads a whole texture (a
    /// block-compressed slot's border at the texture's edge is the edge block repeated, not the
    /// edge texels).
    ///
    /// The data mip's tile is found as [`update`](Self::update) found it, by halving the tile
    /// index mip by mip (clamped to each grid), not from `uv` again: for sizes that are not powers
    /// of two the two can differ by one tile in a sliver about a texel wide, where the position
    /// then lands in the slot's border (which holds those texels).
    pub fn sample_position(&self, uv: [f32; 2], mip: u32) -> Option<([f32; 2], u32)> {
        self.layer_sample_position(0, uv, mip)
    }

    /// [`sample_position`](Self::sample_position) in `layer` (the atlas position is the same
    /// kind of thing: every layer's slots are in the one atlas).
    pub fn layer_sample_position(&self, layer: u32, uv: [f32; 2], mip: u32) -> Option<([f32; 2], u32)> {
        if mip >= self.layout.mip_levels() {
            return None;
        }
        let (mut x, mut y) = self.tile_at(mip, uv);
        let [slot, data_mip] = self.layer_entry(layer, mip, x, y);
        if data_mip == INDIRECTION_NONE {
            return None;
        }
        for m in mip + 1..=data_mip {
            let tiles = self.layout.mips()[m as usize].tiles;
            x = (x / 2).min(tiles[0] - 1);
            y = (y / 2).min(tiles[1] - 1);
        }
        let origin = self.atlas.origin_of(slot);
        let info = &self.layout.mips()[data_mip as usize];
        let t = self.atlas.tile_side as f32;
        let tile = [x, y];
        let mut pos = [0.0; 2];
        for axis in 0..2 {
            // Clamped to the edge texels' centres (CLAMP_TO_EDGE; see `residency_software.glsl`).
            let extent = info.extent[axis] as f32;
            let q = (uv[axis] * extent).clamp(0.5, extent - 0.5);
            pos[axis] = origin[axis] as f32 + self.atlas.border as f32 + (q - tile[axis] as f32 * t);
        }
        Some((pos, data_mip))
    }
}

/// The bordered slot data of tile `(x, y)` of a mip of `extent` texels, for 4-byte texels (RGBA8
/// and other 32-bit formats) read through `mip_texels(x, y)`: `(tile + 2·border)²` texels, rows
/// packed, borders taken from the neighbours and clamped at the mip's edges, texels beyond a
/// partial tile clamped too.
pub fn bordered_tile(
    mip_texels: impl Fn(u32, u32) -> [u8; 4],
    extent: [u32; 2],
    tile_side: u32,
    border: u32,
    x: u32,
    y: u32,
) -> Vec<u8> {
    let side = tile_side + 2 * border;
    let mut out = Vec::with_capacity((side * side * 4) as usize);
    for j in 0..side {
        let ty =
            (i64::from(y * tile_side) + i64::from(j) - i64::from(border)).clamp(0, i64::from(extent[1]) - 1);
        for i in 0..side {
            let tx = (i64::from(x * tile_side) + i64::from(i) - i64::from(border))
                .clamp(0, i64::from(extent[0]) - 1);
            out.extend_from_slice(&mip_texels(tx as u32, ty as u32));
        }
    }
    out
}

/// The bordered slot data of tile `(x, y)` of a mip of `extent` texels in a block-compressed
/// `format` (or any format: blocks of 1 × 1 texels), assembled block by block: the block twin of
/// [`bordered_tile`]. `tile_side` and `border` must be whole blocks (else `None`). The slot is
/// `(tile_side + 2·border) / block` blocks per side, rows of blocks packed; `mip_block(bx, by, out)`
/// appends the bytes of block `(bx, by)` of the mip (block coordinates, always inside the mip's
/// block grid). Border blocks are the neighbouring tiles' blocks; at the mip's edges, and past the
/// end of a partial tile, block coordinates clamp to the mip's block grid: the edge block is
/// repeated (a block cannot be clamped texel by texel without re-encoding it).
pub fn bordered_block_tile(
    mut mip_block: impl FnMut(u32, u32, &mut Vec<u8>),
    format: crate::format::Format,
    extent: [u32; 2],
    tile_side: u32,
    border: u32,
    x: u32,
    y: u32,
) -> Option<Vec<u8>> {
    let (bw, bh) = format.block_extent();
    if tile_side % bw != 0 || tile_side % bh != 0 || border % bw != 0 || border % bh != 0 {
        return None;
    }
    let side = tile_side + 2 * border;
    let (cols, rows) = (side / bw, side / bh);
    let grid = [i64::from(extent[0].max(1).div_ceil(bw)), i64::from(extent[1].max(1).div_ceil(bh))];
    let origin = [
        i64::from(x) * i64::from(tile_side / bw) - i64::from(border / bw),
        i64::from(y) * i64::from(tile_side / bh) - i64::from(border / bh),
    ];
    let mut out = Vec::with_capacity(cols as usize * rows as usize * format.block_bytes() as usize);
    for j in 0..i64::from(rows) {
        let by = (origin[1] + j).clamp(0, grid[1] - 1);
        for i in 0..i64::from(cols) {
            let bx = (origin[0] + i).clamp(0, grid[0] - 1);
            mip_block(bx as u32, by as u32, &mut out);
        }
    }
    Some(out)
}

/// One copy that fills part of a slot's border from a tile's payload (texels, not bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BorderCopy {
    /// The tile whose payload is read: the tile itself (clamped edges) or a neighbour of the same
    /// mip.
    pub src_tile: TileCoord,
    /// Offset inside that tile's payload.
    pub src: [u32; 2],
    /// Offset inside the filled tile's slot (`0..tile + 2·border`).
    pub dst: [u32; 2],
    /// Extent in texels.
    pub extent: [u32; 2],
}

/// One axis of a border: read `len` lines from the payload of the tile `delta` away at `src`, write
/// them at `dst` in the slot.
#[derive(Clone, Copy, Debug)]
struct AxisPiece {
    delta: i64,
    src: u32,
    dst: u32,
    len: u32,
}

fn axis_pieces(
    t: u32,
    tiles: u32,
    payload: impl Fn(u32) -> u32,
    tile_side: u32,
    border: u32,
) -> Vec<AxisPiece> {
    let own = payload(t);
    let mut pieces = vec![AxisPiece { delta: 0, src: 0, dst: border, len: own }];
    if border == 0 {
        return pieces;
    }
    if t > 0 {
        // Every tile but the last is whole, so the lower neighbour has `tile_side` lines.
        // A border wider than a tile takes the neighbour's `tile_side` lines, right against the
        // payload.
        let take = border.min(tile_side);
        pieces.push(AxisPiece { delta: -1, src: tile_side - take, dst: border - take, len: take });
    } else {
        pieces.extend((0..border).map(|k| AxisPiece { delta: 0, src: 0, dst: k, len: 1 }));
    }
    let high = border + own;
    if t + 1 < tiles {
        let next = payload(t + 1);
        let take = border.min(next);
        pieces.push(AxisPiece { delta: 1, src: 0, dst: high, len: take });
        pieces.extend((take..border).map(|k| AxisPiece { delta: 1, src: next - 1, dst: high + k, len: 1 }));
    } else {
        pieces.extend((0..border).map(|k| AxisPiece { delta: 0, src: own - 1, dst: high + k, len: 1 }));
    }
    pieces
}

/// The copies that fill the border of tile `coord`'s slot from the payloads of the tile itself and
/// of its resident neighbours (`resident`), so that the slot equals [`bordered_tile`] over
/// everything a sample can read. Blocks whose source neighbour is not resident are skipped (fill
/// them again when it is). The payload itself (`src_tile == coord`, `dst == [border; 2]`) is the
/// first copy; callers that have just written it skip it.
pub fn border_copies(
    layout: &SparseImageLayout,
    coord: TileCoord,
    border: u32,
    resident: impl Fn(TileCoord) -> bool,
) -> Vec<BorderCopy> {
    let Some(mip) = layout.mip(coord.mip) else { return Vec::new() };
    let shape = layout.tile_shape();
    let (tw, th) = (shape.width, shape.height);
    let extent = mip.extent;
    let payload_x = |x: u32| (extent[0] - x * tw).min(tw);
    let payload_y = |y: u32| (extent[1] - y * th).min(th);
    let xs = axis_pieces(coord.x, mip.tiles[0], payload_x, tw, border);
    let ys = axis_pieces(coord.y, mip.tiles[1], payload_y, th, border);
    let mut out = Vec::with_capacity(xs.len() * ys.len());
    for py in &ys {
        for px in &xs {
            let src_tile = TileCoord {
                x: (i64::from(coord.x) + px.delta) as u32,
                y: (i64::from(coord.y) + py.delta) as u32,
                ..coord
            };
            if (px.delta, py.delta) != (0, 0) && !resident(src_tile) {
                continue;
            }
            out.push(BorderCopy {
                src_tile,
                src: [px.src, py.src],
                dst: [px.dst, py.dst],
                extent: [px.len, py.len],
            });
        }
    }
    out
}
