//! The driver's part of the answer: memory requirements for a resource, asked of a
//! [`RequirementsSource`] (a live Vulkan device, a device profile, or a fixed rule set).
//!
//! This is the Vulkan counterpart of the D3D12 DDI's `CheckResourceAllocationInfo`: the engine turns a
//! [`ResourceDesc`](super::ResourceDesc) into a [`RequirementsQuery`] (buffer usage bits, or image
//! dimensionality, extent, format, samples, tiling and usage) and the source answers what
//! `vkGetDeviceBufferMemoryRequirements` / `vkGetDeviceImageMemoryRequirements` would.

use crate::format::Format;
use crate::profile::{BufferProbeUsage, ImageDimension, Limits, MemoryRequirements};
use crate::usage::BufferUsage;
use serde::{Deserialize, Serialize};

/// `VkImageTiling`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageTiling {
    /// Driver-defined layout (`Unknown` and the 64 KiB layouts).
    Optimal,
    /// Row-major (`RowMajor` textures).
    Linear,
}

/// A buffer to ask requirements for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BufferQuery {
    /// Size in bytes (never 0).
    pub size: u64,
    /// Usage bits.
    pub usage: BufferUsage,
}

/// An image to ask requirements for (no image is created).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ImageQuery {
    /// Dimensionality.
    pub dimension: ImageDimension,
    /// Width in texels.
    pub width: u32,
    /// Height in texels (1 for 1D).
    pub height: u32,
    /// Depth in texels (1 unless 3D).
    pub depth: u32,
    /// Array layers (1 for 3D).
    pub array_layers: u32,
    /// Mip levels (resolved, never 0).
    pub mip_levels: u32,
    /// Texel format (never `Unknown`).
    pub format: Format,
    /// Samples per texel.
    pub samples: u32,
    /// Tiling.
    pub tiling: ImageTiling,
    /// Colour or depth/stencil attachment usage.
    pub attachment: bool,
    /// Storage image usage.
    pub storage: bool,
}

/// What a [`RequirementsSource`] is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequirementsQuery {
    /// A buffer.
    Buffer(BufferQuery),
    /// An image.
    Image(ImageQuery),
}

/// A source's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourcedRequirements {
    /// What the driver requires.
    pub requirements: MemoryRequirements,
    /// Whether this is an estimate rather than the driver's own answer (a profile without a matching
    /// probe). A live device never estimates.
    pub estimated: bool,
}

impl SourcedRequirements {
    /// The driver's own answer.
    pub const fn exact(requirements: MemoryRequirements) -> Self {
        SourcedRequirements { requirements, estimated: false }
    }

    /// An estimate.
    pub const fn estimate(requirements: MemoryRequirements) -> Self {
        SourcedRequirements { requirements, estimated: true }
    }
}

/// A source could not answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequirementsError {
    /// The device cannot create the resource (format, usage or sample count not supported).
    #[error("the device does not support {what}")]
    Unsupported {
        /// What is not supported, in words.
        what: String,
    },
    /// The source has no data to answer from (a profile without probes of this kind).
    #[error("the requirements source has no data for {what}")]
    NoData {
        /// What was asked, in words.
        what: String,
    },
}

/// Tight-alignment support (`D3D12_TIGHT_ALIGNMENT_TIER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TightAlignmentTier {
    /// `USE_TIGHT_ALIGNMENT` is an error.
    NotSupported,
    /// Tight alignment of buffers is supported.
    Tier1,
}

/// The driver's memory requirements for resources, plus the limits placement needs.
///
/// Implemented by the live Vulkan device (in `residency-vulkan`, with
/// `vkGetDevice{Buffer,Image}MemoryRequirements`, no objects created), by
/// [`DeviceProfile`](crate::profile::DeviceProfile) (from its recorded probes) and by
/// [`FixedRequirements`] (fixed rules, for tests and examples). The trait is object safe; the engine
/// takes `&dyn RequirementsSource` as well as concrete sources.
///
/// Contract: answers are deterministic (the same query gives the same answer), `alignment` is a
/// power of two, and `size >= ` the buffer's size (or the image's texel data for images).
pub trait RequirementsSource {
    /// The device limits.
    fn limits(&self) -> &Limits;

    /// What the driver requires for `query`.
    fn requirements(&self, query: &RequirementsQuery) -> Result<SourcedRequirements, RequirementsError>;

    /// The device's tight-alignment tier. The default derives it with [`derive_tight_alignment_tier`];
    /// override only to report less (never more) than that rule gives.
    fn tight_alignment_tier(&self) -> TightAlignmentTier {
        derive_tight_alignment_tier(self)
    }
}

impl<S: RequirementsSource + ?Sized> RequirementsSource for &S {
    fn limits(&self) -> &Limits {
        (**self).limits()
    }
    fn requirements(&self, query: &RequirementsQuery) -> Result<SourcedRequirements, RequirementsError> {
        (**self).requirements(query)
    }
    fn tight_alignment_tier(&self) -> TightAlignmentTier {
        (**self).tight_alignment_tier()
    }
}

/// A requirements source for one object that exists: a device's limits and tier, and the object's
/// own requirements (what `vkGet*MemoryRequirements` answered for it) whatever the query. What the
/// backend gives the engine for each resource it places, so that the engine's driver part is that
/// object's own answer; also how a test asks the engine about an existing object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectRequirements<'a> {
    /// The device's limits.
    pub limits: &'a Limits,
    /// The object's own requirements.
    pub requirements: MemoryRequirements,
    /// The device's tight-alignment tier.
    pub tier: TightAlignmentTier,
}

impl RequirementsSource for ObjectRequirements<'_> {
    fn limits(&self) -> &Limits {
        self.limits
    }

    fn requirements(&self, _query: &RequirementsQuery) -> Result<SourcedRequirements, RequirementsError> {
        Ok(SourcedRequirements { requirements: self.requirements, estimated: false })
    }

    fn tight_alignment_tier(&self) -> TightAlignmentTier {
        self.tier
    }
}

/// Buffer sizes the tier rule asks about.
pub const TIER_PROBE_SIZES: [u64; 4] = [8, 256, 65_537, 1 << 20];

/// The tier rule: `Tier1` when, for every usage class a placed buffer can have (each probe class and
/// their union) and each of [`TIER_PROBE_SIZES`], the driver's buffer alignment is at most 256 B
/// (the spec's tight buffer maximum), and `bufferImageGranularity` is at most 64 KiB.
///
/// `bufferImageGranularity` (G) enters because tight placement puts linear resources (buffers,
/// row-major textures) next to optimal-tiling images in one heap. The engine keeps them apart by
/// aligning every optimal image's offset to G and rounding its size up to G, so an image owns whole
/// G-pages and no buffer shares one. That keeps buffers tight whatever G is, but raises image
/// alignment to G; with G above 64 KiB images would leave the texture table's range, so such a device
/// is `NotSupported`. Any source error makes the tier `NotSupported`.
pub fn derive_tight_alignment_tier<S: RequirementsSource + ?Sized>(source: &S) -> TightAlignmentTier {
    if source.limits().buffer_image_granularity > super::tables::KIB_64 {
        return TightAlignmentTier::NotSupported;
    }
    for &class in BufferProbeUsage::ALL {
        for size in TIER_PROBE_SIZES {
            let query =
                RequirementsQuery::Buffer(BufferQuery { size, usage: BufferUsage::of_probe_class(class) });
            match source.requirements(&query) {
                Ok(r) if r.requirements.alignment <= super::tables::TIGHT_MAX_PLACED_BUFFER_ALIGNMENT => {}
                _ => return TightAlignmentTier::NotSupported,
            }
        }
    }
    TightAlignmentTier::Tier1
}

/// A requirements source with fixed, documented rules: a real source for tests, examples and offline
/// what-if planning, not a mock of a device.
///
/// Buffers: alignment is `uniform_alignment` when the usage has `UNIFORM`, `texel_alignment` when it has a
/// texel bit, `buffer_alignment` otherwise (the maximum of those that apply); size is the buffer size
/// rounded up to `buffer_size_granularity`. Images: size is the sum over mips and layers of the texel
/// data (blocks rounded up) times samples, each subresource rounded up to the alignment; alignment is
/// `msaa_alignment` for MSAA, `image_alignment` otherwise, and for optimal images of more than
/// `large_image_threshold` bytes `large_image_alignment`. Memory type bits are `memory_type_bits` for
/// every resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedRequirements {
    /// Limits reported by [`RequirementsSource::limits`].
    pub limits: Limits,
    /// Alignment of buffers without uniform or texel usage.
    pub buffer_alignment: u64,
    /// Alignment of buffers with uniform usage.
    pub uniform_alignment: u64,
    /// Alignment of buffers with texel usage.
    pub texel_alignment: u64,
    /// Granularity buffer sizes are rounded up to.
    pub buffer_size_granularity: u64,
    /// Alignment of single-sample images.
    pub image_alignment: u64,
    /// Alignment of optimal single-sample images larger than `large_image_threshold`.
    pub large_image_alignment: u64,
    /// Byte size above which `large_image_alignment` applies.
    pub large_image_threshold: u64,
    /// Alignment of MSAA images.
    pub msaa_alignment: u64,
    /// Memory types reported for every resource.
    pub memory_type_bits: u32,
    /// Reported by `tight_alignment_tier` instead of the derived tier when set (to model a device
    /// whose driver does not claim support).
    pub tier_override: Option<TightAlignmentTier>,
}

impl FixedRequirements {
    /// Limits of a typical discrete GPU: 1 KiB `bufferImageGranularity`, 64 B uniform and 16 B storage
    /// and texel offset alignment.
    pub fn typical_limits() -> Limits {
        Limits {
            buffer_image_granularity: 1024,
            min_uniform_buffer_offset_alignment: 64,
            min_storage_buffer_offset_alignment: 16,
            min_texel_buffer_offset_alignment: 16,
            non_coherent_atom_size: 64,
            max_memory_allocation_count: 4096,
            max_memory_allocation_size: 1 << 36,
            max_buffer_size: 1 << 40,
            sparse_address_space_size: 1 << 40,
            max_image_dimension_2d: 32_768,
            max_image_dimension_3d: 16_384,
            max_image_array_layers: 2048,
            optimal_buffer_copy_offset_alignment: 4,
            optimal_buffer_copy_row_pitch_alignment: 4,
        }
    }

    /// A discrete-GPU-like rule set supporting tight alignment: buffers 16 B (uniform 64 B), sizes
    /// rounded to 4 B, images 1 KiB (64 KiB above 1 MiB), MSAA 64 KiB, G = 1 KiB.
    pub fn discrete() -> Self {
        FixedRequirements {
            limits: Self::typical_limits(),
            buffer_alignment: 16,
            uniform_alignment: 64,
            texel_alignment: 16,
            buffer_size_granularity: 4,
            image_alignment: 1024,
            large_image_alignment: 64 << 10,
            large_image_threshold: 1 << 20,
            msaa_alignment: 64 << 10,
            memory_type_bits: 0b111,
            tier_override: None,
        }
    }

    /// A device without tight-alignment support (the driver does not claim it).
    pub fn without_tight_support() -> Self {
        FixedRequirements { tier_override: Some(TightAlignmentTier::NotSupported), ..Self::discrete() }
    }

    fn buffer(&self, q: &BufferQuery) -> MemoryRequirements {
        let mut alignment = self.buffer_alignment;
        if q.usage.contains(BufferUsage::UNIFORM) {
            alignment = alignment.max(self.uniform_alignment);
        }
        if q.usage.intersects(BufferUsage::UNIFORM_TEXEL | BufferUsage::STORAGE_TEXEL) {
            alignment = alignment.max(self.texel_alignment);
        }
        MemoryRequirements {
            size: super::align_up(q.size, self.buffer_size_granularity),
            alignment,
            memory_type_bits: self.memory_type_bits,
            prefers_dedicated: false,
        }
    }

    fn image(&self, q: &ImageQuery) -> MemoryRequirements {
        let base = if q.samples > 1 { self.msaa_alignment } else { self.image_alignment };
        let raw = image_texel_bytes(q);
        let alignment =
            if q.samples == 1 && q.tiling == ImageTiling::Optimal && raw > self.large_image_threshold {
                base.max(self.large_image_alignment)
            } else {
                base
            };
        let mut size = 0u64;
        for mip in 0..q.mip_levels {
            let (w, h, d) = mip_extent(q, mip);
            let bytes = q.format.region_bytes(w, h, d).saturating_mul(u64::from(q.samples));
            size = size
                .saturating_add(super::align_up(bytes, alignment).saturating_mul(u64::from(q.array_layers)));
        }
        MemoryRequirements {
            size,
            alignment,
            memory_type_bits: self.memory_type_bits,
            prefers_dedicated: false,
        }
    }
}

impl RequirementsSource for FixedRequirements {
    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn requirements(&self, query: &RequirementsQuery) -> Result<SourcedRequirements, RequirementsError> {
        Ok(SourcedRequirements::exact(match query {
            RequirementsQuery::Buffer(q) => self.buffer(q),
            RequirementsQuery::Image(q) => self.image(q),
        }))
    }

    fn tight_alignment_tier(&self) -> TightAlignmentTier {
        self.tier_override.unwrap_or_else(|| derive_tight_alignment_tier(self))
    }
}

/// The extent of `mip` of `q` (each side halved per level, at least 1).
pub(crate) fn mip_extent(q: &ImageQuery, mip: u32) -> (u32, u32, u32) {
    let shrink = |v: u32| v.checked_shr(mip).unwrap_or(0).max(1);
    (shrink(q.width), shrink(q.height), shrink(q.depth))
}

/// Bytes of texel data of every subresource of `q` (blocks rounded up, times samples), saturating.
pub fn image_texel_bytes(q: &ImageQuery) -> u64 {
    (0..q.mip_levels).fold(0u64, |acc, mip| {
        let (w, h, d) = mip_extent(q, mip);
        let bytes = q
            .format
            .region_bytes(w, h, d)
            .saturating_mul(u64::from(q.samples))
            .saturating_mul(u64::from(q.array_layers));
        acc.saturating_add(bytes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_sets_map_to_the_smallest_covering_probe_class() {
        assert_eq!(BufferUsage::COPY_SRC.probe_class(), BufferProbeUsage::Transfer);
        assert_eq!(BufferUsage::UNIFORM.probe_class(), BufferProbeUsage::Uniform);
        assert_eq!(
            (BufferUsage::VERTEX | BufferUsage::TRANSFER).probe_class(),
            BufferProbeUsage::VertexIndex
        );
        assert_eq!((BufferUsage::UNIFORM | BufferUsage::STORAGE).probe_class(), BufferProbeUsage::All);
    }

    #[test]
    fn fixed_source_derives_its_tier() {
        assert_eq!(FixedRequirements::discrete().tight_alignment_tier(), TightAlignmentTier::Tier1);
        let mut coarse = FixedRequirements::discrete();
        coarse.uniform_alignment = 512;
        assert_eq!(coarse.tight_alignment_tier(), TightAlignmentTier::NotSupported);
        let mut big_granularity = FixedRequirements::discrete();
        big_granularity.limits.buffer_image_granularity = 128 << 10;
        assert_eq!(big_granularity.tight_alignment_tier(), TightAlignmentTier::NotSupported);
        assert_eq!(
            FixedRequirements::without_tight_support().tight_alignment_tier(),
            TightAlignmentTier::NotSupported
        );
    }

    #[test]
    fn the_trait_is_object_safe() {
        let source = FixedRequirements::discrete();
        let dynamic: &dyn RequirementsSource = &source;
        assert_eq!(dynamic.tight_alignment_tier(), TightAlignmentTier::Tier1);
    }
}
