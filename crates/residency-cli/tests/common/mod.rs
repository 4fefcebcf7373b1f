//! Helpers shared by the `residency stream` tests.
#![allow(dead_code, reason = "each test binary uses its own part")]

use std::path::PathBuf;
use std::process::Command;

const TERRAINS: &str = "/usr/share/games/etr/terrains";

pub fn required() -> bool {
    std::env::var("RESIDENCY_REQUIRE_GPU").as_deref() == Ok("1")
}

/// Builds a 2048² `.rvt` from three terrain textures; `None` (skip) when they are not installed
/// and no GPU run is required.
pub fn build_texture(name: &str) -> Option<PathBuf> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(TERRAINS) {
        Ok(dir) => dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "png"))
            .collect(),
        Err(_) => Vec::new(),
    };
    if files.len() < 3 {
        assert!(!required(), "{TERRAINS} is missing: bash .ci/install-deps installs extremetuxracer-data");
        eprintln!("\n**** SKIPPED: no {TERRAINS} ****\n");
        return None;
    }
    files.sort();
    let dir = std::env::temp_dir().join(format!("residency-stream-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("terrain.rvt");
    let status = Command::new(env!("CARGO_BIN_EXE_residency"))
        .args(["vt", "build", "--size", "2048", "-o"])
        .arg(&out)
        .args(&files[..3])
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    Some(out)
}

/// `residency stream` on `path` (`hardware` or `software`): 40 frames, JSON, sync validation
/// (unless `RESIDENCY_VALIDATION` says otherwise).
pub fn stream_on(path: &str, file: &PathBuf, extra: &[&str]) -> (serde_json::Value, std::process::Output) {
    let validation = std::env::var("RESIDENCY_VALIDATION").unwrap_or_else(|_| "sync".into());
    let output = Command::new(env!("CARGO_BIN_EXE_residency"))
        .env("RESIDENCY_VALIDATION", validation)
        .arg("stream")
        .arg(file)
        .args(["--json", "--frames", "40", "--path", path])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "residency stream failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (serde_json::from_slice(&output.stdout).expect("JSON summary"), output)
}

/// A number of the JSON summary.
pub fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} missing in {v}"))
}
