//! The runtime's synchronization primitives: a [`Mutex`] and a [`Condvar`]
//! that do not poison, and (for the pieces whose correctness rests on
//! memory orderings: the inbox's hand-over, a source's end, the figures'
//! seqlock) the atomics, thread handles and [`OnceLock`] they use.
//!
//! A thread that panics while it holds one of the runtime's locks (a
//! reaction's decoder, a Python binding's callback) leaves data that is
//! still consistent for every use here: queues of items, lists of
//! connections, counters. So every lock in this crate recovers the guard
//! from a poisoned lock instead of propagating the panic; these wrappers
//! say so once, instead of `lock().unwrap_or_else(PoisonError::into_inner)`
//! at every call. They add nothing at run time: the same `std` lock, the
//! same guard.
//!
//! In the lib's tests under `--cfg loom` (the model checker's build,
//! docs/src/reliability.md) the same names are the model checker's: loom's
//! atomics, threads and parking, a [`OnceLock`] whose publication loom
//! tracks, and a lock and condition variable built on loom's atomics that
//! poison as `std`'s do (loom's own `Mutex` cannot be taken again after a
//! panic). Every other build compiles exactly the `std` items.

use std::sync::{PoisonError, TryLockError};
use std::time::Duration;

#[cfg(not(all(test, loom)))]
use std::sync as lock;
#[cfg(not(all(test, loom)))]
pub(crate) use std::sync::{atomic, MutexGuard, OnceLock};
#[cfg(not(all(test, loom)))]
pub(crate) use std::thread;

#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic;
#[cfg(all(test, loom))]
use modelled as lock;
#[cfg(all(test, loom))]
pub(crate) use modelled::{thread, MutexGuard, OnceLock};

/// `std::sync::Mutex` whose `lock` recovers from poison.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T: ?Sized>(lock::Mutex<T>);

impl<T> Mutex<T> {
    #[cfg(not(all(test, loom)))]
    pub const fn new(value: T) -> Mutex<T> {
        Mutex(lock::Mutex::new(value))
    }

    #[cfg(all(test, loom))]
    pub fn new(value: T) -> Mutex<T> {
        Mutex(lock::Mutex::new(value))
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
pub(crate) struct Condvar(lock::Condvar);

impl Condvar {
    #[cfg(not(all(test, loom)))]
    pub const fn new() -> Condvar {
        Condvar(lock::Condvar::new())
    }

    #[cfg(all(test, loom))]
    pub fn new() -> Condvar {
        Condvar(lock::Condvar::new())
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

/// The model checker's versions of `std`'s lock, condition variable,
/// `OnceLock` and thread functions, with `std`'s signatures (the lib's
/// tests under `--cfg loom` only). Time does not pass in a model: a timed
/// wait or park lasts until it is woken, so a model whose progress hangs
/// on a timeout, not on a wake-up, fails (loom reports a deadlock, or a
/// waiter that spins for ever).
#[cfg(all(test, loom))]
mod modelled {
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::mem::ManuallyDrop;
    use std::ops::{Deref, DerefMut};
    use std::sync::{LockResult, PoisonError, TryLockError, TryLockResult};
    use std::time::Duration;

    /// A lock on a loom atomic (so that loom chooses who gets it, and
    /// tracks what its release publishes) around a `std` mutex that is
    /// never contended but poisons as the real one does.
    #[derive(Debug, Default)]
    pub struct Mutex<T: ?Sized> {
        held: AtomicBool,
        data: std::sync::Mutex<T>,
    }

    pub struct MutexGuard<'a, T: ?Sized> {
        held: &'a AtomicBool,
        lock: &'a Mutex<T>,
        data: ManuallyDrop<std::sync::MutexGuard<'a, T>>,
    }

    impl<T> Mutex<T> {
        pub fn new(value: T) -> Mutex<T> {
            Mutex { held: AtomicBool::new(false), data: std::sync::Mutex::new(value) }
        }
    }

    impl<T: ?Sized> Mutex<T> {
        fn guard(&self) -> LockResult<MutexGuard<'_, T>> {
            let wrap = |data| MutexGuard { held: &self.held, lock: self, data: ManuallyDrop::new(data) };
            match self.data.try_lock() {
                Ok(g) => Ok(wrap(g)),
                Err(TryLockError::Poisoned(p)) => Err(PoisonError::new(wrap(p.into_inner()))),
                Err(TryLockError::WouldBlock) => unreachable!("`held` guards the std mutex"),
            }
        }

        pub fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
            while self.held.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
                loom::thread::yield_now();
            }
            self.guard()
        }

        pub fn try_lock(&self) -> TryLockResult<MutexGuard<'_, T>> {
            if self.held.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
                return Err(TryLockError::WouldBlock);
            }
            self.guard().map_err(TryLockError::Poisoned)
        }
    }

    impl<T: ?Sized> Drop for MutexGuard<'_, T> {
        fn drop(&mut self) {
            // SAFETY: dropped once, here. First the std guard (which
            // poisons the data if this thread is panicking), then the lock.
            unsafe { ManuallyDrop::drop(&mut self.data) };
            self.held.store(false, Ordering::Release);
        }
    }

    impl<T: ?Sized> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            &self.data
        }
    }

    impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            &mut self.data
        }
    }

    /// A condition variable as a count of notifications: a waiter reads it
    /// under the lock and waits, lock released, until it changes. A
    /// notification with nobody waiting is lost, as with `std`'s.
    #[derive(Debug, Default)]
    pub struct Condvar {
        notified: AtomicU64,
    }

    pub struct WaitTimeoutResult;

    impl WaitTimeoutResult {
        pub fn timed_out(&self) -> bool {
            false
        }
    }

    impl Condvar {
        pub fn new() -> Condvar {
            Condvar { notified: AtomicU64::new(0) }
        }

        pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> LockResult<MutexGuard<'a, T>> {
            let seen = self.notified.load(Ordering::Acquire);
            let lock = guard.lock;
            drop(guard);
            while self.notified.load(Ordering::Acquire) == seen {
                loom::thread::yield_now();
            }
            lock.lock()
        }

        pub fn wait_timeout<'a, T>(
            &self,
            guard: MutexGuard<'a, T>,
            _: Duration,
        ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
            match self.wait(guard) {
                Ok(g) => Ok((g, WaitTimeoutResult)),
                Err(p) => Err(PoisonError::new((p.into_inner(), WaitTimeoutResult))),
            }
        }

        pub fn wait_timeout_while<'a, T, F: FnMut(&mut T) -> bool>(
            &self,
            mut guard: MutexGuard<'a, T>,
            _: Duration,
            mut condition: F,
        ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
            while condition(&mut guard) {
                guard = self.wait(guard).unwrap_or_else(PoisonError::into_inner);
            }
            Ok((guard, WaitTimeoutResult))
        }

        pub fn notify_one(&self) {
            self.notified.fetch_add(1, Ordering::Release);
        }

        pub fn notify_all(&self) {
            self.notified.fetch_add(1, Ordering::Release);
        }
    }

    /// `std::sync::OnceLock` as the model checker sees it: the value, then
    /// a flag published with `Release` and read with `Acquire` (what
    /// `std`'s does, in its `Once`).
    pub struct OnceLock<T> {
        set: AtomicBool,
        value: UnsafeCell<Option<T>>,
    }

    // SAFETY: the value is written once, before `set` is published, and
    // read only after `set` is seen (loom checks that no access races).
    unsafe impl<T: Send + Sync> Sync for OnceLock<T> {}

    impl<T> Default for OnceLock<T> {
        fn default() -> OnceLock<T> {
            OnceLock::new()
        }
    }

    impl<T> OnceLock<T> {
        pub fn new() -> OnceLock<T> {
            OnceLock { set: AtomicBool::new(false), value: UnsafeCell::new(None) }
        }

        /// Sets the value; only one thread sets a given `OnceLock` in the
        /// models (the reader thread its own handle).
        pub fn set(&self, value: T) -> Result<(), T> {
            if self.set.load(Ordering::Acquire) {
                return Err(value);
            }
            // SAFETY: nobody reads before `set` is published.
            self.value.with_mut(|v| unsafe { *v = Some(value) });
            self.set.store(true, Ordering::Release);
            Ok(())
        }

        pub fn get(&self) -> Option<&T> {
            if !self.set.load(Ordering::Acquire) {
                return None;
            }
            // SAFETY: published (above) and never written again.
            self.value.with(|v| unsafe { (*v).as_ref() })
        }
    }

    /// `std::thread` as far as the runtime's modelled pieces use it.
    pub mod thread {
        pub use loom::thread::{current, spawn, yield_now, Thread};

        /// Time does not pass in a model: parks until unparked.
        pub fn park_timeout(_: std::time::Duration) {
            loom::thread::park()
        }
    }
}

/// Models of the non-poisoning lock (loom, `scripts/loom.sh`): a thread
/// that panics while it holds the lock leaves it usable to the others, in
/// every interleaving. Each was seen to fail with a mistake put in on
/// purpose and taken out again: `lock` with `.unwrap()` (`std`'s
/// poisoning) in place of `unwrap_or_else(PoisonError::into_inner)`, and
/// `try_lock` answering `None` for a poisoned lock.
#[cfg(all(test, loom))]
mod sync_loom {
    use crate::sync::{thread, Condvar, Mutex};
    use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
    use std::sync::Arc;
    use std::time::Duration;

    /// A reaction's panic, caught by the runtime on the thread that ran it
    /// (`resume_unwind`: no panic message each run of the model).
    fn panics_holding<T>(m: &Mutex<T>, change: impl FnOnce(&mut T)) {
        let caught = catch_unwind(AssertUnwindSafe(|| {
            let mut g = m.lock();
            change(&mut g);
            resume_unwind(Box::new("a reaction's panic"));
        }));
        assert!(caught.is_err());
    }

    /// One thread panics holding the lock after a change while another
    /// takes it: the other gets it, before or after, and sees the value
    /// as it was or as the panicking thread left it; afterwards both
    /// `lock` and `try_lock` take it.
    #[test]
    fn a_panic_in_another_thread_leaves_the_lock_usable() {
        loom::model(|| {
            let m = Arc::new(Mutex::new(0));
            let m2 = m.clone();
            let t = thread::spawn(move || panics_holding(&m2, |v| *v += 1));
            {
                let mut g = m.lock();
                assert!(*g == 0 || *g == 1, "a value nobody wrote: {}", *g);
                *g += 10;
            }
            t.join().expect("the panic is caught on its thread");
            assert_eq!(*m.lock(), 11);
            assert_eq!(m.try_lock().map(|g| *g), Some(11), "a poisoned lock that nobody holds is free");
        });
    }

    /// A thread that waits on the condition variable is woken by one that
    /// notifies and then panics holding the lock, and takes the lock.
    #[test]
    fn a_waiter_is_woken_by_a_thread_that_then_panics() {
        loom::model(|| {
            let pair = Arc::new((Mutex::new(false), Condvar::new()));
            let p2 = pair.clone();
            let t = thread::spawn(move || {
                panics_holding(&p2.0, |ready| {
                    *ready = true;
                    p2.1.notify_one();
                })
            });
            let (m, cv) = &*pair;
            let (g, _) = cv.wait_timeout_while(m.lock(), Duration::from_secs(1), |ready| !*ready);
            assert!(*g);
            drop(g);
            t.join().expect("the panic is caught on its thread");
        });
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
