//! A renderer's own instance and device, made the way an application makes them (for the tests
//! that adopt them: adopt.rs, misuse_own_frame.rs).
#![allow(dead_code, reason = "each test binary uses a part")]

use residency_vulkan::ash::{self, vk};
use residency_vulkan::EnabledFeatures;

/// The application's side: an instance with the validation layer (synchronization validation)
/// and VK_EXT_debug_utils, a device on the first physical device with one queue family that
/// does graphics, compute, transfer and sparse binding.
pub struct App {
    pub entry: ash::Entry,
    pub instance: ash::Instance,
    pub physical: vk::PhysicalDevice,
    pub device: ash::Device,
    pub family: u32,
    pub features: EnabledFeatures,
}

pub fn app() -> Option<App> {
    // SAFETY: loading the system's Vulkan loader, as every Vulkan application does.
    let entry = match unsafe { ash::Entry::load() } {
        Ok(entry) => entry,
        Err(e) => {
            assert!(!residency_vulkan::testing::gpu_required(), "no Vulkan loader: {e}");
            eprintln!("\n**** SKIPPED: no Vulkan loader ****\n");
            return None;
        }
    };
    let layer = c"VK_LAYER_KHRONOS_validation";
    // SAFETY: entry is loaded.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap();
    let has_layer = layers.iter().any(|l| l.layer_name_as_c_str() == Ok(layer));
    assert!(has_layer || !residency_vulkan::testing::gpu_required(), "the validation layer is required");
    let layer_names: Vec<*const std::ffi::c_char> = if has_layer { vec![layer.as_ptr()] } else { Vec::new() };
    let mut extension_names = vec![ash::ext::debug_utils::NAME.as_ptr()];
    if has_layer {
        extension_names.push(ash::ext::validation_features::NAME.as_ptr());
    }
    let app = vk::ApplicationInfo::default().application_name(c"a renderer").api_version(vk::API_VERSION_1_3);
    let sync = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
    let mut validation = vk::ValidationFeaturesEXT::default().enabled_validation_features(&sync);
    let mut info = vk::InstanceCreateInfo::default()
        .application_info(&app)
        .enabled_layer_names(&layer_names)
        .enabled_extension_names(&extension_names);
    if has_layer {
        info = info.push_next(&mut validation);
    }
    // SAFETY: the create info and everything it points at live until the call returns.
    let instance = unsafe { entry.create_instance(&info, None) }.unwrap();
    // SAFETY: valid instance.
    let physical = unsafe { instance.enumerate_physical_devices() }.unwrap()[0];
    // SAFETY: valid physical device of this instance.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
    let wanted = vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER;
    let family =
        families.iter().position(|f| f.queue_flags.contains(wanted)).expect("a universal family") as u32;
    let sparse = families[family as usize].queue_flags.contains(vk::QueueFlags::SPARSE_BINDING);
    // SAFETY: valid physical device.
    let supported = unsafe { instance.get_physical_device_features(physical) };
    let sparse = sparse
        && supported.sparse_binding == vk::TRUE
        && supported.sparse_residency_image2_d == vk::TRUE
        && supported.shader_resource_residency == vk::TRUE;
    let enable = vk::PhysicalDeviceFeatures::default()
        .sparse_binding(sparse)
        .sparse_residency_image2_d(sparse)
        .shader_resource_residency(sparse);
    let mut enable13 =
        vk::PhysicalDeviceVulkan13Features::default().synchronization2(true).maintenance4(true);
    let mut enable12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
    let mut enable2 = vk::PhysicalDeviceFeatures2::default()
        .features(enable)
        .push_next(&mut enable12)
        .push_next(&mut enable13);
    let priorities = [1.0f32];
    let queues =
        [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&priorities)];
    let info = vk::DeviceCreateInfo::default().queue_create_infos(&queues).push_next(&mut enable2);
    // SAFETY: the create info lives until the call returns; every feature enabled is supported.
    let device = unsafe { instance.create_device(physical, &info, None) }.unwrap();
    let features = EnabledFeatures {
        sparse_binding: sparse,
        sparse_residency_image_2d: sparse,
        shader_resource_residency: sparse,
        timeline_semaphore: true,
        ..EnabledFeatures::default()
    };
    Some(App { entry, instance, physical, device, family, features })
}
