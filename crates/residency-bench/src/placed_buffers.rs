//! W3, on a real Vulkan device: placed buffers created and bound per second, and range
//! allocations per second from a known-flags pool.
//!
//! `w3-placed`: every buffer is its own `VkBuffer`, with its own usage (vertex, index, uniform or
//! storage, each with copy-dst, in turn), bound at an offset in shared device-local memory:
//! - `residency`: a [`BufferPool`] with unknown bind flags (`init_buffer` / `free_buffer`);
//! - `residency-device`: [`Device::create_buffer`] / `destroy_buffer` (the general allocator);
//! - `vma`: `vmaCreateBuffer` / `vmaDestroyBuffer` (`vk-mem`, `AUTO_PREFER_DEVICE`);
//! - `gpu-allocator`: `vkCreateBuffer`, `vkGetBufferMemoryRequirements`, `Allocator::allocate`,
//!   `vkBindBufferMemory` / `vkDestroyBuffer`, `Allocator::free`.
//!
//! `w3-range`: ranges of one storage buffer (no `VkBuffer` each): `residency` is a [`BufferPool`]
//! with known flags; `vma` is a VMA virtual block over a page of the same size, the way VMA's
//! documentation suggests sub-allocating one buffer; `vma-locked` is that block behind a `Mutex`
//! taken per call (the synchronization a `Sync` pool pays, so `vma-locked` − `vma` is the lock's
//! cost on the machine), and `residency-tlsf-locked` the core's `TlsfAllocator` over a page behind
//! the same `Mutex` (so `residency` − `residency-tlsf-locked` is what the pool adds around them).
//! `residency-local` is the same pool's [`LocalRanges`] (pages of the thread's own, no lock: the
//! counterpart of a virtual block, which is externally synchronized too).
//!
//! Each repetition creates the plan's buffers in order (timed), then destroys them in a fixed
//! shuffled order (timed apart). Every allocator first creates one small "anchor" buffer that
//! lives through the whole measurement, so none of them allocates or frees a memory block inside
//! the timed loops; an untimed warm-up cycle precedes the repetitions, and an untimed tracking
//! cycle measures the memory footprint.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use residency::core::usage::{BufferPoolUsage, BufferUsage};
use residency::vulkan::ash::vk;
use residency::vulkan::format_map::vk_buffer_usage;
use residency::vulkan::{
    Buffer, BufferDesc, BufferInit, BufferPool, BufferPoolDesc, Device, LocalRange, LocalRanges, PoolRange,
};

use crate::measure::{median, minimum, takes_part};
use crate::report::Record;
use crate::suballocators::{new_gpu_allocator, Residency, SubAllocator, VmaVirtual};
use crate::vma_rng::VmaRng;

/// Seed of W3's sizes and destruction order.
pub const W3_SEED: u32 = 20_092_010;
/// Smallest buffer.
pub const W3_MIN_SIZE: u32 = 16;
/// Largest buffer.
pub const W3_MAX_SIZE: u32 = 4096;
/// Usage of the known-flags pool of `w3-range` (and of the anchors).
pub const RANGE_USAGE: BufferUsage = BufferUsage::STORAGE.union(BufferUsage::COPY_DST);
/// Page size of the pools, and block size of VMA's virtual block in `w3-range`.
pub const PAGE_SIZE: u64 = 64 << 20;

/// The buffers of one repetition.
#[derive(Clone, Debug)]
pub struct W3Plan {
    /// Per buffer: its request (name, size, usage).
    pub buffers: Vec<BufferInit>,
    /// The order in which they are destroyed (a permutation of the indices).
    pub destroy_order: Vec<usize>,
}

/// The usages buffers take in turn.
const USAGES: [BufferUsage; 4] =
    [BufferUsage::VERTEX, BufferUsage::INDEX, BufferUsage::UNIFORM, BufferUsage::STORAGE];

/// `count` buffers of 16 B..=4 KiB (VMA's generator, seed 20092010).
pub fn w3_plan(count: usize) -> W3Plan {
    let mut rng = VmaRng::new(W3_SEED);
    let buffers = (0..count)
        .map(|i| {
            let size = W3_MIN_SIZE + rng.generate() % (W3_MAX_SIZE - W3_MIN_SIZE + 1);
            let usage = USAGES[i % USAGES.len()] | BufferUsage::COPY_DST;
            BufferInit::new(format!("w3 buffer {i}"), u64::from(size)).with_usage(usage)
        })
        .collect();
    let mut destroy_order: Vec<usize> = (0..count).collect();
    for i in (1..count).rev() {
        destroy_order.swap(i, rng.generate() as usize % (i + 1));
    }
    W3Plan { buffers, destroy_order }
}

/// Something that creates and destroys buffers (or ranges).
trait BufferMaker {
    /// A live buffer.
    type Handle;
    /// Creates buffer `index` of the plan (`None`: the anchor), described by `init`.
    fn create(&mut self, index: Option<usize>, init: &BufferInit) -> Result<Self::Handle, String>;
    /// Destroys it.
    fn destroy(&mut self, handle: Self::Handle);
    /// The memory object (raw handle, or 0 for a virtual block) and offset it is bound at.
    fn location(&self, handle: &Self::Handle) -> (u64, u64);
}

/// Ours: a pool (unknown flags: placed buffers; known flags: ranges).
struct PoolMaker {
    pool: BufferPool,
}

impl BufferMaker for PoolMaker {
    type Handle = Buffer;

    #[inline]
    fn create(&mut self, _index: Option<usize>, init: &BufferInit) -> Result<Buffer, String> {
        self.pool.init_buffer(init).map_err(|e| e.to_string())
    }

    #[inline]
    fn destroy(&mut self, handle: Buffer) {
        if let Err(buffer) = self.pool.free_buffer(handle) {
            panic!("refused by its own pool: {buffer}");
        }
    }

    fn location(&self, handle: &Buffer) -> (u64, u64) {
        // A range's offset in its page buffer is also its offset in the page's memory.
        let (memory, offset) = handle.memory();
        (vk::Handle::as_raw(memory), offset)
    }
}

/// Ours: a thread's own ranges of a known-flags pool (`LocalRanges`, no lock); its ranges borrow
/// it, so the maker is a reference and the slots live only through one cycle (`LocalContender`).
impl<'a> BufferMaker for &'a LocalRanges {
    type Handle = LocalRange<'a>;

    #[inline]
    fn create(&mut self, _index: Option<usize>, init: &BufferInit) -> Result<LocalRange<'a>, String> {
        self.allocate(init.size, init.alignment).map_err(|e| e.to_string())
    }

    #[inline]
    fn destroy(&mut self, handle: LocalRange<'a>) {
        drop(handle);
    }

    fn location(&self, handle: &LocalRange<'a>) -> (u64, u64) {
        let (memory, offset) = handle.memory();
        (vk::Handle::as_raw(memory), offset)
    }
}

/// Ours: light ranges of a known-flags pool's page buffers (`BufferPool::allocate_range`), the
/// counterpart of VMA's virtual allocations.
struct RangeMaker {
    pool: BufferPool,
}

impl BufferMaker for RangeMaker {
    type Handle = PoolRange;

    #[inline]
    fn create(&mut self, _index: Option<usize>, init: &BufferInit) -> Result<PoolRange, String> {
        self.pool.allocate_range(init.size, init.alignment).map_err(|e| e.to_string())
    }

    #[inline]
    fn destroy(&mut self, handle: PoolRange) {
        drop(handle);
    }

    fn location(&self, handle: &PoolRange) -> (u64, u64) {
        let (memory, offset) = handle.memory();
        (vk::Handle::as_raw(memory), offset)
    }
}

/// Ours: `Device::create_buffer`, the device's general allocator.
struct DeviceMaker {
    device: Arc<Device>,
    /// The plan's buffers as descriptors, built before the clock starts.
    descs: Vec<BufferDesc>,
}

impl BufferMaker for DeviceMaker {
    type Handle = Buffer;

    #[inline]
    fn create(&mut self, index: Option<usize>, init: &BufferInit) -> Result<Buffer, String> {
        let anchor;
        let desc = match index {
            Some(i) => &self.descs[i],
            None => {
                anchor = BufferDesc::new(init.name.clone(), init.size, init.usage.unwrap_or(RANGE_USAGE));
                &anchor
            }
        };
        self.device.create_buffer(desc).map_err(|e| e.to_string())
    }

    #[inline]
    fn destroy(&mut self, handle: Buffer) {
        drop(handle);
    }

    fn location(&self, handle: &Buffer) -> (u64, u64) {
        let (memory, offset) = handle.memory();
        (vk::Handle::as_raw(memory), offset)
    }
}

/// VMA: `vmaCreateBuffer`.
struct VmaMaker {
    allocator: vk_mem::Allocator,
    /// Keeps the device alive until the allocator (declared first, dropped first) is destroyed.
    _device: Arc<Device>,
}

/// Creates a VMA allocator on `device`, told the API version (1.3) and the features and
/// extensions the device was created with, so that its Vulkan calls are valid.
pub(crate) fn new_vma(device: &Arc<Device>) -> Result<vk_mem::Allocator, String> {
    let mut info = vk_mem::AllocatorCreateInfo::new(device.instance(), device.raw(), device.physical());
    info.vulkan_api_version = vk::API_VERSION_1_3;
    let mut flags = vk_mem::AllocatorCreateFlags::KHR_MAINTENANCE4;
    if device.features().memory_budget {
        flags |= vk_mem::AllocatorCreateFlags::EXT_MEMORY_BUDGET;
    }
    if device.features().buffer_device_address {
        // As ours: memory gets VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT exactly when the feature is on.
        flags |= vk_mem::AllocatorCreateFlags::BUFFER_DEVICE_ADDRESS;
    }
    info.flags = flags;
    // SAFETY: instance, device and physical device are valid and outlive the allocator (the
    // makers hold the `Device`'s Arc and drop the allocator first); the device was created with
    // API 1.3, maintenance4, and VK_EXT_memory_budget / bufferDeviceAddress exactly when the flags
    // above say so.
    unsafe { vk_mem::Allocator::new(info) }.map_err(|e| format!("vmaCreateAllocator: {e}"))
}

impl BufferMaker for VmaMaker {
    type Handle = (vk::Buffer, vk_mem::Allocation);

    #[inline]
    fn create(&mut self, _index: Option<usize>, init: &BufferInit) -> Result<Self::Handle, String> {
        vma_create_buffer(&self.allocator, init.size, init.usage.ok_or("W3 buffers have a usage")?)
    }

    #[inline]
    fn destroy(&mut self, handle: Self::Handle) {
        vma_destroy_buffer(&self.allocator, handle);
    }

    fn location(&self, handle: &Self::Handle) -> (u64, u64) {
        let info = self.allocator.get_allocation_info(&handle.1);
        (vk::Handle::as_raw(info.device_memory), info.offset)
    }
}

/// `vmaCreateBuffer` of a device-preferring buffer of `size` bytes and `usage` (VMA locks inside).
#[inline]
pub(crate) fn vma_create_buffer(
    allocator: &vk_mem::Allocator,
    size: u64,
    usage: BufferUsage,
) -> Result<(vk::Buffer, vk_mem::Allocation), String> {
    let buffer_info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(vk_buffer_usage(usage))
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    let create_info =
        vk_mem::AllocationCreateInfo { usage: vk_mem::MemoryUsage::AutoPreferDevice, ..Default::default() };
    // SAFETY: the allocator is valid; the create info is complete (non-zero size, a usage).
    unsafe { vk_mem::Alloc::create_buffer(allocator, &buffer_info, &create_info) }
        .map_err(|e| format!("vmaCreateBuffer: {e}"))
}

/// `vmaDestroyBuffer` of what [`vma_create_buffer`] made with `allocator`.
#[inline]
pub(crate) fn vma_destroy_buffer(
    allocator: &vk_mem::Allocator,
    (buffer, mut allocation): (vk::Buffer, vk_mem::Allocation),
) {
    // SAFETY: both were created together by this allocator; no GPU work uses them; each is
    // destroyed once (taken by value).
    unsafe { allocator.destroy_buffer(buffer, &mut allocation) };
}

/// An unbound `VkBuffer` of `size` bytes and `usage` with its memory requirements (the first half
/// of a placed buffer made with gpu-allocator).
#[inline]
pub(crate) fn create_unbound(
    device: &Device,
    size: u64,
    usage: BufferUsage,
) -> Result<(vk::Buffer, vk::MemoryRequirements), String> {
    let raw = device.raw();
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(vk_buffer_usage(usage))
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: valid device; non-zero size and a usage.
    let buffer = unsafe { raw.create_buffer(&info, None) }.map_err(|e| format!("vkCreateBuffer: {e}"))?;
    // SAFETY: the buffer was just created on this device.
    Ok((buffer, unsafe { raw.get_buffer_memory_requirements(buffer) }))
}

/// The gpu-allocator description of a linear, device-only allocation for `requirements`.
pub(crate) fn gpu_allocator_desc<'a>(
    name: &'a str,
    requirements: vk::MemoryRequirements,
) -> gpu_allocator::vulkan::AllocationCreateDesc<'a> {
    gpu_allocator::vulkan::AllocationCreateDesc {
        name,
        requirements,
        location: gpu_allocator::MemoryLocation::GpuOnly,
        linear: true,
        allocation_scheme: gpu_allocator::vulkan::AllocationScheme::GpuAllocatorManaged,
    }
}

/// Binds `buffer` (unbound, from [`create_unbound`]) to `allocation`; on failure destroys it and
/// hands the allocation back for the caller to free.
#[inline]
pub(crate) fn bind_allocation(
    device: &Device,
    buffer: vk::Buffer,
    allocation: gpu_allocator::vulkan::Allocation,
) -> Result<(vk::Buffer, gpu_allocator::vulkan::Allocation), (String, gpu_allocator::vulkan::Allocation)> {
    // SAFETY: the allocation satisfies the buffer's requirements (size, alignment, memory type),
    // and it outlives the binding (freed only after the buffer is destroyed).
    let bound = unsafe { device.raw().bind_buffer_memory(buffer, allocation.memory(), allocation.offset()) };
    match bound {
        Ok(()) => Ok((buffer, allocation)),
        Err(e) => {
            // SAFETY: the buffer is unused; destroyed before its memory is freed.
            unsafe { device.raw().destroy_buffer(buffer, None) };
            Err((format!("vkBindBufferMemory: {e}"), allocation))
        }
    }
}

/// gpu-allocator with `vkCreateBuffer` and `vkBindBufferMemory`.
struct GpuAllocatorMaker {
    allocator: gpu_allocator::vulkan::Allocator,
    /// Keeps the device alive until the allocator (declared first, dropped first) frees its memory.
    device: Arc<Device>,
}

impl BufferMaker for GpuAllocatorMaker {
    type Handle = (vk::Buffer, gpu_allocator::vulkan::Allocation);

    #[inline]
    fn create(&mut self, _index: Option<usize>, init: &BufferInit) -> Result<Self::Handle, String> {
        let usage = init.usage.ok_or("W3 buffers have a usage")?;
        let (buffer, requirements) = create_unbound(&self.device, init.size, usage)?;
        let allocation = match self.allocator.allocate(&gpu_allocator_desc(&init.name, requirements)) {
            Ok(allocation) => allocation,
            Err(e) => {
                // SAFETY: created above, unbound, unused.
                unsafe { self.device.raw().destroy_buffer(buffer, None) };
                return Err(format!("gpu-allocator: {e}"));
            }
        };
        bind_allocation(&self.device, buffer, allocation).map_err(|(e, allocation)| {
            let _ = self.allocator.free(allocation);
            e
        })
    }

    #[inline]
    fn destroy(&mut self, (buffer, allocation): Self::Handle) {
        // SAFETY: the buffer was created by `create` on this device and no GPU work uses it.
        unsafe { self.device.raw().destroy_buffer(buffer, None) };
        self.allocator.free(allocation).expect("free of an allocation of this allocator");
    }

    fn location(&self, handle: &Self::Handle) -> (u64, u64) {
        // SAFETY: the memory handle is only used as a key, never to access memory.
        (vk::Handle::as_raw(unsafe { handle.1.memory() }), handle.1.offset())
    }
}

/// VMA's virtual block as a range allocator (the `w3-range` baseline).
struct VirtualRangeMaker {
    block: VmaVirtual,
    alignment: u64,
}

impl BufferMaker for VirtualRangeMaker {
    type Handle = <VmaVirtual as SubAllocator>::Handle;

    #[inline]
    fn create(&mut self, _index: Option<usize>, init: &BufferInit) -> Result<Self::Handle, String> {
        self.block
            .allocate(init.size, self.alignment)
            .ok_or_else(|| "vmaVirtualAllocate: out of space".into())
    }

    #[inline]
    fn destroy(&mut self, handle: Self::Handle) {
        self.block.free(handle);
    }

    fn location(&self, handle: &Self::Handle) -> (u64, u64) {
        (0, self.block.offset(handle))
    }
}

/// The bare driver under `w3-placed`: `vkCreateBuffer`, `vkGetBufferMemoryRequirements` and
/// `vkBindBufferMemory` at a bump offset in one device-local memory object allocated before the
/// clock starts (reset when every buffer of a cycle is gone; the anchor keeps its place) / `vkDestroyBuffer`: what every
/// contender's placed buffer costs the driver, so that each allocator's own share is its time
/// minus this row's (issue #31's account of W3-placed).
struct DriverMaker {
    device: Arc<Device>,
    memory: vk::DeviceMemory,
    memory_size: u64,
    cursor: u64,
    /// Where the plan's buffers start: after the anchor, which lives through every cycle.
    base: u64,
    live: usize,
}

impl DriverMaker {
    /// One memory object of `size` bytes, of the device-local type the plan's usages accept.
    fn new(device: &Arc<Device>, size: u64) -> Result<DriverMaker, String> {
        let raw = device.raw();
        let mut bits = u32::MAX;
        for usage in USAGES {
            let (probe, requirements) = create_unbound(device, 256, usage | BufferUsage::COPY_DST)?;
            // SAFETY: created above, unbound, unused.
            unsafe { raw.destroy_buffer(probe, None) };
            bits &= requirements.memory_type_bits;
        }
        let types = &device.memory_properties().types;
        let type_index = (0..types.len() as u32)
            .filter(|&t| bits & (1 << t) != 0)
            .min_by_key(|&t| !types[t as usize].flags.device_local)
            .ok_or("no memory type for every W3 usage")?;
        let info = vk::MemoryAllocateInfo::default().allocation_size(size).memory_type_index(type_index);
        // SAFETY: valid device; a type the plan's buffers accept; freed in `drop`.
        let memory =
            unsafe { raw.allocate_memory(&info, None) }.map_err(|e| format!("vkAllocateMemory: {e}"))?;
        Ok(DriverMaker { device: Arc::clone(device), memory, memory_size: size, cursor: 0, base: 0, live: 0 })
    }
}

impl BufferMaker for DriverMaker {
    type Handle = (vk::Buffer, u64);

    #[inline]
    fn create(&mut self, index: Option<usize>, init: &BufferInit) -> Result<Self::Handle, String> {
        let usage = init.usage.ok_or("W3 buffers have a usage")?;
        let (buffer, requirements) = create_unbound(&self.device, init.size, usage)?;
        let offset = self.cursor.next_multiple_of(requirements.alignment.max(1));
        if offset + requirements.size > self.memory_size {
            // SAFETY: created above, unbound, unused.
            unsafe { self.device.raw().destroy_buffer(buffer, None) };
            return Err("driver: the memory object is full".into());
        }
        // SAFETY: the range lies in the memory, of a type the buffer accepts, at its alignment;
        // no other live buffer of this maker overlaps it (bump offsets, reset only when none is
        // live); the memory outlives the buffer (freed in `drop`, after every buffer).
        let bound = unsafe { self.device.raw().bind_buffer_memory(buffer, self.memory, offset) };
        if let Err(e) = bound {
            // SAFETY: unused; never bound.
            unsafe { self.device.raw().destroy_buffer(buffer, None) };
            return Err(format!("vkBindBufferMemory: {e}"));
        }
        self.cursor = offset + requirements.size;
        if index.is_none() {
            self.base = self.cursor;
        }
        self.live += 1;
        Ok((buffer, offset))
    }

    #[inline]
    fn destroy(&mut self, (buffer, _): Self::Handle) {
        // SAFETY: created by `create` on this device; no GPU work uses it.
        unsafe { self.device.raw().destroy_buffer(buffer, None) };
        self.live -= 1;
        // Only the anchor left (or nothing): the plan's range is free again.
        match self.live {
            0 => (self.cursor, self.base) = (0, 0),
            1 => self.cursor = self.base,
            _ => {}
        }
    }

    fn location(&self, handle: &Self::Handle) -> (u64, u64) {
        (vk::Handle::as_raw(self.memory), handle.1)
    }
}

impl Drop for DriverMaker {
    fn drop(&mut self) {
        // SAFETY: allocated on this device. Every buffer bound to it was destroyed before (the
        // slots at the end of each cycle, the anchor by `Contender::finish`, which `measure`
        // calls; the maker is made only when it is measured); a buffer left bound would only
        // become unusable, and none is used after this.
        unsafe { self.device.raw().free_memory(self.memory, None) };
    }
}

/// A range allocator behind a `Mutex` taken per allocation and per release: the synchronization
/// a `Sync` pool pays (ours takes its arena's lock the same way). `vma-locked` (VMA's virtual
/// block) against `vma` is what the lock costs on the machine; `residency-tlsf-locked` (the
/// core's `TlsfAllocator` over a page) against `residency` is what the pool adds around its TLSF
/// and lock (its thread's arena, the `PoolRange`), and against `vma-locked` the two TLSFs alone
/// (issue #31's account of W3-range).
struct LockedRangeMaker<A: SubAllocator> {
    block: std::sync::Mutex<A>,
    alignment: u64,
}

impl<A: SubAllocator> BufferMaker for LockedRangeMaker<A> {
    type Handle = A::Handle;

    #[inline]
    fn create(&mut self, _index: Option<usize>, init: &BufferInit) -> Result<Self::Handle, String> {
        // Locked through `&`, as a shared pool is, not through `get_mut`.
        let block = &self.block;
        let mut guard = block.lock().map_err(|_| "poisoned")?;
        guard.allocate(init.size, self.alignment).ok_or_else(|| format!("{}: out of space", A::NAME))
    }

    #[inline]
    fn destroy(&mut self, handle: Self::Handle) {
        let block = &self.block;
        block.lock().expect("not poisoned").free(handle);
    }

    fn location(&self, handle: &Self::Handle) -> (u64, u64) {
        (0, self.block.lock().expect("not poisoned").offset(handle))
    }
}

/// What one cycle measured.
#[derive(Clone, Copy, Debug, Default)]
struct Cycle {
    create_nanos: u64,
    destroy_nanos: u64,
    created: u64,
    failures: u64,
    heap_bytes: u64,
    requested: u64,
}

/// An allocator under W3, with its anchor buffer and its buffer slots.
trait Runner {
    fn name(&self) -> &'static str;
    fn note(&self) -> &'static str;
    fn max_reps(&self) -> usize;
    fn cycle(&mut self, plan: &W3Plan, track: bool) -> Cycle;
    fn finish(&mut self);
}

struct Contender<M: BufferMaker> {
    name: &'static str,
    note: &'static str,
    max_reps: usize,
    maker: M,
    anchor: Option<M::Handle>,
    slots: Vec<Option<M::Handle>>,
}

impl<M: BufferMaker> Contender<M> {
    fn new(name: &'static str, note: &'static str, max_reps: usize, mut maker: M) -> Result<Self, String> {
        let anchor = BufferInit::new("w3 anchor", 256).with_usage(RANGE_USAGE);
        let anchor = Some(maker.create(None, &anchor)?);
        Ok(Contender { name, note, max_reps, maker, anchor, slots: Vec::new() })
    }
}

impl<M: BufferMaker> Runner for Contender<M> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn note(&self) -> &'static str {
        self.note
    }

    fn max_reps(&self) -> usize {
        self.max_reps
    }

    fn cycle(&mut self, plan: &W3Plan, track: bool) -> Cycle {
        timed_cycle(&mut self.maker, &mut self.slots, plan, track)
    }

    fn finish(&mut self) {
        if let Some(anchor) = self.anchor.take() {
            self.maker.destroy(anchor);
        }
    }
}

/// One repetition of `plan` with `maker`: its buffers created in order into `slots` (timed),
/// their footprint measured when `track`, then destroyed in the plan's order (timed apart).
fn timed_cycle<M: BufferMaker>(
    maker: &mut M,
    slots: &mut Vec<Option<M::Handle>>,
    plan: &W3Plan,
    track: bool,
) -> Cycle {
    let mut cycle = Cycle::default();
    slots.clear();
    slots.reserve(plan.buffers.len());
    let start = Instant::now();
    for (i, init) in plan.buffers.iter().enumerate() {
        let handle = maker.create(Some(i), init);
        slots.push(handle.ok());
    }
    cycle.create_nanos = start.elapsed().as_nanos() as u64;
    cycle.created = slots.iter().filter(|s| s.is_some()).count() as u64;
    cycle.failures = plan.buffers.len() as u64 - cycle.created;
    if track {
        let mut ends: HashMap<u64, u64> = HashMap::new();
        for (slot, init) in slots.iter().zip(&plan.buffers) {
            if let Some(handle) = slot {
                let (memory, offset) = maker.location(handle);
                let end = ends.entry(memory).or_default();
                *end = (*end).max(offset + init.size);
                cycle.requested += init.size;
            }
        }
        cycle.heap_bytes = ends.values().sum();
    }
    let start = Instant::now();
    for &i in &plan.destroy_order {
        if let Some(handle) = slots[i].take() {
            maker.destroy(handle);
        }
    }
    cycle.destroy_nanos = start.elapsed().as_nanos() as u64;
    cycle
}

/// `residency-local`: a pool's [`LocalRanges`]. Its ranges borrow it, so it is its own runner:
/// the slots live in `cycle`, and its one kept empty page stands for the others' anchor (no page
/// is made or freed in the timed loops after the warm-up).
struct LocalContender {
    ranges: LocalRanges,
}

impl Runner for LocalContender {
    fn name(&self) -> &'static str {
        "residency-local"
    }

    fn note(&self) -> &'static str {
        LOCAL_NOTE
    }

    fn max_reps(&self) -> usize {
        usize::MAX
    }

    fn cycle(&mut self, plan: &W3Plan, track: bool) -> Cycle {
        timed_cycle(&mut &self.ranges, &mut Vec::new(), plan, track)
    }

    fn finish(&mut self) {}
}

/// W3's sizes.
#[derive(Clone, Copy, Debug)]
pub struct W3Config {
    /// Buffers per repetition.
    pub buffers: usize,
    /// Timed repetitions.
    pub reps: usize,
}

const PLACED_NOTE: &str = "placed VkBuffer per buffer, own usage; timed: create + bind";
const DRIVER_NOTE: &str =
    "bare driver: vkCreateBuffer + requirements + bind at a bump offset in one memory object, no allocator; timed: create + bind";
const RANGE_NOTE: &str = "PoolRange of one storage VkBuffer (allocate_range); timed: allocate";
const LOCAL_NOTE: &str = "LocalRanges of the same pool flags: the thread's own pages, no lock (local_ranges().allocate); timed: allocate";
const RANGE_BUFFER_NOTE: &str =
    "range of one storage VkBuffer as a full Buffer (init_buffer: name, ledger, state id); timed: allocate";

/// Runs W3 on `device` (its placed part, its range part, or both); returns its records, and the
/// contenders that could not be set up.
pub fn run_w3(
    device: &Arc<Device>,
    config: W3Config,
    placed_part: bool,
    range_part: bool,
) -> (Vec<Record>, Vec<(&'static str, String)>) {
    let plan = w3_plan(config.buffers);
    let range_plan = W3Plan {
        buffers: plan.buffers.iter().map(|b| BufferInit::new(b.name.clone(), b.size)).collect(),
        destroy_order: plan.destroy_order.clone(),
    };
    let mut skipped = Vec::new();
    let mut records = Vec::new();

    let mut placed: Vec<Box<dyn Runner>> = Vec::new();
    let pool = BufferPool::new(
        Arc::clone(device),
        BufferPoolDesc::new("w3 placed pool", BufferPoolUsage::Unknown).with_page_size(PAGE_SIZE),
    );
    match pool
        .map_err(|e| e.to_string())
        .and_then(|pool| Contender::new("residency", PLACED_NOTE, usize::MAX, PoolMaker { pool }))
    {
        Ok(c) => placed.push(Box::new(c)),
        Err(e) => skipped.push(("residency", e)),
    }
    let descs = plan
        .buffers
        .iter()
        .map(|b| BufferDesc::new(b.name.clone(), b.size, b.usage.unwrap_or(RANGE_USAGE)))
        .collect();
    match Contender::new(
        "residency-device",
        PLACED_NOTE,
        usize::MAX,
        DeviceMaker { device: Arc::clone(device), descs },
    ) {
        Ok(c) => placed.push(Box::new(c)),
        Err(e) => skipped.push(("residency-device", e)),
    }
    match new_vma(device).and_then(|allocator| {
        Contender::new("vma", PLACED_NOTE, usize::MAX, VmaMaker { allocator, _device: Arc::clone(device) })
    }) {
        Ok(c) => placed.push(Box::new(c)),
        Err(e) => skipped.push(("vma", e)),
    }
    let allocator = new_gpu_allocator(device, PAGE_SIZE);
    match Contender::new(
        "gpu-allocator",
        PLACED_NOTE,
        usize::MAX,
        GpuAllocatorMaker { allocator, device: Arc::clone(device) },
    ) {
        Ok(c) => placed.push(Box::new(c)),
        Err(e) => skipped.push(("gpu-allocator", e)),
    }
    if placed_part {
        // Made only when measured: `measure` destroys its anchor (`finish`) before the memory goes.
        match DriverMaker::new(device, PAGE_SIZE)
            .and_then(|maker| Contender::new("driver", DRIVER_NOTE, usize::MAX, maker))
        {
            Ok(c) => placed.push(Box::new(c)),
            Err(e) => skipped.push(("driver", e)),
        }
        records.extend(measure("w3-placed", &plan, config.reps, &mut placed));
    }
    drop(placed);

    let mut ranges: Vec<Box<dyn Runner>> = Vec::new();
    let range_pool = |name: &str| {
        BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new(name, BufferPoolUsage::Known(RANGE_USAGE)).with_page_size(PAGE_SIZE),
        )
        .map_err(|e| e.to_string())
    };
    match range_pool("w3 range pool")
        .and_then(|pool| Contender::new("residency", RANGE_NOTE, usize::MAX, RangeMaker { pool }))
    {
        Ok(c) => ranges.push(Box::new(c)),
        Err(e) => skipped.push(("residency", e)),
    }
    match range_pool("w3 local range pool").and_then(|pool| pool.local_ranges().map_err(|e| e.to_string())) {
        Ok(local) => ranges.push(Box::new(LocalContender { ranges: local })),
        Err(e) => skipped.push(("residency-local", e)),
    }
    match range_pool("w3 range buffers pool").and_then(|pool| {
        Contender::new("residency-buffer", RANGE_BUFFER_NOTE, usize::MAX, PoolMaker { pool })
    }) {
        Ok(c) => ranges.push(Box::new(c)),
        Err(e) => skipped.push(("residency-buffer", e)),
    }
    // The pool's range alignment for storage buffers (see `BufferPool`): at least 16 B.
    let alignment = device.limits().min_storage_buffer_offset_alignment.max(16);
    let block = VirtualRangeMaker { block: VmaVirtual::with_capacity(&(), PAGE_SIZE), alignment };
    match Contender::new(
        "vma",
        "VMA virtual block over one buffer-sized range; timed: allocate",
        usize::MAX,
        block,
    ) {
        Ok(c) => ranges.push(Box::new(c)),
        Err(e) => skipped.push(("vma", e)),
    }
    let block = std::sync::Mutex::new(VmaVirtual::with_capacity(&(), PAGE_SIZE));
    match Contender::new(
        "vma-locked",
        "VMA virtual block behind a std Mutex taken per call (a Sync pool's synchronization); timed: allocate",
        usize::MAX,
        LockedRangeMaker { block, alignment },
    ) {
        Ok(c) => ranges.push(Box::new(c)),
        Err(e) => skipped.push(("vma-locked", e)),
    }
    let block = std::sync::Mutex::new(Residency::with_capacity(&(), PAGE_SIZE));
    match Contender::new(
        "residency-tlsf-locked",
        "the core's TlsfAllocator over one page behind a std Mutex taken per call (no pool around it); timed: allocate",
        usize::MAX,
        LockedRangeMaker { block, alignment },
    ) {
        Ok(c) => ranges.push(Box::new(c)),
        Err(e) => skipped.push(("residency-tlsf-locked", e)),
    }
    if range_part {
        records.extend(measure("w3-range", &range_plan, config.reps, &mut ranges));
    }
    (records, skipped)
}

/// The interleaved repetitions of one W3 workload.
fn measure(name: &str, plan: &W3Plan, reps: usize, runners: &mut [Box<dyn Runner>]) -> Vec<Record> {
    let tracked: Vec<Cycle> = runners.iter_mut().map(|r| r.cycle(plan, true)).collect();
    for r in runners.iter_mut() {
        let _warm_up = r.cycle(plan, false);
    }
    let n = runners.len();
    let mut create: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut destroy: Vec<Vec<f64>> = vec![Vec::new(); n];
    for rep in 0..reps {
        for k in 0..n {
            let which = (k + rep) % n;
            if !takes_part(rep, reps, runners[which].max_reps()) {
                continue;
            }
            let c = runners[which].cycle(plan, false);
            let created = c.created.max(1) as f64;
            create[which].push(c.create_nanos as f64 / created);
            destroy[which].push(c.destroy_nanos as f64 / created);
        }
    }
    let mut records = Vec::new();
    for (i, runner) in runners.iter_mut().enumerate() {
        runner.finish();
        let mut record = Record::new(name, runner.name(), runner.note());
        let per_op = std::mem::take(&mut create[i]);
        record.ns_per_op_min = minimum(&per_op);
        record.repetitions = per_op.len();
        record.ns_per_op_median = median(per_op);
        record.ops_per_sec_median = Some(1e9 / record.ns_per_op_median.max(f64::MIN_POSITIVE));
        record.free_ns_per_op_median = Some(median(std::mem::take(&mut destroy[i])));
        record.ops = plan.buffers.len() as u64;
        record.heap_bytes = tracked[i].heap_bytes;
        record.requested_bytes = tracked[i].requested;
        record.requested_bytes_at_end = tracked[i].requested;
        record.failures = tracked[i].failures;
        records.push(record);
    }
    records
}
