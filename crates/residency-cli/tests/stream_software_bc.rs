//! `residency stream` on a block-compressed file on the software path (issue #19): a BC7 `.rvt`
//! from `vt build --format bc7`, streamed into an atlas of BC7 (128² slots of whole blocks,
//! 18 496 B a slot) under the default budget of a tenth of the file fully resident, compared with
//! the fully resident BC7 render and with the RGBA8 build, under synchronization validation (BC1
//! on the software path: `crates/residency-vulkan/tests/software_bc.rs`; on lavapipe a 2048² BC1
//! file streams the same way at 9.4 % resident, `docs/streaming.md`).

mod common;
use common::{f, stream_on};
use std::path::{Path, PathBuf};
use std::process::Command;

fn build(dir: &Path, format: &str) -> PathBuf {
    let out = dir.join(format!("{format}.rvt"));
    let status = Command::new(env!("CARGO_BIN_EXE_residency"))
        .args(["vt", "build", "--synthetic", "2", "--size", "2048", "--format", format, "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    out
}

#[test]
fn a_bc7_file_streams_on_the_software_path_within_a_tenth_of_its_size() {
    let dir = std::env::temp_dir().join(format!("residency-stream-soft-bc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (bc7, rgba8) = (build(&dir, "bc7"), build(&dir, "rgba8"));
    // Frame-exact (loads and frames waited): the bounds below do not depend on machine speed.
    let (r, _) =
        stream_on("software", &bc7, &["--source", rgba8.to_str().unwrap(), "--wait-loads", "--wait-frames"]);
    assert_eq!(r["path"], "software", "{r}");
    assert_eq!(r["texel_format"], "bc7_unorm", "{r}");
    assert_eq!(
        f(&r, "bytes_per_resident_texel"),
        18_496.0 / (128.0 * 128.0),
        "one BC7 slot over its texels: {r}"
    );
    let full = f(&r, "fully_resident_bytes");
    assert!(f(&r, "resident_bytes_peak") <= f(&r, "budget_bytes"), "{r}");
    assert!(f(&r, "resident_bytes_peak") <= 0.10 * full, "resident peak over 10 %: {r}");
    assert!(f(&r, "latency_frames_p95") <= 3.0, "request-to-resident p95 over 3 frames: {r}");
    assert!(f(&r, "converged_frames") >= 30.0, "{r}");
    assert!(f(&r, "psnr_db_min") >= 40.0, "converged frames vs the fully resident BC7 render: {r}");
    let reference = f(&r, "psnr_db_reference_vs_source_run");
    let streamed = f(&r, "psnr_db_vs_source_mean");
    assert!((35.0..70.0).contains(&reference), "BC7 vs its RGBA8 source: {r}");
    assert!(streamed >= reference - 1.0, "streamed {streamed:.1} vs fully resident {reference:.1}: {r}");
    eprintln!(
        "resident peak {} of {} B ({:.1} %), p95 {} frames, converged {} frames, {:.1} dB mean, {:.1} dB min",
        r["resident_bytes_peak"],
        r["fully_resident_bytes"],
        100.0 * f(&r, "resident_bytes_peak") / full,
        r["latency_frames_p95"],
        r["converged_frames"],
        f(&r, "psnr_db_mean"),
        f(&r, "psnr_db_min")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
