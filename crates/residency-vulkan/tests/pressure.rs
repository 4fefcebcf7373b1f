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
    AllocationDesc, Buffer, BufferDesc, BufferPlacement, DefragDesc, Defragmenter, Device, MemoryError,
    MemoryTier, ResidencyError, Unmovable, REFRESH_EVERY,
};

const MIB: u64 = 1 << 20;

/// The shared test device as a fresh one: no device-local limit, no heap kept from earlier tests
/// (tests share the device set and run one at a time).
fn fresh(device: &Device) {
    device.set_device_local_limit(None);
    device.set_budget_headroom_percent(residency_vulkan::DEFAULT_HEADROOM_PERCENT);
    device.maintain();
    device.release_empty_heaps();
}

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
        fresh(device);
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
        fresh(device);
    });
}

#[test]
fn an_allocation_over_the_device_local_limit_falls_back_to_the_host_tier_and_is_refused_when_forbidden() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        fresh(device);
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
        fresh(device);
    });
}

/// Declares `buffers` and `late` used by the frame being recorded.
fn used_now(device: &Device, buffers: &[Buffer], late: &Buffer) {
    for b in buffers.iter().chain(std::iter::once(late)) {
        b.used_until(device.frames_from_now(0)).unwrap();
    }
}

/// The word at `j` of buffer `i`'s pattern.
fn word(i: usize, j: usize) -> u32 {
    (i as u32).wrapping_mul(0x9e37_79b9) ^ (j as u32).wrapping_mul(0x85eb_ca6b) ^ 0x5bd1_e995
}

/// Fills `b` with buffer `i`'s pattern the way a renderer fills device-local memory on any
/// device: by GPU commands (`vkCmdUpdateBuffer`, 64 KiB at a time), never through a host mapping
/// (a real GPU's device-local memory is not host-visible). It allocates no memory (no staging
/// ring in the tiers the tests count) and waits; a barrier makes the writes visible to every
/// later submission (the defragmenter's copies, the read-backs).
fn write_pattern(device: &Device, i: usize, b: &Buffer) {
    use residency_vulkan::recording::MemoryDependency;
    use vk::{AccessFlags2 as A, PipelineStageFlags2 as S};
    const CHUNK: usize = 65536;
    let words: Vec<u32> = (0..(b.size() / 4) as usize).map(|j| word(i, j)).collect();
    let bytes: &[u8] = bytemuck::cast_slice(&words);
    device
        .submit_once("write pattern", |rec| {
            for (k, chunk) in bytes.chunks(CHUNK).enumerate() {
                rec.update_buffer(b, (k * CHUNK) as u64, chunk).unwrap();
            }
            let visible = MemoryDependency {
                src_stages: S::ALL_TRANSFER,
                src_access: A::TRANSFER_WRITE,
                dst_stages: S::ALL_COMMANDS,
                dst_access: A::MEMORY_READ | A::MEMORY_WRITE,
            };
            rec.memory_barrier(visible).unwrap();
        })
        .unwrap();
}

fn check_pattern(device: &Device, i: usize, b: &Buffer) {
    let bytes = device.read_back(b, 0, b.size()).unwrap();
    let words: &[u32] = bytemuck::cast_slice(&bytes);
    assert!(words.iter().enumerate().all(|(j, &w)| w == word(i, j)), "`{}` lost its contents", b.name());
}

/// Eight 4 MiB buffers filling the device tier's first 32 MiB heap, made at frame 0, and the
/// device-local limit set to what the device tier holds then: a ninth falls back to the host.
fn crowded(device: &Device) -> (Vec<Buffer>, Buffer) {
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    let mut buffers: Vec<Buffer> = (0..8)
        .map(|i| device.create_buffer(&BufferDesc::new(format!("resident {i}"), 4 * MIB, usage)).unwrap())
        .collect();
    for (i, b) in buffers.iter_mut().enumerate() {
        write_pattern(device, i, b);
        b.set_user_data(100 + i as u64);
    }
    device.set_device_local_limit(Some(device.pressure_stats().device_tier_bytes));
    for _ in 0..3 {
        device.advance_frame();
    }
    let late = device.create_buffer(&BufferDesc::new("late", 4 * MIB, usage)).unwrap();
    assert_eq!(late.memory_tier(), Some(MemoryTier::Host), "the device tier is full");
    write_pattern(device, 8, &late);
    (buffers, late)
}

fn all<'a>(buffers: &'a mut [Buffer], late: &'a mut Buffer) -> Vec<&'a mut Buffer> {
    buffers.iter_mut().chain(std::iter::once(late)).collect()
}

#[test]
fn the_coldest_buffer_is_demoted_and_promoted_back_when_room_returns_with_its_contents() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        fresh(device);
        let (mut buffers, mut late) = crowded(device);
        // Every resident but the first was used in frame 3; the late one is as hot.
        for b in &buffers[1..] {
            b.used_until(device.frames_from_now(0)).unwrap();
        }
        late.used_until(device.frames_from_now(0)).unwrap();
        let before = device.pressure_stats();
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let first = buffers[0].memory();
        let cold = buffers[0].last_used_frame();
        // A use recorded in a residency submission counts as one too.
        let scratch = device.create_buffer(&BufferDesc::new("scratch", 256, BufferUsage::COPY_DST)).unwrap();
        let recorded = buffers[1].last_used_frame();
        device.advance_frame();
        device
            .submit_once("recorded use", |rec| rec.copy_buffer(&buffers[1], 0, &scratch, 0, 256).unwrap())
            .unwrap();
        assert!(buffers[1].last_used_frame() > recorded, "a recorded use makes it hot");
        used_now(device, &buffers[2..], &late);
        drop(scratch);

        // The late buffer deserves the device tier more than resident 0: resident 0 goes out.
        let stats = defrag.relieve(&mut all(&mut buffers, &mut late), 64 * MIB).unwrap();
        assert_eq!((stats.demotions, stats.promotions), (1, 0), "{stats:?}");
        assert_eq!(stats.demoted_bytes, 4 * MIB);
        assert_eq!(buffers[0].memory_tier(), Some(MemoryTier::Host));
        assert_ne!(buffers[0].memory(), first);
        assert_eq!(buffers[0].name(), "resident 0");
        assert_eq!(buffers[0].user_data(), 100);
        assert_eq!(buffers[0].last_used_frame(), cold, "demotion is no use");
        check_pattern(device, 0, &buffers[0]);

        // Its old range retires behind the copy; the next pass promotes the late buffer there
        // (the others are used in the next frame: resident 0 is the coldest again).
        device.advance_frame();
        used_now(device, &buffers[1..], &late);
        let stats = defrag.relieve(&mut all(&mut buffers, &mut late), 64 * MIB).unwrap();
        assert_eq!((stats.demotions, stats.promotions), (0, 1), "{stats:?}");
        assert_eq!(late.memory_tier(), Some(preferred(device)));
        check_pattern(device, 8, &late);

        // Room returns: resident 0 comes back too, within the per-frame bytes.
        device.set_device_local_limit(None);
        device.advance_frame();
        let stats = defrag.relieve(&mut all(&mut buffers, &mut late), 2 * MIB).unwrap();
        assert_eq!(stats.promotions, 0, "4 MiB does not fit a 2 MiB frame budget");
        let stats = defrag.relieve(&mut all(&mut buffers, &mut late), 64 * MIB).unwrap();
        assert_eq!((stats.demotions, stats.promotions), (0, 1), "{stats:?}");
        assert_eq!(buffers[0].memory_tier(), Some(preferred(device)));
        for (i, b) in buffers.iter().enumerate() {
            check_pattern(device, i, b);
        }
        check_pattern(device, 8, &late);
        let totals = device.pressure_stats().since(&before);
        assert_eq!((totals.demotions, totals.promotions), (1, 2));
        assert_eq!((totals.demoted_bytes, totals.promoted_bytes), (4 * MIB, 8 * MIB));
        drop((buffers, late, defrag));
        fresh(device);
    });
}

#[test]
fn a_buffer_a_frame_in_flight_uses_is_never_demoted_under_it() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        fresh(device);
        let (mut buffers, mut late) = crowded(device);
        used_now(device, &buffers[2..], &late);
        // Resident 0 is the coldest by its last use, but the frame being recorded uses it until
        // two frames from now; resident 1 is the coldest that may move.
        let frame_0 = buffers[0].last_used_frame();
        buffers[0].used_until(device.frames_from_now(2)).unwrap();
        assert!(buffers[0].last_used_frame() > frame_0);
        buffers[0].set_priority(0.0).unwrap();
        assert!(buffers[0].set_priority(f32::NAN).is_err());
        assert_eq!(buffers[0].priority(), 0.0);
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let stats = defrag.relieve(&mut all(&mut buffers, &mut late), 64 * MIB).unwrap();
        assert!(stats.unmovable.contains(&(0, Unmovable::InFlight)), "{stats:?}");
        assert_eq!(stats.demotions, 1);
        assert_eq!(buffers[0].memory_tier(), Some(preferred(device)), "in flight: stays");
        assert_eq!(buffers[1].memory_tier(), Some(MemoryTier::Host));
        check_pattern(device, 1, &buffers[1]);
        device.advance_frame();
        device.advance_frame();
        drop((buffers, late, defrag));
        fresh(device);
    });
}

#[test]
fn out_of_memory_during_a_demotion_leaves_everything_where_it_was() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        fresh(device);
        let (mut buffers, mut late) = crowded(device);
        used_now(device, &buffers[1..], &late);
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        // The late buffer made the host tier's first heap; filled, a demotion needs another.
        let objects = device.ledger().memory_objects();
        let big = device
            .create_buffer(&BufferDesc::new(
                "host filler",
                device.pressure_stats().host_tier_bytes - 4 * MIB,
                BufferUsage::STORAGE,
            ))
            .unwrap();
        assert_eq!(big.memory_tier(), Some(MemoryTier::Host));
        assert_eq!(device.ledger().memory_objects(), objects, "the filler fits the host heap");
        let places: Vec<_> = buffers.iter().map(|b| (b.raw(), b.memory())).collect();
        let objects = device.ledger().memory_objects();
        let live = device.ledger().live_objects().len();
        let before = device.pressure_stats();
        device.ledger().inject_out_of_memory(64);
        let failed = defrag.relieve(&mut all(&mut buffers, &mut late), 64 * MIB).unwrap_err();
        device.ledger().inject_out_of_memory(0);
        assert!(failed.is_out_of_memory(), "{failed}");
        assert_eq!(buffers.iter().map(|b| (b.raw(), b.memory())).collect::<Vec<_>>(), places);
        assert_eq!(device.ledger().memory_objects(), objects, "nothing left allocated");
        assert_eq!(device.ledger().live_objects().len(), live, "nothing left created");
        assert_eq!(device.pressure_stats().since(&before).demotions, 0);
        for (i, b) in buffers.iter().enumerate() {
            check_pattern(device, i, b);
        }
        // Without the fault the same pass goes through (the read-backs were uses: resident 0 is
        // made the coldest again).
        device.advance_frame();
        used_now(device, &buffers[1..], &late);
        let stats = defrag.relieve(&mut all(&mut buffers, &mut late), 64 * MIB).unwrap();
        assert_eq!(stats.demotions, 1);
        check_pattern(device, 0, &buffers[0]);
        drop((buffers, late, big, defrag));
        fresh(device);
    });
}

#[test]
fn a_frame_that_does_not_use_a_moved_buffer_is_not_ordered_after_its_copy() {
    use residency_vulkan::CommandContext;
    with_gpu(|set| {
        let device = &set.devices()[0];
        fresh(device);
        let (mut buffers, mut late) = crowded(device);
        used_now(device, &buffers[1..], &late);
        let usage = BufferUsage::COPY_DST;
        let scratch = device.create_buffer(&BufferDesc::new("frames scratch", 768, usage)).unwrap();
        let held = device.create_buffer(&BufferDesc::new("held", 256, usage)).unwrap();
        // The copy is held back by state, never by time: a universal submission before it waits
        // on the GPU for a renderer timeline the test signals from the host only at the end, and
        // the copy waits for every universal submission made before it.
        let frame = device.create_timeline("pressure hold").unwrap();
        let value = {
            // SAFETY: a timeline semaphore of this device.
            unsafe { device.raw().get_semaphore_counter_value(frame.raw()) }.unwrap() + 1
        };
        // SAFETY: the test signals the timeline from the host below, and waits for nothing that
        // waits for it before.
        unsafe { frame.signal_submitted(value) };
        let frames = CommandContext::new(device, "pressure frames").unwrap();
        // Made first: its timestamps' first reset is a submission waited for.
        let mut defrag = Defragmenter::new(device, DefragDesc::default()).unwrap();
        let blocker =
            frames.submit(&[frame.at(value)], |rec| rec.fill_buffer(&held, 0, 256, 7).unwrap()).unwrap();

        let stats = defrag.relieve(&mut all(&mut buffers, &mut late), 64 * MIB).unwrap();
        assert_eq!((stats.demotions, stats.promotions), (1, 0), "{stats:?}");
        let copy = stats.submission.as_ref().expect("a move copies").gpu_use();
        assert!(!device.has_completed(&copy), "held back by the timeline");
        // The moved buffer carries its copy; the others carry nothing.
        assert_eq!(buffers[0].pending_move(), Some(copy));
        assert!(buffers[1..].iter().chain([&late]).all(|b| b.pending_move().is_none()));

        // A frame that reads only buffers that did not move waits for nothing: its submission is
        // not ordered after the copy (which ends with no barrier over later work).
        let mut unrelated = None;
        let a = frames
            .submit(&[], |rec| {
                rec.copy_buffer(&buffers[1], 0, &scratch, 0, 256).unwrap();
                rec.copy_buffer(&late, 0, &scratch, 256, 256).unwrap();
                unrelated = Some(rec.waits().to_vec());
            })
            .unwrap();
        assert_eq!(unrelated.unwrap(), Vec::new(), "no wait for the move");
        // A frame that reads the moved buffer waits for exactly its copy.
        let mut related = None;
        let b = frames
            .submit(&[], |rec| {
                // Its own range of the scratch: the two frames are not ordered one after the other.
                rec.copy_buffer(&buffers[0], 0, &scratch, 512, 256).unwrap();
                related = Some(rec.waits().to_vec());
            })
            .unwrap();
        assert_eq!(related.unwrap(), vec![copy], "the move's copy, nothing else");

        let signal = vk::SemaphoreSignalInfo::default().semaphore(frame.raw()).value(value);
        // SAFETY: the test's own timeline, signalled once to a greater value; nothing else signals it.
        unsafe { device.raw().signal_semaphore(&signal) }.unwrap();
        for s in [blocker, a, b] {
            frames.wait(s).unwrap();
        }
        assert!(device.has_completed(&copy));
        assert_eq!(buffers[0].pending_move(), None, "the copy completed");
        assert_eq!(buffers[0].memory_tier(), Some(MemoryTier::Host));
        for (i, b) in buffers.iter().enumerate() {
            check_pattern(device, i, b);
        }
        check_pattern(device, 8, &late);
        drop((buffers, late, scratch, held, defrag, frames, stats));
        fresh(device);
    });
}

#[test]
fn the_streamers_tile_budget_follows_the_pressure_signal() {
    use residency_core::tiles::ResidencyPath;
    use residency_vulkan::streaming::{Streamer, StreamerDesc};
    with_gpu(|set| {
        let device = &set.devices()[0];
        fresh(device);
        for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
            let desc = StreamerDesc::default()
                .with_name("pressure streamer")
                .with_path(path)
                .with_frames_in_flight(2)
                .with_budget_tiles(96)
                .with_workers(1);
            let mut streamer = Streamer::new(device, desc).unwrap();
            let tile = streamer.manager().pool().tile_bytes();
            let held = (streamer.backing_bytes() / tile) as u32;
            // Room: the whole budget.
            assert_eq!(streamer.follow_pressure(), 96);
            // No room left: the memory it holds now (at least one tile; the software path's
            // atlas is allocated whole, so it keeps its budget).
            let device_bytes = device.pressure_stats().device_tier_bytes;
            device.set_device_local_limit(Some(device_bytes));
            let no_room = streamer.follow_pressure();
            // Over the limit by 64 tiles: 64 fewer than it holds.
            device.set_device_local_limit(Some(device_bytes.saturating_sub(64 * tile)));
            assert_eq!(device.device_tier_excess(), device_bytes.min(64 * tile));
            let over = streamer.follow_pressure();
            match path {
                ResidencyPath::Hardware => {
                    assert_eq!(no_room, held.clamp(1, 96));
                    assert_eq!(over, held.saturating_sub(64).clamp(1, 96));
                }
                _ => {
                    assert_eq!(no_room, 96, "its atlas holds the budget");
                    assert!(over < no_room, "{over}: shrinks by whole heaps");
                }
            }
            // Room returns: the budget grows back.
            device.set_device_local_limit(None);
            assert_eq!(streamer.follow_pressure(), 96);
            drop(streamer);
        }
        fresh(device);
    });
}

/// Bytes of `VkDeviceMemory` residency holds on `device`, every heap.
fn held(device: &Device) -> u64 {
    (0..device.memory_properties().heaps.len() as u32).map(|h| device.ledger().heap_bytes(h)).sum()
}

#[test]
fn an_empty_device_holds_no_memory_and_its_heaps_grow_with_use() {
    // A device set of its own, as an application opens it: nothing allocated before it is needed.
    let Some(()) = with_gpu(|_| ()) else { return };
    let set = residency_vulkan::DeviceSet::new(&residency_vulkan::testing::test_desc()).unwrap();
    for device in set.devices() {
        assert_eq!(held(device), 0, "an empty device reserves nothing");
        assert_eq!(device.ledger().memory_objects(), 0);
    }
    let device = &set.devices()[0];
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
    // The first heap is an eighth of a page; each new one doubles the largest, up to a page.
    let first = device.create_buffer(&BufferDesc::new("first", 4096, usage)).unwrap();
    let page =
        residency_core::memory::HeapGrowth::default_page_size(device.memory_properties().heaps[0].size);
    let first_heap = held(device);
    assert_eq!(first_heap, (page / 8).max(64 << 10));
    // A buffer that does not fit the first heap: at most half a page, so it is placed in a new
    // heap (twice the first) unless the driver prefers memory of its own for it
    // (`VkMemoryDedicatedRequirements`, honoured as VMA does: NVIDIA's driver prefers it for
    // such a buffer, lavapipe's never). Then it holds exactly its own memory and no heap grows.
    assert!(first_heap <= page / 2, "not large enough to be committed by size");
    let fill = device.create_buffer(&BufferDesc::new("fill", first_heap, usage)).unwrap();
    let fill_info = fill.existing_allocation_info();
    let after_fill = held(device);
    match fill.placement() {
        BufferPlacement::Placed => {
            assert_eq!(after_fill, first_heap + 2 * first_heap, "the second heap doubles the first");
            assert_ne!(fill.memory().0, first.memory().0);
        }
        BufferPlacement::Committed => {
            assert_eq!(fill_info.placement, residency_vulkan::Placement::Committed);
            assert_eq!(after_fill, first_heap + fill_info.size, "memory of its own, no heap grown");
        }
        BufferPlacement::Range => unreachable!("a buffer outside a pool is never a range"),
    }
    // Raw requirements never prefer memory of their own: a second heap, twice the largest (the
    // first, or the second when the fill made it), on every device.
    let largest = if fill.placement() == BufferPlacement::Placed { 2 * first_heap } else { first_heap };
    let requirements = vk::MemoryRequirements { size: largest, alignment: 256, memory_type_bits: u32::MAX };
    let raw = device.allocate_memory(&requirements, &AllocationDesc::new("raw fill")).unwrap();
    assert!(!raw.is_dedicated());
    assert_eq!(held(device), after_fill + (2 * largest).min(page), "the next heap doubles the largest");
    drop((first, fill, raw));
    assert!(set.validation_log().problems_since(0).is_empty());
    set.close().unwrap();
}
