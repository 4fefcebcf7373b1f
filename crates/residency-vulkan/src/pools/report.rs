//! Memory reports of live devices: the core's [`MemoryReport`] built from the general allocator's
//! heaps, buffer pools' pages and the device's budgets.
//!
//! The allocators know where every allocation is, its footprint, kind and alignment, but not what
//! it is called: names, usages and the resource's own size (the rest of the footprint is padding)
//! come from the buffers the caller lists in [`ReportSources`]. Committed buffers have memory of
//! their own outside every heap, so they appear in a report only when listed there. Each heap's
//! `library_bytes` counts all of this library's memory in it, listed or not.

use crate::device::blocks::ResourceMemory;
use crate::device::blocks::{BlockList, MemoryBlock};
use crate::device::life::Garbage;
use crate::device::set::DeviceSet;
use crate::device::Device;
use crate::poison::PoisonFree;
use crate::pools::buffer_pool::BufferPool;
use crate::resources::buffer::Buffer;
use ash::vk;
use residency_core::allocator::BlockState;
use residency_core::report::{
    AllocationInfo, BlockReport, DeviceInfo, DeviceSetReport, HeapReport, MemoryReport, MemoryTypeReport,
    PoolReport, ResourceType, UsedRange,
};
use residency_core::usage::BufferPoolUsage;
use std::collections::HashMap;

/// What a device's memory report includes besides the general allocator's heaps: buffer pools, and
/// buffers whose names, usages and sizes label the allocations (and whose committed memory is
/// listed as dedicated blocks).
///
/// ```no_run
/// # fn f(device: &residency_vulkan::Device, pool: &residency_vulkan::BufferPool, buffers: &[residency_vulkan::Buffer]) {
/// use residency_vulkan::ReportSources;
/// let report = device.memory_report_with(&ReportSources::new().with_pool(pool).with_buffers(buffers));
/// std::fs::write("heaps.json", residency_core::report::to_vma_json(&report)).unwrap();
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct ReportSources<'a> {
    pools: Vec<&'a BufferPool>,
    buffers: Vec<&'a Buffer>,
    images: Vec<&'a crate::resources::image::Image>,
    allocations: Vec<&'a crate::memory::placement::Allocation>,
}

impl<'a> ReportSources<'a> {
    /// Nothing besides the general allocator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Includes a pool's pages.
    pub fn with_pool(mut self, pool: &'a BufferPool) -> Self {
        self.pools.push(pool);
        self
    }

    /// Includes several pools' pages.
    pub fn with_pools(mut self, pools: impl IntoIterator<Item = &'a BufferPool>) -> Self {
        self.pools.extend(pools);
        self
    }

    /// Labels a buffer's allocation with its name, usage and size.
    pub fn with_buffer(mut self, buffer: &'a Buffer) -> Self {
        self.buffers.push(buffer);
        self
    }

    /// Labels several buffers' allocations.
    pub fn with_buffers(mut self, buffers: impl IntoIterator<Item = &'a Buffer>) -> Self {
        self.buffers.extend(buffers);
        self
    }

    /// Labels images' allocations with their names, tiling and size (committed ones listed as
    /// dedicated blocks).
    pub fn with_images(
        mut self,
        images: impl IntoIterator<Item = &'a crate::resources::image::Image>,
    ) -> Self {
        self.images.extend(images);
        self
    }

    /// Labels [`Allocation`](crate::Allocation)s — memory for the renderer's own objects and raw
    /// requirements — with their names and sizes (dedicated ones listed as dedicated blocks).
    pub fn with_allocations(
        mut self,
        allocations: impl IntoIterator<Item = &'a crate::memory::placement::Allocation>,
    ) -> Self {
        self.allocations.extend(allocations);
        self
    }
}

/// What names one allocation in a report.
#[derive(Clone, Debug)]
struct Label<'a> {
    name: &'a str,
    resource: ResourceType,
    usage: u64,
    size: u64,
    /// Its memory of its own, when it has some.
    dedicated: Option<&'a MemoryBlock>,
}

/// Labels by the place their memory starts at.
type Labels<'a> = HashMap<(vk::DeviceMemory, u64), Label<'a>>;

/// The dedicated block a resource's garbage will free, if it has one.
fn dedicated_of(life: &crate::device::life::Life) -> Option<&MemoryBlock> {
    match life.garbage()? {
        Garbage::Buffer { memory: ResourceMemory::Dedicated(block), .. }
        | Garbage::Image { memory: ResourceMemory::Dedicated(block), .. } => Some(block),
        _ => None,
    }
}

fn labels<'a>(device: &Device, sources: &ReportSources<'a>) -> Labels<'a> {
    let mut labels = Labels::new();
    for b in sources.buffers.iter().filter(|b| b.device_index() == device.index()) {
        let label = Label {
            name: b.name(),
            resource: ResourceType::Buffer,
            usage: u64::from(b.usage().bits()),
            size: b.size(),
            dedicated: dedicated_of(b.life()),
        };
        labels.insert(b.memory(), label);
    }
    for i in sources.images.iter().filter(|i| i.device_index() == device.index()) {
        let (memory, offset) = i.memory();
        let resource = if i.desc().linear { ResourceType::ImageLinear } else { ResourceType::ImageOptimal };
        let label = Label {
            name: &i.desc().name,
            resource,
            usage: u64::from(i.desc().usage.bits()),
            size: i.size(),
            dedicated: dedicated_of(i.life()),
        };
        labels.insert((memory, offset), label);
    }
    for a in sources.allocations.iter().filter(|a| a.device_index() == device.index()) {
        let label = Label {
            name: a.name(),
            resource: ResourceType::Unknown,
            usage: 0,
            size: a.size(),
            dedicated: dedicated_of(&a.life),
        };
        labels.insert((a.memory(), a.offset()), label);
    }
    labels
}

fn label_info(label: &Label<'_>, alignment: u64) -> AllocationInfo {
    AllocationInfo {
        name: Some(label.name.to_owned()),
        resource: label.resource,
        usage: label.usage,
        alignment,
    }
}

/// A heap's report: each used range of its allocator, labelled when a listed buffer starts there.
/// `usage` is what unlabelled allocations are known to have (a known-flags pool's flags), or 0.
fn block_report(id: u32, block: &MemoryBlock, usage: u64, labels: &Labels<'_>) -> BlockReport {
    let used = block.allocator.blocks().filter_map(|b| {
        let BlockState::Used { kind, alignment } = b.state else { return None };
        let range = match labels.get(&(block.memory, b.offset)) {
            Some(label) => UsedRange {
                offset: b.offset,
                footprint: b.size,
                bytes: label.size.min(b.size),
                info: AllocationInfo {
                    // A placed resource keeps the allocator's view of what it is.
                    resource: if label.resource == ResourceType::Unknown {
                        ResourceType::from_kind(kind)
                    } else {
                        label.resource
                    },
                    ..label_info(label, alignment)
                },
            },
            None => UsedRange {
                offset: b.offset,
                footprint: b.size,
                bytes: b.size,
                info: AllocationInfo {
                    name: None,
                    resource: ResourceType::from_kind(kind),
                    usage,
                    alignment,
                },
            },
        };
        Some(range)
    });
    BlockReport::from_used(id, block.name.clone(), block.size, used).with_mapped(block.mapped.is_some())
}

fn list_blocks(list: &BlockList, usage: u64, labels: &Labels<'_>) -> Vec<BlockReport> {
    list.blocks
        .iter()
        .enumerate()
        .filter_map(|(slot, block)| block.as_ref().map(|b| block_report(slot as u32, b, usage, labels)))
        .collect()
}

fn pool_report(pool: &BufferPool, labels: &Labels<'_>) -> PoolReport {
    let usage = match pool.desc().usage {
        BufferPoolUsage::Known(usage) => u64::from(usage.bits()),
        BufferPoolUsage::Unknown => 0,
    };
    let blocks = pool.arenas().iter().flat_map(|arena| list_blocks(&arena.locked(), usage, labels)).collect();
    PoolReport {
        name: pool.desc().name.clone(),
        memory_type: pool.memory_type(),
        page_size: pool.desc().page_size,
        blocks,
    }
}

impl Device {
    /// A report of the general allocator's heaps (every placed buffer made by
    /// [`Device::create_buffer`]), with heap budgets and usage. Allocations are unnamed; see
    /// [`Device::memory_report_with`].
    pub fn memory_report(&self) -> MemoryReport {
        self.memory_report_with(&ReportSources::new())
    }

    /// A report of the general allocator's heaps and of `sources`' pools, with `sources`' buffers
    /// naming their allocations and their committed memory listed as dedicated blocks. Pools and
    /// buffers of other devices are left out.
    ///
    /// Each heap is locked briefly while it is read, one at a time, so the report is a consistent
    /// picture of each heap but not of the device as a whole while other threads allocate.
    pub fn memory_report_with(&self, sources: &ReportSources<'_>) -> MemoryReport {
        let labels = labels(self, sources);
        let props = self.memory_properties();
        let heaps = props
            .heaps
            .iter()
            .enumerate()
            .map(|(i, heap)| {
                let index = i as u32;
                let budget = self.ledger().budget(&self.current_heap(index, heap), index);
                HeapReport {
                    index,
                    size: heap.size,
                    device_local: heap.device_local,
                    multi_instance: heap.multi_instance,
                    budget: budget.budget,
                    usage: budget.usage,
                    library_bytes: self.ledger().heap_bytes(index),
                }
            })
            .collect();
        let mut memory_types: Vec<MemoryTypeReport> = props
            .types
            .iter()
            .zip(&self.general)
            .enumerate()
            .map(|(i, (t, list))| {
                let list = list.locked();
                let mut blocks = list_blocks(&list, 0, &labels);
                // The type's host-tier heaps (a unified-memory device's fallback and demotion
                // destination), named so, after its own.
                if let Some(host) = self.general.get(i + props.types.len()) {
                    let first = blocks.iter().map(|b| b.id + 1).max().unwrap_or(0);
                    blocks.extend(list_blocks(&host.locked(), 0, &labels).into_iter().map(|mut b| {
                        b.id += first;
                        b
                    }));
                }
                MemoryTypeReport {
                    index: i as u32,
                    heap_index: t.heap_index,
                    flags: t.flags,
                    preferred_block_size: list.growth.page_size,
                    blocks,
                }
            })
            .collect();
        // Committed resources and dedicated allocations: memory of their own, listed after the
        // type's shared heaps, in a stable order.
        let mut dedicated: Vec<&Label<'_>> = labels.values().filter(|l| l.dedicated.is_some()).collect();
        dedicated.sort_by_key(|l| (l.name, l.dedicated.map(|b| b.memory)));
        for label in dedicated {
            let Some(block) = label.dedicated else { continue };
            let Some(t) = memory_types.get_mut(block.type_index as usize) else { continue };
            let id = t.blocks.iter().map(|b| b.id + 1).max().unwrap_or(0);
            let used = UsedRange {
                offset: 0,
                footprint: block.size,
                bytes: label.size.min(block.size),
                info: label_info(label, 1),
            };
            let report = BlockReport::from_used(id, block.name.clone(), block.size, [used])
                .with_mapped(block.mapped.is_some())
                .with_dedicated(true);
            t.blocks.push(report);
        }
        let pools = sources
            .pools
            .iter()
            .filter(|pool| std::ptr::eq(pool.device().as_ref(), self))
            .map(|pool| pool_report(pool, &labels))
            .collect();
        MemoryReport { device: self.report_info(), heaps, memory_types, pools }
    }

    fn report_info(&self) -> DeviceInfo {
        // SAFETY: the physical device was enumerated from this device's instance, which lives as
        // long as the device.
        let props = unsafe { self.instance().get_physical_device_properties(self.physical()) };
        let limits = self.limits();
        DeviceInfo {
            index: self.index().get(),
            name: self.name().to_owned(),
            api_version: crate::instance::version_string(props.api_version),
            device_type: props.device_type.as_raw() as u32,
            max_memory_allocation_count: u64::from(limits.max_memory_allocation_count),
            buffer_image_granularity: limits.buffer_image_granularity,
            non_coherent_atom_size: limits.non_coherent_atom_size,
        }
    }
}

impl BufferPool {
    /// A report of the pool's pages. Allocations are unnamed (a known-flags pool's ranges carry its
    /// flags); see [`BufferPool::report_with`].
    pub fn report(&self) -> PoolReport {
        self.report_with(&[])
    }

    /// A report of the pool's pages, with `buffers` naming their allocations.
    pub fn report_with(&self, buffers: &[&Buffer]) -> PoolReport {
        let sources = ReportSources::new().with_buffers(buffers.iter().copied());
        pool_report(self, &labels(self.device(), &sources))
    }
}

impl DeviceSet {
    /// A report of every device's general allocator (see [`Device::memory_report`]).
    pub fn memory_report(&self) -> DeviceSetReport {
        DeviceSetReport { devices: self.devices().iter().map(|d| d.memory_report()).collect() }
    }

    /// A report of every device with `sources` (see [`Device::memory_report_with`]); each device
    /// takes the pools and buffers that are its own.
    pub fn memory_report_with(&self, sources: &ReportSources<'_>) -> DeviceSetReport {
        DeviceSetReport { devices: self.devices().iter().map(|d| d.memory_report_with(sources)).collect() }
    }
}
