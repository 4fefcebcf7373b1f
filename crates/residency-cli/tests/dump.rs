//! `residency dump` end to end: the real binary on the real device, its files read back.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn residency(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_residency")).args(args).output().expect("the residency binary runs")
}

/// The output, or `None` (after a loud skip line) when no device could be opened and none is required.
fn on_device(out: Output) -> Option<Output> {
    if out.status.success() {
        return Some(out);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(std::env::var("RESIDENCY_REQUIRE_GPU").as_deref() != Ok("1"), "no device: {err}");
    assert!(err.contains("Vulkan") || err.contains("device"), "not a missing-device failure: {err}");
    eprintln!("\n**** SKIPPED: no Vulkan device ({err}) ****\n");
    None
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("residency-dump-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn dump_writes_vma_json_svg_and_our_json() {
    let dir = temp_dir("all");
    let (vma, svg) = (dir.join("heaps.json"), dir.join("heaps.svg"));
    let args = [
        "dump",
        "--devices",
        "0",
        "--vma-json",
        vma.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
        "--json",
    ];
    let Some(out) = on_device(residency(&args)) else { return };

    // Our JSON: one device, its statistics, a total that is their sum.
    let ours: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    let devices = ours["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    let stats = &devices[0]["statistics"]["total"];
    assert_eq!(ours["total"], *stats);
    let pools = devices[0]["report"]["pools"].as_array().unwrap();
    assert_eq!(pools[0]["name"], "demo placed pool");
    let bytes = |k: &str| stats[k].as_u64().unwrap();
    assert_eq!(
        bytes("block_bytes"),
        bytes("allocation_bytes") + bytes("padding_bytes") + bytes("free_bytes")
    );
    // 12 pool buffers less 3 freed, 5 general buffers (one committed).
    assert_eq!(bytes("allocation_count"), 9 + 5);

    // VMA's format, as GpuMemDumpVis.py reads it.
    let dump: Value = serde_json::from_str(&std::fs::read_to_string(&vma).unwrap()).unwrap();
    assert_eq!(dump["General"]["API"], "Vulkan");
    let custom: Vec<&Value> =
        dump["CustomPools"].as_object().unwrap().values().flat_map(|v| v.as_array().unwrap()).collect();
    assert_eq!(custom.len(), 1);
    assert_eq!(custom[0]["Name"], "0 - demo placed pool");
    let mut names = Vec::new();
    let blocks = dump["DefaultPools"]
        .as_object()
        .unwrap()
        .values()
        .chain(custom.iter().copied())
        .flat_map(|p| p["Blocks"].as_object().unwrap().values().cloned().collect::<Vec<_>>());
    for block in blocks {
        let total = block["TotalBytes"].as_u64().unwrap();
        let subs = block["Suballocations"].as_array().unwrap();
        assert_eq!(
            subs.iter().map(|s| s["Size"].as_u64().unwrap()).sum::<u64>(),
            total,
            "suballocations tile the block"
        );
        names.extend(subs.iter().filter_map(|s| s["Name"].as_str().map(str::to_owned)));
    }
    for name in ["terrain vertices", "frame constants", "particles", "draw arguments", "upload staging"] {
        assert!(names.iter().any(|n| n == name), "{name} in the dump: {names:?}");
    }
    assert!(!names.iter().any(|n| n == "culling scratch"), "freed before the dump");
    let dedicated: Vec<&Value> = dump["DefaultPools"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|p| p["DedicatedAllocations"].as_array().unwrap())
        .collect();
    assert_eq!(dedicated.len(), 1);
    assert_eq!(dedicated[0]["Name"], "committed mesh");

    // The heap map.
    let map = std::fs::read_to_string(&svg).unwrap();
    assert!(map.starts_with("<svg"));
    assert_eq!(map.matches("class=\"block\"").count(), bytes("block_count") as usize);
    assert!(map.contains("alignment padding"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dump_prints_a_summary_without_json() {
    let Some(out) = on_device(residency(&["dump", "--devices", "0"])) else { return };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Device 0:"), "{text}");
    assert!(text.contains("pool `demo placed pool`"), "{text}");
    assert!(text.contains("Total:"), "{text}");
}

#[test]
fn dump_help_lists_its_outputs() {
    let out = residency(&["dump", "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["--vma-json", "--svg", "--json", "--devices", "--shared-scale"] {
        assert!(text.contains(flag), "{flag} in {text}");
    }
}

/// With two devices (lavapipe, or one GPU, opened twice) the dump adds a multi-device pool with
/// buffers under masks and shows every device side by side: totals per device that add up to the
/// set's, and each resource's bytes on each device it lives on.
#[test]
fn dump_of_two_devices_shows_them_side_by_side() {
    let Some(out) = on_device(residency(&["dump", "--min-devices", "2", "--json"])) else { return };
    let ours: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    let combined = &ours["combined"];
    let devices = combined["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "{combined}");
    assert_eq!(combined["total"], ours["total"]);
    let bytes = |d: &Value| d["statistics"]["block_bytes"].as_u64().unwrap();
    assert_eq!(bytes(&devices[0]) + bytes(&devices[1]), ours["total"]["block_bytes"].as_u64().unwrap());
    let resources = combined["resources"].as_array().unwrap();
    let row =
        |name: &str| resources.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("no `{name}`"));
    assert_eq!(row("shared mesh")["bytes"], serde_json::json!([98304, 98304]));
    assert_eq!(row("first device's target")["bytes"], serde_json::json!([32768, null]));
    assert_eq!(row("last device's target")["bytes"], serde_json::json!([null, 32768]));
    // Resources on both devices come first.
    let first_single = resources.iter().position(|r| r["bytes"].as_array().unwrap().contains(&Value::Null));
    assert!(first_single.is_some_and(|i| resources[i..]
        .iter()
        .all(|r| r["bytes"].as_array().unwrap().contains(&Value::Null))));

    let Some(out) = on_device(residency(&["dump", "--min-devices", "2"])) else { return };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("All devices side by side:"), "{text}");
    let line = text.lines().find(|l| l.contains("first device's target")).expect("its row");
    assert!(line.contains(" - "), "no instance on the second device: {line}");
}
