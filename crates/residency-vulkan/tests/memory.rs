//! Placed and committed buffers, buffer pools, budgets and out-of-memory on a real device.

use residency_core::memory::MemoryIntent;
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, BufferInit, BufferPlacement, BufferPool, BufferPoolDesc, MemoryError};
use std::sync::Arc;

#[test]
fn placed_buffers_share_a_heap_and_keep_their_data() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC;
        let mut buffers: Vec<_> = (0..8u64)
            .map(|i| {
                let desc = BufferDesc::new(format!("placed {i}"), 100 + i * 37, usage)
                    .with_intent(MemoryIntent::Upload);
                device.create_buffer(&desc).unwrap()
            })
            .collect();
        let memory = buffers[0].memory().0;
        let mut ranges: Vec<_> = buffers.iter().map(|b| (b.memory().1, b.memory().1 + b.size())).collect();
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "placed buffers overlap: {pair:?}");
        }
        for (i, b) in buffers.iter_mut().enumerate() {
            assert_eq!(b.placement(), BufferPlacement::Placed);
            assert_eq!(b.memory().0, memory, "small buffers share one heap");
            let data: Vec<u8> = (0..b.size()).map(|j| (i as u64 * 31 + j) as u8).collect();
            b.write(0, &data).unwrap();
        }
        for (i, b) in buffers.iter().enumerate() {
            let mut back = vec![0; b.size() as usize];
            b.read(0, &mut back).unwrap();
            assert!(back.iter().enumerate().all(|(j, &v)| v == (i as u64 * 31 + j as u64) as u8));
        }
        let err = buffers[0].write(90, &[0; 20]).unwrap_err();
        assert!(err.to_string().contains("outside"), "{err}");
        for b in buffers {
            drop(b);
        }
    });
}

#[test]
fn committed_buffer_has_memory_of_its_own() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let a = device
            .create_buffer(&BufferDesc::new("committed", 4096, BufferUsage::VERTEX).committed())
            .unwrap();
        let b = device.create_buffer(&BufferDesc::new("placed", 4096, BufferUsage::VERTEX)).unwrap();
        assert_eq!(a.placement(), BufferPlacement::Committed);
        assert_eq!(a.memory().1, 0);
        assert_ne!(a.memory().0, b.memory().0);
        drop(a);
        drop(b);
    });
}

#[test]
fn unknown_flags_pool_places_buffers_with_their_own_usage_side_by_side() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = BufferPool::new(
            Arc::clone(&device),
            BufferPoolDesc::new("mixed", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let requests = [
            BufferInit::new("vertices", 3000).with_usage(BufferUsage::VERTEX | BufferUsage::COPY_DST),
            BufferInit::new("indices", 600).with_usage(BufferUsage::INDEX | BufferUsage::STORAGE),
            BufferInit::new("constants", 200).with_usage(BufferUsage::UNIFORM).with_alignment(256),
            BufferInit::new("particles", 5000).with_usage(BufferUsage::STORAGE),
        ];
        let buffers: Vec<_> = requests.iter().map(|r| pool.init_buffer(r).unwrap()).collect();
        let page = buffers[0].memory().0;
        let raws: std::collections::HashSet<_> = buffers.iter().map(|b| b.raw()).collect();
        assert_eq!(raws.len(), 4, "each placed buffer is its own VkBuffer");
        for b in &buffers {
            assert_eq!(b.placement(), BufferPlacement::Placed);
            assert_eq!(b.memory().0, page, "all four live on one page");
            assert_eq!(b.offset(), 0);
        }
        assert_eq!(buffers[2].memory().1 % 256, 0, "the alignment floor is honoured");
        assert_eq!(buffers[1].usage(), BufferUsage::INDEX | BufferUsage::STORAGE);
        let stats = pool.stats();
        assert_eq!((stats.pages, stats.buffers), (1, 4));
        assert_eq!(stats.page_bytes, 1 << 20);

        let err = pool.init_buffer(&BufferInit::new("no flags", 64)).unwrap_err();
        assert!(err.to_string().contains("own flags"), "{err}");
        // Larger than a page: a page of its own (issue #31), gone with it.
        let big =
            pool.init_buffer(&BufferInit::new("too big", 2 << 20).with_usage(BufferUsage::STORAGE)).unwrap();
        assert_eq!(big.existing_allocation_info().offset, 0);
        drop(big);
        device.wait_submitted().unwrap();
        device.maintain();
        assert_eq!((pool.stats().pages, pool.stats().buffers), (1, 4));
        let err =
            pool.init_buffer(&BufferInit::new("odd", 64).with_usage(BufferUsage::STORAGE).with_alignment(48));
        assert!(matches!(err, Err(MemoryError::InvalidRequest { .. })));
        assert_eq!(pool.stats().buffers, 4, "failed requests change nothing");
        for b in buffers {
            pool.free_buffer(b).unwrap();
        }
        assert_eq!(pool.stats().buffers, 0);
        assert_eq!(pool.stats().used_bytes, 0);
    });
}

#[test]
fn known_flags_pool_hands_out_ranges_of_one_page_buffer() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let flags = BufferUsage::UNIFORM | BufferUsage::STORAGE | BufferUsage::COPY_DST;
        let pool = BufferPool::new(
            Arc::clone(&device),
            BufferPoolDesc::new("constants", BufferPoolUsage::Known(flags))
                .with_memory(MemoryIntent::Upload)
                .with_page_size(256 << 10),
        )
        .unwrap();
        let mut buffers: Vec<_> =
            (0..10).map(|i| pool.init_buffer(&BufferInit::new(format!("cb {i}"), 100)).unwrap()).collect();
        let page_buffer = buffers[0].raw();
        let align = device
            .limits()
            .min_uniform_buffer_offset_alignment
            .max(device.limits().min_storage_buffer_offset_alignment);
        for (i, b) in buffers.iter_mut().enumerate() {
            assert_eq!(b.placement(), BufferPlacement::Range);
            assert_eq!(b.raw(), page_buffer, "ranges of one VkBuffer");
            assert_eq!(b.offset() % align, 0);
            b.write(0, &[i as u8; 100]).unwrap();
        }
        for (i, b) in buffers.iter().enumerate() {
            let mut back = [0u8; 100];
            b.read(0, &mut back).unwrap();
            assert_eq!(back, [i as u8; 100]);
        }
        let err =
            pool.init_buffer(&BufferInit::new("vertex", 16).with_usage(BufferUsage::VERTEX)).unwrap_err();
        assert!(err.to_string().contains("not within the pool's flags"), "{err}");
        for b in buffers {
            pool.free_buffer(b).unwrap();
        }
    });
}

#[test]
fn a_buffer_of_another_pool_is_refused() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let desc = BufferPoolDesc::new("a", BufferPoolUsage::Unknown).with_page_size(1 << 20);
        let a = BufferPool::new(Arc::clone(&device), desc.clone()).unwrap();
        let b = BufferPool::new(Arc::clone(&device), BufferPoolDesc { name: "b".into(), ..desc }).unwrap();
        let buffer = a.init_buffer(&BufferInit::new("x", 64).with_usage(BufferUsage::STORAGE)).unwrap();
        let buffer = b.free_buffer(buffer).unwrap_err();
        a.free_buffer(*buffer.resource).unwrap();
    });
}

#[test]
fn over_budget_is_a_typed_error_and_the_pool_recovers() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let pool = BufferPool::new(
            Arc::clone(&device),
            BufferPoolDesc::new("budgeted", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let heap = device.memory_properties().types[pool.memory_type() as usize].heap_index;
        let used = device.ledger().heap_bytes(heap);
        device.ledger().set_heap_limit(heap, Some(used + (2 << 20)));
        let request =
            |i: usize| BufferInit::new(format!("big {i}"), 900 << 10).with_usage(BufferUsage::STORAGE);
        let first = pool.init_buffer(&request(0)).unwrap();
        let second = pool.init_buffer(&request(1)).unwrap();
        let stats = pool.stats();
        let err = pool.init_buffer(&request(2)).unwrap_err();
        assert!(matches!(err, MemoryError::OutOfBudget { heap: h, .. } if h == heap), "{err}");
        assert_eq!(pool.stats(), stats, "the failed request changed nothing");
        pool.free_buffer(first).unwrap();
        let third = pool.init_buffer(&request(2)).expect("room again after a free");
        device.ledger().set_heap_limit(heap, None);
        let fourth = pool.init_buffer(&request(3)).expect("no limit, no error");
        for b in [second, third, fourth] {
            pool.free_buffer(b).unwrap();
        }
    });
}

#[test]
fn out_of_device_memory_is_a_typed_error_and_nothing_leaks() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let objects = device.ledger().memory_objects();
        let pool = BufferPool::new(
            Arc::clone(&device),
            BufferPoolDesc::new("oom", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        device.ledger().inject_out_of_memory(1);
        let err =
            pool.init_buffer(&BufferInit::new("victim", 4096).with_usage(BufferUsage::STORAGE)).unwrap_err();
        assert!(matches!(err, MemoryError::OutOfDeviceMemory { .. }), "{err}");
        assert_eq!(device.ledger().memory_objects(), objects, "no memory object left behind");
        let ok =
            pool.init_buffer(&BufferInit::new("survivor", 4096).with_usage(BufferUsage::STORAGE)).unwrap();
        pool.free_buffer(ok).unwrap();

        // Every candidate memory type fails (the H200 has two device-local types: a failure on the
        // first falls back to the second, as it should).
        let before = device.ledger().memory_objects();
        device.ledger().inject_out_of_memory(64);
        let desc = BufferDesc::new("committed victim", 4096, BufferUsage::STORAGE).committed();
        assert!(matches!(device.create_buffer(&desc), Err(MemoryError::OutOfDeviceMemory { .. })));
        device.ledger().inject_out_of_memory(0);
        assert_eq!(device.ledger().memory_objects(), before, "no memory object left behind");
        let b = device.create_buffer(&desc).unwrap();
        drop(b);
    });
}

#[test]
fn placed_images_and_buffers_never_share_a_granularity_page() {
    use residency_core::format::Format;
    use residency_core::usage::ImageUsage;
    use residency_vulkan::ImageDesc;
    with_gpu(|set| {
        let device = &set.devices()[0];
        let granularity = device.limits().buffer_image_granularity;
        let usage = ImageUsage::SAMPLED | ImageUsage::COPY_DST;
        let mut images = Vec::new();
        let mut buffers = Vec::new();
        for i in 0..6u32 {
            let buffer = device.create_buffer(&BufferDesc::new(
                format!("b{i}"),
                100 + u64::from(i),
                BufferUsage::STORAGE,
            ));
            buffers.push(buffer.unwrap());
            let desc = ImageDesc::new_2d(format!("i{i}"), Format::R8G8B8A8Unorm, 16 + i, 16, usage);
            images.push(device.create_image(&desc).unwrap());
        }
        let view = images[0].create_view(0..1).unwrap();
        drop(view);
        for image in &images {
            let (memory, offset) = image.memory();
            assert!(!image.is_committed());
            for buffer in &buffers {
                let (bm, bo) = buffer.memory();
                if bm != memory {
                    continue;
                }
                let image_pages = offset / granularity..=(offset + image.size() - 1) / granularity;
                let buffer_pages = bo / granularity..=(bo + buffer.size() - 1) / granularity;
                assert!(
                    image_pages.end() < buffer_pages.start() || buffer_pages.end() < image_pages.start(),
                    "{} at {offset} and {} at {bo} share a {granularity} B page",
                    image.name(),
                    buffer.name()
                );
            }
        }
        let committed = device
            .create_image(&ImageDesc::new_2d("committed", Format::R8G8B8A8Unorm, 64, 64, usage).committed())
            .unwrap();
        assert!(committed.is_committed() && committed.memory().1 == 0);
        let bad = ImageDesc::new_2d("too big", Format::R8G8B8A8Unorm, 1 << 20, 4, usage);
        assert!(matches!(device.create_image(&bad), Err(MemoryError::Unsatisfiable { .. })));
        drop(committed);
        drop(images);
        drop(buffers);
    });
}

#[test]
fn pool_ranges_are_light_ranges_of_page_buffers_released_after_the_gpu() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = uniform_upload_pool(device, "range pool");
        let floor = device.limits().min_uniform_buffer_offset_alignment.max(16);
        let mut ranges: Vec<_> = (0..8u64).map(|i| pool.allocate_range(100 + i, 0).unwrap()).collect();
        assert_disjoint(ranges.iter().map(|r| (r.offset(), r.size())));
        for (i, r) in ranges.iter_mut().enumerate() {
            assert_eq!(r.offset() % floor, 0, "uniform ranges at minUniformBufferOffsetAlignment");
            assert_eq!(r.memory().1, r.offset());
            r.write(0, &vec![i as u8 + 1; r.size() as usize]).unwrap();
        }
        let mut back = vec![0; 100];
        ranges[0].read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 1));
        assert!(ranges[0].write(90, &[0; 20]).is_err(), "outside the range");
        // The GPU copies range 3 out while the host still holds a use: the range stays allocated
        // after its drop until the use has passed.
        let mut r3 = ranges.remove(3);
        let gated = GatedCopy::new(device, "range", r3.buffer(), r3.offset(), r3.size());
        r3.used_until(gated.gate.at(1)).unwrap();
        let used = pool.stats().used_bytes;
        drop(r3);
        assert_eq!(pool.stats().used_bytes, used, "held by the declared use and the pending copy");
        let out = gated.open(device);
        device.maintain();
        assert!(pool.stats().used_bytes < used, "released after the copy and the use");
        let mut copied = vec![0; 103];
        out.read(0, &mut copied).unwrap();
        assert!(copied.iter().all(|&b| b == 4), "range 3's bytes were copied");
        // Unknown-flags pools have no page buffers; bad requests are typed.
        let unknown =
            BufferPool::new(Arc::clone(device), BufferPoolDesc::new("no ranges", BufferPoolUsage::Unknown))
                .unwrap();
        assert!(matches!(unknown.allocate_range(64, 0), Err(MemoryError::Unsatisfiable { .. })));
        assert!(matches!(pool.allocate_range(0, 0), Err(MemoryError::InvalidRequest { .. })));
        assert!(matches!(pool.allocate_range(64, 3), Err(MemoryError::InvalidRequest { .. })));
        // Larger than a page: a page of its own (issue #31), freed with it.
        let big = pool.allocate_range(2 << 20, 0).unwrap();
        assert!(big.size() == 2 << 20 && big.offset() == 0);
        drop(big);
        drop(ranges);
        device.wait_submitted().unwrap();
        assert_eq!(pool.stats().used_bytes, 0);
        pool.check_invariants().unwrap();
    });
}

/// Issue #31: a placed pool buffer's range goes back through its arena, the parent its life
/// holds (no `Weak` of its own): at once when released with nothing pending, and when released
/// with a use pending, only once the use has passed (its owner is the arena's `Weak` while it is
/// queued). Its `VkBuffer` and ledger entry go with it.
#[test]
fn placed_pool_ranges_return_at_once_or_after_their_uses() {
    use residency_vulkan::ash::vk;
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("returning pool", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let init = BufferInit::new("returning", 1000).with_usage(BufferUsage::STORAGE);
        // Holds the page, so that the pool's used bytes are the other buffers'.
        let anchor = pool.init_buffer(&init).unwrap();
        let base = pool.stats().used_bytes;
        let named = |name: &str| device.ledger().live_objects().iter().filter(|o| &*o.name == name).count();
        let buffer = pool
            .init_buffer(&BufferInit::new("returned at once", 1000).with_usage(BufferUsage::STORAGE))
            .unwrap();
        assert!(pool.stats().used_bytes > base);
        assert_eq!(named("returned at once"), 1);
        drop(buffer);
        assert_eq!(pool.stats().used_bytes, base, "returned at once");
        assert_eq!(named("returned at once"), 0, "untracked with it");
        let gate = device.create_timeline("placed gate").unwrap();
        let buffer = pool
            .init_buffer(&BufferInit::new("returned later", 1000).with_usage(BufferUsage::STORAGE))
            .unwrap();
        buffer.used_until(gate.at(1)).unwrap();
        // SAFETY: the test signals the gate from the host below, waiting for nothing first.
        unsafe { gate.signal_submitted(1) };
        drop(buffer);
        device.maintain();
        assert!(pool.stats().used_bytes > base, "held by its declared use");
        assert_eq!(named("returned later"), 1, "still tracked while queued");
        assert_eq!(pool.stats().buffers, 1, "the queued one no longer counts as live");
        let info = vk::SemaphoreSignalInfo::default().semaphore(gate.raw()).value(1);
        // SAFETY: a timeline semaphore of this device, signalled once, upwards.
        unsafe { device.raw().signal_semaphore(&info) }.unwrap();
        device.maintain();
        assert_eq!(pool.stats().used_bytes, base, "returned after its use");
        assert_eq!(named("returned later"), 0);
        pool.check_invariants().unwrap();
        drop(anchor);
    });
}

/// Issue 31's lent handles: a `PoolRange` released to the pages leaves its arena handle's
/// reference there for the thread's next range, so the pool must take them back when dropped; its
/// pages then go with its last live range, dropped on another thread after the pool.
#[test]
fn released_ranges_lend_their_handle_and_the_pool_still_goes_with_its_last_range() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let objects = device.ledger().memory_objects();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
        let pool = BufferPool::new(
            Arc::clone(&device),
            BufferPoolDesc::new("lent handles", BufferPoolUsage::Known(usage)).with_page_size(1 << 20),
        )
        .unwrap();
        // One thread: no range cache, every release goes to the pages (and lends its reference),
        // every allocation after the first round takes one over.
        for round in 0..3u64 {
            let ranges: Vec<_> =
                (0..64u64).map(|i| pool.allocate_range(64 + i * 16 + round, 0).unwrap()).collect();
            assert_disjoint(ranges.iter().map(|r| (r.offset(), r.size())));
            drop(ranges);
            assert_eq!(pool.stats().used_bytes, 0, "round {round}: every range went back");
        }
        let kept: Vec<_> = (0..8).map(|_| pool.allocate_range(256, 0).unwrap()).collect();
        // References are still lent when the pool goes.
        drop(pool.allocate_range(512, 0).unwrap());
        drop(pool.allocate_range(1024, 0).unwrap());
        pool.check_invariants().unwrap();
        drop(pool);
        device.maintain();
        assert!(device.ledger().memory_objects() > objects, "the kept ranges keep the page");
        std::thread::spawn(move || drop(kept)).join().unwrap();
        device.wait_submitted().unwrap();
        device.maintain();
        assert_eq!(device.ledger().memory_objects(), objects, "the pool's page went with its last range");
    });
}

/// Issue #31: a thread's `LocalRanges` (pages of its own, no lock) — ranges that do not overlap,
/// sit at the flags' floors, read and write, are released at once or after the GPU's uses (the
/// retire queue returns them to the arena's box), a page of their own when larger than a page,
/// typed refusals; dropping the arena with a range still queued retires its pages after that use.
#[test]
fn local_ranges_are_the_threads_own_pages_released_after_the_gpu() {
    use residency_vulkan::ash::vk;
    with_gpu(|set| {
        let device = &set.devices()[0];
        device.release_empty_heaps();
        let objects = device.ledger().memory_objects();
        let pool = uniform_upload_pool(device, "local pool");
        let local = pool.local_ranges().unwrap();
        assert_eq!(local.stats().pages, 0, "no memory before the first range");
        let floor = device.limits().min_uniform_buffer_offset_alignment.max(16);
        let mut ranges: Vec<_> = (0..8u64).map(|i| local.allocate(100 + i, 0).unwrap()).collect();
        assert_disjoint(ranges.iter().map(|r| (r.offset(), r.size())));
        for (i, r) in ranges.iter_mut().enumerate() {
            assert_eq!(r.offset() % floor, 0, "uniform ranges at minUniformBufferOffsetAlignment");
            assert_eq!(r.memory().1, r.offset());
            assert!(r.is_mappable());
            r.write(0, &vec![i as u8 + 1; r.size() as usize]).unwrap();
        }
        assert_eq!(local.allocate(64, 4096).unwrap().offset() % 4096, 0, "the caller's alignment on top");
        let mut back = vec![0; 100];
        ranges[0].read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 1));
        assert!(ranges[0].write(90, &[0; 20]).is_err(), "outside the range");
        assert_eq!(pool.stats().used_bytes, 0, "the pool's own arenas are not used");
        // The GPU copies range 3 out while the host still holds a use: the range stays allocated
        // after its drop until the use has passed, then the retire queue returns it.
        let mut r3 = ranges.remove(3);
        let gated = GatedCopy::new(device, "local", r3.buffer(), r3.offset(), r3.size());
        r3.used_until(gated.gate.at(1)).unwrap();
        let used = local.stats().used_bytes;
        drop(r3);
        device.maintain();
        assert_eq!(local.stats().used_bytes, used, "held by the declared use and the pending copy");
        let out = gated.open(device);
        device.maintain();
        assert!(local.stats().used_bytes < used, "returned after the copy and the use");
        let mut copied = vec![0; 103];
        out.read(0, &mut copied).unwrap();
        assert!(copied.iter().all(|&b| b == 4), "range 3's bytes were copied");
        // Typed refusals.
        let unknown = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("no local ranges", BufferPoolUsage::Unknown),
        )
        .unwrap();
        assert!(matches!(unknown.local_ranges(), Err(MemoryError::Unsatisfiable { .. })));
        assert!(matches!(local.allocate(0, 0), Err(MemoryError::InvalidRequest { .. })));
        assert!(matches!(local.allocate(64, 3), Err(MemoryError::InvalidRequest { .. })));
        if let Some(other) = set.devices().get(1) {
            assert!(ranges[0].used_until(other.frames_from_now(1)).is_err(), "a use of another device");
        }
        // Larger than a page: a page of its own, freed with it.
        let pages = local.stats().pages;
        let big = local.allocate(2 << 20, 0).unwrap();
        assert!(big.size() == 2 << 20 && big.offset() == 0);
        assert_eq!(local.stats().pages, pages + 1);
        drop(big);
        assert_eq!(local.stats().pages, pages, "the big range's page went with it");
        drop(ranges);
        assert_eq!(local.stats().used_bytes, 0);
        // A range queued when the arena goes: its pages wait for its use.
        let gate2 = device.create_timeline("local gate 2").unwrap();
        let mut last = local.allocate(256, 0).unwrap();
        last.used_until(gate2.at(1)).unwrap();
        // SAFETY: the test signals the gate from the host below, waiting for nothing first.
        unsafe { gate2.signal_submitted(1) };
        drop(last);
        drop(local);
        device.maintain();
        assert!(device.ledger().memory_objects() > objects, "the queued range keeps its page");
        let info = vk::SemaphoreSignalInfo::default().semaphore(gate2.raw()).value(1);
        // SAFETY: a timeline semaphore of this device, signalled once, upwards.
        unsafe { device.raw().signal_semaphore(&info) }.unwrap();
        device.maintain();
        drop(out);
        drop(pool);
        device.wait_submitted().unwrap();
        device.maintain();
        device.release_empty_heaps();
        assert_eq!(device.ledger().memory_objects(), objects, "every page went");
    });
}

/// A copy of a range out to a readback buffer, submitted behind a gate the host opens later
/// (`open`: signals it, waits for the copy, returns the readback buffer), so that the range is
/// used by pending GPU work while the test drops it.
struct GatedCopy {
    gate: residency_vulkan::Timeline,
    context: residency_vulkan::CommandContext,
    copy: residency_vulkan::Submission,
    out: residency_vulkan::Buffer,
}

impl GatedCopy {
    fn new(
        device: &Arc<residency_vulkan::Device>,
        name: &str,
        src: residency_vulkan::ash::vk::Buffer,
        offset: u64,
        size: u64,
    ) -> GatedCopy {
        use residency_vulkan::ash::vk;
        let desc = BufferDesc::new(format!("{name} out"), 4096, BufferUsage::COPY_DST)
            .with_intent(MemoryIntent::Readback);
        let out = device.create_buffer(&desc).unwrap();
        let gate = device.create_timeline(&format!("{name} gate")).unwrap();
        let context = residency_vulkan::CommandContext::new(device, name).unwrap();
        let region = vk::BufferCopy { src_offset: offset, dst_offset: 0, size };
        // SAFETY: the test signals the gate from the host (`open`), waiting for nothing first.
        unsafe { gate.signal_submitted(1) };
        let copy = context
            .submit(&[gate.at(1)], |rec| {
                // SAFETY: the page buffer and `out` are live buffers of this device; the range is
                // inside the page buffer and held (the caller declares the gate's use) until the
                // copy has run.
                unsafe { device.raw().cmd_copy_buffer(rec.raw(), src, out.raw(), &[region]) };
            })
            .unwrap();
        GatedCopy { gate, context, copy, out }
    }

    fn open(self, device: &residency_vulkan::Device) -> residency_vulkan::Buffer {
        let info =
            residency_vulkan::ash::vk::SemaphoreSignalInfo::default().semaphore(self.gate.raw()).value(1);
        // SAFETY: a timeline semaphore of this device, signalled once, upwards.
        unsafe { device.raw().signal_semaphore(&info) }.unwrap();
        self.context.wait(self.copy).unwrap();
        self.out
    }
}

/// A known-flags pool of uniform (and copy-source) ranges in host-visible memory, 1 MiB pages.
fn uniform_upload_pool(device: &Arc<residency_vulkan::Device>, name: &str) -> BufferPool {
    let usage = BufferUsage::UNIFORM | BufferUsage::COPY_SRC;
    let desc = BufferPoolDesc::new(name, BufferPoolUsage::Known(usage))
        .with_memory(MemoryIntent::Upload)
        .with_page_size(1 << 20);
    BufferPool::new(Arc::clone(device), desc).unwrap()
}

/// Asserts that no two of the `(offset, size)` ranges overlap.
fn assert_disjoint(ranges: impl Iterator<Item = (u64, u64)>) {
    let mut spans: Vec<_> = ranges.map(|(offset, size)| (offset, offset + size)).collect();
    spans.sort_unstable();
    assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "ranges do not overlap: {spans:?}");
}
