//! Latency histograms as HPRM's processes count them, and the figures
//! the RTI publishes for dashboards.
//!
//! [`Histogram`]: fixed buckets ([`LATENCY_BOUNDS_NS`]) of relaxed atomic
//! counts, bumped on a hot path without a lock and read by another thread
//! as [`HistogramCounts`]. Federates count their messages' latencies in
//! them (`hprm_node::figures`), the RTI its grants' ([`RtiFigures`]).
//!
//! [`RtiFigures`]: what `hprm-rti` writes as [`RTI_STATUS_FILE`] in the
//! runtime directory it is given (`HPRM_RUNTIME_DIR`), once a second,
//! where `hprm dashboard` reads it.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Upper bounds (ns) of the latency histogram's buckets; a last bucket
/// holds the rest. From 10 µs (a message between processes of one host)
/// to 1 s (a stalled receiver).
pub const LATENCY_BOUNDS_NS: [i64; 16] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

const BUCKETS: usize = LATENCY_BOUNDS_NS.len() + 1;

/// A histogram of latencies, bumped by one thread (the scheduler) and read
/// by another.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Histogram {
    #[inline]
    pub fn observe(&self, ns: i64) {
        let ns = ns.max(0);
        let i = LATENCY_BOUNDS_NS.partition_point(|&b| b < ns);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns as u64, Ordering::Relaxed);
    }

    pub fn read(&self) -> HistogramCounts {
        HistogramCounts {
            counts: self.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// A histogram's counts at one moment: by bucket of [`LATENCY_BOUNDS_NS`]
/// (not cumulative), the last for latencies above every bound.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramCounts {
    pub counts: Vec<u64>,
    pub sum_ns: u64,
}

impl HistogramCounts {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// What was observed since `earlier` (a reading of the same histogram).
    pub fn since(&self, earlier: &HistogramCounts) -> HistogramCounts {
        HistogramCounts {
            counts: self
                .counts
                .iter()
                .enumerate()
                .map(|(i, c)| c.saturating_sub(earlier.counts.get(i).copied().unwrap_or(0)))
                .collect(),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
        }
    }

    /// The `q` quantile (0 to 1), as the upper bound of the bucket holding
    /// it (the last bound for the overflow bucket); `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<i64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(LATENCY_BOUNDS_NS[i.min(LATENCY_BOUNDS_NS.len() - 1)]);
            }
        }
        LATENCY_BOUNDS_NS.last().copied()
    }
}

/// The RTI's status file in a program's runtime directory.
pub const RTI_STATUS_FILE: &str = "rti.json";

/// What the RTI reports about a federation. Counts are since it started;
/// rates and grant quantiles over its last period, except in the file the
/// RTI writes as it ends, where they cover the whole run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RtiFigures {
    pub pid: u32,
    /// When this was written, ns since the epoch.
    pub updated_ns: i64,
    /// The federation's start time (0 until every federate proposed one).
    pub start_ns: i64,
    /// Tagged messages relayed (centralized coordination: those between
    /// federates go through the RTI), and per second.
    pub relayed: u64,
    pub relayed_per_s: f64,
    pub federates: Vec<RtiFederate>,
}

/// One federate as the RTI sees it. Tags are times since the start
/// (`None`: none yet).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RtiFederate {
    pub id: u16,
    pub connected: bool,
    /// Its last NET (next event tag) and LTC (latest tag confirmed).
    pub net_ns: Option<i64>,
    pub ltc_ns: Option<i64>,
    /// The last tag granted to it (TAG or PTAG).
    pub granted_ns: Option<i64>,
    pub grants: u64,
    /// How long it waited for each grant: from its first NET or LTC since
    /// the grant before (it asked to go on) to the grant.
    pub grant_latency: HistogramCounts,
    /// Over the last period (the whole run in the RTI's final write), as
    /// `RtiFigures`'s rates.
    pub grant_p50_ns: Option<i64>,
    pub grant_p99_ns: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_observation_lands_in_one_bucket_and_quantiles_read_bounds() {
        let h = Histogram::default();
        for ns in [0, 10_000, 10_001, 3_000_000, 2_000_000_000] {
            h.observe(ns);
        }
        let c = h.read();
        assert_eq!(c.count(), 5);
        assert_eq!(c.counts[0], 2, "up to and including the first bound");
        assert_eq!(c.counts[1], 1);
        assert_eq!(c.counts[8], 1, "3 ms is in the (2.5 ms, 5 ms] bucket");
        assert_eq!(c.counts[LATENCY_BOUNDS_NS.len()], 1, "above every bound");
        assert_eq!(c.quantile(0.5), Some(25_000));
        assert_eq!(c.quantile(0.99), Some(1_000_000_000));
        let later = {
            h.observe(40_000);
            h.read()
        };
        let recent = later.since(&c);
        assert_eq!((recent.count(), recent.sum_ns, recent.quantile(0.5)), (1, 40_000, Some(50_000)));
        assert_eq!(HistogramCounts::default().quantile(0.5), None);
    }
}
