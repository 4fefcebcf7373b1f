//! Real concurrency, no lock around the test: eight threads share one buffer pool, one uploader,
//! one known-flags pool's ranges and one program's descriptor pools, create and drop resources
//! while their copies are in flight (deferred destruction from any thread), and every byte that
//! was kept arrives. Then the per-thread paths: pools with an arena per thread whose buffers
//! twelve threads hand to each other and release (copies in flight, declared frame uses), and
//! pools dropped while buffers released on many threads still wait in the retire queue's shards.
//! Under synchronization validation; counts, never timings.

use residency_core::memory::MemoryIntent;
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{shaders, Buffer, BufferInit, BufferPool, BufferPoolDesc, Uploader};
use std::sync::Arc;

const THREADS: usize = 8;
const ROUNDS: usize = 40;

fn bytes(thread: usize, round: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + thread * 7 + round * 13) as u8).collect()
}

#[test]
fn eight_threads_share_a_pool_an_uploader_ranges_and_descriptor_pools() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let objects = device.ledger().live_objects().len();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("shared pool", BufferPoolUsage::Unknown)
                .with_page_size(4 << 20)
                .with_arenas(4),
        )
        .unwrap();
        let ranges = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("shared ranges", BufferPoolUsage::Known(BufferUsage::UNIFORM))
                .with_memory(MemoryIntent::Upload)
                .with_page_size(1 << 20),
        )
        .unwrap();
        let uploader = Uploader::new(device, "shared uploader", 1 << 20).unwrap().with_copy_threads(2);
        let program = ComputeProgram::new(device, "shared program", &shaders::FILL, 2).unwrap();
        let kept: Vec<Vec<(Buffer, Vec<u8>)>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (pool, ranges, uploader, program) = (&pool, &ranges, &uploader, &program);
                    scope.spawn(move || {
                        let mut kept = Vec::new();
                        let mut live_ranges = Vec::new();
                        for round in 0..ROUNDS {
                            let len = 256 + (t * 97 + round * 61) % 3000;
                            let init =
                                BufferInit::new(format!("t{t} r{round}"), len as u64).with_usage(usage);
                            let buffer = pool.init_buffer(&init).unwrap();
                            let data = bytes(t, round, len);
                            uploader.write_buffer(&buffer, 0, &data).unwrap();
                            if round % 5 == 0 {
                                uploader.flush().unwrap();
                            }
                            // Every other buffer is dropped with its copy queued or in flight: it
                            // retires after the copy, whichever thread submits it.
                            if round % 2 == 0 {
                                kept.push((buffer, data));
                            }
                            let mut r = ranges.allocate_range(64 + (round as u64 % 7) * 16, 0).unwrap();
                            r.write(0, &[t as u8; 64]).unwrap();
                            live_ranges.push(r);
                            if live_ranges.len() > 4 {
                                let r = live_ranges.remove(0);
                                let mut back = [0u8; 64];
                                r.read(0, &mut back).unwrap();
                                assert_eq!(back, [t as u8; 64], "another thread wrote into this range");
                            }
                            // Descriptor sets from one program on every thread: its pools grow.
                            let (kept_buffer, _) = kept.last().unwrap();
                            program.descriptor_set(&[Binding::Buffer(kept_buffer)]).unwrap();
                        }
                        kept
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        uploader.wait_idle().unwrap();
        let mut checked = 0;
        for per_thread in &kept {
            for (buffer, data) in per_thread {
                let back = device.read_back(buffer, 0, data.len() as u64).unwrap();
                assert!(&back == data, "`{}` holds what its thread uploaded", buffer.name());
                checked += 1;
            }
        }
        assert_eq!(checked, THREADS * ROUNDS / 2);
        pool.check_invariants().unwrap();
        ranges.check_invariants().unwrap();
        drop((kept, uploader, program, pool, ranges));
        device.wait_submitted().unwrap();
        let live = device.ledger().live_objects();
        assert!(
            !live.iter().any(|o| o.name.starts_with("shared") || o.name.starts_with('t')),
            "nothing of the threads is left: {live:?}"
        );
        assert!(live.len() <= objects + 1, "{live:?}");
    });
}

/// Threads of the cross-thread run (more than the pools' 8-arena stress).
const CROSS_THREADS: usize = 12;
/// Rounds per thread of the cross-thread run: each makes one placed buffer, one range buffer and
/// one light range and hands all three to the next thread.
const CROSS_ROUNDS: usize = 24;

/// What one thread hands the next: a placed buffer whose upload may still be queued or running,
/// a range buffer with its tag written through the mapping, and a light range (with a declared use
/// of the frame being recorded on every other round).
type Handoff = (Buffer, (Buffer, u8), residency_vulkan::PoolRange);

/// Pools with an arena per thread (the per-thread paths: each thread allocates from its own arena
/// and holds only its arena's handle), and every buffer released by a thread other than the one
/// that made it — half dropped with their copies queued or in flight, half through `free_buffer` —
/// so releases land in other arenas than the releasing thread's. Counts, not timings: every
/// thread hands over and releases the same number of objects on any machine.
#[test]
fn twelve_threads_release_each_others_buffers_across_per_thread_arenas_with_copies_in_flight() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
        let placed = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("cross placed", BufferPoolUsage::Unknown)
                .with_page_size(1 << 20)
                .with_arenas(CROSS_THREADS as u32),
        )
        .unwrap();
        let ranges = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("cross ranges", BufferPoolUsage::Known(BufferUsage::UNIFORM))
                .with_memory(MemoryIntent::Upload)
                .with_page_size(1 << 20)
                .with_arenas(CROSS_THREADS as u32),
        )
        .unwrap();
        let uploader = Uploader::new(device, "cross uploader", 1 << 20).unwrap();
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..CROSS_THREADS).map(|_| std::sync::mpsc::channel::<Handoff>()).unzip();
        let released: Vec<usize> = std::thread::scope(|scope| {
            let workers: Vec<_> = receivers
                .into_iter()
                .enumerate()
                .map(|(t, inbox)| {
                    let next = senders[(t + 1) % CROSS_THREADS].clone();
                    let (placed, ranges, uploader) = (&placed, &ranges, &uploader);
                    scope.spawn(move || {
                        let mut released = 0;
                        let release = |(buffer, (range_buffer, tag), range): Handoff,
                                       released: &mut usize| {
                            let mut back = vec![0; range_buffer.size() as usize];
                            range_buffer.read(0, &mut back).unwrap();
                            assert!(back.iter().all(|&b| b == tag), "{}: overwritten", range_buffer.name());
                            if *released % 2 == 0 {
                                placed.free_buffer(buffer).unwrap();
                                ranges.free_buffer(range_buffer).unwrap();
                            } else {
                                drop((buffer, range_buffer));
                            }
                            drop(range);
                            *released += 1;
                        };
                        for round in 0..CROSS_ROUNDS {
                            let len = 64 + (t * 53 + round * 29) % 2000;
                            let name = format!("cross t{t} r{round}");
                            let init = BufferInit::new(name.as_str(), len as u64).with_usage(usage);
                            let buffer = placed.init_buffer(&init).unwrap();
                            uploader.write_buffer(&buffer, 0, &bytes(t, round, len)).unwrap();
                            if round % 3 == 0 {
                                uploader.flush().unwrap();
                            }
                            let tag = (t * 16 + round) as u8;
                            let mut range_buffer =
                                ranges.init_buffer(&BufferInit::new(name.as_str(), 256)).unwrap();
                            range_buffer.write(0, &[tag; 256]).unwrap();
                            let mut range = ranges.allocate_range(96, 0).unwrap();
                            if round % 2 == 0 {
                                range.used_until(device.frames_from_now(1)).unwrap();
                            }
                            next.send((buffer, (range_buffer, tag), range)).unwrap();
                            while let Ok(handoff) = inbox.try_recv() {
                                release(handoff, &mut released);
                            }
                        }
                        while released < CROSS_ROUNDS {
                            release(inbox.recv().unwrap(), &mut released);
                        }
                        released
                    })
                })
                .collect();
            drop(senders);
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert_eq!(released, vec![CROSS_ROUNDS; CROSS_THREADS], "every thread released its neighbour's");
        // Copies still queued hold their buffers until they are submitted and done.
        uploader.wait_idle().unwrap();
        device.wait_submitted().unwrap();
        assert_eq!((placed.stats().buffers, ranges.stats().buffers), (0, 0));
        // The light ranges declared the frame being recorded: they return once it is counted.
        device.advance_frame();
        device.advance_frame();
        assert_eq!(device.pending_destruction(), 0, "everything released has retired");
        for pool in [&placed, &ranges] {
            pool.check_invariants().unwrap();
            let stats = pool.stats();
            assert_eq!(stats.used_bytes, 0, "{:?}: every range is back", pool.desc().name);
            assert!(stats.pages <= CROSS_THREADS, "at most one empty page kept per arena");
        }
        drop((uploader, placed, ranges));
        device.wait_submitted().unwrap();
        let left: Vec<_> =
            device.ledger().live_objects().into_iter().filter(|o| o.name.starts_with("cross")).collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    });
}

/// Pools dropped while buffers released by many threads still wait for the frames in flight: the
/// releases sit in different shards of the retire queue, and the pools' pages retire after every
/// one of them (a parent waits for its deferred children; blocks are destroyed after the other
/// garbage due with them). Nothing is left once the frames are counted.
#[test]
fn pages_of_dropped_pools_retire_after_buffers_released_on_other_threads() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let placed = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("late placed", BufferPoolUsage::Unknown)
                .with_page_size(1 << 20)
                .with_arenas(4),
        )
        .unwrap();
        let ranges = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("late ranges", BufferPoolUsage::Known(BufferUsage::STORAGE))
                .with_page_size(1 << 20)
                .with_arenas(4),
        )
        .unwrap();
        let made: Vec<Vec<Buffer>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..CROSS_THREADS)
                .map(|t| {
                    let (placed, ranges) = (&placed, &ranges);
                    scope.spawn(move || {
                        let mut made = Vec::new();
                        for round in 0..CROSS_ROUNDS {
                            let name = format!("late t{t} r{round}");
                            let init = BufferInit::new(name.as_str(), 64 + round as u64 * 8)
                                .with_usage(BufferUsage::STORAGE);
                            made.push(placed.init_buffer(&init).unwrap());
                            made.push(ranges.init_buffer(&BufferInit::new(name.as_str(), 128)).unwrap());
                        }
                        made
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        // Each thread releases the buffers another made, every one used by the frame in flight.
        std::thread::scope(|scope| {
            for (t, buffers) in made.into_iter().enumerate() {
                scope.spawn(move || {
                    for buffer in buffers {
                        buffer.used_until(device.frames_from_now(1)).unwrap();
                        assert!(buffer.name().starts_with(&format!("late t{t} ")));
                        drop(buffer);
                    }
                });
            }
        });
        assert_eq!(device.pending_destruction(), CROSS_THREADS * CROSS_ROUNDS * 2, "every release waits");
        drop((placed, ranges));
        // The pools' pages wait for the same frame, behind their buffers.
        assert!(device.pending_destruction() > CROSS_THREADS * CROSS_ROUNDS * 2);
        device.advance_frame();
        device.advance_frame();
        assert_eq!(device.pending_destruction(), 0);
        let left: Vec<_> =
            device.ledger().live_objects().into_iter().filter(|o| o.name.starts_with("late")).collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    });
}

/// Threads of the shared-arena run.
const SHARED_THREADS: usize = 10;
/// Rounds per thread of the shared-arena run.
const SHARED_ROUNDS: usize = 200;

/// One arena shared by every thread (issue #31's per-thread range caches): ten threads create
/// placed buffers, range buffers and light ranges of a few sizes, so that released ranges come
/// back through the releasing thread's cache and are taken again by it; every other round each
/// thread hands a placed buffer and a range buffer to the next thread, which releases them (into
/// its own cache), and a third of the releases wait for a declared frame or a copy in flight.
/// Deterministic (counts, not timings): whatever the interleaving, every tag written is read back
/// unchanged (no range is handed out twice), the pages' invariants hold, every range is back in
/// the pages once the caches are flushed (`stats`), at most one page per arena is kept, and
/// nothing is left in the ledger.
#[test]
fn ten_threads_share_one_arena_through_per_thread_range_caches() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST | BufferUsage::COPY_SRC;
        let placed = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("one-arena placed", BufferPoolUsage::Unknown)
                .with_memory(MemoryIntent::Upload)
                .with_page_size(1 << 20),
        )
        .unwrap();
        let ranges = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("one-arena ranges", BufferPoolUsage::Known(BufferUsage::STORAGE))
                .with_memory(MemoryIntent::Upload)
                .with_page_size(1 << 20),
        )
        .unwrap();
        let uploader = Uploader::new(device, "one-arena uploader", 1 << 20).unwrap();
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..SHARED_THREADS).map(|_| std::sync::mpsc::channel::<(Buffer, Buffer, u8)>()).unzip();
        let checked: Vec<usize> = std::thread::scope(|scope| {
            let workers: Vec<_> = receivers
                .into_iter()
                .enumerate()
                .map(|(t, inbox)| {
                    let next = senders[(t + 1) % SHARED_THREADS].clone();
                    let (placed, ranges, uploader) = (&placed, &ranges, &uploader);
                    scope.spawn(move || {
                        let mut checked = 0;
                        let check = |buffer: &Buffer, tag: u8| {
                            let mut back = vec![0; buffer.size() as usize];
                            buffer.read(0, &mut back).unwrap();
                            assert!(back.iter().all(|&b| b == tag), "{}: overwritten", buffer.name());
                        };
                        let mut live: Vec<(Buffer, Buffer, residency_vulkan::PoolRange, u8)> = Vec::new();
                        for round in 0..SHARED_ROUNDS {
                            let tag = (t * 31 + round) as u8;
                            let len = [48u64, 200, 1000, 3000][round % 4];
                            let name = format!("one-arena t{t} r{round}");
                            let init = BufferInit::new(name.as_str(), len).with_usage(usage);
                            let mut buffer = placed.init_buffer(&init).unwrap();
                            buffer.write(0, &vec![tag; len as usize]).unwrap();
                            let mut range_buffer =
                                ranges.init_buffer(&BufferInit::new(name.as_str(), len)).unwrap();
                            range_buffer.write(0, &vec![tag; len as usize]).unwrap();
                            let mut range = ranges.allocate_range(len / 2 + 16, 0).unwrap();
                            range.write(0, &vec![tag; (len / 2 + 16) as usize]).unwrap();
                            if round % 3 == 0 {
                                range.used_until(device.frames_from_now(1)).unwrap();
                                buffer.used_until(device.frames_from_now(1)).unwrap();
                            }
                            live.push((buffer, range_buffer, range, tag));
                            if live.len() > 6 {
                                let (buffer, range_buffer, range, tag) = live.remove(round % 5);
                                check(&buffer, tag);
                                check(&range_buffer, tag);
                                let mut back = vec![0; range.size() as usize];
                                range.read(0, &mut back).unwrap();
                                assert!(back.iter().all(|&b| b == tag), "a light range was overwritten");
                                checked += 1;
                                if round % 2 == 0 {
                                    next.send((buffer, range_buffer, tag)).unwrap();
                                } else {
                                    if round % 7 == 0 {
                                        // Released with a copy from it queued.
                                        uploader.write_buffer(&buffer, 0, &[tag; 16]).unwrap();
                                    }
                                    drop((buffer, range_buffer));
                                }
                                drop(range);
                            }
                            while let Ok((buffer, range_buffer, tag)) = inbox.try_recv() {
                                check(&range_buffer, tag);
                                placed.free_buffer(buffer).unwrap();
                                ranges.free_buffer(range_buffer).unwrap();
                            }
                        }
                        drop(next);
                        drop(live);
                        for (buffer, range_buffer, tag) in inbox.iter() {
                            check(&range_buffer, tag);
                            drop((buffer, range_buffer));
                        }
                        checked
                    })
                })
                .collect();
            drop(senders);
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert_eq!(checked, vec![SHARED_ROUNDS - 6; SHARED_THREADS]);
        uploader.wait_idle().unwrap();
        device.wait_submitted().unwrap();
        device.advance_frame();
        device.advance_frame();
        assert_eq!(device.pending_destruction(), 0, "everything released has retired");
        for pool in [&placed, &ranges] {
            pool.check_invariants().unwrap();
            let stats = pool.stats();
            assert_eq!(
                (stats.buffers, stats.used_bytes),
                (0, 0),
                "{:?}: every range is back",
                pool.desc().name
            );
            assert_eq!(stats.pages, 1, "{:?}: one arena keeps one empty page", pool.desc().name);
        }
        drop((uploader, placed, ranges));
        device.wait_submitted().unwrap();
        let left: Vec<_> =
            device.ledger().live_objects().into_iter().filter(|o| o.name.starts_with("one-arena")).collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    });
}

/// The range caches cost no page: once two threads have allocated from an arena (its caches are
/// used from then on), a thread fills the one-page arena with ranges and releases them (they wait
/// in its cache, still allocated in the page, as the other thread's released range waits in its
/// own), and a request no cached range fits makes every cache give its ranges back before the
/// arena would grow, so it fits in the same page; a released range is reused by its thread's
/// next request of its size; statistics count no cached range as used.
#[test]
fn cached_ranges_go_back_before_a_page_is_added_and_never_show_as_used() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("cache pool", BufferPoolUsage::Known(BufferUsage::STORAGE))
                .with_page_size(64 << 10),
        )
        .unwrap();
        let objects = device.ledger().memory_objects();
        // This thread, then another: the arena is shared (the other's range stays in its cache).
        drop(pool.allocate_range(4 << 10, 0).unwrap());
        std::thread::scope(|scope| {
            scope.spawn(|| drop(pool.allocate_range(4 << 10, 0).unwrap()));
        });
        let ranges: Vec<_> = (0..16).map(|_| pool.allocate_range(4 << 10, 0).unwrap()).collect();
        // The sixteenth made the other thread's cache give its range back: one page holds them.
        assert_eq!(device.ledger().memory_objects(), objects + 1, "one page holds the sixteen");
        let offsets: Vec<u64> = ranges.iter().map(|r| r.offset()).collect();
        drop(ranges);
        // Reused: the last released range comes back first.
        let again = pool.allocate_range(4 << 10, 0).unwrap();
        assert_eq!(again.offset(), *offsets.last().unwrap());
        drop(again);
        // Half the page in one range: no cached range fits; the caches give theirs back.
        let half = pool.allocate_range(32 << 10, 0).unwrap();
        assert_eq!(device.ledger().memory_objects(), objects + 1, "no page added");
        let buffer = pool.init_buffer(&BufferInit::new("cache pool buffer", 4 << 10)).unwrap();
        drop(buffer);
        let stats = pool.stats();
        assert_eq!((stats.pages, stats.used_bytes, stats.buffers), (1, 32 << 10, 0));
        drop(half);
        assert_eq!(pool.stats().used_bytes, 0);
        pool.check_invariants().unwrap();
    });
}

/// Spare lives (issue #31): a released buffer's life is reused by its thread's next resource.
/// A spare keeps nothing alive (the pool, and with it its hold on the device, goes while this
/// thread still holds spares); a buffer released with a frame use pending still waits for it (the
/// garbage is queued, only the emptied life is reused); and a pool that does not name its
/// buffers in the driver keeps their names in the ledger.
#[test]
fn spare_lives_keep_nothing_alive_and_deferred_buffers_still_wait() {
    with_gpu(|set| {
        let device = set.devices()[0].clone();
        let baseline = Arc::strong_count(&device);
        let desc = BufferPoolDesc::new("spare lives", BufferPoolUsage::Unknown)
            .with_page_size(1 << 20)
            .with_debug_names(false);
        let pool = BufferPool::new(Arc::clone(&device), desc).unwrap();
        let named = |prefix: &str| {
            device.ledger().live_objects().iter().filter(|o| o.name.starts_with(prefix)).count()
        };
        for round in 0..3 {
            let buffers: Vec<Buffer> = (0..100)
                .map(|i| {
                    let init =
                        BufferInit::new(format!("life {round} {i}"), 256).with_usage(BufferUsage::STORAGE);
                    pool.init_buffer(&init).unwrap()
                })
                .collect();
            assert_eq!(named(&format!("life {round} ")), 100, "every buffer is in the ledger by name");
            assert_eq!(buffers[7].name(), format!("life {round} 7"));
            drop(buffers);
            assert_eq!(named("life "), 0, "released at once: nothing was declared");
        }
        // Released with a frame use pending: its garbage waits for two frames.
        let kept =
            pool.init_buffer(&BufferInit::new("life deferred", 64).with_usage(BufferUsage::STORAGE)).unwrap();
        kept.used_until(device.frames_from_now(2)).unwrap();
        drop(kept);
        assert_eq!(named("life deferred"), 1, "still waiting for its frames");
        let reused =
            pool.init_buffer(&BufferInit::new("life reused", 64).with_usage(BufferUsage::STORAGE)).unwrap();
        assert_eq!(named("life deferred"), 1, "a new buffer does not retire the deferred one");
        drop(reused);
        device.advance_frame();
        device.advance_frame();
        assert_eq!(named("life "), 0, "retired once its frames passed");
        assert_eq!(pool.stats().buffers, 0);
        drop(pool);
        assert_eq!(Arc::strong_count(&device), baseline, "spare lives hold no pool and no device");
    });
}

/// Issue #31's lock-free path: eight threads each allocate from their own `LocalRanges` of one
/// shared known-flags pool (no lock, no shared count), write and check their ranges, release a
/// third of them with a frame use pending (the retire queue hands those back to the thread's
/// arena from whatever thread maintains the device) and drop their arena with some still queued;
/// one arena is moved to another thread between its uses (it is `Send`; its ranges are not).
/// Deterministic (counts, not timings): no range is handed out twice, every arena's pages are
/// gone once the frames have passed, and nothing is left in the ledger.
#[test]
fn eight_threads_allocate_from_their_own_local_ranges_of_one_pool() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("local-threads", BufferPoolUsage::Known(BufferUsage::STORAGE))
                .with_memory(MemoryIntent::Upload)
                .with_page_size(1 << 20),
        )
        .unwrap();
        let checked: Vec<usize> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let pool = &pool;
                    scope.spawn(move || {
                        let local = pool.local_ranges().unwrap();
                        let mut checked = 0;
                        let mut live = Vec::new();
                        for round in 0..ROUNDS * 4 {
                            let tag = (t * 31 + round) as u8;
                            let len = [48u64, 200, 1000, 3000, 70_000][round % 5];
                            let mut range = local.allocate(len, 0).unwrap();
                            range.write(0, &vec![tag; len as usize]).unwrap();
                            if round % 3 == 0 {
                                range.used_until(device.frames_from_now(1)).unwrap();
                            }
                            live.push((range, tag));
                            if live.len() > 8 {
                                let (range, tag) = live.remove(round % 7);
                                let mut back = vec![0; range.size() as usize];
                                range.read(0, &mut back).unwrap();
                                assert!(back.iter().all(|&b| b == tag), "a local range was handed out twice");
                                checked += 1;
                            }
                            if round % 16 == 0 {
                                device.advance_frame();
                            }
                        }
                        drop(live);
                        // Moved to another thread with no range alive, and used there.
                        if t == 0 {
                            std::thread::spawn(move || {
                                let range = local.allocate(512, 0).unwrap();
                                assert_eq!(range.size(), 512);
                            })
                            .join()
                            .unwrap();
                        }
                        checked
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert_eq!(checked, vec![ROUNDS * 4 - 8; THREADS]);
        assert_eq!(pool.stats().used_bytes, 0, "the pool's own arenas were not used");
        device.wait_submitted().unwrap();
        device.advance_frame();
        device.advance_frame();
        device.maintain();
        assert_eq!(device.pending_destruction(), 0, "everything released has retired");
        drop(pool);
        let left: Vec<_> = device
            .ledger()
            .live_objects()
            .into_iter()
            .filter(|o| o.name.starts_with("local-threads"))
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    });
}
