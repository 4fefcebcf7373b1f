//! The Vulkan instance: the loader loaded at run time, the validation layer and the debug messenger.

use crate::error::{Result, VkResultExt, VulkanError};
use crate::validation::{messenger_create_info, ValidationLog, ValidationMode};
use ash::vk;
use std::ffi::CStr;
use std::sync::Arc;

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// How to create the instance.
#[derive(Clone, Debug)]
pub struct InstanceDesc {
    /// Which validation to enable. Default: from `RESIDENCY_VALIDATION` (off when unset).
    pub validation: ValidationMode,
    /// Whether a missing validation layer is an error (otherwise a warning and validation off).
    /// Default: true when `RESIDENCY_REQUIRE_VALIDATION=1`.
    pub require_validation: bool,
}

impl Default for InstanceDesc {
    fn default() -> Self {
        InstanceDesc {
            validation: ValidationMode::from_env(),
            require_validation: std::env::var("RESIDENCY_REQUIRE_VALIDATION").is_ok_and(|v| v == "1"),
        }
    }
}

impl InstanceDesc {
    /// Sets the validation mode.
    pub fn with_validation(mut self, validation: ValidationMode) -> Self {
        self.validation = validation;
        self
    }

    /// Sets whether a missing validation layer is an error.
    pub fn with_require_validation(mut self, require: bool) -> Self {
        self.require_validation = require;
        self
    }
}

/// The instance and what must outlive every device created from it.
pub(crate) struct InstanceShared {
    #[expect(dead_code, reason = "keeps the loader library loaded for as long as the instance lives")]
    entry: ash::Entry,
    pub(crate) instance: ash::Instance,
    pub(crate) debug_utils: Option<ash::ext::debug_utils::Instance>,
    messenger: vk::DebugUtilsMessengerEXT,
    pub(crate) validation: ValidationMode,
    pub(crate) instance_version: u32,
    /// Shared so its address, handed to the messenger callback, never moves.
    pub(crate) log: Arc<ValidationLog>,
    /// Whether residency created the instance (and destroys it); an adopted one belongs to the
    /// application.
    owned: bool,
}

impl std::fmt::Debug for InstanceShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstanceShared")
            .field("validation", &self.validation)
            .field("instance_version", &version_string(self.instance_version))
            .finish_non_exhaustive()
    }
}

impl InstanceShared {
    pub(crate) fn new(desc: &InstanceDesc) -> Result<Arc<Self>> {
        // SAFETY: loading the Vulkan loader runs its initialisation code; we trust the system's
        // libvulkan as every Vulkan application does.
        let entry = unsafe { ash::Entry::load() }
            .map_err(|e| VulkanError::LoaderMissing { reason: e.to_string() })?;
        // SAFETY: entry is a loaded Vulkan entry point.
        let instance_version =
            unsafe { entry.try_enumerate_instance_version() }.during("vkEnumerateInstanceVersion")?;
        let instance_version = instance_version.unwrap_or(vk::API_VERSION_1_0);
        if instance_version < vk::API_VERSION_1_3 {
            return Err(VulkanError::Unsupported {
                device: "Vulkan loader".into(),
                reason: format!("instance version {} < 1.3", version_string(instance_version)),
            });
        }

        // SAFETY: entry is loaded.
        let layers = unsafe { entry.enumerate_instance_layer_properties() }
            .during("vkEnumerateInstanceLayerProperties")?;
        let has_layer = layers.iter().any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER));
        let mut validation = desc.validation;
        if validation != ValidationMode::Off && !has_layer {
            if desc.require_validation {
                return Err(VulkanError::ValidationLayerMissing);
            }
            tracing::warn!("{VALIDATION_LAYER:?} is not installed: running without validation");
            validation = ValidationMode::Off;
        }

        // SAFETY: entry is loaded.
        let extensions = unsafe { entry.enumerate_instance_extension_properties(None) }
            .during("vkEnumerateInstanceExtensionProperties")?;
        let has_debug_utils =
            extensions.iter().any(|e| e.extension_name_as_c_str() == Ok(ash::ext::debug_utils::NAME));

        let mut layer_names = Vec::new();
        if validation != ValidationMode::Off {
            layer_names.push(VALIDATION_LAYER.as_ptr());
        }
        let mut extension_names = Vec::new();
        if has_debug_utils {
            extension_names.push(ash::ext::debug_utils::NAME.as_ptr());
        }
        if validation != ValidationMode::Off {
            extension_names.push(ash::ext::validation_features::NAME.as_ptr());
        }

        let log = Arc::new(ValidationLog::new(validation));
        let app = vk::ApplicationInfo::default()
            .application_name(c"residency")
            .engine_name(c"residency")
            .engine_version(vk::make_api_version(0, 0, 1, 0))
            .api_version(vk::API_VERSION_1_3);
        let enabled_features: &[vk::ValidationFeatureEnableEXT] = match validation {
            ValidationMode::Synchronization => &[vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION],
            ValidationMode::GpuAssisted => &[
                vk::ValidationFeatureEnableEXT::GPU_ASSISTED,
                vk::ValidationFeatureEnableEXT::GPU_ASSISTED_RESERVE_BINDING_SLOT,
            ],
            ValidationMode::Off | ValidationMode::Standard => &[],
        };
        let mut validation_features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(enabled_features);
        let mut messenger_info = messenger_create_info(&log);
        let mut create_info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layer_names)
            .enabled_extension_names(&extension_names);
        if has_debug_utils {
            create_info = create_info.push_next(&mut messenger_info);
        }
        if !enabled_features.is_empty() {
            create_info = create_info.push_next(&mut validation_features);
        }
        // SAFETY: create_info and everything it points at live until the call returns; the
        // messenger's user data (`log`) is kept alive by the returned InstanceShared.
        let instance = unsafe { entry.create_instance(&create_info, None) }.during("vkCreateInstance")?;

        let (debug_utils, messenger) = if has_debug_utils {
            let debug_utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let info = messenger_create_info(&log);
            // SAFETY: valid instance with VK_EXT_debug_utils enabled; `log` outlives the messenger
            // (destroyed in Drop before `log` is released).
            match unsafe { debug_utils.create_debug_utils_messenger(&info, None) } {
                Ok(messenger) => (Some(debug_utils), messenger),
                Err(result) => {
                    // SAFETY: the instance has no child objects yet.
                    unsafe { instance.destroy_instance(None) };
                    return Err(VulkanError::from_vk("vkCreateDebugUtilsMessengerEXT", result));
                }
            }
        } else {
            (None, vk::DebugUtilsMessengerEXT::null())
        };

        tracing::debug!(
            version = %version_string(instance_version),
            ?validation,
            "Vulkan instance created"
        );
        Ok(Arc::new(InstanceShared {
            entry,
            instance,
            debug_utils,
            messenger,
            validation,
            instance_version,
            log,
            owned: true,
        }))
    }

    /// Wraps an application's instance without taking it over: residency never destroys it.
    /// With `debug_utils` (the application enabled `VK_EXT_debug_utils`) residency adds a
    /// messenger of its own, so its validation log sees the layer's messages.
    ///
    /// # Safety
    /// `instance` was created from `entry`, is valid, and outlives everything residency makes
    /// from it; with `debug_utils`, the extension is enabled on it.
    pub(crate) unsafe fn adopt(
        entry: ash::Entry,
        instance: ash::Instance,
        debug_utils: bool,
    ) -> Result<Arc<Self>> {
        // SAFETY: entry is a loaded Vulkan entry point.
        let instance_version = unsafe { entry.try_enumerate_instance_version() }
            .during("vkEnumerateInstanceVersion")?
            .unwrap_or(vk::API_VERSION_1_0);
        let log = Arc::new(ValidationLog::default());
        let (debug_utils, messenger) = if debug_utils {
            let utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let info = messenger_create_info(&log);
            // SAFETY: the caller enabled VK_EXT_debug_utils on this valid instance; `log` outlives
            // the messenger (destroyed in Drop before `log` is released).
            let messenger = unsafe { utils.create_debug_utils_messenger(&info, None) }
                .during("vkCreateDebugUtilsMessengerEXT")?;
            (Some(utils), messenger)
        } else {
            (None, vk::DebugUtilsMessengerEXT::null())
        };
        Ok(Arc::new(InstanceShared {
            entry,
            instance,
            debug_utils,
            messenger,
            validation: ValidationMode::Off,
            instance_version,
            log,
            owned: false,
        }))
    }
}

impl Drop for InstanceShared {
    fn drop(&mut self) {
        // SAFETY: every device holds an Arc to this struct, so all devices are destroyed; the
        // messenger was created from this instance and is destroyed before it.
        unsafe {
            if let Some(debug_utils) = &self.debug_utils {
                debug_utils.destroy_debug_utils_messenger(self.messenger, None);
            }
            if self.owned {
                self.instance.destroy_instance(None);
            }
        }
    }
}

/// `major.minor.patch` of a packed Vulkan version.
pub fn version_string(version: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(version),
        vk::api_version_minor(version),
        vk::api_version_patch(version)
    )
}
