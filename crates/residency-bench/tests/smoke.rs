//! The benchmarks issue #31's figures come from run on lavapipe at small sizes and report every
//! contender: W3 (`alloc --quick --only w3`: ours, `residency-local`, VMA, VMA behind a lock, the
//! core's TLSF behind a lock, gpu-allocator and the bare driver) and `contention` (the peers and
//! the driver beside ours, at 1 and 2 threads), as JSON, with no failed operation. Counts and
//! names only, never timings.

use std::process::Command;

fn bench(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_residency-bench")).args(args).output().expect("runs");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn require_gpu() -> bool {
    std::env::var("RESIDENCY_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

#[test]
fn w3_reports_every_contender_and_no_failure() {
    let report = bench(&["alloc", "--quick", "--only", "w3", "--json"]);
    let rows = report["workloads"].as_array().expect("workloads");
    if rows.is_empty() && !require_gpu() {
        return;
    }
    let has = |name: &str, allocator: &str| {
        rows.iter().any(|r| r["name"] == name && r["allocator"] == allocator && r["failures"] == 0)
    };
    for allocator in ["residency", "residency-device", "vma", "gpu-allocator", "driver"] {
        assert!(has("w3-placed", allocator), "w3-placed {allocator}: {report}");
    }
    for allocator in
        ["residency", "residency-local", "residency-buffer", "vma", "vma-locked", "residency-tlsf-locked"]
    {
        assert!(has("w3-range", allocator), "w3-range {allocator}: {report}");
    }
    assert!(rows.iter().all(|r| r["ns_per_op_median"].as_f64().is_some_and(|ns| ns > 0.0)));
}

#[test]
fn contention_reports_the_peers_and_the_driver_beside_ours() {
    let report = bench(&["contention", "--threads", "1,2", "--ops", "2000", "--json"]);
    let rows = report["rows"].as_array().expect("rows");
    for contender in
        ["driver", "vma", "gpu-allocator", "offset-allocator", "placed-1", "placed-n", "ranges-1", "ranges-n"]
    {
        for threads in [1, 2] {
            let row = rows.iter().find(|r| r["contender"] == contender && r["threads"] == threads);
            let row = row.unwrap_or_else(|| panic!("{contender} at {threads} threads: {report}"));
            assert_eq!(row["failures"], 0, "{contender}");
            assert!(row["ops_per_sec"].as_f64().is_some_and(|r| r > 0.0), "{contender}");
            assert!(row["p99_ns"].as_u64().is_some_and(|p99| p99 >= row["p50_ns"].as_u64().unwrap_or(0)));
        }
    }
}
