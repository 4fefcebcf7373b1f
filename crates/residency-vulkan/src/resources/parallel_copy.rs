//! Large host copies split among a few persistent threads: staging a host slice into the upload
//! ring (or a mapped device-local buffer) at the rate the link takes, which one thread's stores
//! do not reach. The threads are started once per process, on the first copy that wants them;
//! each copy blocks until every piece is done, so the pieces never outlive the borrowed slices.

use crate::poison::{PoisonFree, PoisonFreeWait};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// Below this many bytes per thread a copy stays on the calling thread.
pub const PARALLEL_COPY_PIECE: usize = 1 << 20;

/// The most helper threads the process starts (a copy uses at most this many plus its caller).
const MAX_HELPERS: usize = 15;

/// Below this many bytes a streaming copy is a plain one (the fence costs more than it saves).
const STREAMING_MIN: usize = 4096;

/// Copies `len` bytes from `src` to `dst`: with `streaming`, non-temporal stores where the CPU
/// has them (x86-64: 32-byte AVX stores where detected, else SSE2's 16-byte ones, then a store
/// fence so the bytes are in memory before the piece is counted done), bypassing the cache: no
/// read of the destination's lines before they are written, one memory write per byte instead of
/// a read and a write. Elsewhere, and for short copies, `copy_nonoverlapping`.
///
/// # Safety
/// `src` is valid for reads and `dst` for writes of `len` bytes, and the two do not overlap.
unsafe fn copy_bytes(dst: *mut u8, src: *const u8, len: usize, streaming: bool) {
    #[cfg(target_arch = "x86_64")]
    if streaming && len >= STREAMING_MIN {
        if std::arch::is_x86_feature_detected!("avx") {
            // SAFETY: the CPU has AVX (detected just above); the caller's contract covers the
            // pointers.
            unsafe { stream::copy_avx(dst, src, len) };
        } else {
            // SAFETY: SSE2 is part of x86-64; the caller's contract covers the pointers.
            unsafe { stream::copy_sse2(dst, src, len) };
        }
        return;
    }
    let _ = streaming;
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

#[cfg(target_arch = "x86_64")]
mod stream {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_loadu_si256, _mm256_stream_si256, _mm_loadu_si128, _mm_sfence,
        _mm_stream_si128,
    };
    use std::ptr::copy_nonoverlapping;

    /// Non-temporal copy with 32-byte AVX stores.
    ///
    /// # Safety
    /// The CPU has AVX; `src` is valid for reads and `dst` for writes of `len` bytes, and the two
    /// do not overlap.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn copy_avx(dst: *mut u8, src: *const u8, len: usize) {
        // Plain stores up to the first 32-byte boundary of `dst` (streaming stores need it).
        let head = dst.align_offset(32).min(len);
        // SAFETY: `head ≤ len`: inside both ranges (the caller's contract).
        unsafe { copy_nonoverlapping(src, dst, head) };
        let mut at = head;
        while at + 128 <= len {
            // SAFETY: `at + 128 ≤ len`: four 32-byte loads inside `src` (unaligned loads) and four
            // stores inside `dst`, 32-byte aligned (`dst + head` is, and `at − head` is a multiple
            // of 32); AVX is enabled for this function.
            unsafe {
                let s = src.add(at).cast::<__m256i>();
                let d = dst.add(at).cast::<__m256i>();
                let (a, b) = (_mm256_loadu_si256(s), _mm256_loadu_si256(s.add(1)));
                let (c, e) = (_mm256_loadu_si256(s.add(2)), _mm256_loadu_si256(s.add(3)));
                _mm256_stream_si256(d, a);
                _mm256_stream_si256(d.add(1), b);
                _mm256_stream_si256(d.add(2), c);
                _mm256_stream_si256(d.add(3), e);
            }
            at += 128;
        }
        // SAFETY: the rest, `len − at` bytes, lies inside both ranges.
        unsafe { copy_nonoverlapping(src.add(at), dst.add(at), len - at) };
        // Streaming stores are weakly ordered: in memory before the copy counts as done.
        _mm_sfence();
    }

    /// Non-temporal copy with SSE2's 16-byte stores.
    ///
    /// # Safety
    /// The CPU has SSE2 (every x86-64 does); `src` is valid for reads and `dst` for writes of
    /// `len` bytes, and the two do not overlap.
    #[target_feature(enable = "sse2")]
    pub(super) unsafe fn copy_sse2(dst: *mut u8, src: *const u8, len: usize) {
        let head = dst.align_offset(16).min(len);
        // SAFETY: `head ≤ len`: inside both ranges (the caller's contract).
        unsafe { copy_nonoverlapping(src, dst, head) };
        let mut at = head;
        while at + 64 <= len {
            // SAFETY: `at + 64 ≤ len`: four 16-byte loads inside `src` (unaligned loads) and four
            // stores inside `dst`, 16-byte aligned (`dst + head` is, and `at − head` is a multiple
            // of 16); SSE2 is enabled for this function.
            unsafe {
                let s = src.add(at).cast::<__m128i>();
                let d = dst.add(at).cast::<__m128i>();
                let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
                let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
                _mm_stream_si128(d, a);
                _mm_stream_si128(d.add(1), b);
                _mm_stream_si128(d.add(2), c);
                _mm_stream_si128(d.add(3), e);
            }
            at += 64;
        }
        // SAFETY: the rest, `len − at` bytes, lies inside both ranges.
        unsafe { copy_nonoverlapping(src.add(at), dst.add(at), len - at) };
        // Streaming stores are weakly ordered: in memory before the copy counts as done.
        _mm_sfence();
    }
}

/// Bytes one thread takes at a time from a shared copy (a multiple of 4 KiB, so threads start on
/// pages of their own): small enough that a thread that starts late (woken after the others, or
/// the caller busy submitting) only takes fewer pieces instead of holding up the copy, large
/// enough that taking one (an atomic add) costs nothing beside its copy.
pub const SHARED_COPY_PIECE: usize = 256 << 10;

/// One copy shared by the caller and some helpers: each takes the next piece of
/// [`SHARED_COPY_PIECE`] bytes until none is left, then counts down `done` (a helper) or waits
/// for it (the caller).
struct Job {
    dst: *mut u8,
    src: *const u8,
    len: usize,
    /// The next piece to take (pieces past the end mean nothing is left).
    next: AtomicUsize,
    streaming: bool,
    /// Helpers still working on the job.
    done: Latch,
}

// SAFETY: a job's pointers name a `&mut [u8]` and a `&[u8]` that `copy_in_parallel_while`
// borrows until every helper handed the job has counted down its latch; pieces are handed out
// once each (an atomic counter), so each byte of `dst` is written by one thread only, and `src`
// is only read.
unsafe impl Send for Job {}
// SAFETY: as above: shared between threads, the job only hands out disjoint pieces.
unsafe impl Sync for Job {}

impl Job {
    /// Copies pieces until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let at = i.saturating_mul(SHARED_COPY_PIECE);
            if at >= self.len {
                break;
            }
            let len = (self.len - at).min(SHARED_COPY_PIECE);
            // SAFETY: `at + len ≤ self.len`: inside both ranges, which stay borrowed (dst
            // exclusively) until every helper has counted down (`Job`'s contract); piece `i` is
            // taken by this thread alone (the counter hands each index out once).
            unsafe { copy_bytes(self.dst.add(at), self.src.add(at), len, self.streaming) };
        }
    }
}

/// Counts the helpers still copying.
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

/// The helpers, each with a queue of its own (a job wakes exactly the helpers it is handed to).
struct Helpers {
    queues: Vec<Mutex<Sender<Arc<Job>>>>,
}

fn helpers() -> &'static Helpers {
    static HELPERS: OnceLock<Helpers> = OnceLock::new();
    HELPERS.get_or_init(|| {
        let wanted = std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_sub(1);
        let mut queues = Vec::new();
        for i in 0..wanted.min(MAX_HELPERS) {
            let (tx, rx) = channel::<Arc<Job>>();
            let started =
                std::thread::Builder::new().name(format!("residency copy {i}")).spawn(move || serve(&rx));
            if started.is_ok() {
                queues.push(Mutex::new(tx));
            }
        }
        Helpers { queues }
    })
}

fn serve(rx: &Receiver<Arc<Job>>) {
    while let Ok(job) = rx.recv() {
        job.work();
        job.done.count_down();
    }
}

/// `dst.copy_from_slice(src)` by up to `threads` threads (the caller and persistent helpers),
/// each taking pieces of [`SHARED_COPY_PIECE`] bytes in turn (see [`copy_in_parallel_while`]).
/// Panics, like `copy_from_slice`, when the lengths differ.
pub(crate) fn copy_in_parallel(dst: &mut [u8], src: &[u8], threads: usize, streaming: bool) {
    copy_in_parallel_while(dst, src, threads, streaming, || ());
}

/// `dst.copy_from_slice(src)` by up to `threads` threads — the caller and persistent helpers,
/// at most one thread per [`PARALLEL_COPY_PIECE`] bytes — running `meanwhile` on the calling
/// thread once the helpers have the copy, before the caller joins it (the uploader submits the
/// previous chunk's copies there while this chunk is staged). Every thread takes the next piece
/// of [`SHARED_COPY_PIECE`] bytes until none is left, so a helper woken late, or the caller
/// still in `meanwhile`, takes fewer pieces instead of delaying the copy. With `streaming`, each
/// piece is copied with non-temporal stores where the CPU has them (see `copy_bytes`). Returns
/// once every byte is copied (also when `meanwhile` panics: the helpers' writes end before the
/// borrow does). Panics, like `copy_from_slice`, when the lengths differ.
pub(crate) fn copy_in_parallel_while<R>(
    dst: &mut [u8],
    src: &[u8],
    threads: usize,
    streaming: bool,
    meanwhile: impl FnOnce() -> R,
) -> R {
    assert_eq!(dst.len(), src.len(), "copy_in_parallel: lengths differ");
    let wanted = threads.min(src.len() / PARALLEL_COPY_PIECE).max(1);
    let queues = if wanted > 1 { &helpers().queues[..] } else { &[] };
    let helpers = queues.len().min(wanted - 1);
    if helpers == 0 {
        let result = meanwhile();
        // SAFETY: `dst` and `src` are slices of equal length (checked above), and a `&mut`
        // slice overlaps no other slice.
        unsafe { copy_bytes(dst.as_mut_ptr(), src.as_ptr(), src.len(), streaming) };
        return result;
    }
    let job = Arc::new(Job {
        dst: dst.as_mut_ptr(),
        src: src.as_ptr(),
        len: src.len(),
        next: AtomicUsize::new(0),
        streaming,
        done: Latch { left: Mutex::new(helpers), zero: Condvar::new() },
    });
    /// Waits for the helpers when dropped: on return and on a panic of `meanwhile` alike, so the
    /// borrows of `dst` and `src` outlive every helper's access.
    struct Joined<'j>(&'j Job);
    impl Drop for Joined<'_> {
        fn drop(&mut self) {
            self.0.done.wait();
        }
    }
    let joined = Joined(&job);
    for queue in &queues[..helpers] {
        if let Err(failed) = queue.locked().send(Arc::clone(&job)) {
            // Its helper is gone (cannot happen while the process runs): count it done; the
            // others and the caller take its pieces.
            failed.0.done.count_down();
        }
    }
    let result = meanwhile();
    job.work();
    drop(joined);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_slice_for_every_thread_count() {
        for len in [0, 1, PARALLEL_COPY_PIECE - 1, 3 * PARALLEL_COPY_PIECE + 4097, 9 * PARALLEL_COPY_PIECE] {
            let src: Vec<u8> = (0..len).map(|i| (i * 31 % 253) as u8).collect();
            for threads in [1, 2, 3, 8, 64] {
                for streaming in [false, true] {
                    let mut dst = vec![0u8; len];
                    copy_in_parallel(&mut dst, &src, threads, streaming);
                    assert!(dst == src, "len {len}, threads {threads}, streaming {streaming}");
                }
            }
        }
    }

    #[test]
    fn streaming_copies_are_exact_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..3 * STREAMING_MIN + 300).map(|i| (i * 7 % 251) as u8).collect();
        for shift in [0, 1, 15, 16, 17, 31, 33] {
            for len in [STREAMING_MIN - 1, STREAMING_MIN, STREAMING_MIN + 1, 2 * STREAMING_MIN + 77] {
                let mut dst = vec![0xeeu8; len + 64];
                copy_in_parallel(&mut dst[shift..shift + len], &src[3..3 + len], 1, true);
                assert!(dst[shift..shift + len] == src[3..3 + len], "shift {shift}, len {len}");
                assert!(dst[..shift].iter().chain(&dst[shift + len..]).all(|&b| b == 0xee), "nothing else");
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
                        copy_in_parallel(&mut dst, &src, 4, t % 2 == 0);
                        assert!(dst == src);
                    }
                });
            }
        });
    }
}
