//! Statistics of blocks, aggregated per memory type, heap, pool, device and device set.
//!
//! Every figure is a sum (or a min/max) over blocks, so aggregates add up exactly: a heap's
//! figures are the sum of its memory types', a device's the sum of its heaps', a set's the sum of
//! its devices'. Within a block, `block_bytes == allocation_bytes + padding_bytes + free_bytes`.

use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign};

use super::model::{BlockReport, DeviceSetReport, MemoryReport, RangeKind};

/// Occupancy of a set of blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Statistics {
    /// Blocks (`VkDeviceMemory` objects).
    pub block_count: u64,
    /// Bytes of those blocks.
    pub block_bytes: u64,
    /// Live allocations.
    pub allocation_count: u64,
    /// Bytes of the resources themselves.
    pub allocation_bytes: u64,
    /// Bytes lost to alignment (see [`RangeKind::Padding`]).
    pub padding_bytes: u64,
    /// Free bytes.
    pub free_bytes: u64,
    /// Free ranges.
    pub free_range_count: u64,
    /// The smallest allocation (0 when there is none).
    pub allocation_size_min: u64,
    /// The largest allocation.
    pub allocation_size_max: u64,
    /// The smallest free range (0 when there is none).
    pub free_range_size_min: u64,
    /// The largest free range: the largest allocation (alignment 1) that one of the blocks could
    /// still take.
    pub free_range_size_max: u64,
}

impl Statistics {
    /// Statistics of one block.
    pub fn of_block(block: &BlockReport) -> Statistics {
        let mut s = Statistics { block_count: 1, block_bytes: block.size, ..Statistics::default() };
        for range in &block.ranges {
            match range.kind {
                RangeKind::Allocation(_) => {
                    s.allocation_size_min =
                        min_nonzero(s.allocation_size_min, s.allocation_count, range.size);
                    s.allocation_size_max = s.allocation_size_max.max(range.size);
                    s.allocation_count += 1;
                    s.allocation_bytes += range.size;
                }
                RangeKind::Padding => s.padding_bytes += range.size,
                RangeKind::Free => {
                    s.free_range_size_min =
                        min_nonzero(s.free_range_size_min, s.free_range_count, range.size);
                    s.free_range_size_max = s.free_range_size_max.max(range.size);
                    s.free_range_count += 1;
                    s.free_bytes += range.size;
                }
            }
        }
        s
    }

    /// Statistics of several blocks.
    pub fn of_blocks<'a>(blocks: impl IntoIterator<Item = &'a BlockReport>) -> Statistics {
        blocks.into_iter().map(Statistics::of_block).sum()
    }

    /// Bytes in blocks not held by resources: padding and free bytes.
    pub fn unused_bytes(&self) -> u64 {
        self.padding_bytes + self.free_bytes
    }

    /// `1 - largest free range / free bytes`: 0 when free space is one range (or there is none),
    /// approaching 1 as it splinters. Over several blocks, the largest range of any one block.
    pub fn fragmentation(&self) -> f64 {
        crate::allocator::AllocatorStats::fragmentation_of(self.free_bytes, self.free_range_size_max)
    }
}

/// The running minimum of a count-weighted series: `current` is meaningless while `count` is 0.
fn min_nonzero(current: u64, count: u64, value: u64) -> u64 {
    if count == 0 {
        value
    } else {
        current.min(value)
    }
}

impl AddAssign for Statistics {
    fn add_assign(&mut self, other: Statistics) {
        if other.allocation_count > 0 {
            self.allocation_size_min =
                min_nonzero(self.allocation_size_min, self.allocation_count, other.allocation_size_min);
        }
        if other.free_range_count > 0 {
            self.free_range_size_min =
                min_nonzero(self.free_range_size_min, self.free_range_count, other.free_range_size_min);
        }
        self.allocation_size_max = self.allocation_size_max.max(other.allocation_size_max);
        self.free_range_size_max = self.free_range_size_max.max(other.free_range_size_max);
        self.block_count += other.block_count;
        self.block_bytes += other.block_bytes;
        self.allocation_count += other.allocation_count;
        self.allocation_bytes += other.allocation_bytes;
        self.padding_bytes += other.padding_bytes;
        self.free_bytes += other.free_bytes;
        self.free_range_count += other.free_range_count;
    }
}

impl Add for Statistics {
    type Output = Statistics;

    fn add(mut self, other: Statistics) -> Statistics {
        self += other;
        self
    }
}

impl std::iter::Sum for Statistics {
    fn sum<I: Iterator<Item = Statistics>>(iter: I) -> Statistics {
        iter.fold(Statistics::default(), Add::add)
    }
}

/// A device's statistics at every level.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportStatistics {
    /// Per heap, by heap index: the sum of its memory types.
    pub heaps: Vec<Statistics>,
    /// Per memory type, by index: the general allocator's blocks and pool pages of that type.
    pub memory_types: Vec<Statistics>,
    /// The general allocator's blocks per memory type, by index.
    pub general: Vec<Statistics>,
    /// Per pool, in report order.
    pub pools: Vec<Statistics>,
    /// The whole device: the sum of its heaps.
    pub total: Statistics,
}

impl MemoryReport {
    /// Statistics per memory type, heap, pool and for the device.
    pub fn statistics(&self) -> ReportStatistics {
        let general: Vec<Statistics> =
            self.memory_types.iter().map(|t| Statistics::of_blocks(&t.blocks)).collect();
        let pools: Vec<Statistics> = self.pools.iter().map(|p| Statistics::of_blocks(&p.blocks)).collect();
        let mut memory_types = general.clone();
        for (pool, stats) in self.pools.iter().zip(&pools) {
            if let Some(slot) = memory_types.get_mut(pool.memory_type as usize) {
                *slot += *stats;
            }
        }
        let mut heaps = vec![Statistics::default(); self.heaps.len()];
        for (t, stats) in self.memory_types.iter().zip(&memory_types) {
            if let Some(slot) = heaps.get_mut(t.heap_index as usize) {
                *slot += *stats;
            }
        }
        let total = heaps.iter().copied().sum();
        ReportStatistics { heaps, memory_types, general, pools, total }
    }
}

impl DeviceSetReport {
    /// The sum over every device.
    pub fn total(&self) -> Statistics {
        self.devices.iter().map(|d| d.statistics().total).sum()
    }
}
