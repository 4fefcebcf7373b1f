//! The per-frame ring allocator for upload data: bump allocation, whole frames retire in order.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::error::{DescError, RingError, RingInvariantError};

/// Identifies one frame of a [`RingAllocator`]. Frame ids start at 0 and increase by one with every
/// [`RingAllocator::finish_frame`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FrameId(pub u64);

/// A range handed out by a [`RingAllocator`]. It is freed with its whole frame, never on its own,
/// so it is a plain `Copy` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RingAllocation {
    /// First byte in the ring's range `[0, capacity)`; a multiple of the requested alignment.
    pub offset: u64,
    /// Size in bytes, as requested.
    pub size: u64,
    /// The frame the allocation belongs to; it is freed when that frame retires.
    pub frame: FrameId,
}

/// A ring of `capacity` bytes for data that lives for one frame (staging uploads, per-frame
/// constants).
///
/// Allocations go to the *open* frame; [`finish_frame`](Self::finish_frame) closes it (after the
/// frame's commands are submitted) and opens the next; [`retire`](Self::retire) frees every
/// finished frame up to the one the GPU has completed. An allocation never wraps: when it does not
/// fit before the end of the ring, the bytes up to the end are skipped (charged to the open frame)
/// and it starts at offset 0.
///
/// Positions are kept as monotonically increasing byte counts ("virtual" positions); the offset in
/// the ring is the position modulo the capacity. Invariants, checked by
/// [`check_invariants`](Self::check_invariants): `tail <= end(oldest pending frame) <= … <= head`,
/// `head - tail <= capacity`, pending frame ids are consecutive and end just before the open frame.
///
/// # Algorithm
///
/// Two positions, `tail` (oldest live byte) and `head` (next free byte), and a queue of the
/// finished frames with the head position each ended at. **Allocate** aligns `head`'s offset up
/// and bumps `head` past the allocation (or, when it does not fit before the end of the ring,
/// past the rest of the ring and the allocation at offset 0); the padding and any skipped end
/// are charged to the open frame. When nothing is live, the next allocation restarts at offset 0.
/// There is no per-allocation **free**: [`retire`](Self::retire) pops the finished frames up to
/// the one given and moves `tail` to the end of the last, releasing all their bytes at once, in
/// order — the free space is always the one run between `head` and `tail`, so there is nothing to
/// coalesce.
///
/// ```
/// use residency_core::allocator::RingAllocator;
///
/// let mut ring = RingAllocator::new(1024)?;
/// let a = ring.allocate(100, 64)?;
/// let b = ring.allocate(100, 64)?;
/// assert_eq!((a.offset, b.offset), (0, 128), "aligned: the padding is charged to the frame");
/// let frame = ring.finish_frame();
/// assert_eq!(ring.used_bytes(), 228);
/// assert_eq!(ring.retire(frame)?, 228, "the whole frame at once");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Efficiency
///
/// - [`allocate`](Self::allocate): O(1), a few additions and compares. [`finish_frame`](Self::finish_frame):
///   O(1) (amortized: one push on a `VecDeque`). [`retire`](Self::retire): O(frames retired).
/// - Memory: nothing per allocation (a [`RingAllocation`] is a plain `Copy` value the caller
///   keeps); 16 bytes per finished, unretired frame. Space overhead: each allocation's alignment
///   padding, and the skipped end of the ring when one wraps (at most `size - 1` bytes).
/// - Locking: none; it takes `&mut self`. The backend's `Uploader` keeps it under its state
///   lock, taken once per staged chunk (a large write stages in chunks) and once per flush. No
///   figure of its own in `docs/benchmarks.md` (the `upload` rows time the uploader end to end).
#[derive(Clone, Debug)]
pub struct RingAllocator {
    capacity: u64,
    /// Position of the next free byte.
    head: u64,
    /// Position of the oldest live byte.
    tail: u64,
    open: u64,
    /// Finished, not yet retired frames and the head position when each was finished.
    pending: VecDeque<(FrameId, u64)>,
    /// Requested bytes in the open frame (for statistics).
    open_requested: u64,
}

impl RingAllocator {
    /// A ring of `capacity` bytes, all free, with frame 0 open.
    pub fn new(capacity: u64) -> Result<Self, DescError> {
        if capacity == 0 {
            return Err(DescError::ZeroCapacity);
        }
        Ok(Self { capacity, head: 0, tail: 0, open: 0, pending: VecDeque::new(), open_requested: 0 })
    }

    /// Size of the ring.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The frame new allocations go to.
    pub fn open_frame(&self) -> FrameId {
        FrameId(self.open)
    }

    /// Bytes held by the open frame and by finished frames that have not retired, padding and
    /// skipped ends included.
    pub fn used_bytes(&self) -> u64 {
        self.head - self.tail
    }

    /// Bytes available to future allocations once padding is accounted for (an upper bound on the
    /// largest allocation that can succeed now).
    pub fn free_bytes(&self) -> u64 {
        self.capacity - self.used_bytes()
    }

    /// Bytes requested so far in the open frame.
    pub fn open_frame_requested_bytes(&self) -> u64 {
        self.open_requested
    }

    /// Number of finished frames waiting to retire.
    pub fn pending_frames(&self) -> usize {
        self.pending.len()
    }

    /// Allocates `size` bytes at a multiple of `alignment` in the open frame.
    ///
    /// Errors: [`RingError::ZeroSize`], [`RingError::AlignmentNotPowerOfTwo`],
    /// [`RingError::TooLarge`] when the request could never fit, [`RingError::Full`] when it can fit
    /// only after older frames retire.
    pub fn allocate(&mut self, size: u64, alignment: u64) -> Result<RingAllocation, RingError> {
        self.allocate_within(size, alignment, self.capacity)
    }

    /// [`allocate`](Self::allocate), with the allocation inside the ring's first `window` bytes
    /// (at most the capacity): when it does not fit before `window`, the bytes up to the end of
    /// the ring are skipped as at the end. A run of such allocations cycles through the window
    /// only, so it touches `window` bytes of the ring's memory however large the ring is.
    /// Errors: as `allocate`, with [`RingError::TooLarge`] when the request exceeds the window.
    pub fn allocate_within(
        &mut self,
        size: u64,
        alignment: u64,
        window: u64,
    ) -> Result<RingAllocation, RingError> {
        let window = window.min(self.capacity);
        if size == 0 {
            return Err(RingError::ZeroSize);
        }
        if !alignment.is_power_of_two() {
            return Err(RingError::AlignmentNotPowerOfTwo { alignment });
        }
        if size > window {
            return Err(RingError::TooLarge { size, alignment, capacity: window });
        }
        if self.head == self.tail && self.pending.is_empty() && self.head % self.capacity != 0 {
            // Nothing is live: restart at offset 0 so the whole ring is one contiguous run.
            if let Some(start) = self.head.checked_next_multiple_of(self.capacity) {
                self.head = start;
                self.tail = start;
            }
        }
        let physical = self.head % self.capacity;
        let aligned = physical.checked_add(alignment - 1).map(|v| v & !(alignment - 1));
        let (offset, consumed) = match aligned {
            Some(aligned) if aligned.checked_add(size).is_some_and(|end| end <= window) => {
                (aligned, aligned - physical + size)
            }
            // Does not fit before the end (or the window): skip the rest of the ring, to offset 0
            // (aligned for every alignment). The sum overflows only for rings near 2^64 bytes,
            // where it is more than is free anyway.
            _ => (0, (self.capacity - physical).saturating_add(size)),
        };
        if consumed > self.free_bytes() || self.head.checked_add(consumed).is_none() {
            return Err(RingError::Full {
                size,
                alignment,
                free: self.free_bytes(),
                capacity: self.capacity,
            });
        }
        self.head += consumed;
        self.open_requested += size;
        Ok(RingAllocation { offset, size, frame: FrameId(self.open) })
    }

    /// Closes the open frame (call it when the frame's commands are submitted) and opens the next.
    /// Returns the id of the frame just closed, to pass to [`retire`](Self::retire) once the GPU has
    /// finished it.
    pub fn finish_frame(&mut self) -> FrameId {
        let finished = FrameId(self.open);
        self.pending.push_back((finished, self.head));
        self.open += 1;
        self.open_requested = 0;
        finished
    }

    /// Frees every finished frame up to and including `frame` (the GPU finishes frames in order).
    /// Frames already retired are ignored, so polling a fence and retiring its frame twice is
    /// harmless. Returns the number of bytes released. Error: [`RingError::FrameNotFinished`] for
    /// the open frame or a later one.
    pub fn retire(&mut self, frame: FrameId) -> Result<u64, RingError> {
        if frame.0 >= self.open {
            return Err(RingError::FrameNotFinished { frame: frame.0, open: self.open });
        }
        let before = self.tail;
        while let Some(&(id, end)) = self.pending.front() {
            if id > frame {
                break;
            }
            self.tail = end;
            self.pending.pop_front();
        }
        Ok(self.tail - before)
    }

    /// Verifies the ring's invariants (see the type's docs) and returns the first broken one.
    pub fn check_invariants(&self) -> Result<(), RingInvariantError> {
        if self.head - self.tail > self.capacity || self.tail > self.head {
            return Err(RingInvariantError::Overfull {
                live: self.head.wrapping_sub(self.tail),
                capacity: self.capacity,
            });
        }
        let mut lower = self.tail;
        let first_id = self.open - self.pending.len() as u64;
        for (expected_id, &(id, end)) in (first_id..).zip(&self.pending) {
            if id.0 != expected_id {
                return Err(RingInvariantError::FrameIdsNotConsecutive { open: self.open });
            }
            if end < lower || end > self.head {
                return Err(RingInvariantError::FrameOutOfOrder {
                    frame: id.0,
                    end,
                    lower,
                    upper: self.head,
                });
            }
            lower = end;
        }
        Ok(())
    }
}
