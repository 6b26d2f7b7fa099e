//! Which connection tasks poll their sockets, and for how long
//! (`--spin-us`).
//!
//! After handling what a federate sent, its connection task polls the
//! socket for a while before it waits in the reactor: the next message of
//! an exchange (a reply, the next NET) often follows within microseconds,
//! and waking a worker asleep in the reactor costs more than that on a
//! virtualised machine. But every poller is one more thread that wants a
//! CPU, on machines where the federates already poll theirs: with a
//! handful of busy connections polling at once, federates waited for CPUs
//! (broadcast to 4 receivers over the RTI: 1 KB round p50 about 220 µs
//! without polling, 350-530 µs with every connection polling; ad hoc). So
//! at most [`MAX_POLLING`] connections poll at a time, the others wait in
//! the reactor as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Connections polling at once: the two ends of an exchange through the
/// RTI (the sender's connection, and the receiver's, whose reply follows).
pub const MAX_POLLING: usize = 2;

/// How long a poller keeps its worker thread before it gives the runtime a
/// turn (other tasks of that worker, the reactor). Between reads inside a
/// slice it only yields its CPU (`sched_yield`). Each turn given to the
/// runtime is a yield in tokio's terms: the task goes to the back of its
/// worker's queue and the worker calls a sleeping one to steal work, a
/// wake-up on the CPU a federate is likely polling on; a turn after every
/// read cost about one such wake-up per message relayed.
pub const RUNTIME_SLICE: Duration = Duration::from_micros(25);

#[derive(Debug)]
pub struct Polling {
    spin: Duration,
    active: AtomicUsize,
}

/// A connection's turn to poll; ends when dropped.
pub struct Turn<'a>(&'a Polling);

impl Polling {
    pub fn new(spin: Duration) -> Polling {
        Polling { spin, active: AtomicUsize::new(0) }
    }

    /// How long a turn lasts.
    pub fn spin(&self) -> Duration {
        self.spin
    }

    /// A turn to poll, unless polling is off or [`MAX_POLLING`]
    /// connections poll already.
    pub fn turn(&self) -> Option<Turn<'_>> {
        if self.spin.is_zero() {
            return None;
        }
        self.active.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_POLLING).then_some(n + 1)).ok()?;
        Some(Turn(self))
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_max_polling_turns_at_once_and_none_when_off() {
        let p = Polling::new(Duration::from_micros(200));
        let turns: Vec<Turn> = (0..MAX_POLLING).map(|_| p.turn().expect("a turn")).collect();
        assert!(p.turn().is_none());
        drop(turns);
        assert!(p.turn().is_some());
        assert!(Polling::new(Duration::ZERO).turn().is_none());
    }
}
