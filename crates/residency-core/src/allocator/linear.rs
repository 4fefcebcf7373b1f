//! VMA's linear algorithm over one block: a stack, a double stack, or a ring buffer.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

use super::error::DescError;

/// Source of allocator identities, so that a handle given to the wrong allocator is caught.
static NEXT_LINEAR_ID: AtomicU32 = AtomicU32::new(0);

/// How a [`LinearAllocator`] hands out and takes back space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LinearMode {
    /// Allocations go at the top. Any allocation may be freed, but its space returns only when
    /// everything above it has been freed too (interior frees are lazy, as in VMA).
    #[default]
    Stack,
    /// Two stacks: the lower one grows up from offset 0, the upper one
    /// ([`LinearAllocator::allocate_upper`]) grows down from the capacity. They never overlap.
    DoubleStack,
    /// Allocations in order; space returns from the oldest live allocation on, and allocation wraps
    /// to offset 0 when the end is reached and the front has been freed. A free out of order is
    /// accepted and, like an interior free of a stack, returns its space when everything older
    /// has been freed.
    Ring,
}

/// How to build a [`LinearAllocator`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearDesc {
    /// Size of the managed range `[0, capacity)` in bytes. Required; must be non-zero.
    pub capacity: u64,
    /// The algorithm. Default [`LinearMode::Stack`].
    pub mode: LinearMode,
}

impl LinearDesc {
    /// A stack of `capacity` bytes.
    pub const fn new(capacity: u64) -> Self {
        Self { capacity, mode: LinearMode::Stack }
    }

    /// Sets the mode.
    pub const fn with_mode(mut self, mode: LinearMode) -> Self {
        self.mode = mode;
        self
    }
}

/// An allocation or free of a [`LinearAllocator`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinearError {
    /// A zero-byte allocation was requested.
    #[error("allocation size must be greater than zero")]
    ZeroSize,
    /// The alignment was not a power of two (zero included).
    #[error("alignment {alignment} is not a power of two")]
    AlignmentNotPowerOfTwo {
        /// The alignment given.
        alignment: u64,
    },
    /// The request does not fit where this mode places it.
    #[error(
        "out of space: {size} B aligned to {alignment} B does not fit (largest free run {largest_free} B, \
         {free} B free in all)"
    )]
    OutOfSpace {
        /// Requested size in bytes.
        size: u64,
        /// Requested alignment in bytes.
        alignment: u64,
        /// The largest free run at the time of the request (see [`LinearAllocator::largest_free`]).
        largest_free: u64,
        /// Bytes held by nothing, live or freed-but-pending (see [`LinearAllocator::free_bytes`]).
        free: u64,
    },
    /// In double-stack mode, the request would overlap the other stack.
    #[error(
        "{size} B aligned to {alignment} B would overlap the other stack (lower stack ends at {lower_top}, \
         upper stack starts at {upper_bottom})"
    )]
    StacksWouldOverlap {
        /// Requested size in bytes.
        size: u64,
        /// Requested alignment in bytes.
        alignment: u64,
        /// End of the lower stack's top allocation.
        lower_top: u64,
        /// Start of the upper stack's lowest allocation.
        upper_bottom: u64,
    },
    /// [`LinearAllocator::allocate_upper`] outside [`LinearMode::DoubleStack`].
    #[error("upper allocations need LinearMode::DoubleStack, this allocator is {mode:?}")]
    UpperNeedsDoubleStack {
        /// The allocator's mode.
        mode: LinearMode,
    },
    /// The handle was not made by this allocator (or does not match its record).
    #[error("allocation at offset {offset} ({size} B) is not a live allocation of this allocator")]
    UnknownAllocation {
        /// Offset of the handle.
        offset: u64,
        /// Size of the handle.
        size: u64,
    },
}

/// The first broken invariant found by [`LinearAllocator::check_invariants`]. Any value of this
/// type is a bug in the allocator.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinearInvariantError {
    /// A record's footprint does not start where the previous one ended.
    #[error("{stack} stack: record {index} starts at {start}, the previous one ends at {expected}")]
    NotContiguous {
        /// `"lower"` or `"upper"`.
        stack: &'static str,
        /// Position of the record in its stack (0 = oldest).
        index: usize,
        /// Where its footprint starts (lower stack: a virtual position, see
        /// [`LinearAllocator`]'s ring).
        start: u128,
        /// Where it should start.
        expected: u128,
    },
    /// A record's allocation is misaligned, outside its footprint or outside the capacity.
    #[error("{stack} stack: allocation at {offset} ({size} B, alignment {alignment}) is misplaced")]
    Misplaced {
        /// `"lower"` or `"upper"`.
        stack: &'static str,
        /// Its offset.
        offset: u64,
        /// Its size.
        size: u64,
        /// Its alignment.
        alignment: u64,
    },
    /// The records span more than the block, or the two stacks overlap.
    #[error("lower span {lower} B + upper span {upper} B exceed capacity {capacity} B (or overlap)")]
    Overfull {
        /// Bytes from the lower region's oldest record to its newest.
        lower: u64,
        /// Bytes held by the upper stack.
        upper: u64,
        /// The capacity.
        capacity: u64,
    },
    /// A freed record sits where it should have been reclaimed (the top of a stack, or the front of
    /// a ring).
    #[error("{stack} stack: a freed record was left at its reclaimable end")]
    NotReclaimed {
        /// `"lower"` or `"upper"`.
        stack: &'static str,
    },
    /// Upper records outside double-stack mode, or lower ones not starting at 0 in a stack.
    #[error("records are laid out in a way mode {mode:?} does not allow")]
    WrongLayout {
        /// The mode.
        mode: LinearMode,
    },
    /// A counter disagrees with the records.
    #[error("counter `{counter}` is {counted}, the records say {actual}")]
    CounterMismatch {
        /// Which counter.
        counter: &'static str,
        /// The counter's value.
        counted: u64,
        /// The value recomputed from the records.
        actual: u64,
    },
}

/// A live allocation of a [`LinearAllocator`]. Not `Clone`; [`LinearAllocator::free`] takes it by
/// value, so freeing twice does not compile. Dropping it without freeing leaks its range.
///
/// ```
/// use residency_core::allocator::{LinearAllocator, LinearDesc, LinearMode};
///
/// let mut ring = LinearAllocator::new(LinearDesc::new(1024).with_mode(LinearMode::Ring))?;
/// let a = ring.allocate(600, 256)?;
/// let b = ring.allocate(300, 16)?;
/// ring.free(a)?; // the front: its 600 B return at once
/// let c = ring.allocate(200, 16)?; // does not fit after `b`: wraps to offset 0
/// assert_eq!((b.offset(), c.offset()), (608, 0));
/// ring.free(b)?;
/// ring.free(c)?;
/// assert_eq!(ring.used_bytes(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "an allocation is released only by passing it to `LinearAllocator::free`"]
pub struct LinearAllocation {
    offset: u64,
    size: u64,
    /// Sequence number of its record in its stack.
    seq: u64,
    upper: bool,
    owner: u32,
}

impl LinearAllocation {
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

    /// Whether it came from the upper stack of a double stack.
    #[inline]
    pub fn is_upper(&self) -> bool {
        self.upper
    }
}

/// One allocation's record. Its *footprint* `[start, end)` is the allocation plus the padding that
/// placing it cost: the alignment gap below it (lower stack), above it (upper stack), and in a ring
/// also the skipped tail of the block when it wrapped to offset 0. Lower positions are virtual
/// (`position % capacity` is the offset, growing past the capacity when a ring wraps; in `u128`,
/// so that a ring of up to 2^64 bytes laps 2^64 times before they could run out); upper ones are
/// offsets.
#[derive(Clone, Copy, Debug)]
struct Record {
    start: u128,
    end: u128,
    offset: u64,
    size: u64,
    align_log2: u8,
    live: bool,
}

impl Record {
    fn footprint(&self) -> u64 {
        // At most the capacity: records never span more than the block.
        u64::try_from(self.end - self.start).unwrap_or(u64::MAX)
    }
}

/// VMA's linear algorithm over `[0, capacity)`: [`LinearMode::Stack`], [`LinearMode::DoubleStack`]
/// or [`LinearMode::Ring`].
///
/// # Algorithm
///
/// One record per allocation, in allocation order: a `VecDeque` for the lower stack (or the
/// ring) and a `Vec` for the upper stack; each record holds the allocation and its *footprint*
/// (the allocation plus the padding placing it cost). **Allocate** bumps one end: the lower
/// stack's head up (a ring's head wraps to offset 0 when the allocation does not fit before the
/// end and the front has been freed, the skipped end joining its footprint), the upper stack's
/// bottom down, each aligned exactly. **Free** finds the record by the sequence number in the
/// handle and marks it freed; space returns only at a reclaimable end — the top of a stack, the
/// front of a ring — where freed records are popped, each once, so an interior free returns its
/// footprint (counted in [`pending_bytes`](Self::pending_bytes) meanwhile) when everything above
/// it (stack) or older than it (ring) has been freed too. The free space is the run(s) between
/// the ends, so there is nothing to coalesce.
///
/// ```
/// use residency_core::allocator::{LinearAllocator, LinearDesc};
///
/// let mut stack = LinearAllocator::new(LinearDesc::new(1024))?;
/// let a = stack.allocate(100, 1)?;
/// let b = stack.allocate(100, 1)?;
/// stack.free(a)?; // interior: returns when `b` goes
/// assert_eq!((stack.pending_bytes(), stack.free_bytes()), (100, 824));
/// stack.free(b)?; // the top: pops `b`, then `a`
/// assert_eq!((stack.pending_bytes(), stack.free_bytes()), (0, 1024));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Efficiency
///
/// - [`allocate`](Self::allocate) / [`allocate_upper`](Self::allocate_upper): O(1), one bump
///   and one push (amortized). [`free`](Self::free): amortized O(1): one indexed store, then
///   pops of the freed records at the end, each record popped once.
/// - Memory: one 64-byte record per allocation, kept until its space returns (a long-lived
///   interior allocation keeps the freed records above it). Space overhead per allocation: its
///   alignment padding, and in a ring the skipped end when it wraps.
/// - Locking: none; it takes `&mut self`. The backend's `LinearPool` locks it once per
///   allocation and per free. No figure of its own in `docs/benchmarks.md`.
///
/// The contract, checked by [`check_invariants`](Self::check_invariants): lower records tile
/// `[tail, head)` contiguously in allocation order (from 0 in the stack modes), upper records tile
/// `[upper_bottom, capacity)` downwards; every allocation is aligned, inside its footprint and
/// inside `[0, capacity)`; `head - tail <= capacity` (ring) or `head <= upper_bottom` (stacks), so
/// no two records overlap; no freed record sits at a reclaimable end; the counters match.
#[derive(Debug)]
pub struct LinearAllocator {
    capacity: u64,
    mode: LinearMode,
    id: u32,
    lower: VecDeque<Record>,
    /// Sequence number of `lower[0]`.
    lower_base: u64,
    upper: Vec<Record>,
    used_bytes: u64,
    requested_bytes: u64,
    pending_bytes: u64,
    allocation_count: u64,
}

impl LinearAllocator {
    /// An empty allocator. Error: [`DescError::ZeroCapacity`].
    pub fn new(desc: LinearDesc) -> Result<Self, DescError> {
        if desc.capacity == 0 {
            return Err(DescError::ZeroCapacity);
        }
        Ok(Self {
            capacity: desc.capacity,
            mode: desc.mode,
            id: NEXT_LINEAR_ID.fetch_add(1, Ordering::Relaxed),
            lower: VecDeque::new(),
            lower_base: 0,
            upper: Vec::new(),
            used_bytes: 0,
            requested_bytes: 0,
            pending_bytes: 0,
            allocation_count: 0,
        })
    }

    /// Size of the managed range.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The algorithm.
    pub fn mode(&self) -> LinearMode {
        self.mode
    }

    /// Footprints of the live allocations: their sizes plus the padding placing them cost (the
    /// alignment gap, and in a ring the tail of the block skipped when an allocation wrapped).
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// Sizes of the live allocations, as requested.
    pub fn requested_bytes(&self) -> u64 {
        self.requested_bytes
    }

    /// Footprints of freed allocations whose space has not returned yet (interior frees of a
    /// stack, out-of-order frees of a ring).
    pub fn pending_bytes(&self) -> u64 {
        self.pending_bytes
    }

    /// Bytes held by nothing: `capacity - used_bytes - pending_bytes`. In a ring or a double stack
    /// they may lie in two runs; [`largest_free`](Self::largest_free) is the larger.
    pub fn free_bytes(&self) -> u64 {
        self.capacity - self.used_bytes - self.pending_bytes
    }

    /// Number of live allocations.
    pub fn allocation_count(&self) -> u64 {
        self.allocation_count
    }

    /// The longest run of free bytes that an allocation of this mode can be placed in (before
    /// alignment): above the lower stack's top (below the upper stack in a double stack), or in a
    /// ring the larger of the run after the newest allocation and the run from offset 0 up to the
    /// oldest. O(1).
    pub fn largest_free(&self) -> u64 {
        match self.mode {
            LinearMode::Stack | LinearMode::DoubleStack => self.upper_bottom() - self.lower_top(),
            LinearMode::Ring => {
                let free = self.capacity - self.ring_span();
                let physical = self.physical(self.head());
                // The free run starts at `physical`; past the end of the block it continues from
                // offset 0. (`physical + free` may exceed `u64::MAX` in a block over 2^63 bytes.)
                let to_end = self.capacity - physical;
                if free <= to_end {
                    free
                } else {
                    to_end.max(free - to_end)
                }
            }
        }
    }

    /// Allocates `size` bytes at a multiple of `alignment` (a power of two): at the top of the
    /// (lower) stack, or at the head of the ring. Errors: [`LinearError::ZeroSize`],
    /// [`LinearError::AlignmentNotPowerOfTwo`], [`LinearError::OutOfSpace`], and in a double stack
    /// [`LinearError::StacksWouldOverlap`] when the upper stack is in the way.
    pub fn allocate(&mut self, size: u64, alignment: u64) -> Result<LinearAllocation, LinearError> {
        Self::check_request(size, alignment)?;
        let head = self.head();
        let placed = match self.mode {
            LinearMode::Stack | LinearMode::DoubleStack => align_up(self.lower_top(), alignment)
                .and_then(|offset| Some((offset, offset.checked_add(size)?)))
                .filter(|&(_, end)| end <= self.upper_bottom())
                .map(|(offset, end)| (offset, u128::from(end))),
            LinearMode::Ring => {
                let physical = self.physical(head);
                let in_place = align_up(physical, alignment)
                    .and_then(|offset| Some((offset, offset.checked_add(size)?)))
                    .filter(|&(_, end)| end <= self.capacity);
                // Not before the end of the block: skip to offset 0 (aligned for every alignment).
                let (offset, consumed) = match in_place {
                    Some((offset, end)) => (offset, end - physical),
                    None => (0, (self.capacity - physical).saturating_add(size)),
                };
                head.checked_add(u128::from(consumed))
                    .filter(|&end| end - self.tail() <= u128::from(self.capacity))
                    .map(|end| (offset, end))
            }
        };
        let Some((offset, end)) = placed else {
            return Err(self.no_room(size, alignment, !self.upper.is_empty()));
        };
        let seq = self.lower_base + self.lower.len() as u64;
        self.lower.push_back(Record {
            start: head,
            end,
            offset,
            size,
            align_log2: log2(alignment),
            live: true,
        });
        let footprint = u64::try_from(end - head).expect("a footprint is at most the capacity");
        Ok(self.record_allocation(footprint, offset, size, seq, false))
    }

    /// Allocates `size` bytes at a multiple of `alignment` at the bottom of the upper stack of a
    /// double stack (growing down from the capacity). Errors: those of
    /// [`allocate`](Self::allocate), with [`LinearError::StacksWouldOverlap`] when the lower stack is
    /// in the way, and [`LinearError::UpperNeedsDoubleStack`] in the other modes.
    pub fn allocate_upper(&mut self, size: u64, alignment: u64) -> Result<LinearAllocation, LinearError> {
        if self.mode != LinearMode::DoubleStack {
            return Err(LinearError::UpperNeedsDoubleStack { mode: self.mode });
        }
        Self::check_request(size, alignment)?;
        let bottom = self.upper_bottom();
        let placed =
            bottom.checked_sub(size).map(|o| o & !(alignment - 1)).filter(|&o| o >= self.lower_top());
        let Some(offset) = placed else {
            return Err(self.no_room(size, alignment, !self.lower.is_empty()));
        };
        let seq = self.upper.len() as u64;
        self.upper.push(Record {
            start: u128::from(offset),
            end: u128::from(bottom),
            offset,
            size,
            align_log2: log2(alignment),
            live: true,
        });
        Ok(self.record_allocation(bottom - offset, offset, size, seq, true))
    }

    /// Frees `allocation`. Its space returns at once when it is at a reclaimable end (the top of its
    /// stack, the front or the head of a ring), else when everything in the way is freed too.
    /// Error: [`LinearError::UnknownAllocation`] for a handle made by another allocator.
    pub fn free(&mut self, allocation: LinearAllocation) -> Result<(), LinearError> {
        let unknown = || LinearError::UnknownAllocation { offset: allocation.offset, size: allocation.size };
        if allocation.owner != self.id {
            return Err(unknown());
        }
        let record = if allocation.upper {
            usize::try_from(allocation.seq).ok().and_then(|i| self.upper.get_mut(i))
        } else {
            allocation
                .seq
                .checked_sub(self.lower_base)
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| self.lower.get_mut(i))
        };
        let record = record
            .filter(|r| r.live && r.offset == allocation.offset && r.size == allocation.size)
            .ok_or_else(unknown)?;
        record.live = false;
        let footprint = record.footprint();
        self.used_bytes -= footprint;
        self.pending_bytes += footprint;
        self.requested_bytes -= allocation.size;
        self.allocation_count -= 1;
        self.reclaim();
        Ok(())
    }

    /// Verifies the contract (see the type's docs) and returns the first broken part.
    pub fn check_invariants(&self) -> Result<(), LinearInvariantError> {
        let mode = self.mode;
        if mode != LinearMode::DoubleStack && !self.upper.is_empty()
            || mode != LinearMode::Ring && self.lower.front().is_some_and(|r| r.start != 0)
        {
            return Err(LinearInvariantError::WrongLayout { mode });
        }
        let (mut used, mut pending, mut requested, mut count) = (0, 0, 0, 0);
        let mut tally = |r: &Record| {
            if r.live {
                used += r.footprint();
                requested += r.size;
                count += 1;
            } else {
                pending += r.footprint();
            }
        };
        let mut expected = self.tail();
        for (index, r) in self.lower.iter().enumerate() {
            if r.start != expected || r.end < r.start {
                return Err(LinearInvariantError::NotContiguous {
                    stack: "lower",
                    index,
                    start: r.start,
                    expected,
                });
            }
            expected = r.end;
            // The allocation ends its footprint: `end - size` is its virtual position.
            let fits = r.footprint() >= r.size && self.physical(r.end - u128::from(r.size)) == r.offset;
            self.check_placed("lower", r, fits)?;
            tally(r);
        }
        let mut expected = u128::from(self.capacity);
        for (index, r) in self.upper.iter().enumerate() {
            if r.end != expected || r.end < r.start {
                return Err(LinearInvariantError::NotContiguous {
                    stack: "upper",
                    index,
                    start: r.end,
                    expected,
                });
            }
            expected = r.start;
            self.check_placed("upper", r, u128::from(r.offset) == r.start && r.footprint() >= r.size)?;
            tally(r);
        }
        let lower = u64::try_from(self.head() - self.tail()).unwrap_or(u64::MAX);
        let upper = self.capacity - self.upper_bottom();
        if lower > self.capacity - upper {
            return Err(LinearInvariantError::Overfull { lower, upper, capacity: self.capacity });
        }
        let reclaimable_dead = |r: Option<&Record>| r.is_some_and(|r| !r.live);
        if reclaimable_dead(self.lower.back())
            || mode == LinearMode::Ring && reclaimable_dead(self.lower.front())
        {
            return Err(LinearInvariantError::NotReclaimed { stack: "lower" });
        }
        if reclaimable_dead(self.upper.last()) {
            return Err(LinearInvariantError::NotReclaimed { stack: "upper" });
        }
        for (counter, counted, actual) in [
            ("used_bytes", self.used_bytes, used),
            ("pending_bytes", self.pending_bytes, pending),
            ("requested_bytes", self.requested_bytes, requested),
            ("allocation_count", self.allocation_count, count),
        ] {
            if counted != actual {
                return Err(LinearInvariantError::CounterMismatch { counter, counted, actual });
            }
        }
        Ok(())
    }

    fn check_placed(&self, stack: &'static str, r: &Record, fits: bool) -> Result<(), LinearInvariantError> {
        let alignment = 1u64 << r.align_log2;
        let in_bounds = r.offset.checked_add(r.size).is_some_and(|end| end <= self.capacity);
        if fits && in_bounds && r.offset % alignment == 0 {
            Ok(())
        } else {
            Err(LinearInvariantError::Misplaced { stack, offset: r.offset, size: r.size, alignment })
        }
    }

    fn check_request(size: u64, alignment: u64) -> Result<(), LinearError> {
        if size == 0 {
            Err(LinearError::ZeroSize)
        } else if !alignment.is_power_of_two() {
            Err(LinearError::AlignmentNotPowerOfTwo { alignment })
        } else {
            Ok(())
        }
    }

    /// The error for a request that found no room; `other_stack_in_way` picks the double stack's
    /// overlap error.
    fn no_room(&self, size: u64, alignment: u64, other_stack_in_way: bool) -> LinearError {
        if self.mode == LinearMode::DoubleStack && other_stack_in_way {
            LinearError::StacksWouldOverlap {
                size,
                alignment,
                lower_top: self.lower_top(),
                upper_bottom: self.upper_bottom(),
            }
        } else {
            LinearError::OutOfSpace {
                size,
                alignment,
                largest_free: self.largest_free(),
                free: self.free_bytes(),
            }
        }
    }

    fn record_allocation(
        &mut self,
        footprint: u64,
        offset: u64,
        size: u64,
        seq: u64,
        upper: bool,
    ) -> LinearAllocation {
        self.used_bytes += footprint;
        self.requested_bytes += size;
        self.allocation_count += 1;
        LinearAllocation { offset, size, seq, upper, owner: self.id }
    }

    /// Pops freed records from the reclaimable ends; each record is popped once (amortized O(1)).
    fn reclaim(&mut self) {
        let mut freed = 0;
        while let Some(r) = self.upper.last().filter(|r| !r.live) {
            freed += r.footprint();
            self.upper.pop();
        }
        while let Some(r) = self.lower.back().filter(|r| !r.live) {
            freed += r.footprint();
            self.lower.pop_back();
        }
        if self.mode == LinearMode::Ring {
            while let Some(r) = self.lower.front().filter(|r| !r.live) {
                freed += r.footprint();
                self.lower.pop_front();
                self.lower_base += 1;
            }
        }
        self.pending_bytes -= freed;
    }

    /// Virtual position after the newest lower record; 0 when there is none (an empty ring restarts
    /// at offset 0, so the whole block is one run).
    fn head(&self) -> u128 {
        self.lower.back().map_or(0, |r| r.end)
    }

    /// Virtual position of the oldest lower record's footprint.
    fn tail(&self) -> u128 {
        self.lower.front().map_or(0, |r| r.start)
    }

    /// The top of the lower stack in the stack modes, where positions are offsets (at most the
    /// capacity).
    fn lower_top(&self) -> u64 {
        u64::try_from(self.head()).unwrap_or(u64::MAX)
    }

    /// Bytes from the ring's oldest record to its newest (at most the capacity).
    fn ring_span(&self) -> u64 {
        u64::try_from(self.head() - self.tail()).unwrap_or(u64::MAX)
    }

    /// The offset of a virtual position.
    fn physical(&self, position: u128) -> u64 {
        (position % u128::from(self.capacity)) as u64
    }

    /// Offset of the upper stack's lowest footprint; the capacity when it is empty.
    fn upper_bottom(&self) -> u64 {
        self.upper.last().map_or(self.capacity, |r| r.start as u64)
    }
}

fn align_up(value: u64, alignment: u64) -> Option<u64> {
    value.checked_add(alignment - 1).map(|v| v & !(alignment - 1))
}

fn log2(alignment: u64) -> u8 {
    alignment.trailing_zeros() as u8
}
