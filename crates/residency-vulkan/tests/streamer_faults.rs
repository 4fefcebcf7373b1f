//! Faults inside the streamer's frames (issue #21), on lavapipe under synchronization validation
//! (`with_gpu`: a validation message fails the test, no object may outlive it), on both paths.
//!
//! A scenario of 18 frames with 2 in flight (a texture primed, eight mip-0 tiles wanted, then
//! eight others under a budget that evicts the first ones) is run once to count the calls that
//! can fail inside the frames (`begin_frame`, the recording and the frame's submission): memory
//! allocations, resource creations, sparse binds, submissions, waits. Then, for each site and
//! each `k`, the scenario again with `VK_ERROR_OUT_OF_DEVICE_MEMORY` injected at the `k`-th call
//! of that site inside the frames, and separately a lost device at the `k`-th bind, submission
//! and wait. Checked each time: every failure is a typed error of the injected kind; a frame
//! whose `begin_frame` fails is skipped, a frame whose submission fails is ended with
//! `Streamer::abandon_frame`; the coarse chain stays resident at every frame (the texture keeps
//! sampling its coarser mips); after an out-of-memory the next frames catch up (every wanted
//! tile resident, with its texels, the manager's invariants); after a loss every later call is
//! the same typed error; at teardown the device's ledger equals its baseline (memory objects,
//! bytes per heap, live objects by name). A `TileSource` that fails for some tiles is the third
//! kind: typed `LoadFailure`s, their parents sampled instead, the other tiles streamed.

use residency_core::format::Format;
use residency_core::streaming::{
    FeedbackBuffer, FnSource, RequestKind, SourceError, StreamUnit, TileKey, TileSource,
};
use residency_core::tiles::{ImageId, ResidencyPath, TexelRegion, TileCoord};
use residency_core::vt_file::VtDesc;
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc, TextureViews, VirtualTexture};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::ResidencyError;
use residency_vulkan::{CommandContext, Device, FaultSite, InjectedFault};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

mod common;
use common::settled_accounting;

const SIDE: u32 = 1024;
/// Frames of the scenario: the first [`SWITCH`] want one row of mip-0 tiles, the others another
/// (which evicts the first once it is unused for the manager's eviction delay, 8 ticks).
const FRAMES: usize = 18;
/// See [`FRAMES`].
const SWITCH: usize = 5;
/// Frames after the faulted ones in which the streamer must catch up.
const RECOVERY: usize = 10;

fn texel(texture: u32, mip: u32, x: u32, y: u32) -> [u8; 4] {
    [(x % 251) as u8, (y % 241) as u8, (mip * 29 + texture) as u8, 0xe0 | texture as u8]
}

/// A procedural RGBA8 source of 128² tiles; `fails(mip, x, y)` says which tile reads fail.
fn source(
    name: &str,
    texture: u32,
    fails: impl Fn(u32, u32, u32) -> bool + Send + Sync + 'static,
) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, SIDE, SIDE, 128, 128);
    let owned = name.to_owned();
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        if fails(mip, x, y) {
            return Err(SourceError::Read {
                source_name: owned.clone(),
                reason: format!("tile ({x}, {y}) of mip {mip} is damaged"),
            });
        }
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        // Made once per tile for the whole test binary: the runs read the same tiles again and
        // again (the software path its neighbours too), and a debug build makes them slowly.
        static TILES: std::sync::OnceLock<std::sync::Mutex<HashMap<[u32; 4], Vec<u8>>>> =
            std::sync::OnceLock::new();
        let tiles = TILES.get_or_init(Default::default);
        if let Some(t) = tiles.lock().unwrap().get(&[texture, mip, x, y]) {
            return Ok(t.clone());
        }
        let data: Vec<u8> = (0..h)
            .flat_map(|ty| (0..w).flat_map(move |tx| texel(texture, mip, x * 128 + tx, y * 128 + ty)))
            .collect();
        tiles.lock().unwrap().insert([texture, mip, x, y], data.clone());
        Ok(data)
    }))
}

fn desc(path: ResidencyPath) -> StreamerDesc {
    // 24 tiles: the coarse chain, one row of eight mip-0 tiles and their parents, not two rows.
    StreamerDesc::default()
        .with_name("fault streamer")
        .with_path(path)
        .with_frames_in_flight(2)
        .with_budget_tiles(24)
        .with_workers(2)
}

fn tile(streamer: &Streamer, id: ImageId, mip: u32, x: u32, y: u32) -> TileKey {
    let layout = streamer.manager().residency(id).unwrap().layout();
    TileKey::tile(id, layout.tile_index(TileCoord { layer: 0, mip, x, y, z: 0 }).unwrap())
}

/// What an injected fault came back as: the class of the error (`ResidencyError`), whatever its nesting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    OutOfMemory,
    DeviceLost,
}

fn kind_of(e: &impl ResidencyError) -> Option<Kind> {
    if e.is_device_lost() {
        Some(Kind::DeviceLost)
    } else if e.is_out_of_memory() {
        Some(Kind::OutOfMemory)
    } else {
        None
    }
}

/// How one frame went.
#[derive(Debug)]
enum Frame {
    Done,
    /// `begin_frame` failed (the frame did not start).
    BeginFailed(StreamError),
    /// The frame's submission failed: the frame was abandoned (`abandon_frame`'s own result).
    SubmitFailed(residency_vulkan::VulkanError, Result<(), StreamError>),
}

/// One frame as a CPU renderer makes it (misses for `wanted` as its feedback, a real empty
/// submission recorded through `FrameBindings::record`), a failed submission abandoned.
fn run_frame(streamer: &mut Streamer, commands: &CommandContext, wanted: &[TileKey]) -> Frame {
    let bindings = match streamer.begin_frame() {
        Ok(b) => b,
        Err(e) => return Frame::BeginFailed(e),
    };
    let records = common::miss_records(&bindings, wanted);
    drop(bindings);
    if let Some(records) = records {
        streamer.write_cpu_feedback(&records).unwrap();
    }
    let bindings = streamer.frame_bindings().unwrap();
    let submitted = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap());
    drop(bindings);
    let out = match submitted {
        Ok(submission) => {
            streamer.end_frame(submission.gpu_use()).unwrap();
            Frame::Done
        }
        Err(e) => Frame::SubmitFailed(e, streamer.abandon_frame()),
    };
    // Frame-exact loads (the frames take microseconds here).
    streamer.wait_for_loads();
    out
}

/// The wanted rows: `y = 3` in the first [`SWITCH`] frames of the scenario, then `y = 5`.
fn wanted(streamer: &Streamer, id: ImageId, frame: usize) -> Vec<TileKey> {
    let y = if frame < SWITCH { 3 } else { 5 };
    (0..8).map(|x| tile(streamer, id, 0, x, y)).collect()
}

/// Checks that `key` (a mip-0 tile) holds its texels, on either path.
fn check_texels(
    device: &Arc<Device>,
    streamer: &mut Streamer,
    commands: &CommandContext,
    (t, texture): (&VirtualTexture, u32),
    key: TileKey,
    what: &str,
) {
    let layout = streamer.manager().residency(t.id()).unwrap().layout().clone();
    let StreamUnit::Tile(index) = key.unit else { unreachable!("mip-0 tiles") };
    let c = layout.tile_coord(index).unwrap();
    let (x0, y0) = (c.x * 128, c.y * 128);
    if let Some(image) = streamer.sparse_image(t) {
        let got = image
            .read_region(0, 0, TexelRegion { offset: [x0, y0, 0], extent: [128, 128, 1] }, 1 << 20)
            .unwrap();
        let want: Vec<u8> =
            (0..128).flat_map(|y| (0..128).flat_map(move |x| texel(texture, 0, x0 + x, y0 + y))).collect();
        assert!(got == want, "{what}: tile {:?} of mip 0 has its texels", (c.x, c.y));
        return;
    }
    // Software path: sampled through the fallback GLSL from the atlas and the indirection.
    let bindings = streamer.begin_frame().unwrap();
    let submission = commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
    commands.wait_for(&submission).unwrap();
    let binding = bindings.textures().into_iter().find(|b| b.id == t.id()).unwrap();
    let TextureViews::Software { atlas, indirection } = binding.views else { panic!("software path") };
    let probes: Vec<_> = [(5, 7), (100, 120)]
        .iter()
        .map(|&(dx, dy)| (common::centre(SIDE, x0 + dx, y0 + dy, 0), 0.0))
        .collect();
    let got = common::sample_fallback(
        device,
        common::SOFTWARE_FALLBACK,
        (atlas.into(), indirection.into()),
        &probes,
    );
    for ((texels, resident, lod), &(dx, dy)) in got.iter().zip(&[(5, 7), (100, 120)]) {
        assert!(*resident && *lod == 0.0, "{what}: sampled at mip 0");
        common::close(*texels, common::as_f32(texel(texture, 0, x0 + dx, y0 + dy)), what);
    }
    drop(bindings);
    streamer.end_frame(submission.gpu_use()).unwrap();
}

/// What a faulted run saw.
#[derive(Debug, Default)]
struct Run {
    /// Frames whose `begin_frame` failed, and frames abandoned after a failed submission.
    begin_failed: u32,
    submit_failed: u32,
}

/// The scenario on a fresh streamer; `arm` injects the fault once the texture is primed (so
/// inside the frames). `expect` is the kind every failure must be (`None`: no fault). Returns
/// what failed, after the checks of the module docs.
fn scenario(device: &Arc<Device>, path: ResidencyPath, arm: impl FnOnce(), expect: Option<Kind>) -> Run {
    // A pattern of its own per run: tile memory the driver hands out again may still hold an
    // earlier run's texels.
    static RUNS: AtomicU32 = AtomicU32::new(0);
    let pattern = 32 + RUNS.fetch_add(1, Ordering::Relaxed) % 32;
    let mut streamer = Streamer::new(device, desc(path)).unwrap();
    let t = streamer.add_texture("vt fault", source("vt fault", pattern, |_, _, _| false)).unwrap();
    let commands = CommandContext::new(device, "fault frames").unwrap();
    let chain = streamer.coarse_chain(&t).to_vec();
    let id = t.id();
    let mut run = Run::default();
    arm();
    for f in 0..FRAMES {
        let wanted = wanted(&streamer, id, f);
        let failure = match run_frame(&mut streamer, &commands, &wanted) {
            Frame::Done => None,
            Frame::BeginFailed(e) => {
                run.begin_failed += 1;
                Some(kind_of(&e).unwrap_or_else(|| panic!("frame {f}: begin_frame failed with {e}")))
            }
            Frame::SubmitFailed(e, abandoned) => {
                run.submit_failed += 1;
                let k = kind_of(&e).unwrap_or_else(|| panic!("frame {f}: submission failed with {e}"));
                if let Err(a) = abandoned {
                    assert_eq!(kind_of(&a), Some(k), "frame {f}: abandon_frame: {a}");
                }
                Some(k)
            }
        };
        if let Some(k) = failure {
            assert_eq!(Some(k), expect, "frame {f}: a fault of the injected kind");
        }
        // Rendering goes on from coarser data: the coarse chain stays resident.
        assert!(chain.iter().all(|&k| streamer.manager().is_resident(k)), "frame {f}: coarse chain");
    }
    // A fault armed at a call beyond this run's calls did not fire in its frames (waits vary a
    // little from run to run with the GPU's progress): the run then recovers like any other.
    if expect == Some(Kind::DeviceLost) && device.is_lost() {
        // Every later frame fails the same way, and the streamer stays consistent.
        let last = wanted(&streamer, id, FRAMES);
        let again = run_frame(&mut streamer, &commands, &last);
        match again {
            Frame::BeginFailed(e) => assert_eq!(kind_of(&e), Some(Kind::DeviceLost), "{e}"),
            Frame::SubmitFailed(e, _) => assert_eq!(kind_of(&e), Some(Kind::DeviceLost), "{e}"),
            Frame::Done => panic!("a frame on a lost device succeeded"),
        }
    } else {
        device.ledger().clear_faults();
        // The next frames catch up: every tile of the last row resident, with its texels.
        let wanted = wanted(&streamer, id, FRAMES - 1);
        for f in 0..RECOVERY {
            match run_frame(&mut streamer, &commands, &wanted) {
                Frame::Done => {}
                other => panic!("recovery frame {f}: {other:?}"),
            }
        }
        assert!(
            wanted.iter().all(|&k| streamer.manager().is_resident(k)),
            "the wanted tiles after the fault: {:?}",
            streamer.stats()
        );
        streamer.manager().check_invariants().unwrap();
        // The texels: read back on the hardware path; the software path samples them through a
        // compute pipeline, too slow on lavapipe for every run (the tests below sample them).
        if path == ResidencyPath::Hardware {
            check_texels(device, &mut streamer, &commands, (&t, pattern), wanted[2], "after the fault");
            check_texels(device, &mut streamer, &commands, (&t, pattern), wanted[7], "after the fault");
        }
    }
    assert!(streamer.take_load_failures().is_empty());
    if !device.is_lost() {
        streamer.remove_texture(t).unwrap();
    } else {
        drop(t);
    }
    drop(streamer);
    drop(commands);
    run
}

const SITES: [FaultSite; 5] = [
    FaultSite::AllocateMemory,
    FaultSite::CreateResource,
    FaultSite::BindSparse,
    FaultSite::QueueSubmit,
    FaultSite::Wait,
];

fn faults_on(path: ResidencyPath) -> (u64, u64, Vec<String>) {
    let mut injected = 0;
    let mut survived = 0;
    let mut rows = Vec::new();
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        let _clear = ClearFaults(&device);
        // A first run settles what the device keeps for reuse (shader modules, readback
        // heaps), then the baseline; and counts the calls of each site inside the frames.
        let calls = frame_calls(&device, path);
        let baseline = settled_accounting(&device);
        for (&site, &n) in SITES.iter().zip(&calls) {
            let mut fired = 0;
            let mut failed_frames = 0;
            for k in 0..n {
                let before = device.ledger().faults_fired(site);
                let dev = Arc::clone(&device);
                let run = scenario(
                    &device,
                    path,
                    move || dev.ledger().inject_fault(site, k, InjectedFault::OutOfDeviceMemory),
                    Some(Kind::OutOfMemory),
                );
                device.ledger().clear_faults();
                let hit = device.ledger().faults_fired(site) - before;
                fired += hit;
                failed_frames += run.begin_failed + run.submit_failed;
                assert_eq!(
                    settled_accounting(&device),
                    baseline,
                    "{path:?} {site:?} k = {k}: nothing leaked"
                );
            }
            injected += fired;
            survived += fired;
            rows.push(format!(
                "{path:?} {site:?}: {n} calls in the frames, {fired} out-of-memory faults injected, {failed_frames} frames failed with it, all recovered"
            ));
        }
        for (&site, &n) in SITES.iter().zip(&calls) {
            if !matches!(site, FaultSite::BindSparse | FaultSite::QueueSubmit | FaultSite::Wait) {
                continue;
            }
            let mut fired = 0;
            for k in 0..n {
                let before = device.ledger().faults_fired(site);
                let dev = Arc::clone(&device);
                scenario(
                    &device,
                    path,
                    move || dev.ledger().inject_fault(site, k, InjectedFault::DeviceLost),
                    Some(Kind::DeviceLost),
                );
                let hit = device.ledger().faults_fired(site) - before;
                fired += hit;
                assert_eq!(
                    settled_accounting(&device),
                    baseline,
                    "{path:?} {site:?} lost at k = {k}: nothing leaked"
                );
                device.ledger().clear_faults();
                assert!(!device.is_lost());
            }
            injected += fired;
            survived += fired;
            rows.push(format!(
                "{path:?} {site:?}: device lost at each of {n} calls, {fired} injected, all torn down"
            ));
        }
    });
    (injected, survived, rows)
}

/// Clears the faults when a test ends, however it ends (the device is shared by the test).
struct ClearFaults<'a>(&'a Device);

impl Drop for ClearFaults<'_> {
    fn drop(&mut self) {
        self.0.ledger().clear_faults();
    }
}

/// Calls at each of [`SITES`] inside the frames of the unfaulted scenario.
fn frame_calls(device: &Arc<Device>, path: ResidencyPath) -> Vec<u64> {
    let start = Arc::new(std::sync::Mutex::new(Vec::new()));
    let end = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (s, d) = (Arc::clone(&start), Arc::clone(device));
    scenario_counted(device, path, move || *s.lock().unwrap() = sites_now(&d), &end);
    let (start, end) = (start.lock().unwrap().clone(), end.lock().unwrap().clone());
    start.iter().zip(&end).map(|(a, b)| b - a).collect()
}

fn sites_now(device: &Device) -> Vec<u64> {
    SITES.iter().map(|&s| device.ledger().site_calls(s)).collect()
}

/// [`scenario`] without a fault, noting the calls of every site at the end of its frames.
fn scenario_counted(
    device: &Arc<Device>,
    path: ResidencyPath,
    arm: impl FnOnce(),
    end: &std::sync::Mutex<Vec<u64>>,
) {
    let mut streamer = Streamer::new(device, desc(path)).unwrap();
    let t = streamer.add_texture("vt fault", source("vt fault", 1, |_, _, _| false)).unwrap();
    let commands = CommandContext::new(device, "fault frames").unwrap();
    let id = t.id();
    arm();
    for f in 0..FRAMES {
        let wanted = wanted(&streamer, id, f);
        assert!(matches!(run_frame(&mut streamer, &commands, &wanted), Frame::Done));
    }
    *end.lock().unwrap() = sites_now(device);
    let last = wanted(&streamer, id, FRAMES - 1);
    let resident = last.iter().filter(|&&k| streamer.manager().is_resident(k)).count();
    assert_eq!(resident, last.len(), "{:?} {:?}", streamer.manager_stats(), streamer.stats());
    assert!(
        streamer.manager_stats().tiles_evicted > 0,
        "the scenario evicts: {:?}",
        streamer.manager_stats()
    );
    streamer.remove_texture(t).unwrap();
    drop(streamer);
    drop(commands);
}

#[test]
fn faults_at_every_allocation_creation_bind_submit_and_wait_inside_the_streamers_frames_hardware() {
    let (injected, survived, rows) = faults_on(ResidencyPath::Hardware);
    for r in &rows {
        println!("{r}");
    }
    println!("hardware path: {injected} faults injected inside frames, {survived} survived");
    assert!(injected > 0);
    assert_eq!(injected, survived);
}

#[test]
fn faults_at_every_allocation_creation_submit_and_wait_inside_the_streamers_frames_software() {
    let (injected, survived, rows) = faults_on(ResidencyPath::Software);
    for r in &rows {
        println!("{r}");
    }
    println!("software path: {injected} faults injected inside frames, {survived} survived");
    assert!(injected > 0);
    assert_eq!(injected, survived);
}

/// A source that fails for some tiles: columns 1 and 2 of mip 0 always, and the first read of
/// every tile of mip 1's second row (a retry reads it). Typed `LoadFailure`s, the failing tiles'
/// parents resident in their place, the others streamed with their texels, nothing leaked. (The
/// software path's loads read each tile's 3 × 3 neighbourhood for its border, so there columns
/// 0–3 fail.)
#[test]
fn a_tile_source_fault_inside_frames_is_a_typed_failure_and_the_parent_is_sampled() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let baseline = {
                // Settle the device's reusable objects first.
                let mut streamer = Streamer::new(&device, desc(path)).unwrap();
                let t = streamer.add_texture("vt warm", source("vt warm", 1, |_, _, _| false)).unwrap();
                streamer.remove_texture(t).unwrap();
                drop(streamer);
                // Settled: `check_texels`'s read-back touches memory types the warm-up does not
                // (host-cached ones on the H200), whose kept empty heaps are no leak.
                settled_accounting(&device)
            };
            let first_reads = Arc::new(AtomicU32::new(0));
            let reads = Arc::clone(&first_reads);
            let seen = std::sync::Mutex::new(std::collections::HashSet::new());
            let fails = move |mip: u32, x: u32, y: u32| {
                if mip == 0 && (x == 1 || x == 2) {
                    return true;
                }
                if mip == 1 && y == 1 && seen.lock().unwrap().insert((x, y)) {
                    reads.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                false
            };
            let mut streamer = Streamer::new(&device, desc(path).with_budget_tiles(48)).unwrap();
            let t = streamer.add_texture("vt fault", source("vt fault", 1, fails)).unwrap();
            let commands = CommandContext::new(&device, "fault frames").unwrap();
            let id = t.id();
            let chain = streamer.coarse_chain(&t).to_vec();
            // Row 3 of mip 0: the parents are row 1 of mip 1, whose first reads fail.
            let wanted: Vec<TileKey> = (0..8).map(|x| tile(&streamer, id, 0, x, 3)).collect();
            for f in 0..16 {
                assert!(matches!(run_frame(&mut streamer, &commands, &wanted), Frame::Done), "frame {f}");
                assert!(chain.iter().all(|&k| streamer.manager().is_resident(k)), "frame {f}: coarse chain");
            }
            let failures = streamer.take_load_failures();
            assert!(failures
                .iter()
                .all(|f| f.texture == "vt fault" && matches!(f.error, SourceError::Read { .. })));
            let injected = failures.len();
            assert!(injected >= 2 + 4, "{injected} failures");
            for (x, &key) in wanted.iter().enumerate() {
                let parent = tile(&streamer, id, 1, x as u32 / 2, 1);
                assert!(streamer.manager().is_resident(parent), "tile {x}'s parent after its retry");
                let streams = match path {
                    ResidencyPath::Software => x >= 4,
                    _ => x != 1 && x != 2,
                };
                assert_eq!(streamer.manager().is_resident(key), streams, "tile {x} of mip 0");
            }
            streamer.manager().check_invariants().unwrap();
            check_texels(&device, &mut streamer, &commands, (&t, 1), wanted[5], "next to failing tiles");
            println!(
                "{path:?}: {injected} tile source faults ({} first reads of mip 1), all typed LoadFailures, frames went on",
                first_reads.load(Ordering::Relaxed)
            );
            streamer.remove_texture(t).unwrap();
            drop(streamer);
            drop(commands);
            assert_eq!(settled_accounting(&device), baseline, "{path:?}: nothing leaked");
        });
    }
}

/// A renderer's submission that fails after `FrameBindings::record`: the frame is ended with
/// `Streamer::abandon_frame`, which queues the frame's staged copies again and submits them, so
/// the tiles that frame made resident get their texels before any later frame samples them (on
/// the hardware path read back right after the abandon, before another frame). When that
/// submission fails too (a second fault), `abandon_frame` returns the typed error and the next
/// recorded frame carries the copies. Nothing leaks. Without the requeue the tiles stay resident
/// with undefined texels, which this test sees.
#[test]
fn a_faulted_frame_submission_is_abandoned_and_its_copies_land_before_a_later_frame_samples() {
    let cases = [(false, false), (true, false), (true, true), (false, true)];
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        for (case, (after_record, flush_fails)) in cases.into_iter().enumerate() {
            // A pattern of its own per case: tile memory the driver hands out again may still
            // hold an earlier case's texels.
            let pattern = 10 + case as u32 + 4 * u32::from(path == ResidencyPath::Software);
            with_gpu(|set| {
                let device = Arc::clone(&set.devices()[0]);
                let _clear = ClearFaults(&device);
                let own = OwnCommands::new(&device);
                let baseline = {
                    let mut streamer = Streamer::new(&device, desc(path)).unwrap();
                    let t = streamer.add_texture("vt warm", source("vt warm", 1, |_, _, _| false)).unwrap();
                    streamer.remove_texture(t).unwrap();
                    drop(streamer);
                    // Settled: the read-backs below touch memory types the warm-up does not.
                    settled_accounting(&device)
                };
                let mut streamer = Streamer::new(&device, desc(path)).unwrap();
                let t = streamer
                    .add_texture("vt abandon", source("vt abandon", pattern, |_, _, _| false))
                    .unwrap();
                let commands = CommandContext::new(&device, "abandon frames").unwrap();
                let id = t.id();
                let wanted: Vec<TileKey> = (0..8).map(|x| tile(&streamer, id, 0, x, 3)).collect();
                let mut abandoned: Vec<TileKey> = Vec::new();
                for f in 0..12 {
                    let before: Vec<bool> =
                        wanted.iter().map(|&k| streamer.manager().is_resident(k)).collect();
                    let bindings = streamer.begin_frame().unwrap();
                    let frame = bindings.frame;
                    let layout = bindings.layout.unwrap().clone();
                    drop(bindings);
                    let mut records = FeedbackBuffer::new(&layout, frame);
                    for key in &wanted {
                        let StreamUnit::Tile(tile) = key.unit else { unreachable!() };
                        records.record(&layout, layout.slot_of(id).unwrap(), tile, RequestKind::Miss);
                    }
                    streamer.write_cpu_feedback(&records).unwrap();
                    // The tiles this frame's tick made resident: their texels are staged in it.
                    let newly: Vec<TileKey> = wanted
                        .iter()
                        .zip(&before)
                        .filter(|&(&k, &was)| !was && streamer.manager().is_resident(k))
                        .map(|(&k, _)| k)
                        .collect();
                    let fault = abandoned.is_empty() && !newly.is_empty();
                    if fault && !after_record {
                        // `CommandContext::submit` fails before its recording runs.
                        device.ledger().inject_fault(
                            FaultSite::QueueSubmit,
                            0,
                            InjectedFault::OutOfDeviceMemory,
                        );
                    }
                    let bindings = streamer.frame_bindings().unwrap();
                    let submitted = if fault && after_record {
                        // The renderer's own command buffer: the frame recorded, then its own
                        // `vkQueueSubmit2` fails (the recording is dropped, never submitted).
                        own.record_and_fail(&device, |rec| bindings.record(rec, |_| ()).unwrap())
                    } else {
                        commands.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap())
                    };
                    drop(bindings);
                    if fault && flush_fails {
                        // The abandon's own submission fails too.
                        device.ledger().inject_fault(
                            FaultSite::QueueSubmit,
                            0,
                            InjectedFault::OutOfDeviceMemory,
                        );
                    }
                    match submitted {
                        Ok(submission) => {
                            assert!(!fault, "frame {f}: the submission was to fail");
                            streamer.end_frame(submission.gpu_use()).unwrap();
                        }
                        Err(e) => {
                            assert!(fault, "frame {f}: {e}");
                            assert_eq!(kind_of(&e), Some(Kind::OutOfMemory), "{e}");
                            let again = streamer.abandon_frame();
                            assert_eq!(streamer.stats().frames_abandoned, 1);
                            assert!(!streamer.in_frame());
                            if flush_fails {
                                let e = again.unwrap_err();
                                assert_eq!(kind_of(&e), Some(Kind::OutOfMemory), "{e}");
                            } else {
                                again.unwrap();
                                if path == ResidencyPath::Hardware {
                                    // Before any later frame: the abandon submitted the copies.
                                    device.wait_idle().unwrap();
                                    for &k in &newly {
                                        check_texels(
                                            &device,
                                            &mut streamer,
                                            &commands,
                                            (&t, pattern),
                                            k,
                                            "right after the abandon",
                                        );
                                    }
                                }
                            }
                            abandoned = newly;
                        }
                    }
                    streamer.wait_for_loads();
                }
                device.ledger().clear_faults();
                assert!(!abandoned.is_empty(), "{path:?}: a frame with staged texels was abandoned");
                assert!(wanted.iter().all(|&k| streamer.manager().is_resident(k)));
                for &k in abandoned.iter().chain(&wanted[..1]) {
                    check_texels(
                        &device,
                        &mut streamer,
                        &commands,
                        (&t, pattern),
                        k,
                        "after the abandoned frame",
                    );
                }
                streamer.manager().check_invariants().unwrap();
                // Misuse: outside a frame.
                assert!(matches!(streamer.abandon_frame(), Err(StreamError::FrameOrder(_))));
                println!(
                    "{path:?} (the submission failing {} the recording, the abandon's own {}): {} tiles staged in the abandoned frame got their texels",
                    if after_record { "after" } else { "before" },
                    if flush_fails { "failing too" } else { "succeeding" },
                    abandoned.len()
                );
                streamer.remove_texture(t).unwrap();
                drop(streamer);
                drop(commands);
                own.destroy(&device);
                assert_eq!(settled_accounting(&device), baseline, "{path:?}: nothing leaked");
            });
        }
    }
}

/// A renderer's own command pool and command buffer, recorded through `Recording::from_raw`.
struct OwnCommands {
    pool: residency_vulkan::ash::vk::CommandPool,
    cmd: residency_vulkan::ash::vk::CommandBuffer,
}

impl OwnCommands {
    fn new(device: &Device) -> Self {
        let (pool, cmd) = common::own_command_buffer(device);
        OwnCommands { pool, cmd }
    }

    /// Records `record` into the command buffer, then "submits" it with a `vkQueueSubmit2` that
    /// fails: the command buffer is ended, never submitted, and reset.
    fn record_and_fail(
        &self,
        device: &Device,
        record: impl FnOnce(&mut residency_vulkan::recording::Recording<'_>),
    ) -> Result<residency_vulkan::Submission, residency_vulkan::VulkanError> {
        use residency_vulkan::ash::vk;
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the command buffer is not pending (never submitted) and only this test uses it.
        unsafe { device.raw().begin_command_buffer(self.cmd, &begin) }.unwrap();
        // SAFETY: `cmd` is a primary command buffer of this device's universal family, recording
        // and outside a render pass while `rec` lives; nothing else records into it. It is never
        // submitted (the submission below fails), and it is reset right after the recording is
        // dropped, before anything it names is destroyed.
        let mut rec = unsafe { residency_vulkan::recording::Recording::from_raw(device, self.cmd) };
        record(&mut rec);
        let cmd = self.cmd;
        let failed = rec.submit_checked(|_, _| {
            // SAFETY: recording began above.
            unsafe { device.raw().end_command_buffer(cmd) }.unwrap();
            Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY)
        });
        // SAFETY: never submitted, so not pending; the pool allows resetting it.
        unsafe { device.raw().reset_command_buffer(self.cmd, vk::CommandBufferResetFlags::empty()) }.unwrap();
        Err(failed.expect_err("the submission fails"))
    }

    fn destroy(self, device: &Device) {
        // SAFETY: the command buffer was never submitted; the pool is this test's.
        unsafe { device.raw().destroy_command_pool(self.pool, None) };
    }
}

/// Out of memory at every allocation, creation, bind, submission and wait of `add_texture` (the
/// sparse image or the software texture, the hardware path's first tile heap, the coarse chain's
/// binds, uploads and their submission): a typed error and nothing added, or the texture added;
/// either way the streamer goes on (the texture added again, once the fault is cleared, streams
/// its tiles with their texels) and nothing leaks.
#[test]
fn faults_at_every_allocation_creation_bind_submit_and_wait_of_add_texture() {
    for path in [ResidencyPath::Hardware, ResidencyPath::Software] {
        with_gpu(|set| {
            let device = Arc::clone(&set.devices()[0]);
            let _clear = ClearFaults(&device);
            let run = |arm: &dyn Fn()| -> Option<Kind> {
                static RUNS: AtomicU32 = AtomicU32::new(0);
                let pattern = 64 + RUNS.fetch_add(1, Ordering::Relaxed) % 32;
                let mut streamer = Streamer::new(&device, desc(path)).unwrap();
                arm();
                let added = streamer.add_texture("vt add", source("vt add", pattern, |_, _, _| false));
                device.ledger().clear_faults();
                let failure = added
                    .as_ref()
                    .err()
                    .map(|e| kind_of(e).unwrap_or_else(|| panic!("{path:?}: add_texture failed with {e}")));
                if failure.is_some() {
                    assert_eq!(streamer.texture_count(), 0, "a failed add leaves nothing");
                }
                let t = match added {
                    Ok(t) => t,
                    Err(_) => {
                        streamer.add_texture("vt add", source("vt add", pattern, |_, _, _| false)).unwrap()
                    }
                };
                let commands = CommandContext::new(&device, "add frames").unwrap();
                let wanted: Vec<TileKey> = (0..4).map(|x| tile(&streamer, t.id(), 0, x, 2)).collect();
                for f in 0..8 {
                    assert!(matches!(run_frame(&mut streamer, &commands, &wanted), Frame::Done), "frame {f}");
                }
                assert!(wanted.iter().all(|&k| streamer.manager().is_resident(k)));
                if path == ResidencyPath::Hardware {
                    check_texels(
                        &device,
                        &mut streamer,
                        &commands,
                        (&t, pattern),
                        wanted[1],
                        "after the add",
                    );
                }
                streamer.manager().check_invariants().unwrap();
                streamer.remove_texture(t).unwrap();
                drop(streamer);
                drop(commands);
                failure
            };
            // Settle what the device keeps for reuse; then count the calls of one add.
            run(&|| ());
            let baseline = settled_accounting(&device);
            let (start, end) = {
                let mut streamer = Streamer::new(&device, desc(path)).unwrap();
                let start = sites_now(&device);
                let t = streamer.add_texture("vt add", source("vt add", 1, |_, _, _| false)).unwrap();
                let end = sites_now(&device);
                streamer.remove_texture(t).unwrap();
                (start, end)
            };
            assert_eq!(settled_accounting(&device), baseline, "{path:?}: the counting run leaked");
            let mut injected = 0;
            let mut errors = 0;
            let mut rows = Vec::new();
            for (i, &site) in SITES.iter().enumerate() {
                let n = end[i] - start[i];
                let mut fired = 0;
                for k in 0..n {
                    let before = device.ledger().faults_fired(site);
                    let failure =
                        run(&|| device.ledger().inject_fault(site, k, InjectedFault::OutOfDeviceMemory));
                    fired += device.ledger().faults_fired(site) - before;
                    if let Some(kind) = failure {
                        assert_eq!(kind, Kind::OutOfMemory, "{path:?} {site:?} k = {k}");
                        errors += 1;
                    }
                    assert_eq!(
                        settled_accounting(&device),
                        baseline,
                        "{path:?} {site:?} k = {k}: nothing leaked"
                    );
                }
                injected += fired;
                rows.push(format!("{site:?}: {n} calls, {fired} injected"));
            }
            println!(
                "{path:?} add_texture: {injected} out-of-memory faults injected ({}), {errors} typed errors; all recovered",
                rows.join(", ")
            );
            assert!(injected > 0);
        });
    }
}
