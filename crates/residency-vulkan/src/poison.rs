//! Taking a mutex whatever a panic left behind: the one place the backend recovers from lock
//! poisoning (a test, `tests/locks.rs`, refuses recovery written anywhere else).
//!
//! A `std` mutex is *poisoned* when a thread panics while holding it, and every later `lock`
//! returns an error carrying the guard. Residency takes the guard as is, for two reasons:
//!
//! - **The data is consistent.** No critical section in the backend runs the caller's code (a
//!   recording closure runs under a [`Lock`](crate::device::lock::Lock), which builds on this
//!   and refuses re-entry; tile sources are read outside every lock), so a panic under a lock is
//!   a library bug, and every section is written so that what it protects is whole at each
//!   point where such a bug could panic: values are computed first and stored last, an object is
//!   taken out of its list before it is destroyed, a Vulkan call's results are recorded only
//!   after it returned.
//! - **Refusing would do harm.** Panicking on poison turns one bug into a panic on every later
//!   call (and an abort when it happens during unwinding: guards that roll back a half-done
//!   operation lock again while the panic unwinds), and it would leak the GPU objects behind the
//!   lock, which teardown destroys through the same mutexes.
//!
//! [`Lock`](crate::device::lock::Lock) (re-entry refused) is built on [`PoisonFree::locked`].

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// A [`Mutex`] taken, borrowed or unwrapped whether or not it is poisoned (see the module docs).
pub(crate) trait PoisonFree<T: ?Sized> {
    /// [`Mutex::lock`]: waits for the lock, and takes it as is if a panic poisoned it.
    fn locked(&self) -> MutexGuard<'_, T>;

    /// [`Mutex::get_mut`]: the value through `&mut` (no other holder can exist), poisoned or not.
    fn value_mut(&mut self) -> &mut T;

    /// [`Mutex::into_inner`]: the value, poisoned or not.
    fn into_value(self) -> T
    where
        T: Sized;
}

impl<T: ?Sized> PoisonFree<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn value_mut(&mut self) -> &mut T {
        self.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn into_value(self) -> T
    where
        T: Sized,
    {
        self.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A [`Condvar`] waited on with a mutex that may be poisoned (see the module docs).
pub(crate) trait PoisonFreeWait {
    /// [`Condvar::wait`]: gives `guard`'s lock up until notified, then takes it again as is if a
    /// panic poisoned it meanwhile.
    fn wait_locked<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T>;
}

impl PoisonFreeWait for Condvar {
    fn wait_locked<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait(guard).unwrap_or_else(PoisonError::into_inner)
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
    fn a_poisoned_mutex_is_locked_borrowed_and_unwrapped_as_is() {
        let mutex = poisoned(7);
        assert_eq!(*mutex.locked(), 8, "what the panicking holder wrote stays");
        *mutex.locked() += 1;
        let mut mutex = Arc::into_inner(mutex).expect("the only holder");
        *mutex.value_mut() += 1;
        assert_eq!(mutex.into_value(), 10);
    }

    #[test]
    fn a_wait_on_a_mutex_poisoned_meanwhile_returns_the_guard() {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let other = Arc::clone(&pair);
        let guard = pair.0.locked();
        let poisoner = std::thread::spawn(move || {
            let mut ready = other.0.lock().unwrap();
            *ready = true;
            other.1.notify_all();
            panic!("poison it while the waiter waits");
        });
        let mut guard = guard;
        while !*guard {
            guard = pair.1.wait_locked(guard);
        }
        drop(guard);
        assert!(poisoner.join().is_err());
        assert!(pair.0.is_poisoned());
        assert!(*pair.0.locked());
    }
}
