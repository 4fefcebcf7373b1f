//! Interleaved timing of several allocators on one workload, and medians.

use crate::report::Record;
use crate::suballocators::SubAllocator;
use crate::workloads::{self, RunResult, W1Plan, W2Plan, W5Plan};

/// Median of a set of figures (0 for none).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Smallest of a set of figures (0 for none).
pub fn minimum(values: &[f64]) -> f64 {
    values.iter().copied().reduce(f64::min).unwrap_or(0.0)
}

/// Whether a contender limited to `max_reps` of `reps` repetitions runs in repetition `rep`: its
/// runs are spread evenly over the whole measurement, so that slow baselines still alternate with
/// the others.
pub fn takes_part(rep: usize, reps: usize, max_reps: usize) -> bool {
    let k = max_reps.min(reps);
    rep * k / reps != (rep + 1) * k / reps
}

/// One allocator's entry points for a workload with plan `P`.
pub struct Contender<'a, P> {
    /// Allocator name in the report.
    pub name: &'static str,
    /// How it handles alignment.
    pub note: &'static str,
    /// At most this many timed repetitions (slow baselines get fewer, and no warm-up run).
    pub max_reps: usize,
    /// A run that tracks footprints (not timed).
    pub tracked: Box<dyn Fn(&P) -> RunResult + 'a>,
    /// A timed run.
    pub timed: Box<dyn Fn(&P) -> RunResult + 'a>,
}

/// W1 for allocator `A`.
pub fn w1<A: SubAllocator>(context: &A::Context, max_reps: usize) -> Contender<'_, W1Plan> {
    Contender {
        name: A::NAME,
        note: A::ALIGNMENT_NOTE,
        max_reps,
        tracked: Box::new(move |plan| workloads::run_w1::<A, true>(context, plan)),
        timed: Box::new(move |plan| workloads::run_w1::<A, false>(context, plan)),
    }
}

/// W2 for allocator `A`.
pub fn w2<A: SubAllocator>(context: &A::Context, max_reps: usize) -> Contender<'_, W2Plan> {
    Contender {
        name: A::NAME,
        note: A::ALIGNMENT_NOTE,
        max_reps,
        tracked: Box::new(move |plan| workloads::run_w2::<A, true>(context, plan)),
        timed: Box::new(move |plan| workloads::run_w2::<A, false>(context, plan)),
    }
}

/// W5 (`w5-fail-fragmented`) for allocator `A`.
pub fn w5<A: SubAllocator>(context: &A::Context, max_reps: usize) -> Contender<'_, W5Plan> {
    Contender {
        name: A::NAME,
        note: A::ALIGNMENT_NOTE,
        max_reps,
        tracked: Box::new(move |plan| workloads::run_w5::<A, true>(context, plan)),
        timed: Box::new(move |plan| workloads::run_w5::<A, false>(context, plan)),
    }
}

/// What a workload is, for the records.
#[derive(Clone, Debug)]
pub struct WorkloadId {
    /// Workload and alignment, e.g. `w1-align256`.
    pub name: String,
    /// Alignment of every allocation.
    pub alignment: u64,
    /// Block size given to the allocators.
    pub capacity: u64,
}

/// Runs one workload for every contender: an untimed tracking run each for the footprint figures,
/// a warm-up each (except slow baselines limited to fewer repetitions), then `reps` rounds in which each contender (within its `max_reps`) runs once,
/// in an order that rotates every round, so that noise from other processes falls on all alike.
pub fn measure<P>(id: &WorkloadId, plan: &P, reps: usize, contenders: &[Contender<'_, P>]) -> Vec<Record> {
    let footprints: Vec<RunResult> = contenders.iter().map(|c| (c.tracked)(plan)).collect();
    for c in contenders.iter().filter(|c| c.max_reps >= reps) {
        let _warm_up = (c.timed)(plan);
    }
    let mut per_op: Vec<Vec<f64>> =
        contenders.iter().map(|c| Vec::with_capacity(c.max_reps.min(reps))).collect();
    let n = contenders.len();
    for rep in 0..reps {
        for k in 0..n {
            let which = (k + rep) % n;
            if !takes_part(rep, reps, contenders[which].max_reps) {
                continue;
            }
            let r = (contenders[which].timed)(plan);
            per_op[which].push(r.nanos as f64 / r.ops.max(1) as f64);
        }
    }
    contenders
        .iter()
        .zip(footprints)
        .zip(per_op)
        .map(|((c, footprint), per_op)| {
            let mut record = Record::new(&id.name, c.name, c.note);
            record.alignment = id.alignment;
            record.ns_per_op_min = minimum(&per_op);
            record.repetitions = per_op.len();
            record.ns_per_op_median = median(per_op);
            record.ops = footprint.ops;
            record.heap_bytes = footprint.high_water;
            record.capacity_bytes = id.capacity;
            record.requested_bytes = footprint.peak_requested;
            record.requested_bytes_at_end = footprint.requested_at_end;
            record.largest_free_bytes = footprint.largest_free;
            record.failures = footprint.failures;
            record
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limited_contenders_take_part_exactly_max_reps_times() {
        for reps in 1..30 {
            for max in 0..35 {
                let count = (0..reps).filter(|&r| takes_part(r, reps, max)).count();
                assert_eq!(count, max.min(reps), "reps {reps} max {max}");
            }
        }
    }

    #[test]
    fn median_of_even_and_odd_sets() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
