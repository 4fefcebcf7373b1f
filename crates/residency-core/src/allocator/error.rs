//! Typed errors of the offset allocators: misuse, out of space, and broken invariants.

use super::ResourceKind;

/// A descriptor given to [`TlsfAllocator::new`](super::TlsfAllocator::new) or
/// [`RingAllocator::new`](super::RingAllocator::new) was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DescError {
    /// The capacity was zero.
    #[error("capacity must be greater than zero")]
    ZeroCapacity,
    /// The granularity page size was not a power of two.
    #[error("granularity {granularity} is not a power of two")]
    GranularityNotPowerOfTwo {
        /// The granularity given.
        granularity: u64,
    },
}

/// An allocation or free request was refused. Out of space is a value, never a panic.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// A zero-byte allocation was requested.
    #[error("allocation size must be greater than zero")]
    ZeroSize,
    /// The alignment was not a power of two (zero included).
    #[error("alignment {alignment} is not a power of two")]
    AlignmentNotPowerOfTwo {
        /// The alignment given.
        alignment: u64,
    },
    /// No free range can hold the request with its alignment and granularity constraints.
    #[error(
        "out of space: {size} B aligned to {alignment} B does not fit (largest free range {largest_free} B, \
         {free} B free in all)"
    )]
    OutOfSpace {
        /// Requested size in bytes.
        size: u64,
        /// Requested alignment in bytes.
        alignment: u64,
        /// Size of the largest free range at the time of the request.
        largest_free: u64,
        /// Total free bytes at the time of the request.
        free: u64,
    },
    /// [`TlsfAllocator::allocate_at`](super::TlsfAllocator::allocate_at): the range is not free
    /// (in part or whole), is misaligned, leaves the heap, or would share a granularity page with a
    /// conflicting neighbour.
    #[error(
        "{size} B at offset {offset} aligned to {alignment} B cannot be placed: the range is not free there"
    )]
    RangeUnavailable {
        /// Requested offset.
        offset: u64,
        /// Requested size in bytes.
        size: u64,
        /// Requested alignment in bytes.
        alignment: u64,
    },
    /// The allocation handle was made by another allocator.
    #[error("allocation at offset {offset} ({size} B) was not made by this allocator")]
    ForeignAllocation {
        /// Offset of the foreign allocation.
        offset: u64,
        /// Size of the foreign allocation.
        size: u64,
    },
}

/// The first broken invariant found by
/// [`TlsfAllocator::check_invariants`](super::TlsfAllocator::check_invariants). Any value of this
/// type is a bug in the allocator, reported with the numbers needed to find it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvariantError {
    /// The block list does not start at offset 0, has a gap, or an overlap.
    #[error("block at {offset} should start at {expected} (gap or overlap in the block list)")]
    NotContiguous {
        /// Where the block starts.
        offset: u64,
        /// Where the previous block ended.
        expected: u64,
    },
    /// A block has size zero.
    #[error("block at {offset} has size zero")]
    EmptyBlock {
        /// Where the block starts.
        offset: u64,
    },
    /// The block list does not end exactly at the capacity.
    #[error("blocks end at {end}, capacity is {capacity}")]
    OutOfBounds {
        /// Where the last block ends.
        end: u64,
        /// The allocator's capacity.
        capacity: u64,
    },
    /// The physical links of two neighbouring blocks disagree.
    #[error("block at {offset}: previous/next links are inconsistent")]
    BrokenLinks {
        /// Where the block starts.
        offset: u64,
    },
    /// A used block does not start at a multiple of its alignment.
    #[error("used block at {offset} is not aligned to {alignment}")]
    Misaligned {
        /// Where the block starts.
        offset: u64,
        /// Its requested alignment.
        alignment: u64,
    },
    /// Two used blocks of conflicting kinds share a granularity page.
    #[error(
        "used blocks at {first_offset} ({first_kind:?}) and {second_offset} ({second_kind:?}) share a \
         {granularity} B granularity page"
    )]
    GranularityConflict {
        /// Offset of the lower block.
        first_offset: u64,
        /// Kind of the lower block.
        first_kind: ResourceKind,
        /// Offset of the upper block.
        second_offset: u64,
        /// Kind of the upper block.
        second_kind: ResourceKind,
        /// The granularity page size.
        granularity: u64,
    },
    /// Two free blocks are adjacent (coalescing was missed).
    #[error("free blocks at {first_offset} and {second_offset} are adjacent and not coalesced")]
    NotCoalesced {
        /// Offset of the lower free block.
        first_offset: u64,
        /// Offset of the upper free block.
        second_offset: u64,
    },
    /// A free block is missing from the free list of its size class, or filed in the wrong one.
    #[error("free block at {offset} ({size} B) is not in the free list of bin {bin}")]
    NotInFreeList {
        /// Where the block starts.
        offset: u64,
        /// Its size.
        size: u64,
        /// The bin it belongs to.
        bin: usize,
    },
    /// A free list holds a block that is used, or its links are broken.
    #[error("free list of bin {bin} is corrupt")]
    CorruptFreeList {
        /// The bin whose list is corrupt.
        bin: usize,
    },
    /// The upper bound the slow path uses for a bin's sizes is below a block on its list, or is not
    /// 0 for an empty list.
    #[error("bin {bin} bounds its sizes by {recorded} but its list's largest is {actual}")]
    BinMaximumWrong {
        /// The bin.
        bin: usize,
        /// The bound in use.
        recorded: u64,
        /// The largest size on the list (0 when empty).
        actual: u64,
    },
    /// A bitmap bit disagrees with whether its free list is empty.
    #[error("bitmap bit of bin {bin} is {bit} but its free list is {}", if *.bit { "empty" } else { "not empty" })]
    BitmapMismatch {
        /// The bin.
        bin: usize,
        /// The bit's value.
        bit: bool,
    },
    /// The free lists hold a different number of blocks than the block list has free blocks.
    #[error("free lists hold {in_lists} blocks, the block list has {in_blocks} free blocks")]
    FreeCountMismatch {
        /// Blocks found through the free lists.
        in_lists: usize,
        /// Free blocks found through the block list.
        in_blocks: usize,
    },
    /// A counter disagrees with the block list.
    #[error("counter `{counter}` is {counted}, the block list says {actual}")]
    CounterMismatch {
        /// Which counter.
        counter: &'static str,
        /// The counter's value.
        counted: u64,
        /// The value recomputed from the block list.
        actual: u64,
    },
    /// Used and free bytes do not add up to the capacity.
    #[error("used {used} + free {free} != capacity {capacity}")]
    BytesDoNotAddUp {
        /// Used bytes.
        used: u64,
        /// Free bytes.
        free: u64,
        /// Capacity.
        capacity: u64,
    },
}

/// A ring allocation or frame operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// A zero-byte allocation was requested.
    #[error("allocation size must be greater than zero")]
    ZeroSize,
    /// The alignment was not a power of two (zero included).
    #[error("alignment {alignment} is not a power of two")]
    AlignmentNotPowerOfTwo {
        /// The alignment given.
        alignment: u64,
    },
    /// The ring has no room until older frames retire.
    #[error(
        "ring full: {size} B aligned to {alignment} B does not fit ({free} B free of {capacity}; retire \
         finished frames first)"
    )]
    Full {
        /// Requested size.
        size: u64,
        /// Requested alignment.
        alignment: u64,
        /// Bytes not held by live frames.
        free: u64,
        /// The ring's capacity.
        capacity: u64,
    },
    /// The request is larger than the whole ring.
    #[error("{size} B aligned to {alignment} B can never fit in a ring of {capacity} B")]
    TooLarge {
        /// Requested size.
        size: u64,
        /// Requested alignment.
        alignment: u64,
        /// The ring's capacity.
        capacity: u64,
    },
    /// A frame that has not been finished (or does not exist yet) was retired.
    #[error("frame {frame} cannot retire: the open frame is {open}, only earlier frames are finished")]
    FrameNotFinished {
        /// The frame asked for.
        frame: u64,
        /// The frame still open for allocations.
        open: u64,
    },
}

/// The first broken invariant found by
/// [`RingAllocator::check_invariants`](super::RingAllocator::check_invariants).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RingInvariantError {
    /// The live span is larger than the ring.
    #[error("live span {live} B exceeds capacity {capacity} B")]
    Overfull {
        /// Bytes between tail and head.
        live: u64,
        /// The ring's capacity.
        capacity: u64,
    },
    /// Frame boundaries are not monotone between tail and head.
    #[error("frame {frame} ends at {end}, outside [{lower}, {upper}] or before the previous frame")]
    FrameOutOfOrder {
        /// The frame.
        frame: u64,
        /// Its recorded end position.
        end: u64,
        /// The lowest allowed end.
        lower: u64,
        /// The highest allowed end.
        upper: u64,
    },
    /// Pending frame ids are not consecutive or do not lead up to the open frame.
    #[error("pending frame ids are not consecutive up to the open frame {open}")]
    FrameIdsNotConsecutive {
        /// The frame still open.
        open: u64,
    },
}
