//! `.rvt` round trips: random images written in random tile order read back exactly; typed errors
//! for misuse of the writer and for bad requests to the reader.

use proptest::prelude::*;
use residency_core::format::Format;
use residency_core::vt_file::{Compression, VtDesc, VtError, VtIndex, VtReader, VtWriter, HEADER_BYTES};
use std::io::Cursor;

/// Deterministic tile contents: half the tiles compressible (runs), half noise.
fn tile_data(desc: &VtDesc, mip: u32, x: u32, y: u32, seed: u64) -> Vec<u8> {
    let n = desc.tile_bytes(mip, x, y).unwrap() as usize;
    let mut s = seed ^ (u64::from(mip) << 40) ^ (u64::from(y) << 20) ^ u64::from(x);
    let noisy = (x + y + mip) % 2 == 0;
    (0..n)
        .map(|i| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if noisy {
                (s >> 56) as u8
            } else {
                (i / 64) as u8 ^ mip as u8
            }
        })
        .collect()
}

fn all_tiles(desc: &VtDesc) -> Vec<(u32, u32, u32)> {
    let mut v = Vec::new();
    for mip in 0..desc.mip_count {
        let (tx, ty) = desc.tile_grid(mip);
        for y in 0..ty {
            for x in 0..tx {
                v.push((mip, x, y));
            }
        }
    }
    v
}

/// Writes `desc` with tiles in the order given by `order` (a permutation seed).
pub fn write_file(desc: VtDesc, seed: u64, shuffle: u64) -> Vec<u8> {
    let mut tiles = all_tiles(&desc);
    let mut s = shuffle;
    for i in (1..tiles.len()).rev() {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
        tiles.swap(i, (s >> 33) as usize % (i + 1));
    }
    let mut w = VtWriter::new(Vec::new(), desc).unwrap();
    for (mip, x, y) in tiles {
        w.write_tile(mip, x, y, &tile_data(&desc, mip, x, y, seed)).unwrap();
    }
    w.finish().unwrap()
}

fn formats() -> impl Strategy<Value = Format> {
    prop::sample::select(vec![
        Format::R8Unorm,
        Format::R8G8B8A8Unorm,
        Format::R16G16B16A16Float,
        Format::Bc1Unorm,
        Format::Bc7Unorm,
    ])
}

prop_compose! {
    fn descs()(format in formats(), w in 1u32..300, h in 1u32..300, tw in 1u32..5, th in 1u32..5,
               border in 0u32..3, lz4 in any::<bool>(), mips in 1u32..10) -> VtDesc {
        let (bw, bh) = format.block_extent();
        VtDesc::new(format, w, h, tw * 16, th * 16)
            .with_mip_count(mips)
            .with_border(border * bw.max(bh))
            .with_compression(if lz4 { Compression::Lz4 } else { Compression::None })
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_images_round_trip(desc in descs(), seed in any::<u64>(), shuffle in any::<u64>()) {
        let file = write_file(desc, seed, shuffle);
        let mut r = VtReader::open(Cursor::new(&file)).unwrap();
        prop_assert_eq!(*r.desc(), desc);
        for (mip, x, y) in all_tiles(&desc) {
            prop_assert_eq!(r.read_tile(mip, x, y).unwrap(), tile_data(&desc, mip, x, y, seed));
        }
        let (tx, ty) = desc.tile_grid(0);
        prop_assert!(matches!(r.read_tile(0, tx, 0), Err(VtError::NoSuchTile { .. })), "expected NoSuchTile");
        prop_assert!(matches!(r.read_tile(0, 0, ty), Err(VtError::NoSuchTile { .. })), "expected NoSuchTile");
        prop_assert!(matches!(r.read_tile(desc.mip_count, 0, 0), Err(VtError::NoSuchTile { .. })), "expected NoSuchTile");
    }
}

#[test]
fn compressible_tiles_are_stored_smaller_and_noise_raw() {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, 256, 256, 128, 128);
    let file = write_file(desc, 7, 0);
    let index = VtIndex::from_bytes(&file).unwrap();
    let mut compressed = 0;
    let mut raw = 0;
    for rec in index.records() {
        if rec.is_compressed() {
            compressed += 1;
        } else {
            assert_eq!(rec.stored_size, rec.uncompressed_size);
            raw += 1;
        }
    }
    assert!(compressed > 0 && raw > 0, "compressed {compressed}, raw {raw}");
}

#[test]
fn geometry_of_a_16k_bc7_file_with_borders() {
    // 16k × 16k BC7 with the 64 KiB sparse tile shape (256 × 256 texels) and 4-texel borders.
    let desc = VtDesc::new(Format::Bc7Unorm, 16384, 16384, 256, 256).with_border(4);
    desc.validate().unwrap();
    assert_eq!(desc.mip_count, 15);
    assert_eq!(desc.tile_grid(0), (64, 64));
    assert_eq!(desc.tile_grid(6), (1, 1));
    assert_eq!(desc.tile_bytes(0, 0, 0), Some(66 * 66 * 16));
    assert_eq!(desc.tile_extent(14, 0, 0), Some((1, 1)));
    assert_eq!(desc.tile_bytes(14, 0, 0), Some(3 * 3 * 16));
    assert_eq!(desc.tile_count(), 4096 + 1024 + 256 + 64 + 16 + 4 + 9);
}

#[test]
fn writer_misuse_is_a_typed_error() {
    let desc = VtDesc::new(Format::R8Unorm, 40, 20, 16, 16);
    let mut w = VtWriter::new(Vec::new(), desc).unwrap();
    assert!(matches!(
        w.write_tile(0, 0, 0, &[0; 3]),
        Err(VtError::WrongTileSize { expected: 256, got: 3, .. })
    ));
    assert!(matches!(
        w.write_tile(0, 3, 0, &[0; 256]),
        Err(VtError::NoSuchTile { tiles_x: 3, tiles_y: 2, .. })
    ));
    w.write_tile(0, 0, 0, &[1; 256]).unwrap();
    assert!(matches!(w.write_tile(0, 0, 0, &[1; 256]), Err(VtError::DuplicateTile { .. })));
    assert!(matches!(w.finish(), Err(VtError::MissingTiles { mip: 0, x: 1, y: 0, .. })));

    let bad = VtDesc::new(Format::Bc1Unorm, 64, 64, 6, 8);
    assert!(matches!(VtWriter::new(Vec::new(), bad), Err(VtError::BadHeader { field: "tile_width", .. })));
    let depth = VtDesc::new(Format::D32Float, 64, 64, 16, 16);
    assert!(matches!(VtWriter::new(Vec::new(), depth), Err(VtError::UnsupportedFormat(_))));
    let huge = VtDesc::new(Format::R32G32B32A32Float, 4096, 4096, 1024, 1024);
    assert!(matches!(VtWriter::new(Vec::new(), huge), Err(VtError::BadHeader { field: "tile size", .. })));
}

#[test]
fn header_is_64_bytes_and_starts_with_the_magic() {
    let desc = VtDesc::new(Format::R8Unorm, 16, 16, 16, 16);
    let file = write_file(desc, 1, 1);
    assert_eq!(&file[..8], b"RVT\0\r\n\x1a\n");
    assert_eq!(&file[file.len() - 8..], b"RVTINDEX");
    // 5 mips of one tile each: 256 + 64 + 16 + 4 + 1 payload bytes at most, 24-byte records.
    assert!(file.len() as u64 <= HEADER_BYTES + 341 + 5 * 24 + 32);
}

#[test]
fn standard_descs_use_each_formats_64_kib_sparse_tile() {
    for (format, tile) in [
        (Format::R8G8B8A8Unorm, (128, 128)),
        (Format::R8Unorm, (256, 256)),
        (Format::R16G16B16A16Float, (128, 64)),
        (Format::Bc1Unorm, (512, 256)),
        (Format::Bc3Unorm, (256, 256)),
        (Format::Bc7Unorm, (256, 256)),
        (Format::Bc7Srgb, (256, 256)),
    ] {
        let desc = VtDesc::standard(format, 1024, 512).unwrap();
        assert_eq!((desc.tile_width, desc.tile_height), tile, "{format:?}");
        assert_eq!(desc.max_tile_bytes(), 64 << 10, "{format:?}: one sparse block a tile");
        assert_eq!((desc.mip_count, desc.border, desc.compression), (11, 0, Compression::Lz4));
        desc.validate().unwrap();
    }
    assert!(matches!(
        VtDesc::standard(Format::D32Float, 64, 64),
        Err(VtError::UnsupportedFormat(Format::D32Float))
    ));
}

#[test]
fn bc_files_round_trip_with_every_mip_down_to_one_block() {
    // A non-power-of-two BC7 and BC1 image in their standard tiles: mips 300×200 … 1×1, the edge
    // tiles clipped to whole blocks (a 2-texel-wide edge is one block column), the last mips one
    // block each.
    for format in [Format::Bc7Unorm, Format::Bc1Unorm, Format::Bc3Unorm] {
        let desc = VtDesc::standard(format, 600, 300).unwrap().with_mip_count(10);
        assert_eq!(desc.mip_extent(9), (1, 1));
        let block = u64::from(format.block_bytes());
        assert_eq!(desc.tile_bytes(9, 0, 0), Some(block));
        assert_eq!(desc.tile_bytes(8, 0, 0), Some(block), "2 × 1 texels");
        let (w, h) = desc.mip_extent(0);
        let (tx, ty) = desc.tile_grid(0);
        let (ew, eh) = desc.tile_extent(0, tx - 1, ty - 1).unwrap();
        assert_eq!((ew, eh), (w - (tx - 1) * desc.tile_width, h - (ty - 1) * desc.tile_height));
        assert_eq!(
            desc.tile_bytes(0, tx - 1, ty - 1),
            Some(u64::from(ew.div_ceil(4) * eh.div_ceil(4)) * block)
        );
        let file = write_file(desc, 11, 5);
        let mut r = VtReader::open(Cursor::new(&file)).unwrap();
        assert_eq!(*r.desc(), desc);
        for (mip, x, y) in all_tiles(&desc) {
            assert_eq!(
                r.read_tile(mip, x, y).unwrap(),
                tile_data(&desc, mip, x, y, 11),
                "{format:?} {mip} {x} {y}"
            );
        }
    }
}
