//! Runs the examples as tests on the shared GPU harness: validation clean, no leaks, checked output.

#[path = "../examples/distance_field.rs"]
mod distance_field;
#[path = "../examples/multi_device.rs"]
mod multi_device;
#[path = "../examples/own_frame.rs"]
mod own_frame;
#[path = "../examples/placed_buffers.rs"]
mod placed_buffers;
#[path = "../examples/ptex.rs"]
mod ptex;
#[path = "../examples/sparse_texture.rs"]
mod sparse_texture;
#[path = "../examples/stereo.rs"]
mod stereo;
#[path = "../examples/texture_array.rs"]
mod texture_array;
#[path = "../examples/transitions.rs"]
mod transitions;
#[path = "../examples/virtual_texture.rs"]
mod virtual_texture;

use residency::vulkan::sparse::ResidencyPath;
use residency::vulkan::testing::{expect_validation_problem, with_gpu};

#[test]
fn placed_buffers_example_computes_the_right_results_in_one_shared_page() {
    with_gpu(|set| {
        let outcome = placed_buffers::run(&set.devices()[0]).expect("the example runs");
        assert_eq!(outcome.matched, 1000);
        let mut offsets = outcome.offsets.to_vec();
        offsets.sort_unstable();
        offsets.dedup();
        assert_eq!(offsets.len(), 4, "four distinct places in one page: {:?}", outcome.offsets);
        assert_eq!(outcome.offsets[2] % 256, 0, "the uniform buffer's 256 B floor");
    });
}

#[test]
fn sparse_texture_example_samples_resident_texels_and_falls_back_to_coarser_mips() {
    with_gpu(|set| {
        let outcome = sparse_texture::run(&set.devices()[0]).expect("the example runs");
        assert_eq!(outcome.matched, outcome.samples);
        assert!(outcome.resident_tiles * 100 < outcome.total_tiles, "{outcome:?}");
    });
}

/// The sparse distance field at its defaults: the GPU's rays match the CPU's march through the
/// same resident bricks, the default value (the maximum step) never steps through a surface
/// (every hit lies on one, and hit or miss differs from the dense field's march only on grazing
/// silhouettes), and fewer than half the bricks are resident.
#[test]
fn distance_field_example_ray_marches_resident_bricks_with_the_default_as_maximum_step() {
    with_gpu(|set| {
        let outcome = distance_field::run(&set.devices()[0]).expect("the example runs");
        assert_eq!(outcome.matched, outcome.pixels, "{outcome:?}");
        assert_eq!(outcome.on_surface, outcome.hits, "every hit on a surface: {outcome:?}");
        assert!(outcome.silhouette_differs * 200 <= outcome.pixels, "{outcome:?}");
        assert!(outcome.hits > 0 && outcome.hits < outcome.pixels, "{outcome:?}");
        assert!(outcome.default_steps > 0, "rays crossed non-resident bricks: {outcome:?}");
        assert!(outcome.resident_bytes * 2 < outcome.dense_bytes, "{outcome:?}");
        assert!(outcome.passed());
    });
}

/// The texture arrays at their defaults: the sparsely populated array samples its four resident
/// slices and returns the default elsewhere; in the array of variable-sized textures the per-slice
/// LOD bias in the uniform buffer picks the level sampled: each slice's own finest level with the
/// biases, the next coarser ones once the buffer changes, non-resident without a bias where a
/// slice's finest levels are absent.
#[test]
fn texture_array_example_per_slice_bias_changes_the_sampled_level() {
    with_gpu(|set| {
        let outcome = texture_array::run(&set.devices()[0]).expect("the example runs");
        assert_eq!(outcome.sparse_matched, outcome.sparse_probes, "{outcome:?}");
        assert_eq!(outcome.variable_matched, outcome.variable_probes, "{outcome:?}");
        let as_f32 = |b: [u32; 8]| b.map(|v| v as f32).to_vec();
        assert_eq!(outcome.levels_biased, as_f32(texture_array::BIAS), "{outcome:?}");
        assert_eq!(outcome.levels_coarser, as_f32(texture_array::BIAS_COARSER), "{outcome:?}");
        assert_ne!(outcome.levels_biased, outcome.levels_coarser, "the bias changed the level sampled");
        let refused: Vec<bool> = texture_array::BIAS.iter().map(|&b| b != 0).collect();
        assert_eq!(
            outcome.refused_below_finest, refused,
            "a bias finer than the slice's texture: {outcome:?}"
        );
        assert!(outcome.sparse_resident_bytes * 10 < outcome.sparse_full_bytes, "{outcome:?}");
        assert!(outcome.variable_resident_bytes < outcome.variable_full_bytes, "{outcome:?}");
        assert!(outcome.passed());
    });
}

/// PRT-Ptex at its defaults: every sample of the per-face textures matches the CPU's manual
/// trilinear filtering and the continuous surface colour (borders: no seam at face edges), and
/// the resident tiles take less than a fifth of packing every face at full resolution.
#[test]
fn ptex_example_filters_per_face_textures_seamlessly_in_a_sparse_array() {
    with_gpu(|set| {
        let outcome = ptex::run(&set.devices()[0]).expect("the example runs");
        assert_eq!(outcome.matched_reference, outcome.samples, "{outcome:?}");
        assert_eq!(outcome.matched_surface, outcome.samples, "{outcome:?}");
        assert!(outcome.seam_pairs > 0 && outcome.max_seam < 0.03, "{outcome:?}");
        assert!(outcome.faces_per_level.iter().filter(|&&n| n > 0).count() >= 4, "{outcome:?}");
        assert!(outcome.per_face_bytes <= outcome.resident_bytes, "{outcome:?}");
        assert!(outcome.resident_bytes * 5 < outcome.full_resolution_bytes, "{outcome:?}");
        assert_eq!(outcome.faces, 256);
        assert_eq!(outcome.released_faces, outcome.faces_per_level[0], "{outcome:?}");
        assert_eq!(outcome.matched_after_release, outcome.samples, "{outcome:?}");
        assert!(outcome.resident_bytes_after_release < outcome.resident_bytes, "{outcome:?}");
        assert!(outcome.passed());
    });
}

#[test]
fn multi_device_example_runs_on_every_device_and_checks_each() {
    with_gpu(|set| {
        let outcome = multi_device::run(set, 4).expect("the example runs");
        assert!(outcome.devices >= 2);
        assert_eq!(outcome.checked.len(), outcome.devices);
        assert!(outcome.checked.iter().all(|&(_, ok)| ok > 0), "{outcome:?}");
    });
}

/// The README's default size is 65 536 workgroups of 64, one more than lavapipe's
/// maxComputeWorkGroupCount[0]: the example splits them into a grid within every device's limit.
#[test]
fn multi_device_example_at_its_default_size_stays_within_the_workgroup_limit() {
    with_gpu(|set| {
        let outcome = multi_device::run(set, multi_device::DEFAULT_MIB).expect("the example runs");
        assert!(outcome.checked.iter().all(|&(_, ok)| ok > 0), "{outcome:?}");
        let groups = u64::from(outcome.groups[0]) * u64::from(outcome.groups[1]);
        assert!(
            groups >= (multi_device::DEFAULT_MIB << 20) / 16 / 64,
            "every element is covered: {outcome:?}"
        );
        for device in set.devices() {
            let limits = device.limits().max_compute_work_group_count;
            assert!((0..3).all(|axis| outcome.groups[axis] <= limits[axis]), "{outcome:?} {limits:?}");
        }
    });
}

/// The stereo example at its defaults (or on `path`): each eye on its own device in the same
/// frame, streamed through one decoded-tile cache, matches the same view drawn on device 0 alone.
fn stereo_example(path: Option<ResidencyPath>) {
    with_gpu(|set| {
        let o = match path {
            None => stereo::run(set, stereo::FRAMES),
            Some(path) => stereo::run_on_path(set, path, stereo::FRAMES),
        }
        .expect("the example runs");
        println!("{o:?}");
        assert!(path.is_none_or(|p| p == o.path), "{o:?}");
        assert!(o.devices >= 2, "{o:?}");
        assert!(o.settled.iter().all(|&s| s), "every phase's feedback settled: {o:?}");
        assert!(o.psnr_db.iter().all(|&p| p >= 40.0), "each eye matches one device's render: {o:?}");
        assert_eq!(o.magenta, 0, "{o:?}");
        assert!(o.parallax_db < 99.0, "the eyes see different views: {o:?}");
        assert!(o.clear_pixels < 2 * 128 * 128 / 2, "the scene fills most of the views: {o:?}");
        assert!((0..2).all(|i| o.tiles_streamed[i] > o.tiles_primed[i]), "streamed from feedback: {o:?}");
        assert!(
            o.cache.hits > 0 && o.cache.hit_rate() >= 0.3,
            "the second device reads decoded tiles: {o:?}"
        );
    });
}

#[test]
fn stereo_example_renders_one_eye_per_device_and_matches_one_device() {
    stereo_example(None);
}

#[test]
fn stereo_example_streams_each_eye_on_the_software_path() {
    stereo_example(Some(ResidencyPath::Software));
}

#[test]
fn transitions_example_waits_for_the_index_buffer_only_and_aliases_transients() {
    with_gpu(|set| {
        let outcome = transitions::run(&set.devices()[0], false).expect("the example runs");
        assert_eq!(outcome.quads_correct, 4, "{outcome:?}");
        assert!(outcome.neighbour_correct);
        assert_eq!(outcome.draw_buffer_barriers, 1, "the draw waits for the index buffer alone");
        assert!(outcome.per_buffer_bytes < outcome.per_page_bytes, "{outcome:?}");
        assert!(
            outcome.transient.iter().all(|&(peak, sum)| peak < sum),
            "aliasing saved memory: {outcome:?}"
        );
    });
}

#[test]
fn a_missing_declared_use_is_caught_by_synchronization_validation() {
    expect_validation_problem("SYNC-HAZARD-READ-AFTER-WRITE", |set| {
        // The index buffer's use by the draw is not declared: no barrier after the culling pass.
        let _ = transitions::run(&set.devices()[0], true);
    });
}

/// The example at its defaults on one residency path: frame 0 shows the primed coarse chain (no
/// nothing-resident pixel), the fragment shaders' feedback alone streams more tiles, far fewer
/// than the textures hold, and once the camera rests the feedback misses nothing and the frame
/// matches the same view drawn from fully resident copies.
fn virtual_texture_example_streams_from_fragment_feedback(path: ResidencyPath) {
    with_gpu(|set| {
        let outcome =
            virtual_texture::run(&set.devices()[0], path, virtual_texture::FRAMES).expect("the example runs");
        assert_eq!(outcome.path, path);
        assert_eq!(outcome.magenta_frame0, 0, "priming: frame 0 samples the coarse chain, {outcome:?}");
        assert!(outcome.primed_tiles > 0, "{outcome:?}");
        assert!(outcome.streamed_tiles > 0, "tiles streamed from the feedback: {outcome:?}");
        assert!(outcome.resident_tiles_peak * 5 < outcome.full_tiles, "{outcome:?}");
        assert!(outcome.settled_frames >= 3, "the last frames' feedback missed nothing: {outcome:?}");
        assert!(outcome.psnr_last_db > 45.0, "the last frame is the fully resident one: {outcome:?}");
        assert!(outcome.psnr_frame0_db > 30.0, "frame 0 is the coarse chain of the same: {outcome:?}");
    });
}

#[test]
fn virtual_texture_example_streams_on_the_hardware_path() {
    virtual_texture_example_streams_from_fragment_feedback(ResidencyPath::Hardware);
}

#[test]
fn virtual_texture_example_streams_on_the_software_path() {
    virtual_texture_example_streams_from_fragment_feedback(ResidencyPath::Software);
}

/// Runs `own_frame` with `early` on a thread of its own: a hang fails the test (and ends the
/// binary) instead of stalling it. Returns whether the run returned `Ok`, checking that it left
/// no validation message (the renderer's own messenger, synchronization validation on) and no
/// leak.
fn own_frame_within_a_minute(early: Option<own_frame::ReturnEarly>) -> bool {
    use std::sync::atomic::Ordering;
    let (problems, leaks) = (
        own_frame::PROBLEMS.load(Ordering::SeqCst),
        residency::vulkan::LEAKS_AT_TEARDOWN.load(Ordering::SeqCst),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        let outcome = own_frame::run(own_frame::FRAMES, early);
        let _ = tx.send(());
        outcome.map_err(|e| e.to_string())
    });
    if rx.recv_timeout(std::time::Duration::from_secs(120)).is_err() {
        eprintln!("\n**** HUNG: own_frame with {early:?} ****\n");
        std::process::exit(101);
    }
    let outcome = runner.join().expect("no panic");
    assert_eq!(own_frame::PROBLEMS.load(Ordering::SeqCst), problems, "validation messages with {early:?}");
    assert_eq!(residency::vulkan::LEAKS_AT_TEARDOWN.load(Ordering::SeqCst), leaks, "leaks with {early:?}");
    match (early, outcome) {
        (None, Ok(o)) => {
            assert_eq!(o.magenta_frame0, 0, "priming: {o:?}");
            assert_eq!(o.frames, own_frame::FRAMES);
            assert_ne!(o.path, ResidencyPath::Auto, "a path was resolved: {o:?}");
            assert!(o.streamed_tiles > 0, "streamed from the fragment shaders' feedback: {o:?}");
            true
        }
        (Some(site), Err(e)) => {
            assert_eq!(e, format!("returned early at {site:?}"), "the early return, not another error");
            false
        }
        (early, outcome) => panic!("{early:?}: {outcome:?}"),
    }
}

/// The renderer's own frame (its instance, device, queue, command buffers and timeline, adopted
/// by residency) streams four virtual textures, and a `?` at every site of the test mode returns
/// cleanly: no crash, no hang, no validation message, no leak, and no wait for device idle in
/// the example (residency's teardown drains its queue). Each site runs three times: an
/// early-return crash used to show about one run in ten.
#[test]
fn own_frame_example_streams_and_returns_early_anywhere_cleanly() {
    if residency::vulkan::testing::with_gpu(|_| ()).is_none() {
        return;
    }
    assert!(own_frame_within_a_minute(None));
    for _ in 0..3 {
        for site in own_frame::ReturnEarly::SITES {
            assert!(!own_frame_within_a_minute(Some(site)));
        }
    }
}

/// The example's streaming code (between its `// streaming: begin` and `// streaming: end`
/// markers) stays within 50 lines.
#[test]
fn own_frame_example_streaming_code_is_at_most_50_lines() {
    let source = include_str!("../examples/own_frame.rs");
    let (mut inside, mut lines, mut blocks) = (false, 0, 0);
    for line in source.lines().map(str::trim) {
        match line {
            "// streaming: begin" => (inside, blocks) = (true, blocks + 1),
            "// streaming: end" => inside = false,
            _ => lines += usize::from(inside),
        }
    }
    assert!(blocks >= 2 && !inside, "markers paired");
    assert!(lines <= 50, "{lines} lines of streaming code");
}

/// The README's quick start runs `cargo run --release --bin NAME -- tour` from the root: NAME must be
/// a binary of the workspace's default members, or cargo refuses it.
#[test]
fn the_readme_quick_start_names_a_binary_cargo_run_finds() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let line =
        readme.lines().find(|l| l.contains("cargo run") && l.contains(" tour")).expect("quick start line");
    let bin = line.split("--bin ").nth(1).and_then(|r| r.split_whitespace().next()).expect("--bin NAME");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--no-deps", "--offline", "--format-version", "1", "--manifest-path"])
        .arg(format!("{root}/Cargo.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let defaults: Vec<&str> =
        meta["workspace_default_members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    let found = meta["packages"].as_array().unwrap().iter().any(|p| {
        defaults.contains(&p["id"].as_str().unwrap())
            && p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == bin && t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
    });
    assert!(
        found,
        "`cargo run --bin {bin}` from the root finds no such binary among the default members {defaults:?}"
    );
}
