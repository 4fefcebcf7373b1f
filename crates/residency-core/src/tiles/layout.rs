//! The tile layout of a virtual (partially resident) image, computed without creating it.
//!
//! A [`SparseImageLayout`] numbers every tile of every layer and tiled mip with one dense
//! [`TileIndex`]: layer-major, then mip, then z, y, x (x fastest). Mips at or beyond the first
//! mip-tail level are not tiles; each layer's mip tail (or the image's single tail) is one unit.

use super::indirection::ResidencyPath;
use super::shape::{MipTailModel, ShapeError, SparseDimension, SparseFormatInfo};
use crate::format::Format;
use crate::profile::DeviceProfile;
use serde::{Deserialize, Serialize};

/// A virtual image to lay out. Plain data; the defaults are a 16384 × 16384 RGBA8 2D image with a
/// full mip chain and one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SparseImageDesc {
    /// Texel format. Default `r8g8b8a8_unorm`.
    pub format: Format,
    /// 2D (arrays) or 3D. Default 2D.
    pub dimension: SparseDimension,
    /// Width in texels. Default 16384.
    pub width: u32,
    /// Height in texels. Default 16384.
    pub height: u32,
    /// Depth in texels: 1 for 2D images. Default 1.
    pub depth: u32,
    /// Array layers: 1 for 3D images. Default 1.
    pub array_layers: u32,
    /// Mip levels, at most the full chain. Default: the full chain (15 for 16384).
    pub mip_levels: u32,
    /// Hardware sparse residency, the software path, or the device's best (the default).
    #[serde(default)]
    pub path: ResidencyPath,
}

impl Default for SparseImageDesc {
    fn default() -> Self {
        Self::new_2d(Format::R8G8B8A8Unorm, 16384, 16384)
    }
}

/// Mip levels of a full chain down to 1 × 1 × 1 for the largest side `max_side` (0 counts as 1).
pub const fn full_mip_chain(max_side: u32) -> u32 {
    if max_side == 0 {
        1
    } else {
        32 - max_side.leading_zeros()
    }
}

impl SparseImageDesc {
    /// A 2D image of `width × height` texels with a full mip chain and one layer.
    pub const fn new_2d(format: Format, width: u32, height: u32) -> Self {
        let max = if width > height { width } else { height };
        Self {
            format,
            dimension: SparseDimension::D2,
            width,
            height,
            depth: 1,
            array_layers: 1,
            mip_levels: full_mip_chain(max),
            path: ResidencyPath::Auto,
        }
    }

    /// A 3D volume of `width × height × depth` texels with a full mip chain.
    pub const fn new_3d(format: Format, width: u32, height: u32, depth: u32) -> Self {
        let mut max = if width > height { width } else { height };
        if depth > max {
            max = depth;
        }
        Self {
            format,
            dimension: SparseDimension::D3,
            width,
            height,
            depth,
            array_layers: 1,
            mip_levels: full_mip_chain(max),
            path: ResidencyPath::Auto,
        }
    }

    /// Sets the array layer count (2D only; at least 1, clamped and logged).
    pub fn with_array_layers(mut self, layers: u32) -> Self {
        let clamped = layers.max(1);
        if clamped != layers {
            tracing::debug!(requested = layers, used = clamped, "SparseImageDesc: array layers clamped");
        }
        self.array_layers = clamped;
        self
    }

    /// Forces the hardware or the software residency path (default: [`ResidencyPath::Auto`]).
    pub fn with_path(mut self, path: ResidencyPath) -> Self {
        self.path = path;
        self
    }

    /// Sets the mip level count, clamped to `1..=` the full chain (and logged when clamped).
    pub fn with_mip_levels(mut self, mips: u32) -> Self {
        let clamped = mips.clamp(1, self.full_mip_chain());
        if clamped != mips {
            tracing::debug!(requested = mips, used = clamped, "SparseImageDesc: mip levels clamped");
        }
        self.mip_levels = clamped;
        self
    }

    /// Mip levels of the full chain for this extent.
    pub fn full_mip_chain(&self) -> u32 {
        full_mip_chain(self.width.max(self.height).max(self.depth))
    }

    /// Extent of mip `lod` in texels (each side at least 1).
    pub fn mip_extent(&self, lod: u32) -> [u32; 3] {
        let shr = |v: u32| v.checked_shr(lod).unwrap_or(0).max(1);
        [shr(self.width), shr(self.height), shr(self.depth)]
    }
}

/// The device limits a layout is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutLimits {
    /// Largest 2D image side (`maxImageDimension2D`).
    pub max_dimension_2d: u32,
    /// Largest 3D image side (`maxImageDimension3D`).
    pub max_dimension_3d: u32,
    /// Most array layers (`maxImageArrayLayers`).
    pub max_array_layers: u32,
    /// Virtual address space for sparse resources (`sparseAddressSpaceSize`).
    pub sparse_address_space_size: u64,
}

impl LayoutLimits {
    /// No limits beyond what the index types can hold.
    pub const fn unbounded() -> Self {
        Self {
            max_dimension_2d: u32::MAX,
            max_dimension_3d: u32::MAX,
            max_array_layers: u32::MAX,
            sparse_address_space_size: u64::MAX,
        }
    }

    /// The limits of a captured device.
    pub fn from_profile(profile: &DeviceProfile) -> Self {
        let l = &profile.limits;
        Self {
            max_dimension_2d: l.max_image_dimension_2d,
            max_dimension_3d: l.max_image_dimension_3d,
            max_array_layers: l.max_image_array_layers,
            sparse_address_space_size: l.sparse_address_space_size,
        }
    }
}

/// The driver's mip tail answer for a created image (`vkGetImageSparseMemoryRequirements`); it
/// overrides whatever the layout computed or read from a profile probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceMipTail {
    /// `imageMipTailFirstLod`; equal to the mip count when there is no tail.
    pub first_lod: u32,
    /// `imageMipTailSize`.
    pub size: u64,
    /// `imageMipTailOffset`.
    pub offset: u64,
    /// `imageMipTailStride`.
    pub stride: u64,
}

/// Where a layout's mip tail figures came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MipTailSource {
    /// The driver's answer for this very image ([`DeviceMipTail`]).
    Device,
    /// A device profile's probe of an image of the same extent and mip count.
    Probe,
    /// The standard rule (or the device's "no tail" model) applied by this crate.
    Computed,
}

/// The mip tail of a layout: the coarse mips that are bound as one opaque unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MipTail {
    /// First mip level in the tail (the seed's `GL_MIN_SPARSE_LEVEL_AMD`).
    pub first_lod: u32,
    /// Bytes of one tail (a whole number of tiles).
    pub size: u64,
    /// Opaque resource offset of the first tail.
    pub offset: u64,
    /// Resource offset between consecutive layers' tails (0 for a single tail).
    pub stride: u64,
    /// Whether one tail serves all layers (`SINGLE_MIPTAIL`).
    pub single: bool,
    /// Number of tails: 1 when single, else the layer count.
    pub count: u32,
    /// Tiles in one tail (`size / tile_bytes`, rounded up).
    pub tiles: u32,
    /// Where the figures came from.
    pub source: MipTailSource,
}

impl MipTail {
    /// Opaque resource offset of tail `tail` (0-based; a layer unless single).
    pub fn resource_offset(&self, tail: u32) -> u64 {
        self.offset.saturating_add(self.stride.saturating_mul(u64::from(tail)))
    }
}

/// One mip level of a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MipInfo {
    /// The level.
    pub lod: u32,
    /// Extent in texels.
    pub extent: [u32; 3],
    /// Tile grid (partial edge tiles count); `[0, 0, 0]` for mips in the tail.
    pub tiles: [u32; 3],
    /// Index of this mip's first tile within a layer.
    pub first_tile: u32,
    /// Whether the mip lives in the mip tail.
    pub in_tail: bool,
}

impl MipInfo {
    /// Number of tiles of this mip in one layer.
    pub fn tile_count(&self) -> u32 {
        self.tiles[0] * self.tiles[1] * self.tiles[2]
    }
}

/// A dense tile number within one image: layer-major, then mip, then z, y, x.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TileIndex(pub u32);

/// The coordinates of one tile: layer, mip and tile position (in tiles, not texels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TileCoord {
    /// Array layer (0 for 3D).
    pub layer: u32,
    /// Mip level (below the first tail level).
    pub mip: u32,
    /// Tile column.
    pub x: u32,
    /// Tile row.
    pub y: u32,
    /// Tile slice (0 for 2D).
    pub z: u32,
}

/// A box of texels in one subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TexelRegion {
    /// First texel.
    pub offset: [u32; 3],
    /// Size in texels.
    pub extent: [u32; 3],
}

impl TexelRegion {
    /// One past the last texel on each axis (`offset + extent`), or `None` when that overflows
    /// `u32` on some axis: such a box is in no image. The one place residency adds a region's
    /// offset and extent, so that every path that checks a box (uploads, readbacks) checks it
    /// alike.
    pub fn end(&self) -> Option<[u32; 3]> {
        let [x, y, z] = [0, 1, 2].map(|a| self.offset[a].checked_add(self.extent[a]));
        Some([x?, y?, z?])
    }

    /// Whether the box lies inside `[0, bounds)` on every axis (an empty box at an offset inside
    /// or at the edge does), computed without overflow: an offset near `u32::MAX` is outside,
    /// never wrapped back inside.
    pub fn lies_within(&self, bounds: [u32; 3]) -> bool {
        self.end().is_some_and(|end| (0..3).all(|a| end[a] <= bounds[a]))
    }

    /// Whether the box holds no texel (some extent is zero).
    pub fn is_empty(&self) -> bool {
        self.extent.contains(&0)
    }
}

/// A box of tiles in one mip: `start` inclusive, `end` exclusive, per axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileRange {
    /// First tile (x, y, z).
    pub start: [u32; 3],
    /// One past the last tile (x, y, z).
    pub end: [u32; 3],
}

impl TileRange {
    /// Tiles in the box.
    pub fn count(&self) -> u64 {
        (0..3).map(|a| u64::from(self.end[a].saturating_sub(self.start[a]))).product()
    }

    /// Whether the box holds no tile.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// Tile positions in the box, z then y then x (x fastest).
    pub fn iter(self) -> impl Iterator<Item = [u32; 3]> {
        let [sx, sy, sz] = self.start;
        let [ex, ey, ez] = self.end;
        (sz..ez).flat_map(move |z| (sy..ey).flat_map(move |y| (sx..ex).map(move |x| [x, y, z])))
    }
}

/// A layout could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The format has no usable tile shape.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// The description is for another format or dimensionality than the format info.
    #[error("image is {desc_format} {desc_dimension} but the sparse format info is for {info_format} {info_dimension}")]
    FormatMismatch {
        /// The description's format.
        desc_format: Format,
        /// The description's dimensionality.
        desc_dimension: SparseDimension,
        /// The format info's format.
        info_format: Format,
        /// The format info's dimensionality.
        info_dimension: SparseDimension,
    },
    /// A side, the layer count or the mip count is zero.
    #[error("empty sparse image: {width} x {height} x {depth}, {array_layers} layers, {mip_levels} mips")]
    ZeroExtent {
        /// Width.
        width: u32,
        /// Height.
        height: u32,
        /// Depth.
        depth: u32,
        /// Layers.
        array_layers: u32,
        /// Mips.
        mip_levels: u32,
    },
    /// A 2D image with depth other than 1, or a 3D image with more than one layer.
    #[error("a {dimension} image cannot have depth {depth} and {array_layers} layers")]
    BadShape {
        /// 2D or 3D.
        dimension: SparseDimension,
        /// Depth.
        depth: u32,
        /// Layers.
        array_layers: u32,
    },
    /// A side or the layer count is larger than the device allows.
    #[error("{axis} {value} exceeds the device maximum {maximum}")]
    DimensionTooLarge {
        /// Which: `width`, `height`, `depth` or `array_layers`.
        axis: &'static str,
        /// The value asked for.
        value: u32,
        /// The device's maximum.
        maximum: u32,
    },
    /// More mips than the full chain.
    #[error("{requested} mip levels requested, the full chain has {maximum}")]
    TooManyMips {
        /// Mips asked for.
        requested: u32,
        /// The full chain.
        maximum: u32,
    },
    /// More tiles than a [`TileIndex`] can number.
    #[error("the image has {tiles} tiles, more than {maximum}")]
    TooManyTiles {
        /// Tiles needed.
        tiles: u64,
        /// The most a layout numbers.
        maximum: u64,
    },
    /// The virtual size is beyond the device's sparse address space.
    #[error("virtual size {bytes} bytes exceeds sparseAddressSpaceSize {maximum} bytes")]
    AddressSpaceExceeded {
        /// Virtual bytes of the image (`u64::MAX` when they do not fit in a `u64`).
        bytes: u64,
        /// `sparseAddressSpaceSize`.
        maximum: u64,
    },
}

/// The tile layout of one virtual image: per-mip tile grids, the mip tail and the virtual size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SparseImageLayout {
    desc: SparseImageDesc,
    info: SparseFormatInfo,
    mips: Vec<MipInfo>,
    first_tail_lod: u32,
    tiles_per_layer: u32,
    tile_count: u32,
    tail: Option<MipTail>,
    virtual_bytes: u64,
}

impl SparseImageLayout {
    /// Lays out `desc` with `info`'s tile shape and mip tail model, checked against `limits`.
    ///
    /// The mip tail comes from `info`'s profile probe when it probed an image of the same extent
    /// and mip count, else from the standard rule (or "no tail" on devices without one).
    pub fn new(
        desc: &SparseImageDesc,
        info: &SparseFormatInfo,
        limits: &LayoutLimits,
    ) -> Result<Self, LayoutError> {
        Self::build(desc, info, limits, None)
    }

    /// Lays out `desc` with the driver's own mip tail for the created image; its answer wins.
    pub fn with_device_mip_tail(
        desc: &SparseImageDesc,
        info: &SparseFormatInfo,
        limits: &LayoutLimits,
        tail: DeviceMipTail,
    ) -> Result<Self, LayoutError> {
        Self::build(desc, info, limits, Some(tail))
    }

    /// Lays out `desc` for a captured device: its tile shape, mip tail and limits.
    pub fn for_device(desc: &SparseImageDesc, profile: &DeviceProfile) -> Result<Self, LayoutError> {
        let info = SparseFormatInfo::from_profile(profile, desc.format, desc.dimension)?;
        Self::new(desc, &info, &LayoutLimits::from_profile(profile))
    }

    fn build(
        desc: &SparseImageDesc,
        info: &SparseFormatInfo,
        limits: &LayoutLimits,
        device_tail: Option<DeviceMipTail>,
    ) -> Result<Self, LayoutError> {
        validate(desc, info, limits)?;
        let tile = info.tile.to_array();
        let probe = info.probe.filter(|p| {
            p.desc.width == desc.width
                && p.desc.height == desc.height
                && p.desc.depth == desc.depth
                && p.desc.mip_levels == desc.mip_levels
        });
        let (first_tail_lod, source) = if let Some(t) = device_tail {
            (t.first_lod.min(desc.mip_levels), MipTailSource::Device)
        } else if let Some(p) = probe {
            (p.mip_tail_first_lod.min(desc.mip_levels), MipTailSource::Probe)
        } else {
            (computed_first_tail_lod(desc, info), MipTailSource::Computed)
        };

        let mut mips = Vec::with_capacity(desc.mip_levels as usize);
        let mut tiles_per_layer: u64 = 0;
        for lod in 0..desc.mip_levels {
            let extent = desc.mip_extent(lod);
            let in_tail = lod >= first_tail_lod;
            let tiles = if in_tail { [0; 3] } else { [0, 1, 2].map(|a| extent[a].div_ceil(tile[a])) };
            // Saturating: three sides of up to 2^32 tiles overflow a u64; the count check below
            // rejects anything that large.
            let count = tiles.iter().fold(1u64, |n, &t| n.saturating_mul(u64::from(t)));
            let first_tile = u32::try_from(tiles_per_layer).unwrap_or(u32::MAX);
            mips.push(MipInfo { lod, extent, tiles, first_tile, in_tail });
            tiles_per_layer = tiles_per_layer.saturating_add(count);
        }
        let total = tiles_per_layer.saturating_mul(u64::from(desc.array_layers));
        let max_tiles = u64::from(u32::MAX);
        if total >= max_tiles {
            return Err(LayoutError::TooManyTiles { tiles: total, maximum: max_tiles - 1 });
        }
        let tile_bytes = info.tile_bytes;
        let tail = (first_tail_lod < desc.mip_levels).then(|| {
            let single = info.single_miptail || desc.array_layers == 1;
            let count = if single { 1 } else { desc.array_layers };
            // Device figures (a profile's probe, the driver's tail) can be anything: the byte
            // arithmetic saturates, and the address-space check below rejects what overflowed.
            let layer_tile_bytes = tiles_per_layer.saturating_mul(tile_bytes);
            let computed_size = || {
                let per_layer = (first_tail_lod..desc.mip_levels).fold(0u64, |sum, lod| {
                    let [w, h, d] = desc.mip_extent(lod);
                    sum.saturating_add(desc.format.region_bytes(w, h, d))
                });
                let layers = if info.single_miptail { u64::from(desc.array_layers) } else { 1 };
                per_layer.saturating_mul(layers).div_ceil(tile_bytes).saturating_mul(tile_bytes)
            };
            let computed_place = |size: u64| {
                if single {
                    (total.saturating_mul(tile_bytes), 0)
                } else {
                    (layer_tile_bytes, layer_tile_bytes.saturating_add(size))
                }
            };
            let (size, offset, stride) = match (device_tail, probe) {
                (Some(t), _) => (t.size, t.offset, t.stride),
                (None, Some(p)) if p.desc.array_layers == desc.array_layers => {
                    (p.mip_tail_size, p.mip_tail_offset, p.mip_tail_stride)
                }
                (None, Some(p)) => {
                    let (offset, stride) = computed_place(p.mip_tail_size);
                    (p.mip_tail_size, offset, stride)
                }
                (None, None) => {
                    let size = computed_size();
                    let (offset, stride) = computed_place(size);
                    (size, offset, stride)
                }
            };
            let stride = if single { 0 } else { stride };
            let tiles = u32::try_from(size.div_ceil(tile_bytes)).unwrap_or(u32::MAX);
            MipTail { first_lod: first_tail_lod, size, offset, stride, single, count, tiles, source }
        });
        // Every tail's opaque range (offset + stride × layer, its tiles' bytes) must be a range of
        // u64: a profile or driver answer past that would make the bind plan's offsets overflow.
        if let Some(t) = tail {
            let last = t
                .stride
                .checked_mul(u64::from(t.count.saturating_sub(1)))
                .and_then(|s| s.checked_add(t.offset))
                .and_then(|o| o.checked_add(u64::from(t.tiles).checked_mul(tile_bytes)?));
            if last.is_none() {
                return Err(LayoutError::AddressSpaceExceeded {
                    bytes: u64::MAX,
                    maximum: limits.sparse_address_space_size,
                });
            }
        }
        let tail_bytes = tail
            .map_or(Some(0), |t| u64::from(t.tiles).checked_mul(tile_bytes)?.checked_mul(u64::from(t.count)));
        // `u64::MAX` stands for "more than a u64 holds".
        let virtual_bytes =
            total.checked_mul(tile_bytes).and_then(|b| b.checked_add(tail_bytes?)).unwrap_or(u64::MAX);
        if virtual_bytes > limits.sparse_address_space_size
            || (virtual_bytes == u64::MAX && limits.sparse_address_space_size == u64::MAX)
        {
            return Err(LayoutError::AddressSpaceExceeded {
                bytes: virtual_bytes,
                maximum: limits.sparse_address_space_size,
            });
        }
        Ok(Self {
            desc: *desc,
            info: *info,
            mips,
            first_tail_lod,
            tiles_per_layer: tiles_per_layer as u32,
            tile_count: total as u32,
            tail,
            virtual_bytes,
        })
    }

    /// The image description.
    pub fn desc(&self) -> &SparseImageDesc {
        &self.desc
    }

    /// The format's sparse properties used.
    pub fn format_info(&self) -> &SparseFormatInfo {
        &self.info
    }

    /// Tile extent in texels.
    pub fn tile_shape(&self) -> super::shape::TileShape {
        self.info.tile
    }

    /// Bytes per tile.
    pub fn tile_bytes(&self) -> u64 {
        self.info.tile_bytes
    }

    /// Number of mip levels.
    pub fn mip_levels(&self) -> u32 {
        self.desc.mip_levels
    }

    /// Number of array layers.
    pub fn array_layers(&self) -> u32 {
        self.desc.array_layers
    }

    /// All mips, finest first.
    pub fn mips(&self) -> &[MipInfo] {
        &self.mips
    }

    /// Mip `lod`, if the image has it.
    pub fn mip(&self, lod: u32) -> Option<&MipInfo> {
        self.mips.get(lod as usize)
    }

    /// The first mip level in the mip tail; equal to [`mip_levels`](Self::mip_levels) when the
    /// image has no tail (every mip bound by tiles).
    pub fn first_tail_lod(&self) -> u32 {
        self.first_tail_lod
    }

    /// The seed's `GL_MIN_SPARSE_LEVEL_AMD`: levels at and beyond this one share residency (the
    /// mip tail). Same as [`first_tail_lod`](Self::first_tail_lod).
    pub fn min_sparse_level(&self) -> u32 {
        self.first_tail_lod
    }

    /// The mip tail, when the image has one.
    pub fn mip_tail(&self) -> Option<&MipTail> {
        self.tail.as_ref()
    }

    /// Number of mip tails: 0, 1, or one per layer.
    pub fn mip_tail_count(&self) -> u32 {
        self.tail.map_or(0, |t| t.count)
    }

    /// The tail that serves `layer` (its index among [`mip_tail_count`](Self::mip_tail_count)).
    pub fn tail_of_layer(&self, layer: u32) -> Option<u32> {
        let t = self.tail?;
        (layer < self.desc.array_layers).then_some(if t.single { 0 } else { layer })
    }

    /// Tiles in one layer (all tiled mips).
    pub fn tiles_per_layer(&self) -> u32 {
        self.tiles_per_layer
    }

    /// Tiles in the whole image, mip tails excluded.
    pub fn tile_count(&self) -> u32 {
        self.tile_count
    }

    /// Virtual bytes of the image: every tile and every mip tail.
    pub fn virtual_bytes(&self) -> u64 {
        self.virtual_bytes
    }

    /// Bytes the image needs when fully resident (same as the virtual size).
    pub fn fully_resident_bytes(&self) -> u64 {
        self.virtual_bytes
    }

    /// The index of the tile at `coord`, if it is a tile of this image (not in the tail).
    pub fn tile_index(&self, coord: TileCoord) -> Option<TileIndex> {
        if coord.layer >= self.desc.array_layers {
            return None;
        }
        let mip = self.mips.get(coord.mip as usize).filter(|m| !m.in_tail)?;
        let [tx, ty, tz] = mip.tiles;
        if coord.x >= tx || coord.y >= ty || coord.z >= tz {
            return None;
        }
        let local = (coord.z * ty + coord.y) * tx + coord.x;
        Some(TileIndex(coord.layer * self.tiles_per_layer + mip.first_tile + local))
    }

    /// The coordinates of tile `index`, if the image has it.
    pub fn tile_coord(&self, index: TileIndex) -> Option<TileCoord> {
        if index.0 >= self.tile_count {
            return None;
        }
        let layer = index.0 / self.tiles_per_layer;
        let rest = index.0 % self.tiles_per_layer;
        let mip = self.mips[..self.first_tail_lod as usize]
            .iter()
            .rev()
            .find(|m| m.first_tile <= rest && m.tile_count() > 0)?;
        let local = rest - mip.first_tile;
        let [tx, ty, _] = mip.tiles;
        Some(TileCoord { layer, mip: mip.lod, x: local % tx, y: (local / tx) % ty, z: local / (tx * ty) })
    }

    /// The first tile index of (`layer`, `mip`) and its tile count; tiles of one mip are
    /// consecutive indices.
    pub fn mip_tile_span(&self, layer: u32, mip: u32) -> Option<(TileIndex, u32)> {
        let m = self.mips.get(mip as usize).filter(|m| !m.in_tail)?;
        (layer < self.desc.array_layers)
            .then(|| (TileIndex(layer * self.tiles_per_layer + m.first_tile), m.tile_count()))
    }

    /// The texels tile `coord` covers, clamped to its mip's extent (edge tiles are partial).
    pub fn tile_region(&self, coord: TileCoord) -> Option<TexelRegion> {
        self.tile_index(coord)?;
        let mip = &self.mips[coord.mip as usize];
        let tile = self.info.tile.to_array();
        let pos = [coord.x, coord.y, coord.z];
        let offset = [0, 1, 2].map(|a| pos[a] * tile[a]);
        let extent = [0, 1, 2].map(|a| tile[a].min(mip.extent[a] - offset[a]));
        Some(TexelRegion { offset, extent })
    }

    /// The whole tile grid of `mip` (empty for tail mips).
    pub fn mip_tile_range(&self, mip: u32) -> Option<TileRange> {
        let m = self.mips.get(mip as usize)?;
        Some(TileRange { start: [0; 3], end: m.tiles })
    }

    /// The tiles of `mip` that a texel box touches, clipped to the mip. `None` for tail mips or
    /// mips the image lacks; an empty range when the box misses the mip.
    pub fn tiles_covering(&self, mip: u32, region: TexelRegion) -> Option<TileRange> {
        let m = self.mips.get(mip as usize).filter(|m| !m.in_tail)?;
        let tile = self.info.tile.to_array();
        let mut start = [0; 3];
        let mut end = [0; 3];
        for a in 0..3 {
            let lo = region.offset[a].min(m.extent[a]);
            let hi = region.offset[a].saturating_add(region.extent[a]).min(m.extent[a]);
            start[a] = lo / tile[a];
            end[a] = if hi > lo { hi.div_ceil(tile[a]) } else { start[a] };
        }
        Some(TileRange { start, end })
    }

    /// Tile indices of a box of tiles in (`layer`, `mip`), x fastest.
    pub fn tiles_in(&self, layer: u32, mip: u32, range: TileRange) -> impl Iterator<Item = TileIndex> + '_ {
        range.iter().filter_map(move |[x, y, z]| self.tile_index(TileCoord { layer, mip, x, y, z }))
    }
}

fn validate(
    desc: &SparseImageDesc,
    info: &SparseFormatInfo,
    limits: &LayoutLimits,
) -> Result<(), LayoutError> {
    if desc.format != info.format || desc.dimension != info.dimension {
        return Err(LayoutError::FormatMismatch {
            desc_format: desc.format,
            desc_dimension: desc.dimension,
            info_format: info.format,
            info_dimension: info.dimension,
        });
    }
    let d = desc;
    if d.width == 0 || d.height == 0 || d.depth == 0 || d.array_layers == 0 || d.mip_levels == 0 {
        return Err(LayoutError::ZeroExtent {
            width: d.width,
            height: d.height,
            depth: d.depth,
            array_layers: d.array_layers,
            mip_levels: d.mip_levels,
        });
    }
    let max_side = match d.dimension {
        SparseDimension::D2 if d.depth != 1 => None,
        SparseDimension::D3 if d.array_layers != 1 => None,
        SparseDimension::D2 => Some(limits.max_dimension_2d),
        SparseDimension::D3 => Some(limits.max_dimension_3d),
    };
    let Some(max_side) = max_side else {
        return Err(LayoutError::BadShape {
            dimension: d.dimension,
            depth: d.depth,
            array_layers: d.array_layers,
        });
    };
    for (axis, value) in [("width", d.width), ("height", d.height), ("depth", d.depth)] {
        if value > max_side {
            return Err(LayoutError::DimensionTooLarge { axis, value, maximum: max_side });
        }
    }
    if d.array_layers > limits.max_array_layers {
        return Err(LayoutError::DimensionTooLarge {
            axis: "array_layers",
            value: d.array_layers,
            maximum: limits.max_array_layers,
        });
    }
    let full = d.full_mip_chain();
    if d.mip_levels > full {
        return Err(LayoutError::TooManyMips { requested: d.mip_levels, maximum: full });
    }
    Ok(())
}

/// The first mip in the tail by `info`'s model: `mip_levels` for devices without a tail, else the
/// first mip smaller than a tile in any dimension (with `aligned_mip_size`: not a whole number of
/// tiles in every dimension).
fn computed_first_tail_lod(desc: &SparseImageDesc, info: &SparseFormatInfo) -> u32 {
    if info.mip_tail_model == MipTailModel::NoTail {
        return desc.mip_levels;
    }
    let tile = info.tile.to_array();
    (0..desc.mip_levels)
        .find(|&lod| {
            let e = desc.mip_extent(lod);
            (0..3).any(|a| e[a] < tile[a] || (info.aligned_mip_size && e[a] % tile[a] != 0))
        })
        .unwrap_or(desc.mip_levels)
}
