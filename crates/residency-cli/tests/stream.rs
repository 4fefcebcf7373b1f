//! `residency stream` end to end: a virtual texture built from real textures (Extreme Tux Racer's
//! terrain set), streamed by shader feedback and compared with a fully resident render, under the
//! Khronos validation layer with synchronization validation.

use std::process::Command;

mod common;

use common::{build_texture, f, stream_on};

fn streams_a_virtual_texture_within_a_tenth_of_its_size_on(path: &str) {
    let Some(file) = build_texture(&format!("{path}-fit")) else { return };
    let (r, _) = stream_on(path, &file, &["--sweep", "--wait-loads", "--wait-frames"]);
    let full = f(&r, "fully_resident_bytes");
    assert!(f(&r, "resident_bytes_peak") <= f(&r, "budget_bytes"), "{r}");
    assert!(f(&r, "resident_bytes_peak") <= 0.10 * full, "resident peak over 10 % of fully resident: {r}");
    assert!(f(&r, "latency_frames_p95") <= 3.0, "request-to-resident p95 over 3 frames: {r}");
    // The fly-over has one camera cut; every frame but the few after the start and the cut converges.
    assert!(f(&r, "converged_frames") >= 30.0, "{r}");
    assert!(f(&r, "psnr_db_min") >= 40.0, "converged frames must match the fully resident render: {r}");
    assert!(f(&r, "tiles_streamed") > 0.0, "{r}");
    assert!(f(&r, "mb_per_s") > 0.0, "{r}");
    assert!(r["frames_to_converge_after_cut"].as_u64().is_some_and(|n| n <= 10), "{r}");
    // The sweep re-flies the path at 25 / 50 / 100 % of the working set: less budget, more evictions.
    let sweep = r["sweep"].as_array().expect("sweep");
    let points: Vec<(f64, f64, f64)> =
        sweep.iter().map(|p| (f(p, "percent"), f(p, "budget_bytes"), f(p, "converged_frames"))).collect();
    assert_eq!(points.iter().map(|p| p.0).collect::<Vec<_>>(), [25.0, 50.0, 100.0]);
    assert!(points[0].1 < points[1].1 && points[1].1 < points[2].1, "{r}");
    // A quarter of the working set cannot hold the view; the whole working set converges as the
    // first run did.
    assert!(points[0].2 < points[2].2, "{r}");
    // (Within a frame or two: with frames in flight, when feedback is read depends on GPU timing.)
    assert!((points[2].2 - f(&r, "converged_frames")).abs() <= 2.0, "{r}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

fn a_tight_budget_evicts_and_never_exceeds_it_on(path: &str) {
    let Some(file) = build_texture(&format!("{path}-tight")) else { return };
    // Frame-exact (loads and frames waited): whether anything was evicted by the last frame does
    // not depend on how fast the workers load.
    let (r, _) = stream_on(path, &file, &["--budget-mib", "1", "--wait-loads", "--wait-frames"]);
    assert!(f(&r, "resident_bytes_peak") <= f(&r, "budget_bytes"), "{r}");
    assert!(f(&r, "tiles_evicted") > 0.0, "a 1 MiB budget cannot hold the fly-over's working set: {r}");
    // Fallback keeps every frame drawn: no frame is blank even when the budget is short.
    let per_frame = r["psnr_db_per_frame"].as_array().unwrap();
    assert_eq!(per_frame.len(), 40);
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

/// Frames in flight: the CPU runs up to N frames ahead, each frame's feedback is read once the GPU
/// has finished it, and unbinds of evicted tiles wait for the frames that may still sample them.
/// The same fly-over streams the same tiles and renders the same pixels as the waiting loop; the
/// honest latency (counted from the frame that asked) grows by at most the ring's depth (the median;
/// the tail also counts loads slower than a frame).
fn frames_in_flight_stream_the_same_tiles_and_wait_before_unbinds_on(path: &str) {
    let Some(file) = build_texture(&format!("{path}-ring")) else { return };
    // Frame-exact runs (loads and frames waited): what is compared does not depend on how fast
    // the workers or the GPU run. The tight run below overlaps frames for real.
    let exact = ["--wait-loads", "--wait-frames"];
    let (one, _) = stream_on(path, &file, &[&["--frames-in-flight", "1"][..], &exact].concat());
    let (three, _) = stream_on(path, &file, &[&["--frames-in-flight", "3"][..], &exact].concat());
    assert_eq!(f(&one, "frames_in_flight"), 1.0);
    assert_eq!(f(&three, "frames_in_flight"), 3.0);
    // The same working set (give or take a tile or two wanted only while the feedback was late).
    let (a, b) = (f(&one, "tiles_streamed"), f(&three, "tiles_streamed"));
    assert!((a - b).abs() <= 0.1 * a, "{one}\n{three}");
    // The ring adds at most its depth less one to the typical request's latency (the staging
    // ring's per-frame share shrinks with the ring's depth, so a burst may take a frame more).
    assert!(f(&three, "latency_frames_p50") <= f(&one, "latency_frames_p50") + 2.0, "{one}\n{three}");
    assert!(f(&three, "latency_frames_p95") >= f(&one, "latency_frames_p95"), "{one}\n{three}");
    assert!(f(&three, "psnr_db_min") >= 40.0, "{three}");
    assert!(f(&three, "converged_frames") >= 30.0, "{three}");
    assert_eq!(three["psnr_db_per_frame"].as_array().unwrap().len(), 40);
    // Under a tight budget tiles are evicted while frames are in flight: an unbind waits on the
    // GPU for the frames still running then (the sparse bind waits on their timeline points; how
    // many are still running depends on timing), never on the host, and synchronization
    // validation sees no hazard. Loads are waited for each frame (frames still overlap), so
    // whether a tile was evicted does not depend on how fast the workers load.
    let (tight, _) =
        stream_on(path, &file, &["--frames-in-flight", "3", "--budget-mib", "1", "--wait-loads"]);
    assert!(f(&tight, "tiles_evicted") > 0.0, "{tight}");
    if path == "software" {
        assert_eq!(f(&tight, "unbinds_after_frames"), 0.0, "the software path binds nothing: {tight}");
    }
    assert!(f(&tight, "resident_bytes_peak") <= f(&tight, "budget_bytes"), "{tight}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

/// `residency stream FILE ARGS…`, which must fail: its standard error.
fn stream_error(file: &std::path::Path, args: &[&str]) -> String {
    let output =
        Command::new(env!("CARGO_BIN_EXE_residency")).arg("stream").arg(file).args(args).output().unwrap();
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let stderr = stream_error("/nonexistent/terrain.rvt".as_ref(), &["--frames", "1"]);
    assert!(stderr.contains("/nonexistent/terrain.rvt"), "error should name the file: {stderr}");
}

fn sampled_feedback_still_converges_on(path: &str) {
    let Some(file) = build_texture(&format!("{path}-sampled")) else { return };
    // One pixel of every 2 × 2 block, every other frame: a quarter of the pixels in half the frames.
    let (r, _) = stream_on(
        path,
        &file,
        &["--feedback-stride", "2", "--feedback-interval", "2", "--wait-loads", "--wait-frames"],
    );
    assert!(f(&r, "latency_frames_p95") <= 3.0, "{r}");
    assert!(f(&r, "converged_frames") >= 14.0, "{r}");
    assert!(f(&r, "psnr_db_min") >= 40.0, "{r}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

fn a_budget_cut_mid_run_keeps_rendering_from_coarser_mips_on(path: &str) {
    let Some(file) = build_texture(&format!("{path}-cut")) else { return };
    let (r, _) = stream_on(
        path,
        &file,
        &["--cut-at-frame", "10", "--cut-to-mib", "1", "--wait-loads", "--wait-frames"],
    );
    let resident = r["resident_mib_per_frame"].as_array().unwrap();
    let psnr = r["psnr_db_per_frame"].as_array().unwrap();
    assert!(resident[9].as_f64().unwrap() > 1.0, "the view needs more than the cut budget: {r}");
    // Evicted down to the new budget within a few frames, and held there.
    for (frame, mib) in resident.iter().enumerate().skip(13) {
        assert!(mib.as_f64().unwrap() <= 1.0, "frame {frame}: {mib} MiB resident over the 1 MiB budget: {r}");
    }
    // Every frame after the cut is still drawn (coarser mips, not the magenta of nothing resident:
    // that scores under 10 dB).
    for (frame, db) in psnr.iter().enumerate().skip(10) {
        assert!(db.as_f64().unwrap() >= 15.0, "frame {frame} lost its texture after the cut: {r}");
    }
    assert!(f(&r, "tiles_evicted") > 0.0, "{r}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

#[test]
fn streams_a_virtual_texture_within_a_tenth_of_its_size() {
    streams_a_virtual_texture_within_a_tenth_of_its_size_on("hardware");
}

#[test]
fn software_path_streams_a_virtual_texture_within_a_tenth_of_its_size() {
    streams_a_virtual_texture_within_a_tenth_of_its_size_on("software");
}

#[test]
fn a_tight_budget_evicts_and_never_exceeds_it() {
    a_tight_budget_evicts_and_never_exceeds_it_on("hardware");
}

#[test]
fn software_path_a_tight_budget_evicts_and_never_exceeds_it() {
    a_tight_budget_evicts_and_never_exceeds_it_on("software");
}

#[test]
fn sampled_feedback_still_converges() {
    sampled_feedback_still_converges_on("hardware");
}

#[test]
fn software_path_sampled_feedback_still_converges() {
    sampled_feedback_still_converges_on("software");
}

#[test]
fn a_budget_cut_mid_run_keeps_rendering_from_coarser_mips() {
    a_budget_cut_mid_run_keeps_rendering_from_coarser_mips_on("hardware");
}

#[test]
fn software_path_a_budget_cut_mid_run_keeps_rendering_from_coarser_mips() {
    a_budget_cut_mid_run_keeps_rendering_from_coarser_mips_on("software");
}

#[test]
fn frames_in_flight_stream_the_same_tiles_and_wait_before_unbinds() {
    frames_in_flight_stream_the_same_tiles_and_wait_before_unbinds_on("hardware");
}

#[test]
fn software_path_frames_in_flight_stream_the_same_tiles_and_wait_before_unbinds() {
    frames_in_flight_stream_the_same_tiles_and_wait_before_unbinds_on("software");
}

/// The software path (indirection + atlas) against the hardware one on the same fly-over: the same
/// tiles stream at the same frames, the run's PSNR against the fully resident render is within
/// 0.5 dB, and converged frames differ from the fully resident render only in the last two bits
/// (rounding of the filter), never by a wrong texel.
#[test]
fn both_paths_stream_the_same_tiles_and_match_within_half_a_db() {
    let Some(file) = build_texture("paths") else { return };
    // One frame in flight: feedback is read back in the same frame on both paths, so the runs are
    // deterministic and comparable frame by frame (with more, it depends on GPU timing).
    // Loads run on worker threads across frames; `--wait-loads` makes the runs frame-exact.
    // Without the bind worker, whose publication a frame later would shift the hardware path's
    // frames by one against the software path's (which makes no binds).
    let (hw, _) =
        stream_on("hardware", &file, &["--frames-in-flight", "1", "--wait-loads", "--no-bind-worker"]);
    let (sw, _) = stream_on("software", &file, &["--frames-in-flight", "1", "--wait-loads"]);
    assert_eq!(hw["path"], "hardware");
    assert_eq!(sw["path"], "software");
    assert_eq!(f(&hw, "tiles_streamed"), f(&sw, "tiles_streamed"), "{hw}\n{sw}");
    assert_eq!(hw["tiles_per_frame"], sw["tiles_per_frame"], "{hw}\n{sw}");
    assert_eq!(f(&hw, "converged_frames"), f(&sw, "converged_frames"), "{hw}\n{sw}");
    assert!((f(&hw, "psnr_db_run") - f(&sw, "psnr_db_run")).abs() <= 0.5, "{hw}\n{sw}");
    assert!(f(&sw, "psnr_db_min") >= 40.0, "{sw}");
    // Bilinear filtering of the bordered atlas rounds differently by up to 3 in 255.
    assert!(f(&sw, "max_abs_diff_converged") <= 3.0, "{sw}");
    assert!(f(&sw, "backing_bytes_peak") > 0.0 && f(&sw, "gpu_ms_mean") > 0.0, "{sw}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

#[test]
fn auto_picks_the_hardware_path_where_the_device_has_it() {
    let Some(file) = build_texture("auto") else { return };
    let (auto, _) = stream_on("auto", &file, &[]);
    // Lavapipe and the H200 both have sparse residency for RGBA8: auto takes the hardware path.
    assert_eq!(auto["path"], "hardware", "{auto}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

/// A device without sparse residency (lavapipe opened with it off): `--path auto` takes the
/// software path and still streams within the bars; forcing the hardware path is a clear error.
#[test]
fn auto_takes_the_software_path_on_a_device_without_sparse_residency() {
    let Some(file) = build_texture("nosparse") else { return };
    let (r, _) = stream_on("auto", &file, &["--no-sparse", "--wait-loads", "--wait-frames"]);
    assert_eq!(r["path"], "software", "{r}");
    assert!(f(&r, "psnr_db_min") >= 40.0, "{r}");
    assert!(f(&r, "latency_frames_p95") <= 3.0, "{r}");
    let output = Command::new(env!("CARGO_BIN_EXE_residency"))
        .arg("stream")
        .arg(&file)
        .args(["--frames", "2", "--no-sparse", "--path", "hardware"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("hardware residency path"), "{stderr}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

/// A BC7 texture (`vt build --synthetic --format bc7`) streams on the hardware path: 1 byte a
/// texel resident, converged frames match the fully resident BC7 render, and against the RGBA8
/// build of the same texture (`--source`) the streamed frames score what the fully resident BC7
/// render does (the format's own loss, not streaming's). The software path: `stream_software_bc.rs`.
#[test]
fn a_bc7_texture_streams_on_the_hardware_path_and_compares_with_its_rgba8_source() {
    let dir = std::env::temp_dir().join(format!("residency-stream-bc7-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (bc7, rgba8) = (dir.join("bc7.rvt"), dir.join("rgba8.rvt"));
    for (out, format) in [(&bc7, "bc7"), (&rgba8, "rgba8")] {
        let status = Command::new(env!("CARGO_BIN_EXE_residency"))
            .args(["vt", "build", "--synthetic", "2", "--size", "1024", "--format", format, "-o"])
            .arg(out)
            .output()
            .unwrap();
        assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    }
    let source = rgba8.to_str().unwrap();
    let (r, _) = stream_on(
        "hardware",
        &bc7,
        &["--budget-mib", "1", "--source", source, "--wait-loads", "--wait-frames"],
    );
    assert_eq!(r["texel_format"], "bc7_unorm", "{r}");
    assert_eq!(f(&r, "bytes_per_resident_texel"), 1.0, "{r}");
    assert_eq!(f(&r, "resident_texels_peak"), f(&r, "resident_bytes_peak"), "{r}");
    assert!(f(&r, "resident_bytes_peak") <= f(&r, "budget_bytes"), "{r}");
    assert!(f(&r, "resident_bytes_peak") < f(&r, "fully_resident_bytes"), "{r}");
    assert!(f(&r, "converged_frames") >= 30.0, "{r}");
    assert!(f(&r, "psnr_db_min") >= 40.0, "converged frames must match the fully resident BC7 render: {r}");
    // Measured on lavapipe: the fully resident BC7 render 44.1 dB from the RGBA8 one, the
    // converged streamed frames 45.0 dB. Lossy (not 99 dB), close to the source, and streaming
    // costs next to nothing on top.
    let reference = f(&r, "psnr_db_reference_vs_source_run");
    let streamed = f(&r, "psnr_db_vs_source_mean");
    assert!((35.0..70.0).contains(&reference), "BC7 vs its RGBA8 source: {r}");
    assert!(
        streamed >= reference - 1.0,
        "streamed vs source {streamed:.1}, fully resident {reference:.1}: {r}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Past the references' memory (issue #32): 16 textures of 4096² (`--size`: the 2048² file
/// repeated 2 × 2 times, one more mip) with fully resident references for 2 of them only — the
/// ones in view — whose PSNR is measured on their pixels alone; one reference copy serves every
/// plane of a file, so the references hold a sixteenth of the virtual size. The JSON reports
/// residency's own memory (page tables, min-LOD maps or indirections, feedback, staging) and the
/// streamer's counted work, which follows the planes in view, not the 16 registered.
fn references_and_size_run_past_the_references_memory_on(path: &str) {
    let Some(file) = build_texture(&format!("{path}-references")) else { return };
    let exact = ["--wait-loads", "--wait-frames"];
    // Frame-exact, so without the bind worker (its frame of publication delay is counted in the
    // converged frames below).
    let args = [&["--size", "4096", "--textures", "16", "--references", "2", "--no-bind-worker"][..], &exact]
        .concat();
    let (r, _) = stream_on(path, &file, &args);
    assert_eq!(f(&r, "textures"), 16.0, "{r}");
    assert_eq!(r["texture_size"], serde_json::json!([4096, 4096]), "{r}");
    assert_eq!(f(&r, "references"), 2.0, "{r}");
    // One fully resident 4096² RGBA8 copy (every mip): 4/3 of 64 MiB, and far below the
    // virtual size of the 16 textures.
    let copy = f(&r, "reference_bytes");
    assert!((4096.0 * 4096.0 * 4.0 * 4.0 / 3.0 * 0.99..128.0 * 1048576.0).contains(&copy), "{r}");
    assert!(f(&r, "fully_resident_bytes") >= 15.0 * copy, "{r}");
    // The referenced planes are in view, the others too: some pixels compared, not all.
    let compared = f(&r, "psnr_pixels_compared_mean");
    assert!(compared > 0.1 && compared <= 1.0, "{r}");
    // Every frame but the two after the start and after the cut converges.
    assert!(f(&r, "converged_frames") >= 25.0, "{r}");
    assert!(f(&r, "psnr_db_min") >= 40.0, "the repeated texture matches its repeated reference: {r}");
    let o = &r["overhead"];
    for key in ["page_table_bytes", "map_bytes", "feedback_bytes", "staging_bytes"] {
        assert!(f(o, key) > 0.0, "{key}: {r}");
    }
    let sum = f(o, "page_table_bytes") + f(o, "map_bytes") + f(o, "feedback_bytes") + f(o, "staging_bytes");
    assert_eq!(f(o, "total_bytes"), sum, "{r}");
    assert_eq!(f(o, "per_texture_bytes"), sum / 16.0, "{r}");
    let w = &r["work"];
    assert!(f(w, "textures_visited_max") < 16.0, "per-frame work follows the planes in view: {r}");
    assert!(f(w, "feedback_images_decoded_mean") <= f(w, "textures_visited_max"), "{r}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

#[test]
fn references_and_size_run_past_the_references_memory() {
    references_and_size_run_past_the_references_memory_on("hardware");
}

#[test]
fn software_path_references_and_size_run_past_the_references_memory() {
    references_and_size_run_past_the_references_memory_on("software");
}

/// `--size` as a list mixes sizes, one per file in turn (how a run fills a device's sparse
/// address space to the byte it wants): the file given twice, the first at 4096², the second at
/// its own 2048², over four planes — two of each, so the fully resident size is ten 2048²
/// textures' worth where four 4096² would be sixteen.
#[test]
fn a_size_list_mixes_texture_sizes_one_per_file() {
    let Some(file) = build_texture("size-list") else { return };
    let second = file.to_str().unwrap();
    let args = ["--size", "4096,2048", "--textures", "4", "--references", "1", second];
    let (r, _) = stream_on("hardware", &file, &args);
    assert_eq!(f(&r, "textures"), 4.0, "{r}");
    let large = 4096.0 * 4096.0 * 4.0 * 4.0 / 3.0;
    let ratio = f(&r, "fully_resident_bytes") / (4.0 * large);
    assert!((0.6..0.7).contains(&ratio), "two 4096² and two 2048² textures: {ratio} of four 4096²: {r}");
    let stderr = stream_error(&file, &["--frames", "1", "--size", "4096,2048"]);
    assert!(stderr.contains("--size: 2 sizes for 1 files"), "more sizes than files: {stderr}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

#[test]
fn a_size_that_is_not_the_file_times_a_power_of_two_is_a_clear_error() {
    let Some(file) = build_texture("bad-size") else { return };
    let stderr = stream_error(&file, &["--frames", "1", "--size", "3000"]);
    assert!(stderr.contains("--size 3000"), "the error names the option: {stderr}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

/// `--pin-mip-tiles 4` (the streamer's `pinned_mip_tiles`) primes the mips of up to 2 × 2 tiles
/// before frame 0 besides the coarse chain: frame 0 is sharper than with the default, and the
/// pinned tiles stay within the budget.
fn pinning_coarse_mips_sharpens_frame_zero_on(path: &str) {
    let Some(file) = build_texture(&format!("{path}-pinned")) else { return };
    let exact = ["--wait-loads", "--wait-frames", "--size", "4096"];
    let (plain, _) = stream_on(path, &file, &exact);
    let (pinned, _) = stream_on(path, &file, &[&exact[..], &["--pin-mip-tiles", "4"]].concat());
    assert_eq!(f(&plain, "pinned_mip_tiles"), 0.0, "{plain}");
    assert_eq!(f(&pinned, "pinned_mip_tiles"), 4.0, "{pinned}");
    assert!(
        f(&pinned, "psnr_db_frame0") > f(&plain, "psnr_db_frame0") + 0.1,
        "frame 0: {} dB pinned, {} dB by default",
        f(&pinned, "psnr_db_frame0"),
        f(&plain, "psnr_db_frame0")
    );
    assert!(f(&pinned, "resident_bytes_peak") <= f(&pinned, "budget_bytes"), "{pinned}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

#[test]
fn pinning_coarse_mips_sharpens_frame_zero() {
    pinning_coarse_mips_sharpens_frame_zero_on("hardware");
}

#[test]
fn software_path_pinning_coarse_mips_sharpens_frame_zero() {
    pinning_coarse_mips_sharpens_frame_zero_on("software");
}

/// Device-local feedback (the default; the streamer's `feedback_device_local`: feedback buffers
/// and image tables in device-local host-visible memory) streams exactly what host-memory feedback
/// (`--feedback-host-memory`) streams,
/// and the JSON's feedback-cost breakdown is there: the per-frame median, the means by which
/// streamed pass went first, and (every other frame writing no feedback) the idle frames' mean.
fn device_local_feedback_streams_the_same_tiles_on(path: &str) {
    let Some(file) = build_texture(&format!("{path}-fbmemory")) else { return };
    let exact = ["--wait-loads", "--wait-frames", "--feedback-interval", "2"];
    let (host, _) = stream_on(path, &file, &[&exact[..], &["--feedback-host-memory"]].concat());
    let (device, _) = stream_on(path, &file, &exact);
    assert_eq!(host["feedback_device_local"], false, "{host}");
    assert_eq!(device["feedback_device_local"], true, "{device}");
    for key in ["tiles_streamed", "converged_frames", "psnr_db_min", "psnr_db_frame0"] {
        assert_eq!(f(&host, key), f(&device, key), "{key}: {host} {device}");
    }
    assert_eq!(host["psnr_db_per_frame"], device["psnr_db_per_frame"]);
    for r in [&host, &device] {
        // Feedback every other frame: the even frames, whose feedback pass goes first; the odd
        // ones are idle.
        for key in ["feedback_gpu_ms_p50", "feedback_gpu_ms_first_mean", "feedback_gpu_ms_idle_mean"] {
            assert!(r[key].as_f64().is_some_and(f64::is_finite), "{key}: {r}");
        }
        assert!(r["feedback_gpu_ms_second_mean"].is_null(), "{r}");
    }
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

#[test]
fn device_local_feedback_streams_the_same_tiles() {
    device_local_feedback_streams_the_same_tiles_on("hardware");
}

#[test]
fn software_path_device_local_feedback_streams_the_same_tiles() {
    device_local_feedback_streams_the_same_tiles_on("software");
}

/// `--feedback-ablate` (a testing aid for localizing feedback's GPU cost) changes only what the
/// pass without feedback draws or where the resolve is timed: the feedback pass, and so what is
/// streamed and rendered, stays the same (frame-exact runs, both feedback modes), and the JSON
/// says which part was left out. `--feedback-writers` raises the stride until the render has at
/// most that many writing pixels per frame.
fn feedback_ablations_stream_the_same_tiles_on(path: &str) {
    let Some(file) = build_texture(&format!("{path}-ablate")) else { return };
    let exact = ["--wait-loads", "--wait-frames"];
    for direct in [false, true] {
        let mode: &[&str] = if direct { &["--feedback-direct"] } else { &["--feedback-in-render"] };
        let (all, _) = stream_on(path, &file, &[&exact[..], mode].concat());
        assert!(all["feedback_ablate"].is_null(), "{all}");
        // 256 × 256 at stride 8: one writing pixel per 8 × 8 block.
        assert_eq!(f(&all, "feedback_writing_pixels"), 1024.0, "{all}");
        assert_eq!(f(&all, "feedback_pixel_stride"), 8.0, "{all}");
        assert!(f(&all, "feedback_requests_mean") > 0.0, "{all}");
        let parts: &[&str] = if direct { &["store", "branch"] } else { &["store", "branch", "resolve"] };
        for part in parts {
            let (r, _) = stream_on(path, &file, &[&exact[..], mode, &["--feedback-ablate", part]].concat());
            assert_eq!(r["feedback_ablate"], *part, "{r}");
            for key in ["tiles_streamed", "converged_frames", "psnr_db_min", "latency_frames_p95"] {
                assert_eq!(f(&all, key), f(&r, key), "{part} {key}: {all}\n{r}");
            }
            assert_eq!(all["psnr_db_per_frame"], r["psnr_db_per_frame"], "{part}");
        }
    }
    // At most 300 writing pixels of 256 × 256: stride 16 (256), not 8 (1024).
    let (r, _) = stream_on(path, &file, &[&exact[..], &["--feedback-writers", "300"]].concat());
    assert_eq!(f(&r, "feedback_pixel_stride"), 16.0, "{r}");
    assert_eq!(f(&r, "feedback_writing_pixels"), 256.0, "{r}");
    assert!(f(&r, "tiles_streamed") > 0.0, "{r}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

#[test]
fn feedback_ablations_stream_the_same_tiles() {
    feedback_ablations_stream_the_same_tiles_on("hardware");
}

#[test]
fn software_path_feedback_ablations_stream_the_same_tiles() {
    feedback_ablations_stream_the_same_tiles_on("software");
}

/// The feedback pass (the default; `--feedback-in-render` turns it off): the records come from a pass of their own at 1/stride of the resolution,
/// whose view-projection puts the frame's writing pixels on its pixel centres and whose LOD is
/// the render's at those pixels (from `uv / w` and `1 / w`, affine in screen space). At stride 1
/// that pass is the render's own raster: it streams exactly what the render's pixels ask for; at
/// the default stride 8 it does too up to the rounding of the derivatives and the device's
/// choice of fine or coarse derivatives (exactly, on lavapipe), so it converges as they do.
fn a_feedback_pass_of_its_own_streams_what_the_pixels_ask_for_on(path: &str) {
    let Some(file) = build_texture(&format!("{path}-fbpass")) else { return };
    let exact = ["--wait-loads", "--wait-frames"];
    let one = ["--feedback-stride", "1"];
    let render = ["--feedback-in-render"];
    let (pixels, _) = stream_on(path, &file, &[&exact[..], &one, &render].concat());
    let (pass, _) = stream_on(path, &file, &[&exact[..], &one].concat());
    assert_eq!(pass["feedback_pass"], true, "{pass}");
    for key in ["tiles_streamed", "converged_frames", "latency_frames_p95"] {
        assert_eq!(f(&pixels, key), f(&pass, key), "{key}: {pixels}\n{pass}");
    }
    assert_eq!(pixels["psnr_db_per_frame"], pass["psnr_db_per_frame"]);
    let (pixels, _) = stream_on(path, &file, &[&exact[..], &render].concat());
    assert_eq!(pixels["feedback_pass"], false, "{pixels}");
    let (pass, _) = stream_on(path, &file, &exact);
    assert!(f(&pass, "latency_frames_p95") <= 3.0, "{pass}");
    assert!(f(&pass, "converged_frames") >= 30.0, "{pass}");
    assert!(f(&pass, "psnr_db_min") >= 40.0, "{pass}");
    for key in ["tiles_streamed", "converged_frames"] {
        assert!((f(&pixels, key) - f(&pass, key)).abs() <= 2.0, "{key}: {pixels}\n{pass}");
    }
    // Only with single pixels and deferred feedback.
    let stderr = stream_error(&file, &["--feedback-pass", "--feedback-block", "2", "--frames", "1"]);
    assert!(stderr.contains("--feedback-block"), "{stderr}");
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
}

#[test]
fn a_feedback_pass_of_its_own_streams_what_the_pixels_ask_for() {
    a_feedback_pass_of_its_own_streams_what_the_pixels_ask_for_on("hardware");
}

#[test]
fn software_path_a_feedback_pass_of_its_own_streams_what_the_pixels_ask_for() {
    a_feedback_pass_of_its_own_streams_what_the_pixels_ask_for_on("software");
}
