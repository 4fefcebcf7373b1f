//! Resources of placement descriptions created for real on a device (`Device::create_buffer` /
//! `create_image`, placed in the general allocator's heaps under a policy), so the CLI can show
//! what the allocator did next to what the engine computed (`alloc-info --place`, the tour).

use anyhow::Context;
use residency::core::placement::ResourceDimension;
use residency::vulkan::ash::vk;
use residency::vulkan::{
    Buffer, BufferDesc, BufferUsage, Device, Image, ImageDesc, ImageDimension, ImageUsage, PlacementPolicy,
    ResourceDesc,
};

/// One resource created for real: where the allocator put it.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Place {
    /// The `VkDeviceMemory` (raw handle) it is bound in.
    #[serde(skip)]
    pub memory: vk::DeviceMemory,
    /// Its offset there.
    pub offset: u64,
    /// Its size (the object's own requirement).
    pub size: u64,
}

/// A created resource, released when dropped (held only for that).
pub struct Made {
    _buffer: Option<Buffer>,
    _image: Option<Image>,
}

/// Creates `desc` on `device` under `policy` (the resource's own): a buffer of `buffer_usage`
/// with the description's alignment as its floor, or an optimally tiled sampled image (an
/// attachment image when the description allows render target or depth-stencil).
pub fn create(
    device: &Device,
    name: String,
    desc: &ResourceDesc,
    buffer_usage: BufferUsage,
    policy: PlacementPolicy,
) -> anyhow::Result<(Made, Place)> {
    use residency::core::placement::ResourceFlag;
    if desc.dimension == ResourceDimension::Buffer {
        let b = device
            .create_buffer(
                &BufferDesc::new(name.clone(), desc.width, buffer_usage)
                    .with_alignment(desc.alignment)
                    .with_policy(policy),
            )
            .with_context(|| name.clone())?;
        let (memory, offset) = b.memory();
        let size = b.size();
        return Ok((Made { _buffer: Some(b), _image: None }, Place { memory, offset, size }));
    }
    let mut usage = ImageUsage::SAMPLED;
    if desc.flags.has(ResourceFlag::AllowRenderTarget) {
        usage = usage | ImageUsage::COLOR_ATTACHMENT;
    }
    if desc.flags.has(ResourceFlag::AllowDepthStencil) {
        usage = ImageUsage::DEPTH_STENCIL_ATTACHMENT;
    }
    if desc.flags.has(ResourceFlag::AllowUnorderedAccess) {
        usage = usage | ImageUsage::STORAGE;
    }
    let mips = if desc.mip_levels == 0 { desc.full_mip_chain() } else { desc.mip_levels };
    let mut image = ImageDesc::new_2d(name.clone(), desc.format, desc.width as u32, desc.height, usage)
        .with_mip_levels(mips)
        .with_policy(policy);
    image.samples = desc.sample_count.max(1);
    match desc.dimension {
        ResourceDimension::Texture3d => {
            image.dimension = ImageDimension::D3;
            image.extent[2] = desc.depth();
        }
        ResourceDimension::Texture1d => image.dimension = ImageDimension::D1,
        _ => image = image.with_array_layers(desc.array_layers()),
    }
    let made = device.create_image(&image).with_context(|| name.clone())?;
    let (memory, offset) = made.memory();
    let size = made.size();
    Ok((Made { _buffer: None, _image: Some(made) }, Place { memory, offset, size }))
}

/// The largest power of two that divides every offset (what they are all aligned to).
pub fn common_alignment(places: &[Place]) -> u64 {
    places
        .iter()
        .map(|p| if p.offset == 0 { 1 << 40 } else { 1u64 << p.offset.trailing_zeros() })
        .min()
        .unwrap_or(1)
}

/// Bytes from the first resource's offset to the last one's end, summed over the memory objects.
pub fn span(places: &[Place]) -> u64 {
    let mut spans: std::collections::HashMap<vk::DeviceMemory, (u64, u64)> = Default::default();
    for p in places {
        let s = spans.entry(p.memory).or_insert((p.offset, p.offset + p.size));
        *s = (s.0.min(p.offset), s.1.max(p.offset + p.size));
    }
    spans.values().map(|(a, b)| b - a).sum()
}
