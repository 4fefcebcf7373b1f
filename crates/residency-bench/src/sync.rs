//! `residency-bench sync`: per-resource state tracking and transient aliasing (issue 7's
//! benchmark). CPU only: no Vulkan device is opened.
//!
//! Tracking: `--buffers` buffers of 4 KiB, 16 to a page, and `--frames` frames of 20 passes of 200
//! random uses (the workload of `residency_core::sync::measure::compare_tracking`, same generator,
//! same seed). Every pass's uses go through three trackers, one after the other in the same run,
//! the order rotating from frame to frame:
//! - `per_buffer`: each placed buffer tracked on its own, precise barriers
//!   (`GlobalBarrierRule::Never`);
//! - `per_page`: buffers tracked through their page (the legacy behaviour), precise barriers;
//! - `per_buffer_same_scope`: per buffer with the tracker's default rule
//!   (`GlobalBarrierRule::SameScope`: buffer barriers of equal scopes become one memory barrier).
//!
//! A pass's time is `StateTracker::batch`, its `declare`s and `flush`; a frame's is the sum over its
//! passes. Barrier counts are means per frame, over all frames and over the second half ("steady":
//! the first frames meet unused buffers, which need no barrier). Times are the median and fastest
//! frame, and the steady median pass times the passes per frame (which a time slice lost to another
//! process in a few passes does not move). The counts of the two precise modes are checked against
//! `compare_tracking` on the same parameters.
//!
//! Transient: `--frames` frames of `frame_graph_workload(seed + f, --passes)` planned on one
//! `TransientPlanner` (1 KiB `bufferImageGranularity`, one heap that persists), so each frame's
//! different resources reuse the heap the earlier frames grew. Per frame: peak bytes against the
//! sum of sizes and the lower bound (the most bytes live in one pass), whether the heap grew, and
//! the planning time. Checked against `compare_transient` on the same parameters.

use crate::measure::median;
use residency::core::device_mask::DeviceIndex;
use residency::core::sync::measure::{
    compare_tracking, compare_transient, frame_graph_workload, SplitMix64, TrackingBenchDesc, BUFFER_USES,
};
use residency::core::sync::{
    Flush, GlobalBarrierRule, PagedBufferDesc, QueueFamily, Region, ResourceId, StateTracker,
    TrackedBufferDesc, TrackerOptions, TransientPlanner, TransientPlannerDesc, Use,
};
use serde::Serialize;
use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

/// `bufferImageGranularity` of the transient workload (as in `compare_transient`).
const GRANULARITY: u64 = 1024;

/// Options of `residency-bench sync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncOptions {
    json: bool,
    buffers: usize,
    frames: usize,
    passes: u32,
    seed: u64,
}

impl Default for SyncOptions {
    /// 10 000 buffers, 32 frames, 50 frame-graph passes, seed 7.
    fn default() -> SyncOptions {
        SyncOptions { json: false, buffers: 10_000, frames: 32, passes: 50, seed: 7 }
    }
}

/// Parses the options.
pub fn parse_options(args: &[String]) -> Result<SyncOptions, String> {
    let mut o = SyncOptions::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = |name: &str| crate::positive::<u64>(&mut it, name);
        match arg.as_str() {
            "--json" => o.json = true,
            "--buffers" => o.buffers = number("--buffers")? as usize,
            "--frames" => o.frames = number("--frames")? as usize,
            "--passes" => {
                o.passes = u32::try_from(number("--passes")?).map_err(|_| "--passes is too large")?
            }
            "--seed" => {
                o.seed = it.next().and_then(|n| n.parse().ok()).ok_or("--seed needs a number")?;
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok(o)
}

/// The tracking workload these options describe: `compare_tracking`'s default with `--buffers`,
/// `--frames` and `--seed`.
fn tracking_desc(o: &SyncOptions) -> TrackingBenchDesc {
    TrackingBenchDesc {
        buffers: o.buffers,
        frames: o.frames,
        seed: o.seed,
        global_barriers: GlobalBarrierRule::Never,
        ..TrackingBenchDesc::default()
    }
}

/// One tracker of the tracking benchmark, with its figures. "Steady" figures are over the second
/// half of the frames: the first frames touch buffers that were never used, which need no barrier.
#[derive(Debug, Serialize)]
struct ModeResult {
    mode: &'static str,
    /// Barrier structures (memory, buffer, image) per frame, mean over all frames.
    barriers_per_frame: f64,
    /// The same over the second half of the frames.
    barriers_per_frame_steady: f64,
    /// Passes that needed a `vkCmdPipelineBarrier2`, per frame, mean.
    barrier_commands_per_frame: f64,
    /// Bytes named by buffer barriers per frame, mean (a memory barrier counts every tracked byte).
    bytes_named_per_frame: f64,
    /// The same over the second half of the frames.
    bytes_named_per_frame_steady: f64,
    /// Page barriers in passes where no buffer of that page needed one, per frame, mean (the
    /// precise modes only: 0 per buffer by definition).
    #[serde(skip_serializing_if = "Option::is_none")]
    false_dependencies_per_frame: Option<f64>,
    /// The same over the second half of the frames.
    #[serde(skip_serializing_if = "Option::is_none")]
    false_dependencies_per_frame_steady: Option<f64>,
    /// CPU time of `batch` + `declare`s + `flush` per frame, median over all frames.
    micros_per_frame_median: f64,
    /// The same over the second half of the frames.
    micros_per_frame_median_steady: f64,
    /// The fastest frame.
    micros_per_frame_min: f64,
    /// Steady median time of one pass times the passes of a frame: an estimate of the frame
    /// that another process's time slice in the middle of some passes does not move.
    micros_per_frame_from_passes_steady: f64,
    /// The same per declared use.
    ns_per_use_steady: f64,
    /// Barrier structures of each frame.
    barriers_by_frame: Vec<usize>,
    /// CPU time of each frame, µs.
    micros_by_frame: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct TrackingResult {
    buffers: usize,
    buffers_per_page: usize,
    buffer_size: u64,
    frames: usize,
    passes_per_frame: usize,
    uses_per_frame: usize,
    seed: u64,
    modes: Vec<ModeResult>,
    /// Steady `per_page` barriers per frame over `per_buffer`'s.
    page_over_buffer_barriers_steady: f64,
    /// Steady `per_page` bytes named per frame over `per_buffer`'s.
    page_over_buffer_bytes_steady: f64,
    /// Steady `per_page` µs per frame (from the pass median) over `per_buffer`'s.
    page_over_buffer_micros_steady: f64,
    /// Whether the precise modes' counts equal `compare_tracking`'s.
    matches_core_measure: bool,
}

#[derive(Debug, Serialize)]
struct TransientFrame {
    frame: usize,
    seed: u64,
    resources: usize,
    sum_of_sizes: u64,
    lower_bound: u64,
    peak_bytes: u64,
    heap_bytes: u64,
    peak_over_lower_bound: f64,
    peak_over_sum: f64,
    heap_grew: bool,
    aliasing_barriers: usize,
    plan_micros: f64,
}

#[derive(Debug, Serialize)]
struct TransientResult {
    passes: u32,
    granularity: u64,
    frames: Vec<TransientFrame>,
    /// Mean and worst `peak / lower bound` over the frames.
    peak_over_lower_bound_mean: f64,
    peak_over_lower_bound_max: f64,
    /// Mean `peak / sum of sizes`.
    peak_over_sum_mean: f64,
    /// Frames after the first whose plan grew the heap.
    later_frames_grown: usize,
    /// The heap after the last frame over the largest lower bound of any frame (1.0: the heap is
    /// no bigger than the worst frame needs at least).
    final_heap_over_max_lower_bound: f64,
    /// The heap after the last frame over the mean sum of sizes (what one unaliased frame needs).
    final_heap_over_mean_sum: f64,
    plan_micros_median: f64,
    /// Whether the reports equal `compare_transient`'s.
    matches_core_measure: bool,
}

#[derive(Debug, Serialize)]
struct SyncReport {
    tracking: TrackingResult,
    transient: TransientResult,
}

/// One mode's counts in one frame.
#[derive(Clone, Debug, Default)]
struct FrameCounts {
    barriers: usize,
    commands: usize,
    bytes: u64,
    false_dependencies: usize,
    micros: f64,
    pass_micros: Vec<f64>,
}

impl FrameCounts {
    fn add(&mut self, flush: &Flush, all_bytes: u64) {
        let n = flush.barrier_count();
        self.barriers += n;
        self.commands += usize::from(n > 0);
        self.bytes += flush.barriers.buffers.iter().map(|b| b.size).sum::<u64>();
        self.bytes += all_bytes * flush.barriers.memory.len() as u64;
    }
}

/// Mean of `f` over `frames`.
fn mean(frames: &[FrameCounts], f: impl Fn(&FrameCounts) -> f64) -> f64 {
    frames.iter().map(f).sum::<f64>() / frames.len().max(1) as f64
}

fn mode_result(
    mode: &'static str,
    frames: &[FrameCounts],
    uses_per_pass: usize,
    false_deps: bool,
) -> ModeResult {
    let steady = &frames[frames.len() / 2..];
    let pass_micros = median(steady.iter().flat_map(|c| c.pass_micros.iter().copied()).collect());
    let passes = frames.first().map_or(0, |c| c.pass_micros.len());
    let false_dependencies = |frames: &[FrameCounts]| mean(frames, |c| c.false_dependencies as f64);
    ModeResult {
        mode,
        barriers_per_frame: mean(frames, |c| c.barriers as f64),
        barriers_per_frame_steady: mean(steady, |c| c.barriers as f64),
        barrier_commands_per_frame: mean(frames, |c| c.commands as f64),
        bytes_named_per_frame: mean(frames, |c| c.bytes as f64),
        bytes_named_per_frame_steady: mean(steady, |c| c.bytes as f64),
        false_dependencies_per_frame: false_deps.then(|| false_dependencies(frames)),
        false_dependencies_per_frame_steady: false_deps.then(|| false_dependencies(steady)),
        micros_per_frame_median: median(frames.iter().map(|c| c.micros).collect()),
        micros_per_frame_median_steady: median(steady.iter().map(|c| c.micros).collect()),
        micros_per_frame_min: frames.iter().map(|c| c.micros).fold(f64::INFINITY, f64::min),
        micros_per_frame_from_passes_steady: pass_micros * passes as f64,
        ns_per_use_steady: pass_micros * 1000.0 / uses_per_pass.max(1) as f64,
        barriers_by_frame: frames.iter().map(|c| c.barriers).collect(),
        micros_by_frame: frames.iter().map(|c| c.micros).collect(),
    }
}

/// Declares `uses` in one batch of `tracker` and flushes it: the timed work.
fn declare_and_flush(
    tracker: &mut StateTracker,
    uses: &[(ResourceId, Use)],
) -> Result<Flush, Box<dyn Error>> {
    let mut batch = tracker.batch(DeviceIndex::DEFAULT, QueueFamily::new(0));
    for &(id, use_) in uses {
        batch.declare(id, Region::Whole, use_)?;
    }
    Ok(batch.flush())
}

/// The three trackers, with every buffer (and page) registered.
fn trackers(desc: &TrackingBenchDesc) -> Result<[StateTracker; 3], Box<dyn Error>> {
    let device = DeviceIndex::DEFAULT;
    let never = TrackerOptions::default().with_global_barriers(GlobalBarrierRule::Never);
    let mut precise = StateTracker::new(never);
    let mut paged = StateTracker::new(never);
    let mut same_scope =
        StateTracker::new(TrackerOptions::default().with_global_barriers(GlobalBarrierRule::SameScope));
    let per_page = desc.buffers_per_page.max(1);
    let page_size = desc.buffer_size * per_page as u64;
    // Pages take the ids after the buffers', as in `compare_tracking`.
    let page_id = |p: usize| ResourceId::new((desc.buffers + p) as u64);
    for p in 0..desc.buffers.div_ceil(per_page) {
        paged.register_page(device, page_id(p), TrackedBufferDesc::new(format!("page {p}"), page_size))?;
    }
    for i in 0..desc.buffers {
        let id = ResourceId::new(i as u64);
        let name = format!("buffer {i}");
        precise.register_buffer(device, id, TrackedBufferDesc::new(name.clone(), desc.buffer_size))?;
        same_scope.register_buffer(device, id, TrackedBufferDesc::new(name.clone(), desc.buffer_size))?;
        let paged_desc = PagedBufferDesc {
            name,
            page: page_id(i / per_page),
            offset: (i % per_page) as u64 * desc.buffer_size,
            size: desc.buffer_size,
        };
        paged.register_paged_buffer(device, id, paged_desc)?;
    }
    Ok([precise, paged, same_scope])
}

const MODES: [&str; 3] = ["per_buffer", "per_page", "per_buffer_same_scope"];

fn run_tracking(o: &SyncOptions) -> Result<TrackingResult, Box<dyn Error>> {
    let desc = tracking_desc(o);
    let mut trackers = trackers(&desc)?;
    let per_page = desc.buffers_per_page.max(1);
    let page_of = |id: ResourceId| ResourceId::new((desc.buffers + id.get() as usize / per_page) as u64);
    let all_bytes = desc.buffers as u64 * desc.buffer_size;
    let mut counts: [Vec<FrameCounts>; 3] = Default::default();
    // The same draws as `compare_tracking`: per use, a buffer then a use.
    let mut rng = SplitMix64::new(desc.seed);
    let mut uses = Vec::with_capacity(desc.uses_per_pass);
    for frame in 0..desc.frames {
        let mut frame_counts: [FrameCounts; 3] = Default::default();
        for _ in 0..desc.passes_per_frame {
            uses.clear();
            for _ in 0..desc.uses_per_pass {
                let id = ResourceId::new(rng.below(desc.buffers.max(1) as u64));
                let use_ = BUFFER_USES[rng.below(BUFFER_USES.len() as u64) as usize];
                uses.push((id, use_));
            }
            // The three trackers in turn, the first one rotating from frame to frame.
            let mut flushes: [Option<Flush>; 3] = Default::default();
            for k in 0..3 {
                let m = (frame + k) % 3;
                let started = Instant::now();
                let flush = declare_and_flush(&mut trackers[m], &uses)?;
                frame_counts[m].pass_micros.push(started.elapsed().as_secs_f64() * 1e6);
                flushes[m] = Some(flush);
            }
            let [Some(precise), Some(paged), Some(same_scope)] = &flushes else {
                unreachable!("every mode flushed this pass")
            };
            frame_counts[0].add(precise, all_bytes);
            frame_counts[1].add(paged, all_bytes);
            frame_counts[2].add(same_scope, all_bytes);
            let mut needed: Vec<ResourceId> =
                precise.barriers.buffers.iter().map(|b| page_of(b.resource)).collect();
            needed.sort_unstable();
            frame_counts[1].false_dependencies +=
                paged.barriers.buffers.iter().filter(|b| needed.binary_search(&b.resource).is_err()).count();
        }
        for (mut c, all) in frame_counts.into_iter().zip(&mut counts) {
            c.micros = c.pass_micros.iter().sum();
            all.push(c);
        }
    }
    let uses_per_frame = desc.passes_per_frame * desc.uses_per_pass;
    let modes: Vec<ModeResult> = counts
        .iter()
        .zip(MODES)
        .enumerate()
        .map(|(i, (frames, mode))| mode_result(mode, frames, desc.uses_per_pass, i < 2))
        .collect();
    let core = compare_tracking(desc);
    let matches = |ours: &ModeResult, theirs: &residency::core::sync::measure::TrackingFigures| {
        ours.barriers_per_frame == theirs.barriers_per_frame
            && ours.barrier_commands_per_frame == theirs.barrier_commands_per_frame
            && ours.bytes_named_per_frame == theirs.bytes_covered_per_frame
            && ours.false_dependencies_per_frame == Some(theirs.false_dependencies_per_frame)
    };
    let matches_core_measure = matches(&modes[0], &core.per_buffer) && matches(&modes[1], &core.per_page);
    Ok(TrackingResult {
        buffers: desc.buffers,
        buffers_per_page: desc.buffers_per_page,
        buffer_size: desc.buffer_size,
        frames: desc.frames,
        passes_per_frame: desc.passes_per_frame,
        uses_per_frame,
        seed: desc.seed,
        page_over_buffer_barriers_steady: ratio(
            modes[1].barriers_per_frame_steady,
            modes[0].barriers_per_frame_steady,
        ),
        page_over_buffer_bytes_steady: ratio(
            modes[1].bytes_named_per_frame_steady,
            modes[0].bytes_named_per_frame_steady,
        ),
        page_over_buffer_micros_steady: ratio(
            modes[1].micros_per_frame_from_passes_steady,
            modes[0].micros_per_frame_from_passes_steady,
        ),
        modes,
        matches_core_measure,
    })
}

fn run_transient(o: &SyncOptions) -> Result<TransientResult, Box<dyn Error>> {
    let mut planner = TransientPlanner::new(TransientPlannerDesc::default().with_granularity(GRANULARITY))?;
    let mut frames = Vec::with_capacity(o.frames);
    for f in 0..o.frames {
        let seed = o.seed.wrapping_add(f as u64);
        let workload = frame_graph_workload(seed, o.passes);
        let started = Instant::now();
        let plan = planner.plan(&workload)?;
        let plan_micros = started.elapsed().as_secs_f64() * 1e6;
        let r = plan.report;
        frames.push(TransientFrame {
            frame: f,
            seed,
            resources: r.resources,
            sum_of_sizes: r.sum_of_sizes,
            lower_bound: r.lower_bound,
            peak_bytes: r.peak_bytes,
            heap_bytes: r.heap_bytes,
            peak_over_lower_bound: r.gap_to_lower_bound(),
            peak_over_sum: r.fraction_of_sum(),
            heap_grew: !plan.growth.is_empty(),
            aliasing_barriers: plan.aliasing.len(),
            plan_micros,
        });
    }
    let core = compare_transient(o.seed, o.passes, o.frames)?;
    let matches_core_measure = core.len() == frames.len()
        && core.iter().zip(&frames).all(|(c, f)| {
            (c.resources, c.sum_of_sizes, c.lower_bound, c.peak_bytes, c.heap_bytes)
                == (f.resources, f.sum_of_sizes, f.lower_bound, f.peak_bytes, f.heap_bytes)
        });
    let n = frames.len().max(1) as f64;
    let final_heap = frames.last().map_or(0, |f| f.heap_bytes) as f64;
    let max_bound = frames.iter().map(|f| f.lower_bound).max().unwrap_or(0).max(1) as f64;
    let mean_sum = (frames.iter().map(|f| f.sum_of_sizes).sum::<u64>() as f64 / n).max(1.0);
    Ok(TransientResult {
        passes: o.passes,
        granularity: GRANULARITY,
        peak_over_lower_bound_mean: frames.iter().map(|f| f.peak_over_lower_bound).sum::<f64>() / n,
        peak_over_lower_bound_max: frames.iter().map(|f| f.peak_over_lower_bound).fold(0.0, f64::max),
        peak_over_sum_mean: frames.iter().map(|f| f.peak_over_sum).sum::<f64>() / n,
        later_frames_grown: frames.iter().skip(1).filter(|f| f.heap_grew).count(),
        final_heap_over_max_lower_bound: final_heap / max_bound,
        final_heap_over_mean_sum: final_heap / mean_sum,
        plan_micros_median: median(frames.iter().map(|f| f.plan_micros).collect()),
        frames,
        matches_core_measure,
    })
}

/// `a / b`, 0 when `b` is 0.
fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

fn mib(bytes: f64) -> f64 {
    bytes / f64::from(1u32 << 20)
}

fn print_table(r: &SyncReport) {
    let t = &r.tracking;
    println!(
        "tracking: {} buffers of {} B, {} per page; {} frames of {} passes, {} uses per frame, seed {}",
        t.buffers, t.buffer_size, t.buffers_per_page, t.frames, t.passes_per_frame, t.uses_per_frame, t.seed
    );
    println!("all frames, and in brackets the second half (steady: nearly every buffer has been used)");
    println!(
        "{:<22} {:>17} {:>9} {:>17} {:>15} {:>17} {:>13} {:>7}",
        "mode",
        "barriers/frame",
        "commands",
        "MiB named/frame",
        "false deps",
        "µs/frame median",
        "µs/frame (p)",
        "ns/use"
    );
    for m in &t.modes {
        let false_deps = match (m.false_dependencies_per_frame, m.false_dependencies_per_frame_steady) {
            (Some(all), Some(steady)) => format!("{all:.1} ({steady:.1})"),
            _ => "-".to_owned(),
        };
        println!(
            "{:<22} {:>17} {:>9.2} {:>17} {:>15} {:>17} {:>13.0} {:>7.0}",
            m.mode,
            format!("{:.1} ({:.1})", m.barriers_per_frame, m.barriers_per_frame_steady),
            m.barrier_commands_per_frame,
            format!("{:.1} ({:.1})", mib(m.bytes_named_per_frame), mib(m.bytes_named_per_frame_steady)),
            false_deps,
            format!("{:.0} ({:.0})", m.micros_per_frame_median, m.micros_per_frame_median_steady),
            m.micros_per_frame_from_passes_steady,
            m.ns_per_use_steady
        );
    }
    println!("(p): steady median pass × passes per frame; ns/use from the same");
    println!(
        "steady, per page / per buffer: {:.2}x barriers, {:.1}x bytes named, {:.2}x CPU time; \
         counts match sync::measure: {}",
        t.page_over_buffer_barriers_steady,
        t.page_over_buffer_bytes_steady,
        t.page_over_buffer_micros_steady,
        t.matches_core_measure
    );
    let x = &r.transient;
    println!(
        "\ntransient: frame-graph workload of {} passes, {} frames on one planner (granularity {} B)",
        x.passes,
        x.frames.len(),
        x.granularity
    );
    println!(
        "{:>5} {:>5} {:>9} {:>11} {:>11} {:>9} {:>11} {:>10} {:>9} {:>8} {:>8}",
        "frame",
        "seed",
        "resources",
        "sum MiB",
        "bound MiB",
        "peak MiB",
        "peak/bound",
        "peak/sum",
        "heap MiB",
        "aliasing",
        "plan µs"
    );
    for f in &x.frames {
        println!(
            "{:>5} {:>5} {:>9} {:>11.1} {:>11.1} {:>9.1} {:>11.3} {:>9.1}% {:>9.1}{} {:>8} {:>8.0}",
            f.frame,
            f.seed,
            f.resources,
            mib(f.sum_of_sizes as f64),
            mib(f.lower_bound as f64),
            mib(f.peak_bytes as f64),
            f.peak_over_lower_bound,
            f.peak_over_sum * 100.0,
            mib(f.heap_bytes as f64),
            if f.heap_grew { "+" } else { " " },
            f.aliasing_barriers,
            f.plan_micros
        );
    }
    println!(
        "peak/bound mean {:.3}, max {:.3}; peak/sum mean {:.1}%; heap grew in {} of {} later frames; \
         final heap {:.3}x the largest bound, {:.1}% of the mean sum; plan {:.0} µs (median); \
         reports match sync::measure: {}",
        x.peak_over_lower_bound_mean,
        x.peak_over_lower_bound_max,
        x.peak_over_sum_mean * 100.0,
        x.later_frames_grown,
        x.frames.len().saturating_sub(1),
        x.final_heap_over_max_lower_bound,
        x.final_heap_over_mean_sum * 100.0,
        x.plan_micros_median,
        x.matches_core_measure
    );
}

/// Runs both parts. Exit status 1 when a part fails or its counts differ from `sync::measure`'s.
pub fn run(o: &SyncOptions) -> ExitCode {
    let report =
        run_tracking(o).and_then(|tracking| Ok(SyncReport { tracking, transient: run_transient(o)? }));
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("residency-bench sync: {e}");
            return ExitCode::FAILURE;
        }
    };
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("report serialises"));
    } else {
        print_table(&report);
    }
    if report.tracking.matches_core_measure && report.transient.matches_core_measure {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "residency-bench sync: figures differ from residency_core::sync::measure on the same parameters"
        );
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn options_default_and_parse() {
        assert_eq!(parse_options(&[]), Ok(SyncOptions::default()));
        let o = parse_options(&args(&[
            "--buffers",
            "64",
            "--frames",
            "3",
            "--passes",
            "9",
            "--seed",
            "0",
            "--json",
        ]))
        .expect("valid options");
        assert_eq!(o, SyncOptions { json: true, buffers: 64, frames: 3, passes: 9, seed: 0 });
        assert!(parse_options(&args(&["--buffers", "0"])).is_err());
        assert!(parse_options(&args(&["--frames"])).is_err());
        assert!(parse_options(&args(&["--what"])).is_err());
    }

    #[test]
    fn small_run_counts_match_core_measure() {
        let o = SyncOptions { json: false, buffers: 256, frames: 3, passes: 12, seed: 3 };
        let tracking = run_tracking(&o).expect("tracking runs");
        assert!(tracking.matches_core_measure);
        assert_eq!(tracking.modes.len(), 3);
        assert!(tracking.modes[1].false_dependencies_per_frame.is_some());
        assert!(tracking.modes[2].false_dependencies_per_frame.is_none());
        let transient = run_transient(&o).expect("transient runs");
        assert!(transient.matches_core_measure);
        assert_eq!(transient.frames.len(), 3);
        assert!(transient
            .frames
            .iter()
            .all(|f| f.lower_bound <= f.peak_bytes && f.peak_bytes <= f.sum_of_sizes));
    }
}
