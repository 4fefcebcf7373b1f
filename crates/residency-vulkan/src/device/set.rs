//! Every device of the machine, opened together and indexed 0..N.
//!
//! **Order.** Physical devices are sorted by type (discrete, integrated, virtual, CPU, other), then
//! PCI vendor id, device id and device UUID. The order therefore does not depend on the order in
//! which the loader happens to enumerate drivers, and a device keeps its index from run to run on
//! the same machine. With `logical_per_physical = n`, each physical device appears `n` times in a
//! row (device indices `k*n .. k*n+n-1` all stand on physical device `k`): a test configuration that
//! lets one GPU, or lavapipe, exercise every multi-device path.

use crate::device::{Device, ExternalDevice};
use crate::error::{ErrorClass, ResidencyError};
use crate::error::{Result, VkResultExt, VulkanError};
use crate::instance::{InstanceDesc, InstanceShared};
use crate::validation::{ValidationLog, ValidationMode};
use ash::vk;
use residency_core::device_mask::{DeviceIndex, DeviceMask, MAX_DEVICES};
use std::sync::Arc;

/// Which devices to open, and how.
#[derive(Clone, Debug)]
pub struct DeviceSetDesc {
    /// The instance (validation layer) settings.
    pub instance: InstanceDesc,
    /// Which devices to open, by index in the stable order. Default: [`DeviceMask::ALL`].
    pub devices: DeviceMask,
    /// Logical devices opened on each physical device (default 1; 2 lets one GPU stand in for two).
    pub logical_per_physical: u32,
    /// At least this many devices: when there are fewer physical devices, each is opened as many
    /// times as needed (a test configuration; default 0, no minimum).
    pub min_devices: u32,
    /// Enable sparse residency where the device has it (default). Off, devices behave as ones
    /// without it: partially resident images take the software path.
    pub sparse_residency: bool,
    /// A test configuration (default 0, off): treat host-visible memory as non-coherent with at
    /// least this `nonCoherentAtomSize` (rounded to a power of two), so that the flush, invalidate
    /// and atom-alignment paths run on devices whose memory is coherent (lavapipe, most desktop
    /// GPUs). Flushing coherent memory is legal, so the device behaves the same otherwise.
    pub non_coherent_atom: u64,
    /// Enable VK_EXT_memory_priority where the device has it (default off): each `VkDeviceMemory`
    /// then carries its priority to the driver. Off by default because it costs every thread:
    /// on the NVIDIA H200 (driver 580.159.04) a device with `memoryPriority` enabled serialises
    /// `vkCreateBuffer`/bind/`vkDestroyBuffer` process-wide (22–26 M ops/s at 16 threads
    /// without it, 0.2 M with it: `residency-bench contention --only driver-plain,driver-plain+priority`).
    /// The library's own priorities (demotion under pressure) work either way.
    pub memory_priority: bool,
}

impl Default for DeviceSetDesc {
    fn default() -> Self {
        DeviceSetDesc {
            instance: InstanceDesc::default(),
            devices: DeviceMask::ALL,
            logical_per_physical: 1,
            min_devices: 0,
            sparse_residency: true,
            non_coherent_atom: 0,
            memory_priority: false,
        }
    }
}

impl DeviceSetDesc {
    /// Sets which devices to open.
    pub fn with_devices(mut self, devices: DeviceMask) -> Self {
        self.devices = devices;
        self
    }

    /// Sets the validation mode.
    pub fn with_validation(mut self, validation: ValidationMode) -> Self {
        self.instance.validation = validation;
        self
    }

    /// Enables sparse residency where the device has it (`true`, the default), or leaves it off so
    /// that devices behave as ones without it (`ResidencyPath::Auto` then takes the software path).
    pub fn with_sparse_residency(mut self, enabled: bool) -> Self {
        self.sparse_residency = enabled;
        self
    }

    /// Enables VK_EXT_memory_priority where the device has it (see
    /// [`DeviceSetDesc::memory_priority`] for what it costs).
    pub fn with_memory_priority(mut self, enabled: bool) -> Self {
        self.memory_priority = enabled;
        self
    }

    /// Treats host-visible memory as non-coherent with at least this atom size (a test
    /// configuration; see [`DeviceSetDesc::non_coherent_atom`]).
    pub fn with_non_coherent_memory(mut self, atom: u64) -> Self {
        self.non_coherent_atom = atom;
        self
    }

    /// Opens physical devices repeatedly until the set has at least `count` devices.
    pub fn with_min_devices(mut self, count: u32) -> Self {
        self.min_devices = count.min(MAX_DEVICES);
        self
    }

    /// Opens each physical device `count` times (clamped to 1..=32, with a log line when clamped).
    pub fn with_logical_per_physical(mut self, count: u32) -> Self {
        let clamped = count.clamp(1, MAX_DEVICES);
        if clamped != count {
            tracing::warn!(requested = count, used = clamped, "logical_per_physical clamped");
        }
        self.logical_per_physical = clamped;
        self
    }
}

/// The opened devices.
#[derive(Debug)]
pub struct DeviceSet {
    // Devices drop before the instance state they share (field order, and each holds an Arc).
    devices: Vec<Arc<Device>>,
    shared: Arc<InstanceShared>,
}

impl DeviceSet {
    /// Loads Vulkan, enumerates the physical devices in the stable order, and opens those selected.
    pub fn new(desc: &DeviceSetDesc) -> Result<DeviceSet> {
        let shared = InstanceShared::new(&desc.instance)?;
        let physical = sorted_physical_devices(&shared.instance)?;
        if physical.is_empty() {
            return Err(VulkanError::NoDevice);
        }
        let needed = desc.min_devices.div_ceil(physical.len() as u32);
        let per = desc.logical_per_physical.max(needed).max(1);
        let mut devices = Vec::new();
        for (physical_index, &pd) in physical.iter().enumerate() {
            for copy in 0..per {
                let Some(index) = DeviceIndex::new(physical_index as u32 * per + copy) else { break };
                if desc.devices.contains(index) {
                    devices.push(Device::new(
                        Arc::clone(&shared),
                        pd,
                        physical_index as u32,
                        index,
                        desc.sparse_residency,
                        desc.non_coherent_atom,
                        desc.memory_priority,
                    )?);
                }
            }
        }
        if devices.is_empty() {
            return Err(VulkanError::NoSuchDevice {
                index: desc.devices.iter().next().map_or(0, DeviceIndex::get),
                count: physical.len() as u32 * per,
            });
        }
        Ok(DeviceSet { devices, shared })
    }

    /// Works on an application's own Vulkan objects instead of creating them: `devices` (one
    /// or more logical devices of `instance`) become devices 0, 1, … of the set, in order. Residency
    /// then allocates, binds and submits on them like on its own, and destroys only what it
    /// created: the instance and devices stay the application's. With `debug_utils` (the
    /// application enabled `VK_EXT_debug_utils`) residency adds a messenger of its own, so its
    /// [`validation_log`](Self::validation_log) sees the layer's messages.
    ///
    /// # Safety
    /// - `instance` was created from `entry`; each device from `instance` on its `physical`
    ///   device, with Vulkan 1.3, `synchronization2` and `maintenance4` enabled, with the queues
    ///   named, and with every feature its [`EnabledFeatures`](crate::EnabledFeatures) marks;
    /// - all of them outlive the returned set and everything made through it;
    /// - the queues are externally synchronised: the application holds
    ///   [`Queue::lock`](crate::Queue::lock) (`device.universal_queue().lock()`) around its own
    ///   submissions to a queue it shares with residency, or gives residency queues of its own;
    /// - the application destroys its devices (and the timelines it imported with
    ///   [`Device::import_timeline`](crate::Device::import_timeline)) only after
    ///   [`DeviceSet::close`] returned `Ok` (or, after a plain drop, once every residency object
    ///   and `Arc<Device>` clone is gone): until then residency may still free memory and destroy
    ///   objects on them;
    /// - work the application submits on its own (not through [`Recording::submit`](crate::recording::Recording::submit)
    ///   or a [`PendingFrame`](crate::PendingFrame)) with residency's resources is declared with
    ///   `used_until` (announced points) or has completed before they are dropped, and work on
    ///   queues residency does not use has completed before the device is destroyed.
    ///
    /// Teardown (`close` or a drop) waits, bounded by
    /// [`ADOPTED_TEARDOWN_WAIT_NS`](crate::ADOPTED_TEARDOWN_WAIT_NS), for residency's own
    /// submissions, for the renderer frames submitted through residency and the announced values
    /// of declared uses, and then drains residency's queues (an empty submission with a fence, so
    /// the driver is done with every submission on them, the application's included); it never
    /// waits for a value no announced signal reaches. Once `close` returns `Ok` the application
    /// destroys its objects and devices without waiting for anything itself; if something was
    /// still running or waited for past the bound, `close` refuses ([`TeardownError`]) and
    /// nothing of the device is freed.
    pub unsafe fn adopt(
        entry: ash::Entry,
        instance: ash::Instance,
        debug_utils: bool,
        devices: &[ExternalDevice],
    ) -> Result<DeviceSet> {
        if devices.is_empty() {
            return Err(VulkanError::NoDevice);
        }
        // SAFETY: forwarded from the caller's contract.
        let shared = unsafe { InstanceShared::adopt(entry, instance, debug_utils) }?;
        let mut out = Vec::with_capacity(devices.len());
        for (i, external) in devices.iter().enumerate() {
            let index = DeviceIndex::new(i as u32)
                .ok_or(VulkanError::NoSuchDevice { index: i as u32, count: MAX_DEVICES })?;
            // SAFETY: forwarded from the caller's contract.
            out.push(unsafe { Device::adopt(Arc::clone(&shared), external, i as u32, index) }?);
        }
        Ok(DeviceSet { devices: out, shared })
    }

    /// The opened devices, lowest index first.
    pub fn devices(&self) -> &[Arc<Device>] {
        &self.devices
    }

    /// The device of index `index`, if it was opened.
    pub fn device(&self, index: DeviceIndex) -> Option<&Arc<Device>> {
        self.devices.iter().find(|d| d.index() == index)
    }

    /// The mask of opened devices.
    pub fn mask(&self) -> DeviceMask {
        self.devices.iter().map(|d| d.index()).collect()
    }

    /// The validation mode in force.
    pub fn validation(&self) -> ValidationMode {
        self.shared.validation
    }

    /// Messages from the validation layer and loader.
    pub fn validation_log(&self) -> &ValidationLog {
        &self.shared.log
    }

    /// Tears the set down: waits for each device, destroys what waited for the GPU, and destroys
    /// the devices. If a device is still referenced (an `Arc<Device>` clone, or a live resource,
    /// pool or uploader, all of which keep their device alive) nothing is destroyed and the set
    /// comes back inside [`TeardownError`], with the objects still alive by name: drop them and call
    /// `close` again. A plain drop of the set does the same teardown and, when something is still
    /// alive, logs it as an error and leaves each device to be destroyed with its last reference.
    pub fn close(self) -> std::result::Result<(), TeardownError> {
        let settled = self.settle();
        // An adopted device must also have nothing waiting for the application's own GPU work,
        // and residency's queues drained: the application destroys it right after `close`
        // returns Ok.
        let alive: Vec<_> = self
            .devices
            .iter()
            .zip(&settled)
            .filter(|(d, settled)| Arc::strong_count(d) > 1 || !**settled)
            .map(|(d, settled)| LiveDevice {
                device: d.index(),
                references: Arc::strong_count(d) - 1,
                pending_destruction: d.pending_destruction(),
                gpu_busy: !settled && d.pending_destruction() == 0,
                objects: d.ledger().live_objects().into_iter().filter(|o| o.kind != "memory").collect(),
            })
            .collect();
        if alive.is_empty() {
            drop(self);
            Ok(())
        } else {
            Err(TeardownError { set: Box::new(self), alive })
        }
    }

    /// Waits for residency's work on every device and destroys what waited for the GPU. Returns
    /// per device whether it is settled: always for an owned device (its drop waits idle); for an
    /// adopted one, whether nothing waits for the GPU any more and its queues drained (bounded:
    /// see `Device::settle_adopted`).
    fn settle(&self) -> Vec<bool> {
        self.devices
            .iter()
            .map(|device| {
                if device.is_owned() {
                    if let Err(e) = device.wait_submitted() {
                        tracing::warn!(device = %device.index(), error = %e, "waiting for residency's work at teardown failed");
                    }
                    true
                } else {
                    // Bounded waits only: an adopted device's queues may hold the application's
                    // work, and a renderer value no announced signal reaches is never waited for.
                    device.settle_adopted()
                }
            })
            .collect()
    }
}

/// A device that outlived its set's teardown.
#[derive(Debug, Clone)]
pub struct LiveDevice {
    /// The device.
    pub device: DeviceIndex,
    /// References to it other than the set's.
    pub references: usize,
    /// Released objects still waiting for GPU work (on an adopted device, the application's frames
    /// or timelines they were declared `used_until`).
    pub pending_destruction: usize,
    /// An adopted device whose work (residency's submissions, the announced renderer frames, the
    /// driver's handling of its queues) did not finish within the teardown bound
    /// ([`ADOPTED_TEARDOWN_WAIT_NS`](crate::ADOPTED_TEARDOWN_WAIT_NS)).
    pub gpu_busy: bool,
    /// Residency objects still alive on it (buffers, images, pools, …), by name.
    pub objects: Vec<crate::device::ledger::LiveObject>,
}

/// [`DeviceSet::close`] found devices still in use; the set is handed back unchanged.
#[derive(Debug, thiserror::Error)]
#[error("device set still in use: {}", describe_alive(alive))]
pub struct TeardownError {
    /// The set, still open.
    pub set: Box<DeviceSet>,
    /// What keeps each device alive.
    pub alive: Vec<LiveDevice>,
}

impl ResidencyError for TeardownError {
    fn class(&self) -> ErrorClass {
        // The set is handed back unchanged: release what keeps the devices alive and close again.
        ErrorClass::Refused
    }
}

fn describe_alive(alive: &[LiveDevice]) -> String {
    alive
        .iter()
        .map(|d| {
            let names: Vec<String> =
                d.objects.iter().take(8).map(|o| format!("{} `{}`", o.kind, o.name)).collect();
            format!(
                "{}: {} references, {} objects waiting for the GPU{} ({})",
                d.device,
                d.references,
                d.pending_destruction,
                if d.gpu_busy { ", its queues still busy" } else { "" },
                names.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl Drop for DeviceSet {
    fn drop(&mut self) {
        self.settle();
        for device in &self.devices {
            let references = Arc::strong_count(device) - 1;
            if references > 0 {
                let objects: Vec<_> =
                    device.ledger().live_objects().into_iter().filter(|o| o.kind != "memory").collect();
                tracing::error!(
                    device = %device.index(),
                    references,
                    objects = ?objects.iter().map(|o| o.name.to_string()).collect::<Vec<_>>(),
                    "device set dropped while the device is still in use: it is destroyed with its last reference (use DeviceSet::close to get an error instead)"
                );
                SETS_DROPPED_IN_USE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

/// Device sets dropped while one of their devices was still referenced, over the process.
pub static SETS_DROPPED_IN_USE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn type_rank(ty: vk::PhysicalDeviceType) -> u8 {
    match ty {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

fn sorted_physical_devices(instance: &ash::Instance) -> Result<Vec<vk::PhysicalDevice>> {
    // SAFETY: valid instance.
    let devices = unsafe { instance.enumerate_physical_devices() }.during("vkEnumeratePhysicalDevices")?;
    let mut keyed: Vec<_> = devices
        .into_iter()
        .map(|pd| {
            let mut id = vk::PhysicalDeviceIDProperties::default();
            let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
            // SAFETY: pd was enumerated from this instance; the chain points at live structs.
            unsafe { instance.get_physical_device_properties2(pd, &mut props2) };
            let p = props2.properties;
            ((type_rank(p.device_type), p.vendor_id, p.device_id, id.device_uuid), pd)
        })
        .collect();
    keyed.sort_by_key(|entry| entry.0);
    Ok(keyed.into_iter().map(|(_, pd)| pd).collect())
}
