//! Reading a `.rvt` file: the index (parsed and checked once) and random access to tiles.
//!
//! [`VtIndex`] is plain data (`Send + Sync`): worker threads can share it, read a tile's stored
//! bytes with positioned reads of their own and call [`VtIndex::decode_tile`]. [`VtReader`] does
//! both through one `Read + Seek`.

use super::error::VtError;
use super::hash::xxh64;
use super::header::{Compression, TileRecord, Trailer, VtDesc, HEADER_BYTES, RECORD_BYTES, TRAILER_BYTES};
use std::io::{Read, Seek, SeekFrom};

/// The parsed, checked index of a `.rvt` file.
///
/// Checked when parsed: header (magic, version, checksum, fields), trailer, index range and
/// checksum, and every record: payload inside the payload area, uncompressed size equal to the
/// tile's size from the header, stored size at most that (equal when the file is uncompressed).
/// No allocation is larger than the file or a header-capped tile.
#[derive(Clone, Debug)]
pub struct VtIndex {
    desc: VtDesc,
    records: Vec<TileRecord>,
    mip_first: Vec<u64>,
    file_len: u64,
}

impl VtIndex {
    /// Parses the index of a whole file held in memory.
    pub fn from_bytes(file: &[u8]) -> Result<Self, VtError> {
        Self::read(&mut std::io::Cursor::new(file))
    }

    /// Parses the index by reading the header, the trailer and the index from `r`.
    pub fn read<R: Read + Seek>(r: &mut R) -> Result<Self, VtError> {
        let file_len = r.seek(SeekFrom::End(0))?;
        let fixed = HEADER_BYTES + TRAILER_BYTES;
        if file_len < fixed {
            return Err(VtError::Truncated { what: "header and trailer", start: 0, end: fixed, file_len });
        }
        let mut header = [0u8; HEADER_BYTES as usize];
        r.seek(SeekFrom::Start(0))?;
        r.read_exact(&mut header)?;
        let desc = VtDesc::decode_header(&header)?;
        let mut trailer = [0u8; TRAILER_BYTES as usize];
        r.seek(SeekFrom::Start(file_len - TRAILER_BYTES))?;
        r.read_exact(&mut trailer)?;
        let trailer = Trailer::decode(&trailer)?;
        let count = desc.tile_count();
        let expected_bytes = count * RECORD_BYTES;
        if trailer.index_bytes != expected_bytes {
            return Err(VtError::BadHeader {
                field: "index bytes",
                value: trailer.index_bytes,
                reason: "must be 24 bytes per tile of the header's geometry",
            });
        }
        let index_end = file_len - TRAILER_BYTES;
        if trailer.index_offset < HEADER_BYTES
            || trailer.index_offset.checked_add(expected_bytes) != Some(index_end)
        {
            return Err(VtError::Truncated {
                what: "index",
                start: trailer.index_offset,
                end: trailer.index_offset.saturating_add(expected_bytes),
                file_len: index_end,
            });
        }
        let mut index = vec![0u8; expected_bytes as usize];
        r.seek(SeekFrom::Start(trailer.index_offset))?;
        r.read_exact(&mut index)?;
        let computed = xxh64(&index, 0);
        if computed != trailer.index_checksum {
            return Err(VtError::Checksum { what: "index".into(), stored: trailer.index_checksum, computed });
        }
        let mut mip_first = Vec::with_capacity(desc.mip_count as usize);
        let mut first = 0u64;
        for mip in 0..desc.mip_count {
            mip_first.push(first);
            let (tx, ty) = desc.tile_grid(mip);
            first += u64::from(tx) * u64::from(ty);
        }
        let mut records = Vec::with_capacity(count as usize);
        for mip in 0..desc.mip_count {
            let (tx, ty) = desc.tile_grid(mip);
            for y in 0..ty {
                for x in 0..tx {
                    let i = records.len() * RECORD_BYTES as usize;
                    let rec = TileRecord::decode(&index[i..i + RECORD_BYTES as usize]);
                    check_record(&desc, &rec, mip, x, y, trailer.index_offset)?;
                    records.push(rec);
                }
            }
        }
        Ok(Self { desc, records, mip_first, file_len })
    }

    /// The file's desc.
    pub fn desc(&self) -> &VtDesc {
        &self.desc
    }

    /// The file's length in bytes.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Every record, in tile-number order.
    pub fn records(&self) -> &[TileRecord] {
        &self.records
    }

    /// The record of tile (`mip`, `x`, `y`).
    pub fn record(&self, mip: u32, x: u32, y: u32) -> Result<TileRecord, VtError> {
        let (tx, ty) = self.desc.tile_grid(mip);
        if x >= tx || y >= ty {
            return Err(VtError::NoSuchTile {
                mip,
                x,
                y,
                mips: self.desc.mip_count,
                tiles_x: tx,
                tiles_y: ty,
            });
        }
        let n = self.mip_first[mip as usize] + u64::from(y) * u64::from(tx) + u64::from(x);
        Ok(self.records[n as usize])
    }

    /// Turns the stored bytes of tile (`mip`, `x`, `y`) (read from the record's offset) into the
    /// tile's payload: checks the length and checksum, then decompresses to exactly the tile's
    /// size.
    pub fn decode_tile(&self, mip: u32, x: u32, y: u32, stored: &[u8]) -> Result<Vec<u8>, VtError> {
        let rec = self.record(mip, x, y)?;
        if stored.len() as u64 != u64::from(rec.stored_size) {
            return Err(VtError::BadRecord {
                mip,
                x,
                y,
                reason: format!("{} stored bytes given, the record says {}", stored.len(), rec.stored_size),
            });
        }
        let computed = xxh64(stored, 0);
        if computed != rec.checksum {
            return Err(VtError::Checksum {
                what: format!("mip {mip} tile ({x}, {y})"),
                stored: rec.checksum,
                computed,
            });
        }
        if !rec.is_compressed() {
            return Ok(stored.to_vec());
        }
        let expected = rec.uncompressed_size as usize;
        let mut out = vec![0u8; expected];
        match lz4_flex::block::decompress_into(stored, &mut out) {
            Ok(n) if n == expected => Ok(out),
            Ok(n) => Err(VtError::Decompress {
                mip,
                x,
                y,
                expected: expected as u64,
                reason: format!("decompressed to {n} bytes"),
            }),
            Err(e) => {
                Err(VtError::Decompress { mip, x, y, expected: expected as u64, reason: e.to_string() })
            }
        }
    }
}

fn check_record(
    desc: &VtDesc,
    rec: &TileRecord,
    mip: u32,
    x: u32,
    y: u32,
    payload_end: u64,
) -> Result<(), VtError> {
    let bad = |reason: String| Err(VtError::BadRecord { mip, x, y, reason });
    let expected = desc.tile_bytes(mip, x, y).expect("tile in grid");
    if u64::from(rec.uncompressed_size) != expected {
        return bad(format!("uncompressed size {} but the tile has {expected} bytes", rec.uncompressed_size));
    }
    if rec.stored_size > rec.uncompressed_size
        || (desc.compression == Compression::None && rec.stored_size != rec.uncompressed_size)
    {
        return bad(format!("stored size {} for a {expected}-byte tile", rec.stored_size));
    }
    let end = rec.offset.checked_add(u64::from(rec.stored_size));
    if rec.offset < HEADER_BYTES || end.is_none_or(|e| e > payload_end) {
        return bad(format!(
            "payload {}..+{} outside the payload area {HEADER_BYTES}..{payload_end}",
            rec.offset, rec.stored_size
        ));
    }
    Ok(())
}

/// Random access to the tiles of a `.rvt` file through one reader.
#[derive(Debug)]
pub struct VtReader<R: Read + Seek> {
    inner: R,
    index: VtIndex,
}

impl<R: Read + Seek> VtReader<R> {
    /// Reads and checks the header, trailer and index.
    pub fn open(mut inner: R) -> Result<Self, VtError> {
        let index = VtIndex::read(&mut inner)?;
        Ok(Self { inner, index })
    }

    /// The file's desc.
    pub fn desc(&self) -> &VtDesc {
        self.index.desc()
    }

    /// The parsed index (shareable with worker threads).
    pub fn index(&self) -> &VtIndex {
        &self.index
    }

    /// Reads, checks and decompresses tile (`mip`, `x`, `y`).
    pub fn read_tile(&mut self, mip: u32, x: u32, y: u32) -> Result<Vec<u8>, VtError> {
        let rec = self.index.record(mip, x, y)?;
        let mut stored = vec![0u8; rec.stored_size as usize];
        self.inner.seek(SeekFrom::Start(rec.offset))?;
        self.inner.read_exact(&mut stored)?;
        self.index.decode_tile(mip, x, y, &stored)
    }

    /// Gives the reader back.
    pub fn into_inner(self) -> R {
        self.inner
    }
}
