//! A [`Mutex`] and a [`Condvar`] that do not poison.
//!
//! A thread that panics while it holds one of the runtime's locks (a
//! reaction's decoder, a Python binding's callback) leaves data that is
//! still consistent for every use here: queues of items, lists of
//! connections, counters. So every lock in this crate recovers the guard
//! from a poisoned lock instead of propagating the panic; these wrappers
//! say so once, instead of `lock().unwrap_or_else(PoisonError::into_inner)`
//! at every call. They add nothing at run time: the same `std` lock, the
//! same guard.

use std::sync::{PoisonError, TryLockError};
use std::time::Duration;

pub(crate) use std::sync::MutexGuard;

/// `std::sync::Mutex` whose `lock` recovers from poison.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T: ?Sized>(std::sync::Mutex<T>);

impl<T> Mutex<T> {
    pub const fn new(value: T) -> Mutex<T> {
        Mutex(std::sync::Mutex::new(value))
    }
}

impl<T: ?Sized> Mutex<T> {
    /// The guard, waiting for it; a poisoned lock is taken all the same.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The guard if nobody holds the lock now (poisoned or not).
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// `std::sync::Condvar` for [`Mutex`]'s guards, recovering from poison.
#[derive(Debug, Default)]
pub(crate) struct Condvar(std::sync::Condvar);

impl Condvar {
    pub const fn new() -> Condvar {
        Condvar(std::sync::Condvar::new())
    }

    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits at most `d`; the guard, and whether the time ran out.
    pub fn wait_timeout<'a, T>(&self, guard: MutexGuard<'a, T>, d: Duration) -> (MutexGuard<'a, T>, bool) {
        let (g, r) = self.0.wait_timeout(guard, d).unwrap_or_else(PoisonError::into_inner);
        (g, r.timed_out())
    }

    /// Waits at most `d` while `condition` holds; the guard, and whether
    /// the time ran out.
    pub fn wait_timeout_while<'a, T, F: FnMut(&mut T) -> bool>(
        &self,
        guard: MutexGuard<'a, T>,
        d: Duration,
        condition: F,
    ) -> (MutexGuard<'a, T>, bool) {
        let (g, r) = self.0.wait_timeout_while(guard, d, condition).unwrap_or_else(PoisonError::into_inner);
        (g, r.timed_out())
    }

    pub fn notify_one(&self) {
        self.0.notify_one()
    }

    pub fn notify_all(&self) {
        self.0.notify_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_all_the_same() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison it");
        })
        .join();
        *m.lock() += 1;
        assert_eq!(*m.try_lock().unwrap(), 2);
    }
}
