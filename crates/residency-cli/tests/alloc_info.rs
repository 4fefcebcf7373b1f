//! `residency alloc-info` end to end: JSON on stdin, JSON on stdout, exit codes.

use residency::core::profile::captured;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

fn alloc_info(args: &[&str], input: &str) -> (i32, serde_json::Value, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_residency"))
        .arg("alloc-info")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let value = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), value, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The H200 profile `residency-core` ships, as a file for `--profile` (written once per process into
/// this test's scratch folder).
fn h200() -> String {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("alloc-info-nvidia-h200.json");
        std::fs::write(&path, captured::NVIDIA_H200_JSON).unwrap();
        path.to_str().expect("a UTF-8 target dir").to_owned()
    })
    .clone()
}

const MIB: u64 = 1 << 20;

#[test]
fn the_seed_ordering_example_on_the_h200_profile() {
    // Two tiny 256 B-aligned buffers and a tiny 2 MiB-aligned resource: 6 MiB with the big one in
    // the middle, 4 MiB otherwise; the alignment is always 2 MiB.
    let small = r#"{"dimension":"buffer","width":256,"flags":["use_tight_alignment"],"alignment":256}"#;
    let big = r#"{"dimension":"texture2d","width":64,"height":64,"format":"r8g8b8a8_unorm","mip_levels":1,"sample_count":4,"flags":["use_tight_alignment"],"alignment":2097152}"#;
    let profile = h200();
    for (order, expected) in
        [([small, big, small], 6 * MIB), ([small, small, big], 4 * MIB), ([big, small, small], 4 * MIB)]
    {
        let input = format!(r#"{{"placement":"placed","descs":[{}]}}"#, order.join(","));
        let (code, out, err) = alloc_info(&["--profile", &profile], &input);
        assert_eq!(code, 0, "{err} {out}");
        assert_eq!(out["size"], expected, "{out}");
        assert_eq!(out["alignment"], 2 * MIB);
        assert_eq!(out["elements"].as_array().unwrap().len(), 3);
    }
}

#[test]
fn validation_errors_print_a_typed_error_and_exit_2() {
    let profile = h200();
    let cases = [
        (
            r#"{"dimension":"buffer","width":256,"flags":["use_tight_alignment"],"alignment":48}"#,
            "INVALID_ARG",
        ),
        (
            r#"{"dimension":"texture2d","width":64,"height":64,"format":"r8g8b8a8_unorm","layout":"64kb_undefined_swizzle","flags":["use_tight_alignment"]}"#,
            "INVALID_ARG",
        ),
    ];
    for (desc, code_name) in cases {
        let (code, out, _) =
            alloc_info(&["--profile", &profile], &format!(r#"{{"placement":"placed","descs":[{desc}]}}"#));
        assert_eq!(code, 2, "{out}");
        assert_eq!(out["error"]["code"], code_name, "{out}");
        assert!(out["error"]["id"].is_string() && out["error"]["message"].is_string());
    }
}

#[test]
fn malformed_json_is_a_clear_error_not_a_panic() {
    for input in ["", "{", "[1,2]", r#"{"placement":"placed","descs":[{"dimension":"sphere","width":1}]}"#] {
        let (code, out, err) = alloc_info(&["--profile", &h200()], input);
        assert_eq!(code, 2, "{input:?}: {out} {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(out["error"]["code"], "MALFORMED_REQUEST", "{input:?}: {out}");
    }
}

#[test]
fn cross_adapter_with_tight_warns_and_uses_64_kib() {
    let input = r#"{"placement":"placed","descs":[{"dimension":"buffer","width":100,"flags":["use_tight_alignment","allow_cross_adapter"]}]}"#;
    let (code, out, _) = alloc_info(&["--profile", &h200()], input);
    assert_eq!(code, 0);
    assert_eq!(out["alignment"], 65536);
    assert!(out["messages"].as_array().unwrap().iter().any(|m| m["severity"] == "warning"), "{out}");
}

#[test]
fn the_live_device_answers_tight_buffers_at_their_width() {
    let input = r#"{"placement":"placed","descs":[{"dimension":"buffer","width":256,"flags":["use_tight_alignment"]}]}"#;
    let (code, out, err) = alloc_info(&[], input);
    if code == 1 {
        assert!(std::env::var("RESIDENCY_REQUIRE_GPU").as_deref() != Ok("1"), "no device: {err}");
        eprintln!("\n**** SKIPPED: no Vulkan device ({err}) ****\n");
        return;
    }
    assert_eq!(code, 0, "{err}");
    assert_eq!(out["elements"][0]["size"], 256);
    assert!(out["alignment"].as_u64().unwrap() <= 256);
}

#[test]
fn place_creates_the_resources_on_the_device_where_the_engine_said() {
    let tight_buffer = r#"{"dimension":"buffer","width":100,"flags":["use_tight_alignment"]}"#;
    let legacy_buffer = r#"{"dimension":"buffer","width":100}"#;
    let texture = r#"{"dimension":"texture2d","width":64,"height":64,"format":"r8g8b8a8_unorm","mip_levels":1,"flags":["use_tight_alignment"]}"#;
    let input = format!(
        r#"{{"placement":"placed","descs":[{tight_buffer},{tight_buffer},{texture},{legacy_buffer}]}}"#
    );
    let (code, out, err) = alloc_info(&["--place"], &input);
    if code == 1 {
        assert!(std::env::var("RESIDENCY_REQUIRE_GPU").as_deref() != Ok("1"), "no device: {err}");
        eprintln!("\n**** SKIPPED: no Vulkan device ({err}) ****\n");
        return;
    }
    assert_eq!(code, 0, "{err} {out}");
    let elements = out["elements"].as_array().unwrap();
    let placed = out["placed"].as_array().unwrap();
    assert_eq!(placed.len(), 4, "{out}");
    for (e, p) in elements.iter().zip(placed) {
        let (alignment, offset) = (e["alignment"].as_u64().unwrap(), p["offset"].as_u64().unwrap());
        assert_eq!(offset % alignment, 0, "the allocator honours the engine's alignment: {out}");
        assert!(p["size"].as_u64().unwrap() >= 100);
    }
    // The legacy buffer sits at 64 KiB, the tight ones at far less.
    assert_eq!(placed[3]["offset"].as_u64().unwrap() % (64 << 10), 0, "{out}");
    assert!(elements[0]["alignment"].as_u64().unwrap() <= 256, "{out}");
    // Bad input is the engine's typed error, nothing created.
    let (code, out, _) =
        alloc_info(&["--place"], r#"{"placement":"placed","descs":[{"dimension":"buffer","width":0}]}"#);
    assert_eq!(code, 2, "{out}");
}
