//! The `streamer_frames` target: a CPU model of the streamer's frame protocol
//! (`residency_vulkan::Streamer`, `crates/residency-vulkan/src/streaming/mod.rs`) over the core
//! [`StreamingManager`], with the GPU and the loader threads replaced by choices of the input.
//!
//! What the model does, as the streamer does it: 1–3 frames in flight, completing in order, the
//! CPU waiting for the oldest only when it would run more than that ahead; each frame's feedback
//! read once the GPU has finished it (a frame or more late), its requests passed to the next tick
//! with the tick that wrote them (`update_with_feedback_from`); loads handed to "workers" that
//! finish them in any order, succeed or fail, and a tick taking only some of the finished ones
//! (the staging share); cancelled loads reported as failed on the next tick; textures registered
//! with fresh ids and primed (ticks until their coarse chain is resident, or removed), and
//! removed between frames (their loads cancelled, their tiles unbound after the frames in
//! flight); budget cuts and raises between frames.
//!
//! The GPU side is a binding table built only from the changes each tick hands out, with the
//! streamer's rule for waits: a tick's binds wait for the frames in flight only when the tick
//! evicted something, a removal's unbinds always. Checked:
//! - no physical tile that a frame still in flight samples is bound to another unit unless an
//!   unbind that waited for that frame came first, and no tile is bound to two units at once;
//! - every unbind a tick hands out is of a unit it reports evicted, and every eviction unbinds;
//! - the binding table rebuilt from the changes equals the page tables, unit by unit, at every
//!   frame (so the changes are complete), and a heap given back holds no bound tile;
//! - the manager never starts a load the streamer still has out (its loader would refuse it);
//!   every completion the streamer reports is accepted;
//! - the manager's contract after every tick ([`StreamingManager::check_contract`]: budget,
//!   nothing wanted or in flight evicted, LRU, …), its full checker (with the pool's and page
//!   tables' walks) every [`FULL_CHECK_INTERVAL`] ticks and at the end;
//! - at the end, once the GPU is idle and every load is reported, nothing stays in flight, and
//!   with every texture removed the pool holds nothing and nothing is bound.

use crate::fast_hash::FastMap;
use crate::input::Input;
use crate::streaming_ops::small_layout;
use residency_core::streaming::{
    FrameInput, RequestKind, StreamingDesc, StreamingManager, TileKey, TileRequest,
};
use residency_core::tiles::{ImageId, PhysicalTile, ResidencyChanges, SparseImageLayout, TileIndex};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Steps (frames and events between them) per input at most. Each step is a manager tick or
/// more (an added texture primes with up to [`PRIME_TICKS`]), and the manager's update is most of
/// the target's time: with 256 steps a 4 KiB input took about 19 ms under ASan, with 48 about 5
/// (`docs/reliability.md`, "harness speed"). The state is small (at most 64 tiles of budget, 4
/// textures), and every check below still runs at every tick.
const MAX_STEPS: usize = 48;
/// Textures alive at most.
const MAX_TEXTURES: usize = 4;
/// The streamer's priming ticks at most (`PRIME_TICKS`).
const PRIME_TICKS: usize = 8;
/// The full checker runs at each of the first this many ticks of an input, then every
/// [`FULL_CHECK_INTERVAL`]-th and at the end; the contract at every tick.
const FULL_CHECK_PREFIX: u64 = 4;
/// See [`FULL_CHECK_PREFIX`].
const FULL_CHECK_INTERVAL: u64 = 32;

/// A frame recorded and submitted, not yet finished on the GPU.
struct GpuFrame {
    frame: u64,
    /// The tick whose results it samples (its feedback counts from it).
    tick: u64,
    /// What it may sample: the physical tiles bound when it was recorded, and to which unit.
    sampled: FastMap<PhysicalTile, TileKey>,
    /// The feedback it writes.
    requests: Vec<TileRequest>,
}

/// A load out with the workers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Work {
    Running,
    Loaded,
    Failed,
}

struct Sim {
    m: StreamingManager,
    frames_in_flight: usize,
    textures: BTreeMap<ImageId, SparseImageLayout>,
    next_id: u32,
    /// Loads started and not yet taken back (the streamer's `pending`).
    pending: BTreeMap<TileKey, Work>,
    /// Cancelled loads, reported as failed on the next tick.
    cancelled: Vec<TileKey>,
    tick: u64,
    /// The next frame's number.
    frame: u64,
    running: VecDeque<GpuFrame>,
    /// Feedback read and not yet handed to a tick.
    requests: Vec<TileRequest>,
    /// The tick of the oldest frame read since the last frame's tick.
    oldest_read: Option<u64>,
    /// The tick the requests count from (the streamer's `requested_in`: kept until a frame is
    /// read).
    requested_in: u64,
    /// The GPU's binding table: what each physical tile is bound to, and each unit's tiles.
    bound: FastMap<PhysicalTile, TileKey>,
    units: FastMap<TileKey, Vec<PhysicalTile>>,
    /// For a physical tile unbound after waiting for the frames in flight: the next frame's
    /// number at that moment (every frame before it was waited for or had finished).
    fenced: FastMap<PhysicalTile, u64>,
}

pub(crate) fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let frames_in_flight = input.range(1, 3) as usize;
    // As `Streamer::new` builds it (feedback read every frame: interval 1).
    let cancel_after = (1 + frames_in_flight as u32).max(4);
    let desc = StreamingDesc::default()
        .with_budget_tiles(input.range(1, 64) as u32)
        .with_tiles_per_heap(input.pick(&[4, 16, 64, 2048]))
        .with_upload_budget_bytes(input.pick(&[1 << 16, 1 << 18, 1 << 20, 32 << 20]))
        .with_max_in_flight(input.pick(&[2, 8, 1024]))
        .with_eviction_delay(input.range(0, 8) as u32)
        .with_evictions_per_frame(input.pick(&[1, 4, 256]))
        .with_prefetch(input.bool())
        .with_cancel_after_frames(cancel_after);
    let mut sim = Sim {
        m: StreamingManager::new(desc),
        frames_in_flight,
        textures: BTreeMap::new(),
        next_id: 1,
        pending: BTreeMap::new(),
        cancelled: Vec::new(),
        tick: 0,
        frame: 0,
        running: VecDeque::new(),
        requests: Vec::new(),
        oldest_read: None,
        requested_in: 0,
        bound: FastMap::default(),
        units: FastMap::default(),
        fenced: FastMap::default(),
    };
    for _ in 0..1 + input.below(2) {
        sim.add_texture(&mut input);
    }
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        match input.u8() % 16 {
            0..=10 => sim.frame(&mut input),
            11 => {
                let tiles = input.range(1, 64) as u32;
                sim.m.set_budget_tiles(tiles);
            }
            12 | 13 => {
                if sim.textures.len() < MAX_TEXTURES {
                    sim.add_texture(&mut input);
                }
            }
            _ => {
                if !sim.textures.is_empty() {
                    let i = input.below(sim.textures.len() as u64) as usize;
                    let id = *sim.textures.keys().nth(i).expect("in range");
                    sim.remove_texture(id);
                }
            }
        }
    }
    sim.finish();
}

fn random_layout(input: &mut Input<'_>) -> SparseImageLayout {
    let side = |input: &mut Input<'_>| 1 + input.below(640) as u32;
    let (w, h) = (side(input), side(input));
    let layers = 1 + input.below(2) as u32;
    small_layout(w, h, layers, input.u8() % 3 == 0)
}

impl Sim {
    /// Workers finish some of the loads out, in any order, some of them failing.
    fn work(&mut self, input: &mut Input<'_>) {
        for w in self.pending.values_mut() {
            if *w == Work::Running {
                *w = match input.u8() % 8 {
                    0..=3 => Work::Running,
                    4 => Work::Failed,
                    _ => Work::Loaded,
                };
            }
        }
    }

    /// One manager tick, as `Streamer::tick` runs it: the finished loads in (at most `take` of
    /// them, at least one), the cancelled ones as failures, the update, then the changes applied.
    fn tick(&mut self, requests: &[TileRequest], requested_in: u64, take: usize) {
        let mut failed = std::mem::take(&mut self.cancelled);
        let mut loaded = Vec::new();
        let finished: Vec<TileKey> =
            self.pending.iter().filter(|(_, &w)| w != Work::Running).map(|(&k, _)| k).collect();
        for key in finished.into_iter().take(take.max(1)) {
            match self.pending.remove(&key).expect("listed") {
                Work::Loaded => loaded.push(key),
                _ => failed.push(key),
            }
        }
        loaded.sort_unstable();
        failed.sort_unstable();
        self.tick += 1;
        let mut in_flight_before: Vec<TileKey> = self.m.in_flight().collect();
        in_flight_before.sort_unstable();
        let input = FrameInput { frame: self.tick, requests, loaded: &loaded, failed: &failed };
        let out = self
            .m
            .update_with_feedback_from(&input, requested_in)
            .unwrap_or_else(|e| panic!("tick {}: the streamer's update was refused: {e}", self.tick));
        for &key in &out.cancelled {
            assert!(in_flight_before.binary_search(&key).is_ok() || out.loads.iter().any(|l| l.key == key));
            assert!(self.pending.remove(&key).is_some(), "tick {}: cancelled {key:?}, not out", self.tick);
            self.cancelled.push(key);
        }
        for load in &out.loads {
            assert!(self.textures.contains_key(&load.key.image), "a load of a removed texture");
            let was = self.pending.insert(load.key, Work::Running);
            assert!(
                was.is_none(),
                "tick {}: {:?} started while the streamer still has it out",
                self.tick,
                load.key
            );
        }
        // Every unbind of this tick is an eviction it reports, and every eviction unbinds.
        let evicted: BTreeSet<TileKey> = out.evicted.iter().copied().collect();
        assert_eq!(evicted.len(), out.evicted.len(), "tick {}: a tile evicted twice", self.tick);
        let mut unbound = BTreeSet::new();
        for c in &out.changes {
            for t in c.changes.tiles.iter().filter(|t| t.physical.is_none()) {
                unbound.insert(TileKey::tile(c.image, t.tile));
            }
            for t in c.changes.tails.iter().filter(|t| t.physical.is_none()) {
                unbound.insert(TileKey::tail(c.image, t.tail));
            }
        }
        assert_eq!(unbound, evicted, "tick {}: unbinds and evictions differ", self.tick);
        // The streamer's rule: the binds wait for the frames in flight when the tick evicted.
        let waits = !out.evicted.is_empty();
        for c in &out.changes {
            self.apply(c.image, &c.changes, waits);
        }
        for h in &out.heaps_released {
            assert!(self.bound.keys().all(|p| p.heap != *h), "heap {h:?} given back with tiles bound");
        }
        for key in &out.resident {
            assert!(
                self.m.is_resident(*key) || evicted.contains(key),
                "tick {}: {key:?} reported resident is not",
                self.tick
            );
        }
        self.check();
    }

    /// Applies one image's changes to the GPU's binding table: unbinds first (as one bind call
    /// does), then binds, each checked against the frames in flight.
    fn apply(&mut self, image: ImageId, changes: &ResidencyChanges, waits: bool) {
        let unbinds = changes
            .tiles
            .iter()
            .filter(|t| t.physical.is_none())
            .map(|t| TileKey::tile(image, t.tile))
            .chain(
                changes.tails.iter().filter(|t| t.physical.is_none()).map(|t| TileKey::tail(image, t.tail)),
            );
        for key in unbinds.collect::<Vec<_>>() {
            let tiles = self.units.remove(&key).unwrap_or_else(|| panic!("{key:?} unbound but not bound"));
            for p in tiles {
                assert_eq!(self.bound.remove(&p), Some(key));
                if waits {
                    self.fenced.insert(p, self.frame);
                }
            }
        }
        let binds = changes
            .tiles
            .iter()
            .filter_map(|t| Some((TileKey::tile(image, t.tile), vec![t.physical?])))
            .chain(
                changes
                    .tails
                    .iter()
                    .filter_map(|t| Some((TileKey::tail(image, t.tail), t.physical.clone()?))),
            );
        for (key, tiles) in binds.collect::<Vec<_>>() {
            assert!(!self.units.contains_key(&key), "{key:?} bound twice");
            for &p in &tiles {
                if let Some(other) = self.bound.get(&p) {
                    panic!("{p:?} bound to {key:?} while still bound to {other:?}");
                }
                for f in &self.running {
                    if let Some(&sampled) = f.sampled.get(&p) {
                        let fence = self.fenced.get(&p).copied();
                        assert!(
                            fence.is_some_and(|fence| fence > f.frame),
                            "tick {}: {p:?} bound to {key:?} while frame {} (in flight) samples it as \
                             {sampled:?}, and no unbind waited for that frame (fence {fence:?})",
                            self.tick,
                            f.frame
                        );
                    }
                }
                self.bound.insert(p, key);
            }
            self.units.insert(key, tiles);
        }
    }

    /// The manager's contract after every tick; the full checker now and then.
    fn check(&self) {
        let full = self.tick <= FULL_CHECK_PREFIX || self.tick % FULL_CHECK_INTERVAL == 0;
        let checked = if full { self.m.check_invariants() } else { self.m.check_contract() };
        checked.unwrap_or_else(|e| panic!("tick {}: streaming invariant broken: {e}", self.tick));
        for key in self.m.in_flight() {
            assert!(
                self.pending.contains_key(&key),
                "{key:?} in flight but the streamer has no load of it out"
            );
        }
    }

    /// The binding table equals the page tables, unit by unit.
    fn check_bindings(&self) {
        let mut units = 0;
        for (&image, layout) in &self.textures {
            let table = self.m.residency(image).expect("registered").page_table();
            for (tile, p) in table.mapped() {
                let key = TileKey::tile(image, tile);
                assert_eq!(self.units.get(&key).map(Vec::as_slice), Some(&[p][..]), "{key:?}");
                units += 1;
            }
            for tail in 0..layout.mip_tail_count() {
                let key = TileKey::tail(image, tail);
                assert_eq!(self.units.get(&key).map(Vec::as_slice), table.tail_tiles(tail), "{key:?}");
                units += usize::from(table.tail_tiles(tail).is_some());
            }
        }
        assert_eq!(units, self.units.len(), "units bound that no page table holds");
        assert_eq!(
            self.bound.len() as u64,
            self.m.pool().used_tiles(),
            "tiles bound and tiles in use differ"
        );
    }

    /// The GPU finishes the oldest frame in flight; its feedback is read.
    fn finish_oldest(&mut self) {
        let f = self.running.pop_front().expect("a frame in flight");
        self.oldest_read.get_or_insert(f.tick);
        self.requests.extend(f.requests);
    }

    /// One frame: `begin_frame` (finished frames' feedback, a tick), the recording (what it
    /// samples, the feedback it writes), `end_frame` (in flight).
    fn frame(&mut self, input: &mut Input<'_>) {
        // The GPU finishes some frames; the CPU waits when it would run too far ahead.
        let done = input.below(self.running.len() as u64 + 1) as usize;
        for _ in 0..done {
            self.finish_oldest();
        }
        while self.running.len() >= self.frames_in_flight {
            self.finish_oldest();
        }
        self.work(input);
        if let Some(tick) = self.oldest_read.take() {
            self.requested_in = tick;
        }
        let requests = std::mem::take(&mut self.requests);
        let take = 1 + input.below(8) as usize;
        self.tick(&requests, self.requested_in.max(1), take);
        self.check_bindings();
        // The recording: the frame samples what is bound, and asks for tiles of its textures.
        let sampled = self.bound.clone();
        let mut requests = Vec::new();
        for (&image, layout) in &self.textures {
            let count = layout.tile_count();
            if count == 0 {
                continue;
            }
            for _ in 0..input.below(6) {
                let tile = TileIndex(input.below(u64::from(count)) as u32);
                let mip = layout.tile_coord(tile).map_or(0, |c| c.mip);
                let resident = self.units.contains_key(&TileKey::tile(image, tile));
                let kind = if resident { RequestKind::LodWarning } else { RequestKind::Miss };
                requests.push(TileRequest { image, tile, mip, kind, pixels: u32::from(input.u8()) + 1 });
            }
        }
        self.running.push_back(GpuFrame { frame: self.frame, tick: self.tick, sampled, requests });
        self.frame += 1;
    }

    /// `add_texture`: registered with a fresh id and primed, or removed when priming fails.
    fn add_texture(&mut self, input: &mut Input<'_>) {
        let id = ImageId(self.next_id);
        self.next_id += 1;
        let layout = random_layout(input);
        self.m.register_image(id, &layout).expect("a fresh id registers");
        self.textures.insert(id, layout);
        let pinned = pinned_units(self.textures.get(&id).expect("inserted"), id);
        for _ in 0..PRIME_TICKS {
            if pinned.iter().all(|&k| self.m.is_resident(k)) {
                return;
            }
            // The streamer waits for the workers here: every load out finishes.
            for w in self.pending.values_mut() {
                if *w == Work::Running {
                    *w = if input.u8() % 16 == 0 { Work::Failed } else { Work::Loaded };
                }
            }
            self.tick(&[], self.tick + 1, usize::MAX);
        }
        self.remove_texture(id);
    }

    /// `remove_texture` between frames: unregistered, its tiles unbound after the frames in
    /// flight, its loads cancelled.
    fn remove_texture(&mut self, id: ImageId) {
        let changes = self.m.unregister_image(id).expect("a registered texture unregisters");
        self.textures.remove(&id);
        assert_eq!(changes.image, id);
        assert!(changes.changes.tiles.iter().all(|t| t.physical.is_none()), "a removal binds nothing");
        assert!(changes.changes.tails.iter().all(|t| t.physical.is_none()), "a removal binds nothing");
        self.apply(id, &changes.changes, true);
        assert!(self.units.keys().all(|k| k.image != id), "tiles of a removed texture stay bound");
        let keys: Vec<TileKey> = self.pending.keys().filter(|k| k.image == id).copied().collect();
        for key in keys {
            self.pending.remove(&key);
            self.cancelled.push(key);
        }
        // The contract waits for the next tick (a budget cut may be pending); the loads hold now.
        for key in self.m.in_flight() {
            assert!(self.pending.contains_key(&key), "{key:?} in flight but not out");
        }
    }

    /// The GPU goes idle, every load finishes, ticks run until nothing is in flight; then every
    /// texture is removed and nothing may be left.
    fn finish(mut self) {
        while !self.running.is_empty() {
            self.finish_oldest();
        }
        for _ in 0..64 {
            for w in self.pending.values_mut() {
                *w = Work::Loaded;
            }
            let requests = std::mem::take(&mut self.requests);
            self.tick(&requests, self.requested_in.max(1), usize::MAX);
            if self.pending.is_empty() && self.cancelled.is_empty() && self.m.in_flight().next().is_none() {
                break;
            }
        }
        let left: Vec<TileKey> = self.m.in_flight().collect();
        assert!(left.is_empty() && self.pending.is_empty(), "loads never settle: {left:?}");
        self.check_bindings();
        self.m.check_invariants().unwrap_or_else(|e| panic!("streaming invariant broken: {e}"));
        let ids: Vec<ImageId> = self.textures.keys().copied().collect();
        for id in ids {
            self.remove_texture(id);
        }
        self.tick(&[], self.tick + 1, usize::MAX);
        assert_eq!(self.m.pool().used_tiles(), 0, "tiles left in the pool");
        assert_eq!(self.m.committed_tiles(), 0);
        assert!(self.bound.is_empty() && self.units.is_empty(), "tiles left bound");
        self.m.check_invariants().unwrap_or_else(|e| panic!("streaming invariant broken: {e}"));
    }
}

/// What priming waits for: the mip tails, or (no tail) every tile of the first single-tile mip
/// and coarser (the manager's pinned units).
fn pinned_units(layout: &SparseImageLayout, id: ImageId) -> Vec<TileKey> {
    let mut keys: Vec<TileKey> = (0..layout.mip_tail_count()).map(|t| TileKey::tail(id, t)).collect();
    if layout.mip_tail().is_none() {
        let first =
            layout.mips().iter().find(|m| m.tiles == [1, 1, 1]).map_or(layout.mip_levels() - 1, |m| m.lod);
        for layer in 0..layout.array_layers() {
            for mip in first..layout.mip_levels() {
                if let Some((start, n)) = layout.mip_tile_span(layer, mip) {
                    keys.extend((start.0..start.0 + n).map(|t| TileKey::tile(id, TileIndex(t))));
                }
            }
        }
    }
    keys
}
