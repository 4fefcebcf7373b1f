//! The streaming manager: a pure, deterministic policy that the caller drives once per frame with
//! the decoded feedback and the loads that finished, and that answers with loads to start, tiles
//! evicted, and the bind and min-LOD changes of the frame.
//!
//! It owns the residency: one [`SparseResidency`] per image and the shared [`TilePool`], so the
//! policy and the page tables cannot disagree — a tile is resident exactly when its page table
//! says so. See `docs/streaming.md` for the frame protocol and the decisions.

mod compaction;

use super::feedback::{FeedbackDesc, FeedbackError, FeedbackLayout};
use super::lineage::{child_tiles, parent_tiles};
use super::request::{RequestKind, TileRequest};
use super::stats::{FrameStats, StreamingStats};
use crate::tiles::{
    CommitError, HeapIndex, ImageId, MinLodUpdate, ResidencyChanges, SparseImageLayout, SparseResidency,
    TileCoord, TileIndex, TilePool, TilePoolDesc,
};
pub use compaction::ImageCompaction;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// A unit that streams: one tile, or one mip tail (loaded and bound as a whole, then pinned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StreamUnit {
    /// A tile of a tiled mip.
    Tile(TileIndex),
    /// Mip tail number `n` (one per layer, or one for the image).
    Tail(u32),
}

/// A streaming unit of one image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TileKey {
    /// The image.
    pub image: ImageId,
    /// The tile or tail.
    pub unit: StreamUnit,
}

impl TileKey {
    /// Tile `tile` of `image`.
    pub const fn tile(image: ImageId, tile: TileIndex) -> Self {
        Self { image, unit: StreamUnit::Tile(tile) }
    }

    /// Mip tail `tail` of `image`.
    pub const fn tail(image: ImageId, tail: u32) -> Self {
        Self { image, unit: StreamUnit::Tail(tail) }
    }
}

/// Why a load was started; also its priority class (in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadReason {
    /// A pinned unit: a mip tail (or, without a tail, the last mip), loaded at registration.
    Pinned,
    /// A missed tile, or a parent of one.
    Miss,
    /// A tile an LOD warning asked for, or a parent of one.
    Prefetch,
}

/// A load to start: read the unit's data (from a `.rvt` file, on a worker thread), decompress it,
/// put it in the staging ring, and report the key in [`FrameInput::loaded`] once it is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileLoad {
    /// What to load.
    pub key: TileKey,
    /// Its coordinates (tiles only).
    pub coord: Option<TileCoord>,
    /// Bytes it occupies once resident (whole tiles).
    pub bytes: u64,
    /// Why.
    pub reason: LoadReason,
}

/// One image's residency changes of a frame, in the order the backend applies them: binds of
/// newly resident units (their memory is free since an earlier frame), unbinds of evicted tiles,
/// then the upload of the min-LOD boxes — all before the next frame samples the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageChanges {
    /// The image.
    pub image: ImageId,
    /// Tile and tail binds/unbinds and heaps added; feed to
    /// [`plan_binds`](crate::tiles::plan_binds).
    pub changes: ResidencyChanges,
    /// Min-LOD map boxes to upload.
    pub min_lod: Vec<MinLodUpdate>,
}

/// What the caller hands the manager each frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameInput<'a> {
    /// The frame number; strictly increasing from call to call.
    pub frame: u64,
    /// This frame's decoded feedback (from the ring: some earlier frame's buffer).
    pub requests: &'a [TileRequest],
    /// Loads whose data is now in the staging ring: they become resident this frame.
    pub loaded: &'a [TileKey],
    /// Loads that failed (I/O, corrupt tile): dropped; they are retried when wanted again.
    pub failed: &'a [TileKey],
}

/// What the manager answers for a frame.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrameOutput {
    /// The frame.
    pub frame: u64,
    /// Loads to start, in priority order.
    pub loads: Vec<TileLoad>,
    /// Units that became resident this frame (committed; bind, copy from staging, update min-LOD).
    pub resident: Vec<TileKey>,
    /// For each unit of `resident`, the frame it was first wanted (requested, or pulled in as a
    /// parent): its request-to-resident latency is `frame - wanted_since`.
    pub resident_wanted_since: Vec<u64>,
    /// Tiles evicted this frame (released; unbind).
    pub evicted: Vec<TileKey>,
    /// Loads in flight that nobody wanted for [`StreamingDesc::cancel_after_frames`] frames,
    /// cancelled this frame: their budget went back to the pool, they are not counted as failed,
    /// and the manager forgot them (never pinned units). Stop them; report each once later in
    /// [`FrameInput::loaded`] or [`FrameInput::failed`] — its completion if the loader still
    /// delivers it, or at once as failed if the loader drops it (as [`TileLoader::cancel`]
    /// does) — before any later load of the same key: that report is accepted and ignored.
    ///
    /// [`TileLoader::cancel`]: crate::streaming::TileLoader::cancel
    pub cancelled: Vec<TileKey>,
    /// Per image changes, by image id.
    pub changes: Vec<ImageChanges>,
    /// Heaps the pool released (their memory can be freed once the unbinds executed).
    pub heaps_released: Vec<HeapIndex>,
    /// Counters of this frame.
    pub stats: FrameStats,
}

/// How the manager streams. Defaults: pool budget 16384 tiles (1 GiB), 2048 tiles per heap,
/// 32 MiB of uploads per frame, at most 1024 loads in flight, eviction delay 8 frames, thrash
/// window 32 frames, at most 256 evictions per frame for a budget cut, prefetch on, loads no
/// longer wanted cancelled after 4 frames.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamingDesc {
    /// Name for logs.
    pub name: String,
    /// Tiles resident plus in flight (tails included) the manager keeps within.
    pub budget_tiles: u32,
    /// Tiles per pool heap.
    pub tiles_per_heap: u32,
    /// Bytes of loads started per frame (at least one load always starts when one is wanted).
    pub upload_budget_bytes: u64,
    /// Loads in flight at most.
    pub max_in_flight: u32,
    /// A tile not wanted for this many frames becomes evictable (`K`).
    pub eviction_delay_frames: u32,
    /// An eviction followed by a request within this many frames counts as thrash (`M`).
    pub thrash_window_frames: u32,
    /// Evictions per frame at most when over budget after a budget cut.
    pub evictions_per_frame: u32,
    /// Whether LOD warnings start loads.
    pub prefetch: bool,
    /// A load in flight that no frame wanted (requested, or as a parent of a request) for this
    /// many frames is cancelled ([`FrameOutput::cancelled`]); 0 never cancels. Frames without
    /// feedback count too, as for the eviction delay: keep it above the frames between two
    /// feedback reads. Pinned loads are never cancelled.
    #[serde(default = "default_cancel_after_frames")]
    pub cancel_after_frames: u32,
    /// Bytes one tile of the pool counts as (`resident_bytes`, the upload budget): a standard
    /// 64 KiB sparse tile by default; a software atlas slot of a block-compressed format counts
    /// its own bytes ([`software_slot_bytes`](crate::tiles::software_slot_bytes)).
    #[serde(default = "default_tile_bytes")]
    pub tile_bytes: u64,
    /// Besides the mip tails, every mip of at most this many tiles per layer is pinned (loaded at
    /// registration, never evicted): 0 (the default) pins the tails only, or, for an image
    /// without a tail, every mip from the first single-tile one on — what a standard tail would
    /// hold. A renderer that wants a sharper first frame of large textures (an 8192² RGBA8
    /// texture's tail starts at 64 × 64 texels on NVIDIA) pins 1 or 4 (the 128² and 256² mips)
    /// at 64 KiB each per texture. [`first_pinned_mip`] is the rule.
    #[serde(default)]
    pub pinned_mip_tiles: u32,
    /// A hard limit on the tiles resident plus in flight, pinned ones included (a software
    /// atlas's slots, which cannot grow): pinned loads, which start whatever the budget, evict
    /// to stay within it or wait, and [`StreamingManager::register_image`] refuses an image whose
    /// pinned tiles would take the registered images' pinned tiles past it
    /// ([`StreamingError::PinnedOverCapacity`]). `None` (the default): no limit beyond the
    /// budget's (a pool of sparse heaps grows).
    #[serde(default)]
    pub capacity_tiles: Option<u32>,
}

/// The first mip (of every layer) whose tiles `layout`'s image pins besides its mip tails, with
/// [`StreamingDesc::pinned_mip_tiles`] `= pinned_mip_tiles`: the first mip outside the tail of at
/// most `pinned_mip_tiles` tiles per layer (at most one without a tail, whatever is asked), or
/// `None` when no such mip is pinned. Without a tail and no single-tile mip, the last mip.
pub fn first_pinned_mip(layout: &SparseImageLayout, pinned_mip_tiles: u32) -> Option<u32> {
    let no_tail = layout.mip_tail().is_none();
    let limit = if no_tail { pinned_mip_tiles.max(1) } else { pinned_mip_tiles };
    if limit == 0 {
        return None;
    }
    let first = layout.mips().iter().find(|m| !m.in_tail && m.tile_count() <= limit).map(|m| m.lod);
    if no_tail {
        Some(first.unwrap_or(layout.mip_levels() - 1))
    } else {
        first
    }
}

fn default_tile_bytes() -> u64 {
    crate::tiles::STANDARD_TILE_BYTES
}

fn default_cancel_after_frames() -> u32 {
    4
}

impl Default for StreamingDesc {
    fn default() -> Self {
        Self {
            name: "streaming".to_owned(),
            budget_tiles: 16384,
            tiles_per_heap: 2048,
            upload_budget_bytes: 32 << 20,
            max_in_flight: 1024,
            eviction_delay_frames: 8,
            thrash_window_frames: 32,
            evictions_per_frame: 256,
            prefetch: true,
            cancel_after_frames: default_cancel_after_frames(),
            tile_bytes: default_tile_bytes(),
            pinned_mip_tiles: 0,
            capacity_tiles: None,
        }
    }
}

impl StreamingDesc {
    /// Sets [`capacity_tiles`](Self::capacity_tiles), the hard limit on tiles resident plus in flight.
    pub fn with_capacity_tiles(mut self, tiles: Option<u32>) -> Self {
        self.capacity_tiles = tiles;
        self
    }

    /// Sets the name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the tile budget.
    pub fn with_budget_tiles(mut self, tiles: u32) -> Self {
        self.budget_tiles = tiles;
        self
    }

    /// Sets the tiles per heap (at least 1; clamped and logged).
    pub fn with_tiles_per_heap(mut self, tiles: u32) -> Self {
        if tiles == 0 {
            tracing::debug!(name = %self.name, "StreamingDesc: tiles per heap 0 raised to 1");
        }
        self.tiles_per_heap = tiles.max(1);
        self
    }

    /// Sets the per-frame upload budget in bytes.
    pub fn with_upload_budget_bytes(mut self, bytes: u64) -> Self {
        self.upload_budget_bytes = bytes;
        self
    }

    /// Sets the in-flight cap (at least 1; clamped and logged).
    pub fn with_max_in_flight(mut self, loads: u32) -> Self {
        if loads == 0 {
            tracing::debug!(name = %self.name, "StreamingDesc: max in flight 0 raised to 1");
        }
        self.max_in_flight = loads.max(1);
        self
    }

    /// Sets the eviction delay `K` in frames.
    pub fn with_eviction_delay(mut self, frames: u32) -> Self {
        self.eviction_delay_frames = frames;
        self
    }

    /// Sets the thrash window `M` in frames.
    pub fn with_thrash_window(mut self, frames: u32) -> Self {
        self.thrash_window_frames = frames;
        self
    }

    /// Sets the evictions per frame for budget cuts (at least 1; clamped and logged).
    pub fn with_evictions_per_frame(mut self, tiles: u32) -> Self {
        if tiles == 0 {
            tracing::debug!(name = %self.name, "StreamingDesc: evictions per frame 0 raised to 1");
        }
        self.evictions_per_frame = tiles.max(1);
        self
    }

    /// Turns prefetching on LOD warnings on or off.
    pub fn with_prefetch(mut self, prefetch: bool) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Sets the bytes one tile counts as (at least 1; raised and logged).
    pub fn with_tile_bytes(mut self, bytes: u64) -> Self {
        if bytes == 0 {
            tracing::debug!(name = %self.name, "StreamingDesc: tile bytes 0 raised to 1");
        }
        self.tile_bytes = bytes.max(1);
        self
    }

    /// Sets the frames a load in flight may go unwanted before it is cancelled (0: never).
    pub fn with_cancel_after_frames(mut self, frames: u32) -> Self {
        self.cancel_after_frames = frames;
        self
    }
}

/// A frame or a registration was refused; nothing changed (except for `Commit`, a bug).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamingError {
    /// The image is already registered.
    #[error("image {} is already registered", .0 .0)]
    DuplicateImage(ImageId),
    /// The image is not registered.
    #[error("image {} is not registered", .0 .0)]
    UnknownImage(ImageId),
    /// Frames must increase.
    #[error("frame {got} after frame {last}: frames must increase")]
    FrameOrder {
        /// The last frame updated.
        last: u64,
        /// The frame given.
        got: u64,
    },
    /// A completion or failure for a load that is not in flight (or reported twice).
    #[error("load of {key:?} reported finished but it is not in flight")]
    UnexpectedCompletion {
        /// The key reported.
        key: TileKey,
    },
    /// A request names a tile the image does not have.
    #[error("request for tile {} of image {}, which has {count} tiles", tile.0, image.0)]
    TileOutOfRange {
        /// The image.
        image: ImageId,
        /// The tile.
        tile: TileIndex,
        /// Its tile count.
        count: u32,
    },
    /// A layer the image does not have.
    #[error("layer {layer} of image {}, which has {layers} layers", image.0)]
    LayerOutOfRange {
        /// The image.
        image: ImageId,
        /// The layer.
        layer: u32,
        /// Its layers.
        layers: u32,
    },
    /// The image's pinned tiles (its mip tails and [`StreamingDesc::pinned_mip_tiles`] mips) with
    /// those of the images registered would exceed [`StreamingDesc::capacity_tiles`]: they could
    /// never all be resident. Nothing was registered.
    #[error(
        "image {}: {pinned} pinned tiles with those of the registered images, beyond the capacity of {capacity} tiles",
        image.0
    )]
    PinnedOverCapacity {
        /// The image refused.
        image: ImageId,
        /// The pinned tiles of the registered images and this one.
        pinned: u64,
        /// The capacity.
        capacity: u32,
    },
    /// Committing loaded tiles failed: the manager's accounting and the pool disagree (a bug).
    #[error("committing loaded tiles of image {}: {source}", image.0)]
    Commit {
        /// The image.
        image: ImageId,
        /// The pool or page-table error.
        source: CommitError,
    },
}

#[derive(Clone, Debug)]
struct ImageState {
    residency: SparseResidency,
    /// Without a mip tail, the tiles of this mip and every coarser one are pinned instead.
    pinned_mip: Option<u32>,
    /// Its pinned units' tiles (every layer's), counted against [`StreamingDesc::capacity_tiles`].
    pinned_tiles: u64,
    min_warning_lod: u8,
    warning_lead: u8,
    low_water: Option<u8>,
}

#[derive(Clone, Copy, Debug)]
struct Flight {
    wanted_since: u64,
    tiles: u32,
    /// The last frame that wanted it (requested, or a parent of a request; pinned loads are never
    /// cancelled).
    last_wanted: u64,
}

#[derive(Clone, Copy, Debug)]
struct Wanted {
    first: u64,
    last: u64,
}

#[derive(Clone, Copy, Debug)]
struct Want {
    class: LoadReason,
    pixels: u64,
    mip: u32,
}

/// A load to consider, in priority order: class, then coarser mip first, then more pixels.
type Candidate = (LoadReason, Reverse<u32>, Reverse<u64>, TileKey);

/// The streaming policy. Driven by [`update`](Self::update) once per frame; deterministic (same
/// inputs, same outputs).
///
/// Guarantees, checked by [`check_invariants`](Self::check_invariants) after every frame in the
/// tests: a tile wanted this frame (requested, or a parent of a requested tile) is never evicted
/// in that frame; a unit in flight is never resident and never evicted; pinned units (mip tails)
/// are never evicted; a load no frame wanted for `cancel_after_frames` frames is not in flight any
/// more (cancelled; pinned loads never are); over budget only while nothing more may be evicted
/// this frame; page tables, pool and LRU agree.
#[derive(Debug)]
pub struct StreamingManager {
    desc: StreamingDesc,
    pool: TilePool,
    images: BTreeMap<ImageId, ImageState>,
    last_used: HashMap<TileKey, u64>,
    lru: BTreeSet<(u64, u32, TileKey)>,
    in_flight: BTreeMap<TileKey, Flight>,
    in_flight_tiles: u64,
    wanted: HashMap<TileKey, Wanted>,
    pinned_pending: BTreeSet<TileKey>,
    /// The registered images' pinned tiles (their [`ImageState::pinned_tiles`]).
    pinned_tiles: u64,
    evicted_at: HashMap<TileKey, u64>,
    /// Loads of unregistered images, and loads cancelled as no longer wanted, still out, by key:
    /// their completions are ignored. A count, because an image unregistered, registered again and
    /// unregistered again (or a key cancelled, started again and cancelled again) can have two
    /// loads of one key out.
    cancelled: HashMap<TileKey, u32>,
    wanted_now: HashSet<TileKey>,
    evicted_now: Vec<TileKey>,
    /// Tiles evicted this frame, against `evictions_per_frame`: `evicted_now` forgets those of an
    /// image unregistered since, but the frame's quota was spent on them.
    evictions_now: usize,
    last_frame: Option<u64>,
    stats: StreamingStats,
}

impl StreamingManager {
    /// A manager with no images.
    pub fn new(desc: StreamingDesc) -> Self {
        let pool = TilePool::new(
            TilePoolDesc { tile_bytes: desc.tile_bytes, ..TilePoolDesc::default() }
                .with_name(format!("{} tile pool", desc.name))
                .with_tiles_per_heap(desc.tiles_per_heap)
                .with_budget_tiles(desc.budget_tiles),
        );
        Self {
            desc,
            pool,
            images: BTreeMap::new(),
            last_used: HashMap::new(),
            lru: BTreeSet::new(),
            in_flight: BTreeMap::new(),
            in_flight_tiles: 0,
            wanted: HashMap::new(),
            pinned_pending: BTreeSet::new(),
            pinned_tiles: 0,
            evicted_at: HashMap::new(),
            cancelled: HashMap::new(),
            wanted_now: HashSet::new(),
            evicted_now: Vec::new(),
            evictions_now: 0,
            last_frame: None,
            stats: StreamingStats::default(),
        }
    }

    /// The settings.
    pub fn desc(&self) -> &StreamingDesc {
        &self.desc
    }

    /// The tile pool (statistics, heaps).
    pub fn pool(&self) -> &TilePool {
        &self.pool
    }

    /// The residency of `image`.
    pub fn residency(&self, image: ImageId) -> Option<&SparseResidency> {
        self.images.get(&image).map(|s| &s.residency)
    }

    /// Registered images, by id.
    pub fn images(&self) -> impl Iterator<Item = ImageId> + '_ {
        self.images.keys().copied()
    }

    /// Totals and the last frame's counters.
    pub fn stats(&self) -> &StreamingStats {
        &self.stats
    }

    /// The tile budget.
    pub fn budget_tiles(&self) -> u32 {
        self.desc.budget_tiles
    }

    /// Changes the tile budget. When lowered below what is resident, the manager evicts down to
    /// it over the next frames (at most `evictions_per_frame` a frame, least recently used first,
    /// never a tile wanted in that frame, in flight or pinned).
    pub fn set_budget_tiles(&mut self, tiles: u32) {
        tracing::debug!(name = %self.desc.name, from = self.desc.budget_tiles, to = tiles, "streaming: budget changed");
        self.desc.budget_tiles = tiles;
    }

    /// Changes the per-frame upload budget.
    pub fn set_upload_budget_bytes(&mut self, bytes: u64) {
        self.desc.upload_budget_bytes = bytes;
    }

    /// Registers `image`; its pinned units (mip tails; without a tail, every mip from the first
    /// one that is a single tile — what a standard mip tail would hold; and the mips of at most
    /// [`StreamingDesc::pinned_mip_tiles`] tiles, [`first_pinned_mip`]) are loaded first, from the
    /// next frame on. The default LOD warning is every mip with a lead of a
    /// quarter level.
    pub fn register_image(
        &mut self,
        image: ImageId,
        layout: &SparseImageLayout,
    ) -> Result<(), StreamingError> {
        if self.images.contains_key(&image) {
            return Err(StreamingError::DuplicateImage(image));
        }
        // Without a tail (lavapipe, the software path) the coarse single-tile mips stand in for it,
        // so both kinds of device start from the same coarse chain; `pinned_mip_tiles` adds mips.
        let pinned_mip = first_pinned_mip(layout, self.desc.pinned_mip_tiles);
        let mut units: Vec<TileKey> = (0..layout.mip_tail_count()).map(|t| TileKey::tail(image, t)).collect();
        if let Some(first_pinned) = pinned_mip {
            for layer in 0..layout.array_layers() {
                for mip in first_pinned..layout.mip_levels() {
                    if let Some((first, n)) = layout.mip_tile_span(layer, mip) {
                        units.extend((first.0..first.0 + n).map(|t| TileKey::tile(image, TileIndex(t))));
                    }
                }
            }
        }
        let tail_tiles = layout.mip_tail().map_or(0, |t| u64::from(t.tiles));
        let tails = u64::from(layout.mip_tail_count());
        let pinned_tiles = tails * tail_tiles + (units.len() as u64 - tails);
        if let Some(capacity) = self.desc.capacity_tiles {
            let pinned = self.pinned_tiles + pinned_tiles;
            if pinned > u64::from(capacity) {
                return Err(StreamingError::PinnedOverCapacity { image, pinned, capacity });
            }
        }
        self.pinned_pending.extend(units);
        self.pinned_tiles += pinned_tiles;
        self.images.insert(
            image,
            ImageState {
                residency: SparseResidency::new(self.pool.id(), image, layout),
                pinned_mip,
                pinned_tiles,
                min_warning_lod: u8::MAX,
                low_water: None,
                warning_lead: 64,
            },
        );
        Ok(())
    }

    /// Unregisters `image`: releases all its tiles and tails (the returned changes unbind them);
    /// loads of it still in flight are forgotten, and their completions ignored.
    pub fn unregister_image(&mut self, image: ImageId) -> Result<ImageChanges, StreamingError> {
        let mut state = self.images.remove(&image).ok_or(StreamingError::UnknownImage(image))?;
        self.pinned_tiles -= state.pinned_tiles;
        // The image's own entries only (its resident tiles, its keys' ranges): the cost follows
        // the image, not how many images are registered.
        let resident: Vec<TileIndex> = state.residency.page_table().mapped().map(|(t, _)| t).collect();
        let changes = state
            .residency
            .release_all(&mut self.pool)
            .map_err(|source| StreamingError::Commit { image, source })?;
        let min_lod = state.residency.refresh_min_lod();
        for tile in resident {
            let key = TileKey::tile(image, tile);
            if let Some(last) = self.last_used.remove(&key) {
                let mip = state.residency.layout().tile_coord(tile).map_or(0, |c| c.mip);
                self.lru.remove(&(last, mip, key));
            }
        }
        self.wanted.retain(|k, _| k.image != image);
        self.evicted_at.retain(|k, _| k.image != image);
        let keys = TileKey::tile(image, TileIndex(0))..=TileKey::tail(image, u32::MAX);
        let pinned: Vec<TileKey> = self.pinned_pending.range(keys.clone()).copied().collect();
        for k in pinned {
            self.pinned_pending.remove(&k);
        }
        // This frame's wants and evictions of the image are gone with it: the id may be
        // registered again, with another layout, before the next frame.
        self.wanted_now.retain(|k| k.image != image);
        self.evicted_now.retain(|k| k.image != image);
        let gone: Vec<TileKey> = self.in_flight.range(keys).map(|(&k, _)| k).collect();
        for k in gone {
            let f = self.in_flight.remove(&k).expect("listed");
            self.in_flight_tiles -= u64::from(f.tiles);
            *self.cancelled.entry(k).or_insert(0) += 1;
        }
        Ok(ImageChanges { image, changes, min_lod })
    }

    /// Forgets what `layer` of `image` holds, as if it had never been loaded (its source changed:
    /// a slice of a texture array given another texture): its resident tiles and its mip tail (the
    /// image's one tail when all layers share it) go back to the pool (the returned changes unbind
    /// them; the min-LOD updates cover the layer), loads of the layer in flight are forgotten
    /// (their completions ignored, as for [`unregister_image`](Self::unregister_image)), its wants
    /// and evictions are dropped, and its pinned units are pending again (loaded first from the
    /// next frame on). The work follows the layer's tiles, not the images registered. Refused
    /// with nothing changed for an image not registered or a layer it does not have.
    pub fn reset_layer(&mut self, image: ImageId, layer: u32) -> Result<ImageChanges, StreamingError> {
        let state = self.images.get(&image).ok_or(StreamingError::UnknownImage(image))?;
        let layout = state.residency.layout().clone();
        let layers = layout.array_layers();
        if layer >= layers {
            return Err(StreamingError::LayerOutOfRange { image, layer, layers });
        }
        let tail = layout.tail_of_layer(layer);
        let in_layer = |key: &TileKey| {
            key.image == image
                && match key.unit {
                    StreamUnit::Tile(t) => layout.tile_coord(t).is_some_and(|c| c.layer == layer),
                    StreamUnit::Tail(t) => tail == Some(t),
                }
        };
        // The layer's tiles, mip by mip (the tail's mips have no tiles of their own).
        let mut tiles = Vec::new();
        for mip in 0..layout.first_tail_lod().min(layout.mip_levels()) {
            if let Some((first, n)) = layout.mip_tile_span(layer, mip) {
                tiles.extend((first.0..first.0 + n).map(TileIndex));
            }
        }
        let state = self.images.get_mut(&image).expect("looked up above");
        let resident: Vec<TileIndex> =
            tiles.iter().copied().filter(|&t| state.residency.page_table().is_resident(t)).collect();
        let mut changes = state
            .residency
            .release(&mut self.pool, &resident)
            .map_err(|source| StreamingError::Commit { image, source })?;
        if let Some(t) = tail.filter(|&t| state.residency.page_table().is_tail_resident(t)) {
            changes.extend(
                state
                    .residency
                    .release_tail(&mut self.pool, t)
                    .map_err(|source| StreamingError::Commit { image, source })?,
            );
        }
        let min_lod = state.residency.refresh_min_lod();
        let pinned_mip = state.pinned_mip;
        for &tile in &resident {
            let key = TileKey::tile(image, tile);
            if let Some(last) = self.last_used.remove(&key) {
                let mip = layout.tile_coord(tile).map_or(0, |c| c.mip);
                self.lru.remove(&(last, mip, key));
            }
        }
        self.wanted.retain(|k, _| !in_layer(k));
        self.evicted_at.retain(|k, _| !in_layer(k));
        self.wanted_now.retain(|k| !in_layer(k));
        self.evicted_now.retain(|k| !in_layer(k));
        let keys = TileKey::tile(image, TileIndex(0))..=TileKey::tail(image, u32::MAX);
        let gone: Vec<TileKey> =
            self.in_flight.range(keys).map(|(&k, _)| k).filter(|k| in_layer(k)).collect();
        for k in gone {
            let f = self.in_flight.remove(&k).expect("listed");
            self.in_flight_tiles -= u64::from(f.tiles);
            *self.cancelled.entry(k).or_insert(0) += 1;
        }
        // Its coarse chain loads again first.
        if let Some(t) = tail {
            self.pinned_pending.insert(TileKey::tail(image, t));
        }
        if let Some(first_pinned) = pinned_mip {
            for mip in first_pinned..layout.mip_levels() {
                if let Some((first, n)) = layout.mip_tile_span(layer, mip) {
                    for t in first.0..first.0 + n {
                        self.pinned_pending.insert(TileKey::tile(image, TileIndex(t)));
                    }
                }
            }
        }
        Ok(ImageChanges { image, changes, min_lod })
    }

    /// Sets the seed's per-texture minimum warning LOD of `image` and the lead (1/256 LOD) of
    /// the warning; put them in the feedback image table ([`feedback_layout`](Self::feedback_layout)).
    pub fn set_lod_warning(
        &mut self,
        image: ImageId,
        min_warning_lod: u8,
        lead: u8,
    ) -> Result<(), StreamingError> {
        let s = self.images.get_mut(&image).ok_or(StreamingError::UnknownImage(image))?;
        s.min_warning_lod = min_warning_lod;
        s.warning_lead = lead;
        Ok(())
    }

    /// Sets the seed's per-texture low-water mark of `image` (`GL_MIN_WARNING_LOD_AMD`; `None`:
    /// none): resident samples that fetch a level at or below it raise low-water warnings
    /// ([`RequestKind::MinLodWarning`]), which prefetch the warned tile's children. Put it in the
    /// feedback image table ([`feedback_layout`](Self::feedback_layout)).
    pub fn set_low_water(&mut self, image: ImageId, low_water: Option<u8>) -> Result<(), StreamingError> {
        let s = self.images.get_mut(&image).ok_or(StreamingError::UnknownImage(image))?;
        s.low_water = low_water;
        Ok(())
    }

    /// A feedback layout for the registered images, slots in image-id order, with their LOD
    /// warning settings and low-water marks.
    pub fn feedback_layout(&self, desc: FeedbackDesc) -> Result<FeedbackLayout, FeedbackError> {
        let images: Vec<(ImageId, &SparseImageLayout)> =
            self.images.iter().map(|(&id, s)| (id, s.residency.layout())).collect();
        let mut layout = FeedbackLayout::new(desc, &images)?;
        for (&id, s) in &self.images {
            layout.set_lod_warning(id, s.min_warning_lod, s.warning_lead);
            layout.set_low_water(id, s.low_water);
        }
        Ok(layout)
    }

    /// The finest level of `image` that is fully resident, with every coarser one, in every layer:
    /// the value the seed suggests for the low-water mark ("the highest resolution LOD that's
    /// fully resident": `set_low_water(image, fully_resident_lod(image))`). `None` when even the
    /// coarsest level is missing somewhere, or for an unknown image.
    pub fn fully_resident_lod(&self, image: ImageId) -> Option<u32> {
        let table = self.images.get(&image)?.residency.page_table();
        let whole = crate::tiles::TileRange { start: [0; 3], end: table.min_lod_extent() };
        (0..table.layout().array_layers())
            .map(|layer| table.finest_resident_lod(layer, whole))
            .try_fold(0, |worst, l| l.map(|l| worst.max(l)))
    }

    /// Whether `key` is resident.
    pub fn is_resident(&self, key: TileKey) -> bool {
        let Some(s) = self.images.get(&key.image) else { return false };
        match key.unit {
            StreamUnit::Tile(t) => s.residency.page_table().is_resident(t),
            StreamUnit::Tail(t) => s.residency.page_table().is_tail_resident(t),
        }
    }

    /// Whether `key` is being loaded.
    pub fn is_in_flight(&self, key: TileKey) -> bool {
        self.in_flight.contains_key(&key)
    }

    /// Units being loaded, in key order.
    pub fn in_flight(&self) -> impl Iterator<Item = TileKey> + '_ {
        self.in_flight.keys().copied()
    }

    /// Tiles resident in the pool plus tiles in flight.
    pub fn committed_tiles(&self) -> u64 {
        self.pool.used_tiles() + self.in_flight_tiles
    }

    /// Units wanted in the last frame (requested tiles, their parents and prefetches).
    pub fn wanted_this_frame(&self) -> impl Iterator<Item = TileKey> + '_ {
        self.wanted_now.iter().copied()
    }

    fn is_pinned(&self, key: TileKey) -> bool {
        match key.unit {
            StreamUnit::Tail(_) => true,
            StreamUnit::Tile(t) => self.images.get(&key.image).is_some_and(|s| {
                s.pinned_mip.is_some_and(|m| s.residency.layout().tile_coord(t).is_some_and(|c| c.mip >= m))
            }),
        }
    }

    fn mip_of(&self, key: TileKey) -> u32 {
        let layout = self.images[&key.image].residency.layout();
        match key.unit {
            StreamUnit::Tile(t) => layout.tile_coord(t).map_or(0, |c| c.mip),
            StreamUnit::Tail(_) => layout.first_tail_lod(),
        }
    }

    fn unit_tiles(&self, key: TileKey) -> u32 {
        match key.unit {
            StreamUnit::Tile(_) => 1,
            StreamUnit::Tail(_) => {
                self.images[&key.image].residency.layout().mip_tail().map_or(0, |t| t.tiles)
            }
        }
    }

    /// The parents of a unit: the covering tiles of the next coarser mip, or the layer's tail.
    fn parents(&self, key: TileKey) -> Vec<TileKey> {
        let StreamUnit::Tile(t) = key.unit else { return Vec::new() };
        let layout = self.images[&key.image].residency.layout();
        let Some(c) = layout.tile_coord(t) else { return Vec::new() };
        if c.mip + 1 == layout.first_tail_lod() {
            return layout
                .tail_of_layer(c.layer)
                .map(|tail| vec![TileKey::tail(key.image, tail)])
                .unwrap_or_default();
        }
        parent_tiles(layout, t).into_iter().map(|p| TileKey::tile(key.image, p)).collect()
    }

    fn touch(&mut self, key: TileKey, frame: u64) {
        if let Some(old) = self.last_used.get(&key).copied() {
            if old != frame {
                let mip = self.mip_of(key);
                self.lru.remove(&(old, mip, key));
                self.lru.insert((frame, mip, key));
                self.last_used.insert(key, frame);
            }
        }
    }

    fn evict(&mut self, key: TileKey, frame: u64, changes: &mut BTreeMap<ImageId, ResidencyChanges>) {
        let StreamUnit::Tile(t) = key.unit else { unreachable!("tails are pinned, never in the LRU") };
        let old = self.last_used.remove(&key).expect("LRU tiles have a last use");
        let mip = self.mip_of(key);
        self.lru.remove(&(old, mip, key));
        let state = self.images.get_mut(&key.image).expect("LRU tiles belong to registered images");
        let c = state.residency.release(&mut self.pool, &[t]).expect("an LRU tile is resident and in range");
        changes.entry(key.image).or_default().extend(c);
        self.evicted_at.insert(key, frame);
        self.evicted_now.push(key);
        self.evictions_now += 1;
        self.stats.tiles_evicted += 1;
    }

    /// The least recently used tile that may be evicted in `frame`: not wanted this frame, and,
    /// when `delay`, unused for at least the eviction delay.
    fn eviction_candidate(&self, frame: u64, delay: bool) -> Option<TileKey> {
        let &(last, _, key) = self.lru.first()?;
        let min_age = if delay { u64::from(self.desc.eviction_delay_frames).max(1) } else { 1 };
        (frame.saturating_sub(last) >= min_age && !self.wanted_now.contains(&key)).then_some(key)
    }

    /// Counts one completion of a cancelled load of `key`; `false` when none is out (the
    /// completion is then the load in flight).
    fn take_cancelled(&mut self, key: TileKey) -> bool {
        let Some(n) = self.cancelled.get_mut(&key) else { return false };
        *n -= 1;
        if *n == 0 {
            self.cancelled.remove(&key);
        }
        true
    }

    /// Runs one frame of the policy; see the module docs and `docs/streaming.md`. The requests
    /// are taken as written by this frame; with a ring of frames in flight use
    /// [`update_with_feedback_from`](Self::update_with_feedback_from).
    pub fn update(&mut self, input: &FrameInput<'_>) -> Result<FrameOutput, StreamingError> {
        self.update_with_feedback_from(input, input.frame)
    }

    /// Runs one frame of the policy on feedback that frame `written_in` wrote (a ring of frames
    /// in flight reads each frame's feedback a few frames later). Request-to-resident latency then
    /// counts from `written_in`, the frame that asked, not from the frame that read the request.
    /// `written_in` later than `input.frame` is taken as `input.frame`.
    ///
    /// The frame runs in these steps, in this order (each a private method below): refuse the
    /// input (`check_frame`), start the frame, forget failed loads, commit
    /// loaded units, refresh their parents in the LRU, gather this frame's wants and the load
    /// candidates, cancel loads no longer wanted, evict down to a cut budget, start loads, evict
    /// back down after pinned loads, forget old wants and evictions, and finish (heaps released,
    /// min-LOD boxes, statistics).
    pub fn update_with_feedback_from(
        &mut self,
        input: &FrameInput<'_>,
        written_in: u64,
    ) -> Result<FrameOutput, StreamingError> {
        let frame = input.frame;
        let asked = written_in.min(frame);
        self.check_frame(input)?;
        self.start_frame(frame);
        let mut out = FrameOutput { frame, ..FrameOutput::default() };
        let mut changes: BTreeMap<ImageId, ResidencyChanges> = BTreeMap::new();

        self.forget_failed(input.failed);
        self.commit_loaded(input.loaded, frame, &mut out, &mut changes)?;
        self.refresh_parents(&out.resident, frame);
        let wants = self.collect_wants(input.requests);
        let candidates = self.load_candidates(wants, asked, frame);
        self.cancel_unwanted(frame, &mut out);
        self.evict_to_budget(frame, &mut changes);
        let bytes_started = self.start_loads(candidates, frame, &mut out, &mut changes);
        self.evict_after_pinned(frame, &mut changes);
        self.forget_old(frame);
        self.finish_frame(frame, bytes_started, changes, &mut out);
        Ok(out)
    }

    /// Refuses a frame before anything changes: a frame not after the last one, a completion or
    /// failure of a load that is not out (each key may be reported once per load out: the one in
    /// flight and the cancelled ones), a request for a tile its registered image does not have.
    fn check_frame(&self, input: &FrameInput<'_>) -> Result<(), StreamingError> {
        let frame = input.frame;
        if let Some(last) = self.last_frame {
            if frame <= last {
                return Err(StreamingError::FrameOrder { last, got: frame });
            }
        }
        let mut reported: HashMap<TileKey, u32> = HashMap::new();
        for &key in input.loaded.iter().chain(input.failed) {
            let n = reported.entry(key).or_insert(0);
            *n += 1;
            let out =
                self.cancelled.get(&key).copied().unwrap_or(0) + u32::from(self.in_flight.contains_key(&key));
            if *n > out {
                return Err(StreamingError::UnexpectedCompletion { key });
            }
        }
        for r in input.requests {
            if let Some(s) = self.images.get(&r.image) {
                let count = s.residency.layout().tile_count();
                if r.tile.0 >= count {
                    return Err(StreamingError::TileOutOfRange { image: r.image, tile: r.tile, count });
                }
            }
        }
        Ok(())
    }

    /// Makes `frame` the current frame: this frame's wants and evictions start empty.
    fn start_frame(&mut self, frame: u64) {
        self.last_frame = Some(frame);
        self.wanted_now.clear();
        self.evicted_now.clear();
        self.evictions_now = 0;
    }

    /// Step 1: failed loads are forgotten (completions of cancelled loads are ignored); wanted
    /// again, they load again — pinned units go back to pending at once.
    fn forget_failed(&mut self, failed: &[TileKey]) {
        for &key in failed {
            if self.take_cancelled(key) {
                continue;
            }
            let f = self.in_flight.remove(&key).expect("checked in flight");
            self.in_flight_tiles -= u64::from(f.tiles);
            self.stats.loads_failed += 1;
            if self.is_pinned(key) {
                self.pinned_pending.insert(key);
            } else {
                self.wanted.insert(key, Wanted { first: f.wanted_since, last: f.wanted_since });
            }
        }
    }

    /// Step 2: loaded units become resident: one commit per image (contiguous memory where the
    /// pool has it; their pool tiles were reserved when the loads started), their latency
    /// recorded, and the unpinned ones enter the LRU as used in `frame`. A commit error is a bug
    /// (the accounting and the pool disagree) and leaves the frame half done.
    fn commit_loaded(
        &mut self,
        loaded: &[TileKey],
        frame: u64,
        out: &mut FrameOutput,
        changes: &mut BTreeMap<ImageId, ResidencyChanges>,
    ) -> Result<(), StreamingError> {
        let mut budget = (u64::from(self.desc.budget_tiles)).max(self.committed_tiles());
        if let Some(capacity) = self.desc.capacity_tiles {
            // Whole heaps within the capacity: a heap cut short by the budget would leave the
            // next heap's index past the atlas's slots (slot = heap × tiles per heap + tile).
            budget =
                budget.next_multiple_of(u64::from(self.desc.tiles_per_heap.max(1))).min(u64::from(capacity));
        }
        self.pool.set_budget_tiles(budget.min(u64::from(u32::MAX)) as u32);
        let mut by_image: BTreeMap<ImageId, (Vec<TileIndex>, Vec<u32>)> = BTreeMap::new();
        for &key in loaded {
            if self.take_cancelled(key) {
                continue;
            }
            let f = self.in_flight.remove(&key).expect("checked in flight");
            self.in_flight_tiles -= u64::from(f.tiles);
            self.stats.latency.record(frame - f.wanted_since);
            self.stats.tiles_streamed += 1;
            self.stats.bytes_streamed += u64::from(f.tiles) * self.pool.tile_bytes();
            let e = by_image.entry(key.image).or_default();
            match key.unit {
                StreamUnit::Tile(t) => e.0.push(t),
                StreamUnit::Tail(t) => e.1.push(t),
            }
            out.resident.push(key);
            out.resident_wanted_since.push(f.wanted_since);
        }
        for (image, (tiles, tails)) in by_image {
            let state = self.images.get_mut(&image).expect("in-flight units belong to registered images");
            let mut c = state
                .residency
                .commit(&mut self.pool, &tiles)
                .map_err(|source| StreamingError::Commit { image, source })?;
            for tail in tails {
                c.extend(
                    state
                        .residency
                        .commit_tail(&mut self.pool, tail)
                        .map_err(|source| StreamingError::Commit { image, source })?,
                );
            }
            changes.entry(image).or_default().extend(c);
        }
        for &key in &out.resident {
            if !self.is_pinned(key) {
                let mip = self.mip_of(key);
                self.last_used.insert(key, frame);
                self.lru.insert((frame, mip, key));
            }
        }
        Ok(())
    }

    /// Step 2b: a new child keeps its parents at least as recent, so LRU order evicts children
    /// first.
    fn refresh_parents(&mut self, resident: &[TileKey], frame: u64) {
        for &key in resident {
            let mut stack = self.parents(key);
            while let Some(p) = stack.pop() {
                if self.last_used.get(&p).is_some_and(|&l| l != frame) {
                    self.touch(p, frame);
                    stack.extend(self.parents(p));
                }
            }
        }
    }

    /// Step 3: this frame's wants: each request and its parent chain, with a priority class (the
    /// most urgent asking) and the most pixels any request counted; requests of unregistered
    /// images are counted as stale and dropped, LOD warnings only with prefetch on. The wanted
    /// units are marked wanted this frame.
    fn collect_wants(&mut self, requests: &[TileRequest]) -> HashMap<TileKey, Want> {
        let mut wants: HashMap<TileKey, Want> = HashMap::new();
        for r in requests {
            if !self.images.contains_key(&r.image) {
                self.stats.stale_requests += 1;
                continue;
            }
            let (class, start) = match r.kind {
                RequestKind::Miss => (LoadReason::Miss, vec![r.tile]),
                RequestKind::LodWarning if self.desc.prefetch => (LoadReason::Prefetch, vec![r.tile]),
                // The warned tile was sampled (it stays wanted) and the next finer level under it
                // is wanted ahead of need.
                RequestKind::MinLodWarning if self.desc.prefetch => {
                    let layout = self.images[&r.image].residency.layout();
                    let mut tiles = child_tiles(layout, r.tile);
                    tiles.push(r.tile);
                    (LoadReason::Prefetch, tiles)
                }
                RequestKind::LodWarning | RequestKind::MinLodWarning => continue,
            };
            let mut stack: Vec<TileKey> = start.into_iter().map(|t| TileKey::tile(r.image, t)).collect();
            while let Some(key) = stack.pop() {
                match wants.get_mut(&key) {
                    Some(w) if w.class <= class => {
                        w.pixels = w.pixels.max(u64::from(r.pixels));
                        continue;
                    }
                    Some(w) => {
                        w.class = class;
                        w.pixels = w.pixels.max(u64::from(r.pixels));
                    }
                    None => {
                        let mip = self.mip_of(key);
                        wants.insert(key, Want { class, pixels: u64::from(r.pixels), mip });
                    }
                }
                stack.extend(self.parents(key));
            }
        }
        for (&key, _) in wants.iter() {
            self.wanted_now.insert(key);
        }
        wants
    }

    /// Step 3a: the loads to consider, sorted by priority (class, then coarser mip, then more
    /// pixels, then key): wanted units neither resident nor loading (resident ones are touched
    /// in the LRU; a unit evicted within the thrash window counts as thrash), and every pending
    /// pinned unit. `asked` is the frame whose feedback asked: the wait of a new want counts from
    /// it.
    fn load_candidates(&mut self, wants: HashMap<TileKey, Want>, asked: u64, frame: u64) -> Vec<Candidate> {
        let mut candidates: Vec<Candidate> = Vec::new();
        let mut keys: Vec<TileKey> = wants.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            let w = wants[&key];
            if self.last_used.contains_key(&key) {
                self.touch(key, frame);
            } else if self.is_resident(key) || self.in_flight.contains_key(&key) {
                // Pinned and resident, or already loading.
            } else if self.pinned_pending.contains(&key) {
                // Loaded below with the pinned units.
            } else {
                let e = self.wanted.entry(key).or_insert(Wanted { first: asked, last: frame });
                e.last = frame;
                if let Some(t) = self.evicted_at.remove(&key) {
                    if frame - t <= u64::from(self.desc.thrash_window_frames) {
                        self.stats.thrash += 1;
                    }
                }
                candidates.push((w.class, Reverse(w.mip), Reverse(w.pixels), key));
            }
        }
        for &key in &self.pinned_pending {
            let mip = self.mip_of(key);
            candidates.push((LoadReason::Pinned, Reverse(mip), Reverse(u64::MAX), key));
        }
        candidates.sort_unstable();
        candidates
    }

    /// Step 3b: loads in flight wanted this frame stay; those no frame wanted for
    /// `cancel_after_frames` are cancelled (never pinned ones): their tiles go back to the budget
    /// before anything is evicted or started, and their completions are ignored.
    fn cancel_unwanted(&mut self, frame: u64, out: &mut FrameOutput) {
        for key in &self.wanted_now {
            if let Some(f) = self.in_flight.get_mut(key) {
                f.last_wanted = frame;
            }
        }
        let after = u64::from(self.desc.cancel_after_frames);
        if after > 0 {
            let stale: Vec<TileKey> = self
                .in_flight
                .iter()
                .filter(|(&key, f)| frame - f.last_wanted >= after && !self.is_pinned(key))
                .map(|(&key, _)| key)
                .collect();
            for key in stale {
                let f = self.in_flight.remove(&key).expect("listed");
                self.in_flight_tiles -= u64::from(f.tiles);
                *self.cancelled.entry(key).or_insert(0) += 1;
                self.stats.loads_cancelled += 1;
                out.cancelled.push(key);
            }
        }
    }

    /// Step 4: over budget (the budget was cut), evicts least recently used tiles not wanted now,
    /// at most `evictions_per_frame`.
    fn evict_to_budget(&mut self, frame: u64, changes: &mut BTreeMap<ImageId, ResidencyChanges>) {
        let budget = u64::from(self.desc.budget_tiles);
        let mut cut = 0;
        while self.committed_tiles() > budget && cut < self.desc.evictions_per_frame {
            let Some(key) = self.eviction_candidate(frame, false) else { break };
            self.evict(key, frame, changes);
            cut += 1;
        }
    }

    /// Step 5: starts loads in priority order within the upload budget (at least one starts),
    /// the in-flight cap and the pool budget (evicting tiles unused for the eviction delay to
    /// make room; pinned loads start whatever the budget), once their parents are resident or
    /// loading; the others are deferred. Returns the bytes started.
    fn start_loads(
        &mut self,
        candidates: Vec<Candidate>,
        frame: u64,
        out: &mut FrameOutput,
        changes: &mut BTreeMap<ImageId, ResidencyChanges>,
    ) -> u64 {
        let budget = u64::from(self.desc.budget_tiles);
        let tile_bytes = self.pool.tile_bytes();
        let mut bytes_started = 0u64;
        let mut no_room = false;
        for (class, _, _, key) in candidates {
            let tiles = self.unit_tiles(key);
            let bytes = u64::from(tiles) * tile_bytes;
            let over_upload = bytes_started > 0 && bytes_started + bytes > self.desc.upload_budget_bytes;
            let parents_ready =
                self.parents(key).iter().all(|&p| self.is_resident(p) || self.in_flight.contains_key(&p));
            if self.in_flight.len() >= self.desc.max_in_flight as usize || over_upload || !parents_ready {
                out.stats.deferred += 1;
                continue;
            }
            if class != LoadReason::Pinned {
                let limit = self.desc.capacity_tiles.map_or(budget, |c| budget.min(u64::from(c)));
                while !no_room && self.committed_tiles() + u64::from(tiles) > limit {
                    match self.eviction_candidate(frame, true) {
                        Some(victim) => self.evict(victim, frame, changes),
                        None => no_room = true,
                    }
                }
                if no_room {
                    out.stats.deferred += 1;
                    continue;
                }
            } else if let Some(capacity) = self.desc.capacity_tiles {
                // Pinned loads start whatever the budget, but not past a hard capacity: they
                // evict any tile not wanted this frame to make room, or wait for a later frame.
                let mut full = false;
                while self.committed_tiles() + u64::from(tiles) > u64::from(capacity) {
                    match self.eviction_candidate(frame, false) {
                        Some(victim) => self.evict(victim, frame, changes),
                        None => {
                            full = true;
                            break;
                        }
                    }
                }
                if full {
                    out.stats.deferred += 1;
                    continue;
                }
            }
            let wanted_since = if class == LoadReason::Pinned {
                self.pinned_pending.remove(&key);
                frame
            } else {
                self.wanted.remove(&key).map_or(frame, |w| w.first)
            };
            self.in_flight.insert(key, Flight { wanted_since, tiles, last_wanted: frame });
            self.in_flight_tiles += u64::from(tiles);
            bytes_started += bytes;
            let coord = match key.unit {
                StreamUnit::Tile(t) => self.images[&key.image].residency.layout().tile_coord(t),
                StreamUnit::Tail(_) => None,
            };
            out.loads.push(TileLoad { key, coord, bytes, reason: class });
        }
        bytes_started
    }

    /// Step 5b: pinned loads start whatever the budget: evicts back down to it as a budget cut
    /// does (within the frame's eviction quota), so that the manager is over budget only while
    /// nothing more may be evicted this frame.
    fn evict_after_pinned(&mut self, frame: u64, changes: &mut BTreeMap<ImageId, ResidencyChanges>) {
        let budget = u64::from(self.desc.budget_tiles);
        while self.committed_tiles() > budget && self.evictions_now < self.desc.evictions_per_frame as usize {
            let Some(key) = self.eviction_candidate(frame, false) else { break };
            self.evict(key, frame, changes);
        }
    }

    /// Step 6: forgets wants not renewed within the eviction delay, and evictions older than the
    /// thrash window.
    fn forget_old(&mut self, frame: u64) {
        let k = u64::from(self.desc.eviction_delay_frames);
        self.wanted.retain(|_, w| frame - w.last <= k);
        let m = u64::from(self.desc.thrash_window_frames);
        self.evicted_at.retain(|_, &mut t| frame - t <= m);
    }

    /// Step 7: heaps beyond the budget go back to the device; the min-LOD boxes of every changed
    /// image; the frame's and the running statistics.
    fn finish_frame(
        &mut self,
        frame: u64,
        bytes_started: u64,
        changes: BTreeMap<ImageId, ResidencyChanges>,
        out: &mut FrameOutput,
    ) {
        let budget = u64::from(self.desc.budget_tiles);
        if self.pool.capacity_tiles() > budget.max(self.committed_tiles()) {
            out.heaps_released = self.pool.trim();
        }
        for (image, c) in changes {
            let state = self.images.get_mut(&image).expect("changed images are registered");
            let min_lod = state.residency.refresh_min_lod();
            out.changes.push(ImageChanges { image, changes: c, min_lod });
        }
        out.evicted = self.evicted_now.clone();

        out.stats.frame = frame;
        out.stats.wanted = self.wanted_now.len() as u32;
        out.stats.loads_started = out.loads.len() as u32;
        out.stats.bytes_started = bytes_started;
        out.stats.became_resident = out.resident.len() as u32;
        out.stats.evicted = out.evicted.len() as u32;
        out.stats.cancelled = out.cancelled.len() as u32;
        self.stats.frames += 1;
        self.stats.in_flight = self.in_flight.len() as u64;
        self.stats.resident_bytes = self.pool.used_tiles() * self.pool.tile_bytes();
        self.stats.resident_bytes_peak = self.stats.resident_bytes_peak.max(self.stats.resident_bytes);
        self.stats.last_frame = out.stats;
    }

    /// Checks the manager's contract after a frame; `Err` names the first broken rule (a bug).
    /// The structures it is built on first (the pool's and every page table's own
    /// `check_invariants`: walks of every tile and, for the page tables, a recomputation of every
    /// min-LOD region), then [`check_contract`](Self::check_contract).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.pool.check_invariants().map_err(|e| format!("pool: {e}"))?;
        for (&image, s) in &self.images {
            s.residency.page_table().check_invariants().map_err(|e| format!("image {}: {e}", image.0))?;
        }
        self.check_contract()
    }

    /// The manager's own rules, without the walks of the pool and the page tables that
    /// [`check_invariants`](Self::check_invariants) adds (those dominate its cost): resident
    /// units are pinned or in the LRU and never in flight, pinned tails are exactly one of
    /// resident, in flight or pending, the page tables and the pool hold the same tiles, the LRU
    /// and the last-use map agree, nothing unwanted stays in flight past the cancel delay, the
    /// in-flight count, nothing evicted this frame that was wanted, in flight or pinned, and over
    /// budget only while nothing more may be evicted. `Err` names the first broken rule (a bug).
    pub fn check_contract(&self) -> Result<(), String> {
        let mut resident_tiles = 0u64;
        for (&image, s) in &self.images {
            let table = s.residency.page_table();
            for (tile, _) in table.mapped() {
                let key = TileKey::tile(image, tile);
                resident_tiles += 1;
                if self.in_flight.contains_key(&key) {
                    return Err(format!("{key:?} is resident and in flight"));
                }
                if self.is_pinned(key) == self.last_used.contains_key(&key) {
                    return Err(format!("{key:?}: resident tiles are either pinned or in the LRU"));
                }
            }
            for tail in 0..s.residency.layout().mip_tail_count() {
                let key = TileKey::tail(image, tail);
                let states = [
                    table.is_tail_resident(tail),
                    self.in_flight.contains_key(&key),
                    self.pinned_pending.contains(&key),
                ];
                if states.iter().filter(|&&b| b).count() != 1 {
                    return Err(format!(
                        "pinned {key:?} must be exactly one of resident, in flight, pending: {states:?}"
                    ));
                }
            }
            let tail_tiles = s.residency.layout().mip_tail().map_or(0, |t| u64::from(t.tiles));
            resident_tiles += (0..s.residency.layout().mip_tail_count())
                .filter(|&t| table.is_tail_resident(t))
                .count() as u64
                * tail_tiles;
        }
        if resident_tiles != self.pool.used_tiles() {
            return Err(format!(
                "page tables hold {resident_tiles} tiles, the pool {}",
                self.pool.used_tiles()
            ));
        }
        if self.lru.len() != self.last_used.len() {
            return Err(format!("LRU has {} entries, last-use map {}", self.lru.len(), self.last_used.len()));
        }
        for &(last, mip, key) in &self.lru {
            if self.last_used.get(&key) != Some(&last) || self.mip_of(key) != mip || !self.is_resident(key) {
                return Err(format!("LRU entry {key:?} (last use {last}) is stale"));
            }
        }
        let after = u64::from(self.desc.cancel_after_frames);
        if let (true, Some(frame)) = (after > 0, self.last_frame) {
            for (&key, f) in &self.in_flight {
                if frame - f.last_wanted >= after && !self.is_pinned(key) {
                    return Err(format!(
                        "{key:?} is in flight but unwanted since frame {} (cancel after {after})",
                        f.last_wanted
                    ));
                }
            }
        }
        let flight: u64 = self.in_flight.values().map(|f| u64::from(f.tiles)).sum();
        if flight != self.in_flight_tiles {
            return Err(format!("in-flight tiles {} but loads add up to {flight}", self.in_flight_tiles));
        }
        for key in &self.evicted_now {
            if self.wanted_now.contains(key) {
                return Err(format!("{key:?} was evicted in the frame it was wanted"));
            }
            if self.in_flight.contains_key(key) || self.is_pinned(*key) {
                return Err(format!("{key:?} was evicted while in flight or pinned"));
            }
        }
        for key in &self.wanted_now {
            if let Some(&last) = self.last_used.get(key) {
                if Some(last) != self.last_frame {
                    return Err(format!("{key:?} is wanted this frame but its last use is {last}"));
                }
            }
        }
        if let Some(capacity) = self.desc.capacity_tiles {
            if self.committed_tiles() > u64::from(capacity) {
                return Err(format!(
                    "{} tiles committed past the capacity of {capacity}",
                    self.committed_tiles()
                ));
            }
        }
        let pinned: u64 = self.images.values().map(|s| s.pinned_tiles).sum();
        if pinned != self.pinned_tiles {
            return Err(format!("pinned tiles {} but the images' add up to {pinned}", self.pinned_tiles));
        }
        let over = self.committed_tiles() > u64::from(self.desc.budget_tiles);
        if over
            && self.evictions_now < self.desc.evictions_per_frame as usize
            && self.last_frame.is_some_and(|f| self.eviction_candidate(f, false).is_some())
        {
            return Err(format!(
                "{} tiles committed over a budget of {} while tile {:?} could still be evicted",
                self.committed_tiles(),
                self.desc.budget_tiles,
                self.lru.first()
            ));
        }
        Ok(())
    }
}
