//! Tile loads on worker threads that overlap frames.
//!
//! A frame hands the [`TileLoader`] the loads the manager started ([`TileLoader::submit`]: a token
//! of the caller's, the source, the tiles to read) and takes back, without waiting, the ones that
//! have finished ([`TileLoader::poll`]); a load no longer wanted is cancelled
//! ([`TileLoader::cancel`]): a queued one never runs, a running one's result is dropped. Nothing is
//! joined within a frame. Dropping the loader stops the workers after the reads they are in.

use super::source::{SourceError, TileSource};
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

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
    /// `wait_idle` waits here for the queue to drain.
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
    running: usize,
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
    /// A loader with `workers` threads (at least one).
    pub fn new(workers: usize) -> TileLoader<T> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                done: Vec::new(),
                pending: HashMap::new(),
                next_serial: 1,
                running: 0,
                stop: false,
            }),
            work: Condvar::new(),
            idle: Condvar::new(),
        });
        let workers = (0..workers.max(1))
            .map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("residency tile loader {i}"))
                    .spawn(move || work(&shared))
                    .expect("spawning a tile loader thread")
            })
            .collect();
        TileLoader { shared, workers }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
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
    pub fn wait_idle(&self) {
        let mut state = self.state();
        while !state.queue.is_empty() || state.running > 0 {
            state = self.shared.idle.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl<T: Clone + Eq + Hash + Send + 'static> Drop for TileLoader<T> {
    fn drop(&mut self) {
        self.state().stop = true;
        self.shared.work.notify_all();
        for worker in self.workers.drain(..) {
            // A worker that panicked (a source's bug) has already stopped.
            let _ = worker.join();
        }
    }
}

fn work<T: Clone + Eq + Hash + Send>(shared: &Shared<T>) {
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if state.stop {
            return;
        }
        let Some((serial, job)) = state.queue.pop_front() else {
            state = shared.work.wait(state).unwrap_or_else(|e| e.into_inner());
            continue;
        };
        state.running += 1;
        drop(state);
        let result: Result<Vec<Vec<u8>>, SourceError> =
            job.tiles.iter().map(|&(mip, x, y)| job.source.read_tile(mip, x, y)).collect();
        state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        state.running -= 1;
        if state.pending.get(&job.token) == Some(&serial) {
            state.done.push(LoadDone { token: job.token, result });
        }
        shared.idle.notify_all();
    }
}
