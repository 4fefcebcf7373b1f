//! The `rvt_reader` target: arbitrary bytes as a `.rvt` file. Parsing gives a typed error or an
//! index that agrees with the file, and every tile then reads back at its declared size or gives a
//! typed error. The same bytes are tried a second time with every checksum recomputed, so that
//! mutated fields get past the checksums into the field checks.

use crate::input::Input;
use residency_core::vt_file::{xxh64, VtIndex, VtReader, HEADER_BYTES, RECORD_BYTES, TRAILER_BYTES};
use std::io::Cursor;

/// Tiles decoded per file at most.
const MAX_TILES_READ: usize = 64;

pub(crate) fn run(data: &[u8]) {
    read_file(data);
    if data.len() as u64 >= HEADER_BYTES + TRAILER_BYTES {
        read_file(&with_checksums_fixed(data));
    }
}

fn read_file(file: &[u8]) {
    let index = match VtIndex::from_bytes(file) {
        Ok(index) => index,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let desc = *index.desc();
    assert_eq!(index.file_len(), file.len() as u64);
    assert_eq!(index.records().len() as u64, desc.tile_count());
    let payload_end = file.len() as u64 - TRAILER_BYTES - desc.tile_count() * RECORD_BYTES;
    let mut reader = VtReader::open(Cursor::new(file)).expect("the same bytes open through a reader");
    let mut read = 0;
    'mips: for mip in 0..desc.mip_count {
        let (tx, ty) = desc.tile_grid(mip);
        for y in 0..ty {
            for x in 0..tx {
                if read == MAX_TILES_READ {
                    break 'mips;
                }
                read += 1;
                let rec = index.record(mip, x, y).expect("a tile of the grid has a record");
                let start = rec.offset;
                let end = start + u64::from(rec.stored_size);
                assert!(start >= HEADER_BYTES && end <= payload_end, "{rec:?} outside the payload area");
                let stored = &file[start as usize..end as usize];
                let decoded = index.decode_tile(mip, x, y, stored);
                if let Ok(bytes) = &decoded {
                    assert_eq!(Some(bytes.len() as u64), desc.tile_bytes(mip, x, y));
                }
                let through_reader = reader.read_tile(mip, x, y);
                assert_eq!(
                    format!("{decoded:?}"),
                    format!("{through_reader:?}"),
                    "reader and index disagree"
                );
            }
        }
    }
    let (tx, ty) = desc.tile_grid(0);
    assert!(index.record(0, tx, 0).is_err() && index.record(0, 0, ty).is_err());
    assert!(index.record(desc.mip_count, 0, 0).is_err());
}

/// `file` with the header checksum, every in-bounds record's payload checksum and the index
/// checksum recomputed.
fn with_checksums_fixed(file: &[u8]) -> Vec<u8> {
    let mut f = file.to_vec();
    let sum = xxh64(&f[..56], 0);
    f[56..64].copy_from_slice(&sum.to_le_bytes());
    let len = f.len();
    let trailer_at = len - TRAILER_BYTES as usize;
    let mut t = Input::new(&file[trailer_at..]);
    let (index_offset, index_bytes) = (t.u64(), t.u64());
    let Some(index_end) = index_offset.checked_add(index_bytes).filter(|&e| e <= trailer_at as u64) else {
        return f;
    };
    let (index_offset, index_end) = (index_offset as usize, index_end as usize);
    let records = (index_end - index_offset) / RECORD_BYTES as usize;
    for r in 0..records.min(4096) {
        let at = index_offset + r * RECORD_BYTES as usize;
        let mut rec = Input::new(&f[at..at + RECORD_BYTES as usize]);
        let (offset, stored) = (rec.u64(), u64::from(rec.u32()));
        if let Some(end) = offset.checked_add(stored).filter(|&e| e <= len as u64) {
            let sum = xxh64(&f[offset as usize..end as usize], 0);
            f[at + 16..at + 24].copy_from_slice(&sum.to_le_bytes());
        }
    }
    let sum = xxh64(&f[index_offset..index_end], 0);
    f[trailer_at + 16..trailer_at + 24].copy_from_slice(&sum.to_le_bytes());
    f
}
