//! The streamer's bind worker ([`StreamerDesc::bind_worker`](super::StreamerDesc::bind_worker),
//! hardware path): one thread that takes a frame's per-tile GPU work off the frame thread, as
//! SamplerFeedbackStreaming's update threads do.
//!
//! A frame's manager tick ([`Streamer::begin_frame`](super::Streamer::begin_frame)) plans its
//! binds and unbinds on the frame thread ([`TileHeaps::prepare_bind`]: checks, heaps allocated,
//! the coalesced bind entries) and lists where each loaded tile goes; that [`Job`] is handed to
//! the worker at the frame's `end_frame` (or `abandon_frame`), after the frame's recording took
//! the uploader's copies and with the frame among the frames an unbind waits for. The worker makes
//! the one `vkQueueBindSparse` (under the sparse queue's lock, as every sparse submission) and
//! then stages the tiles' texels in the streamer's uploader (after the bind: the uploader's copies
//! wait for the binds submitted before them). The next `begin_frame` (or any call that needs the
//! GPU caught up with the manager) joins the job and publishes it: the bind becomes what the next
//! recorded frame waits for, and the min-LOD map updates are staged, so a tile becomes visible to
//! shaders one frame after its tick, in the same frame as its texels and after its bind.
//!
//! At most one job is out at a time, so the worker never races the frame thread for the heaps,
//! the images or the uploader's queue: what the worker touches, the frame thread leaves alone
//! until it has joined the job (every `&mut` call that binds, stages or releases heaps joins
//! first). A failed bind or staging comes back as the job's error and is returned by the call
//! that joins it, the tick then kept as the streamer's unapplied tick (applied again, on the
//! frame thread, first thing at the next call). Dropping the streamer joins the worker; the GPU
//! work it submitted retires through the device as any bind and copy does. A thread that holds
//! a queue's lock never waits for the worker (which takes the queues' locks): a call that would
//! join is refused with [`VulkanError::Reentrant`](crate::VulkanError::Reentrant), the job left
//! out, and a streamer dropped there leaves the thread to finish the job, which owns what it
//! binds and stages.

use super::texture::TileWrite;
use super::StreamError;
use crate::device::life::GpuUse;
use crate::sparse::{BindStats, PreparedBind, SparseError};
use crate::sync::upload::Uploader;
use residency_core::streaming::TileKey;
use std::sync::mpsc;
use std::sync::Arc;

/// A loaded unit's tiles, their texels and where they go.
pub(super) struct UnitUpload {
    pub(super) key: TileKey,
    pub(super) tiles: Vec<(u32, u32, u32)>,
    pub(super) data: Vec<Vec<u8>>,
    pub(super) writes: Vec<TileWrite>,
}

/// One tick's per-tile work: its bind (`None`: nothing to bind) and its units' texels.
pub(super) struct Job {
    pub(super) bind: Option<PreparedBind>,
    /// The frames an unbind waits for on the GPU (set when the job is handed out).
    pub(super) waits: Vec<GpuUse>,
    pub(super) units: Vec<UnitUpload>,
}

/// What a job did.
pub(super) struct Done {
    /// The bind's outcome (`None`: nothing to bind).
    pub(super) bound: Option<Result<(BindStats, Option<GpuUse>), SparseError>>,
    /// The units not staged: all of them when the bind failed, the rest when staging failed.
    pub(super) left: Vec<UnitUpload>,
    /// Why staging stopped.
    pub(super) staging: Option<StreamError>,
    /// Tiles staged.
    pub(super) tiles_staged: u64,
}

impl Job {
    /// Whether it unbinds anything (then it waits for the frames in flight).
    pub(super) fn unbinds(&self) -> bool {
        self.bind.as_ref().is_some_and(PreparedBind::unbinds)
    }

    /// The bind, then (if it succeeded) the staging: on the worker, or inline.
    pub(super) fn run(self, uploader: &Uploader) -> Done {
        let Job { bind, waits, units } = self;
        let bound = bind.map(|b| b.submit(&waits));
        if matches!(bound, Some(Err(_))) {
            // Nothing bound: nothing may be copied into the tiles either.
            return Done { bound, left: units, staging: None, tiles_staged: 0 };
        }
        let mut units = units.into_iter();
        let mut tiles_staged = 0;
        while let Some(unit) = units.next() {
            let staged =
                unit.writes.iter().zip(&unit.data).try_for_each(|(w, texels)| w.write(uploader, texels));
            if let Err(e) = staged {
                // The unit again in full (its copies already queued are made again: harmless).
                let left = std::iter::once(unit).chain(units).collect();
                return Done { bound, left, staging: Some(e), tiles_staged };
            }
            tiles_staged += unit.writes.len() as u64;
        }
        Done { bound, left: Vec::new(), staging: None, tiles_staged }
    }
}

/// The worker thread and its two channels; at most one job out.
pub(super) struct BindWorker {
    jobs: Option<mpsc::Sender<Job>>,
    done: mpsc::Receiver<Done>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The uploader the jobs stage in (the streamer's).
    uploader: Arc<Uploader>,
    /// A job is out (sent, not joined).
    out: bool,
}

impl std::fmt::Debug for BindWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindWorker").field("out", &self.out).finish_non_exhaustive()
    }
}

impl BindWorker {
    /// Starts the thread.
    pub(super) fn new(name: &str, uploader: Arc<Uploader>) -> Result<BindWorker, StreamError> {
        let (jobs, jobs_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel::<Done>();
        let staging = Arc::clone(&uploader);
        let thread = std::thread::Builder::new()
            .name(format!("{name} binds"))
            .spawn(move || {
                // Ends when the streamer drops its sender (or stops listening).
                while let Ok(job) = jobs_rx.recv() {
                    if done_tx.send(job.run(&staging)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| StreamError::Internal(format!("starting the bind worker: {e}")))?;
        Ok(BindWorker { jobs: Some(jobs), done, thread: Some(thread), uploader, out: false })
    }

    /// Hands `job` to the thread; a thread that is gone (it panicked) gets none: the job runs
    /// here, now, and its outcome is what the next [`BindWorker::join`] returns.
    #[allow(clippy::result_large_err, reason = "once a frame, moved once: no hot path to shrink")]
    pub(super) fn send(&mut self, job: Job) -> Result<(), Done> {
        debug_assert!(!self.out, "one job out at a time");
        match self.jobs.as_ref().map(|tx| tx.send(job)) {
            Some(Ok(())) => {
                self.out = true;
                Ok(())
            }
            Some(Err(mpsc::SendError(job))) => Err(job.run(&self.uploader)),
            None => unreachable!("the sender lives until drop"),
        }
    }

    /// Waits for the job out, if any (`None`: none). A worker that died with it (a panic) is
    /// an internal error. The caller checks [`BindWorker::blocked_here`] first.
    pub(super) fn join(&mut self) -> Option<Result<Done, StreamError>> {
        if !std::mem::take(&mut self.out) {
            return None;
        }
        Some(self.done.recv().map_err(|_| StreamError::Internal("the bind worker stopped with a job".into())))
    }

    /// Whether joining the job out would wait forever: this thread holds the lock of one of the
    /// device's queues ([`Queue::lock`](crate::device::Queue::lock), or inside `submit_checked`),
    /// which the job's `vkQueueBindSparse` and the uploader's submissions take on the worker.
    pub(super) fn blocked_here(&self) -> bool {
        self.out && self.uploader.device().queue_locked_here()
    }
}

/// What a call that must join the bind worker's job answers on a thread that holds a queue lock.
pub(super) const JOIN_REENTRANT: &str =
    "a queue is locked by this thread, and the streamer's bind worker needs it to finish the job \
     this call waits for (a streamer call while holding `Queue::lock` or inside `submit_checked`)";

impl Drop for BindWorker {
    fn drop(&mut self) {
        if self.blocked_here() {
            // Joining would wait for this thread's own lock: the thread is left to finish the
            // job (which owns its images, heaps and uploader) and end with its channel.
            self.jobs = None;
            drop(self.thread.take());
            return;
        }
        // The job out finishes (its bind and copies are the device's to retire), then the
        // thread ends with its channel.
        let _ = self.join();
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
