//! The safe-API fuzzer ([`residency_fuzz::safe_api`]) in the normal test suite, on the harness's
//! device set (lavapipe opened twice in CI; validation with synchronization validation; a
//! validation message or a leaked object fails the test):
//! - a bounded, seeded run of [`INPUTS`] generated inputs (a few thousand public calls);
//! - every checked-in input of `fuzz/corpus/safe_api/` and `fuzz/regressions/safe_api/` replayed.
//!
//! Both skip the classes known open ([`KNOWN_OPEN`]): a call of such a class is replaced by its
//! well-formed twin. A watchdog aborts the process when a run hangs. The long runs use the driver
//! `safe-api-fuzz` (child processes, so a crash is seen and the run goes on).

use residency_fuzz::safe_api::{generated, run_input, KNOWN_OPEN};
use residency_vulkan::testing::with_gpu;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Generated inputs of the bounded run (about 45 calls each).
const INPUTS: u64 = 80;
/// The seed of the bounded run.
const SEED: u64 = 29;
/// A run that takes longer than this hangs: the process aborts (a hang guard, not a speed bound).
const WATCHDOG: Duration = Duration::from_secs(600);

/// Aborts the process unless dropped within [`WATCHDOG`].
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn start(what: &'static str) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        std::thread::spawn(move || {
            let started = Instant::now();
            while !flag.load(Ordering::SeqCst) {
                if started.elapsed() > WATCHDOG {
                    eprintln!("{what}: hung for {WATCHDOG:?}");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    out.sort();
    out
}

#[test]
fn safe_api_bounded_run() {
    let _watchdog = Watchdog::start("safe_api_bounded_run");
    with_gpu(|set| {
        let (mut calls, mut errors) = (0, 0);
        for index in 0..INPUTS {
            let data = generated(SEED, index);
            match run_input(set, &data, KNOWN_OPEN) {
                Ok(o) => {
                    calls += o.calls;
                    errors += o.errors;
                }
                Err((finding, _)) => panic!(
                    "input {index} of seed {SEED} (`safe-api-fuzz --seed {SEED}` replays it): {}",
                    finding.summary()
                ),
            }
        }
        eprintln!("safe_api: {INPUTS} inputs, {calls} calls, {errors} typed errors");
        assert!(calls >= 2000, "{calls} calls");
    });
}

#[test]
fn safe_api_corpus_and_regressions_replay() {
    let _watchdog = Watchdog::start("safe_api_corpus_and_regressions_replay");
    let corpus = files(&fuzz_dir().join("corpus/safe_api"));
    assert!(!corpus.is_empty(), "fuzz/corpus/safe_api/ has no inputs");
    let regressions = files(&fuzz_dir().join("regressions/safe_api"));
    with_gpu(|set| {
        for file in corpus.iter().chain(&regressions) {
            let data = std::fs::read(file).unwrap();
            if let Err((finding, _)) = run_input(set, &data, KNOWN_OPEN) {
                panic!("{}: {}", file.display(), finding.summary());
            }
        }
    });
}
