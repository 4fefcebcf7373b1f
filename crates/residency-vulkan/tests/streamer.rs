//! The streamer's frame protocol on lavapipe, on both residency paths: textures from `FnSource`s
//! primed by `add_texture` (frame 0 is not blank), tiles requested through the feedback buffer
//! (written by the CPU here, as a CPU renderer would) resident within a few frames, a texture
//! removed mid-run leaving nothing behind, 1–3 frames in flight, failing sources as typed errors.

use residency_core::format::Format;
use residency_core::streaming::{FeedbackBuffer, FnSource, RequestKind, SourceError, TileKey, TileSource};
use residency_core::tiles::{ImageId, ResidencyPath, TexelRegion, TileCoord};
use residency_core::vt_file::VtDesc;
use residency_vulkan::streaming::{record_frame_barrier, StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{CommandContext, Device};
use std::sync::Arc;

const SIDE: u32 = 1024;

fn texel(texture: u32, mip: u32, x: u32, y: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 29 + texture) as u8, 0xe0 | texture as u8]
}

/// A procedural RGBA8 source; tiles of mips below `fail_below` fail to read.
fn source(name: &str, texture: u32, fail_below: u32) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128);
    let owned = name.to_owned();
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        if mip < fail_below {
            return Err(SourceError::Read {
                source_name: owned.clone(),
                reason: format!("mip {mip} is damaged"),
            });
        }
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h)
            .flat_map(|ty| (0..w).flat_map(move |tx| texel(texture, mip, x * 128 + tx, y * 128 + ty)))
            .collect())
    }))
}

fn desc(path: ResidencyPath, frames_in_flight: u32) -> StreamerDesc {
    StreamerDesc::default()
        .with_name("test streamer")
        .with_path(path)
        .with_frames_in_flight(frames_in_flight)
        .with_budget_tiles(96)
        .with_workers(2)
}

fn tile(streamer: &Streamer, id: ImageId, mip: u32, x: u32, y: u32) -> TileKey {
    let layout = streamer.manager().residency(id).unwrap().layout();
    TileKey::tile(id, layout.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap())
}

fn live_named(device: &Device, name: &str) -> usize {
    device.ledger().live_objects().iter().filter(|o| o.name.contains(name)).count()
}

/// One frame: begin, the CPU writes misses for `wanted`, an (empty but real) GPU frame, end.
fn frame(streamer: &mut Streamer, commands: &CommandContext, wanted: &[TileKey]) -> u64 {
    let bindings = streamer.begin_frame().unwrap();
    let frame = bindings.frame;
    assert_eq!(bindings.textures.len(), streamer_textures(&bindings));
    let records = bindings.layout.map(|layout| {
        let mut records = FeedbackBuffer::new(layout, frame);
        for key in wanted {
            let slot = layout.slot_of(key.image).unwrap();
            let residency_core::streaming::StreamUnit::Tile(t) = key.unit else { panic!("tiles only") };
            records.record(layout, slot, t, RequestKind::Miss);
        }
        records
    });
    drop(bindings);
    if let Some(records) = records {
        streamer.write_cpu_feedback(&records).unwrap();
    }
    let submission = commands.submit(&[], |rec| record_frame_barrier(rec).unwrap()).unwrap();
    streamer.end_frame(submission.gpu_use()).unwrap();
    // Loads overlap frames; these frames take microseconds, so wait for the workers to count
    // latency in frames deterministically.
    streamer.wait_for_loads();
    frame
}

fn streamer_textures(bindings: &residency_vulkan::streaming::FrameBindings<'_>) -> usize {
    bindings.textures.len()
}

fn streams(path: ResidencyPath, frames_in_flight: u32) {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut streamer = Streamer::new(&device, desc(path, frames_in_flight)).unwrap();
        assert_eq!(streamer.path(), path);
        let names = ["vt rock", "vt grass", "vt sand"];
        let textures: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, name)| streamer.add_texture(name, source(name, i as u32, 0)).unwrap())
            .collect();

        // Priming: every texture's coarse chain is resident before its first frame.
        for t in &textures {
            let chain = streamer.coarse_chain(t);
            assert!(!chain.is_empty());
            assert!(chain.iter().all(|&k| streamer.manager().is_resident(k)), "coarse chain of {:?}", t.id());
        }
        if let Some(image) = streamer.sparse_image(&textures[1]) {
            // The texels are there too: the 128² mip (one tile) of the second texture.
            let got = image
                .read_region(0, 3, TexelRegion { offset: [0; 3], extent: [128, 128, 1] }, 1 << 20)
                .unwrap();
            let want: Vec<u8> =
                (0..128).flat_map(|y| (0..128).flat_map(move |x| texel(1, 3, x, y))).collect();
            assert_eq!(got, want, "mip 3 of the second texture after priming");
        }

        let commands = CommandContext::new(&device, "test frames").unwrap();
        let (a, b, c) = (textures[0].id(), textures[1].id(), textures[2].id());
        let wanted =
            vec![tile(&streamer, a, 0, 2, 3), tile(&streamer, b, 1, 1, 1), tile(&streamer, c, 0, 7, 7)];
        let mut resident_at = None;
        for f in 0..12 {
            frame(&mut streamer, &commands, &wanted);
            if resident_at.is_none() && wanted.iter().all(|&k| streamer.manager().is_resident(k)) {
                resident_at = Some(f);
            }
        }
        let at = resident_at.unwrap_or_else(|| {
            panic!(
                "the requested tiles became resident: {:?} {:?} {:?}",
                wanted.iter().map(|&k| streamer.manager().is_resident(k)).collect::<Vec<_>>(),
                streamer.manager_stats(),
                streamer.stats()
            )
        });
        assert!(at <= 2 + 2 * frames_in_flight as u64, "resident at frame {at}");
        assert!(streamer.manager_stats().tiles_streamed >= 3);
        if path == ResidencyPath::Hardware {
            let image = streamer.sparse_image(&textures[0]).unwrap();
            let got = image
                .read_region(0, 0, TexelRegion { offset: [256, 384, 0], extent: [128, 128, 1] }, 1 << 20)
                .unwrap();
            let want: Vec<u8> =
                (0..128).flat_map(|y| (0..128).flat_map(move |x| texel(0, 0, 256 + x, 384 + y))).collect();
            assert_eq!(got, want, "the streamed tile's texels");
        }

        // A texture removed mid-run: unregistered at once, its objects gone once the GPU is done.
        let mut textures = textures;
        let removed = textures.remove(1);
        let removed_id = removed.id();
        streamer.remove_texture(removed).unwrap();
        assert!(streamer.manager().residency(removed_id).is_none());
        let wanted: Vec<TileKey> = wanted.into_iter().filter(|k| k.image != removed_id).collect();
        for _ in 0..4 {
            frame(&mut streamer, &commands, &wanted);
        }
        assert_eq!(streamer.texture_count(), 2);
        device.wait_idle().unwrap();
        device.maintain();
        assert_eq!(live_named(&device, "vt grass"), 0, "{:?}", device.ledger().live_objects());
        assert!(streamer.manager().check_invariants().is_ok());
        assert!(streamer.take_load_failures().is_empty());
        for t in textures {
            streamer.remove_texture(t).unwrap();
        }
        drop(streamer);
        drop(commands);
    });
}

#[test]
fn hardware_path_one_frame_in_flight() {
    streams(ResidencyPath::Hardware, 1);
}

#[test]
fn hardware_path_three_frames_in_flight() {
    streams(ResidencyPath::Hardware, 3);
}

#[test]
fn software_path_two_frames_in_flight() {
    streams(ResidencyPath::Software, 2);
}

#[test]
fn software_path_three_frames_in_flight() {
    streams(ResidencyPath::Software, 3);
}

#[test]
fn a_failing_source_is_a_typed_error_and_keeps_its_coarse_data() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut streamer = Streamer::new(&device, desc(path, 2)).unwrap();
            // Mip 0 is damaged: requests for it fail, the coarse chain (mips 3…) is fine.
            let t = streamer.add_texture("vt damaged", source("vt damaged", 3, 1)).unwrap();
            let commands = CommandContext::new(&device, "test frames").unwrap();
            let wanted = vec![tile(&streamer, t.id(), 0, 0, 0)];
            for _ in 0..8 {
                frame(&mut streamer, &commands, &wanted);
            }
            let failures = streamer.take_load_failures();
            assert!(!failures.is_empty());
            assert!(failures
                .iter()
                .all(|f| f.texture == "vt damaged" && matches!(f.error, SourceError::Read { .. })));
            assert!(streamer.stats().loads_failed >= 1);
            assert!(streamer.manager_stats().loads_failed >= 1);
            assert!(!streamer.manager().is_resident(wanted[0]));
            assert!(streamer.coarse_chain(&t).iter().all(|&k| streamer.manager().is_resident(k)));
            // Its parent (mip 1) did load: the texture samples the next coarser level.
            assert!(streamer.manager().is_resident(tile(&streamer, t.id(), 1, 0, 0)));

            // A source whose coarse chain fails is refused at add_texture and leaves nothing.
            let err = streamer.add_texture("vt broken", source("vt broken", 4, 99)).unwrap_err();
            assert!(matches!(err, StreamError::Priming { .. }), "{err}");
            assert_eq!(streamer.texture_count(), 1);
            streamer.remove_texture(t).unwrap();
            drop(streamer);
            drop(commands);
            device.wait_idle().unwrap();
            device.maintain();
            assert_eq!(live_named(&device, "vt broken"), 0);
            assert_eq!(live_named(&device, "vt damaged"), 0);
        });
    }
}

#[test]
fn other_formats_are_refused() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut streamer = Streamer::new(&device, desc(ResidencyPath::Auto, 2)).unwrap();
        let desc = VtDesc::new(Format::R8Uint, 512, 512, 128, 128);
        let err = streamer
            .add_texture("vt r8", Arc::new(FnSource::new("vt r8", desc, |_, _, _| Ok(vec![0; 128 * 128]))))
            .unwrap_err();
        assert!(matches!(err, StreamError::UnsupportedSource { .. }), "{err}");
        assert_eq!(streamer.texture_count(), 0);
        // A frame with no textures has no feedback to bind.
        let bindings = streamer.begin_frame().unwrap();
        assert!(bindings.feedback.is_none());
        drop(bindings);
        streamer.end_frame(device.submitted_work()).unwrap();
    });
}

/// Under a small budget the requests move across mip 0: tiles are evicted (unbound on the
/// hardware path, after waiting for the frames in flight), the budget holds, no validation message.
#[test]
fn a_small_budget_evicts_behind_the_frames_in_flight() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut streamer = Streamer::new(&device, desc(path, 2).with_budget_tiles(32)).unwrap();
            let a = streamer.add_texture("vt tight a", source("vt tight a", 5, 0)).unwrap();
            let b = streamer.add_texture("vt tight b", source("vt tight b", 6, 0)).unwrap();
            let commands = CommandContext::new(&device, "test frames").unwrap();
            for f in 0..40u32 {
                let (x, y) = ((f / 4) % 8, (f / 8) % 8);
                let wanted = vec![tile(&streamer, a.id(), 0, x, y), tile(&streamer, b.id(), 0, 7 - x, y)];
                frame(&mut streamer, &commands, &wanted);
                assert!(streamer.manager().check_invariants().is_ok());
            }
            let stats = streamer.manager_stats().clone();
            assert!(stats.tiles_evicted > 0, "{stats:?}");
            assert!(streamer.manager().committed_tiles() <= 32, "{stats:?}");
            if path == ResidencyPath::Hardware {
                assert!(streamer.stats().unbind_waits <= stats.frames);
            }
            for k in streamer.coarse_chain(&a).iter().chain(streamer.coarse_chain(&b)) {
                assert!(streamer.manager().is_resident(*k), "pinned units are never evicted");
            }
            streamer.remove_texture(a).unwrap();
            streamer.remove_texture(b).unwrap();
        });
    }
}
