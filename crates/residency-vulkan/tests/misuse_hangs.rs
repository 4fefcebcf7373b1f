//! Hangs reachable from safe code (issue #29, cause 5), on lavapipe under synchronization
//! validation: each body runs under a watchdog (`common/watchdog.rs`), so a hang fails the test.
//!
//! A `TileSource` is the renderer's code run on the streamer's loader threads. One that panics
//! used to kill its worker with the running count raised, so `Streamer::add_texture` (which waits
//! for the coarse chain's loads) never returned; now the panic is a typed load failure
//! (`SourceError::Panicked`), the worker goes on, and the streamer keeps streaming.

use residency_core::format::Format;
use residency_core::streaming::{FnSource, SourceError, TileSource};
use residency_core::tiles::ResidencyPath;
use residency_core::vt_file::VtDesc;
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

mod common;
#[path = "common/watchdog.rs"]
mod watchdog;

const SIDE: u32 = 512;

fn vt_desc() -> VtDesc {
    VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128)
}

/// An RGBA8 source whose reads panic while `panics(mip)` holds; the others give grey texels.
fn source(name: &str, panics: impl Fn(u32) -> bool + Send + Sync + 'static) -> Arc<dyn TileSource> {
    let desc = vt_desc();
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        assert!(!panics(mip), "the source's bug at tile ({x}, {y}) of mip {mip}");
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok(vec![0x80; (w * h * 4) as usize])
    }))
}

fn streamer(device: &Arc<residency_vulkan::Device>, path: ResidencyPath) -> Streamer {
    // One worker: a panic that killed it would leave nothing to load the next texture.
    let desc = StreamerDesc::default()
        .with_name("hang streamer")
        .with_path(path)
        .with_frames_in_flight(2)
        .with_budget_tiles(32)
        .with_workers(1);
    Streamer::new(device, desc).unwrap()
}

#[test]
fn misuse_a_panicking_tile_source_fails_add_texture_with_a_typed_error() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        watchdog::within("a panicking TileSource", move || {
            with_gpu(|set| {
                let device = Arc::clone(&set.devices()[0]);
                let mut streamer = streamer(&device, path);
                let err = streamer.add_texture("panics", source("panics", |_| true)).unwrap_err();
                match &err {
                    StreamError::Priming {
                        source: SourceError::Panicked { source_name, message, .. },
                        ..
                    } => {
                        assert_eq!(source_name, "panics");
                        assert!(message.contains("the source's bug"), "{message}");
                    }
                    other => {
                        panic!("{path:?}: expected a Priming error with a Panicked source, got {other:?}")
                    }
                }
                assert_eq!(streamer.texture_count(), 0, "{path:?}: nothing of the refused texture stays");
                // The worker survived: the next texture primes, and waiting for loads returns.
                let good = streamer.add_texture("good", source("good", |_| false)).unwrap();
                streamer.wait_for_loads();
                streamer.remove_texture(good).unwrap();
            })
        });
    }
}

#[test]
fn misuse_a_source_that_panics_inside_frames_is_a_load_failure_and_frames_go_on() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        watchdog::within("a TileSource panicking inside frames", move || {
            with_gpu(|set| {
                let device = Arc::clone(&set.devices()[0]);
                let mut streamer = streamer(&device, path);
                // Primes (the coarse chain is mips 2 and up), then panics on every mip-0 and mip-1 read.
                let armed = Arc::new(AtomicU32::new(0));
                let flag = Arc::clone(&armed);
                let texture = streamer
                    .add_texture(
                        "late panics",
                        source("late panics", move |mip| mip < 2 && flag.load(Ordering::SeqCst) == 1),
                    )
                    .unwrap();
                armed.store(1, Ordering::SeqCst);
                let commands = residency_vulkan::CommandContext::new(&device, "hang frames").unwrap();
                let id = texture.id();
                let wanted: Vec<_> = {
                    let layout = streamer.manager().residency(id).unwrap().layout();
                    (0..2)
                        .map(|x| {
                            let coord = residency_core::tiles::TileCoord { layer: 0, mip: 0, x, y: 0, z: 0 };
                            residency_core::streaming::TileKey::tile(id, layout.tile_index(coord).unwrap())
                        })
                        .collect()
                };
                let mut panicked = 0;
                for _ in 0..6 {
                    let bindings = streamer.begin_frame().unwrap();
                    let records = common::miss_records(&bindings, &wanted);
                    drop(bindings);
                    if let Some(records) = records {
                        streamer.write_cpu_feedback(&records).unwrap();
                    }
                    let bindings = streamer.frame_bindings().unwrap();
                    let submission =
                        commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
                    drop(bindings);
                    streamer.end_frame(submission.gpu_use()).unwrap();
                    streamer.wait_for_loads();
                    panicked += streamer
                        .take_load_failures()
                        .iter()
                        .filter(|f| matches!(f.error, SourceError::Panicked { .. }))
                        .count();
                }
                assert!(panicked > 0, "{path:?}: the panics came back as load failures");
                device.wait_idle().unwrap();
                streamer.remove_texture(texture).unwrap();
            })
        });
    }
}
