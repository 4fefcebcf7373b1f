//! `residency-bench`: benchmarks of `residency` against its baselines.
//!
//! - `residency-bench alloc [--json] [--reps N] [--quick] [--slow-baselines] [--only w1,w2,w3,w5]`: W1
//!   and W2 (offset allocators: ours, `offset-allocator`, VMA's virtual block, gpu-allocator; see
//!   `workloads`; gpu-allocator runs W2 only with `--slow-baselines`, a run takes about a minute),
//!   W5 (`w5-fail-fragmented`: requests that fit none of 100 000 free fragments, ours and VMA's
//!   virtual block) and W3 (real Vulkan: placed buffers and pool ranges; see `placed_buffers`).
//!   Prints a table, or with
//!   `--json` `{"workloads":[{"name":"w1-align256","allocator":"residency",...}],"ratios":[...],
//!   "skipped":[...]}`.
//! - `residency-bench tight [--profile FILE]... [--device] [--json]`: issue 3's tight-alignment
//!   benchmark (see `tight`).
//! - `residency-bench sparse [--full] [--side-tiles N] [--per-tile-max N] [--reps N] [--json]`:
//!   issue 5's tile binding and upload benchmark (see `sparse`).
//! - `residency-bench upload [--mib N] [--ring-mib N] [--threads N] [--reps N] [--chunk-kib N] [--window-mib N] [--staging wc|cached] [--no-import] [--import-chunk-mib N] [--import-threads N] [--sweep] [--grid-staging wc,cached] [--grid-ring-mib A,B] [--grid-chunk-kib A,B] [--grid-threads A,B] [--grid-streaming on,off] [--json]`: a host
//!   slice to device-local memory, end to end and the DMA part alone (see `upload`).
//! - `residency-bench defrag [--mib N] [--images N] [--tiles N] [--seed S] [--max-passes N]
//!   [--dump PREFIX] [--json]`: issue 18's defragmentation of general heaps (buffers and images)
//!   and of a sparse tile pool, in passes, contents verified (see `defrag`).
//! - `residency-bench sync [--buffers N] [--frames N] [--passes N] [--seed S] [--json]`: issue 7's
//!   state-tracking and transient-aliasing benchmark, CPU only (see `sync`).
//! - `residency-bench pressure [--frames N] [--budget-mib N] [--buffers-mib N] [--buffer-kib N]
//!   [--touch-kib N] [--working-set PERCENT] [--per-frame-mib N] [--json]`: issue 34's workload at
//!   twice its device-local budget, fallback, demotion and promotion, contents verified (see
//!   `pressure`).
//! - `residency-bench sparse-capacity [--side N] [--no-mips] [--layers N] [--max N]`: how much
//!   virtual size of unbound sparse images the driver takes before `vkCreateImage` refuses (see
//!   `capacity`).
//!
//! With `RESIDENCY_VALIDATION=1` the Vulkan parts run under `VK_LAYER_KHRONOS_validation`; any
//! validation problem is printed and makes the exit status 1.

mod capacity;
mod contention;
mod defrag;
mod measure;
mod placed_buffers;
mod pressure;
mod report;
mod sparse;
mod suballocators;
mod sync;
mod tight;
mod upload;
mod vma_rng;
mod workloads;

use std::process::ExitCode;
use std::sync::Arc;

use residency::vulkan::{Device, DeviceSet, DeviceSetDesc};

use measure::{Contender, WorkloadId};
use report::{Report, Skipped};
use suballocators::{GpuAllocator, OffsetAllocator, Residency, VmaVirtual};
use workloads::{W1Plan, W2Plan, W5Plan};

const USAGE: &str = "usage:
  residency-bench alloc [--json] [--reps N] [--quick] [--slow-baselines] [--only w1,w2,w3,w5]
  residency-bench tight [--profile FILE]... [--device] [--json]
  residency-bench sparse [--full] [--side-tiles N] [--per-tile-max N] [--reps N] [--json]
  residency-bench sync [--buffers N] [--frames N] [--passes N] [--seed S] [--json]
  residency-bench contention [--threads 1,2,4,8,16] [--ops N] [--only driver,vma,...] [--json]
  residency-bench upload [--mib N] [--ring-mib N] [--threads N] [--reps N] [--chunk-kib N] [--window-mib N] [--staging wc|cached] [--no-import] [--import-chunk-mib N] [--import-threads N] [--sweep] [--grid-staging wc,cached] [--grid-ring-mib A,B] [--grid-chunk-kib A,B] [--grid-threads A,B] [--grid-streaming on,off] [--json]
  residency-bench defrag [--mib N] [--images N] [--tiles N] [--seed S] [--max-passes N] [--dump PREFIX] [--json]
  residency-bench pressure [--frames N] [--budget-mib N] [--buffers-mib N] [--buffer-kib N] [--touch-kib N] [--working-set PERCENT] [--per-frame-mib N] [--json]
  residency-bench sparse-capacity [--side N] [--no-mips] [--layers N] [--max N]";

/// The `alloc` command's options.
#[derive(Clone, Debug, Default)]
struct AllocOptions {
    json: bool,
    reps: Option<usize>,
    quick: bool,
    slow_baselines: bool,
    only: Option<Vec<String>>,
}

impl AllocOptions {
    fn runs(&self, workload: &str) -> bool {
        self.only.as_ref().is_none_or(|only| only.iter().any(|w| w == workload))
    }
}

/// The bench's allocator: the system's, counting allocations per thread (`contention` reports
/// heap allocations per operation). The counter is thread-local: counting shares nothing between
/// threads.
struct CountingAllocator;

thread_local! {
    /// Heap allocations (and reallocations) this thread made.
    static ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Heap allocations (and reallocations) the calling thread has made so far.
pub(crate) fn thread_allocations() -> u64 {
    ALLOCATIONS.try_with(std::cell::Cell::get).unwrap_or(0)
}

fn count_allocation() {
    // A thread being torn down has no counter left: its allocations go uncounted.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments, so `System`'s guarantees
// are this allocator's; counting touches only a thread-local `Cell` (const-initialised, no
// destructor), which allocates nothing.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller's contract for `GlobalAlloc::alloc`, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: as for `alloc`.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from `System` (every allocation here does) with `layout`.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: as for `dealloc`, and the caller's contract for `realloc`.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("alloc") => match parse_alloc(&args[1..]) {
            Ok(options) => run_alloc_command(&options),
            Err(message) => usage_error(&message),
        },
        Some("tight") => match tight::parse_options(&args[1..]) {
            Ok(options) => tight::run(&options),
            Err(message) => usage_error(&message),
        },
        Some("sparse") => match sparse::parse_options(&args[1..]) {
            Ok(options) => sparse::run(&options),
            Err(message) => usage_error(&message),
        },
        Some("contention") => match contention::parse_options(&args[1..]) {
            Ok(options) => contention::run(&options),
            Err(message) => usage_error(&message),
        },
        Some("upload") => match upload::parse_options(&args[1..]) {
            Ok(options) => upload::run(&options),
            Err(message) => usage_error(&message),
        },
        Some("defrag") => match defrag::parse_options(&args[1..]) {
            Ok(options) => defrag::run(&options),
            Err(message) => usage_error(&message),
        },
        Some("pressure") => match pressure::parse_options(&args[1..]) {
            Ok(options) => pressure::run(&options),
            Err(message) => usage_error(&message),
        },
        Some("sparse-capacity") => match capacity::parse_options(&args[1..]) {
            Ok(options) => capacity::run(&options),
            Err(message) => usage_error(&message),
        },
        Some("sync") => match sync::parse_options(&args[1..]) {
            Ok(options) => sync::run(&options),
            Err(message) => usage_error(&message),
        },
        Some("-h" | "--help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => usage_error("a command is needed"),
    }
}

/// The positive number that follows an option (`--name N`) in `it`.
pub fn positive<T: std::str::FromStr + PartialOrd + Default>(
    it: &mut std::slice::Iter<'_, String>,
    name: &str,
) -> Result<T, String> {
    it.next()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > T::default())
        .ok_or(format!("{name} needs a positive number"))
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("{message}\n{USAGE}");
    ExitCode::FAILURE
}

fn parse_alloc(args: &[String]) -> Result<AllocOptions, String> {
    let mut options = AllocOptions::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => options.json = true,
            "--quick" => options.quick = true,
            "--slow-baselines" => options.slow_baselines = true,
            "--reps" => match it.next().and_then(|n| n.parse().ok()).filter(|&n: &usize| n > 0) {
                Some(n) => options.reps = Some(n),
                None => return Err("--reps needs a positive number".into()),
            },
            "--only" => {
                let list = it.next().ok_or("--only needs a list such as w1,w3")?;
                let only: Vec<String> = list.split(',').map(|w| w.trim().to_lowercase()).collect();
                let known = ["w1", "w2", "w3", "w3-placed", "w3-range", "w5"];
                if let Some(bad) = only.iter().find(|w| !known.contains(&w.as_str())) {
                    return Err(format!("unknown workload `{bad}` (w1, w2, w3, w3-placed, w3-range, w5)"));
                }
                options.only = Some(only);
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok(options)
}

fn run_alloc_command(options: &AllocOptions) -> ExitCode {
    let set = match DeviceSet::new(&DeviceSetDesc::default()) {
        Ok(set) => Some(set),
        Err(e) => {
            eprintln!("no Vulkan device ({e}): gpu-allocator and W3 are skipped");
            None
        }
    };
    let device = set.as_ref().and_then(|s| s.devices().first()).map(Arc::clone);
    let mut report = run_alloc(options, device.as_ref());
    drop(device);
    if let Some(set) = &set {
        if set.validation() != residency::vulkan::ValidationMode::Off {
            report.validation_problems = Some(set.validation_log().problem_count());
        }
    }
    if options.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("report serialises"));
    } else {
        report.print_table();
    }
    validation_status(set.as_ref())
}

/// Exit status 1, with the messages on stderr, when the validation layer reported problems.
pub fn validation_status(set: Option<&DeviceSet>) -> ExitCode {
    let Some(set) = set else { return ExitCode::SUCCESS };
    let problems = set.validation_log().problem_count();
    if problems == 0 {
        return ExitCode::SUCCESS;
    }
    eprintln!("{problems} validation problem(s):");
    for m in set.validation_log().problems_since(0) {
        eprintln!("  [{:?}] {}: {}", m.severity, m.id, m.text);
    }
    ExitCode::FAILURE
}

/// Repetitions: W1, W2 (and the most a slow baseline gets in each), W3 buffers and repetitions.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    w1_reps: usize,
    w2_reps: usize,
    w5_reps: usize,
    gpu_allocator_w1_reps: usize,
    gpu_allocator_w2_reps: usize,
    w3: placed_buffers::W3Config,
}

impl Sizes {
    fn of(options: &AllocOptions) -> Sizes {
        let mut sizes = if options.quick {
            Sizes {
                w1_reps: 5,
                w2_reps: 3,
                w5_reps: 3,
                gpu_allocator_w1_reps: 1,
                gpu_allocator_w2_reps: 1,
                w3: placed_buffers::W3Config { buffers: 500, reps: 3 },
            }
        } else {
            Sizes {
                w1_reps: 41,
                w2_reps: 15,
                w5_reps: 11,
                gpu_allocator_w1_reps: 3,
                gpu_allocator_w2_reps: 1,
                w3: placed_buffers::W3Config { buffers: 4000, reps: 31 },
            }
        };
        if let Some(reps) = options.reps {
            sizes.w1_reps = reps;
            sizes.w2_reps = reps;
            sizes.w5_reps = reps;
            sizes.w3.reps = reps;
        }
        sizes
    }
}

fn run_alloc(options: &AllocOptions, device: Option<&Arc<Device>>) -> Report {
    let sizes = Sizes::of(options);
    let mut report = Report {
        device: device.map(|d| d.name().to_owned()),
        workloads: Vec::new(),
        ratios: Vec::new(),
        skipped: Vec::new(),
        validation_problems: None,
    };
    if device.is_none() {
        let reason = "no Vulkan device could be opened".to_owned();
        report.skipped.push(Skipped { allocator: "gpu-allocator", reason: reason.clone() });
        report.skipped.push(Skipped { allocator: "w3", reason });
    }
    if options.runs("w1") {
        for plan in workloads::w1_plans() {
            let mut contenders: Vec<Contender<'_, W1Plan>> = vec![
                measure::w1::<Residency>(&(), usize::MAX),
                measure::w1::<OffsetAllocator>(&(), usize::MAX),
                measure::w1::<VmaVirtual>(&(), usize::MAX),
            ];
            if let Some(device) = device {
                contenders.push(measure::w1::<GpuAllocator>(device, sizes.gpu_allocator_w1_reps));
            }
            let id = WorkloadId {
                name: format!("w1-align{}", plan.alignment),
                alignment: plan.alignment,
                capacity: plan.capacity,
            };
            report.workloads.extend(measure::measure(&id, &plan, sizes.w1_reps, &contenders));
        }
    }
    if options.runs("w2") {
        for plan in workloads::w2_plans() {
            let mut contenders: Vec<Contender<'_, W2Plan>> = vec![
                measure::w2::<Residency>(&(), usize::MAX),
                measure::w2::<OffsetAllocator>(&(), usize::MAX),
                measure::w2::<VmaVirtual>(&(), usize::MAX),
            ];
            match device {
                Some(device) if options.slow_baselines => {
                    contenders.push(measure::w2::<GpuAllocator>(device, sizes.gpu_allocator_w2_reps));
                }
                Some(_) if plan.alignment == workloads::W2_ALIGNMENTS[0] => report.skipped.push(Skipped {
                    allocator: "gpu-allocator",
                    reason: "W2 skipped: its free-list allocator is O(live allocations), 0.1-0.3 ms per operation at \
                             20 000 live, about a minute per run; pass --slow-baselines"
                        .into(),
                }),
                _ => {}
            }
            let id = WorkloadId {
                name: format!("w2-align{}", plan.alignment),
                alignment: plan.alignment,
                capacity: workloads::W2_CAPACITY,
            };
            report.workloads.extend(measure::measure(&id, &plan, sizes.w2_reps, &contenders));
        }
    }
    if options.runs("w5") {
        // offset-allocator is left out: its 128 Ki nodes cannot hold the setup's 200 000 blocks.
        let contenders: Vec<Contender<'_, W5Plan>> =
            vec![measure::w5::<Residency>(&(), usize::MAX), measure::w5::<VmaVirtual>(&(), usize::MAX)];
        let id = WorkloadId {
            name: "w5-fail-fragmented".into(),
            alignment: workloads::W5_ALIGNMENT,
            capacity: workloads::W5_CAPACITY,
        };
        report.workloads.extend(measure::measure(&id, &W5Plan, sizes.w5_reps, &contenders));
        report.skipped.push(Skipped {
            allocator: "offset-allocator",
            reason: "w5-fail-fragmented skipped: its 128 Ki nodes cannot hold the setup's 200 000 blocks"
                .into(),
        });
    }
    let (placed, ranges) =
        (options.runs("w3") || options.runs("w3-placed"), options.runs("w3") || options.runs("w3-range"));
    if placed || ranges {
        if let Some(device) = device {
            let (records, skipped) = placed_buffers::run_w3(device, sizes.w3, placed, ranges);
            report.workloads.extend(records);
            report
                .skipped
                .extend(skipped.into_iter().map(|(allocator, reason)| Skipped { allocator, reason }));
        }
    }
    report.compute_ratios();
    report
}
