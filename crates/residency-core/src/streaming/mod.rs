//! Streaming: shader feedback requests, LOD warnings and the residency manager policy.
//!
//! The loop of the seed, in the order a frame runs it:
//! - [`feedback`]: shaders write compact request records into a feedback buffer, de-duplicated on
//!   the GPU by an atomic bitset per image and kind (optionally counting pixels per tile); a
//!   [`FeedbackRing`] of buffers lets the CPU read frame `f − N`'s feedback without waiting;
//!   [`FeedbackLayout::decode`] turns the bytes into [`TileRequest`]s. [`FeedbackSampling`] thins
//!   the writers to every n-th pixel or frame.
//! - [`lod_warning`]: the per-sample rule (miss, LOD warning, nothing) with the seed's per-texture
//!   minimum warning LOD; a warning names the next finer tile, which the manager prefetches.
//! - [`lineage`]: parents and children of tiles across mips.
//! - [`manager`]: the [`StreamingManager`] policy — priorities, parent chains, upload and pool
//!   budgets, delayed LRU eviction — over the tile pool and page tables of [`crate::tiles`].
//! - [`source`]: where tiles come from ([`TileSource`]: `.rvt` files, or the renderer's own), and
//!   [`loader`]: reads on worker threads that overlap frames, polled without waiting, cancellable.
//! - [`cache`]: a bounded [`DecodedTileCache`] of decoded tiles shared by the streamers of several
//!   devices, so a tile decoded once feeds every device that asks for it.
//! - [`stats`]: latency percentiles, traffic, thrash.
//!
//! Nothing here touches a GPU. See `docs/streaming.md` for the buffer layout, the GLSL side and the
//! decisions.
#![deny(missing_docs)]

pub mod cache;
pub mod feedback;
pub mod lineage;
pub mod loader;
pub mod lod_warning;
pub mod manager;
pub mod request;
pub mod source;
pub mod stats;

pub use cache::{CacheKey, CacheStats, CachedSource, DecodedTileCache};
pub use feedback::{
    DecodedFeedback, FeedbackBuffer, FeedbackDesc, FeedbackError, FeedbackImage, FeedbackLayout,
    FeedbackRecord, FeedbackRing, FeedbackSampling, RingStep, FEEDBACK_KINDS, FEEDBACK_MAGIC, HEADER_WORDS,
    IMAGE_ENTRY_WORDS, MAX_FEEDBACK_IMAGES, MAX_FEEDBACK_MIPS, NO_COUNTS, NO_LOW_WATER,
};
pub use lineage::{child_tiles, covering_tiles, parent_tiles};
pub use loader::{DuplicateLoad, LoadDone, LoadJob, TileLoader, LOADER_JOIN_TIMEOUT, MAX_LOADER_WORKERS};
pub use lod_warning::{classify_low_water, classify_sample, low_water_level};
pub use manager::{
    first_pinned_mip, FrameInput, FrameOutput, ImageChanges, ImageCompaction, LoadReason, StreamUnit,
    StreamingDesc, StreamingError, StreamingManager, TileKey, TileLoad,
};
pub use request::{RequestKind, TileRequest};
pub use source::{FnSource, FnVolumeSource, RvtSource, SourceDepth, SourceError, TileSource};
pub use stats::{FrameStats, LatencyHistogram, LatencySummary, StreamingStats};
