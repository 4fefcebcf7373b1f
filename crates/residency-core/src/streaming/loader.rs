//! Tile loads on worker threads that overlap frames.
//!
//! A frame hands the [`TileLoader`] the loads the manager started ([`TileLoader::submit`]: a token
//! of the caller's, the source, the tiles to read) and takes back, without waiting, the ones that
//! have finished ([`TileLoader::poll`]); a load no longer wanted is cancelled
//! ([`TileLoader::cancel`]): a queued one never runs, a running one's result is dropped. Nothing is
//! joined within a frame. Dropping the loader stops the workers after the reads they are in.
//!
//! A source is the renderer's code run on the loader's threads, so a panic in it is caught: the
//! read becomes [`SourceError::Panicked`], delivered like any other failure, and the worker goes
//! on with the next load. Nothing of the loader's is borrowed or locked while a source runs, so
//! the panic leaves the loader's state as it was (hence `AssertUnwindSafe`); the source itself is
//! the renderer's to keep consistent. A panic anywhere else on a worker (a token's `Hash`, a
//! source's `Drop`) restarts the worker's loop with the running count put back, so every wait
//! below ends: [`TileLoader::wait_idle`] waits only for loads that a live worker will finish.

use super::source::{SourceError, TileSource};
use crate::poison::{PoisonFree, PoisonFreeWait};
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The most worker threads a loader starts ([`TileLoader::new`] clamps to it).
pub const MAX_LOADER_WORKERS: usize = 64;

/// How long dropping a loader waits for its workers to finish the reads they are in before it
/// leaves them to finish on their own (a source that blocks forever does not hang the drop).
pub const LOADER_JOIN_TIMEOUT: Duration = Duration::from_secs(30);

/// One load: the tiles `(mip, x, y)` of `source`, under the caller's `token`.
pub struct LoadJob<T> {
    /// The caller's name for it (a tile key, a texture and unit…), unique among pending loads.
    pub token: T,
    /// Where the tiles come from.
    pub source: Arc<dyn TileSource>,
    /// The tiles, as `(mip, x, y)`.
    pub tiles: Vec<(u32, u32, u32)>,
}

impl<T: std::fmt::Debug> std::fmt::Debug for LoadJob<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadJob")
            .field("token", &self.token)
            .field("source", &self.source.name())
            .field("tiles", &self.tiles)
            .finish()
    }
}

/// A finished load: the texels of each tile in the job's order, or the first failure.
#[derive(Debug)]
pub struct LoadDone<T> {
    /// The job's token.
    pub token: T,
    /// The tiles' texels, or why the load failed.
    pub result: Result<Vec<Vec<u8>>, SourceError>,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Workers wait here for jobs.
    work: Condvar,
    /// `wait_idle` waits here for the queue to drain, `drop` for the workers to stop.
    idle: Condvar,
}

struct State<T> {
    /// Queued jobs with their serials.
    queue: VecDeque<(u64, LoadJob<T>)>,
    done: Vec<LoadDone<T>>,
    /// Tokens submitted and not yet returned by `poll` or cancelled, with the serial of their job:
    /// a job's result is delivered only while its token still names that job (a cancelled or
    /// resubmitted token drops the old job's result).
    pending: HashMap<T, u64>,
    next_serial: u64,
    /// Jobs a worker took and has not delivered.
    running: usize,
    /// Workers whose loop runs (they leave it only at `stop`).
    alive: usize,
    stop: bool,
}

/// Worker threads that read tiles from their sources.
pub struct TileLoader<T: Clone + Eq + Hash + Send + 'static> {
    shared: Arc<Shared<T>>,
    workers: Vec<JoinHandle<()>>,
}

impl<T: Clone + Eq + Hash + Send + 'static> std::fmt::Debug for TileLoader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileLoader").field("workers", &self.workers.len()).finish_non_exhaustive()
    }
}

/// A token submitted twice while its first load is pending.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a load with this token is already pending")]
pub struct DuplicateLoad;

impl<T: Clone + Eq + Hash + Send + 'static> TileLoader<T> {
    /// A loader with `workers` threads (at least one, at most [`MAX_LOADER_WORKERS`]; a request
    /// outside is clamped and logged). A thread the system refuses to start is logged and the
    /// loader runs with the others; it panics only when the system refuses every one.
    pub fn new(workers: usize) -> TileLoader<T> {
        let count = workers.clamp(1, MAX_LOADER_WORKERS);
        if count != workers {
            tracing::warn!(requested = workers, started = count, "tile loader threads clamped");
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                done: Vec::new(),
                pending: HashMap::new(),
                next_serial: 1,
                running: 0,
                alive: count,
                stop: false,
            }),
            work: Condvar::new(),
            idle: Condvar::new(),
        });
        let mut handles = Vec::with_capacity(count);
        for i in 0..count {
            let worker = Arc::clone(&shared);
            match std::thread::Builder::new()
                .name(format!("residency tile loader {i}"))
                .spawn(move || work(&worker))
            {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    tracing::warn!(worker = i, "a tile loader thread could not start: {e}");
                    lock(&shared.state).alive -= 1;
                }
            }
        }
        assert!(!handles.is_empty(), "the system started none of the tile loader's threads");
        TileLoader { shared, workers: handles }
    }

    fn state(&self) -> MutexGuard<'_, State<T>> {
        lock(&self.shared.state)
    }

    /// Queues a load; a worker takes it in submission order. A token already pending is refused.
    pub fn submit(&self, job: LoadJob<T>) -> Result<(), DuplicateLoad> {
        let mut state = self.state();
        if state.pending.contains_key(&job.token) {
            return Err(DuplicateLoad);
        }
        let serial = state.next_serial;
        state.next_serial += 1;
        state.pending.insert(job.token.clone(), serial);
        state.queue.push_back((serial, job));
        drop(state);
        self.shared.work.notify_one();
        Ok(())
    }

    /// Cancels a pending load: queued, it never runs; running, its result is dropped; finished
    /// and not yet polled, its result is dropped. Returns whether it was pending.
    pub fn cancel(&self, token: &T) -> bool {
        let mut state = self.state();
        if state.pending.remove(token).is_none() {
            return false;
        }
        state.queue.retain(|(_, job)| &job.token != token);
        state.done.retain(|done| &done.token != token);
        true
    }

    /// The loads that finished since the last call, without waiting.
    pub fn poll(&self) -> Vec<LoadDone<T>> {
        let mut state = self.state();
        let done = std::mem::take(&mut state.done);
        for d in &done {
            state.pending.remove(&d.token);
        }
        done
    }

    /// Loads submitted and not yet returned or cancelled.
    pub fn pending(&self) -> usize {
        self.state().pending.len()
    }

    /// Loads queued, not started.
    pub fn queued(&self) -> usize {
        self.state().queue.len()
    }

    /// Blocks until nothing is queued or running (tests and teardown; a frame never calls it).
    /// Every load ends (a panicking source is a failed load), so this returns once the sources'
    /// reads return; it never waits for a worker that is gone.
    pub fn wait_idle(&self) {
        let mut state = self.state();
        while state.running > 0 || (!state.queue.is_empty() && state.alive > 0) {
            state = self.shared.idle.wait_locked(state);
        }
    }

    /// Worker threads running (the ones started; a worker stops only when the loader drops).
    pub fn workers(&self) -> usize {
        self.state().alive
    }
}

impl<T: Clone + Eq + Hash + Send + 'static> Drop for TileLoader<T> {
    fn drop(&mut self) {
        let mut state = self.state();
        state.stop = true;
        self.shared.work.notify_all();
        // The workers stop after the reads they are in; a read that has not returned within
        // `LOADER_JOIN_TIMEOUT` is left to finish on its own (the worker holds what it reads).
        let deadline = Instant::now() + LOADER_JOIN_TIMEOUT;
        while state.alive > 0 {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
            state = self.shared.idle.wait_timeout_locked(state, left).0;
        }
        let stuck = state.alive;
        drop(state);
        if stuck > 0 {
            tracing::warn!(workers = stuck, "tile loader dropped while sources still read: left to finish");
        }
        for worker in self.workers.drain(..) {
            if worker.is_finished() {
                // A worker's loop catches every panic, so it ended normally.
                let _ = worker.join();
            }
        }
    }
}

fn lock<S>(state: &Mutex<S>) -> MutexGuard<'_, S> {
    state.locked()
}

/// A worker: serves jobs until the loader stops. A panic outside a source's read (which
/// `read_job` catches) is caught here too: the job it was running is counted out and the worker
/// serves on, so the loader never loses a worker.
fn work<T: Clone + Eq + Hash + Send>(shared: &Shared<T>) {
    loop {
        let mut running = false;
        // AssertUnwindSafe: after a panic the state is repaired below (the running count) and
        // the lock's poison is ignored by every `lock`; nothing else is shared.
        match catch_unwind(AssertUnwindSafe(|| serve(shared, &mut running))) {
            Ok(()) => break,
            Err(_) => {
                let mut state = lock(&shared.state);
                if running {
                    state.running -= 1;
                }
                drop(state);
                shared.idle.notify_all();
            }
        }
    }
    lock(&shared.state).alive -= 1;
    shared.idle.notify_all();
}

/// Takes jobs until the loader stops; `running` says whether a job taken is not yet counted out.
fn serve<T: Clone + Eq + Hash + Send>(shared: &Shared<T>, running: &mut bool) {
    let mut state = lock(&shared.state);
    loop {
        if state.stop {
            return;
        }
        let Some((serial, job)) = state.queue.pop_front() else {
            state = shared.work.wait_locked(state);
            continue;
        };
        state.running += 1;
        *running = true;
        drop(state);
        let LoadJob { token, source, tiles } = job;
        let result = read_job(&*source, &tiles);
        // The last reference to a source may be this one: its `Drop` runs here, outside the lock,
        // and a panic in it does not lose the result.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(source)));
        state = lock(&shared.state);
        state.running -= 1;
        *running = false;
        if state.pending.get(&token) == Some(&serial) {
            state.done.push(LoadDone { token, result });
        }
        shared.idle.notify_all();
    }
}

/// Reads `tiles` of `source` in order, up to the first failure; a read that panics is
/// [`SourceError::Panicked`].
fn read_job(source: &dyn TileSource, tiles: &[(u32, u32, u32)]) -> Result<Vec<Vec<u8>>, SourceError> {
    tiles
        .iter()
        .map(|&(mip, x, y)| {
            // AssertUnwindSafe: the loader holds no lock and lends nothing of its own to the read.
            catch_unwind(AssertUnwindSafe(|| source.read_tile(mip, x, y))).unwrap_or_else(|payload| {
                Err(SourceError::Panicked {
                    source_name: source_name(source),
                    mip,
                    x,
                    y,
                    message: panic_message(payload.as_ref()),
                })
            })
        })
        .collect()
}

/// The source's name for a message (its `name` may panic too).
fn source_name(source: &dyn TileSource) -> String {
    catch_unwind(AssertUnwindSafe(|| source.name().to_owned()))
        .unwrap_or_else(|_| "(a source whose name panicked)".to_owned())
}

/// What a panic said (`panic!`'s message), or a placeholder for other payloads.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;
    use crate::vt_file::VtDesc;

    /// A source whose reads count themselves and then wait until the gate opens.
    #[derive(Default)]
    struct Gated {
        /// (reads started, open).
        state: Mutex<(u32, bool)>,
        changed: Condvar,
    }

    impl Gated {
        fn open(&self) {
            self.state.lock().unwrap().1 = true;
            self.changed.notify_all();
        }

        fn reads(&self) -> u32 {
            self.state.lock().unwrap().0
        }

        /// Waits until `n` reads have started (an event, not a time).
        fn wait_for_reads(&self, n: u32) {
            let mut state = self.state.lock().unwrap();
            while state.0 < n {
                state = self.changed.wait(state).unwrap();
            }
        }
    }

    impl TileSource for Gated {
        fn name(&self) -> &str {
            "gated"
        }

        fn desc(&self) -> VtDesc {
            VtDesc::new(Format::R8G8B8A8Unorm, 512, 512, 128, 128)
        }

        fn read_tile(&self, _mip: u32, _x: u32, _y: u32) -> Result<Vec<u8>, SourceError> {
            let mut state = self.state.lock().unwrap();
            state.0 += 1;
            self.changed.notify_all();
            while !state.1 {
                state = self.changed.wait(state).unwrap();
            }
            Ok(vec![7; 16])
        }
    }

    /// Two workers in reads held at a gate, two loads queued: dropping the loader waits for the
    /// two reads and starts neither queued load. The gate opens only once `drop` has set the stop
    /// flag (`drop` notifies the workers' condition variable after setting it, and the opener
    /// waits there for it), so the outcome does not depend on how fast any thread runs.
    #[test]
    fn dropping_the_loader_joins_its_workers_after_their_reads() {
        let gated = Arc::new(Gated::default());
        let loader = TileLoader::new(2);
        let source: Arc<dyn TileSource> = gated.clone();
        for token in 0..4u32 {
            loader.submit(LoadJob { token, source: Arc::clone(&source), tiles: vec![(0, 0, 0)] }).unwrap();
        }
        // Both workers are in a read: the other two loads stay queued, and no worker waits on
        // `work` (the opener below is its only waiter).
        gated.wait_for_reads(2);
        let shared = Arc::clone(&loader.shared);
        let opener = {
            let (gated, shared) = (Arc::clone(&gated), Arc::clone(&shared));
            std::thread::spawn(move || {
                let mut state = lock(&shared.state);
                while !state.stop {
                    state = shared.work.wait_locked(state);
                }
                drop(state);
                gated.open();
            })
        };
        drop(loader);
        opener.join().unwrap();
        let state = lock(&shared.state);
        assert_eq!(state.alive, 0, "drop returned once its workers had stopped");
        assert_eq!(
            (state.running, state.queue.len()),
            (0, 2),
            "the two reads ended; the queued loads stayed"
        );
        drop(state);
        assert_eq!(gated.reads(), 2, "the queued loads never started");
    }
}
