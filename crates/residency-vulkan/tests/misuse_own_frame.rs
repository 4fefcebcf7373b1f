//! Misuse of a renderer's own frame (`Device::import_timeline`, `Recording::submit`,
//! `Recording::finish` and `PendingFrame`, the streamer's `end_frame` with its points, teardown of
//! an adopted device): each is refused with a typed error, or bounded, never a hang.

use app::app;
use ash::vk;
use residency_core::usage::BufferUsage;
use residency_vulkan::recording::Recording;
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{BufferDesc, Device, DeviceSet, ExternalDevice, VulkanError};
use std::sync::Arc;

#[path = "common/app.rs"]
mod app;
mod common;
#[path = "common/watchdog.rs"]
mod watchdog;

/// A command pool of the universal family with one command buffer, begun.
struct Own {
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
}

impl Own {
    fn new(device: &Device) -> Own {
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(device.universal_queue().family())
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid device and family.
        let pool = unsafe { device.raw().create_command_pool(&info, None) }.unwrap();
        let alloc = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
        // SAFETY: a pool of this device.
        let cmd = unsafe { device.raw().allocate_command_buffers(&alloc) }.unwrap()[0];
        let own = Own { pool, cmd };
        own.begin(device);
        own
    }

    /// Resets and begins the command buffer (its last submission, if any, completed).
    fn begin(&self, device: &Device) {
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: not pending (callers wait for its submission first).
        unsafe {
            device.raw().reset_command_buffer(self.cmd, vk::CommandBufferResetFlags::empty()).unwrap();
            device.raw().begin_command_buffer(self.cmd, &begin).unwrap();
        }
    }

    /// A recording over the command buffer.
    fn recording<'a>(&self, device: &'a Device) -> Recording<'a> {
        // SAFETY: a primary command buffer of the universal family, begun, outside a render
        // pass; only this recording records into it and it is submitted only through it.
        unsafe { Recording::from_raw(device, self.cmd) }
    }

    fn destroy(self, device: &Device) {
        // SAFETY: every submission of the command buffer completed (callers wait first).
        unsafe { device.raw().destroy_command_pool(self.pool, None) };
    }
}

fn scratch(device: &Device, name: &str) -> residency_vulkan::Buffer {
    device.create_buffer(&BufferDesc::new(name, 256, BufferUsage::COPY_DST | BufferUsage::STORAGE)).unwrap()
}

/// A null handle or a semaphore that already is a timeline of the device is refused, importing
/// nothing (Vulkan cannot be asked whether a semaphore is a timeline one: a binary semaphore is
/// the caller's broken promise, not a check).
#[test]
fn misuse_import_timeline_refuses_null_and_a_timeline_already_known() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // SAFETY: refused before any use of the handle.
        let null = unsafe { device.import_timeline(vk::Semaphore::null(), "null") };
        assert!(matches!(null, Err(VulkanError::Unsupported { .. })), "{null:?}");
        let ours = device.create_timeline("made by residency").unwrap();
        // SAFETY: a timeline semaphore of this device that lives as long as it; refused anyway.
        let twice = unsafe { device.import_timeline(ours.raw(), "again") };
        assert!(
            matches!(&twice, Err(VulkanError::Unsupported { reason, .. }) if reason.contains("already")),
            "{twice:?}"
        );
    });
}

/// A frame signalling a value not above its timeline's (a second frame with the same value) is
/// refused with `TimelineValue` and submits nothing; the next value is accepted.
#[test]
fn misuse_a_frame_signalling_a_timeline_value_twice_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let timeline = device.create_timeline("frames").unwrap();
        let own = Own::new(device);
        let buffer = scratch(device, "frame buffer");
        let mut rec = own.recording(device);
        rec.fill_buffer(&buffer, 0, 256, 1).unwrap();
        let first = rec.submit(&timeline, 1).unwrap();
        device.wait_until(&first).unwrap();
        own.begin(device);
        let mut rec = own.recording(device);
        rec.fill_buffer(&buffer, 0, 256, 2).unwrap();
        let again = rec.submit(&timeline, 1);
        assert!(
            matches!(again, Err(VulkanError::TimelineValue { value: 1, current: 1, announced: 1, .. })),
            "{again:?}"
        );
        own.begin(device);
        let mut rec = own.recording(device);
        rec.fill_buffer(&buffer, 0, 256, 3).unwrap();
        let second = rec.submit(&timeline, 2).unwrap();
        device.wait_until(&second).unwrap();
        assert_eq!(timeline.announced(), 2);
        own.destroy(device);
    });
}

/// A timeline of another device is refused by a frame (`ForeignToken`), nothing submitted.
#[test]
fn misuse_a_frame_signalling_another_devices_timeline_is_refused() {
    with_gpu(|set| {
        let (device, other) = (&set.devices()[0], &set.devices()[1]);
        let foreign = other.create_timeline("other device's frames").unwrap();
        let own = Own::new(device);
        let refused = own.recording(device).submit(&foreign, 1);
        assert!(matches!(refused, Err(VulkanError::ForeignToken { .. })), "{refused:?}");
        assert_eq!(foreign.announced(), 0, "nothing announced");
        own.destroy(device);
    });
}

/// A recording dropped without its submission (a `?` between recording and submit) declares
/// nothing: what it recorded is destroyed at once when dropped, and nothing waits for a frame
/// that never ran.
#[test]
fn misuse_a_frame_never_submitted_declares_nothing() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let _timeline = device.create_timeline("frames").unwrap();
        device.wait_submitted().unwrap();
        let own = Own::new(device);
        let buffer = scratch(device, "never submitted");
        let mut rec = own.recording(device);
        rec.fill_buffer(&buffer, 0, 256, 7).unwrap();
        drop(rec);
        drop(buffer);
        assert_eq!(device.pending_destruction(), 0, "nothing waits for a frame that was never submitted");
        own.destroy(device);
    });
}

/// While a `PendingFrame` lives residency's universal queue is locked: a residency submission on
/// the same thread is refused (`Reentrant`), not a deadlock; dropped unsubmitted it releases the
/// queue, announces nothing, and the value may be used again.
#[test]
fn misuse_a_residency_submission_while_a_pending_frame_holds_the_queue_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let timeline = device.create_timeline("frames").unwrap();
        let own = Own::new(device);
        let pending = own.recording(device).finish(&timeline, 1).unwrap();
        assert_eq!(pending.signal().value, 1);
        let refused = device.submit_once("inside a pending frame", |_| {});
        assert!(matches!(refused, Err(VulkanError::Reentrant { .. })), "{refused:?}");
        drop(pending);
        assert_eq!(timeline.announced(), 0);
        device.submit_once("after it", |_| {}).unwrap();
        own.begin(device);
        let done = own.recording(device).submit(&timeline, 1).unwrap();
        device.wait_until(&done).unwrap();
        own.destroy(device);
    });
}

/// `end_frame` with a point no submission has announced yet (the frame is not submitted) is
/// refused and leaves the frame open; with a point at or below what the timeline had announced
/// when the frame was recorded (an older frame's) it is refused too. The frame's own point ends it.
#[test]
fn misuse_end_frame_with_a_point_not_the_frames_own_is_refused() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let timeline = device.create_timeline("frames").unwrap();
        let mut streamer = Streamer::new(&device, StreamerDesc::default().with_name("own frames")).unwrap();
        let own = Own::new(&device);
        for value in 1..=2u64 {
            if value > 1 {
                own.begin(&device);
            }
            let bindings = streamer.begin_frame().unwrap();
            let mut rec = own.recording(&device);
            bindings.record(&mut rec, |_| ()).unwrap();
            drop(bindings);
            let unsubmitted = streamer.end_frame(timeline.at(value));
            assert!(
                matches!(unsubmitted, Err(StreamError::Vulkan(VulkanError::UnreachableWait { .. }))),
                "{unsubmitted:?}"
            );
            assert!(streamer.in_frame(), "the frame stays open");
            let done = rec.submit(&timeline, value).unwrap();
            if value > 1 {
                let older = streamer.end_frame(timeline.at(value - 1));
                assert!(matches!(older, Err(StreamError::FrameOrder(_))), "{older:?}");
            }
            streamer.end_frame(done).unwrap();
            device.wait_until(&done).unwrap();
        }
        drop(streamer);
        own.destroy(&device);
    });
}

/// Teardown of an adopted device never waits for a renderer value no signal announced (a use
/// declared for a frame that was never submitted): `close` refuses within its bound and hands the
/// set back; once the use ends it closes, and the application destroys its device without
/// waiting for it to go idle.
#[test]
fn misuse_close_with_a_use_of_a_frame_never_submitted_refuses_without_waiting() {
    let Some(app) = app() else { return };
    watchdog::within("close with an unannounced use", move || {
        let external = ExternalDevice {
            physical: app.physical,
            device: app.device.clone(),
            universal_queue: (app.family, 0),
            sparse_queue: app.features.sparse_binding.then_some((app.family, 0)),
            features: app.features,
        };
        let mut ty = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
        // SAFETY: valid device with timeline semaphores.
        let raw = unsafe {
            app.device.create_semaphore(&vk::SemaphoreCreateInfo::default().push_next(&mut ty), None)
        }
        .unwrap();
        // SAFETY: made as `adopt` requires; the device outlives the set.
        let set =
            unsafe { DeviceSet::adopt(app.entry.clone(), app.instance.clone(), true, &[external]) }.unwrap();
        let device = Arc::clone(&set.devices()[0]);
        // SAFETY: a timeline semaphore of this device, destroyed after the set is closed.
        let timeline = unsafe { device.import_timeline(raw, "renderer frames") }.unwrap();
        let buffer = scratch(&device, "declared for frame 5");
        buffer.used_until(timeline.at(5)).unwrap();
        drop((buffer, device));
        let started = std::time::Instant::now();
        let refused = set.close().expect_err("a use that has not ended");
        // Waiting would take at least the whole bound: the frame is never submitted, so its value
        // never comes, and a timed wait returns only once its timeout has passed. A close that
        // waited fails here on any machine; one that refused at once fails only if it took the
        // whole 30 s (the watchdog's order: a hang guard, not a speed bound).
        let bound = std::time::Duration::from_nanos(residency_vulkan::ADOPTED_TEARDOWN_WAIT_NS);
        assert!(started.elapsed() < bound, "refused without waiting for the teardown bound");
        assert_eq!(refused.alive[0].pending_destruction, 1, "{refused}");
        // The frame's value is reached after all (here on the host) and announced: it closes.
        let signal = vk::SemaphoreSignalInfo::default().semaphore(raw).value(5);
        // SAFETY: a timeline of this device at 0, nothing pending on it.
        unsafe { app.device.signal_semaphore(&signal) }.unwrap();
        // SAFETY: the signal above was performed.
        unsafe { timeline.signal_submitted(5) };
        let problems = refused.set.validation_log().problem_count();
        refused.set.close().unwrap();
        assert_eq!(problems, 0);
        // SAFETY: `close` returned Ok: residency drained its queue; nothing else used them.
        unsafe {
            app.device.destroy_semaphore(raw, None);
            app.device.destroy_device(None);
            app.instance.destroy_instance(None);
        }
    });
}
