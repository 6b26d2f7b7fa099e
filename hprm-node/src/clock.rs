//! Physical time, as federates see it.
//!
//! Physical time is the system clock in nanoseconds since the Unix epoch
//! (the same scale as tags), plus an offset that clock synchronization
//! with the RTI may set for federates on other hosts.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use hprm_rti::tag::Instant;

/// The federate's physical clock.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    offset: AtomicI64,
    /// Whether clock synchronization has set the offset.
    synchronized: AtomicBool,
}

impl Clock {
    /// Physical time now, ns since the epoch.
    pub fn now(&self) -> Instant {
        system_now().saturating_add(self.offset.load(Ordering::Relaxed))
    }

    /// Adds `delta` ns to the offset (positive: this clock was behind).
    pub fn adjust(&self, delta: i64) {
        self.offset.fetch_add(delta, Ordering::Relaxed);
        self.synchronized.store(true, Ordering::Relaxed);
    }

    /// The offset, once clock synchronization has measured it.
    pub fn measured_offset(&self) -> Option<i64> {
        self.synchronized.load(Ordering::Relaxed).then(|| self.offset())
    }

    /// The offset added to the system clock (ns).
    pub fn offset(&self) -> i64 {
        self.offset.load(Ordering::Relaxed)
    }
}

/// Test-only: nanoseconds added to this process's reading of the system
/// clock, standing for a host whose clock is off (network namespaces share
/// one wall clock). Clock synchronization must measure and correct it.
pub const TEST_CLOCK_SKEW_ENV: &str = "HPRM_TEST_CLOCK_SKEW_NS";

/// The system clock, ns since the epoch (plus the test-only skew of
/// [`TEST_CLOCK_SKEW_ENV`], if set).
pub(crate) fn system_now() -> Instant {
    let now = match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(_) => 0,
    };
    now.saturating_add(test_skew())
}

/// [`TEST_CLOCK_SKEW_ENV`], read once (0 when unset).
fn test_skew() -> i64 {
    static SKEW: OnceLock<i64> = OnceLock::new();
    *SKEW.get_or_init(|| {
        let var = TEST_CLOCK_SKEW_ENV;
        match std::env::var(var) {
            Err(_) => 0,
            Ok(v) => v.trim().parse().unwrap_or_else(|_| {
                tracing::warn!("{var}={v:?} is not a whole number of nanoseconds; ignoring it");
                0
            }),
        }
    })
}
