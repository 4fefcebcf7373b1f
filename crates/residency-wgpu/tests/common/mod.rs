//! The bridge tests' shared check after each test.

use residency_vulkan::LEAKS_AT_TEARDOWN;
use residency_wgpu::Bridge;
use std::sync::atomic::Ordering;

/// Runs `test` on `bridge`, waits for the GPU, then checks that the layer reported nothing, that
/// no residency object is alive or leaked at teardown and that the device was destroyed. The
/// caller holds its file's serial lock (the counters are process-wide).
pub fn run_checked(bridge: Bridge, test: impl FnOnce(&Bridge)) {
    let leaks = LEAKS_AT_TEARDOWN.load(Ordering::SeqCst);
    let alive = residency_wgpu::DEVICES_LEFT_ALIVE.load(Ordering::SeqCst);
    test(&bridge);
    bridge.device().poll(wgpu::PollType::wait_indefinitely()).unwrap();
    bridge.residency().wait_idle().unwrap();
    bridge.residency().maintain();
    let live: Vec<_> =
        bridge.residency().ledger().live_objects().into_iter().filter(|o| o.kind != "memory").collect();
    assert!(live.is_empty(), "live residency objects after the test: {live:?}");
    let problems = bridge.validation_log().problems_since(0);
    assert!(problems.is_empty(), "validation problems: {problems:#?}");
    drop(bridge);
    assert_eq!(LEAKS_AT_TEARDOWN.load(Ordering::SeqCst), leaks, "residency objects leaked at teardown");
    assert_eq!(residency_wgpu::DEVICES_LEFT_ALIVE.load(Ordering::SeqCst), alive, "the device was left alive");
}
