//! The command line: the coordinator's options, the subcommands (`launch`,
//! `federate`, `floor-server`, `compare`), the names they take (workloads,
//! transports, coordinations, reply variants), and the [`Plan`] that
//! `--quick` or `--full` makes of them.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use hprm_node::Coordination;
use serde::{Deserialize, Serialize};

use crate::STP;

/// Measures hprm-node federates (small-message latency, sustained rate,
/// broadcast and gather) against raw socket and memcpy floors in the same run.
#[derive(Parser, Debug)]
#[command(name = "node-bench", version, args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) role: Option<Role>,
    /// Short run (the default): fewer sizes and rounds; about a minute.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Long run: every size, more rounds; several minutes.
    #[arg(long)]
    pub(crate) full: bool,
    /// Run only these workloads (comma-separated or repeated) [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) only: Vec<Workload>,
    /// Directory for node-DATE.md and node-DATE.json.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    pub(crate) out: PathBuf,
    /// Small-message sizes in bytes, comma-separated [default: the mode's].
    #[arg(long, value_delimiter = ',')]
    pub(crate) small_sizes: Vec<usize>,
    /// Broadcast sizes in bytes, comma-separated [default: the mode's].
    #[arg(long, value_delimiter = ',')]
    pub(crate) broadcast_sizes: Vec<usize>,
    /// Keep each launch's directory (its log, the federates' results) and
    /// print where it is.
    #[arg(long)]
    pub(crate) keep_runs: bool,
    /// Start the stores without `--populate` (by default the benchmark's
    /// stores pre-fault their arena, as a robot's store would run, so no
    /// write into an object pays a page fault). For `compare` too.
    #[arg(long, global = true)]
    pub(crate) no_populate: bool,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Role {
    /// Launches one benchmark program (store, RTI, federates); run by node-bench.
    #[command(hide = true)]
    Launch,
    /// Runs one federate of a benchmark program; run by the launcher.
    #[command(hide = true)]
    Federate,
    /// The far end of a socket floor: echoes framed messages, then prints
    /// what it measured as JSON on stdout.
    #[command(hide = true)]
    FloorServer {
        #[arg(long, value_enum)]
        transport: Transport,
        /// Socket path (Unix transport).
        #[arg(long)]
        path: Option<PathBuf>,
        /// Poll (non-blocking reads) this many µs before blocking.
        #[arg(long, default_value_t = 0)]
        poll_us: u64,
    },
    /// Compares two builds of the daemons (hprm-rti, hprm-store, or both)
    /// on one workload. Launches alternate between them (A, B, A, B, ...),
    /// so that the machine's slow and fast spells hit both alike; each
    /// side's figure is the median over its launches of each launch's p50
    /// (the rate: of each launch's rate). A daemon not given is the one
    /// beside this program, for both sides. Progress on stderr, the
    /// comparison on stdout.
    Compare {
        /// Side A's hprm-rti binary (say, a build of main).
        #[arg(long)]
        rti_a: Option<PathBuf>,
        /// Side B's hprm-rti binary.
        #[arg(long)]
        rti_b: Option<PathBuf>,
        /// Side A's hprm-store binary.
        #[arg(long)]
        store_a: Option<PathBuf>,
        /// Side B's hprm-store binary.
        #[arg(long)]
        store_b: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "small")]
        workload: Workload,
        #[arg(long, value_enum, default_value = "centralized-unix")]
        coord: Coord,
        /// Payload bytes (the rate's messages are 8 bytes whatever this says).
        #[arg(long, default_value_t = 8)]
        size: usize,
        /// Launches of each build.
        #[arg(long, default_value_t = 12)]
        launches: usize,
        /// Measured rounds (messages, for the rate) per launch.
        #[arg(long, default_value_t = 2000)]
        rounds: u64,
        /// Side B's launches run watched: this `hprm` binary's `hprm
        /// dashboard` open, read as a browser and Prometheus would (its
        /// `/events` stream followed, `/metrics` fetched every second);
        /// side A's unwatched. The daemons may then be the same on both.
        #[arg(long, value_name = "HPRM")]
        dashboard_b: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Workload {
    /// Ping-pong latency of 8 B - 64 KiB messages.
    Small,
    /// Sustained messages per second.
    Rate,
    /// Broadcast of 1 KB - 50 MB to 4 receivers, and gather of their replies.
    Broadcast,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Transport {
    Tcp,
    Uds,
}

impl Transport {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Transport::Tcp => "TCP",
            Transport::Uds => "Unix socket",
        }
    }
}

/// Coordination, and how federates reach the RTI and each other: loopback
/// TCP (as across hosts), or Unix domain sockets (hprm-node's default on
/// one host, `HPRM_LOCAL_TRANSPORT=unix`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Coord {
    /// Through the RTI, over TCP.
    Centralized,
    /// Through the RTI, over its Unix socket.
    CentralizedUnix,
    /// Peer to peer over loopback TCP.
    Decentralized,
    /// Peer to peer over Unix domain sockets.
    DecentralizedUnix,
}

impl Coord {
    pub(crate) fn coordination(self) -> Coordination {
        match self {
            Coord::Centralized | Coord::CentralizedUnix => Coordination::Centralized,
            Coord::Decentralized | Coord::DecentralizedUnix => Coordination::Decentralized { stp: STP },
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Coord::Centralized => "centralized",
            Coord::CentralizedUnix => "centralized-unix",
            Coord::Decentralized => "decentralized",
            Coord::DecentralizedUnix => "decentralized-unix",
        }
    }

    /// The socket floor that carries the same kind of hop.
    pub(crate) fn transport(self) -> Transport {
        match self {
            Coord::Centralized | Coord::Decentralized => Transport::Tcp,
            Coord::CentralizedUnix | Coord::DecentralizedUnix => Transport::Uds,
        }
    }

    /// `HPRM_LOCAL_TRANSPORT` for the federates (set either way, so that a
    /// change of hprm-node's default does not change what is measured).
    pub(crate) fn local_transport(self) -> &'static str {
        match self {
            Coord::CentralizedUnix | Coord::DecentralizedUnix => "unix",
            Coord::Centralized | Coord::Decentralized => "tcp",
        }
    }
}

/// The paths of the small-message and rate workloads.
pub(crate) const COORDS: [Coord; 4] =
    [Coord::Decentralized, Coord::DecentralizedUnix, Coord::Centralized, Coord::CentralizedUnix];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Variant {
    Echo,
    Fresh,
}

impl Variant {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Variant::Echo => "echo",
            Variant::Fresh => "fresh",
        }
    }
}

/// How much to measure.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Plan {
    pub(crate) mode: &'static str,
    pub(crate) small_sizes: Vec<usize>,
    /// The small-message sweep (floors and hprm, size by size) is run this
    /// many times and the samples pooled: wake-up costs on this kind of
    /// machine flip between a fast and a slow mode with background load,
    /// and passes spread over time let that hit floors and hprm alike.
    pub(crate) small_passes: usize,
    pub(crate) small_rounds: u64,
    pub(crate) small_warmup: u64,
    pub(crate) rate_messages: u64,
    pub(crate) rate_warmup: u64,
    pub(crate) broadcast_sizes: Vec<usize>,
    pub(crate) broadcast_rounds: u64,
    pub(crate) broadcast_warmup: u64,
    pub(crate) memcpy_reps: usize,
}

impl Plan {
    pub(crate) fn quick() -> Plan {
        Plan {
            mode: "quick",
            small_sizes: vec![8, 512, 4096, 65536],
            small_passes: 2,
            small_rounds: 1_000,
            small_warmup: 100,
            rate_messages: 20_000,
            rate_warmup: 2_000,
            broadcast_sizes: vec![1_000_000, 10_000_000, 50_000_000],
            broadcast_rounds: 10,
            broadcast_warmup: 2,
            memcpy_reps: 10,
        }
    }

    pub(crate) fn full() -> Plan {
        Plan {
            mode: "full",
            small_sizes: vec![8, 64, 512, 4096, 32768, 65536],
            small_passes: 5,
            small_rounds: 2_000,
            small_warmup: 200,
            rate_messages: 200_000,
            rate_warmup: 10_000,
            broadcast_sizes: vec![1_000, 64_000, 1_000_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000],
            broadcast_rounds: 60,
            broadcast_warmup: 5,
            memcpy_reps: 30,
        }
    }
}
