//! A hang must fail a test, not stall CI: [`within`] runs a test's body on a thread of its own and
//! fails (ending the whole test binary, whose other tests would wait on the GPU harness's lock the
//! hung body holds) when it has not finished in time.

use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::Duration;

/// How long a misuse test's body may run.
pub const LIMIT: Duration = Duration::from_secs(60);

/// How long a body may run in this process: [`LIMIT`], or twenty times it under GPU-assisted
/// validation (`RESIDENCY_VALIDATION=gpu`), which instruments every shader and runs work many
/// times slower. A hang is still a hang: it never returns.
pub fn limit() -> Duration {
    match residency_vulkan::ValidationMode::from_env() {
        residency_vulkan::ValidationMode::GpuAssisted => LIMIT * 20,
        _ => LIMIT,
    }
}

/// Runs `body` on its own thread and returns what it returns; a panic in it fails the test as
/// usual; a body still running after [`LIMIT`] ends the process with a failure.
pub fn within<R: Send + 'static>(what: &str, body: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = channel();
    let handle = std::thread::Builder::new()
        .name(format!("watched {what}"))
        .spawn(move || {
            let out = body();
            let _ = tx.send(());
            out
        })
        .expect("spawning the watched thread");
    match rx.recv_timeout(limit()) {
        Ok(()) | Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(RecvTimeoutError::Timeout) => {
            eprintln!("\n**** HUNG: `{what}` did not finish within {:?} ****\n", limit());
            std::process::exit(101);
        }
    }
}
