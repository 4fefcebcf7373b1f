//! The `streaming_manager` target: random frames of feedback requests, load completions and
//! failures, budget cuts, upload budget changes, image registrations and unregistrations, and
//! compaction passes over the pool (after the frames where every load completes: applied, or
//! applied and reverted; residency and the min-LOD maps must not change).
//!
//! The harness plays a renderer that reports every load it was asked to start exactly once,
//! sooner or later, as loaded or failed. Checked after every call: the manager's own contract
//! ([`StreamingManager::check_contract`]: never evicts a tile wanted this frame or in flight,
//! pinned units stay, page tables, pool and LRU agree), that a requested resident tile stays
//! resident, that errors come exactly for bad calls and change nothing, and at the end that once
//! every load was reported nothing is left in flight; the pool's and page tables' own walks
//! (which make it [`StreamingManager::check_invariants`]) after each of the first
//! [`FULL_CHECK_PREFIX`] calls, then every [`FULL_CHECK_INTERVAL`]-th and at the end.

use crate::input::Input;
use residency_core::format::Format;
use residency_core::streaming::{
    FrameInput, RequestKind, StreamingDesc, StreamingError, StreamingManager, TileKey, TileRequest,
};
use residency_core::tiles::{
    ImageId, LayoutLimits, MipTailModel, SparseDimension, SparseFormatInfo, SparseImageDesc,
    SparseImageLayout, TileIndex,
};
use std::collections::{BTreeMap, BTreeSet};

/// Calls per input at most. A call is a manager update or more, which is most of the target's
/// time: with 256 a 4 KiB input took about 12 ms under ASan, with 96 about 5 (`docs/reliability.md`,
/// "harness speed").
const MAX_OPS: usize = 96;
/// The manager's full checker ([`StreamingManager::check_invariants`]: the pool's and every page
/// table's own walks, which recompute every min-LOD region, then its contract) runs at each of
/// the first this many checks of an input…
const FULL_CHECK_PREFIX: usize = 4;
/// …then at every this many, and at the end. The other checks run at every one of them with
/// [`StreamingManager::check_contract`] (every rule of the manager itself); a corruption of a
/// page table or the pool persists until the next full check. Running the walks at every check
/// spent 62 % of the target's time in them, and with 16 and 16 they were still 17 %.
const FULL_CHECK_INTERVAL: usize = 32;
/// Image ids the harness uses (one more than it registers at most, for stale requests).
const IMAGES: u32 = 4;

/// The renderer stand-in around a manager.
pub(crate) struct Harness {
    /// The manager.
    pub(crate) m: StreamingManager,
    /// Layouts of the registered images.
    layouts: BTreeMap<ImageId, SparseImageLayout>,
    /// Loads started and not reported yet (a multiset: a load of an unregistered image and a
    /// new load of the same key after it was registered again can both be outstanding).
    outstanding: Vec<TileKey>,
    last_frame: Option<u64>,
    /// The budget was cut since the last frame: the manager may be over it until that frame
    /// evicts, so the contract is checked again only after it.
    budget_cut: bool,
    /// Checks run so far (see [`FULL_CHECK_INTERVAL`]).
    checks: usize,
}

impl Harness {
    pub(crate) fn new(desc: StreamingDesc) -> Self {
        Self {
            m: StreamingManager::new(desc),
            layouts: BTreeMap::new(),
            outstanding: Vec::new(),
            last_frame: None,
            budget_cut: false,
            checks: 0,
        }
    }

    pub(crate) fn register(&mut self, image: ImageId, layout: SparseImageLayout) {
        match self.m.register_image(image, &layout) {
            Ok(()) => {
                assert!(self.layouts.insert(image, layout).is_none(), "registered {image:?} twice");
            }
            Err(StreamingError::DuplicateImage(i)) => {
                assert!(i == image && self.layouts.contains_key(&image))
            }
            Err(e) => panic!("register_image: {e}"),
        }
        self.check();
    }

    pub(crate) fn unregister(&mut self, image: ImageId) {
        match self.m.unregister_image(image) {
            Ok(changes) => {
                assert!(self.layouts.remove(&image).is_some());
                assert_eq!(changes.image, image);
                assert!(self.m.residency(image).is_none());
            }
            Err(StreamingError::UnknownImage(i)) => assert!(i == image && !self.layouts.contains_key(&image)),
            Err(e) => panic!("unregister_image: {e}"),
        }
        self.check();
    }

    /// Changes the tile budget.
    pub(crate) fn set_budget(&mut self, tiles: u32) {
        self.budget_cut |= tiles < self.m.budget_tiles();
        self.m.set_budget_tiles(tiles);
    }

    pub(crate) fn check(&mut self) {
        self.checks += 1;
        let full = self.checks <= FULL_CHECK_PREFIX || self.checks % FULL_CHECK_INTERVAL == 0;
        self.check_now(full);
    }

    /// The full checks, whatever the count (at the end of an input).
    pub(crate) fn check_full(&mut self) {
        self.check_now(true);
    }

    fn check_now(&self, full: bool) {
        if full {
            // The pool's and page tables' own walks (what `check_invariants` adds to
            // `check_contract`) hold whatever the budget.
            if let Err(e) = self.m.pool().check_invariants() {
                panic!("pool invariant broken: {e}");
            }
            for image in self.m.images() {
                let table = self.m.residency(image).expect("registered").page_table();
                if let Err(e) = table.check_invariants() {
                    panic!("page table of {image:?}: {e}");
                }
            }
        }
        if self.budget_cut {
            return;
        }
        // With the walks above, `check_invariants`; without, its contract part alone.
        if let Err(e) = self.m.check_contract() {
            panic!("streaming invariant broken: {e}");
        }
        for key in self.m.in_flight() {
            assert!(self.outstanding.contains(&key), "{key:?} in flight but never started");
        }
    }

    /// A compaction pass of at most `max_tiles` moves over the manager's pool
    /// (`plan_compaction`, `apply_compaction`), then either reverted (`revert`: every physical
    /// tile back where it was) or its emptied heaps released. Residency and every min-LOD map keep
    /// their meaning, the pool its used tiles, and the contract holds after each step.
    pub(crate) fn compact(&mut self, max_tiles: u32, revert: bool) {
        type Tables = Vec<(ImageId, Vec<(TileIndex, residency_core::tiles::PhysicalTile)>, Vec<Vec<u8>>)>;
        let tables = |m: &StreamingManager| -> Tables {
            m.images()
                .map(|i| {
                    let r = m.residency(i).expect("registered");
                    let t = r.page_table();
                    let maps = (0..r.layout().array_layers()).map(|l| t.min_lod_layer(l).to_vec()).collect();
                    (i, t.mapped().collect(), maps)
                })
                .collect()
        };
        let before = tables(&self.m);
        let used = self.m.pool().used_tiles();
        let (plan, moves) = self.m.plan_compaction(max_tiles);
        assert!(plan.moves.len() <= max_tiles as usize);
        assert_eq!(moves.iter().map(|c| c.moves.len()).sum::<usize>(), plan.moves.len());
        let changes =
            self.m.apply_compaction(&plan, &moves).unwrap_or_else(|e| panic!("apply_compaction: {e}"));
        assert_eq!(changes.len(), moves.len());
        let after = tables(&self.m);
        assert_eq!(self.m.pool().used_tiles(), used);
        for ((i, b, bm), (j, a, am)) in before.iter().zip(&after) {
            assert_eq!((i, bm), (j, am), "the min-LOD maps of {i:?} changed");
            let tiles = |t: &[(TileIndex, _)]| t.iter().map(|x| x.0).collect::<Vec<_>>();
            assert_eq!(tiles(b), tiles(a), "the resident tiles of {i:?} changed");
        }
        self.check_full();
        if revert {
            self.m.revert_compaction(&plan, &moves).unwrap_or_else(|e| panic!("revert_compaction: {e}"));
            assert!(tables(&self.m) == before, "revert_compaction left tiles moved");
        } else {
            let released = self.m.release_empty_heaps(&plan.heaps_emptied);
            assert_eq!(released, plan.heaps_emptied, "a heap the plan emptied was not empty");
        }
        self.check_full();
    }

    /// A request for tile `tile` of `image` (its mip from the layout, 0 when unknown).
    pub(crate) fn request(&self, image: ImageId, tile: u32, kind: RequestKind, pixels: u32) -> TileRequest {
        let mip = self.layouts.get(&image).and_then(|l| l.tile_coord(TileIndex(tile))).map_or(0, |c| c.mip);
        TileRequest { image, tile: TileIndex(tile), mip, kind, pixels }
    }

    /// Tiles of a registered image.
    pub(crate) fn tile_count(&self, image: ImageId) -> Option<u32> {
        self.layouts.get(&image).map(SparseImageLayout::tile_count)
    }

    /// Loads started and not reported yet.
    pub(crate) fn outstanding(&self) -> &[TileKey] {
        &self.outstanding
    }

    /// Runs one frame. `deliver[i]` says what happens to outstanding load `i` (0: still loading,
    /// 1: loaded, 2: failed); `extra` are completions that are not outstanding loads (misuse).
    /// With well-formed input (increasing frame, tiles in range, no extras) the frame must
    /// succeed; with misuse it may be refused, and then nothing changed.
    pub(crate) fn frame(&mut self, frame: u64, requests: &[TileRequest], deliver: &[u8], extra: &[TileKey]) {
        let mut loaded = Vec::new();
        let mut failed = Vec::new();
        let mut reported = Vec::new();
        for (i, &key) in self.outstanding.iter().enumerate() {
            match deliver.get(i).copied().unwrap_or(0) {
                1 => loaded.push(key),
                2 => failed.push(key),
                _ => continue,
            }
            reported.push(i);
        }
        loaded.extend_from_slice(extra);
        let in_range = requests.iter().all(|r| self.tile_count(r.image).is_none_or(|n| r.tile.0 < n));
        let ordered = self.last_frame.is_none_or(|l| frame > l);
        let well_formed = in_range && ordered && extra.is_empty();
        // A request the manager acts on (a miss, or a prefetch or low-water warning with prefetch
        // on) keeps its tile.
        let prefetch = self.m.desc().prefetch;
        let resident_before: Vec<TileKey> = requests
            .iter()
            .filter(|r| r.kind == RequestKind::Miss || prefetch)
            .map(|r| TileKey::tile(r.image, r.tile))
            .filter(|&k| self.m.is_resident(k))
            .collect();
        let in_flight_before: Vec<TileKey> = self.m.in_flight().collect();
        let input = FrameInput { frame, requests, loaded: &loaded, failed: &failed };
        let out = match self.m.update(&input) {
            Ok(out) => out,
            Err(e) => {
                assert!(!well_formed, "frame {frame} refused: {e}");
                match e {
                    StreamingError::FrameOrder { .. } => assert!(!ordered),
                    StreamingError::TileOutOfRange { .. } => assert!(!in_range),
                    StreamingError::UnexpectedCompletion { .. } => assert!(!extra.is_empty()),
                    e => panic!("frame {frame}: {e}"),
                }
                let in_flight_after: Vec<TileKey> = self.m.in_flight().collect();
                assert_eq!(in_flight_before, in_flight_after, "a refused frame changed the loads");
                self.check();
                return;
            }
        };
        assert!(ordered, "frame {frame} after {:?} accepted", self.last_frame);
        self.last_frame = Some(frame);
        self.budget_cut = false;
        // The completions were consumed: forget them (and any extras the manager accepted).
        for i in reported.into_iter().rev() {
            self.outstanding.swap_remove(i);
        }
        for key in extra {
            // Accepted, so it was a load still out that `deliver` left alone.
            let i = self.outstanding.iter().position(|k| k == key);
            let i =
                i.unwrap_or_else(|| panic!("frame {frame}: completion of {key:?}, never started, accepted"));
            self.outstanding.swap_remove(i);
        }
        for load in &out.loads {
            assert!(self.m.is_in_flight(load.key) && !self.m.is_resident(load.key), "{load:?}");
            self.outstanding.push(load.key);
        }
        self.check();
        for k in resident_before {
            assert!(self.m.is_resident(k), "frame {frame}: requested resident tile {k:?} was dropped");
        }
        let wanted: BTreeSet<TileKey> = self.m.wanted_this_frame().collect();
        for k in &out.evicted {
            assert!(!wanted.contains(k), "frame {frame}: evicted {k:?} that was wanted");
            assert!(!self.m.is_in_flight(*k), "frame {frame}: evicted {k:?} that is in flight");
            assert!(!self.m.is_resident(*k), "frame {frame}: evicted {k:?} is still resident");
        }
        for k in &out.resident {
            assert!(self.m.is_resident(*k), "frame {frame}: {k:?} reported resident is not");
        }
    }

    /// Reports every outstanding load as loaded, frame after frame (no requests), until nothing
    /// is in flight; it must come to rest.
    pub(crate) fn drain(&mut self, mut frame: u64) {
        for _ in 0..64 {
            frame += 1;
            let deliver = vec![1; self.outstanding.len()];
            self.frame(frame, &[], &deliver, &[]);
            if self.outstanding.is_empty() && self.m.in_flight().next().is_none() {
                return self.check_full();
            }
        }
        let left: Vec<TileKey> = self.m.in_flight().collect();
        panic!("loads never settle: in flight {left:?}, outstanding {:?}", self.outstanding);
    }
}

/// A small 2D image: a few tiles per mip, with a mip tail or (no-tail devices) a pinned last mip.
pub(crate) fn small_layout(width: u32, height: u32, layers: u32, no_tail: bool) -> SparseImageLayout {
    let info =
        SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).expect("standard shape");
    let info = if no_tail { info.with_mip_tail_model(MipTailModel::NoTail) } else { info };
    let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, width, height).with_array_layers(layers);
    SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).expect("small layout")
}

fn random_layout(input: &mut Input<'_>) -> SparseImageLayout {
    let side = |input: &mut Input<'_>| 1 + input.below(1024) as u32;
    let (w, h) = (side(input), side(input));
    let layers = 1 + input.below(2) as u32;
    small_layout(w, h, layers, input.u8() % 4 == 0)
}

pub(crate) fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let desc = StreamingDesc::default()
        .with_budget_tiles(input.range(0, 96) as u32)
        .with_tiles_per_heap(input.range(1, 64) as u32)
        .with_upload_budget_bytes(input.pick(&[0, 1 << 16, 1 << 18, 1 << 20, u64::MAX]))
        .with_max_in_flight(input.range(1, 16) as u32)
        .with_eviction_delay(input.range(0, 10) as u32)
        .with_thrash_window(input.range(0, 40) as u32)
        .with_evictions_per_frame(input.range(1, 8) as u32)
        .with_prefetch(input.bool());
    let mut h = Harness::new(desc);
    for image in 0..1 + input.below(3) as u32 {
        let layout = random_layout(&mut input);
        h.register(ImageId(image), layout);
    }
    let mut frame = 0u64;
    for _ in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        match input.u8() % 12 {
            0..=5 => {
                let mut requests = Vec::new();
                for _ in 0..input.below(12) {
                    let image = ImageId(input.below(u64::from(IMAGES)) as u32);
                    let tile = match (input.u8() % 32, h.tile_count(image)) {
                        (0, _) | (_, None) => input.u32(),
                        (_, Some(0)) => 0,
                        (_, Some(n)) => input.below(u64::from(n)) as u32,
                    };
                    let kind = match input.u8() {
                        k if k % 4 == 0 => RequestKind::LodWarning,
                        k if k % 8 == 1 => RequestKind::MinLodWarning,
                        _ => RequestKind::Miss,
                    };
                    requests.push(h.request(image, tile, kind, u32::from(input.u16())));
                }
                let deliver: Vec<u8> = (0..h.outstanding().len()).map(|_| input.u8() % 4 % 3).collect();
                let mut extra = Vec::new();
                if input.u8() % 32 == 0 {
                    // Misuse: a completion reported twice, or one for a load never started.
                    let key = match h.outstanding() {
                        [] => TileKey::tile(ImageId(input.below(4) as u32), TileIndex(input.u8().into())),
                        keys => keys[input.below(keys.len() as u64) as usize],
                    };
                    extra.push(key);
                }
                let next = if input.u8() % 32 == 0 { frame } else { frame + 1 + input.below(3) };
                h.frame(next, &requests, &deliver, &extra);
                frame = frame.max(next);
            }
            6 => {
                h.set_budget(input.range(0, 96) as u32);
                h.check();
            }
            7 => {
                h.m.set_upload_budget_bytes(input.pick(&[0, 1 << 16, 1 << 20, u64::MAX]));
                h.check();
            }
            8 => h.unregister(ImageId(input.below(u64::from(IMAGES)) as u32)),
            9 => {
                let layout = random_layout(&mut input);
                h.register(ImageId(input.below(u64::from(IMAGES)) as u32), layout);
            }
            10 => {
                let image = ImageId(input.below(u64::from(IMAGES)) as u32);
                let registered = h.tile_count(image).is_some();
                assert_eq!(h.m.set_lod_warning(image, input.u8(), input.u8()).is_ok(), registered);
                h.check();
            }
            _ => {
                // Every outstanding load completes in one frame without requests.
                frame += 1;
                let deliver = vec![1; h.outstanding().len()];
                h.frame(frame, &[], &deliver, &[]);
                // And a compaction pass (no input read, so earlier inputs decode as they did).
                h.compact((frame % 5) as u32 * 3, frame % 3 == 0);
            }
        }
        // Frames, registrations and unregistrations check themselves (a second check after
        // them was a sixth of the target's time and saw the same state).
    }
    h.drain(frame + 1);
}
