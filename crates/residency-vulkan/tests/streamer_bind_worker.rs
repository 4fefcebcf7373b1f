//! The streamer's bind worker (`StreamerDesc::bind_worker`, issue #32), on lavapipe under
//! synchronization validation (`with_gpu`: a validation message fails the test): the frame thread
//! makes no sparse bind and stages no texel (counted, not timed: `FrameWork`), the worker does
//! both, and the tiles become visible a frame after their tick with their texels; evictions
//! unbind after the frames in flight; dropping the streamer with a job out (or one planned and
//! not handed out) joins it and leaks nothing; a bind that fails on the worker is a typed error
//! at the next frame call, after which the frames catch up; a lost device at the worker's bind is
//! the same typed error at every later call, and teardown leaks nothing.

use residency_core::format::Format;
use residency_core::streaming::{FnSource, StreamUnit, TileKey, TileSource};
use residency_core::tiles::{ImageId, ResidencyPath, TexelRegion, TileCoord};
use residency_core::vt_file::VtDesc;
use residency_vulkan::streaming::{Streamer, StreamerDesc, VirtualTexture};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::{CommandContext, Device, FaultSite, InjectedFault, ResidencyError};
use std::sync::Arc;

mod common;

const SIDE: u32 = 1024;

fn texel(pattern: u32, mip: u32, x: u32, y: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 29 + pattern) as u8, 0xe0 | (pattern as u8 & 0x1f)]
}

/// A procedural RGBA8 1024² source of 128² tiles.
fn source(name: &str, pattern: u32) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok((0..h)
            .flat_map(|ty| (0..w).flat_map(move |tx| texel(pattern, mip, x * 128 + tx, y * 128 + ty)))
            .collect())
    }))
}

fn desc(worker: bool) -> StreamerDesc {
    // 24 tiles: the coarse chain, one row of eight mip-0 tiles and their parents, not two rows.
    StreamerDesc::default()
        .with_name(if worker { "bind worker streamer" } else { "frame thread streamer" })
        .with_path(ResidencyPath::Hardware)
        .with_frames_in_flight(2)
        .with_budget_tiles(24)
        .with_bind_worker(worker)
}

fn tile(streamer: &Streamer, id: ImageId, mip: u32, x: u32, y: u32) -> TileKey {
    let layout = streamer.manager().residency(id).unwrap().layout();
    TileKey::tile(id, layout.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap())
}

/// Row `y` of mip 0.
fn row(streamer: &Streamer, id: ImageId, y: u32) -> Vec<TileKey> {
    (0..8).map(|x| tile(streamer, id, 0, x, y)).collect()
}

/// One frame wanting `wanted`, its GPU work and loads waited for: frame-exact (its feedback is
/// read by the next frame, whose tick starts the loads; the frame after makes them resident).
fn frame(streamer: &mut Streamer, commands: &CommandContext, wanted: &[TileKey]) {
    common::cpu_feedback_frame(streamer, commands, wanted);
    settle(streamer);
}

fn settle(streamer: &Streamer) {
    // (A device lost on the worker fails the wait: the next frame call returns that.)
    if let Err(e) = streamer.device().wait_idle() {
        assert!(streamer.device().is_lost(), "{e}");
    }
    streamer.wait_for_loads();
}

fn has_texels(streamer: &Streamer, t: &VirtualTexture, pattern: u32, key: TileKey) -> bool {
    let layout = streamer.manager().residency(t.id()).unwrap().layout().clone();
    let StreamUnit::Tile(index) = key.unit else { unreachable!("mip-0 tiles") };
    let c = layout.tile_coord(index).unwrap();
    let (x0, y0) = (c.x * 128, c.y * 128);
    let image = streamer.sparse_image(t).unwrap();
    let got =
        image.read_region(0, 0, TexelRegion { offset: [x0, y0, 0], extent: [128, 128, 1] }, 1 << 20).unwrap();
    let want: Vec<u8> =
        (0..128).flat_map(|y| (0..128).flat_map(move |x| texel(pattern, 0, x0 + x, y0 + y))).collect();
    got == want
}

/// The same frames with and without the worker: the frame thread binds and stages without it,
/// never with it (the worker does, counted in its stats); the tiles reach the GPU with their
/// texels a frame after their tick, and their latencies say so; the second row evicts the first
/// (unbinds after the frames in flight, on the worker).
#[test]
fn the_bind_worker_takes_every_bind_and_tile_upload_off_the_frame_thread() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let mut seen = Vec::new();
        for worker in [false, true] {
            let pattern = 3 + u32::from(worker);
            let mut streamer = Streamer::new(&device, desc(worker)).unwrap();
            let t = streamer.add_texture("vt worker", source("vt worker", pattern)).unwrap();
            let commands = CommandContext::new(&device, "worker frames").unwrap();
            let id = t.id();
            let (mut binds, mut tiles) = (0u64, 0u64);
            let mut published_late = true;
            for f in 0..24 {
                let wanted = row(&streamer, id, if f < 10 { 3 } else { 5 });
                frame(&mut streamer, &commands, &wanted);
                let work = streamer.stats().last_frame_work;
                binds += u64::from(work.frame_thread_binds);
                tiles += u64::from(work.frame_thread_tiles_staged);
                for l in streamer.take_latencies() {
                    // Frame `f` ticked: resident at `f` on the frame thread, published at `f + 1`.
                    published_late &= l.resident_frame == f + u64::from(worker);
                }
            }
            // One more frame publishes the last tick (with the worker).
            {
                let w = row(&streamer, id, 5);
                frame(&mut streamer, &commands, &w)
            };
            let wanted = row(&streamer, id, 5);
            assert!(wanted.iter().all(|&k| streamer.manager().is_resident(k)), "{:?}", streamer.stats());
            assert!(published_late, "resident_frame is the frame that first samples a tile");
            assert!(streamer.manager_stats().tiles_evicted > 0, "the second row evicts the first");
            for &k in [wanted[0], wanted[5]].iter() {
                assert!(has_texels(&streamer, &t, pattern, k), "worker {worker}: {k:?} has its texels");
            }
            let stats = streamer.stats().clone();
            if worker {
                assert_eq!((binds, tiles), (0, 0), "the frame thread made no bind and staged no tile");
                assert!(stats.worker_binds > 0 && stats.worker_tiles_staged >= 16, "{stats:?}");
            } else {
                assert!(
                    binds > 0 && tiles >= 16,
                    "without the worker the frame thread binds ({binds}) and stages ({tiles})"
                );
                assert_eq!((stats.worker_binds, stats.worker_tiles_staged), (0, 0));
            }
            streamer.manager().check_invariants().unwrap();
            seen.push((binds, tiles, stats.worker_binds, stats.worker_tiles_staged));
            streamer.remove_texture(t).unwrap();
        }
        println!(
            "frame thread binds / tiles, worker binds / tiles: without {:?}, with {:?}",
            seen[0], seen[1]
        );
    });
}

/// Dropping the streamer with the worker's job out (binds and staging handed out at `end_frame`)
/// or planned and not yet handed out (inside a frame) joins the worker and waits nothing out of
/// order: no validation message, every object and memory block back (the texture's handle dropped
/// first or after).
#[test]
fn dropping_the_streamer_mid_stream_joins_the_worker_and_leaks_nothing() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let baseline = {
            let mut streamer = Streamer::new(&device, desc(true)).unwrap();
            let t = streamer.add_texture("vt warm", source("vt warm", 1)).unwrap();
            let commands = CommandContext::new(&device, "warm frames").unwrap();
            {
                let w = row(&streamer, t.id(), 3);
                frame(&mut streamer, &commands, &w)
            };
            streamer.remove_texture(t).unwrap();
            drop(streamer);
            common::settled_accounting(&device)
        };
        for case in 0..3 {
            let mut streamer = Streamer::new(&device, desc(true)).unwrap();
            let t = streamer.add_texture("vt drop", source("vt drop", 7)).unwrap();
            let commands = CommandContext::new(&device, "drop frames").unwrap();
            let id = t.id();
            // Frame 1 reads frame 0's feedback and starts the loads: frame 2's tick binds and
            // stages eight tiles.
            {
                let w = row(&streamer, id, 3);
                frame(&mut streamer, &commands, &w)
            };
            {
                let w = row(&streamer, id, 3);
                frame(&mut streamer, &commands, &w)
            };
            match case {
                // The job handed out at `end_frame`, never joined.
                0 => {
                    let w = row(&streamer, id, 3);
                    frame(&mut streamer, &commands, &w)
                }
                // Planned by `begin_frame`, the frame never ended.
                1 => drop(streamer.begin_frame().unwrap()),
                // Handed out, the texture's handle dropped before the streamer.
                _ => {
                    {
                        let w = row(&streamer, id, 3);
                        frame(&mut streamer, &commands, &w)
                    };
                    drop(t);
                    drop(streamer);
                    drop(commands);
                    assert_eq!(common::settled_accounting(&device), baseline, "case {case}: nothing leaked");
                    continue;
                }
            }
            assert!(
                streamer.stats().worker_binds + streamer.stats().worker_tiles_staged == 0,
                "case {case}: nothing joined yet"
            );
            drop(streamer);
            drop(t);
            drop(commands);
            assert_eq!(common::settled_accounting(&device), baseline, "case {case}: nothing leaked");
        }
    });
}

/// Clears the faults when a test ends, however it ends.
struct ClearFaults<'a>(&'a Device);

impl Drop for ClearFaults<'_> {
    fn drop(&mut self) {
        self.0.ledger().clear_faults();
    }
}

/// An out-of-memory at the worker's `vkQueueBindSparse`: the frame that handed the job out ends
/// normally, the next `begin_frame` returns the typed error (the frame is skipped), the tick is
/// applied again at the frame after (on the frame thread: the one frame that binds there), and
/// every wanted tile reaches the GPU with its texels. A lost device there is the same typed error
/// at every later call, and teardown leaks nothing either way.
#[test]
fn a_bind_that_fails_on_the_worker_is_a_typed_error_at_the_next_frame_call() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let _clear = ClearFaults(&device);
        let baseline = {
            let mut streamer = Streamer::new(&device, desc(true)).unwrap();
            let t = streamer.add_texture("vt warm", source("vt warm", 1)).unwrap();
            streamer.remove_texture(t).unwrap();
            drop(streamer);
            common::settled_accounting(&device)
        };
        for lost in [false, true] {
            let pattern = 11 + u32::from(lost);
            let mut streamer = Streamer::new(&device, desc(true)).unwrap();
            let t = streamer.add_texture("vt bind fault", source("vt bind fault", pattern)).unwrap();
            let commands = CommandContext::new(&device, "fault frames").unwrap();
            let id = t.id();
            let wanted = row(&streamer, id, 3);
            // Frame 1 starts the loads; its `end_frame` hands out a job with nothing to bind.
            frame(&mut streamer, &commands, &wanted);
            frame(&mut streamer, &commands, &wanted);
            let fault = if lost { InjectedFault::DeviceLost } else { InjectedFault::OutOfDeviceMemory };
            let before = device.ledger().faults_fired(FaultSite::BindSparse);
            device.ledger().inject_fault(FaultSite::BindSparse, 0, fault);
            // Frame 2 ticks the loaded tiles; the worker's bind fails after its `end_frame`.
            frame(&mut streamer, &commands, &wanted);
            let e = common::try_cpu_feedback_frame(&mut streamer, &commands, &wanted).unwrap_err();
            assert_eq!(
                device.ledger().faults_fired(FaultSite::BindSparse) - before,
                1,
                "the worker's bind faulted"
            );
            if lost {
                assert!(e.is_device_lost(), "{e}");
                let again = common::try_cpu_feedback_frame(&mut streamer, &commands, &wanted).unwrap_err();
                assert!(again.is_device_lost(), "every later call: {again}");
                drop(t);
            } else {
                assert!(e.is_out_of_memory(), "{e}");
                device.ledger().clear_faults();
                for _ in 0..4 {
                    frame(&mut streamer, &commands, &wanted);
                }
                assert_eq!(streamer.stats().ticks_retried, 1, "{:?}", streamer.stats());
                assert!(wanted.iter().all(|&k| streamer.manager().is_resident(k)));
                streamer.manager().check_invariants().unwrap();
                for &k in &wanted {
                    assert!(has_texels(&streamer, &t, pattern, k), "{k:?} has its texels after the retry");
                }
                streamer.remove_texture(t).unwrap();
            }
            drop(streamer);
            drop(commands);
            assert_eq!(common::settled_accounting(&device), baseline, "lost {lost}: nothing leaked");
            device.ledger().clear_faults();
            assert!(!device.is_lost());
        }
    });
}
