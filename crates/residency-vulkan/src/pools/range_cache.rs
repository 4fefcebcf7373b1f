//! A buffer pool's per-thread caches of freed ranges (issue #31): DXVK's idea, so that threads
//! sharing one arena do not take its lock for every buffer.
//!
//! A pool keeps one [`RangeCache`] per handle slot (a thread's shard of an arena, see
//! `buffer_pool.rs`), each behind a mutex of its own on its own cache lines: the threads of a slot
//! (one, unless more threads than slots run) take it uncontended. The caches of an arena are used
//! once two thread shards have allocated from it (an arena one thread uses keeps its uncontended
//! lock and no cache: `buffer_pool.rs`, `PoolShared::users`). A released range small enough
//! ([`cacheable`]) goes into the releasing thread's cache, by size class, still allocated in its
//! page's TLSF; a request of the same class (or the next) takes it back without the arena's lock.
//! The cache is bounded ([`MAX_PER_CLASS`], [`MAX_BYTES`]): past a bound its oldest ranges go
//! back to the pages, under one lock for the batch. Every cache of an arena gives its ranges back
//! before the arena grows a page, and before statistics, reports, defragmentation or an
//! invariant check look at the pages, so caching never costs a page and never shows.
//!
//! A cached range needs its page's handles (memory, mapping, page buffer), read under the arena's
//! lock where the range was allocated. A cache records, per block slot, the page it saw there,
//! valid while the arena has removed no page since ([`RangeCache::record`] keeps the arena's
//! removal count with it): a slot's page changes only by a removal, and a released range's page
//! is alive (its range is still allocated), so an unchanged count means the recorded page is the
//! range's.

use crate::device::blocks::BlockAllocation;

/// The largest range a cache keeps.
pub(crate) const MAX_SIZE: u64 = 64 << 10;
/// Size classes: 16 B steps up to 128 B, then 8 per power of two up to [`MAX_SIZE`].
const CLASSES: usize = 8 + 9 * 8;
/// Ranges a cache keeps per size class.
pub(crate) const MAX_PER_CLASS: usize = 32;
/// Bytes a cache keeps in all.
pub(crate) const MAX_BYTES: u64 = 512 << 10;
/// Entries a lookup examines per class (newest first).
const PROBE: usize = 4;

/// Whether a range of `size` bytes goes through the caches.
pub(crate) fn cacheable(size: u64) -> bool {
    size > 0 && size <= MAX_SIZE
}

/// The size class of `size` (in `1..=MAX_SIZE`): `(lo, hi]` ranges 16 B wide up to 128 B, then an
/// eighth of a power of two wide.
fn class_of(size: u64) -> usize {
    debug_assert!(cacheable(size));
    if size <= 128 {
        return ((size - 1) / 16) as usize;
    }
    // size − 1 in [2^p, 2^(p+1)), so size in (2^p, 2^(p+1)], p ≥ 7.
    let p = u64::from(63 - (size - 1).leading_zeros());
    let step = 1u64 << (p - 3);
    let k = ((size - 1 - (1 << p)) / step) as usize;
    8 + (p as usize - 7) * 8 + k
}

/// Freed ranges of one arena kept for one slot's threads, with the pages they are in (`P`: the
/// page's handles).
#[derive(Debug)]
pub(crate) struct RangeCache<P> {
    /// By size class, oldest first.
    classes: Vec<Vec<(BlockAllocation, P)>>,
    /// Bytes of the ranges held.
    bytes: u64,
    /// The page seen in each block slot, valid while the arena's removal count is `epoch`.
    pages: Vec<Option<P>>,
    epoch: u64,
}

impl<P> Default for RangeCache<P> {
    fn default() -> Self {
        RangeCache { classes: Vec::new(), bytes: 0, pages: Vec::new(), epoch: 0 }
    }
}

impl<P: Copy> RangeCache<P> {
    /// A cached range of at least `size` bytes at a multiple of `alignment`, from `size`'s class
    /// or the next: less than a quarter larger than asked (less than 32 B below 128 B).
    pub(crate) fn take(&mut self, size: u64, alignment: u64) -> Option<(BlockAllocation, P)> {
        let class = class_of(size);
        for class in [class, class + 1] {
            let Some(ranges) = self.classes.get_mut(class) else { continue };
            let fits = |(a, _): &(BlockAllocation, P)| {
                a.allocation.size() >= size && a.allocation.offset() % alignment.max(1) == 0
            };
            let at = ranges.iter().rev().take(PROBE).position(fits).map(|back| ranges.len() - 1 - back);
            if let Some(at) = at {
                let hit = ranges.remove(at);
                self.bytes -= hit.0.allocation.size();
                return Some(hit);
            }
        }
        None
    }

    /// Records `page` in block slot `block`, as read under the arena's lock with the arena's
    /// removal count `removals`.
    pub(crate) fn record(&mut self, block: u32, page: P, removals: u64) {
        if removals < self.epoch {
            // Read before a newer record: stale already.
            return;
        }
        if removals > self.epoch {
            self.pages.clear();
            self.epoch = removals;
        }
        let slot = block as usize;
        if self.pages.len() <= slot {
            self.pages.resize(slot + 1, None);
        }
        self.pages[slot] = Some(page);
    }

    /// Keeps a released range (the arena's removal count read now is `removals`): the ranges to
    /// give back to the pages when a bound is passed (oldest first), or the range itself when its
    /// page is not known here (it goes back to the pages at once).
    pub(crate) fn put(
        &mut self,
        allocation: BlockAllocation,
        removals: u64,
    ) -> Result<Vec<BlockAllocation>, BlockAllocation> {
        let size = allocation.allocation.size();
        let page = (removals == self.epoch && cacheable(size))
            .then(|| self.pages.get(allocation.block as usize).copied().flatten())
            .flatten();
        let Some(page) = page else { return Err(allocation) };
        if self.classes.is_empty() {
            self.classes.resize_with(CLASSES, Vec::new);
        }
        let class = class_of(size);
        self.classes[class].push((allocation, page));
        self.bytes += size;
        let mut evicted = Vec::new();
        if self.classes[class].len() > MAX_PER_CLASS {
            self.evict_oldest(class, MAX_PER_CLASS / 2, &mut evicted);
        }
        if self.bytes > MAX_BYTES {
            // Half of every class, oldest first: the cache keeps what was released last.
            for class in 0..CLASSES {
                let half = self.classes[class].len().div_ceil(2);
                self.evict_oldest(class, half, &mut evicted);
            }
        }
        Ok(evicted)
    }

    fn evict_oldest(&mut self, class: usize, count: usize, out: &mut Vec<BlockAllocation>) {
        for (allocation, _) in self.classes[class].drain(..count) {
            self.bytes -= allocation.allocation.size();
            out.push(allocation);
        }
    }

    /// Every range held, to give back to the pages.
    pub(crate) fn drain(&mut self) -> Vec<BlockAllocation> {
        self.bytes = 0;
        self.classes.iter_mut().flat_map(|ranges| ranges.drain(..).map(|(a, _)| a)).collect()
    }

    /// Ranges held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.classes.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use residency_core::allocator::{ResourceKind, TlsfAllocator, TlsfDesc};

    fn allocate(tlsf: &mut TlsfAllocator, block: u32, size: u64) -> BlockAllocation {
        let allocation = tlsf.allocate(size, 16, ResourceKind::Linear).expect("room");
        BlockAllocation { block, allocation }
    }

    #[test]
    fn classes_cover_every_size_in_order() {
        let mut last = 0;
        for size in 1..=MAX_SIZE {
            let class = class_of(size);
            assert!(class == last || class == last + 1, "size {size}: class {class} after {last}");
            assert!(class < CLASSES);
            last = class;
        }
        assert_eq!(last, CLASSES - 1);
        // What `take` may hand out: a range of the class or the next, less than a quarter (32 B
        // below 128 B) larger than asked.
        let mut upper = [0u64; CLASSES];
        (1..=MAX_SIZE).for_each(|size| upper[class_of(size)] = size);
        for size in 1..=MAX_SIZE {
            let largest = upper[(class_of(size) + 1).min(CLASSES - 1)];
            assert!(largest < size + (size / 4).max(32), "size {size}: up to {largest}");
        }
        // Within a class, sizes differ by at most an eighth of the larger (above 128 B).
        assert_eq!(class_of(129), class_of(144));
        assert_ne!(class_of(144), class_of(145));
    }

    #[test]
    fn a_released_range_is_taken_back_only_where_its_page_is_known() {
        let mut tlsf = TlsfAllocator::new(TlsfDesc::new(1 << 20)).expect("valid");
        let mut cache = RangeCache::<u8>::default();
        let a = allocate(&mut tlsf, 0, 1000);
        // No page recorded: refused.
        let a = cache.put(a, 0).expect_err("unknown page");
        cache.record(0, 7, 0);
        assert!(cache.put(a, 0).expect("kept").is_empty());
        assert_eq!(cache.len(), 1);
        // Larger than the range, or another alignment it does not have: a miss.
        assert!(cache.take(1001, 16).is_none());
        let (hit, page) = cache.take(990, 16).expect("same class");
        assert_eq!((hit.allocation.size(), page), (1000, 7));
        // A page removed since the record: the record is stale.
        let b = allocate(&mut tlsf, 0, 64);
        let b = cache.put(b, 1).expect_err("stale page");
        // A record read before a newer one does not come back.
        cache.record(0, 9, 2);
        cache.record(0, 8, 1);
        assert!(cache.put(b, 2).expect("kept").is_empty());
        assert_eq!(cache.take(64, 16).map(|(_, p)| p), Some(9));
        tlsf.free(hit.allocation).expect("live");
    }

    #[test]
    fn bounds_give_the_oldest_ranges_back() {
        let mut tlsf = TlsfAllocator::new(TlsfDesc::new(64 << 20)).expect("valid");
        let mut cache = RangeCache::<()>::default();
        cache.record(0, (), 0);
        let mut back = Vec::new();
        for _ in 0..=MAX_PER_CLASS {
            back.extend(cache.put(allocate(&mut tlsf, 0, 256), 0).expect("kept"));
        }
        assert_eq!(back.len(), MAX_PER_CLASS / 2);
        assert_eq!(cache.len(), MAX_PER_CLASS + 1 - MAX_PER_CLASS / 2);
        // Bytes: ranges of many classes past MAX_BYTES.
        let mut size = 4096;
        while back.len() < 64 {
            back.extend(cache.put(allocate(&mut tlsf, 0, size), 0).expect("kept"));
            size = if size >= MAX_SIZE { 4096 } else { size + 4096 };
        }
        assert!(cache.bytes <= MAX_BYTES);
        back.extend(cache.drain());
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.bytes, 0);
        for a in back {
            tlsf.free(a.allocation).expect("each range once");
        }
        assert_eq!(tlsf.allocation_count(), 0);
    }

    /// The `loom` model of the page records (the one part of the caches read without a lock: the
    /// arena's removal count). A recorder reads slot 0's page (generation 1) and the count under
    /// the arena's lock and records them; meanwhile a mutator removes that page (counting it),
    /// makes page 2 in the same slot, allocates a range in it and hands the range to a releaser,
    /// which reads the count and puts the range in the cache. Under every interleaving, a range
    /// the cache keeps carries its own page (2), never the stale record of page 1.
    fn page_records(count_read_under_lock: bool) {
        use loom::sync::atomic::AtomicU64;
        use loom::sync::{Arc, Mutex};
        use std::sync::atomic::Ordering;
        let mut builder = loom::model::Builder::new();
        // Two preemptions reach every order of the three threads' lock sections and loads.
        builder.preemption_bound = Some(2);
        builder.check(move || {
            let mut tlsf = TlsfAllocator::new(TlsfDesc::new(1 << 20)).expect("valid");
            let range = allocate(&mut tlsf, 0, 256);
            let page = Arc::new(Mutex::new(1u32));
            let removals = Arc::new(AtomicU64::new(0));
            let cache = Arc::new(Mutex::new(RangeCache::<u32>::default()));
            let handoff = Arc::new(Mutex::new(None::<BlockAllocation>));
            let recorder = {
                let (page, removals, cache) = (Arc::clone(&page), Arc::clone(&removals), Arc::clone(&cache));
                loom::thread::spawn(move || {
                    let guard = page.lock().unwrap();
                    let seen = *guard;
                    let mut count = removals.load(Ordering::Acquire);
                    drop(guard);
                    if !count_read_under_lock {
                        count = removals.load(Ordering::Acquire);
                    }
                    cache.lock().unwrap().record(0, seen, count);
                })
            };
            let mutator = {
                let (page, removals, handoff) =
                    (Arc::clone(&page), Arc::clone(&removals), Arc::clone(&handoff));
                loom::thread::spawn(move || {
                    let mut guard = page.lock().unwrap();
                    removals.fetch_add(1, Ordering::Release);
                    *guard = 2;
                    drop(guard);
                    *handoff.lock().unwrap() = Some(range);
                })
            };
            let releaser = {
                let (removals, cache, handoff) =
                    (Arc::clone(&removals), Arc::clone(&cache), Arc::clone(&handoff));
                loom::thread::spawn(move || {
                    let Some(range) = handoff.lock().unwrap().take() else { return };
                    let count = removals.load(Ordering::Acquire);
                    let mut cache = cache.lock().unwrap();
                    if cache.put(range, count).is_ok() {
                        let (_, seen) = cache.take(256, 16).expect("just kept");
                        assert_eq!(seen, 2, "a range kept with another page's handles");
                    }
                })
            };
            for thread in [recorder, mutator, releaser] {
                thread.join().unwrap();
            }
        });
    }

    #[test]
    fn loom_a_kept_range_always_carries_its_own_page() {
        page_records(true);
    }

    /// The model has teeth: a count read after the arena's lock is released can pair page 1
    /// with the count of page 2.
    #[test]
    #[should_panic(expected = "another page's handles")]
    fn loom_a_count_read_outside_the_lock_lets_a_stale_page_through() {
        page_records(false);
    }
}
