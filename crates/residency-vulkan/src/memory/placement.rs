//! Memory for one resource: placed at an offset of a shared heap of the device's general
//! allocator, or committed (dedicated memory of its own). Shared by buffers and images.

use crate::device::Device;
use crate::memory::{BlockAllocation, MappedPtr, MemoryBlock, MemoryError, RawMemoryDesc, SubRequest};
use ash::vk;
use residency_core::allocator::ResourceKind;
use residency_core::memory::{memory_type_candidates, MemoryIntent};
use residency_core::profile::MemoryRequirements;

/// Where a resource's memory came from, so that freeing returns it there.
#[derive(Debug)]
pub(crate) enum ResourceMemory {
    /// The device's general allocator, memory type `type_index`.
    General { type_index: u32, allocation: BlockAllocation },
    /// Memory of its own.
    Dedicated(Box<MemoryBlock>),
    /// A pool's page. Weak: a live resource keeps its pool alive through its `Life`'s parent; a
    /// deferred one returns its range only if the pool is still there (else the pool's pages
    /// retire after it, all at once).
    Pool { pool: std::sync::Weak<crate::pool::PoolShared>, arena: u16, allocation: BlockAllocation },
    /// A transient pool's heap: nothing to return (the heap retires after the resources in it).
    Transient,
}

/// The resource a dedicated allocation is for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DedicatedTarget {
    Buffer(vk::Buffer),
    Image(vk::Image),
}

/// What a resource needs.
#[derive(Debug)]
pub(crate) struct PlaceRequest<'a> {
    pub(crate) name: &'a str,
    pub(crate) requirements: MemoryRequirements,
    pub(crate) alignment_floor: u64,
    pub(crate) kind: ResourceKind,
    pub(crate) intent: MemoryIntent,
    pub(crate) committed: bool,
    pub(crate) allow_over_budget: bool,
    pub(crate) target: DedicatedTarget,
}

/// Where it went.
#[derive(Debug)]
pub(crate) struct Placed {
    pub(crate) owner: ResourceMemory,
    pub(crate) memory: vk::DeviceMemory,
    pub(crate) offset: u64,
    pub(crate) memory_size: u64,
    pub(crate) mapped: Option<MappedPtr>,
    pub(crate) coherent: bool,
    pub(crate) committed: bool,
}

impl Device {
    /// Finds memory for a resource: each candidate memory type in preference order, placed in a
    /// shared heap or dedicated, falling back to the next type only when one runs out.
    pub(crate) fn place(&self, req: &PlaceRequest<'_>) -> Result<Placed, MemoryError> {
        let r = req.requirements;
        let candidates =
            memory_type_candidates(&self.memory_properties().types, r.memory_type_bits, req.intent);
        if candidates.is_empty() {
            return Err(MemoryError::NoSuitableMemoryType {
                name: req.name.to_owned(),
                allowed_bits: r.memory_type_bits,
                intent: req.intent,
            });
        }
        let alignment = r.alignment.max(req.alignment_floor).max(1);
        let mut last_error = None;
        for &type_index in &candidates {
            let coherent = self.memory_properties().types[type_index as usize].flags.host_coherent;
            let mut list = self.general[type_index as usize].lock().unwrap_or_else(|e| e.into_inner());
            let dedicated = req.committed || list.growth.wants_dedicated(r.size, r.prefers_dedicated);
            let result = if dedicated {
                drop(list);
                let info = match req.target {
                    DedicatedTarget::Buffer(b) => vk::MemoryDedicatedAllocateInfo::default().buffer(b),
                    DedicatedTarget::Image(i) => vk::MemoryDedicatedAllocateInfo::default().image(i),
                };
                let desc = RawMemoryDesc {
                    name: req.name,
                    size: r.size,
                    type_index,
                    allow_over_budget: req.allow_over_budget,
                    dedicated: Some(info),
                };
                MemoryBlock::new(self, desc, 1).map(|block| Placed {
                    memory: block.memory,
                    offset: 0,
                    memory_size: block.size,
                    mapped: block.mapped,
                    coherent,
                    committed: true,
                    owner: ResourceMemory::Dedicated(Box::new(block)),
                })
            } else {
                let request = SubRequest {
                    name: req.name,
                    size: r.size,
                    alignment,
                    kind: req.kind,
                    allow_over_budget: req.allow_over_budget,
                };
                list.allocate(self, request).map(|allocation| {
                    let block = list.block(allocation.block);
                    Placed {
                        memory: block.memory,
                        offset: allocation.allocation.offset(),
                        memory_size: block.size,
                        mapped: block.mapped,
                        coherent,
                        committed: false,
                        owner: ResourceMemory::General { type_index, allocation },
                    }
                })
            };
            match result {
                Ok(placed) => return Ok(placed),
                Err(e @ (MemoryError::OutOfDeviceMemory { .. } | MemoryError::OutOfBudget { .. })) => {
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.expect("at least one candidate was tried"))
    }

    /// Returns a resource's memory to where it came from.
    pub(crate) fn release(&self, owner: ResourceMemory) {
        match owner {
            ResourceMemory::General { type_index, allocation } => {
                let mut list = self.general[type_index as usize].lock().unwrap_or_else(|e| e.into_inner());
                list.free(self, allocation);
            }
            ResourceMemory::Dedicated(block) => block.destroy(self),
            ResourceMemory::Pool { pool, arena, allocation } => {
                if let Some(pool) = pool.upgrade() {
                    pool.free_range(arena, allocation);
                }
            }
            ResourceMemory::Transient => {}
        }
    }
}
