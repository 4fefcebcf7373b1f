//! A device's capabilities as one serialisable value: a *device profile*.
//!
//! The Vulkan backend fills a [`DeviceProfile`] from a live physical device; the same value
//! serialises to JSON and loads back, so a profile captured on a GPU you do not have can stand in
//! for it wherever only requirements and limits are needed (offline planning). Profiles captured on
//! real devices ship with this crate: [`captured`].
//!
//! Memory requirements are recorded as *probes*: the driver's answer for a fixed list of buffer and
//! image descriptions, asked without creating objects (`vkGetDevice{Buffer,Image}MemoryRequirements`).

pub mod captured;

use crate::format::Format;
use serde::{Deserialize, Serialize};

/// The profile format version; bumped on any incompatible change.
pub const PROFILE_SCHEMA: u32 = 1;

/// Everything the library knows about one physical device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// [`PROFILE_SCHEMA`] at capture time.
    pub schema: u32,
    /// When, where and by what this profile was captured.
    pub capture: CaptureInfo,
    /// Who the device is.
    pub identity: DeviceIdentity,
    /// Memory heaps and types, with budgets when the device reports them.
    pub memory: MemoryProperties,
    /// The limits that placement and residency depend on.
    pub limits: Limits,
    /// Sparse binding and residency support.
    pub sparse: SparseCaps,
    /// Optional device extensions the library uses.
    pub extensions: Extensions,
    /// Per-format capabilities: tile shapes and mip tails for sparse images, image requirements.
    pub formats: Vec<FormatCaps>,
    /// Buffer memory requirements for each probed usage and size.
    pub buffer_probes: Vec<BufferProbe>,
}

impl DeviceProfile {
    /// Serialises the profile as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a DeviceProfile always serialises")
    }

    /// Reads a profile back from JSON, checking its schema version.
    pub fn from_json(text: &str) -> Result<Self, ProfileError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(ProfileError::Json)?;
        let schema = value.get("schema").and_then(serde_json::Value::as_u64);
        if schema != Some(u64::from(PROFILE_SCHEMA)) {
            return Err(ProfileError::Schema { found: schema, expected: PROFILE_SCHEMA });
        }
        serde_json::from_value(value).map_err(ProfileError::Json)
    }

    /// The capabilities recorded for `format`, if it was probed.
    pub fn format(&self, format: Format) -> Option<&FormatCaps> {
        self.formats.iter().find(|f| f.format == format)
    }

    /// Total bytes of all device-local heaps.
    pub fn device_local_bytes(&self) -> u64 {
        self.memory.heaps.iter().filter(|h| h.device_local).map(|h| h.size).sum()
    }
}

/// Reading a profile failed.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The text is not valid JSON or not a profile.
    #[error("not a device profile: {0}")]
    Json(#[source] serde_json::Error),
    /// The profile was written by an incompatible version.
    #[error("device profile schema {found:?} is not supported (expected {expected})")]
    Schema {
        /// The schema field found, if any.
        found: Option<u64>,
        /// The schema this build reads.
        expected: u32,
    },
}

/// Provenance of a profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureInfo {
    /// The tool and version that captured it, e.g. `residency 0.1.0`.
    pub tool: String,
    /// UTC date and time of capture (RFC 3339), or empty when unknown.
    pub captured_at: String,
    /// The Vulkan loader/instance version used, e.g. `1.3.239`.
    pub instance_version: String,
}

/// The physical device type, as Vulkan reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceType {
    /// A discrete GPU.
    DiscreteGpu,
    /// A GPU sharing memory with the host.
    IntegratedGpu,
    /// A virtualised GPU.
    VirtualGpu,
    /// A software rasteriser such as lavapipe.
    Cpu,
    /// Anything else.
    Other,
}

/// Who the device is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceIdentity {
    /// `deviceName`.
    pub name: String,
    /// PCI vendor id (0x10de NVIDIA, 0x10005 Mesa).
    pub vendor_id: u32,
    /// Vendor-specific device id.
    pub device_id: u32,
    /// The device type.
    pub device_type: DeviceType,
    /// Vulkan API version the device supports, e.g. `1.4.303`.
    pub api_version: String,
    /// Driver name (VkPhysicalDeviceDriverProperties), e.g. `llvmpipe` or `NVIDIA`.
    pub driver_name: String,
    /// Driver info string, e.g. `Mesa 25.0.7 (LLVM 19.1.4)` or `580.xx`.
    pub driver_info: String,
    /// Device UUID as 32 hex digits.
    pub device_uuid: String,
}

/// Memory heaps and types.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryProperties {
    /// The heaps, indexed as Vulkan indexes them.
    pub heaps: Vec<MemoryHeap>,
    /// The memory types, indexed as Vulkan indexes them.
    pub types: Vec<MemoryType>,
}

/// One memory heap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryHeap {
    /// Size in bytes.
    pub size: u64,
    /// `VK_MEMORY_HEAP_DEVICE_LOCAL_BIT`.
    pub device_local: bool,
    /// `VK_MEMORY_HEAP_MULTI_INSTANCE_BIT`.
    pub multi_instance: bool,
    /// The budget from VK_EXT_memory_budget at capture time, when the device has it.
    pub budget: Option<u64>,
    /// The usage from VK_EXT_memory_budget at capture time, when the device has it.
    pub usage: Option<u64>,
}

/// One memory type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryType {
    /// The heap this type allocates from.
    pub heap_index: u32,
    /// Its property flags.
    pub flags: MemoryTypeFlags,
}

/// Memory property flags, one field per Vulkan bit the library cares about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTypeFlags {
    /// `DEVICE_LOCAL`.
    pub device_local: bool,
    /// `HOST_VISIBLE`.
    pub host_visible: bool,
    /// `HOST_COHERENT`.
    pub host_coherent: bool,
    /// `HOST_CACHED`.
    pub host_cached: bool,
    /// `LAZILY_ALLOCATED`.
    pub lazily_allocated: bool,
    /// `PROTECTED`.
    pub protected: bool,
}

/// The limits placement and residency depend on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Linear and optimal resources closer than this may alias (bytes).
    pub buffer_image_granularity: u64,
    /// Uniform buffer descriptor offset alignment.
    pub min_uniform_buffer_offset_alignment: u64,
    /// Storage buffer descriptor offset alignment.
    pub min_storage_buffer_offset_alignment: u64,
    /// Texel buffer offset alignment.
    pub min_texel_buffer_offset_alignment: u64,
    /// Flush/invalidate granularity for non-coherent memory.
    pub non_coherent_atom_size: u64,
    /// How many `VkDeviceMemory` objects may exist at once.
    pub max_memory_allocation_count: u32,
    /// Largest single `VkDeviceMemory` (maintenance3).
    pub max_memory_allocation_size: u64,
    /// Largest buffer (maintenance4).
    pub max_buffer_size: u64,
    /// Virtual address space available to sparse resources.
    pub sparse_address_space_size: u64,
    /// Largest 2D image side.
    pub max_image_dimension_2d: u32,
    /// Largest 3D image side.
    pub max_image_dimension_3d: u32,
    /// Most array layers.
    pub max_image_array_layers: u32,
    /// `optimalBufferCopyOffsetAlignment`.
    pub optimal_buffer_copy_offset_alignment: u64,
    /// `optimalBufferCopyRowPitchAlignment`.
    pub optimal_buffer_copy_row_pitch_alignment: u64,
}

/// Sparse binding and residency: features and properties.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SparseCaps {
    /// `sparseBinding`.
    pub binding: bool,
    /// `sparseResidencyBuffer`.
    pub residency_buffer: bool,
    /// `sparseResidencyImage2D`.
    pub residency_image_2d: bool,
    /// `sparseResidencyImage3D`.
    pub residency_image_3d: bool,
    /// `sparseResidencyAliased`.
    pub residency_aliased: bool,
    /// `shaderResourceResidency`.
    pub shader_resource_residency: bool,
    /// `shaderResourceMinLod`.
    pub shader_resource_min_lod: bool,
    /// `residencyStandard2DBlockShape`.
    pub standard_2d_block_shape: bool,
    /// `residencyStandard2DMultisampleBlockShape`.
    pub standard_2d_multisample_block_shape: bool,
    /// `residencyStandard3DBlockShape`.
    pub standard_3d_block_shape: bool,
    /// `residencyAlignedMipSize`.
    pub aligned_mip_size: bool,
    /// `residencyNonResidentStrict`: reads of unbound memory return zero, writes are dropped.
    pub non_resident_strict: bool,
    /// The queue family the library binds sparse memory on.
    pub queue_family: Option<u32>,
    /// Whether that family is separate from the universal queue's family.
    pub separate_queue_family: bool,
}

impl SparseCaps {
    /// Whether partially resident 2D images can be created at all.
    pub fn supports_residency_2d(&self) -> bool {
        self.binding && self.residency_image_2d
    }
}

/// Optional device extensions the library uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extensions {
    /// VK_EXT_memory_budget.
    pub memory_budget: bool,
    /// VK_KHR_device_group / core 1.1 device groups of more than one physical device.
    pub device_group_size: u32,
}

/// Memory requirements as the driver answers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryRequirements {
    /// Bytes to allocate.
    pub size: u64,
    /// Required offset alignment.
    pub alignment: u64,
    /// Memory types that may back the resource (bit i = type i).
    pub memory_type_bits: u32,
    /// Whether the driver prefers (or requires) a dedicated allocation, when known.
    #[serde(default)]
    pub prefers_dedicated: bool,
}

/// A buffer usage class used when probing requirements. Each maps to a set of Vulkan usage bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferProbeUsage {
    /// Transfer source and destination only.
    Transfer,
    /// Uniform buffer.
    Uniform,
    /// Storage buffer.
    Storage,
    /// Vertex and index buffer.
    VertexIndex,
    /// Indirect arguments.
    Indirect,
    /// Uniform and storage texel buffers.
    Texel,
    /// Every usage above together.
    All,
}

impl BufferProbeUsage {
    /// Every probed usage.
    pub const ALL: &'static [BufferProbeUsage] = &[
        BufferProbeUsage::Transfer,
        BufferProbeUsage::Uniform,
        BufferProbeUsage::Storage,
        BufferProbeUsage::VertexIndex,
        BufferProbeUsage::Indirect,
        BufferProbeUsage::Texel,
        BufferProbeUsage::All,
    ];
}

/// Sizes at which buffer requirements are probed.
pub const BUFFER_PROBE_SIZES: &[u64] = &[1, 8, 16, 100, 256, 4096, 65_537, 1 << 20];

/// The driver's answer for one buffer description.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferProbe {
    /// The usage class.
    pub usage: BufferProbeUsage,
    /// The buffer's size.
    pub size: u64,
    /// The answer.
    pub requirements: MemoryRequirements,
}

/// Image dimensionality.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageDimension {
    /// 1D (array) image.
    D1,
    /// 2D (array) image.
    D2,
    /// 3D volume.
    D3,
}

/// A probed image description (optimal tiling, single sample unless `samples` says otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageProbeDesc {
    /// Dimensionality.
    pub dimension: ImageDimension,
    /// Width in texels.
    pub width: u32,
    /// Height in texels.
    pub height: u32,
    /// Depth (3D) in texels.
    pub depth: u32,
    /// Array layers.
    pub array_layers: u32,
    /// Mip levels.
    pub mip_levels: u32,
    /// Samples per texel.
    pub samples: u32,
    /// Whether it may be a colour or depth attachment.
    pub attachment: bool,
}

/// The driver's answer for one image description.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageProbe {
    /// The probed description.
    pub desc: ImageProbeDesc,
    /// The answer.
    pub requirements: MemoryRequirements,
}

/// Sparse tile shape of a format for one image dimensionality
/// (`vkGetPhysicalDeviceSparseImageFormatProperties`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SparseTileShape {
    /// Tile extent in texels (width, height, depth).
    pub tile_extent: [u32; 3],
    /// The driver reported the granularity of a block-compressed format in blocks rather than
    /// texels (lavapipe does); `tile_extent` has been converted to texels.
    #[serde(default)]
    pub reported_in_blocks: bool,
    /// `VK_SPARSE_IMAGE_FORMAT_SINGLE_MIPTAIL_BIT`: one mip tail for all layers.
    pub single_miptail: bool,
    /// `VK_SPARSE_IMAGE_FORMAT_ALIGNED_MIP_SIZE_BIT`.
    pub aligned_mip_size: bool,
    /// `VK_SPARSE_IMAGE_FORMAT_NONSTANDARD_BLOCK_SIZE_BIT`.
    pub nonstandard_block_size: bool,
}

/// The mip tail and memory requirements of a probed sparse image
/// (`vkGetDeviceImageSparseMemoryRequirements`, no image created).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SparseImageProbe {
    /// The probed description (all mips).
    pub desc: ImageProbeDesc,
    /// First mip level that lives in the mip tail.
    pub mip_tail_first_lod: u32,
    /// Bytes of the mip tail (per layer unless the tail is single).
    pub mip_tail_size: u64,
    /// Offset of the mip tail in the image's opaque memory range.
    pub mip_tail_offset: u64,
    /// Stride between per-layer mip tails.
    pub mip_tail_stride: u64,
    /// Memory requirements of the whole sparse image (tile size = alignment).
    pub requirements: MemoryRequirements,
}

/// What the device can do with one format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FormatCaps {
    /// The format.
    pub format: Format,
    /// Whether optimal-tiling images of this format can be sampled.
    pub sampled: bool,
    /// Whether it can be a storage image.
    pub storage: bool,
    /// Whether it can be a colour or depth/stencil attachment.
    pub attachment: bool,
    /// Sparse tile shape of 2D images, when sparse residency supports the format.
    pub sparse_2d: Option<SparseTileShape>,
    /// Sparse tile shape of 3D images, when sparse residency supports the format.
    pub sparse_3d: Option<SparseTileShape>,
    /// Mip tail of a large probed 2D sparse image.
    pub sparse_2d_probe: Option<SparseImageProbe>,
    /// Mip tail of a probed 3D sparse image.
    pub sparse_3d_probe: Option<SparseImageProbe>,
    /// Non-sparse image requirements for the probe descriptions.
    pub image_probes: Vec<ImageProbe>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_mismatch_is_a_typed_error() {
        let err = DeviceProfile::from_json(r#"{"schema": 999}"#).unwrap_err();
        assert!(matches!(err, ProfileError::Schema { found: Some(999), expected: PROFILE_SCHEMA }));
        let err = DeviceProfile::from_json("not json").unwrap_err();
        assert!(matches!(err, ProfileError::Json(_)));
    }
}
