//! The report model: a device's heaps, memory types, pools and blocks, each block's ranges.

use serde::{Deserialize, Serialize};

use crate::allocator::ResourceKind;
use crate::profile::MemoryTypeFlags;

/// What kind of resource an allocation holds, as dumps name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceType {
    /// A buffer (its own `VkBuffer`, or a range of a pool page's buffer).
    Buffer,
    /// An image with linear tiling.
    ImageLinear,
    /// An image with optimal tiling.
    ImageOptimal,
    /// Not known.
    #[default]
    Unknown,
}

impl ResourceType {
    /// The type an allocation of `kind` is reported as when nothing else is known about it. Every
    /// linear allocation the library makes today is a buffer, so [`ResourceKind::Linear`] maps to
    /// [`ResourceType::Buffer`].
    pub const fn from_kind(kind: ResourceKind) -> ResourceType {
        match kind {
            ResourceKind::Linear => ResourceType::Buffer,
            ResourceKind::Optimal => ResourceType::ImageOptimal,
            ResourceKind::Unknown => ResourceType::Unknown,
        }
    }
}

/// One live allocation inside a block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationInfo {
    /// The resource's name, when the report was given it.
    pub name: Option<String>,
    /// What it holds.
    pub resource: ResourceType,
    /// Its Vulkan usage bits (`VkBufferUsageFlags` for buffers, `VkImageUsageFlags` for images);
    /// 0 when not known.
    pub usage: u64,
    /// The alignment it was placed with.
    pub alignment: u64,
}

/// What a [`Range`] of a block is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RangeKind {
    /// Bytes of a live resource.
    Allocation(AllocationInfo),
    /// Bytes lost to alignment: a free gap before an allocation that is smaller than that
    /// allocation's alignment, or the bytes between a resource's end and the end of its footprint.
    Padding,
    /// Free bytes.
    Free,
}

/// A run of bytes of a block. A block's ranges tile it exactly, in address order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    /// First byte, from the start of the block.
    pub offset: u64,
    /// Size in bytes (never 0).
    pub size: u64,
    /// What the bytes are.
    #[serde(flatten)]
    pub kind: RangeKind,
}

impl Range {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.size
    }
}

/// One `VkDeviceMemory` and what lives in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockReport {
    /// Its id, unique within its owner (the general allocator's memory type, or a pool).
    pub id: u32,
    /// Its debug name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Whether it is persistently mapped.
    pub mapped: bool,
    /// Memory of one resource of its own (a committed resource) rather than a shared heap.
    pub dedicated: bool,
    /// Its ranges, tiling `[0, size)` in address order.
    pub ranges: Vec<Range>,
}

impl BlockReport {
    /// A block whose allocator lists used and free blocks: `used` gives each used range with its
    /// footprint, and the ranges are built from them: allocations, padding (alignment gaps and
    /// footprint tails, see [`RangeKind::Padding`]) and free space.
    ///
    /// `used` must be in address order, inside `[0, size)` and not overlapping.
    pub fn from_used(
        id: u32,
        name: impl Into<String>,
        size: u64,
        used: impl IntoIterator<Item = UsedRange>,
    ) -> BlockReport {
        let mut ranges = Vec::new();
        let mut cursor = 0;
        for u in used {
            debug_assert!(u.offset >= cursor && u.offset + u.footprint <= size, "used ranges in order");
            if u.offset > cursor {
                let gap = u.offset - cursor;
                let kind = if gap < u.info.alignment { RangeKind::Padding } else { RangeKind::Free };
                push_range(&mut ranges, cursor, gap, kind);
            }
            let bytes = u.bytes.clamp(1, u.footprint);
            push_range(&mut ranges, u.offset, bytes, RangeKind::Allocation(u.info));
            if u.footprint > bytes {
                push_range(&mut ranges, u.offset + bytes, u.footprint - bytes, RangeKind::Padding);
            }
            cursor = u.offset + u.footprint;
        }
        if size > cursor {
            push_range(&mut ranges, cursor, size - cursor, RangeKind::Free);
        }
        BlockReport { id, name: name.into(), size, mapped: false, dedicated: false, ranges }
    }

    /// Marks the block persistently mapped.
    pub fn with_mapped(mut self, mapped: bool) -> Self {
        self.mapped = mapped;
        self
    }

    /// Marks the block as dedicated memory.
    pub fn with_dedicated(mut self, dedicated: bool) -> Self {
        self.dedicated = dedicated;
        self
    }

    /// The live allocations.
    pub fn allocations(&self) -> impl Iterator<Item = (&Range, &AllocationInfo)> + '_ {
        self.ranges.iter().filter_map(|r| match &r.kind {
            RangeKind::Allocation(info) => Some((r, info)),
            _ => None,
        })
    }
}

/// Appends a range, merging it into the previous one when both are padding or both are free.
fn push_range(ranges: &mut Vec<Range>, offset: u64, size: u64, kind: RangeKind) {
    if size == 0 {
        return;
    }
    if let Some(last) = ranges.last_mut() {
        let same = matches!(
            (&last.kind, &kind),
            (RangeKind::Padding, RangeKind::Padding) | (RangeKind::Free, RangeKind::Free)
        );
        if same && last.end() == offset {
            last.size += size;
            return;
        }
    }
    ranges.push(Range { offset, size, kind });
}

/// A used range of an allocator, as [`BlockReport::from_used`] takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsedRange {
    /// First byte.
    pub offset: u64,
    /// Bytes the allocator holds for it (its footprint).
    pub footprint: u64,
    /// Bytes of the resource itself (`<= footprint`; the rest is padding). Pass the footprint when
    /// the resource's own size is not known.
    pub bytes: u64,
    /// What it is.
    pub info: AllocationInfo,
}

/// One memory type and the general allocator's blocks of that type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTypeReport {
    /// Its index.
    pub index: u32,
    /// The heap it allocates from.
    pub heap_index: u32,
    /// Its property flags.
    pub flags: MemoryTypeFlags,
    /// The size new blocks grow towards (the heap page size).
    pub preferred_block_size: u64,
    /// Blocks of the general allocator (shared heaps and dedicated memory) of this type.
    pub blocks: Vec<BlockReport>,
}

/// A buffer pool and its pages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolReport {
    /// The pool's name.
    pub name: String,
    /// The memory type of its pages.
    pub memory_type: u32,
    /// Bytes per page.
    pub page_size: u64,
    /// Its pages.
    pub blocks: Vec<BlockReport>,
}

/// One memory heap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapReport {
    /// Its index.
    pub index: u32,
    /// Size in bytes.
    pub size: u64,
    /// `VK_MEMORY_HEAP_DEVICE_LOCAL_BIT`.
    pub device_local: bool,
    /// `VK_MEMORY_HEAP_MULTI_INSTANCE_BIT`.
    pub multi_instance: bool,
    /// Bytes the process may use (VK_EXT_memory_budget, or an estimate), capped by any limit the
    /// application set.
    pub budget: u64,
    /// Bytes the process uses now (every allocator, when the driver reports it).
    pub usage: u64,
    /// Bytes of `VkDeviceMemory` this library holds in the heap, listed in the report or not.
    pub library_bytes: u64,
}

/// The device a report describes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Its index in its device set.
    pub index: u32,
    /// `deviceName`.
    pub name: String,
    /// The Vulkan version it supports, e.g. `1.4.303`.
    pub api_version: String,
    /// `VkPhysicalDeviceType` as its Vulkan value.
    pub device_type: u32,
    /// `maxMemoryAllocationCount`.
    pub max_memory_allocation_count: u64,
    /// `bufferImageGranularity`.
    pub buffer_image_granularity: u64,
    /// `nonCoherentAtomSize`.
    pub non_coherent_atom_size: u64,
}

/// Where one device's memory lives: heaps, memory types with the general allocator's blocks, and
/// buffer pools with their pages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryReport {
    /// The device.
    pub device: DeviceInfo,
    /// Its heaps, by index.
    pub heaps: Vec<HeapReport>,
    /// Its memory types, by index.
    pub memory_types: Vec<MemoryTypeReport>,
    /// The pools included in the report.
    pub pools: Vec<PoolReport>,
}

impl MemoryReport {
    /// Every block with the memory type it belongs to and its pool (`None`: the general allocator).
    pub fn blocks(&self) -> impl Iterator<Item = (u32, Option<&PoolReport>, &BlockReport)> + '_ {
        let general = self.memory_types.iter().flat_map(|t| t.blocks.iter().map(move |b| (t.index, None, b)));
        let pools = self.pools.iter().flat_map(|p| p.blocks.iter().map(move |b| (p.memory_type, Some(p), b)));
        general.chain(pools)
    }

    /// The heap of memory type `index`, if the type exists.
    pub fn heap_of(&self, memory_type: u32) -> Option<u32> {
        self.memory_types.get(memory_type as usize).map(|t| t.heap_index)
    }

    /// Verifies the model's contract: every block's ranges tile it exactly (in order, no gap, no
    /// overlap, no empty range), every memory type points at a heap, every pool at a memory type.
    pub fn check(&self) -> Result<(), ReportError> {
        for t in &self.memory_types {
            if t.heap_index as usize >= self.heaps.len() {
                return Err(ReportError::NoSuchHeap { memory_type: t.index, heap: t.heap_index });
            }
        }
        for p in &self.pools {
            if p.memory_type as usize >= self.memory_types.len() {
                return Err(ReportError::NoSuchMemoryType {
                    pool: p.name.clone(),
                    memory_type: p.memory_type,
                });
            }
        }
        for (_, _, block) in self.blocks() {
            let mut cursor = 0;
            for range in &block.ranges {
                if range.offset != cursor || range.size == 0 {
                    return Err(ReportError::BadTiling {
                        block: block.name.clone(),
                        offset: range.offset,
                        expected: cursor,
                    });
                }
                cursor = range.end();
            }
            if cursor != block.size {
                return Err(ReportError::BadTiling {
                    block: block.name.clone(),
                    offset: cursor,
                    expected: block.size,
                });
            }
        }
        Ok(())
    }
}

/// Reports of every device of a set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSetReport {
    /// One report per device, in device order.
    pub devices: Vec<MemoryReport>,
}

/// A report that breaks the model's contract (see [`MemoryReport::check`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// A block's ranges do not tile it.
    #[error("block `{block}`: a range at {offset} where {expected} was expected")]
    BadTiling {
        /// The block.
        block: String,
        /// Where the wrong range starts (or where the ranges end).
        offset: u64,
        /// Where it should have started (or the block's size).
        expected: u64,
    },
    /// A memory type names a heap that is not in the report.
    #[error("memory type {memory_type} names heap {heap}, which is not in the report")]
    NoSuchHeap {
        /// The memory type.
        memory_type: u32,
        /// The heap it names.
        heap: u32,
    },
    /// A pool names a memory type that is not in the report.
    #[error("pool `{pool}` names memory type {memory_type}, which is not in the report")]
    NoSuchMemoryType {
        /// The pool.
        pool: String,
        /// The memory type it names.
        memory_type: u32,
    },
}
