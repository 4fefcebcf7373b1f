//! Statistics and block listings of a heap: the numbers behind reports, dumps and heap maps.

use serde::{Deserialize, Serialize};

use super::ResourceKind;

/// A snapshot of an allocator's occupancy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AllocatorStats {
    /// Size of the managed range in bytes.
    pub capacity: u64,
    /// Bytes held by live allocations: their footprints, which include the rounding of each
    /// allocation's end up to its alignment (at most 256 B; see `docs/allocator.md`).
    pub used_bytes: u64,
    /// Bytes requested by live allocations (`<= used_bytes`).
    pub requested_bytes: u64,
    /// Bytes not held by any allocation, front padding included (`capacity - used_bytes`).
    pub free_bytes: u64,
    /// Size of the largest free range: the largest allocation with alignment 1 that can succeed.
    pub largest_free_bytes: u64,
    /// Number of live allocations.
    pub allocation_count: u64,
    /// Number of free ranges (maximal runs of free bytes).
    pub free_range_count: u64,
    /// `1 - largest_free_bytes / free_bytes`: 0 when all free space is one range (or there is none),
    /// approaching 1 as free space splinters into many small ranges.
    pub fragmentation: f64,
}

impl AllocatorStats {
    /// The fragmentation figure for the given free bytes and largest free range (see the field).
    pub fn fragmentation_of(free_bytes: u64, largest_free_bytes: u64) -> f64 {
        if free_bytes == 0 {
            0.0
        } else {
            1.0 - largest_free_bytes as f64 / free_bytes as f64
        }
    }
}

/// Whether a [`Block`] is free or holds an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BlockState {
    /// Free bytes (including alignment padding returned to the free lists).
    Free,
    /// A live allocation.
    Used {
        /// The kind it was allocated as.
        kind: ResourceKind,
        /// The alignment it was allocated with.
        alignment: u64,
    },
}

/// One block of a heap, as listed by [`TlsfAllocator::blocks`](super::TlsfAllocator::blocks), in
/// address order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Block {
    /// First byte of the block.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Free or used.
    pub state: BlockState,
}
