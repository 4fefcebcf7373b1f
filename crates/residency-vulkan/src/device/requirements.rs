//! The live device as the placement engine's source of driver requirements: what
//! `vkGetDeviceBufferMemoryRequirements` / `vkGetDeviceImageMemoryRequirements` answer, asked without
//! creating objects. A live device never estimates.

use crate::device::profile_capture::{buffer_requirements, image_supported, requirements_of_image};
use crate::device::Device;
use crate::format_map::vk_format;
use ash::vk;
use residency_core::placement::ImageTiling;
// The core's requirement queries, which `Device` answers as a `RequirementsSource` (crate docs:
// "The core's types").
pub use residency_core::placement::{
    ImageQuery, RequirementsError, RequirementsQuery, RequirementsSource, SourcedRequirements,
    TightAlignmentTier,
};
use residency_core::profile::{ImageDimension, Limits};

/// The `VkImageCreateInfo` the placement engine's image query stands for: sampled and copied, plus
/// attachment and storage usage when asked.
pub fn image_query_info(q: &ImageQuery) -> vk::ImageCreateInfo<'static> {
    let mut usage =
        vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST;
    if q.attachment {
        usage |= if q.format.is_depth_stencil() {
            vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT
        } else {
            vk::ImageUsageFlags::COLOR_ATTACHMENT
        };
    }
    if q.storage {
        usage |= vk::ImageUsageFlags::STORAGE;
    }
    let image_type = match q.dimension {
        ImageDimension::D1 => vk::ImageType::TYPE_1D,
        ImageDimension::D2 => vk::ImageType::TYPE_2D,
        ImageDimension::D3 => vk::ImageType::TYPE_3D,
    };
    vk::ImageCreateInfo::default()
        .image_type(image_type)
        .format(vk_format(q.format))
        .extent(vk::Extent3D { width: q.width, height: q.height, depth: q.depth })
        .mip_levels(q.mip_levels)
        .array_layers(q.array_layers)
        .samples(vk::SampleCountFlags::from_raw(q.samples.max(1)))
        .tiling(match q.tiling {
            ImageTiling::Optimal => vk::ImageTiling::OPTIMAL,
            ImageTiling::Linear => vk::ImageTiling::LINEAR,
        })
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED)
}

impl RequirementsSource for Device {
    fn limits(&self) -> &Limits {
        &self.profile().limits
    }

    fn requirements(&self, query: &RequirementsQuery) -> Result<SourcedRequirements, RequirementsError> {
        let requirements = match query {
            RequirementsQuery::Buffer(b) => {
                if b.size == 0 || b.size > self.profile().limits.max_buffer_size {
                    return Err(RequirementsError::Unsupported { what: format!("a buffer of {} B", b.size) });
                }
                buffer_requirements(self, b.size, crate::format_map::vk_buffer_usage(b.usage))
            }
            RequirementsQuery::Image(q) => {
                let info = image_query_info(q);
                if !image_supported(self, &info, None) {
                    return Err(RequirementsError::Unsupported {
                        what: format!(
                            "a {:?} {} image of {}x{}x{}, {} mips, {} layers, {} samples ({:?})",
                            q.dimension,
                            q.format,
                            q.width,
                            q.height,
                            q.depth,
                            q.mip_levels,
                            q.array_layers,
                            q.samples,
                            q.tiling
                        ),
                    });
                }
                requirements_of_image(self, &info)
            }
        };
        Ok(SourcedRequirements { requirements, estimated: false })
    }

    /// [`Device::tight_alignment_tier`]: derived once, `NotSupported` while turned off.
    fn tight_alignment_tier(&self) -> TightAlignmentTier {
        Device::tight_alignment_tier(self)
    }
}

impl Device {
    /// This device's tight-alignment tier (the seed's `D3D12_FEATURE_TIGHT_ALIGNMENT` cap): derived
    /// once from its requirements (`derive_tight_alignment_tier`), `NotSupported` while
    /// [`Device::set_tight_alignment_supported`] turned it off.
    pub fn tight_alignment_tier(&self) -> TightAlignmentTier {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.tight_supported.load(Relaxed) {
            return TightAlignmentTier::NotSupported;
        }
        *self.tight_tier.get_or_init(|| residency_core::placement::derive_tight_alignment_tier(self))
    }

    /// Turns the device's tight-alignment support off (`false`: the device then answers as one
    /// whose tier is `NotSupported`, so a resource's own `Tight` is refused and the device's or a
    /// pool's `Tight` places by the legacy rules) or back to what the device derives (`true`,
    /// which cannot grant support the device lacks): how an engine tests its path for devices
    /// without tight support. Resources already placed stay where they are.
    pub fn set_tight_alignment_supported(&self, supported: bool) {
        self.tight_supported.store(supported, std::sync::atomic::Ordering::Relaxed);
    }
}
