//! Soak: the streamer for many frames with textures registered and unregistered, budget cuts
//! and raises, 1–3 frames in flight, on both paths, under synchronization validation. What it
//! holds — resident bytes, heaps, live Vulkan objects, objects waiting for the GPU, staging in
//! use — must stay flat after warm-up; at the end nothing leaks (the harness checks). CI runs
//! `RESIDENCY_SOAK_FRAMES` frames per path (default 600); docs/reliability.md has the long runs'
//! figures.

mod common;

use residency_core::format::Format;
use residency_core::streaming::{FnSource, TileKey, TileSource};
use residency_core::tiles::{ImageId, ResidencyPath, TileCoord};
use residency_core::vt_file::VtDesc;
use residency_vulkan::streaming::{Streamer, StreamerDesc, VirtualTexture};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{CommandContext, Device};
use std::sync::Arc;

fn frames() -> u64 {
    std::env::var("RESIDENCY_SOAK_FRAMES").ok().and_then(|v| v.parse().ok()).unwrap_or(600)
}

fn source(name: &str, seed: u32, side: u32) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, side, side, 128, 128);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        let v = [(seed * 37 + mip * 11) as u8, (x * 5) as u8, (y * 7) as u8, 0xff];
        Ok((0..w * h).flat_map(|_| v).collect())
    }))
}

/// What the streamer and the device hold after a frame.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    resident_bytes: u64,
    capacity_tiles: u64,
    live_objects: usize,
    pending_destruction: usize,
    staging_bytes: u64,
    staging_batches: usize,
}

fn held(streamer: &Streamer, device: &Device) -> Held {
    let (staging_bytes, staging_batches) = streamer.staging_in_use();
    Held {
        resident_bytes: streamer.manager_stats().resident_bytes,
        capacity_tiles: streamer.manager().pool().stats().capacity_tiles,
        live_objects: device.ledger().live_objects().len(),
        pending_destruction: device.pending_destruction(),
        staging_bytes,
        staging_batches,
    }
}

/// The field-wise maximum.
fn max(a: Held, b: Held) -> Held {
    Held {
        resident_bytes: a.resident_bytes.max(b.resident_bytes),
        capacity_tiles: a.capacity_tiles.max(b.capacity_tiles),
        live_objects: a.live_objects.max(b.live_objects),
        pending_destruction: a.pending_destruction.max(b.pending_destruction),
        staging_bytes: a.staging_bytes.max(b.staging_bytes),
        staging_batches: a.staging_batches.max(b.staging_batches),
    }
}

/// One frame with CPU feedback asking for a moving window of mip-0 tiles of every texture.
fn frame(streamer: &mut Streamer, commands: &CommandContext, textures: &[VirtualTexture], f: u64) {
    let mut wanted = Vec::new();
    for (i, t) in textures.iter().enumerate() {
        let Some(residency) = streamer.manager().residency(t.id()) else { continue };
        let l = residency.layout();
        let [gx, gy, _] = l.mips()[0].tiles;
        for k in 0..4u32 {
            let (x, y) = ((f as u32 / 3 + k + i as u32) % gx, (f as u32 / 7 + k / 2) % gy);
            wanted.push(TileKey::tile(
                t.id(),
                l.tile_index(TileCoord { layer: 0, mip: 0, x, y, z: 0 }).unwrap(),
            ));
        }
    }
    common::cpu_feedback_frame(streamer, commands, &wanted);
    // Frame-exact loads (frames still overlap): the warm-up's and the rest's maxima compared in
    // `flat` do not depend on how fast the workers load (a late burst of loads would otherwise
    // hold more staging at once than the warm-up did).
    streamer.wait_for_loads();
}

/// `frames` frames on `path` with `frames_in_flight`, textures coming and going every 23 frames
/// (2 to 5 alive, of three sizes), the budget cut to 40 and raised back to 96 every 61 frames.
/// Returns the most held in the warm-up and in the rest of the run.
fn soak(device: &Arc<Device>, path: ResidencyPath, frames_in_flight: u32, frames: u64) -> (Held, Held) {
    let desc = StreamerDesc::default()
        .with_name(format!("soak {path:?} {frames_in_flight}"))
        .with_path(path)
        .with_frames_in_flight(frames_in_flight)
        .with_budget_tiles(96)
        .with_workers(2);
    let mut streamer = Streamer::new(device, desc).unwrap();
    let commands = CommandContext::new(device, "soak frames").unwrap();
    let sizes = [512u32, 1024, 768];
    let mut textures: Vec<VirtualTexture> = Vec::new();
    let mut next = 0u32;
    let mut add = |streamer: &mut Streamer, textures: &mut Vec<VirtualTexture>| {
        let name = format!("soak texture {next}");
        let side = sizes[next as usize % sizes.len()];
        textures.push(streamer.add_texture(&name, source(&name, next, side)).unwrap());
        next += 1;
    };
    for _ in 0..3 {
        add(&mut streamer, &mut textures);
    }
    let warm_up = frames / 5;
    let (mut early, mut late) = (Held::default(), Held::default());
    for f in 0..frames {
        if f % 23 == 22 {
            // Alternately one goes (removed, or its handle dropped) and one comes.
            if (f / 23) % 2 == 0 && textures.len() > 2 {
                let t = textures.remove(0);
                if (f / 46) % 2 == 0 {
                    streamer.remove_texture(t).unwrap();
                } else {
                    drop(t);
                }
            } else if textures.len() < 5 {
                add(&mut streamer, &mut textures);
            }
        }
        if f % 61 == 60 {
            let cut = if (f / 61) % 2 == 0 { 40 } else { 96 };
            streamer.set_budget_tiles(cut);
        }
        frame(&mut streamer, &commands, &textures, f);
        assert!(streamer.manager().committed_tiles() <= 96, "frame {f}");
        // Two frames after a cut the budget holds, or only what is in use keeps it above.
        let h = held(&streamer, device);
        if f < warm_up {
            early = max(early, h);
        } else {
            late = max(late, h);
        }
    }
    assert!(streamer.take_load_failures().is_empty());
    assert!(streamer.manager().check_invariants().is_ok());
    drop(textures);
    drop(streamer);
    drop(commands);
    device.wait_idle().unwrap();
    device.maintain();
    (early, late)
}

fn flat(early: Held, late: Held) {
    // After warm-up nothing grows beyond what the warm-up (which already saw every event: textures
    // added and removed, a cut and a raise) held, give or take a texture's objects.
    assert!(late.resident_bytes <= early.resident_bytes.max(96 * 65536), "{early:?} {late:?}");
    assert!(late.capacity_tiles <= early.capacity_tiles.max(96 + 16), "{early:?} {late:?}");
    assert!(late.live_objects <= early.live_objects + 8, "{early:?} {late:?}");
    assert!(late.pending_destruction <= early.pending_destruction + 16, "{early:?} {late:?}");
    assert!(late.staging_batches <= early.staging_batches.max(4), "{early:?} {late:?}");
    assert!(late.staging_bytes <= 32 << 20, "{early:?} {late:?}");
}

/// The soak on `path` with 1, 2 and 3 frames in flight, then nothing of it left.
fn soak_path(path: ResidencyPath) {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let n = frames();
        for fif in 1..=3 {
            let (early, late) = soak(&device, path, fif, n.div_ceil(3).max(120));
            eprintln!("{path:?}, {fif} in flight: warm-up {early:?}, after {late:?}");
            flat(early, late);
        }
        let names = |d: &Device| d.ledger().live_objects().iter().filter(|o| o.name.contains("soak")).count();
        assert_eq!(names(&device), 0, "{:?}", device.ledger().live_objects());
    });
}

#[test]
fn soak_the_streamer_on_the_hardware_path_with_one_to_three_frames_in_flight() {
    soak_path(ResidencyPath::Hardware);
}

#[test]
fn soak_the_streamer_on_the_software_path_with_one_to_three_frames_in_flight() {
    soak_path(ResidencyPath::Software);
}

#[test]
fn soak_ids_of_removed_textures_are_not_reused_while_their_frames_run() {
    // A texture id is never handed out twice by one streamer, so feedback of a frame that still
    // names a removed texture is stale (ignored), never taken for a new texture's.
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut streamer = Streamer::new(&device, StreamerDesc::default().with_budget_tiles(32)).unwrap();
        let mut seen = std::collections::HashSet::new();
        for i in 0..20u32 {
            let name = format!("soak id {i}");
            let t = streamer.add_texture(&name, source(&name, i, 256)).unwrap();
            assert!(seen.insert(t.id()), "id {:?} handed out twice", t.id());
            let id: ImageId = t.id();
            streamer.remove_texture(t).unwrap();
            assert!(streamer.manager().residency(id).is_none());
        }
    });
}
