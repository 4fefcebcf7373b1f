//! The streaming manager and the TLSF heap allocator used from 8 threads, as a renderer shares
//! them (behind a `Mutex`; neither is internally synchronised): threads submit feedback, complete
//! and fail uploads, cut and raise the budget (forcing evictions), allocate and free, for a
//! bounded time, with the invariant checker after every operation.
//!
//! `residency-core` has no lock-free code: its only atomic is the relaxed `fetch_add` that hands
//! each `TlsfAllocator` a distinct id, so there is nothing for a `loom` model to explore.

use residency_core::allocator::{ResourceKind, TlsfAllocator, TlsfDesc};
use residency_core::format::Format;
use residency_core::streaming::{
    FrameInput, RequestKind, StreamingDesc, StreamingManager, TileKey, TileRequest,
};
use residency_core::tiles::{
    ImageId, LayoutLimits, SparseDimension, SparseFormatInfo, SparseImageDesc, SparseImageLayout, TileIndex,
};
use std::sync::Mutex;
use std::time::Instant;

const THREADS: u64 = 8;
/// Operations per thread: a count, never a time limit, so every machine runs the same operations
/// (the interleaving still varies; what is asserted holds under any).
const OPS_PER_THREAD: u64 = 400;

/// SplitMix64, one per thread.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n.max(1)
    }
}

struct Renderer {
    m: StreamingManager,
    frame: u64,
    /// Loads started and not reported yet.
    outstanding: Vec<TileKey>,
    /// The budget was cut since the last frame (the next frame evicts down to it).
    budget_cut: bool,
    counts: [u64; 3],
}

fn layout(size: u32) -> SparseImageLayout {
    let info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    SparseImageLayout::new(
        &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, size, size),
        &info,
        &LayoutLimits::unbounded(),
    )
    .unwrap()
}

#[test]
fn streaming_manager_from_8_threads() {
    let mut m = StreamingManager::new(StreamingDesc::default().with_budget_tiles(48).with_eviction_delay(2));
    let sizes = [1024u32, 2048, 512];
    for (i, &s) in sizes.iter().enumerate() {
        m.register_image(ImageId(i as u32), &layout(s)).unwrap();
    }
    let tiles: Vec<u32> = sizes.iter().map(|&s| layout(s).tile_count()).collect();
    let shared =
        Mutex::new(Renderer { m, frame: 0, outstanding: Vec::new(), budget_cut: false, counts: [0; 3] });
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (shared, tiles) = (&shared, &tiles);
            scope.spawn(move || {
                let mut rng = Rng(t + 1);
                for _ in 0..OPS_PER_THREAD {
                    let mut r = shared.lock().unwrap();
                    match rng.below(10) {
                        0 => {
                            let budget = 8 + rng.below(64) as u32;
                            r.budget_cut |= budget < r.m.budget_tiles();
                            r.m.set_budget_tiles(budget);
                            r.counts[1] += 1;
                        }
                        op => {
                            // Feedback from this thread's view, and some uploads finished or failed.
                            let requests: Vec<TileRequest> = (0..rng.below(8))
                                .map(|_| {
                                    let image = rng.below(tiles.len() as u64) as usize;
                                    TileRequest {
                                        image: ImageId(image as u32),
                                        tile: TileIndex(rng.below(u64::from(tiles[image])) as u32),
                                        mip: 0,
                                        kind: if op == 1 {
                                            RequestKind::LodWarning
                                        } else {
                                            RequestKind::Miss
                                        },
                                        pixels: 1,
                                    }
                                })
                                .collect();
                            let (mut loaded, mut failed, mut keep) = (Vec::new(), Vec::new(), Vec::new());
                            for key in std::mem::take(&mut r.outstanding) {
                                match rng.below(8) {
                                    0..=4 => loaded.push(key),
                                    5 => failed.push(key),
                                    _ => keep.push(key),
                                }
                            }
                            r.frame += 1;
                            let frame = r.frame;
                            let out =
                                r.m.update(&FrameInput {
                                    frame,
                                    requests: &requests,
                                    loaded: &loaded,
                                    failed: &failed,
                                })
                                .unwrap_or_else(|e| panic!("thread {t} frame {frame}: {e}"));
                            keep.extend(out.loads.iter().map(|l| l.key));
                            r.outstanding = keep;
                            r.budget_cut = false;
                            for k in &out.evicted {
                                assert!(!r.m.wanted_this_frame().any(|w| w == *k), "evicted wanted {k:?}");
                                assert!(!r.m.is_in_flight(*k), "evicted in-flight {k:?}");
                            }
                            r.counts[0] += 1;
                            r.counts[2] += out.evicted.len() as u64;
                        }
                    }
                    if !r.budget_cut {
                        r.m.check_invariants().unwrap_or_else(|e| panic!("thread {t}: {e}"));
                    }
                }
            });
        }
    });
    let r = shared.into_inner().unwrap();
    eprintln!(
        "streaming manager, {THREADS} threads: {} frames, {} budget changes, {} evictions in {:.2?}",
        r.counts[0],
        r.counts[1],
        r.counts[2],
        start.elapsed()
    );
    assert!(r.counts[0] > 0);
}

#[test]
fn tlsf_allocator_from_8_threads() {
    let heap = Mutex::new(TlsfAllocator::new(TlsfDesc::new(64 << 20).with_granularity(1024)).unwrap());
    let start = Instant::now();
    let ops: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let heap = &heap;
                scope.spawn(move || {
                    let mut rng = Rng(100 + t);
                    let mut mine = Vec::new();
                    let mut ops = 0;
                    for _ in 0..OPS_PER_THREAD {
                        let mut h = heap.lock().unwrap();
                        if mine.is_empty() || rng.below(3) != 0 {
                            let size = 1 + rng.below(256 << 10);
                            let alignment = 1 << rng.below(17);
                            let kind = [ResourceKind::Linear, ResourceKind::Optimal, ResourceKind::Unknown]
                                [rng.below(3) as usize];
                            if let Ok(a) = h.allocate(size, alignment, kind) {
                                assert_eq!(a.offset() % alignment, 0);
                                mine.push(a);
                            }
                        } else {
                            let a = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                            h.free(a).unwrap();
                        }
                        h.check_invariants().unwrap_or_else(|e| panic!("thread {t}: {e}"));
                        ops += 1;
                    }
                    let mut h = heap.lock().unwrap();
                    for a in mine {
                        h.free(a).unwrap();
                    }
                    h.check_invariants().unwrap();
                    ops
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let heap = heap.into_inner().unwrap();
    eprintln!("TLSF allocator, {THREADS} threads: {ops} operations in {:.2?}", start.elapsed());
    assert_eq!(heap.allocation_count(), 0);
    assert_eq!(heap.stats().largest_free_bytes, 64 << 20);
}
