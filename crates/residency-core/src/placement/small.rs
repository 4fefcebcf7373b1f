//! The small-resource rule: the architecture-independent size estimate of a texture's most detailed
//! mip, in standard tiles.
//!
//! The 64 KiB shapes are the D3D11 tiled-resource shapes ("Texture2D and Texture2DArray subresource
//! tiling", "Texture3D subresource tiling"; the same shapes are D3D12's 64 KiB standard swizzle):
//!
//! | bits per element | 2D (64 KiB) | 3D (64 KiB) |
//! |------------------|-------------|-------------|
//! | 8                | 256 × 256   | 64 × 32 × 32 |
//! | 16               | 256 × 128   | 32 × 32 × 32 |
//! | 32               | 128 × 128   | 32 × 32 × 16 |
//! | 64               | 128 × 64    | 32 × 16 × 16 |
//! | 128              | 64 × 64     | 16 × 16 × 16 |
//!
//! Block-compressed formats count 4×4 blocks as elements of their block size (BC1/BC4: 64 bits, the
//! others: 128 bits), which reproduces D3D11's BC rows (512 × 256 and 256 × 256 texels). MSAA divides
//! the 2D shape by (2×1, 2×2, 4×2, 4×4) for 2, 4, 8, 16 samples (D3D11's table); this crate continues the
//! pattern with 8×4 and 8×8 for Vulkan's 32 and 64 samples.
//!
//! The spec sizes small resources with tiles "of the smaller alignment restriction". The 4 KiB shapes
//! are derived from the 64 KiB ones:
//! - 2D: width / 4 and height / 4 (8 bpp 64×64, 16 bpp 64×32, 32 bpp 32×32, 64 bpp 32×16, 128 bpp 16×16;
//!   D3D12MA's `CanUseSmallAlignment` uses the same table).
//! - 3D: the 4 KiB 2D shape with width / 4, height / 4 and 16 layers of depth — the same step D3D11 takes
//!   from its 64 KiB 2D shapes to its 64 KiB 3D shapes (8 bpp 16×16×16, 16 bpp 16×8×16, 32 bpp 8×8×16,
//!   64 bpp 8×4×16, 128 bpp 4×4×16).
//! - 1D: 4096 bytes of elements in a row (8 bpp 4096, …, 128 bpp 256), as the 64 KiB 1D shape is
//!   65 536 bytes in a row.
//!
//! A single-sample texture is small when its most detailed mip (every array layer of it) needs at most
//! 16 tiles of 4 KiB (≤ 64 KiB); an MSAA texture when it needs at most 64 tiles of 64 KiB (≤ 4 MiB).
//! Only `Unknown` layout qualifies, and render targets and depth-stencil never do.

use super::desc::{ResourceDesc, ResourceDimension, ResourceFlag, TextureLayout};
use super::tables::{KIB_4, KIB_64, MIB_4};
use crate::format::Format;
use serde::{Deserialize, Serialize};

/// A tile's extent in elements (texels, or blocks for compressed formats).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileShape {
    /// Width in elements.
    pub width: u32,
    /// Height in elements.
    pub height: u32,
    /// Depth in elements.
    pub depth: u32,
}

impl TileShape {
    const fn new(width: u32, height: u32, depth: u32) -> Self {
        TileShape { width, height, depth }
    }

    /// Elements in one tile.
    pub const fn elements(&self) -> u64 {
        self.width as u64 * self.height as u64 * self.depth as u64
    }
}

/// Which tile size a shape is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TileSize {
    /// 4 KiB tiles: the small-texture estimate.
    Kib4,
    /// 64 KiB tiles: standard swizzle and tiled resources, and the small-MSAA estimate.
    Kib64,
}

impl TileSize {
    /// Bytes in a tile.
    pub const fn bytes(self) -> u64 {
        match self {
            TileSize::Kib4 => KIB_4,
            TileSize::Kib64 => KIB_64,
        }
    }
}

/// Bits per element: per texel for uncompressed formats, per block for compressed ones.
pub const fn bits_per_element(format: Format) -> u32 {
    format.block_bytes() * 8
}

/// The standard tile shape of `dimension` for elements of `bits` bits, `samples` samples, at `size`.
///
/// `None` for buffers, for element sizes other than 8, 16, 32, 64, 128 bits, for sample counts that are
/// not a power of two up to 64, and for MSAA outside 2D.
pub const fn standard_tile_shape(
    dimension: ResourceDimension,
    bits: u32,
    samples: u32,
    size: TileSize,
) -> Option<TileShape> {
    let (w64, h64) = match bits {
        8 => (256, 256),
        16 => (256, 128),
        32 => (128, 128),
        64 => (128, 64),
        128 => (64, 64),
        _ => return None,
    };
    let (dw, dh) = match samples {
        1 => (1, 1),
        2 => (2, 1),
        4 => (2, 2),
        8 => (4, 2),
        16 => (4, 4),
        32 => (8, 4),
        64 => (8, 8),
        _ => return None,
    };
    if samples > 1 && !matches!(dimension, ResourceDimension::Texture2d) {
        return None;
    }
    let bytes = (bits / 8) as u64;
    let shape = match (dimension, size) {
        (ResourceDimension::Buffer, _) => return None,
        (ResourceDimension::Texture1d, size) => TileShape::new((size.bytes() / bytes) as u32, 1, 1),
        (ResourceDimension::Texture2d, TileSize::Kib64) => TileShape::new(w64 / dw, h64 / dh, 1),
        (ResourceDimension::Texture2d, TileSize::Kib4) => TileShape::new(w64 / 4 / dw, h64 / 4 / dh, 1),
        (ResourceDimension::Texture3d, TileSize::Kib64) => TileShape::new(w64 / 4, h64 / 4, 16),
        (ResourceDimension::Texture3d, TileSize::Kib4) => TileShape::new(w64 / 16, h64 / 16, 16),
    };
    Some(shape)
}

/// How many standard tiles of `size` the most detailed mip of `desc` covers (all array layers), or
/// `None` when the estimate does not apply (buffers, unsupported element sizes or sample counts).
/// Saturates instead of overflowing.
pub fn most_detailed_mip_tiles(desc: &ResourceDesc, size: TileSize) -> Option<u64> {
    let shape = standard_tile_shape(desc.dimension, bits_per_element(desc.format), desc.sample_count, size)?;
    let (bw, bh) = desc.format.block_extent();
    let width = desc.width.div_ceil(u64::from(bw));
    let height = u64::from(desc.height).div_ceil(u64::from(bh));
    let tiles = width
        .div_ceil(u64::from(shape.width))
        .saturating_mul(height.div_ceil(u64::from(shape.height)))
        .saturating_mul(u64::from(desc.depth()).div_ceil(u64::from(shape.depth)))
        .saturating_mul(u64::from(desc.array_layers()));
    Some(tiles)
}

/// The small-resource estimate: bytes of the most detailed mip in tiles of the smaller alignment
/// (4 KiB for textures, 64 KiB for MSAA), or `None` where the estimate does not apply.
pub fn estimated_small_size(desc: &ResourceDesc) -> Option<u64> {
    let size = if desc.is_msaa() { TileSize::Kib64 } else { TileSize::Kib4 };
    most_detailed_mip_tiles(desc, size).map(|tiles| tiles.saturating_mul(size.bytes()))
}

/// Whether `desc` is a *small resource*: a texture with `Unknown` layout, neither render target nor
/// depth-stencil, whose estimated most detailed mip is at most 64 KiB (textures) or 4 MiB (MSAA).
pub fn is_small_resource(desc: &ResourceDesc) -> bool {
    if !desc.dimension.is_texture()
        || desc.layout != TextureLayout::Unknown
        || desc.flags.has(ResourceFlag::AllowRenderTarget)
        || desc.flags.has(ResourceFlag::AllowDepthStencil)
    {
        return false;
    }
    let limit = if desc.is_msaa() { MIB_4 } else { KIB_64 };
    estimated_small_size(desc).is_some_and(|bytes| bytes <= limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_holds_exactly_one_tile_of_bytes() {
        for dim in [ResourceDimension::Texture1d, ResourceDimension::Texture2d, ResourceDimension::Texture3d]
        {
            for bits in [8, 16, 32, 64, 128] {
                for size in [TileSize::Kib4, TileSize::Kib64] {
                    let shape = standard_tile_shape(dim, bits, 1, size).unwrap();
                    assert_eq!(
                        shape.elements() * u64::from(bits / 8),
                        size.bytes(),
                        "{dim:?} {bits} {size:?}"
                    );
                }
            }
        }
        for samples in [2, 4, 8, 16, 32, 64] {
            let shape =
                standard_tile_shape(ResourceDimension::Texture2d, 32, samples, TileSize::Kib64).unwrap();
            assert_eq!(shape.elements() * 4 * u64::from(samples), KIB_64);
        }
    }
}
