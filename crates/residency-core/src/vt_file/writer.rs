//! Writing a `.rvt` file as its tiles are produced: header first, payloads in any order, the
//! index and trailer at the end. Needs only [`Write`], so it can stream to a pipe.

use super::error::VtError;
use super::hash::xxh64;
use super::header::{Compression, TileRecord, Trailer, VtDesc, HEADER_BYTES, RECORD_BYTES};
use std::collections::BTreeMap;
use std::io::Write;

/// Writes a `.rvt` file tile by tile. Every tile must be written exactly once, in any order, before
/// [`finish`](Self::finish).
///
/// The writer keeps one index record per tile *written* (24 bytes each, plus the map's overhead),
/// never one per tile the header declares: a valid desc may declare up to 2^32 − 1 tiles (a
/// 2^20 × 2^20 image in 32 × 32 tiles is about 1.4 billion), and reserving them all up front asked
/// for tens of GB before the first tile (found while fuzzing, issue #11).
#[derive(Debug)]
pub struct VtWriter<W: Write> {
    out: W,
    desc: VtDesc,
    /// Tiles in the file (from the desc).
    tile_count: u64,
    position: u64,
    /// The records of the tiles written so far, by dense tile number.
    records: BTreeMap<u64, TileRecord>,
    stored_bytes: u64,
}

impl<W: Write> VtWriter<W> {
    /// Validates `desc` and writes the header.
    pub fn new(mut out: W, desc: VtDesc) -> Result<Self, VtError> {
        desc.validate()?;
        out.write_all(&desc.encode_header())?;
        Ok(Self {
            out,
            tile_count: desc.tile_count(),
            desc,
            position: HEADER_BYTES,
            records: BTreeMap::new(),
            stored_bytes: 0,
        })
    }

    /// The file's desc.
    pub fn desc(&self) -> &VtDesc {
        &self.desc
    }

    /// Tiles written so far.
    pub fn tiles_written(&self) -> u64 {
        self.records.len() as u64
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
        if self.records.contains_key(&number) {
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
        self.records.insert(number, record);
        Ok(record)
    }

    /// Writes the index and the trailer and returns the writer. Fails with
    /// [`VtError::MissingTiles`] (writing nothing more) when some tile was never written.
    pub fn finish(mut self) -> Result<W, VtError> {
        let missing = self.tile_count - self.records.len() as u64;
        if missing > 0 {
            // The first number the (sorted) records skip, or the one after the last.
            let first = (0u64..)
                .zip(self.records.keys())
                .find(|&(i, &n)| i != n)
                .map_or(self.records.len() as u64, |(i, _)| i);
            let (mip, x, y) = self.locate(first);
            return Err(VtError::MissingTiles { missing, mip, x, y });
        }
        // Every tile is written, so the index is as large as the payloads' records already are.
        let mut index = Vec::with_capacity(self.records.len() * RECORD_BYTES as usize);
        for record in self.records.values() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;
    use crate::vt_file::VtReader;

    /// The largest image side a file may declare in 32 × 32 tiles: 2^30 tiles in mip 0 alone,
    /// a valid desc (the cap is 2^32 − 1 tiles).
    fn huge_desc() -> VtDesc {
        let desc = VtDesc::new(Format::R8Unorm, 1 << 20, 1 << 20, 32, 32).with_mip_count(1);
        desc.validate().expect("a valid desc");
        desc
    }

    #[test]
    fn a_desc_of_a_billion_tiles_reserves_nothing_before_its_tiles_are_written() {
        let desc = huge_desc();
        assert_eq!(desc.tile_count(), 1 << 30);
        // One slot per declared tile was 2^30 × 32 bytes = 32 GiB here, before any tile.
        let mut writer = VtWriter::new(Vec::new(), desc).expect("the header is written");
        let tile = vec![7u8; desc.tile_bytes(0, 5, 0).expect("tile exists") as usize];
        writer.write_tile(0, 5, 0, &tile).expect("a tile is written");
        writer.write_tile(0, 0, 0, &tile).expect("a tile is written");
        assert_eq!(writer.tiles_written(), 2);
        assert!(matches!(
            writer.write_tile(0, 5, 0, &tile),
            Err(VtError::DuplicateTile { mip: 0, x: 5, y: 0 })
        ));
        // Tile 1 is the first missing one; all but two are.
        match writer.finish() {
            Err(VtError::MissingTiles { missing, mip, x, y }) => {
                assert_eq!((missing, mip, x, y), ((1 << 30) - 2, 0, 1, 0));
            }
            other => panic!("expected MissingTiles, got {other:?}"),
        }
    }

    #[test]
    fn tiles_written_in_any_order_are_indexed_in_tile_order() {
        let desc = VtDesc::new(Format::R8Unorm, 64, 32, 16, 16).with_mip_count(2);
        let count = desc.tile_count();
        assert_eq!(count, 8 + 2);
        let mut tiles = Vec::new();
        for mip in 0..desc.mip_count {
            let (tx, ty) = desc.tile_grid(mip);
            for y in 0..ty {
                for x in 0..tx {
                    tiles.push((mip, x, y));
                }
            }
        }
        let mut writer = VtWriter::new(Vec::new(), desc).expect("valid");
        // Last tile first, then the others backwards but one, which is missing at first.
        for &(mip, x, y) in tiles.iter().rev().filter(|&&t| t != (0, 2, 1)) {
            let n = desc.tile_number(mip, x, y).expect("exists") as u8;
            let data = vec![n; desc.tile_bytes(mip, x, y).expect("exists") as usize];
            writer.write_tile(mip, x, y, &data).expect("written");
        }
        assert_eq!(writer.tiles_written(), count - 1);
        let n = desc.tile_number(0, 2, 1).expect("exists") as u8;
        let data = vec![n; desc.tile_bytes(0, 2, 1).expect("exists") as usize];
        writer.write_tile(0, 2, 1, &data).expect("written");
        let file = writer.finish().expect("every tile written");
        let mut reader = VtReader::open(std::io::Cursor::new(file)).expect("a valid file");
        for &(mip, x, y) in &tiles {
            let n = desc.tile_number(mip, x, y).expect("exists") as u8;
            let tile = reader.read_tile(mip, x, y).expect("a tile");
            assert!(tile.iter().all(|&b| b == n), "tile ({mip}, {x}, {y})");
        }
    }
}
