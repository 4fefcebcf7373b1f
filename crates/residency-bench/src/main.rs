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

/// Runs one workload for one allocator: an untimed tracking run for the footprint figures, then
/// `reps` timed runs (ns/op median and minimum).
fn measure<A: SubAllocator, P>(
    name: String,
    alignment: u64,
    capacity: u64,
    plan: &P,
    reps: usize,
    tracked: fn(&P) -> RunResult,
    timed: fn(&P) -> RunResult,
) -> Record {
    let footprint = tracked(plan);
    let _warm_up = timed(plan);
    let per_op: Vec<f64> = (0..reps)
        .map(|_| {
            let r = timed(plan);
            r.nanos as f64 / r.ops as f64
        })
        .collect();
    let ns_per_op_min = per_op.iter().copied().fold(f64::INFINITY, f64::min);
    Record {
        name,
        allocator: A::NAME,
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
        alignment_handling: A::ALIGNMENT_NOTE,
    }
}

fn w1<A: SubAllocator>(plan: &W1Plan, reps: usize) -> Record {
    measure::<A, W1Plan>(
        format!("w1-align{}", plan.alignment),
        plan.alignment,
        plan.capacity,
        plan,
        reps,
        workloads::run_w1::<A, true>,
        workloads::run_w1::<A, false>,
    )
}

fn w2<A: SubAllocator>(plan: &W2Plan, reps: usize) -> Record {
    measure::<A, W2Plan>(
        format!("w2-align{}", plan.alignment),
        plan.alignment,
        workloads::W2_CAPACITY,
        plan,
        reps,
        workloads::run_w2::<A, true>,
        workloads::run_w2::<A, false>,
    )
}

fn run_alloc(reps: Option<usize>) -> Report {
    let mut records = Vec::new();
    for plan in workloads::w1_plans() {
        let reps = reps.unwrap_or(31);
        records.push(w1::<Residency>(&plan, reps));
        records.push(w1::<OffsetAllocator>(&plan, reps));
    }
    for plan in workloads::w2_plans() {
        let reps = reps.unwrap_or(11);
        records.push(w2::<Residency>(&plan, reps));
        records.push(w2::<OffsetAllocator>(&plan, reps));
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
