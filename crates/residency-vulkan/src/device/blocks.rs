//! Device memory: `VkDeviceMemory` heaps sub-allocated by the core's O(1) TLSF allocator.
//!
//! A [`BlockList`] is the set of heaps of one memory type that one owner (the device's general
//! allocator, or a buffer pool) sub-allocates from. Heaps start small and double up to a page size;
//! empty heaps are released with hysteresis (one kept). Every `VkDeviceMemory` goes through the
//! device's ledger, which enforces `maxMemoryAllocationCount` and the heap budget.

use crate::device::ledger::{FaultSite, ObjectId};
use crate::device::Device;
use crate::error::VulkanError;
use crate::error::{ErrorClass, Exhausted, ResidencyError};
use crate::poison::PoisonFree;
use ash::vk;
use residency_core::allocator::{AllocError, Allocation, ResourceKind, TlsfAllocator, TlsfDesc};
use residency_core::memory::{HeapGrowth, MemoryIntent, MemoryTier};
use residency_core::placement::heap::{explicit_heap_size, EXPLICIT_HEAP_ALIGNMENT};
use residency_core::placement::Message;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Allocating memory failed. Out of memory and over budget are values, never panics.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The description has a field the pool cannot be made with (`BufferPoolDesc::validate`,
    /// `LinearPoolDesc::validate`); nothing was created.
    #[error(transparent)]
    Desc(#[from] residency_core::desc::DescError),
    /// A memory priority outside `[0, 1]` (or not a number).
    #[error("`{name}`: memory priority {priority} is outside [0, 1]")]
    InvalidPriority {
        /// What was being allocated.
        name: String,
        /// The priority asked for.
        priority: f32,
    },
    /// The allocation would take the heap over its budget (VK_EXT_memory_budget or the estimate).
    #[error(
        "`{name}`: {requested} B in memory heap {heap} would exceed its budget ({available} B available of {budget} B)"
    )]
    OutOfBudget {
        /// What was being allocated.
        name: String,
        /// The memory heap.
        heap: u32,
        /// Bytes requested.
        requested: u64,
        /// Bytes still available under the budget.
        available: u64,
        /// The heap's budget.
        budget: u64,
    },
    /// The device has no memory left of any suitable type.
    #[error("`{name}`: out of device memory allocating {requested} B")]
    OutOfDeviceMemory {
        /// What was being allocated.
        name: String,
        /// Bytes requested.
        requested: u64,
    },
    /// `maxMemoryAllocationCount` would be exceeded.
    #[error("`{name}`: the device allows at most {limit} memory allocations at once")]
    TooManyAllocations {
        /// What was being allocated.
        name: String,
        /// The limit.
        limit: u64,
    },
    /// No memory type allowed by the resource serves the intent.
    #[error("`{name}`: no memory type in {allowed_bits:#b} serves {intent:?}")]
    NoSuitableMemoryType {
        /// What was being allocated.
        name: String,
        /// The resource's memoryTypeBits.
        allowed_bits: u32,
        /// The intent.
        intent: MemoryIntent,
    },
    /// The request itself is invalid (zero size, alignment not a power of two, …).
    #[error("`{name}`: {source}")]
    InvalidRequest {
        /// What was being allocated.
        name: String,
        /// Why.
        #[source]
        source: AllocError,
    },
    /// The placement engine refused the request (e.g. an alignment floor above the rules' maximum).
    #[error("`{name}`: {source}")]
    Placement {
        /// The resource's name.
        name: String,
        /// The engine's error, with its numbers.
        #[source]
        source: residency_core::placement::PlacementError,
    },
    /// A request that no pool setting can satisfy (e.g. larger than the pool's page size).
    #[error("`{name}`: {reason}")]
    Unsatisfiable {
        /// What was being allocated.
        name: String,
        /// Why.
        reason: String,
    },
    /// A linear pool's algorithm refused the request (out of space while earlier buffers are live
    /// or their GPU work runs, the stacks would overlap, an upper allocation outside a double
    /// stack); nothing was allocated.
    #[error("`{name}`: {source}")]
    Linear {
        /// The buffer.
        name: String,
        /// The algorithm's reason, with its numbers.
        #[source]
        source: residency_core::allocator::LinearError,
    },
    /// A size beyond one of the device's limits (`maxBufferSize` for a buffer,
    /// `maxMemoryAllocationSize` or the heap's size for a memory allocation) or one that
    /// overflows when rounded: refused before Vulkan sees it, nothing was created.
    #[error("`{name}`: {requested} B is beyond the device's {limit_name} of {limit} B")]
    TooLarge {
        /// What was being created.
        name: String,
        /// Bytes requested (`u64::MAX` when rounding it up overflowed).
        requested: u64,
        /// The limit's Vulkan name.
        limit_name: &'static str,
        /// The limit.
        limit: u64,
    },
    /// Any other Vulkan failure.
    #[error(transparent)]
    Vulkan(#[from] VulkanError),
}

impl ResidencyError for MemoryError {
    fn class(&self) -> ErrorClass {
        match self {
            MemoryError::Desc(e) => e.class(),
            MemoryError::InvalidRequest { source, .. } => source.class(),
            MemoryError::Placement { source, .. } => source.class(),
            MemoryError::Linear { source, .. } => source.class(),
            MemoryError::Vulkan(e) => e.class(),
            MemoryError::OutOfBudget { .. } => ErrorClass::OutOfMemory(Exhausted::Budget),
            MemoryError::OutOfDeviceMemory { .. } => ErrorClass::OutOfMemory(Exhausted::Device),
            MemoryError::TooManyAllocations { .. } => ErrorClass::OutOfMemory(Exhausted::Capacity),
            // Beyond the heap or `maxMemoryAllocationSize`, the driver would say out of device
            // memory; beyond `maxBufferSize` (or `u64`), the call is invalid.
            MemoryError::TooLarge { limit_name, .. } => {
                if [HEAP_SIZE, MAX_ALLOCATION_SIZE].contains(limit_name) {
                    ErrorClass::OutOfMemory(Exhausted::Device)
                } else {
                    ErrorClass::Refused
                }
            }
            MemoryError::NoSuitableMemoryType { .. } => ErrorClass::Unsupported,
            MemoryError::InvalidPriority { .. } | MemoryError::Unsatisfiable { .. } => ErrorClass::Refused,
        }
    }
}

/// [`MemoryError::TooLarge`]'s `limit_name` for an allocation beyond its memory heap's size.
const HEAP_SIZE: &str = "memory heap size";
/// [`MemoryError::TooLarge`]'s `limit_name` for an allocation beyond `maxMemoryAllocationSize`.
const MAX_ALLOCATION_SIZE: &str = "maxMemoryAllocationSize";

/// A host pointer to the whole mapped range of one memory block, with its length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MappedPtr {
    base: NonNull<u8>,
    len: u64,
}

// SAFETY: the pointer addresses persistently mapped device memory of a MemoryBlock that stays
// mapped while any resource placed in it lives (resources keep their block's owner alive). Bytes
// are written only through `&mut Buffer` (one writer per buffer, buffers do not overlap), so
// sharing the base pointer between threads creates no data race of its own.
unsafe impl Send for MappedPtr {}
// SAFETY: as above.
unsafe impl Sync for MappedPtr {}

impl MappedPtr {
    /// The pointer to bytes `offset..offset + len` of the block, if they lie inside it.
    pub(crate) fn range(self, offset: u64, len: u64) -> Option<NonNull<u8>> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: offset <= len of the mapped allocation (checked), so the result stays inside it
        // (or one past its end for an empty range at the end).
        Some(unsafe { self.base.add(offset as usize) })
    }
}

/// One `VkDeviceMemory` and what lives in it.
#[derive(Debug)]
pub(crate) struct MemoryBlock {
    pub(crate) memory: vk::DeviceMemory,
    pub(crate) size: u64,
    pub(crate) type_index: u32,
    pub(crate) heap_index: u32,
    pub(crate) mapped: Option<MappedPtr>,
    /// Known-flags pools: the page's one `VkBuffer`, bound at offset 0 over the whole block.
    pub(crate) page_buffer: Option<vk::Buffer>,
    pub(crate) allocator: TlsfAllocator,
    pub(crate) name: String,
    /// A defragmentation pass emptied it, or it is a pool's page of its own for one request
    /// larger than a page: no new allocation goes here, and its list frees it when its last
    /// allocation retires, whatever its keep-one-empty policy says.
    pub(crate) draining: bool,
    /// The tier it counts in (its type's, or the host tier of a unified-memory device's host
    /// lists): `device/pressure.rs`.
    pub(crate) tier: MemoryTier,
    id: ObjectId,
}

/// What a new `VkDeviceMemory` is for.
pub(crate) struct RawMemoryDesc<'a> {
    pub(crate) name: &'a str,
    pub(crate) size: u64,
    pub(crate) type_index: u32,
    pub(crate) allow_over_budget: bool,
    pub(crate) dedicated: Option<vk::MemoryDedicatedAllocateInfo<'a>>,
    /// VK_EXT_memory_priority's priority, in `[0, 1]` (checked by the callers); passed when the
    /// device enabled the extension.
    pub(crate) priority: f32,
}

/// The priority of memory nobody asked a priority for (VK_EXT_memory_priority's default).
pub(crate) const DEFAULT_PRIORITY: f32 = 0.5;

/// Checks a memory priority: a finite value in `[0, 1]`.
pub(crate) fn check_priority(name: &str, priority: Option<f32>) -> Result<(), MemoryError> {
    match priority {
        Some(p) if !(0.0..=1.0).contains(&p) => {
            Err(MemoryError::InvalidPriority { name: name.to_owned(), priority: p })
        }
        _ => Ok(()),
    }
}

/// Checks a `vkAllocateMemory` size against the device before Vulkan sees it: not zero, at most
/// `maxMemoryAllocationSize` and at most the heap's size (`VUID-vkAllocateMemory-pAllocateInfo-01713`).
/// Every block residency allocates goes through [`MemoryBlock::new`], which calls this first.
pub(crate) fn check_allocation_size(
    device: &Device,
    name: &str,
    size: u64,
    heap_size: u64,
) -> Result<(), MemoryError> {
    if size == 0 {
        return Err(MemoryError::InvalidRequest { name: name.to_owned(), source: AllocError::ZeroSize });
    }
    let max = device.profile().limits.max_memory_allocation_size;
    let (limit_name, limit) =
        if max > 0 && max < heap_size { (MAX_ALLOCATION_SIZE, max) } else { (HEAP_SIZE, heap_size) };
    if size > limit {
        return Err(MemoryError::TooLarge { name: name.to_owned(), requested: size, limit_name, limit });
    }
    Ok(())
}

impl MemoryBlock {
    /// Allocates (and maps, when host-visible) a block, through the size, budget and count
    /// checks: a size of zero or beyond `maxMemoryAllocationSize` or the heap is refused
    /// ([`MemoryError::InvalidRequest`], [`MemoryError::TooLarge`]) before `vkAllocateMemory`.
    pub(crate) fn new(
        device: &Device,
        desc: RawMemoryDesc<'_>,
        granularity: u64,
    ) -> Result<MemoryBlock, MemoryError> {
        let tier = MemoryTier::of(device.memory_properties().types[desc.type_index as usize].flags);
        MemoryBlock::new_in_tier(device, desc, granularity, tier)
    }

    /// [`MemoryBlock::new`] counted in `tier` (the heap budget and, for a device tier, the
    /// device-local limit: `Device::admit_block`).
    pub(crate) fn new_in_tier(
        device: &Device,
        desc: RawMemoryDesc<'_>,
        granularity: u64,
        tier: MemoryTier,
    ) -> Result<MemoryBlock, MemoryError> {
        let profile_memory = device.memory_properties();
        let memory_type = &profile_memory.types[desc.type_index as usize];
        let heap_index = memory_type.heap_index;
        let heap = &profile_memory.heaps[heap_index as usize];
        let name = desc.name.to_owned();
        check_allocation_size(device, &name, desc.size, heap.size)?;
        device.admit_block(&name, heap_index, tier, desc.size, desc.allow_over_budget)?;
        if !device.ledger().reserve_memory(heap_index, desc.size) {
            device.pressure.release(tier, desc.size);
            return Err(MemoryError::TooManyAllocations {
                name,
                limit: device.ledger().max_memory_objects(),
            });
        }
        let release = |e: MemoryError| {
            device.ledger().release_memory(heap_index, desc.size);
            device.pressure.release(tier, desc.size);
            e
        };
        let mut flags_info =
            vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let mut info =
            vk::MemoryAllocateInfo::default().allocation_size(desc.size).memory_type_index(desc.type_index);
        if device.features().buffer_device_address {
            info = info.push_next(&mut flags_info);
        }
        let mut dedicated = desc.dedicated;
        if let Some(dedicated) = dedicated.as_mut() {
            info = info.push_next(dedicated);
        }
        let mut priority = vk::MemoryPriorityAllocateInfoEXT::default().priority(desc.priority);
        if device.features().memory_priority {
            info = info.push_next(&mut priority);
        }
        let allocated = device.ledger().guard(FaultSite::AllocateMemory, || {
            // SAFETY: valid device; the info chain lives for the call; the type index comes from this
            // device's memory properties.
            unsafe { device.raw().allocate_memory(&info, None) }
        });
        let memory = match allocated {
            Ok(memory) => memory,
            Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY) => {
                return Err(release(MemoryError::OutOfDeviceMemory { name, requested: desc.size }))
            }
            Err(result) => return Err(release(VulkanError::from_vk("vkAllocateMemory", result).into())),
        };
        device.set_name(memory, desc.name);
        let mapped = if memory_type.flags.host_visible {
            // SAFETY: host-visible memory just allocated, not mapped yet; whole range.
            match unsafe { device.raw().map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) } {
                Ok(ptr) => NonNull::new(ptr.cast::<u8>()).map(|base| MappedPtr { base, len: desc.size }),
                Err(result) => {
                    // SAFETY: the memory was allocated above and is not in use.
                    unsafe { device.raw().free_memory(memory, None) };
                    return Err(release(VulkanError::from_vk("vkMapMemory", result).into()));
                }
            }
        } else {
            None
        };
        let allocator = TlsfAllocator::new(TlsfDesc::new(desc.size).with_granularity(granularity.max(1)))
            .map_err(|e| MemoryError::Unsatisfiable { name: name.clone(), reason: e.to_string() });
        let allocator = match allocator {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: allocated above, unused.
                unsafe { device.raw().free_memory(memory, None) };
                return Err(release(e));
            }
        };
        let id = device.ledger().track("memory", desc.name);
        Ok(MemoryBlock {
            memory,
            size: desc.size,
            type_index: desc.type_index,
            heap_index,
            mapped,
            page_buffer: None,
            allocator,
            name,
            draining: false,
            tier,
            id,
        })
    }

    /// Frees the block (and its page buffer). Its owner calls it only when no live resource is
    /// placed in it: a block is freed by its list when its last allocation is freed, by a pool or
    /// transient heap when the last resource holding that pool or heap is gone (resources keep
    /// their parent alive), and by the device at teardown, when no resource of it is left. Deferred
    /// resources still counted as allocations here retire no later than the block (a parent waits
    /// for its deferred children's uses, and the retire queue destroys blocks after the other
    /// garbage due with them).
    pub(crate) fn destroy(self, device: &Device) {
        // SAFETY: the page buffer and the memory belong to this device; by the contract above no
        // live resource is placed in the block and no pending GPU work uses it.
        unsafe {
            if let Some(buffer) = self.page_buffer {
                device.raw().destroy_buffer(buffer, None);
            }
            device.raw().free_memory(self.memory, None);
        }
        device.ledger().release_memory(self.heap_index, self.size);
        device.pressure.release(self.tier, self.size);
        device.ledger().untrack(self.id);
    }
}

/// Creates the one `VkBuffer` of a known-flags page over the whole block.
pub(crate) type PageBufferFactory =
    dyn Fn(&Device, &MemoryBlock) -> Result<vk::Buffer, MemoryError> + Send + Sync;

/// Heaps of one memory type for one owner.
pub(crate) struct BlockList {
    pub(crate) name: String,
    pub(crate) type_index: u32,
    pub(crate) growth: HeapGrowth,
    pub(crate) granularity: u64,
    /// Stable slots: a block's index never changes while it lives.
    pub(crate) blocks: Vec<Option<MemoryBlock>>,
    pub(crate) keep_empty: usize,
    pub(crate) page_buffer: Option<Box<PageBufferFactory>>,
    /// When true, blocks are always exactly `growth.page_size` (pools with a fixed page size).
    pub(crate) fixed_size: bool,
    /// `nonCoherentAtomSize` for host-visible non-coherent memory, else 1: every allocation's
    /// offset and size are multiples of it, so a flush or invalidate widened to the atom never
    /// touches a neighbour's bytes.
    pub(crate) atom: u64,
    /// The memory priority of its blocks ([`DEFAULT_PRIORITY`] unless a pool asked for another).
    pub(crate) priority: f32,
    /// The tier its blocks count in (its type's unless set: the host lists of a unified-memory
    /// device).
    pub(crate) tier: Option<MemoryTier>,
    created: u64,
    /// Blocks removed so far (incremented under the list's lock, read without it; a buffer
    /// pool also counts a defragmentation pass's access as one): a pool's per-thread range
    /// caches know which block a slot holds from it (a slot's block is the one they recorded as
    /// long as no block was removed since).
    removals: Arc<AtomicU64>,
    /// Strong references of its owner's handles kept under the list's lock, for its owner only
    /// (a buffer pool's "lent handles": `buffer_pool.rs`, `PoolShared::release_range`): per
    /// handle shard, a pointer from `Arc::into_raw` and how many references it stands for. `None`
    /// once the owner took them back. This layer never reads them.
    pub(crate) lent: Option<Vec<(usize, usize)>>,
}

impl std::fmt::Debug for BlockList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockList")
            .field("name", &self.name)
            .field("type_index", &self.type_index)
            .field("blocks", &self.blocks.iter().flatten().count())
            .finish_non_exhaustive()
    }
}

/// Where an allocation of a [`BlockList`] lives.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct BlockAllocation {
    pub(crate) block: u32,
    pub(crate) allocation: Allocation,
}

/// Options of one sub-allocation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SubRequest<'a> {
    pub(crate) name: &'a str,
    pub(crate) size: u64,
    pub(crate) alignment: u64,
    pub(crate) kind: ResourceKind,
    pub(crate) allow_over_budget: bool,
}

impl BlockList {
    pub(crate) fn new(name: String, type_index: u32, growth: HeapGrowth, granularity: u64) -> BlockList {
        BlockList {
            name,
            type_index,
            growth,
            granularity,
            blocks: Vec::new(),
            keep_empty: 1,
            page_buffer: None,
            fixed_size: false,
            atom: 1,
            priority: DEFAULT_PRIORITY,
            tier: None,
            created: 0,
            removals: Arc::default(),
            lent: Some(Vec::new()),
        }
    }

    /// The count of blocks removed from this list so far, shared: it only grows, each removal
    /// counted before the list's lock is released.
    pub(crate) fn removals(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.removals)
    }

    /// Takes the block out of `slot` (counted in [`BlockList::removals`]).
    fn take_block(&mut self, slot: usize) -> Option<MemoryBlock> {
        let block = self.blocks.get_mut(slot)?.take();
        if block.is_some() {
            self.removals.fetch_add(1, Ordering::Release);
        }
        block
    }

    /// Sub-allocates in an existing block only (no new block): `None` when none has room.
    /// Fullest-first would pack tighter; newest-first finds room fastest. Blocks are few (they
    /// grow geometrically), so try each.
    pub(crate) fn allocate_existing(&mut self, req: SubRequest<'_>) -> Option<BlockAllocation> {
        if req.size == 0 || !req.alignment.is_power_of_two() {
            return None;
        }
        // Most lists have no atom (1): no division then.
        let size = if self.atom == 1 { req.size } else { req.size.checked_next_multiple_of(self.atom)? };
        let alignment = req.alignment.max(self.atom);
        for (index, slot) in self.blocks.iter_mut().enumerate().rev() {
            let Some(block) = slot else { continue };
            if block.draining || block.size - block.allocator.used_bytes() < size {
                continue;
            }
            if let Ok(allocation) = block.allocator.allocate(size, alignment, req.kind) {
                return Some(BlockAllocation { block: index as u32, allocation });
            }
        }
        None
    }

    /// Sets the atom from the memory type: host-visible and not coherent → `atom`, else 1.
    pub(crate) fn with_atom(mut self, memory_type: &residency_core::profile::MemoryType, atom: u64) -> Self {
        self.atom =
            if memory_type.flags.host_visible && !memory_type.flags.host_coherent { atom.max(1) } else { 1 };
        self
    }

    pub(crate) fn block(&self, index: u32) -> &MemoryBlock {
        self.blocks[index as usize].as_ref().expect("allocations refer to live blocks")
    }

    /// Sub-allocates, creating a heap when no existing one has room.
    pub(crate) fn allocate(
        &mut self,
        device: &Device,
        req: SubRequest<'_>,
    ) -> Result<BlockAllocation, MemoryError> {
        let invalid = |source| MemoryError::InvalidRequest { name: req.name.to_owned(), source };
        if req.size == 0 {
            return Err(invalid(AllocError::ZeroSize));
        }
        if !req.alignment.is_power_of_two() {
            return Err(invalid(AllocError::AlignmentNotPowerOfTwo { alignment: req.alignment }));
        }
        let req = SubRequest {
            size: req.size.checked_next_multiple_of(self.atom).unwrap_or(u64::MAX),
            alignment: req.alignment.max(self.atom),
            ..req
        };
        if let Some(allocation) = self.allocate_existing(req) {
            return Ok(allocation);
        }
        // A request larger than a fixed-size list's page gets a page of its own (issue #31): sized
        // by the heap rules, and marked `draining` so that nothing else is placed there and it is
        // freed with its one allocation.
        let own_page = self.fixed_size && req.size > self.growth.page_size;
        let block = if own_page {
            let size = explicit_heap_size(req.size, req.alignment > EXPLICIT_HEAP_ALIGNMENT);
            let mut block = self.create_block(device, size, req.allow_over_budget)?;
            block.draining = true;
            block
        } else {
            self.new_block(device, req)?
        };
        let index = match self.blocks.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.blocks.push(None);
                self.blocks.len() - 1
            }
        };
        let block = self.blocks[index].insert(block);
        let allocation = block
            .allocator
            .allocate(req.size, req.alignment, req.kind)
            .map_err(|source| MemoryError::InvalidRequest { name: req.name.to_owned(), source })?;
        Ok(BlockAllocation { block: index as u32, allocation })
    }

    fn new_block(&mut self, device: &Device, req: SubRequest<'_>) -> Result<MemoryBlock, MemoryError> {
        let largest = self.blocks.iter().flatten().map(|b| b.size).max().unwrap_or(0);
        // The core's heap rules size every heap: a multiple of 64 KiB, of 4 MiB when it holds a
        // resource aligned above 64 KiB (D3D12's MSAA heaps).
        let msaa = req.alignment > EXPLICIT_HEAP_ALIGNMENT;
        // Room for the worst-case alignment padding too.
        let needed = req.size.saturating_add(req.alignment.max(self.granularity));
        let mut size = if self.fixed_size {
            self.growth.page_size
        } else {
            explicit_heap_size(self.growth.next_heap_size(largest, needed), msaa)
        };
        let minimum = explicit_heap_size(needed, msaa);
        loop {
            match self.create_block(device, size, req.allow_over_budget) {
                Ok(block) => return Ok(block),
                // Out of memory or budget: a smaller heap that still fits may succeed (VMA does the same).
                Err(MemoryError::OutOfDeviceMemory { .. } | MemoryError::OutOfBudget { .. })
                    if !self.fixed_size && (minimum..size).contains(&explicit_heap_size(size / 2, msaa)) =>
                {
                    size = explicit_heap_size(size / 2, msaa);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One heap of `size` bytes with its page buffer (known-flags pools), not in a slot yet.
    fn create_block(
        &mut self,
        device: &Device,
        size: u64,
        allow_over_budget: bool,
    ) -> Result<MemoryBlock, MemoryError> {
        self.created += 1;
        let name = format!("{} heap {}", self.name, self.created);
        let desc = RawMemoryDesc {
            name: &name,
            size,
            type_index: self.type_index,
            allow_over_budget,
            dedicated: None,
            priority: self.priority,
        };
        let mut block = match self.tier {
            Some(tier) => MemoryBlock::new_in_tier(device, desc, self.granularity, tier)?,
            None => MemoryBlock::new(device, desc, self.granularity)?,
        };
        if let Some(factory) = &self.page_buffer {
            match factory(device, &block) {
                Ok(buffer) => block.page_buffer = Some(buffer),
                Err(e) => {
                    block.destroy(device);
                    return Err(e);
                }
            }
        }
        Ok(block)
    }

    /// A new empty heap of exactly `size` bytes (a defragmentation pass's repacking destination),
    /// within the budget; its slot.
    pub(crate) fn add_block(&mut self, device: &Device, size: u64) -> Result<u32, MemoryError> {
        let block = self.create_block(device, size, false)?;
        let index = match self.blocks.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.blocks.push(None);
                self.blocks.len() - 1
            }
        };
        self.blocks[index] = Some(block);
        Ok(index as u32)
    }

    /// Frees the heap in `slot` if nothing is allocated in it (a failed pass's new heap).
    pub(crate) fn remove_if_empty(&mut self, device: &Device, slot: u32) {
        let empty = self
            .blocks
            .get(slot as usize)
            .and_then(Option::as_ref)
            .is_some_and(|b| b.allocator.allocation_count() == 0);
        if empty {
            if let Some(block) = self.take_block(slot as usize) {
                block.destroy(device);
            }
        }
    }

    /// Frees a sub-allocation; releases its heap if that leaves more than `keep_empty` empty heaps,
    /// or if a defragmentation pass emptied it (`draining`).
    pub(crate) fn free(&mut self, device: &Device, allocation: BlockAllocation) {
        let index = allocation.block as usize;
        let Some(block) = self.blocks[index].as_mut() else {
            tracing::error!(list = %self.name, "free of an allocation whose heap is gone");
            return;
        };
        if let Err(e) = block.allocator.free(allocation.allocation) {
            tracing::error!(list = %self.name, error = %e, "free refused");
            return;
        }
        if block.allocator.allocation_count() == 0 {
            let draining = block.draining;
            let empty = self.blocks.iter().flatten().filter(|b| b.allocator.allocation_count() == 0).count();
            if draining || empty > self.keep_empty {
                if let Some(block) = self.take_block(index) {
                    block.destroy(device);
                }
            }
        }
    }

    /// Frees every heap nothing is allocated in (the one empty heap the policy keeps included);
    /// returns the bytes freed. A heap with no allocation holds no live resource and no resource
    /// waiting in the retire queue (their ranges are freed only when they retire).
    pub(crate) fn release_empty(&mut self, device: &Device) -> u64 {
        let mut freed = 0;
        for slot in 0..self.blocks.len() {
            if self.blocks[slot].as_ref().is_some_and(|b| b.allocator.allocation_count() == 0) {
                if let Some(block) = self.take_block(slot) {
                    freed += block.size;
                    block.destroy(device);
                }
            }
        }
        freed
    }

    /// Releases every heap (at teardown; anything still placed in them is reported as leaked).
    pub(crate) fn destroy_all(&mut self, device: &Device) {
        self.removals.fetch_add(1, Ordering::Release);
        for block in self.blocks.drain(..).flatten() {
            block.destroy(device);
        }
    }

    /// Bytes of all heaps, and bytes in use.
    pub(crate) fn totals(&self) -> (u64, u64, usize) {
        self.blocks
            .iter()
            .flatten()
            .fold((0, 0, 0), |(size, used, n), b| (size + b.size, used + b.allocator.used_bytes(), n + 1))
    }
}

/// Where a resource's memory came from, so that freeing returns it there.
#[derive(Debug)]
pub(crate) enum ResourceMemory {
    /// The device's general allocator, list `list` (memory type `list`, or for the host lists
    /// of a unified-memory device, type `list − type count`: `Device::list_type`).
    General { list: u32, allocation: BlockAllocation },
    /// Memory of its own.
    Dedicated(Box<MemoryBlock>),
    /// A range of a sub-allocator above this layer (a buffer pool's page, a linear pool's
    /// block). Weak: a live resource keeps its sub-allocator alive through its `Life`'s parent; a
    /// deferred one returns its range only if the sub-allocator is still there (else its memory
    /// retires after it, all at once). `None`: the sub-allocator is the parent of the `Life` that
    /// holds this memory (a buffer pool's arena, [`DeviceParent::as_sub_allocator`]): no `Weak`
    /// per resource (issue #31); `Life::retire` gives the range back through its parent, or
    /// fills in the `Weak` before the garbage is queued.
    ///
    /// [`DeviceParent::as_sub_allocator`]: crate::device::life::DeviceParent::as_sub_allocator
    Sub { owner: Option<std::sync::Weak<dyn SubAllocator>>, allocation: SubAllocation },
    /// A transient pool's heap: nothing to return (the heap retires after the resources in it).
    Transient,
}

/// A range a [`SubAllocator`] handed out.
#[derive(Debug)]
pub(crate) enum SubAllocation {
    /// A range of a page of heap `arena` (buffer pools).
    Block { arena: u16, allocation: BlockAllocation },
    /// A range of a linear allocator's block (linear pools).
    Linear(residency_core::allocator::LinearAllocation),
}

/// What a pool is to the memory layer: something that hands out ranges of memory it holds and
/// takes them back. The one seam a new pool implements (buffer pools and linear pools do); memory
/// freed through [`Device::release`] returns through it, and the defragmenter finds a pool's
/// concrete type through [`SubAllocator::as_any`].
pub(crate) trait SubAllocator: Send + Sync {
    /// Takes back `allocation`, a range this sub-allocator handed out.
    fn give_back(&self, allocation: SubAllocation);

    /// This sub-allocator, for a downcast to its concrete type.
    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync>;
}

impl Device {
    /// Returns a resource's memory to where it came from.
    pub(crate) fn release(&self, owner: ResourceMemory) {
        self.release_to(owner, None);
    }

    /// [`Device::release`], with `parent` the sub-allocator a [`ResourceMemory::Sub`] without a
    /// `Weak` of its own returns to (its `Life`'s parent, alive while the life holds it).
    pub(crate) fn release_to(&self, owner: ResourceMemory, parent: Option<&dyn SubAllocator>) {
        match owner {
            ResourceMemory::General { list, allocation } => {
                let mut list = self.general[list as usize].locked();
                list.free(self, allocation);
            }
            ResourceMemory::Dedicated(block) => block.destroy(self),
            ResourceMemory::Sub { owner: None, allocation } => match parent {
                Some(parent) => parent.give_back(allocation),
                // `Life::retire` resolves the owner before the garbage leaves the life: never
                // reached (the range would stay allocated until its page goes).
                None => debug_assert!(false, "a parent's range released without its parent"),
            },
            ResourceMemory::Sub { owner: Some(owner), allocation } => {
                if let Some(owner) = owner.upgrade() {
                    owner.give_back(allocation);
                }
            }
            ResourceMemory::Transient => {}
        }
    }
}

/// Messages the engine sent while placing the device's resources, oldest first, at most
/// [`PLACEMENT_MESSAGES_KEPT`] (older ones are dropped; every one also went to `tracing`, target
/// `residency::placement`).
#[derive(Debug, Default)]
pub(crate) struct PlacementLog {
    messages: std::sync::Mutex<std::collections::VecDeque<(Arc<str>, Message)>>,
}

/// How many placement messages a device keeps.
pub const PLACEMENT_MESSAGES_KEPT: usize = 256;

impl PlacementLog {
    pub(crate) fn push(&self, name: &str, message: Message) {
        let mut messages = self.messages.locked();
        if messages.len() == PLACEMENT_MESSAGES_KEPT {
            messages.pop_front();
        }
        messages.push_back((Arc::from(name), message));
    }

    /// The messages kept, oldest first, with the resource's name.
    pub(crate) fn messages(&self) -> Vec<(String, Message)> {
        let messages = self.messages.locked();
        messages.iter().map(|(name, m)| (name.to_string(), m.clone())).collect()
    }
}
