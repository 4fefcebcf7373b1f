//! Red team, synchronisation and frames (issue #29 follow-up): scenarios written in safe Rust
//! against the public API of `residency_vulkan` that try to break the submission tokens, the
//! frame protocols (transient pools, the streamer, the multi-device layer), the locks and the
//! teardown order. Each runs under the GPU harness (synchronization validation; a validation
//! message or a leaked object fails it); scenarios that could hang run under the watchdog.
//! The scenarios that broke the library live on, fixed, in `misuse_redteam_sync.rs`.

#![forbid(unsafe_code)]

use residency_core::device_mask::{DeviceIndex, DeviceMask};
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::{DecodedTileCache, FnSource, TileSource};
use residency_core::sync::Use;
use residency_core::usage::BufferUsage;
use residency_core::vt_file::VtDesc;
use residency_vulkan::multi::streaming::MultiStreamer;
use residency_vulkan::multi::work::{MultiSubmitter, MultiTimeline, MultiTimestamps, WorkError, WorkItem};
use residency_vulkan::multi::{MultiDevice, MultiDeviceError, MultiTransientPool};
use residency_vulkan::recording::Timestamps;
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::tracking::ResourceTracker;
use residency_vulkan::transient::{TransientPool, TransientRequest};
use residency_vulkan::{Buffer, BufferDesc, CommandContext, Device, VulkanError};
use std::sync::Arc;

#[path = "common/watchdog.rs"]
mod watchdog;

fn d(i: u32) -> DeviceIndex {
    DeviceIndex::new(i).unwrap()
}

fn readback(device: &Device, name: &str, size: u64) -> Buffer {
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    device.create_buffer(&BufferDesc::new(name, size, usage).with_intent(MemoryIntent::Readback)).unwrap()
}

fn live(device: &Device, name: &str) -> bool {
    device.ledger().live_objects().iter().any(|o| &*o.name == name)
}

fn source(name: &str) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, 512, 512, 128, 128);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok(vec![(mip * 31 + x * 7 + y) as u8; (w * h * 4) as usize])
    }))
}

// ---------------------------------------------------------------------------------------------
// Tokens and waits
// ---------------------------------------------------------------------------------------------

/// A `Submission` of one `MultiSubmitter` handed to a second one over the same device is
/// refused (another context issued it), and to the first one for the other device too.
#[test]
fn a_submission_of_one_multi_submitter_is_refused_by_another_and_by_the_other_device() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let a = MultiSubmitter::new(set, both).unwrap();
        let b = MultiSubmitter::new(set, both).unwrap();
        let s = a.submit(d(0), &[WorkItem::Barrier]).unwrap();
        let foreign = |e: &WorkError| matches!(e, WorkError::Vulkan(VulkanError::ForeignToken { .. }));
        let err = b.wait(d(0), s).unwrap_err();
        assert!(foreign(&err), "{err:?}");
        let s = a.submit(d(0), &[WorkItem::Barrier]).unwrap();
        let err = a.wait(d(1), s).unwrap_err();
        assert!(foreign(&err), "{err:?}");
        a.destroy();
        b.destroy();
    });
}

/// A submission waited for long after its slot was reused by later submissions: no wrong
/// fence is waited for, nothing hangs, and `is_complete` answers true.
#[test]
fn an_old_submission_whose_slot_was_reused_is_complete_and_waits_for_nothing() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        watchdog::within("old submission", move || {
            let ctx = CommandContext::new(&device, "redteam reuse").unwrap();
            let first = ctx.submit(&[], |_| {}).unwrap();
            ctx.wait_for(&first).unwrap();
            for _ in 0..8 {
                let s = ctx.submit(&[], |_| {}).unwrap();
                ctx.wait(s).unwrap();
            }
            assert!(ctx.is_complete(&first).unwrap());
            ctx.wait_for(&first).unwrap();
            ctx.wait(first).unwrap();
        })
    });
}

/// Waits on things that are no GPU event, or of another device, are refused at once.
#[test]
fn waits_for_frame_counts_or_other_devices_uses_are_refused_not_hung() {
    with_gpu(|set| {
        let (d0, d1) = (Arc::clone(&set.devices()[0]), Arc::clone(&set.devices()[1]));
        watchdog::within("refused waits", move || {
            assert!(d0.wait_until(&d0.frames_from_now(1)).is_err());
            assert!(d0.wait_until(&d0.frames_from_now(u64::MAX)).is_err());
            let ctx1 = CommandContext::new(&d1, "redteam other device").unwrap();
            let s = ctx1.submit(&[], |_| {}).unwrap();
            assert!(d0.wait_until(&s.gpu_use()).is_err());
            assert!(!d0.has_completed(&s.gpu_use()));
            let ctx0 = CommandContext::new(&d0, "redteam this device").unwrap();
            assert!(ctx0.submit(&[s.gpu_use()], |_| {}).is_err(), "a wait for another device's work");
            let s0 = ctx0
                .submit(&[], |rec| {
                    rec.wait_for(d0.frames_from_now(2)).unwrap_err();
                })
                .unwrap();
            ctx0.wait(s0).unwrap();
            ctx1.wait(s).unwrap();
        })
    });
}

/// A timeline wait past anything announced is refused where it is made: in `submit`'s waits,
/// in `Recording::wait_for`, in `Device::wait_until`. Nothing is left waiting at teardown.
#[test]
fn unannounced_timeline_values_are_refused_by_every_wait() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        watchdog::within("unannounced timeline", move || {
            let timeline = device.create_timeline("redteam unannounced").unwrap();
            let ctx = CommandContext::new(&device, "redteam unannounced").unwrap();
            let unreachable = |e: &VulkanError| matches!(e, VulkanError::UnreachableWait { .. });
            assert!(unreachable(&ctx.submit(&[timeline.at(1)], |_| {}).unwrap_err()));
            assert!(unreachable(&ctx.submit(&[timeline.at(u64::MAX)], |_| {}).unwrap_err()));
            assert!(unreachable(&inner_err(&ctx, &timeline)));
            assert!(unreachable(&device.wait_until(&timeline.at(1)).unwrap_err()));
            // Value 0 is where every timeline starts: reachable.
            let s = ctx.submit(&[timeline.at(0)], |_| {}).unwrap();
            ctx.wait(s).unwrap();
        })
    });
}

fn inner_err(ctx: &CommandContext, timeline: &residency_vulkan::Timeline) -> VulkanError {
    let mut out = None;
    let s = ctx.submit(&[], |rec| out = rec.wait_for(timeline.at(3)).err()).unwrap();
    ctx.wait(s).unwrap();
    out.expect("refused")
}

/// Re-entrant calls from inside a submission's closure: the same context's `is_complete`,
/// `wait_for`, `submit`; `Device::wait_idle` and `submit_once` while the queue lock is held.
/// Each is a typed error, none deadlocks, and the context works afterwards.
#[test]
fn reentrant_calls_under_the_context_and_queue_locks_are_refused() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        watchdog::within("reentrant", move || {
            let ctx = CommandContext::new(&device, "redteam reentrant").unwrap();
            let first = ctx.submit(&[], |_| {}).unwrap();
            let reentrant = |e: &VulkanError| matches!(e, VulkanError::Reentrant { .. });
            let s = ctx
                .submit(&[], |_| {
                    assert!(reentrant(&ctx.is_complete(&first).unwrap_err()));
                    assert!(reentrant(&ctx.wait_for(&first).unwrap_err()));
                })
                .unwrap();
            ctx.wait(s).unwrap();
            ctx.wait(first).unwrap();
            {
                let _queue = device.universal_queue().lock().unwrap();
                assert!(reentrant(&device.wait_idle().unwrap_err()));
                assert!(reentrant(&device.submit_once("under the lock", |_| {}).unwrap_err()));
                assert!(reentrant(&ctx.submit(&[], |_| {}).unwrap_err()));
                // Retiring needs no queue: no deadlock.
                drop(readback(&device, "redteam dropped under the queue lock", 64));
                device.maintain();
            }
            let s = ctx.submit(&[], |_| {}).unwrap();
            ctx.wait(s).unwrap();
        })
    });
}

/// A panic inside a submission's recording closure (the context's lock held, its command buffer
/// recording, a buffer recorded) leaves the context usable and destroys nothing the GPU uses.
#[test]
fn a_panic_inside_a_recording_closure_leaves_the_context_usable() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let ctx = CommandContext::new(device, "redteam panic").unwrap();
        let buffer = readback(device, "redteam panic buffer", 256);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = ctx.submit(&[], |rec| {
                rec.fill_buffer(&buffer, 0, 256, 7).unwrap();
                panic!("the renderer's closure panics");
            });
        }));
        assert!(panicked.is_err());
        drop(buffer);
        let buffer = readback(device, "redteam after panic", 256);
        let s = ctx.submit(&[], |rec| rec.fill_buffer(&buffer, 0, 256, 9).unwrap()).unwrap();
        ctx.wait(s).unwrap();
        let mut out = [0u8; 4];
        buffer.read(0, &mut out).unwrap();
        assert_eq!(u32::from_le_bytes(out), 9);
    });
}

// ---------------------------------------------------------------------------------------------
// Recording helpers
// ---------------------------------------------------------------------------------------------

/// Objects dropped inside the closure after a helper recorded them (a buffer, a timestamp pool,
/// a transient frame) are held until the submission ran: no destroy-in-use message.
#[test]
fn objects_dropped_inside_the_closure_after_recording_wait_for_the_submission() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let ctx = CommandContext::new(device, "redteam dropped inside").unwrap();
        let src = readback(device, "redteam src", 1024);
        let dst = readback(device, "redteam dst", 1024);
        let stamps = Timestamps::new(device, "redteam stamps", 4).unwrap();
        let mut pool = TransientPool::new(Arc::clone(device), "redteam transients").unwrap();
        let frame = pool
            .begin_frame(&[TransientRequest::Buffer {
                name: "redteam transient".into(),
                size: 4096,
                usage: BufferUsage::COPY_DST,
                passes: 0..=0,
                uses: (Use::TransferDst, Use::TransferDst),
            }])
            .unwrap();
        let mut payload = Some((src, dst, stamps, frame));
        let s = ctx
            .submit(&[], |rec| {
                let (src, dst, stamps, frame) = payload.take().unwrap();
                stamps.cmd_write(rec, 0).unwrap();
                rec.copy_buffer(&src, 0, &dst, 0, 1024).unwrap();
                pool.record_pass_start(rec, &frame, 0).unwrap();
                rec.fill_buffer(frame.buffer(0).unwrap(), 0, 4096, 3).unwrap();
                stamps.cmd_write(rec, 1).unwrap();
                stamps.cmd_write(rec, 99).unwrap(); // outside the pool: nothing
                drop((src, dst, stamps, frame));
            })
            .unwrap();
        ctx.wait(s).unwrap();
        device.maintain();
        assert!(!live(device, "redteam src"));
    });
}

/// Timestamps read before anything wrote them, and reset ranges out of order, answer `None` or
/// nothing; a multi-device timestamp index past the pool is a typed error.
#[test]
fn timestamps_read_early_or_reset_backwards_are_harmless() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let stamps = Timestamps::new(device, "redteam early stamps", 2).unwrap();
        assert_eq!(stamps.at_ms(0), None);
        assert_eq!(stamps.elapsed_ms(0, 1), None);
        assert_eq!(stamps.elapsed_ms(0, u32::MAX), None);
        device
            .submit_once("redteam resets", |rec| {
                #[allow(clippy::reversed_empty_ranges)]
                stamps.cmd_reset(rec, 5..1).unwrap();
                stamps.cmd_reset(rec, u32::MAX..u32::MAX).unwrap();
                assert_eq!(rec.helper_commands(), 0);
            })
            .unwrap();
        assert!(Timestamps::new(device, "redteam too many", u32::MAX).is_err());
        let both = DeviceMask::from_bits(0b11);
        let multi = MultiTimestamps::new(set, both, "redteam multi stamps", 2).unwrap();
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let err = submitter.submit(d(1), &[WorkItem::Timestamp(&multi, 2)]).unwrap_err();
        assert!(matches!(err, WorkError::Timestamp { .. }), "{err:?}");
        submitter.destroy();
    });
}

/// A resource tracker keeps what it tracks alive: a buffer whose last handle is dropped while
/// tracked can still be named by a recorded barrier; once untracked it is refused.
#[test]
fn a_tracked_buffer_dropped_by_the_caller_stays_alive_for_the_tracker() {
    use residency_core::sync::{Region, TrackerOptions};
    with_gpu(|set| {
        let device = &set.devices()[0];
        let mut tracker = ResourceTracker::new(TrackerOptions::default());
        let buffer = readback(device, "redteam tracked", 256);
        let id = tracker.track_buffer(&buffer).unwrap();
        drop(buffer);
        assert!(live(device, "redteam tracked"));
        let family = device.universal_queue().family();
        for _ in 0..2 {
            let mut batch = tracker.batch(device.index(), family);
            batch.declare(id, Region::Whole, Use::TransferDst).unwrap();
            drop(batch.flush());
        }
        let flush = {
            let mut batch = tracker.batch(device.index(), family);
            batch.declare(id, Region::Whole, Use::TransferSrc).unwrap();
            batch.flush()
        };
        device
            .submit_once("redteam tracked barrier", |rec| {
                tracker.record(rec, &flush.barriers).unwrap();
            })
            .unwrap();
        tracker.untrack(device.index(), id).unwrap();
        device.maintain();
        assert!(!live(device, "redteam tracked"));
        device
            .submit_once("redteam untracked barrier", |rec| {
                let _ = tracker.record(rec, &flush.barriers);
            })
            .unwrap();
    });
}

// ---------------------------------------------------------------------------------------------
// Transient frames
// ---------------------------------------------------------------------------------------------

fn transient(name: &str) -> TransientRequest {
    TransientRequest::Buffer {
        name: name.into(),
        size: 4096,
        usage: BufferUsage::COPY_DST | BufferUsage::COPY_SRC,
        passes: 0..=0,
        uses: (Use::TransferDst, Use::TransferSrc),
    }
}

/// A frame of one pool given to another pool's `record_pass_start` and `end_frame`, or to a
/// pool of another device: refused or harmless.
#[test]
fn transient_frames_handed_to_the_wrong_pool() {
    with_gpu(|set| {
        let (d0, d1) = (&set.devices()[0], &set.devices()[1]);
        let mut a = TransientPool::new(Arc::clone(d0), "redteam pool a").unwrap();
        let mut b = TransientPool::new(Arc::clone(d0), "redteam pool b").unwrap();
        let mut other = TransientPool::new(Arc::clone(d1), "redteam pool other").unwrap();
        let frame = a.begin_frame(&[transient("redteam a frame")]).unwrap();
        d1.submit_once("redteam other device pass", |rec| {
            assert!(other.record_pass_start(rec, &frame, 0).is_err());
            assert_eq!(rec.helper_commands(), 0);
        })
        .unwrap();
        d0.submit_once("redteam wrong pool", |rec| {
            let _ = b.record_pass_start(rec, &frame, 0);
        })
        .unwrap();
        other.end_frame(frame);
        let f = b.begin_frame(&[transient("redteam b frame")]).unwrap();
        a.end_frame(f);
        let _ = &mut a;
    });
}

/// `MultiTransientPool::pool_mut` of two multi pools swapped: each pool keeps its own device;
/// a frame of the swapped-in pool is refused by the other device's recording.
#[test]
fn multi_transient_pools_swapped_between_devices_keep_their_devices() {
    with_gpu(|set| {
        let mut x = MultiTransientPool::new(set, d(0).mask(), "redteam x").unwrap();
        let mut y = MultiTransientPool::new(set, d(1).mask(), "redteam y").unwrap();
        // Both live at different indices: swapping their pools needs two entries.
        let mut both = MultiTransientPool::new(set, DeviceMask::from_bits(0b11), "redteam both").unwrap();
        let _ = (&mut x, &mut y);
        let mut frames = Vec::new();
        {
            let mut pools: Vec<&mut TransientPool> = Vec::new();
            if let Some(p) = x.pool_mut(d(0)) {
                pools.push(p);
            }
            if let Some(p) = y.pool_mut(d(1)) {
                pools.push(p);
            }
            let (first, rest) = pools.split_at_mut(1);
            std::mem::swap(first[0], rest[0]);
        }
        let p0 = x.pool_mut(d(0)).unwrap();
        frames.push(p0.begin_frame(&[transient("redteam swapped")]).unwrap());
        set.devices()[0]
            .submit_once("redteam swapped pass", |rec| {
                assert!(x.pool_mut(d(0)).unwrap().record_pass_start(rec, &frames[0], 0).is_err());
            })
            .unwrap();
        let _ = both.pool_mut(d(0));
        drop(frames);
    });
}

// ---------------------------------------------------------------------------------------------
// The streamer's frame protocol
// ---------------------------------------------------------------------------------------------

fn streamer(device: &Arc<Device>, name: &str) -> Streamer {
    let desc = StreamerDesc::default().with_name(name).with_budget_tiles(64).with_workers(1);
    Streamer::new(device, desc).unwrap()
}

/// `end_frame` with uses that cannot end it (another device's, a frame count, an unannounced
/// timeline value) is refused and leaves the frame open; the right use then ends it.
#[test]
fn end_frame_with_uses_that_cannot_end_it_is_refused_and_changes_nothing() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let other = Arc::clone(&set.devices()[1]);
        watchdog::within("end_frame uses", move || {
            let mut s = streamer(&device, "redteam end uses");
            let texture = s.add_texture("redteam end uses", source("end uses")).unwrap();
            let ctx = CommandContext::new(&device, "redteam end uses").unwrap();
            let other_ctx = CommandContext::new(&other, "redteam end uses other").unwrap();
            let timeline = device.create_timeline("redteam end uses").unwrap();
            let bindings = s.begin_frame().unwrap();
            let sub = ctx.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
            drop(bindings);
            let foreign = other_ctx.submit(&[], |_| {}).unwrap();
            assert!(s.end_frame(foreign.gpu_use()).is_err());
            assert!(s.end_frame(device.frames_from_now(1)).is_err());
            assert!(s.end_frame(timeline.at(7)).is_err());
            assert!(s.in_frame());
            s.end_frame(sub.gpu_use()).unwrap();
            assert!(!s.in_frame());
            assert!(matches!(s.end_frame(sub.gpu_use()), Err(StreamError::FrameOrder(_))));
            assert!(matches!(s.abandon_frame(), Err(StreamError::FrameOrder(_))));
            other_ctx.wait(foreign).unwrap();
            ctx.wait(sub).unwrap();
            s.remove_texture(texture).unwrap();
        })
    });
}

/// A frame recorded into a recording of another device is refused and can then be recorded
/// into the right one (the refusal does not count as the frame's recording).
#[test]
fn a_frame_refused_by_another_devices_recording_can_still_be_recorded() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let other = Arc::clone(&set.devices()[1]);
        watchdog::within("wrong device record", move || {
            let mut s = streamer(&device, "redteam wrong device");
            let texture = s.add_texture("redteam wrong device", source("wrong device")).unwrap();
            let bindings = s.begin_frame().unwrap();
            other
                .submit_once("redteam other device frame", |rec| {
                    assert!(bindings.record(rec, |_| ()).is_err());
                    assert_eq!(rec.helper_commands(), 0);
                })
                .unwrap();
            let ctx = CommandContext::new(&device, "redteam wrong device").unwrap();
            let sub = ctx.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
            drop(bindings);
            s.end_frame(sub.gpu_use()).unwrap();
            ctx.wait(sub).unwrap();
            s.remove_texture(texture).unwrap();
        })
    });
}

/// Calls out of order: begin twice, removal and CPU feedback inside a frame, frames never
/// recorded, frames abandoned after running, budgets at the extremes, compaction inside a frame.
#[test]
fn the_streamer_frame_protocol_out_of_order_and_at_extremes() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        watchdog::within("frame protocol", move || {
            let mut s = streamer(&device, "redteam protocol");
            let texture = s.add_texture("redteam protocol", source("protocol")).unwrap();
            let ctx = CommandContext::new(&device, "redteam protocol").unwrap();
            drop(s.begin_frame().unwrap());
            assert!(matches!(s.begin_frame(), Err(StreamError::FrameOrder(_))));
            assert!(matches!(s.compact(u32::MAX), Err(StreamError::FrameOrder(_))));
            assert!(s.remove_dropped_textures().is_err());
            // Never recorded: ended with a use of earlier work.
            let earlier = ctx.submit(&[], |_| {}).unwrap();
            s.end_frame(earlier.gpu_use()).unwrap();
            for budget in [0, 1, u32::MAX, 3] {
                assert!(s.set_budget_tiles(budget) >= 1);
                for _ in 0..3 {
                    let bindings = s.begin_frame().unwrap();
                    let sub = ctx.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
                    drop(bindings);
                    s.end_frame(sub.gpu_use()).unwrap();
                }
            }
            // A frame that ran, abandoned anyway: its copies are submitted again, harmlessly.
            let bindings = s.begin_frame().unwrap();
            let sub = ctx.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
            drop(bindings);
            s.abandon_frame().unwrap();
            ctx.wait(sub).unwrap();
            ctx.wait(earlier).unwrap();
            s.compact(u32::MAX).unwrap();
            s.remove_texture(texture).unwrap();
            // Frames without textures.
            for _ in 0..3 {
                let bindings = s.begin_frame().unwrap();
                assert!(bindings.feedback.is_none());
                let sub = ctx.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
                drop(bindings);
                s.end_frame(sub.gpu_use()).unwrap();
            }
            device.wait_submitted().unwrap();
        })
    });
}

/// A streamer dropped in the middle of a frame, with frames still on the GPU: nothing the GPU
/// uses is destroyed under it, nothing leaks.
#[test]
fn a_streamer_dropped_mid_frame_with_frames_in_flight() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        watchdog::within("dropped mid frame", move || {
            let mut s = streamer(&device, "redteam dropped");
            let texture = s.add_texture("redteam dropped", source("dropped")).unwrap();
            let ctx = CommandContext::new(&device, "redteam dropped").unwrap();
            let mut subs = Vec::new();
            for _ in 0..3 {
                let bindings = s.begin_frame().unwrap();
                subs.push(ctx.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap());
                drop(bindings);
                s.end_frame(subs.last().unwrap().gpu_use()).unwrap();
            }
            let _open = s.begin_frame().unwrap();
            drop(_open);
            drop(texture);
            drop(s);
            for sub in subs {
                ctx.wait(sub).unwrap();
            }
            device.wait_submitted().unwrap();
        })
    });
}

/// Two multi-device streamers' per-device streamers swapped (`streamer_mut`), and the two
/// devices' streamers of one swapped (`streamers_mut`): each texture is still removed by the
/// streamer that owns it, stats of a foreign texture are `None`, nothing panics or leaks.
#[test]
fn multi_streamers_with_swapped_streamers_stay_consistent() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let desc = StreamerDesc::default().with_name("redteam multi").with_budget_tiles(64).with_workers(1);
        let mut a = MultiStreamer::new(set, both, &desc, DecodedTileCache::new(16 << 20)).unwrap();
        let mut b = MultiStreamer::new(set, both, &desc, DecodedTileCache::new(16 << 20)).unwrap();
        let ta = a.add_texture("redteam ta", source("ta"), both).unwrap();
        let tb = b.add_texture("redteam tb", source("tb"), both).unwrap();
        std::mem::swap(a.streamer_mut(d(0)).unwrap(), b.streamer_mut(d(0)).unwrap());
        {
            let mut mine: Vec<&mut Streamer> = a.streamers_mut().map(|(_, s)| s).collect();
            let (x, y) = mine.split_at_mut(1);
            std::mem::swap(x[0], y[0]);
        }
        for (device, streamer) in a.iter() {
            let _ = (device, streamer.device().index());
        }
        assert_eq!(a.texture_stats(&tb, d(0)), None);
        let _ = a.texture_stats(&ta, d(0));
        let _ = a.texture_stats(&ta, d(1));
        let ctx: Vec<CommandContext> =
            set.devices().iter().map(|dev| CommandContext::new(dev, "redteam multi").unwrap()).collect();
        for (_, s) in a.streamers_mut().chain(b.streamers_mut()) {
            let ctx = ctx.iter().find(|c| c.device().index() == s.device().index()).unwrap();
            let bindings = s.begin_frame().unwrap();
            let sub = ctx.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
            drop(bindings);
            s.end_frame(sub.gpu_use()).unwrap();
        }
        let r = a.remove_texture(ta);
        assert!(r.is_ok() || matches!(r, Err(MultiDeviceError::Failed { .. })), "{r:?}");
        let r = b.remove_texture(tb);
        assert!(r.is_ok() || matches!(r, Err(MultiDeviceError::Failed { .. })), "{r:?}");
        for (_, s) in a.streamers_mut().chain(b.streamers_mut()) {
            s.remove_dropped_textures().unwrap();
            assert_eq!(s.texture_count(), 0, "a texture of a swapped streamer was never removed");
        }
        for dev in set.devices() {
            dev.wait_submitted().unwrap();
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Multi-device timelines and teardown
// ---------------------------------------------------------------------------------------------

/// Host signals at the extremes, waits with a finite timeout for values nothing signals.
#[test]
fn multi_timeline_signals_and_waits_at_the_extremes() {
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let timeline = MultiTimeline::new(set, both, 5).unwrap();
        assert!(timeline.signal(both, 5).is_err());
        assert!(timeline.signal(both, 0).is_err());
        assert!(timeline.signal(DeviceMask::from_bits(1 << 7), 9).is_err());
        timeline.signal(d(0).mask(), 9).unwrap();
        timeline.signal(both, 10).unwrap();
        timeline.wait(both, 10, u64::MAX).unwrap();
        // The largest value: within maxTimelineSemaphoreValueDifference or refused, never
        // signalled on one device and not the other.
        timeline.signal(both, 11).unwrap();
        timeline.signal(both, 1 << 62).unwrap();
        match timeline.signal(both, u64::MAX) {
            Ok(()) => assert!(timeline.values().unwrap().iter().all(|&(_, v)| v == u64::MAX)),
            Err(_) => assert!(timeline.values().unwrap().iter().all(|&(_, v)| v == 1 << 62)),
        }
        assert!(timeline.signal(both, u64::MAX).is_err());
        // A wait for a value nothing signals, with a finite timeout: an error, not a hang. (No
        // host signal of this timeline follows: after a timed-out vkWaitSemaphores the layer
        // reports the next host signals as VUID-VkSemaphoreSignalInfo-value-03259, a false
        // positive of its own.)
        let quiet = MultiTimeline::new(set, both, 0).unwrap();
        assert!(quiet.wait(both, 1, 1_000_000).is_err(), "a timeout is an error, not a hang");
        let ctx = CommandContext::new(&set.devices()[1], "redteam mt").unwrap();
        let s = ctx.submit(&[], |_| {}).unwrap();
        timeline.used_until(s.gpu_use()).unwrap();
        drop(timeline);
        ctx.wait(s).unwrap();
    });
}

/// A set of our own closed while a command context, a buffer and a pending frame-count use are
/// alive: refused with the set handed back, then closed once they are dropped; dropping a set
/// while a device is still referenced defers its destruction to the last reference.
#[test]
fn teardown_order_of_a_private_set() {
    let Some(()) = with_gpu(|_| ()) else { return };
    watchdog::within("teardown", || {
        let set = residency_vulkan::DeviceSet::new(&residency_vulkan::testing::test_desc()).unwrap();
        let device = Arc::clone(&set.devices()[0]);
        let ctx = CommandContext::new(&device, "redteam teardown").unwrap();
        let buffer = readback(&device, "redteam teardown buffer", 256);
        buffer.used_until(device.frames_from_now(1000)).unwrap();
        let s = ctx.submit(&[], |rec| rec.fill_buffer(&buffer, 0, 256, 1).unwrap()).unwrap();
        drop(buffer);
        assert_eq!(device.pending_destruction(), 1);
        let err = set.close().unwrap_err();
        let set = *err.set;
        drop(device);
        ctx.wait(s).unwrap();
        drop(ctx);
        // The frame-count use never ends; the device is idle at close: destroyed, not leaked.
        set.close().unwrap();
        let set = residency_vulkan::DeviceSet::new(&residency_vulkan::testing::test_desc()).unwrap();
        let device = Arc::clone(&set.devices()[1]);
        let ctx = CommandContext::new(&device, "redteam outlives").unwrap();
        let buffer = readback(&device, "redteam outlives", 256);
        drop(set);
        let s = ctx.submit(&[], |rec| rec.fill_buffer(&buffer, 0, 256, 2).unwrap()).unwrap();
        drop(buffer);
        drop(ctx); // waits for `s`
        let _ = s;
        drop(device);
    });
}
