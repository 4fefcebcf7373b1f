//! The fixed parts of a `.rvt` file: the header, the trailer and index records, their byte layout,
//! and the tile geometry every reader and writer derives from the header.

use super::error::VtError;
use super::hash::xxh64;
use crate::format::Format;
use crate::tiles::{full_mip_chain, standard_tile_shape, SparseDimension};
use serde::{Deserialize, Serialize};

/// The first eight bytes of every `.rvt` file (PNG-style: a NUL, CR-LF and ^Z catch text-mode
/// transfers).
pub const MAGIC: [u8; 8] = *b"RVT\0\r\n\x1a\n";
/// The last eight bytes of a finished `.rvt` file.
pub const TRAILER_MAGIC: [u8; 8] = *b"RVTINDEX";
/// The format version this code reads and writes.
pub const VERSION: u16 = 1;
/// Bytes of the header.
pub const HEADER_BYTES: u64 = 64;
/// Bytes of the trailer.
pub const TRAILER_BYTES: u64 = 32;
/// Bytes of one index record.
pub const RECORD_BYTES: u64 = 24;
/// The largest uncompressed tile (borders included) a file may declare: 4 MiB. A 64 KiB sparse
/// tile of a 128-bit format with 16-texel borders is 144 KiB; the cap only exists so that a
/// corrupt header cannot make a reader allocate gigabytes.
pub const MAX_TILE_BYTES: u64 = 4 << 20;
/// The largest image side a file may declare (2^20 texels).
pub const MAX_DIMENSION: u32 = 1 << 20;

/// How tile payloads are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Payloads are the tile bytes as they are.
    None,
    /// Payloads are LZ4 blocks (`lz4_flex::block`, no size prefix). A payload that LZ4 would not
    /// make smaller is stored raw; a record whose stored size equals its uncompressed size is
    /// raw, a smaller one is LZ4.
    Lz4,
}

impl Compression {
    fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 1,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4),
            _ => None,
        }
    }
}

/// Stable on-disk codes of formats. Codes are never reused; new formats take new codes.
const FORMAT_CODES: &[(u16, Format)] = &[
    (1, Format::R8Unorm),
    (2, Format::R8Uint),
    (3, Format::R8G8Unorm),
    (4, Format::R16Float),
    (5, Format::R16Uint),
    (6, Format::R8G8B8A8Unorm),
    (7, Format::R8G8B8A8Srgb),
    (8, Format::B8G8R8A8Unorm),
    (9, Format::R10G10B10A2Unorm),
    (10, Format::R11G11B10Float),
    (11, Format::R16G16Float),
    (12, Format::R32Float),
    (13, Format::R32Uint),
    (14, Format::R16G16B16A16Float),
    (15, Format::R32G32Float),
    (16, Format::R32G32B32A32Float),
    (17, Format::R32G32B32A32Uint),
    (18, Format::Bc1Unorm),
    (19, Format::Bc1Srgb),
    (20, Format::Bc3Unorm),
    (21, Format::Bc4Unorm),
    (22, Format::Bc5Unorm),
    (23, Format::Bc6hUfloat),
    (24, Format::Bc7Unorm),
    (25, Format::Bc7Srgb),
];

/// The on-disk code of `format`, `None` for formats a `.rvt` cannot hold.
pub fn format_code(format: Format) -> Option<u16> {
    FORMAT_CODES.iter().find(|(_, f)| *f == format).map(|(c, _)| *c)
}

fn format_from_code(code: u16) -> Option<Format> {
    FORMAT_CODES.iter().find(|(c, _)| *c == code).map(|(_, f)| *f)
}

/// What a `.rvt` file holds: a 2D image with a mip chain, cut into tiles of one shape, each stored
/// with `border` extra texels on every side (for the software residency path's filtering; 0 for
/// hardware sparse tiles).
///
/// Tile geometry: mip `m` is `max(1, width >> m) × max(1, height >> m)` texels, cut into
/// `ceil(w / tile_width) × ceil(h / tile_height)` tiles (every mip, however small, has at least
/// one). A tile's *interior* is its texels clipped to the mip; its payload is the interior plus
/// `border` texels on each side, `format.region_bytes(w + 2·border, h + 2·border, 1)` bytes, rows
/// of texel blocks, row-major, tightly packed. Tiles are numbered mip-major, then row, then
/// column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VtDesc {
    /// Texel format.
    pub format: Format,
    /// Width of mip 0 in texels.
    pub width: u32,
    /// Height of mip 0 in texels.
    pub height: u32,
    /// Mip levels (1 to the full chain).
    pub mip_count: u32,
    /// Tile width in texels (interior), a multiple of the format's block width.
    pub tile_width: u32,
    /// Tile height in texels (interior), a multiple of the format's block height.
    pub tile_height: u32,
    /// Border texels stored on each side of each tile, a multiple of the block size.
    pub border: u32,
    /// How payloads are stored.
    pub compression: Compression,
}

impl VtDesc {
    /// A desc with a full mip chain, no border and LZ4 compression.
    pub fn new(format: Format, width: u32, height: u32, tile_width: u32, tile_height: u32) -> Self {
        Self {
            format,
            width,
            height,
            mip_count: full_mip_chain(width.max(height)),
            tile_width,
            tile_height,
            border: 0,
            compression: Compression::Lz4,
        }
    }

    /// A desc of `format` in its standard 64 KiB sparse tile — the Vulkan specification's standard
    /// sparse image block shape in texels: R8 256 × 256, RGBA8 128 × 128, RGBA16F 128 × 64, BC3
    /// and BC7 256 × 256 (64 × 64 blocks of 16 bytes), BC1 512 × 256 (128 × 64 blocks of 8
    /// bytes) — with a full mip chain down to 1 × 1, no border and LZ4 compression: the tiles the
    /// hardware streaming path binds one to a sparse block. A block-compressed mip smaller than a
    /// block (2 × 2, 1 × 1) is one block. [`VtError::UnsupportedFormat`] for a format without a
    /// standard shape (depth/stencil, `unknown`, 3-byte texels).
    pub fn standard(format: Format, width: u32, height: u32) -> Result<Self, VtError> {
        let shape = standard_tile_shape(format, SparseDimension::D2)
            .filter(|_| format_code(format).is_some())
            .ok_or(VtError::UnsupportedFormat(format))?;
        Ok(Self::new(format, width, height, shape.width, shape.height))
    }

    /// Sets the mip count, clamped to `1..=` the full chain (logged when clamped).
    pub fn with_mip_count(mut self, mips: u32) -> Self {
        let clamped = mips.clamp(1, full_mip_chain(self.width.max(self.height)));
        if clamped != mips {
            tracing::debug!(requested = mips, used = clamped, "VtDesc: mip count clamped");
        }
        self.mip_count = clamped;
        self
    }

    /// Sets the border texels per tile side.
    pub fn with_border(mut self, border: u32) -> Self {
        self.border = border;
        self
    }

    /// Sets the compression.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Checks every field; a valid desc has all sizes within the format's caps.
    pub fn validate(&self) -> Result<(), VtError> {
        let bad =
            |field, value: u32, reason| Err(VtError::BadHeader { field, value: u64::from(value), reason });
        if format_code(self.format).is_none() {
            return Err(VtError::UnsupportedFormat(self.format));
        }
        let (bw, bh) = self.format.block_extent();
        if self.width == 0 || self.width > MAX_DIMENSION {
            return bad("width", self.width, "must be 1 to 2^20");
        }
        if self.height == 0 || self.height > MAX_DIMENSION {
            return bad("height", self.height, "must be 1 to 2^20");
        }
        if self.mip_count == 0 || self.mip_count > full_mip_chain(self.width.max(self.height)) {
            return bad("mip_count", self.mip_count, "must be 1 to the full mip chain");
        }
        if self.tile_width == 0 || self.tile_width % bw != 0 || self.tile_width > MAX_DIMENSION {
            return bad("tile_width", self.tile_width, "must be a positive multiple of the block width");
        }
        if self.tile_height == 0 || self.tile_height % bh != 0 || self.tile_height > MAX_DIMENSION {
            return bad("tile_height", self.tile_height, "must be a positive multiple of the block height");
        }
        if self.border % bw != 0
            || self.border % bh != 0
            || self.border > self.tile_width.min(self.tile_height)
        {
            return bad("border", self.border, "must be a multiple of the block size, at most a tile side");
        }
        let bytes = self.max_tile_bytes();
        if bytes > MAX_TILE_BYTES {
            return Err(VtError::BadHeader {
                field: "tile size",
                value: bytes,
                reason: "a tile with its borders may be at most 4 MiB",
            });
        }
        let tiles = self.tile_count();
        if tiles > u64::from(u32::MAX) {
            return Err(VtError::BadHeader {
                field: "tile count",
                value: tiles,
                reason: "at most 2^32 - 1 tiles",
            });
        }
        Ok(())
    }

    /// Extent of mip `mip` in texels.
    pub fn mip_extent(&self, mip: u32) -> (u32, u32) {
        let shr = |v: u32| v.checked_shr(mip).unwrap_or(0).max(1);
        (shr(self.width), shr(self.height))
    }

    /// Tiles of mip `mip` as (columns, rows); (0, 0) for a mip that does not exist.
    pub fn tile_grid(&self, mip: u32) -> (u32, u32) {
        if mip >= self.mip_count {
            return (0, 0);
        }
        let (w, h) = self.mip_extent(mip);
        (w.div_ceil(self.tile_width), h.div_ceil(self.tile_height))
    }

    /// Tiles in all mips together.
    pub fn tile_count(&self) -> u64 {
        (0..self.mip_count)
            .map(|m| {
                let (x, y) = self.tile_grid(m);
                u64::from(x) * u64::from(y)
            })
            .sum()
    }

    /// The dense number of tile (`mip`, `x`, `y`) (mip-major, then row, then column), `None`
    /// when there is no such tile.
    pub fn tile_number(&self, mip: u32, x: u32, y: u32) -> Option<u64> {
        let (tx, ty) = self.tile_grid(mip);
        if x >= tx || y >= ty {
            return None;
        }
        let before: u64 = (0..mip)
            .map(|m| {
                let (a, b) = self.tile_grid(m);
                u64::from(a) * u64::from(b)
            })
            .sum();
        Some(before + u64::from(y) * u64::from(tx) + u64::from(x))
    }

    /// The interior extent of tile (`mip`, `x`, `y`) in texels (clipped at the mip's edges), `None`
    /// when there is no such tile.
    pub fn tile_extent(&self, mip: u32, x: u32, y: u32) -> Option<(u32, u32)> {
        let (tx, ty) = self.tile_grid(mip);
        if x >= tx || y >= ty {
            return None;
        }
        let (w, h) = self.mip_extent(mip);
        Some((
            (w - x * self.tile_width).min(self.tile_width),
            (h - y * self.tile_height).min(self.tile_height),
        ))
    }

    /// Payload bytes of tile (`mip`, `x`, `y`), borders included, uncompressed.
    pub fn tile_bytes(&self, mip: u32, x: u32, y: u32) -> Option<u64> {
        let (w, h) = self.tile_extent(mip, x, y)?;
        Some(self.format.region_bytes(w + 2 * self.border, h + 2 * self.border, 1))
    }

    /// Payload bytes of a full (unclipped) tile: the most any tile may have.
    pub fn max_tile_bytes(&self) -> u64 {
        self.format.region_bytes(
            self.tile_width.saturating_add(2 * self.border),
            self.tile_height.saturating_add(2 * self.border),
            1,
        )
    }

    /// Encodes the 64-byte header.
    ///
    /// | bytes | field |
    /// |-------|-------|
    /// | 0..8  | magic `RVT\0\r\n\x1a\n` |
    /// | 8..10 | version (u16) = 1 |
    /// | 10..12| header size (u16) = 64 |
    /// | 12..14| format code (u16) |
    /// | 14    | compression (u8): 0 none, 1 LZ4 |
    /// | 15    | reserved, 0 |
    /// | 16..20| width (u32) |
    /// | 20..24| height (u32) |
    /// | 24..28| mip count (u32) |
    /// | 28..32| tile width in texels (u32) |
    /// | 32..36| tile height in texels (u32) |
    /// | 36    | block width in texels (u8) |
    /// | 37    | block height in texels (u8) |
    /// | 38..40| block bytes (u16) |
    /// | 40..44| border texels per tile side (u32) |
    /// | 44..48| tile count, all mips (u32) |
    /// | 48..56| reserved, 0 |
    /// | 56..64| XXH64 (seed 0) of bytes 0..56 |
    ///
    /// All integers little-endian.
    pub fn encode_header(&self) -> [u8; HEADER_BYTES as usize] {
        let mut h = [0u8; HEADER_BYTES as usize];
        let (bw, bh) = self.format.block_extent();
        h[0..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&VERSION.to_le_bytes());
        h[10..12].copy_from_slice(&(HEADER_BYTES as u16).to_le_bytes());
        h[12..14].copy_from_slice(&format_code(self.format).unwrap_or(0).to_le_bytes());
        h[14] = self.compression.code();
        h[16..20].copy_from_slice(&self.width.to_le_bytes());
        h[20..24].copy_from_slice(&self.height.to_le_bytes());
        h[24..28].copy_from_slice(&self.mip_count.to_le_bytes());
        h[28..32].copy_from_slice(&self.tile_width.to_le_bytes());
        h[32..36].copy_from_slice(&self.tile_height.to_le_bytes());
        h[36] = bw as u8;
        h[37] = bh as u8;
        h[38..40].copy_from_slice(&(self.format.block_bytes() as u16).to_le_bytes());
        h[40..44].copy_from_slice(&self.border.to_le_bytes());
        h[44..48].copy_from_slice(&(self.tile_count().min(u64::from(u32::MAX)) as u32).to_le_bytes());
        let sum = xxh64(&h[..56], 0);
        h[56..64].copy_from_slice(&sum.to_le_bytes());
        h
    }

    /// Decodes and validates a header: magic, version, checksum, every field, block info
    /// consistent with the format and the tile count consistent with the geometry.
    pub fn decode_header(h: &[u8; HEADER_BYTES as usize]) -> Result<Self, VtError> {
        if h[0..8] != MAGIC {
            return Err(VtError::BadMagic);
        }
        let version = u16::from_le_bytes([h[8], h[9]]);
        if version != VERSION {
            return Err(VtError::UnsupportedVersion { found: version, supported: VERSION });
        }
        let stored = read_u64(h, 56);
        let computed = xxh64(&h[..56], 0);
        if stored != computed {
            return Err(VtError::Checksum { what: "header".into(), stored, computed });
        }
        let header_size = u16::from_le_bytes([h[10], h[11]]);
        if u64::from(header_size) != HEADER_BYTES {
            return Err(VtError::BadHeader {
                field: "header_size",
                value: header_size.into(),
                reason: "must be 64",
            });
        }
        let code = u16::from_le_bytes([h[12], h[13]]);
        let format = format_from_code(code).ok_or(VtError::UnknownFormat(code))?;
        let compression = Compression::from_code(h[14]).ok_or(VtError::BadHeader {
            field: "compression",
            value: h[14].into(),
            reason: "must be 0 (none) or 1 (lz4)",
        })?;
        let desc = VtDesc {
            format,
            width: read_u32(h, 16),
            height: read_u32(h, 20),
            mip_count: read_u32(h, 24),
            tile_width: read_u32(h, 28),
            tile_height: read_u32(h, 32),
            border: read_u32(h, 40),
            compression,
        };
        let (bw, bh) = format.block_extent();
        let block_bytes = u16::from_le_bytes([h[38], h[39]]);
        if u32::from(h[36]) != bw || u32::from(h[37]) != bh || u32::from(block_bytes) != format.block_bytes()
        {
            return Err(VtError::BadHeader {
                field: "block info",
                value: u64::from(h[36]) << 32 | u64::from(h[37]) << 16 | u64::from(block_bytes),
                reason: "does not match the format",
            });
        }
        desc.validate()?;
        let count = read_u32(h, 44);
        if u64::from(count) != desc.tile_count() {
            return Err(VtError::BadHeader {
                field: "tile_count",
                value: count.into(),
                reason: "does not match the tile grid of the mips",
            });
        }
        Ok(desc)
    }
}

/// Where a tile's payload is, how large, and its checksum: one index record.
///
/// On disk (24 bytes, little-endian): offset (u64), stored size (u32), uncompressed size (u32),
/// XXH64 (seed 0) of the stored bytes (u64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileRecord {
    /// Byte offset of the stored payload in the file.
    pub offset: u64,
    /// Stored (possibly compressed) bytes.
    pub stored_size: u32,
    /// Bytes after decompression: the tile's payload size.
    pub uncompressed_size: u32,
    /// XXH64 of the stored bytes.
    pub checksum: u64,
}

impl TileRecord {
    /// Whether the payload is LZ4 (stored smaller than it is).
    pub fn is_compressed(&self) -> bool {
        self.stored_size < self.uncompressed_size
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.stored_size.to_le_bytes());
        out.extend_from_slice(&self.uncompressed_size.to_le_bytes());
        out.extend_from_slice(&self.checksum.to_le_bytes());
    }

    pub(crate) fn decode(b: &[u8]) -> Self {
        Self {
            offset: read_u64(b, 0),
            stored_size: read_u32(b, 8),
            uncompressed_size: read_u32(b, 12),
            checksum: read_u64(b, 16),
        }
    }
}

/// The trailer: where the index is and its checksum.
///
/// On disk (32 bytes at the end of the file): index offset (u64), index bytes (u64, = tile count
/// × 24), XXH64 (seed 0) of the index bytes (u64), magic `RVTINDEX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Trailer {
    pub index_offset: u64,
    pub index_bytes: u64,
    pub index_checksum: u64,
}

impl Trailer {
    pub fn encode(&self) -> [u8; TRAILER_BYTES as usize] {
        let mut t = [0u8; TRAILER_BYTES as usize];
        t[0..8].copy_from_slice(&self.index_offset.to_le_bytes());
        t[8..16].copy_from_slice(&self.index_bytes.to_le_bytes());
        t[16..24].copy_from_slice(&self.index_checksum.to_le_bytes());
        t[24..32].copy_from_slice(&TRAILER_MAGIC);
        t
    }

    pub fn decode(t: &[u8; TRAILER_BYTES as usize]) -> Result<Self, VtError> {
        if t[24..32] != TRAILER_MAGIC {
            return Err(VtError::BadTrailer);
        }
        Ok(Self {
            index_offset: read_u64(t, 0),
            index_bytes: read_u64(t, 8),
            index_checksum: read_u64(t, 16),
        })
    }
}

fn read_u32(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

fn read_u64(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}
