//! Typed errors with stable codes and ids, and the structural checks every description passes before
//! the spec's rules are applied.

use super::desc::{ResourceDesc, ResourceDimension, ResourceFlag, TextureLayout};
use super::requirements::RequirementsError;
use crate::format::Format;
use crate::profile::Limits;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The error class, as D3D12 would return it. Serialises as `INVALID_ARG`, `UNSUPPORTED`, ….
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// `E_INVALIDARG`: the request breaks a rule.
    InvalidArg,
    /// The device cannot create the resource at all.
    Unsupported,
    /// The requirements source broke its contract (e.g. a non-power-of-two alignment).
    BadRequirements,
    /// The request text is not valid JSON or not a request.
    MalformedRequest,
}

impl ErrorCode {
    /// The stable name, as serialised.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorCode::InvalidArg => "INVALID_ARG",
            ErrorCode::Unsupported => "UNSUPPORTED",
            ErrorCode::BadRequirements => "BAD_REQUIREMENTS",
            ErrorCode::MalformedRequest => "MALFORMED_REQUEST",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Allocation info could not be computed for one element of a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("descs[{element}]: {kind}")]
pub struct PlacementError {
    /// Index of the offending description (0 for whole-request errors).
    pub element: usize,
    /// What is wrong, with the numbers.
    pub kind: PlacementErrorKind,
}

impl PlacementError {
    /// The error class.
    pub fn code(&self) -> ErrorCode {
        self.kind.code()
    }

    /// The stable id.
    pub fn id(&self) -> &'static str {
        self.kind.id()
    }
}

/// What is wrong with a description. Each variant has a stable [`id`](Self::id) and
/// [`code`](Self::code); the first four are the spec's `E_INVALIDARG` list.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementErrorKind {
    /// Spec: `USE_TIGHT_ALIGNMENT` with a 64 KiB layout (reserved resources included): alignment must be
    /// 64 KiB.
    #[error("USE_TIGHT_ALIGNMENT cannot be used with layout {layout}: 64 KiB layouts (and reserved resources) must be 64 KiB aligned")]
    TightAlignmentWith64KbLayout {
        /// The layout given.
        layout: &'static str,
    },
    /// Spec: `USE_TIGHT_ALIGNMENT` on a device whose tier is `NotSupported`.
    #[error("USE_TIGHT_ALIGNMENT is not supported by this device (tight alignment tier: not supported)")]
    TightAlignmentNotSupported,
    /// Spec: a non-zero alignment that is not a power of two.
    #[error("alignment {alignment} is not a power of two")]
    AlignmentNotPowerOfTwo {
        /// The alignment given.
        alignment: u64,
    },
    /// Spec: an alignment above the per-type maximum of the tables (or above what the driver itself
    /// requires, when that is larger).
    #[error("alignment {alignment} exceeds the maximum {maximum} for this resource type and placement")]
    AlignmentAboveMaximum {
        /// The alignment given.
        alignment: u64,
        /// The largest allowed.
        maximum: u64,
    },
    /// The request has no descriptions.
    #[error("the request has no resource descriptions")]
    EmptyRequest,
    /// Width 0.
    #[error("width is 0")]
    ZeroWidth,
    /// Height 0.
    #[error("height is 0")]
    ZeroHeight,
    /// Depth or array size 0.
    #[error("depth_or_array_size is 0")]
    ZeroDepthOrArraySize,
    /// A buffer field that must be 1 (height, depth_or_array_size, mip_levels, sample_count) is not.
    #[error("a buffer's {field} must be 1, got {value}")]
    BufferFieldNotOne {
        /// The field name.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A buffer with a format other than `unknown`.
    #[error("a buffer's format must be unknown, got {format}")]
    BufferWithFormat {
        /// The format given.
        format: Format,
    },
    /// A buffer with a layout other than `row_major`.
    #[error("a buffer's layout must be row_major, got {layout}")]
    BufferLayoutNotRowMajor {
        /// The layout given.
        layout: &'static str,
    },
    /// A buffer with `ALLOW_RENDER_TARGET` or `ALLOW_DEPTH_STENCIL`.
    #[error("a buffer cannot be a render target or depth-stencil")]
    BufferAsAttachment,
    /// A texture with format `unknown`.
    #[error("a texture needs a format (got unknown)")]
    TextureWithoutFormat,
    /// A 1D texture with height other than 1.
    #[error("a 1D texture's height must be 1, got {height}")]
    Texture1dHeight {
        /// The height given.
        height: u32,
    },
    /// A texture extent or layer count above the device limit.
    #[error("{what} {value} exceeds the device limit {maximum}")]
    AboveDeviceLimit {
        /// Which quantity.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The limit.
        maximum: u64,
    },
    /// More mips than the full chain has.
    #[error("mip_levels {mip_levels} exceeds the full mip chain of {full_chain}")]
    MipLevelsBeyondChain {
        /// The mip count given.
        mip_levels: u32,
        /// Mips in the full chain.
        full_chain: u32,
    },
    /// A sample count of 0, not a power of two, or above 64.
    #[error("sample_count {sample_count} is not 1, 2, 4, 8, 16, 32 or 64")]
    InvalidSampleCount {
        /// The sample count given.
        sample_count: u32,
    },
    /// MSAA on something other than a single-mip 2D texture.
    #[error("multisampling needs a 2D texture with one mip level")]
    MsaaNotSingleMip2d,
    /// `row_major` textures must be 1D/2D, one mip, one layer, one sample, not depth.
    #[error("a row_major texture must be 1D or 2D with one mip, one layer, one sample and a colour format")]
    RowMajorTextureShape,
    /// Both `ALLOW_RENDER_TARGET` and `ALLOW_DEPTH_STENCIL`.
    #[error("a resource cannot allow both render target and depth-stencil")]
    RenderTargetAndDepthStencil,
    /// A flag that the format or dimension cannot have.
    #[error("{flag} is not allowed with format {format} on a {dimension}")]
    FlagNotAllowed {
        /// The flag's name.
        flag: &'static str,
        /// The format.
        format: Format,
        /// The dimension's name.
        dimension: &'static str,
    },
    /// The computed layout does not fit in 64 bits.
    #[error("the total size overflows 64 bits")]
    SizeOverflow,
    /// The requirements source cannot answer.
    #[error("{0}")]
    Requirements(#[from] RequirementsError),
    /// The requirements source answered an alignment that is not a power of two.
    #[error("the requirements source answered alignment {alignment}, which is not a power of two")]
    SourceAlignmentNotPowerOfTwo {
        /// The alignment answered.
        alignment: u64,
    },
}

impl PlacementErrorKind {
    /// The error class.
    pub fn code(&self) -> ErrorCode {
        match self {
            PlacementErrorKind::Requirements(RequirementsError::Unsupported { .. }) => ErrorCode::Unsupported,
            PlacementErrorKind::Requirements(RequirementsError::NoData { .. }) => ErrorCode::Unsupported,
            PlacementErrorKind::SourceAlignmentNotPowerOfTwo { .. } => ErrorCode::BadRequirements,
            _ => ErrorCode::InvalidArg,
        }
    }

    /// The stable id.
    pub fn id(&self) -> &'static str {
        match self {
            PlacementErrorKind::TightAlignmentWith64KbLayout { .. } => "TIGHT_ALIGNMENT_WITH_64KB_LAYOUT",
            PlacementErrorKind::TightAlignmentNotSupported => "TIGHT_ALIGNMENT_NOT_SUPPORTED",
            PlacementErrorKind::AlignmentNotPowerOfTwo { .. } => "ALIGNMENT_NOT_POWER_OF_TWO",
            PlacementErrorKind::AlignmentAboveMaximum { .. } => "ALIGNMENT_ABOVE_MAXIMUM",
            PlacementErrorKind::EmptyRequest => "EMPTY_REQUEST",
            PlacementErrorKind::ZeroWidth => "ZERO_WIDTH",
            PlacementErrorKind::ZeroHeight => "ZERO_HEIGHT",
            PlacementErrorKind::ZeroDepthOrArraySize => "ZERO_DEPTH_OR_ARRAY_SIZE",
            PlacementErrorKind::BufferFieldNotOne { .. } => "BUFFER_FIELD_NOT_ONE",
            PlacementErrorKind::BufferWithFormat { .. } => "BUFFER_WITH_FORMAT",
            PlacementErrorKind::BufferLayoutNotRowMajor { .. } => "BUFFER_LAYOUT_NOT_ROW_MAJOR",
            PlacementErrorKind::BufferAsAttachment => "BUFFER_AS_ATTACHMENT",
            PlacementErrorKind::TextureWithoutFormat => "TEXTURE_WITHOUT_FORMAT",
            PlacementErrorKind::Texture1dHeight { .. } => "TEXTURE1D_HEIGHT",
            PlacementErrorKind::AboveDeviceLimit { .. } => "ABOVE_DEVICE_LIMIT",
            PlacementErrorKind::MipLevelsBeyondChain { .. } => "MIP_LEVELS_BEYOND_CHAIN",
            PlacementErrorKind::InvalidSampleCount { .. } => "INVALID_SAMPLE_COUNT",
            PlacementErrorKind::MsaaNotSingleMip2d => "MSAA_NOT_SINGLE_MIP_2D",
            PlacementErrorKind::RowMajorTextureShape => "ROW_MAJOR_TEXTURE_SHAPE",
            PlacementErrorKind::RenderTargetAndDepthStencil => "RENDER_TARGET_AND_DEPTH_STENCIL",
            PlacementErrorKind::FlagNotAllowed { .. } => "FLAG_NOT_ALLOWED",
            PlacementErrorKind::SizeOverflow => "SIZE_OVERFLOW",
            PlacementErrorKind::Requirements(RequirementsError::Unsupported { .. }) => "DEVICE_UNSUPPORTED",
            PlacementErrorKind::Requirements(RequirementsError::NoData { .. }) => "NO_REQUIREMENTS_DATA",
            PlacementErrorKind::SourceAlignmentNotPowerOfTwo { .. } => "SOURCE_ALIGNMENT_NOT_POWER_OF_TWO",
        }
    }

    /// This error attributed to element `element`.
    pub fn at(self, element: usize) -> PlacementError {
        PlacementError { element, kind: self }
    }
}

fn dimension_name(dimension: ResourceDimension) -> &'static str {
    match dimension {
        ResourceDimension::Buffer => "buffer",
        ResourceDimension::Texture1d => "texture1d",
        ResourceDimension::Texture2d => "texture2d",
        ResourceDimension::Texture3d => "texture3d",
    }
}

/// The structural checks: a description that passes is something a device could create, so the
/// spec's rules and the driver's requirements can be applied to it. Device limits come from `limits`
/// (1D textures are checked against `max_image_dimension_2d`, the profile having no 1D limit).
pub fn validate_structure(desc: &ResourceDesc, limits: &Limits) -> Result<(), PlacementErrorKind> {
    use PlacementErrorKind as E;
    if desc.width == 0 {
        return Err(E::ZeroWidth);
    }
    if desc.height == 0 {
        return Err(E::ZeroHeight);
    }
    if desc.depth_or_array_size == 0 {
        return Err(E::ZeroDepthOrArraySize);
    }
    let rt = desc.flags.has(ResourceFlag::AllowRenderTarget);
    let ds = desc.flags.has(ResourceFlag::AllowDepthStencil);
    let uav = desc.flags.has(ResourceFlag::AllowUnorderedAccess);
    if rt && ds {
        return Err(E::RenderTargetAndDepthStencil);
    }
    if desc.dimension == ResourceDimension::Buffer {
        for (field, value) in [
            ("height", u64::from(desc.height)),
            ("depth_or_array_size", u64::from(desc.depth_or_array_size)),
            ("mip_levels", u64::from(desc.mip_levels)),
            ("sample_count", u64::from(desc.sample_count)),
        ] {
            if value != 1 {
                return Err(E::BufferFieldNotOne { field, value });
            }
        }
        if desc.format != Format::Unknown {
            return Err(E::BufferWithFormat { format: desc.format });
        }
        if desc.layout != TextureLayout::RowMajor {
            return Err(E::BufferLayoutNotRowMajor { layout: desc.layout.name() });
        }
        if rt || ds {
            return Err(E::BufferAsAttachment);
        }
        if desc.width > limits.max_buffer_size {
            return Err(E::AboveDeviceLimit {
                what: "buffer width",
                value: desc.width,
                maximum: limits.max_buffer_size,
            });
        }
        return Ok(());
    }

    // Textures.
    if desc.format == Format::Unknown {
        return Err(E::TextureWithoutFormat);
    }
    if desc.dimension == ResourceDimension::Texture1d && desc.height != 1 {
        return Err(E::Texture1dHeight { height: desc.height });
    }
    let (max_side, max_name) = match desc.dimension {
        ResourceDimension::Texture3d => (limits.max_image_dimension_3d, "3D texture side"),
        _ => (limits.max_image_dimension_2d, "texture side"),
    };
    let sides = [desc.width, u64::from(desc.height), u64::from(desc.depth())];
    if let Some(&side) = sides.iter().find(|&&s| s > u64::from(max_side)) {
        return Err(E::AboveDeviceLimit { what: max_name, value: side, maximum: u64::from(max_side) });
    }
    if desc.array_layers() > limits.max_image_array_layers {
        return Err(E::AboveDeviceLimit {
            what: "array size",
            value: u64::from(desc.array_layers()),
            maximum: u64::from(limits.max_image_array_layers),
        });
    }
    let full_chain = desc.full_mip_chain();
    if desc.mip_levels > full_chain {
        return Err(E::MipLevelsBeyondChain { mip_levels: desc.mip_levels, full_chain });
    }
    if !(desc.sample_count.is_power_of_two() && desc.sample_count <= 64) {
        return Err(E::InvalidSampleCount { sample_count: desc.sample_count });
    }
    if desc.is_msaa() && (desc.dimension != ResourceDimension::Texture2d || desc.resolved_mip_levels() != 1) {
        return Err(E::MsaaNotSingleMip2d);
    }
    if desc.layout == TextureLayout::RowMajor
        && (desc.dimension == ResourceDimension::Texture3d
            || desc.resolved_mip_levels() != 1
            || desc.array_layers() != 1
            || desc.is_msaa()
            || desc.format.is_depth_stencil())
    {
        return Err(E::RowMajorTextureShape);
    }
    let not_allowed = |flag: &'static str| E::FlagNotAllowed {
        flag,
        format: desc.format,
        dimension: dimension_name(desc.dimension),
    };
    if ds && (!desc.format.is_depth_stencil() || desc.dimension == ResourceDimension::Texture3d) {
        return Err(not_allowed("allow_depth_stencil"));
    }
    if rt && (desc.format.is_depth_stencil() || desc.format.is_compressed()) {
        return Err(not_allowed("allow_render_target"));
    }
    if uav && (desc.format.is_depth_stencil() || desc.format.is_compressed()) {
        return Err(not_allowed("allow_unordered_access"));
    }
    Ok(())
}
