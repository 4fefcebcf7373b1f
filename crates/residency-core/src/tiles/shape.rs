//! Sparse block ("tile") shapes: the Vulkan standard shapes and the device's own answer.
//!
//! A tile is one sparse image block: 64 KiB of memory whose texel extent depends on the format's
//! block size and the image's dimensionality. The standard shapes come from the Vulkan
//! specification's *Standard Sparse Image Block Shapes* tables, keyed by bytes per texel block;
//! block-compressed formats use the same table in blocks, so BC1 (8 bytes a block) tiles are
//! 128 × 64 blocks = 512 × 256 texels. A device may report its own shape (and says whether it is
//! standard); when a [`DeviceProfile`] has an answer for a format, that answer wins.

use crate::format::{Format, FormatKind};
use crate::profile::{DeviceProfile, SparseImageProbe, SparseTileShape};
use serde::{Deserialize, Serialize};

/// Bytes of one standard sparse block: 64 KiB.
pub const STANDARD_TILE_BYTES: u64 = 64 * 1024;

/// The dimensionality of a partially resident image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SparseDimension {
    /// 2D images and 2D arrays.
    D2,
    /// 3D volumes.
    D3,
}

impl SparseDimension {
    /// Lower-case name, as in JSON: `d2` or `d3`.
    pub const fn name(self) -> &'static str {
        match self {
            SparseDimension::D2 => "d2",
            SparseDimension::D3 => "d3",
        }
    }
}

impl std::fmt::Display for SparseDimension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The extent of one tile, in texels (for block-compressed formats: texels, not blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileShape {
    /// Width in texels (`GL_VIRTUAL_PAGE_SIZE_X_AMD`).
    pub width: u32,
    /// Height in texels (`GL_VIRTUAL_PAGE_SIZE_Y_AMD`).
    pub height: u32,
    /// Depth in texels, 1 for 2D images (`GL_VIRTUAL_PAGE_SIZE_Z_AMD`).
    pub depth: u32,
}

impl TileShape {
    /// A tile of `width × height × depth` texels.
    pub const fn new(width: u32, height: u32, depth: u32) -> Self {
        Self { width, height, depth }
    }

    /// The extent as `[width, height, depth]`.
    pub const fn to_array(self) -> [u32; 3] {
        [self.width, self.height, self.depth]
    }

    /// Texels in one tile.
    pub const fn texels(self) -> u64 {
        self.width as u64 * self.height as u64 * self.depth as u64
    }
}

/// The standard sparse block shape for single-sample images, **in texel blocks**, for a texel
/// block of `block_bytes` bytes (1, 2, 4, 8 or 16: the spec's 8- to 128-bit rows).
///
/// Every shape holds exactly 64 KiB. `None` for any other block size (the spec defines none).
pub const fn standard_block_shape(block_bytes: u32, dimension: SparseDimension) -> Option<TileShape> {
    let shape = match (dimension, block_bytes) {
        (SparseDimension::D2, 1) => TileShape::new(256, 256, 1),
        (SparseDimension::D2, 2) => TileShape::new(256, 128, 1),
        (SparseDimension::D2, 4) => TileShape::new(128, 128, 1),
        (SparseDimension::D2, 8) => TileShape::new(128, 64, 1),
        (SparseDimension::D2, 16) => TileShape::new(64, 64, 1),
        (SparseDimension::D3, 1) => TileShape::new(64, 32, 32),
        (SparseDimension::D3, 2) => TileShape::new(32, 32, 32),
        (SparseDimension::D3, 4) => TileShape::new(32, 32, 16),
        (SparseDimension::D3, 8) => TileShape::new(32, 16, 16),
        (SparseDimension::D3, 16) => TileShape::new(16, 16, 16),
        _ => return None,
    };
    Some(shape)
}

/// The standard sparse block shape of multisampled 2D images (2, 4, 8 or 16 samples), in texel
/// blocks, for a texel block of `block_bytes` bytes. `None` outside the spec's table.
pub const fn standard_block_shape_msaa(block_bytes: u32, samples: u32) -> Option<TileShape> {
    let (w, h) = match (samples, block_bytes) {
        (2, 1) => (128, 256),
        (2, 2) => (128, 128),
        (2, 4) => (64, 128),
        (2, 8) => (64, 64),
        (2, 16) => (32, 64),
        (4, 1) => (128, 128),
        (4, 2) => (128, 64),
        (4, 4) => (64, 64),
        (4, 8) => (64, 32),
        (4, 16) => (32, 32),
        (8, 1) => (64, 128),
        (8, 2) => (64, 64),
        (8, 4) => (32, 64),
        (8, 8) => (32, 32),
        (8, 16) => (16, 32),
        (16, 1) => (64, 64),
        (16, 2) => (64, 32),
        (16, 4) => (32, 32),
        (16, 8) => (32, 16),
        (16, 16) => (16, 16),
        _ => return None,
    };
    Some(TileShape::new(w, h, 1))
}

/// The standard tile shape of `format` in **texels** (block shape × block extent).
///
/// `None` for [`Format::Unknown`] (buffers) and combined depth/stencil formats, whose aspects are
/// bound separately with device-specific shapes.
pub fn standard_tile_shape(format: Format, dimension: SparseDimension) -> Option<TileShape> {
    if format == Format::Unknown || format.kind() == FormatKind::DepthStencil {
        return None;
    }
    let blocks = standard_block_shape(format.block_bytes(), dimension)?;
    let (bw, bh) = format.block_extent();
    Some(TileShape::new(blocks.width * bw, blocks.height * bh, blocks.depth))
}

/// Where a [`SparseFormatInfo`]'s tile shape came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShapeSource {
    /// The device reported it (`vkGetPhysicalDeviceSparseImageFormatProperties`, via a profile).
    Device,
    /// Computed from the standard block shape table.
    Standard,
}

/// How a device lays out the coarse mips of a partially resident image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MipTailModel {
    /// The standard rule: the first mip smaller than one tile in any dimension (or, with
    /// `aligned_mip_size`, not a whole number of tiles in every dimension) starts the mip tail.
    Standard,
    /// The device has no mip tail: every mip is bound by tiles, partial tiles at the edges
    /// included (lavapipe reports `imageMipTailFirstLod == mipLevels`).
    NoTail,
}

/// Everything about one format's sparse residency that layout math needs, from a device profile
/// or from the standard rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparseFormatInfo {
    /// The format.
    pub format: Format,
    /// 2D or 3D.
    pub dimension: SparseDimension,
    /// Tile extent in texels.
    pub tile: TileShape,
    /// Bytes per tile (the sparse block size, 64 KiB on every device seen so far).
    pub tile_bytes: u64,
    /// Whether the device reported the shape or it was computed.
    pub source: ShapeSource,
    /// `VK_SPARSE_IMAGE_FORMAT_SINGLE_MIPTAIL_BIT`: one mip tail for all array layers.
    pub single_miptail: bool,
    /// `VK_SPARSE_IMAGE_FORMAT_ALIGNED_MIP_SIZE_BIT`: a mip that is not a whole number of tiles
    /// starts the mip tail.
    pub aligned_mip_size: bool,
    /// How the device places coarse mips.
    pub mip_tail_model: MipTailModel,
    /// The device's mip tail for one probed image description, when the profile has one; used
    /// verbatim for images of that exact shape.
    pub probe: Option<SparseImageProbe>,
}

/// The tile shape of a format could not be found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The format has no standard sparse block shape (buffers, depth/stencil).
    #[error("format {format} has no standard sparse block shape for {dimension} images")]
    NoStandardShape {
        /// The format asked about.
        format: Format,
        /// 2D or 3D.
        dimension: SparseDimension,
    },
    /// The device does not support partially resident images of this dimensionality.
    #[error(
        "device `{device}` has no sparse residency for {dimension} images \
         (sparseBinding and sparseResidencyImage{dimension} are required); use the software residency path"
    )]
    ResidencyUnsupported {
        /// The device's name.
        device: String,
        /// 2D or 3D.
        dimension: SparseDimension,
    },
    /// The device does not support sparse residency for this format.
    #[error("device `{device}` does not support sparse residency for {format} {dimension} images")]
    FormatUnsupported {
        /// The device's name.
        device: String,
        /// The format asked about.
        format: Format,
        /// 2D or 3D.
        dimension: SparseDimension,
    },
    /// The profile has no entry for the format and the device does not promise standard shapes.
    #[error(
        "device `{device}` profile has no sparse data for {format} and the device does not report \
         standard {dimension} block shapes"
    )]
    NotInProfile {
        /// The device's name.
        device: String,
        /// The format asked about.
        format: Format,
        /// 2D or 3D.
        dimension: SparseDimension,
    },
    /// A device-reported tile shape has a zero dimension.
    #[error("device reported an empty sparse tile shape {extent:?} for {format}")]
    EmptyShape {
        /// The format asked about.
        format: Format,
        /// The reported extent.
        extent: [u32; 3],
    },
}

impl SparseFormatInfo {
    /// The standard shape and standard mip tail rule for `format`, with no device in sight.
    pub fn standard(format: Format, dimension: SparseDimension) -> Result<Self, ShapeError> {
        let tile = standard_tile_shape(format, dimension)
            .ok_or(ShapeError::NoStandardShape { format, dimension })?;
        Ok(Self {
            format,
            dimension,
            tile,
            tile_bytes: STANDARD_TILE_BYTES,
            source: ShapeSource::Standard,
            single_miptail: false,
            aligned_mip_size: false,
            mip_tail_model: MipTailModel::Standard,
            probe: None,
        })
    }

    /// The device's answer for `format`, from a profile: its tile shape, flags and mip tail model.
    ///
    /// The mip tail model is read from the profile's probe: a probe whose first tail LOD equals its
    /// mip count means the device has no mip tail (lavapipe). When the profile has no entry for
    /// the format but the device reports standard block shapes, the standard shape is used.
    pub fn from_profile(
        profile: &DeviceProfile,
        format: Format,
        dimension: SparseDimension,
    ) -> Result<Self, ShapeError> {
        let device = || profile.identity.name.clone();
        let residency = match dimension {
            SparseDimension::D2 => profile.sparse.residency_image_2d,
            SparseDimension::D3 => profile.sparse.residency_image_3d,
        };
        if !profile.sparse.binding || !residency {
            return Err(ShapeError::ResidencyUnsupported { device: device(), dimension });
        }
        let Some(caps) = profile.format(format) else {
            let standard = match dimension {
                SparseDimension::D2 => profile.sparse.standard_2d_block_shape,
                SparseDimension::D3 => profile.sparse.standard_3d_block_shape,
            };
            if !standard {
                return Err(ShapeError::NotInProfile { device: device(), format, dimension });
            }
            return Self::standard(format, dimension);
        };
        let (shape, probe): (Option<SparseTileShape>, Option<SparseImageProbe>) = match dimension {
            SparseDimension::D2 => (caps.sparse_2d, caps.sparse_2d_probe),
            SparseDimension::D3 => (caps.sparse_3d, caps.sparse_3d_probe),
        };
        let shape =
            shape.ok_or_else(|| ShapeError::FormatUnsupported { device: device(), format, dimension })?;
        let [w, h, d] = shape.tile_extent;
        if w == 0 || h == 0 || d == 0 {
            return Err(ShapeError::EmptyShape { format, extent: shape.tile_extent });
        }
        let mip_tail_model = match probe {
            Some(p) if p.mip_tail_first_lod >= p.desc.mip_levels => MipTailModel::NoTail,
            _ => MipTailModel::Standard,
        };
        let tile_bytes = probe
            .map(|p| p.requirements.alignment)
            .filter(|&a| a.is_power_of_two() && a >= STANDARD_TILE_BYTES)
            .unwrap_or(STANDARD_TILE_BYTES);
        Ok(Self {
            format,
            dimension,
            tile: TileShape::new(w, h, d),
            tile_bytes,
            source: ShapeSource::Device,
            single_miptail: shape.single_miptail,
            aligned_mip_size: shape.aligned_mip_size,
            mip_tail_model,
            probe,
        })
    }

    /// The same format with a device that has no mip tail (for tests and for modelling lavapipe
    /// without its profile).
    pub fn with_mip_tail_model(mut self, model: MipTailModel) -> Self {
        self.mip_tail_model = model;
        self
    }
}

/// The seed's `GL_VIRTUAL_PAGE_SIZE_{X,Y,Z}_AMD` question: the tile extent of `format` in texels,
/// asked without creating an image. With a profile, the device's answer; without, the standard one.
pub fn virtual_page_size(
    profile: Option<&DeviceProfile>,
    format: Format,
    dimension: SparseDimension,
) -> Result<TileShape, ShapeError> {
    match profile {
        Some(p) => SparseFormatInfo::from_profile(p, format, dimension).map(|i| i.tile),
        None => SparseFormatInfo::standard(format, dimension).map(|i| i.tile),
    }
}
