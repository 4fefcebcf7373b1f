//! Taking a mutex whatever a panic left behind: the one place the core recovers from lock
//! poisoning (a test, residency-vulkan's `tests/locks.rs`, refuses recovery written anywhere
//! else). The backend has its own twin (`residency-vulkan`'s `poison.rs`); the helper is
//! crate-private in both, so it adds nothing to either public face.
//!
//! A `std` mutex is *poisoned* when a thread panics while holding it, and every later `lock`
//! returns an error carrying the guard. The core takes the guard as is: its locks (the tile
//! loader's queue, the decoded-tile cache, a file source's file) never run the caller's code
//! while held — a source's read and decode run outside them, and the loader catches a panicking
//! read — and each section leaves what it protects whole wherever it could panic (the loader's
//! worker repairs its running count after a caught panic). Refusing poisoned locks would turn one
//! failed read into a panic on every later call, and an abort where a guard locks again while a
//! panic unwinds (the cache's `Decoding` guard does).

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, WaitTimeoutResult};
use std::time::Duration;

/// A [`Mutex`] taken whether or not it is poisoned (see the module docs).
pub(crate) trait PoisonFree<T: ?Sized> {
    /// [`Mutex::lock`]: waits for the lock, and takes it as is if a panic poisoned it.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> PoisonFree<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A [`Condvar`] waited on with a mutex that may be poisoned (see the module docs).
pub(crate) trait PoisonFreeWait {
    /// [`Condvar::wait`]: gives `guard`'s lock up until notified, then takes it again as is if a
    /// panic poisoned it meanwhile.
    fn wait_locked<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T>;

    /// [`Condvar::wait_timeout`], taking the lock again as is if a panic poisoned it meanwhile.
    fn wait_timeout_locked<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult);
}

impl PoisonFreeWait for Condvar {
    fn wait_locked<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    fn wait_timeout_locked<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        self.wait_timeout(guard, timeout).unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A mutex holding `value`, poisoned by a thread that panicked while holding it after
    /// writing `value + 1`.
    fn poisoned(value: u32) -> Arc<Mutex<u32>> {
        let mutex = Arc::new(Mutex::new(value));
        let other = Arc::clone(&mutex);
        let _ = std::thread::spawn(move || {
            let mut guard = other.lock().unwrap();
            *guard += 1;
            panic!("poison it");
        })
        .join();
        assert!(mutex.is_poisoned());
        mutex
    }

    #[test]
    fn a_poisoned_mutex_is_locked_as_is() {
        let mutex = poisoned(7);
        assert_eq!(*mutex.locked(), 8, "what the panicking holder wrote stays");
        *mutex.locked() += 1;
        assert_eq!(*mutex.locked(), 9);
    }

    #[test]
    fn waits_on_a_poisoned_mutex_return_the_guard() {
        let mutex = poisoned(1);
        let ready = Condvar::new();
        let (guard, timeout) = ready.wait_timeout_locked(mutex.locked(), Duration::from_millis(1));
        assert!(timeout.timed_out());
        assert_eq!(*guard, 2);
        drop(guard);

        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let other = Arc::clone(&pair);
        let mut guard = pair.0.locked();
        let poisoner = std::thread::spawn(move || {
            let mut ready = other.0.lock().unwrap();
            *ready = true;
            other.1.notify_all();
            panic!("poison it while the waiter waits");
        });
        while !*guard {
            guard = pair.1.wait_locked(guard);
        }
        drop(guard);
        assert!(poisoner.join().is_err());
        assert!(pair.0.is_poisoned());
        assert!(*pair.0.locked());
    }
}
