//! The streaming manager: parent chains and latency accounting, LOD warnings prefetching before a
//! miss, eviction that never drops a tile wanted or in flight (invariant after every frame over
//! random request streams and budgets), budget cuts, rescue and thrash.

use proptest::prelude::*;
use residency_core::format::Format;
use residency_core::streaming::{
    child_tiles, classify_sample, parent_tiles, FeedbackDesc, FrameInput, FrameOutput, LoadReason,
    RequestKind, StreamUnit, StreamingDesc, StreamingManager, TileKey, TileRequest,
};
use residency_core::tiles::{
    ImageId, LayoutLimits, SparseDimension, SparseFormatInfo, SparseImageDesc, SparseImageLayout, TileCoord,
    TileIndex,
};
use std::collections::{BTreeMap, BTreeSet};

fn layout(w: u32, h: u32) -> SparseImageLayout {
    let info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    SparseImageLayout::new(
        &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, w, h),
        &info,
        &LayoutLimits::unbounded(),
    )
    .unwrap()
}

const TILE: u64 = 64 * 1024;

/// A backend stand-in: loads finish after a delay (or fail); invariants checked after every frame.
/// A load the manager cancels either still completes at its time (`drop_cancelled` false: the
/// report is ignored) or is dropped and reported failed the next frame, as the streamer does; a
/// new load of a key whose cancelled load is still out completes no earlier than it (the
/// protocol: a cancelled load is reported before a later load of its key).
struct Sim {
    m: StreamingManager,
    frame: u64,
    pending: BTreeMap<u64, Vec<(TileKey, bool)>>,
    delay: u64,
    drop_cancelled: bool,
    /// Cancelled loads not reported yet, by key.
    cancelled_out: BTreeMap<TileKey, u32>,
    /// Why each load in flight started.
    reasons: BTreeMap<TileKey, LoadReason>,
}

impl Sim {
    fn new(desc: StreamingDesc, delay: u64) -> Self {
        Self {
            m: StreamingManager::new(desc),
            frame: 0,
            pending: BTreeMap::new(),
            delay,
            drop_cancelled: false,
            cancelled_out: BTreeMap::new(),
            reasons: BTreeMap::new(),
        }
    }

    /// The frame the latest outstanding load of `key` completes, if any is out.
    fn last_due(&self, key: TileKey) -> Option<u64> {
        self.pending.iter().rev().find(|(_, v)| v.iter().any(|d| d.0 == key)).map(|(&f, _)| f)
    }

    fn step_with(
        &mut self,
        requests: &[TileRequest],
        delay_of: &mut dyn FnMut(TileKey) -> (u64, bool),
    ) -> FrameOutput {
        let due = self.pending.remove(&self.frame).unwrap_or_default();
        let loaded: Vec<TileKey> = due.iter().filter(|d| d.1).map(|d| d.0).collect();
        let failed: Vec<TileKey> = due.iter().filter(|d| !d.1).map(|d| d.0).collect();
        let before: Vec<TileKey> = requests
            .iter()
            .map(|r| TileKey::tile(r.image, r.tile))
            .filter(|&k| self.m.is_resident(k))
            .collect();
        let in_flight_before: BTreeSet<TileKey> = self.m.in_flight().collect();
        let cancelled_before = self.m.stats().loads_cancelled;
        let out = self
            .m
            .update(&FrameInput { frame: self.frame, requests, loaded: &loaded, failed: &failed })
            .unwrap();
        self.m.check_invariants().unwrap_or_else(|e| panic!("frame {}: {e}", self.frame));
        // Reports of cancelled loads come first for their key and are ignored.
        for key in loaded.iter().chain(&failed) {
            if let Some(n) = self.cancelled_out.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    self.cancelled_out.remove(key);
                }
            }
        }
        for k in &out.resident {
            assert!(
                in_flight_before.contains(k),
                "frame {}: {k:?} resident without a load in flight",
                self.frame
            );
        }
        assert_eq!(self.m.stats().loads_cancelled - cancelled_before, out.cancelled.len() as u64);
        assert_eq!(out.stats.cancelled as usize, out.cancelled.len());
        for &k in &out.cancelled {
            assert!(in_flight_before.contains(&k), "frame {}: cancelled {k:?} was not in flight", self.frame);
            assert!(
                !self.m.is_in_flight(k) && !self.m.is_resident(k),
                "frame {}: cancelled {k:?}",
                self.frame
            );
            assert_ne!(
                self.reasons.remove(&k),
                Some(LoadReason::Pinned),
                "frame {}: a pinned load cancelled",
                self.frame
            );
            assert!(
                !out.loads.iter().any(|l| l.key == k),
                "frame {}: {k:?} cancelled and started",
                self.frame
            );
            *self.cancelled_out.entry(k).or_insert(0) += 1;
            if self.drop_cancelled {
                // The loader drops it: its completion never comes; report it failed next frame.
                let due = self.pending.iter().find(|(_, v)| v.iter().any(|d| d.0 == k)).map(|(&f, _)| f);
                let due = due.expect("a cancelled load is outstanding");
                let list = self.pending.get_mut(&due).unwrap();
                let i = list.iter().position(|d| d.0 == k).unwrap();
                list.remove(i);
                self.pending.entry(self.frame + 1).or_default().push((k, false));
            }
        }
        for k in before {
            assert!(self.m.is_resident(k), "frame {}: requested resident tile {k:?} was dropped", self.frame);
        }
        let wanted: BTreeSet<TileKey> = self.m.wanted_this_frame().collect();
        for k in &out.evicted {
            assert!(!wanted.contains(k), "frame {}: evicted wanted {k:?}", self.frame);
            assert!(!self.m.is_in_flight(*k));
        }
        for load in &out.loads {
            let (d, ok) = delay_of(load.key);
            let mut due = self.frame + d.max(1);
            if self.cancelled_out.contains_key(&load.key) {
                due = due.max(self.last_due(load.key).unwrap_or(due));
            }
            self.pending.entry(due).or_default().push((load.key, ok));
            self.reasons.insert(load.key, load.reason);
        }
        for k in &out.resident {
            self.reasons.remove(k);
        }
        self.frame += 1;
        out
    }

    fn step(&mut self, requests: &[TileRequest]) -> FrameOutput {
        let d = self.delay;
        self.step_with(requests, &mut |_| (d, true))
    }
}

fn miss(image: ImageId, l: &SparseImageLayout, mip: u32, x: u32, y: u32) -> TileRequest {
    let tile = l.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap();
    TileRequest { image, tile, mip, kind: RequestKind::Miss, pixels: 1 }
}

#[test]
fn lineage_is_exact_for_npot_images() {
    let l = layout(1000, 600); // mip 0: 8 × 5 tiles, mip 1: 500 × 300 = 4 × 3
    let t = |mip, x, y| l.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap();
    assert_eq!(parent_tiles(&l, t(0, 0, 0)), vec![t(1, 0, 0)]);
    // Mip-0 tile x = 7 is texels 896..1000, i.e. mip-1 texels 448..500: tile 3.
    assert_eq!(parent_tiles(&l, t(0, 7, 4)), vec![t(1, 3, 2)]);
    assert_eq!(child_tiles(&l, t(1, 0, 0)), vec![t(0, 0, 0), t(0, 1, 0), t(0, 0, 1), t(0, 1, 1)]);
    assert_eq!(child_tiles(&l, t(1, 3, 2)), vec![t(0, 6, 4), t(0, 7, 4)]);
    let l = layout(513, 256); // mip 0: 5 × 2 tiles; mip 1: 256 × 128 = 2 × 1
    let t = |mip, x| l.tile_index(TileCoord { layer: 0, mip, x, y: 0, z: 0 }).unwrap();
    // Mip-0 texels 256..384 are mip-1 texels 127.75..191.6: tiles 0 and 1.
    assert_eq!(parent_tiles(&l, t(0, 2)), vec![t(1, 0), t(1, 1)]);
    assert_eq!(parent_tiles(&l, t(0, 1)), vec![t(1, 0)]);
}

#[test]
fn parent_chain_loads_coarse_first_and_latency_is_counted() {
    let l = layout(2048, 2048);
    assert_eq!(l.first_tail_lod(), 5);
    let img = ImageId(1);
    let desc = StreamingDesc::default().with_upload_budget_bytes(2 * TILE);
    let mut sim = Sim::new(desc, 1);
    sim.m.register_image(img, &l).unwrap();
    let out = sim.step(&[]);
    assert_eq!(out.loads.len(), 1);
    assert_eq!((out.loads[0].key, out.loads[0].reason), (TileKey::tail(img, 0), LoadReason::Pinned));
    let req = [miss(img, &l, 0, 3, 2)];
    let mut started = Vec::new();
    for _ in 0..5 {
        let out = sim.step(&req);
        started.push(out.loads.iter().map(|ld| ld.coord.unwrap().mip).collect::<Vec<_>>());
    }
    assert_eq!(
        started,
        vec![vec![4, 3], vec![2, 1], vec![0], vec![], vec![]],
        "two tiles a frame, coarse first"
    );
    let table = sim.m.residency(img).unwrap().page_table();
    assert_eq!(table.min_lod(0, [3, 2, 0]), 0, "region resident down to mip 0");
    assert_eq!(table.min_lod(0, [2, 2, 0]), 1, "a neighbour under the same mip-1 tile");
    assert_eq!(table.min_lod(0, [4, 2, 0]), 3, "a neighbour under the same mip-3 tile only");
    let s = sim.m.stats();
    assert_eq!(s.tiles_streamed, 6);
    assert_eq!(s.bytes_streamed, 6 * TILE);
    // Tail: wanted 0, resident 1. Chain wanted at 1: mips 4, 3 resident at 2; 2, 1 at 3; 0 at 4.
    let lat = s.latency.summary();
    assert_eq!((lat.count, lat.p50, lat.p95, lat.p99, lat.max), (6, 1, 3, 3, 3));
    assert_eq!(sim.m.committed_tiles(), 6);
}

#[test]
fn latency_counts_from_the_frame_that_wrote_the_feedback() {
    let l = layout(2048, 2048);
    let img = ImageId(1);
    let mut m = StreamingManager::new(StreamingDesc::default().with_upload_budget_bytes(64 * TILE));
    m.register_image(img, &l).unwrap();
    let none: [TileKey; 0] = [];
    let out = m.update(&FrameInput { frame: 0, requests: &[], loaded: &none, failed: &none }).unwrap();
    let tail: Vec<TileKey> = out.loads.iter().map(|ld| ld.key).collect();
    // Frame 3 reads the feedback frame 1 wrote (two frames in flight); the tile loads at once.
    let req = [miss(img, &l, 4, 0, 0)];
    let out = m
        .update_with_feedback_from(&FrameInput { frame: 3, requests: &req, loaded: &tail, failed: &none }, 1)
        .unwrap();
    let keys: Vec<TileKey> = out.loads.iter().map(|ld| ld.key).collect();
    assert_eq!(keys, vec![TileKey::tile(img, req[0].tile)]);
    m.update(&FrameInput { frame: 4, requests: &[], loaded: &keys, failed: &none }).unwrap();
    let lat = m.stats().latency.summary();
    // The tail: asked (pinned) at 0, resident at 3. The tile: asked at 1, resident at 4.
    assert_eq!((lat.count, lat.max), (2, 3));
    // A feedback frame "from the future" counts as this frame.
    let req = [miss(img, &l, 3, 1, 0)];
    let out = m
        .update_with_feedback_from(&FrameInput { frame: 5, requests: &req, loaded: &none, failed: &none }, 9)
        .unwrap();
    let keys: Vec<TileKey> = out.loads.iter().map(|ld| ld.key).collect();
    m.update(&FrameInput { frame: 6, requests: &[], loaded: &keys, failed: &none }).unwrap();
    assert_eq!(m.stats().latency.summary().count, 3);
    assert_eq!(m.stats().latency.counts()[1], 1, "asked at 5, resident at 6");
}

/// A camera zooming in on one spot: its LOD falls 0.02 a frame. Feedback comes from the sample
/// rule over the current min-LOD map and reaches the manager two frames late (the ring).
fn zoom(prefetch: bool) -> (u32, u32) {
    let l = layout(2048, 2048);
    let img = ImageId(3);
    let mut sim = Sim::new(StreamingDesc::default().with_prefetch(prefetch), 1);
    sim.m.register_image(img, &l).unwrap();
    let fl = sim.m.feedback_layout(FeedbackDesc::default()).unwrap();
    let image = fl.images()[0].clone();
    let mut lagged: Vec<Vec<TileRequest>> = vec![Vec::new(), Vec::new()];
    let (mut misses, mut warnings) = (0, 0);
    for frame in 0..260u64 {
        let lod = (5.2 - 0.02 * frame as f32).max(0.0);
        let table = sim.m.residency(img).unwrap().page_table();
        let mut reqs = BTreeMap::new();
        for dy in 0..4 {
            for dx in 0..4 {
                let uv = [0.3 + dx as f32 * 0.001, 0.3 + dy as f32 * 0.001];
                let region = [(uv[0] * 2048.0) as u32 / 128, (uv[1] * 2048.0) as u32 / 128, 0];
                if let Some((tile, kind)) =
                    classify_sample(&image, 0, [uv[0], uv[1], 0.0], lod, table.min_lod(0, region))
                {
                    // Misses only count once the tail is in: before that nothing can be shown.
                    if frame > 3 {
                        match kind {
                            RequestKind::Miss => misses += 1,
                            RequestKind::LodWarning | RequestKind::MinLodWarning => warnings += 1,
                        }
                    }
                    let mip = image.mip_of(tile).unwrap();
                    reqs.entry((tile, kind))
                        .or_insert(TileRequest { image: img, tile, mip, kind, pixels: 0 })
                        .pixels += 1;
                }
            }
        }
        lagged.push(reqs.into_values().collect());
        let now = lagged.remove(0);
        sim.step(&now);
    }
    (misses, warnings)
}

#[test]
fn lod_warning_prefetches_before_a_miss() {
    let (misses, warnings) = zoom(true);
    assert!(warnings > 0);
    assert_eq!(misses, 0, "every finer tile arrived before the camera needed it");
    let (misses, _) = zoom(false);
    assert!(misses > 0, "without prefetch the same zoom misses ({misses})");
}

#[test]
fn delayed_eviction_rescues_tiles_wanted_again_and_counts_thrash() {
    let l = layout(2048, 2048);
    let img = ImageId(1);
    // Budget: tail + mip 4 + 3 mip-3 tiles.
    let desc = StreamingDesc::default().with_budget_tiles(5).with_eviction_delay(4).with_thrash_window(10);
    let mut sim = Sim::new(desc, 1);
    sim.m.register_image(img, &l).unwrap();
    sim.step(&[]);
    let a = miss(img, &l, 3, 0, 0);
    let b = miss(img, &l, 3, 1, 0);
    let c = miss(img, &l, 3, 0, 1);
    let d = miss(img, &l, 3, 1, 1);
    for _ in 0..3 {
        sim.step(&[a, b, c]);
    }
    let key = |r: &TileRequest| TileKey::tile(img, r.tile);
    assert!([a, b, c].iter().all(|r| sim.m.is_resident(key(r))));
    // d is wanted; a was used 3 frames ago (< delay 4): nothing may go, d waits.
    for _ in 0..3 {
        let out = sim.step(&[b, c, d]);
        assert!(out.evicted.is_empty());
    }
    // a is wanted again before it went: rescued.
    sim.step(&[a, b, c, d]);
    assert!(sim.m.is_resident(key(&a)) && !sim.m.is_resident(key(&d)));
    // Now a idles long enough: it goes for d.
    let mut evicted = Vec::new();
    for _ in 0..6 {
        evicted.extend(sim.step(&[b, c, d]).evicted);
    }
    assert_eq!(evicted, vec![key(&a)]);
    assert!(sim.m.is_resident(key(&d)));
    assert_eq!(sim.m.stats().thrash, 0);
    // Wanted again within the window: thrash.
    sim.step(&[a]);
    assert_eq!(sim.m.stats().thrash, 1);
}

#[test]
fn a_budget_cut_evicts_down_over_frames_keeping_tiles_in_use() {
    let l = layout(2048, 2048);
    let img = ImageId(1);
    let desc = StreamingDesc::default().with_budget_tiles(400).with_evictions_per_frame(16);
    let mut sim = Sim::new(desc, 1);
    sim.m.register_image(img, &l).unwrap();
    sim.step(&[]);
    let all: Vec<TileRequest> =
        (0..16).flat_map(|y| (0..16).map(move |x| (x, y))).map(|(x, y)| miss(img, &l, 0, x, y)).collect();
    for _ in 0..6 {
        sim.step(&all);
    }
    assert_eq!(sim.m.committed_tiles(), 342, "everything: 341 tiles and the tail");
    let keep = [miss(img, &l, 0, 5, 5), miss(img, &l, 0, 6, 5)];
    sim.m.set_budget_tiles(20);
    let mut frames = 0;
    while sim.m.committed_tiles() > 20 {
        let out = sim.step(&keep);
        assert!(out.evicted.len() <= 16);
        frames += 1;
        assert!(frames < 40);
    }
    assert!(frames >= (342 - 20) / 16);
    for r in &keep {
        assert!(sim.m.is_resident(TileKey::tile(img, r.tile)));
    }
    assert!(sim.m.is_resident(TileKey::tail(img, 0)), "the tail is pinned");
    assert!(sim.m.pool().capacity_tiles() <= 2048);
}

#[test]
fn unregistering_releases_everything_and_ignores_late_completions() {
    let l = layout(1024, 1024);
    let img = ImageId(9);
    let mut sim = Sim::new(StreamingDesc::default(), 3);
    sim.m.register_image(img, &l).unwrap();
    sim.step(&[]);
    sim.step(&[]);
    sim.step(&[]);
    let out = sim.step(&[miss(img, &l, 0, 1, 1)]);
    assert!(!out.loads.is_empty());
    let changes = sim.m.unregister_image(img).unwrap();
    assert_eq!(changes.changes.tails.len(), 1);
    assert_eq!(sim.m.pool().used_tiles(), 0);
    assert!(sim.m.pool().leaks().is_empty());
    for _ in 0..4 {
        let out = sim.step(&[miss(img, &l, 0, 1, 1)]);
        assert!(out.loads.is_empty() && out.resident.is_empty());
    }
    assert_eq!(sim.m.stats().stale_requests, 4);
}

/// A load the camera moved away from is cancelled after `cancel_after_frames` frames unwanted: its
/// budget goes back at once, it does not count as failed, its late completion is accepted and
/// ignored (never resident), and wanted again it loads again. A pinned load is never cancelled.
#[test]
fn a_load_no_longer_wanted_is_cancelled_and_its_late_completion_ignored() {
    let l = layout(2048, 2048);
    let img = ImageId(1);
    let tail = TileKey::tail(img, 0);
    let mut sim = Sim::new(StreamingDesc::default().with_cancel_after_frames(4), 1);
    sim.m.register_image(img, &l).unwrap();
    // The tail loads slowly (12 frames) with nothing wanted meanwhile: pinned, never cancelled.
    let out = sim.step_with(&[], &mut |_| (12, true));
    assert_eq!(out.loads.len(), 1);
    while !sim.m.is_resident(tail) {
        assert!(sim.step(&[]).cancelled.is_empty(), "the pinned tail was cancelled");
    }
    assert_eq!(sim.frame - 1, 12, "resident when its load completed");
    // A mip-4 tile asked for once; its load takes 10 frames.
    let req = miss(img, &l, 4, 0, 0);
    let key = TileKey::tile(img, req.tile);
    let out = sim.step_with(&[req], &mut |_| (10, true));
    assert_eq!(out.loads.iter().map(|ld| ld.key).collect::<Vec<_>>(), vec![key]);
    let started_at = sim.frame - 1;
    let committed = sim.m.committed_tiles();
    // Still wanted 2 frames later: not cancelled; then not wanted for 4 frames.
    sim.step(&[]);
    sim.step(&[req]);
    let renewed = sim.frame - 1;
    let mut cancelled_at = None;
    for _ in 0..6 {
        let out = sim.step(&[]);
        if !out.cancelled.is_empty() {
            assert_eq!(out.cancelled, vec![key]);
            cancelled_at = Some(sim.frame - 1);
        }
    }
    assert_eq!(cancelled_at, Some(renewed + 4), "4 frames after it was last wanted");
    assert!(!sim.m.is_in_flight(key) && !sim.m.is_resident(key));
    assert_eq!(sim.m.committed_tiles(), committed - 1, "its reserved tile went back");
    let stats = sim.m.stats();
    assert_eq!((stats.loads_cancelled, stats.loads_failed), (1, 0));
    // Its completion (frame started_at + 10) comes later and is ignored.
    while sim.frame <= started_at + 10 {
        let out = sim.step(&[]);
        assert!(out.resident.is_empty());
    }
    assert!(!sim.m.is_resident(key));
    assert_eq!(sim.m.stats().loads_failed, 0);
    // Wanted again: it loads again.
    let out = sim.step(&[req]);
    assert_eq!(out.loads.iter().map(|ld| ld.key).collect::<Vec<_>>(), vec![key]);
    sim.step(&[req]);
    assert!(sim.m.is_resident(key));

    // 0 never cancels.
    let mut sim = Sim::new(StreamingDesc::default().with_cancel_after_frames(0), 1);
    sim.m.register_image(img, &l).unwrap();
    sim.step(&[]);
    sim.step_with(&[req], &mut |_| (20, true));
    for _ in 0..20 {
        assert!(sim.step(&[]).cancelled.is_empty());
    }
    assert!(sim.m.is_resident(key));
    assert_eq!(sim.m.stats().loads_cancelled, 0);
}

/// A cancelled load the loader drops is reported failed once (as the streamer does): accepted,
/// not counted as failed, and its key can load again in the same run.
#[test]
fn a_dropped_cancelled_load_reported_failed_is_not_a_failure() {
    let l = layout(2048, 2048);
    let img = ImageId(1);
    let mut sim = Sim::new(StreamingDesc::default().with_cancel_after_frames(2), 1);
    sim.drop_cancelled = true;
    sim.m.register_image(img, &l).unwrap();
    sim.step(&[]);
    let req = miss(img, &l, 4, 0, 0);
    let key = TileKey::tile(img, req.tile);
    sim.step_with(&[req], &mut |_| (9, true));
    let mut cancelled = 0;
    for _ in 0..4 {
        cancelled += sim.step(&[]).cancelled.len();
    }
    assert_eq!(cancelled, 1);
    assert_eq!((sim.m.stats().loads_cancelled, sim.m.stats().loads_failed), (1, 0));
    sim.step(&[req]);
    sim.step(&[req]);
    assert!(sim.m.is_resident(key));
}

#[derive(Clone, Debug)]
struct Frame {
    requests: Vec<(bool, u32, bool, u32)>,
}

fn frames() -> impl Strategy<Value = Vec<Frame>> {
    prop::collection::vec(
        prop::collection::vec((any::<bool>(), any::<u32>(), any::<bool>(), 1u32..100), 0..24)
            .prop_map(|requests| Frame { requests }),
        10..50,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn eviction_never_drops_a_tile_in_use_or_in_flight(
        frames in frames(),
        budget in 4u32..80,
        cut in (0usize..50, 2u32..40),
        upload_tiles in 1u64..10,
        delay in 0u32..4,
        max_in_flight in 1u32..30,
        seed in any::<u64>(),
    ) {
        let a = layout(2048, 2048);
        let b = layout(1000, 600);
        let desc = StreamingDesc::default()
            .with_budget_tiles(budget)
            .with_upload_budget_bytes(upload_tiles * TILE)
            .with_eviction_delay(delay)
            .with_max_in_flight(max_in_flight)
            .with_evictions_per_frame(3);
        let mut sim = Sim::new(desc, 1);
        sim.m.register_image(ImageId(1), &a).unwrap();
        sim.m.register_image(ImageId(2), &b).unwrap();
        let mut s = seed;
        let mut rand = move || { s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); s >> 33 };
        for (i, f) in frames.iter().enumerate() {
            if i == cut.0 {
                sim.m.set_budget_tiles(cut.1);
            }
            let reqs: Vec<TileRequest> = f.requests.iter().map(|&(second, t, warn, pixels)| {
                let (image, l) = if second { (ImageId(2), &b) } else { (ImageId(1), &a) };
                let tile = TileIndex(t % l.tile_count());
                let mip = l.tile_coord(tile).unwrap().mip;
                TileRequest { image, tile, mip, kind: if warn { RequestKind::LodWarning } else { RequestKind::Miss }, pixels }
            }).collect();
            let out = sim.step_with(&reqs, &mut |_| (rand() % 4, rand() % 10 != 0));
            for ld in &out.loads {
                if let StreamUnit::Tile(_) = ld.key.unit {
                    prop_assert!(ld.reason != LoadReason::Pinned);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random views over two images with slow loads and a short cancel window: the contract
    /// holds every frame (invariants, the budget, no unwanted load left in flight), cancelled
    /// loads are never pinned, never resident through their own completion, and their late
    /// reports (delivered at their time or dropped and reported failed) are accepted and ignored.
    #[test]
    fn cancelled_loads_free_their_budget_and_never_become_resident(
        frames in frames(),
        budget in 4u32..80,
        cancel_after in 1u32..6,
        max_delay in 1u64..12,
        drop_cancelled in any::<bool>(),
        delay in 0u32..4,
        seed in any::<u64>(),
    ) {
        let a = layout(2048, 2048);
        let b = layout(1000, 600);
        let desc = StreamingDesc::default()
            .with_budget_tiles(budget)
            .with_upload_budget_bytes(4 * TILE)
            .with_eviction_delay(delay)
            .with_max_in_flight(16)
            .with_cancel_after_frames(cancel_after);
        let mut sim = Sim::new(desc, 1);
        sim.drop_cancelled = drop_cancelled;
        sim.m.register_image(ImageId(1), &a).unwrap();
        sim.m.register_image(ImageId(2), &b).unwrap();
        let mut s = seed;
        let mut rand = move || { s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); s >> 33 };
        let pinned: u64 = [&a, &b]
            .iter()
            .map(|l| u64::from(l.mip_tail_count()) * l.mip_tail().map_or(0, |t| u64::from(t.tiles)))
            .sum();
        let mut cancelled = 0;
        for f in &frames {
            let reqs: Vec<TileRequest> = f.requests.iter().map(|&(second, t, warn, pixels)| {
                let (image, l) = if second { (ImageId(2), &b) } else { (ImageId(1), &a) };
                let tile = TileIndex(t % l.tile_count());
                let mip = l.tile_coord(tile).unwrap().mip;
                TileRequest { image, tile, mip, kind: if warn { RequestKind::LodWarning } else { RequestKind::Miss }, pixels }
            }).collect();
            let out = sim.step_with(&reqs, &mut |_| (1 + rand() % max_delay, rand() % 10 != 0));
            cancelled += out.cancelled.len();
            // Only pinned loads start over the budget.
            prop_assert!(sim.m.committed_tiles() <= u64::from(budget) + pinned, "{} > {budget} + {pinned}", sim.m.committed_tiles());
        }
        // Everything out reported: the cancelled loads' reports all came, and what is still in
        // flight is a load the stand-in will report.
        for _ in 0..=max_delay + 1 {
            cancelled += sim.step(&[]).cancelled.len();
        }
        prop_assert!(sim.cancelled_out.is_empty(), "unreported cancelled loads {:?}", sim.cancelled_out);
        prop_assert_eq!(sim.m.stats().loads_cancelled, cancelled as u64);
        prop_assert!(sim.m.in_flight().all(|k| sim.last_due(k).is_some()));
    }
}

/// Without a mip tail (lavapipe, the software path) the single-tile coarse mips stand in for the
/// tail: all of them are pinned and loaded first, as a tail would be.
#[test]
fn without_a_tail_the_single_tile_mips_are_pinned() {
    use residency_core::tiles::software_layout;
    let l = software_layout(&SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 2048, 2048), 4).unwrap();
    assert!(l.mip_tail().is_none());
    let img = ImageId(1);
    let mut sim = Sim::new(StreamingDesc::default(), 1);
    sim.m.register_image(img, &l).unwrap();
    let out = sim.step(&[]);
    let mut mips: Vec<u32> = out.loads.iter().map(|ld| ld.coord.unwrap().mip).collect();
    mips.sort_unstable();
    assert_eq!(mips, (4..12).collect::<Vec<_>>(), "2048 / 128 = 16 tiles at mip 0: mips 4..=11 are one tile");
    assert!(out.loads.iter().all(|ld| ld.reason == LoadReason::Pinned));
    sim.step(&[]);
    // Pinned: a tight budget never evicts them.
    sim.m.set_budget_tiles(1);
    for _ in 0..5 {
        assert!(sim.step(&[]).evicted.is_empty());
    }
    assert_eq!(sim.m.committed_tiles(), 8);
}

/// The manager's compaction: after a budget cut the heaps are half holes; a plan moves only the
/// images' mapped tiles (the tail stays), applying it keeps the residency, the min-LOD map and
/// the invariants while the physical tiles change; a wrong or partial move list is refused with
/// nothing changed; revert puts everything back; the emptied heaps can then be released.
#[test]
fn compaction_moves_resident_tiles_keeps_their_meaning_and_reverts() {
    let l = layout(1024, 1024);
    let img = ImageId(1);
    let desc =
        StreamingDesc::default().with_budget_tiles(60).with_tiles_per_heap(8).with_evictions_per_frame(64);
    let mut sim = Sim::new(desc, 1);
    sim.m.register_image(img, &l).unwrap();
    sim.step(&[]);
    let all: Vec<TileRequest> =
        (0..4).flat_map(|y| (0..8).map(move |x| (x, y))).map(|(x, y)| miss(img, &l, 0, x, y)).collect();
    for _ in 0..8 {
        sim.step(&all);
    }
    let even: Vec<TileRequest> = all.iter().copied().step_by(2).collect();
    sim.m.set_budget_tiles(32);
    for _ in 0..8 {
        sim.step(&even);
    }
    let before = sim.m.pool().stats();
    assert!(before.heaps.iter().filter(|h| h.used < h.tiles).count() >= 2, "{before:?}");
    let table = |m: &StreamingManager| m.residency(img).unwrap().page_table().clone();
    let (t0, stats0) = (table(&sim.m), sim.m.pool().stats());
    let (plan, moves) = sim.m.plan_compaction(u32::MAX);
    assert!(!plan.moves.is_empty() && !plan.heaps_emptied.is_empty(), "{plan:?}");
    assert_eq!(moves.len(), 1);
    assert_eq!(moves[0].moves.len(), plan.moves.len());

    // Refused, nothing changed: a partial move list, a move not in the plan.
    let partial =
        vec![residency_core::streaming::ImageCompaction { image: img, moves: moves[0].moves[1..].to_vec() }];
    assert!(sim.m.apply_compaction(&plan, &partial).is_err());
    let mut wrong = moves.clone();
    wrong[0].moves[0].0 = TileIndex(wrong[0].moves[0].0 .0 + 1);
    assert!(sim.m.apply_compaction(&plan, &wrong).is_err());
    // A move given twice in place of another (the count is right): refused.
    let mut twice = moves.clone();
    let last = twice[0].moves.len() - 1;
    twice[0].moves[last] = twice[0].moves[0];
    assert!(sim.m.apply_compaction(&plan, &twice).is_err());
    assert_eq!(
        (table(&sim.m).mapped().collect::<Vec<_>>(), sim.m.pool().stats()),
        (t0.mapped().collect(), stats0.clone())
    );

    let changes = sim.m.apply_compaction(&plan, &moves).unwrap();
    assert_eq!(changes[0].tiles.len(), plan.moves.len());
    sim.m.check_invariants().unwrap();
    let t1 = table(&sim.m);
    assert_eq!(t1.min_lod_layer(0), t0.min_lod_layer(0), "the min-LOD map means what it meant");
    assert_eq!(t1.mapped().map(|m| m.0).collect::<Vec<_>>(), t0.mapped().map(|m| m.0).collect::<Vec<_>>());
    assert_ne!(t1.mapped().collect::<Vec<_>>(), t0.mapped().collect::<Vec<_>>());

    sim.m.revert_compaction(&plan, &moves).unwrap();
    sim.m.check_invariants().unwrap();
    assert_eq!(table(&sim.m).mapped().collect::<Vec<_>>(), t0.mapped().collect::<Vec<_>>());
    assert_eq!(sim.m.pool().stats(), stats0);

    sim.m.apply_compaction(&plan, &moves).unwrap();
    let released = sim.m.release_empty_heaps(&plan.heaps_emptied);
    assert_eq!(released, plan.heaps_emptied);
    sim.m.check_invariants().unwrap();
    assert_eq!(sim.m.pool().stats().heaps.len(), before.heaps.len() - released.len());
    // Frames go on: the wanted tiles stay, and nothing is loaded again.
    let out = sim.step(&even);
    assert!(out.loads.is_empty() && out.evicted.is_empty(), "{out:?}");
    assert!(even.iter().all(|r| sim.m.is_resident(TileKey::tile(img, r.tile))));
}

/// `reset_layer` (a slice of a sliced array given another texture): the layer's tiles and its tail
/// go back to the pool and its load in flight is forgotten (its late completion ignored), the
/// other layer keeps everything, the layer's pinned tail loads again, and a layer the image does
/// not have is refused with nothing changed.
#[test]
fn resetting_a_layer_releases_only_that_layer_and_reloads_its_coarse_chain() {
    use residency_core::streaming::StreamingError;
    let info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    let l = SparseImageLayout::new(
        &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024).with_array_layers(2),
        &info,
        &LayoutLimits::unbounded(),
    )
    .unwrap();
    assert_eq!(l.mip_tail_count(), 2, "one tail per layer");
    let img = ImageId(4);
    let at = |layer, mip, x, y| {
        let tile = l.tile_index(TileCoord { layer, mip, x, y, z: 0 }).unwrap();
        TileRequest { image: img, tile, mip, kind: RequestKind::Miss, pixels: 1 }
    };
    let key = |r: TileRequest| TileKey::tile(img, r.tile);
    let mut sim = Sim::new(StreamingDesc::default(), 2);
    sim.m.register_image(img, &l).unwrap();
    let wanted = [at(0, 0, 1, 1), at(1, 0, 1, 1)];
    for _ in 0..12 {
        sim.step(&wanted);
    }
    assert!(wanted.iter().all(|&r| sim.m.is_resident(key(r))));
    // A tile of layer 1 in flight when the layer is reset.
    let late = at(1, 0, 3, 3);
    sim.step(&[late]);
    assert!(sim.m.is_in_flight(key(late)));
    let used = sim.m.pool().used_tiles();
    assert_eq!(
        sim.m.reset_layer(img, 2),
        Err(StreamingError::LayerOutOfRange { image: img, layer: 2, layers: 2 })
    );
    assert_eq!(sim.m.pool().used_tiles(), used, "a refusal changed nothing");
    let changes = sim.m.reset_layer(img, 1).unwrap();
    assert_eq!(changes.changes.tails.len(), 1, "layer 1's tail is unbound");
    assert!(!changes.changes.tiles.is_empty(), "layer 1's tiles are unbound");
    assert!(!sim.m.is_resident(key(wanted[1])) && !sim.m.is_in_flight(key(late)));
    assert!(!sim.m.is_resident(TileKey::tail(img, 1)));
    assert!(sim.m.is_resident(key(wanted[0])) && sim.m.is_resident(TileKey::tail(img, 0)), "layer 0 kept");
    assert!(sim.m.check_invariants().is_ok(), "{:?}", sim.m.check_invariants());
    // The late load's completion is ignored; the tail loads again first.
    for _ in 0..6 {
        let out = sim.step(&[wanted[0]]);
        assert!(!out.resident.contains(&key(late)), "a forgotten load never becomes resident");
    }
    assert!(sim.m.is_resident(TileKey::tail(img, 1)), "layer 1's coarse chain loaded again");
    assert!(!sim.m.is_resident(key(wanted[1])) && !sim.m.is_resident(key(late)));
    let held = sim.m.residency(img).unwrap().page_table().resident_tiles();
    assert!(sim.m.pool().owned_tiles(img) >= held, "the pool and the page table agree");
    sim.m.unregister_image(img).unwrap();
    assert!(sim.m.pool().leaks().is_empty(), "nothing leaked: {:?}", sim.m.pool().leaks());
}

/// `pinned_mip_tiles`: besides the tail, every mip of at most that many tiles is pinned (loaded
/// first, never evicted, even with the budget cut to one tile); 0 pins the tail alone; without a
/// tail the single-tile mips are pinned whatever is asked.
#[test]
fn pinned_mip_tiles_pins_the_coarse_mips_beside_the_tail() {
    use residency_core::streaming::first_pinned_mip;
    let l = layout(1024, 1024); // mip 0: 8 × 8 tiles, 1: 4 × 4, 2: 2 × 2, 3: 1, tail from 4
    assert_eq!(l.first_tail_lod(), 4);
    let expect = [(0, None), (1, Some(3)), (3, Some(3)), (4, Some(2)), (16, Some(1)), (64, Some(0))];
    for (tiles, first) in expect {
        assert_eq!(first_pinned_mip(&l, tiles), first, "pinned_mip_tiles = {tiles}");
    }
    let img = ImageId(1);
    let mut sim = Sim::new(StreamingDesc { pinned_mip_tiles: 4, ..StreamingDesc::default() }, 2);
    sim.m.register_image(img, &l).unwrap();
    for _ in 0..8 {
        sim.step(&[]);
    }
    let tile = |mip, x, y| TileKey::tile(img, l.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap());
    let pinned: Vec<TileKey> =
        [(2, 0, 0), (2, 1, 0), (2, 0, 1), (2, 1, 1), (3, 0, 0)].map(|(m, x, y)| tile(m, x, y)).to_vec();
    assert!(pinned.iter().all(|&k| sim.m.is_resident(k)), "loaded with no request");
    assert!(sim.m.is_resident(TileKey::tail(img, 0)));
    let wanted = TileRequest {
        image: img,
        tile: l.tile_index(TileCoord { layer: 0, mip: 1, x: 0, y: 0, z: 0 }).unwrap(),
        mip: 1,
        kind: RequestKind::Miss,
        pixels: 1,
    };
    for _ in 0..6 {
        sim.step(&[wanted]);
    }
    assert!(sim.m.is_resident(tile(1, 0, 0)));
    sim.m.set_budget_tiles(1);
    for _ in 0..24 {
        sim.step(&[]);
    }
    assert!(!sim.m.is_resident(tile(1, 0, 0)), "an unpinned tile is evicted");
    assert!(pinned.iter().all(|&k| sim.m.is_resident(k)), "pinned tiles never are");
    // Without a tail the single-tile mips stand in for it, whatever is asked.
    let mut info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    info.mip_tail_model = residency_core::tiles::MipTailModel::NoTail;
    let no_tail = SparseImageLayout::new(
        &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024),
        &info,
        &LayoutLimits::unbounded(),
    )
    .unwrap();
    assert!(no_tail.mip_tail().is_none());
    assert_eq!(first_pinned_mip(&no_tail, 0), Some(3));
    assert_eq!(first_pinned_mip(&no_tail, 4), Some(2));
}

/// `capacity_tiles` (a software atlas's slots): an image whose pinned tiles would take the
/// registered images' past it is refused with nothing changed; pinned loads, which start
/// whatever the budget, evict unpinned tiles to stay within it; committed tiles never pass it
/// (the invariant after every frame).
#[test]
fn capacity_tiles_refuses_pinned_tiles_past_it_and_pinned_loads_stay_within_it() {
    use residency_core::streaming::StreamingError;
    let l = layout(1024, 1024); // pinned with 4: mips 2 (4 tiles) and 3 (1), and the tail
    let tail = l.mip_tail().map_or(0, |t| t.tiles);
    let per_image = u64::from(tail) + 5;
    let capacity = (2 * per_image + 2) as u32;
    let desc = StreamingDesc {
        pinned_mip_tiles: 4,
        budget_tiles: capacity,
        tiles_per_heap: 1,
        capacity_tiles: Some(capacity),
        ..StreamingDesc::default()
    };
    let mut sim = Sim::new(desc, 2);
    let [a, b, c] = [ImageId(1), ImageId(2), ImageId(3)];
    sim.m.register_image(a, &l).unwrap();
    sim.m.register_image(b, &l).unwrap();
    let refused = sim.m.register_image(c, &l).unwrap_err();
    assert_eq!(refused, StreamingError::PinnedOverCapacity { image: c, pinned: 3 * per_image, capacity });
    assert_eq!(sim.m.images().count(), 2, "nothing registered");
    for _ in 0..6 {
        sim.step(&[]);
    }
    // Image a's mip-0 tiles fill the budget (= the capacity) around the pinned ones.
    let mip0: Vec<TileRequest> =
        (0..8).flat_map(|y| (0..8).map(move |x| (x, y))).map(|(x, y)| miss(a, &l, 0, x, y)).collect();
    for i in 0..12 {
        sim.step(&mip0[(i * 4) % 64..(i * 4) % 64 + 4]);
        assert!(sim.m.committed_tiles() <= u64::from(capacity));
    }
    assert!(sim.m.committed_tiles() > 2 * per_image, "unpinned tiles share the capacity");
    // b leaves and c comes: c's pinned loads evict a's unpinned tiles to fit.
    sim.m.unregister_image(b).unwrap();
    sim.m.register_image(c, &l).unwrap();
    for _ in 0..12 {
        sim.step(&[]);
        assert!(sim.m.committed_tiles() <= u64::from(capacity));
    }
    assert!(sim.m.is_resident(TileKey::tail(c, 0)), "c's pinned tail is resident");
    let pinned = l.tile_index(TileCoord { layer: 0, mip: 3, x: 0, y: 0, z: 0 }).unwrap();
    assert!(sim.m.is_resident(TileKey::tile(c, pinned)), "c's pinned mip is resident");
}
