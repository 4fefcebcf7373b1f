//! The allocators under test, behind one trait so that every workload runs the same code for each.
//!
//! Ours, `offset-allocator` and VMA's virtual allocator (`vmaCreateVirtualBlock` through `vk-mem`)
//! manage offsets on the CPU. `gpu-allocator` has no public sub-allocator: [`GpuAllocator`] drives its
//! Vulkan allocator with memory requirements (no buffers), from one real memory block of a device.

use std::sync::Arc;

use residency::core::allocator::{Allocation, ResourceKind, TlsfAllocator, TlsfDesc};
use residency::vulkan::ash::vk;
use residency::vulkan::Device;

/// An allocator of offsets in one block of `capacity` bytes.
pub trait SubAllocator: Sized {
    /// Name in the report (`"allocator"` in the JSON).
    const NAME: &'static str;
    /// How the allocator handles alignment, for the report's notes.
    const ALIGNMENT_NOTE: &'static str;
    /// What an allocation returns and what free takes back.
    type Handle;
    /// What the allocator needs besides a capacity (`()`, or a Vulkan device).
    type Context: ?Sized;

    /// A fresh allocator over `[0, capacity)`.
    fn with_capacity(context: &Self::Context, capacity: u64) -> Self;
    /// Allocates `size` bytes at a multiple of `alignment`, or `None` when out of space.
    fn allocate(&mut self, size: u64, alignment: u64) -> Option<Self::Handle>;
    /// Frees an allocation.
    fn free(&mut self, handle: Self::Handle);
    /// The aligned offset of an allocation.
    fn offset(&self, handle: &Self::Handle) -> u64;
    /// One past the last byte the allocation occupies in the block (its footprint, which can be
    /// larger than the request when the allocator rounds sizes up).
    fn end(&self, handle: &Self::Handle) -> u64;
    /// The largest free range, as the allocator itself reports it; allocators that report none
    /// compute it from the gaps between the `live` allocations.
    fn largest_free<'h>(&self, live: impl Iterator<Item = &'h Self::Handle>) -> u64
    where
        Self::Handle: 'h;
}

/// The largest gap in `[0, capacity)` between the `[offset, end)` ranges of live allocations.
fn largest_gap(mut ranges: Vec<(u64, u64)>, capacity: u64) -> u64 {
    ranges.sort_unstable();
    let mut largest = 0;
    let mut cursor = 0;
    for (start, end) in ranges {
        largest = largest.max(start.saturating_sub(cursor));
        cursor = cursor.max(end);
    }
    largest.max(capacity.saturating_sub(cursor))
}

/// Blocks preallocated by every allocator (offset-allocator's default `max_allocs`).
const NODE_RESERVE: usize = 128 * 1024;

/// Ours: `residency::core::allocator::TlsfAllocator`, granularity 1, every allocation linear.
#[derive(Debug)]
pub struct Residency(TlsfAllocator);

impl SubAllocator for Residency {
    const NAME: &'static str = "residency";
    const ALIGNMENT_NOTE: &'static str =
        "exact alignment: front padding returned to the free lists, end rounded up to min(alignment, 256 B)";
    type Handle = Allocation;
    type Context = ();

    fn with_capacity((): &(), capacity: u64) -> Self {
        let mut tlsf = TlsfAllocator::new(TlsfDesc::new(capacity)).expect("non-zero capacity");
        // offset-allocator preallocates its nodes; do the same so neither grows while timed.
        tlsf.reserve(NODE_RESERVE);
        Self(tlsf)
    }

    #[inline]
    fn allocate(&mut self, size: u64, alignment: u64) -> Option<Allocation> {
        self.0.allocate(size, alignment, ResourceKind::Linear).ok()
    }

    #[inline]
    fn free(&mut self, handle: Allocation) {
        self.0.free(handle).expect("allocation of this allocator");
    }

    fn offset(&self, handle: &Allocation) -> u64 {
        handle.offset()
    }

    fn end(&self, handle: &Allocation) -> u64 {
        handle.range().end
    }

    fn largest_free<'h>(&self, _live: impl Iterator<Item = &'h Allocation>) -> u64 {
        self.0.largest_free()
    }
}

/// The crates.io `offset-allocator` (a port of Sebastian Aaltonen's OffsetAllocator). It has no
/// alignment parameter, so alignment is emulated as its users must: allocate `size + alignment - 1`
/// and round the returned offset up.
pub struct OffsetAllocator(offset_allocator::Allocator);

impl std::fmt::Debug for OffsetAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OffsetAllocator")
    }
}

impl SubAllocator for OffsetAllocator {
    const NAME: &'static str = "offset-allocator";
    const ALIGNMENT_NOTE: &'static str =
        "no alignment support: emulated by allocating size + alignment - 1 and rounding the offset up";
    type Handle = (offset_allocator::Allocation, u64);
    type Context = ();

    fn with_capacity((): &(), capacity: u64) -> Self {
        let capacity = u32::try_from(capacity).expect("offset-allocator manages at most 4 GiB");
        Self(offset_allocator::Allocator::with_max_allocs(capacity, NODE_RESERVE as u32))
    }

    #[inline]
    fn allocate(&mut self, size: u64, alignment: u64) -> Option<Self::Handle> {
        let padded = u32::try_from(size + alignment - 1).ok()?;
        let allocation = self.0.allocate(padded)?;
        let aligned = (u64::from(allocation.offset) + alignment - 1) & !(alignment - 1);
        Some((allocation, aligned))
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.0.free(handle.0);
    }

    fn offset(&self, handle: &Self::Handle) -> u64 {
        handle.1
    }

    fn end(&self, handle: &Self::Handle) -> u64 {
        u64::from(handle.0.offset) + u64::from(self.0.allocation_size(handle.0))
    }

    fn largest_free<'h>(&self, _live: impl Iterator<Item = &'h Self::Handle>) -> u64 {
        u64::from(self.0.storage_report().largest_free_region)
    }
}

/// VMA's virtual allocator (`vmaCreateVirtualBlock`, TLSF, default strategy) through `vk-mem`.
pub struct VmaVirtual {
    block: vk_mem::VirtualBlock,
    capacity: u64,
}

impl std::fmt::Debug for VmaVirtual {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmaVirtual").field("capacity", &self.capacity).finish_non_exhaustive()
    }
}

/// A VMA virtual allocation with the offset and size it was given.
#[derive(Debug)]
pub struct VmaVirtualHandle {
    allocation: vk_mem::VirtualAllocation,
    offset: u64,
    size: u64,
}

impl SubAllocator for VmaVirtual {
    const NAME: &'static str = "vma";
    const ALIGNMENT_NOTE: &'static str =
        "VMA virtual block (TLSF, default strategy): exact alignment; largest free computed from the live allocations";
    type Handle = VmaVirtualHandle;
    type Context = ();

    fn with_capacity((): &(), capacity: u64) -> Self {
        let info = vk_mem::VirtualBlockCreateInfo { size: capacity, ..Default::default() };
        let block = vk_mem::VirtualBlock::new(info).expect("vmaCreateVirtualBlock");
        Self { block, capacity }
    }

    #[inline]
    fn allocate(&mut self, size: u64, alignment: u64) -> Option<VmaVirtualHandle> {
        let info = vk_mem::VirtualAllocationCreateInfo {
            size,
            alignment,
            user_data: 0,
            flags: vk_mem::VirtualAllocationCreateFlags::empty(),
        };
        // SAFETY: the block is alive; size is non-zero and alignment a power of two (every workload
        // asks so), as vmaVirtualAllocate requires.
        let (allocation, offset) = unsafe { self.block.allocate(info) }.ok()?;
        Some(VmaVirtualHandle { allocation, offset, size })
    }

    #[inline]
    fn free(&mut self, mut handle: VmaVirtualHandle) {
        // SAFETY: the allocation was made by this block and is freed once (taken by value).
        unsafe { self.block.free(&mut handle.allocation) };
    }

    fn offset(&self, handle: &VmaVirtualHandle) -> u64 {
        handle.offset
    }

    fn end(&self, handle: &VmaVirtualHandle) -> u64 {
        handle.offset + handle.size
    }

    fn largest_free<'h>(&self, live: impl Iterator<Item = &'h VmaVirtualHandle>) -> u64 {
        largest_gap(live.map(|h| (h.offset, h.offset + h.size)).collect(), self.capacity)
    }
}

impl Drop for VmaVirtual {
    fn drop(&mut self) {
        // SAFETY: the workloads drop their leftover handles without using them again; VMA asserts
        // (in debug builds) when a block is destroyed with live allocations, so release them first.
        unsafe { self.block.clear() };
    }
}

/// `gpu-allocator`'s Vulkan allocator, fed memory requirements directly (its free-list
/// sub-allocator is not public). All allocations must land in its first memory block, which is
/// sized to the workload's capacity (rounded up to its 4 MiB multiples, at most 256 MiB) and
/// created before the clock starts; one that lands elsewhere counts as a failure.
pub struct GpuAllocator {
    allocator: gpu_allocator::vulkan::Allocator,
    memory_type_bits: u32,
    block: vk::DeviceMemory,
    capacity: u64,
    /// Keeps the device alive until the allocator (declared first, dropped first) has freed its
    /// memory.
    _device: Arc<Device>,
}

impl GpuAllocator {
    #[inline]
    fn raw_allocate(&mut self, size: u64, alignment: u64) -> Option<gpu_allocator::vulkan::Allocation> {
        let desc = gpu_allocator::vulkan::AllocationCreateDesc {
            name: "bench",
            requirements: vk::MemoryRequirements { size, alignment, memory_type_bits: self.memory_type_bits },
            location: gpu_allocator::MemoryLocation::GpuOnly,
            linear: true,
            allocation_scheme: gpu_allocator::vulkan::AllocationScheme::GpuAllocatorManaged,
        };
        self.allocator.allocate(&desc).ok()
    }
}

impl std::fmt::Debug for GpuAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuAllocator").field("capacity", &self.capacity).finish_non_exhaustive()
    }
}

/// Creates a `gpu-allocator` allocator on `device` with device-memory blocks of `block_size`.
pub fn new_gpu_allocator(device: &Device, block_size: u64) -> gpu_allocator::vulkan::Allocator {
    let desc = gpu_allocator::vulkan::AllocatorCreateDesc {
        instance: device.instance().clone(),
        device: device.raw().clone(),
        physical_device: device.physical(),
        debug_settings: gpu_allocator::AllocatorDebugSettings::default(),
        // As ours: memory gets VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT exactly when the feature is on.
        buffer_device_address: device.features().buffer_device_address,
        // Both sizes: device-local memory may be host-visible (lavapipe, ReBAR), which gpu-allocator
        // sizes as host memory.
        allocation_sizes: gpu_allocator::AllocationSizes::new(block_size, block_size),
    };
    gpu_allocator::vulkan::Allocator::new(&desc).expect("gpu-allocator on a valid device")
}

impl SubAllocator for GpuAllocator {
    const NAME: &'static str = "gpu-allocator";
    const ALIGNMENT_NOTE: &'static str =
        "gpu-allocator free-list allocator on one device-local memory block; largest free computed from the live allocations";
    type Handle = gpu_allocator::vulkan::Allocation;
    type Context = Arc<Device>;

    fn with_capacity(device: &Arc<Device>, capacity: u64) -> Self {
        let block_size = capacity.next_multiple_of(4 << 20).min(256 << 20);
        let allocator = new_gpu_allocator(device, block_size);
        let memory_type_bits = (1u32 << device.memory_properties().types.len()) - 1;
        let mut this = Self {
            allocator,
            memory_type_bits,
            block: vk::DeviceMemory::null(),
            capacity,
            _device: Arc::clone(device),
        };
        // Create the block now (gpu-allocator keeps its last block when it empties).
        let warm = this.raw_allocate(1, 1).expect("gpu-allocator's first block");
        // SAFETY: the handle is only compared with those of later allocations, never used.
        this.block = unsafe { warm.memory() };
        this.allocator.free(warm).expect("free of the warm-up allocation");
        this
    }

    #[inline]
    fn allocate(&mut self, size: u64, alignment: u64) -> Option<Self::Handle> {
        let allocation = self.raw_allocate(size, alignment)?;
        // SAFETY: the handle is only compared, never used.
        if unsafe { allocation.memory() } != self.block {
            self.allocator.free(allocation).expect("free of an allocation of this allocator");
            return None;
        }
        Some(allocation)
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.allocator.free(handle).expect("free of an allocation of this allocator");
    }

    fn offset(&self, handle: &Self::Handle) -> u64 {
        handle.offset()
    }

    fn end(&self, handle: &Self::Handle) -> u64 {
        handle.offset() + handle.size()
    }

    fn largest_free<'h>(&self, live: impl Iterator<Item = &'h Self::Handle>) -> u64 {
        largest_gap(live.map(|h| (h.offset(), h.offset() + h.size())).collect(), self.capacity)
    }
}
