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
//! `Recent` keeps the last runs of a federate's reactions (which, at what
//! tag, from when to when: [`RecentRun`]), for a live timeline.
//!
//! Latency is from a message's logical send time (the sender's tag, which
//! in real-time execution a sender reaches at or just after physical time
//! does) to the start of the tag that delivers it at the receiver, in
//! physical time: the transport, the wait for the receiver and its `after`
//! delay. Fast mode has no such relation, so nothing is recorded there.

use hprm_rti::figures::Histogram;
pub use hprm_rti::figures::{HistogramCounts, LATENCY_BOUNDS_NS};
use serde::{Deserialize, Serialize};

use crate::sync::atomic::{fence, AtomicI64, AtomicU64, Ordering};

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
            mean_ns: recent_busy.checked_div(recent_runs).unwrap_or(0),
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

/// How many runs `Recent` keeps: at least the runs of two status
/// periods of a federate running 2,000 reactions a second.
pub const RECENT_RUNS: usize = 4096;

/// One run in [`Recent`]: a seqlock (`seq` odd while it is written, then
/// `2n + 2` for the `n`th run), so a reader skips a slot overwritten while
/// it read.
#[derive(Debug, Default)]
struct RunSlot {
    seq: AtomicU64,
    reaction: AtomicU64,
    tag_time: AtomicI64,
    microstep: AtomicU64,
    start: AtomicI64,
    end: AtomicI64,
}

/// The last [`RECENT_RUNS`] runs of a federate's reactions, written by
/// whichever thread ran each (the scheduler, its workers).
#[derive(Debug)]
pub(crate) struct Recent {
    next: AtomicU64,
    slots: Box<[RunSlot]>,
}

impl Default for Recent {
    fn default() -> Recent {
        Recent::keeping(RECENT_RUNS)
    }
}

impl Recent {
    /// Keeps the last `runs` runs ([`RECENT_RUNS`]; fewer in the models).
    fn keeping(runs: usize) -> Recent {
        Recent { next: AtomicU64::new(0), slots: (0..runs).map(|_| RunSlot::default()).collect() }
    }

    fn slot(&self, n: u64) -> &RunSlot {
        &self.slots[(n % self.slots.len() as u64) as usize]
    }

    /// Reaction `reaction` ran at `tag` from `start` to `end` (ns since the epoch).
    #[inline]
    pub fn record(&self, reaction: usize, tag: hprm_rti::Tag, start: i64, end: i64) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = self.slot(n);
        slot.seq.store(2 * n + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.reaction.store(reaction as u64, Ordering::Relaxed);
        slot.tag_time.store(tag.time, Ordering::Relaxed);
        slot.microstep.store(u64::from(tag.microstep), Ordering::Relaxed);
        slot.start.store(start, Ordering::Relaxed);
        slot.end.store(end, Ordering::Relaxed);
        slot.seq.store(2 * n + 2, Ordering::Release);
    }

    /// How many runs were recorded so far.
    pub fn count(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// The runs recorded from the `from`th on (those still kept, and not
    /// being overwritten), oldest first; tags as time since `start`.
    pub fn since(&self, from: u64, start: i64) -> Vec<RecentRun> {
        let end = self.count();
        let from = from.max(end.saturating_sub(self.slots.len() as u64));
        (from..end)
            .filter_map(|n| {
                let slot = self.slot(n);
                if slot.seq.load(Ordering::Acquire) != 2 * n + 2 {
                    return None;
                }
                let run = RecentRun {
                    reaction: slot.reaction.load(Ordering::Relaxed) as usize,
                    tag_ns: slot.tag_time.load(Ordering::Relaxed) - start,
                    microstep: slot.microstep.load(Ordering::Relaxed) as u32,
                    start_ns: slot.start.load(Ordering::Relaxed),
                    end_ns: slot.end.load(Ordering::Relaxed),
                };
                fence(Ordering::Acquire);
                (slot.seq.load(Ordering::Relaxed) == 2 * n + 2).then_some(run)
            })
            .collect()
    }
}

/// A run of a reaction, in a status file's timeline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentRun {
    /// Its id (a key of the status's `reaction_names`).
    pub reaction: usize,
    /// Its tag, as time since the start, and microstep.
    pub tag_ns: i64,
    pub microstep: u32,
    /// Physical time, ns since the epoch.
    pub start_ns: i64,
    pub end_ns: i64,
}

/// Models of [`Recent`]'s seqlock (loom, `scripts/loom.sh`): a reader
/// never returns a torn run (fields of two runs) while a writer overwrites
/// the slot it reads. Caught with a mistake put in on purpose and taken out
/// again: `since` without its `Acquire` fence between the fields and the
/// second `seq` read, and `record` without its `Release` fence after
/// marking the slot odd.
#[cfg(all(test, loom))]
mod recent_loom {
    use super::*;
    use crate::sync::thread;
    use std::sync::Arc;

    /// Run `i` of the model: every field says `i`.
    fn record(r: &Recent, i: i64) {
        r.record(i as usize, hprm_rti::Tag::new(i, i as u32), i, i);
    }

    fn whole(run: &RecentRun) -> bool {
        let i = run.reaction as i64;
        (run.tag_ns, i64::from(run.microstep), run.start_ns, run.end_ns) == (i, i, i, i)
    }

    /// One slot holding run 0: the writer records run 1 over it while the
    /// reader reads what is there; whatever it returns is whole. Bounded
    /// to 3 preemptions unless `LOOM_MAX_PREEMPTIONS` says otherwise
    /// (every field a relaxed atomic: unbounded, it takes 90 s; it passes).
    #[test]
    fn a_reader_never_returns_a_torn_run() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = model.preemption_bound.or(Some(3));
        model.check(|| {
            let recent = Arc::new(Recent::keeping(1));
            record(&recent, 0);
            let writer = {
                let recent = recent.clone();
                thread::spawn(move || record(&recent, 1))
            };
            for run in recent.since(0, 0) {
                assert!(whole(&run), "a torn run: {run:?}");
            }
            writer.join().expect("the writer");
            let last = recent.since(0, 0);
            assert_eq!(last.len(), 1);
            assert!(whole(&last[0]) && last[0].reaction == 1);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_runs_keep_the_last_and_read_from_where_asked() {
        let r = Recent::default();
        let tag = |t| hprm_rti::Tag::new(t, 0);
        for i in 0..(RECENT_RUNS as i64 + 10) {
            r.record(3, tag(100 + i), 1000 + i, 1001 + i);
        }
        let all = r.since(0, 100);
        assert_eq!(all.len(), RECENT_RUNS, "the oldest were overwritten");
        assert_eq!((all[0].tag_ns, all[0].start_ns), (10, 1010));
        let last = r.since(r.count() - 2, 100);
        assert_eq!(
            last.iter().map(|x| x.end_ns).collect::<Vec<_>>(),
            [1001 + RECENT_RUNS as i64 + 8, 1001 + RECENT_RUNS as i64 + 9]
        );
        assert!(r.since(r.count(), 100).is_empty());
    }

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
