//! The O(1) two-level segregated fit allocator with exact alignment and granularity pages.

use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

use super::bins::{bin_ceil, bin_floor, BIN_COUNT, BIN_SLOTS, FL_COUNT, FL_SLOTS, SL_COUNT, SL_LOG2};
use super::error::{AllocError, DescError, InvariantError};
use super::stats::{AllocatorStats, Block, BlockState};
use super::ResourceKind;

/// "No node" in the intrusive links.
const NONE: u32 = u32::MAX;

/// A free block chosen for a request: its node, the bin whose list holds it, and the offset the
/// request goes at.
#[derive(Clone, Copy, Debug)]
struct Found {
    index: u32,
    bin: usize,
    offset: u64,
}
/// The largest alignment to which an allocation's end is rounded up (see `carve`).
pub(crate) const TAIL_ROUNDING_MAX: u64 = 256;
/// `next_free` of a used node (used nodes are in no free list, so the link holds a marker).
const USED: u32 = u32::MAX - 1;

/// Source of allocator identities, so that a handle given to the wrong allocator is caught.
static NEXT_ALLOCATOR_ID: AtomicU32 = AtomicU32::new(0);

/// How to build a [`TlsfAllocator`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsfDesc {
    /// Size of the managed range `[0, capacity)` in bytes. Required; must be non-zero.
    pub capacity: u64,
    /// `bufferImageGranularity`: the page size (a power of two) that linear and optimal resources
    /// must not share. Default 1, which disables the rule.
    pub granularity: u64,
}

impl TlsfDesc {
    /// A descriptor for `capacity` bytes with granularity 1 (no granularity rule).
    pub const fn new(capacity: u64) -> Self {
        Self { capacity, granularity: 1 }
    }

    /// Sets the granularity page size (`bufferImageGranularity`); must be a power of two.
    pub const fn with_granularity(mut self, granularity: u64) -> Self {
        self.granularity = granularity;
        self
    }
}

/// A live allocation of a [`TlsfAllocator`].
///
/// It is neither `Clone` nor `Copy`, and [`TlsfAllocator::free`] takes it by value, so freeing it
/// twice does not compile. Dropping it without freeing leaks its range (the allocator still counts
/// it; see [`TlsfAllocator::stats`]).
///
/// ```
/// use residency_core::allocator::{ResourceKind, TlsfAllocator, TlsfDesc};
///
/// let mut heap = TlsfAllocator::new(TlsfDesc::new(1 << 20).with_granularity(1024))?;
/// let buffer = heap.allocate(1000, 256, ResourceKind::Linear)?;
/// let image = heap.allocate(4096, 1024, ResourceKind::Optimal)?;
/// assert_eq!(buffer.offset() % 256, 0);
/// assert!(image.offset() >= 1024, "never on the buffer's granularity page");
/// heap.free(buffer)?;
/// heap.free(image)?;
/// assert_eq!(heap.stats().largest_free_bytes, 1 << 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Freeing twice is a compile error:
///
/// ```compile_fail,E0382
/// use residency_core::allocator::{ResourceKind, TlsfAllocator, TlsfDesc};
///
/// let mut heap = TlsfAllocator::new(TlsfDesc::new(1024)).unwrap();
/// let a = heap.allocate(16, 1, ResourceKind::Linear).unwrap();
/// heap.free(a).unwrap();
/// heap.free(a).unwrap();
/// ```
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "an allocation is released only by passing it to `TlsfAllocator::free`"]
pub struct Allocation {
    offset: u64,
    size: u64,
    node: u32,
    owner: u32,
}

impl Allocation {
    /// First byte of the allocation; a multiple of the requested alignment.
    #[inline]
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Size in bytes, exactly as requested.
    #[inline]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `offset..offset + size`.
    #[inline]
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.size
    }
}

/// One block of the heap: a node of the address-ordered block list, and, when free, of the free
/// list of its bin. 32 bytes, two per cache line: a used node keeps [`USED`] in `next_free` and its
/// kind and alignment in `prev_free`, links it does not need while used.
#[derive(Clone, Copy, Debug)]
#[repr(align(32))]
struct Node {
    offset: u64,
    size: u64,
    prev_phys: u32,
    next_phys: u32,
    prev_free: u32,
    next_free: u32,
}

impl Node {
    #[inline]
    fn free(offset: u64, size: u64, prev_phys: u32, next_phys: u32) -> Self {
        Self { offset, size, prev_phys, next_phys, prev_free: NONE, next_free: NONE }
    }

    #[inline]
    fn used(
        offset: u64,
        size: u64,
        prev_phys: u32,
        next_phys: u32,
        kind: ResourceKind,
        align_log2: u32,
    ) -> Self {
        let mut node = Self { offset, size, prev_phys, next_phys, prev_free: NONE, next_free: NONE };
        node.mark_used(kind, align_log2);
        node
    }

    #[inline]
    fn end(&self) -> u64 {
        self.offset + self.size
    }

    #[inline]
    fn is_used(&self) -> bool {
        self.next_free == USED
    }

    #[inline]
    fn mark_used(&mut self, kind: ResourceKind, align_log2: u32) {
        let kind = match kind {
            ResourceKind::Linear => 0,
            ResourceKind::Optimal => 1,
            ResourceKind::Unknown => 2,
        };
        self.next_free = USED;
        self.prev_free = kind | align_log2 << 8;
    }

    /// The kind of a used node.
    #[inline]
    fn kind(&self) -> ResourceKind {
        match self.prev_free & 0xff {
            0 => ResourceKind::Linear,
            1 => ResourceKind::Optimal,
            _ => ResourceKind::Unknown,
        }
    }

    /// The alignment of a used node.
    #[inline]
    fn alignment(&self) -> u64 {
        1 << (self.prev_free >> 8)
    }
}

/// An O(1) offset allocator over `[0, capacity)`: two-level segregated fit (TLSF) with bitmaps.
///
/// # Algorithm
///
/// Every block, used or free, is a 32-byte node in one `Vec`, linked to its physical neighbours
/// in address order; the blocks tile `[0, capacity)` with no gap. Free blocks are also on the
/// free list of their size class: 16 second-level bins per power of two (one bin per byte below
/// 16 B), so a bin spans at most 1/16 of its lower bound; one bitmap says which first levels have
/// a non-empty bin and one per first level which of its bins are non-empty.
///
/// - **Allocate** looks at the head of the first non-empty bin whose blocks are all at least
///   `size` (two `trailing_zeros` on the bitmaps); if the block's start needs more padding than it
///   has slack, it tries the first bin of blocks of at least `size + alignment - 1` (any of them
///   fits), then, with a granularity, one that also leaves a page at either end. The allocation
///   goes at the lowest aligned offset of the block (a page up when the used block below is of a
///   conflicting [`ResourceKind`]; ending before the page of a conflicting one above); its end is
///   rounded up to its alignment (at most 256 B), so blocks freed later stay aligned; the front
///   padding and the tail go back to the free lists as blocks of their own (the tail keeps the
///   free block's node, which usually stays in its bin). Only when all three miss does it scan,
///   bin by bin, every free block that could hold the request, skipping a bin whose recorded
///   largest size is below it, so it fails ([`AllocError::OutOfSpace`]) only when no free range
///   can hold the request.
/// - **Free** coalesces at once with both physical neighbours when they are free: a free
///   neighbour's node grows over the freed range (with two, the larger one is kept and the other
///   leaves its list), so no two free blocks are ever adjacent (the contract in the
///   [module docs](super)).
///
/// ```
/// use residency_core::allocator::{ResourceKind, TlsfAllocator, TlsfDesc};
///
/// let mut heap = TlsfAllocator::new(TlsfDesc::new(4096))?;
/// let a = heap.allocate(100, 1, ResourceKind::Linear)?;
/// let b = heap.allocate(100, 256, ResourceKind::Linear)?;
/// let c = heap.allocate(100, 1, ResourceKind::Linear)?;
/// assert_eq!(b.offset() % 256, 0, "exact alignment; the padding below b is a free block");
/// heap.free(a)?;
/// heap.free(c)?;
/// heap.free(b)?; // joins the free ranges on both sides
/// assert_eq!(heap.stats().free_range_count, 1);
/// assert_eq!(heap.largest_free(), 4096);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Efficiency
///
/// - [`allocate`](Self::allocate) and [`free`](Self::free): O(1) — at most three bin lookups
///   (each two bitmap scans), a split into at most three blocks, a few list links; no allocation
///   of memory once the node `Vec` has grown to the peak block count
///   ([`reserve`](Self::reserve)). The slow path before [`AllocError::OutOfSpace`] is O(free
///   blocks in the bins that might fit) once, then O(1) per bin for repeated failures of no
///   larger size (each bin's bound). Measured (`docs/benchmarks.md`, "W1"/"W2"/"W5" rows): about
///   15–60 ns per operation (this workplace and the H200) on VMA's virtual-allocator benchmark and the tiny-buffer churn, and
///   9–15 ns per failing request over 100 000 fragments.
/// - Memory: one 32-byte node per block (used or free), so at most `32 × (2 × allocations + 1)`
///   bytes; nodes of merged blocks are recycled through a spare stack, never returned. Space
///   overhead per allocation: its alignment padding (returned to the free lists as a block of
///   its own, not lost) and its end rounded up to its alignment (at most 255 B); W2's heap
///   high-water is 1.04–1.08 × the live requested bytes on the H200 (the "heap" columns).
/// - Locking: none; it takes `&mut self`. Its owners lock it (a `BufferPool` arena, the
///   device's general heaps), once per allocation or free.
/// - [`allocate_at`](Self::allocate_at) is O(blocks) (a walk of the block list): for the
///   defragmenter's planned moves only.
#[derive(Debug)]
pub struct TlsfAllocator {
    capacity: u64,
    granularity: u64,
    id: u32,
    nodes: Vec<Node>,
    /// First of the nodes that hold no block, chained through `next_free` (an intrusive stack,
    /// so that recycling a node is two stores, with no `Vec` capacity check).
    spare: u32,
    /// First block in address order.
    first: u32,
    lists: FreeLists,
    used_bytes: u64,
    requested_bytes: u64,
    allocation_count: u64,
    free_range_count: u64,
    /// Free blocks visited by the slow path (step 4's scan and the exact largest free range of an
    /// `OutOfSpace` error) since creation; see [`TlsfAllocator::slow_path_visits`].
    slow_path_visits: u64,
    /// Allocations and frees made so far: the stamp that says whether `largest_free` still holds.
    changes: u64,
    /// The largest free range as of `largest_free_at` changes (`u64::MAX`: never taken).
    largest_free: u64,
    largest_free_at: u64,
}

#[inline]
fn align_up(value: u64, alignment: u64) -> Option<u64> {
    value.checked_add(alignment - 1).map(|v| v & !(alignment - 1))
}

#[inline]
fn align_down(value: u64, alignment: u64) -> u64 {
    value & !(alignment - 1)
}

impl TlsfAllocator {
    /// An allocator over `[0, desc.capacity)`, all of it free.
    pub fn new(desc: TlsfDesc) -> Result<Self, DescError> {
        if desc.capacity == 0 {
            return Err(DescError::ZeroCapacity);
        }
        if !desc.granularity.is_power_of_two() {
            return Err(DescError::GranularityNotPowerOfTwo { granularity: desc.granularity });
        }
        let mut allocator = Self {
            capacity: desc.capacity,
            granularity: desc.granularity,
            id: NEXT_ALLOCATOR_ID.fetch_add(1, Ordering::Relaxed),
            nodes: Vec::new(),
            spare: NONE,
            first: NONE,
            lists: FreeLists::new(),
            used_bytes: 0,
            requested_bytes: 0,
            allocation_count: 0,
            free_range_count: 0,
            slow_path_visits: 0,
            changes: 0,
            largest_free: 0,
            largest_free_at: u64::MAX,
        };
        let whole = allocator.new_node(Node::free(0, desc.capacity, NONE, NONE));
        allocator.first = whole;
        allocator.lists.link(&mut allocator.nodes, whole, bin_floor(desc.capacity));
        allocator.free_range_count = 1;
        Ok(allocator)
    }

    /// Reserves bookkeeping for `additional` more blocks, so that the next allocations do not
    /// grow it (each allocation needs up to two blocks besides its own). The nodes are created
    /// and stacked as spares now (O(`additional`)), so allocation never pushes to the node `Vec`
    /// and never touches fresh memory afterwards.
    pub fn reserve(&mut self, additional: usize) {
        let start = self.nodes.len();
        let end = start.saturating_add(additional).min(USED as usize);
        self.nodes.reserve(end - start);
        // Node `i` links to `i - 1`, the first one to the spares there were, so the highest index
        // (the last one written, still in cache) is taken first.
        for index in start..end {
            let next = if index == start { self.spare } else { (index - 1) as u32 };
            self.nodes.push(Node {
                offset: 0,
                size: 0,
                prev_phys: NONE,
                next_phys: NONE,
                prev_free: NONE,
                next_free: next,
            });
        }
        if end > start {
            self.spare = (end - 1) as u32;
        }
    }

    /// Size of the managed range.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The granularity page size given at construction.
    #[inline]
    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// Bytes held by live allocations: their footprints, tail rounding included.
    #[inline]
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// Bytes requested by live allocations (`<= used_bytes`).
    #[inline]
    pub fn requested_bytes(&self) -> u64 {
        self.requested_bytes
    }

    /// Number of live allocations.
    #[inline]
    pub fn allocation_count(&self) -> u64 {
        self.allocation_count
    }

    /// How many free blocks the slow path has visited since the allocator was created: step 4's
    /// scan of the free lists and the exact largest free range an `OutOfSpace` error reports. The
    /// constant-time steps visit none. A failing request visits only the bins whose recorded
    /// largest size (an upper bound) reaches its size, and the top bin when the heap changed since
    /// the largest free range was last taken; repeated on an unchanged heap at alignment 1, it
    /// visits none. Tests read this to check the bound.
    #[inline]
    pub fn slow_path_visits(&self) -> u64 {
        self.slow_path_visits
    }

    /// Allocates `size` bytes at a multiple of `alignment` (a power of two) for a resource of
    /// `kind`. Errors: [`AllocError::ZeroSize`], [`AllocError::AlignmentNotPowerOfTwo`], and
    /// [`AllocError::OutOfSpace`] when no free range can hold the request.
    #[inline]
    pub fn allocate(
        &mut self,
        size: u64,
        alignment: u64,
        kind: ResourceKind,
    ) -> Result<Allocation, AllocError> {
        if size == 0 || !alignment.is_power_of_two() {
            return Err(Self::request_error(size, alignment));
        }
        // 1. Optimistic: the first block of the first non-empty bin of blocks >= size. It fits
        //    unless its start needs more padding than its slack.
        if let Some(found) = self.try_bin_for(size, size, alignment, kind) {
            return Ok(self.carve(found, size, alignment, kind));
        }
        self.allocate_searching(size, alignment, kind)
    }

    /// The error for a request that is misuse rather than out of space.
    #[cold]
    #[inline(never)]
    fn request_error(size: u64, alignment: u64) -> AllocError {
        if size == 0 {
            AllocError::ZeroSize
        } else {
            AllocError::AlignmentNotPowerOfTwo { alignment }
        }
    }

    /// Steps 2-4 of `allocate`, for the requests that the first bin looked at cannot place.
    #[inline(never)]
    fn allocate_searching(
        &mut self,
        size: u64,
        alignment: u64,
        kind: ResourceKind,
    ) -> Result<Allocation, AllocError> {
        // 2. Guaranteed: any block >= size + alignment - 1 fits whatever its start.
        let g = self.granularity;
        if alignment > 1 {
            if let Some(need) = size.checked_add(alignment - 1) {
                if let Some(found) = self.try_bin_for(need, size, alignment, kind) {
                    return Ok(self.carve(found, size, alignment, kind));
                }
            }
        }
        // 3. With granularity, a conflicting neighbour can cost a page at either end.
        if g > 1 {
            let need = size.checked_add(alignment.max(g) - 1).and_then(|n| n.checked_add(g - 1));
            if let Some(need) = need {
                if let Some(found) = self.try_bin_for(need, size, alignment, kind) {
                    return Ok(self.carve(found, size, alignment, kind));
                }
            }
        }
        // 4. Near-full: scan every free block that is large enough before giving up.
        if let Some(found) = self.scan_for(size, alignment, kind) {
            return Ok(self.carve(found, size, alignment, kind));
        }
        Err(AllocError::OutOfSpace {
            size,
            alignment,
            largest_free: self.largest_free_tightened(),
            free: self.capacity - self.used_bytes,
        })
    }

    /// Allocates `size` bytes at exactly `offset` (a multiple of `alignment`, a power of two) for
    /// a resource of `kind`: the destination of a planned move
    /// ([`plan_defragmentation`](super::plan_defragmentation)). The range must lie in one free block
    /// and keep off the granularity pages of conflicting neighbours; its footprint's end is rounded
    /// as [`allocate`](Self::allocate) rounds it. O(blocks): it walks the block list (moves are
    /// rare). Errors: [`AllocError::ZeroSize`], [`AllocError::AlignmentNotPowerOfTwo`],
    /// [`AllocError::RangeUnavailable`]; nothing changes on an error.
    pub fn allocate_at(
        &mut self,
        offset: u64,
        size: u64,
        alignment: u64,
        kind: ResourceKind,
    ) -> Result<Allocation, AllocError> {
        if size == 0 || !alignment.is_power_of_two() {
            return Err(Self::request_error(size, alignment));
        }
        let unavailable = AllocError::RangeUnavailable { offset, size, alignment };
        let Some(end) = offset.checked_add(size) else { return Err(unavailable) };
        if offset % alignment != 0 || end > self.capacity {
            return Err(unavailable);
        }
        let mut cursor = self.first;
        while cursor != NONE && self.nodes[cursor as usize].end() <= offset {
            cursor = self.nodes[cursor as usize].next_phys;
        }
        if cursor == NONE {
            return Err(unavailable);
        }
        let node = self.nodes[cursor as usize];
        if node.is_used() || node.offset > offset {
            return Err(unavailable);
        }
        let mut limit = node.end();
        let g = self.granularity;
        if g > 1 {
            if node.prev_phys != NONE {
                let below = &self.nodes[node.prev_phys as usize];
                if below.kind().conflicts_with(kind)
                    && align_down(below.end() - 1, g) == align_down(offset, g)
                {
                    return Err(unavailable);
                }
            }
            if node.next_phys != NONE && self.nodes[node.next_phys as usize].kind().conflicts_with(kind) {
                limit = align_down(limit, g);
            }
        }
        if end > limit {
            return Err(unavailable);
        }
        let found = Found { index: cursor, bin: bin_floor(node.size), offset };
        Ok(self.carve(found, size, alignment, kind))
    }

    /// Frees `allocation`, coalescing its range with free neighbours. The only error is
    /// [`AllocError::ForeignAllocation`], for a handle made by another allocator.
    #[inline]
    pub fn free(&mut self, allocation: Allocation) -> Result<(), AllocError> {
        if allocation.owner != self.id {
            return Err(AllocError::ForeignAllocation { offset: allocation.offset, size: allocation.size });
        }
        let index = allocation.node;
        debug_assert!(self.nodes[index as usize].is_used());
        debug_assert_eq!(self.nodes[index as usize].offset, allocation.offset);
        let node = self.nodes[index as usize];
        self.used_bytes -= node.size;
        self.requested_bytes -= allocation.size;
        self.allocation_count -= 1;
        self.changes += 1;

        // Coalescing keeps a free neighbour's node: it only grows, so it usually stays in its bin
        // and its free list is not touched. With free neighbours on both sides the larger one is
        // kept (the likelier to stay in its bin) and the other leaves its list.
        let (prev, next) = (node.prev_phys, node.next_phys);
        let nodes = &mut self.nodes[..];
        let prev_is_free = prev != NONE && !nodes[prev as usize].is_used();
        let next_is_free = next != NONE && !nodes[next as usize].is_used();
        match (prev_is_free, next_is_free) {
            (false, false) => {
                self.lists.link(nodes, index, bin_floor(node.size));
                self.free_range_count += 1;
            }
            (true, false) => {
                let p = nodes[prev as usize];
                self.lists.resize(nodes, prev, bin_floor(p.size), p.offset, node.end());
                link_phys(&mut self.first, nodes, prev, next);
                release_node(&mut self.spare, nodes, index);
            }
            (false, true) => {
                let n = nodes[next as usize];
                self.lists.resize(nodes, next, bin_floor(n.size), node.offset, n.end());
                link_phys(&mut self.first, nodes, prev, next);
                release_node(&mut self.spare, nodes, index);
            }
            (true, true) => {
                let (p, n) = (nodes[prev as usize], nodes[next as usize]);
                let (keep, drop) = if p.size >= n.size { (prev, next) } else { (next, prev) };
                let (keep_size, drop_size) = if keep == prev { (p.size, n.size) } else { (n.size, p.size) };
                self.lists.unlink(nodes, drop, bin_floor(drop_size));
                self.free_range_count -= 1;
                self.lists.resize(nodes, keep, bin_floor(keep_size), p.offset, n.end());
                link_phys(&mut self.first, nodes, p.prev_phys, keep);
                link_phys(&mut self.first, nodes, keep, n.next_phys);
                release_node(&mut self.spare, nodes, index);
                release_node(&mut self.spare, nodes, drop);
            }
        }
        Ok(())
    }

    /// A snapshot of occupancy. `largest_free_bytes` is O(1) when nothing was allocated or freed
    /// since a failing request took it, and walks one free list (the top non-empty bin's) otherwise,
    /// so this is cheap but not meant for every allocation.
    pub fn stats(&self) -> AllocatorStats {
        let free_bytes = self.capacity - self.used_bytes;
        let largest_free_bytes = self.largest_free();
        AllocatorStats {
            capacity: self.capacity,
            used_bytes: self.used_bytes,
            requested_bytes: self.requested_bytes,
            free_bytes,
            largest_free_bytes,
            allocation_count: self.allocation_count,
            free_range_count: self.free_range_count,
            fragmentation: AllocatorStats::fragmentation_of(free_bytes, largest_free_bytes),
        }
    }

    /// Size of the largest free range: the one a failing request took, if nothing changed since
    /// (O(1)), else the largest size on the top non-empty bin's list (a walk that stops at a block
    /// as large as the bin's recorded bound).
    pub fn largest_free(&self) -> u64 {
        if self.largest_free_at == self.changes {
            return self.largest_free;
        }
        self.lists.top_nonempty().map_or(0, |bin| self.walk_max(bin).0)
    }

    /// [`largest_free`](Self::largest_free), kept until the next allocation or free, so that
    /// failing requests on an unchanged heap answer in O(1). The walk also tightens the top bin's
    /// recorded largest size.
    #[cold]
    fn largest_free_tightened(&mut self) -> u64 {
        if self.largest_free_at != self.changes {
            self.largest_free = match self.lists.top_nonempty() {
                Some(bin) => {
                    let (largest, visited) = self.walk_max(bin);
                    self.slow_path_visits += visited;
                    self.lists.set_max(bin, largest);
                    largest
                }
                None => 0,
            };
            self.largest_free_at = self.changes;
        }
        self.largest_free
    }

    /// The largest size on the list of `bin`, and how many blocks were visited to find it. The
    /// walk stops at the first block as large as the bin's recorded bound, which proves it the
    /// largest: when the bound is tight (a list of equal fragments, say) that is the first block.
    fn walk_max(&self, bin: usize) -> (u64, u64) {
        let bound = self.lists.bound(bin);
        let (mut largest, mut visited) = (0, 0);
        let mut cursor = self.lists.head(bin);
        while cursor != NONE {
            let node = &self.nodes[cursor as usize];
            largest = largest.max(node.size);
            visited += 1;
            if largest >= bound {
                break;
            }
            cursor = node.next_free;
        }
        (largest, visited)
    }

    /// All blocks in address order: free ranges and allocations, tiling `[0, capacity)`.
    pub fn blocks(&self) -> impl Iterator<Item = Block> + '_ {
        let mut cursor = self.first;
        std::iter::from_fn(move || {
            if cursor == NONE {
                return None;
            }
            let node = &self.nodes[cursor as usize];
            cursor = node.next_phys;
            let state = if node.is_used() {
                BlockState::Used { kind: node.kind(), alignment: node.alignment() }
            } else {
                BlockState::Free
            };
            Some(Block { offset: node.offset, size: node.size, state })
        })
    }

    /// Verifies the whole contract (see the [module docs](super)) and returns the first broken
    /// invariant. O(blocks + bins); meant for tests and debugging.
    pub fn check_invariants(&self) -> Result<(), InvariantError> {
        // The free lists and bitmaps first: which bin lists each node.
        let mut listed_in = vec![NONE; self.nodes.len()];
        let mut in_lists = 0usize;
        for bin in 0..BIN_COUNT {
            let (fl, sl) = (bin / SL_COUNT, bin % SL_COUNT);
            let bit = self.lists.sl_bitmaps[fl] & (1 << sl) != 0;
            let head = self.lists.heads[bin];
            if bit != (head != NONE) {
                return Err(InvariantError::BitmapMismatch { bin, bit });
            }
            let mut before = NONE;
            let mut cursor = head;
            let mut largest = 0;
            while cursor != NONE {
                let node = &self.nodes[cursor as usize];
                let seen = &mut listed_in[cursor as usize];
                // A head's `prev_free` is not kept (see `FreeLists`).
                let prev_wrong = cursor != head && node.prev_free != before;
                if node.is_used() || prev_wrong || bin_floor(node.size) != bin || *seen != NONE {
                    return Err(InvariantError::CorruptFreeList { bin });
                }
                *seen = bin as u32;
                in_lists += 1;
                largest = largest.max(node.size);
                before = cursor;
                cursor = node.next_free;
            }
            // The bound the slow path uses is at least the list's largest size, and 0 when empty.
            let bound = self.lists.bound(bin);
            if bound < largest || (head == NONE && bound != 0) {
                return Err(InvariantError::BinMaximumWrong { bin, recorded: bound, actual: largest });
            }
        }
        for fl in 0..FL_COUNT {
            let bit = self.lists.fl_bitmap & (1 << fl) != 0;
            if bit != (self.lists.sl_bitmaps[fl] != 0) {
                return Err(InvariantError::BitmapMismatch { bin: fl * SL_COUNT, bit });
            }
        }

        // Then the block list.
        let mut expected = 0u64;
        let mut prev = NONE;
        let mut cursor = self.first;
        let mut used = 0u64;
        let mut free = 0u64;
        let mut allocations = 0u64;
        let mut free_blocks = 0usize;
        let mut last_used: Option<&Node> = None;
        let mut prev_free: Option<&Node> = None;
        while cursor != NONE {
            let node = &self.nodes[cursor as usize];
            if node.offset != expected {
                return Err(InvariantError::NotContiguous { offset: node.offset, expected });
            }
            if node.size == 0 {
                return Err(InvariantError::EmptyBlock { offset: node.offset });
            }
            if node.prev_phys != prev {
                return Err(InvariantError::BrokenLinks { offset: node.offset });
            }
            match node.offset.checked_add(node.size) {
                Some(end) if end <= self.capacity => expected = end,
                end => {
                    return Err(InvariantError::OutOfBounds {
                        end: end.unwrap_or(u64::MAX),
                        capacity: self.capacity,
                    })
                }
            }
            if node.is_used() {
                let alignment = node.alignment();
                if node.offset % alignment != 0 {
                    return Err(InvariantError::Misaligned { offset: node.offset, alignment });
                }
                if let Some(before) = last_used {
                    let g = self.granularity;
                    if before.kind().conflicts_with(node.kind())
                        && align_down(before.end() - 1, g) == align_down(node.offset, g)
                    {
                        return Err(InvariantError::GranularityConflict {
                            first_offset: before.offset,
                            first_kind: before.kind(),
                            second_offset: node.offset,
                            second_kind: node.kind(),
                            granularity: g,
                        });
                    }
                }
                used += node.size;
                allocations += 1;
                last_used = Some(node);
                prev_free = None;
            } else {
                if let Some(before) = prev_free {
                    return Err(InvariantError::NotCoalesced {
                        first_offset: before.offset,
                        second_offset: node.offset,
                    });
                }
                let bin = bin_floor(node.size);
                if listed_in[cursor as usize] != bin as u32 {
                    return Err(InvariantError::NotInFreeList { offset: node.offset, size: node.size, bin });
                }
                free += node.size;
                free_blocks += 1;
                prev_free = Some(node);
            }
            prev = cursor;
            cursor = node.next_phys;
            if allocations as usize + free_blocks > self.nodes.len() {
                return Err(InvariantError::BrokenLinks { offset: node.offset });
            }
        }
        if expected != self.capacity {
            return Err(InvariantError::OutOfBounds { end: expected, capacity: self.capacity });
        }
        if in_lists != free_blocks {
            return Err(InvariantError::FreeCountMismatch { in_lists, in_blocks: free_blocks });
        }
        let counters = [
            ("free_range_count", self.free_range_count, free_blocks as u64),
            ("allocation_count", self.allocation_count, allocations),
            ("used_bytes", self.used_bytes, used),
        ];
        for (counter, counted, actual) in counters {
            if counted != actual {
                return Err(InvariantError::CounterMismatch { counter, counted, actual });
            }
        }
        if self.requested_bytes > used {
            return Err(InvariantError::CounterMismatch {
                counter: "requested_bytes (exceeds used bytes)",
                counted: self.requested_bytes,
                actual: used,
            });
        }
        if used + free != self.capacity {
            return Err(InvariantError::BytesDoNotAddUp { used, free, capacity: self.capacity });
        }
        Ok(())
    }

    // ---- placement ----

    /// Looks at the first block of the first non-empty bin whose blocks are all `>= need` bytes,
    /// and returns it with the offset where the request would go, if the request fits there.
    #[inline(always)]
    fn try_bin_for(&self, need: u64, size: u64, alignment: u64, kind: ResourceKind) -> Option<Found> {
        let bin = self.lists.first_nonempty_from(bin_ceil(need)?)?;
        let node = self.lists.head(bin);
        self.fit(node, size, alignment, kind).map(|offset| Found { index: node, bin, offset })
    }

    /// Where `size` bytes aligned to `alignment` go in free block `index`, or `None` if they do not
    /// fit. The allocation goes at the lowest aligned offset; with a conflicting used neighbour
    /// below, it moves up to the next granularity page; with one above, it must end before that
    /// neighbour's page.
    #[inline(always)]
    fn fit(&self, index: u32, size: u64, alignment: u64, kind: ResourceKind) -> Option<u64> {
        let node = &self.nodes[index as usize];
        let mut offset = align_up(node.offset, alignment)?;
        let mut limit = node.end();
        let g = self.granularity;
        if g > 1 {
            // The physical neighbours of a free block are used (or absent): blocks are coalesced.
            if node.prev_phys != NONE {
                let below = &self.nodes[node.prev_phys as usize];
                if below.kind().conflicts_with(kind)
                    && align_down(below.end() - 1, g) == align_down(offset, g)
                {
                    offset = align_up(offset, g)?;
                }
            }
            if node.next_phys != NONE {
                let above = &self.nodes[node.next_phys as usize];
                if above.kind().conflicts_with(kind) {
                    limit = align_down(limit, g);
                }
            }
        }
        let end = offset.checked_add(size)?;
        (end <= limit).then_some(offset)
    }

    /// The slow path before out of space: every free block in every bin that can hold `size`.
    ///
    /// A bin whose recorded largest size (an upper bound) is below `size` is skipped without
    /// visiting its list. A bin walked to its end without a fit records the largest size it saw, so
    /// the next failing request skips it in O(1) when that is below its size.
    #[cold]
    fn scan_for(&mut self, size: u64, alignment: u64, kind: ResourceKind) -> Option<Found> {
        let mut bin = bin_floor(size);
        while let Some(found) = self.lists.first_nonempty_from(bin) {
            if self.lists.bound(found) >= size {
                let mut cursor = self.lists.head(found);
                let mut largest = 0;
                let mut visited = 0;
                while cursor != NONE {
                    visited += 1;
                    if let Some(offset) = self.fit(cursor, size, alignment, kind) {
                        self.slow_path_visits += visited;
                        return Some(Found { index: cursor, bin: found, offset });
                    }
                    let node = &self.nodes[cursor as usize];
                    largest = largest.max(node.size);
                    cursor = node.next_free;
                }
                self.slow_path_visits += visited;
                self.lists.set_max(found, largest);
            }
            bin = found + 1;
            if bin >= BIN_COUNT {
                break;
            }
        }
        None
    }

    /// Turns free block `index` into the allocation at `offset`, returning the front padding and
    /// the tail to the free lists as blocks of their own.
    ///
    /// The tail keeps the free block's node: it only shrank, so when it stays in its bin (the
    /// usual case when carving from a large block) its free list is not touched at all.
    #[inline(always)]
    fn carve(
        &mut self,
        Found { index, bin, offset }: Found,
        size: u64,
        alignment: u64,
        kind: ResourceKind,
    ) -> Allocation {
        let node = self.nodes[index as usize];
        // The footprint's end rounds up to the alignment (at most TAIL_ROUNDING_MAX), so that a block
        // freed later starts and ends aligned and the next request of that alignment needs no padding.
        let mut end = offset + size;
        if alignment > 1 {
            end = self.rounded_end(&node, end, alignment, kind);
        }
        let align_log2 = alignment.trailing_zeros();
        let used = if end < node.end() {
            let used =
                self.new_node(Node::used(offset, end - offset, node.prev_phys, index, kind, align_log2));
            let nodes = &mut self.nodes[..];
            link_phys(&mut self.first, nodes, node.prev_phys, used);
            nodes[index as usize].prev_phys = used;
            self.lists.resize(nodes, index, bin, end, node.end());
            used
        } else {
            let nodes = &mut self.nodes[..];
            self.lists.unlink(nodes, index, bin);
            self.free_range_count -= 1;
            nodes[index as usize] =
                Node::used(offset, end - offset, node.prev_phys, node.next_phys, kind, align_log2);
            index
        };
        if offset > node.offset {
            self.free_padding(node.offset, node.prev_phys, used);
        }
        self.used_bytes += end - offset;
        self.requested_bytes += size;
        self.allocation_count += 1;
        self.changes += 1;
        Allocation { offset, size, node: used, owner: self.id }
    }

    /// Returns the front padding `[start, start of used)` below allocation `used` to the free
    /// lists, as a block of its own after `below`.
    #[inline(never)]
    fn free_padding(&mut self, start: u64, below: u32, used: u32) {
        let end = self.nodes[used as usize].offset;
        let pad = self.new_node(Node::free(start, end - start, below, used));
        let nodes = &mut self.nodes[..];
        link_phys(&mut self.first, nodes, below, pad);
        nodes[used as usize].prev_phys = pad;
        self.lists.link(nodes, pad, bin_floor(end - start));
        self.free_range_count += 1;
    }

    /// `end` rounded up to `min(alignment, TAIL_ROUNDING_MAX)`, unless that would leave free block
    /// `node` or cross onto the granularity page of a conflicting neighbour above it.
    #[inline]
    fn rounded_end(&self, node: &Node, end: u64, alignment: u64, kind: ResourceKind) -> u64 {
        let rounded =
            align_up(end, alignment.min(TAIL_ROUNDING_MAX)).map_or(node.end(), |e| e.min(node.end()));
        let g = self.granularity;
        if g == 1 {
            // `rounded >= end`; without granularity it is always taken (no data-dependent branch).
            return rounded;
        }
        if rounded > end {
            let crosses_into_conflict = g > 1
                && node.next_phys != NONE
                && self.nodes[node.next_phys as usize].kind().conflicts_with(kind)
                && align_down(rounded - 1, g) == align_down(node.end(), g);
            if !crosses_into_conflict {
                return rounded;
            }
        }
        end
    }

    // ---- nodes ----

    /// A node for `node`: a spare one if any, else a new one.
    #[inline(always)]
    fn new_node(&mut self, node: Node) -> u32 {
        let index = self.spare;
        if index != NONE {
            let slot = &mut self.nodes[index as usize];
            self.spare = slot.next_free;
            *slot = node;
            index
        } else {
            self.push_node(node)
        }
    }

    #[inline(never)]
    fn push_node(&mut self, node: Node) -> u32 {
        let index = u32::try_from(self.nodes.len())
            .ok()
            .filter(|&i| i < USED)
            .expect("more than 2^32 - 2 blocks in one heap");
        self.nodes.push(node);
        index
    }
}

// The helpers below take the node slice apart from the allocator, so that the compiler keeps its
// pointer and length in registers across the stores into nodes.

/// Makes `below` and `above` physical neighbours (`NONE` for the start or end of the heap).
#[inline(always)]
fn link_phys(first: &mut u32, nodes: &mut [Node], below: u32, above: u32) {
    if below == NONE {
        *first = above;
    } else {
        nodes[below as usize].next_phys = above;
    }
    if above != NONE {
        nodes[above as usize].prev_phys = below;
    }
}

/// Pushes a node that holds no block any more onto the spare stack.
#[inline(always)]
fn release_node(spare: &mut u32, nodes: &mut [Node], index: u32) {
    nodes[index as usize].next_free = *spare;
    *spare = index;
}

/// The segregated free lists: which first levels have a non-empty bin, which bins of each first
/// level are non-empty, and the head of each bin's list (linked through `prev_free`/`next_free`).
/// Every listed block but a head has its predecessor in `prev_free`; a head's `prev_free` is
/// stale (whatever it was when the block before it left), because whether a block is a head is
/// read from `heads`, never from its own link. Linking a new head sets the old head's
/// `prev_free`, so a block that stops being a head has it right again.
///
/// Each bin also keeps `max`, an upper bound on the sizes on its list, for the slow path: linking
/// or growing a block raises it, emptying the list resets it to 0, and a walk of the whole list by
/// the slow path sets it to the largest size found. A block that shrinks or leaves does not lower
/// it, so the hot path pays a compare and a store where a block joins or grows, and nothing where
/// one is carved. A failing request thereby skips, in O(1), a bin of fragments all smaller than it
/// (see `docs/allocator.md`).
#[derive(Debug)]
struct FreeLists {
    fl_bitmap: u64,
    /// Indexed by first level masked with `FL_SLOTS - 1`; levels `FL_COUNT..` stay empty.
    sl_bitmaps: [u32; FL_SLOTS],
    /// Indexed by bin masked with `BIN_SLOTS - 1`; bins `BIN_COUNT..` stay empty.
    heads: Box<[u32; BIN_SLOTS]>,
    /// An upper bound on the sizes on each bin's list (0 when empty).
    max: Box<[u64; BIN_SLOTS]>,
}

impl FreeLists {
    fn new() -> Self {
        Self {
            fl_bitmap: 0,
            sl_bitmaps: [0; FL_SLOTS],
            heads: Box::new([NONE; BIN_SLOTS]),
            max: Box::new([0; BIN_SLOTS]),
        }
    }

    /// First block of the list of `bin` (`NONE` when empty).
    #[inline(always)]
    fn head(&self, bin: usize) -> u32 {
        self.heads[bin & (BIN_SLOTS - 1)]
    }

    /// An upper bound on the sizes on the list of `bin`.
    #[inline]
    fn bound(&self, bin: usize) -> u64 {
        self.max[bin & (BIN_SLOTS - 1)]
    }

    /// Records `largest`, the largest size on the list of `bin` (found by walking it), as its bound.
    #[inline]
    fn set_max(&mut self, bin: usize, largest: u64) {
        self.max[bin & (BIN_SLOTS - 1)] = largest;
    }

    /// A block of `size` bytes joined or grew in the list of `bin`: raises its bound.
    #[inline(always)]
    fn raise_bound(&mut self, bin: usize, size: u64) {
        let max = &mut self.max[bin & (BIN_SLOTS - 1)];
        *max = (*max).max(size);
    }

    /// The highest non-empty bin, whose blocks are larger than those of every other bin.
    #[inline]
    fn top_nonempty(&self) -> Option<usize> {
        if self.fl_bitmap == 0 {
            return None;
        }
        let fl = 63 - self.fl_bitmap.leading_zeros() as usize;
        let sl = 31 - self.sl_bitmaps[fl & (FL_SLOTS - 1)].leading_zeros() as usize;
        Some(fl * SL_COUNT + sl)
    }

    /// The first non-empty bin at or after `bin` (`< BIN_COUNT`).
    #[inline(always)]
    fn first_nonempty_from(&self, bin: usize) -> Option<usize> {
        // `bin < BIN_COUNT`, so `fl < FL_COUNT <= 63`: the masks only spare the bounds checks.
        let fl = bin >> SL_LOG2;
        let sl = bin % SL_COUNT;
        let sl_map = self.sl_bitmaps[fl & (FL_SLOTS - 1)] & (u32::MAX << sl);
        if sl_map != 0 {
            return Some((fl << SL_LOG2) + sl_map.trailing_zeros() as usize);
        }
        let fl_map = self.fl_bitmap & (u64::MAX << ((fl + 1) & 63));
        if fl_map == 0 {
            return None;
        }
        let fl = fl_map.trailing_zeros() as usize;
        Some((fl << SL_LOG2) + self.sl_bitmaps[fl & (FL_SLOTS - 1)].trailing_zeros() as usize)
    }

    /// Pushes free block `index` onto the list of `bin`.
    #[inline(always)]
    fn link(&mut self, nodes: &mut [Node], index: u32, bin: usize) {
        let head = std::mem::replace(&mut self.heads[bin & (BIN_SLOTS - 1)], index);
        let size = {
            let node = &mut nodes[index as usize];
            node.next_free = head;
            node.size
        };
        // The old head learns its predecessor. With no old head the store lands on the new head's
        // own `prev_free`, which a head does not keep: a select instead of a branch.
        let target = if head != NONE { head } else { index };
        nodes[target as usize].prev_free = index;
        self.raise_bound(bin, size);
        let (fl, sl) = (bin >> SL_LOG2, bin % SL_COUNT);
        self.sl_bitmaps[fl & (FL_SLOTS - 1)] |= 1 << sl;
        self.fl_bitmap |= 1 << (fl & 63);
    }

    /// Takes free block `index` out of the list of `bin`.
    ///
    /// A head's `prev_free` is not kept (see [`FreeLists`]): taking the head out writes only the
    /// list's head, not the next block's node, which is how `allocate` usually takes a block.
    #[inline(always)]
    fn unlink(&mut self, nodes: &mut [Node], index: u32, bin: usize) {
        let Node { prev_free, next_free, .. } = nodes[index as usize];
        let head = &mut self.heads[bin & (BIN_SLOTS - 1)];
        if *head != index {
            nodes[prev_free as usize].next_free = next_free;
            // With no next block the store lands on the leaving block's own node, whose links its
            // caller rewrites: a select instead of a branch.
            let target = if next_free != NONE { next_free } else { index };
            nodes[target as usize].prev_free = prev_free;
            return;
        }
        *head = next_free;
        // Emptying the list clears its bound and bits; without branches, because whether a list
        // empties depends on the data.
        let emptied = next_free == NONE;
        let (fl, sl) = (bin >> SL_LOG2, bin % SL_COUNT);
        // All ones, or zero when emptied (a mask, since a select compiles to a branch here).
        self.max[bin & (BIN_SLOTS - 1)] &= u64::from(emptied).wrapping_sub(1);
        let sl_map = &mut self.sl_bitmaps[fl & (FL_SLOTS - 1)];
        *sl_map &= !(u32::from(emptied) << sl);
        self.fl_bitmap &= !(u64::from(*sl_map == 0) << (fl & 63));
    }

    /// Sets free block `index`, listed in `old_bin`, to `[offset, end)`, moving it to the list of
    /// its new bin only if its size class changed.
    #[inline(always)]
    fn resize(&mut self, nodes: &mut [Node], index: u32, old_bin: usize, offset: u64, end: u64) {
        let node = &mut nodes[index as usize];
        debug_assert_eq!(old_bin, bin_floor(node.size));
        let grew = end - offset > node.size;
        node.offset = offset;
        node.size = end - offset;
        let new_bin = bin_floor(node.size);
        if new_bin != old_bin {
            self.unlink(nodes, index, old_bin);
            self.link(nodes, index, new_bin);
        } else if grew {
            self.raise_bound(old_bin, end - offset);
        }
    }
}
