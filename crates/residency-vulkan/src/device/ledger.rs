//! What a device has allocated: bytes per memory heap, `VkDeviceMemory` count, and every live
//! object by name (leaks are reported by name when the device goes); and the device's fault
//! injection hook, with which tests (ours and applications') make a chosen Vulkan call fail.

use crate::device::lock::{thread_shard, CachePadded, SHARDS};
use crate::poison::PoisonFree;
use ash::vk;
use residency_core::memory::HeapBudget;
use residency_core::profile::MemoryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
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

/// Live objects in slots reused through a free list: tracking is O(1) and allocation-free once
/// the slab has grown (creating a buffer must stay cheap).
#[derive(Debug, Default)]
struct Slab {
    entries: Vec<Option<LiveObject>>,
    free: Vec<u32>,
}

/// One shard (threads creating resources at once mostly take different shards, each alone on its
/// cache lines): its part of the live-object table, and the calls its threads made at each fault
/// site (summed by [`Ledger::site_calls`]).
#[derive(Debug, Default)]
struct Shard {
    live: Mutex<Slab>,
    site_calls: [AtomicU64; SITES],
}

/// A call site where [`Ledger::inject_fault`] can make a Vulkan call fail. The call is not made:
/// the site returns the injected result as if the driver had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultSite {
    /// `vkAllocateMemory`: every heap, pool page, dedicated (committed) allocation, sparse tile
    /// heap, staging or readback buffer and per-device instance of a multi-device resource.
    AllocateMemory,
    /// `vkCreateBuffer` (every buffer) and the `vkCreateImage` of sparse images and of
    /// `Device::create_image` (transient pools' images are not a site; their heaps' memory is).
    CreateResource,
    /// `vkQueueBindSparse`.
    BindSparse,
    /// `vkQueueSubmit2`.
    QueueSubmit,
    /// `vkWaitForFences`, `vkGetFenceStatus` and `vkDeviceWaitIdle`.
    Wait,
}

impl FaultSite {
    /// Every site.
    pub const ALL: [FaultSite; 5] = [
        FaultSite::AllocateMemory,
        FaultSite::CreateResource,
        FaultSite::BindSparse,
        FaultSite::QueueSubmit,
        FaultSite::Wait,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// Whether a lost device makes this site fail (work on the queues; creating objects and
    /// allocating memory still reach the driver).
    fn fails_when_lost(self) -> bool {
        matches!(self, FaultSite::BindSparse | FaultSite::QueueSubmit | FaultSite::Wait)
    }
}

/// What an injected fault returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InjectedFault {
    /// `VK_ERROR_OUT_OF_DEVICE_MEMORY`.
    OutOfDeviceMemory,
    /// `VK_ERROR_DEVICE_LOST`: the device counts as lost from then on (see
    /// [`Ledger::is_device_lost`]) until [`Ledger::clear_faults`].
    DeviceLost,
}

impl InjectedFault {
    fn result(self) -> vk::Result {
        match self {
            InjectedFault::OutOfDeviceMemory => vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            InjectedFault::DeviceLost => vk::Result::ERROR_DEVICE_LOST,
        }
    }
}

/// One armed fault: `skip` more calls at `site` pass, then `count` fail with `fault`.
#[derive(Clone, Copy, Debug)]
struct Armed {
    site: FaultSite,
    skip: u64,
    count: u64,
    fault: InjectedFault,
}

/// The device is not lost.
const NOT_LOST: u8 = 0;
/// An injected fault "lost" the device; [`Ledger::clear_faults`] brings it back.
const LOST_INJECTED: u8 = 1;
/// The driver reported `VK_ERROR_DEVICE_LOST`: for good.
const LOST: u8 = 2;

const SITES: usize = FaultSite::ALL.len();

/// Per-device accounting.
#[derive(Debug)]
pub struct Ledger {
    heap_bytes: Vec<AtomicU64>,
    memory_objects: AtomicU64,
    max_memory_objects: u64,
    /// Caps on heap budgets set by the application (`u64::MAX`: none).
    heap_limits: Vec<AtomicU64>,
    /// Armed faults (rarely more than one); `armed_any` keeps the unarmed path lock-free.
    armed: Mutex<Vec<Armed>>,
    armed_any: AtomicBool,
    /// Faults fired at each site (the calls reached are counted per shard).
    site_faults: [AtomicU64; SITES],
    lost: AtomicU8,
    shards: [CachePadded<Shard>; SHARDS],
}

impl Ledger {
    pub(crate) fn new(heap_count: usize, max_memory_objects: u32) -> Ledger {
        Ledger {
            heap_bytes: (0..heap_count).map(|_| AtomicU64::new(0)).collect(),
            memory_objects: AtomicU64::new(0),
            max_memory_objects: u64::from(max_memory_objects),
            heap_limits: (0..heap_count).map(|_| AtomicU64::new(u64::MAX)).collect(),
            armed: Mutex::new(Vec::new()),
            armed_any: AtomicBool::new(false),
            site_faults: std::array::from_fn(|_| AtomicU64::new(0)),
            lost: AtomicU8::new(NOT_LOST),
            shards: std::array::from_fn(|_| CachePadded::default()),
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

    /// Fault injection: the next `count` `vkAllocateMemory` calls report out of device memory
    /// without reaching the driver (0 disarms). Replaces faults armed at that site.
    pub fn inject_out_of_memory(&self, count: u64) {
        let mut armed = self.armed.locked();
        armed.retain(|a| a.site != FaultSite::AllocateMemory);
        if count > 0 {
            armed.push(Armed {
                site: FaultSite::AllocateMemory,
                skip: 0,
                count,
                fault: InjectedFault::OutOfDeviceMemory,
            });
        }
        self.armed_any.store(!armed.is_empty(), Ordering::SeqCst);
    }

    /// Fault injection: after `skip` more calls at `site` have gone through, the next one fails
    /// with `fault` without reaching the driver (once). Several faults may be armed at once, at
    /// different sites. Meant for tests, the library's and applications' own: every site returns
    /// the same typed error as for a real failure and undoes what it had done.
    pub fn inject_fault(&self, site: FaultSite, skip: u64, fault: InjectedFault) {
        let mut armed = self.armed.locked();
        armed.push(Armed { site, skip, count: 1, fault });
        self.armed_any.store(true, Ordering::SeqCst);
    }

    /// Disarms every fault and ends an injected device loss (a real one stays).
    pub fn clear_faults(&self) {
        let mut armed = self.armed.locked();
        armed.clear();
        self.armed_any.store(false, Ordering::SeqCst);
        let _ = self.lost.compare_exchange(LOST_INJECTED, NOT_LOST, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// How many calls reached `site` since the device was created (injected failures included):
    /// run a scenario once to count them, then inject a fault at each index in turn.
    pub fn site_calls(&self, site: FaultSite) -> u64 {
        self.shards.iter().map(|shard| shard.site_calls[site.index()].load(Ordering::SeqCst)).sum()
    }

    /// How many injected faults fired at `site` (device-lost refusals excluded).
    pub fn faults_fired(&self, site: FaultSite) -> u64 {
        self.site_faults[site.index()].load(Ordering::SeqCst)
    }

    /// Whether the device is lost (the driver said so, or a fault was injected): queue
    /// submissions, binds and waits then fail with `DeviceLost` at once instead of reaching the
    /// driver; destroying objects still works, and teardown waits are bounded.
    pub fn is_device_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst) != NOT_LOST
    }

    /// Whether the driver reported the loss (not a fault injection, after which the GPU still runs
    /// the work already submitted): only then are teardown waits bounded.
    pub(crate) fn loss_is_real(&self) -> bool {
        self.lost.load(Ordering::SeqCst) == LOST
    }

    /// Records a result the driver returned (a device loss sticks).
    pub(crate) fn note_result(&self, result: vk::Result) {
        if result == vk::Result::ERROR_DEVICE_LOST {
            self.lost.store(LOST, Ordering::SeqCst);
        }
    }

    /// Counts a call at `site` and says whether it must fail instead of reaching the driver: a
    /// lost device, or an armed fault.
    pub(crate) fn fault_at(&self, site: FaultSite) -> Option<vk::Result> {
        // This thread's shard: concurrent creations do not share the counter's cache line.
        self.shards[thread_shard()].site_calls[site.index()].fetch_add(1, Ordering::SeqCst);
        if site.fails_when_lost() && self.is_device_lost() {
            return Some(vk::Result::ERROR_DEVICE_LOST);
        }
        if !self.armed_any.load(Ordering::SeqCst) {
            return None;
        }
        let mut armed = self.armed.locked();
        let at = armed.iter().position(|a| a.site == site)?;
        let entry = &mut armed[at];
        if entry.skip > 0 {
            entry.skip -= 1;
            return None;
        }
        let fault = entry.fault;
        entry.count -= 1;
        if entry.count == 0 {
            armed.remove(at);
        }
        self.armed_any.store(!armed.is_empty(), Ordering::SeqCst);
        self.site_faults[site.index()].fetch_add(1, Ordering::SeqCst);
        if fault == InjectedFault::DeviceLost {
            let _ = self.lost.compare_exchange(NOT_LOST, LOST_INJECTED, Ordering::SeqCst, Ordering::SeqCst);
        }
        Some(fault.result())
    }

    /// Runs the Vulkan call `call` at `site` unless a fault replaces it; notes a device loss.
    pub(crate) fn guard<T>(
        &self,
        site: FaultSite,
        call: impl FnOnce() -> ash::prelude::VkResult<T>,
    ) -> ash::prelude::VkResult<T> {
        if let Some(result) = self.fault_at(site) {
            return Err(result);
        }
        call().inspect_err(|&result| self.note_result(result))
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
        let shard = thread_shard();
        let mut slab = self.shards[shard].live.locked();
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
        let mut slab = self.shards[usize::from(id.shard)].live.locked();
        if slab.entries.get_mut(id.slot as usize).and_then(Option::take).is_some() {
            slab.free.push(id.slot);
        }
    }

    /// Every live object, shard by shard.
    pub fn live_objects(&self) -> Vec<LiveObject> {
        self.shards
            .iter()
            .flat_map(|shard| shard.live.locked().entries.iter().flatten().cloned().collect::<Vec<_>>())
            .collect()
    }
}
