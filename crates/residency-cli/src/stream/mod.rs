//! `residency stream FILE.rvt...`: a camera flying over a grid of planes textured with virtual
//! textures, streamed by the library's `Streamer` from fragment-shader feedback under one
//! budget, each frame compared with the same frame drawn from fully resident copies. The frame
//! protocol is the streamer's: this loop calls `begin_frame`, records the scene inside
//! `FrameBindings::record`, submits, and calls `end_frame`.

mod args;
mod repeat;
mod report;
mod scene;

pub use args::{Ablate, PathArg, StreamArgs};
pub use report::{StreamReport, SweepPoint};

use anyhow::Context;
use report::{mean, percentile, psnr_of, Finished};
use residency::core::tiles::{software_slot_bytes, SOFTWARE_TILE_SIDE};
use residency::vulkan::sparse::software::DEFAULT_BORDER;
use residency::vulkan::sparse::ResidencyPath;
use residency::vulkan::streaming::{
    FeedbackSampling, FrameWork, RvtSource, Streamer, StreamerDesc, TileSource,
};
use residency::vulkan::{CommandContext, Device, DeviceSet, DeviceSetDesc, Format, Submission};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn run(args: &StreamArgs) -> anyhow::Result<ExitCode> {
    let set = DeviceSet::new(&DeviceSetDesc::default().with_sparse_residency(!args.no_sparse))?;
    let device = Arc::clone(&set.devices()[0]);
    if let Some((site, skip, fault)) = args.inject_fault {
        device.ledger().inject_fault(site, skip, fault);
    }
    let mut report = fly(args, &device, None)?;
    if args.sweep {
        let working_set = report.resident_bytes_peak.max(1);
        for percent in [25u32, 50, 100] {
            let quiet = StreamArgs { frames_out: None, ..args.clone() };
            let r = fly(&quiet, &device, Some((working_set * u64::from(percent) / 100).max(1)))?;
            report.sweep.push(SweepPoint {
                percent,
                budget_bytes: r.budget_bytes,
                tiles_streamed: r.tiles_streamed,
                tiles_evicted: r.tiles_evicted,
                thrash: r.thrash,
                thrash_rate: r.thrash as f64 / r.tiles_streamed.max(1) as f64,
                latency_frames_p95: r.latency_frames_p95,
                converged_frames: r.converged_frames,
                psnr_db_mean_all: mean(&r.psnr_db_per_frame),
            });
        }
    }
    report.validation_performance_warnings = set.validation_log().performance_warnings();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        println!(
            "{}: {} textures, {} frames {}×{} ({}); resident peak {:.1} of {:.1} MiB, budget {:.1} MiB",
            report.device,
            report.textures,
            report.frames,
            report.width,
            report.height,
            report.path,
            mib(report.resident_bytes_peak),
            mib(report.fully_resident_bytes),
            mib(report.budget_bytes)
        );
        println!(
            "streamer CPU {:.3} ms mean, {:.3} ms p99; render {:.3} ms GPU, feedback +{:.3} ms; latency p95 {} frames, {:.1} ms",
            report.streamer_cpu_ms_mean, report.streamer_cpu_ms_p99, report.render_gpu_ms_mean,
            report.feedback_gpu_ms_mean, report.latency_frames_p95, report.latency_ms_p95
        );
        println!(
            "PSNR frame 0 {:.1} dB; over {} converged frames mean {:.1} dB, min {:.1} dB; {} tiles streamed, {} evicted",
            report.psnr_db_frame0, report.converged_frames, report.psnr_db_mean, report.psnr_db_min,
            report.tiles_streamed, report.tiles_evicted
        );
    }
    let problems = set.validation_log().problem_count();
    if problems != 0 {
        eprintln!("{problems} validation problem(s)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// One fly-over with a fresh streamer and scene; `budget` overrides the budget in bytes.
pub fn fly(args: &StreamArgs, device: &Arc<Device>, budget: Option<u64>) -> anyhow::Result<StreamReport> {
    let files = args
        .files
        .iter()
        .map(|f| RvtSource::open(f).map(Arc::new).with_context(|| format!("opening {}", f.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let sources = args
        .sources
        .iter()
        .map(|f| RvtSource::open(f).map(Arc::new).with_context(|| format!("opening {}", f.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if !sources.is_empty() && sources.len() != files.len() {
        anyhow::bail!(
            "--source: {} files for {} streamed files (one each, in order)",
            sources.len(),
            files.len()
        );
    }
    for (file, source) in files.iter().zip(&sources) {
        let (a, b) = (file.index().desc(), source.index().desc());
        if (a.width, a.height) != (b.width, b.height) {
            anyhow::bail!(
                "--source {}: {}×{}, but {} is {}×{}",
                source.name(),
                b.width,
                b.height,
                file.name(),
                a.width,
                a.height
            );
        }
    }
    if args.size.len() > files.len() {
        anyhow::bail!("--size: {} sizes for {} files (at most one per file)", args.size.len(), files.len());
    }
    // `--size`: each file (and its `--source`) repeated to its size (the list taken in turn).
    let repeated = |list: &[Arc<RvtSource>]| -> anyhow::Result<Vec<Arc<dyn TileSource>>> {
        list.iter()
            .enumerate()
            .map(|(i, f)| match args.size.get(i % args.size.len().max(1)) {
                Some(&size) => {
                    Ok(Arc::new(repeat::RepeatSource::new(Arc::clone(f), size)?) as Arc<dyn TileSource>)
                }
                None => Ok(Arc::clone(f) as Arc<dyn TileSource>),
            })
            .collect()
    };
    let (files, sources) = (repeated(&files)?, repeated(&sources)?);
    let textures = args.textures.unwrap_or(files.len() as u32);
    let plane_files: Vec<usize> = (0..textures as usize).map(|i| i % files.len()).collect();
    let format_of = |f: usize| files[f].desc().format;
    let texel_format = if plane_files.iter().all(|&f| format_of(f) == format_of(plane_files[0])) {
        format_of(plane_files[0]).name().to_owned()
    } else {
        "mixed".to_owned()
    };
    let path = match args.path {
        PathArg::Auto => ResidencyPath::Auto,
        PathArg::Hardware => ResidencyPath::Hardware,
        PathArg::Software => ResidencyPath::Software,
    };
    // The software path counts a tile as one atlas slot of a block-compressed format (all files
    // of one BC format): its budget is in those slots. Otherwise 64 KiB tiles.
    let software = device.residency_path(Format::R8G8B8A8Unorm, path).ok() == Some(ResidencyPath::Software);
    let slot_format = plane_files
        .iter()
        .all(|&f| format_of(f) == format_of(plane_files[0]))
        .then(|| format_of(plane_files[0]))
        .filter(|f| software && f.is_compressed());
    let tile_bytes = slot_format.map_or(65536u64, |f| software_slot_bytes(f, DEFAULT_BORDER));
    let bytes_per_resident_texel = mean(
        &plane_files
            .iter()
            .map(|&f| {
                let d = files[f].desc();
                if software {
                    tile_bytes as f64 / f64::from(SOFTWARE_TILE_SIDE * SOFTWARE_TILE_SIDE)
                } else {
                    65536.0 / (f64::from(d.tile_width) * f64::from(d.tile_height))
                }
            })
            .collect::<Vec<_>>(),
    );
    // Fully resident: every tile of every mip (64 KiB each).
    let full: u64 = plane_files.iter().map(|&f| files[f].desc().tile_count() * 65536).sum();
    // A quarter of the device's memory (its largest device-local heap): the most the default
    // budget and the default references each take.
    let quarter =
        device.memory_properties().heaps.iter().filter(|h| h.device_local).map(|h| h.size).max().unwrap_or(0)
            / 4;
    let budget_bytes =
        budget.unwrap_or_else(|| args.budget_mib.map_or((full / 10).min(quarter.max(1 << 20)), |m| m << 20));
    let referenced = referenced_planes(args.references, &plane_files, &files, quarter, args.frames);
    let sampling =
        FeedbackSampling::new(args.pixel_stride(), args.feedback_interval).with_block(args.feedback_block);
    if args.feedback_pass && args.feedback_block != 1 {
        anyhow::bail!("--feedback-pass samples single pixels: --feedback-block must be 1");
    }
    if args.feedback_pass && matches!(args.feedback_ablate, Some(Ablate::Store | Ablate::Branch)) {
        anyhow::bail!("--feedback-ablate store or branch ablates the render's own feedback code, which --feedback-pass leaves out");
    }
    let desc = StreamerDesc::default()
        .with_name("stream")
        .with_path(path)
        .with_software_slot_format(slot_format)
        .with_budget_tiles((budget_bytes / tile_bytes).max(1) as u32)
        .with_upload_bytes_per_frame(args.upload_mib << 20)
        .with_frames_in_flight(args.frames_in_flight)
        .with_eviction_delay_frames(args.eviction_delay)
        .with_max_loads_in_flight(args.max_loads_in_flight)
        .with_prefetch(!args.no_prefetch)
        .with_pinned_mip_tiles(args.pin_mip_tiles)
        .with_sampling(sampling);
    let mut desc = desc;
    desc.feedback.count_pixels = !args.no_pixel_counts;
    desc.feedback_device_local = !args.feedback_host_memory;
    desc.deferred_feedback = (!args.feedback_direct).then_some([args.width, args.height]);
    desc.bind_worker = args.bind_worker;
    let mut streamer = Streamer::new(device, desc)?;
    let mut handles = Vec::new();
    for (i, &f) in plane_files.iter().enumerate() {
        handles.push(streamer.add_texture(&format!("plane {i}"), Arc::clone(&files[f]) as _)?);
    }
    let fif = args.frames_in_flight as usize;
    let references = referenced.len() as u32;
    let mut scene = scene::Scene::new(
        device,
        streamer.path(),
        &files,
        &sources,
        plane_files,
        referenced,
        [args.width, args.height],
        fif as u32,
        !args.feedback_direct,
        args.feedback_ablate,
        args.uses_feedback_pass().then_some(sampling.pixel_stride),
    )?;
    let commands = CommandContext::new(device, "stream frames")?;
    let aspect = args.width as f32 / args.height as f32;
    let mut r = StreamReport::default();
    let mut in_flight: Vec<Option<(u64, Submission)>> = (0..fif).map(|_| None).collect();
    let mut done = Finished::default();
    let (mut streamer_ms, mut cpu_ms, mut frame_ms) = (Vec::new(), Vec::new(), Vec::new());
    let mut work = Vec::new();
    for frame in 0..args.frames {
        let started = Instant::now();
        let slot = frame as usize % fif;
        let (mut waited, mut checked) = (Duration::ZERO, false);
        if let Some((f, submission)) = in_flight[slot].take() {
            let t = Instant::now();
            commands.wait(submission)?;
            waited += t.elapsed();
            done.frame(&scene, args, f, slot)?;
            checked = true;
        }
        if let (Some(at_frame), Some(mib)) = (args.cut_at_frame, args.cut_to_mib) {
            if frame == at_frame {
                streamer.set_budget_tiles(((mib << 20) / tile_bytes).max(1) as u32);
            }
        }
        if args.wait_frames {
            let previous = (frame as usize + fif - 1) % fif;
            if let Some((_, submission)) = &in_flight[previous] {
                let t = Instant::now();
                commands.wait_for(submission)?;
                waited += t.elapsed();
            }
        }
        let t = Instant::now();
        let bindings = streamer.begin_frame()?;
        let mut streamer_time = t.elapsed();
        let view_proj = scene::camera(frame, args.frames, scene.grid, aspect);
        let (mut recorded, mut draw_time) = (Ok(()), Duration::ZERO);
        let submission = commands.submit(&[], |rec| {
            let t = Instant::now();
            recorded = bindings
                .record(rec, |rec| {
                    let t = Instant::now();
                    let drawn = scene.record(rec, &bindings, &view_proj);
                    draw_time = t.elapsed();
                    drawn
                })
                .map_err(anyhow::Error::from)
                .and_then(|drawn| drawn);
            streamer_time += t.elapsed() - draw_time;
        })?;
        drop(bindings);
        recorded?;
        let t = Instant::now();
        streamer.end_frame(submission.gpu_use())?;
        streamer_time += t.elapsed();
        in_flight[slot] = Some((frame, submission));
        if args.wait_loads {
            streamer.wait_for_loads();
        }
        work.push(streamer.stats().last_frame_work);
        r.tiles_per_frame.push(streamer.manager_stats().last_frame.became_resident.into());
        r.resident_mib_per_frame.push(streamer.manager_stats().resident_bytes as f64 / f64::from(1 << 20));
        r.backing_bytes_peak = r.backing_bytes_peak.max(streamer.backing_bytes());
        streamer_ms.push(streamer_time.as_secs_f64() * 1e3);
        frame_ms.push(started.elapsed().as_secs_f64() * 1e3);
        let psnr = if checked { done.psnr_ms.last().copied().unwrap_or(0.0) } else { 0.0 };
        cpu_ms.push((started.elapsed() - waited).as_secs_f64() * 1e3 - psnr);
    }
    for f in args.frames.saturating_sub(fif as u64)..args.frames {
        if let Some((sf, submission)) = in_flight[f as usize % fif].take() {
            commands.wait(submission)?;
            done.frame(&scene, args, sf, f as usize % fif)?;
        }
    }
    device.wait_idle()?;
    // Converged: the frame's feedback (read by the streamer) missed nothing.
    let mut converged = vec![false; args.frames as usize];
    let feedback_frames = streamer.take_feedback_frames();
    let requests: Vec<f64> = feedback_frames.iter().map(|fb| (fb.misses + fb.warnings) as f64).collect();
    for fb in feedback_frames {
        if let Some(c) = converged.get_mut(fb.frame as usize) {
            *c = fb.misses == 0 && !fb.overflowed;
        }
    }
    let latencies: Vec<f64> = streamer
        .take_latencies()
        .iter()
        .filter_map(|l| {
            let at = |f: u64| done.pass_at_ms.get(f as usize).copied().flatten();
            Some(at(l.resident_frame)?.0 - at(l.requested_frame?)?.1)
        })
        .collect();
    let stats = streamer.manager_stats().clone();
    let summary = stats.latency.summary();
    let conv: Vec<f64> = done.psnr.iter().zip(&converged).filter(|(_, c)| **c).map(|(p, _)| *p).collect();
    let max_abs_diff_converged =
        done.max_diff.iter().zip(&converged).filter(|(_, c)| **c).map(|(d, _)| *d).max();
    let gpu_of = |i: usize| mean(&done.gpu_ms.iter().filter_map(|g| g[i]).collect::<Vec<_>>());
    // Per frame (index = frame): with feedback − without, for the frames `keep` takes. Even
    // frames draw the feedback pass first (scene.rs).
    let differences = |keep: &dyn Fn(u64) -> bool| {
        done.gpu_ms
            .iter()
            .enumerate()
            .filter(|(f, _)| keep(*f as u64))
            .filter_map(|(_, g)| Some(g[0]? - g[1]?))
            .collect::<Vec<_>>()
    };
    let mean_of = |v: Vec<f64>| (!v.is_empty()).then(|| mean(&v));
    let median_of = |v: &[f64]| (!v.is_empty()).then(|| percentile(v, 50.0));
    let first = differences(&|f| f % 2 == 0 && sampling.frame_active(f));
    let second = differences(&|f| f % 2 == 1 && sampling.frame_active(f));
    let run_s = frame_ms.iter().sum::<f64>() / 1e3;
    let o = streamer.overhead();
    let work_mean = |f: &dyn Fn(&FrameWork) -> f64| mean(&work.iter().map(f).collect::<Vec<_>>());
    let desc0 = files[0].desc();
    r = StreamReport {
        texture_size: [desc0.width, desc0.height],
        references,
        reference_bytes: scene.reference_bytes,
        psnr_pixels_compared_mean: mean(&done.compared),
        overhead: report::Overhead {
            page_table_bytes: o.page_table_bytes,
            map_bytes: o.map_bytes,
            feedback_bytes: o.feedback_bytes,
            staging_bytes: o.staging_bytes,
            total_bytes: o.total_bytes(),
            per_texture_bytes: o.per_texture_bytes(),
        },
        work: report::Work {
            textures_visited_mean: work_mean(&|w| f64::from(w.textures_visited)),
            textures_visited_max: work.iter().map(|w| w.textures_visited).max().unwrap_or(0),
            feedback_images_decoded_mean: work_mean(&|w| f64::from(w.feedback_images_decoded)),
            feedback_words_read_mean: work_mean(&|w| w.feedback_words_read as f64),
            feedback_words_read_max: work.iter().map(|w| w.feedback_words_read).max().unwrap_or(0),
            frame_thread_binds_mean: work_mean(&|w| f64::from(w.frame_thread_binds)),
            frame_thread_tiles_staged_mean: work_mean(&|w| f64::from(w.frame_thread_tiles_staged)),
            worker_binds: streamer.stats().worker_binds,
            worker_tiles_staged: streamer.stats().worker_tiles_staged,
        },
        device: device.name().to_owned(),
        path: streamer.path().name().to_owned(),
        textures,
        distinct_files: files.len() as u32,
        gpu_ms_mean: gpu_of(0),
        render_gpu_ms_mean: gpu_of(1),
        feedback_gpu_ms_mean: gpu_of(0) - gpu_of(1),
        feedback_gpu_ms_p50: match (median_of(&first), median_of(&second)) {
            (Some(a), Some(b)) => (a + b) / 2.0,
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => 0.0,
        },
        feedback_gpu_ms_first_mean: (!first.is_empty()).then(|| mean(&first)),
        feedback_gpu_ms_second_mean: (!second.is_empty()).then(|| mean(&second)),
        feedback_gpu_ms_idle_mean: mean_of(differences(&|f| !sampling.frame_active(f))),
        gpu_reference_ms_mean: gpu_of(2),
        streamer_cpu_ms_mean: mean(&streamer_ms),
        streamer_cpu_ms_p99: percentile(&streamer_ms, 99.0),
        streamer_cpu_ms_p50: percentile(&streamer_ms, 50.0),
        psnr_cpu_ms_mean: mean(&done.psnr_ms),
        cpu_ms_mean: mean(&cpu_ms),
        psnr_db_run: psnr_of(done.mse_sum / done.psnr.len().max(1) as f64),
        psnr_db_frame0: done.psnr.first().copied().unwrap_or(0.0),
        max_abs_diff_converged: max_abs_diff_converged.unwrap_or(0),
        frames: args.frames,
        width: args.width,
        height: args.height,
        fully_resident_bytes: full,
        texel_format,
        bytes_per_resident_texel,
        resident_texels_peak: (stats.resident_bytes_peak as f64 / bytes_per_resident_texel) as u64,
        psnr_db_vs_source_mean: (!sources.is_empty()).then(|| {
            mean(
                &done
                    .psnr_source
                    .iter()
                    .zip(&converged)
                    .filter(|(_, c)| **c)
                    .map(|(p, _)| *p)
                    .collect::<Vec<_>>(),
            )
        }),
        psnr_db_vs_source_run: (!sources.is_empty())
            .then(|| psnr_of(done.mse_source_sum / done.psnr_source.len().max(1) as f64)),
        psnr_db_reference_vs_source_run: (!sources.is_empty())
            .then(|| psnr_of(done.mse_reference_source_sum / done.psnr_source.len().max(1) as f64)),
        budget_bytes,
        pinned_mip_tiles: args.pin_mip_tiles,
        feedback_device_local: !args.feedback_host_memory,
        feedback_deferred: !args.feedback_direct,
        feedback_ablate: args.feedback_ablate.map(Ablate::name),
        feedback_pass: args.uses_feedback_pass(),
        feedback_pixel_stride: sampling.pixel_stride,
        feedback_block: sampling.block,
        feedback_writing_pixels: args::writing_pixels(
            [args.width, args.height],
            sampling.pixel_stride,
            sampling.block,
        ),
        feedback_requests_mean: mean(&requests),
        bind_worker: args.bind_worker && streamer.path() == ResidencyPath::Hardware,
        resident_bytes_peak: stats.resident_bytes_peak,
        tiles_streamed: stats.tiles_streamed,
        tiles_evicted: stats.tiles_evicted,
        thrash: stats.thrash,
        latency_frames_p50: summary.p50,
        latency_frames_p95: summary.p95,
        latency_frames_p99: summary.p99,
        latency_ms_p50: percentile(&latencies, 50.0),
        latency_ms_p95: percentile(&latencies, 95.0),
        latency_ms_samples: latencies.len() as u64,
        frame_ms_mean: mean(&frame_ms),
        frames_in_flight: args.frames_in_flight,
        unbinds_after_frames: streamer.stats().unbinds_after_frames,
        streamer_host_waits: streamer.stats().slot_waits,
        converged_frames: conv.len() as u64,
        psnr_db_mean: mean(&conv),
        psnr_db_min: if conv.is_empty() { 0.0 } else { conv.iter().copied().fold(f64::INFINITY, f64::min) },
        mb_per_s: stats.bytes_streamed as f64 / 1e6 / run_s.max(1e-9),
        frames_to_converge_after_cut: converged
            .iter()
            .skip((args.frames / 2) as usize)
            .position(|&c| c)
            .map(|p| p as u64),
        latency_histogram_frames: stats.latency.counts().to_vec(),
        psnr_db_per_frame: done.psnr,
        last_frame: done.last_frame,
        ..r
    };
    Ok(r)
}

/// The planes the reference passes draw, in plane order: the planes nearest to where the camera
/// looks (its centre ray on the ground at the first frame and at the cut), so that they are in
/// view — with `--references K` the `K` nearest; by default every plane whose file's fully
/// resident copy fits, with those taken before, in `quarter` bytes (all of them when every
/// file's does).
fn referenced_planes(
    references: Option<u32>,
    plane_files: &[usize],
    files: &[Arc<dyn TileSource>],
    quarter: u64,
    frames: u64,
) -> Vec<usize> {
    let grid = scene::grid_of(plane_files.len());
    let focus = [scene::focus(0, frames, grid), scene::focus(frames / 2, frames, grid)];
    let distance = |i: usize| {
        let g = grid as usize;
        let c = [((i % g) as f32 + 0.5) * scene::PLANE, ((i / g) as f32 + 0.5) * scene::PLANE];
        focus.iter().map(|p| (p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2)).fold(f32::INFINITY, f32::min)
    };
    let mut nearest: Vec<usize> = (0..plane_files.len()).collect();
    nearest.sort_by(|&a, &b| distance(a).total_cmp(&distance(b)).then(a.cmp(&b)));
    let mut chosen: Vec<usize> = match references {
        Some(k) => nearest.into_iter().take(k as usize).collect(),
        None => {
            let mut taken = vec![false; files.len()];
            let mut used = 0u64;
            nearest
                .into_iter()
                .filter(|&i| {
                    let file = plane_files[i];
                    if !taken[file] {
                        let bytes = copy_bytes(&files[file]);
                        if used.saturating_add(bytes) > quarter {
                            return false;
                        }
                        used += bytes;
                        taken[file] = true;
                    }
                    true
                })
                .collect()
        }
    };
    chosen.sort_unstable();
    chosen
}

/// Bytes of a fully resident copy of `f`: every mip, tightly packed.
fn copy_bytes(f: &Arc<dyn TileSource>) -> u64 {
    let d = f.desc();
    (0..d.mip_count)
        .map(|m| {
            let (w, h) = d.mip_extent(m);
            d.format.region_bytes(w, h, 1)
        })
        .sum()
}

pub(super) fn write_png(
    dir: &std::path::Path,
    frame: u64,
    args: &StreamArgs,
    streamed: &[u8],
    reference: &[u8],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, px) in [("streamed", streamed), ("reference", reference)] {
        let file = std::fs::File::create(dir.join(format!("frame{frame:04}-{name}.png")))?;
        let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), args.width, args.height);
        encoder.set_color(png::ColorType::Rgba);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.write_header()?.write_image_data(px)?;
    }
    Ok(())
}
