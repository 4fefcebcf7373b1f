//! The benchmark report: JSON records and the readable table.

use serde::Serialize;

/// One workload run by one allocator.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    /// Workload and alignment, e.g. `w1-align256`, or `w3-placed` / `w3-range`.
    pub name: String,
    /// Allocator name (`residency`, `residency-device`, `offset-allocator`, `gpu-allocator`, `vma`).
    pub allocator: &'static str,
    /// Alignment of every allocation (W3: 0, each buffer takes its driver's alignment).
    pub alignment: u64,
    /// Median over the repetitions of (timed wall time / operations), in nanoseconds. W3: per
    /// buffer created and bound (or range allocated).
    pub ns_per_op_median: f64,
    /// Fastest repetition, in ns per operation.
    pub ns_per_op_min: f64,
    /// W3: buffers created and bound (or ranges allocated) per second, from the median.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_sec_median: Option<f64>,
    /// W3: median ns per buffer destroyed (or range freed), timed apart from creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_ns_per_op_median: Option<f64>,
    /// Operations per repetition (W1/W2: allocations plus frees; W3: buffers created).
    pub ops: u64,
    /// Timed repetitions.
    pub repetitions: usize,
    /// High-water mark: the highest end of any allocation's footprint, i.e. the heap size this
    /// workload needs with this allocator. W3: summed over the memory objects used.
    pub heap_bytes: u64,
    /// Size of the block the allocator was given (W3: 0, each allocator sizes its own).
    pub capacity_bytes: u64,
    /// Peak of the live requested bytes.
    pub requested_bytes: u64,
    /// Live requested bytes when `largest_free_bytes` was taken.
    pub requested_bytes_at_end: u64,
    /// Largest free range as the allocator reports it: W1 after the random phase, W2 after the
    /// churn (before the final frees). W3: 0 (not measured).
    pub largest_free_bytes: u64,
    /// Allocations that failed.
    pub failures: u64,
    /// How the allocator handles alignment (W3: what is timed).
    pub alignment_handling: &'static str,
}

impl Record {
    /// A record with every figure zero.
    pub fn new(name: &str, allocator: &'static str, note: &'static str) -> Record {
        Record {
            name: name.to_owned(),
            allocator,
            alignment: 0,
            ns_per_op_median: 0.0,
            ns_per_op_min: 0.0,
            ops_per_sec_median: None,
            free_ns_per_op_median: None,
            ops: 0,
            repetitions: 0,
            heap_bytes: 0,
            capacity_bytes: 0,
            requested_bytes: 0,
            requested_bytes_at_end: 0,
            largest_free_bytes: 0,
            failures: 0,
            alignment_handling: note,
        }
    }
}

/// An allocator or workload that was not run, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    /// Allocator (or workload) name.
    pub allocator: &'static str,
    /// Why it was skipped.
    pub reason: String,
}

/// Ours against one baseline on one workload.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// The workload.
    pub workload: String,
    /// Our allocator (`residency` or `residency-device`).
    pub ours: &'static str,
    /// The baseline.
    pub baseline: &'static str,
    /// Baseline median ns/op divided by ours: above 1, ours is faster.
    pub speedup: f64,
    /// Our heap bytes divided by the baseline's (below 1, ours needs less), when both measured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap_ratio: Option<f64>,
}

/// The whole `alloc` report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The Vulkan device W3 and gpu-allocator ran on, if one was opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Every record, in run order.
    pub workloads: Vec<Record>,
    /// Ours against every baseline of the same workload.
    pub ratios: Vec<Ratio>,
    /// Allocators or workloads not run.
    pub skipped: Vec<Skipped>,
    /// Validation-layer problems (errors and validation warnings) raised during the run, when the
    /// layer was on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validation_problems: Option<u64>,
}

impl Report {
    /// Computes [`Report::ratios`] from the records.
    pub fn compute_ratios(&mut self) {
        let ours = |r: &&Record| r.allocator.starts_with("residency");
        let mut ratios = Vec::new();
        for a in self.workloads.iter().filter(ours) {
            for b in self.workloads.iter().filter(|b| b.name == a.name && !ours(b)) {
                if a.ns_per_op_median <= 0.0 || b.ns_per_op_median <= 0.0 {
                    continue;
                }
                let heap_ratio =
                    (a.heap_bytes > 0 && b.heap_bytes > 0).then(|| a.heap_bytes as f64 / b.heap_bytes as f64);
                ratios.push(Ratio {
                    workload: a.name.clone(),
                    ours: a.allocator,
                    baseline: b.allocator,
                    speedup: b.ns_per_op_median / a.ns_per_op_median,
                    heap_ratio,
                });
            }
        }
        self.ratios = ratios;
    }

    /// Prints the records as an aligned table, then the ratios and the skipped allocators.
    pub fn print_table(&self) {
        if let Some(device) = &self.device {
            println!("device: {device}");
        }
        println!(
            "{:<12} {:<17} {:>10} {:>10} {:>11} {:>12} {:>12} {:>7} {:>12} {:>5}",
            "workload",
            "allocator",
            "ns/op med",
            "ns/op min",
            "ops/s med",
            "heap B",
            "requested B",
            "heap/rq",
            "largest free",
            "fail"
        );
        for r in &self.workloads {
            let rate = r.ops_per_sec_median.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
            println!(
                "{:<12} {:<17} {:>10.1} {:>10.1} {:>11} {:>12} {:>12} {:>7.3} {:>12} {:>5}",
                r.name,
                r.allocator,
                r.ns_per_op_median,
                r.ns_per_op_min,
                rate,
                r.heap_bytes,
                r.requested_bytes,
                r.heap_bytes as f64 / r.requested_bytes.max(1) as f64,
                r.largest_free_bytes,
                r.failures
            );
        }
        let frees: Vec<_> = self.workloads.iter().filter(|r| r.free_ns_per_op_median.is_some()).collect();
        if !frees.is_empty() {
            println!("\nW3 destruction (timed apart): median ns per buffer destroyed / range freed");
            for r in frees {
                println!(
                    "{:<12} {:<17} {:>10.1}",
                    r.name,
                    r.allocator,
                    r.free_ns_per_op_median.unwrap_or(0.0)
                );
            }
        }
        if !self.ratios.is_empty() {
            println!(
                "\nratios (speedup = baseline ns/op / ours; above 1 ours is faster; heap = ours / baseline)"
            );
            for q in &self.ratios {
                let heap = q.heap_ratio.map_or_else(String::new, |h| format!("  heap {h:.3}"));
                println!(
                    "{:<12} {:<17} vs {:<17} speedup {:>6.2}x{heap}",
                    q.workload, q.ours, q.baseline, q.speedup
                );
            }
        }
        let mut notes: Vec<(&str, &str)> = Vec::new();
        for r in &self.workloads {
            if !notes.iter().any(|(a, n)| *a == r.allocator && *n == r.alignment_handling) {
                notes.push((r.allocator, r.alignment_handling));
            }
        }
        println!();
        for (allocator, note) in notes {
            println!("{allocator}: {note}");
        }
        for s in &self.skipped {
            println!("skipped {}: {}", s.allocator, s.reason);
        }
        if let Some(problems) = self.validation_problems {
            println!("validation problems: {problems}");
        }
    }
}
