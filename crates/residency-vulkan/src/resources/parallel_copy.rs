//! Large host copies split among a few persistent threads: staging a host slice into the upload
//! ring (or a mapped device-local buffer) at the rate the link takes, which one thread's stores
//! do not reach. The threads are started once per process, on the first copy that wants them;
//! each copy blocks until every piece is done, so the pieces never outlive the borrowed slices.
//!
//! A caller never waits for a helper that has not taken a piece of its copy: a helper can be
//! held in another caller's streamed copy (waiting for that caller to publish ring space), and
//! that caller can be waiting for a lock this caller holds (`Queue::lock`, `submit_checked`'s
//! closure) — a wait for the helper to arrive would never end. The caller copies every piece
//! nobody took and waits only for the pieces taken (being copied: a helper waits for nothing
//! while it holds one); a helper that reaches the job later finds nothing left and touches only
//! the job's counters, never the caller's slices.

use crate::poison::{PoisonFree, PoisonFreeWait};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
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
/// [`SHARED_COPY_PIECE`] bytes until none is left; the caller then waits until every piece
/// taken is copied ([`Job::finish`]), not for the helpers to arrive.
struct Job {
    dst: *mut u8,
    src: *const u8,
    len: usize,
    /// Pieces of the copy.
    pieces: usize,
    /// The next piece to take (pieces past the end mean nothing is left).
    next: AtomicUsize,
    /// Pieces copied (or, after [`Job::finish`], never to be taken).
    copied: AtomicUsize,
    streaming: bool,
    /// Woken when the last piece is copied.
    lock: Mutex<()>,
    event: Condvar,
}

// SAFETY: a job's pointers name a `&mut [u8]` and a `&[u8]` that `copy_in_parallel` borrows
// until `Job::finish` returned: from then on no piece can be taken (`next` is past the last)
// and every piece taken before has been copied, so a helper that holds the job later only
// reads and bumps its counters. Pieces are handed out once each (an atomic counter), so each
// byte of `dst` is written by one thread only, and `src` is only read.
unsafe impl Send for Job {}
// SAFETY: as above: shared between threads, the job only hands out disjoint pieces.
unsafe impl Sync for Job {}

impl Job {
    /// Copies pieces until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::AcqRel);
            if i >= self.pieces {
                break;
            }
            let at = i * SHARED_COPY_PIECE;
            let len = (self.len - at).min(SHARED_COPY_PIECE);
            // SAFETY: `at + len ≤ self.len`: inside both ranges, which stay borrowed (dst
            // exclusively) until `finish` has seen this piece copied (`Job`'s contract); piece
            // `i` is taken by this thread alone (the counter hands each index out once).
            unsafe { copy_bytes(self.dst.add(at), self.src.add(at), len, self.streaming) };
            if self.copied.fetch_add(1, Ordering::AcqRel) + 1 == self.pieces {
                let _guard = self.lock.locked();
                self.event.notify_all();
            }
        }
    }

    /// The caller's end (also on an unwind): no piece is taken from now on, and returns once
    /// every piece taken before is copied. Never waits for a helper that took nothing.
    fn finish(&self) {
        let taken = self.next.swap(self.pieces, Ordering::AcqRel).min(self.pieces);
        // Pieces nobody took are never copied now: counted, so the wait below ends.
        self.copied.fetch_add(self.pieces - taken, Ordering::AcqRel);
        let mut guard = self.lock.locked();
        while self.copied.load(Ordering::Acquire) < self.pieces {
            guard = self.event.wait_locked(guard);
        }
    }
}

/// The helpers, each with a queue of its own (a job wakes exactly the helpers it is handed to).
struct Helpers {
    queues: Vec<Mutex<Sender<Task>>>,
}

fn helpers() -> &'static Helpers {
    static HELPERS: OnceLock<Helpers> = OnceLock::new();
    HELPERS.get_or_init(|| {
        let wanted = std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_sub(1);
        let mut queues = Vec::new();
        for i in 0..wanted.min(MAX_HELPERS) {
            let (tx, rx) = channel::<Task>();
            let started =
                std::thread::Builder::new().name(format!("residency copy {i}")).spawn(move || serve(&rx));
            if started.is_ok() {
                queues.push(Mutex::new(tx));
            }
        }
        Helpers { queues }
    })
}

fn serve(rx: &Receiver<Task>) {
    while let Ok(task) = rx.recv() {
        match task {
            Task::Shared(job) => job.work(),
            Task::Stream(job) => job.work(),
        }
    }
}

/// `dst.copy_from_slice(src)` by up to `threads` threads — the caller and persistent helpers,
/// at most one thread per [`PARALLEL_COPY_PIECE`] bytes. Every thread takes the next piece of
/// [`SHARED_COPY_PIECE`] bytes until none is left, so a helper woken late takes fewer pieces
/// instead of delaying the copy, and one that has not arrived when the caller runs out of pieces
/// (it may be held in another caller's streamed copy) is not waited for. With `streaming`, each
/// piece is copied with non-temporal stores where the CPU has them (see `copy_bytes`). Returns
/// once every byte is copied. Panics, like `copy_from_slice`, when the lengths differ.
pub(crate) fn copy_in_parallel(dst: &mut [u8], src: &[u8], threads: usize, streaming: bool) {
    assert_eq!(dst.len(), src.len(), "copy_in_parallel: lengths differ");
    let wanted = threads.min(src.len() / PARALLEL_COPY_PIECE).max(1);
    let queues = if wanted > 1 { &helpers().queues[..] } else { &[] };
    let helpers = queues.len().min(wanted - 1);
    if helpers == 0 {
        // SAFETY: `dst` and `src` are slices of equal length (checked above), and a `&mut`
        // slice overlaps no other slice.
        unsafe { copy_bytes(dst.as_mut_ptr(), src.as_ptr(), src.len(), streaming) };
        return;
    }
    let job = Arc::new(Job {
        dst: dst.as_mut_ptr(),
        src: src.as_ptr(),
        len: src.len(),
        pieces: src.len().div_ceil(SHARED_COPY_PIECE),
        next: AtomicUsize::new(0),
        copied: AtomicUsize::new(0),
        streaming,
        lock: Mutex::new(()),
        event: Condvar::new(),
    });
    /// Ends the job when dropped (also should the caller's part unwind): no piece is taken
    /// after it, and every piece taken is copied, so the borrows of `dst` and `src` outlive
    /// every helper's access.
    struct Joined<'j>(&'j Job);
    impl Drop for Joined<'_> {
        fn drop(&mut self) {
            self.0.finish();
        }
    }
    let joined = Joined(&job);
    for queue in &queues[..helpers] {
        // A helper gone (cannot happen while the process runs) takes nothing: the others and
        // the caller take its pieces.
        let _ = queue.locked().send(Task::Shared(Arc::clone(&job)));
    }
    job.work();
    drop(joined);
}

/// One streamed copy: `src` in chunks of `chunk` bytes, each chunk's destination published by
/// the caller when it has one (ring space), pieces of `piece` bytes taken by the helpers and the
/// caller from published chunks only.
struct StreamJob {
    src: *const u8,
    len: usize,
    chunk: usize,
    piece: usize,
    pieces_per_chunk: usize,
    total_pieces: usize,
    /// Each chunk's destination, set before `ready` moves past its pieces.
    bases: Vec<AtomicPtr<u8>>,
    /// Pieces that may be taken (those of published chunks).
    ready: AtomicUsize,
    /// The next piece to take.
    next: AtomicUsize,
    /// Pieces of each chunk not yet copied.
    left: Vec<AtomicUsize>,
    /// Pieces copied, of every chunk.
    copied: AtomicUsize,
    /// No more chunks will be published: helpers leave once the published pieces are taken.
    closed: AtomicBool,
    streaming: bool,
    /// Woken on every publication, chunk completion and close (checked under `lock`).
    lock: Mutex<()>,
    event: Condvar,
}

// SAFETY: `src` is a `&[u8]` that `stream_copy` borrows until every published piece is copied
// after the job closed (no piece is published after that, and only published pieces are
// taken), and each published destination is valid for exclusive writes of its chunk until then
// (`StreamCopy::publish`'s contract); a helper that holds the job later only reads its counters.
// Pieces are handed out once each (a compare-exchange on `next`), so each destination byte is
// written by one thread only.
unsafe impl Send for StreamJob {}
// SAFETY: as above.
unsafe impl Sync for StreamJob {}

impl StreamJob {
    fn chunk_len(&self, j: usize) -> usize {
        (self.len - j * self.chunk).min(self.chunk)
    }

    fn notify(&self) {
        let _guard = self.lock.locked();
        self.event.notify_all();
    }

    /// Takes the next published piece, if any.
    fn take(&self) -> Option<usize> {
        let mut p = self.next.load(Ordering::Relaxed);
        loop {
            if p >= self.ready.load(Ordering::Acquire) {
                return None;
            }
            match self.next.compare_exchange_weak(p, p + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(p),
                Err(now) => p = now,
            }
        }
    }

    /// Copies piece `p` (taken by this thread) and counts it done.
    fn copy(&self, p: usize) {
        let j = p / self.pieces_per_chunk;
        let at = (p % self.pieces_per_chunk) * self.piece;
        let len = (self.chunk_len(j) - at).min(self.piece);
        let base = self.bases[j].load(Ordering::Relaxed);
        // SAFETY: piece `p` is published (`take` saw `ready` past it with Acquire, after its
        // chunk's base was stored), so `base` is valid for writes of the chunk's length, which
        // `at + len` does not exceed, and `src` for reads of `len` bytes at `j·chunk + at` (inside
        // the slice); this thread alone took `p` (`StreamJob`'s contract).
        unsafe { copy_bytes(base.add(at), self.src.add(j * self.chunk + at), len, self.streaming) };
        // Counted before the chunk: a chunk's last piece wakes the waiters with this count
        // up to date (the close waits for it).
        self.copied.fetch_add(1, Ordering::AcqRel);
        if self.left[j].fetch_sub(1, Ordering::AcqRel) == 1 {
            self.notify();
        }
    }

    /// A helper's part: pieces until every piece is taken, or none is published and the caller
    /// closed the job.
    fn work(&self) {
        loop {
            if let Some(p) = self.take() {
                self.copy(p);
                continue;
            }
            let guard = self.lock.locked();
            let nothing_published = self.next.load(Ordering::Relaxed) >= self.ready.load(Ordering::Acquire);
            if self.next.load(Ordering::Relaxed) >= self.total_pieces
                || (nothing_published && self.closed.load(Ordering::Acquire))
            {
                return;
            }
            if nothing_published {
                drop(self.event.wait_locked(guard));
            }
        }
    }
}

/// The caller's handle on a streamed copy ([`stream_copy`]).
pub(crate) struct StreamCopy<'a> {
    job: &'a StreamJob,
    published: std::cell::Cell<usize>,
}

impl StreamCopy<'_> {
    /// How many chunks the copy has.
    pub(crate) fn chunks(&self) -> usize {
        self.job.bases.len()
    }

    /// Bytes of chunk `j`.
    pub(crate) fn chunk_len(&self, j: usize) -> usize {
        self.job.chunk_len(j)
    }

    /// Chunks published so far.
    pub(crate) fn published(&self) -> usize {
        self.published.get()
    }

    /// Publishes the next chunk's destination: from now on the threads copy its bytes there.
    ///
    /// # Safety
    /// `dst` is valid for writes of the chunk's length ([`StreamCopy::chunk_len`]), and nothing
    /// else reads or writes those bytes until [`stream_copy`] returns.
    pub(crate) unsafe fn publish(&self, dst: *mut u8) {
        let j = self.published.get();
        assert!(j < self.chunks(), "every chunk is published once");
        self.job.bases[j].store(dst, Ordering::Relaxed);
        self.published.set(j + 1);
        let ready = ((j + 1) * self.job.pieces_per_chunk).min(self.job.total_pieces);
        self.job.ready.store(ready, Ordering::Release);
        self.job.notify();
    }

    /// Whether every byte of chunk `j` (published) is copied.
    pub(crate) fn is_copied(&self, j: usize) -> bool {
        j < self.published.get() && self.job.left[j].load(Ordering::Acquire) == 0
    }

    /// Copies one published piece on the calling thread, or, with none left to take, waits until
    /// chunk `j` (published) is copied.
    pub(crate) fn help_or_wait(&self, j: usize) {
        // An unpublished chunk is never copied: waiting for one would never end.
        assert!(j < self.published.get(), "help_or_wait waits for a published chunk");
        if let Some(p) = self.job.take() {
            return self.job.copy(p);
        }
        let mut guard = self.job.lock.locked();
        while !self.is_copied(j) {
            guard = self.job.event.wait_locked(guard);
        }
    }
}

/// Copies `src` chunk by chunk (`chunk` bytes each, the last one shorter) into destinations the
/// caller publishes as it gets them (`drive` calls [`StreamCopy::publish`] for the chunks in
/// order), by up to `threads` threads: persistent helpers take pieces of at most
/// [`SHARED_COPY_PIECE`] bytes of published chunks as soon as they are published, and the
/// caller, between its own work (submitting the copied chunks), with
/// [`StreamCopy::help_or_wait`]. Returns once `drive` has returned (or panicked) and every
/// piece of a published chunk is copied; chunks not published are not copied.
///
/// A helper with nothing published to take waits in the job until the caller publishes more or
/// returns, so a copy handed to the helpers by another thread meanwhile gets no help from it; it
/// does not wait for it either (its caller copies what no helper took, see the module), so
/// `drive` may wait for a thread that makes such a copy (one holding a queue lock the
/// uploader's submission needs). Nor does this copy wait for helpers held elsewhere.
pub(crate) fn stream_copy<R>(
    src: &[u8],
    chunk: usize,
    threads: usize,
    streaming: bool,
    drive: impl FnOnce(&StreamCopy<'_>) -> R,
) -> R {
    let chunk = chunk.max(1);
    let chunks = src.len().div_ceil(chunk);
    let piece = SHARED_COPY_PIECE.min(chunk);
    let pieces_per_chunk = chunk.div_ceil(piece);
    let last = src.len() - chunks.saturating_sub(1) * chunk;
    let total_pieces = chunks.saturating_sub(1) * pieces_per_chunk + last.div_ceil(piece);
    let wanted = threads.min(src.len() / PARALLEL_COPY_PIECE).max(1);
    let queues = if wanted > 1 { &helpers().queues[..] } else { &[] };
    let helpers = queues.len().min(wanted - 1);
    let job = Arc::new(StreamJob {
        src: src.as_ptr(),
        len: src.len(),
        chunk,
        piece,
        pieces_per_chunk,
        total_pieces,
        bases: (0..chunks).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
        ready: AtomicUsize::new(0),
        next: AtomicUsize::new(0),
        left: (0..chunks)
            .map(|j| AtomicUsize::new(if j + 1 == chunks { last.div_ceil(piece) } else { pieces_per_chunk }))
            .collect(),
        copied: AtomicUsize::new(0),
        closed: AtomicBool::new(false),
        streaming,
        lock: Mutex::new(()),
        event: Condvar::new(),
    });
    /// Closes the job when dropped (on return and on a panic of `drive` alike): nothing is
    /// published after it, the published pieces nobody took are copied here, and it waits for
    /// those a helper took, so every published piece is copied before the borrows end. It never
    /// waits for a helper that took nothing.
    struct Closed<'j>(&'j StreamJob);
    impl Drop for Closed<'_> {
        fn drop(&mut self) {
            self.0.closed.store(true, Ordering::Release);
            self.0.notify();
            // The published pieces nobody took yet: copied here.
            while let Some(p) = self.0.take() {
                self.0.copy(p);
            }
            let ready = self.0.ready.load(Ordering::Acquire);
            let mut guard = self.0.lock.locked();
            while self.0.copied.load(Ordering::Acquire) < ready {
                guard = self.0.event.wait_locked(guard);
            }
        }
    }
    let closed = Closed(&job);
    for queue in &queues[..helpers] {
        // A helper gone (cannot happen while the process runs) takes nothing: the others and
        // the caller take its pieces.
        let _ = queue.locked().send(Task::Stream(Arc::clone(&job)));
    }
    let handle = StreamCopy { job: &job, published: std::cell::Cell::new(0) };
    let result = drive(&handle);
    drop(closed);
    result
}

/// What a helper is handed.
enum Task {
    /// A copy shared piece by piece ([`copy_in_parallel`]).
    Shared(Arc<Job>),
    /// A streamed copy ([`stream_copy`]).
    Stream(Arc<StreamJob>),
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
    fn a_streamed_copy_fills_every_published_chunk_and_nothing_else() {
        let len = 5 * PARALLEL_COPY_PIECE + 12_345;
        let src: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
        for chunk in [777, 4096, SHARED_COPY_PIECE + 1, PARALLEL_COPY_PIECE, 2 * PARALLEL_COPY_PIECE, len + 1]
        {
            for threads in [1, 2, 4] {
                for publish in [usize::MAX, 2] {
                    let chunks = len.div_ceil(chunk);
                    // Each chunk in a buffer of its own (a ring's scattered space), with a guard byte.
                    let mut outs: Vec<Vec<u8>> =
                        (0..chunks).map(|j| vec![0xee; (len - j * chunk).min(chunk) + 1]).collect();
                    let ptrs: Vec<*mut u8> = outs.iter_mut().map(|o| o.as_mut_ptr()).collect();
                    let published = stream_copy(&src, chunk, threads, chunk % 2 == 0, |s| {
                        assert_eq!(s.chunks(), chunks);
                        let mut waited = 0;
                        while s.published() < chunks.min(publish) {
                            // SAFETY: each buffer holds the chunk's length plus one and is not
                            // touched until `stream_copy` returns.
                            unsafe { s.publish(ptrs[s.published()]) };
                            if s.published() % 3 == 0 {
                                while !s.is_copied(waited) {
                                    s.help_or_wait(waited);
                                }
                                waited += 1;
                            }
                        }
                        s.published()
                    });
                    for (j, out) in outs.iter().enumerate() {
                        let n = out.len() - 1;
                        if j < published {
                            assert!(
                                out[..n] == src[j * chunk..j * chunk + n],
                                "chunk {chunk}, threads {threads}, #{j}"
                            );
                        } else {
                            assert!(out[..n].iter().all(|&b| b == 0xee), "an unpublished chunk is untouched");
                        }
                        assert_eq!(out[n], 0xee, "nothing past a chunk");
                    }
                }
            }
        }
    }

    #[test]
    fn streamed_and_shared_copies_from_several_callers_at_once_do_not_mix() {
        std::thread::scope(|scope| {
            for t in 0..4u8 {
                scope.spawn(move || {
                    let src = vec![t + 1; 3 * PARALLEL_COPY_PIECE + 7];
                    for round in 0..6 {
                        let mut dst = vec![0u8; src.len()];
                        if (round + t) % 2 == 0 {
                            copy_in_parallel(&mut dst, &src, 4, false);
                        } else {
                            let chunk = PARALLEL_COPY_PIECE / 2 + 1;
                            let base = dst.as_mut_ptr();
                            stream_copy(&src, chunk, 4, true, |s| {
                                // Published one at a time, each waited for: the helpers wait
                                // in the job between publications.
                                for j in 0..s.chunks() {
                                    // SAFETY: chunk `j` of `dst` (same length as `src`), not
                                    // touched until `stream_copy` returns.
                                    unsafe { s.publish(base.add(j * chunk)) };
                                    while !s.is_copied(j) {
                                        s.help_or_wait(j);
                                    }
                                }
                            });
                        }
                        assert!(dst == src);
                    }
                });
            }
        });
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
