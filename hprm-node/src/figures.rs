//! A federate's runtime figures for dashboards: per connection, what
//! arrived (messages, bytes in-band and through the store) and a histogram
//! of every message's latency; per reaction, its runs and execution time.
//!
//! The hot path only bumps relaxed atomics here (no lock, no allocation,
//! no message per event); the status thread (`crate::status`) reads them
//! once a period and publishes [`ConnectionFigures`] and
//! [`ReactionFigures`] in the federate's status file, where `hprm
//! dashboard` reads them.
//!
//! Latency is from a message's logical send time (the sender's tag, which
//! in real-time execution a sender reaches at or just after physical time
//! does) to the start of the tag that delivers it at the receiver, in
//! physical time: the transport, the wait for the receiver and its `after`
//! delay. Fast mode has no such relation, so nothing is recorded there.

use std::sync::atomic::{AtomicU64, Ordering};

pub use hprm_rti::figures::{HistogramCounts, LATENCY_BOUNDS_NS};
use hprm_rti::figures::Histogram;
use serde::{Deserialize, Serialize};

/// What arrived on one connection ending at this federate.
#[derive(Debug, Default)]
pub(crate) struct ConnectionBoard {
    /// `sender port -> receiver port`, as `hprm ps` names ports.
    pub from: String,
    pub to: String,
    messages: AtomicU64,
    bytes_in_band: AtomicU64,
    bytes_stored: AtomicU64,
    latency: Histogram,
}

impl ConnectionBoard {
    pub fn new(from: String, to: String) -> ConnectionBoard {
        ConnectionBoard { from, to, ..ConnectionBoard::default() }
    }

    /// A message of `in_band` bytes on the wire that referenced `stored`
    /// bytes of store objects.
    #[inline]
    pub fn arrived(&self, in_band: usize, stored: u64) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.bytes_in_band.fetch_add(in_band as u64, Ordering::Relaxed);
        if stored > 0 {
            self.bytes_stored.fetch_add(stored, Ordering::Relaxed);
        }
    }

    #[inline]
    pub fn latency(&self, ns: i64) {
        self.latency.observe(ns);
    }

    /// Its figures now; rates and quantiles over the time since `last`
    /// (`secs` seconds ago).
    pub fn figures(&self, last: Option<&ConnectionFigures>, secs: f64) -> ConnectionFigures {
        let messages = self.messages.load(Ordering::Relaxed);
        let bytes_in_band = self.bytes_in_band.load(Ordering::Relaxed);
        let bytes_stored = self.bytes_stored.load(Ordering::Relaxed);
        let latency = self.latency.read();
        let zero = ConnectionFigures::default();
        let last = last.unwrap_or(&zero);
        let recent = latency.since(&last.latency);
        let bytes = (bytes_in_band + bytes_stored).saturating_sub(last.bytes_in_band + last.bytes_stored);
        ConnectionFigures {
            from: self.from.clone(),
            to: self.to.clone(),
            messages_per_s: messages.saturating_sub(last.messages) as f64 / secs,
            bytes_per_s: bytes as f64 / secs,
            p50_ns: recent.quantile(0.5),
            p99_ns: recent.quantile(0.99),
            messages,
            bytes_in_band,
            bytes_stored,
            latency,
        }
    }
}

/// One connection's figures in a status file. Counts are since the
/// federate started; rates and quantiles over the last status period.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConnectionFigures {
    /// The sender's output and this federate's input (`federate.reactor.port`).
    pub from: String,
    pub to: String,
    pub messages: u64,
    /// Bytes of the messages themselves (on the socket).
    pub bytes_in_band: u64,
    /// Bytes of the store objects they referenced (mapped, not copied).
    pub bytes_stored: u64,
    /// Latency of every message with a tag (see the module documentation).
    pub latency: HistogramCounts,
    pub messages_per_s: f64,
    /// In-band and stored bytes together.
    pub bytes_per_s: f64,
    pub p50_ns: Option<i64>,
    pub p99_ns: Option<i64>,
}

/// One reaction's runs.
#[derive(Debug, Default)]
pub(crate) struct ReactionBoard {
    runs: AtomicU64,
    busy_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl ReactionBoard {
    /// A run of `ns` ns (its body or handler, from the worker that ran it).
    #[inline]
    pub fn ran(&self, ns: u64) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.busy_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    pub fn figures(&self, reaction: &str, last: Option<&ReactionFigures>, secs: f64) -> ReactionFigures {
        let runs = self.runs.load(Ordering::Relaxed);
        let busy_ns = self.busy_ns.load(Ordering::Relaxed);
        let (last_runs, last_busy) = last.map_or((0, 0), |l| (l.runs, l.busy_ns));
        let (recent_runs, recent_busy) = (runs.saturating_sub(last_runs), busy_ns.saturating_sub(last_busy));
        ReactionFigures {
            reaction: reaction.to_owned(),
            runs,
            busy_ns,
            max_ns: self.max_ns.load(Ordering::Relaxed),
            runs_per_s: recent_runs as f64 / secs,
            busy_share: recent_busy as f64 / 1e9 / secs,
            mean_ns: if recent_runs == 0 { 0 } else { recent_busy / recent_runs },
        }
    }
}

/// A reaction's figures in a status file: counts since the federate
/// started, rates over the last status period.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReactionFigures {
    /// `federate.reactor.reaction`.
    pub reaction: String,
    pub runs: u64,
    /// Execution time, all runs together.
    pub busy_ns: u64,
    /// The longest run.
    pub max_ns: u64,
    pub runs_per_s: f64,
    /// The share of the last period it ran (1.0: a whole core).
    pub busy_share: f64,
    /// Mean execution time over the last period (0 if it did not run).
    pub mean_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_over_the_time_since_the_last_reading() {
        let c = ConnectionBoard::new("a.r.out".into(), "b.r.inp".into());
        for _ in 0..10 {
            c.arrived(100, 0);
            c.latency(200_000);
        }
        let first = c.figures(None, 1.0);
        c.arrived(50, 1000);
        let second = c.figures(Some(&first), 0.5);
        assert_eq!((second.messages, second.bytes_in_band, second.bytes_stored), (11, 1050, 1000));
        assert_eq!((second.messages_per_s, second.bytes_per_s), (2.0, 2100.0));
        assert_eq!((first.p50_ns, second.p50_ns), (Some(250_000), None));
        let r = ReactionBoard::default();
        r.ran(1000);
        r.ran(3000);
        let f = r.figures("a.r.react", None, 2.0);
        assert_eq!((f.runs, f.busy_ns, f.max_ns, f.runs_per_s, f.mean_ns), (2, 4000, 3000, 1.0, 2000));
    }
}
