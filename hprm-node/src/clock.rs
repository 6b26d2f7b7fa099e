//! Physical time, as federates see it.
//!
//! Physical time is the system clock in nanoseconds since the Unix epoch
//! (the same scale as tags), plus an offset that clock synchronization
//! with the RTI may set for federates on other hosts.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use hprm_rti::tag::Instant;

/// The federate's physical clock.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    offset: AtomicI64,
}

impl Clock {
    /// Physical time now, ns since the epoch.
    pub fn now(&self) -> Instant {
        system_now().saturating_add(self.offset.load(Ordering::Relaxed))
    }

    /// Adds `delta` ns to the offset (positive: this clock was behind).
    pub fn adjust(&self, delta: i64) {
        self.offset.fetch_add(delta, Ordering::Relaxed);
    }

    /// The offset added to the system clock (ns).
    pub fn offset(&self) -> i64 {
        self.offset.load(Ordering::Relaxed)
    }
}

/// The system clock, ns since the epoch.
pub(crate) fn system_now() -> Instant {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}
