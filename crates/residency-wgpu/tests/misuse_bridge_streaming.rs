//! Red-team attacks on the bridge's streamer frames (session 16), through its safe API only:
//! a `StreamerPart` borrows the bridge, not the streamer, so a wgpu user can drop the frame
//! bindings, the textures and the streamer itself (or abandon the frame and remove the texture)
//! between recording the part and submitting it. The part's transitions name every texture's
//! images; the submission must not reach an image residency already destroyed. Each test runs
//! under the validation layer with synchronization validation and checks that the layer reports
//! nothing and nothing leaks.

mod common;

#[allow(dead_code, reason = "the tests take the example's source and `open`, not `run` or `main`")]
#[path = "../examples/wgpu_virtual_texture.rs"]
mod example;

use residency_vulkan::sparse::ResidencyPath;
use residency_vulkan::streaming::{Streamer, StreamerDesc};
use residency_vulkan::ValidationMode;
use residency_wgpu::{Bridge, BridgeDesc, PathSupport};
use std::sync::Mutex;

/// One test at a time: the leak counter is process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `test` on the example's bridge under synchronization validation, on `path` (skipped
/// only when no GPU is required), then checks the layer and the leak counter.
fn with_bridge(path: ResidencyPath, test: impl FnOnce(&Bridge)) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let desc = BridgeDesc {
        validation: ValidationMode::Synchronization,
        require_validation: residency_vulkan::testing::gpu_required(),
        ..BridgeDesc::default()
    };
    let bridge = match example::open(&desc) {
        Ok(bridge) => bridge,
        Err(e) => {
            assert!(!residency_vulkan::testing::gpu_required(), "RESIDENCY_REQUIRE_GPU=1 but: {e}");
            eprintln!("\n**** SKIPPED: {e} ****\n");
            return;
        }
    };
    if path == ResidencyPath::Hardware && !matches!(bridge.path(), PathSupport::Hardware) {
        assert!(!residency_vulkan::testing::gpu_required(), "no sparse residency: {:?}", bridge.path());
        return;
    }
    common::run_checked(bridge, test);
}

fn streamer(bridge: &Bridge, path: ResidencyPath) -> Streamer {
    let desc = StreamerDesc::default().with_path(path).with_frames_in_flight(2);
    Streamer::new(bridge.residency(), desc).unwrap()
}

/// The images the streamer's textures show (sparse images, min-LOD maps, atlases,
/// indirections) alive in the ledger.
fn images(bridge: &Bridge) -> usize {
    bridge.residency().ledger().live_objects().iter().filter(|o| o.kind == "image").count()
}

/// A part recorded, then the bindings, the texture and the streamer dropped (the frame never
/// ended), residency's retire queue drained, and only then the part submitted: the images its
/// transitions name must still exist when it runs, and go after it.
fn part_outliving_its_streamer(path: ResidencyPath) {
    with_bridge(path, |bridge| {
        let timeline = bridge.create_timeline("frames").unwrap();
        let mut streamer = streamer(bridge, path);
        let texture = streamer.add_texture("plane", example::source(1)).unwrap();
        let bindings = streamer.begin_frame().unwrap();
        let part = bridge.record_streamer_part(&bindings).unwrap();
        drop(bindings);
        let before = images(bridge);
        assert!(before > 0);
        drop((texture, streamer));
        bridge.residency().maintain();
        let (_, done) = bridge.submit_streamer_frame(part, [], &timeline).unwrap();
        bridge.residency().wait_until(&done).unwrap();
        bridge.residency().maintain();
    });
}

#[test]
fn misuse_a_streamer_part_submitted_after_its_streamer_was_dropped_keeps_its_images_software() {
    part_outliving_its_streamer(ResidencyPath::Software);
}

#[test]
fn misuse_a_streamer_part_submitted_after_its_streamer_was_dropped_keeps_its_images_hardware() {
    part_outliving_its_streamer(ResidencyPath::Hardware);
}

/// The frame abandoned after its part was recorded, its texture removed between frames and the
/// retire queue drained, then the recorded part submitted anyway: same as above, through
/// `remove_texture` instead of the streamer's drop.
fn part_outliving_a_removed_texture(path: ResidencyPath) {
    with_bridge(path, |bridge| {
        let timeline = bridge.create_timeline("frames").unwrap();
        let mut streamer = streamer(bridge, path);
        let keep = streamer.add_texture("kept plane", example::source(0)).unwrap();
        let texture = streamer.add_texture("plane", example::source(1)).unwrap();
        let bindings = streamer.begin_frame().unwrap();
        let part = bridge.record_streamer_part(&bindings).unwrap();
        drop(bindings);
        streamer.abandon_frame().unwrap();
        streamer.remove_texture(texture).unwrap();
        bridge.residency().wait_idle().unwrap();
        bridge.residency().maintain();
        let (_, done) = bridge.submit_streamer_frame(part, [], &timeline).unwrap();
        bridge.residency().wait_until(&done).unwrap();
        drop((keep, streamer));
    });
}

#[test]
fn misuse_a_streamer_part_submitted_after_its_texture_was_removed_keeps_its_images_software() {
    part_outliving_a_removed_texture(ResidencyPath::Software);
}

#[test]
fn misuse_a_streamer_part_submitted_after_its_texture_was_removed_keeps_its_images_hardware() {
    part_outliving_a_removed_texture(ResidencyPath::Hardware);
}
