//! Under memory pressure, keep running (issue #34): heap budgets cached and refreshed cheaply with
//! headroom, the memory-type fallback chain (and its refusal when forbidden), demotion of cold
//! buffers to the host tier and their promotion back with contents checked. Lavapipe's heaps are
//! all host memory: pressure is made with a device-local limit (`Device::set_device_local_limit`)
//! below the device's memory, never with a mock. Every test runs under `with_gpu`
//! (synchronization validation on, no object may outlive it).

use residency_core::usage::BufferUsage;
use residency_vulkan::ash::vk;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    AllocationDesc, BufferDesc, Device, MemoryError, MemoryTier, ResidencyError, REFRESH_EVERY,
};

const MIB: u64 = 1 << 20;

/// The tier a device intent's chain starts in on this device.
fn preferred(device: &Device) -> MemoryTier {
    let types = &device.memory_properties().types;
    residency_core::memory::fallback_chain(types, u32::MAX, residency_core::memory::MemoryIntent::DeviceLocal)
        [0]
    .tier
}

#[test]
fn budgets_are_cached_refreshed_every_few_blocks_and_leave_headroom() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
        // Many placed buffers in one heap: one block, so no query of the driver per allocation.
        let before = device.pressure_stats().budget_refreshes;
        let small: Vec<_> = (0..200)
            .map(|i| device.create_buffer(&BufferDesc::new(format!("small {i}"), 4096, usage)).unwrap())
            .collect();
        assert!(device.pressure_stats().budget_refreshes - before <= 1, "{:?}", device.pressure_stats());
        // Memory of their own: a block each; the budgets are queried once per REFRESH_EVERY blocks.
        let before = device.pressure_stats().budget_refreshes;
        let blocks = 2 * REFRESH_EVERY;
        let own: Vec<_> = (0..blocks)
            .map(|i| {
                device.create_buffer(&BufferDesc::new(format!("own {i}"), 4096, usage).committed()).unwrap()
            })
            .collect();
        let refreshes = device.pressure_stats().budget_refreshes - before;
        if device.features().memory_budget {
            assert!((2..=3).contains(&refreshes), "{refreshes} refreshes for {blocks} blocks");
        } else {
            assert_eq!(refreshes, 0);
        }
        // Headroom: residency's budget is the driver's less the headroom.
        device.set_budget_headroom_percent(10);
        for heap in device.heap_budgets() {
            if let Some(driver) = heap.driver_budget {
                assert_eq!(heap.budget, driver - driver / 100 * 10, "{heap:?}");
            }
            assert_eq!(heap.available, heap.budget.saturating_sub(heap.usage));
        }
        assert_eq!(device.budget_headroom_percent(), 10);
        device.set_budget_headroom_percent(200);
        assert_eq!(device.budget_headroom_percent(), 50, "at most half is left to others");
        drop((small, own));
    });
}

#[test]
fn an_allocation_over_the_device_local_limit_falls_back_to_the_host_tier_and_is_refused_when_forbidden() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        // A first buffer fits the device tier.
        let first = device.create_buffer(&BufferDesc::new("fits", 4096, usage)).unwrap();
        assert_eq!(first.memory_tier(), Some(preferred(device)));
        // The device tier is exhausted: no new device block may be made.
        let held = device.pressure_stats().device_tier_bytes;
        device.set_device_local_limit(Some(held));
        assert_eq!(device.device_local_limit(), Some(held));
        let before = device.pressure_stats();

        // Memory of its own, then a placed buffer larger than any hole of the device tier's heaps.
        let own =
            device.create_buffer(&BufferDesc::new("own, fell back", 4 * MIB, usage).committed()).unwrap();
        assert_eq!(own.memory_tier(), Some(MemoryTier::Host));
        let placed = device.create_buffer(&BufferDesc::new("placed, fell back", 40 * MIB, usage)).unwrap();
        assert_eq!(placed.memory_tier(), Some(MemoryTier::Host));
        let raw = device
            .allocate_memory(
                &vk::MemoryRequirements { size: MIB, alignment: 256, memory_type_bits: u32::MAX },
                &AllocationDesc::new("raw, fell back").dedicated(),
            )
            .unwrap();
        assert_eq!(raw.memory_tier(), MemoryTier::Host);
        let stats = device.pressure_stats().since(&before);
        assert_eq!(stats.fallbacks, 3, "{stats:?}");
        assert_eq!(stats.fallback_bytes, 45 * MIB);
        assert_eq!(stats.device_tier_bytes, held, "nothing more in the device tier");
        assert!(stats.host_tier_bytes >= 45 * MIB);

        // The fallen-back buffer works: bytes written and read back by a GPU copy.
        let mut own = own;
        if own.is_mappable() {
            let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
            own.write(0, &bytes).unwrap();
            assert_eq!(device.read_back(&own, 0, 4096).unwrap(), bytes);
        }

        // Forbidden: refused with the device tier's typed error, nothing allocated.
        let objects = device.ledger().memory_objects();
        let refused = device
            .create_buffer(&BufferDesc::new("no fallback", 4 * MIB, usage).committed().without_fallback())
            .unwrap_err();
        assert!(matches!(refused, MemoryError::OutOfBudget { .. }), "{refused}");
        assert!(refused.is_out_of_memory());
        assert_eq!(device.ledger().memory_objects(), objects);
        assert_eq!(device.pressure_stats().since(&before).fallbacks_refused, 1);

        // The dump shows the host-tier heap the placed buffer went to.
        let report = device.memory_report();
        let named = report.memory_types.iter().flat_map(|t| &t.blocks).any(|b| b.name.contains("host tier"));
        let unified = device.memory_properties().types.iter().all(|t| t.flags.device_local);
        assert_eq!(named, unified, "a unified-memory device's host tier has heaps of its own");

        // Room again: new allocations go to the device tier.
        device.set_device_local_limit(None);
        let back = device.create_buffer(&BufferDesc::new("room again", 4 * MIB, usage).committed()).unwrap();
        assert_eq!(back.memory_tier(), Some(preferred(device)));
        drop((first, own, placed, raw, back));
    });
}
