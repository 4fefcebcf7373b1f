//! `residency tour` end to end, and its report rendered by headless Chromium.

use std::path::{Path, PathBuf};
use std::process::Command;

fn required() -> bool {
    std::env::var("RESIDENCY_REQUIRE_GPU").as_deref() == Ok("1")
}

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("residency-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn chromium(args: &[&str], page: &Path) -> Option<std::process::Output> {
    let profile = out_dir("chromium-profile");
    let output = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .ok();
    let _ = std::fs::remove_dir_all(profile);
    output
}

/// Whether the decoded RGB(A) image has a pixel within 8 of `rgb`.
fn has_colour(pixels: &[u8], channels: usize, rgb: [u8; 3]) -> bool {
    pixels.chunks_exact(channels).any(|p| (0..3).all(|c| p[c].abs_diff(rgb[c]) <= 8))
}

#[test]
fn the_tour_runs_and_its_report_renders_with_heap_map_and_plots() {
    let dir = out_dir("tour");
    let out =
        // Two devices (the first one opened twice, as on lavapipe): the multi-device step runs.
        Command::new(env!("CARGO_BIN_EXE_residency"))
            .args(["tour", "--min-devices", "2", "--out"])
            .arg(&dir)
            .output()
            .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("Vulkan") && !required() {
        eprintln!("\n**** SKIPPED: no Vulkan device ({stderr}) ****\n");
        return;
    }
    assert!(out.status.success(), "tour failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("tour complete: every check passed"), "{stdout}");
    let html_path = dir.join("report.html");
    let html = std::fs::read_to_string(&html_path).unwrap();
    for id in
        ["heap-map", "chart-placement", "chart-binds", "stream-resident", "stream-tiles", "stream-latency"]
    {
        assert!(html.contains(&format!(r#"id="{id}""#)), "report lacks #{id}");
    }
    // The streaming step's last frame, streamed and fully resident, as inline PNGs.
    assert_eq!(html.matches("data:image/png;base64,").count(), 2, "report lacks the rendered frames");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tour.json")).unwrap()).unwrap();
    assert_eq!(json["validation_problems"], 0);
    assert_eq!(json["sections"].as_array().unwrap().len(), 6);
    // The placement step created its small classes on the device under both policies: the real
    // offsets span what the engine computed (within 2 %), and tight spans less than legacy.
    let placed = json["sections"][1]["figures"]["placed"].as_array().unwrap();
    assert_eq!(placed.len(), 3, "{placed:?}");
    for class in placed {
        let (legacy, tight) = (class["legacy_span"].as_u64().unwrap(), class["tight_span"].as_u64().unwrap());
        let (engine_legacy, engine_tight) =
            (class["engine_legacy"].as_u64().unwrap(), class["engine_tight"].as_u64().unwrap());
        assert!(tight < legacy, "{class}");
        for (real, engine) in [(legacy, engine_legacy), (tight, engine_tight)] {
            let ratio = real as f64 / engine as f64;
            assert!(
                (0.98..=1.02).contains(&ratio),
                "the allocator's real span against the engine's: {class}"
            );
        }
    }
    let streaming = &json["sections"][4];
    assert_eq!(streaming["title"], "Streaming from shader feedback");
    assert!(streaming["figures"]["psnr_db_min"].as_f64().unwrap() >= 40.0, "{streaming}");
    // One statistics panel per device; each device streamed its own tiles, each tile decoded once.
    let multi = &json["sections"][5];
    assert_eq!(multi["ok"], true, "{multi}");
    let per_device = multi["figures"]["streaming"]["per_device"].as_array().unwrap();
    assert_eq!(per_device.len(), 2, "{multi}");
    assert!(
        per_device.iter().all(|d| d["resident"] == true && d["tiles_streamed"].as_u64() > Some(0)),
        "{multi}"
    );
    assert_eq!(multi["figures"]["streaming"]["decoded_once"], true, "{multi}");
    assert!(per_device[1]["cache_hits"].as_u64() > Some(0), "device 1 read tiles device 0 decoded: {multi}");
    for id in ["device-panel-0", "device-panel-1"] {
        assert!(html.contains(&format!(r#"id="{id}""#)), "report lacks #{id}");
    }

    let shot = dir.join("report.png");
    let Some(rendered) =
        chromium(&["--window-size=1280,2400", &format!("--screenshot={}", shot.display())], &html_path)
    else {
        assert!(!required(), "headless Chromium is needed (bash .ci/install-deps installs it)");
        eprintln!("\n**** SKIPPED the rendering check: no chromium ****\n");
        return;
    };
    assert!(shot.exists(), "chromium wrote no screenshot: {}", String::from_utf8_lossy(&rendered.stderr));
    let decoder = png::Decoder::new(std::fs::File::open(&shot).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.color_type.samples();
    pixels.truncate(info.buffer_size());
    assert!(info.width >= 1000 && info.height >= 2000, "{info:?}");
    // The charts' first series colour and the heap map's vertex/index colour are on screen.
    assert!(has_colour(&pixels, channels, [0x4e, 0x79, 0xa7]), "no chart bars in the screenshot");
    assert!(has_colour(&pixels, channels, [0xf2, 0x8e, 0x2b]), "no second chart series in the screenshot");
    assert!(has_colour(&pixels, channels, [0xff, 0x94, 0x94]), "no heap map buffers in the screenshot");
    let dom = chromium(&["--dump-dom"], &html_path).unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    for id in
        ["heap-map", "chart-placement", "chart-binds", "stream-resident", "stream-latency", "device-panel-1"]
    {
        assert!(dom.contains(&format!(r#"id="{id}""#)), "rendered DOM lacks #{id}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
