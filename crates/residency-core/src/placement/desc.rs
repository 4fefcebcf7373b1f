//! The resource description (modelled on `D3D12_RESOURCE_DESC`) and the placement kind.

use crate::format::Format;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What kind of resource a [`ResourceDesc`] describes (`D3D12_RESOURCE_DIMENSION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceDimension {
    /// A buffer: `width` bytes, everything else 1.
    Buffer,
    /// A 1D texture (array): `width` texels, `depth_or_array_size` layers.
    Texture1d,
    /// A 2D texture (array): `width × height` texels, `depth_or_array_size` layers.
    Texture2d,
    /// A 3D texture: `width × height × depth_or_array_size` texels.
    Texture3d,
}

impl ResourceDimension {
    /// Whether this is one of the texture dimensions.
    pub const fn is_texture(self) -> bool {
        !matches!(self, ResourceDimension::Buffer)
    }
}

/// Memory layout of a texture (`D3D12_TEXTURE_LAYOUT`).
///
/// On Vulkan, `RowMajor` is `VK_IMAGE_TILING_LINEAR` (and the only layout of buffers); the other three
/// are `VK_IMAGE_TILING_OPTIMAL`. The two 64 KiB layouts are the reserved (sparse) and standard-swizzle
/// layouts, whose alignment is always 64 KiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TextureLayout {
    /// The driver picks the layout (optimal tiling). The default for textures.
    #[serde(rename = "unknown")]
    Unknown,
    /// Rows one after another (linear tiling). The default, and only valid layout, for buffers.
    #[serde(rename = "row_major")]
    RowMajor,
    /// 64 KiB tiles with a driver-defined swizzle: reserved (sparse) resources.
    #[serde(rename = "64kb_undefined_swizzle")]
    Undefined64KbSwizzle,
    /// 64 KiB tiles with the standard swizzle.
    #[serde(rename = "64kb_standard_swizzle")]
    Standard64KbSwizzle,
}

impl TextureLayout {
    /// Whether this is one of the two 64 KiB tiled layouts.
    pub const fn is_64kb(self) -> bool {
        matches!(self, TextureLayout::Undefined64KbSwizzle | TextureLayout::Standard64KbSwizzle)
    }

    /// The JSON name.
    pub const fn name(self) -> &'static str {
        match self {
            TextureLayout::Unknown => "unknown",
            TextureLayout::RowMajor => "row_major",
            TextureLayout::Undefined64KbSwizzle => "64kb_undefined_swizzle",
            TextureLayout::Standard64KbSwizzle => "64kb_standard_swizzle",
        }
    }
}

/// One resource flag (`D3D12_RESOURCE_FLAGS`, the subset that placement depends on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceFlag {
    /// `D3D12_RESOURCE_FLAG_USE_TIGHT_ALIGNMENT`: align as tightly as the driver allows.
    UseTightAlignment,
    /// `D3D12_RESOURCE_FLAG_ALLOW_RENDER_TARGET`: colour attachment.
    AllowRenderTarget,
    /// `D3D12_RESOURCE_FLAG_ALLOW_DEPTH_STENCIL`: depth/stencil attachment.
    AllowDepthStencil,
    /// `D3D12_RESOURCE_FLAG_ALLOW_UNORDERED_ACCESS`: shader writes (storage).
    AllowUnorderedAccess,
    /// `D3D12_RESOURCE_FLAG_ALLOW_CROSS_ADAPTER`: shared with another adapter; forces 64 KiB (4 MiB MSAA).
    AllowCrossAdapter,
}

impl ResourceFlag {
    /// Every flag, in bit order.
    pub const ALL: [ResourceFlag; 5] = [
        ResourceFlag::UseTightAlignment,
        ResourceFlag::AllowRenderTarget,
        ResourceFlag::AllowDepthStencil,
        ResourceFlag::AllowUnorderedAccess,
        ResourceFlag::AllowCrossAdapter,
    ];

    const fn bit(self) -> u8 {
        match self {
            ResourceFlag::UseTightAlignment => 1,
            ResourceFlag::AllowRenderTarget => 2,
            ResourceFlag::AllowDepthStencil => 4,
            ResourceFlag::AllowUnorderedAccess => 8,
            ResourceFlag::AllowCrossAdapter => 16,
        }
    }
}

/// A set of [`ResourceFlag`]s. Serialises as a list of snake_case names.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ResourceFlags(u8);

impl ResourceFlags {
    /// No flags.
    pub const NONE: ResourceFlags = ResourceFlags(0);
    /// See [`ResourceFlag::UseTightAlignment`].
    pub const USE_TIGHT_ALIGNMENT: ResourceFlags = ResourceFlags(1);
    /// See [`ResourceFlag::AllowRenderTarget`].
    pub const ALLOW_RENDER_TARGET: ResourceFlags = ResourceFlags(2);
    /// See [`ResourceFlag::AllowDepthStencil`].
    pub const ALLOW_DEPTH_STENCIL: ResourceFlags = ResourceFlags(4);
    /// See [`ResourceFlag::AllowUnorderedAccess`].
    pub const ALLOW_UNORDERED_ACCESS: ResourceFlags = ResourceFlags(8);
    /// See [`ResourceFlag::AllowCrossAdapter`].
    pub const ALLOW_CROSS_ADAPTER: ResourceFlags = ResourceFlags(16);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: ResourceFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether `flag` is set.
    pub const fn has(self, flag: ResourceFlag) -> bool {
        self.0 & flag.bit() != 0
    }

    /// This set with `flag` added.
    #[must_use]
    pub const fn with(self, flag: ResourceFlag) -> ResourceFlags {
        ResourceFlags(self.0 | flag.bit())
    }

    /// This set with `flag` removed.
    #[must_use]
    pub const fn without(self, flag: ResourceFlag) -> ResourceFlags {
        ResourceFlags(self.0 & !flag.bit())
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The flags set, in bit order.
    pub fn iter(self) -> impl Iterator<Item = ResourceFlag> {
        ResourceFlag::ALL.into_iter().filter(move |f| self.has(*f))
    }
}

impl std::ops::BitOr for ResourceFlags {
    type Output = ResourceFlags;
    fn bitor(self, rhs: ResourceFlags) -> ResourceFlags {
        ResourceFlags(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for ResourceFlags {
    fn bitor_assign(&mut self, rhs: ResourceFlags) {
        self.0 |= rhs.0;
    }
}

impl From<ResourceFlag> for ResourceFlags {
    fn from(flag: ResourceFlag) -> Self {
        ResourceFlags(flag.bit())
    }
}

impl FromIterator<ResourceFlag> for ResourceFlags {
    fn from_iter<I: IntoIterator<Item = ResourceFlag>>(iter: I) -> Self {
        iter.into_iter().fold(ResourceFlags::NONE, ResourceFlags::with)
    }
}

impl fmt::Debug for ResourceFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl Serialize for ResourceFlags {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for ResourceFlags {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let flags = Vec::<ResourceFlag>::deserialize(deserializer)?;
        Ok(flags.into_iter().collect())
    }
}

/// Whether a resource is placed in an explicit heap or committed (its own implicit heap).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// Placed at an offset in an explicit heap (`CreatePlacedResource`).
    #[default]
    Placed,
    /// With its own implicit heap (`CreateCommittedResource`): 4 KiB granularity.
    Committed,
}

/// A resource description modelled on `D3D12_RESOURCE_DESC`.
///
/// Defaults follow D3D12's helpers (`CD3DX12_RESOURCE_DESC::Buffer` / `Tex2D`): height, depth-or-array-size
/// and sample count 1, format `Unknown`, no flags, alignment 0; mip levels 1 and layout `RowMajor` for
/// buffers, mip levels 0 (the full chain) and layout `Unknown` for textures. In JSON only `dimension` and
/// `width` are required; the other fields take those defaults when absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "ResourceDescJson")]
pub struct ResourceDesc {
    /// Buffer or texture dimensionality.
    pub dimension: ResourceDimension,
    /// Bytes for a buffer, texels for a texture.
    pub width: u64,
    /// Texels (1 for buffers and 1D textures).
    pub height: u32,
    /// Depth in texels (3D) or array layers (1D/2D); 1 for buffers.
    pub depth_or_array_size: u32,
    /// Mip levels; 0 means the full chain down to 1×1(×1).
    pub mip_levels: u32,
    /// Texel format; [`Format::Unknown`] for buffers.
    pub format: Format,
    /// Samples per texel (1 unless MSAA).
    pub sample_count: u32,
    /// Memory layout.
    pub layout: TextureLayout,
    /// Resource flags.
    pub flags: ResourceFlags,
    /// 0, or the alignment floor the app asks for (a power of two up to the type's maximum).
    pub alignment: u64,
}

impl ResourceDesc {
    /// A buffer of `width` bytes with D3D12's defaults.
    pub const fn buffer(width: u64) -> Self {
        ResourceDesc {
            dimension: ResourceDimension::Buffer,
            width,
            height: 1,
            depth_or_array_size: 1,
            mip_levels: 1,
            format: Format::Unknown,
            sample_count: 1,
            layout: TextureLayout::RowMajor,
            flags: ResourceFlags::NONE,
            alignment: 0,
        }
    }

    /// A 1D texture with one layer and the full mip chain.
    pub const fn texture_1d(format: Format, width: u64) -> Self {
        Self::texture(ResourceDimension::Texture1d, format, width, 1, 1)
    }

    /// A 2D texture with one layer and the full mip chain.
    pub const fn texture_2d(format: Format, width: u64, height: u32) -> Self {
        Self::texture(ResourceDimension::Texture2d, format, width, height, 1)
    }

    /// A 3D texture with the full mip chain.
    pub const fn texture_3d(format: Format, width: u64, height: u32, depth: u32) -> Self {
        Self::texture(ResourceDimension::Texture3d, format, width, height, depth)
    }

    const fn texture(
        dimension: ResourceDimension,
        format: Format,
        width: u64,
        height: u32,
        depth_or_array_size: u32,
    ) -> Self {
        ResourceDesc {
            dimension,
            width,
            height,
            depth_or_array_size,
            mip_levels: 0,
            format,
            sample_count: 1,
            layout: TextureLayout::Unknown,
            flags: ResourceFlags::NONE,
            alignment: 0,
        }
    }

    /// This description with `flag` added.
    #[must_use]
    pub const fn with_flag(mut self, flag: ResourceFlag) -> Self {
        self.flags = self.flags.with(flag);
        self
    }

    /// This description with the tight-alignment flag.
    #[must_use]
    pub const fn tight(self) -> Self {
        self.with_flag(ResourceFlag::UseTightAlignment)
    }

    /// This description with `alignment` as its floor (0 for none).
    #[must_use]
    pub const fn with_alignment(mut self, alignment: u64) -> Self {
        self.alignment = alignment;
        self
    }

    /// This description with `mip_levels` mips (0 for the full chain).
    #[must_use]
    pub const fn with_mip_levels(mut self, mip_levels: u32) -> Self {
        self.mip_levels = mip_levels;
        self
    }

    /// This description with `sample_count` samples.
    #[must_use]
    pub const fn with_samples(mut self, sample_count: u32) -> Self {
        self.sample_count = sample_count;
        self
    }

    /// This description with `depth_or_array_size` layers (1D/2D) or depth (3D).
    #[must_use]
    pub const fn with_depth_or_array_size(mut self, depth_or_array_size: u32) -> Self {
        self.depth_or_array_size = depth_or_array_size;
        self
    }

    /// This description with `layout`.
    #[must_use]
    pub const fn with_layout(mut self, layout: TextureLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Whether the tight-alignment flag is set.
    pub const fn is_tight(&self) -> bool {
        self.flags.has(ResourceFlag::UseTightAlignment)
    }

    /// Whether this is a multisampled texture.
    pub const fn is_msaa(&self) -> bool {
        self.sample_count > 1
    }

    /// Array layers (1 for buffers and 3D textures).
    pub const fn array_layers(&self) -> u32 {
        match self.dimension {
            ResourceDimension::Texture1d | ResourceDimension::Texture2d => self.depth_or_array_size,
            ResourceDimension::Buffer | ResourceDimension::Texture3d => 1,
        }
    }

    /// Depth in texels (1 unless 3D).
    pub const fn depth(&self) -> u32 {
        match self.dimension {
            ResourceDimension::Texture3d => self.depth_or_array_size,
            _ => 1,
        }
    }

    /// The number of mips of the full chain for this description's extent (1 for buffers).
    pub fn full_mip_chain(&self) -> u32 {
        let largest = match self.dimension {
            ResourceDimension::Buffer => return 1,
            ResourceDimension::Texture1d => self.width,
            ResourceDimension::Texture2d => self.width.max(u64::from(self.height)),
            ResourceDimension::Texture3d => {
                self.width.max(u64::from(self.height)).max(u64::from(self.depth_or_array_size))
            }
        };
        if largest == 0 {
            1
        } else {
            64 - largest.leading_zeros()
        }
    }

    /// Mip levels with 0 resolved to the full chain (which is one mip for MSAA, whose images have no
    /// mips).
    pub fn resolved_mip_levels(&self) -> u32 {
        if self.mip_levels == 0 && self.is_msaa() {
            1
        } else if self.mip_levels == 0 {
            self.full_mip_chain()
        } else {
            self.mip_levels
        }
    }
}

/// The JSON form, where every field but `dimension` and `width` is optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceDescJson {
    dimension: ResourceDimension,
    width: u64,
    #[serde(default)]
    height: Option<u32>,
    #[serde(default)]
    depth_or_array_size: Option<u32>,
    #[serde(default)]
    mip_levels: Option<u32>,
    #[serde(default)]
    format: Option<Format>,
    #[serde(default)]
    sample_count: Option<u32>,
    #[serde(default)]
    layout: Option<TextureLayout>,
    #[serde(default)]
    flags: Option<ResourceFlags>,
    #[serde(default)]
    alignment: Option<u64>,
}

impl From<ResourceDescJson> for ResourceDesc {
    fn from(j: ResourceDescJson) -> Self {
        let base = match j.dimension {
            ResourceDimension::Buffer => ResourceDesc::buffer(j.width),
            dimension => ResourceDesc::texture(dimension, j.format.unwrap_or(Format::Unknown), j.width, 1, 1),
        };
        ResourceDesc {
            dimension: j.dimension,
            width: j.width,
            height: j.height.unwrap_or(base.height),
            depth_or_array_size: j.depth_or_array_size.unwrap_or(base.depth_or_array_size),
            mip_levels: j.mip_levels.unwrap_or(base.mip_levels),
            format: j.format.unwrap_or(base.format),
            sample_count: j.sample_count.unwrap_or(base.sample_count),
            layout: j.layout.unwrap_or(base.layout),
            flags: j.flags.unwrap_or_default(),
            alignment: j.alignment.unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_defaults_follow_d3d12_helpers() {
        let b: ResourceDesc = serde_json::from_str(r#"{"dimension":"buffer","width":100}"#).unwrap();
        assert_eq!(b, ResourceDesc::buffer(100));
        let t: ResourceDesc =
            serde_json::from_str(r#"{"dimension":"texture2d","width":64,"height":32,"format":"bc7_unorm"}"#)
                .unwrap();
        assert_eq!(t, ResourceDesc::texture_2d(Format::Bc7Unorm, 64, 32));
        assert_eq!(t.resolved_mip_levels(), 7);
    }

    #[test]
    fn flags_serialise_as_a_list_of_names() {
        let d = ResourceDesc::buffer(8).tight().with_flag(ResourceFlag::AllowCrossAdapter);
        let json = serde_json::to_value(d).unwrap();
        assert_eq!(json["flags"], serde_json::json!(["use_tight_alignment", "allow_cross_adapter"]));
        let back: ResourceDesc = serde_json::from_value(json).unwrap();
        assert_eq!(back, d);
        assert!(serde_json::from_str::<ResourceDesc>(r#"{"dimension":"buffer","width":1,"flags":["nope"]}"#)
            .is_err());
    }

    #[test]
    fn layouts_use_the_issue_names() {
        for layout in [
            TextureLayout::Unknown,
            TextureLayout::RowMajor,
            TextureLayout::Undefined64KbSwizzle,
            TextureLayout::Standard64KbSwizzle,
        ] {
            assert_eq!(serde_json::to_value(layout).unwrap(), serde_json::json!(layout.name()));
        }
    }
}
