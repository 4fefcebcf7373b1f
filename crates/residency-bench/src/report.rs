//! The benchmark report: JSON records and the readable table.

use serde::Serialize;

/// One workload run by one allocator.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    /// Workload and alignment, e.g. `w1-align256`.
    pub name: String,
    /// Allocator name (`residency`, `offset-allocator`, later `gpu-allocator`, `vma`).
    pub allocator: &'static str,
    /// Alignment of every allocation.
    pub alignment: u64,
    /// Median over the repetitions of (timed wall time / operations), in nanoseconds.
    pub ns_per_op_median: f64,
    /// Fastest repetition, in ns per operation.
    pub ns_per_op_min: f64,
    /// Allocations plus frees per repetition.
    pub ops: u64,
    /// Timed repetitions.
    pub repetitions: usize,
    /// High-water mark: the highest end of any allocation's footprint, i.e. the heap size this
    /// workload needs with this allocator.
    pub heap_bytes: u64,
    /// Size of the block the allocator was given.
    pub capacity_bytes: u64,
    /// Peak of the live requested bytes.
    pub requested_bytes: u64,
    /// Live requested bytes when `largest_free_bytes` was taken.
    pub requested_bytes_at_end: u64,
    /// Largest free range as the allocator reports it: W1 after the random phase, W2 after the
    /// churn (before the final frees).
    pub largest_free_bytes: u64,
    /// Allocations that failed.
    pub failures: u64,
    /// How the allocator handles alignment.
    pub alignment_handling: &'static str,
}

/// An allocator that was not run, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    /// Allocator name.
    pub allocator: &'static str,
    /// Why it was skipped.
    pub reason: &'static str,
}

/// The whole `alloc` report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Every record, in run order.
    pub workloads: Vec<Record>,
    /// Allocators not run.
    pub skipped: Vec<Skipped>,
}

impl Report {
    /// Prints the records as an aligned table, then the skipped allocators.
    pub fn print_table(&self) {
        println!(
            "{:<12} {:<17} {:>10} {:>10} {:>12} {:>12} {:>7} {:>12} {:>5}",
            "workload",
            "allocator",
            "ns/op med",
            "ns/op min",
            "heap B",
            "requested B",
            "heap/rq",
            "largest free",
            "fail"
        );
        for r in &self.workloads {
            println!(
                "{:<12} {:<17} {:>10.1} {:>10.1} {:>12} {:>12} {:>7.3} {:>12} {:>5}",
                r.name,
                r.allocator,
                r.ns_per_op_median,
                r.ns_per_op_min,
                r.heap_bytes,
                r.requested_bytes,
                r.heap_bytes as f64 / r.requested_bytes.max(1) as f64,
                r.largest_free_bytes,
                r.failures
            );
        }
        for s in &self.skipped {
            println!("skipped {}: {}", s.allocator, s.reason);
        }
        println!(
            "offset-allocator: {}",
            <crate::suballocators::OffsetAllocator as crate::suballocators::SubAllocator>::ALIGNMENT_NOTE
        );
    }
}
