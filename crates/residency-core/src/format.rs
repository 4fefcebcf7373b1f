//! Texel formats, named as lower-case DXGI/Vulkan-style names, with their block geometry.
//!
//! A format here is a closed list of what the library reasons about (placement, tile shapes, sizes).
//! The Vulkan backend maps each one to its `VkFormat`; the core never sees Vulkan types.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What kind of data a format holds; decides which usages and aspects apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FormatKind {
    /// Colour (or generic) data, uncompressed.
    Color,
    /// Block-compressed colour data (BCn).
    Compressed,
    /// Depth only.
    Depth,
    /// Depth and stencil.
    DepthStencil,
}

macro_rules! formats {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $bytes:literal, $bw:literal x $bh:literal, $kind:ident; )*) => {
        /// A texel format. `Unknown` is the format of buffers (D3D12's `DXGI_FORMAT_UNKNOWN`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Format {
            $( $(#[$doc])* $variant, )*
        }

        impl Format {
            /// Every format, in declaration order.
            pub const ALL: &'static [Format] = &[ $( Format::$variant, )* ];

            /// The stable lower-case name used in JSON and on the command line.
            pub const fn name(self) -> &'static str {
                match self { $( Format::$variant => $name, )* }
            }

            /// Bytes per texel block (a texel for uncompressed formats, a 4×4 block for BCn).
            /// `Unknown` has no texels and reports 1 so that byte arithmetic on buffers works.
            pub const fn block_bytes(self) -> u32 {
                match self { $( Format::$variant => $bytes, )* }
            }

            /// Texels per block, as (width, height). (1, 1) for uncompressed formats.
            pub const fn block_extent(self) -> (u32, u32) {
                match self { $( Format::$variant => ($bw, $bh), )* }
            }

            /// What the format holds.
            pub const fn kind(self) -> FormatKind {
                match self { $( Format::$variant => FormatKind::$kind, )* }
            }
        }
    };
}

formats! {
    /// No texel format: buffers.
    Unknown = "unknown", 1, 1 x 1, Color;
    /// 8-bit red, unsigned normalised.
    R8Unorm = "r8_unorm", 1, 1 x 1, Color;
    /// 8-bit red, unsigned integer.
    R8Uint = "r8_uint", 1, 1 x 1, Color;
    /// 8-bit red and green, unsigned normalised.
    R8G8Unorm = "r8g8_unorm", 2, 1 x 1, Color;
    /// 16-bit red, float.
    R16Float = "r16_float", 2, 1 x 1, Color;
    /// 16-bit red, unsigned integer.
    R16Uint = "r16_uint", 2, 1 x 1, Color;
    /// 8-bit RGBA, unsigned normalised.
    R8G8B8A8Unorm = "r8g8b8a8_unorm", 4, 1 x 1, Color;
    /// 8-bit RGBA, sRGB.
    R8G8B8A8Srgb = "r8g8b8a8_srgb", 4, 1 x 1, Color;
    /// 8-bit BGRA, unsigned normalised.
    B8G8R8A8Unorm = "b8g8r8a8_unorm", 4, 1 x 1, Color;
    /// 10-bit RGB and 2-bit alpha, unsigned normalised.
    R10G10B10A2Unorm = "r10g10b10a2_unorm", 4, 1 x 1, Color;
    /// 11/11/10-bit unsigned float RGB.
    R11G11B10Float = "r11g11b10_float", 4, 1 x 1, Color;
    /// 16-bit red and green, float.
    R16G16Float = "r16g16_float", 4, 1 x 1, Color;
    /// 32-bit red, float.
    R32Float = "r32_float", 4, 1 x 1, Color;
    /// 32-bit red, unsigned integer.
    R32Uint = "r32_uint", 4, 1 x 1, Color;
    /// 16-bit RGBA, float.
    R16G16B16A16Float = "r16g16b16a16_float", 8, 1 x 1, Color;
    /// 32-bit red and green, float.
    R32G32Float = "r32g32_float", 8, 1 x 1, Color;
    /// 32-bit RGBA, float.
    R32G32B32A32Float = "r32g32b32a32_float", 16, 1 x 1, Color;
    /// 32-bit RGBA, unsigned integer.
    R32G32B32A32Uint = "r32g32b32a32_uint", 16, 1 x 1, Color;
    /// 16-bit depth.
    D16Unorm = "d16_unorm", 2, 1 x 1, Depth;
    /// 32-bit float depth.
    D32Float = "d32_float", 4, 1 x 1, Depth;
    /// 24-bit depth, 8-bit stencil.
    D24UnormS8Uint = "d24_unorm_s8_uint", 4, 1 x 1, DepthStencil;
    /// BC1 (DXT1) RGBA, 8 bytes per 4×4 block.
    Bc1Unorm = "bc1_unorm", 8, 4 x 4, Compressed;
    /// BC1 RGBA, sRGB.
    Bc1Srgb = "bc1_srgb", 8, 4 x 4, Compressed;
    /// BC3 (DXT5), 16 bytes per block.
    Bc3Unorm = "bc3_unorm", 16, 4 x 4, Compressed;
    /// BC4 single channel, 8 bytes per block.
    Bc4Unorm = "bc4_unorm", 8, 4 x 4, Compressed;
    /// BC5 two channels, 16 bytes per block.
    Bc5Unorm = "bc5_unorm", 16, 4 x 4, Compressed;
    /// BC6H unsigned half float HDR, 16 bytes per block.
    Bc6hUfloat = "bc6h_ufloat", 16, 4 x 4, Compressed;
    /// BC7, 16 bytes per block.
    Bc7Unorm = "bc7_unorm", 16, 4 x 4, Compressed;
    /// BC7, sRGB.
    Bc7Srgb = "bc7_srgb", 16, 4 x 4, Compressed;
}

impl Format {
    /// Bits per texel for uncompressed formats; bits per block texel-equivalent for BCn
    /// (BC1: 4, BC7: 8). This is the figure D3D12's standard tile shapes are keyed on.
    pub const fn bits_per_texel(self) -> u32 {
        let (w, h) = self.block_extent();
        self.block_bytes() * 8 / (w * h)
    }

    /// Whether this is a block-compressed format.
    pub const fn is_compressed(self) -> bool {
        matches!(self.kind(), FormatKind::Compressed)
    }

    /// Whether this format has a depth or stencil aspect.
    pub const fn is_depth_stencil(self) -> bool {
        matches!(self.kind(), FormatKind::Depth | FormatKind::DepthStencil)
    }

    /// Bytes needed for a `width × height × depth` region of this format (blocks rounded up),
    /// saturating at `u64::MAX` (a 2^32-texel cube of 16-byte texels does not fit in a `u64`).
    pub fn region_bytes(self, width: u32, height: u32, depth: u32) -> u64 {
        let (bw, bh) = self.block_extent();
        let blocks_x = u64::from(width.div_ceil(bw));
        let blocks_y = u64::from(height.div_ceil(bh));
        (blocks_x * blocks_y).saturating_mul(u64::from(depth)).saturating_mul(u64::from(self.block_bytes()))
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The name given was not one of [`Format::ALL`]'s names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown format name `{0}` (expected a lower-case name such as `r8g8b8a8_unorm` or `bc7_unorm`)")]
pub struct UnknownFormat(pub String);

impl Serialize for Format {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL.iter().copied().find(|f| f.name() == s).ok_or_else(|| UnknownFormat(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_from_str_and_serde() {
        for &f in Format::ALL {
            assert_eq!(f.name().parse::<Format>(), Ok(f));
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.name()));
            assert_eq!(serde_json::from_str::<Format>(&json).unwrap(), f);
        }
        assert!("rgba8".parse::<Format>().is_err());
    }

    #[test]
    fn bits_per_texel_match_d3d12_tile_shape_keys() {
        assert_eq!(Format::R8Unorm.bits_per_texel(), 8);
        assert_eq!(Format::R8G8B8A8Unorm.bits_per_texel(), 32);
        assert_eq!(Format::R32G32B32A32Float.bits_per_texel(), 128);
        assert_eq!(Format::Bc1Unorm.bits_per_texel(), 4);
        assert_eq!(Format::Bc7Unorm.bits_per_texel(), 8);
    }

    #[test]
    fn region_bytes_rounds_blocks_up() {
        assert_eq!(Format::Bc7Unorm.region_bytes(5, 5, 1), 4 * 16);
        assert_eq!(Format::R8G8B8A8Unorm.region_bytes(16, 16, 2), 16 * 16 * 2 * 4);
    }
}
