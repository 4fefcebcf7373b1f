//! Opening one Vulkan device for both wgpu and residency.
//!
//! wgpu creates the instance (with the validation layer and synchronization validation when
//! asked) and exposes the adapter; the bridge creates the `VkDevice` itself with ash, with what
//! wgpu asks for plus what residency needs (Vulkan 1.3's `synchronization2` and `maintenance4`,
//! timeline semaphores, the sparse features and `fragmentStoresAndAtomics` where the adapter has
//! them), hands it to wgpu-hal (`Adapter::device_from_raw`, wgpu not owning it) and to residency
//! ([`DeviceSet::adopt`]). The device is destroyed by the bridge's [`Keeper`] once wgpu's device
//! and the bridge are both gone and no residency object holds the device any more.

use crate::{block_on, OpenError, Result};
use ash::vk;
use residency_vulkan::{Device, DeviceSet, EnabledFeatures, ExternalDevice, ValidationLog, ValidationMode};
use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use wgpu::hal::api::Vulkan;

/// Devices the bridge left alive at teardown because residency objects still held them (over the
/// whole process): the bridge never destroys a `VkDevice` that residency may still use. A test
/// asserts it stays 0.
pub static DEVICES_LEFT_ALIVE: AtomicU64 = AtomicU64::new(0);

/// How to open the bridge.
#[derive(Clone, Debug)]
pub struct BridgeDesc {
    /// Which Vulkan adapter, in wgpu's enumeration order (default 0).
    pub adapter: usize,
    /// The validation layer: any mode but `Off` turns on wgpu's `InstanceFlags::VALIDATION`,
    /// under which wgpu enables the Khronos layer with synchronization validation, and the
    /// bridge adds `VK_EXT_debug_utils`; residency's
    /// messenger on the same instance counts every message, wgpu's calls and residency's alike.
    /// Default: from `RESIDENCY_VALIDATION`.
    pub validation: ValidationMode,
    /// Whether a missing validation layer is an error. Default: `RESIDENCY_REQUIRE_VALIDATION=1`.
    pub require_validation: bool,
    /// Whether to enable sparse residency (the hardware path) where the adapter has it (default
    /// true). With false the device has no sparse features and only the software path runs.
    pub sparse: bool,
    /// The wgpu features to enable (each must be in the adapter's `features()`).
    pub features: wgpu::Features,
    /// The wgpu limits (default: the adapter's own).
    pub limits: Option<wgpu::Limits>,
}

impl Default for BridgeDesc {
    fn default() -> Self {
        BridgeDesc {
            adapter: 0,
            validation: ValidationMode::from_env(),
            require_validation: std::env::var("RESIDENCY_REQUIRE_VALIDATION").is_ok_and(|v| v == "1"),
            sparse: true,
            features: wgpu::Features::empty(),
            limits: None,
        }
    }
}

impl BridgeDesc {
    /// Sets the validation mode.
    pub fn with_validation(mut self, validation: ValidationMode) -> Self {
        self.validation = validation;
        self
    }

    /// Sets whether sparse residency is enabled where the adapter has it.
    pub fn with_sparse(mut self, sparse: bool) -> Self {
        self.sparse = sparse;
        self
    }

    /// Sets the wgpu features.
    pub fn with_features(mut self, features: wgpu::Features) -> Self {
        self.features = features;
        self
    }
}

/// Which residency path the device can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathSupport {
    /// Sparse residency: the hardware path and the software path.
    Hardware,
    /// The software path only (indirection + atlas), and why.
    SoftwareOnly(SparseLack),
}

/// Why the hardware path is not available.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SparseLack {
    /// [`BridgeDesc::sparse`] was false.
    #[error("sparse residency was not asked for")]
    NotRequested,
    /// The adapter lacks these (Vulkan feature names, `SPARSE_BINDING` queue).
    #[error("the adapter lacks {}", .0.join(", "))]
    Missing(Vec<&'static str>),
}

/// How residency's queue relates to wgpu's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueSharing {
    /// Residency submits to a queue of its own (index 1 of wgpu's family).
    Separate,
    /// The family has one queue, so residency and wgpu submit to the same `VkQueue`
    /// ([`open_sharing_queue`]'s contract).
    Shared,
}

/// What must outlive both wgpu's device and residency's, and destroys the `VkDevice` after both.
pub(crate) struct Keeper {
    raw: ash::Device,
    /// Residency's device, once adopted.
    device: OnceLock<Arc<Device>>,
    /// Keeps wgpu's `VkInstance` (and so residency's messenger on it) alive past the device.
    instance: Option<wgpu::Instance>,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper").finish_non_exhaustive()
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        let instance = self.instance.take();
        if let Some(device) = self.device.take() {
            if Arc::strong_count(&device) > 1 {
                // Residency objects still hold the device: destroying it would free what they
                // use. Leave it (and the instance) alive and count it.
                DEVICES_LEFT_ALIVE.fetch_add(1, Ordering::Relaxed);
                std::mem::forget(device);
                std::mem::forget(instance);
                return;
            }
            // Residency's teardown of the adopted device (its own objects, bounded waits).
            drop(device);
        }
        // SAFETY: wgpu-hal's device is gone (this runs from its drop callback or after it), no
        // residency object holds the device (checked above), so nothing uses the device any more;
        // it was created by `open` and is destroyed once, here.
        unsafe { self.raw.destroy_device(None) };
        drop(instance);
    }
}

/// A wgpu device and queue, and residency's device on the same `VkDevice`.
///
/// Drop order does not matter for safety: the `VkDevice` is destroyed only once wgpu's device
/// (every wgpu object), the bridge and every residency object of the device are gone; a residency
/// object still alive when the rest is dropped leaves the device alive ([`DEVICES_LEFT_ALIVE`]).
pub struct Bridge {
    // Drop order: the queue (in `Drop`), wgpu's device, residency's set, then the keeper.
    queue: ManuallyDrop<wgpu::Queue>,
    device: wgpu::Device,
    adapter: wgpu::Adapter,
    instance: wgpu::Instance,
    set: DeviceSet,
    residency: Arc<Device>,
    sharing: QueueSharing,
    path: PathSupport,
    /// Held across a staged signal and the submission that consumes it.
    submit_lock: Mutex<()>,
    _keeper: Arc<Keeper>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("adapter", &self.adapter.get_info().name)
            .field("sharing", &self.sharing)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // wgpu's queue waits for idle when its last handle drops (`vkQueueWaitIdle`), a use of
        // a shared queue: under residency's lock. No residency call runs on this thread now, so
        // the lock is not re-entered.
        let guard = match self.sharing {
            QueueSharing::Shared => self.residency.universal_queue().lock().ok(),
            QueueSharing::Separate => None,
        };
        // SAFETY: dropped once, here; the field is not used after.
        unsafe { ManuallyDrop::drop(&mut self.queue) };
        drop(guard);
    }
}

impl Bridge {
    /// wgpu's device.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// wgpu's adapter.
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.adapter
    }

    /// wgpu's instance (Vulkan only).
    pub fn instance(&self) -> &wgpu::Instance {
        &self.instance
    }

    /// Residency's device (the same `VkDevice`).
    pub fn residency(&self) -> &Arc<Device> {
        &self.residency
    }

    /// Whether residency shares wgpu's queue.
    pub fn queue_sharing(&self) -> QueueSharing {
        self.sharing
    }

    /// Which residency path the device can run.
    pub fn path(&self) -> &PathSupport {
        &self.path
    }

    /// Residency's validation log: every message of the layer on this instance, from wgpu's
    /// calls and residency's.
    pub fn validation_log(&self) -> &ValidationLog {
        self.set.validation_log()
    }

    /// Submits wgpu command buffers, under residency's queue lock where the queue is shared.
    pub fn submit<I: IntoIterator<Item = wgpu::CommandBuffer>>(
        &self,
        buffers: I,
    ) -> Result<wgpu::SubmissionIndex> {
        let _guard = self.submit_guard()?;
        let _queue_guard = match self.sharing {
            QueueSharing::Shared => Some(self.residency.universal_queue().lock()?),
            QueueSharing::Separate => None,
        };
        Ok(self.queue.submit(buffers))
    }

    /// Writes `data` to `buffer` at `offset` at the next submission ([`wgpu::Queue::write_buffer`]:
    /// it only stages, it does not submit).
    pub fn write_buffer(&self, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
        self.queue.write_buffer(buffer, offset, data)
    }

    /// Writes `data` to a texture at the next submission ([`wgpu::Queue::write_texture`]: it
    /// only stages, it does not submit).
    pub fn write_texture(
        &self,
        texture: wgpu::TexelCopyTextureInfo<'_>,
        data: &[u8],
        layout: wgpu::TexelCopyBufferLayout,
        size: wgpu::Extent3d,
    ) {
        self.queue.write_texture(texture, data, layout, size)
    }

    pub(crate) fn queue_ref(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// The bridge's submission lock; a poisoned one is taken as it is (it guards no data).
    pub(crate) fn submit_guard(&self) -> Result<std::sync::MutexGuard<'_, ()>> {
        Ok(self.submit_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// wgpu's queue.
    ///
    /// # Safety
    /// Where the queue is [`QueueSharing::Shared`], no call on it or on a wgpu object that
    /// submits or waits on the queue (`Queue::submit`, `Queue::on_submitted_work_done`,
    /// `Buffer::map_async`, `Buffer::destroy`, dropping the last `Queue`) may run while a
    /// residency call on this device runs on another thread; [`Bridge::submit`] is the safe way
    /// to submit. Where it is `Separate` nothing more is asked.
    pub unsafe fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }
}

/// Opens the bridge where residency gets a queue of its own (the adapter's universal family has
/// two queues or more); [`OpenError::OneQueue`] otherwise (use [`open_sharing_queue`]).
pub fn open(desc: &BridgeDesc) -> Result<Bridge> {
    open_with(desc, false)
}

/// Opens the bridge, sharing wgpu's queue with residency when the family has only one (as on
/// lavapipe); with more it is [`open`].
///
/// # Safety
/// Where the bridge reports [`QueueSharing::Shared`], wgpu work that submits to or waits on the
/// queue runs only through [`Bridge::submit`], or never while a residency call on the device runs
/// on another thread ([`Bridge::queue`]'s contract).
pub unsafe fn open_sharing_queue(desc: &BridgeDesc) -> Result<Bridge> {
    open_with(desc, true)
}

/// What residency needs of the adapter, beyond what wgpu asks for.
struct Support {
    sparse: std::result::Result<(), SparseLack>,
    fragment_stores: bool,
    min_lod: bool,
}

fn check_support(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    family: &vk::QueueFamilyProperties,
    want_sparse: bool,
) -> Result<Support> {
    // SAFETY: valid physical device of this instance.
    let props = unsafe { instance.get_physical_device_properties(physical) };
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12).push_next(&mut f13);
    // SAFETY: valid physical device; the chain lives until the call returns.
    unsafe { instance.get_physical_device_features2(physical, &mut f2) };
    let core = f2.features;
    let mut missing = Vec::new();
    if props.api_version < vk::API_VERSION_1_3 {
        missing.push("Vulkan 1.3");
    }
    if f12.timeline_semaphore != vk::TRUE {
        missing.push("timelineSemaphore");
    }
    if f13.synchronization2 != vk::TRUE {
        missing.push("synchronization2");
    }
    if f13.maintenance4 != vk::TRUE {
        missing.push("maintenance4");
    }
    if !missing.is_empty() {
        return Err(OpenError::Lacks(missing));
    }
    let sparse = if !want_sparse {
        Err(SparseLack::NotRequested)
    } else {
        let mut lacks = Vec::new();
        for (have, name) in [
            (core.sparse_binding, "sparseBinding"),
            (core.sparse_residency_image2_d, "sparseResidencyImage2D"),
            (core.shader_resource_residency, "shaderResourceResidency"),
        ] {
            if have != vk::TRUE {
                lacks.push(name);
            }
        }
        if !family.queue_flags.contains(vk::QueueFlags::SPARSE_BINDING) {
            lacks.push("SPARSE_BINDING on the universal queue family");
        }
        if lacks.is_empty() {
            Ok(())
        } else {
            Err(SparseLack::Missing(lacks))
        }
    };
    Ok(Support {
        sparse,
        fragment_stores: core.fragment_stores_and_atomics == vk::TRUE,
        min_lod: core.shader_resource_min_lod == vk::TRUE,
    })
}

/// Sets the residency features in wgpu's own feature structures of the chain (a second copy of a
/// structure would be invalid) and reports whether a `synchronization2` structure is there.
///
/// # Safety
/// `info.p_next` is a valid chain of Vulkan structures that this call may write.
unsafe fn enable_in_chain(info: &vk::DeviceCreateInfo<'_>) -> bool {
    let mut has_sync2 = false;
    let mut next = info.p_next as *mut vk::BaseOutStructure<'_>;
    while !next.is_null() {
        // SAFETY: every element of a valid chain starts with sType and pNext.
        let s_type = unsafe { (*next).s_type };
        // SAFETY: the sType names the structure behind the pointer.
        unsafe {
            match s_type {
                vk::StructureType::PHYSICAL_DEVICE_MAINTENANCE_4_FEATURES => {
                    (*next.cast::<vk::PhysicalDeviceMaintenance4Features<'_>>()).maintenance4 = vk::TRUE;
                }
                vk::StructureType::PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES => {
                    (*next.cast::<vk::PhysicalDeviceTimelineSemaphoreFeatures<'_>>()).timeline_semaphore =
                        vk::TRUE;
                }
                vk::StructureType::PHYSICAL_DEVICE_SYNCHRONIZATION_2_FEATURES => {
                    (*next.cast::<vk::PhysicalDeviceSynchronization2Features<'_>>()).synchronization2 =
                        vk::TRUE;
                    has_sync2 = true;
                }
                _ => {}
            }
        }
        // SAFETY: as above.
        next = unsafe { (*next).p_next };
    }
    has_sync2
}

fn validation_layer_present(entry: &ash::Entry) -> bool {
    // SAFETY: a loaded entry point.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
    layers.iter().any(|l| l.layer_name_as_c_str() == Ok(c"VK_LAYER_KHRONOS_validation"))
}

fn open_with(desc: &BridgeDesc, allow_shared: bool) -> Result<Bridge> {
    let validate = desc.validation != ValidationMode::Off;
    let flags = if validate { wgpu::InstanceFlags::VALIDATION } else { wgpu::InstanceFlags::empty() };
    let hal_desc = wgpu::hal::InstanceDescriptor {
        name: "residency-wgpu",
        flags,
        memory_budget_thresholds: Default::default(),
        backend_options: Default::default(),
        telemetry: None,
        display: None,
    };
    // VK_EXT_debug_utils, without which no messenger (wgpu's or residency's) hears the layer.
    // wgpu enables it only with `InstanceFlags::DEBUG`, which also writes debug information into
    // its SPIR-V (a source language older layers reject), so the bridge adds the extension.
    let add_debug_utils = Box::new(move |args: wgpu::hal::vulkan::CreateInstanceCallbackArgs<'_, '_, '_>| {
        // SAFETY: a loaded entry point.
        let available =
            unsafe { args.entry.enumerate_instance_extension_properties(None) }.unwrap_or_default();
        let name = ash::ext::debug_utils::NAME;
        let has = available.iter().any(|e| e.extension_name_as_c_str() == Ok(name));
        if validate && has && !args.extensions.contains(&name) {
            args.extensions.push(name);
        }
    });
    // SAFETY: the callback only adds an extension the loader reports.
    let hal_instance =
        unsafe { wgpu::hal::vulkan::Instance::init_with_callback(&hal_desc, Some(add_debug_utils)) }
            .map_err(|e| OpenError::Instance(e.to_string()))?;
    // SAFETY: a Vulkan instance wgpu-hal just created, handed over whole.
    let instance = unsafe { wgpu::Instance::from_hal::<Vulkan>(hal_instance) };
    let adapters = block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
    let count = adapters.len();
    let adapter =
        adapters.into_iter().nth(desc.adapter).ok_or(OpenError::NoAdapter { index: desc.adapter, count })?;
    if !adapter.features().contains(desc.features) {
        return Err(OpenError::Features(desc.features - adapter.features()));
    }
    let limits = desc.limits.clone().unwrap_or_else(|| adapter.limits());
    // SAFETY: the hal adapter is only read here and dropped before the adapter.
    let hal = unsafe { adapter.as_hal::<Vulkan>() }.ok_or(OpenError::NotVulkan)?;
    let shared = hal.shared_instance();
    let entry = shared.entry().clone();
    let ash_instance = shared.raw_instance().clone();
    if validate && desc.require_validation && !validation_layer_present(&entry) {
        return Err(OpenError::NoValidationLayer);
    }
    let debug_utils = shared.extensions().contains(&ash::ext::debug_utils::NAME);
    if validate && desc.require_validation && !debug_utils {
        return Err(OpenError::NoValidationLayer);
    }
    let physical = hal.raw_physical_device();

    // The universal family: the first with graphics, compute and transfer (wgpu's queue is its
    // queue 0; residency's is queue 1 where there is one).
    // SAFETY: valid physical device.
    let families = unsafe { ash_instance.get_physical_device_queue_family_properties(physical) };
    let wanted = vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER;
    let family = families
        .iter()
        .position(|f| f.queue_flags.contains(wanted) && f.queue_count > 0)
        .ok_or(OpenError::Lacks(vec!["a graphics + compute + transfer queue family"]))?;
    let family_props = families[family];
    let family = family as u32;
    let sharing = if family_props.queue_count >= 2 { QueueSharing::Separate } else { QueueSharing::Shared };
    if sharing == QueueSharing::Shared && !allow_shared {
        return Err(OpenError::OneQueue);
    }
    let support = check_support(&ash_instance, physical, &family_props, desc.sparse)?;
    let sparse = support.sparse.is_ok();

    // wgpu's extensions and feature structures, plus residency's.
    let features = desc.features;
    let mut extensions: Vec<&'static CStr> = hal.required_device_extensions(features);
    let mut wgpu_features = hal.physical_device_features(&extensions, features);
    // SAFETY: valid physical device.
    let available = unsafe { ash_instance.enumerate_device_extension_properties(physical) }
        .map_err(|e| OpenError::Vulkan(e, "vkEnumerateDeviceExtensionProperties"))?;
    let has_ext = |name: &CStr| available.iter().any(|e| e.extension_name_as_c_str() == Ok(name));
    let memory_budget = has_ext(ash::ext::memory_budget::NAME);
    if memory_budget && !extensions.contains(&ash::ext::memory_budget::NAME) {
        extensions.push(ash::ext::memory_budget::NAME);
    }
    let mut core = wgpu_features.get_core();
    if sparse {
        core.sparse_binding = vk::TRUE;
        core.sparse_residency_image2_d = vk::TRUE;
        core.shader_resource_residency = vk::TRUE;
    }
    if support.fragment_stores {
        core.fragment_stores_and_atomics = vk::TRUE;
    }
    if support.min_lod {
        core.shader_resource_min_lod = vk::TRUE;
    }
    let priorities = [1.0f32, 1.0];
    let queue_count = if sharing == QueueSharing::Separate { 2 } else { 1 };
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(family)
        .queue_priorities(&priorities[..queue_count])];
    let names: Vec<*const std::ffi::c_char> = extensions.iter().map(|e| e.as_ptr()).collect();
    let mut sync2 = vk::PhysicalDeviceSynchronization2Features::default().synchronization2(true);
    let info = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&names);
    let info = wgpu_features.add_to_device_create(info).enabled_features(&core);
    // SAFETY: the chain is wgpu's feature structures, alive and exclusively borrowed by `info`.
    let has_sync2 = unsafe { enable_in_chain(&info) };
    let info = if has_sync2 { info } else { info.push_next(&mut sync2) };
    // SAFETY: the create info and what it points at live until the call returns; every feature
    // and extension enabled is supported (wgpu's by its own checks, residency's checked above).
    let raw = unsafe { ash_instance.create_device(physical, &info, None) }
        .map_err(|e| OpenError::Vulkan(e, "vkCreateDevice"))?;
    let keeper =
        Arc::new(Keeper { raw: raw.clone(), device: OnceLock::new(), instance: Some(instance.clone()) });

    let wgpu_keeper = Arc::clone(&keeper);
    // SAFETY: `raw` was created from this adapter on `family` with `extensions` (a superset of
    // `required_device_extensions`) and `physical_device_features()`'s structures (with more
    // features on, never fewer); it stays valid until the callback runs (the keeper destroys it
    // only after the callback dropped its reference).
    let open = unsafe {
        hal.device_from_raw(
            raw.clone(),
            Some(Box::new(move || drop(wgpu_keeper))),
            &extensions,
            features,
            &limits,
            &wgpu::MemoryHints::default(),
            family,
            0,
        )
    }
    .map_err(OpenError::Hal)?;
    drop(hal);
    let device_desc = wgpu::DeviceDescriptor {
        label: Some("residency-wgpu"),
        required_features: features,
        required_limits: limits,
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::default(),
        trace: wgpu::Trace::Off,
    };
    // SAFETY: the hal device was opened from this adapter with `features`, which the adapter has.
    let (device, queue) = unsafe { adapter.create_device_from_hal::<Vulkan>(open, &device_desc) }
        .map_err(|e| OpenError::Device(e.to_string()))?;

    let residency_queue = (family, if sharing == QueueSharing::Separate { 1 } else { 0 });
    let external = ExternalDevice {
        physical,
        device: raw,
        universal_queue: residency_queue,
        sparse_queue: sparse.then_some(residency_queue),
        features: EnabledFeatures {
            sparse_binding: sparse,
            sparse_residency_image_2d: sparse,
            shader_resource_residency: sparse,
            shader_resource_min_lod: support.min_lod,
            timeline_semaphore: true,
            memory_budget,
            fragment_stores_and_atomics: support.fragment_stores,
            ..EnabledFeatures::default()
        },
    };
    // SAFETY: wgpu's instance, kept by the keeper, outlives the set and the device; the device
    // was created above with Vulkan 1.3, synchronization2, maintenance4, timeline semaphores and
    // every feature marked, with the queue named; the keeper destroys it only once no residency
    // object holds it; the shared queue's external synchronisation is the caller's contract
    // (`open_sharing_queue`) or the queue is residency's own.
    let set = unsafe { DeviceSet::adopt(entry, ash_instance, debug_utils, &[external]) }?;
    let residency = Arc::clone(&set.devices()[0]);
    // The keeper was made above and is set once, here.
    let _ = keeper.device.set(Arc::clone(&residency));
    let path = match support.sparse {
        Ok(()) => PathSupport::Hardware,
        Err(lack) => PathSupport::SoftwareOnly(lack),
    };
    Ok(Bridge {
        queue: ManuallyDrop::new(queue),
        device,
        adapter,
        instance,
        set,
        residency,
        sharing,
        path,
        submit_lock: Mutex::new(()),
        _keeper: keeper,
    })
}
