//! Memory policy: which memory type serves an intent, how heaps grow, and budgets.
//!
//! These are decisions, not Vulkan calls: the backend asks them with the device's profile and acts.
//!
//! **Memory-type presets.** Each [`MemoryIntent`] has required flags and a cost per flag; the
//! candidates are every allowed type with the required flags, cheapest first (ties: lower index),
//! so an allocation that fails on one type can fall back to the next.
//!
//! | intent | required | preferred (cheaper) | avoided (dearer) |
//! |---|---|---|---|
//! | `DeviceLocal` | — | device-local | host-visible (keeps ReBAR space free), no device-local at all |
//! | `Upload` | host-visible | host-coherent, not cached (write-combined), not device-local | cached |
//! | `Readback` | host-visible | host-cached, host-coherent | not cached |
//! | `DeviceLocalHostVisible` | host-visible | device-local, host-coherent | not device-local |
//!
//! **Heap growth** (as VMA does): the first heap of a memory type is small (`page_size / 8`), each new
//! one doubles the largest existing one up to `page_size`, and is never smaller than the request.
//! A request larger than half a page, or one the driver prefers dedicated, gets its own memory.
//! Empty heaps are released with hysteresis: one empty heap per memory type is kept for reuse.
//!
//! **Budgets.** With VK_EXT_memory_budget the driver's budget and usage for each heap are used; without
//! it the budget is estimated as 80 % of the heap's size and usage as what this library allocated.

use crate::placement::heap::{explicit_heap_size, EXPLICIT_HEAP_ALIGNMENT};
use crate::profile::{MemoryHeap, MemoryType, MemoryTypeFlags};
use serde::{Deserialize, Serialize};

/// What memory is for; decides the memory type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryIntent {
    /// GPU-only data: textures, vertex/index buffers, render targets.
    #[default]
    DeviceLocal,
    /// Written by the CPU, read by the GPU once or a few times (staging, per-frame constants).
    Upload,
    /// Written by the GPU, read by the CPU.
    Readback,
    /// Device-local memory the CPU can write directly (ReBAR); falls back to other host-visible types.
    DeviceLocalHostVisible,
}

impl MemoryIntent {
    /// Whether memory of this intent must be host-visible (mappable).
    pub const fn requires_host_visible(self) -> bool {
        !matches!(self, MemoryIntent::DeviceLocal)
    }

    fn cost(self, f: MemoryTypeFlags) -> Option<u32> {
        if self.requires_host_visible() && !f.host_visible {
            return None;
        }
        if f.protected || f.lazily_allocated {
            return None;
        }
        let mut cost = 0;
        let mut add = |condition: bool, c: u32| {
            if condition {
                cost += c;
            }
        };
        match self {
            MemoryIntent::DeviceLocal => {
                add(!f.device_local, 8);
                add(f.host_visible, 2);
            }
            MemoryIntent::Upload => {
                add(!f.host_coherent, 4);
                add(f.host_cached, 2);
                add(f.device_local, 1);
            }
            MemoryIntent::Readback => {
                add(!f.host_cached, 4);
                add(!f.host_coherent, 1);
            }
            MemoryIntent::DeviceLocalHostVisible => {
                add(!f.device_local, 4);
                add(!f.host_coherent, 2);
            }
        }
        Some(cost)
    }
}

/// The memory types that can serve `intent` among those in `allowed_bits`, best first.
pub fn memory_type_candidates(types: &[MemoryType], allowed_bits: u32, intent: MemoryIntent) -> Vec<u32> {
    let mut candidates: Vec<(u32, u32)> = types
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < 32 && allowed_bits & (1 << i) != 0)
        .filter_map(|(i, t)| intent.cost(t.flags).map(|c| (c, i as u32)))
        .collect();
    candidates.sort_unstable();
    candidates.into_iter().map(|(_, i)| i).collect()
}

/// Where a placement lives, from best to worst for GPU-only data: the steps of a
/// [`fallback_chain`]. A placement's tier is recorded on the resource; residency's device-local
/// budget (the backend's `Device::set_device_local_limit`) counts the two device tiers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryTier {
    /// Device-local memory the host cannot map.
    #[default]
    DeviceLocal,
    /// Device-local memory the host can map (ReBAR; every type of a unified-memory device).
    DeviceLocalHostVisible,
    /// Host memory the device reads over the bus: where a demoted or fallen-back resource lives.
    /// On a device whose every type is device-local (unified memory: integrated GPUs, lavapipe)
    /// it is the same memory type, in heaps of its own counted outside the device-local budget.
    Host,
}

impl MemoryTier {
    /// Every tier, best first.
    pub const ALL: [MemoryTier; 3] =
        [MemoryTier::DeviceLocal, MemoryTier::DeviceLocalHostVisible, MemoryTier::Host];

    /// The tier of a memory type by its flags.
    pub const fn of(flags: MemoryTypeFlags) -> MemoryTier {
        match (flags.device_local, flags.host_visible) {
            (true, false) => MemoryTier::DeviceLocal,
            (true, true) => MemoryTier::DeviceLocalHostVisible,
            (false, _) => MemoryTier::Host,
        }
    }

    /// Whether the device-local budget counts it.
    pub const fn is_device(self) -> bool {
        !matches!(self, MemoryTier::Host)
    }

    /// Its index in [`MemoryTier::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// One step of a [`fallback_chain`]: a memory type and the tier a placement there counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChainStep {
    /// The memory type.
    pub type_index: u32,
    /// The tier (the type's own, or [`MemoryTier::Host`] for the host step of a unified-memory
    /// device).
    pub tier: MemoryTier,
}

/// The memory-type fallback chain of `intent` among the types in `allowed_bits`: the
/// [`memory_type_candidates`] in order, each with its tier (device-local → device-local
/// host-visible → host). An allocation that does not fit a step within its budget goes to the
/// next one. On a device with no host memory type among the candidates (unified memory): for the
/// device intents (`DeviceLocal`, `DeviceLocalHostVisible`) the host-visible candidates are
/// appended once more as [`MemoryTier::Host`] steps, so that a device-local budget below the
/// device's memory still has somewhere to fall back to; the host intents (`Upload`, `Readback`:
/// staging) are [`MemoryTier::Host`] throughout, so they never count against it.
pub fn fallback_chain(types: &[MemoryType], allowed_bits: u32, intent: MemoryIntent) -> Vec<ChainStep> {
    let candidates = memory_type_candidates(types, allowed_bits, intent);
    let tier = |i: u32| MemoryTier::of(types[i as usize].flags);
    let mut chain: Vec<ChainStep> =
        candidates.iter().map(|&type_index| ChainStep { type_index, tier: tier(type_index) }).collect();
    let device_intent = matches!(intent, MemoryIntent::DeviceLocal | MemoryIntent::DeviceLocalHostVisible);
    let unified = chain.iter().all(|s| s.tier.is_device());
    if unified && !device_intent {
        chain.iter_mut().for_each(|s| s.tier = MemoryTier::Host);
    }
    if device_intent && unified {
        let host = candidates
            .iter()
            .filter(|&&i| types[i as usize].flags.host_visible)
            .map(|&type_index| ChainStep { type_index, tier: MemoryTier::Host });
        chain.extend(host.collect::<Vec<_>>());
    }
    chain
}

/// How heaps of one memory type grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapGrowth {
    /// The largest heap (a *page*) the library creates for sub-allocation.
    pub page_size: u64,
    /// The smallest heap it creates.
    pub min_heap_size: u64,
}

impl HeapGrowth {
    /// The default page size for a memory heap of `heap_size` bytes: 256 MiB for heaps over 1 GiB,
    /// else an eighth of the heap, rounded up to the explicit-heap alignment (64 KiB, the heap rules
    /// of `placement::heap`; VMA's rule otherwise).
    pub fn default_page_size(heap_size: u64) -> u64 {
        const LARGE: u64 = 256 << 20;
        if heap_size > 1 << 30 {
            LARGE
        } else {
            explicit_heap_size((heap_size / 8).max(EXPLICIT_HEAP_ALIGNMENT), false)
        }
    }

    /// Growth with `page_size` pages, starting at an eighth of a page (at least one explicit-heap
    /// alignment, 64 KiB).
    pub fn new(page_size: u64) -> HeapGrowth {
        let page_size = page_size.max(EXPLICIT_HEAP_ALIGNMENT);
        HeapGrowth { page_size, min_heap_size: (page_size / 8).max(EXPLICIT_HEAP_ALIGNMENT).min(page_size) }
    }

    /// Whether a request of `size` bytes should get memory of its own rather than a heap slot.
    pub fn wants_dedicated(&self, size: u64, driver_prefers_dedicated: bool) -> bool {
        driver_prefers_dedicated || size > self.page_size / 2
    }

    /// The size of the next heap, given the largest existing one and the request that needs it
    /// (at least the request, sized by the heap rules: [`explicit_heap_size`]).
    pub fn next_heap_size(&self, largest_existing: u64, request: u64) -> u64 {
        let grown = largest_existing.saturating_mul(2).max(self.min_heap_size).min(self.page_size);
        grown.max(explicit_heap_size(request, false))
    }
}

/// A heap's budget at a point in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapBudget {
    /// Bytes the process may use in this heap.
    pub budget: u64,
    /// Bytes the process uses now (all allocators, when the driver reports it).
    pub usage: u64,
}

impl HeapBudget {
    /// The budget of `heap`: the driver's figures when reported, else 80 % of the heap with
    /// `allocated_by_us` as usage.
    pub fn of(heap: &MemoryHeap, allocated_by_us: u64) -> HeapBudget {
        match (heap.budget, heap.usage) {
            (Some(budget), Some(usage)) => HeapBudget { budget, usage: usage.max(allocated_by_us) },
            _ => HeapBudget { budget: heap.size / 10 * 8, usage: allocated_by_us },
        }
    }

    /// Bytes still available under the budget.
    pub fn available(&self) -> u64 {
        self.budget.saturating_sub(self.usage)
    }

    /// Whether `bytes` more fit under the budget.
    pub fn allows(&self, bytes: u64) -> bool {
        bytes <= self.available()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(heap: u32, flags: &str) -> MemoryType {
        MemoryType {
            heap_index: heap,
            flags: MemoryTypeFlags {
                device_local: flags.contains('D'),
                host_visible: flags.contains('V'),
                host_coherent: flags.contains('C'),
                host_cached: flags.contains('$'),
                lazily_allocated: false,
                protected: false,
            },
        }
    }

    /// The H200's memory types as captured in `profile::captured::NVIDIA_H200_JSON`.
    fn h200() -> Vec<MemoryType> {
        vec![t(1, ""), t(0, "D"), t(1, "VC"), t(1, "VC$"), t(0, "DVC")]
    }

    #[test]
    fn h200_presets() {
        let types = h200();
        assert_eq!(memory_type_candidates(&types, !0, MemoryIntent::DeviceLocal)[0], 1);
        assert_eq!(memory_type_candidates(&types, !0, MemoryIntent::Upload)[0], 2);
        assert_eq!(memory_type_candidates(&types, !0, MemoryIntent::Readback)[0], 3);
        assert_eq!(memory_type_candidates(&types, !0, MemoryIntent::DeviceLocalHostVisible)[0], 4);
    }

    #[test]
    fn allowed_bits_restrict_and_order_falls_back() {
        let types = h200();
        assert_eq!(memory_type_candidates(&types, 0b10011, MemoryIntent::DeviceLocal), vec![1, 4, 0]);
        assert!(memory_type_candidates(&types, 0b00011, MemoryIntent::Upload).is_empty());
    }

    #[test]
    fn lavapipe_single_type_serves_every_intent() {
        let types = vec![t(0, "DVC$")];
        for intent in [
            MemoryIntent::DeviceLocal,
            MemoryIntent::Upload,
            MemoryIntent::Readback,
            MemoryIntent::DeviceLocalHostVisible,
        ] {
            assert_eq!(memory_type_candidates(&types, 1, intent), vec![0], "{intent:?}");
        }
    }

    #[test]
    fn fallback_chain_goes_device_local_then_rebar_then_host() {
        let chain = fallback_chain(&h200(), !0, MemoryIntent::DeviceLocal);
        let steps: Vec<(u32, MemoryTier)> = chain.iter().map(|s| (s.type_index, s.tier)).collect();
        assert_eq!(
            steps,
            vec![
                (1, MemoryTier::DeviceLocal),
                (4, MemoryTier::DeviceLocalHostVisible),
                (0, MemoryTier::Host),
                (2, MemoryTier::Host),
                (3, MemoryTier::Host),
            ]
        );
        // Upload memory is host memory already: no extra step.
        let upload = fallback_chain(&h200(), !0, MemoryIntent::Upload);
        assert_eq!(upload.len(), memory_type_candidates(&h200(), !0, MemoryIntent::Upload).len());
    }

    #[test]
    fn unified_memory_falls_back_to_its_own_type_in_the_host_tier() {
        let types = vec![t(0, "DVC$")];
        let chain = fallback_chain(&types, 1, MemoryIntent::DeviceLocal);
        assert_eq!(
            chain,
            vec![
                ChainStep { type_index: 0, tier: MemoryTier::DeviceLocalHostVisible },
                ChainStep { type_index: 0, tier: MemoryTier::Host },
            ]
        );
        let staging = ChainStep { type_index: 0, tier: MemoryTier::Host };
        assert_eq!(fallback_chain(&types, 1, MemoryIntent::Upload), vec![staging]);
        assert_eq!(fallback_chain(&types, 1, MemoryIntent::Readback), vec![staging]);
    }

    #[test]
    fn heaps_grow_by_doubling_up_to_a_page() {
        let g = HeapGrowth::new(256 << 20);
        assert_eq!(g.next_heap_size(0, 1), 32 << 20);
        assert_eq!(g.next_heap_size(32 << 20, 1), 64 << 20);
        assert_eq!(g.next_heap_size(256 << 20, 1), 256 << 20);
        assert_eq!(g.next_heap_size(0, (40 << 20) + 1), (40 << 20) + (64 << 10));
        assert!(g.wants_dedicated((128 << 20) + 1, false));
        assert!(!g.wants_dedicated(128 << 20, false));
        assert!(g.wants_dedicated(16, true));
        assert_eq!(HeapGrowth::default_page_size(24 << 30), 256 << 20);
        assert_eq!(HeapGrowth::default_page_size(512 << 20), 64 << 20);
    }

    #[test]
    fn budget_from_driver_or_estimate() {
        let heap = MemoryHeap {
            size: 1000 << 20,
            device_local: true,
            multi_instance: false,
            budget: None,
            usage: None,
        };
        let b = HeapBudget::of(&heap, 100 << 20);
        assert_eq!(b.budget, 800 << 20);
        assert_eq!(b.available(), 700 << 20);
        let heap = MemoryHeap { budget: Some(500), usage: Some(200), ..heap };
        let b = HeapBudget::of(&heap, 300);
        assert_eq!((b.budget, b.usage), (500, 300));
        assert!(b.allows(200) && !b.allows(201));
    }
}
