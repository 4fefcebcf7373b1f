//! `residency-bench contention`: buffers created and destroyed from N threads at once, ours
//! against the peers and the bare driver in the same run (issues 4 and 31).
//!
//! Each thread creates and destroys buffers of 16 B–4 KiB in a loop, keeping a window of up to 64
//! live (a create when the window is empty or, at random, not full; else a destroy of a random
//! live one), with its own names (a renderer's per-thread descriptions: no name is shared between
//! threads). The contenders:
//! - `driver`: the driver alone, no allocator: `vkCreateBuffer`, `vkGetBufferMemoryRequirements`,
//!   `vkBindBufferMemory` at offset 0 of one shared memory object, `vkDestroyBuffer`;
//! - `vma`: one VMA allocator shared by every thread (`vmaCreateBuffer` / `vmaDestroyBuffer`,
//!   internally locked);
//! - `gpu-allocator`: one gpu-allocator behind a `Mutex` (as wgpu-hal shares it), taken around
//!   `allocate` and `free` only (the buffer's creation, requirements and bind run outside);
//! - `placed-1`, `placed-n`: our unknown-flags [`BufferPool`] (a placed `VkBuffer` per buffer, with
//!   its name, ledger entry, deferred destruction) with one arena, and with an arena per thread;
//! - `offset-allocator`: `offset-allocator` ranges behind a `Mutex` (no `VkBuffer`);
//! - `ranges-1`, `ranges-n`: our known-flags pool's ranges as full `Buffer`s (name, ledger entry,
//!   state-tracking id, deferred destruction), one arena and an arena per thread;
//! - `ranges-n-in-flight`: `ranges-n` with every buffer used by the frames in flight, so every
//!   release goes through the device's retire queue (each thread counts a frame every 1024
//!   creations).
//!
//! Reported per contender and thread count: total operations per second (median of 3 runs after a
//! warm-up), the scaling against its one-thread rate, the latency of single operations (p50
//! and p99 over every operation of the 3 runs, each timed alone: the clock reads add ~20 ns), and
//! the Rust heap allocations per operation (the bench's counting allocator: the library's and the
//! peers' Rust code; not the driver's or VMA's C/C++ allocations).

use residency::core::sync::measure::SplitMix64;
use residency::core::usage::{BufferPoolUsage, BufferUsage};
use residency::vulkan::ash::vk;
use residency::vulkan::{Buffer, BufferInit, BufferPool, BufferPoolDesc, Device, DeviceSet, DeviceSetDesc};
use serde::Serialize;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::placed_buffers::{bind_allocation, create_unbound, gpu_allocator_desc, new_vma};
use crate::placed_buffers::{vma_create_buffer, vma_destroy_buffer};
use crate::suballocators::{new_gpu_allocator, OffsetAllocator, SubAllocator};
use residency::vulkan::ash;
use residency::vulkan::format_map::vk_buffer_usage;

/// The contenders, in the report's order.
const CONTENDERS: [&str; 9] = [
    "driver",
    "vma",
    "gpu-allocator",
    "placed-1",
    "placed-n",
    "offset-allocator",
    "ranges-1",
    "ranges-n",
    "ranges-n-in-flight",
];

/// Variants of `driver` run only when `--only` names them, to find where the driver serialises:
/// `driver-memory-per-thread` binds each thread's buffers to a memory object of its own (on
/// residency's device); `driver-plain` runs on a second instance and device of the same GPU made
/// here with no extension, feature or debug messenger; `driver-messenger` adds to that a debug
/// messenger of every severity, as residency's instance has; `driver-named` is `driver` naming each
/// buffer (`vkSetDebugUtilsObjectNameEXT`, as residency names its own objects), and
/// `placed-1-named` / `placed-n-named` and `placed-1-unnamed` / `placed-n-unnamed` are `placed-1` /
/// `placed-n` with pools that do / do not name their buffers in the driver
/// (`BufferPoolDesc::debug_names` forced; `placed-*` take the default, named only under validation
/// or `RESIDENCY_DEBUG_NAMES=1`): the pairs show what the name costs. `driver-plain+X` runs on a plain device
/// with one group of what residency's device enables (`sparse`: sparse binding and residency;
/// `bda`: buffer device address; `priority`: `VK_EXT_memory_priority`; `budget`:
/// `VK_EXT_memory_budget`; `rt`: acceleration structures and ray-tracing pipelines with their
/// extensions; `core`: timeline semaphores, synchronization2, maintenance4, dynamic rendering;
/// `queues`: two queues of family 0; `all`: every group), to find the one the driver serialises on.
const DRIVER_VARIANTS: [&str; 16] = [
    "driver-memory-per-thread",
    "driver-named",
    "placed-1-unnamed",
    "placed-n-unnamed",
    "placed-1-named",
    "placed-n-named",
    "driver-plain",
    "driver-messenger",
    "driver-plain+sparse",
    "driver-plain+bda",
    "driver-plain+priority",
    "driver-plain+budget",
    "driver-plain+rt",
    "driver-plain+core",
    "driver-plain+queues",
    "driver-plain+all",
];

/// Usage of the placed buffers (every contender that makes a `VkBuffer` per buffer).
const PLACED_USAGE: BufferUsage = BufferUsage::STORAGE.union(BufferUsage::VERTEX);
/// Flags of the known-flags pools (ranges).
const RANGE_USAGE: BufferUsage = BufferUsage::STORAGE.union(BufferUsage::UNIFORM);
/// Live buffers a thread keeps at most.
const WINDOW: usize = 64;
/// Names per thread (each buffer takes one in turn).
const NAMES: usize = 256;
/// Page (and block) size of every allocator.
const PAGE: u64 = 16 << 20;

/// Options of `residency-bench contention`.
#[derive(Clone, Debug)]
pub struct ContentionOptions {
    threads: Vec<usize>,
    ops: usize,
    json: bool,
    only: Option<Vec<String>>,
}

/// Parses the options.
pub fn parse_options(args: &[String]) -> Result<ContentionOptions, String> {
    let mut o = ContentionOptions { threads: vec![1, 2, 4, 8, 16], ops: 20_000, json: false, only: None };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => o.json = true,
            "--threads" => {
                let list = it.next().ok_or("--threads needs a list such as 1,2,4,8,16")?;
                o.threads = list
                    .split(',')
                    .map(|t| t.trim().parse().map_err(|_| format!("bad thread count `{t}`")))
                    .collect::<Result<_, _>>()?;
                if o.threads.is_empty() || o.threads.contains(&0) {
                    return Err("thread counts must be positive".into());
                }
            }
            "--ops" => {
                o.ops = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("--ops needs a positive number")?
            }
            "--only" => {
                let list = it.next().ok_or("--only needs a list of contenders")?;
                let only: Vec<String> = list.split(',').map(|c| c.trim().to_owned()).collect();
                let known = |c: &str| CONTENDERS.contains(&c) || DRIVER_VARIANTS.contains(&c);
                if let Some(bad) = only.iter().find(|c| !known(c)) {
                    let all = CONTENDERS.iter().chain(&DRIVER_VARIANTS).copied().collect::<Vec<_>>();
                    return Err(format!("unknown contender `{bad}` (known: {})", all.join(", ")));
                }
                o.only = Some(only);
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok(o)
}

#[derive(Debug, Serialize)]
struct Row {
    contender: &'static str,
    threads: usize,
    ops: usize,
    ops_per_sec: f64,
    scaling: f64,
    p50_ns: u32,
    p99_ns: u32,
    failures: usize,
    /// Rust heap allocations per operation (steady state: the warm-up's are not counted).
    allocs_per_op: f64,
}

/// Something every thread creates and destroys buffers (or ranges) with.
trait Contender: Sync {
    /// A live buffer.
    type Handle: Send;
    /// Creates a buffer of `size` bytes named `name`.
    fn create(&self, name: &Arc<str>, size: u64) -> Option<Self::Handle>;
    /// Destroys it.
    fn destroy(&self, handle: Self::Handle);
}

/// One thread's loop: `ops` operations in a window of live buffers; each operation's latency in
/// `latencies` (ns). Returns the operations done, the failed creations and the heap allocations
/// the operations made (the window's last buffers, destroyed after, are not counted).
fn hammer<C: Contender>(c: &C, thread: usize, ops: usize, latencies: &mut Vec<u32>) -> (usize, usize, u64) {
    let names: Vec<Arc<str>> = (0..NAMES).map(|i| Arc::from(format!("contention t{thread} b{i}"))).collect();
    let mut rng = SplitMix64::new(0x9e37_79b9 ^ (thread as u64 + 1));
    let mut live = Vec::with_capacity(WINDOW);
    let (mut done, mut failures) = (0, 0);
    let allocations = crate::thread_allocations();
    for i in 0..ops {
        let create = live.len() < WINDOW && (live.is_empty() || rng.next_u64() % 2 == 0);
        if create {
            let size = 16 + rng.next_u64() % 4080;
            let started = Instant::now();
            let made = c.create(&names[i % NAMES], size);
            latencies.push(started.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
            match made {
                Some(handle) => {
                    live.push(handle);
                    done += 1;
                }
                None => failures += 1,
            }
        } else {
            let handle = live.swap_remove((rng.next_u64() % live.len() as u64) as usize);
            let started = Instant::now();
            c.destroy(handle);
            latencies.push(started.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
            done += 1;
        }
    }
    let allocations = crate::thread_allocations() - allocations;
    for handle in live {
        c.destroy(handle);
    }
    (done, failures, allocations)
}

/// Runs `threads` threads of [`hammer`] once: operations done, failures, the latencies and the
/// heap allocations.
fn run_once<C: Contender>(c: &C, threads: usize, ops: usize) -> (usize, usize, Vec<u32>, u64) {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut latencies = Vec::with_capacity(ops);
                    let (done, failures, allocations) = hammer(c, t, ops, &mut latencies);
                    (done, failures, latencies, allocations)
                })
            })
            .collect();
        let mut all = (0, 0, Vec::with_capacity(ops * threads), 0);
        for h in handles {
            let (done, failures, latencies, allocations) = h.join().unwrap_or_default();
            all.0 += done;
            all.1 += failures;
            all.2.extend(latencies);
            all.3 += allocations;
        }
        all
    })
}

/// The `q`-quantile (0..=1) of `values` (reordered).
fn quantile(values: &mut [u32], q: f64) -> u32 {
    if values.is_empty() {
        return 0;
    }
    let index = ((values.len() - 1) as f64 * q).round() as usize;
    *values.select_nth_unstable(index).1
}

/// A warm-up run, then 3 timed runs: the median rate, and the latencies of all 3.
fn measure<C: Contender>(name: &'static str, c: &C, threads: usize, ops: usize) -> Row {
    run_once(c, threads, ops); // warm-up: pages created, caches warm
    let mut rates = Vec::new();
    let mut latencies = Vec::new();
    let mut failures = 0;
    let (mut allocations, mut operations) = (0, 0);
    for _ in 0..3 {
        let started = Instant::now();
        let (done, failed, l, allocated) = run_once(c, threads, ops);
        rates.push(done as f64 / started.elapsed().as_secs_f64());
        operations += l.len();
        latencies.extend(l);
        failures += failed;
        allocations += allocated;
    }
    rates.sort_by(f64::total_cmp);
    Row {
        contender: name,
        threads,
        ops: ops * threads,
        ops_per_sec: rates[1],
        scaling: 0.0,
        p50_ns: quantile(&mut latencies, 0.50),
        p99_ns: quantile(&mut latencies, 0.99),
        failures,
        allocs_per_op: allocations as f64 / operations.max(1) as f64,
    }
}

/// Ours: a pool's buffers.
struct Pool {
    pool: BufferPool,
    usage: Option<BufferUsage>,
}

impl Contender for Pool {
    type Handle = Buffer;

    fn create(&self, name: &Arc<str>, size: u64) -> Option<Buffer> {
        let mut init = BufferInit::new(Arc::clone(name), size);
        init.usage = self.usage;
        self.pool.init_buffer(&init).ok()
    }

    fn destroy(&self, buffer: Buffer) {
        let _ = self.pool.free_buffer(buffer);
    }
}

/// Frames a buffer of `ranges-n-in-flight` is used for after its creation.
const FRAMES_IN_FLIGHT: u64 = 2;
/// Creations per thread between two frames of `ranges-n-in-flight` (each thread counts frames).
const OPS_PER_FRAME: u32 = 1024;

thread_local! {
    /// This thread's creations since its last frame (`ranges-n-in-flight`).
    static SINCE_FRAME: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Ours, as a renderer releases: every buffer is used by the frames in flight
/// (`used_until(frames_from_now(2))`), so each release is deferred (queued in the device's retire
/// queue, returned when a later frame is counted); each thread counts a frame every
/// [`OPS_PER_FRAME`] creations (`advance_frame`, which retires what is due).
struct InFlight {
    pool: Pool,
    device: Arc<Device>,
}

impl Contender for InFlight {
    type Handle = Buffer;

    fn create(&self, name: &Arc<str>, size: u64) -> Option<Buffer> {
        let buffer = self.pool.create(name, size)?;
        buffer.used_until(self.device.frames_from_now(FRAMES_IN_FLIGHT)).ok()?;
        let since = SINCE_FRAME.with(|s| {
            s.set((s.get() + 1) % OPS_PER_FRAME);
            s.get()
        });
        if since == 0 {
            self.device.advance_frame();
        }
        Some(buffer)
    }

    fn destroy(&self, buffer: Buffer) {
        self.pool.destroy(buffer);
    }
}

/// The driver alone: a `VkBuffer` per buffer, bound at offset 0 of a memory object (aliasing is
/// allowed; nothing reads the buffers): one shared by every thread, or one per thread.
struct Driver {
    raw: ash::Device,
    memories: Vec<vk::DeviceMemory>,
    memory_size: u64,
    /// Names each buffer through it (`driver-named`).
    names: Option<Arc<Device>>,
    /// Keeps what `raw` belongs to alive (declared last, dropped after the memory is freed).
    _owner: DriverOwner,
}

/// What a [`Driver`]'s device belongs to.
enum DriverOwner {
    Residency(#[allow(dead_code, reason = "held only to keep the device alive")] Arc<Device>),
    Plain(#[allow(dead_code, reason = "held only to keep the device alive")] Box<PlainDevice>),
}

thread_local! {
    /// This thread's memory object in `driver-memory-per-thread` (modulo their count).
    static MEMORY_SLOT: usize = {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    };
}

/// A buffer of the contention's placed usage.
fn placed_info(size: u64) -> vk::BufferCreateInfo<'static> {
    vk::BufferCreateInfo::default()
        .size(size)
        .usage(vk_buffer_usage(PLACED_USAGE))
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
}

impl Driver {
    /// On residency's device, with `memories` memory objects (threads take them in turn).
    fn on(device: &Arc<Device>, memories: usize) -> Result<Driver, String> {
        let local: Vec<bool> =
            device.memory_properties().types.iter().map(|t| t.flags.device_local).collect();
        Driver::new(device.raw().clone(), &local, memories, DriverOwner::Residency(Arc::clone(device)))
    }

    fn new(
        raw: ash::Device,
        device_local: &[bool],
        count: usize,
        owner: DriverOwner,
    ) -> Result<Driver, String> {
        // SAFETY: valid device; non-zero size and a usage; the probe is destroyed at once.
        let requirements = unsafe {
            let probe =
                raw.create_buffer(&placed_info(4096), None).map_err(|e| format!("vkCreateBuffer: {e}"))?;
            let requirements = raw.get_buffer_memory_requirements(probe);
            raw.destroy_buffer(probe, None);
            requirements
        };
        let type_index = (0..device_local.len() as u32)
            .filter(|&t| requirements.memory_type_bits & (1 << t) != 0)
            .min_by_key(|&t| !device_local[t as usize])
            .ok_or("no memory type for the driver's buffers")?;
        let memory_size = 1 << 20;
        let info =
            vk::MemoryAllocateInfo::default().allocation_size(memory_size).memory_type_index(type_index);
        let mut driver = Driver { raw, memories: Vec::new(), memory_size, names: None, _owner: owner };
        for _ in 0..count {
            // SAFETY: valid device; a type its buffers accept; freed in `drop`.
            let memory = unsafe { driver.raw.allocate_memory(&info, None) }
                .map_err(|e| format!("vkAllocateMemory: {e}"))?;
            driver.memories.push(memory);
        }
        Ok(driver)
    }
}

impl Contender for Driver {
    type Handle = vk::Buffer;

    fn create(&self, name: &Arc<str>, size: u64) -> Option<vk::Buffer> {
        let memory = self.memories[MEMORY_SLOT.with(|s| *s) % self.memories.len()];
        // SAFETY: valid device; non-zero size and a usage.
        let buffer = unsafe { self.raw.create_buffer(&placed_info(size), None) }.ok()?;
        if let Some(device) = &self.names {
            // SAFETY: just created on this device (`names` is the device of `raw`).
            unsafe { device.set_object_name(buffer, name) };
        }
        // SAFETY: just created on this device.
        let requirements = unsafe { self.raw.get_buffer_memory_requirements(buffer) };
        let fits = requirements.size <= self.memory_size;
        // SAFETY: unbound; offset 0 satisfies every alignment; the range fits the memory (checked).
        if !fits || unsafe { self.raw.bind_buffer_memory(buffer, memory, 0) }.is_err() {
            // SAFETY: created above, unused.
            unsafe { self.raw.destroy_buffer(buffer, None) };
            return None;
        }
        Some(buffer)
    }

    fn destroy(&self, buffer: vk::Buffer) {
        // SAFETY: made by `create` on this device; no GPU work uses it; destroyed once.
        unsafe { self.raw.destroy_buffer(buffer, None) };
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        for &memory in &self.memories {
            // SAFETY: every buffer bound to it was destroyed (each run destroys what it made).
            unsafe { self.raw.free_memory(memory, None) };
        }
    }
}

/// A second instance and device of residency's GPU, made with no extension and no feature (and a
/// debug messenger of every severity when asked), for the driver variants.
struct PlainDevice {
    entry: ash::Entry,
    instance: ash::Instance,
    device: Option<ash::Device>,
    messenger: vk::DebugUtilsMessengerEXT,
}

/// The messenger of `driver-messenger`: takes every message and does nothing with it.
unsafe extern "system" fn ignore_message(
    _severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    _data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user_data: *mut std::ffi::c_void,
) -> vk::Bool32 {
    vk::FALSE
}

impl PlainDevice {
    /// The plain device's [`Driver`] (one shared memory object) on the GPU named `name`, with the
    /// group `group` of residency's features enabled (see [`DRIVER_VARIANTS`]; `""`: none).
    fn driver(name: &str, messenger: bool, group: &str) -> Result<Driver, String> {
        // SAFETY: loads the system's Vulkan loader.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| format!("Vulkan loader: {e}"))?;
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
        let extensions = [ash::ext::debug_utils::NAME.as_ptr()];
        let mut info = vk::InstanceCreateInfo::default().application_info(&app);
        if messenger {
            info = info.enabled_extension_names(&extensions);
        }
        // SAFETY: the create info and what it points at live for the call.
        let instance =
            unsafe { entry.create_instance(&info, None) }.map_err(|e| format!("vkCreateInstance: {e}"))?;
        let mut plain =
            PlainDevice { entry, instance, device: None, messenger: vk::DebugUtilsMessengerEXT::null() };
        if messenger {
            // Every severity (verbose, info, warning, error) and type (general, validation,
            // performance), as residency's own messenger asks for.
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(vk::DebugUtilsMessageSeverityFlagsEXT::from_raw(0x1111))
                .message_type(vk::DebugUtilsMessageTypeFlagsEXT::from_raw(0x7))
                .pfn_user_callback(Some(ignore_message));
            let utils = ash::ext::debug_utils::Instance::new(&plain.entry, &plain.instance);
            // SAFETY: valid instance with VK_EXT_debug_utils; destroyed in `drop`.
            plain.messenger = unsafe { utils.create_debug_utils_messenger(&info, None) }
                .map_err(|e| format!("vkCreateDebugUtilsMessengerEXT: {e}"))?;
        }
        // SAFETY: valid instance.
        let physicals = unsafe { plain.instance.enumerate_physical_devices() }.map_err(|e| e.to_string())?;
        let physical = physicals
            .into_iter()
            .find(|&p| {
                // SAFETY: a physical device of this instance.
                let props = unsafe { plain.instance.get_physical_device_properties(p) };
                props.device_name_as_c_str().is_ok_and(|n| n.to_string_lossy() == name)
            })
            .ok_or_else(|| format!("no physical device named {name}"))?;
        let on = |g: &str| group == g || group == "all";
        let priorities = [1.0, 1.0];
        // SAFETY: a physical device of this instance.
        let families = unsafe { plain.instance.get_physical_device_queue_family_properties(physical) };
        let queue_count = if on("queues") { 2 } else { 1 };
        if families.first().is_none_or(|f| (f.queue_count as usize) < queue_count) {
            return Err(format!("family 0 has fewer than {queue_count} queues"));
        }
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(0)
            .queue_priorities(&priorities[..queue_count])];
        let features = vk::PhysicalDeviceFeatures::default()
            .sparse_binding(on("sparse"))
            .sparse_residency_buffer(on("sparse"))
            .sparse_residency_image2_d(on("sparse"))
            .sparse_residency_image3_d(on("sparse"))
            .sparse_residency_aliased(on("sparse"))
            .shader_resource_residency(on("sparse"))
            .shader_resource_min_lod(on("sparse"));
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(on("core"))
            .buffer_device_address(on("bda") || on("rt"));
        let mut v13 = vk::PhysicalDeviceVulkan13Features::default()
            .synchronization2(on("core"))
            .maintenance4(on("core"))
            .dynamic_rendering(on("core"));
        let mut priority = vk::PhysicalDeviceMemoryPriorityFeaturesEXT::default().memory_priority(true);
        let mut accel =
            vk::PhysicalDeviceAccelerationStructureFeaturesKHR::default().acceleration_structure(true);
        let mut rt = vk::PhysicalDeviceRayTracingPipelineFeaturesKHR::default().ray_tracing_pipeline(true);
        let mut features2 =
            vk::PhysicalDeviceFeatures2::default().features(features).push_next(&mut v12).push_next(&mut v13);
        let mut extensions = Vec::new();
        if on("priority") {
            features2 = features2.push_next(&mut priority);
            extensions.push(ash::ext::memory_priority::NAME.as_ptr());
        }
        if on("budget") {
            extensions.push(ash::ext::memory_budget::NAME.as_ptr());
        }
        if on("rt") {
            features2 = features2.push_next(&mut accel).push_next(&mut rt);
            extensions.push(ash::khr::acceleration_structure::NAME.as_ptr());
            extensions.push(ash::khr::deferred_host_operations::NAME.as_ptr());
            extensions.push(ash::khr::ray_tracing_pipeline::NAME.as_ptr());
        }
        if !["", "sparse", "bda", "priority", "budget", "rt", "core", "queues", "all"].contains(&group) {
            return Err(format!("unknown feature group `{group}`"));
        }
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&extensions)
            .push_next(&mut features2);
        // SAFETY: valid physical device; family 0 has the queues asked for (checked). A feature or
        // extension the device lacks is answered by vkCreateDevice with
        // VK_ERROR_FEATURE_NOT_PRESENT / VK_ERROR_EXTENSION_NOT_PRESENT, which is returned.
        let device = unsafe { plain.instance.create_device(physical, &info, None) }
            .map_err(|e| format!("vkCreateDevice ({group}): {e}"))?;
        // SAFETY: valid physical device.
        let memory = unsafe { plain.instance.get_physical_device_memory_properties(physical) };
        let local: Vec<bool> = memory.memory_types[..memory.memory_type_count as usize]
            .iter()
            .map(|t| t.property_flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL))
            .collect();
        plain.device = Some(device.clone());
        Driver::new(device, &local, 1, DriverOwner::Plain(Box::new(plain)))
    }
}

impl Drop for PlainDevice {
    fn drop(&mut self) {
        // SAFETY: the driver freed its memory before (its owner is dropped after it); nothing else
        // was made on the device; the messenger and the instance go last.
        unsafe {
            if let Some(device) = self.device.take() {
                device.destroy_device(None);
            }
            if self.messenger != vk::DebugUtilsMessengerEXT::null() {
                ash::ext::debug_utils::Instance::new(&self.entry, &self.instance)
                    .destroy_debug_utils_messenger(self.messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// VMA, shared (it locks inside).
struct Vma {
    allocator: vk_mem::Allocator,
    /// Keeps the device alive until the allocator (declared first, dropped first) is destroyed.
    _device: Arc<Device>,
}

impl Contender for Vma {
    type Handle = (vk::Buffer, vk_mem::Allocation);

    fn create(&self, _name: &Arc<str>, size: u64) -> Option<Self::Handle> {
        vma_create_buffer(&self.allocator, size, PLACED_USAGE).ok()
    }

    fn destroy(&self, handle: Self::Handle) {
        vma_destroy_buffer(&self.allocator, handle);
    }
}

/// gpu-allocator behind a mutex.
struct GpuAllocator {
    allocator: Mutex<gpu_allocator::vulkan::Allocator>,
    device: Arc<Device>,
}

impl Contender for GpuAllocator {
    type Handle = (vk::Buffer, gpu_allocator::vulkan::Allocation);

    fn create(&self, name: &Arc<str>, size: u64) -> Option<Self::Handle> {
        let (buffer, requirements) = create_unbound(&self.device, size, PLACED_USAGE).ok()?;
        let allocated = self.allocator.lock().ok()?.allocate(&gpu_allocator_desc(name, requirements));
        let Ok(allocation) = allocated else {
            // SAFETY: created above, unbound, unused.
            unsafe { self.device.raw().destroy_buffer(buffer, None) };
            return None;
        };
        match bind_allocation(&self.device, buffer, allocation) {
            Ok(handle) => Some(handle),
            Err((_, allocation)) => {
                if let Ok(mut allocator) = self.allocator.lock() {
                    let _ = allocator.free(allocation);
                }
                None
            }
        }
    }

    fn destroy(&self, (buffer, allocation): Self::Handle) {
        // SAFETY: made by `create` on this device; no GPU work uses it; destroyed once, before
        // its memory is freed.
        unsafe { self.device.raw().destroy_buffer(buffer, None) };
        if let Ok(mut allocator) = self.allocator.lock() {
            let _ = allocator.free(allocation);
        }
    }
}

/// offset-allocator behind a mutex: ranges, no `VkBuffer`, at our ranges' alignment.
struct Offsets(Mutex<OffsetAllocator>, u64);

impl Contender for Offsets {
    type Handle = <OffsetAllocator as SubAllocator>::Handle;

    fn create(&self, _name: &Arc<str>, size: u64) -> Option<Self::Handle> {
        self.0.lock().ok()?.allocate(size, self.1)
    }

    fn destroy(&self, handle: Self::Handle) {
        if let Ok(mut allocator) = self.0.lock() {
            allocator.free(handle);
        }
    }
}

/// Measures contender `name` at `threads` threads.
fn measure_contender(
    device: &Arc<Device>,
    name: &'static str,
    threads: usize,
    ops: usize,
) -> Result<Row, String> {
    let pool = |usage: BufferPoolUsage, own: Option<BufferUsage>, arenas: usize| {
        let desc = BufferPoolDesc::new(format!("contention {name}"), usage)
            .with_page_size(PAGE)
            .with_arenas(arenas as u32);
        // `placed-*` take the pool's default (named in the driver only under validation or
        // RESIDENCY_DEBUG_NAMES=1); the `-named` / `-unnamed` variants force it.
        let desc = match name {
            n if n.ends_with("-unnamed") => desc.with_debug_names(false),
            n if n.ends_with("-named") => desc.with_debug_names(true),
            _ => desc,
        };
        let pool = BufferPool::new(Arc::clone(device), desc).map_err(|e| e.to_string())?;
        Ok::<_, String>(Pool { pool, usage: own })
    };
    let placed = BufferPoolUsage::Unknown;
    let ranges = BufferPoolUsage::Known(RANGE_USAGE);
    Ok(match name {
        "driver" => measure(name, &Driver::on(device, 1)?, threads, ops),
        "driver-memory-per-thread" => measure(name, &Driver::on(device, threads)?, threads, ops),
        "driver-named" => {
            let mut driver = Driver::on(device, 1)?;
            driver.names = Some(Arc::clone(device));
            measure(name, &driver, threads, ops)
        }
        "driver-plain" => measure(name, &PlainDevice::driver(device.name(), false, "")?, threads, ops),
        "driver-messenger" => measure(name, &PlainDevice::driver(device.name(), true, "")?, threads, ops),
        plain if plain.starts_with("driver-plain+") => {
            let group = &plain["driver-plain+".len()..];
            measure(name, &PlainDevice::driver(device.name(), false, group)?, threads, ops)
        }
        "vma" => {
            let vma = Vma { allocator: new_vma(device)?, _device: Arc::clone(device) };
            measure(name, &vma, threads, ops)
        }
        "gpu-allocator" => {
            let allocator = Mutex::new(new_gpu_allocator(device, PAGE));
            measure(name, &GpuAllocator { allocator, device: Arc::clone(device) }, threads, ops)
        }
        "placed-1" | "placed-1-unnamed" | "placed-1-named" => {
            measure(name, &pool(placed, Some(PLACED_USAGE), 1)?, threads, ops)
        }
        "placed-n" | "placed-n-unnamed" | "placed-n-named" => {
            measure(name, &pool(placed, Some(PLACED_USAGE), threads)?, threads, ops)
        }
        "offset-allocator" => {
            // Our ranges' alignment: the pool flags' offset floors, at least 16 B.
            let limits = device.limits();
            let alignment = limits
                .min_uniform_buffer_offset_alignment
                .max(limits.min_storage_buffer_offset_alignment)
                .max(16)
                .next_power_of_two();
            let offsets = Offsets(Mutex::new(OffsetAllocator::with_capacity(&(), PAGE)), alignment);
            measure(name, &offsets, threads, ops)
        }
        "ranges-1" => measure(name, &pool(ranges, None, 1)?, threads, ops),
        "ranges-n" => measure(name, &pool(ranges, None, threads)?, threads, ops),
        "ranges-n-in-flight" => {
            let in_flight = InFlight { pool: pool(ranges, None, threads)?, device: Arc::clone(device) };
            let row = measure(name, &in_flight, threads, ops);
            drop(in_flight);
            // What waits for the frames (the last buffers, then the pool's pages) retires.
            for _ in 0..=FRAMES_IN_FLIGHT {
                device.advance_frame();
            }
            row
        }
        other => return Err(format!("unknown contender `{other}`")),
    })
}

fn measure_all(device: &Arc<Device>, o: &ContentionOptions) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for name in CONTENDERS.into_iter().chain(DRIVER_VARIANTS) {
        if o.only.is_none() && DRIVER_VARIANTS.contains(&name) {
            continue;
        }
        if o.only.as_ref().is_some_and(|only| !only.iter().any(|c| c == name)) {
            continue;
        }
        let mut base = 0.0;
        for &threads in &o.threads {
            let mut row = measure_contender(device, name, threads, o.ops)?;
            if base == 0.0 {
                base = row.ops_per_sec / threads as f64;
            }
            row.scaling = row.ops_per_sec / base;
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Runs the benchmark on device 0.
pub fn run(o: &ContentionOptions) -> ExitCode {
    let set = match DeviceSet::new(&DeviceSetDesc::default()) {
        Ok(set) => set,
        Err(e) => {
            eprintln!("residency-bench contention needs a Vulkan device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let device = Arc::clone(&set.devices()[0]);
    let rows = match measure_all(&device, o) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("residency-bench contention: {e}");
            return ExitCode::FAILURE;
        }
    };
    let name = device.name().to_owned();
    drop(device);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if o.json {
        let json = serde_json::json!({"device": name, "cores": cores, "ops_per_thread": o.ops, "rows": rows});
        println!("{}", serde_json::to_string_pretty(&json).expect("serialises"));
    } else {
        println!("{name}, {cores} cores; median of 3 runs; scaling = rate / (one-thread rate per thread)");
        println!(
            "{:<24} {:>7} {:>12} {:>8} {:>8} {:>8} {:>8} {:>10}",
            "contender", "threads", "ops/s", "scaling", "p50 ns", "p99 ns", "failed", "allocs/op"
        );
        for r in &rows {
            println!(
                "{:<24} {:>7} {:>12.0} {:>8.2} {:>8} {:>8} {:>8} {:>10.3}",
                r.contender,
                r.threads,
                r.ops_per_sec,
                r.scaling,
                r.p50_ns,
                r.p99_ns,
                r.failures,
                r.allocs_per_op
            );
        }
    }
    crate::validation_status(Some(&set))
}
