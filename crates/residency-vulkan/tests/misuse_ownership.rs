//! Misuse of ownership and GPU lifetimes: each scenario is a typed error that changes nothing, or a
//! documented safe outcome (the resource keeps what it points into alive; destruction waits for
//! the GPU). Every test runs under synchronization validation: destroying or reusing memory the
//! GPU still uses would be reported (`VUID-vkDestroyBuffer-buffer-00922`, `SYNC-HAZARD-…`) and fail
//! the test.

use ash::vk;
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::sync::Use;
use residency_core::usage::{BufferPoolUsage, BufferUsage, ImageUsage};
use residency_vulkan::testing::{test_desc, with_gpu};
use residency_vulkan::transient::{TransientPool, TransientRequest};
use residency_vulkan::{
    ash, BufferDesc, BufferInit, BufferPool, BufferPoolDesc, CommandContext, Device, DeviceSet, Filter,
    ForeignReason, ImageDesc, Timeline, UploadError, Uploader,
};
use std::sync::Arc;

fn upload_buffer(device: &Device, name: &str, size: u64) -> residency_vulkan::Buffer {
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    device.create_buffer(&BufferDesc::new(name, size, usage).with_intent(MemoryIntent::Upload)).unwrap()
}

fn live(device: &Device, name: &str) -> bool {
    device.ledger().live_objects().iter().any(|o| &*o.name == name)
}

/// Host-signals `timeline` to `value` (the renderer's frame finishing).
fn signal(device: &Device, timeline: &Timeline, value: u64) {
    let info = vk::SemaphoreSignalInfo::default().semaphore(timeline.raw()).value(value);
    // SAFETY: a timeline semaphore of this device; values only grow in these tests.
    unsafe { device.raw().signal_semaphore(&info) }.unwrap();
}

/// Submits a copy `src` → `dst` that cannot start before `gate` reaches 1: the GPU holds `src`
/// for as long as the test wants.
fn gated_copy(
    context: &CommandContext,
    gate: &Timeline,
    src: &residency_vulkan::Buffer,
    dst: &residency_vulkan::Buffer,
) -> residency_vulkan::Submission {
    let device = context.device();
    let region = vk::BufferCopy { src_offset: 0, dst_offset: 0, size: src.size().min(dst.size()) };
    context
        .submit(&[gate.at(1)], |rec| {
            // SAFETY: `rec` is recording on this device; both buffers are live buffers of it.
            unsafe { device.raw().cmd_copy_buffer(rec.raw(), src.raw(), dst.raw(), &[region]) };
        })
        .unwrap()
}

#[test]
fn misuse_write_after_the_pool_is_dropped_is_safe_the_pages_live_with_the_buffer() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let desc = BufferPoolDesc::new("misuse dropped pool", BufferPoolUsage::Unknown)
            .with_memory(MemoryIntent::Upload)
            .with_page_size(1 << 20);
        let pool = BufferPool::new(Arc::clone(&device), desc).unwrap();
        let mut buffer =
            pool.init_buffer(&BufferInit::new("survivor", 256).with_usage(BufferUsage::STORAGE)).unwrap();
        drop(pool);
        assert!(live(&device, "misuse dropped pool page heap 1"), "the page lives while its buffer does");
        buffer.write(0, &[7; 256]).unwrap();
        let mut back = [0; 256];
        buffer.read(0, &mut back).unwrap();
        assert_eq!(back, [7; 256]);
        drop(buffer);
        device.wait_submitted().unwrap();
        assert!(!live(&device, "misuse dropped pool page heap 1"), "the page went with its last buffer");
        assert!(!live(&device, "misuse dropped pool"));
    });
}

#[test]
fn misuse_write_after_the_device_set_is_dropped_keeps_the_device_alive_and_says_so() {
    // A set of its own (the harness's set lives for the whole test binary).
    let Ok(set) = DeviceSet::new(&test_desc().with_min_devices(1)) else {
        assert!(!residency_vulkan::testing::gpu_required(), "a device is required");
        return;
    };
    let device = Arc::clone(&set.devices()[0]);
    let weak = Arc::downgrade(&device);
    let mut buffer = upload_buffer(&device, "outlives its set", 64);
    drop(device);
    let dropped_before = residency_vulkan::SETS_DROPPED_IN_USE.load(std::sync::atomic::Ordering::SeqCst);
    drop(set);
    assert_eq!(
        residency_vulkan::SETS_DROPPED_IN_USE.load(std::sync::atomic::Ordering::SeqCst),
        dropped_before + 1,
        "dropping a set whose device is still used is reported"
    );
    assert!(weak.upgrade().is_some(), "the buffer keeps its device");
    buffer.write(0, &[1; 64]).unwrap();
    let mut back = [0; 64];
    buffer.read(0, &mut back).unwrap();
    assert_eq!(back, [1; 64]);
    let problems = buffer.device().validation_log().problem_count();
    drop(buffer);
    assert!(weak.upgrade().is_none(), "the device went with the last buffer");
    assert_eq!(problems, 0, "no validation problem");
}

#[test]
fn misuse_closing_a_device_set_while_an_arc_device_lives_is_a_typed_error() {
    let Ok(set) = DeviceSet::new(&test_desc().with_min_devices(1)) else {
        assert!(!residency_vulkan::testing::gpu_required(), "a device is required");
        return;
    };
    let device = Arc::clone(&set.devices()[0]);
    let buffer = upload_buffer(&device, "holds the device", 64);
    let err = set.close().unwrap_err();
    assert_eq!(err.alive.len(), 1);
    assert!(err.alive[0].references >= 2, "the clone and the buffer: {:?}", err.alive);
    assert!(err.alive[0].objects.iter().any(|o| &*o.name == "holds the device"), "{err}");
    assert!(err.to_string().contains("holds the device"), "{err}");
    // Nothing was destroyed: the set still works.
    let set = err.set;
    let again = upload_buffer(&set.devices()[0], "after the refusal", 64);
    drop((buffer, again, device));
    set.close().unwrap();
}

#[test]
fn misuse_destroy_on_the_wrong_device_is_refused_and_changes_nothing() {
    with_gpu(|set| {
        let (d0, d1) = (&set.devices()[0], &set.devices()[1]);
        let mut buffer = upload_buffer(d0, "lives on 0", 64);
        let before = d1.ledger().live_objects();
        let refused = d1.destroy_buffer(buffer).unwrap_err();
        assert_eq!(refused.reason, ForeignReason::OtherDevice { owner: d0.index(), target: d1.index() });
        assert_eq!(d1.ledger().live_objects(), before);
        buffer = *refused.resource;
        buffer.write(0, &[3; 64]).unwrap();
        assert!(live(d0, "lives on 0"));
        d0.destroy_buffer(buffer).unwrap();

        let image = d0
            .create_image(&ImageDesc::new_2d(
                "image on 0",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::SAMPLED,
            ))
            .unwrap();
        let refused = d1.destroy_image(image).unwrap_err();
        assert!(matches!(refused.reason, ForeignReason::OtherDevice { .. }), "{refused}");
        // A view is made by its image (`Image::create_view`), so no call can ask device 1 for a
        // view of device 0's image: the view lives on device 0.
        let view = refused.resource.create_view(0..1).unwrap();
        assert_eq!(view.device().index(), d0.index());
        drop(view);
        d0.destroy_image(*refused.resource).unwrap();
    });
}

#[test]
fn misuse_a_pool_buffer_given_to_the_device_or_another_pool_is_refused() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let desc = BufferPoolDesc::new("misuse a", BufferPoolUsage::Unknown).with_page_size(1 << 20);
        let a = BufferPool::new(Arc::clone(&device), desc.clone()).unwrap();
        let b =
            BufferPool::new(Arc::clone(&device), BufferPoolDesc { name: "misuse b".into(), ..desc }).unwrap();
        let buffer = a.init_buffer(&BufferInit::new("of a", 64).with_usage(BufferUsage::STORAGE)).unwrap();
        let stats = (a.stats(), b.stats());
        let refused = b.free_buffer(buffer).unwrap_err();
        assert_eq!(
            refused.reason,
            ForeignReason::OtherPool { owner: Some("misuse a".into()), target: Some("misuse b".into()) }
        );
        let refused = device.destroy_buffer(*refused.resource).unwrap_err();
        assert_eq!(refused.reason, ForeignReason::OtherPool { owner: Some("misuse a".into()), target: None });
        let general = upload_buffer(&device, "general", 64);
        let refused_general = a.free_buffer(general).unwrap_err();
        assert_eq!(
            refused_general.reason,
            ForeignReason::OtherPool { owner: None, target: Some("misuse a".into()) }
        );
        assert_eq!((a.stats(), b.stats()), stats, "nothing changed");
        a.free_buffer(*refused.resource).unwrap();
        assert_eq!(a.stats().buffers, 0);
    });
}

#[test]
fn misuse_dropping_a_buffer_the_gpu_is_still_reading_defers_its_destruction() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let gate = device.create_timeline("misuse gate").unwrap();
        // SAFETY: the test opens the gate with a host signal, waiting for nothing that waits for it.
        unsafe { gate.signal_submitted(1) };
        let context = CommandContext::new(device, "misuse gated").unwrap();
        let src = upload_buffer(device, "read by the GPU", 1 << 16);
        let dst = upload_buffer(device, "written by the GPU", 1 << 16);
        let submission = gated_copy(&context, &gate, &src, &dst);
        drop(src);
        assert!(live(device, "read by the GPU"), "still in use: not destroyed");
        assert!(device.pending_destruction() >= 1);
        assert_eq!(device.maintain(), 0, "the copy has not run");
        signal(device, &gate, 1);
        context.wait(submission).unwrap();
        device.maintain();
        assert!(!live(device, "read by the GPU"), "destroyed once the copy completed");
        drop(dst);
    });
}

#[test]
fn misuse_dropping_a_pool_image_and_view_in_use_defers_them_in_order() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let gate = device.create_timeline("misuse gate 2").unwrap();
        // SAFETY: the test opens the gate with a host signal, waiting for nothing that waits for it.
        unsafe { gate.signal_submitted(1) };
        let context = CommandContext::new(device, "misuse gated 2").unwrap();
        let desc = BufferPoolDesc::new("misuse busy pool", BufferPoolUsage::Unknown)
            .with_memory(MemoryIntent::Upload)
            .with_page_size(1 << 20);
        let pool = BufferPool::new(Arc::clone(device), desc).unwrap();
        let usage = BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
        let src = pool.init_buffer(&BufferInit::new("pool src", 4096).with_usage(usage)).unwrap();
        let dst = pool.init_buffer(&BufferInit::new("pool dst", 4096).with_usage(usage)).unwrap();
        let image = device
            .create_image(&ImageDesc::new_2d(
                "busy image",
                Format::R8G8B8A8Unorm,
                16,
                16,
                ImageUsage::SAMPLED,
            ))
            .unwrap();
        let view = image.create_view(0..1).unwrap();
        let sampler = device.create_sampler(Filter::Nearest).unwrap();
        let submission = gated_copy(&context, &gate, &src, &dst);
        drop((src, dst, pool, image, view, sampler));
        for name in ["pool src", "pool dst", "misuse busy pool page heap 1", "busy image", "busy image view"]
        {
            assert!(live(device, name), "{name} waits for the GPU");
        }
        signal(device, &gate, 1);
        context.wait(submission).unwrap();
        device.maintain();
        for name in ["pool src", "pool dst", "misuse busy pool page heap 1", "busy image", "busy image view"]
        {
            assert!(!live(device, name), "{name} destroyed after the GPU");
        }
    });
}

#[test]
fn misuse_renderer_uses_keep_a_dropped_buffer_until_their_frame_or_timeline_value() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let frames = upload_buffer(device, "used for two frames", 64);
        frames.used_until(device.frames_from_now(2)).unwrap();
        drop(frames);
        assert!(live(device, "used for two frames"));
        device.advance_frame();
        assert!(live(device, "used for two frames"), "one frame is not enough");
        device.advance_frame();
        assert!(!live(device, "used for two frames"), "destroyed at the second frame");

        let timeline = device.create_timeline("renderer frames").unwrap();
        let timed = upload_buffer(device, "used until value 5", 64);
        timed.used_until(timeline.at(5)).unwrap();
        drop(timed);
        signal(device, &timeline, 4);
        device.maintain();
        assert!(live(device, "used until value 5"));
        signal(device, &timeline, 5);
        device.maintain();
        assert!(!live(device, "used until value 5"));
    });
}

#[test]
fn misuse_a_gpu_use_of_another_device_is_refused() {
    with_gpu(|set| {
        let (d0, d1) = (&set.devices()[0], &set.devices()[1]);
        let buffer = upload_buffer(d0, "use on 1", 64);
        assert!(buffer.used_until(d1.frames_from_now(1)).is_err());
        let timeline = d1.create_timeline("on 1").unwrap();
        assert!(buffer.used_until(timeline.at(1)).is_err());
        drop(buffer);
        assert!(!live(d0, "use on 1"), "the refused uses were not recorded");
    });
}

#[test]
fn misuse_uploading_to_a_buffer_of_another_device_is_a_typed_error() {
    with_gpu(|set| {
        let (d0, d1) = (&set.devices()[0], &set.devices()[1]);
        let uploader = Uploader::new(d0, "misuse uploader", 1 << 16).unwrap();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
        let other = d1.create_buffer(&BufferDesc::new("on device 1", 256, usage)).unwrap();
        let err = uploader.write_buffer(&other, 0, &[0; 256]).unwrap_err();
        assert!(matches!(err, UploadError::WrongDevice { .. }), "{err}");
        uploader.flush().unwrap();
    });
}

#[test]
fn misuse_dropping_an_upload_destination_before_the_flush_keeps_it_until_the_copy_ran() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let uploader = Uploader::new(device, "misuse early drop", 1 << 16).unwrap();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
        let dst = device.create_buffer(&BufferDesc::new("dropped before the flush", 4096, usage)).unwrap();
        uploader.write_buffer(&dst, 0, &[9; 4096]).unwrap();
        drop(dst);
        assert!(live(device, "dropped before the flush"), "the queued copy keeps it");
        uploader.flush().unwrap();
        uploader.wait_idle().unwrap();
        device.maintain();
        assert!(!live(device, "dropped before the flush"));
    });
}

#[test]
fn misuse_a_transient_frame_placed_where_the_previous_one_still_runs_is_ordered_on_the_gpu() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let mut pool = TransientPool::new(Arc::clone(device), "misuse transients").unwrap();
        let context = CommandContext::new(device, "misuse transient frames").unwrap();
        let request = |name: &str, kib: u64, passes| TransientRequest::Buffer {
            name: name.into(),
            size: kib << 10,
            usage: BufferUsage::STORAGE | BufferUsage::COPY_DST,
            passes,
            uses: (Use::TransferDst, Use::TransferDst),
        };
        let mut in_flight = Vec::new();
        // Frames 0 and 1 reuse the same bytes; frame 2 grows the heap while frame 1 may run.
        for (frame, kib) in [(0u32, 64u64), (1, 64), (2, 256)] {
            let requests = [request("first", kib, 0..=0), request("second", kib, 1..=1)];
            let transient = pool.begin_frame(&requests).unwrap();
            let mut first_pass_barriers = 0;
            let submission = context
                .submit(&[], |rec| {
                    for pass in 0..2u32 {
                        let barriers = pool.record_pass_start(rec, &transient, pass).unwrap();
                        if pass == 0 {
                            first_pass_barriers = barriers;
                        }
                        let buffer = transient.buffer(pass as usize).unwrap();
                        // SAFETY: `rec` is recording on this device; the buffer is live and bound.
                        unsafe {
                            device.raw().cmd_fill_buffer(rec.raw(), buffer.raw(), 0, vk::WHOLE_SIZE, frame)
                        };
                    }
                })
                .unwrap();
            // Frame 1's first pass writes bytes frame 0 may still be writing: it waits for them.
            // Frame 0 starts in a fresh heap.
            if frame < 2 {
                assert_eq!(first_pass_barriers, usize::from(frame == 1), "frame {frame}");
            }
            // No wait: the frame is released while the GPU may still run it.
            pool.end_frame(transient);
            in_flight.push(submission);
        }
        for submission in in_flight {
            context.wait(submission).unwrap();
        }
        device.maintain();
        assert_eq!(device.pending_destruction(), 0);
    });
}

#[test]
fn misuse_an_early_return_from_a_frame_loop_with_frames_in_flight_leaks_nothing() {
    #[derive(Debug)]
    struct Stop;
    fn frame_loop(device: &Device, gate: &Timeline) -> Result<(), Stop> {
        let context = CommandContext::new(device, "misuse loop").map_err(|_| Stop)?;
        let uploader = Uploader::new(device, "misuse loop uploads", 1 << 16).map_err(|_| Stop)?;
        let mut slots = Vec::new();
        for frame in 0..8u32 {
            let src = upload_buffer(device, &format!("loop src {frame}"), 4096);
            let dst = upload_buffer(device, &format!("loop dst {frame}"), 4096);
            uploader.write_buffer(&dst, 0, &[frame as u8; 4096]).map_err(|_| Stop)?;
            uploader.flush().map_err(|_| Stop)?;
            let image = device
                .create_image(&ImageDesc::new_2d(
                    "loop image",
                    Format::R8G8B8A8Unorm,
                    8,
                    8,
                    ImageUsage::SAMPLED,
                ))
                .map_err(|_| Stop)?;
            let view = image.create_view(0..1).map_err(|_| Stop)?;
            slots.push((gated_copy(&context, gate, &src, &dst), src, dst, image, view));
            if frame == 5 {
                // The renderer bails out with frames in flight: everything above drops here.
                return Err(Stop);
            }
        }
        Ok(())
    }
    with_gpu(|set| {
        let device = &set.devices()[0];
        let gate = device.create_timeline("misuse loop gate").unwrap();
        // SAFETY: the test opens the gate with a host signal, waiting for nothing that waits for it.
        unsafe { gate.signal_submitted(1) };
        // The device set is shared by the tests of this process: free the empty heaps the general
        // allocator keeps for reuse (one per memory type, by design, and which types earlier tests
        // touched varies with their order) on both sides of the comparison.
        device.release_empty_heaps();
        let before = device.ledger().live_objects().len();
        // Open: the loop's copies run as soon as they are submitted (a closed gate would also
        // hold back the uploader's copies behind them on a one-queue device).
        signal(device, &gate, 1);
        assert!(frame_loop(device, &gate).is_err());
        device.wait_submitted().unwrap();
        assert_eq!(device.pending_destruction(), 0);
        device.release_empty_heaps();
        assert!(device.ledger().live_objects().len() <= before, "{:?}", device.ledger().live_objects());
    });
}

#[test]
fn misuse_non_coherent_neighbours_never_share_an_atom() {
    let Ok(set) = DeviceSet::new(&test_desc().with_min_devices(1).with_non_coherent_memory(256)) else {
        assert!(!residency_vulkan::testing::gpu_required(), "a device is required");
        return;
    };
    let device = Arc::clone(&set.devices()[0]);
    let atom = device.limits().non_coherent_atom_size;
    assert!(atom >= 256);
    let mut a = upload_buffer(&device, "neighbour a", 100);
    let mut b = upload_buffer(&device, "neighbour b", 100);
    assert_eq!(a.memory().0, b.memory().0, "both in one heap");
    let (oa, ob) = (a.memory().1, b.memory().1);
    assert_eq!(oa % atom, 0, "a starts on an atom");
    assert_eq!(ob % atom, 0, "b starts on an atom");
    assert!(oa.abs_diff(ob) >= atom, "a's flush range ({atom} B from {oa}) cannot reach b at {ob}");
    // a's write is flushed, b's invalidated: neither range touches the other's bytes.
    a.write(0, &[0xaa; 100]).unwrap();
    b.write(0, &[0xbb; 100]).unwrap();
    let mut back = [0; 100];
    b.read(0, &mut back).unwrap();
    assert_eq!(back, [0xbb; 100]);
    a.read(0, &mut back).unwrap();
    assert_eq!(back, [0xaa; 100]);
    // The pools place the same way.
    let desc = BufferPoolDesc::new("atoms", BufferPoolUsage::Unknown)
        .with_memory(MemoryIntent::Upload)
        .with_page_size(1 << 20);
    let pool = BufferPool::new(Arc::clone(&device), desc).unwrap();
    let c = pool.init_buffer(&BufferInit::new("c", 10).with_usage(BufferUsage::STORAGE)).unwrap();
    let d = pool.init_buffer(&BufferInit::new("d", 10).with_usage(BufferUsage::STORAGE)).unwrap();
    assert_eq!(c.memory().1 % atom, 0);
    assert_eq!(d.memory().1 % atom, 0);
    let problems = device.validation_log().problem_count();
    drop((a, b, c, d, pool, device));
    set.close().unwrap();
    assert_eq!(problems, 0);
}

#[test]
fn misuse_images_with_impossible_sample_counts_or_shapes_are_refused_before_vkcreateimage() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let base = ImageDesc::new_2d("misuse shape", Format::R8G8B8A8Unorm, 16, 16, ImageUsage::SAMPLED);
        for (what, desc) in [
            ("no samples", ImageDesc { samples: 0, ..base.clone() }),
            ("three samples", ImageDesc { samples: 3, ..base.clone() }),
            ("multisampled with mips", ImageDesc { samples: 4, mip_levels: 2, ..base.clone() }),
            ("a 2D image with depth", ImageDesc { extent: [16, 16, 4], ..base.clone() }),
        ] {
            let before = device.ledger().live_objects();
            let err = device.create_image(&desc).unwrap_err();
            assert!(matches!(err, residency_vulkan::MemoryError::Unsatisfiable { .. }), "{what}: {err}");
            assert_eq!(device.ledger().live_objects(), before, "{what}: nothing made");
        }
        // A transient image goes through the same check.
        let mut pool = TransientPool::new(Arc::clone(device), "misuse transient shape").unwrap();
        let request = TransientRequest::Image {
            desc: ImageDesc { samples: 3, ..base.clone() },
            passes: 0..=0,
            uses: (Use::TransferDst, Use::TransferDst),
        };
        assert!(pool.begin_frame(&[request]).is_err());
    });
}

#[test]
fn misuse_a_view_of_an_image_no_view_can_serve_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let desc = ImageDesc::new_2d("copy only", Format::R8G8B8A8Unorm, 8, 8, ImageUsage::COPY_DST);
        let image = device.create_image(&desc).unwrap();
        let err = image.create_view(0..1).unwrap_err();
        assert!(err.to_string().contains("no usage a view can serve"), "{err}");
        assert!(!live(device, "copy only view"));
    });
}

#[test]
fn misuse_an_uploader_ring_too_small_to_hold_a_copy_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let before = device.ledger().live_objects();
        let err = Uploader::new(device, "misuse tiny ring", 1).unwrap_err();
        assert!(matches!(err, UploadError::RingTooSmall { capacity: 1, .. }), "{err}");
        assert_eq!(device.ledger().live_objects(), before);
    });
}

#[test]
fn misuse_a_transient_heap_growth_that_fails_leaves_the_pool_as_it_was() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let mut pool = TransientPool::new(Arc::clone(device), "misuse growth").unwrap();
        let request = |kib: u64| TransientRequest::Buffer {
            name: format!("{kib} KiB"),
            size: kib << 10,
            usage: BufferUsage::STORAGE,
            passes: 0..=0,
            uses: (Use::TransferDst, Use::TransferDst),
        };
        drop(pool.begin_frame(&[request(64)]).unwrap());
        let heap_bytes = pool.heap_bytes();
        device.ledger().inject_out_of_memory(1);
        let err = pool.begin_frame(&[request(1024)]).unwrap_err();
        device.ledger().clear_faults();
        assert!(matches!(err, residency_vulkan::MemoryError::OutOfDeviceMemory { .. }), "{err}");
        assert_eq!(pool.heap_bytes(), heap_bytes, "the old heap stays");
        // The pool plans against the heaps it has: both a frame that fits and one that grows work.
        drop(pool.begin_frame(&[request(64)]).unwrap());
        drop(pool.begin_frame(&[request(1024)]).unwrap());
        assert!(pool.heap_bytes() >= 1024 << 10);
    });
}

#[test]
fn misuse_waiting_for_submitted_work_after_a_failed_submit_returns() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let context = CommandContext::new(device, "misuse failed submit").unwrap();
        device.ledger().inject_fault(
            residency_vulkan::FaultSite::QueueSubmit,
            0,
            residency_vulkan::InjectedFault::OutOfDeviceMemory,
        );
        assert!(context.submit(&[], |_| {}).is_err());
        device.ledger().clear_faults();
        let started = std::time::Instant::now();
        device.wait_submitted().unwrap();
        // A hang guard, not a speed bound: a wait for the never-signalled value would not return;
        // a busy machine may still take seconds.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no wait for a value never signalled"
        );
        let ok = context.submit(&[], |_| {}).unwrap();
        context.wait(ok).unwrap();
    });
}

#[test]
fn misuse_a_submission_waiting_on_a_frame_count_or_another_devices_timeline_is_refused() {
    with_gpu(|set| {
        let (d0, d1) = (&set.devices()[0], &set.devices()[1]);
        let context = CommandContext::new(d0, "misuse waits").unwrap();
        let other = d1.create_timeline("on device 1").unwrap();
        let mut ran = false;
        assert!(context.submit(&[other.at(1)], |_| ran = true).is_err());
        assert!(context.submit(&[d0.frames_from_now(1)], |_| ran = true).is_err());
        assert!(!ran, "nothing was recorded");
        // A wait on this device's own timeline, signalled already, runs.
        let own = d0.create_timeline("on device 0").unwrap();
        signal(d0, &own, 1);
        let ok = context.submit(&[own.at(1), d0.submitted_work()], |_| {}).unwrap();
        context.wait(ok).unwrap();
    });
}
