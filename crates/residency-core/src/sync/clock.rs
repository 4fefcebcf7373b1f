//! A GPU clock's progress as the host caches it, read and advanced from any thread without a lock.
//!
//! A clock is a timeline semaphore that submissions signal with values that grow by one per
//! submission. [`ClockCache`] keeps two numbers beside it: the value the latest submission signals
//! (`submitted`, written only by the thread that holds the submitting queue's lock) and the highest
//! value seen completed (`completed`, raised by any thread that learns of progress: a fence that
//! signalled, a semaphore read, a wait that returned). Readers take the cached value when it
//! covers every submission and read the semaphore only otherwise, so asking "is this done?" for
//! work that completed long ago costs two atomic loads.
//!
//! What it guarantees, under any interleaving of threads (the `loom` model in
//! `crates/residency-core/tests/loom_clock.rs` explores them):
//! - `completed` never exceeds what the clock reached, given that every value passed to
//!   [`ClockCache::note_completed`] and every value `read` returns was reached;
//! - `completed`, and so every [`ClockCache::value`] a thread sees, never goes backwards
//!   (`fetch_max`, not a load and a store);
//! - [`ClockCache::all_seen_completed`] is true only when the clock reached every value submitted
//!   before the call began.
//!
//! The counters are generic ([`Counter`]) so that the model runs the same code on `loom`'s
//! atomics; the backend uses [`std::sync::atomic::AtomicU64`].

use std::sync::atomic::{AtomicU64, Ordering};

/// The atomic operations [`ClockCache`] uses (implemented for [`AtomicU64`]).
pub trait Counter {
    /// A counter holding `value`.
    fn new(value: u64) -> Self;
    /// Atomic load.
    fn load(&self, order: Ordering) -> u64;
    /// Atomic store.
    fn store(&self, value: u64, order: Ordering);
    /// Atomic maximum; returns the previous value.
    fn fetch_max(&self, value: u64, order: Ordering) -> u64;
}

// `#[inline]`: one instruction each, called on every resource's release from other crates.
impl Counter for AtomicU64 {
    #[inline]
    fn new(value: u64) -> Self {
        AtomicU64::new(value)
    }
    #[inline]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    #[inline]
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
    #[inline]
    fn fetch_max(&self, value: u64, order: Ordering) -> u64 {
        AtomicU64::fetch_max(self, value, order)
    }
}

/// The host's view of one GPU clock: the value the latest submission signals and the highest value
/// seen completed, read and raised by any thread without a lock. Under any interleaving it never
/// claims more than the clock reached (given that what it is told was reached), what a thread sees
/// of it never goes backwards, and [`ClockCache::all_seen_completed`] holds only when the clock
/// reached every value published before the call (the `loom` model in
/// `crates/residency-core/tests/loom_clock.rs`).
#[derive(Debug)]
pub struct ClockCache<A = AtomicU64> {
    submitted: A,
    completed: A,
}

impl<A: Counter> Default for ClockCache<A> {
    fn default() -> Self {
        ClockCache { submitted: A::new(0), completed: A::new(0) }
    }
}

impl<A: Counter> ClockCache<A> {
    /// A clock at 0, nothing submitted.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value the next submission signals. Call with the submitting queue locked (every
    /// submission that signals the clock holds that lock), and [`ClockCache::publish`] once the
    /// submission succeeded, still under the lock: until then nobody waits for the value, so a
    /// failed submission leaves nothing waiting forever.
    pub fn next(&self) -> u64 {
        self.submitted.load(Ordering::Acquire) + 1
    }

    /// The submission signalling `value` (from [`ClockCache::next`]) was made.
    pub fn publish(&self, value: u64) {
        self.submitted.store(value, Ordering::Release);
    }

    /// The value the latest published submission signals (0: none).
    pub fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::Acquire)
    }

    /// The highest value seen completed (without asking the clock).
    pub fn seen_completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// The clock reached `value` (a fence signalled, a wait returned, the semaphore was read).
    /// Never past what was published: a value nobody published is capped at the latest
    /// published one (a completion seen on a fence says nothing about later submissions).
    pub fn note_completed(&self, value: u64) {
        let value = value.min(self.submitted.load(Ordering::Acquire));
        self.completed.fetch_max(value, Ordering::AcqRel);
    }

    /// Whether every submission published before this call was already seen completed (two
    /// atomic loads; `false` only means "ask the clock").
    pub fn all_seen_completed(&self) -> bool {
        let submitted = self.submitted.load(Ordering::Acquire);
        submitted == 0 || self.completed.load(Ordering::Acquire) >= submitted
    }

    /// The value the clock reached: the cached one when it covers the latest submission, else
    /// what `read` returns (the semaphore's counter), noted; when `read` fails, the cached one.
    pub fn value(&self, read: impl FnOnce() -> Option<u64>) -> u64 {
        let seen = self.completed.load(Ordering::Acquire);
        if seen >= self.submitted.load(Ordering::Acquire) {
            return seen;
        }
        match read() {
            Some(value) => self.completed.fetch_max(value, Ordering::AcqRel).max(value),
            None => seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ClockCache;

    /// A completion reported past the latest published value (a fence of another issuer, a
    /// forged token) never raises the clock beyond what was published.
    #[test]
    fn a_completion_past_what_was_published_is_capped() {
        let clock: ClockCache<std::sync::atomic::AtomicU64> = ClockCache::new();
        clock.note_completed(9);
        assert_eq!(clock.seen_completed(), 0, "nothing published");
        let first = clock.next();
        clock.publish(first);
        let second = clock.next();
        clock.publish(second);
        clock.note_completed(100);
        assert_eq!(clock.seen_completed(), second);
        assert!(clock.all_seen_completed());
        let third = clock.next();
        clock.publish(third);
        assert!(!clock.all_seen_completed(), "the next submission is not complete");
    }
}
