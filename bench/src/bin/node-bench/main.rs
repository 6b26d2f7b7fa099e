//! `node-bench`: what the federate runtime (`hprm-node`) costs, measured
//! against raw sockets and memcpy in the same run, on the same machine.
//!
//! Every figure comes from real processes: each benchmark is a [`Program`](hprm_node::Program)
//! launched with `hprm_node::launch::Launch` (its own `hprm-store`, its own
//! `hprm-rti`, one process per federate, fast mode), and the floors beside
//! it are two-process socket ping-pongs and a memcpy made in the same
//! invocation.
//!
//! 1. **Small messages** (8 B … 64 KiB; `--only small`): federate `ping`
//!    sends a value with a `Buffer` of the size and a send stamp; federate
//!    `pong` echoes it; the echo triggers the next round one microstep
//!    later. One-way latency is pong's clock minus ping's stamp (one host,
//!    one clock), round trip is ping's. Centralized (relayed through the
//!    RTI, grants) and decentralized (peer to peer, over TCP and over Unix
//!    sockets). Floors: a TCP (TCP_NODELAY) and a Unix-socket ping-pong
//!    between two processes with the same sizes, measured the same way,
//!    with blocking reads and with polling ones. The sweep runs several
//!    passes; the one-way target is judged on ratios paired within a pass.
//! 2. **Sustained rate** (`--only rate`): a source sends 8-byte messages as
//!    fast as the runtime lets it (a logical action rescheduled every
//!    microstep), a sink counts; messages per second at the sink. Floor:
//!    the same stream of framed 8-byte writes over TCP and a Unix socket.
//! 3. **Broadcast and gather** (`--only broadcast`; BENCHMARKS.md workload
//!    3): a source loans an S-byte uint8 buffer from the store, fills it,
//!    and sends it to 4 receiver federates; each replies, *echo* (sends back
//!    the buffer it got) or *fresh* (loans and fills a new S-byte buffer);
//!    latency is from the source's send to the last reply, by the source's
//!    clock. Floor: one memcpy of S bytes between pre-touched heap buffers.
//!
//! One binary plays every role: without a subcommand it is the coordinator;
//! `node-bench launch` (one program's launcher, run by the coordinator so
//! that Ctrl-C reaches a launcher that stops its federates and daemons) and
//! `node-bench federate` (one federate, run by the launcher) rebuild the
//! same program from the JSON spec in `HPRM_BENCH_SPEC`; `node-bench
//! floor-server` is the far end of the socket floors. Federates hand their
//! samples back as JSON files in a per-launch temporary directory.
//! `node-bench compare --rti-a A --rti-b B` puts two `hprm-rti` builds side
//! by side on one workload, launches alternating between them;
//! `--dashboard-b HPRM` runs side B's launches watched by `hprm dashboard`
//! (`watch`), for what watching a program costs it.
//!
//! Output: progress on stderr; the markdown report on stdout and in
//! `OUT/node-YYYY-MM-DD.md` (UTC), the data in `OUT/node-YYYY-MM-DD.json`
//! (`bench/node/plot.py` draws it). Missed targets are reported, not
//! failed: a benchmark that misses is a measurement, not a crash.

mod cli;
mod compare;
mod coordinator;
mod floors;
mod launch;
mod programs;
mod report;
mod results;
mod roles;
mod rti_round_trip;
mod targets;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::cli::{Cli, Role};
use crate::compare::{compare, Daemons};
use crate::coordinator::coordinator;
use crate::floors::floor_server;
use crate::roles::{federate_role, launch_role};

/// The spec of the program a `launch` or `federate` process runs.
const SPEC_ENV: &str = "HPRM_BENCH_SPEC";
/// Log filter of federate processes (their logs go to the launch's log
/// file, shown when a launch fails).
const LOG_ENV: &str = "HPRM_BENCH_LOG";
/// Safe-to-process offset of the decentralized runs. In fast mode every tag
/// of a ping-pong chain has the start time (only microsteps advance), so
/// the STP window (tag time + STP in physical time) has closed for good
/// after the first tag: the value only sets how long the very first tag
/// waits for inputs whose status nobody has sent yet.
const STP: Duration = Duration::from_millis(5);
/// Receivers of the broadcast (BENCHMARKS.md workload 3).
const RECEIVERS: usize = 4;
/// Payload of the sustained-rate stream.
const RATE_SIZE: usize = 8;
/// The launcher kills a program that runs longer than this.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(240);
/// Targets (from the issue).
const ONE_WAY_TARGET: f64 = 2.0;
const BROADCAST_TARGET: f64 = 3.0;
const BROADCAST_TARGET_SIZE: usize = 50_000_000;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (who, result) = match cli.role {
        None => ("node-bench", coordinator(&cli)),
        Some(Role::Launch) => ("node-bench launch", launch_role()),
        Some(Role::Federate) => ("node-bench federate", federate_role()),
        Some(Role::FloorServer { transport, ref path, poll_us }) => {
            ("node-bench floor-server", floor_server(transport, path.as_deref(), Duration::from_micros(poll_us)))
        }
        Some(Role::Compare {
            ref rti_a,
            ref rti_b,
            ref store_a,
            ref store_b,
            workload,
            coord,
            size,
            launches,
            rounds,
            ref dashboard_b,
        }) => {
            let sides = [
                Daemons { rti: rti_a.as_deref(), store: store_a.as_deref() },
                Daemons { rti: rti_b.as_deref(), store: store_b.as_deref() },
            ];
            let run = crate::compare::Run { workload, coord, size, launches, rounds, populate: !cli.no_populate };
            ("node-bench compare", compare(sides, dashboard_b.as_deref(), run))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{who}: {e:#}");
            ExitCode::FAILURE
        }
    }
}
