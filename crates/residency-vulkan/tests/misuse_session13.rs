//! Adversarial review of what session 13 added (deferred feedback, the bind worker, lent range
//! handles, zero-copy uploads, compaction's compute copy): safe calls that try to make the
//! library free or hand back what the GPU still reads. Each finding is closed at its cause; the
//! harness fails a test on any validation message or leaked object, a watchdog on a hang.
//!
//! The only `unsafe` here is test scaffolding whose contract the test keeps: a renderer timeline
//! announced (`Timeline::signal_submitted`) and then signalled from the host, to hold GPU work
//! back until the test lets it run.

mod common;
use common::pattern;
#[path = "common/watchdog.rs"]
mod watchdog;

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::{FnSource, TileKey, TileSource};
use residency_core::tiles::{
    ImageId, ResidencyPath, SparseImageDesc, SparseResidency, TileCoord, TileIndex, TilePool, TilePoolDesc,
};
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_core::vt_file::VtDesc;
use residency_vulkan::ash::vk;
use residency_vulkan::sparse::{SparseError, SparseImage, TileHeaps};
use residency_vulkan::streaming::StreamError;
use residency_vulkan::streaming::{Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{
    BufferDesc, BufferPool, BufferPoolDesc, CommandContext, Device, FaultSite, InjectedFault, Timeline,
    UploadPath, Uploader, VulkanError,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn gpu(what: &'static str, body: impl FnOnce(&Arc<Device>) + Send + 'static) {
    watchdog::within(what, move || {
        with_gpu(|set| body(&set.devices()[0]));
    });
}

/// A renderer timeline the test signals once from the host, to 1: GPU work that waits for it
/// does not run before [`Gate::open`] (called at the latest when the gate drops).
#[derive(Clone)]
struct Gate {
    device: Arc<Device>,
    timeline: Timeline,
    opened: Arc<AtomicBool>,
}

impl Gate {
    fn new(device: &Arc<Device>, name: &str) -> Gate {
        let timeline = device.create_timeline(name).unwrap();
        // SAFETY: the test signals the timeline to 1 from the host (`open`, at the latest when
        // the last clone drops), and that signal waits for nothing that waits for the timeline.
        unsafe { timeline.signal_submitted(1) };
        Gate { device: Arc::clone(device), timeline, opened: Arc::default() }
    }

    /// Whether it was opened (set before the signal: work gated by it may have run only then).
    fn is_open(&self) -> bool {
        self.opened.load(Ordering::SeqCst)
    }

    /// Signals the timeline to 1 (once, whoever calls first).
    fn open(&self) {
        if self.opened.swap(true, Ordering::SeqCst) {
            return;
        }
        let info = vk::SemaphoreSignalInfo::default().semaphore(self.timeline.raw()).value(1);
        // SAFETY: a timeline semaphore of this device, signalled once from 0 to 1.
        unsafe { self.device.raw().signal_semaphore(&info) }.unwrap();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if Arc::strong_count(&self.opened) == 1 {
            self.open();
        }
    }
}

/// A sparse bind on `device`'s sparse queue that waits for `gate`: every residency submission
/// made after it (the uploader's copies wait for the binds submitted before them) runs only once
/// the gate opens. Returns what must outlive the bind.
fn gated_bind(device: &Arc<Device>, gate: &Gate) -> Option<(TileHeaps, SparseImage)> {
    let mut heaps = match TileHeaps::new(Arc::clone(device), "gate heaps") {
        Err(SparseError::NoSparseQueue) => return None,
        heaps => heaps.unwrap(),
    };
    let mut pool = TilePool::new(TilePoolDesc::default().with_name("gate pool").with_tiles_per_heap(8));
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 512, 512);
    let image = SparseImage::new_external(&heaps, 65536, ImageId(1), "gated", &desc, false).unwrap();
    let mut residency = SparseResidency::new(pool.id(), ImageId(1), image.layout());
    let bound = residency.commit(&mut pool, &[TileIndex(0)]).unwrap();
    let (_, done) =
        heaps.bind_after(&pool, &[(&image, &bound)], Default::default(), &[gate.timeline.at(1)]).unwrap();
    assert!(done.is_some(), "the bind was submitted");
    Some((heaps, image))
}

/// `Uploader::upload_buffer` imports the caller's slice and promised to return only after the
/// copies that read it completed. When waiting for a copy failed (an injected `vkWaitForFences`
/// failure, or an injected device loss, both safe calls: `Ledger::inject_fault`), it tried
/// `Device::wait_idle`, and when that failed too it leaked the import and returned — or, the
/// device counting as lost (an injected loss, under which the GPU still runs what was
/// submitted), freed the imported memory and returned — while the copy still ran: the caller's
/// slice could then be mutated or freed under the GPU's read (undefined behaviour; lavapipe
/// reads it from a driver thread). Now the wait goes on past the fault hook (bounded only on a
/// device the driver reported lost) before anything is freed or the call returns, also on an
/// unwind.
#[test]
fn misuse_an_imported_upload_whose_wait_fails_returns_only_after_its_copy_read_the_slice() {
    for fault in [InjectedFault::OutOfDeviceMemory, InjectedFault::DeviceLost] {
        gpu("import wait fails", move |device| {
            let Some(align) = device.host_import_alignment() else { return };
            let align = align as usize;
            let gate = Gate::new(device, "import gate");
            let Some(gated) = gated_bind(device, &gate) else { return };
            let len = 1 << 20;
            let mut source = pattern(len + align, 0x51);
            let start = (align - source.as_ptr() as usize % align) % align;
            let original = source[start..start + len].to_vec();
            let dst = device
                .create_buffer(&BufferDesc::new(
                    "imported destination",
                    len as u64,
                    BufferUsage::COPY_DST | BufferUsage::COPY_SRC,
                ))
                .unwrap();
            let uploader = Uploader::new(device, "import", 1 << 20)
                .unwrap()
                .with_import_threshold(0)
                .with_import_chunk(len as u64);
            let fired = device.ledger().faults_fired(FaultSite::Wait);
            // The first wait fails; so does the one after it (the old fallback, `wait_idle`).
            device.ledger().inject_fault(FaultSite::Wait, 0, fault);
            device.ledger().inject_fault(FaultSite::Wait, 0, fault);
            // The gate opens once the upload's wait for its copy failed: the copy can run from
            // then on, and not before.
            let opener = {
                let (gate, device) = (gate.clone(), Arc::clone(device));
                std::thread::spawn(move || {
                    while device.ledger().faults_fired(FaultSite::Wait) == fired && !gate.is_open() {
                        std::thread::yield_now();
                    }
                    gate.open();
                })
            };
            let result = uploader.upload_buffer(&dst, 0, &source[start..start + len]);
            // Returned: the copy that read the slice has completed, so it ran after the gate
            // opened.
            let open_at_return = gate.is_open();
            // The caller's slice is its own again: change it (as freeing and reusing it would).
            source[start..start + len].fill(0xEE);
            gate.open();
            opener.join().unwrap();
            device.ledger().clear_faults();
            assert!(result.is_err(), "{fault:?}: the failed wait is returned: {result:?}");
            assert!(open_at_return, "{fault:?}: upload_buffer returned before its copy could run");
            device.wait_submitted().unwrap();
            let back = device.read_back(&dst, 0, len as u64).unwrap();
            assert!(back == original, "{fault:?}: the copy read the slice after the call returned");
            // No import outlives the call.
            let imports =
                device.ledger().live_objects().iter().filter(|o| o.kind == "imported host memory").count();
            assert_eq!(imports, 0, "{fault:?}");
            // And the uploader works on.
            let again = uploader.upload_buffer(&dst, 0, &original).unwrap();
            assert!(matches!(again, UploadPath::Imported { .. }), "{again:?}");
            drop(gated);
        });
    }
}

/// A procedural RGBA8 1024² source of 128² tiles.
fn source(name: &str, pattern: u32) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, 1024, 1024, 128, 128);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h)
            .flat_map(|ty| {
                (0..w).flat_map(move |tx| {
                    [(x * 128 + tx) as u8, (y * 128 + ty) as u8, mip as u8, pattern as u8]
                })
            })
            .collect())
    }))
}

/// Row `y` of mip 0 of `id`.
fn row(streamer: &Streamer, id: ImageId, y: u32) -> Vec<TileKey> {
    let layout = streamer.manager().residency(id).unwrap().layout().clone();
    (0..8)
        .map(|x| TileKey::tile(id, layout.tile_index(TileCoord { layer: 0, mip: 0, x, y, z: 0 }).unwrap()))
        .collect()
}

/// One frame wanting `wanted`, its GPU work and loads waited for (frame-exact).
fn frame(streamer: &mut Streamer, commands: &CommandContext, wanted: &[TileKey]) {
    common::cpu_feedback_frame(streamer, commands, wanted);
    streamer.device().wait_idle().unwrap();
    streamer.wait_for_loads();
}

/// The bind worker's job (a frame's binds, unbinds and staging) is out from `end_frame` until
/// the next call that needs the GPU caught up. Every `&mut` call in between — removing the
/// texture whose tiles it binds (or dropping its handle), cutting the budget so the next tick
/// evicts them, compacting the heaps it binds into, adding a texture, a frame begun and
/// abandoned, dropping the streamer — must join it first: else its bind would name heaps the
/// pool released or tiles the pool handed on (a panic on the worker, memory bound to two images,
/// a freed heap bound). Under synchronization validation and the harness's leak check, with the
/// page tables checked against the pool after each.
#[test]
fn misuse_every_call_between_frames_with_a_bind_job_out_joins_it_before_touching_tiles() {
    gpu("bind job out", |device| {
        if device.residency_path(Format::R8G8B8A8Unorm, ResidencyPath::Hardware).is_err() {
            return;
        }
        let baseline = common::settled_accounting(device);
        for case in 0..7 {
            let desc = StreamerDesc::default()
                .with_name("job out streamer")
                .with_path(ResidencyPath::Hardware)
                .with_frames_in_flight(2)
                .with_budget_tiles(48)
                .with_tiles_per_heap(8)
                .with_bind_worker(true);
            let mut streamer = Streamer::new(device, desc).unwrap();
            let t = streamer.add_texture("vt job", source("vt job", 7)).unwrap();
            let other = streamer.add_texture("vt other", source("vt other", 9)).unwrap();
            let commands = CommandContext::new(device, "job out frames").unwrap();
            let id = t.id();
            for _ in 0..3 {
                let w = row(&streamer, id, 3);
                frame(&mut streamer, &commands, &w);
            }
            // Frame 2's tick (binds of row 3, their texels) is out on the worker now.
            assert_eq!(streamer.stats().worker_binds, 0, "case {case}: the first job is still out");
            let mut t = Some(t);
            match case {
                0 => streamer.remove_texture(t.take().unwrap()).unwrap(),
                1 => {
                    drop(t.take());
                    streamer.remove_dropped_textures().unwrap();
                }
                2 => {
                    streamer.set_budget_tiles(1);
                    let w = row(&streamer, other.id(), 5);
                    frame(&mut streamer, &commands, &w);
                }
                3 => {
                    streamer.compact(64).unwrap();
                }
                4 => {
                    let third = streamer.add_texture("vt third", source("vt third", 11)).unwrap();
                    streamer.remove_texture(third).unwrap();
                }
                5 => {
                    drop(streamer.begin_frame().unwrap());
                    streamer.abandon_frame().unwrap();
                }
                _ => {
                    drop(t.take());
                    drop(streamer);
                    drop(other);
                    drop(commands);
                    assert_eq!(common::settled_accounting(device), baseline, "case {case}: nothing leaked");
                    continue;
                }
            }
            assert!(streamer.stats().worker_binds > 0, "case {case}: the job was joined");
            streamer.manager().check_invariants().unwrap();
            // Frames go on, on the other texture (and the first where it is left).
            for y in [4, 6] {
                let mut w = row(&streamer, other.id(), y);
                if let Some(t) = &t {
                    w.extend(row(&streamer, t.id(), y));
                }
                frame(&mut streamer, &commands, &w);
                streamer.manager().check_invariants().unwrap();
            }
            drop(streamer);
            drop(t);
            drop(other);
            drop(commands);
            assert_eq!(common::settled_accounting(device), baseline, "case {case}: nothing leaked");
        }
    });
}

/// Lent range handles: ranges released to the pages leave their arena handle's reference there;
/// ranges cached per thread once several threads share the arena. Ranges that outlive their pool,
/// dropped on other threads than the one that made them (some with a GPU use still pending,
/// declared with `used_until`), written and read after the pool went: the pool's page stays until
/// the last range is gone and its last use has passed, then goes; nothing is released twice (the
/// pool's allocator is checked before the pool goes) and nothing leaks.
#[test]
fn misuse_ranges_outliving_their_pool_on_other_threads_with_uses_pending_keep_its_page() {
    gpu("ranges outlive their pool", |device| {
        let objects = device.ledger().memory_objects();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
        let pool = Arc::new(
            BufferPool::new(
                Arc::clone(device),
                BufferPoolDesc::new("outlived pool", BufferPoolUsage::Known(usage))
                    .with_page_size(1 << 20)
                    .with_memory(MemoryIntent::Upload),
            )
            .unwrap(),
        );
        let gate = Gate::new(device, "range gate");
        // Four threads share the one arena: each lends, caches and takes ranges back in turn,
        // and keeps a few.
        let kept: Vec<Vec<_>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4u64)
                .map(|k| {
                    let pool = Arc::clone(&pool);
                    scope.spawn(move || {
                        for round in 0..4u64 {
                            let ranges: Vec<_> = (0..32u64)
                                .map(|i| pool.allocate_range(64 + i * 16 + round + k, 0).unwrap())
                                .collect();
                            drop(ranges);
                        }
                        (0..4u64).map(|i| pool.allocate_range(256 + i, 0).unwrap()).collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        pool.check_invariants().unwrap();
        let mut kept: Vec<_> = kept.into_iter().flatten().collect();
        // Some have a GPU use still pending.
        for r in kept.iter_mut().step_by(3) {
            r.used_until(gate.timeline.at(1)).unwrap();
        }
        drop(Arc::into_inner(pool).expect("the threads gave their references back"));
        device.maintain();
        assert!(device.ledger().memory_objects() > objects, "the live ranges keep the page");
        // Each range is written and read after its pool went, then dropped, on other threads.
        let chunks: Vec<Vec<_>> = {
            let mut chunks: Vec<Vec<_>> = (0..3).map(|_| Vec::new()).collect();
            for (i, r) in kept.drain(..).enumerate() {
                chunks[i % 3].push(r);
            }
            chunks
        };
        std::thread::scope(|scope| {
            for chunk in chunks {
                scope.spawn(move || {
                    for mut r in chunk {
                        let bytes = vec![r.offset() as u8; r.size() as usize];
                        r.write(0, &bytes).unwrap();
                        let mut back = vec![0; bytes.len()];
                        r.read(0, &mut back).unwrap();
                        assert_eq!(back, bytes);
                        drop(r);
                    }
                });
            }
        });
        device.wait_submitted().unwrap();
        device.maintain();
        assert!(device.ledger().memory_objects() > objects, "the ranges' pending uses keep the page");
        gate.open();
        device.wait_submitted().unwrap();
        device.maintain();
        assert_eq!(device.ledger().memory_objects(), objects, "the page went after the last use");
    });
}

/// Every queue of `device` (universal, sparse, moves), some of them the same queue.
fn queues(device: &Device) -> Vec<&Arc<residency_vulkan::Queue>> {
    std::iter::once(device.universal_queue())
        .chain(device.sparse_queue())
        .chain(std::iter::once(device.moves_queue()))
        .collect()
}

/// Without the worker, a streamer call on a thread that holds a queue's lock and binds or
/// submits there is refused (`VulkanError::Reentrant`), not a deadlock. With the bind worker,
/// the calls that join its job out (`begin_frame`, `remove_texture`, `compact`, `add_texture`,
/// dropping the streamer) waited for the worker, whose `vkQueueBindSparse` (and the uploader's
/// submissions) wait for that very lock: a hang from safe code. Now each such call is refused
/// with the same typed error, leaving the job out (a later call joins and publishes it), and a
/// streamer dropped there leaves the worker to finish the job, which owns what it binds and
/// stages: nothing leaks once it has.
#[test]
fn misuse_a_streamer_call_holding_a_queue_lock_with_a_bind_job_out_is_refused_not_a_deadlock() {
    gpu("queue lock with a bind job out", |device| {
        if device.residency_path(Format::R8G8B8A8Unorm, ResidencyPath::Hardware).is_err() {
            return;
        }
        let baseline = common::settled_accounting(device);
        let references = Arc::strong_count(device);
        let reentrant = |what: &str, result: Result<(), StreamError>| {
            assert!(
                matches!(result, Err(StreamError::Vulkan(VulkanError::Reentrant { .. }))),
                "{what}: {result:?}"
            );
        };
        let desc = StreamerDesc::default()
            .with_name("queue lock streamer")
            .with_path(ResidencyPath::Hardware)
            .with_frames_in_flight(2)
            .with_budget_tiles(48)
            .with_bind_worker(true);
        for case in 0..2 {
            let mut streamer = Streamer::new(device, desc.clone()).unwrap();
            let t = streamer.add_texture("vt lock", source("vt lock", 5)).unwrap();
            let commands = CommandContext::new(device, "queue lock frames").unwrap();
            let id = t.id();
            for _ in 0..3 {
                let w = row(&streamer, id, 2);
                frame(&mut streamer, &commands, &w);
            }
            assert_eq!(streamer.stats().worker_binds, 0, "a job is out");
            let frames = streamer.stats().frames;
            for queue in queues(device) {
                let guard = queue.lock().unwrap();
                reentrant("begin_frame", streamer.begin_frame().map(drop));
                reentrant("compact", streamer.compact(8).map(drop));
                reentrant(
                    "add_texture",
                    streamer.add_texture("vt refused", source("vt refused", 6)).map(drop),
                );
                drop(guard);
            }
            assert_eq!(streamer.stats().worker_binds, 0, "the job is still out");
            assert_eq!(streamer.stats().frames, frames, "a refused begin_frame began nothing");
            assert!(!streamer.in_frame());
            if case == 1 {
                // Dropped while holding the lock: the worker finishes the job once it is free.
                let guard = device.sparse_queue().unwrap().lock().unwrap();
                drop(t);
                drop(streamer);
                drop(guard);
                drop(commands);
                // The worker's thread lets go of the device when its job is done (no timing: it
                // ends once the lock is free).
                while Arc::strong_count(device) > references {
                    std::thread::yield_now();
                }
                assert_eq!(common::settled_accounting(device), baseline, "case {case}: nothing leaked");
                continue;
            }
            // Lock released: the next call joins the job and frames go on.
            let w = row(&streamer, id, 2);
            frame(&mut streamer, &commands, &w);
            assert!(streamer.stats().worker_binds > 0, "joined");
            streamer.manager().check_invariants().unwrap();
            streamer.remove_texture(t).unwrap();
            drop(streamer);
            drop(commands);
            assert_eq!(common::settled_accounting(device), baseline, "case {case}: nothing leaked");
        }
    });
}

/// The same cause elsewhere: `MultiUploader::broadcast` and `MultiSparseImage::broadcast_region`
/// stage and submit on a scoped thread per device and wait for them; on a thread that holds one
/// of those devices' queue locks, the device's thread waited forever for it (on one thread the
/// submission answers `Reentrant`). Now refused with `Reentrant` before anything is staged.
#[test]
fn misuse_a_broadcast_holding_a_devices_queue_lock_is_refused_not_a_deadlock() {
    use residency_core::device_mask::DeviceMask;
    use residency_vulkan::multi::{MultiBufferPool, MultiDevice, MultiDeviceError, MultiUploader};
    use residency_vulkan::{BufferInit, UploadError};
    watchdog::within("broadcast holding a queue lock", || {
        with_gpu(|set| {
            let mask = DeviceMask::from_bits((1u32 << set.devices().len().min(2)) - 1);
            let pool = MultiBufferPool::new(
                set,
                mask,
                &BufferPoolDesc::new("broadcast pool", BufferPoolUsage::Unknown).with_page_size(1 << 20),
            )
            .unwrap();
            let uploader = MultiUploader::new(set, mask, 1 << 20).unwrap();
            let init =
                BufferInit::new("broadcast", 4096).with_usage(BufferUsage::STORAGE | BufferUsage::COPY_DST);
            let buffer = pool.init_buffer(&init, mask).unwrap();
            let data = vec![0x5a; 4096];
            for device in set.devices().iter().take(2) {
                for queue in queues(device) {
                    let guard = queue.lock().unwrap();
                    let err = uploader.broadcast(&buffer, 0, &data).unwrap_err();
                    assert!(
                        matches!(
                            err,
                            MultiDeviceError::Failed {
                                source: UploadError::Vulkan(VulkanError::Reentrant { .. }),
                                ..
                            }
                        ),
                        "{err}"
                    );
                    drop(guard);
                }
                for d in set.devices().iter().take(2) {
                    assert_eq!(
                        uploader.instance(d.index()).unwrap().staging_in_use(),
                        (0, 0),
                        "nothing staged"
                    );
                }
            }
            uploader.broadcast(&buffer, 0, &data).unwrap();
            uploader.wait_idle().unwrap();
            pool.free_buffer(buffer).unwrap();
            uploader.destroy().unwrap();
        });
    });
}

/// Session 14's review: a parallel copy made while holding the universal queue's lock, while
/// another thread's streamed write (larger than its ring) holds the copy helpers in its job and
/// waits for that lock to submit a chunk. The parallel copy used to wait for every helper it
/// handed its job to — held in the other job, which waited for this thread's lock: a deadlock
/// from safe calls. A copy now waits only for the pieces a helper took. Event-ordered (the
/// streamed write's first submission attempt is counted before this thread copies), never timed.
#[test]
fn misuse_a_parallel_copy_under_the_queue_lock_while_another_thread_streams_is_not_a_deadlock() {
    gpu("parallel copy under the queue lock beside a streamed write", |device| {
        let uploader = Uploader::new(device, "s14 stream", 4 << 20).unwrap().with_copy_threads(4);
        assert_eq!(uploader.chunk_bytes(), 1 << 20);
        let dst = device
            .create_buffer(
                &BufferDesc::new("s14 streamed", 16 << 20, BufferUsage::COPY_DST)
                    .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let mut host = device
            .create_buffer(
                &BufferDesc::new("s14 mapped", 4 << 20, BufferUsage::COPY_SRC)
                    .with_intent(MemoryIntent::Upload),
            )
            .unwrap();
        let (data, bytes) = (pattern(16 << 20, 14), pattern(4 << 20, 15));
        let submits = device.ledger().site_calls(FaultSite::QueueSubmit);
        let queue = device.universal_queue().lock().unwrap();
        std::thread::scope(|scope| {
            let streaming = scope.spawn(|| uploader.write_buffer(&dst, 0, &data));
            while device.ledger().site_calls(FaultSite::QueueSubmit) == submits {
                std::thread::yield_now();
            }
            host.write_streaming(0, &bytes, 4).unwrap();
            drop(queue);
            streaming.join().unwrap().unwrap();
        });
        uploader.wait_idle().unwrap();
        let mut out = vec![0u8; data.len()];
        dst.read(0, &mut out).unwrap();
        assert!(out == data, "the streamed write arrived");
        let mut out = vec![0u8; bytes.len()];
        host.read(0, &mut out).unwrap();
        assert!(out == bytes, "the parallel copy arrived");
    });
}
