//! The manager's policy set through `StreamerDesc`: each tunable reaches the manager and changes
//! what a frame does (loads in flight, eviction delay, evictions per frame, prefetch, cancelling),
//! and values the manager cannot run with are refused by `Streamer::new`, which then creates
//! nothing (the harness's leak check). On lavapipe, the feedback written by the CPU.

use residency_core::desc::DescError;
use residency_core::format::Format;
use residency_core::streaming::{
    FeedbackSampling, FnSource, RequestKind, StreamingDesc, TileKey, TileSource,
};
use residency_core::tiles::{ImageId, TileCoord};
use residency_core::vt_file::VtDesc;
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::CommandContext;
use std::sync::{Arc, Condvar, Mutex};

mod common;

const SIDE: u32 = 1024;

/// A 1024² RGBA8 source in 128² tiles (mip 1: 4 × 4 tiles, mip 2: 2 × 2); the reads of mips below
/// 3 wait at `gate` while it is shut (`None`: never).
fn source(name: &str, gate: Option<Arc<Gate>>) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        if let (Some(gate), true) = (&gate, mip < 3) {
            gate.wait();
        }
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok(vec![mip as u8 ^ x as u8 ^ y as u8; (w * h * 4) as usize])
    }))
}

/// Reads wait here until the gate opens; opened on drop, so a failing assertion never leaves a
/// worker waiting (the streamer's drop joins its workers).
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// One frame in flight: the feedback of frame `f` is read by `begin_frame` of frame `f + 1`
/// (it waits for its slot), so the frame a request reaches the manager is exact.
fn desc() -> StreamerDesc {
    StreamerDesc::default().with_name("policy streamer").with_frames_in_flight(1).with_workers(2)
}

/// The tiles of `mip` of `image` (layer 0).
fn mip_tiles(streamer: &Streamer, image: ImageId, mip: u32) -> Vec<TileKey> {
    let layout = streamer.manager().residency(image).unwrap().layout();
    let side = (SIDE >> mip).div_ceil(128);
    (0..side)
        .flat_map(|y| (0..side).map(move |x| (x, y)))
        .map(|(x, y)| {
            TileKey::tile(image, layout.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap())
        })
        .collect()
}

/// One frame whose feedback asks for `wanted` as `kind` records; waits for the loads it started.
fn frame(streamer: &mut Streamer, commands: &CommandContext, wanted: &[TileKey], kind: RequestKind) {
    common::try_cpu_feedback_frame_of(streamer, commands, wanted, kind).unwrap();
    streamer.wait_for_loads();
}

fn misses(streamer: &mut Streamer, commands: &CommandContext, wanted: &[TileKey]) {
    frame(streamer, commands, wanted, RequestKind::Miss);
}

fn all_resident(streamer: &Streamer, keys: &[TileKey]) -> bool {
    keys.iter().all(|&k| streamer.manager().is_resident(k))
}

/// Every tunable reaches the manager's description; the defaults are the core's (and the cancel
/// delay is derived from the feedback sampling and the frames in flight, as before).
#[test]
fn streamer_desc_policy_reaches_the_manager() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let core = StreamingDesc::default();
        let streamer = Streamer::new(device, StreamerDesc::default()).unwrap();
        let m = streamer.manager().desc();
        assert_eq!(
            (
                m.max_in_flight,
                m.eviction_delay_frames,
                m.evictions_per_frame,
                m.prefetch,
                m.thrash_window_frames
            ),
            (
                core.max_in_flight,
                core.eviction_delay_frames,
                core.evictions_per_frame,
                core.prefetch,
                core.thrash_window_frames
            )
        );
        // Default sampling (every frame) + 2 frames in flight = 3, raised to 4.
        assert_eq!(m.cancel_after_frames, 4);
        drop(streamer);
        let sampled =
            StreamerDesc::default().with_sampling(FeedbackSampling::new(8, 6)).with_frames_in_flight(3);
        assert_eq!(Streamer::new(device, sampled).unwrap().manager().desc().cancel_after_frames, 9);

        let tuned = StreamerDesc::default()
            .with_max_loads_in_flight(7)
            .with_eviction_delay_frames(21)
            .with_evictions_per_frame(5)
            .with_prefetch(false)
            .with_thrash_window_frames(0)
            .with_cancel_after_frames(0);
        let streamer = Streamer::new(device, tuned).unwrap();
        let m = streamer.manager().desc();
        assert_eq!(
            (
                m.max_in_flight,
                m.eviction_delay_frames,
                m.evictions_per_frame,
                m.prefetch,
                m.thrash_window_frames,
                m.cancel_after_frames
            ),
            (7, 21, 5, false, 0, 0)
        );
    });
}

/// The in-flight cap bounds the loads a frame starts: 20 tiles wanted at once start 2 a frame
/// with a cap of 2 (and still all arrive), where the default starts them in one frame.
#[test]
fn max_loads_in_flight_bounds_the_loads_a_frame_starts() {
    for cap in [None, Some(2)] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let desc = match cap {
                Some(cap) => desc().with_max_loads_in_flight(cap),
                None => desc(),
            };
            let mut streamer = Streamer::new(&device, desc).unwrap();
            let t = streamer.add_texture("vt cap", source("vt cap", None)).unwrap();
            let commands = CommandContext::new(&device, "policy frames").unwrap();
            // Mip 1 and its parents in mip 2.
            let wanted = mip_tiles(&streamer, t.id(), 1);
            let mut most = 0;
            let mut frames = 0;
            while !all_resident(&streamer, &wanted) {
                assert!(frames < 40, "cap {cap:?}: not resident after {frames} frames");
                misses(&mut streamer, &commands, &wanted);
                most = most.max(streamer.manager_stats().in_flight);
                frames += 1;
            }
            match cap {
                Some(cap) => assert!(most <= u64::from(cap), "{most} loads in flight over a cap of {cap}"),
                None => assert!(most >= 16, "the default started only {most} loads at once"),
            }
            streamer.remove_texture(t).unwrap();
        });
    }
}

/// The eviction delay: with the budget full of one texture's tiles, another texture's tiles wait
/// until the first's have gone unwanted for the delay — 2 frames, or 12.
#[test]
fn a_longer_eviction_delay_evicts_later() {
    for delay in [2, 12] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut streamer = Streamer::new(&device, desc().with_eviction_delay_frames(delay)).unwrap();
            let a = streamer.add_texture("vt delay a", source("vt delay a", None)).unwrap();
            let b = streamer.add_texture("vt delay b", source("vt delay b", None)).unwrap();
            let commands = CommandContext::new(&device, "policy frames").unwrap();
            // Room for the coarse chains and four more tiles.
            let pinned = streamer.manager().committed_tiles() as u32;
            streamer.set_budget_tiles(pinned + 4);
            let (want_a, want_b) = (mip_tiles(&streamer, a.id(), 2), mip_tiles(&streamer, b.id(), 2));
            for _ in 0..4 {
                misses(&mut streamer, &commands, &want_a);
            }
            assert!(all_resident(&streamer, &want_a));
            // From now on only b's tiles are wanted: a's were last wanted by the frame before,
            // whose feedback the next frame reads.
            let mut frames = 0;
            while streamer.manager_stats().tiles_evicted == 0 {
                assert!(frames < delay + 6, "delay {delay}: nothing evicted after {frames} frames");
                misses(&mut streamer, &commands, &want_b);
                frames += 1;
            }
            assert!(frames >= delay, "delay {delay}: a tile was evicted {frames} frames after its last use");
            for _ in 0..4 {
                misses(&mut streamer, &commands, &want_b);
            }
            assert!(all_resident(&streamer, &want_b), "{:?}", streamer.manager_stats());
            assert!(streamer.manager().check_invariants().is_ok());
            streamer.remove_texture(a).unwrap();
            streamer.remove_texture(b).unwrap();
        });
    }
}

/// A budget cut is spread over frames at `evictions_per_frame` a frame: 20 tiles go 3 a frame,
/// where the default evicts them all in one frame.
#[test]
fn evictions_per_frame_spreads_a_budget_cut() {
    for per_frame in [None, Some(3)] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let desc = match per_frame {
                Some(n) => desc().with_evictions_per_frame(n),
                None => desc(),
            };
            let mut streamer = Streamer::new(&device, desc).unwrap();
            let t = streamer.add_texture("vt cut", source("vt cut", None)).unwrap();
            let commands = CommandContext::new(&device, "policy frames").unwrap();
            let pinned = streamer.manager().committed_tiles() as u32;
            let wanted = mip_tiles(&streamer, t.id(), 1);
            for _ in 0..4 {
                misses(&mut streamer, &commands, &wanted);
            }
            assert!(all_resident(&streamer, &wanted));
            misses(&mut streamer, &commands, &[]);
            streamer.set_budget_tiles(pinned);
            let mut most = 0;
            let mut frames = 0;
            while streamer.manager_stats().tiles_evicted < 20 {
                assert!(frames < 12, "{per_frame:?}: {:?}", streamer.manager_stats());
                misses(&mut streamer, &commands, &[]);
                most = most.max(streamer.manager_stats().last_frame.evicted);
                frames += 1;
            }
            match per_frame {
                Some(n) => {
                    assert!(most <= n, "{most} evictions in a frame over {n}");
                    assert!(frames >= 20u32.div_ceil(n), "20 evictions in {frames} frames");
                }
                None => assert_eq!(most, 20, "the default cut evicts at once"),
            }
            assert_eq!(streamer.manager().committed_tiles(), u64::from(pinned));
            streamer.remove_texture(t).unwrap();
        });
    }
}

/// Prefetch off: LOD warnings start no loads (a miss still does); on, the warned tiles load.
#[test]
fn prefetch_off_lod_warnings_start_no_loads() {
    for prefetch in [true, false] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let mut streamer = Streamer::new(&device, desc().with_prefetch(prefetch)).unwrap();
            let t = streamer.add_texture("vt prefetch", source("vt prefetch", None)).unwrap();
            let commands = CommandContext::new(&device, "policy frames").unwrap();
            let warned = mip_tiles(&streamer, t.id(), 2);
            // Priming streamed the coarse chain.
            let primed = streamer.manager_stats().tiles_streamed;
            for _ in 0..4 {
                frame(&mut streamer, &commands, &warned, RequestKind::LodWarning);
            }
            assert_eq!(all_resident(&streamer, &warned), prefetch, "{:?}", streamer.manager_stats());
            assert_eq!(streamer.manager_stats().tiles_streamed > primed, prefetch);
            for _ in 0..3 {
                misses(&mut streamer, &commands, &warned);
            }
            assert!(all_resident(&streamer, &warned), "misses load with prefetch {prefetch}");
            streamer.remove_texture(t).unwrap();
        });
    }
}

/// The cancel delay: loads asked for in one frame only, held at a gate, are cancelled after the
/// default delay, and never with `with_cancel_after_frames(0)`.
#[test]
fn cancel_after_frames_zero_never_cancels() {
    for cancel in [None, Some(0)] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let desc = match cancel {
                Some(n) => desc().with_cancel_after_frames(n),
                None => desc(),
            };
            let mut streamer = Streamer::new(&device, desc).unwrap();
            let gate = Arc::new(Gate::default());
            let _open = OpenOnDrop(Arc::clone(&gate));
            let t = streamer.add_texture("vt cancel", source("vt cancel", Some(Arc::clone(&gate)))).unwrap();
            let commands = CommandContext::new(&device, "policy frames").unwrap();
            let wanted = mip_tiles(&streamer, t.id(), 2);
            // The loads start in the next frame and stay at the gate (no waiting for them).
            let bindings = streamer.begin_frame().unwrap();
            let records = common::miss_records(&bindings, &wanted);
            drop(bindings);
            streamer.write_cpu_feedback(&records.unwrap()).unwrap();
            let bindings = streamer.frame_bindings().unwrap();
            let submission = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
            drop(bindings);
            streamer.end_frame(submission.gpu_use()).unwrap();
            for _ in 0..10 {
                common::cpu_feedback_frame(&mut streamer, &commands, &[]);
            }
            let cancelled = streamer.manager_stats().loads_cancelled;
            match cancel {
                None => assert_eq!(cancelled, 4, "{:?}", streamer.manager_stats()),
                Some(_) => {
                    assert_eq!(cancelled, 0, "{:?}", streamer.manager_stats());
                    assert_eq!(streamer.manager().in_flight().count(), 4);
                }
            }
            gate.open();
            streamer.wait_for_loads();
            for _ in 0..2 {
                common::cpu_feedback_frame(&mut streamer, &commands, &[]);
            }
            assert_eq!(streamer.manager().in_flight().count(), 0);
            assert_eq!(all_resident(&streamer, &wanted), cancel.is_some());
            streamer.remove_texture(t).unwrap();
        });
    }
}

fn too_small(result: Result<Streamer, StreamError>, field: &str, value: u64, least: u64) {
    match result {
        Err(StreamError::Desc(DescError::TooSmall { field: f, value: v, min, .. })) => {
            assert_eq!((f, v, min), (field, value, least))
        }
        other => panic!("{field} = {value}: expected TooSmall, got {other:?}"),
    }
}

/// No load would ever start with a cap of 0 (priming would spin for its 256 ticks, then fail).
#[test]
fn misuse_zero_max_loads_in_flight_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let literal = StreamerDesc { max_loads_in_flight: 0, ..StreamerDesc::default() };
        too_small(Streamer::new(device, literal), "max_loads_in_flight", 0, 1);
        too_small(Streamer::new(device, desc().with_max_loads_in_flight(0)), "max_loads_in_flight", 0, 1);
    });
}

/// A budget cut would never evict with 0 evictions a frame; a delay of 0 would mean what 1 means.
#[test]
fn misuse_zero_eviction_settings_are_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        too_small(Streamer::new(device, desc().with_evictions_per_frame(0)), "evictions_per_frame", 0, 1);
        too_small(Streamer::new(device, desc().with_eviction_delay_frames(0)), "eviction_delay_frames", 0, 1);
    });
}

/// A cancel delay below the frames between two feedback reads cancels loads still in use (and
/// starts them again at the next read): refused with the least delay, `frame_interval +
/// frames_in_flight`.
#[test]
fn misuse_cancel_delay_below_the_feedback_gap_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        // Every frame, 2 in flight: 3.
        too_small(
            Streamer::new(device, StreamerDesc::default().with_cancel_after_frames(2)),
            "cancel_after_frames",
            2,
            3,
        );
        let sparse = StreamerDesc::default()
            .with_sampling(FeedbackSampling::new(8, 4))
            .with_frames_in_flight(2)
            .with_cancel_after_frames(5);
        too_small(Streamer::new(device, sparse), "cancel_after_frames", 5, 6);
        // The gap itself and 0 (never) are taken.
        let limits = &device.profile().limits;
        StreamerDesc::default().with_cancel_after_frames(3).validate(limits).unwrap();
        StreamerDesc::default().with_cancel_after_frames(0).validate(limits).unwrap();
    });
}

/// `pinned_mip_tiles` pins every mip of at most that many tiles besides the tails: `add_texture`
/// makes them resident before it returns and a budget cut to nothing evicts none of them, while
/// the default keeps to the single-tile mips (lavapipe has no mip tail).
#[test]
fn pinned_mip_tiles_primes_the_coarse_mips_and_never_evicts_them() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let commands = CommandContext::new(device, "pinned mips").unwrap();
        let mut plain = Streamer::new(device, desc()).unwrap();
        let t = plain.add_texture("plain", source("plain", None)).unwrap();
        let image = t.id();
        let mip2 = mip_tiles(&plain, image, 2);
        assert!(
            mip2.iter().all(|k| !plain.coarse_chain(&t).contains(k)),
            "the default pins the single-tile mips only"
        );
        assert!(plain.coarse_chain(&t).contains(&mip_tiles(&plain, image, 3)[0]));
        plain.remove_texture(t).unwrap();
        drop(plain);

        let mut streamer = Streamer::new(device, desc().with_pinned_mip_tiles(4)).unwrap();
        assert_eq!(streamer.manager().desc().pinned_mip_tiles, 4);
        let t = streamer.add_texture("pinned", source("pinned", None)).unwrap();
        let image = t.id();
        let (mip1, mip2) = (mip_tiles(&streamer, image, 1), mip_tiles(&streamer, image, 2));
        let chain = streamer.coarse_chain(&t).to_vec();
        assert!(mip2.iter().all(|k| chain.contains(k)), "the 2 × 2 mip is pinned");
        assert!(mip1.iter().all(|k| !chain.contains(k)), "the 4 × 4 mip is not");
        assert!(all_resident(&streamer, &chain), "primed before add_texture returned");
        // Mip 1 streams in, then the budget falls to one tile: mip 1 goes, the pinned chain stays.
        for _ in 0..3 {
            misses(&mut streamer, &commands, &mip1);
        }
        assert!(all_resident(&streamer, &mip1));
        let _ = streamer.set_budget_tiles(1);
        for _ in 0..24 {
            frame(&mut streamer, &commands, &[], RequestKind::Miss);
        }
        assert!(mip1.iter().all(|&k| !streamer.manager().is_resident(k)), "unpinned tiles are evicted");
        assert!(all_resident(&streamer, &chain), "pinned tiles are never evicted");
        streamer.remove_texture(t).unwrap();
    });
}

/// More than `MAX_PINNED_MIP_TILES` would pin most of a texture: refused, nothing created.
#[test]
fn misuse_pinned_mip_tiles_over_the_maximum_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let max = StreamerDesc::MAX_PINNED_MIP_TILES;
        match Streamer::new(device, desc().with_pinned_mip_tiles(max + 1)) {
            Err(StreamError::Desc(DescError::TooLarge { field, value, .. })) => {
                assert_eq!((field, value), ("pinned_mip_tiles", u64::from(max) + 1))
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        desc().with_pinned_mip_tiles(max).validate(&device.profile().limits).unwrap();
    });
}
