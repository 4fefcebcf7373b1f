//! Feedback: record bit layout, a synthetic view that touches known tiles decodes to exactly those
//! requests, overflow recovery from the bitsets, typed decode errors, the ring and sampling.

use proptest::prelude::*;
use residency_core::format::Format;
use residency_core::streaming::{
    classify_sample, FeedbackBuffer, FeedbackDesc, FeedbackError, FeedbackLayout, FeedbackRecord,
    FeedbackRing, FeedbackSampling, RequestKind, IMAGE_ENTRY_WORDS,
};
use residency_core::tiles::{
    ImageId, LayoutLimits, SparseDimension, SparseFormatInfo, SparseImageDesc, SparseImageLayout, TileCoord,
    TileIndex, MIN_LOD_NONE,
};
use std::collections::BTreeMap;

fn layout(w: u32, h: u32) -> SparseImageLayout {
    let info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, SparseDimension::D2).unwrap();
    SparseImageLayout::new(
        &SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, w, h),
        &info,
        &LayoutLimits::unbounded(),
    )
    .unwrap()
}

#[test]
fn record_bit_layout_is_exact() {
    let r = FeedbackRecord {
        image_slot: 0xBEEF,
        tile: TileIndex(0x1234_5678),
        mip: 13,
        kind: RequestKind::LodWarning,
    };
    assert_eq!(r.encode(), [0x1234_5678, 0xBEEF | (13 << 16) | (1 << 21)]);
    assert_eq!(FeedbackRecord::decode(r.encode()), Some(r));
    assert_eq!(
        FeedbackRecord::decode([7, 2 << 21 | 3 << 16]).map(|r| (r.kind, r.warning_level())),
        Some((RequestKind::MinLodWarning, Some(3))),
        "kind 2 is the low-water warning, its mip the level that warned"
    );
    assert_eq!(FeedbackRecord::decode([0, 3 << 21]), None, "kind 3 is reserved");
    assert_eq!(FeedbackRecord::decode([0, 1 << 23]), None, "bits 23.. are reserved");
}

proptest! {
    #[test]
    fn records_round_trip(slot in any::<u16>(), tile in any::<u32>(), mip in 0u8..32, warn in any::<bool>()) {
        let kind = if warn { RequestKind::LodWarning } else { RequestKind::Miss };
        let kind = if mip % 5 == 4 { RequestKind::MinLodWarning } else { kind };
        let r = FeedbackRecord { image_slot: slot, tile: TileIndex(tile), mip, kind };
        prop_assert_eq!(FeedbackRecord::decode(r.encode()), Some(r));
    }
}

/// A synthetic view: a `side × side` screen showing texture rectangle `uv0..uv1` of image slot 0
/// at constant LOD `lod`, nothing resident. Returns the buffer and, per tile, the pixels that
/// fell on it (computed independently of the layout code: texel arithmetic on the 128-texel
/// RGBA8 tile).
fn synthetic_view(
    fl: &FeedbackLayout,
    l: &SparseImageLayout,
    side: u32,
    uv0: [f32; 2],
    uv1: [f32; 2],
    lod: f32,
    frame: u64,
) -> (FeedbackBuffer, BTreeMap<TileIndex, u32>) {
    let mut buf = FeedbackBuffer::new(fl, frame);
    let mut expect = BTreeMap::new();
    let img = &fl.images()[0];
    let mip = lod as u32;
    let extent = l.mip(mip).unwrap().extent;
    for y in 0..side {
        for x in 0..side {
            let uv = [
                uv0[0] + (uv1[0] - uv0[0]) * (x as f32 + 0.5) / side as f32,
                uv0[1] + (uv1[1] - uv0[1]) * (y as f32 + 0.5) / side as f32,
            ];
            let (tile, kind) =
                classify_sample(img, 0, [uv[0], uv[1], 0.0], lod, MIN_LOD_NONE).expect("a miss");
            assert_eq!(kind, RequestKind::Miss);
            buf.record(fl, 0, tile, kind);
            let tx = ((uv[0] * extent[0] as f32) as u32).min(extent[0] - 1) / 128;
            let ty = ((uv[1] * extent[1] as f32) as u32).min(extent[1] - 1) / 128;
            let t = l.tile_index(TileCoord { layer: 0, mip, x: tx, y: ty, z: 0 }).unwrap();
            *expect.entry(t).or_insert(0) += 1;
        }
    }
    (buf, expect)
}

#[test]
fn a_known_view_requests_exactly_its_tiles_with_pixel_counts() {
    let l = layout(4096, 4096);
    let fl = FeedbackLayout::new(FeedbackDesc::default(), &[(ImageId(7), &l)]).unwrap();
    // Mip 1 is 2048² = 16 × 16 tiles; texels 0.25..0.5 of it are tiles 4..8 on both axes.
    let (buf, expect) = synthetic_view(&fl, &l, 64, [0.25, 0.25], [0.5, 0.5], 1.5, 42);
    assert_eq!(expect.len(), 16);
    let decoded = fl.decode(&buf.bytes(), 42).unwrap();
    assert!(!decoded.overflowed);
    assert_eq!(decoded.records, 16);
    let got: BTreeMap<TileIndex, u32> = decoded
        .requests
        .iter()
        .map(|r| {
            assert_eq!((r.image, r.mip, r.kind), (ImageId(7), 1, RequestKind::Miss));
            (r.tile, r.pixels)
        })
        .collect();
    assert_eq!(got, expect);
    assert_eq!(got.values().sum::<u32>(), 64 * 64);
}

/// Decoding through a reader reads one counter per request, only the touched image's bitsets
/// and nothing of the images no pixel asked for, and gives what decoding the whole buffer gives.
#[test]
fn decoding_reads_only_what_the_frame_wrote() {
    let l = layout(4096, 4096);
    let quiet: Vec<(ImageId, &SparseImageLayout)> = (100..1124).map(|i| (ImageId(i), &l)).collect();
    let mut images = vec![(ImageId(7), &l)];
    images.extend(quiet.iter().copied());
    let fl = FeedbackLayout::new(FeedbackDesc::default(), &images).unwrap();
    let (buf, _) = synthetic_view(&fl, &l, 64, [0.25, 0.25], [0.5, 0.5], 1.5, 42);
    let bytes = buf.bytes();
    let mut reads: Vec<(u32, usize)> = Vec::new();
    let decoded = fl
        .decode_with(42, |start, out| {
            reads.push((start, out.len()));
            for (k, w) in out.iter_mut().enumerate() {
                let i = (start as usize + k) * 4;
                *w = u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
            }
        })
        .unwrap();
    assert_eq!(decoded, fl.decode(&bytes, 42).unwrap());
    assert_eq!(decoded.images_visited, 1, "one of 1025 images was sampled");
    let img = &fl.images()[0];
    let expected_words = 4
        + u64::from(fl.touched_words())
        + 2 * u64::from(decoded.records)
        + 3 * u64::from(img.bit_words)
        + decoded.requests.len() as u64;
    assert_eq!(decoded.words_read, expected_words);
    assert_eq!(reads.iter().map(|&(_, n)| n as u64).sum::<u64>(), expected_words);
    for &(start, n) in &reads {
        let range = start..start + n as u32;
        for other in &fl.images()[1..] {
            let bits = other.bits_offset..other.bits_offset + 3 * other.bit_words;
            assert!(
                range.end <= bits.start || range.start >= bits.end,
                "an untouched image's bitset was read"
            );
        }
    }
}

#[test]
fn overflow_is_recovered_from_the_bitsets() {
    let l = layout(4096, 4096);
    let small = FeedbackDesc { record_capacity: 5, count_pixels: false };
    let fl = FeedbackLayout::new(small, &[(ImageId(1), &l)]).unwrap();
    let (buf, expect) = synthetic_view(&fl, &l, 32, [0.0, 0.0], [1.0, 1.0], 0.0, 3);
    assert_eq!(expect.len(), 32 * 32, "one pixel per mip-0 tile");
    let decoded = fl.decode(&buf.bytes(), 3).unwrap();
    assert!(decoded.overflowed);
    assert_eq!(decoded.records, 1024);
    let tiles: Vec<TileIndex> = decoded.requests.iter().map(|r| r.tile).collect();
    assert_eq!(tiles, expect.keys().copied().collect::<Vec<_>>());
    assert!(decoded.requests.iter().all(|r| r.pixels == 1));
}

#[test]
fn decode_errors_are_typed() {
    let l = layout(1024, 1024);
    let fl = FeedbackLayout::new(FeedbackDesc::default(), &[(ImageId(1), &l)]).unwrap();
    let mut buf = FeedbackBuffer::new(&fl, 9);
    buf.record(&fl, 0, TileIndex(3), RequestKind::Miss);
    let bytes = buf.bytes();
    assert!(matches!(fl.decode(&bytes[..8], 9), Err(FeedbackError::BufferSize { .. })));
    assert!(matches!(fl.decode(&bytes, 8), Err(FeedbackError::FrameMismatch { expected: 8, found: 9 })));
    let mut b = bytes.clone();
    b[0] ^= 1;
    assert!(matches!(fl.decode(&b, 9), Err(FeedbackError::BadMagic { .. })));
    let mut b = bytes.clone();
    b[16 + 4 + 2] = 0x1F; // record 0, word 1: mip 31 does not match tile 3
    assert!(matches!(fl.decode(&b, 9), Err(FeedbackError::BadRecord { index: 0, .. })));
    let mut b = bytes.clone();
    b[8] = 2; // two records claimed, one bit set
    assert!(matches!(fl.decode(&b, 9), Err(FeedbackError::Inconsistent { records: 2, bits: 1 })));
    let mut b = bytes.clone();
    let touched = fl.touched_offset() as usize * 4;
    b[touched] = 0; // the image's bits set but its touched bit clear: its bitsets are not read
    assert!(matches!(fl.decode(&b, 9), Err(FeedbackError::Inconsistent { records: 1, bits: 0 })));
    assert!(matches!(
        FeedbackLayout::new(FeedbackDesc::default(), &[(ImageId(1), &l), (ImageId(1), &l)]),
        Err(FeedbackError::DuplicateImage(ImageId(1)))
    ));
}

#[test]
fn buffer_and_table_layout() {
    let a = layout(4096, 4096);
    let b = layout(1000, 600);
    let fl = FeedbackLayout::new(
        FeedbackDesc { record_capacity: 100, count_pixels: true },
        &[(ImageId(1), &a), (ImageId(2), &b)],
    )
    .unwrap();
    let [ia, ib] = [&fl.images()[0], &fl.images()[1]];
    // The header, 100 records, then the touched bitset (one word for two images).
    assert_eq!(fl.touched_offset(), 4 + 200);
    assert_eq!(fl.touched_words(), 1);
    assert_eq!(ia.bits_offset, 4 + 200 + 1);
    assert_eq!(ia.bit_words, a.tile_count().div_ceil(32));
    // Three bitsets and three counter arrays per image: miss, prefetch and low-water warnings.
    assert_eq!(ib.bits_offset, ia.bits_offset + 3 * ia.bit_words);
    assert_eq!(ia.counts_offset, ib.bits_offset + 3 * ib.bit_words);
    assert_eq!(ib.counts_offset, ia.counts_offset + 3 * a.tile_count());
    assert_eq!(fl.buffer_words(), ib.counts_offset + 3 * b.tile_count());
    let table = fl.image_table();
    assert_eq!(table.len(), 2 * IMAGE_ENTRY_WORDS as usize);
    let e = &table[IMAGE_ENTRY_WORDS as usize..];
    assert_eq!(
        &e[..16],
        &[
            ib.bits_offset,
            ib.bit_words,
            ib.counts_offset,
            b.tile_count(),
            b.tiles_per_layer(),
            b.first_tail_lod(),
            255,
            64,
            128,
            128,
            1000,
            600,
            b.mip_levels(),
            1,
            1,
            u32::MAX
        ]
    );
    assert_eq!(&e[16..20], &[0, 8, 5, 1], "mip 0 of 1000 × 600: 8 × 5 tiles");
    assert_eq!(fl.header_words(0x1_0000_0005), [0x3142_4652, 5, 0, 100]);
}

#[test]
fn the_ring_reads_finished_frames_and_never_waits() {
    let mut ring = FeedbackRing::new(3);
    let mut read = Vec::new();
    // The GPU runs two frames behind; at frame 6 it stalls for three frames.
    for frame in 0u64..12 {
        let done = match frame {
            0..=1 => None,
            6..=8 => Some(3),
            f => Some(f - 2),
        };
        let step = ring.begin_frame(frame, done, true);
        for (slot, f) in &step.read {
            assert_eq!(*slot as u64, f % 3);
            assert!(done.is_some_and(|d| *f <= d), "frame {f} read before the GPU finished it");
            read.push(*f);
        }
        if let Some(slot) = step.write {
            assert_eq!(slot as u64, frame % 3);
        }
        if (7..=8).contains(&frame) {
            assert_eq!(step.write, None, "slot still busy: no feedback, no wait");
        }
    }
    assert_eq!(read, vec![0, 1, 2, 3, 4, 5, 6, 9]);
}

#[test]
fn sampling_covers_every_pixel_of_a_block_in_turn() {
    let s = FeedbackSampling::new(2, 2);
    assert_eq!(s.pixel_weight(), 4);
    let mut hits = [[0; 2]; 2];
    for frame in 0..16 {
        for y in 0..2 {
            for x in 0..2 {
                if s.pixel_writes(x, y, frame) {
                    assert!(s.frame_active(frame));
                    hits[y as usize][x as usize] += 1;
                }
            }
        }
    }
    assert_eq!(hits, [[2, 2], [2, 2]], "8 feedback frames, each pixel twice");
    assert!(FeedbackSampling::default().pixel_writes(5, 7, 3));
}
