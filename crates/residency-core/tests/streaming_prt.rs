//! Partially resident textures beyond 2D: the feedback model of volumes (3D) and 2D arrays
//! (`tile_at` / `classify_sample` over a 3D coordinate, records naming z and layer, the manager
//! loading tiles at z > 0 and per layer), and the seed's low-water LOD warning with its gate.

use residency_core::format::Format;
use residency_core::streaming::{
    classify_low_water, classify_sample, low_water_level, FeedbackBuffer, FeedbackDesc, FeedbackLayout,
    FeedbackRecord, FrameInput, LoadReason, RequestKind, StreamUnit, StreamingDesc, StreamingManager,
    TileKey, TileRequest, NO_LOW_WATER,
};
use residency_core::tiles::{
    ImageId, LayoutLimits, SparseDimension, SparseFormatInfo, SparseImageDesc, SparseImageLayout, TileCoord,
    TileIndex, MIN_LOD_NONE,
};
use std::collections::BTreeSet;

fn layout(desc: SparseImageDesc, dim: SparseDimension) -> SparseImageLayout {
    let info = SparseFormatInfo::standard(Format::R8G8B8A8Unorm, dim).unwrap();
    SparseImageLayout::new(&desc, &info, &LayoutLimits::unbounded()).unwrap()
}

fn volume() -> SparseImageLayout {
    layout(SparseImageDesc::new_3d(Format::R8G8B8A8Unorm, 256, 256, 128), SparseDimension::D3)
}

fn array(layers: u32) -> SparseImageLayout {
    layout(
        SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 1024, 1024).with_array_layers(layers),
        SparseDimension::D2,
    )
}

/// The tile of (`layer`, `mip`) under `uvw`, computed from the layout (the reference).
fn expected_tile(l: &SparseImageLayout, layer: u32, mip: u32, uvw: [f32; 3]) -> TileIndex {
    let extent = l.mip(mip).unwrap().extent;
    let tile = l.tile_shape().to_array();
    let axis = |a: usize| ((uvw[a] * extent[a] as f32) as u32).min(extent[a] - 1) / tile[a];
    l.tile_index(TileCoord { layer, mip, x: axis(0), y: axis(1), z: axis(2) }).unwrap()
}

#[test]
fn volume_feedback_tile_at_takes_depth_and_records_name_z() {
    let l = volume();
    let id = ImageId(3);
    let fl = FeedbackLayout::new(FeedbackDesc::default(), &[(id, &l)]).unwrap();
    let img = &fl.images()[0];
    assert_eq!(img.extent, [256, 256, 128]);
    assert_eq!(img.tile_extent, l.tile_shape().to_array());
    assert!(img.tile_extent[2] > 1, "a 3D tile shape has depth");
    let table = fl.image_table();
    assert_eq!(&table[13..16], &[img.tile_extent[2], 128, NO_LOW_WATER]);

    let mut z_tiles = 0;
    for mip in 0..l.first_tail_lod() {
        for i in 0..7u32 {
            for k in 0..5u32 {
                let uvw = [(i as f32 + 0.3) / 7.0, (k as f32 + 0.6) / 5.0, (i * k % 9) as f32 / 8.5 + 0.01];
                let want = expected_tile(&l, 0, mip, uvw);
                assert_eq!(img.tile_at(0, mip, uvw), Some(want), "mip {mip} at {uvw:?}");
                let c = img.tile_coord(want).unwrap();
                assert_eq!(Some(c), l.tile_coord(want), "the record's tile names its z");
                z_tiles += u32::from(c.z > 0);
            }
        }
    }
    assert!(z_tiles > 20, "most samples are at z > 0");

    // A miss at z > 0 through the CPU rule, the buffer and the decoder.
    let uvw = [0.4, 0.6, 0.9];
    let (tile, kind) = classify_sample(img, 0, uvw, 0.2, MIN_LOD_NONE).unwrap();
    assert_eq!(kind, RequestKind::Miss);
    let mut buf = FeedbackBuffer::new(&fl, 5);
    assert!(buf.record(&fl, 0, tile, kind));
    let decoded = fl.decode(&buf.bytes(), 5).unwrap();
    assert_eq!(decoded.requests.len(), 1);
    let c = img.tile_coord(decoded.requests[0].tile).unwrap();
    assert_eq!((c.layer, c.mip, c.z), (0, 0, (0.9 * 128.0) as u32 / img.tile_extent[2]));
    assert!(c.z > 0);
    // A 3D image has one layer; depth beyond 1 is clamped, never another layer's tile.
    assert_eq!(img.tile_at(1, 0, uvw), None);
    assert_eq!(img.tile_at(0, 0, [0.4, 0.6, 7.0]), img.tile_at(0, 0, [0.4, 0.6, 1.0]));
}

#[test]
fn array_layers_feedback_names_each_layer() {
    let l = array(3);
    let fl = FeedbackLayout::new(FeedbackDesc::default(), &[(ImageId(1), &l)]).unwrap();
    let img = &fl.images()[0];
    assert_eq!(img.layers(), 3);
    for layer in 0..3 {
        let uvw = [0.7, 0.2, 0.0];
        let want = expected_tile(&l, layer, 1, [0.7, 0.2, 0.0]);
        assert_eq!(img.tile_at(layer, 1, uvw), Some(want));
        assert_eq!(img.tile_coord(want).map(|c| (c.layer, c.mip)), Some((layer, 1)));
        // The third coordinate of a 2D array is not a depth: every w gives the same tile.
        assert_eq!(img.tile_at(layer, 1, [0.7, 0.2, 0.9]), Some(want));
    }
    assert_eq!(img.tile_at(3, 0, [0.5, 0.5, 0.0]), None);
}

fn frame(m: &mut StreamingManager, f: u64, requests: &[TileRequest], loaded: &[TileKey]) -> Vec<TileKey> {
    let out = m.update(&FrameInput { frame: f, requests, loaded, failed: &[] }).unwrap();
    out.loads.iter().map(|ld| ld.key).collect()
}

#[test]
fn volume_feedback_manager_loads_tiles_at_z_above_zero() {
    let l = volume();
    let id = ImageId(2);
    let mut m = StreamingManager::new(StreamingDesc::default());
    m.register_image(id, &l).unwrap();
    let tail = frame(&mut m, 0, &[], &[]);
    let fl = m.feedback_layout(FeedbackDesc::default()).unwrap();
    let img = &fl.images()[0];
    let (tile, kind) = classify_sample(img, 0, [0.9, 0.1, 0.95], 0.0, MIN_LOD_NONE).unwrap();
    let req = [TileRequest { image: id, tile, mip: 0, kind, pixels: 4 }];
    let loads = frame(&mut m, 1, &req, &tail);
    let coords: Vec<TileCoord> = loads
        .iter()
        .map(|k| match k.unit {
            StreamUnit::Tile(t) => l.tile_coord(t).unwrap(),
            StreamUnit::Tail(_) => panic!("the tail was loaded in frame 0"),
        })
        .collect();
    // The tile and its chain of parents, each at its own z.
    assert!(coords.contains(&l.tile_coord(tile).unwrap()));
    assert!(coords.iter().all(|c| c.z > 0 || c.mip + 1 >= l.first_tail_lod()), "{coords:?}");
    assert_eq!(coords.len() as u32, l.first_tail_lod());
    frame(&mut m, 2, &req, &loads);
    assert!(m.is_resident(TileKey::tile(id, tile)));
}

#[test]
fn array_layers_stream_independently_in_the_manager() {
    let l = array(2);
    let id = ImageId(4);
    let mut m = StreamingManager::new(StreamingDesc::default());
    m.register_image(id, &l).unwrap();
    let tail = frame(&mut m, 0, &[], &[]);
    let fl = m.feedback_layout(FeedbackDesc::default()).unwrap();
    let img = &fl.images()[0];
    let (tile, kind) = classify_sample(img, 1, [0.3, 0.8, 0.0], 0.0, MIN_LOD_NONE).unwrap();
    let req = [TileRequest { image: id, tile, mip: 0, kind, pixels: 1 }];
    let loads = frame(&mut m, 1, &req, &tail);
    assert!(!loads.is_empty());
    let layers: BTreeSet<u32> = loads
        .iter()
        .filter_map(|k| match k.unit {
            StreamUnit::Tile(t) => l.tile_coord(t).map(|c| c.layer),
            StreamUnit::Tail(_) => None,
        })
        .collect();
    assert_eq!(layers, BTreeSet::from([1]), "a layer-1 miss loads layer 1 only");
    frame(&mut m, 2, &req, &loads);
    let same_in_layer_0 = expected_tile(&l, 0, 0, [0.3, 0.8, 0.0]);
    assert!(m.is_resident(TileKey::tile(id, tile)));
    assert!(!m.is_resident(TileKey::tile(id, same_in_layer_0)));
}

#[test]
fn lod_warning_gate_levels_above_the_mark_do_not_warn() {
    let l = array(1);
    let id = ImageId(9);
    let mut fl = FeedbackLayout::new(FeedbackDesc::default(), &[(id, &l)]).unwrap();
    let uvw = [0.5, 0.25, 0.0];
    // No mark: nothing warns.
    assert_eq!(low_water_level(&fl.images()[0], 0.3, 0), None);
    assert!(fl.set_low_water(id, Some(2)));
    assert_eq!(fl.image_table()[15], 2);
    let img = &fl.images()[0];
    // Samples that fetched levels 0..=2 (their own mip, or the coarser one they fell back to)
    // warn with that level; levels 3 and coarser are above the mark: the gate blocks them.
    for (lod, min_lod, want) in [
        (0.2, 0, Some(0)),
        (1.9, 1, Some(1)),
        (2.0, 2, Some(2)),
        (2.99, 0, Some(2)),
        (3.0, 0, None),
        (3.5, 3, None),
        (6.0, 1, None),
        (-4.0, 0, Some(0)),
        // Fell back from mip 1 to mip 2, at the mark: warns at 2 (and misses mip 1).
        (1.5, 2, Some(2)),
        // Fell back from mip 1 to mip 3, above the mark; nothing resident: nothing fetched.
        (1.5, 3, None),
        (0.5, MIN_LOD_NONE, None),
    ] {
        assert_eq!(low_water_level(img, lod, min_lod), want, "lod {lod} min-LOD {min_lod}");
        let warned = classify_low_water(img, 0, uvw, lod, min_lod);
        assert_eq!(warned.map(|(_, m)| m), want);
        if let Some((tile, m)) = warned {
            assert_eq!(tile, expected_tile(&l, 0, m, uvw), "the warning names the tile that warned");
        }
    }
    // The prefetch rule is unchanged by the mark.
    assert_eq!(
        classify_sample(img, 0, uvw, 3.1, 3).map(|(_, k)| k),
        Some(RequestKind::LodWarning),
        "prefetch warnings still come from the lead rule"
    );

    // The record carries the level that warned, and the decoder gives it back as the request's mip.
    let (tile, m) = classify_low_water(img, 0, uvw, 1.4, 0).unwrap();
    let rec = FeedbackRecord { image_slot: 0, tile, mip: m as u8, kind: RequestKind::MinLodWarning };
    assert_eq!(FeedbackRecord::decode(rec.encode()), Some(rec));
    assert_eq!(rec.warning_level(), Some(1));
    assert_eq!(rec.encode()[1] >> 21 & 3, 2, "a distinct kind code");
    let mut buf = FeedbackBuffer::new(&fl, 8);
    buf.record(&fl, 0, tile, RequestKind::MinLodWarning);
    buf.record(&fl, 0, tile, RequestKind::Miss);
    let d = fl.decode(&buf.bytes(), 8).unwrap();
    assert_eq!(d.requests.len(), 2, "a warning and a miss of one tile are separate requests");
    let w = d.requests.iter().find(|r| r.kind == RequestKind::MinLodWarning).unwrap();
    assert_eq!((w.tile, w.mip), (tile, 1));
}

#[test]
fn lod_warning_gate_warnings_prefetch_the_next_finer_level() {
    let l = array(1);
    let id = ImageId(5);
    for prefetch in [true, false] {
        let mut m = StreamingManager::new(StreamingDesc::default().with_prefetch(prefetch));
        m.register_image(id, &l).unwrap();
        m.set_low_water(id, Some(1)).unwrap();
        assert_eq!(m.feedback_layout(FeedbackDesc::default()).unwrap().images()[0].low_water, Some(1));
        let tail = frame(&mut m, 0, &[], &[]);
        let warned = l.tile_index(TileCoord { layer: 0, mip: 1, x: 1, y: 2, z: 0 }).unwrap();
        let req =
            [TileRequest { image: id, tile: warned, mip: 1, kind: RequestKind::MinLodWarning, pixels: 1 }];
        let out = m.update(&FrameInput { frame: 1, requests: &req, loaded: &tail, failed: &[] }).unwrap();
        let children: BTreeSet<TileKey> = residency_core::streaming::child_tiles(&l, warned)
            .into_iter()
            .map(|t| TileKey::tile(id, t))
            .collect();
        let prefetched: BTreeSet<TileKey> = out
            .loads
            .iter()
            .filter(|ld| ld.coord.is_some_and(|c| c.mip == 0))
            .inspect(|ld| assert_eq!(ld.reason, LoadReason::Prefetch))
            .map(|ld| ld.key)
            .collect();
        if prefetch {
            assert_eq!(prefetched, children, "the warned tile's four children at mip 0");
        } else {
            assert!(out.loads.is_empty(), "without prefetch a warning loads nothing");
        }
    }
    // The seed's advice for the mark, the finest fully resident level: the coarse chain after
    // frame 0's pinned loads, a level finer once all of it is in, in every layer.
    let l = array(2);
    let mut m = StreamingManager::new(StreamingDesc::default());
    m.register_image(id, &l).unwrap();
    assert_eq!(m.fully_resident_lod(id), None, "nothing resident yet");
    let pinned = frame(&mut m, 0, &[], &[]);
    frame(&mut m, 1, &[], &pinned);
    let coarse = m.fully_resident_lod(id).expect("the coarse chain");
    assert!(coarse > 0 && coarse < l.mip_levels());
    let finer = coarse - 1;
    let mip_tiles = |layer| {
        let (first, n) = l.mip_tile_span(layer, finer).unwrap();
        (first.0..first.0 + n).map(|t| TileRequest {
            image: id,
            tile: TileIndex(t),
            mip: finer,
            kind: RequestKind::Miss,
            pixels: 1,
        })
    };
    let layer0: Vec<TileRequest> = mip_tiles(0).collect();
    let loads = frame(&mut m, 2, &layer0, &[]);
    frame(&mut m, 3, &layer0, &loads);
    assert_eq!(m.fully_resident_lod(id), Some(coarse), "layer 1 still lacks the finer level");
    let both: Vec<TileRequest> = mip_tiles(0).chain(mip_tiles(1)).collect();
    let loads = frame(&mut m, 4, &both, &[]);
    frame(&mut m, 5, &both, &loads);
    assert_eq!(m.fully_resident_lod(id), Some(finer));
    assert_eq!(m.fully_resident_lod(ImageId(77)), None);

    assert!(matches!(
        StreamingManager::new(StreamingDesc::default()).set_low_water(ImageId(77), Some(0)),
        Err(residency_core::streaming::StreamingError::UnknownImage(ImageId(77)))
    ));
}
