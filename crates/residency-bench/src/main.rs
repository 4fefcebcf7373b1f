//! `residency-bench`: benchmarks of `residency` against its baselines.
fn main() {}
