//! Memory pressure: the heap budgets of VK_EXT_memory_budget cached and refreshed cheaply, the
//! headroom left for other processes, residency's own device-local budget (the bytes it may keep
//! in the device tiers, set below the device's memory to run a workload under pressure), and the
//! counters a renderer shows (fallbacks, demotions, promotions).
//!
//! The driver's budget is queried once per [`REFRESH_EVERY`] new memory blocks, on
//! [`Device::refresh_budgets`] and on [`Device::heap_budgets`]; between two queries the usage is
//! the driver's last figure plus what residency itself allocated or freed since (its own changes
//! are exact). An allocation the cached figures refuse is checked once more against a fresh
//! query before it is refused, so a stale cache never refuses what fits.

use crate::device::blocks::MemoryError;
use crate::device::blocks::ResourceMemory;
use crate::device::profile_capture;
use crate::device::Device;
use crate::poison::PoisonFree;
use residency_core::memory::MemoryTier;
use residency_core::profile::MemoryHeap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

/// How many new memory blocks residency allocates between two queries of the driver's budgets.
pub const REFRESH_EVERY: u64 = 32;

/// The headroom left for other processes by default, in percent of the driver's budget.
pub const DEFAULT_HEADROOM_PERCENT: u8 = 5;

/// Counters a renderer can show: totals since the device was made; the difference of two
/// readings ([`PressureStats::since`]) is what happened in between (one frame, say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PressureStats {
    /// Allocations placed in a later step of their fallback chain than the first (a worse tier).
    pub fallbacks: u64,
    /// Their bytes.
    pub fallback_bytes: u64,
    /// Allocations that did not fit their preferred tier and were refused because the caller
    /// forbade the fallback.
    pub fallbacks_refused: u64,
    /// Resources moved from a device tier to the host tier (demotions).
    pub demotions: u64,
    /// Their bytes.
    pub demoted_bytes: u64,
    /// Resources moved back from the host tier to a device tier (promotions).
    pub promotions: u64,
    /// Their bytes.
    pub promoted_bytes: u64,
    /// Queries of the driver's budgets.
    pub budget_refreshes: u64,
    /// Bytes of `VkDeviceMemory` residency holds in the device tiers now.
    pub device_tier_bytes: u64,
    /// Bytes of `VkDeviceMemory` residency holds in the host tier now.
    pub host_tier_bytes: u64,
}

impl PressureStats {
    /// What happened between `earlier` and `self` (the counters' differences; the byte levels
    /// `device_tier_bytes` and `host_tier_bytes` are `self`'s).
    pub fn since(&self, earlier: &PressureStats) -> PressureStats {
        PressureStats {
            fallbacks: self.fallbacks.saturating_sub(earlier.fallbacks),
            fallback_bytes: self.fallback_bytes.saturating_sub(earlier.fallback_bytes),
            fallbacks_refused: self.fallbacks_refused.saturating_sub(earlier.fallbacks_refused),
            demotions: self.demotions.saturating_sub(earlier.demotions),
            demoted_bytes: self.demoted_bytes.saturating_sub(earlier.demoted_bytes),
            promotions: self.promotions.saturating_sub(earlier.promotions),
            promoted_bytes: self.promoted_bytes.saturating_sub(earlier.promoted_bytes),
            budget_refreshes: self.budget_refreshes.saturating_sub(earlier.budget_refreshes),
            device_tier_bytes: self.device_tier_bytes,
            host_tier_bytes: self.host_tier_bytes,
        }
    }
}

/// The driver's figures at the last query, with residency's own bytes per heap then.
#[derive(Debug)]
struct Snapshot {
    heaps: Vec<MemoryHeap>,
    ours: Vec<u64>,
}

/// A counter that is one of [`PressureStats`]' fields.
#[derive(Clone, Copy)]
pub(crate) enum Counter {
    Fallback,
    FallbackRefused,
    Demotion,
    Promotion,
}

/// Per-device pressure state (see the module documentation).
#[derive(Debug)]
pub(crate) struct Pressure {
    snapshot: Mutex<Snapshot>,
    blocks_since_refresh: AtomicU64,
    headroom_percent: AtomicU8,
    /// Bytes per tier, in [`MemoryTier::ALL`]'s order.
    tier_bytes: [AtomicU64; 3],
    /// Residency's device-local budget (`u64::MAX`: none).
    device_limit: AtomicU64,
    /// counts and bytes: fallbacks, refused fallbacks, demotions, promotions; and refreshes.
    counts: [AtomicU64; 4],
    bytes: [AtomicU64; 4],
    refreshes: AtomicU64,
}

impl Pressure {
    pub(crate) fn new(heaps: Vec<MemoryHeap>) -> Pressure {
        let ours = vec![0; heaps.len()];
        Pressure {
            snapshot: Mutex::new(Snapshot { heaps, ours }),
            blocks_since_refresh: AtomicU64::new(0),
            headroom_percent: AtomicU8::new(DEFAULT_HEADROOM_PERCENT),
            tier_bytes: std::array::from_fn(|_| AtomicU64::new(0)),
            device_limit: AtomicU64::new(u64::MAX),
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            bytes: std::array::from_fn(|_| AtomicU64::new(0)),
            refreshes: AtomicU64::new(0),
        }
    }

    /// Counts one event of `counter` of `bytes`.
    pub(crate) fn count(&self, counter: Counter, bytes: u64) {
        self.counts[counter as usize].fetch_add(1, Ordering::Relaxed);
        self.bytes[counter as usize].fetch_add(bytes, Ordering::Relaxed);
    }

    /// Releases what a block of `size` bytes in `tier` held.
    pub(crate) fn release(&self, tier: MemoryTier, size: u64) {
        self.tier_bytes[tier.index()].fetch_sub(size, Ordering::SeqCst);
    }

    fn device_bytes(&self) -> u64 {
        MemoryTier::ALL
            .iter()
            .filter(|t| t.is_device())
            .map(|t| self.tier_bytes[t.index()].load(Ordering::SeqCst))
            .sum()
    }
}

impl Device {
    /// Heap `index` with its budget and usage as residency counts them now: the driver's figures
    /// of the last query (refreshed every [`REFRESH_EVERY`] new blocks), the usage moved by what
    /// residency allocated or freed since, the budget less the headroom
    /// ([`Device::set_budget_headroom_percent`]). Without VK_EXT_memory_budget: `heap` as given.
    pub fn current_heap(&self, index: u32, heap: &MemoryHeap) -> MemoryHeap {
        if !self.features().memory_budget {
            return heap.clone();
        }
        let snapshot = self.pressure.snapshot.locked();
        let Some(cached) = snapshot.heaps.get(index as usize) else { return heap.clone() };
        let ours_then = snapshot.ours.get(index as usize).copied().unwrap_or(0);
        let ours_now = self.ledger().heap_bytes(index);
        let headroom = u64::from(self.pressure.headroom_percent.load(Ordering::Relaxed));
        MemoryHeap {
            budget: cached.budget.map(|b| b - b / 100 * headroom),
            usage: cached.usage.map(|u| u.saturating_add(ours_now).saturating_sub(ours_then)),
            ..cached.clone()
        }
    }

    /// Heap `index` as the driver reported it at the last query (`None` without
    /// VK_EXT_memory_budget).
    pub(crate) fn driver_heap(&self, index: u32) -> Option<MemoryHeap> {
        if !self.features().memory_budget {
            return None;
        }
        self.pressure.snapshot.locked().heaps.get(index as usize).cloned()
    }

    /// Queries the driver's heap budgets now (VK_EXT_memory_budget; one call) and caches them.
    /// Residency does so itself every [`REFRESH_EVERY`] new memory blocks and before it refuses
    /// an allocation for the budget; a renderer may call it once a frame. Does nothing without
    /// the extension.
    pub fn refresh_budgets(&self) {
        if !self.features().memory_budget {
            return;
        }
        let now = profile_capture::memory_properties(&self.shared.instance, self.physical, true);
        let ours = (0..now.heaps.len() as u32).map(|i| self.ledger().heap_bytes(i)).collect();
        *self.pressure.snapshot.locked() = Snapshot { heaps: now.heaps, ours };
        self.pressure.blocks_since_refresh.store(0, Ordering::Relaxed);
        self.pressure.refreshes.fetch_add(1, Ordering::Relaxed);
    }

    /// Leaves `percent` (at most 50) of each heap's driver budget to other processes: residency
    /// allocates against the rest. Default [`DEFAULT_HEADROOM_PERCENT`]. Without
    /// VK_EXT_memory_budget the estimate (80 % of the heap) leaves room already and this does not
    /// apply.
    pub fn set_budget_headroom_percent(&self, percent: u8) {
        self.pressure.headroom_percent.store(percent.min(50), Ordering::Relaxed);
    }

    /// The headroom left to other processes, in percent of the driver's budget.
    pub fn budget_headroom_percent(&self) -> u8 {
        self.pressure.headroom_percent.load(Ordering::Relaxed)
    }

    /// Caps the bytes residency keeps in the device tiers ([`MemoryTier::DeviceLocal`] and
    /// [`MemoryTier::DeviceLocalHostVisible`]: every block and dedicated allocation there), or
    /// removes the cap with `None`. An allocation over it falls back along its chain to the host
    /// tier (or is refused with `OutOfBudget` when its fallback is forbidden). It works on every device, unified memory included, so a workload can be run at a
    /// chosen multiple of its device-local budget.
    pub fn set_device_local_limit(&self, limit: Option<u64>) {
        self.pressure.device_limit.store(limit.unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// The cap set with [`Device::set_device_local_limit`].
    pub fn device_local_limit(&self) -> Option<u64> {
        let limit = self.pressure.device_limit.load(Ordering::SeqCst);
        (limit != u64::MAX).then_some(limit)
    }

    /// Bytes the device tiers may still take under the device-local limit (`u64::MAX` without
    /// one) and under the device-local heaps' budgets: what a demotion pass frees room up to.
    pub fn device_tier_room(&self) -> u64 {
        let limit = self.pressure.device_limit.load(Ordering::SeqCst);
        let under_limit = limit.saturating_sub(self.pressure.device_bytes());
        let props = self.memory_properties();
        let heaps = props.heaps.iter().enumerate().filter(|(_, h)| h.device_local).map(|(i, heap)| {
            let index = i as u32;
            self.ledger().budget(&self.current_heap(index, heap), index).available()
        });
        heaps.min().unwrap_or(u64::MAX).min(under_limit)
    }

    /// Bytes the device tiers could still hold: [`Device::device_tier_room`] plus the free
    /// ranges of the general allocator's device-tier heaps (those a defragmentation pass is
    /// draining left out). What [`Defragmenter::relieve`](crate::Defragmenter::relieve) gives to
    /// the hottest buffers on top of what they hold.
    pub fn device_tier_free(&self) -> u64 {
        let holes: u64 = self
            .general
            .iter()
            .enumerate()
            .filter(|(list, _)| self.list_tier(*list as u32).is_device())
            .map(|(_, list)| {
                let list = list.locked();
                list.blocks
                    .iter()
                    .flatten()
                    .filter(|b| !b.draining)
                    .map(|b| b.size - b.allocator.used_bytes())
                    .sum::<u64>()
            })
            .sum();
        self.device_tier_room().saturating_add(holes)
    }

    /// Bytes the device tiers hold beyond what they may: over the device-local limit, or over a
    /// device-local heap's budget (0 when within both). With [`Device::device_tier_room`], the
    /// pressure signal the streamer's tile budget follows
    /// ([`Streamer::follow_pressure`](crate::streaming::Streamer::follow_pressure)).
    pub fn device_tier_excess(&self) -> u64 {
        let limit = self.pressure.device_limit.load(Ordering::SeqCst);
        let over_limit = self.pressure.device_bytes().saturating_sub(limit);
        let props = self.memory_properties();
        let over_heaps = props.heaps.iter().enumerate().filter(|(_, h)| h.device_local).map(|(i, heap)| {
            let index = i as u32;
            let budget = self.ledger().budget(&self.current_heap(index, heap), index);
            budget.usage.saturating_sub(budget.budget)
        });
        over_heaps.max().unwrap_or(0).max(over_limit)
    }

    /// The pressure counters now (totals; [`PressureStats::since`] gives one frame's).
    pub fn pressure_stats(&self) -> PressureStats {
        let p = &self.pressure;
        let count = |c: Counter| p.counts[c as usize].load(Ordering::Relaxed);
        let bytes = |c: Counter| p.bytes[c as usize].load(Ordering::Relaxed);
        PressureStats {
            fallbacks: count(Counter::Fallback),
            fallback_bytes: bytes(Counter::Fallback),
            fallbacks_refused: count(Counter::FallbackRefused),
            demotions: count(Counter::Demotion),
            demoted_bytes: bytes(Counter::Demotion),
            promotions: count(Counter::Promotion),
            promoted_bytes: bytes(Counter::Promotion),
            budget_refreshes: p.refreshes.load(Ordering::Relaxed),
            device_tier_bytes: p.device_bytes(),
            host_tier_bytes: p.tier_bytes[MemoryTier::Host.index()].load(Ordering::SeqCst),
        }
    }

    /// Checks a new block of `size` bytes in heap `heap_index` and `tier` against the heap's
    /// budget (cached, then fresh before a refusal) and the device-local limit, and counts it in
    /// its tier; [`Pressure::release`] gives it back. `allow_over_budget`: only counted.
    pub(crate) fn admit_block(
        &self,
        name: &str,
        heap_index: u32,
        tier: MemoryTier,
        size: u64,
        allow_over_budget: bool,
    ) -> Result<(), MemoryError> {
        if !allow_over_budget {
            let heap = &self.memory_properties().heaps[heap_index as usize];
            if self.pressure.blocks_since_refresh.fetch_add(1, Ordering::Relaxed) + 1 >= REFRESH_EVERY {
                self.refresh_budgets();
            }
            let mut budget = self.ledger().budget(&self.current_heap(heap_index, heap), heap_index);
            if !budget.allows(size) && self.features().memory_budget {
                self.refresh_budgets();
                budget = self.ledger().budget(&self.current_heap(heap_index, heap), heap_index);
            }
            if !budget.allows(size) {
                return Err(MemoryError::OutOfBudget {
                    name: name.to_owned(),
                    heap: heap_index,
                    requested: size,
                    available: budget.available(),
                    budget: budget.budget,
                });
            }
            let limit = self.pressure.device_limit.load(Ordering::SeqCst);
            let used = self.pressure.device_bytes();
            if tier.is_device() && used.saturating_add(size) > limit {
                return Err(MemoryError::OutOfBudget {
                    name: name.to_owned(),
                    heap: heap_index,
                    requested: size,
                    available: limit.saturating_sub(used),
                    budget: limit,
                });
            }
        }
        self.pressure.tier_bytes[tier.index()].fetch_add(size, Ordering::SeqCst);
        Ok(())
    }

    /// The tier a resource's memory counts in: `None` for a pool's range or a transient heap's
    /// (pools never fall back, and their resources never change tiers).
    pub(crate) fn tier_of(&self, memory: &ResourceMemory) -> Option<MemoryTier> {
        match memory {
            ResourceMemory::General { list, .. } => Some(self.list_tier(*list)),
            ResourceMemory::Dedicated(block) => Some(block.tier),
            ResourceMemory::Sub { .. } | ResourceMemory::Transient => None,
        }
    }

    /// The tier of the general allocator's list `list`: its memory type's, or
    /// [`MemoryTier::Host`] for the host lists of a unified-memory device (the second half).
    pub(crate) fn list_tier(&self, list: u32) -> MemoryTier {
        let types = &self.memory_properties().types;
        match types.get(list as usize) {
            Some(t) => MemoryTier::of(t.flags),
            None => MemoryTier::Host,
        }
    }

    /// The memory type of the general allocator's list `list`.
    pub(crate) fn list_type(&self, list: u32) -> u32 {
        list % self.memory_properties().types.len() as u32
    }

    /// The general allocator's list for a chain step.
    pub(crate) fn list_of(&self, step: residency_core::memory::ChainStep) -> u32 {
        let types = &self.memory_properties().types;
        let own = MemoryTier::of(types[step.type_index as usize].flags);
        if step.tier == own {
            step.type_index
        } else {
            step.type_index + types.len() as u32
        }
    }
}
