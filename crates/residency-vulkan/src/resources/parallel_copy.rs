//! Large host copies split among a few persistent threads: staging a host slice into the upload
//! ring (or a mapped device-local buffer) at the rate the link takes, which one thread's stores
//! do not reach. The threads are started once per process, on the first copy that wants them;
//! each copy blocks until every piece is done, so the pieces never outlive the borrowed slices.

use crate::poison::{PoisonFree, PoisonFreeWait};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// Below this many bytes per thread a copy stays on the calling thread.
pub const PARALLEL_COPY_PIECE: usize = 1 << 20;

/// The most helper threads the process starts (a copy uses at most this many plus its caller).
const MAX_HELPERS: usize = 15;

/// One piece: copy `len` bytes from `src` to `dst`, then count down `done`.
struct Piece {
    dst: *mut u8,
    src: *const u8,
    len: usize,
    done: Arc<Latch>,
}

// SAFETY: a piece's pointers name disjoint bytes of a `&mut [u8]` and a `&[u8]` that
// `copy_in_parallel` borrows until every piece has counted down its latch, so moving the piece to
// a helper thread hands it exclusive (dst) and shared (src) access for that time only.
unsafe impl Send for Piece {}

/// Counts the pieces still being copied.
struct Latch {
    left: Mutex<usize>,
    zero: Condvar,
}

impl Latch {
    fn count_down(&self) {
        let mut left = self.left.locked();
        *left -= 1;
        if *left == 0 {
            self.zero.notify_all();
        }
    }

    fn wait(&self) {
        let mut left = self.left.locked();
        while *left > 0 {
            left = self.zero.wait_locked(left);
        }
    }
}

/// The helpers, each with a queue of its own (a piece wakes exactly the helper that copies it).
struct Helpers {
    queues: Vec<Mutex<Sender<Piece>>>,
}

fn helpers() -> &'static Helpers {
    static HELPERS: OnceLock<Helpers> = OnceLock::new();
    HELPERS.get_or_init(|| {
        let wanted = std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_sub(1);
        let mut queues = Vec::new();
        for i in 0..wanted.min(MAX_HELPERS) {
            let (tx, rx) = channel::<Piece>();
            let started =
                std::thread::Builder::new().name(format!("residency copy {i}")).spawn(move || serve(&rx));
            if started.is_ok() {
                queues.push(Mutex::new(tx));
            }
        }
        Helpers { queues }
    })
}

fn serve(rx: &Receiver<Piece>) {
    while let Ok(piece) = rx.recv() {
        // SAFETY: `Piece`'s contract: `dst` and `src` name `len` valid, non-overlapping bytes that
        // stay borrowed (dst exclusively) until this piece counts down its latch, just below.
        unsafe { std::ptr::copy_nonoverlapping(piece.src, piece.dst, piece.len) };
        piece.done.count_down();
    }
}

/// `dst.copy_from_slice(src)` by up to `threads` threads (the caller and persistent helpers),
/// each taking one contiguous piece of at least [`PARALLEL_COPY_PIECE`] bytes. Panics, like
/// `copy_from_slice`, when the lengths differ.
pub(crate) fn copy_in_parallel(dst: &mut [u8], src: &[u8], threads: usize) {
    assert_eq!(dst.len(), src.len(), "copy_in_parallel: lengths differ");
    let wanted = threads.min(src.len() / PARALLEL_COPY_PIECE).max(1);
    let helpers = if wanted > 1 { helpers() } else { return dst.copy_from_slice(src) };
    let threads = wanted.min(helpers.queues.len() + 1);
    if threads == 1 {
        return dst.copy_from_slice(src);
    }
    // Pieces a multiple of 4 KiB, so every thread starts on its own pages.
    let piece = src.len().div_ceil(threads).next_multiple_of(4096);
    let mut pieces = dst.chunks_mut(piece).zip(src.chunks(piece));
    let (first_dst, first_src) = pieces.next().expect("a non-empty copy has a first piece");
    let rest: Vec<_> = pieces.collect();
    // `piece ≥ len / threads`: at most `threads − 1` pieces beside the first, one per helper, so
    // every piece below is handed out and the latch reaches zero.
    assert!(rest.len() < threads, "one helper per piece");
    let done = Arc::new(Latch { left: Mutex::new(rest.len()), zero: Condvar::new() });
    for ((d, s), queue) in rest.into_iter().zip(&helpers.queues) {
        let job = Piece { dst: d.as_mut_ptr(), src: s.as_ptr(), len: d.len(), done: Arc::clone(&done) };
        if let Err(failed) = queue.locked().send(job) {
            // Its helper is gone (cannot happen while the process runs): copy the piece here.
            let job = failed.0;
            // SAFETY: as in `serve`: the piece's bytes are borrowed for this call.
            unsafe { std::ptr::copy_nonoverlapping(job.src, job.dst, job.len) };
            job.done.count_down();
        }
    }
    first_dst.copy_from_slice(first_src);
    // Every piece's bytes stay borrowed until here: the helpers are done with them on return.
    done.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_slice_for_every_thread_count() {
        for len in [0, 1, PARALLEL_COPY_PIECE - 1, 3 * PARALLEL_COPY_PIECE + 4097, 9 * PARALLEL_COPY_PIECE] {
            let src: Vec<u8> = (0..len).map(|i| (i * 31 % 253) as u8).collect();
            for threads in [1, 2, 3, 8, 64] {
                let mut dst = vec![0u8; len];
                copy_in_parallel(&mut dst, &src, threads);
                assert!(dst == src, "len {len}, threads {threads}");
            }
        }
    }

    #[test]
    fn copies_from_several_callers_at_once_do_not_mix() {
        std::thread::scope(|scope| {
            for t in 0..4u8 {
                scope.spawn(move || {
                    let src = vec![t + 1; 4 * PARALLEL_COPY_PIECE + 5];
                    for _ in 0..10 {
                        let mut dst = vec![0u8; src.len()];
                        copy_in_parallel(&mut dst, &src, 4);
                        assert!(dst == src);
                    }
                });
            }
        });
    }
}
