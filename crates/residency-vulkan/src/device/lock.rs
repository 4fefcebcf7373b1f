//! The lock helper: a mutex that recovers from poisoning in one place and refuses to be taken
//! again by the thread that holds it; and [`CachePadded`], which keeps per-thread or per-arena
//! state (ledger shards, pool arenas) off each other's cache lines.
//!
//! Residency runs the caller's code while it holds some locks (a [`CommandContext`]'s state
//! while `submit`'s closure records, the universal queue while `submit_checked`'s closure
//! submits), and a caller may hold a [`Queue`](crate::Queue)'s lock while calling residency. A
//! plain `Mutex` taken again on the same thread waits for itself forever; a [`Lock`] answers
//! [`Reentrant`] instead, which the callers turn into a typed error
//! ([`VulkanError::Reentrant`](crate::VulkanError::Reentrant)). Other threads wait as usual.
//!
//! A poisoned lock (a panic while it was held) is taken as is, through
//! [`PoisonFree`](crate::poison::PoisonFree) (whose module says why): every structure behind a
//! `Lock` is left consistent at each point where the code inside can panic (they hold handles
//! and counters updated after the Vulkan call that may fail, never half-way).
//!
//! [`CommandContext`]: crate::CommandContext

use crate::poison::PoisonFree;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// This thread's number for [`Lock`]'s owner check (0 is "nobody").
fn this_thread() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ID.with(|id| *id)
}

/// The lock is already held by the thread asking for it: taking it would wait forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reentrant;

/// A mutex that recovers from poisoning and refuses re-entry from its holder's thread.
#[derive(Debug, Default)]
pub struct Lock<T> {
    inner: Mutex<T>,
    /// The thread holding it (0: none). Written only by the holder, under the mutex.
    holder: AtomicU64,
}

/// The guard of a [`Lock`].
#[derive(Debug)]
pub struct LockGuard<'a, T> {
    guard: MutexGuard<'a, T>,
    holder: &'a AtomicU64,
}

impl<T> Lock<T> {
    /// A lock around `value`.
    pub fn new(value: T) -> Self {
        Lock { inner: Mutex::new(value), holder: AtomicU64::new(0) }
    }

    /// Takes the lock, waiting for another thread that holds it; [`Reentrant`] if this thread
    /// holds it already.
    pub fn lock(&self) -> Result<LockGuard<'_, T>, Reentrant> {
        let me = this_thread();
        // Only this thread stores its own number, so reading it here is exact for this thread
        // (another thread's number or 0 both mean "not me").
        if self.holder.load(Ordering::Acquire) == me {
            return Err(Reentrant);
        }
        let guard = self.inner.locked();
        self.holder.store(me, Ordering::Release);
        Ok(LockGuard { guard, holder: &self.holder })
    }

    /// Whether this thread holds it (then taking it, or waiting for a thread that waits for it,
    /// would wait forever).
    pub(crate) fn held_here(&self) -> bool {
        self.holder.load(Ordering::Acquire) == this_thread()
    }

    /// The value, through `&mut self` (no other holder can exist).
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.value_mut()
    }
}

impl<T> Drop for LockGuard<'_, T> {
    fn drop(&mut self) {
        // Cleared before the mutex is released (the guard field drops after this body).
        self.holder.store(0, Ordering::Release);
    }
}

impl<T> Deref for LockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for LockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// Shards of per-thread state (the ledger's live-object table and fault-site counters, the retire
/// queue): threads working at once mostly use different shards.
pub(crate) const SHARDS: usize = 16;

/// This thread's shard, below [`SHARDS`] (threads take them in turn as they first ask).
pub(crate) fn thread_shard() -> usize {
    thread_local! {
        static SHARD: usize = {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            NEXT.fetch_add(1, Ordering::Relaxed) as usize % SHARDS
        };
    }
    SHARD.with(|s| *s)
}

/// A value alone on its cache lines (128 bytes: two 64-byte lines, as adjacent-line prefetchers
/// pull pairs): per-thread or per-arena state kept in an array or allocated next to its siblings
/// (shards of the ledger, a pool's arenas) so that one thread's writes never invalidate the line
/// another thread is working on (false sharing).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for CachePadded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_holder_is_refused_and_other_threads_wait() {
        let lock = Arc::new(Lock::new(0));
        let guard = lock.lock().unwrap();
        assert_eq!(lock.lock().err(), Some(Reentrant));
        let other = Arc::clone(&lock);
        let waiter = std::thread::spawn(move || {
            *other.lock().unwrap() += 1;
        });
        drop(guard);
        waiter.join().unwrap();
        assert_eq!(*lock.lock().unwrap(), 1);
    }

    #[test]
    fn a_poisoned_lock_is_taken_as_is() {
        let lock = Arc::new(Lock::new(7));
        let other = Arc::clone(&lock);
        let _ = std::thread::spawn(move || {
            let _g = other.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert_eq!(*lock.lock().unwrap(), 7);
    }

    #[test]
    fn a_poisoned_lock_still_refuses_its_holder_and_lends_its_value() {
        let lock = Arc::new(Lock::new(7));
        let other = Arc::clone(&lock);
        let _ = std::thread::spawn(move || {
            *other.lock().unwrap() += 1;
            let _g = other.lock().unwrap();
            panic!("poison it");
        })
        .join();
        let guard = lock.lock().unwrap();
        assert_eq!(*guard, 8);
        assert_eq!(lock.lock().err(), Some(Reentrant));
        drop(guard);
        let mut lock = Arc::into_inner(lock).expect("the only holder");
        *lock.get_mut() += 1;
        assert_eq!(*lock.lock().unwrap(), 9);
    }
}
