//! Offset allocators for heaps: O(1) two-level segregated fit and per-frame rings.
//!
//! Both allocators hand out *offsets* in an abstract `u64` address range; they never touch memory.
//! The Vulkan backend maps those offsets onto `VkDeviceMemory` heaps and page buffers.
//!
//! - [`TlsfAllocator`]: general-purpose placement in a heap. Allocation and free are O(1) (two-level
//!   segregated fit with bitmaps), alignment is exact (front padding goes back to the free lists),
//!   neighbours are coalesced immediately, and linear and optimal-tiling resources never share a
//!   `bufferImageGranularity` page. See `docs/allocator.md` for the design and the measured figures.
//! - [`plan_defragmentation`]: which movable allocations to move where so that the most-empty heaps
//!   empty into the fullest heaps' free ranges, within a per-pass budget (plain data; the backend
//!   carries the moves out).
//! - [`RingAllocator`]: per-frame upload data. Allocation bumps a head; whole frames retire in order
//!   when the GPU has finished them.
//!
//! # The contract (checked by [`TlsfAllocator::check_invariants`])
//! 1. Blocks (used or free) tile `[0, capacity)` exactly: in bounds, no overlap, no gap.
//! 2. Every used block starts at a multiple of the alignment it was requested with.
//! 3. Two used blocks whose [`ResourceKind`]s conflict never touch the same granularity page.
//! 4. No two free blocks are adjacent (coalescing is immediate).
//! 5. Every free block is in exactly the free list of its size class, and a bitmap bit is set exactly
//!    when its list is non-empty.
//! 6. `used_bytes + free_bytes == capacity`, and the counters match the block list.
#![warn(missing_docs)]

mod bins;
mod defrag;
mod error;
mod linear;
mod ring;
mod stats;
mod tlsf;

#[cfg(test)]
mod defrag_tests;
#[cfg(test)]
mod linear_tests;
#[cfg(test)]
mod ring_tests;
#[cfg(test)]
mod tlsf_tests;

pub use defrag::{
    check_plan, check_plan_with, plan_defragmentation, plan_defragmentation_with, DefragBudget, DefragError,
    DefragHeap, DefragPlan, LiveBlock, NewHeap, PlannedMove, Repack,
};
pub use error::{AllocError, DescError, InvariantError, RingError, RingInvariantError};
pub use linear::{
    LinearAllocation, LinearAllocator, LinearDesc, LinearError, LinearInvariantError, LinearMode,
};
pub use ring::{FrameId, RingAllocation, RingAllocator};
pub use stats::{AllocatorStats, Block, BlockState};
pub use tlsf::{Allocation, TlsfAllocator, TlsfDesc};

use serde::{Deserialize, Serialize};

/// What kind of resource an allocation holds, for `bufferImageGranularity`.
///
/// Vulkan requires that a linear resource (a buffer, or an image with linear tiling) and a
/// non-linear one (an image with optimal tiling) bound to the same memory never share a
/// "granularity page" (an aligned run of `bufferImageGranularity` bytes). Resources of the same
/// kind may share a page freely. `Unknown` conflicts with every kind, itself included, so it always
/// gets pages of its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ResourceKind {
    /// A buffer or an image with `VK_IMAGE_TILING_LINEAR`.
    Linear,
    /// An image with `VK_IMAGE_TILING_OPTIMAL` (or any non-linear tiling).
    Optimal,
    /// Not known; treated as conflicting with everything. The default, because it is always safe.
    #[default]
    Unknown,
}

impl ResourceKind {
    /// Whether resources of kinds `self` and `other` must not share a granularity page.
    #[inline]
    pub const fn conflicts_with(self, other: ResourceKind) -> bool {
        !matches!(
            (self, other),
            (ResourceKind::Linear, ResourceKind::Linear) | (ResourceKind::Optimal, ResourceKind::Optimal)
        )
    }
}
