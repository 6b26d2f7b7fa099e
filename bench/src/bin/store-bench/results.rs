//! The results: the rows of each measurement, the store's setup and the
//! machine, and the [`Report`] that gathers them; the JSON file is this
//! report serialized.

use hprm_bench::machine::{read_trimmed, Machine};
use hprm_bench::summary::Summary;
use hprm_store::Stats;
use serde::Serialize;

use crate::Plan;

#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) schema: u32,
    pub(crate) date: String,
    pub(crate) started_utc: String,
    pub(crate) plan: Plan,
    pub(crate) units: Units,
    pub(crate) machine: MachineWithThp,
    pub(crate) store: StoreSetup,
    pub(crate) latency: Vec<LatencyRow>,
    pub(crate) small_ops: SmallOps,
    pub(crate) bandwidth: Vec<BandwidthRow>,
    pub(crate) store_after: StoreAfter,
    pub(crate) targets: Targets,
}

#[derive(Debug, Serialize)]
pub(crate) struct Units {
    pub(crate) size: &'static str,
    pub(crate) time: &'static str,
    pub(crate) bandwidth: &'static str,
    pub(crate) p99: &'static str,
}

#[derive(Debug, Serialize)]
pub(crate) struct StoreSetup {
    pub(crate) binary: String,
    pub(crate) arena: &'static str,
    pub(crate) populate: bool,
    pub(crate) scheduling: String,
    pub(crate) workspace_revision: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct LatencyRow {
    pub(crate) size_bytes: u64,
    pub(crate) label: String,
    pub(crate) reps: usize,
    pub(crate) create_write_seal: Summary,
    /// The copy into the object alone (inside create_write_seal): the rest
    /// of create_write_seal is the two round trips.
    pub(crate) write_copy: Summary,
    pub(crate) get_read: Summary,
    /// The same copy into a pre-touched heap buffer.
    pub(crate) memcpy: Summary,
    /// The same word sum over a heap buffer.
    pub(crate) heap_read: Summary,
}

#[derive(Debug, Serialize)]
pub(crate) struct SmallOps {
    pub(crate) object_bytes: usize,
    pub(crate) create_seal_get_release: SmallLoop,
    pub(crate) put_get_release: SmallLoop,
    pub(crate) round_trips: RoundTrips,
}

#[derive(Debug, Serialize)]
pub(crate) struct RoundTrips {
    pub(crate) samples: usize,
    /// `contains` of an absent id: the store's cheapest request.
    pub(crate) store_contains: Summary,
    /// 64-byte ping-pong over a Unix socket pair between two threads.
    pub(crate) raw_socket: Summary,
    /// The same, both sides polling before blocking (as the store does).
    pub(crate) raw_socket_polling: Summary,
    /// Replies a small cycle waits for (create, get).
    pub(crate) replies_per_cycle: u32,
    /// 1 / (replies_per_cycle × polling median): the most any design that
    /// waits for that many replies could do on this machine.
    pub(crate) cycles_per_s_at_raw_floor: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct SmallLoop {
    pub(crate) path: &'static str,
    pub(crate) seconds: f64,
    pub(crate) cycles: u64,
    pub(crate) cycles_per_s: f64,
    pub(crate) cycle: Summary,
    /// Objects the clean-up evict removed; should equal the cycles run
    /// (warm-up included), or released objects were left pinned.
    pub(crate) evicted_after: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct BandwidthRow {
    pub(crate) size_bytes: u64,
    pub(crate) label: String,
    pub(crate) reps: usize,
    pub(crate) store_gbps: f64,
    pub(crate) memcpy_gbps: f64,
    /// Median over reps of (store bandwidth / memcpy bandwidth) within a rep.
    pub(crate) ratio: f64,
    pub(crate) ratio_min: f64,
    pub(crate) ratio_max: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct StoreAfter {
    /// The daemon's counters at the end: nothing should be left in use.
    pub(crate) stats: Stats,
    /// Deletes of released objects that the daemon deferred (expected 0).
    pub(crate) deferred_deletes: u64,
    /// Exit code after SIGTERM (expected 0; none if killed by a signal).
    pub(crate) daemon_exit_code: Option<i32>,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Targets {
    pub(crate) large_write: Option<WriteTarget>,
    pub(crate) small_cycles: Option<CyclesTarget>,
}

#[derive(Debug, Serialize)]
pub(crate) struct WriteTarget {
    pub(crate) threshold: f64,
    /// Median of the per-size ratios.
    pub(crate) ratio: f64,
    pub(crate) per_size: Vec<SizeRatio>,
    pub(crate) pass: bool,
    pub(crate) line: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct SizeRatio {
    pub(crate) label: String,
    pub(crate) ratio: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct CyclesTarget {
    pub(crate) threshold: f64,
    pub(crate) create_seal_cycles_per_s: f64,
    pub(crate) put_cycles_per_s: f64,
    pub(crate) pass: bool,
    pub(crate) line: String,
}

/// The machine, and the THP modes, which matter here: memcpy's heap
/// destination may get huge pages where the store's memfd arena (shmem) does
/// not, or the reverse.
#[derive(Debug, Serialize)]
pub(crate) struct MachineWithThp {
    #[serde(flatten)]
    pub(crate) host: Machine,
    pub(crate) thp_enabled: Option<String>,
    pub(crate) thp_shmem_enabled: Option<String>,
}

impl MachineWithThp {
    pub(crate) fn probe() -> MachineWithThp {
        MachineWithThp {
            host: Machine::probe(),
            thp_enabled: read_trimmed("/sys/kernel/mm/transparent_hugepage/enabled"),
            thp_shmem_enabled: read_trimmed("/sys/kernel/mm/transparent_hugepage/shmem_enabled"),
        }
    }
}
