//! Linear pools: VMA's linear algorithm over one `VkDeviceMemory` — a stack, a double stack, or a
//! ring buffer — for per-frame data (constants, dynamic vertices, readback slots). Every buffer is
//! placed as its own `VkBuffer` with its own usage, name and state, like an unknown-flags
//! [`BufferPool`](crate::BufferPool)'s. Allocation is a bump of the core's
//! [`LinearAllocator`]; a dropped buffer's range returns through the deferred destruction (after
//! the GPU work that may use it), and in a stack or a ring its space comes back once everything
//! above it (or older than it) has come back too.

// Sizes and offsets here come from callers: no operator that can wrap or panic (issue #29).
#![deny(clippy::arithmetic_side_effects)]

use crate::device::blocks::{check_priority, MemoryBlock, MemoryError, RawMemoryDesc, DEFAULT_PRIORITY};
use crate::device::blocks::{ResourceMemory, SubAllocation, SubAllocator};
use crate::device::ledger::ObjectId;
use crate::device::life::{Garbage, Holder, Parent, PendingUses};
use crate::device::Device;
use crate::poison::PoisonFree;
use crate::pools::buffer_pool::BufferInit;
use crate::resources::buffer::{bind_buffer, create_raw_buffer, Buffer};
use crate::resources::buffer::{BufferMemory, BufferObject, BufferParts};
use crate::resources::Unused;
use residency_core::allocator::{LinearAllocation, LinearAllocator, LinearDesc, LinearMode};
use residency_core::memory::{fallback_chain, MemoryIntent};
use residency_core::placement::heap::EXPLICIT_HEAP_ALIGNMENT;
use residency_core::sync::LastUses;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How to create a [`LinearPool`].
#[derive(Clone, Debug)]
pub struct LinearPoolDesc {
    /// Its name (its memory is named after it).
    pub name: String,
    /// The memory of its block: device-local, upload or readback. Default: upload (per-frame data
    /// the CPU writes).
    pub memory: MemoryIntent,
    /// Bytes of its one block (at least 64 KiB; rounded up to 64 KiB).
    pub size: u64,
    /// Stack, double stack or ring. Default: ring.
    pub mode: LinearMode,
    /// VK_EXT_memory_priority's priority of its block (`None`: 0.5).
    pub priority: Option<f32>,
    /// Allocate the block even when over the heap budget.
    pub allow_over_budget: bool,
}

impl LinearPoolDesc {
    /// Checks `size` against the device's `limits`; [`LinearPool::new`] calls it first and
    /// creates nothing when it fails: the block (rounded up to 64 KiB) is one allocation, within
    /// `maxMemoryAllocationSize`, so the rounding cannot wrap either.
    pub fn validate(
        &self,
        limits: &residency_core::profile::Limits,
    ) -> Result<(), residency_core::desc::DescError> {
        residency_core::desc::check_range(
            "LinearPoolDesc",
            &self.name,
            "size",
            self.size,
            0,
            limits.max_memory_allocation_size.min(u64::MAX - EXPLICIT_HEAP_ALIGNMENT),
            "the block is one allocation: maxMemoryAllocationSize",
        )
    }

    /// A ring of `size` bytes of upload memory.
    pub fn new(name: impl Into<String>, size: u64) -> LinearPoolDesc {
        LinearPoolDesc {
            name: name.into(),
            memory: MemoryIntent::Upload,
            size,
            mode: LinearMode::Ring,
            priority: None,
            allow_over_budget: false,
        }
    }

    /// Sets the mode.
    pub fn with_mode(mut self, mode: LinearMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the memory intent.
    pub fn with_memory(mut self, memory: MemoryIntent) -> Self {
        self.memory = memory;
        self
    }

    /// Sets the memory priority.
    pub fn with_priority(mut self, priority: f32) -> Self {
        self.priority = Some(priority);
        self
    }
}

/// A linear pool's figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearPoolStats {
    /// Bytes of its block.
    pub capacity: u64,
    /// Bytes held by live buffers (with their alignment padding).
    pub used_bytes: u64,
    /// Bytes of released buffers not reclaimable yet (something above or older is still live),
    /// and of buffers whose GPU work has not finished.
    pub pending_bytes: u64,
    /// The largest request that fits now.
    pub largest_free: u64,
    /// Live buffers.
    pub buffers: u64,
}

/// One block of memory carved by VMA's linear algorithm. Buffers keep it alive; dropping the pool
/// with live buffers is safe (the block goes with the last of them).
///
/// # Algorithm
///
/// One `VkDeviceMemory` block (a multiple of 64 KiB) carved by the core's
/// [`LinearAllocator`] in the pool's [`LinearMode`] (`# Algorithm` there): an allocation bumps
/// one end, aligned to the buffer's requirements; every buffer is a placed `VkBuffer` of its own.
/// A dropped buffer's range is freed once the GPU work declared on it has completed (the
/// deferred destruction); its space returns when it reaches the reclaimable end (the top of a
/// stack, the front of a ring). The block never grows: a request that does not fit is
/// refused.
///
/// # Efficiency
///
/// - Time: O(1) per allocation and amortized O(1) per free in the allocator, plus
///   `vkCreateBuffer` and a bind outside the lock. No figure in `docs/benchmarks.md`.
/// - Memory: one 64-byte record per live (or freed, not yet reclaimed) allocation, plus each
///   buffer's `VkBuffer`, `Arc<Life>`, name and ledger entry. Space overhead: alignment padding,
///   in a ring the skipped end when it wraps, and interior frees until their end is reached.
/// - Locking: one `Mutex` around the allocator, taken once per allocation and once per free.
pub struct LinearPool {
    shared: Arc<LinearShared>,
}

pub(crate) struct LinearShared {
    device: Arc<Device>,
    desc: LinearPoolDesc,
    /// The block; `None` only while it is handed to the retire queue on drop.
    block: Option<MemoryBlock>,
    allocator: Mutex<LinearAllocator>,
    pool_id: u64,
    buffers: AtomicU64,
    pending: PendingUses,
    id: ObjectId,
}

impl std::fmt::Debug for LinearPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinearPool").field("desc", &self.shared.desc).finish_non_exhaustive()
    }
}

impl LinearPool {
    /// Creates the pool and allocates its block. Refused before any Vulkan call: a size that
    /// does not pass [`LinearPoolDesc::validate`] ([`MemoryError::Desc`]), a priority outside
    /// `[0, 1]` ([`MemoryError::InvalidPriority`]), a size whose rounding up to 64 KiB overflows
    /// or that is beyond the device's `maxMemoryAllocationSize` or the heap's size
    /// ([`MemoryError::TooLarge`]), no memory type for the intent that every buffer usage
    /// accepts ([`MemoryError::NoSuitableMemoryType`]); and the block's own allocation failing
    /// (out of memory or budget).
    pub fn new(device: Arc<Device>, desc: LinearPoolDesc) -> Result<LinearPool, MemoryError> {
        desc.validate(&device.profile().limits)?;
        check_priority(&desc.name, desc.priority)?;
        let Some(size) =
            desc.size.max(EXPLICIT_HEAP_ALIGNMENT).checked_next_multiple_of(EXPLICIT_HEAP_ALIGNMENT)
        else {
            return Err(MemoryError::TooLarge {
                name: desc.name,
                requested: desc.size,
                limit_name: "largest u64 multiple of 64 KiB",
                limit: u64::MAX - u64::MAX % EXPLICIT_HEAP_ALIGNMENT,
            });
        };
        let desc = LinearPoolDesc { size, ..desc };
        let allowed = crate::pools::buffer_pool::unknown_flags_type_bits(&device);
        // The chain's first step: its type, and the tier it counts in (staging on a unified-memory
        // device counts in the host tier, outside the device-local limit).
        let Some(&step) = fallback_chain(&device.memory_properties().types, allowed, desc.memory).first()
        else {
            return Err(MemoryError::NoSuitableMemoryType {
                name: desc.name,
                allowed_bits: allowed,
                intent: desc.memory,
            });
        };
        let name = format!("{} block", desc.name);
        let raw = RawMemoryDesc {
            name: &name,
            size: desc.size,
            type_index: step.type_index,
            allow_over_budget: desc.allow_over_budget,
            dedicated: None,
            priority: desc.priority.unwrap_or(DEFAULT_PRIORITY),
        };
        let block = MemoryBlock::new_in_tier(&device, raw, 1, step.tier)?;
        let allocator = LinearAllocator::new(LinearDesc::new(desc.size).with_mode(desc.mode))
            .expect("the capacity is at least 64 KiB");
        let id = device.ledger().track("linear pool", desc.name.as_str());
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(LinearPool {
            shared: Arc::new(LinearShared {
                device,
                desc,
                block: Some(block),
                allocator: Mutex::new(allocator),
                // Apart from buffer pools' ids: the high bit marks a linear pool.
                pool_id: (1 << 63) | NEXT_ID.fetch_add(1, Ordering::Relaxed),
                buffers: AtomicU64::new(0),
                pending: PendingUses::default(),
                id,
            }),
        })
    }

    /// Its description.
    pub fn desc(&self) -> &LinearPoolDesc {
        &self.shared.desc
    }

    /// Creates a buffer with its own usage (required) at the top of the stack, the lower stack of
    /// a double stack, or the head of the ring. A request that does not fit now is
    /// [`MemoryError::Linear`] with the algorithm's reason (out of space: earlier buffers are
    /// still live or their GPU work is still running); nothing is allocated then.
    pub fn create_buffer(&self, init: &BufferInit) -> Result<Buffer, MemoryError> {
        self.shared.create(&self.shared, init, false)
    }

    /// Creates a buffer at the bottom of the upper stack of a double stack (growing down from
    /// the end of the block). In the other modes: [`MemoryError::Linear`] (`UpperNeedsDoubleStack`).
    pub fn create_buffer_upper(&self, init: &BufferInit) -> Result<Buffer, MemoryError> {
        self.shared.create(&self.shared, init, true)
    }

    /// Whether `buffer` was made by this pool.
    pub fn owns(&self, buffer: &Buffer) -> bool {
        buffer.pool_id() == Some(self.shared.pool_id)
    }

    /// Its figures now.
    pub fn stats(&self) -> LinearPoolStats {
        let allocator = self.shared.allocator.locked();
        LinearPoolStats {
            capacity: allocator.capacity(),
            used_bytes: allocator.used_bytes(),
            pending_bytes: allocator
                .capacity()
                .saturating_sub(allocator.used_bytes())
                .saturating_sub(allocator.free_bytes()),
            largest_free: allocator.largest_free(),
            buffers: self.shared.buffers.load(Ordering::Relaxed),
        }
    }

    /// Checks the algorithm's invariants (for tests and debugging; a failure is a library bug).
    pub fn check_invariants(&self) -> Result<(), residency_core::allocator::LinearInvariantError> {
        self.shared.allocator.locked().check_invariants()
    }
}

impl LinearShared {
    fn block(&self) -> &MemoryBlock {
        self.block.as_ref().expect("the block lives as long as the pool's state")
    }

    fn create(
        &self,
        this: &Arc<LinearShared>,
        init: &BufferInit,
        upper: bool,
    ) -> Result<Buffer, MemoryError> {
        let invalid = |source| MemoryError::InvalidRequest { name: init.name.to_string(), source };
        if init.alignment != 0 && !init.alignment.is_power_of_two() {
            return Err(invalid(residency_core::allocator::AllocError::AlignmentNotPowerOfTwo {
                alignment: init.alignment,
            }));
        }
        if init.size == 0 {
            return Err(invalid(residency_core::allocator::AllocError::ZeroSize));
        }
        let usage = match init.usage {
            Some(usage) if !usage.is_empty() => usage,
            _ => {
                return Err(MemoryError::Unsatisfiable {
                    name: init.name.to_string(),
                    reason: "a linear pool's buffers each need their own usage flags".into(),
                })
            }
        };
        let block = self.block();
        let (raw, req) = create_raw_buffer(&self.device, &init.name, init.size, usage)?;
        let guard = Unused::new(&self.device, raw);
        if req.memory_type_bits & (1 << block.type_index) == 0 {
            return Err(MemoryError::Unsatisfiable {
                name: init.name.to_string(),
                reason: format!(
                    "usage {usage:?} cannot live in memory type {} of this pool",
                    block.type_index
                ),
            });
        }
        let atom = {
            let t = &self.device.memory_properties().types[block.type_index as usize];
            if t.flags.host_visible && !t.flags.host_coherent {
                self.device.limits().non_coherent_atom_size.max(1)
            } else {
                1
            }
        };
        let alignment =
            req.alignment.max(init.alignment).max(self.device.usage_floor(usage)).max(atom).max(1);
        let size = req.size.next_multiple_of(atom);
        let allocation = {
            let mut allocator = self.allocator.locked();
            let result = if upper {
                allocator.allocate_upper(size, alignment)
            } else {
                allocator.allocate(size, alignment)
            };
            result.map_err(|source| MemoryError::Linear { name: init.name.to_string(), source })?
        };
        let offset = allocation.offset();
        if let Err(e) = bind_buffer(&self.device, guard.disarm(), block.memory, offset) {
            self.free_range(allocation);
            return Err(e);
        }
        self.buffers.fetch_add(1, Ordering::Relaxed);
        let owner = ResourceMemory::Sub {
            owner: Some(Arc::downgrade(this) as _),
            allocation: SubAllocation::Linear(allocation),
        };
        let coherent = self.device.memory_properties().types[block.type_index as usize].flags.host_coherent;
        Ok(Buffer::new(BufferParts {
            holder: Holder::Device(Arc::clone(&self.device), Some(Arc::clone(this) as Arc<dyn Parent>)),
            name: Arc::clone(&init.name),
            size: init.size,
            usage,
            object: BufferObject::Placed(raw),
            owner,
            memory: BufferMemory {
                memory: block.memory,
                offset,
                memory_size: block.size,
                mapped: block.mapped,
            },
            coherent,
            pool: Some(self.pool_id),
            // A linear pool's order is its allocation order: defragmentation leaves it alone.
            movable: false,
            placed_with: crate::memory::placement::PlacedWith::driver(req.size, alignment),
        }))
    }

    /// Returns a released buffer's range (its `VkBuffer` is already destroyed).
    pub(crate) fn free_range(&self, allocation: LinearAllocation) {
        let freed = self.allocator.locked().free(allocation);
        debug_assert!(freed.is_ok(), "a linear pool's own allocation: {freed:?}");
    }
}

impl SubAllocator for LinearShared {
    fn give_back(&self, allocation: SubAllocation) {
        match allocation {
            SubAllocation::Linear(allocation) => self.free_range(allocation),
            SubAllocation::Block { .. } => debug_assert!(false, "a linear pool hands out linear ranges only"),
        }
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

impl Parent for LinearShared {
    fn note_pending(&self, uses: &LastUses) {
        self.pending.note(uses);
    }

    fn name(&self) -> String {
        self.desc.name.clone()
    }

    fn child_released(&self) {
        self.buffers.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for LinearShared {
    fn drop(&mut self) {
        // No buffer of the pool is alive (each holds this state); ranges of buffers still waiting
        // for the GPU retire before the block, which waits for the same uses.
        let uses = self.pending.take();
        if let Some(block) = self.block.take() {
            self.device.retire(Garbage::Memory(Box::new(block)), uses);
        }
        self.device.ledger().untrack(self.id);
    }
}
