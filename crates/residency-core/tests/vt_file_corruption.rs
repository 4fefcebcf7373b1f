//! Fuzz-style corruption of valid `.rvt` files: bit flips, truncation, overwritten and inserted
//! bytes never panic, and every tile either fails with a typed error or reads back exactly.

use proptest::prelude::*;
use residency_core::format::Format;
use residency_core::vt_file::{Compression, VtDesc, VtError, VtReader, VtWriter};
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
    for compression in [Compression::None, Compression::Lz4] {
        let (desc, file) = tiny_file(compression);
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
        assert_eq!(harmless, 0, "{compression:?}: {harmless} flips went unnoticed");
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
