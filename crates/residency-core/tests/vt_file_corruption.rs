//! Fuzz-style corruption of valid `.rvt` files: bit flips, truncation, overwritten and inserted
//! bytes never panic, and every tile either fails with a typed error or reads back exactly.

use proptest::prelude::*;
use residency_core::format::Format;
use residency_core::vt_file::{xxh64, Compression, VtDesc, VtError, VtReader, VtWriter};
use std::io::Cursor;

fn tile(desc: &VtDesc, mip: u32, x: u32, y: u32) -> Vec<u8> {
    let n = desc.tile_bytes(mip, x, y).unwrap() as usize;
    (0..n).map(|i| if (x + y) % 2 == 0 { (i / 7) as u8 } else { (i * 31 + mip as usize) as u8 }).collect()
}

fn tiles(desc: &VtDesc) -> Vec<(u32, u32, u32)> {
    (0..desc.mip_count)
        .flat_map(|m| {
            let (tx, ty) = desc.tile_grid(m);
            (0..ty).flat_map(move |y| (0..tx).map(move |x| (m, x, y)))
        })
        .collect()
}

fn valid_file(compression: Compression) -> (VtDesc, Vec<u8>) {
    write(VtDesc::new(Format::R8G8B8A8Unorm, 48, 40, 16, 16).with_border(1).with_compression(compression))
}

/// A file small enough to flip every one of its bits.
fn tiny_file(compression: Compression) -> (VtDesc, Vec<u8>) {
    write(VtDesc::new(Format::R8Unorm, 20, 18, 16, 16).with_mip_count(3).with_compression(compression))
}

/// A small BC7 file: 24 × 20 texels in 16 × 16 tiles (edge tiles of 2 and 1 block columns), mips
/// down to 1 × 1 (one block each).
fn tiny_bc_file(compression: Compression) -> (VtDesc, Vec<u8>) {
    write(VtDesc::new(Format::Bc7Unorm, 24, 20, 16, 16).with_compression(compression))
}

/// `file` with header byte `at` set to `value` and the header checksum recomputed, so that the
/// field itself is what the reader judges.
fn edit_header(file: &[u8], edits: &[(usize, u8)]) -> Vec<u8> {
    let mut f = file.to_vec();
    for &(at, value) in edits {
        f[at] = value;
    }
    let sum = xxh64(&f[..56], 0);
    f[56..64].copy_from_slice(&sum.to_le_bytes());
    f
}

fn write(desc: VtDesc) -> (VtDesc, Vec<u8>) {
    let mut w = VtWriter::new(Vec::new(), desc).unwrap();
    for (m, x, y) in tiles(&desc) {
        w.write_tile(m, x, y, &tile(&desc, m, x, y)).unwrap();
    }
    (desc, w.finish().unwrap())
}

#[derive(Clone, Debug)]
enum Damage {
    Flip { at: usize, bit: u8 },
    Truncate { len: usize },
    Overwrite { at: usize, bytes: Vec<u8> },
    Insert { at: usize, bytes: Vec<u8> },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Damage::Flip { at, bit }),
        any::<usize>().prop_map(|len| Damage::Truncate { len }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Damage::Overwrite { at, bytes }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Damage::Insert { at, bytes }),
    ]
}

fn apply(file: &mut Vec<u8>, d: &Damage) {
    let n = file.len();
    if n == 0 {
        // An earlier damage truncated the file to nothing; there is nothing left to damage.
        return;
    }
    match d {
        Damage::Flip { at, bit } => file[at % n] ^= 1 << bit,
        Damage::Truncate { len } => file.truncate(len % n),
        Damage::Overwrite { at, bytes } => {
            for (i, b) in bytes.iter().enumerate() {
                if let Some(slot) = file.get_mut(at % n + i) {
                    *slot = *b;
                }
            }
        }
        Damage::Insert { at, bytes } => {
            let at = at % (n + 1);
            file.splice(at..at, bytes.iter().copied());
        }
    }
}

/// Opens and reads every tile: each is an error or exactly the original.
fn check(desc: &VtDesc, file: &[u8]) -> (usize, usize) {
    let (mut ok, mut detected) = (0, 0);
    let mut r = match VtReader::open(Cursor::new(file)) {
        Ok(r) => r,
        Err(_) => return (0, 1),
    };
    assert_eq!(r.desc(), desc, "a file that opens has the original header");
    for (m, x, y) in tiles(desc) {
        match r.read_tile(m, x, y) {
            Ok(data) => {
                assert_eq!(data, tile(desc, m, x, y), "mip {m} tile ({x}, {y}) read back wrong");
                ok += 1;
            }
            Err(_) => detected += 1,
        }
    }
    (ok, detected)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn corruption_is_detected_or_harmless(lz4 in any::<bool>(), damages in prop::collection::vec(damage(), 1..4)) {
        let (desc, mut file) = valid_file(if lz4 { Compression::Lz4 } else { Compression::None });
        for d in &damages {
            apply(&mut file, d);
        }
        check(&desc, &file);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = VtReader::open(Cursor::new(&bytes));
    }

    #[test]
    fn random_bytes_behind_a_valid_header_never_panic(tail in prop::collection::vec(any::<u8>(), 0..600)) {
        let (_, file) = valid_file(Compression::Lz4);
        let mut f = file[..64].to_vec();
        f.extend_from_slice(&tail);
        let _ = VtReader::open(Cursor::new(&f));
    }
}

#[test]
fn every_single_bit_flip_is_detected() {
    for (compression, bc) in [
        (Compression::None, false),
        (Compression::Lz4, false),
        (Compression::None, true),
        (Compression::Lz4, true),
    ] {
        let (desc, file) = if bc { tiny_bc_file(compression) } else { tiny_file(compression) };
        let mut harmless = 0;
        for at in 0..file.len() {
            for bit in 0..8 {
                let mut f = file.clone();
                f[at] ^= 1 << bit;
                let (_, detected) = check(&desc, &f);
                if detected == 0 {
                    harmless += 1;
                }
            }
        }
        // Header (reserved bytes included), payloads, index and trailer are all covered by a
        // checksum or a magic, so no flip may go unnoticed.
        assert_eq!(harmless, 0, "{compression:?} (BC7: {bc}): {harmless} flips went unnoticed");
    }
}

#[test]
fn every_truncation_is_detected() {
    let (desc, file) = valid_file(Compression::Lz4);
    for len in 0..file.len() {
        assert_eq!(check(&desc, &file[..len]), (0, 1), "truncated to {len}");
    }
}

#[test]
fn typed_errors_for_each_fixed_part() {
    let (_, file) = valid_file(Compression::Lz4);
    let open = |f: &[u8]| VtReader::open(Cursor::new(f.to_vec())).map(|_| ());
    let mut f = file.clone();
    f[0] = b'X';
    assert!(matches!(open(&f), Err(VtError::BadMagic)));
    let mut f = file.clone();
    f[8] = 2;
    assert!(matches!(open(&f), Err(VtError::UnsupportedVersion { found: 2, supported: 1 })));
    let mut f = file.clone();
    f[20] ^= 1;
    assert!(matches!(open(&f), Err(VtError::Checksum { .. })));
    let mut f = file.clone();
    let n = f.len();
    f[n - 1] ^= 1;
    assert!(matches!(open(&f), Err(VtError::BadTrailer)));
    assert!(matches!(open(&file[..50]), Err(VtError::Truncated { .. })));
    let mut f = file.clone();
    f[70] ^= 0x10;
    let mut r = VtReader::open(Cursor::new(f)).unwrap();
    assert!(matches!(r.read_tile(0, 0, 0), Err(VtError::Checksum { .. }) | Err(VtError::Decompress { .. })));
}

/// A damage after a truncation to nothing (proptest found `Truncate` to a multiple of the length,
/// then `Flip`): the harness divided by the empty file's length.
#[test]
fn damage_after_a_truncation_to_nothing() {
    let (desc, mut file) = valid_file(Compression::Lz4);
    let len = file.len();
    apply(&mut file, &Damage::Truncate { len });
    apply(&mut file, &Damage::Flip { at: 0, bit: 0 });
    assert!(file.is_empty());
    assert_eq!(check(&desc, &file), (0, 1));
}

#[test]
fn a_bc_header_that_disagrees_with_its_format_is_a_typed_error() {
    let (desc, file) = tiny_bc_file(Compression::Lz4);
    assert_eq!(check(&desc, &file), (desc.tile_count() as usize, 0));
    let open = |f: &[u8]| VtReader::open(Cursor::new(f.to_vec())).map(|_| ());
    // Format code 24 (BC7) turned into 18 (BC1, 8-byte blocks): the block bytes (16) disagree.
    assert_eq!(file[12], 24);
    let err = open(&edit_header(&file, &[(12, 18)])).unwrap_err();
    assert!(matches!(err, VtError::BadHeader { field: "block info", .. }), "{err}");
    // Block extent 4 × 4 claimed as 8 × 4, or block bytes as 8.
    let err = open(&edit_header(&file, &[(36, 8)])).unwrap_err();
    assert!(matches!(err, VtError::BadHeader { field: "block info", .. }), "{err}");
    let err = open(&edit_header(&file, &[(38, 8)])).unwrap_err();
    assert!(matches!(err, VtError::BadHeader { field: "block info", .. }), "{err}");
    // An unknown code, and a tile side that is not whole blocks (17).
    let err = open(&edit_header(&file, &[(12, 200)])).unwrap_err();
    assert!(matches!(err, VtError::UnknownFormat(200)), "{err}");
    let err = open(&edit_header(&file, &[(28, 17)])).unwrap_err();
    assert!(matches!(err, VtError::BadHeader { field: "tile_width", .. }), "{err}");
    // A tail tile's record claiming a texel's worth of bytes instead of one block: the index
    // checksum is recomputed, so the record check itself refuses it.
    let mut f = file.clone();
    let n = f.len();
    let index_at = u64::from_le_bytes(f[n - 32..n - 24].try_into().unwrap()) as usize;
    let last = index_at + (desc.tile_count() as usize - 1) * 24;
    assert_eq!(u32::from_le_bytes(f[last + 12..last + 16].try_into().unwrap()), 16, "1 × 1: one block");
    f[last + 12..last + 16].copy_from_slice(&4u32.to_le_bytes());
    let sum = xxh64(&f[index_at..n - 32], 0);
    f[n - 16..n - 8].copy_from_slice(&sum.to_le_bytes());
    let err = open(&f).unwrap_err();
    assert!(matches!(err, VtError::BadRecord { mip: 4, x: 0, y: 0, .. }), "{err}");
}
