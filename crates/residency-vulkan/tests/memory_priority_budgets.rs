//! Memory priority (VK_EXT_memory_priority) and the one call that returns every heap's budget and
//! usage, on a real device under synchronization validation.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::usage::{BufferPoolUsage, BufferUsage, ImageUsage};
use residency_vulkan::ash::vk;
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    AllocationDesc, BufferDesc, BufferInit, BufferPlacement, BufferPool, BufferPoolDesc, ImageDesc,
    MemoryError,
};
use std::sync::Arc;

/// VK_EXT_memory_priority is enabled only when asked (it serialises buffer creation on the
/// NVIDIA driver); without it a priority is still kept on the resource and still gives memory of
/// its own, and nothing reaches the driver that it did not enable.
#[test]
fn memory_priority_is_enabled_only_when_asked() {
    let Some(asked) = with_gpu(|set| set.devices()[0].features().memory_priority) else { return };
    let desc = residency_vulkan::testing::test_desc().with_memory_priority(false).with_min_devices(1);
    assert!(!residency_vulkan::DeviceSetDesc::default().memory_priority, "off by default");
    let set = residency_vulkan::DeviceSet::new(&desc).unwrap();
    let device = &set.devices()[0];
    assert!(!device.features().memory_priority, "not asked for: not enabled");
    // The harness asks for it; lavapipe and the NVIDIA driver both have it.
    if residency_vulkan::testing::gpu_required() {
        assert!(asked, "the harness's devices enable memory priority where the driver has it");
    }
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
    let high =
        device.create_buffer(&BufferDesc::new("high priority", 4096, usage).with_priority(1.0)).unwrap();
    assert_eq!(high.placement(), BufferPlacement::Committed, "a priority still has memory of its own");
    assert_eq!(high.priority(), 1.0);
    drop(high);
    assert!(set.validation_log().problems_since(0).is_empty());
    set.close().unwrap();
}

#[test]
fn a_priority_gives_memory_of_its_own_and_a_bad_one_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // Lavapipe and the NVIDIA driver both have the extension: the harness enables it.
        println!("memory_priority enabled: {}", device.features().memory_priority);
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
        // Placed first: its shared heap stays (the general allocator keeps one empty heap).
        let plain = device.create_buffer(&BufferDesc::new("default priority", 4096, usage)).unwrap();
        assert_eq!(plain.placement(), BufferPlacement::Placed);
        let objects = device.ledger().memory_objects();
        let high =
            device.create_buffer(&BufferDesc::new("high priority", 4096, usage).with_priority(1.0)).unwrap();
        assert_eq!(
            high.placement(),
            BufferPlacement::Committed,
            "a priority belongs to a whole VkDeviceMemory"
        );
        let low =
            device.create_buffer(&BufferDesc::new("low priority", 4096, usage).with_priority(0.0)).unwrap();
        assert_ne!(high.memory().0, low.memory().0);
        let image = device
            .create_image(
                &ImageDesc::new_2d("high priority image", Format::R8G8B8A8Unorm, 64, 64, ImageUsage::SAMPLED)
                    .with_priority(0.9),
            )
            .unwrap();
        let requirements = vk::MemoryRequirements { size: 65536, alignment: 256, memory_type_bits: u32::MAX };
        let mut raw = device
            .allocate_memory(&requirements, &AllocationDesc::new("raw high").with_priority(0.75))
            .unwrap();
        assert!(raw.is_dedicated());
        // The application's own word (VMA's pUserData) on allocations, images and buffers.
        assert_eq!(raw.user_data(), 0);
        raw.set_user_data(42);
        assert_eq!(raw.user_data(), 42);
        let mut image = image;
        image.set_user_data(7);
        assert_eq!(image.user_data(), 7);
        let mut high = high;
        high.set_user_data(u64::MAX);
        assert_eq!(high.user_data(), u64::MAX);

        // Out of [0, 1] or not a number: a typed error, nothing allocated.
        let held = device.ledger().memory_objects();
        for bad in [1.5f32, -0.1, f32::NAN] {
            let err =
                device.create_buffer(&BufferDesc::new("bad", 4096, usage).with_priority(bad)).unwrap_err();
            assert!(matches!(err, MemoryError::InvalidPriority { .. }), "{err}");
            let err = device
                .allocate_memory(&requirements, &AllocationDesc::new("bad raw").with_priority(bad))
                .unwrap_err();
            assert!(matches!(err, MemoryError::InvalidPriority { .. }), "{err}");
            let err = BufferPool::new(
                Arc::clone(device),
                BufferPoolDesc::new("bad pool", BufferPoolUsage::Unknown).with_priority(bad),
            )
            .unwrap_err();
            assert!(matches!(err, MemoryError::InvalidPriority { .. }), "{err}");
        }
        assert_eq!(device.ledger().memory_objects(), held, "a refused priority allocated nothing");

        // A pool's pages carry its priority; its buffers work as in any pool.
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("prioritised pool", BufferPoolUsage::Unknown)
                .with_memory(MemoryIntent::Upload)
                .with_page_size(1 << 20)
                .with_priority(0.25),
        )
        .unwrap();
        let mut b = pool.init_buffer(&BufferInit::new("in prioritised pool", 256).with_usage(usage)).unwrap();
        b.write(0, &[7; 256]).unwrap();
        let mut back = [0; 256];
        b.read(0, &mut back).unwrap();
        assert_eq!(back, [7; 256]);
        drop((b, pool, high, low, plain, image, raw));
        device.wait_submitted().unwrap();
        assert_eq!(device.ledger().memory_objects(), objects);
    });
}

#[test]
fn heap_budgets_report_every_heap_and_follow_allocations_and_limits() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let before = device.heap_budgets();
        assert_eq!(before.len(), device.memory_properties().heaps.len());
        for (i, heap) in before.iter().enumerate() {
            assert_eq!(heap.index, i as u32);
            assert!(heap.budget <= heap.size, "{heap:?}");
            assert!(heap.usage >= heap.residency_bytes, "{heap:?}");
            assert_eq!(heap.available, heap.budget.saturating_sub(heap.usage));
            assert_eq!(heap.driver_budget.is_some(), device.features().memory_budget);
        }
        // A committed 8 MiB device-local buffer shows in its heap's residency bytes.
        let desc = BufferDesc::new("budgeted", 8 << 20, BufferUsage::STORAGE).committed();
        let buffer = device.create_buffer(&desc).unwrap();
        let type_heap = |t: u32| device.memory_properties().types[t as usize].heap_index;
        let heap = device
            .heap_budgets()
            .into_iter()
            .find(|h| h.residency_bytes > before[h.index as usize].residency_bytes)
            .expect("one heap grew");
        assert!(heap.residency_bytes - before[heap.index as usize].residency_bytes >= 8 << 20);
        assert!(device
            .memory_properties()
            .types
            .iter()
            .enumerate()
            .any(|(t, _)| type_heap(t as u32) == heap.index));
        // An application cap shows as the budget, and allocations over it are refused.
        device.ledger().set_heap_limit(heap.index, Some(heap.residency_bytes + (1 << 20)));
        let capped = device.heap_budgets()[heap.index as usize];
        assert_eq!(capped.limit, Some(heap.residency_bytes + (1 << 20)));
        assert_eq!(capped.budget, heap.residency_bytes + (1 << 20));
        assert_eq!(capped.available, 1 << 20);
        // Over the cap: refused in that heap. A device with another memory type for the intent in
        // another heap (the H200's non-device-local fallback type) places it there instead.
        let over =
            device.create_buffer(&BufferDesc::new("over the cap", 4 << 20, BufferUsage::STORAGE).committed());
        match &over {
            Err(e) => assert!(matches!(e, MemoryError::OutOfBudget { .. }), "{e}"),
            Ok(_) => assert_eq!(
                device.heap_budgets()[heap.index as usize].residency_bytes,
                heap.residency_bytes,
                "not in the capped heap"
            ),
        }
        drop(over);
        device.ledger().set_heap_limit(heap.index, None);
        drop(buffer);
        device.wait_submitted().unwrap();
        let after = device.heap_budgets();
        assert_eq!(after[heap.index as usize].residency_bytes, before[heap.index as usize].residency_bytes);
        assert_eq!(after[heap.index as usize].limit, None);
    });
}
