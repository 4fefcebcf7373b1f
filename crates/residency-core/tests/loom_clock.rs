//! `loom` models of [`ClockCache`], the lock-free part of deferred destruction (issue #21): the
//! host's cached progress of a GPU clock, which the backend's `Retirement` keeps for its universal
//! timeline and its sparse-bind timeline and reads from any thread without a lock
//! (`crates/residency-vulkan/src/device/life.rs`).
//!
//! The model: a "GPU" counter (the timeline semaphore) that a GPU thread advances up to what was
//! published and then notices the first submission's fence late (noting value 1); a submitting
//! thread taking values under the queue lock and publishing them; a reader asking for the clock's value twice and whether
//! everything was seen completed. Under every interleaving `loom` explores: the cache never claims
//! more than the GPU reached, a reader never sees the value go backwards, and "all seen completed"
//! implies that the GPU reached every value published before the question. The same model over a
//! counter whose maximum is a load and a store (a lost update) fails, so the model has teeth.

use loom::sync::atomic::AtomicU64 as LoomU64;
use loom::sync::{Arc, Mutex};
use loom::thread;
use residency_core::sync::{ClockCache, Counter};
use std::sync::atomic::Ordering;

/// `loom`'s atomic with a real `fetch_max`.
struct Atomic(LoomU64);

impl Counter for Atomic {
    fn new(value: u64) -> Self {
        Atomic(LoomU64::new(value))
    }
    fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        self.0.store(value, order)
    }
    fn fetch_max(&self, value: u64, order: Ordering) -> u64 {
        self.0.fetch_max(value, order)
    }
}

/// A broken counter: its maximum is a load and then a store, so two threads raising it at once
/// can lose the higher value.
struct RacyMax(LoomU64);

impl Counter for RacyMax {
    fn new(value: u64) -> Self {
        RacyMax(LoomU64::new(value))
    }
    fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        self.0.store(value, order)
    }
    fn fetch_max(&self, value: u64, _order: Ordering) -> u64 {
        let old = self.0.load(Ordering::Acquire);
        if value > old {
            self.0.store(value, Ordering::Release);
        }
        old
    }
}

/// One execution of the model over counters `A`.
fn model<A: Counter + Send + Sync + 'static>() {
    let cache = Arc::new(ClockCache::<A>::new());
    let gpu = Arc::new(LoomU64::new(0));
    let queue = Arc::new(Mutex::new(()));

    // Two submissions, each taking its value under the queue lock and publishing it there.
    let submitter = {
        let (cache, queue) = (Arc::clone(&cache), Arc::clone(&queue));
        thread::spawn(move || {
            for _ in 0..2 {
                let _locked = queue.lock().unwrap();
                let value = cache.next();
                cache.publish(value);
            }
        })
    };
    // The GPU: reaches each published value in order (two steps at most); then the host notices
    // the first submission's fence, late: it notes that submission's value (1), lower than what
    // another thread may have seen by then.
    let device = {
        let (cache, gpu) = (Arc::clone(&cache), Arc::clone(&gpu));
        thread::spawn(move || {
            for _ in 0..2 {
                let reached = gpu.load(Ordering::Acquire);
                if reached < cache.submitted() {
                    gpu.store(reached + 1, Ordering::Release);
                }
            }
            if gpu.load(Ordering::Acquire) >= 1 {
                cache.note_completed(1);
            }
        })
    };

    // The reader: the value twice, then "all seen completed" (a thread of its own: loom runs the
    // model's own thread until it blocks, so a reader there would never race the others).
    let reader = {
        let (cache, gpu) = (Arc::clone(&cache), Arc::clone(&gpu));
        thread::spawn(move || {
            let read = || Some(gpu.load(Ordering::Acquire));
            let first = cache.value(read);
            assert!(
                first <= gpu.load(Ordering::Acquire),
                "the cache claims {first}, more than the GPU reached"
            );
            let seen = cache.seen_completed();
            assert!(seen >= first, "the cached value went back from {first} to {seen}");
            let second = cache.value(read);
            assert!(second >= first, "the clock went back from {first} to {second}");
            let seen_again = cache.seen_completed();
            assert!(seen_again >= seen, "the cached value went back from {seen} to {seen_again}");
            assert!(
                second <= gpu.load(Ordering::Acquire),
                "the cache claims {second}, more than the GPU reached"
            );
            let published = cache.submitted();
            if cache.all_seen_completed() {
                let reached = gpu.load(Ordering::Acquire);
                assert!(reached >= published, "all seen completed at {published}, the GPU at {reached}");
            }
            (second, seen_again)
        })
    };
    submitter.join().unwrap();
    device.join().unwrap();
    let (second, seen_again) = reader.join().unwrap();
    // After everything: the cache kept what the reader saw, and still claims nothing unreached.
    let read = || Some(gpu.load(Ordering::Acquire));
    let last = cache.seen_completed();
    assert!(last >= seen_again, "the cached value went back from {seen_again} to {last}");
    assert!(last <= gpu.load(Ordering::Acquire));
    assert!(cache.value(read) >= second);
}

#[test]
fn clock_cache_never_runs_ahead_of_the_gpu_nor_goes_back_under_every_interleaving() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(model::<Atomic>);
}

#[test]
#[should_panic(expected = "went back")]
fn clock_cache_over_a_racy_maximum_is_caught_by_the_model() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(model::<RacyMax>);
}
