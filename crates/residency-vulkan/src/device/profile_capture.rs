//! Captures a [`DeviceProfile`] from a live device, asking the driver without creating objects.

use crate::device::Device;
use crate::format_map::{aspect, vk_format};
use crate::instance::version_string;
use ash::vk;
use residency_core::format::Format;
use residency_core::profile::{
    BufferProbe, CaptureInfo, DeviceIdentity, DeviceProfile, DeviceType, Extensions, FormatCaps,
    ImageDimension, ImageProbe, Limits, MemoryHeap, MemoryProperties, MemoryRequirements, MemoryType,
    MemoryTypeFlags, SparseCaps, SparseImageProbe, SparseTileShape, BUFFER_PROBE_SIZES, PROFILE_SCHEMA,
};
use residency_core::usage::BufferUsage;
// The core's probe descriptions this module maps to Vulkan (crate docs: "The core's types").
pub use residency_core::profile::{BufferProbeUsage, ImageProbeDesc};

/// The Vulkan usage bits of a probed buffer usage class (exactly what the core's placement engine
/// expects a profile's probes to have been captured with).
pub fn buffer_usage(usage: BufferProbeUsage) -> vk::BufferUsageFlags {
    crate::format_map::vk_buffer_usage(BufferUsage::of_probe_class(usage))
}

/// The non-sparse image descriptions probed for every format.
fn image_probe_descs(attachment: bool) -> Vec<ImageProbeDesc> {
    let d2 = |w: u32, layers: u32, mips: u32, samples: u32, attachment: bool| ImageProbeDesc {
        dimension: ImageDimension::D2,
        width: w,
        height: w,
        depth: 1,
        array_layers: layers,
        mip_levels: mips,
        samples,
        attachment,
    };
    let mut descs = vec![
        d2(1, 1, 1, 1, false),
        d2(64, 1, 1, 1, false),
        d2(256, 1, 9, 1, false),
        d2(1024, 1, 11, 1, false),
        d2(4096, 1, 1, 1, false),
        d2(256, 6, 9, 1, false),
        ImageProbeDesc { dimension: ImageDimension::D3, depth: 64, ..d2(64, 1, 1, 1, false) },
    ];
    if attachment {
        descs.push(d2(1024, 1, 1, 1, true));
        descs.push(d2(1024, 1, 1, 4, true));
    }
    descs
}

fn image_type(dimension: ImageDimension) -> vk::ImageType {
    match dimension {
        ImageDimension::D1 => vk::ImageType::TYPE_1D,
        ImageDimension::D2 => vk::ImageType::TYPE_2D,
        ImageDimension::D3 => vk::ImageType::TYPE_3D,
    }
}

fn sample_flags(samples: u32) -> vk::SampleCountFlags {
    vk::SampleCountFlags::from_raw(samples.max(1))
}

/// The image create info for a probe description.
pub fn image_create_info(
    format: Format,
    desc: &ImageProbeDesc,
    sparse: bool,
) -> vk::ImageCreateInfo<'static> {
    let mut usage = vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::SAMPLED;
    if !sparse {
        usage |= vk::ImageUsageFlags::TRANSFER_SRC;
    }
    if desc.attachment {
        usage |= if format.is_depth_stencil() {
            vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT
        } else {
            vk::ImageUsageFlags::COLOR_ATTACHMENT
        };
    }
    let flags = if sparse {
        vk::ImageCreateFlags::SPARSE_BINDING | vk::ImageCreateFlags::SPARSE_RESIDENCY
    } else {
        vk::ImageCreateFlags::empty()
    };
    vk::ImageCreateInfo::default()
        .flags(flags)
        .image_type(image_type(desc.dimension))
        .format(vk_format(format))
        .extent(vk::Extent3D { width: desc.width, height: desc.height, depth: desc.depth })
        .mip_levels(desc.mip_levels)
        .array_layers(desc.array_layers)
        .samples(sample_flags(desc.samples))
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED)
}

/// Whether the device accepts an image of this description (so asking for its requirements is
/// valid usage), judged by `vkGetPhysicalDeviceImageFormatProperties`.
pub(crate) fn image_supported(
    device: &Device,
    info: &vk::ImageCreateInfo<'_>,
    sparse_budget: Option<u64>,
) -> bool {
    // SAFETY: valid physical device of this instance.
    let props = unsafe {
        device.instance().get_physical_device_image_format_properties(
            device.physical(),
            info.format,
            info.image_type,
            info.tiling,
            info.usage,
            info.flags,
        )
    };
    let Ok(props) = props else { return false };
    let e = info.extent;
    let fits = e.width <= props.max_extent.width
        && e.height <= props.max_extent.height
        && e.depth <= props.max_extent.depth
        && info.mip_levels <= props.max_mip_levels
        && info.array_layers <= props.max_array_layers
        && props.sample_counts.contains(info.samples);
    fits && sparse_budget.is_none_or(|budget| props.max_resource_size >= budget)
}

/// The requirements a `vkGet*MemoryRequirements2` call answered (`r`, with the
/// `VkMemoryDedicatedRequirements` it chained): dedicated memory is preferred when the driver
/// prefers or requires it.
pub(crate) fn memory_requirements(
    r: vk::MemoryRequirements,
    dedicated: &vk::MemoryDedicatedRequirements<'_>,
) -> MemoryRequirements {
    MemoryRequirements {
        size: r.size,
        alignment: r.alignment,
        memory_type_bits: r.memory_type_bits,
        prefers_dedicated: dedicated.prefers_dedicated_allocation == vk::TRUE
            || dedicated.requires_dedicated_allocation == vk::TRUE,
    }
}

/// `vkGetBufferMemoryRequirements2` of `buffer`, dedicated preference included.
///
/// # Safety
/// `buffer` is a live buffer of `device`.
pub(crate) unsafe fn requirements_of_buffer_object(
    device: &Device,
    buffer: vk::Buffer,
) -> MemoryRequirements {
    let mut dedicated = vk::MemoryDedicatedRequirements::default();
    let mut out = vk::MemoryRequirements2::default().push_next(&mut dedicated);
    let info = vk::BufferMemoryRequirementsInfo2::default().buffer(buffer);
    // SAFETY: the caller's contract (a live buffer of this device); the output chain is live.
    unsafe { device.raw().get_buffer_memory_requirements2(&info, &mut out) };
    memory_requirements(out.memory_requirements, &dedicated)
}

/// `vkGetImageMemoryRequirements2` of `image`, dedicated preference included.
///
/// # Safety
/// `image` is a live, non-disjoint image of `device`.
pub(crate) unsafe fn requirements_of_image_object(device: &Device, image: vk::Image) -> MemoryRequirements {
    let mut dedicated = vk::MemoryDedicatedRequirements::default();
    let mut out = vk::MemoryRequirements2::default().push_next(&mut dedicated);
    let info = vk::ImageMemoryRequirementsInfo2::default().image(image);
    // SAFETY: the caller's contract (a live, non-disjoint image of this device); the output chain
    // is live.
    unsafe { device.raw().get_image_memory_requirements2(&info, &mut out) };
    memory_requirements(out.memory_requirements, &dedicated)
}

pub(crate) fn requirements_of_image(device: &Device, info: &vk::ImageCreateInfo<'_>) -> MemoryRequirements {
    let query = vk::DeviceImageMemoryRequirements::default().create_info(info);
    let mut dedicated = vk::MemoryDedicatedRequirements::default();
    let mut out = vk::MemoryRequirements2::default().push_next(&mut dedicated);
    // SAFETY: `info` describes an image the device supports (checked by the caller) and the output
    // chain points at live structs.
    unsafe { device.raw().get_device_image_memory_requirements(&query, &mut out) };
    let r = out.memory_requirements;
    memory_requirements(r, &dedicated)
}

/// Memory requirements of a buffer, asked without creating it. Callers pass a non-zero size and
/// usage bits of this device's API version.
pub(crate) fn buffer_requirements(
    device: &Device,
    size: u64,
    usage: vk::BufferUsageFlags,
) -> MemoryRequirements {
    let info =
        vk::BufferCreateInfo::default().size(size).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
    let query = vk::DeviceBufferMemoryRequirements::default().create_info(&info);
    let mut dedicated = vk::MemoryDedicatedRequirements::default();
    let mut out = vk::MemoryRequirements2::default().push_next(&mut dedicated);
    // SAFETY: a non-zero-sized buffer with valid usage bits; the output chain is live.
    unsafe { device.raw().get_device_buffer_memory_requirements(&query, &mut out) };
    let r = out.memory_requirements;
    memory_requirements(r, &dedicated)
}

fn tile_shape(device: &Device, format: Format, ty: vk::ImageType) -> Option<SparseTileShape> {
    let usage = vk::ImageUsageFlags::TRANSFER_DST | vk::ImageUsageFlags::SAMPLED;
    // SAFETY: valid physical device; the format/type/usage combination is only a query.
    let props = unsafe {
        device.instance().get_physical_device_sparse_image_format_properties(
            device.physical(),
            vk_format(format),
            ty,
            vk::SampleCountFlags::TYPE_1,
            usage,
            vk::ImageTiling::OPTIMAL,
        )
    };
    let p = props.iter().find(|p| p.aspect_mask.intersects(aspect(format)))?;
    let g = p.image_granularity;
    let mut tile_extent = [g.width, g.height, g.depth];
    // The granularity is in texels. Some drivers (lavapipe) give it in blocks for compressed
    // formats: a tile that is 64 KiB only when read as blocks was reported in blocks.
    let (bw, bh) = format.block_extent();
    let in_blocks = format.is_compressed()
        && format.region_bytes(g.width, g.height, g.depth) != 65536
        && format.region_bytes(g.width * bw, g.height * bh, g.depth) == 65536;
    if in_blocks {
        tile_extent = [g.width * bw, g.height * bh, g.depth];
    }
    Some(SparseTileShape {
        tile_extent,
        reported_in_blocks: in_blocks,
        single_miptail: p.flags.contains(vk::SparseImageFormatFlags::SINGLE_MIPTAIL),
        aligned_mip_size: p.flags.contains(vk::SparseImageFormatFlags::ALIGNED_MIP_SIZE),
        nonstandard_block_size: p.flags.contains(vk::SparseImageFormatFlags::NONSTANDARD_BLOCK_SIZE),
    })
}

/// Probes the mip tail of the largest sparse image of `dimension` that fits the device's limits,
/// starting from `start` texels a side.
fn sparse_probe(
    device: &Device,
    format: Format,
    dimension: ImageDimension,
    start: u32,
    limits: &Limits,
) -> Option<SparseImageProbe> {
    let mut side = start;
    while side >= 64 {
        let depth = if dimension == ImageDimension::D3 { side } else { 1 };
        let desc = ImageProbeDesc {
            dimension,
            width: side,
            height: side,
            depth,
            array_layers: 1,
            mip_levels: 32 - side.leading_zeros(),
            samples: 1,
            attachment: false,
        };
        let bytes = format.region_bytes(side, side, depth) * 8 / 7 + (1 << 20);
        let info = image_create_info(format, &desc, true);
        if bytes <= limits.sparse_address_space_size && image_supported(device, &info, Some(bytes)) {
            return Some(sparse_requirements(device, format, desc, &info));
        }
        side /= 2;
    }
    None
}

fn sparse_requirements(
    device: &Device,
    format: Format,
    desc: ImageProbeDesc,
    info: &vk::ImageCreateInfo<'_>,
) -> SparseImageProbe {
    let query = vk::DeviceImageMemoryRequirements::default().create_info(info);
    // SAFETY: the image description is supported (checked by the caller).
    let count = unsafe { device.raw().get_device_image_sparse_memory_requirements_len(&query) };
    let mut out = vec![vk::SparseImageMemoryRequirements2::default(); count];
    // SAFETY: `out` has exactly the length the driver reported.
    unsafe { device.raw().get_device_image_sparse_memory_requirements(&query, &mut out) };
    let wanted = aspect(format);
    let req = out
        .iter()
        .map(|r| r.memory_requirements)
        .find(|r| r.format_properties.aspect_mask.intersects(wanted))
        .unwrap_or_default();
    SparseImageProbe {
        desc,
        mip_tail_first_lod: req.image_mip_tail_first_lod,
        mip_tail_size: req.image_mip_tail_size,
        mip_tail_offset: req.image_mip_tail_offset,
        mip_tail_stride: req.image_mip_tail_stride,
        requirements: requirements_of_image(device, info),
    }
}

fn format_caps(device: &Device, format: Format, limits: &Limits, sparse: &SparseCaps) -> Option<FormatCaps> {
    // SAFETY: valid physical device.
    let props = unsafe {
        device.instance().get_physical_device_format_properties(device.physical(), vk_format(format))
    };
    let f = props.optimal_tiling_features;
    let sampled = f.contains(vk::FormatFeatureFlags::SAMPLED_IMAGE);
    let storage = f.contains(vk::FormatFeatureFlags::STORAGE_IMAGE);
    let attachment = f.intersects(
        vk::FormatFeatureFlags::COLOR_ATTACHMENT | vk::FormatFeatureFlags::DEPTH_STENCIL_ATTACHMENT,
    );
    if !sampled && !attachment {
        return None;
    }
    let image_probes = image_probe_descs(attachment)
        .into_iter()
        .filter_map(|desc| {
            let info = image_create_info(format, &desc, false);
            image_supported(device, &info, None)
                .then(|| ImageProbe { desc, requirements: requirements_of_image(device, &info) })
        })
        .collect();
    let sparse_ok = sampled && sparse.binding && !format.is_depth_stencil();
    let (sparse_2d, sparse_2d_probe) = if sparse_ok && sparse.residency_image_2d {
        let shape = tile_shape(device, format, vk::ImageType::TYPE_2D);
        let probe = shape.and_then(|_| sparse_probe(device, format, ImageDimension::D2, 16384, limits));
        (shape, probe)
    } else {
        (None, None)
    };
    let (sparse_3d, sparse_3d_probe) = if sparse_ok && sparse.residency_image_3d {
        let shape = tile_shape(device, format, vk::ImageType::TYPE_3D);
        let probe = shape.and_then(|_| sparse_probe(device, format, ImageDimension::D3, 512, limits));
        (shape, probe)
    } else {
        (None, None)
    };
    Some(FormatCaps {
        format,
        sampled,
        storage,
        attachment,
        sparse_2d,
        sparse_3d,
        sparse_2d_probe,
        sparse_3d_probe,
        image_probes,
    })
}

/// Captures the profile of `device`.
pub(crate) fn capture(device: &Device, instance_version: u32) -> DeviceProfile {
    let instance = device.instance();
    let pd = device.physical();
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut id = vk::PhysicalDeviceIDProperties::default();
    let mut m3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut m4 = vk::PhysicalDeviceMaintenance4Properties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default()
        .push_next(&mut driver)
        .push_next(&mut id)
        .push_next(&mut m3)
        .push_next(&mut m4);
    // SAFETY: valid physical device; the chain points at live structs of Vulkan 1.2/1.3 core.
    unsafe { instance.get_physical_device_properties2(pd, &mut props2) };
    let p = props2.properties;
    let l = p.limits;

    let features = device.features();
    let memory = memory_properties(instance, pd, features.memory_budget);

    let limits = Limits {
        buffer_image_granularity: l.buffer_image_granularity,
        min_uniform_buffer_offset_alignment: l.min_uniform_buffer_offset_alignment,
        min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
        min_texel_buffer_offset_alignment: l.min_texel_buffer_offset_alignment,
        non_coherent_atom_size: l.non_coherent_atom_size,
        max_memory_allocation_count: l.max_memory_allocation_count,
        max_memory_allocation_size: m3.max_memory_allocation_size,
        max_buffer_size: m4.max_buffer_size,
        sparse_address_space_size: l.sparse_address_space_size,
        max_image_dimension_2d: l.max_image_dimension2_d,
        max_image_dimension_3d: l.max_image_dimension3_d,
        max_image_array_layers: l.max_image_array_layers,
        optimal_buffer_copy_offset_alignment: l.optimal_buffer_copy_offset_alignment,
        optimal_buffer_copy_row_pitch_alignment: l.optimal_buffer_copy_row_pitch_alignment,
    };
    let sp = p.sparse_properties;
    let sparse_queue = device.sparse_queue();
    let sparse = SparseCaps {
        binding: features.sparse_binding,
        residency_buffer: features.sparse_residency_buffer,
        residency_image_2d: features.sparse_residency_image_2d,
        residency_image_3d: features.sparse_residency_image_3d,
        residency_aliased: features.sparse_residency_aliased,
        shader_resource_residency: features.shader_resource_residency,
        shader_resource_min_lod: features.shader_resource_min_lod,
        standard_2d_block_shape: sp.residency_standard2_d_block_shape == vk::TRUE,
        standard_2d_multisample_block_shape: sp.residency_standard2_d_multisample_block_shape == vk::TRUE,
        standard_3d_block_shape: sp.residency_standard3_d_block_shape == vk::TRUE,
        aligned_mip_size: sp.residency_aligned_mip_size == vk::TRUE,
        non_resident_strict: sp.residency_non_resident_strict == vk::TRUE,
        queue_family: sparse_queue.map(|q| q.family()),
        separate_queue_family: sparse_queue.is_some_and(|q| q.family() != device.universal_queue().family()),
    };
    // SAFETY: valid instance.
    let group_size = unsafe { instance.enumerate_physical_device_groups_len() }.unwrap_or(0);
    let mut groups = vec![vk::PhysicalDeviceGroupProperties::default(); group_size];
    // SAFETY: `groups` has the length the driver reported.
    let _ = unsafe { instance.enumerate_physical_device_groups(&mut groups) };
    let device_group_size = groups
        .iter()
        .find(|g| g.physical_devices_as_slice().contains(&pd))
        .map_or(1, |g| g.physical_device_count);

    let formats = Format::ALL
        .iter()
        .filter(|&&f| f != Format::Unknown)
        .filter_map(|&f| format_caps(device, f, &limits, &sparse));
    let formats = formats.collect();
    let buffer_probes = BufferProbeUsage::ALL
        .iter()
        .flat_map(|&usage| BUFFER_PROBE_SIZES.iter().map(move |&size| (usage, size)))
        .map(|(usage, size)| BufferProbe {
            usage,
            size,
            requirements: buffer_requirements(device, size, buffer_usage(usage)),
        })
        .collect();

    DeviceProfile {
        schema: PROFILE_SCHEMA,
        capture: CaptureInfo {
            tool: format!("residency {}", env!("CARGO_PKG_VERSION")),
            captured_at: now_rfc3339(),
            instance_version: version_string(instance_version),
        },
        identity: DeviceIdentity {
            name: device.name().to_owned(),
            vendor_id: p.vendor_id,
            device_id: p.device_id,
            device_type: match p.device_type {
                vk::PhysicalDeviceType::DISCRETE_GPU => DeviceType::DiscreteGpu,
                vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceType::IntegratedGpu,
                vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceType::VirtualGpu,
                vk::PhysicalDeviceType::CPU => DeviceType::Cpu,
                _ => DeviceType::Other,
            },
            api_version: version_string(p.api_version),
            driver_name: driver
                .driver_name_as_c_str()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            driver_info: driver
                .driver_info_as_c_str()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            device_uuid: id.device_uuid.iter().map(|b| format!("{b:02x}")).collect(),
        },
        memory,
        limits,
        sparse,
        extensions: Extensions { memory_budget: features.memory_budget, device_group_size },
        formats,
        buffer_probes,
    }
}

/// Memory heaps and types, with the heaps' budgets when VK_EXT_memory_budget is enabled.
pub(crate) fn memory_properties(
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
    with_budget: bool,
) -> MemoryProperties {
    let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let mut mem2 = vk::PhysicalDeviceMemoryProperties2::default();
    if with_budget {
        mem2 = mem2.push_next(&mut budget);
    }
    // SAFETY: valid physical device; the budget struct is chained only when the extension is on.
    unsafe { instance.get_physical_device_memory_properties2(pd, &mut mem2) };
    let mem = mem2.memory_properties;
    let heaps = mem.memory_heaps_as_slice().iter().enumerate().map(|(i, h)| MemoryHeap {
        size: h.size,
        device_local: h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
        multi_instance: h.flags.contains(vk::MemoryHeapFlags::MULTI_INSTANCE),
        budget: with_budget.then(|| budget.heap_budget[i]),
        usage: with_budget.then(|| budget.heap_usage[i]),
    });
    let types = mem.memory_types_as_slice().iter().map(|t| {
        let f = t.property_flags;
        MemoryType {
            heap_index: t.heap_index,
            flags: MemoryTypeFlags {
                device_local: f.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL),
                host_visible: f.contains(vk::MemoryPropertyFlags::HOST_VISIBLE),
                host_coherent: f.contains(vk::MemoryPropertyFlags::HOST_COHERENT),
                host_cached: f.contains(vk::MemoryPropertyFlags::HOST_CACHED),
                lazily_allocated: f.contains(vk::MemoryPropertyFlags::LAZILY_ALLOCATED),
                protected: f.contains(vk::MemoryPropertyFlags::PROTECTED),
            },
        }
    });
    MemoryProperties { heaps: heaps.collect(), types: types.collect() }
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil-from-days (proleptic Gregorian), after H. Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}
