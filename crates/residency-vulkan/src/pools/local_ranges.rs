//! A known-flags pool's ranges for one thread, with no lock and no atomic read-modify-write on
//! allocation or release (issue #31): [`LocalRanges`] and its [`LocalRange`]s.
//!
//! [`BufferPool::allocate_range`] is `Sync`: any thread allocates and any thread drops, so every
//! allocation and release takes its arena's lock (two locked read-modify-writes each) and the
//! range holds a reference to its arena. A `LocalRanges` is the counterpart of VMA's virtual block
//! (which is externally synchronized): pages of its own, behind a `RefCell`, used by the one
//! thread that holds it. It is `Send` (moved to another thread with no range alive) and not
//! `Sync`; its ranges borrow it, so they are neither, cannot outlive it, and go back to its pages
//! directly when dropped. A range dropped while GPU work may use it (a declared use, or residency
//! work submitted before the drop) is queued on the device like any resource; once that work has
//! passed, the retire queue (on any thread) puts it in the arena's return box, which the arena
//! empties on its next allocation (one relaxed load per allocation while the box is empty).
//! Dropping the arena retires its pages after every such use.

use crate::device::blocks::{BlockAllocation, BlockList, MemoryError, SubRequest};
use crate::device::life::{Garbage, GpuUse, Retire};
use crate::device::Device;
use crate::poison::PoisonFree;
use crate::pools::buffer_pool::{page_list, BufferPool, PoolShared, RangeSpan};
use crate::resources::buffer::AccessError;
use ash::vk;
use residency_core::allocator::ResourceKind;
use residency_core::sync::LastUses;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A known-flags pool's ranges for the thread that holds it: pages of its own (in the pool's
/// memory type, with the pool's flags, page size and priority, counted in the device's budget),
/// allocated and released without a lock. Made by [`BufferPool::local_ranges`].
///
/// Not `Sync`, so its ranges stay on its thread:
///
/// ```compile_fail
/// fn shared<T: Sync>(_: &T) {}
/// fn check(ranges: &residency_vulkan::LocalRanges) {
///     shared(ranges);
/// }
/// ```
///
/// ```compile_fail
/// fn sent<T: Send>(_: T) {}
/// fn check(range: residency_vulkan::LocalRange<'_>) {
///     sent(range);
/// }
/// ```
pub struct LocalRanges {
    pool: Arc<PoolShared>,
    pages: RefCell<BlockList>,
    /// Ranges whose GPU uses have passed, put here by the retire queue (any thread).
    returned: Arc<Returned>,
    /// Uses of the ranges queued on the device, and every use declared on a range
    /// ([`LocalRange::used_until`]; a range leaked with `mem::forget` is never queued, and its
    /// declared use must still hold its page): the pages retire after them.
    pending: RefCell<LastUses>,
}

/// Ranges the retire queue gave back, and whether there are any (read without the lock).
#[derive(Debug, Default)]
struct Returned {
    any: AtomicBool,
    ranges: Mutex<Vec<BlockAllocation>>,
}

/// A range queued on the device: into its arena's return box once its uses have passed.
#[derive(Debug)]
struct ReturnRange {
    returned: Arc<Returned>,
    allocation: BlockAllocation,
}

impl Retire for ReturnRange {
    fn retire(self: Box<Self>, _device: &Device) {
        self.returned.ranges.locked().push(self.allocation);
        self.returned.any.store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for LocalRanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRanges").field("pool", &self.pool.desc.name).finish_non_exhaustive()
    }
}

/// A [`LocalRanges`]' pages and what is allocated in them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalRangesStats {
    /// Pages (memory objects) it holds.
    pub pages: usize,
    /// Bytes of its pages.
    pub page_bytes: u64,
    /// Bytes allocated to ranges (live, or queued until the GPU is done with them).
    pub used_bytes: u64,
}

impl BufferPool {
    /// Pages of this known-flags pool's memory type and flags for the calling thread's ranges,
    /// without a lock ([`LocalRanges`]); no memory until the first range. Refused
    /// ([`MemoryError::Unsatisfiable`]): an unknown-flags pool.
    pub fn local_ranges(&self) -> Result<LocalRanges, MemoryError> {
        let s = &self.shared;
        s.known_range_alignment()?;
        let name = format!("{} local page", s.desc.name);
        Ok(LocalRanges {
            pages: RefCell::new(page_list(&s.device, &s.desc, name, s.type_index)),
            pool: Arc::clone(s),
            returned: Arc::default(),
            pending: RefCell::default(),
        })
    }
}

impl LocalRanges {
    /// A range of `size` bytes of one of its page buffers, at a multiple of `alignment` (0: none)
    /// on top of the pool flags' offset floors (at least 16 B). Refused: a zero size or an
    /// alignment that is not a power of two ([`MemoryError::InvalidRequest`]), and a new page over
    /// budget or out of memory. A range larger than a page gets a page of its own.
    pub fn allocate(&self, size: u64, alignment: u64) -> Result<LocalRange<'_>, MemoryError> {
        let alignment = self.pool.range_request(size, alignment)?;
        if self.returned.any.load(Ordering::Relaxed) {
            self.take_returned();
        }
        let request = SubRequest {
            name: &self.pool.desc.name,
            size,
            alignment,
            kind: ResourceKind::Linear,
            allow_over_budget: self.pool.desc.allow_over_budget,
        };
        let mut pages = self.pages.borrow_mut();
        let allocation = match pages.allocate_existing(request) {
            Some(allocation) => allocation,
            None => pages.allocate(&self.pool.device, request)?,
        };
        Ok(LocalRange { ranges: self, size, allocation: Some(allocation), uses: LastUses::default() })
    }

    /// Its pages and the bytes allocated in them.
    pub fn stats(&self) -> LocalRangesStats {
        self.take_returned();
        let (page_bytes, used_bytes, pages) = self.pages.borrow().totals();
        LocalRangesStats { pages, page_bytes, used_bytes }
    }

    /// Frees every empty page (one is kept otherwise, for the next range); returns the bytes freed.
    pub fn release_empty_pages(&self) -> u64 {
        self.take_returned();
        self.pages.borrow_mut().release_empty(&self.pool.device)
    }

    /// Frees the ranges the retire queue gave back into the pages.
    fn take_returned(&self) {
        // Cleared before the box is emptied: a range put in after the emptying sets it again.
        self.returned.any.store(false, Ordering::Relaxed);
        let ranges = std::mem::take(&mut *self.returned.ranges.locked());
        if !ranges.is_empty() {
            let mut pages = self.pages.borrow_mut();
            for allocation in ranges {
                pages.free(&self.pool.device, allocation);
            }
        }
    }

    /// The page of `allocation`, as its range's accessors need it.
    fn span(&self, allocation: &BlockAllocation, size: u64) -> (RangeSpan<'_>, vk::Buffer) {
        let pages = self.pages.borrow();
        let block = pages.block(allocation.block);
        let span = RangeSpan {
            device: &self.pool.device,
            type_index: self.pool.type_index,
            name: &self.pool.desc.name,
            memory: block.memory,
            start: allocation.allocation.offset(),
            size,
            mapped: block.mapped,
        };
        (span, block.page_buffer.expect("known-flags pages have a page buffer"))
    }
}

impl Drop for LocalRanges {
    fn drop(&mut self) {
        // No range is alive (each borrows this); the queued ones retire before these pages, which
        // wait for the same uses, every use declared on a range (a forgotten one's too) and the
        // residency work submitted so far.
        let uses = std::mem::take(self.pending.get_mut());
        let device = &self.pool.device;
        for block in self.pages.get_mut().blocks.drain(..).flatten() {
            device.retire(Garbage::Memory(Box::new(block)), uses.clone());
        }
    }
}

/// A range of a [`LocalRanges`]' page buffer: an offset, a size and the page's `VkBuffer`, like a
/// [`crate::PoolRange`] but tied to its arena's thread and lifetime. Released when dropped: at
/// once when no GPU work may use it, else after the residency submissions made before the drop
/// and the uses declared with [`LocalRange::used_until`].
pub struct LocalRange<'a> {
    ranges: &'a LocalRanges,
    size: u64,
    /// `None` only while it is released (in `drop`).
    allocation: Option<BlockAllocation>,
    uses: LastUses,
}

impl std::fmt::Debug for LocalRange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRange")
            .field("pool", &self.ranges.pool.desc.name)
            .field("offset", &self.offset())
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl LocalRange<'_> {
    fn allocation(&self) -> &BlockAllocation {
        self.allocation.as_ref().expect("a live range has its allocation")
    }

    /// The page's `VkBuffer` the range is part of.
    pub fn buffer(&self) -> vk::Buffer {
        self.ranges.span(self.allocation(), self.size).1
    }

    /// Its offset in [`LocalRange::buffer`] (the page buffer is bound at offset 0 of its memory,
    /// so also its offset in [`LocalRange::memory`]).
    pub fn offset(&self) -> u64 {
        self.allocation().allocation.offset()
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The page's memory and the range's offset in it.
    pub fn memory(&self) -> (vk::DeviceMemory, u64) {
        (self.ranges.span(self.allocation(), self.size).0.memory, self.offset())
    }

    /// Whether the CPU can write and read it (a host-visible pool).
    pub fn is_mappable(&self) -> bool {
        self.ranges.span(self.allocation(), self.size).0.mapped.is_some()
    }

    /// Declares that GPU work the renderer submitted itself uses the range until `until`:
    /// dropping it earlier defers its release until then, and its arena's pages wait for it even
    /// if the range is never dropped (`mem::forget`). A use of another device is refused.
    pub fn used_until(&mut self, until: GpuUse) -> Result<(), crate::device::life::ForeignUse> {
        if until.device != self.ranges.pool.device.uid() {
            return Err(crate::device::life::ForeignUse);
        }
        self.uses.note(until.point);
        // The arena's pages wait for it too, even if this range is never dropped (`mem::forget`).
        self.ranges.pending.borrow_mut().note(until.point);
        Ok(())
    }

    /// Copies `data` into the range at `offset` (flushing non-coherent memory). Needs `&mut`: one
    /// writer. The GPU must not be using these bytes (order your submissions after the write).
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), AccessError> {
        // SAFETY: `&mut self` makes this the only CPU access to the range's bytes (the allocator
        // handed them out once, to this handle).
        unsafe { self.ranges.span(self.allocation(), self.size).0.write(offset, data) }
    }

    /// Copies bytes of the range at `offset` into `out` (invalidating non-coherent memory first).
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), AccessError> {
        // SAFETY: `&self` excludes a `write` of this handle, the only writer of these bytes.
        unsafe { self.ranges.span(self.allocation(), self.size).0.read(offset, out) }
    }
}

impl Drop for LocalRange<'_> {
    fn drop(&mut self) {
        let Some(allocation) = self.allocation.take() else { return };
        let uses = std::mem::take(&mut self.uses);
        let arena = self.ranges;
        let device = &arena.pool.device;
        if uses.is_empty() && device.idle_so_far() {
            // Nothing may use it: straight back to the pages.
            arena.pages.borrow_mut().free(device, allocation);
            return;
        }
        let garbage =
            Garbage::Custom(Box::new(ReturnRange { returned: Arc::clone(&arena.returned), allocation }));
        if let Some(pending) = device.retire(garbage, uses) {
            arena.pending.borrow_mut().merge(&pending);
        }
    }
}

#[cfg(test)]
mod tests {
    /// The `loom` model of the return box (the one part of a `LocalRanges` another thread
    /// touches): the retire queue puts a range in under the box's lock and then raises the flag
    /// (`ReturnRange::retire`); the arena clears the flag and then empties the box under its lock
    /// (`take_returned`), and reads the flag without the lock before each allocation. Under every
    /// interleaving of a put with a take, a range left in the box has the flag raised: none is
    /// stranded until another range comes back.
    fn return_box(clear_before_taking: bool) {
        use loom::sync::atomic::AtomicBool;
        use loom::sync::{Arc, Mutex};
        use std::sync::atomic::Ordering;
        loom::model(move || {
            let any = Arc::new(AtomicBool::new(false));
            let ranges = Arc::new(Mutex::new(Vec::<u32>::new()));
            let retire = {
                let (any, ranges) = (Arc::clone(&any), Arc::clone(&ranges));
                loom::thread::spawn(move || {
                    ranges.lock().unwrap().push(7);
                    any.store(true, Ordering::Release);
                })
            };
            // The arena takes whether or not it saw the flag (the model checks the take itself).
            let taken = if clear_before_taking {
                any.store(false, Ordering::Relaxed);
                std::mem::take(&mut *ranges.lock().unwrap())
            } else {
                let taken = std::mem::take(&mut *ranges.lock().unwrap());
                any.store(false, Ordering::Relaxed);
                taken
            };
            retire.join().unwrap();
            let left = ranges.lock().unwrap().len();
            assert!(left == 0 || any.load(Ordering::Relaxed), "a returned range stranded with the flag down");
            assert_eq!(taken.len() + left, 1, "the range is taken once or left once");
        });
    }

    #[test]
    fn loom_a_returned_range_is_never_stranded() {
        return_box(true);
    }

    /// The model has teeth: clearing the flag after emptying the box strands a range put in
    /// between.
    #[test]
    #[should_panic(expected = "stranded with the flag down")]
    fn loom_clearing_the_flag_after_taking_strands_a_range() {
        return_box(false);
    }
}
