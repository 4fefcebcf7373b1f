//! What can go wrong reading or writing a `.rvt` file.

use crate::format::Format;

/// A `.rvt` file was malformed, truncated, corrupted or misused. Every reader path returns one of
/// these instead of panicking, and no length read from a file is trusted before it was checked
/// against the header and the file size.
#[derive(Debug, thiserror::Error)]
pub enum VtError {
    /// The underlying reader or writer failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The file is shorter than its fixed parts, or a region it names lies outside it.
    #[error("truncated file: {what} needs bytes {start}..{end}, the file has {file_len}")]
    Truncated {
        /// The part that does not fit.
        what: &'static str,
        /// First byte of that part.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// The file's length.
        file_len: u64,
    },
    /// The first bytes are not the `.rvt` magic.
    #[error("not a .rvt file (bad magic)")]
    BadMagic,
    /// The trailer's magic is wrong (a truncated or unfinished file).
    #[error("bad trailer magic: the file is truncated or was never finished")]
    BadTrailer,
    /// A version this reader does not know.
    #[error("unsupported .rvt version {found} (this reader reads version {supported})")]
    UnsupportedVersion {
        /// The file's version.
        found: u16,
        /// The version this code reads and writes.
        supported: u16,
    },
    /// A checksum did not match.
    #[error("checksum mismatch in {what}: stored {stored:#018x}, computed {computed:#018x}")]
    Checksum {
        /// What was checked (header, index, a tile).
        what: String,
        /// The checksum in the file.
        stored: u64,
        /// The checksum of the bytes read.
        computed: u64,
    },
    /// A header field is invalid.
    #[error("invalid header: {field} = {value} ({reason})")]
    BadHeader {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The header's format code is not one this reader knows.
    #[error("unknown format code {0}")]
    UnknownFormat(u16),
    /// The format has no texel blocks that tiles can hold (depth/stencil, `unknown`).
    #[error("format {0} cannot be stored in a .rvt file")]
    UnsupportedFormat(Format),
    /// An index record is inconsistent with the header or the file.
    #[error("bad index record for mip {mip} tile ({x}, {y}): {reason}")]
    BadRecord {
        /// The tile's mip.
        mip: u32,
        /// Tile column.
        x: u32,
        /// Tile row.
        y: u32,
        /// What is wrong.
        reason: String,
    },
    /// The tile does not exist in this image.
    #[error("no tile ({x}, {y}) in mip {mip} (the image has {mips} mips; this mip has {tiles_x} × {tiles_y} tiles)")]
    NoSuchTile {
        /// Mip asked for.
        mip: u32,
        /// Column asked for.
        x: u32,
        /// Row asked for.
        y: u32,
        /// Mips in the image.
        mips: u32,
        /// Columns in that mip (0 when the mip does not exist).
        tiles_x: u32,
        /// Rows in that mip.
        tiles_y: u32,
    },
    /// A compressed payload did not decompress to exactly the tile's size.
    #[error("mip {mip} tile ({x}, {y}): payload does not decompress to {expected} bytes ({reason})")]
    Decompress {
        /// The tile's mip.
        mip: u32,
        /// Tile column.
        x: u32,
        /// Tile row.
        y: u32,
        /// The tile's size.
        expected: u64,
        /// What the decompressor said.
        reason: String,
    },
    /// The writer was given a tile of the wrong size.
    #[error("mip {mip} tile ({x}, {y}) must be {expected} bytes, {got} given")]
    WrongTileSize {
        /// The tile's mip.
        mip: u32,
        /// Tile column.
        x: u32,
        /// Tile row.
        y: u32,
        /// Bytes the tile must have.
        expected: u64,
        /// Bytes given.
        got: u64,
    },
    /// The writer was given the same tile twice.
    #[error("mip {mip} tile ({x}, {y}) was already written")]
    DuplicateTile {
        /// The tile's mip.
        mip: u32,
        /// Tile column.
        x: u32,
        /// Tile row.
        y: u32,
    },
    /// The writer was finished before every tile was written.
    #[error("{missing} tiles were never written (first: mip {mip} tile ({x}, {y}))")]
    MissingTiles {
        /// How many.
        missing: u64,
        /// Mip of the first one.
        mip: u32,
        /// Column of the first one.
        x: u32,
        /// Row of the first one.
        y: u32,
    },
}
