//! `residency-bench`: benchmarks of `residency` against its baselines.
//!
//! `residency-bench alloc [--json] [--reps N]` runs the offset-allocator workloads (W1, W2; see
//! `workloads`) for every allocator in `suballocators::ALL` and prints a table, or with `--json`
//! `{"workloads":[{"name":"w1-align256","allocator":"residency",...}],"skipped":[...]}`.

mod report;
mod suballocators;
mod vma_rng;
mod workloads;

use std::process::ExitCode;

use report::{Record, Report, Skipped};
use suballocators::{OffsetAllocator, Residency, SubAllocator};
use workloads::{RunResult, W1Plan, W2Plan};

const USAGE: &str = "usage: residency-bench alloc [--json] [--reps N]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut json = false;
    let mut reps: Option<usize> = None;
    let mut command = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => json = true,
            "--reps" => match it.next().and_then(|n| n.parse().ok()).filter(|&n: &usize| n > 0) {
                Some(n) => reps = Some(n),
                None => {
                    eprintln!("--reps needs a positive number\n{USAGE}");
                    return ExitCode::FAILURE;
                }
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other if command.is_none() && !other.starts_with('-') => command = Some(other.to_owned()),
            other => {
                eprintln!("unexpected argument `{other}`\n{USAGE}");
                return ExitCode::FAILURE;
            }
        }
    }
    match command.as_deref() {
        Some("alloc") => {
            let report = run_alloc(reps);
            if json {
                println!("{}", serde_json::to_string_pretty(&report).expect("report serialises"));
            } else {
                report.print_table();
            }
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::FAILURE
        }
    }
}

/// Median of the per-repetition ns/op figures.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The timed and tracked entry points of one workload for one allocator.
struct Runs<P> {
    tracked: fn(&P) -> RunResult,
    timed: fn(&P) -> RunResult,
}

/// Runs one workload for two allocators: an untimed tracking run each for the footprint figures,
/// a warm-up each, then `reps` timed runs that alternate between the two, so that noise from
/// other processes falls on both alike.
fn measure_pair<A: SubAllocator, B: SubAllocator, P>(
    name: &str,
    alignment: u64,
    capacity: u64,
    plan: &P,
    reps: usize,
    a: Runs<P>,
    b: Runs<P>,
) -> [Record; 2] {
    let footprints = [(a.tracked)(plan), (b.tracked)(plan)];
    let _warm_up = ((a.timed)(plan), (b.timed)(plan));
    let mut per_op = [Vec::with_capacity(reps), Vec::with_capacity(reps)];
    for rep in 0..reps {
        // Alternate which allocator goes first as well.
        let order = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let r = if which == 0 { (a.timed)(plan) } else { (b.timed)(plan) };
            per_op[which].push(r.nanos as f64 / r.ops as f64);
        }
    }
    let [pa, pb] = per_op;
    let record = |allocator: &'static str, note: &'static str, footprint: RunResult, per_op: Vec<f64>| {
        let ns_per_op_min = per_op.iter().copied().fold(f64::INFINITY, f64::min);
        Record {
            name: name.to_owned(),
            allocator,
            alignment,
            ns_per_op_median: median(per_op),
            ns_per_op_min,
            ops: footprint.ops,
            repetitions: reps,
            heap_bytes: footprint.high_water,
            capacity_bytes: capacity,
            requested_bytes: footprint.peak_requested,
            requested_bytes_at_end: footprint.requested_at_end,
            largest_free_bytes: footprint.largest_free,
            failures: footprint.failures,
            alignment_handling: note,
        }
    };
    [
        record(A::NAME, A::ALIGNMENT_NOTE, footprints[0], pa),
        record(B::NAME, B::ALIGNMENT_NOTE, footprints[1], pb),
    ]
}

fn w1<A: SubAllocator, B: SubAllocator>(plan: &W1Plan, reps: usize) -> [Record; 2] {
    measure_pair::<A, B, W1Plan>(
        &format!("w1-align{}", plan.alignment),
        plan.alignment,
        plan.capacity,
        plan,
        reps,
        Runs { tracked: workloads::run_w1::<A, true>, timed: workloads::run_w1::<A, false> },
        Runs { tracked: workloads::run_w1::<B, true>, timed: workloads::run_w1::<B, false> },
    )
}

fn w2<A: SubAllocator, B: SubAllocator>(plan: &W2Plan, reps: usize) -> [Record; 2] {
    measure_pair::<A, B, W2Plan>(
        &format!("w2-align{}", plan.alignment),
        plan.alignment,
        workloads::W2_CAPACITY,
        plan,
        reps,
        Runs { tracked: workloads::run_w2::<A, true>, timed: workloads::run_w2::<A, false> },
        Runs { tracked: workloads::run_w2::<B, true>, timed: workloads::run_w2::<B, false> },
    )
}

fn run_alloc(reps: Option<usize>) -> Report {
    let mut records = Vec::new();
    for plan in workloads::w1_plans() {
        records.extend(w1::<Residency, OffsetAllocator>(&plan, reps.unwrap_or(41)));
    }
    for plan in workloads::w2_plans() {
        records.extend(w2::<Residency, OffsetAllocator>(&plan, reps.unwrap_or(15)));
    }
    debug_assert_eq!(suballocators::ALL.len(), 2);
    Report {
        workloads: records,
        skipped: vec![
            Skipped {
                allocator: "gpu-allocator",
                reason: "needs a Vulkan device (its sub-allocators are not public); W3 adds it",
            },
            Skipped { allocator: "vma", reason: "vk-mem needs a Vulkan device; W3 adds it" },
        ],
    }
}
