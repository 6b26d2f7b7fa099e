//! The results: the rows each workload and floor produces, the run's setup
//! and machine, and the [`Report`] that gathers them; the JSON file is this
//! report serialized.

use hprm_bench::machine::Machine;
use hprm_bench::summary::{dec4, Counted};
use serde::Serialize;

use crate::cli::{Coord, Plan, Transport, Variant};

#[derive(Debug, Serialize)]
pub(crate) struct FloorRow {
    pub(crate) transport: Transport,
    /// Both ends poll for FLOOR_POLL before blocking.
    pub(crate) polling: bool,
    pub(crate) size: usize,
    pub(crate) label: String,
    pub(crate) one_way: Counted,
    pub(crate) rtt: Counted,
    /// One-way p50 of each pass.
    pub(crate) pass_medians_us: Vec<f64>,
    /// Round-trip p50 of each pass.
    pub(crate) rtt_pass_medians_us: Vec<f64>,
}

/// A round trip through a real `hprm-rti` ([`rti_round_trip`](crate::rti_round_trip::rti_round_trip)).
#[derive(Debug, Serialize)]
pub(crate) struct RtiRow {
    pub(crate) transport: Transport,
    /// The client polls (yielding) for `hprm_node::DEFAULT_SPIN` before
    /// blocking, as hprm-node's scheduler does.
    pub(crate) polling: bool,
    /// The small-message size measured (see `rti_round_trip` for what
    /// the TAGGED_MESSAGE then carries).
    pub(crate) size: usize,
    pub(crate) label: String,
    pub(crate) rtt: Counted,
    /// Round-trip p50 of each pass.
    pub(crate) pass_medians_us: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub(crate) struct MemcpyRow {
    pub(crate) size: usize,
    pub(crate) label: String,
    pub(crate) memcpy: Counted,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Floors {
    pub(crate) ping_pong: Vec<FloorRow>,
    /// One-federate federations relaying to themselves through the RTI.
    pub(crate) rti_round_trip: Vec<RtiRow>,
    pub(crate) poll_us: u64,
    pub(crate) memcpy: Vec<MemcpyRow>,
}

#[derive(Debug, Serialize)]
pub(crate) struct SmallRow {
    pub(crate) size: usize,
    pub(crate) label: String,
    pub(crate) coordination: Coord,
    /// ping -> pong, by pong's clock against ping's stamp.
    pub(crate) one_way: Option<Counted>,
    /// pong -> ping.
    pub(crate) one_way_back: Option<Counted>,
    pub(crate) rtt: Option<Counted>,
    /// One-way p50 of each pass.
    pub(crate) pass_medians_us: Vec<f64>,
    pub(crate) tardy: u64,
    pub(crate) error: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct RateRow {
    pub(crate) path: String,
    pub(crate) messages: u64,
    pub(crate) seconds: f64,
    pub(crate) msgs_per_s: f64,
    /// Messages processed after their tag (expected 0).
    pub(crate) tardy: u64,
    pub(crate) error: Option<String>,
}

impl RateRow {
    /// From the receive times of the first measured message and the last.
    pub(crate) fn from_span(path: String, mark: i64, last: i64, count: u64, expected: u64) -> RateRow {
        let seconds = (last - mark) as f64 / 1e9;
        let error = (count != expected).then(|| format!("{count} of {expected} measured messages arrived"));
        // count - 1 intervals between the mark and the last message.
        let rate = if seconds > 0.0 { count.saturating_sub(1) as f64 / seconds } else { f64::NAN };
        RateRow { path, messages: count, seconds: dec4(seconds), msgs_per_s: rate.round(), tardy: 0, error }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct BroadcastRow {
    pub(crate) size: usize,
    pub(crate) label: String,
    pub(crate) variant: Variant,
    pub(crate) coordination: Coord,
    /// Source's send to the last reply processed.
    pub(crate) latency: Option<Counted>,
    /// Source's send to a receiver's reaction (all receivers' samples).
    pub(crate) received: Option<Counted>,
    /// Source's send to a receiver's reply being set.
    pub(crate) replied: Option<Counted>,
    /// Source's send to the first reply processed.
    pub(crate) first_reply: Option<Counted>,
    pub(crate) memcpy_us: f64,
    pub(crate) ratio_to_memcpy: Option<f64>,
    /// Replies processed after their tag (decentralized; see STP).
    pub(crate) tardy: u64,
    pub(crate) error: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Target {
    pub(crate) name: &'static str,
    /// None: not measured in this run.
    pub(crate) pass: Option<bool>,
    pub(crate) line: String,
    /// Why it was missed, from this run's figures.
    pub(crate) why: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Units {
    pub(crate) size: &'static str,
    pub(crate) time: &'static str,
    pub(crate) p99: &'static str,
}

#[derive(Debug, Serialize)]
pub(crate) struct Setup {
    pub(crate) workspace_revision: Option<String>,
    pub(crate) fast: bool,
    pub(crate) stp_ms: u64,
    pub(crate) store_populate: bool,
    pub(crate) receivers: usize,
    pub(crate) rate_payload_bytes: usize,
    pub(crate) out_of_band_threshold: usize,
}

#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) schema: u32,
    pub(crate) date: String,
    pub(crate) started_utc: String,
    pub(crate) seconds: f64,
    pub(crate) plan: Plan,
    pub(crate) units: Units,
    pub(crate) machine: MachineWithLoad,
    pub(crate) setup: Setup,
    pub(crate) floors: Floors,
    pub(crate) small: Vec<SmallRow>,
    pub(crate) rate: Vec<RateRow>,
    pub(crate) broadcast: Vec<BroadcastRow>,
    pub(crate) targets: Vec<Target>,
}

/// The machine, and /proc/loadavg when the run started and when it ended:
/// on a shared 2-CPU machine, how busy the rest of it was explains a lot.
#[derive(Debug, Serialize)]
pub(crate) struct MachineWithLoad {
    #[serde(flatten)]
    pub(crate) host: Machine,
    pub(crate) loadavg_start: Option<String>,
    pub(crate) loadavg_end: Option<String>,
}

impl MachineWithLoad {
    pub(crate) fn probe() -> MachineWithLoad {
        MachineWithLoad { host: Machine::probe(), loadavg_start: loadavg(), loadavg_end: None }
    }
}

/// The three load averages of /proc/loadavg.
pub(crate) fn loadavg() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}
