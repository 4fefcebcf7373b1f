//! The wgpu virtual-texture example at its defaults on both residency paths, under the
//! validation layer with synchronization validation: frame 0 shows the primed coarse chain, tiles
//! are streamed from the WGSL feedback alone, the last frame matches a fully resident render, the
//! layer reports nothing and nothing leaks. And its streaming code stays short.

#[allow(dead_code, reason = "the test calls `run` and `open`, not `main`")]
#[path = "../examples/wgpu_virtual_texture.rs"]
mod example;

use residency_vulkan::sparse::ResidencyPath;
use residency_vulkan::{ValidationMode, LEAKS_AT_TEARDOWN};
use residency_wgpu::{BridgeDesc, PathSupport};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// One run at a time: the leak counter is process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

/// The example's bridge under synchronization validation; `None` (a skip) only when no GPU is
/// required and none opens.
fn open() -> Option<residency_wgpu::Bridge> {
    let desc = BridgeDesc {
        validation: ValidationMode::Synchronization,
        require_validation: residency_vulkan::testing::gpu_required(),
        ..BridgeDesc::default()
    };
    match example::open(&desc) {
        Ok(bridge) => Some(bridge),
        Err(e) => {
            assert!(!residency_vulkan::testing::gpu_required(), "RESIDENCY_REQUIRE_GPU=1 but: {e}");
            eprintln!("\n**** SKIPPED: {e} ****\n");
            None
        }
    }
}

fn run_on(path: ResidencyPath) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(bridge) = open() else { return };
    if path == ResidencyPath::Hardware && !matches!(bridge.path(), PathSupport::Hardware) {
        assert!(
            !residency_vulkan::testing::gpu_required(),
            "RESIDENCY_REQUIRE_GPU=1 but no sparse residency: {:?}",
            bridge.path()
        );
        eprintln!("\n**** SKIPPED: no sparse residency ({:?}) ****\n", bridge.path());
        return;
    }
    let leaks = LEAKS_AT_TEARDOWN.load(Ordering::SeqCst);
    let outcome = example::run(&bridge, path, example::FRAMES).unwrap();
    eprintln!("{outcome:?}");
    for problem in bridge.validation_log().problems_since(0).iter().take(3) {
        eprintln!("validation: {problem:?}");
    }
    drop(bridge);
    assert_eq!(outcome.path, path);
    assert_eq!(outcome.validation_problems, 0, "validation messages");
    assert_eq!(outcome.magenta_frame0, 0, "frame 0 shows the primed coarse chain everywhere");
    assert!(outcome.textured_frame0 > 1000, "frame 0 is not blank: {outcome:?}");
    assert!(outcome.streamed_tiles > 0, "tiles streamed from the WGSL feedback: {outcome:?}");
    assert!(outcome.psnr_last_db >= 40.0, "the last frame against the fully resident render: {outcome:?}");
    assert_eq!(LEAKS_AT_TEARDOWN.load(Ordering::SeqCst), leaks, "residency objects leaked at teardown");
}

#[test]
fn the_wgpu_example_streams_on_the_software_path() {
    run_on(ResidencyPath::Software);
}

#[test]
fn the_wgpu_example_streams_on_the_hardware_path() {
    run_on(ResidencyPath::Hardware);
}

#[test]
fn the_wgpu_examples_streaming_code_is_at_most_100_lines() {
    let source = include_str!("../examples/wgpu_virtual_texture.rs");
    let (mut inside, mut lines, mut blocks) = (false, 0, 0);
    for line in source.lines().map(str::trim) {
        match line {
            "// streaming: begin" => (inside, blocks) = (true, blocks + 1),
            "// streaming: end" => inside = false,
            _ if inside => lines += 1,
            _ => {}
        }
    }
    assert!(blocks > 0 && !inside, "the markers pair up");
    assert!(lines <= 100, "{lines} lines of streaming code");
}

/// A frame whose streamer part was recorded but never submitted (dropped, as a `?` would) is
/// abandoned: the streamer submits its copies itself and finds its images in the layouts it
/// recorded (the part's transitions never ran); the next frame goes through the bridge. The layer
/// reports nothing and nothing leaks.
#[test]
fn a_streamer_part_dropped_unsubmitted_leaves_the_images_to_the_streamer() {
    use residency_vulkan::streaming::{Streamer, StreamerDesc};
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(bridge) = open() else { return };
    let leaks = LEAKS_AT_TEARDOWN.load(Ordering::SeqCst);
    {
        let device = bridge.residency();
        let desc = StreamerDesc::default().with_path(ResidencyPath::Software).with_frames_in_flight(2);
        let mut streamer = Streamer::new(device, desc).unwrap();
        let texture = streamer.add_texture("plane", example::source(1)).unwrap();
        let timeline = bridge.create_timeline("frames").unwrap();
        let bindings = streamer.begin_frame().unwrap();
        let part = bridge.record_streamer_part(&bindings).unwrap();
        drop((part, bindings));
        streamer.abandon_frame().unwrap();
        let bindings = streamer.begin_frame().unwrap();
        let part = bridge.record_streamer_part(&bindings).unwrap();
        drop(bindings);
        let (_, done) = bridge.submit_streamer_frame(part, [], &timeline).unwrap();
        streamer.end_frame(done).unwrap();
        device.wait_until(&done).unwrap();
        drop((texture, streamer));
    }
    bridge.device().poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let problems = bridge.validation_log().problems_since(0);
    assert!(problems.is_empty(), "validation problems: {problems:#?}");
    drop(bridge);
    assert_eq!(LEAKS_AT_TEARDOWN.load(Ordering::SeqCst), leaks, "residency objects leaked at teardown");
}
