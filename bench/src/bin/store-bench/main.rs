//! `store-bench`: what hprm-store costs a robot's data path, measured against
//! plain memory copies made in the same run, on the same machine.
//!
//! It starts its own `hprm-store` daemon (1 GiB memfd arena, `--populate`, so
//! no write into an object takes a page fault), connects one client, and
//! measures three things:
//!
//! a. **Latency by object size** (1 KB … 50 MB): `create` + copying the bytes
//!    in from a heap buffer + `seal` (what a producer pays to publish), and
//!    `get` + reading every byte (what a consumer pays to see the data; the
//!    read is real work, a sum of all u64 words). Beside them, the same copy
//!    into a heap buffer (memcpy) and the same sum over a heap buffer: the
//!    store's overhead is the gap between a store column and its baseline.
//! b. **Small-object operations per second** from one client: 64-byte objects
//!    through create+seal+get+release (the explicit path) and put+get+release,
//!    each for a fixed time. These are round trips to the daemon, so this is
//!    the per-message cost of the store, not a bandwidth.
//! c. **Large-write bandwidth**, store vs memcpy, for 10, 25 and 50 MB:
//!    create + copy + seal against the same copy into a pre-touched heap
//!    buffer, alternated rep by rep so that machine noise hits both alike.
//!    The ratio (store bandwidth / memcpy bandwidth, median over reps of the
//!    ratio within each rep) is what the "large writes" target judges.
//!
//! Units: KB = 10^3 and MB = 10^6 bytes, GB/s = 10^9 bytes per second, times
//! in microseconds. Medians and p99 (nearest rank: with 20 reps the p99 is the
//! slowest rep) are over the measured reps; warm-up reps are discarded.
//!
//! Output: progress on stderr; the markdown report on stdout and in
//! `OUT/store-YYYY-MM-DD.md` (UTC date), the same data with machine info in
//! `OUT/store-YYYY-MM-DD.json` (`bench/store/plot.py` draws it). Targets that
//! are missed are reported as MISS; the program still exits 0, because a
//! benchmark that fails is a measurement, not a crash.

mod daemon;
mod measurements;
mod report;
mod results;
mod socket_floor;
mod spill;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use clap::Parser;
use hprm_bench::date::{utc_date, utc_timestamp};
use hprm_bench::machine::workspace_revision;
use hprm_bench::report::write_files;
use serde::Serialize;

use crate::daemon::{find_store_bin, Daemon};
use crate::measurements::{Bench, SmallPath};
use crate::results::{MachineWithThp, Report, SmallOps, StoreAfter, StoreSetup, Targets, Units};

/// Object sizes for the latency table, in bytes (decimal units).
const LATENCY_SIZES: [u64; 7] = [1_000, 64_000, 1_000_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000];
/// Object sizes for the bandwidth comparison (the "large writes" target).
const BANDWIDTH_SIZES: [u64; 3] = [10_000_000, 25_000_000, 50_000_000];
/// Size of the small objects of (b).
const SMALL_SIZE: usize = 64;
/// Room for the largest object many times over; nothing is kept between
/// reps, so this only has to outsize fragmentation, never pile-ups.
const ARENA: &str = "1G";
/// A sealed object is visible at once; a get that waits this long means the
/// store is broken, and the benchmark should say so rather than hang.
const GET_TIMEOUT: Duration = Duration::from_secs(5);
/// Populating a 1 GiB arena takes well under a second; allow slow machines.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Large-write target: store bandwidth at least this share of memcpy's.
const WRITE_TARGET: f64 = 0.80;
/// Small-object target, in create+seal+get+release cycles per second.
const CYCLES_TARGET: f64 = 50_000.0;

/// Measures hprm-store latency, small-object throughput and large-write
/// bandwidth against memcpy, with a daemon of its own.
#[derive(Parser, Debug)]
#[command(name = "store-bench", version)]
struct Cli {
    /// Short run (the default): 20 reps per size, 2 s per small-object loop;
    /// well under a minute.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Long run: 200 reps per size, 10 s per small-object loop.
    #[arg(long)]
    pub(crate) full: bool,
    /// Directory for store-DATE.md and store-DATE.json.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    pub(crate) out: PathBuf,
    /// The hprm-store daemon binary [default: `hprm-store` beside this program].
    #[arg(long)]
    store_bin: Option<PathBuf>,
    /// Run the client and the daemon at SCHED_FIFO priority 10 on CPUs of
    /// their own (client CPU 0, daemon CPU 1), as a robot runs its data path,
    /// so that other processes cannot preempt them. Needs root or
    /// CAP_SYS_NICE. Results go to store-DATE-realtime.{md,json}.
    #[arg(long, conflicts_with = "spill_dir")]
    realtime: bool,
    /// Instead of the runs above: sends into the spill file of a store run
    /// with `--spill-dir DIR` (its arena held full) against sends into the
    /// shared-memory arena of another, alternated rep by rep (`spill.rs`).
    /// Results go to store-spill-DATE.md (and .json).
    #[arg(long)]
    spill_dir: Option<PathBuf>,
    /// With --spill-dir: the spilling store's `--spill-warm` (default: the
    /// daemon's, an eighth of the 256 MiB spill file).
    #[arg(long, requires = "spill_dir")]
    spill_warm: Option<String>,
}

/// SCHED_FIFO priority of the `--realtime` run.
const REALTIME_PRIORITY: u8 = 10;
/// CPUs of the client and the daemon in the `--realtime` run.
const CLIENT_CPU: usize = 0;
const DAEMON_CPU: usize = 1;

#[derive(Debug, Clone, Copy, Serialize)]
struct Plan {
    pub(crate) mode: &'static str,
    reps: usize,
    warmup_reps: usize,
    loop_seconds: f64,
    /// Small-object cycles run before each timed loop, to warm the daemon's
    /// tables and the connection.
    warmup_cycles: usize,
    /// Round trips timed for each round-trip baseline of (b).
    round_trips: usize,
}

const QUICK: Plan =
    Plan { mode: "quick", reps: 20, warmup_reps: 3, loop_seconds: 2.0, warmup_cycles: 2_000, round_trips: 5_000 };
const FULL: Plan =
    Plan { mode: "full", reps: 200, warmup_reps: 10, loop_seconds: 10.0, warmup_cycles: 10_000, round_trips: 50_000 };

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("store-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let plan = if cli.full { FULL } else { QUICK };
    let store_bin = find_store_bin(cli.store_bin)?;
    if let Some(dir) = &cli.spill_dir {
        return spill::run(&store_bin, dir, cli.spill_warm.as_deref(), plan, &cli.out);
    }
    let started = SystemTime::now();
    let (scheduling, daemon_args) = if cli.realtime {
        use hprm_realtime::{apply, CpuList};
        apply(Some(REALTIME_PRIORITY), Some(&CpuList(vec![CLIENT_CPU]))).context("cannot set up the --realtime run")?;
        let args = vec![
            "--realtime-priority".to_string(),
            REALTIME_PRIORITY.to_string(),
            "--cpus".into(),
            DAEMON_CPU.to_string(),
        ];
        (format!("SCHED_FIFO priority {REALTIME_PRIORITY}, client pinned to CPU {CLIENT_CPU}, daemon to CPU {DAEMON_CPU}"), args)
    } else {
        ("default (CFS, no pinning)".to_string(), Vec::new())
    };
    eprintln!(
        "store-bench: {} run, scheduling {scheduling}; starting {} (arena {ARENA}, --populate)",
        plan.mode,
        store_bin.display()
    );

    // Declared before the client so that it is dropped after it: the daemon
    // outlives every connection, also when `?` leaves early.
    let mut daemon = Daemon::start(&store_bin, ARENA, &daemon_args)?;
    let client = daemon.connect(STARTUP_TIMEOUT)?;
    let mut bench = Bench::new(&client, plan);
    // The floor's echo thread stands where the daemon does.
    bench.echo_cpu = cli.realtime.then_some(DAEMON_CPU);

    eprintln!("(a) latency by size: {} reps + {} warm-up per size", plan.reps, plan.warmup_reps);
    let latency = LATENCY_SIZES.iter().map(|&s| bench.latency(s)).collect::<Result<Vec<_>>>()?;
    eprintln!("(b) small-object cycles: {} s per path, one client", plan.loop_seconds);
    let explicit = bench.small_cycles(SmallPath::CreateSeal)?;
    let put = bench.small_cycles(SmallPath::Put)?;
    let round_trips = bench.round_trips()?;
    eprintln!("(c) large-write bandwidth, store vs memcpy: {} reps + {} warm-up per size", plan.reps, plan.warmup_reps);
    let bandwidth = BANDWIDTH_SIZES.iter().map(|&s| bench.bandwidth(s)).collect::<Result<Vec<_>>>()?;
    let stats_after = client.stats().context("cannot read the daemon's counters after the run")?;
    let deferred_deletes = bench.deferred_deletes;
    drop(bench);
    drop(client);
    let daemon_exit = daemon.stop()?;
    if !daemon_exit.success() {
        eprintln!("store-bench: warning: hprm-store exited with {daemon_exit} on SIGTERM (expected 0)");
    }

    let report = Report {
        schema: 1,
        date: utc_date(started),
        started_utc: utc_timestamp(started),
        plan,
        units: Units {
            size: "bytes; KB = 10^3, MB = 10^6",
            time: "microseconds",
            bandwidth: "GB/s = 10^9 bytes per second",
            p99: "nearest rank over the measured reps (with 20 reps: the slowest)",
        },
        machine: MachineWithThp::probe(),
        store: StoreSetup {
            binary: store_bin.display().to_string(),
            arena: ARENA,
            populate: true,
            scheduling,
            workspace_revision: workspace_revision(),
        },
        latency,
        small_ops: SmallOps {
            object_bytes: SMALL_SIZE,
            create_seal_get_release: explicit,
            put_get_release: put,
            round_trips,
        },
        bandwidth,
        store_after: StoreAfter { stats: stats_after, deferred_deletes, daemon_exit_code: daemon_exit.code() },
        targets: Targets::default(),
    };
    let report = Report { targets: report.judge(), ..report };

    let markdown = report.markdown();
    let suffix = if cli.realtime { "-realtime" } else { "" };
    let (md_path, json_path) = write_files(&cli.out, &format!("store-{}{suffix}", report.date), &markdown, &report)?;
    print!("{markdown}");
    eprintln!("store-bench: wrote {} and {}", md_path.display(), json_path.display());
    Ok(())
}
