//! `residency-bench sparse-capacity`: how much virtual size of sparse images the driver takes
//! before `vkCreateImage` refuses (issue #32's "≥ 1 TB virtual"). Creates unbound sparse 2D RGBA8
//! images of `--side` texels (a full mip chain unless `--no-mips`, `--layers` array layers) on
//! residency's device until the driver refuses one or `--max` are made, and reports how many were
//! made, the sum of their memory requirements (the virtual size), the first image's requirement
//! size and alignment, and `sparseAddressSpaceSize`. Nothing is bound; every image is destroyed.

use residency::vulkan::ash::vk;
use residency::vulkan::{DeviceSet, DeviceSetDesc};
use std::process::ExitCode;

/// Options of `sparse-capacity`.
#[derive(Debug)]
pub struct CapacityOptions {
    side: u32,
    mips: bool,
    layers: u32,
    max: u32,
}

/// Parses `sparse-capacity`'s options.
pub fn parse_options(args: &[String]) -> Result<CapacityOptions, String> {
    let mut o = CapacityOptions { side: 8192, mips: true, layers: 1, max: 8192 };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--side" => o.side = crate::positive(&mut it, "--side")?,
            "--layers" => o.layers = crate::positive(&mut it, "--layers")?,
            "--max" => o.max = crate::positive(&mut it, "--max")?,
            "--no-mips" => o.mips = false,
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    if !o.side.is_power_of_two() || o.side > 16384 {
        return Err("--side must be a power of two up to 16384".into());
    }
    Ok(o)
}

/// Runs the probe on device 0.
pub fn run(o: &CapacityOptions) -> ExitCode {
    let set = match DeviceSet::new(&DeviceSetDesc::default()) {
        Ok(set) => set,
        Err(e) => {
            eprintln!("residency-bench sparse-capacity needs a Vulkan device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let device = &set.devices()[0];
    if !device.features().sparse_residency_image_2d {
        eprintln!("{}: no sparse residency for 2D images", device.name());
        return ExitCode::FAILURE;
    }
    let raw = device.raw();
    let mips = if o.mips { o.side.ilog2() + 1 } else { 1 };
    // The image must be one the device can make: within its limits and the format's sparse
    // image properties (checked here, so that vkCreateImage sees only valid input).
    let limits = device.limits();
    let flags = vk::ImageCreateFlags::SPARSE_BINDING | vk::ImageCreateFlags::SPARSE_RESIDENCY;
    let usage = vk::ImageUsageFlags::SAMPLED | vk::ImageUsageFlags::TRANSFER_DST;
    // SAFETY: the device's own instance and physical device; plain enum and flag arguments.
    let properties = unsafe {
        device.instance().get_physical_device_image_format_properties(
            device.physical(),
            vk::Format::R8G8B8A8_UNORM,
            vk::ImageType::TYPE_2D,
            vk::ImageTiling::OPTIMAL,
            usage,
            flags,
        )
    };
    let fits = properties.is_ok_and(|p| {
        o.side <= p.max_extent.width
            && o.side <= p.max_extent.height
            && mips <= p.max_mip_levels
            && o.layers <= p.max_array_layers
    });
    if !fits || o.side > limits.max_image_dimension2_d || o.layers > limits.max_image_array_layers {
        eprintln!("{}: no sparse RGBA8 image of {}² × {} layers", device.name(), o.side, o.layers);
        return ExitCode::FAILURE;
    }
    let info = vk::ImageCreateInfo::default()
        .flags(flags)
        .image_type(vk::ImageType::TYPE_2D)
        .format(vk::Format::R8G8B8A8_UNORM)
        .extent(vk::Extent3D { width: o.side, height: o.side, depth: 1 })
        .mip_levels(mips)
        .array_layers(o.layers)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(vk::ImageTiling::OPTIMAL)
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(vk::ImageLayout::UNDEFINED);
    let (mut images, mut total, mut first) = (Vec::new(), 0u64, None);
    let mut refused = None;
    while images.len() < o.max as usize {
        // SAFETY: valid device with sparseBinding and sparseResidencyImage2D enabled (checked
        // above); extent, mips and layers within the device's limits and the format's sparse
        // image properties (checked above); destroyed below.
        match unsafe { raw.create_image(&info, None) } {
            Ok(image) => {
                // SAFETY: just created on this device.
                let r = unsafe { raw.get_image_memory_requirements(image) };
                first.get_or_insert((r.size, r.alignment));
                total += r.size;
                images.push(image);
            }
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let made = images.len();
    for image in images.drain(..).rev() {
        // SAFETY: made above, never bound or used.
        unsafe { raw.destroy_image(image, None) };
    }
    let limit = device.limits().sparse_address_space_size;
    let (size, alignment) = first.unwrap_or((0, 0));
    println!(
        "{{\"device\": \"{}\", \"side\": {}, \"mips\": {mips}, \"layers\": {}, \"images\": {}, \"refused\": {}, \"virtual_bytes\": {total}, \"image_bytes\": {size}, \"image_alignment\": {alignment}, \"sparse_address_space_size\": {limit}, \"virtual_over_address_space\": {:.4}}}",
        device.name(),
        o.side,
        o.layers,
        made,
        refused.map_or("null".to_owned(), |e| format!("\"{e}\"")),
        total as f64 / limit.max(1) as f64,
    );
    ExitCode::SUCCESS
}
