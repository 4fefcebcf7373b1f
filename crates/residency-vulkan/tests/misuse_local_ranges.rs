//! Red-team review of `BufferPool::local_ranges` (`LocalRanges`, `LocalRange`) from safe code:
//! double hand-outs, pages freed under a range or a declared GPU use, `RefCell` re-entrancy,
//! leaks at teardown, flush ranges on non-coherent memory, out-of-bounds accesses, moves between
//! threads and drop orders. Each test asserts the correct behaviour. Deterministic: GPU uses are
//! frame counts (`Device::frames_from_now`, `Device::advance_frame`), never timings.

use residency_core::memory::MemoryIntent;
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::testing::{test_desc, with_gpu};
use residency_vulkan::{
    BufferPool, BufferPoolDesc, Device, DeviceSet, FaultSite, InjectedFault, LocalRanges,
};
use std::sync::Arc;

const PAGE: u64 = 1 << 20;

fn upload_pool(device: &Arc<Device>, name: &str) -> BufferPool {
    BufferPool::new(
        Arc::clone(device),
        BufferPoolDesc::new(name, BufferPoolUsage::Known(BufferUsage::STORAGE | BufferUsage::COPY_SRC))
            .with_memory(MemoryIntent::Upload)
            .with_page_size(PAGE),
    )
    .unwrap()
}

/// The device's memory objects with its kept empty heaps released (what a test compares against).
fn memory_objects(device: &Device) -> u64 {
    device.release_empty_heaps();
    device.ledger().memory_objects()
}

/// Live ledger objects whose name starts with `prefix`.
fn live(device: &Device, prefix: &str) -> Vec<String> {
    device
        .ledger()
        .live_objects()
        .into_iter()
        .filter(|o| o.name.starts_with(prefix))
        .map(|o| o.name.to_string())
        .collect()
}

/// Lets every frame use declared so far pass, and retires what waited for it.
fn pass_frames(device: &Device) {
    device.advance_frame();
    device.advance_frame();
    device.maintain();
}

fn spans_disjoint(mut spans: Vec<(u64, u64, u64)>) -> bool {
    spans.sort_unstable();
    spans.windows(2).all(|w| w[0].0 != w[1].0 || w[0].2 <= w[1].1)
}

#[test]
fn misuse_a_forgotten_range_keeps_its_declared_use_for_its_page() {
    // `mem::forget` is safe. A range whose GPU use was declared (`used_until`: work the renderer
    // submitted itself) and then forgotten never reaches the retire queue; its arena's pages must
    // still wait for that use when the arena is dropped (a `PoolRange` forgotten leaks its pool
    // instead, which is safe).
    with_gpu(|set| {
        let device = &set.devices()[0];
        device.wait_submitted().unwrap();
        pass_frames(device);
        let pool = upload_pool(device, "misuse forgotten use");
        let objects = memory_objects(device);
        let local = pool.local_ranges().unwrap();
        let mut range = local.allocate(256, 0).unwrap();
        range.write(0, &[7; 256]).unwrap();
        range.used_until(device.frames_from_now(1)).unwrap();
        std::mem::forget(range);
        drop(local);
        device.maintain();
        assert_eq!(
            device.ledger().memory_objects(),
            objects + 1,
            "the page of a forgotten range stays until the range's declared GPU use has passed"
        );
        pass_frames(device);
        assert_eq!(memory_objects(device), objects, "then it goes");
        assert!(live(device, "misuse forgotten use local").is_empty());
    });
}

#[test]
fn misuse_forgotten_ranges_and_a_dropped_pool_leak_nothing_at_teardown() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let objects = memory_objects(device);
        let pool = upload_pool(device, "misuse forgotten");
        let local = pool.local_ranges().unwrap();
        for size in [64, 5000, 2 * PAGE] {
            std::mem::forget(local.allocate(size, 0).unwrap());
        }
        // A range queued when the pool goes, and the pool dropped first.
        let mut queued = local.allocate(100, 0).unwrap();
        queued.used_until(device.frames_from_now(1)).unwrap();
        drop(queued);
        drop(pool);
        // The arena still works without its pool.
        let mut range = local.allocate(128, 0).unwrap();
        range.write(0, &[3; 128]).unwrap();
        let mut back = [0; 128];
        range.read(0, &mut back).unwrap();
        assert_eq!(back, [3; 128]);
        assert_eq!(local.stats().pages, 2, "one page and the big range's own");
        drop(range);
        drop(local);
        pass_frames(device);
        assert_eq!(memory_objects(device), objects, "every page went");
        assert!(live(device, "misuse forgotten").is_empty(), "{:?}", live(device, "misuse forgotten"));
    });
}

#[test]
fn misuse_returned_and_reused_ranges_are_never_handed_out_twice() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = upload_pool(device, "misuse reuse");
        let local = pool.local_ranges().unwrap();
        let mut live_ranges = Vec::new();
        let mut tag = 0u8;
        for round in 0..6 {
            for (i, size) in [48u64, 300, 1000, 4096, 70_000, PAGE + 1].into_iter().enumerate() {
                tag = tag.wrapping_add(1);
                let mut range = local.allocate(size, if i % 2 == 0 { 0 } else { 256 }).unwrap();
                range.write(0, &vec![tag; size as usize]).unwrap();
                live_ranges.push((range, tag));
            }
            // Half of them go with a frame use pending (queued), some at once.
            let mut kept = Vec::new();
            for (i, (mut range, tag)) in live_ranges.drain(..).enumerate() {
                match (i + round) % 3 {
                    0 => {
                        range.used_until(device.frames_from_now(1)).unwrap();
                        drop(range);
                    }
                    1 => drop(range),
                    _ => kept.push((range, tag)),
                }
            }
            live_ranges = kept;
            device.advance_frame();
            // Queued and live ranges together never overlap what is handed out now.
            let fresh: Vec<_> = (0..4).map(|_| local.allocate(512, 0).unwrap()).collect();
            let spans = live_ranges
                .iter()
                .map(|(r, _)| (r.memory().0, r.offset(), r.offset() + r.size()))
                .chain(fresh.iter().map(|r| (r.memory().0, r.offset(), r.offset() + r.size())))
                .map(|(m, a, b)| (ash_handle(m), a, b))
                .collect();
            assert!(spans_disjoint(spans), "round {round}: a range was handed out twice");
            drop(fresh);
            for (range, tag) in &live_ranges {
                let mut back = vec![0; range.size() as usize];
                range.read(0, &mut back).unwrap();
                assert!(
                    back.iter().all(|b| b == tag),
                    "round {round}: a live range's bytes were overwritten"
                );
            }
        }
        drop(live_ranges);
        pass_frames(device);
        assert_eq!(local.stats().used_bytes, 0, "everything came back");
        drop(local);
        device.maintain();
        assert!(live(device, "misuse reuse local").is_empty(), "{:?}", live(device, "misuse reuse"));
    });
}

fn ash_handle(memory: residency_vulkan::ash::vk::DeviceMemory) -> u64 {
    use residency_vulkan::ash::vk::Handle;
    memory.as_raw()
}

#[test]
fn misuse_an_arena_moved_to_another_thread_with_ranges_queued_retires_its_pages_after_them() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = upload_pool(device, "misuse moved");
        let objects = memory_objects(device);
        let local = pool.local_ranges().unwrap();
        for size in [256, 2 * PAGE] {
            let mut range = local.allocate(size, 0).unwrap();
            range.used_until(device.frames_from_now(1)).unwrap();
        }
        let mut kept = local.allocate(64, 0).unwrap();
        kept.write(0, &[9; 64]).unwrap();
        drop(kept);
        let stats = std::thread::spawn(move || {
            // Used there, then dropped there with both ranges still queued.
            let range = local.allocate(64, 0).unwrap();
            drop(range);
            let stats = local.stats();
            drop(local);
            stats
        })
        .join()
        .unwrap();
        assert_eq!(stats.pages, 2, "the queued ranges keep their pages");
        device.maintain();
        assert_eq!(device.ledger().memory_objects(), objects + 2, "pages wait for the queued ranges");
        pass_frames(device);
        assert_eq!(memory_objects(device), objects, "then go");
        assert_eq!(device.pending_destruction(), 0);
    });
}

#[test]
fn misuse_release_empty_pages_and_stats_spare_queued_and_borrowed_ranges() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = upload_pool(device, "misuse release");
        let objects = memory_objects(device);
        let local = pool.local_ranges().unwrap();
        let mut held = local.allocate(1000, 0).unwrap();
        held.write(0, &[0x5a; 1000]).unwrap();
        let mut big = local.allocate(PAGE + 64, 0).unwrap();
        big.write(PAGE, &[1; 64]).unwrap();
        big.used_until(device.frames_from_now(1)).unwrap();
        drop(big);
        let mut small = local.allocate(64, 0).unwrap();
        small.used_until(device.frames_from_now(1)).unwrap();
        drop(small);
        // While `held` is borrowed (and read through), the arena's other calls work.
        let before = local.stats();
        assert_eq!(before.pages, 2);
        assert_eq!(local.release_empty_pages(), 0, "no page is empty: queued ranges hold theirs");
        device.maintain();
        assert_eq!(device.ledger().memory_objects(), objects + 2);
        let mut back = vec![0; 1000];
        held.read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0x5a));
        pass_frames(device);
        let after = local.stats();
        assert_eq!(after.pages, 1, "the big range's own page went once its use passed");
        assert_eq!(local.release_empty_pages(), 0, "held keeps its page");
        held.read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0x5a), "held's page is still there");
        drop(held);
        assert_eq!(local.release_empty_pages(), PAGE);
        assert_eq!(local.stats(), residency_vulkan::LocalRangesStats::default());
        assert_eq!(memory_objects(device), objects);
    });
}

#[test]
fn misuse_odd_sizes_alignments_and_offsets_are_refused_or_fit() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = upload_pool(device, "misuse odd");
        let objects = memory_objects(device);
        let local = pool.local_ranges().unwrap();
        assert!(local.allocate(u64::MAX, 0).is_err(), "beyond every limit");
        assert!(local.allocate(u64::MAX - 4095, 0).is_err());
        assert!(local.allocate(PAGE * 1024 * 1024, 0).is_err());
        assert!(local.allocate(1, 1 << 63).is_err() || local.stats().pages <= 1);
        for _ in 0..4 {
            if let Ok(range) = local.allocate(16, 4 * PAGE) {
                assert_eq!(range.offset() % (4 * PAGE), 0);
            }
        }
        assert!(
            local.stats().pages <= 2,
            "refused or huge-aligned requests do not pile up pages: {:?}",
            local.stats()
        );
        let mut range = local.allocate(100, 0).unwrap();
        assert!(range.write(u64::MAX, &[1]).is_err());
        assert!(range.write(u64::MAX - 1, &[1, 2, 3]).is_err());
        assert!(range.write(100, &[1]).is_err());
        assert!(range.write(99, &[1, 2]).is_err());
        range.write(100, &[]).unwrap();
        range.write(99, &[1]).unwrap();
        let mut out = [0; 2];
        assert!(range.read(u64::MAX, &mut out).is_err());
        assert!(range.read(99, &mut out).is_err());
        // Bytes beyond the range's size (its allocation is rounded up) are not its own.
        let neighbour = local.allocate(16, 0).unwrap();
        assert!(
            neighbour.offset() >= range.offset() + range.size() || neighbour.offset() + 16 <= range.offset()
        );
        drop((range, neighbour));
        local.release_empty_pages();
        drop(local);
        assert_eq!(memory_objects(device), objects);
    });
}

#[test]
fn misuse_failures_while_making_a_page_leave_the_arena_usable_and_leak_nothing() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = upload_pool(device, "misuse faults");
        let objects = memory_objects(device);
        let live_before = device.ledger().live_objects().len();
        let local = pool.local_ranges().unwrap();
        device.ledger().inject_out_of_memory(1);
        assert!(local.allocate(64, 0).is_err(), "the page's memory failed");
        device.ledger().inject_fault(FaultSite::CreateResource, 0, InjectedFault::OutOfDeviceMemory);
        assert!(local.allocate(64, 0).is_err(), "the page buffer failed");
        device.ledger().clear_faults();
        assert_eq!(device.ledger().memory_objects(), objects, "nothing left of the failed pages");
        assert_eq!(local.stats().pages, 0);
        let mut range = local.allocate(64, 0).unwrap();
        range.write(0, &[1; 64]).unwrap();
        drop(range);
        drop(local);
        assert_eq!(memory_objects(device), objects);
        assert_eq!(device.ledger().live_objects().len(), live_before);
    });
}

#[test]
fn misuse_a_panic_with_ranges_alive_and_queued_unwinds_cleanly() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = upload_pool(device, "misuse panic");
        let objects = memory_objects(device);
        let local = pool.local_ranges().unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut a = local.allocate(64, 0).unwrap();
            a.write(0, &[1; 64]).unwrap();
            let mut b = local.allocate(64, 0).unwrap();
            b.used_until(device.frames_from_now(1)).unwrap();
            let _stats = local.stats();
            panic!("in the middle");
        }));
        assert!(result.is_err());
        // No borrow is left behind: every call works after the unwind.
        let stats = local.stats();
        assert_eq!(stats.pages, 1);
        let range = local.allocate(64, 0).unwrap();
        drop(range);
        pass_frames(device);
        assert_eq!(local.stats().used_bytes, 0);
        drop(local);
        assert_eq!(memory_objects(device), objects);
    });
}

#[test]
fn misuse_non_coherent_local_ranges_flush_only_their_atoms_and_outlive_their_set() {
    let Ok(set) = DeviceSet::new(&test_desc().with_min_devices(1).with_non_coherent_memory(256)) else {
        assert!(!residency_vulkan::testing::gpu_required(), "a device is required");
        return;
    };
    let device = Arc::clone(&set.devices()[0]);
    let weak = Arc::downgrade(&device);
    let atom = device.limits().non_coherent_atom_size;
    assert!(atom >= 256);
    let pool = upload_pool(&device, "misuse atoms");
    let local = pool.local_ranges().unwrap();
    let mut ranges: Vec<_> = (0..6u64).map(|i| local.allocate(1 + i * 61, 16).unwrap()).collect();
    let mut spans = Vec::new();
    for (i, r) in ranges.iter_mut().enumerate() {
        assert_eq!(r.offset() % atom, 0, "a non-coherent range starts on an atom");
        spans.push((r.offset(), r.offset() + r.size().next_multiple_of(atom)));
        r.write(0, &vec![i as u8 + 1; r.size() as usize]).unwrap();
    }
    spans.sort_unstable();
    assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "flush ranges never reach a neighbour: {spans:?}");
    // The last bytes of a full page: the flush stays inside the page's memory.
    let rest = PAGE - local.stats().used_bytes;
    let tail = local.allocate(rest, 0).unwrap();
    assert_eq!(local.stats().pages, 1, "the tail fits the page");
    ranges.push(tail);
    let last = ranges.last_mut().unwrap();
    let size = last.size();
    last.write(size - 1, &[0xee]).unwrap();
    let mut one = [0];
    last.read(size - 1, &mut one).unwrap();
    assert_eq!(one, [0xee]);
    for (i, r) in ranges.iter().enumerate().take(6) {
        let mut back = vec![0; r.size() as usize];
        r.read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == i as u8 + 1), "range {i} kept its bytes");
    }
    // The set goes first: the arena keeps the device.
    drop(pool);
    let problems = device.validation_log().problem_count();
    drop(device);
    drop(set);
    let mut queued = local.allocate(64, 0).unwrap();
    queued.write(0, &[4; 64]).unwrap();
    drop(queued);
    drop(ranges);
    let device = weak.upgrade().expect("the arena keeps its device");
    assert_eq!(device.validation_log().problem_count(), problems, "no validation problem");
    drop(device);
    drop(local);
    assert!(weak.upgrade().is_none(), "the device went with the arena");
    assert_eq!(problems, 0);
}

/// `LocalRanges` is `Send`: this must compile (and the arena works on the thread it went to).
#[test]
fn misuse_an_arena_is_send_and_works_where_it_went() {
    fn sent<T: Send>(_: &T) {}
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = upload_pool(device, "misuse send");
        let local: LocalRanges = pool.local_ranges().unwrap();
        sent(&local);
        let local = std::thread::spawn(move || {
            let mut r = local.allocate(32, 0).unwrap();
            r.write(0, &[1; 32]).unwrap();
            drop(r);
            local
        })
        .join()
        .unwrap();
        assert_eq!(local.stats().used_bytes, 0);
    });
}
