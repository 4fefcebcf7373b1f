//! What a device has allocated: bytes per memory heap, `VkDeviceMemory` count, and every live
//! object by name (leaks are reported by name when the device goes).

use residency_core::memory::HeapBudget;
use residency_core::profile::MemoryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A live object the library created, as listed in a leak report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveObject {
    /// What it is (`buffer`, `image`, `memory`, `buffer pool`, …).
    pub kind: &'static str,
    /// Its name (shared with the object itself).
    pub name: Arc<str>,
}

/// Identifies a live object in the ledger: its shard and its slot there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId {
    shard: u8,
    slot: u32,
}

/// Shards of the live-object table: threads creating resources at once mostly take different
/// locks (each thread keeps to one shard).
const SHARDS: usize = 16;

thread_local! {
    static SHARD: usize = {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) as usize % SHARDS
    };
}

/// Live objects in slots reused through a free list: tracking is O(1) and allocation-free once
/// the slab has grown (creating a buffer must stay cheap).
#[derive(Debug, Default)]
struct Slab {
    entries: Vec<Option<LiveObject>>,
    free: Vec<u32>,
}

/// Per-device accounting.
#[derive(Debug)]
pub struct Ledger {
    heap_bytes: Vec<AtomicU64>,
    memory_objects: AtomicU64,
    max_memory_objects: u64,
    /// Caps on heap budgets set by the application (`u64::MAX`: none).
    heap_limits: Vec<AtomicU64>,
    /// Test hook: the next this-many memory allocations fail as out of device memory.
    injected_oom: AtomicU64,
    live: [Mutex<Slab>; SHARDS],
}

impl Ledger {
    pub(crate) fn new(heap_count: usize, max_memory_objects: u32) -> Ledger {
        Ledger {
            heap_bytes: (0..heap_count).map(|_| AtomicU64::new(0)).collect(),
            memory_objects: AtomicU64::new(0),
            max_memory_objects: u64::from(max_memory_objects),
            heap_limits: (0..heap_count).map(|_| AtomicU64::new(u64::MAX)).collect(),
            injected_oom: AtomicU64::new(0),
            live: std::array::from_fn(|_| Mutex::new(Slab::default())),
        }
    }

    /// Bytes of `VkDeviceMemory` this library holds in heap `heap`.
    pub fn heap_bytes(&self, heap: u32) -> u64 {
        self.heap_bytes.get(heap as usize).map_or(0, |b| b.load(Ordering::SeqCst))
    }

    /// How many `VkDeviceMemory` objects this library holds.
    pub fn memory_objects(&self) -> u64 {
        self.memory_objects.load(Ordering::SeqCst)
    }

    /// `maxMemoryAllocationCount`.
    pub fn max_memory_objects(&self) -> u64 {
        self.max_memory_objects
    }

    /// The budget of a heap as the driver reports it now (or estimated), with our own usage, capped
    /// by the application's limit for that heap.
    pub fn budget(&self, heap: &MemoryHeap, heap_index: u32) -> HeapBudget {
        let ours = self.heap_bytes(heap_index);
        let budget = HeapBudget::of(heap, ours);
        match self.heap_limit(heap_index) {
            Some(limit) if limit < budget.budget => HeapBudget { budget: limit, usage: ours },
            _ => budget,
        }
    }

    /// Caps what this library may allocate in heap `heap` (like VMA's heap size limit), or removes
    /// the cap with `None`. Allocations over it fail with `OutOfBudget` unless over-budget is allowed.
    pub fn set_heap_limit(&self, heap: u32, limit: Option<u64>) {
        if let Some(slot) = self.heap_limits.get(heap as usize) {
            slot.store(limit.unwrap_or(u64::MAX), Ordering::SeqCst);
        }
    }

    /// The application's cap on heap `heap`, if any.
    pub fn heap_limit(&self, heap: u32) -> Option<u64> {
        let limit = self.heap_limits.get(heap as usize)?.load(Ordering::SeqCst);
        (limit != u64::MAX).then_some(limit)
    }

    /// Fault injection for tests: the next `count` `vkAllocateMemory` calls report out of device
    /// memory without reaching the driver.
    pub fn inject_out_of_memory(&self, count: u64) {
        self.injected_oom.store(count, Ordering::SeqCst);
    }

    /// Consumes one injected out-of-memory fault, if any is pending.
    pub(crate) fn take_injected_oom(&self) -> bool {
        self.injected_oom.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }

    /// Reserves a memory object of `size` bytes in `heap`; false when the count limit is reached.
    pub(crate) fn reserve_memory(&self, heap: u32, size: u64) -> bool {
        let previous = self.memory_objects.fetch_add(1, Ordering::SeqCst);
        if previous >= self.max_memory_objects {
            self.memory_objects.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        self.heap_bytes[heap as usize].fetch_add(size, Ordering::SeqCst);
        true
    }

    /// Releases what [`Ledger::reserve_memory`] reserved.
    pub(crate) fn release_memory(&self, heap: u32, size: u64) {
        self.memory_objects.fetch_sub(1, Ordering::SeqCst);
        self.heap_bytes[heap as usize].fetch_sub(size, Ordering::SeqCst);
    }

    /// Records a live object.
    pub(crate) fn track(&self, kind: &'static str, name: impl Into<Arc<str>>) -> ObjectId {
        let object = LiveObject { kind, name: name.into() };
        let shard = SHARD.with(|s| *s);
        let mut slab = self.live[shard].lock().unwrap_or_else(|e| e.into_inner());
        let slot = match slab.free.pop() {
            Some(slot) => {
                slab.entries[slot as usize] = Some(object);
                slot
            }
            None => {
                slab.entries.push(Some(object));
                slab.entries.len() as u32 - 1
            }
        };
        ObjectId { shard: shard as u8, slot }
    }

    /// Forgets a live object.
    pub(crate) fn untrack(&self, id: ObjectId) {
        let mut slab = self.live[usize::from(id.shard)].lock().unwrap_or_else(|e| e.into_inner());
        if slab.entries.get_mut(id.slot as usize).and_then(Option::take).is_some() {
            slab.free.push(id.slot);
        }
    }

    /// Every live object, shard by shard.
    pub fn live_objects(&self) -> Vec<LiveObject> {
        self.live
            .iter()
            .flat_map(|shard| {
                shard
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entries
                    .iter()
                    .flatten()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}
