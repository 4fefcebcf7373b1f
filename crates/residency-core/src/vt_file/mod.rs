//! The `.rvt` tiled virtual-texture file format: a 2D image with its mip chain, cut into tiles that
//! a streamer reads one at a time, each with its own size and checksum, optionally LZ4-compressed.
//!
//! ```text
//! ┌──────────────┬───────────────────────────────┬──────────────────────┬─────────────┐
//! │ header (64 B)│ tile payloads, in write order │ index: 24 B per tile │ trailer 32 B│
//! └──────────────┴───────────────────────────────┴──────────────────────┴─────────────┘
//! ```
//!
//! - [`header`]: the header and trailer layouts, [`VtDesc`] and the tile geometry derived from it.
//! - [`writer`]: [`VtWriter`], streaming: tiles are written as they are produced, the index last.
//! - [`reader`]: [`VtIndex`] (parsed and checked once, shareable) and [`VtReader`] (random access).
//! - [`hash`]: XXH64, the checksum of the header, the index and every payload.
//!
//! Malformed, truncated or corrupted files give a [`VtError`], never a panic, and no length read
//! from a file is used for an allocation before it was checked against the header's tile size
//! (capped at [`MAX_TILE_BYTES`]) and the file's length. See `docs/streaming.md`.
#![deny(missing_docs)]

pub mod error;
pub mod hash;
pub mod header;
pub mod reader;
pub mod writer;

pub use error::VtError;
pub use hash::xxh64;
pub use header::{
    format_code, Compression, TileRecord, VtDesc, HEADER_BYTES, MAGIC, MAX_DIMENSION, MAX_TILE_BYTES,
    RECORD_BYTES, TRAILER_BYTES, TRAILER_MAGIC, VERSION,
};
pub use reader::{VtIndex, VtReader};
pub use writer::VtWriter;
