//! `residency-bench pressure`: a workload at twice its device-local budget (issue #34).
//!
//! `--buffers-mib` MiB of device-local buffers of `--buffer-kib` KiB each (default 2× the
//! budget) under a device-local limit of `--budget-mib` MiB (`Device::set_device_local_limit`,
//! below the device's memory on lavapipe and the H200 alike): the buffers past the budget fall
//! back to the host tier when they are made. Each buffer is filled with its own word. Every frame
//! reads `--touch-kib` KiB of each buffer of a working set (`--working-set` percent of the
//! buffers, a window sliding one buffer a frame) into a scratch buffer, in one submission waited
//! for (the frame time: what a renderer waits for); then `Device::advance_frame` and one
//! `Defragmenter::relieve` pass of at most `--per-frame-mib` MiB (demoting the coldest buffers,
//! promoting the working set), timed apart (its CPU time: `pass_ms_*`).
//! The same workload runs first without the limit (everything device-local): its frame-time p99
//! is `frame_ms_p99_under_budget`. After the frames every buffer is read back and checked
//! (`verified`); any out-of-memory error on the way is counted (`out_of_memory_errors`).
//!
//! Also measured: the empty device's `VkDeviceMemory` (a device set of its own, before anything
//! is made: `empty_device_bytes`) and after one 4 KiB buffer (`first_buffer_bytes`); the moves'
//! throughput (bytes demoted and promoted over the GPU time of the passes' copies, timestamps)
//! against one plain device-local copy of a pass's mean bytes (the `defrag` benchmark's baseline).
//! A pass is not waited for, and the frames are not ordered after its copies as a whole: a frame
//! that reads a buffer the pass moved waits for that pass's copy (the wait its recording adds),
//! the others run beside the copies. The frame submits no barrier of its own at its start (the
//! previous frame was waited for on the host), so only those waits order it after a pass.

use residency::core::usage::BufferUsage;
use residency::vulkan::ash::vk;
use residency::vulkan::recording::MemoryDependency;
use residency::vulkan::{
    Buffer, BufferDesc, DefragDesc, Defragmenter, Device, DeviceSet, DeviceSetDesc, FaultSite, MemoryTier,
    ResidencyError,
};
use serde::Serialize;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const MIB: u64 = 1 << 20;

/// Options of `residency-bench pressure`.
#[derive(Clone, Debug)]
pub struct PressureOptions {
    json: bool,
    frames: u32,
    budget_mib: u64,
    buffers_mib: Option<u64>,
    buffer_kib: u64,
    touch_kib: u64,
    working_set_percent: u64,
    per_frame_mib: Option<u64>,
}

/// Parses the options.
pub fn parse_options(args: &[String]) -> Result<PressureOptions, String> {
    let mut o = PressureOptions {
        json: false,
        frames: 1000,
        budget_mib: 64,
        buffers_mib: None,
        buffer_kib: 1024,
        touch_kib: 64,
        working_set_percent: 40,
        per_frame_mib: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = |name: &str| crate::positive::<u64>(&mut it, name);
        match arg.as_str() {
            "--json" => o.json = true,
            "--frames" => o.frames = number("--frames")?.min(1 << 20) as u32,
            "--budget-mib" => o.budget_mib = number("--budget-mib")?.min(1 << 20),
            "--buffers-mib" => o.buffers_mib = Some(number("--buffers-mib")?.min(1 << 21)),
            "--buffer-kib" => o.buffer_kib = number("--buffer-kib")?.clamp(4, 64 << 10),
            "--touch-kib" => o.touch_kib = number("--touch-kib")?.min(64 << 10),
            "--working-set" => o.working_set_percent = number("--working-set")?.min(100),
            "--per-frame-mib" => o.per_frame_mib = Some(number("--per-frame-mib")?),
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok(o)
}

/// What the benchmark reports (`--json`).
#[derive(Debug, Default, Serialize)]
struct PressureReport {
    device: String,
    frames: u32,
    budget_bytes: u64,
    buffers: u64,
    buffer_bytes: u64,
    total_bytes: u64,
    working_set_buffers: u64,
    touch_bytes: u64,
    per_frame_bytes: u64,
    /// Every buffer's contents intact after the frames, and no out-of-memory error.
    verified: bool,
    out_of_memory_errors: u64,
    /// Other errors (none expected).
    other_errors: u64,
    frame_ms_p50: f64,
    frame_ms_p99: f64,
    frame_ms_p50_under_budget: f64,
    frame_ms_p99_under_budget: f64,
    /// `frame_ms_p99 / frame_ms_p99_under_budget` (target ≤ 2).
    p99_over_under_budget: f64,
    /// CPU time of the frame's `Defragmenter::relieve` pass (not waited for), under the limit
    /// and without it.
    pass_ms_p50: f64,
    pass_ms_p99: f64,
    pass_ms_p50_under_budget: f64,
    pass_ms_p99_under_budget: f64,
    /// The frame and its pass together (one thread doing both), under the limit and without it.
    frame_and_pass_ms_p50: f64,
    frame_and_pass_ms_p99: f64,
    frame_and_pass_ms_p99_under_budget: f64,
    /// Frames whose submission waited for a pass's copy (they read a buffer it moved).
    frames_waiting_for_a_move: u64,
    /// `vkAllocateMemory` calls during the frames, under the limit and without it.
    allocate_memory_calls: u64,
    allocate_memory_calls_under_budget: u64,
    /// Buffers that fell back to the host tier when they were made.
    fallbacks: u64,
    demotions: u64,
    demoted_bytes: u64,
    promotions: u64,
    promoted_bytes: u64,
    /// Working-set reads that found their buffer in a device tier, percent.
    device_tier_reads_percent: f64,
    /// Bytes demoted and promoted over the GPU time of the passes' copies (timestamps).
    move_gb_per_s_gpu: f64,
    /// The baseline: one device-local copy of a moving pass's mean bytes into fresh memory (what
    /// a move's destination is), GPU time (`defrag`'s `plain_copy`: first copy), and the median
    /// of three more.
    plain_copy_first_gb_per_s_gpu: Option<f64>,
    plain_copy_gb_per_s_gpu: Option<f64>,
    /// `move_gb_per_s_gpu / plain_copy_first_gb_per_s_gpu` (target ≥ 0.5).
    move_over_copy_gpu: Option<f64>,
    /// `VkDeviceMemory` held by a device set just opened, every device.
    empty_device_bytes: u64,
    /// … after one 4 KiB buffer on its first device.
    first_buffer_bytes: u64,
    seconds: f64,
    validation_problems: u64,
}

/// One run of the workload.
#[derive(Default)]
struct Run {
    frame_ms: Vec<f64>,
    pass_ms: Vec<f64>,
    frames_waiting: u64,
    allocate_calls: u64,
    verified: bool,
    out_of_memory: u64,
    other_errors: u64,
    device_reads: u64,
    reads: u64,
    moved_bytes: u64,
    /// Passes that moved something.
    moving_passes: u64,
    /// GPU time of the passes' copies (timestamps around them), where the queue has timestamps.
    move_gpu_seconds: f64,
}

fn held(device: &Device) -> u64 {
    (0..device.memory_properties().heaps.len() as u32).map(|h| device.ledger().heap_bytes(h)).sum()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// Counts an error as out of memory or other.
fn count<E: ResidencyError>(run: &mut Run, e: &E) {
    if e.is_out_of_memory() {
        run.out_of_memory += 1;
    } else {
        run.other_errors += 1;
    }
}

fn workload(device: &Arc<Device>, o: &PressureOptions, limit: Option<u64>) -> BenchResult<Run> {
    let mut run = Run::default();
    let size = o.buffer_kib * 1024;
    let budget = o.budget_mib * MIB;
    let total = o.buffers_mib.map_or(2 * budget, |m| m * MIB);
    let n = (total / size).max(1) as usize;
    let ws = ((n as u64 * o.working_set_percent / 100).max(1) as usize).min(n);
    let touch = (o.touch_kib * 1024).min(size).max(4) / 4 * 4;
    let per_frame = o.per_frame_mib.map_or((budget / 16).max(2 * size), |m| m * MIB);
    device.set_device_local_limit(limit);
    let usage = BufferUsage::STORAGE | BufferUsage::COPY_SRC | BufferUsage::COPY_DST;
    // The frame's own target first, as a renderer makes its render targets at start-up: made
    // after the buffers it would fall back to the host tier, and every frame would write it over
    // the bus (on the H200: 210 MB a frame, +3.7 ms, session 11's first pressured run).
    let scratch = device.create_buffer(&BufferDesc::new("pressure scratch", ws as u64 * touch, usage))?;
    let mut buffers: Vec<Buffer> = Vec::with_capacity(n);
    for i in 0..n {
        match device.create_buffer(&BufferDesc::new(format!("pressure {i}"), size, usage)) {
            Ok(b) => buffers.push(b),
            Err(e) => {
                count(&mut run, &e);
                return Ok(run);
            }
        }
    }
    let transfer = MemoryDependency {
        src_stages: vk::PipelineStageFlags2::ALL_TRANSFER,
        src_access: vk::AccessFlags2::TRANSFER_WRITE,
        dst_stages: vk::PipelineStageFlags2::ALL_TRANSFER,
        dst_access: vk::AccessFlags2::TRANSFER_READ | vk::AccessFlags2::TRANSFER_WRITE,
    };
    device.submit_once("pressure fill", |rec| {
        for (i, b) in buffers.iter().enumerate() {
            rec.fill_buffer(b, 0, size, i as u32).expect("a whole buffer with COPY_DST");
        }
        rec.memory_barrier(transfer).expect("transfer stages");
    })?;
    let commands = residency::vulkan::CommandContext::new(device, "pressure frames")?;
    let mut defrag = Defragmenter::new(device, DefragDesc::default())?;
    // The last moving pass's copy, until its timestamps were read.
    let mut copies_pending: Option<residency::vulkan::GpuUse> = None;
    let allocations_before = device.ledger().site_calls(FaultSite::AllocateMemory);
    for frame in 0..o.frames as usize {
        let window: Vec<usize> = (0..ws).map(|k| (frame + k) % n).collect();
        for &i in &window {
            run.reads += 1;
            if buffers[i].memory_tier().is_some_and(MemoryTier::is_device) {
                run.device_reads += 1;
            }
        }
        // The frame: its submission and the wait for it. No barrier at its start: the previous
        // frame was waited for on the host, and a buffer a pass moved makes the recording wait
        // for that pass's copy.
        let start = Instant::now();
        let mut waited = false;
        let submitted = commands.submit(&[], |rec| {
            for (k, &i) in window.iter().enumerate() {
                rec.copy_buffer(&buffers[i], 0, &scratch, k as u64 * touch, touch)
                    .expect("ranges inside both");
            }
            waited = !rec.waits().is_empty();
        });
        match submitted.and_then(|s| commands.wait(s)) {
            Ok(()) => {}
            Err(e) => count(&mut run, &e),
        }
        let frame_ms = start.elapsed().as_secs_f64() * 1e3;
        run.frame_ms.push(frame_ms);
        run.frames_waiting += u64::from(waited);
        // Measurement only, outside both timed parts: the last pass's timestamps, once its copy
        // completed (this frame may not have waited for it).
        if let Some(copy) = copies_pending.take() {
            device.wait_until(&copy)?;
            run.move_gpu_seconds += defrag.last_copy_gpu_ms().unwrap_or(0.0) / 1e3;
        }
        device.advance_frame();
        let pass_start = Instant::now();
        let mut movable: Vec<&mut Buffer> = buffers.iter_mut().collect();
        // Not waited for: a later frame that reads a moved buffer waits for its copy.
        match defrag.relieve(&mut movable, per_frame) {
            Ok(stats) => {
                let bytes = stats.demoted_bytes + stats.promoted_bytes;
                if bytes > 0 {
                    run.moved_bytes += bytes;
                    run.moving_passes += 1;
                }
                copies_pending = stats.submission.map(|s| s.gpu_use());
            }
            Err(e) => count(&mut run, &e),
        }
        run.pass_ms.push(pass_start.elapsed().as_secs_f64() * 1e3);
    }
    run.allocate_calls = device.ledger().site_calls(FaultSite::AllocateMemory) - allocations_before;
    device.wait_submitted()?;
    if copies_pending.is_some() {
        run.move_gpu_seconds += defrag.last_copy_gpu_ms().unwrap_or(0.0) / 1e3;
    }
    run.verified = true;
    for (i, b) in buffers.iter().enumerate() {
        let bytes = device.read_back(b, 0, size)?;
        let word = (i as u32).to_le_bytes();
        if bytes.chunks_exact(4).any(|w| w != word) {
            run.verified = false;
        }
    }
    drop((buffers, scratch, defrag, commands));
    device.set_device_local_limit(None);
    device.wait_submitted()?;
    device.release_empty_heaps();
    Ok(run)
}

fn measure(o: &PressureOptions) -> BenchResult<PressureReport> {
    let start = Instant::now();
    let set = DeviceSet::new(&DeviceSetDesc::default())?;
    let mut r = PressureReport {
        empty_device_bytes: set.devices().iter().map(|d| held(d)).sum(),
        ..PressureReport::default()
    };
    let device = Arc::clone(&set.devices()[0]);
    let first = device.create_buffer(&BufferDesc::new("pressure first", 4096, BufferUsage::STORAGE))?;
    r.first_buffer_bytes = held(&device);
    drop(first);
    device.wait_submitted()?;
    device.release_empty_heaps();
    r.device = device.name().to_owned();
    r.frames = o.frames;
    r.budget_bytes = o.budget_mib * MIB;
    r.buffer_bytes = o.buffer_kib * 1024;
    r.total_bytes = o.buffers_mib.map_or(2 * r.budget_bytes, |m| m * MIB);
    r.buffers = (r.total_bytes / r.buffer_bytes).max(1);
    r.working_set_buffers = (r.buffers * o.working_set_percent / 100).clamp(1, r.buffers);
    r.touch_bytes = (o.touch_kib * 1024).min(r.buffer_bytes);
    r.per_frame_bytes = o.per_frame_mib.map_or((r.budget_bytes / 16).max(2 * r.buffer_bytes), |m| m * MIB);

    let under = workload(&device, o, None)?;
    let before = device.pressure_stats();
    let over = workload(&device, o, Some(r.budget_bytes))?;
    let stats = device.pressure_stats().since(&before);
    let sorted = |run: &Run| {
        let mut v = run.frame_ms.clone();
        v.sort_by(f64::total_cmp);
        v
    };
    let (u, p) = (sorted(&under), sorted(&over));
    r.frame_ms_p50_under_budget = percentile(&u, 0.5);
    r.frame_ms_p99_under_budget = percentile(&u, 0.99);
    r.frame_ms_p50 = percentile(&p, 0.5);
    r.frame_ms_p99 = percentile(&p, 0.99);
    r.p99_over_under_budget = r.frame_ms_p99 / r.frame_ms_p99_under_budget.max(1e-9);
    let pass = |run: &Run| {
        let mut v = run.pass_ms.clone();
        v.sort_by(f64::total_cmp);
        v
    };
    let both = |run: &Run| {
        let mut v: Vec<f64> = run.frame_ms.iter().zip(&run.pass_ms).map(|(f, p)| f + p).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (pu, pp) = (pass(&under), pass(&over));
    r.pass_ms_p50 = percentile(&pp, 0.5);
    r.pass_ms_p99 = percentile(&pp, 0.99);
    r.pass_ms_p50_under_budget = percentile(&pu, 0.5);
    r.pass_ms_p99_under_budget = percentile(&pu, 0.99);
    let (bu, bp) = (both(&under), both(&over));
    r.frame_and_pass_ms_p50 = percentile(&bp, 0.5);
    r.frame_and_pass_ms_p99 = percentile(&bp, 0.99);
    r.frame_and_pass_ms_p99_under_budget = percentile(&bu, 0.99);
    r.frames_waiting_for_a_move = over.frames_waiting;
    r.allocate_memory_calls = over.allocate_calls;
    r.allocate_memory_calls_under_budget = under.allocate_calls;
    r.out_of_memory_errors = under.out_of_memory + over.out_of_memory;
    r.other_errors = under.other_errors + over.other_errors;
    r.verified = under.verified && over.verified && r.out_of_memory_errors == 0 && r.other_errors == 0;
    r.fallbacks = stats.fallbacks;
    r.demotions = stats.demotions;
    r.demoted_bytes = stats.demoted_bytes;
    r.promotions = stats.promotions;
    r.promoted_bytes = stats.promoted_bytes;
    r.device_tier_reads_percent = 100.0 * over.device_reads as f64 / over.reads.max(1) as f64;
    r.move_gb_per_s_gpu = over.moved_bytes as f64 / over.move_gpu_seconds.max(1e-9) / 1e9;
    let pass_bytes = (over.moved_bytes / over.moving_passes.max(1)).max(r.buffer_bytes);
    let (_, copy_gpu, copy_first_gpu) = crate::defrag::plain_copy(&device, pass_bytes)?;
    r.plain_copy_gb_per_s_gpu = copy_gpu;
    r.plain_copy_first_gb_per_s_gpu = copy_first_gpu;
    r.move_over_copy_gpu = copy_first_gpu.map(|c| r.move_gb_per_s_gpu / c.max(1e-9));
    drop(device);
    r.validation_problems = set.validation_log().problem_count();
    r.seconds = start.elapsed().as_secs_f64();
    Ok(r)
}

/// Runs the benchmark.
pub fn run(o: &PressureOptions) -> ExitCode {
    let report = match measure(o) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("residency-bench pressure: {e}");
            return ExitCode::FAILURE;
        }
    };
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("report serialises"));
    } else {
        let r = &report;
        println!(
            "{}: {} buffers of {} KiB ({} MiB) under a {} MiB device-local budget, {} frames, {:.1} s",
            r.device,
            r.buffers,
            r.buffer_bytes >> 10,
            r.total_bytes >> 20,
            r.budget_bytes >> 20,
            r.frames,
            r.seconds
        );
        println!(
            "frame ms p50/p99: {:.3}/{:.3} under pressure, {:.3}/{:.3} under budget (p99 ratio {:.2})",
            r.frame_ms_p50,
            r.frame_ms_p99,
            r.frame_ms_p50_under_budget,
            r.frame_ms_p99_under_budget,
            r.p99_over_under_budget
        );
        println!(
            "pass CPU ms p50/p99: {:.3}/{:.3} under pressure, {:.3}/{:.3} under budget; frame + pass p99 {:.3} vs {:.3}; {} frames waited for a move; vkAllocateMemory {} vs {}",
            r.pass_ms_p50,
            r.pass_ms_p99,
            r.pass_ms_p50_under_budget,
            r.pass_ms_p99_under_budget,
            r.frame_and_pass_ms_p99,
            r.frame_and_pass_ms_p99_under_budget,
            r.frames_waiting_for_a_move,
            r.allocate_memory_calls,
            r.allocate_memory_calls_under_budget
        );
        println!(
            "fallbacks {}, demoted {} ({:.1} MiB), promoted {} ({:.1} MiB), device-tier reads {:.1} %",
            r.fallbacks,
            r.demotions,
            r.demoted_bytes as f64 / MIB as f64,
            r.promotions,
            r.promoted_bytes as f64 / MIB as f64,
            r.device_tier_reads_percent
        );
        println!(
            "moves {:.2} GB/s (GPU) vs plain copy {:?} GB/s (GPU, first; {:?} median), ratio {:?}; empty device {} B, after one buffer {} B; out-of-memory errors {}, other errors {}, verified: {}",
            r.move_gb_per_s_gpu, r.plain_copy_first_gb_per_s_gpu, r.plain_copy_gb_per_s_gpu, r.move_over_copy_gpu, r.empty_device_bytes, r.first_buffer_bytes, r.out_of_memory_errors, r.other_errors, r.verified
        );
    }
    if !report.verified || report.validation_problems > 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
