//! `residency info` end to end: the real binary, real profiles, the real device when there is one.

use residency::core::format::Format;
use residency::core::profile::{captured, DeviceProfile};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

fn residency(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_residency")).args(args).output().expect("the residency binary runs")
}

/// A profile `residency-core` ships (`name` is its file name, e.g. `nvidia-h200.json`), as a file the
/// binary can read: written into this test's scratch folder under a lock, since tests run in parallel.
fn profile_path(name: &str) -> PathBuf {
    static WRITING: Mutex<()> = Mutex::new(());
    let (_, text) = captured::ALL
        .into_iter()
        .find(|(file, _)| file.strip_prefix("profiles/") == Some(name))
        .expect("a captured profile of that name");
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("info-{name}"));
    let _writing = WRITING.lock().unwrap_or_else(|e| e.into_inner());
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
        std::fs::write(&path, text).unwrap();
    }
    path
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn h200_profile_reads_back_as_a_table() {
    let path = profile_path("nvidia-h200.json");
    let out = residency(&["info", "--profile", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    assert!(text.contains("NVIDIA H200"), "{text}");
    assert!(text.contains("bufferImageGranularity       1.0 KiB"), "{text}");
    assert!(text.contains("r8g8b8a8_unorm          128x128x1"), "{text}");
}

#[test]
fn h200_profile_was_captured_on_an_h200_with_tiles_and_mip_tails() {
    let text = std::fs::read_to_string(profile_path("nvidia-h200.json")).unwrap();
    let profile = DeviceProfile::from_json(&text).unwrap();
    assert_eq!(profile.identity.vendor_id, 0x10de);
    assert!(profile.identity.name.contains("H200"));
    assert_eq!(profile.limits.buffer_image_granularity, 1024);
    let rgba8 = profile.format(Format::R8G8B8A8Unorm).unwrap();
    assert_eq!(rgba8.sparse_2d.unwrap().tile_extent, [128, 128, 1]);
    let tail = rgba8.sparse_2d_probe.unwrap();
    assert_eq!((tail.desc.width, tail.mip_tail_first_lod), (16384, 8), "16k RGBA8 mip tail starts at LOD 8");
    assert!(tail.mip_tail_size > 0);
}

#[test]
fn profile_json_round_trips_through_the_cli() {
    for name in ["nvidia-h200.json", "lavapipe.json"] {
        let path = profile_path(name);
        let original = DeviceProfile::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let out = residency(&["info", "--json", "--profile", path.to_str().unwrap()]);
        assert!(out.status.success());
        let printed: Vec<DeviceProfile> = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(printed, vec![original], "{name}");
    }
}

#[test]
fn a_bad_profile_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("residency-info-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"schema\": 1, \"capture\": 3}").unwrap();
    let out = residency(&["info", "--profile", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a device profile"), "{err}");
    let out = residency(&["info", "--profile", dir.join("missing.json").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.json"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn live_device_json_lists_sparse_tile_shapes_and_requirements() {
    let out = residency(&["info", "--json"]);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(std::env::var("RESIDENCY_REQUIRE_GPU").as_deref() != Ok("1"), "no device: {err}");
        eprintln!("\n**** SKIPPED: no Vulkan device ({err}) ****\n");
        return;
    }
    let profiles: Vec<DeviceProfile> = serde_json::from_str(&stdout(&out)).unwrap();
    let profile = &profiles[0];
    assert!(profile.sparse.binding && profile.sparse.residency_image_2d);
    for format in [
        Format::R8Unorm,
        Format::R8G8Unorm,
        Format::R8G8B8A8Unorm,
        Format::R16G16B16A16Float,
        Format::R32G32B32A32Float,
        Format::Bc1Unorm,
        Format::Bc7Unorm,
    ] {
        let caps = profile.format(format).unwrap();
        assert!(caps.sparse_2d.is_some() && caps.sparse_3d.is_some(), "{format}");
        assert!(!caps.image_probes.is_empty(), "{format}");
    }
    assert!(!profile.buffer_probes.is_empty());
}
