//! Misuse of the streaming loop's lifetimes: `residency stream` with frames in flight returns
//! early with `?` (a Vulkan call made to fail mid-run, as a renderer's fault-injection test would)
//! — the typed error comes out, nothing crashes, the validation layer (synchronization validation
//! on) reports nothing, and nothing is left alive at teardown.

mod common;

use common::build_texture;
use std::process::Command;

fn early_return(path: &str, fault: &str) {
    let Some(file) = build_texture(&format!("misuse-{path}-{}", fault.replace(':', "-"))) else { return };
    let output = Command::new(env!("CARGO_BIN_EXE_residency"))
        .env("RESIDENCY_VALIDATION", "sync")
        .env("RUST_LOG", "warn")
        .arg("stream")
        .arg(&file)
        .args(["--frames", "40", "--frames-in-flight", "2", "--budget-mib", "1", "--path", path])
        .args(["--inject-fault", fault])
        // Loads waited for each frame (frames still overlap): how many sparse binds and waits
        // the run makes, so whether the N-th call is reached, does not depend on load speed.
        .arg("--wait-loads")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the injected fault ends the run:\n{stderr}");
    assert!(
        stderr.contains("out of device memory")
            || stderr.contains("device lost")
            || stderr.contains("DEVICE_LOST"),
        "the typed error is reported:\n{stderr}"
    );
    for problem in ["VUID", "SYNC-HAZARD", "leaked", "still in use", "panicked"] {
        assert!(!stderr.contains(problem), "`{problem}` after the early return:\n{stderr}");
    }
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

#[test]
fn misuse_stream_loop_returning_early_from_a_failed_submit_with_frames_in_flight_leaks_nothing() {
    early_return("hardware", "queue_submit:30");
    early_return("software", "queue_submit:30");
}

#[test]
fn misuse_stream_loop_returning_early_from_a_lost_device_mid_run_leaks_nothing() {
    early_return("hardware", "wait:40:lost");
    early_return("software", "wait:40:lost");
}

#[test]
fn misuse_stream_loop_returning_early_from_a_failed_sparse_bind_leaks_nothing() {
    early_return("hardware", "bind_sparse:2");
}
