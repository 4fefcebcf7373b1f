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
