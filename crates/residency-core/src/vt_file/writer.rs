//! Writing a `.rvt` file as its tiles are produced: header first, payloads in any order, the
//! index and trailer at the end. Needs only [`Write`], so it can stream to a pipe.

use super::error::VtError;
use super::hash::xxh64;
use super::header::{Compression, TileRecord, Trailer, VtDesc, HEADER_BYTES, RECORD_BYTES};
use std::io::Write;

/// Writes a `.rvt` file tile by tile. Every tile must be written exactly once, in any order, before
/// [`finish`](Self::finish).
#[derive(Debug)]
pub struct VtWriter<W: Write> {
    out: W,
    desc: VtDesc,
    position: u64,
    records: Vec<Option<TileRecord>>,
    written: u64,
    stored_bytes: u64,
}

impl<W: Write> VtWriter<W> {
    /// Validates `desc` and writes the header.
    pub fn new(mut out: W, desc: VtDesc) -> Result<Self, VtError> {
        desc.validate()?;
        out.write_all(&desc.encode_header())?;
        let count = desc.tile_count() as usize;
        Ok(Self {
            out,
            desc,
            position: HEADER_BYTES,
            records: vec![None; count],
            written: 0,
            stored_bytes: 0,
        })
    }

    /// The file's desc.
    pub fn desc(&self) -> &VtDesc {
        &self.desc
    }

    /// Tiles written so far.
    pub fn tiles_written(&self) -> u64 {
        self.written
    }

    /// Payload bytes written so far (after compression).
    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }

    /// Writes tile (`mip`, `x`, `y`): `data` must be exactly
    /// [`VtDesc::tile_bytes`] long. Compresses it when the file is LZ4 and that makes it smaller.
    pub fn write_tile(&mut self, mip: u32, x: u32, y: u32, data: &[u8]) -> Result<TileRecord, VtError> {
        let number = self.desc.tile_number(mip, x, y).ok_or_else(|| {
            let (tiles_x, tiles_y) = self.desc.tile_grid(mip);
            VtError::NoSuchTile { mip, x, y, mips: self.desc.mip_count, tiles_x, tiles_y }
        })?;
        let expected = self.desc.tile_bytes(mip, x, y).expect("tile exists");
        if data.len() as u64 != expected {
            return Err(VtError::WrongTileSize { mip, x, y, expected, got: data.len() as u64 });
        }
        if self.records[number as usize].is_some() {
            return Err(VtError::DuplicateTile { mip, x, y });
        }
        let compressed;
        let stored: &[u8] = match self.desc.compression {
            Compression::Lz4 => {
                compressed = lz4_flex::block::compress(data);
                if compressed.len() < data.len() {
                    &compressed
                } else {
                    data
                }
            }
            Compression::None => data,
        };
        self.out.write_all(stored)?;
        let record = TileRecord {
            offset: self.position,
            stored_size: stored.len() as u32,
            uncompressed_size: data.len() as u32,
            checksum: xxh64(stored, 0),
        };
        self.position += stored.len() as u64;
        self.stored_bytes += stored.len() as u64;
        self.records[number as usize] = Some(record);
        self.written += 1;
        Ok(record)
    }

    /// Writes the index and the trailer and returns the writer. Fails with
    /// [`VtError::MissingTiles`] (writing nothing more) when some tile was never written.
    pub fn finish(mut self) -> Result<W, VtError> {
        let missing = self.records.len() as u64 - self.written;
        if missing > 0 {
            let first = self.records.iter().position(Option::is_none).expect("a tile is missing") as u64;
            let (mip, x, y) = self.locate(first);
            return Err(VtError::MissingTiles { missing, mip, x, y });
        }
        let mut index = Vec::with_capacity(self.records.len() * RECORD_BYTES as usize);
        for record in self.records.iter().flatten() {
            record.encode(&mut index);
        }
        let trailer = Trailer {
            index_offset: self.position,
            index_bytes: index.len() as u64,
            index_checksum: xxh64(&index, 0),
        };
        self.out.write_all(&index)?;
        self.out.write_all(&trailer.encode())?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn locate(&self, mut number: u64) -> (u32, u32, u32) {
        for mip in 0..self.desc.mip_count {
            let (tx, ty) = self.desc.tile_grid(mip);
            let n = u64::from(tx) * u64::from(ty);
            if number < n {
                return (mip, (number % u64::from(tx)) as u32, (number / u64::from(tx)) as u32);
            }
            number -= n;
        }
        (self.desc.mip_count, 0, 0)
    }
}
