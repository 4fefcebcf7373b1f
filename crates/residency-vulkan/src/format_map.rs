//! The core's formats as Vulkan formats.

use ash::vk;
use residency_core::format::Format;

/// The `VkFormat` of a core format (`Unknown` maps to `VK_FORMAT_UNDEFINED`).
pub fn vk_format(format: Format) -> vk::Format {
    match format {
        Format::Unknown => vk::Format::UNDEFINED,
        Format::R8Unorm => vk::Format::R8_UNORM,
        Format::R8Uint => vk::Format::R8_UINT,
        Format::R8G8Unorm => vk::Format::R8G8_UNORM,
        Format::R16Float => vk::Format::R16_SFLOAT,
        Format::R16Uint => vk::Format::R16_UINT,
        Format::R8G8B8A8Unorm => vk::Format::R8G8B8A8_UNORM,
        Format::R8G8B8A8Srgb => vk::Format::R8G8B8A8_SRGB,
        Format::B8G8R8A8Unorm => vk::Format::B8G8R8A8_UNORM,
        Format::R10G10B10A2Unorm => vk::Format::A2B10G10R10_UNORM_PACK32,
        Format::R11G11B10Float => vk::Format::B10G11R11_UFLOAT_PACK32,
        Format::R16G16Float => vk::Format::R16G16_SFLOAT,
        Format::R32Float => vk::Format::R32_SFLOAT,
        Format::R32Uint => vk::Format::R32_UINT,
        Format::R16G16B16A16Float => vk::Format::R16G16B16A16_SFLOAT,
        Format::R32G32Float => vk::Format::R32G32_SFLOAT,
        Format::R32G32B32A32Float => vk::Format::R32G32B32A32_SFLOAT,
        Format::R32G32B32A32Uint => vk::Format::R32G32B32A32_UINT,
        Format::D16Unorm => vk::Format::D16_UNORM,
        Format::D32Float => vk::Format::D32_SFLOAT,
        Format::D24UnormS8Uint => vk::Format::D24_UNORM_S8_UINT,
        Format::Bc1Unorm => vk::Format::BC1_RGBA_UNORM_BLOCK,
        Format::Bc1Srgb => vk::Format::BC1_RGBA_SRGB_BLOCK,
        Format::Bc3Unorm => vk::Format::BC3_UNORM_BLOCK,
        Format::Bc4Unorm => vk::Format::BC4_UNORM_BLOCK,
        Format::Bc5Unorm => vk::Format::BC5_UNORM_BLOCK,
        Format::Bc6hUfloat => vk::Format::BC6H_UFLOAT_BLOCK,
        Format::Bc7Unorm => vk::Format::BC7_UNORM_BLOCK,
        Format::Bc7Srgb => vk::Format::BC7_SRGB_BLOCK,
    }
}

/// The image aspect of a format.
pub fn aspect(format: Format) -> vk::ImageAspectFlags {
    use residency_core::format::FormatKind;
    match format.kind() {
        FormatKind::Depth => vk::ImageAspectFlags::DEPTH,
        FormatKind::DepthStencil => vk::ImageAspectFlags::DEPTH | vk::ImageAspectFlags::STENCIL,
        FormatKind::Color | FormatKind::Compressed => vk::ImageAspectFlags::COLOR,
    }
}

/// The Vulkan usage bits of a set of bind flags (the core uses Vulkan's bit positions).
pub fn vk_buffer_usage(usage: residency_core::usage::BufferUsage) -> vk::BufferUsageFlags {
    vk::BufferUsageFlags::from_raw(usage.bits())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_texel_format_maps_to_a_distinct_vk_format() {
        let mut seen = std::collections::HashSet::new();
        for &f in Format::ALL {
            let vk = vk_format(f);
            assert_eq!(vk == vk::Format::UNDEFINED, f == Format::Unknown, "{f}");
            assert!(seen.insert(vk), "{f} maps to a format already used");
        }
    }
}
