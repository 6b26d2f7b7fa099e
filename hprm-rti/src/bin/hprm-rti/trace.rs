//! `--trace FILE`: the grants the RTI sends, as Chrome trace events (the
//! format of `hprm_node`'s federate traces, which a launcher merges with
//! this one: instant events named TAG/PTAG, one thread per receiving
//! federate, named `federate N`, `otherData.hprm_epoch_ns` the epoch of
//! `ts` in µs).
//!
//! Recording is a push under the federation's lock, which `deliver` holds
//! anyway; the file is written once, when the RTI ends.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use hprm_rti::grant::{FedId, Grant};
use hprm_rti::tag::{Instant, Tag};

struct Record {
    to: FedId,
    provisional: bool,
    tag: Tag,
    at: Instant,
}

/// The grants sent so far.
#[derive(Default)]
pub struct GrantTrace {
    records: Mutex<Vec<Record>>,
}

/// The system clock, ns since the Unix epoch: the clock federates stamp
/// their trace events with.
fn now() -> Instant {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

impl GrantTrace {
    pub fn new() -> GrantTrace {
        GrantTrace { records: Mutex::new(Vec::with_capacity(1 << 16)) }
    }

    pub fn record(&self, to: FedId, grant: &Grant) {
        let (provisional, tag) = match *grant {
            Grant::Tag(t) => (false, t),
            Grant::Provisional(t) => (true, t),
            Grant::DownstreamNext(_) => return,
        };
        let at = now();
        self.records.lock().unwrap_or_else(PoisonError::into_inner).push(Record { to, provisional, tag, at });
    }

    /// Writes the trace; tags in `args` are relative to `start` (the
    /// federation's start time, 0 if it never started).
    pub fn write(&self, path: &Path, start: Instant) -> std::io::Result<()> {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let pid = std::process::id();
        let epoch = records.first().map_or_else(now, |r| r.at);
        let mut out = String::with_capacity(records.len() * 140 + 256);
        let _ = write!(out, r#"{{"name":"process_name","ph":"M","pid":{pid},"tid":0,"args":{{"name":"hprm-rti"}}}}"#);
        let mut feds: Vec<FedId> = records.iter().map(|r| r.to).collect();
        feds.sort_unstable();
        feds.dedup();
        for f in feds {
            let _ = write!(out, ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":\"federate {f}\"}}}}", u32::from(f) + 1);
        }
        for r in records.iter() {
            let name = if r.provisional { "PTAG" } else { "TAG" };
            let tag_ns = if r.tag.time == i64::MAX { i64::MAX } else { r.tag.time.saturating_sub(start) };
            let _ = write!(
                out,
                ",\n{{\"name\":\"{name}\",\"cat\":\"grant\",\"ph\":\"i\",\"s\":\"t\",\"pid\":{pid},\"tid\":{},\"ts\":{:.3},\"args\":{{\"to\":{},\"tag_ns\":{tag_ns},\"microstep\":{}}}}}",
                u32::from(r.to) + 1,
                (r.at - epoch) as f64 / 1000.0,
                r.to,
                r.tag.microstep
            );
        }
        std::fs::write(path, format!("{{\"traceEvents\":[\n{out}\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{{\"hprm_epoch_ns\":{epoch}}}}}\n"))
    }
}
