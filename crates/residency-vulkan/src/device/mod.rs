//! One logical device: its queues, its enabled features and debug names.

pub(crate) mod blocks;
pub(crate) mod ledger;
pub(crate) mod life;
pub(crate) mod lock;
pub(crate) mod pressure;
pub mod profile_capture;
pub mod requirements;
pub(crate) mod set;

use crate::device::blocks::BlockList;
use crate::device::ledger::{FaultSite, Ledger};
use crate::device::life::Retirement;
use crate::error::{Result, VkResultExt, VulkanError};
use crate::instance::{version_string, InstanceShared};
use crate::poison::PoisonFree;
use crate::validation::ValidationLog;
use ash::vk;
use lock::{Lock, LockGuard, Reentrant};
use residency_core::device_mask::DeviceIndex;
use residency_core::memory::HeapGrowth;
use residency_core::profile::{DeviceProfile, MemoryProperties};
use residency_core::usage::BufferUsage;
use std::ffi::{CStr, CString};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// A queue. Queues are externally synchronised in Vulkan; the lock serialises submissions from
/// several threads and lets the universal and sparse roles share one `VkQueue` when the device
/// has only one (lavapipe).
#[derive(Debug)]
pub struct Queue {
    family: u32,
    index: u32,
    raw: Lock<vk::Queue>,
}

/// The locked queue ([`Queue::lock`]); derefs to the `VkQueue`.
#[derive(Debug)]
pub struct QueueGuard<'a>(LockGuard<'a, vk::Queue>);

impl std::ops::Deref for QueueGuard<'_> {
    type Target = vk::Queue;
    fn deref(&self) -> &vk::Queue {
        &self.0
    }
}

impl Queue {
    fn new(family: u32, index: u32, raw: vk::Queue) -> Arc<Queue> {
        Arc::new(Queue { family, index, raw: Lock::new(raw) })
    }

    /// The queue family index.
    pub fn family(&self) -> u32 {
        self.family
    }

    /// The queue's index inside its family.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Whether this thread holds the queue's lock ([`Queue::lock`]).
    pub(crate) fn locked_here(&self) -> bool {
        self.raw.held_here()
    }

    /// Locks the queue for a submission, waiting for another thread that holds it. Residency
    /// takes this lock for each of its submissions, so a thread that holds it and calls a
    /// residency function that submits (or locks it again) would wait for itself: that call
    /// answers [`VulkanError::Reentrant`] instead, and so does this one on the holding thread.
    pub fn lock(&self) -> Result<QueueGuard<'_>> {
        self.raw.lock().map(QueueGuard).map_err(|Reentrant| VulkanError::Reentrant {
            what: "the queue is already locked by this thread (a submission inside `submit_checked`'s \
                   closure, or a residency call while holding `Queue::lock`)",
        })
    }
}

/// One memory heap's budget and usage, as [`Device::heap_budgets`] reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HeapStatus {
    /// The heap's index.
    pub index: u32,
    /// Its size in bytes.
    pub size: u64,
    /// Whether it is device-local.
    pub device_local: bool,
    /// The process's budget the driver reports (VK_EXT_memory_budget); `None` without it.
    pub driver_budget: Option<u64>,
    /// What the whole process uses, as the driver reports it; `None` without the extension.
    pub driver_usage: Option<u64>,
    /// Bytes of `VkDeviceMemory` residency holds in this heap.
    pub residency_bytes: u64,
    /// The application's cap on residency's allocations in this heap, if set.
    pub limit: Option<u64>,
    /// The budget residency allocates against: the driver's (or 80 % of the heap), capped by
    /// `limit`.
    pub budget: u64,
    /// The usage counted against `budget` (the driver's figure, at least residency's own).
    pub usage: u64,
    /// `budget − usage`: what an allocation may still take without `allow_over_budget`.
    pub available: u64,
}

/// Features the library enabled on the device (the subset of what it supports that we use).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnabledFeatures {
    /// `sparseBinding`.
    pub sparse_binding: bool,
    /// `sparseResidencyBuffer`.
    pub sparse_residency_buffer: bool,
    /// `sparseResidencyImage2D`.
    pub sparse_residency_image_2d: bool,
    /// `sparseResidencyImage3D`.
    pub sparse_residency_image_3d: bool,
    /// `sparseResidencyAliased`.
    pub sparse_residency_aliased: bool,
    /// `shaderResourceResidency`.
    pub shader_resource_residency: bool,
    /// `shaderResourceMinLod`.
    pub shader_resource_min_lod: bool,
    /// `samplerAnisotropy`: samplers may filter anisotropically (`Filter::Anisotropic`).
    pub sampler_anisotropy: bool,
    /// `timelineSemaphore`.
    pub timeline_semaphore: bool,
    /// `bufferDeviceAddress`.
    pub buffer_device_address: bool,
    /// VK_EXT_memory_budget.
    pub memory_budget: bool,
    /// VK_EXT_memory_priority with `memoryPriority`: each `VkDeviceMemory` carries a priority
    /// (`with_priority` on the descriptions; 0.5 by default) the driver weighs when it must
    /// demote memory under pressure. Enabled only when asked
    /// ([`DeviceSetDesc::memory_priority`](crate::device::set::DeviceSetDesc::memory_priority):
    /// it serialises buffer creation on some drivers).
    pub memory_priority: bool,
    /// VK_KHR_acceleration_structure (with VK_KHR_deferred_host_operations and
    /// `bufferDeviceAddress`): buffers may have the acceleration-structure usages
    /// (`BufferUsage::ACCELERATION_STRUCTURE_STORAGE`, `ACCELERATION_STRUCTURE_BUILD_INPUT`), and
    /// barriers the acceleration-structure build stage and accesses. Lavapipe and the NVIDIA
    /// driver have it.
    pub acceleration_structure: bool,
    /// VK_KHR_ray_tracing_pipeline: buffers may have `BufferUsage::SHADER_BINDING_TABLE`.
    pub ray_tracing_pipeline: bool,
    /// VK_KHR_ray_query with `rayQuery` (on top of `acceleration_structure`): shaders may trace
    /// rays through a top-level [`AccelerationStructure`](crate::acceleration::AccelerationStructure)
    /// with `rayQueryEXT` (GLSL `GL_EXT_ray_query`, SPIR-V `RayQueryKHR`). Enabled wherever
    /// supported; lavapipe and the NVIDIA driver have it.
    pub ray_query: bool,
    /// `fragmentStoresAndAtomics`: fragment shaders may write storage buffers and images (shader
    /// feedback from a fragment shader needs it).
    pub fragment_stores_and_atomics: bool,
    /// `pipelineStatisticsQuery`: pipeline-statistics query pools
    /// ([`QueryKind::PipelineStatistics`](crate::sync::queries::QueryKind::PipelineStatistics)).
    pub pipeline_statistics_query: bool,
    /// `occlusionQueryPrecise`: occlusion queries that count exactly
    /// ([`QueryKind::Occlusion`](crate::sync::queries::QueryKind::Occlusion) `{ precise: true }`).
    pub occlusion_query_precise: bool,
    /// Descriptor indexing for sampled images (Vulkan 1.2): `runtimeDescriptorArray`,
    /// `shaderSampledImageArrayNonUniformIndexing` and
    /// `descriptorBindingSampledImageUpdateAfterBind`, all three — bindless arrays of sampled
    /// images ([`BindingKind::BindlessSampledImages`](crate::compute::BindingKind::BindlessSampledImages)).
    pub descriptor_indexing: bool,
    /// VK_EXT_external_memory_host, with host allocations importable as the source of copies:
    /// [`Uploader::upload_buffer`](crate::Uploader::upload_buffer) copies a large host slice
    /// straight from its pages (imported, pinned for the copy) instead of staging it. Enabled
    /// wherever supported; lavapipe and the NVIDIA driver have it. An adopted device declares
    /// it only when the application enabled the extension.
    pub external_memory_host: bool,
}

/// What importing host memory needs (VK_EXT_external_memory_host).
pub(crate) struct HostImport {
    pub(crate) loader: ash::ext::external_memory_host::Device,
    /// `minImportedHostPointerAlignment`: an imported pointer and size are multiples of it.
    pub(crate) alignment: u64,
}

/// A logical device on one physical device, with a universal queue and (when the device can bind
/// sparse memory) a sparse-binding queue.
pub struct Device {
    index: DeviceIndex,
    physical_index: u32,
    name: String,
    api_version: u32,
    features: EnabledFeatures,
    universal: Arc<Queue>,
    sparse: Option<Arc<Queue>>,
    /// The queue of moves under memory pressure: a second queue of the universal family where
    /// there is one, else the universal queue itself.
    moves: Arc<Queue>,
    profile: OnceLock<DeviceProfile>,
    memory: MemoryProperties,
    limits: vk::PhysicalDeviceLimits,
    ledger: Ledger,
    /// The general allocator: heaps per memory type, for resources created outside pools; then
    /// the host-tier lists of the same types (used on unified-memory devices only, where the
    /// fallback chain's host steps reuse device-local types: `device/pressure.rs`).
    pub(crate) general: Vec<Mutex<BlockList>>,
    /// Budget cache, tier accounting and pressure counters.
    pub(crate) pressure: pressure::Pressure,
    debug_utils: Option<ash::ext::debug_utils::Device>,
    raw: ash::Device,
    physical: vk::PhysicalDevice,
    shared: Arc<InstanceShared>,
    /// Whether residency created the logical device (and destroys it); an adopted one belongs to
    /// the application.
    owned: bool,
    /// Unique over the process: resources check that they are handed back to their own device.
    uid: u64,
    /// The `Arc` this device lives in (resources keep their device alive through it).
    this: Weak<Device>,
    /// Deferred destruction: clocks and the retire queue.
    retirement: Retirement,
    /// `minAccelerationStructureScratchOffsetAlignment` (0 without acceleration structures).
    scratch_alignment: u64,
    /// VK_EXT_external_memory_host's entry points and `minImportedHostPointerAlignment`, where
    /// the extension is enabled.
    host_import: Option<HostImport>,
    /// The [`crate::PlacementPolicy`] of placed resources (0 tight, 1 legacy).
    pub(crate) placement_policy: std::sync::atomic::AtomicU8,
    /// The tight-alignment tier, derived on first use.
    pub(crate) tight_tier: OnceLock<residency_core::placement::TightAlignmentTier>,
    /// `Device::set_tight_alignment_supported`: false answers the tier `NotSupported`.
    pub(crate) tight_supported: std::sync::atomic::AtomicBool,
    /// The placement engine's messages.
    pub(crate) placement_log: crate::device::blocks::PlacementLog,
}

static NEXT_DEVICE_UID: AtomicU64 = AtomicU64::new(1);

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("index", &self.index)
            .field("name", &self.name)
            .field("api_version", &version_string(self.api_version))
            .field("features", &self.features)
            .field("universal", &self.universal)
            .field("sparse", &self.sparse)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// Creates a logical device on `physical`, as device `index` of its set; without
    /// `sparse_residency` the sparse features are left off, as on a device that lacks them;
    /// VK_EXT_memory_priority is enabled only with `memory_priority`
    /// ([`DeviceSetDesc::memory_priority`](crate::device::set::DeviceSetDesc::memory_priority)).
    pub(crate) fn new(
        shared: Arc<InstanceShared>,
        physical: vk::PhysicalDevice,
        physical_index: u32,
        index: DeviceIndex,
        sparse_residency: bool,
        non_coherent_atom: u64,
        memory_priority: bool,
    ) -> Result<Arc<Device>> {
        let instance = &shared.instance;
        // SAFETY: physical was enumerated from this instance.
        let props = unsafe { instance.get_physical_device_properties(physical) };
        let name = props.device_name_as_c_str().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if props.api_version < vk::API_VERSION_1_3 {
            return Err(VulkanError::Unsupported {
                device: name,
                reason: format!("Vulkan {} < 1.3", version_string(props.api_version)),
            });
        }

        // Supported features.
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
        let mut priority_features = vk::PhysicalDeviceMemoryPriorityFeaturesEXT::default();
        let mut as_features = vk::PhysicalDeviceAccelerationStructureFeaturesKHR::default();
        let mut rt_features = vk::PhysicalDeviceRayTracingPipelineFeaturesKHR::default();
        let mut rq_features = vk::PhysicalDeviceRayQueryFeaturesKHR::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12).push_next(&mut f13);
        // SAFETY: valid physical device; the chain points at live structs.
        unsafe { instance.get_physical_device_features2(physical, &mut f2) };
        let supported = f2.features;
        let (has_sync2, has_maint4) = (f13.synchronization2 == vk::TRUE, f13.maintenance4 == vk::TRUE);
        let has_dynamic_rendering = f13.dynamic_rendering == vk::TRUE;
        let (has_timeline, has_bda) =
            (f12.timeline_semaphore == vk::TRUE, f12.buffer_device_address == vk::TRUE);
        if !has_sync2 || !has_maint4 || !has_timeline {
            return Err(VulkanError::Unsupported {
                device: name,
                reason: "synchronization2, maintenance4 and timelineSemaphore are required".into(),
            });
        }

        // SAFETY: valid physical device.
        let extensions = unsafe { instance.enumerate_device_extension_properties(physical) }
            .during("vkEnumerateDeviceExtensionProperties")?;
        let has_budget =
            extensions.iter().any(|e| e.extension_name_as_c_str() == Ok(ash::ext::memory_budget::NAME));
        let has_priority_extension =
            extensions.iter().any(|e| e.extension_name_as_c_str() == Ok(ash::ext::memory_priority::NAME));
        let has_priority_extension = memory_priority && has_priority_extension;
        if has_priority_extension {
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut priority_features);
            // SAFETY: valid physical device; the chain points at a live struct of an extension the
            // device supports.
            unsafe { instance.get_physical_device_features2(physical, &mut f2) };
        }
        let has_priority = has_priority_extension && priority_features.memory_priority == vk::TRUE;
        let has_extension =
            |name: &std::ffi::CStr| extensions.iter().any(|e| e.extension_name_as_c_str() == Ok(name));
        let as_extensions = has_bda
            && has_extension(ash::khr::acceleration_structure::NAME)
            && has_extension(ash::khr::deferred_host_operations::NAME);
        let rt_extension = as_extensions && has_extension(ash::khr::ray_tracing_pipeline::NAME);
        let rq_extension = as_extensions && has_extension(ash::khr::ray_query::NAME);
        if as_extensions {
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut as_features);
            if rt_extension {
                f2 = f2.push_next(&mut rt_features);
            }
            if rq_extension {
                f2 = f2.push_next(&mut rq_features);
            }
            // SAFETY: valid physical device; the chain points at live structs of extensions the
            // device supports.
            unsafe { instance.get_physical_device_features2(physical, &mut f2) };
        }
        let has_as = as_extensions && as_features.acceleration_structure == vk::TRUE;
        let has_rt = has_as && rt_extension && rt_features.ray_tracing_pipeline == vk::TRUE;
        let has_rq = has_as && rq_extension && rq_features.ray_query == vk::TRUE;
        let has_host_import = has_extension(ash::ext::external_memory_host::NAME) && {
            let info = vk::PhysicalDeviceExternalBufferInfo::default()
                .usage(vk::BufferUsageFlags::TRANSFER_SRC)
                .handle_type(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
            let mut props = vk::ExternalBufferProperties::default();
            // SAFETY: valid physical device of a Vulkan 1.3 instance (the query is core since
            // 1.1); the info and the output struct live for the call.
            unsafe { instance.get_physical_device_external_buffer_properties(physical, &info, &mut props) };
            props
                .external_memory_properties
                .external_memory_features
                .contains(vk::ExternalMemoryFeatureFlags::IMPORTABLE)
        };

        let queues = choose_queues(instance, physical);
        let Some(universal_family) = queues.universal_family else {
            return Err(VulkanError::Unsupported {
                device: name,
                reason: "no queue family with graphics, compute and transfer".into(),
            });
        };
        let sparse = |supported: vk::Bool32| sparse_residency && supported == vk::TRUE;
        let features = EnabledFeatures {
            sparse_binding: sparse(supported.sparse_binding) && queues.sparse.is_some(),
            sparse_residency_buffer: sparse(supported.sparse_residency_buffer),
            sparse_residency_image_2d: sparse(supported.sparse_residency_image2_d),
            sparse_residency_image_3d: sparse(supported.sparse_residency_image3_d),
            sparse_residency_aliased: sparse(supported.sparse_residency_aliased),
            shader_resource_residency: sparse(supported.shader_resource_residency),
            shader_resource_min_lod: supported.shader_resource_min_lod == vk::TRUE,
            sampler_anisotropy: supported.sampler_anisotropy == vk::TRUE,
            timeline_semaphore: has_timeline,
            buffer_device_address: has_bda,
            memory_budget: has_budget,
            memory_priority: has_priority,
            acceleration_structure: has_as,
            ray_tracing_pipeline: has_rt,
            ray_query: has_rq,
            fragment_stores_and_atomics: supported.fragment_stores_and_atomics == vk::TRUE,
            pipeline_statistics_query: supported.pipeline_statistics_query == vk::TRUE,
            occlusion_query_precise: supported.occlusion_query_precise == vk::TRUE,
            descriptor_indexing: f12.runtime_descriptor_array == vk::TRUE
                && f12.shader_sampled_image_array_non_uniform_indexing == vk::TRUE
                && f12.descriptor_binding_sampled_image_update_after_bind == vk::TRUE,
            external_memory_host: has_host_import,
        };
        let sparse_ok = features.sparse_binding;
        let enable = vk::PhysicalDeviceFeatures::default()
            .sparse_binding(sparse_ok)
            .sparse_residency_buffer(sparse_ok && features.sparse_residency_buffer)
            .sparse_residency_image2_d(sparse_ok && features.sparse_residency_image_2d)
            .sparse_residency_image3_d(sparse_ok && features.sparse_residency_image_3d)
            .sparse_residency_aliased(sparse_ok && features.sparse_residency_aliased)
            .shader_resource_residency(features.shader_resource_residency)
            .shader_resource_min_lod(features.shader_resource_min_lod)
            .shader_int64(supported.shader_int64 == vk::TRUE)
            .sampler_anisotropy(features.sampler_anisotropy)
            .fragment_stores_and_atomics(features.fragment_stores_and_atomics)
            .pipeline_statistics_query(features.pipeline_statistics_query)
            .occlusion_query_precise(features.occlusion_query_precise)
            .shader_storage_image_write_without_format(
                supported.shader_storage_image_write_without_format == vk::TRUE,
            );
        let mut enable12 = vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(has_timeline)
            .buffer_device_address(has_bda)
            .runtime_descriptor_array(features.descriptor_indexing)
            .shader_sampled_image_array_non_uniform_indexing(features.descriptor_indexing)
            .descriptor_binding_sampled_image_update_after_bind(features.descriptor_indexing);
        let mut enable13 = vk::PhysicalDeviceVulkan13Features::default()
            .synchronization2(true)
            .maintenance4(true)
            .dynamic_rendering(has_dynamic_rendering);
        let mut enable_priority =
            vk::PhysicalDeviceMemoryPriorityFeaturesEXT::default().memory_priority(true);
        let mut enable2 = vk::PhysicalDeviceFeatures2::default()
            .features(enable)
            .push_next(&mut enable12)
            .push_next(&mut enable13);
        if has_priority {
            enable2 = enable2.push_next(&mut enable_priority);
        }
        let mut enable_as =
            vk::PhysicalDeviceAccelerationStructureFeaturesKHR::default().acceleration_structure(true);
        if has_as {
            enable2 = enable2.push_next(&mut enable_as);
        }
        let mut enable_rt =
            vk::PhysicalDeviceRayTracingPipelineFeaturesKHR::default().ray_tracing_pipeline(true);
        if has_rt {
            enable2 = enable2.push_next(&mut enable_rt);
        }
        let mut enable_rq = vk::PhysicalDeviceRayQueryFeaturesKHR::default().ray_query(true);
        if has_rq {
            enable2 = enable2.push_next(&mut enable_rq);
        }

        // The moves queue last, at a lower priority than the frames' queue.
        let mut priorities = vec![1.0f32; queues.universal_queue_count as usize];
        if let Some(moves) = queues.moves_index {
            priorities[moves as usize] = 0.5;
        }
        let mut queue_infos = vec![vk::DeviceQueueCreateInfo::default()
            .queue_family_index(universal_family)
            .queue_priorities(&priorities)];
        let one = [1.0f32];
        if let Some(SparseQueue::SeparateFamily(family)) = queues.sparse {
            queue_infos
                .push(vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&one));
        }
        let mut extension_names = Vec::new();
        if has_budget {
            extension_names.push(ash::ext::memory_budget::NAME.as_ptr());
        }
        if has_priority {
            extension_names.push(ash::ext::memory_priority::NAME.as_ptr());
        }
        if has_as {
            extension_names.push(ash::khr::acceleration_structure::NAME.as_ptr());
            extension_names.push(ash::khr::deferred_host_operations::NAME.as_ptr());
        }
        if has_rt {
            extension_names.push(ash::khr::ray_tracing_pipeline::NAME.as_ptr());
        }
        if has_rq {
            extension_names.push(ash::khr::ray_query::NAME.as_ptr());
        }
        if has_host_import {
            extension_names.push(ash::ext::external_memory_host::NAME.as_ptr());
        }
        let create_info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_infos)
            .enabled_extension_names(&extension_names)
            .push_next(&mut enable2);
        // SAFETY: the create info and its chain live until the call returns; every feature enabled
        // was reported as supported above.
        let raw = unsafe { instance.create_device(physical, &create_info, None) }.during("vkCreateDevice")?;

        let get_queue = |family: u32, index: u32| {
            // SAFETY: (family, index) was requested in queue_infos.
            let raw_queue = unsafe { raw.get_device_queue(family, index) };
            Queue::new(family, index, raw_queue)
        };
        let universal = get_queue(universal_family, 0);
        let sparse = match queues.sparse {
            None => None,
            Some(SparseQueue::SharedWithUniversal) => Some(Arc::clone(&universal)),
            Some(SparseQueue::SecondInUniversalFamily) => Some(get_queue(universal_family, 1)),
            Some(SparseQueue::SeparateFamily(family)) => Some(get_queue(family, 0)),
        };
        let moves = queues.moves_index.map(|i| get_queue(universal_family, i));
        let device = Device::from_parts(Parts {
            shared,
            physical,
            physical_index,
            index,
            name,
            props,
            features,
            raw,
            universal,
            sparse,
            moves,
            owned: true,
            non_coherent_atom,
        })?;
        tracing::info!(
            device = %device.index,
            name = %device.name,
            sparse_queue = ?queues.sparse,
            moves_queue = ?queues.moves_index,
            "logical device created"
        );
        Ok(device)
    }

    /// The part of creation shared by created and adopted devices: debug names, memory
    /// properties, the ledger, the general allocator and the clocks of deferred destruction. A
    /// failure destroys a device residency created.
    fn from_parts(parts: Parts) -> Result<Arc<Device>> {
        let Parts {
            shared,
            physical,
            physical_index,
            index,
            name,
            props,
            features,
            raw,
            universal,
            sparse,
            moves,
            owned,
            non_coherent_atom,
        } = parts;
        let moves = moves.unwrap_or_else(|| Arc::clone(&universal));
        let retirement = match Retirement::new(&raw) {
            Ok(r) => r,
            Err(e) => {
                if owned {
                    // SAFETY: the device was created by residency a moment ago and has no objects.
                    unsafe { raw.destroy_device(None) };
                }
                return Err(e);
            }
        };
        let instance = &shared.instance;
        let has_budget = features.memory_budget;
        let debug_utils =
            shared.debug_utils.as_ref().map(|_| ash::ext::debug_utils::Device::new(instance, &raw));
        let mut memory = profile_capture::memory_properties(instance, physical, has_budget);
        let mut limits = props.limits;
        if non_coherent_atom > 0 {
            // A test configuration: host-visible memory treated as non-coherent (flushes and
            // invalidates are legal on coherent memory), with a coarser atom.
            for t in memory.types.iter_mut().filter(|t| t.flags.host_visible) {
                t.flags.host_coherent = false;
            }
            limits.non_coherent_atom_size =
                limits.non_coherent_atom_size.max(non_coherent_atom).next_power_of_two();
        }
        let ledger = Ledger::new(memory.heaps.len(), props.limits.max_memory_allocation_count);
        let type_count = memory.types.len();
        let general = (0..2 * type_count)
            .map(|l| {
                let i = l % type_count;
                let t = &memory.types[i];
                let heap_size = memory.heaps[t.heap_index as usize].size;
                let growth = HeapGrowth::new(HeapGrowth::default_page_size(heap_size));
                let host = l >= type_count;
                let name = if host {
                    format!("device {} type {i} host tier", index.get())
                } else {
                    format!("device {} type {i}", index.get())
                };
                let mut list = BlockList::new(name, i as u32, growth, props.limits.buffer_image_granularity)
                    .with_atom(t, limits.non_coherent_atom_size);
                if host {
                    list.tier = Some(residency_core::memory::MemoryTier::Host);
                }
                Mutex::new(list)
            })
            .collect();
        let pressure = pressure::Pressure::new(memory.heaps.clone());
        let scratch_alignment = if features.acceleration_structure {
            let mut as_props = vk::PhysicalDeviceAccelerationStructurePropertiesKHR::default();
            let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut as_props);
            // SAFETY: valid physical device; the extension is enabled on the device (so supported),
            // and the chain points at a live struct.
            unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
            u64::from(as_props.min_acceleration_structure_scratch_offset_alignment)
        } else {
            0
        };
        let host_import = features.external_memory_host.then(|| {
            let mut host_props = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
            let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut host_props);
            // SAFETY: valid physical device; the extension is enabled on the device (so supported),
            // and the chain points at a live struct.
            unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
            HostImport {
                loader: ash::ext::external_memory_host::Device::new(instance, &raw),
                alignment: host_props.min_imported_host_pointer_alignment.max(1),
            }
        });
        let device = Arc::new_cyclic(|this| Device {
            index,
            physical_index,
            name,
            api_version: props.api_version,
            features,
            universal,
            sparse,
            moves,
            profile: OnceLock::new(),
            memory,
            limits,
            ledger,
            general,
            pressure,
            debug_utils,
            raw,
            physical,
            shared,
            owned,
            uid: NEXT_DEVICE_UID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            this: this.clone(),
            retirement,
            scratch_alignment,
            host_import,
            placement_policy: std::sync::atomic::AtomicU8::new(0),
            tight_tier: OnceLock::new(),
            tight_supported: std::sync::atomic::AtomicBool::new(true),
            placement_log: Default::default(),
        });
        let label = format!("residency {} ({})", device.index, device.name);
        device.set_name(device.raw.handle(), &label);
        // Nobody else has the device yet: the locks are free.
        if let Ok(queue) = device.universal.lock() {
            device.set_name(*queue, &format!("{label} universal queue"));
        }
        if let Some(sparse) = device.sparse.as_ref().filter(|s| !Arc::ptr_eq(s, &device.universal)) {
            if let Ok(queue) = sparse.lock() {
                device.set_name(*queue, &format!("{label} sparse queue"));
            }
        }
        if !Arc::ptr_eq(&device.moves, &device.universal) {
            if let Ok(queue) = device.moves.lock() {
                device.set_name(*queue, &format!("{label} moves queue"));
            }
        }
        device.set_name(device.retirement.moves, &format!("{label} moves timeline"));
        device.set_name(device.retirement.universal, &format!("{label} universal timeline"));
        Ok(device)
    }

    /// The `Arc` this device lives in. Devices are only ever created inside one.
    pub(crate) fn arc(&self) -> Arc<Device> {
        self.this.upgrade().expect("a device is reachable only through its Arc while it lives")
    }

    /// Unique over the process (two device sets' devices of the same index differ).
    pub(crate) fn uid(&self) -> u64 {
        self.uid
    }

    /// Whether `other` is this device.
    pub(crate) fn is(&self, other: &Device) -> bool {
        self.uid == other.uid
    }

    pub(crate) fn retirement(&self) -> &Retirement {
        &self.retirement
    }

    /// Whether residency created the logical device (an adopted one is the application's).
    pub(crate) fn is_owned(&self) -> bool {
        self.owned
    }

    /// This device's index in its set.
    pub fn index(&self) -> DeviceIndex {
        self.index
    }

    /// The position of its physical device in the set's stable physical order.
    pub fn physical_index(&self) -> u32 {
        self.physical_index
    }

    /// The device's name (`deviceName`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The features the library enabled.
    pub fn features(&self) -> EnabledFeatures {
        self.features
    }

    /// The universal (graphics + compute + transfer) queue.
    pub fn universal_queue(&self) -> &Arc<Queue> {
        &self.universal
    }

    /// The sparse-binding queue, when the device can bind sparse memory. It may be the universal
    /// queue itself (compare with `Arc::ptr_eq`).
    pub fn sparse_queue(&self) -> Option<&Arc<Queue>> {
        self.sparse.as_ref()
    }

    /// The queue the copies of moves under memory pressure run on
    /// ([`Defragmenter::relieve`](crate::Defragmenter::relieve)): a second queue of the universal
    /// queue's family where the family has one (no queue-family ownership transfer: the same
    /// family), so the copies run beside the renderer's frames; else the universal queue itself
    /// (compare with `Arc::ptr_eq`), as on lavapipe and on an adopted device. Its submissions
    /// signal a timeline of their own; the work that uses a moved buffer waits for its copy there.
    pub fn moves_queue(&self) -> &Arc<Queue> {
        &self.moves
    }

    /// Whether this thread holds the lock of one of the device's queues (universal, sparse,
    /// moves): it must not wait for another thread that submits or binds on them.
    pub(crate) fn queue_locked_here(&self) -> bool {
        self.universal.locked_here()
            || self.sparse.as_ref().is_some_and(|q| q.locked_here())
            || self.moves.locked_here()
    }

    /// The raw `ash` device, for code that records its own commands.
    pub fn raw(&self) -> &ash::Device {
        &self.raw
    }

    /// The raw instance.
    pub fn instance(&self) -> &ash::Instance {
        &self.shared.instance
    }

    /// The physical device.
    pub fn physical(&self) -> vk::PhysicalDevice {
        self.physical
    }

    /// Validation messages of the instance this device belongs to.
    pub fn validation_log(&self) -> &ValidationLog {
        &self.shared.log
    }

    /// The device's capabilities (captured once, on first use).
    pub fn profile(&self) -> &DeviceProfile {
        self.profile.get_or_init(|| profile_capture::capture(self, self.shared.instance_version))
    }

    /// Memory heaps and types (heap budgets as at device creation; see [`Device::current_heap`]).
    pub fn memory_properties(&self) -> &MemoryProperties {
        &self.memory
    }

    /// The device's limits.
    pub fn limits(&self) -> &vk::PhysicalDeviceLimits {
        &self.limits
    }

    /// What this device has allocated, and every live object by name.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// `minImportedHostPointerAlignment` where VK_EXT_external_memory_host is enabled
    /// ([`EnabledFeatures::external_memory_host`]): host memory imported for a copy starts and
    /// ends on a multiple of it. `None` without the extension.
    pub fn host_import_alignment(&self) -> Option<u64> {
        self.host_import.as_ref().map(|h| h.alignment)
    }

    /// VK_EXT_external_memory_host's entry points and alignment, where enabled.
    pub(crate) fn host_import(&self) -> Option<&HostImport> {
        self.host_import.as_ref()
    }

    /// `minAccelerationStructureScratchOffsetAlignment` (0 without VK_KHR_acceleration_structure):
    /// a build's scratch address must be a multiple of it.
    pub fn scratch_alignment(&self) -> u64 {
        self.scratch_alignment
    }

    /// The scratch floor of a buffer that may be a build's scratch (storage + device address)
    /// on a device with acceleration structures; 0 otherwise.
    pub(crate) fn scratch_floor(&self, usage: BufferUsage) -> u64 {
        let scratch = BufferUsage::STORAGE | BufferUsage::DEVICE_ADDRESS;
        if self.features.acceleration_structure && usage.contains(scratch) {
            self.scratch_alignment.max(1).next_power_of_two()
        } else {
            0
        }
    }

    /// The part of `usage` this device cannot create buffers with, and the extension or feature
    /// it lacks: device addresses without `bufferDeviceAddress`, the acceleration-structure
    /// usages without VK_KHR_acceleration_structure, a shader binding table without
    /// VK_KHR_ray_tracing_pipeline. `None`: all of it is supported.
    pub fn unsupported_usage(&self, usage: BufferUsage) -> Option<(BufferUsage, &'static str)> {
        let f = &self.features;
        let checks = [
            (BufferUsage::DEVICE_ADDRESS, f.buffer_device_address, "bufferDeviceAddress"),
            (
                BufferUsage::ACCELERATION_STRUCTURE_STORAGE | BufferUsage::ACCELERATION_STRUCTURE_BUILD_INPUT,
                f.acceleration_structure,
                "VK_KHR_acceleration_structure",
            ),
            (BufferUsage::SHADER_BINDING_TABLE, f.ray_tracing_pipeline, "VK_KHR_ray_tracing_pipeline"),
        ];
        checks.into_iter().find_map(|(bits, enabled, what)| {
            let asked = BufferUsage::from_bits_truncate(usage.bits() & bits.bits());
            (!enabled && !asked.is_empty()).then_some((asked, what))
        })
    }

    /// Frees every heap of the general allocator that holds no allocation, the one empty heap
    /// per memory type it keeps for reuse included (after a level unloads, or after
    /// defragmentation, to give the memory back now). Returns the bytes freed. Resources waiting
    /// in the retire queue still hold their ranges, so their heaps stay until they retire
    /// ([`Device::maintain`] or a wait retires them).
    pub fn release_empty_heaps(&self) -> u64 {
        self.general.iter().map(|list| list.locked().release_empty(self)).sum()
    }

    /// Every memory heap's budget and usage now, in one query of the driver (VK_EXT_memory_budget
    /// when the device has it, else the estimate residency's allocations use: 80 % of the heap):
    /// what the driver reports for the whole process, what residency itself holds, the
    /// application's cap ([`Ledger::set_heap_limit`]) and the budget residency allocates against
    /// (the driver's less the headroom, [`Device::set_budget_headroom_percent`]). Refreshes the
    /// cached budgets ([`Device::refresh_budgets`]).
    pub fn heap_budgets(&self) -> Vec<HeapStatus> {
        self.refresh_budgets();
        self.memory
            .heaps
            .iter()
            .enumerate()
            .map(|(i, heap)| {
                let index = i as u32;
                let driver = self.driver_heap(index).unwrap_or_else(|| heap.clone());
                let effective = self.ledger.budget(&self.current_heap(index, heap), index);
                HeapStatus {
                    index,
                    size: heap.size,
                    device_local: heap.device_local,
                    driver_budget: driver.budget,
                    driver_usage: driver.usage,
                    residency_bytes: self.ledger.heap_bytes(index),
                    limit: self.ledger.heap_limit(index),
                    budget: effective.budget,
                    usage: effective.usage,
                    available: effective.available(),
                }
            })
            .collect()
    }

    /// Names a Vulkan object of the application's for debuggers and validation messages
    /// (VK_EXT_debug_utils), as residency names its own. A name with an interior NUL is truncated
    /// there. Does nothing when debug utils are not available.
    ///
    /// # Safety
    /// `handle` is a live object created on this device (or this device itself, or one of its
    /// queues).
    pub unsafe fn set_object_name<H: vk::Handle>(&self, handle: H, name: &str) {
        self.set_name(handle, name);
    }

    /// Whether residency names the objects it makes per resource in the driver by default (a pool's
    /// placed buffers: [`BufferPoolDesc::debug_names`](crate::BufferPoolDesc::debug_names)): when
    /// the instance runs the validation layer (its messages then name them) or the environment
    /// sets `RESIDENCY_DEBUG_NAMES=1` (a debugger or capture tool). Long-lived objects (memory
    /// blocks, pools, images) are always named where debug utils are available.
    pub fn names_objects_by_default(&self) -> bool {
        self.debug_utils.is_some()
            && (self.shared.validation != crate::validation::ValidationMode::Off || debug_names_from_env())
    }

    /// Names one of residency's own objects (every caller passes a live object it created on this
    /// device).
    pub(crate) fn set_name<H: vk::Handle>(&self, handle: H, name: &str) {
        let Some(debug_utils) = &self.debug_utils else { return };
        let name = name.find('\0').map_or(name, |end| &name[..end]);
        // Names are short: build the NUL-terminated copy on the stack, not the heap.
        let mut stack = [0u8; 128];
        let owned;
        let c_name = if name.len() < stack.len() {
            stack[..name.len()].copy_from_slice(name.as_bytes());
            CStr::from_bytes_until_nul(&stack).unwrap_or_default()
        } else {
            owned = CString::new(name).unwrap_or_default();
            owned.as_c_str()
        };
        let info = vk::DebugUtilsObjectNameInfoEXT::default().object_handle(handle).object_name(c_name);
        // SAFETY: the handle is a live object of this device (this crate names only objects it just
        // created; `set_object_name`'s contract covers the application's) and info lives for the
        // call. A failure to name is not an error for the caller.
        if let Err(result) = unsafe { debug_utils.set_debug_utils_object_name(&info) } {
            tracing::debug!(?result, "vkSetDebugUtilsObjectNameEXT failed");
        }
    }

    /// Waits until the device is idle. On an adopted device (whose other queues residency does not
    /// synchronise) this waits for residency's own submissions instead
    /// ([`Device::wait_submitted`]), since `vkDeviceWaitIdle` needs every queue locked.
    pub fn wait_idle(&self) -> Result<()> {
        if !self.owned {
            return self.wait_submitted();
        }
        // Lock every queue so no submission races the wait (vkDeviceWaitIdle requires that all
        // queues are externally synchronised).
        let _universal = self.universal.lock()?;
        let _sparse = self
            .sparse
            .as_ref()
            .filter(|s| !Arc::ptr_eq(s, &self.universal))
            .map(|s| s.lock())
            .transpose()?;
        let _moves =
            Some(&self.moves).filter(|m| !Arc::ptr_eq(m, &self.universal)).map(|m| m.lock()).transpose()?;
        self.ledger
            .guard(FaultSite::Wait, || {
                // SAFETY: valid device; all its queues are locked.
                unsafe { self.raw.device_wait_idle() }
            })
            .during("vkDeviceWaitIdle")
    }

    /// Waits (at most `timeout` ns) until the driver has finished with everything submitted to
    /// residency's queues so far: under each queue's lock, an empty submission with a fence,
    /// which signals once every earlier submission to that queue has completed *and* the driver
    /// is done with it (a driver that runs submissions on its own thread, as lavapipe does,
    /// finishes one before it takes the next). Waiting for a semaphore value alone does not say
    /// the driver's thread has let go of the submission that signalled it; destroying a
    /// semaphore it still touches crashes. Returns whether every queue drained; a fence still
    /// pending is not destroyed (it is leaked and reported).
    pub(crate) fn drain_queues(&self, timeout: u64) -> bool {
        if self.is_lost() {
            return true;
        }
        let sparse = self.sparse.as_ref().filter(|s| !Arc::ptr_eq(s, &self.universal));
        let moves = Some(&self.moves).filter(|m| !Arc::ptr_eq(m, &self.universal));
        let mut drained = true;
        for queue in std::iter::once(&self.universal).chain(sparse).chain(moves) {
            // SAFETY: valid device.
            let fence = match unsafe { self.raw.create_fence(&vk::FenceCreateInfo::default(), None) } {
                Ok(fence) => fence,
                Err(result) => {
                    tracing::warn!(device = %self.index, ?result, "vkCreateFence for the teardown drain failed");
                    return false;
                }
            };
            let submitted = match queue.lock() {
                // SAFETY: the queue is locked (externally synchronised) and belongs to this
                // device; no batch, so nothing is waited on or signalled but the unsignalled fence.
                Ok(guard) => unsafe { self.raw.queue_submit2(*guard, &[], fence) },
                Err(_) => {
                    // SAFETY: created above, never submitted.
                    unsafe { self.raw.destroy_fence(fence, None) };
                    return false;
                }
            };
            if let Err(result) = submitted {
                self.ledger.note_result(result);
                // SAFETY: the submission failed, so the fence is not pending.
                unsafe { self.raw.destroy_fence(fence, None) };
                // A lost device runs nothing more; anything else is a failed drain.
                drained &= self.is_lost();
                continue;
            }
            // SAFETY: the fence belongs to this device and was submitted above.
            match unsafe { self.raw.wait_for_fences(&[fence], true, timeout) } {
                // SAFETY: signalled, so no pending submission uses it.
                Ok(()) => unsafe { self.raw.destroy_fence(fence, None) },
                Err(result) => {
                    self.ledger.note_result(result);
                    tracing::error!(device = %self.index, ?result, "a queue did not drain at teardown: its fence is leaked");
                    LEAKS_AT_TEARDOWN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    drained &= self.is_lost();
                }
            }
        }
        drained
    }

    /// Whether the device is lost (the driver reported `VK_ERROR_DEVICE_LOST`, or a fault was
    /// injected): submissions, binds and waits then fail with [`VulkanError::DeviceLost`] at once.
    /// Destroying objects still works; recreate the device to go on.
    pub fn is_lost(&self) -> bool {
        self.ledger.is_device_lost()
    }

    /// Waits for submitted work before the objects it uses are destroyed, on every path, the
    /// error paths included: past the fault hook, and bounded on a lost device (teardown never
    /// waits forever). A failure is logged, not returned: the caller destroys its objects next.
    pub(crate) fn settle_fences(&self, fences: &[vk::Fence]) {
        if fences.is_empty() {
            return;
        }
        let timeout = self.teardown_timeout();
        // SAFETY: the fences belong to this device and were submitted (callers pass only those).
        if let Err(result) = unsafe { self.raw.wait_for_fences(fences, true, timeout) } {
            self.ledger.note_result(result);
            tracing::warn!(device = %self.index, ?result, "waiting for work before teardown failed");
        }
    }
}

/// How long teardown waits for submitted work on a device the driver reported lost (the spec
/// makes such waits return in finite time; this bounds a driver that does not).
const LOST_DEVICE_WAIT_NS: u64 = 5_000_000_000;

impl Device {
    /// The bound of a wait at teardown: none unless the driver reported the device lost (after an
    /// injected loss the GPU still runs what was submitted, so teardown must wait for it).
    pub(crate) fn teardown_timeout(&self) -> u64 {
        if self.ledger.loss_is_real() {
            LOST_DEVICE_WAIT_NS
        } else {
            u64::MAX
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: valid device; waiting idle first makes destruction safe even if work is in
            // flight. Past the fault hook: an injected loss still lets the real work finish; on a
            // really lost device the call returns at once (the spec requires it to return in
            // finite time). An adopted device is the application's to wait for: its queues may be
            // in use by it right now.
            let _ = unsafe { self.raw.device_wait_idle() };
            // Everything released while the GPU used it: the device is idle now.
            self.retire_all();
        } else if !self.settle_adopted() {
            // Objects the application's own work may still use: freeing anything now could free
            // memory under it, so nothing of this device is freed (reported as leaked).
            let leaks = self.ledger.live_objects();
            tracing::error!(
                device = %self.index,
                pending = self.pending_destruction(),
                objects = leaks.len(),
                "adopted device dropped while released objects wait for the application's GPU work: leaked"
            );
            LEAKS_AT_TEARDOWN.fetch_add(leaks.len() as u64, std::sync::atomic::Ordering::SeqCst);
            return;
        }
        self.retirement.destroy(&self.raw);
        let general = std::mem::take(&mut self.general);
        for list in general {
            list.into_value().destroy_all(self);
        }
        let leaks = self.ledger.live_objects();
        for leak in &leaks {
            tracing::error!(device = %self.index, kind = leak.kind, name = %leak.name, "leaked at device teardown");
        }
        if !leaks.is_empty() {
            LEAKS_AT_TEARDOWN.fetch_add(leaks.len() as u64, std::sync::atomic::Ordering::SeqCst);
        }
        if self.owned {
            // SAFETY: every object the library tracks on this device was destroyed above or
            // reported as leaked (the validation layer then names it too); the device is idle.
            unsafe { self.raw.destroy_device(None) };
        }
    }
}

/// Everything `Device::from_parts` needs.
struct Parts {
    shared: Arc<InstanceShared>,
    physical: vk::PhysicalDevice,
    physical_index: u32,
    index: DeviceIndex,
    name: String,
    props: vk::PhysicalDeviceProperties,
    features: EnabledFeatures,
    raw: ash::Device,
    universal: Arc<Queue>,
    sparse: Option<Arc<Queue>>,
    /// The moves queue, when it is not the universal queue.
    moves: Option<Arc<Queue>>,
    owned: bool,
    non_coherent_atom: u64,
}

/// An application's logical device for [`DeviceSet::adopt`](crate::DeviceSet::adopt): residency
/// allocates, binds and submits on it and never destroys it.
#[derive(Clone)]
pub struct ExternalDevice {
    /// The physical device it was created on.
    pub physical: vk::PhysicalDevice,
    /// The logical device (a clone of the application's `ash::Device`).
    pub device: ash::Device,
    /// (family, index) of the queue residency submits to: graphics, compute and transfer.
    pub universal_queue: (u32, u32),
    /// (family, index) of a queue with sparse binding, if sparse residency is to be used (it may
    /// be the universal queue).
    pub sparse_queue: Option<(u32, u32)>,
    /// What the application enabled (residency uses nothing that is not marked here).
    pub features: EnabledFeatures,
}

impl std::fmt::Debug for ExternalDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalDevice")
            .field("universal_queue", &self.universal_queue)
            .field("sparse_queue", &self.sparse_queue)
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// Wraps an application's device as device `index` of a set.
    ///
    /// # Safety
    /// See [`DeviceSet::adopt`](crate::DeviceSet::adopt).
    pub(crate) unsafe fn adopt(
        shared: Arc<InstanceShared>,
        external: &ExternalDevice,
        physical_index: u32,
        index: DeviceIndex,
    ) -> Result<Arc<Device>> {
        let instance = &shared.instance;
        // SAFETY: the caller guarantees the physical device belongs to this instance.
        let props = unsafe { instance.get_physical_device_properties(external.physical) };
        let name = props.device_name_as_c_str().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if props.api_version < vk::API_VERSION_1_3 {
            return Err(VulkanError::Unsupported {
                device: name,
                reason: format!("Vulkan {} < 1.3", version_string(props.api_version)),
            });
        }
        if !external.features.timeline_semaphore {
            return Err(VulkanError::Unsupported {
                device: name,
                reason:
                    "residency needs timelineSemaphore enabled (deferred destruction waits on a timeline)"
                        .into(),
            });
        }
        let raw = external.device.clone();
        let get_queue = |(family, index): (u32, u32)| {
            // SAFETY: the caller guarantees the device was created with this queue.
            let raw_queue = unsafe { raw.get_device_queue(family, index) };
            Queue::new(family, index, raw_queue)
        };
        let universal = get_queue(external.universal_queue);
        let sparse = external.sparse_queue.map(|q| {
            if q == external.universal_queue {
                Arc::clone(&universal)
            } else {
                get_queue(q)
            }
        });
        let mut features = external.features;
        if sparse.is_none() {
            features.sparse_binding = false;
        }
        let device = Device::from_parts(Parts {
            shared,
            physical: external.physical,
            physical_index,
            index,
            name,
            props,
            features,
            raw,
            universal,
            sparse,
            moves: None,
            owned: false,
            non_coherent_atom: 0,
        })?;
        tracing::info!(device = %device.index, name = %device.name, "application device adopted");
        Ok(device)
    }
}

/// Objects found alive when their device was destroyed, over the whole process.
pub static LEAKS_AT_TEARDOWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Where the sparse-binding queue comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SparseQueue {
    /// A family of its own with SPARSE_BINDING (preferred: binds run beside graphics work).
    SeparateFamily(u32),
    /// A second queue of the universal family.
    SecondInUniversalFamily,
    /// The universal queue itself (a family with one queue, as on lavapipe).
    SharedWithUniversal,
}

struct QueueChoice {
    universal_family: Option<u32>,
    universal_queue_count: u32,
    sparse: Option<SparseQueue>,
    /// The index in the universal family of the moves queue, when the family has a queue to
    /// spare for it.
    moves_index: Option<u32>,
}

fn choose_queues(instance: &ash::Instance, physical: vk::PhysicalDevice) -> QueueChoice {
    // SAFETY: valid physical device.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
    let universal_flags = vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE | vk::QueueFlags::TRANSFER;
    let universal_family =
        families.iter().position(|f| f.queue_flags.contains(universal_flags) && f.queue_count > 0);
    let universal_family = universal_family.map(|i| i as u32);
    let separate = families.iter().enumerate().find(|(i, f)| {
        Some(*i as u32) != universal_family
            && f.queue_flags.contains(vk::QueueFlags::SPARSE_BINDING)
            && f.queue_count > 0
    });
    let universal_props = universal_family.map(|i| families[i as usize]);
    let sparse = match (separate, universal_props) {
        (Some((i, _)), _) => Some(SparseQueue::SeparateFamily(i as u32)),
        (None, Some(u)) if u.queue_flags.contains(vk::QueueFlags::SPARSE_BINDING) && u.queue_count > 1 => {
            Some(SparseQueue::SecondInUniversalFamily)
        }
        (None, Some(u)) if u.queue_flags.contains(vk::QueueFlags::SPARSE_BINDING) => {
            Some(SparseQueue::SharedWithUniversal)
        }
        _ => None,
    };
    let mut universal_queue_count = if sparse == Some(SparseQueue::SecondInUniversalFamily) { 2 } else { 1 };
    let moves_index =
        universal_props.filter(|u| u.queue_count > universal_queue_count).map(|_| universal_queue_count);
    if moves_index.is_some() {
        universal_queue_count += 1;
    }
    QueueChoice { universal_family, universal_queue_count, sparse, moves_index }
}

/// `RESIDENCY_DEBUG_NAMES=1`, read once per process.
fn debug_names_from_env() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("RESIDENCY_DEBUG_NAMES").is_ok_and(|v| v == "1"))
}
