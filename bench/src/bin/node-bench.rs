//! `node-bench`: what the federate runtime (`hprm-node`) costs, measured
//! against raw sockets and memcpy in the same run, on the same machine.
//!
//! Every figure comes from real processes: each benchmark is a [`Program`]
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
//! by side on one workload, launches alternating between them.
//!
//! Output: progress on stderr; the markdown report on stdout and in
//! `OUT/node-YYYY-MM-DD.md` (UTC), the data in `OUT/node-YYYY-MM-DD.json`
//! (`bench/plot_node.py` draws it). Missed targets are reported, not
//! failed: a benchmark that misses is a measurement, not a crash.

use std::collections::BTreeMap;
use std::fs::File;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use hprm_bench::date::{utc_date, utc_timestamp};
use hprm_bench::machine::{workspace_revision, Machine};
use hprm_bench::report::{fmt_us, pass_miss, size_label, thousands, write_files};
use hprm_bench::summary::{dec4, median, Counted};
use hprm_node::launch::{find_binary, options_from_env, Launch, StandaloneRti};
use hprm_node::payload::{Buffer, Dtype};
use hprm_node::{run_federate, Coordination, Ctx, Input, Output, Program};
use hprm_rti::frames::{Frame as RtiFrame, FrameBuffer};
use hprm_rti::wire::{encode, encode_tagged, Limits, Message};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

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

/// Measures hprm-node federates (small-message latency, sustained rate,
/// broadcast and gather) against raw socket and memcpy floors in the same run.
#[derive(Parser, Debug)]
#[command(name = "node-bench", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    role: Option<Role>,
    /// Short run (the default): fewer sizes and rounds; about a minute.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Long run: every size, more rounds; several minutes.
    #[arg(long)]
    full: bool,
    /// Run only these workloads (comma-separated or repeated) [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Workload>,
    /// Directory for node-DATE.md and node-DATE.json.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    out: PathBuf,
    /// Small-message sizes in bytes, comma-separated [default: the mode's].
    #[arg(long, value_delimiter = ',')]
    small_sizes: Vec<usize>,
    /// Broadcast sizes in bytes, comma-separated [default: the mode's].
    #[arg(long, value_delimiter = ',')]
    broadcast_sizes: Vec<usize>,
    /// Keep each launch's directory (its log, the federates' results) and
    /// print where it is.
    #[arg(long)]
    keep_runs: bool,
    /// Start the stores without `--populate` (by default the benchmark's
    /// stores pre-fault their arena, as a robot's store would run, so no
    /// write into an object pays a page fault). For `compare` too.
    #[arg(long, global = true)]
    no_populate: bool,
}

#[derive(Subcommand, Debug)]
enum Role {
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
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Workload {
    /// Ping-pong latency of 8 B - 64 KiB messages.
    Small,
    /// Sustained messages per second.
    Rate,
    /// Broadcast of 1 KB - 50 MB to 4 receivers, and gather of their replies.
    Broadcast,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Transport {
    Tcp,
    Uds,
}

impl Transport {
    fn label(self) -> &'static str {
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
enum Coord {
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
    fn coordination(self) -> Coordination {
        match self {
            Coord::Centralized | Coord::CentralizedUnix => Coordination::Centralized,
            Coord::Decentralized | Coord::DecentralizedUnix => Coordination::Decentralized { stp: STP },
        }
    }

    fn label(self) -> &'static str {
        match self {
            Coord::Centralized => "centralized",
            Coord::CentralizedUnix => "centralized-unix",
            Coord::Decentralized => "decentralized",
            Coord::DecentralizedUnix => "decentralized-unix",
        }
    }

    /// The socket floor that carries the same kind of hop.
    fn transport(self) -> Transport {
        match self {
            Coord::Centralized | Coord::Decentralized => Transport::Tcp,
            Coord::CentralizedUnix | Coord::DecentralizedUnix => Transport::Uds,
        }
    }

    /// `HPRM_LOCAL_TRANSPORT` for the federates (set either way, so that a
    /// change of hprm-node's default does not change what is measured).
    fn local_transport(self) -> &'static str {
        match self {
            Coord::CentralizedUnix | Coord::DecentralizedUnix => "unix",
            Coord::Centralized | Coord::Decentralized => "tcp",
        }
    }
}

/// The paths of the small-message and rate workloads.
const COORDS: [Coord; 4] = [Coord::Decentralized, Coord::DecentralizedUnix, Coord::Centralized, Coord::CentralizedUnix];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Variant {
    Echo,
    Fresh,
}

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::Echo => "echo",
            Variant::Fresh => "fresh",
        }
    }
}

/// How much to measure.
#[derive(Debug, Clone, Serialize)]
struct Plan {
    mode: &'static str,
    small_sizes: Vec<usize>,
    /// The small-message sweep (floors and hprm, size by size) is run this
    /// many times and the samples pooled: wake-up costs on this kind of
    /// machine flip between a fast and a slow mode with background load,
    /// and passes spread over time let that hit floors and hprm alike.
    small_passes: usize,
    small_rounds: u64,
    small_warmup: u64,
    rate_messages: u64,
    rate_warmup: u64,
    broadcast_sizes: Vec<usize>,
    broadcast_rounds: u64,
    broadcast_warmup: u64,
    memcpy_reps: usize,
}

impl Plan {
    fn quick() -> Plan {
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

    fn full() -> Plan {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (who, result) = match cli.role {
        None => ("node-bench", coordinator(&cli)),
        Some(Role::Launch) => ("node-bench launch", launch_role()),
        Some(Role::Federate) => ("node-bench federate", federate_role()),
        Some(Role::FloorServer { transport, ref path, poll_us }) => {
            ("node-bench floor-server", floor_server(transport, path.as_deref(), Duration::from_micros(poll_us)))
        }
        Some(Role::Compare { ref rti_a, ref rti_b, ref store_a, ref store_b, workload, coord, size, launches, rounds }) => {
            let sides = [Daemons { rti: rti_a.as_deref(), store: store_a.as_deref() }, Daemons { rti: rti_b.as_deref(), store: store_b.as_deref() }];
            ("node-bench compare", compare(sides, workload, coord, size, launches, rounds, !cli.no_populate))
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

// ---------------------------------------------------------------------------
// The programs

/// What a `launch` or `federate` process needs to rebuild the program the
/// coordinator chose, identically.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Spec {
    workload: Workload,
    coord: Coord,
    /// Payload bytes.
    size: usize,
    /// Measured rounds (messages, for the rate).
    rounds: u64,
    /// Rounds before those, not measured.
    warmup: u64,
    variant: Variant,
    /// Where federates write their results.
    out: PathBuf,
    store_memory: String,
}

impl Spec {
    fn federates(&self) -> Vec<String> {
        match self.workload {
            Workload::Small => vec!["ping".into(), "pong".into()],
            Workload::Rate => vec!["source".into(), "sink".into()],
            Workload::Broadcast => std::iter::once("source".to_string()).chain((0..RECEIVERS).map(|i| format!("recv{i}"))).collect(),
        }
    }
}

fn build_program(spec: &Spec) -> Program {
    let mut p = match spec.workload {
        Workload::Small => ping_pong(spec),
        Workload::Rate => rate(spec),
        Workload::Broadcast => broadcast(spec),
    };
    p.coordination(spec.coord.coordination());
    p
}

/// A small message: a counter, two send stamps (ns since the epoch, the
/// federates' physical clock: one host, one clock) and the payload.
#[derive(Serialize, Deserialize)]
struct Msg {
    seq: u64,
    /// When the first sender set it.
    stamp: i64,
    /// When the echo was set (ping-pong only).
    back: i64,
    data: Buffer,
}

/// Samples a federate hands back, by series name, in ns (moved here by
/// shutdown reactions, written out after `run_federate` returns).
static SERIES: Mutex<BTreeMap<String, Vec<i64>>> = Mutex::new(BTreeMap::new());
/// Payloads that arrived with the wrong size or contents.
static CHECK_FAILURES: AtomicU64 = AtomicU64::new(0);

fn publish(name: &str, samples: Vec<i64>) {
    SERIES.lock().unwrap_or_else(PoisonError::into_inner).insert(name.to_string(), samples);
}

fn check(ok: bool, what: impl FnOnce() -> String) {
    if !ok {
        // Only the first few are worth a line; the count goes in the results.
        if CHECK_FAILURES.fetch_add(1, Ordering::Relaxed) < 5 {
            eprintln!("check failed: {}", what());
        }
    }
}

struct Pinger {
    data: Buffer,
    rtt: Vec<i64>,
    back: Vec<i64>,
}

struct Ponger {
    one_way: Vec<i64>,
}

/// ping -> pong without delay, pong -> ping one microstep later: each
/// round starts when the previous echo is processed.
fn ping_pong(spec: &Spec) -> Program {
    let mut p = Program::new("node-bench-small");
    let (warmup, total, size) = (spec.warmup, spec.warmup + spec.rounds, spec.size);
    let ping = p.federate("ping");
    let pong = p.federate("pong");
    let (ping_out, ping_in) = {
        let state = Pinger { data: Buffer::from_vec(vec![0xA5; size]), rtt: Vec::new(), back: Vec::new() };
        let mut r = p.reactor(ping, "pinger", state);
        let start = r.startup();
        let stop = r.shutdown();
        let out = r.output::<Msg>("out");
        let inp = r.input::<Msg>("in");
        r.reaction("serve").trigger(start).effect(out).body(move |s: &mut Pinger, ctx| {
            // The stamp is taken last, so the message's own making is not
            // counted; its encoding (after the reaction) is.
            let stamp = ctx.physical_time();
            ctx.set(out, Msg { seq: 0, stamp, back: 0, data: s.data.clone() });
        });
        r.reaction("return").trigger(inp).effect(out).body(move |s: &mut Pinger, ctx| {
            let now = ctx.physical_time();
            let Some(m) = ctx.get(inp) else { return };
            let (seq, stamp, back) = (m.seq, m.stamp, m.back);
            check(m.data.len_bytes() == size, || format!("ping got {} bytes back, sent {size}", m.data.len_bytes()));
            if seq >= warmup {
                s.rtt.push(now - stamp);
                s.back.push(now - back);
            }
            if seq + 1 >= total {
                ctx.request_stop();
                return;
            }
            let stamp = ctx.physical_time();
            ctx.set(out, Msg { seq: seq + 1, stamp, back: 0, data: s.data.clone() });
        });
        r.reaction("report").trigger(stop).body(|s: &mut Pinger, _| {
            publish("rtt", std::mem::take(&mut s.rtt));
            publish("one_way_back", std::mem::take(&mut s.back));
        });
        (out, inp)
    };
    let (pong_out, pong_in) = {
        let mut r = p.reactor(pong, "ponger", Ponger { one_way: Vec::new() });
        let stop = r.shutdown();
        let out = r.output::<Msg>("out");
        let inp = r.input::<Msg>("in");
        r.reaction("echo").trigger(inp).effect(out).body(move |s: &mut Ponger, ctx| {
            let now = ctx.physical_time();
            let Some(m) = ctx.get(inp) else { return };
            let (seq, stamp, data) = (m.seq, m.stamp, m.data.clone());
            check(data.len_bytes() == size, || format!("pong got {} bytes, expected {size}", data.len_bytes()));
            if seq >= warmup {
                s.one_way.push(now - stamp);
            }
            let back = ctx.physical_time();
            ctx.set(out, Msg { seq, stamp, back, data });
        });
        r.reaction("report").trigger(stop).body(|s: &mut Ponger, _| publish("one_way", std::mem::take(&mut s.one_way)));
        (out, inp)
    };
    p.connect(ping_out, pong_in);
    p.connect_after(pong_out, ping_in, Duration::ZERO);
    p
}

struct Source {
    data: Buffer,
    sent: u64,
    first: i64,
}

struct Sink {
    received: u64,
    mark: i64,
    last: i64,
    next_seq: u64,
}

/// The source sends `total` messages, one per microstep, then has nothing
/// left to do and ends (it has no inputs); the sink ends when its only
/// upstream has resigned. Neither needs a stop request.
fn rate(spec: &Spec) -> Program {
    let mut p = Program::new("node-bench-rate");
    let (warmup, total, size) = (spec.warmup, spec.warmup + spec.rounds, spec.size);
    let src = p.federate("source");
    let sink = p.federate("sink");
    let out = {
        let mut r = p.reactor(src, "source", Source { data: Buffer::from_vec(vec![0x5A; size]), sent: 0, first: 0 });
        let start = r.startup();
        let next = r.logical_action::<()>("next", Duration::ZERO);
        let out = r.output::<Msg>("out");
        r.reaction("send").trigger(start).trigger(next).effect(out).effect(next).body(move |s: &mut Source, ctx| {
            let now = ctx.physical_time();
            if s.sent == 0 {
                s.first = now;
            }
            ctx.set(out, Msg { seq: s.sent, stamp: now, back: 0, data: s.data.clone() });
            s.sent += 1;
            if s.sent < total {
                ctx.schedule(next, Duration::ZERO, ());
            } else {
                publish("source_span", vec![s.first, now, s.sent as i64]);
            }
        });
        out
    };
    let inp = {
        let mut r = p.reactor(sink, "sink", Sink { received: 0, mark: 0, last: 0, next_seq: 0 });
        let stop = r.shutdown();
        let inp = r.input::<Msg>("in");
        r.reaction("count").trigger(inp).body(move |s: &mut Sink, ctx| {
            let now = ctx.physical_time();
            let Some(m) = ctx.get(inp) else { return };
            check(m.seq == s.next_seq, || format!("sink expected message {}, got {}", s.next_seq, m.seq));
            s.next_seq = m.seq + 1;
            if m.seq == warmup {
                s.mark = now;
            }
            if m.seq >= warmup {
                s.received += 1;
                s.last = now;
            }
        });
        r.reaction("report").trigger(stop).body(|s: &mut Sink, _| publish("sink_span", vec![s.mark, s.last, s.received as i64]));
        inp
    };
    p.connect(out, inp);
    p
}

/// A broadcast frame: round number, the source's send stamp, the data.
#[derive(Serialize, Deserialize)]
struct Frame {
    round: u64,
    stamp: i64,
    data: Buffer,
}

struct Broadcaster {
    round: u64,
    replies: usize,
    stamp: i64,
    /// Send to the last reply processed: the figure.
    latency: Vec<i64>,
    /// Send to the first reply processed, to show where the time goes.
    first: Vec<i64>,
}

/// A receiver's timeline, from the source's send stamp: when its reaction
/// started, and when its reply was ready to set (echo: at once; fresh: the
/// new buffer loaned and filled).
struct Receiver {
    received: Vec<i64>,
    replied: Vec<i64>,
}

/// The byte a round's source buffer is filled with; fresh replies use the
/// next one, so the source can tell an echo from a fresh reply.
fn fill_byte(round: u64, variant: Variant) -> u8 {
    let b = (round % 251) as u8;
    match variant {
        Variant::Echo => b,
        Variant::Fresh => b.wrapping_add(1),
    }
}

/// Spot-checks a received buffer: size and its first and last bytes (a
/// full read would add a pass over the data that the workload does not ask for).
fn spot_check(who: &str, data: &Buffer, size: usize, byte: u8) {
    let bytes = data.bytes();
    let ok = bytes.len() == size && bytes.first().map_or(true, |&b| b == byte) && bytes.last().map_or(true, |&b| b == byte);
    check(ok, || format!("{who}: got {} bytes starting {:?}, expected {size} of {byte}", bytes.len(), bytes.first()));
}

/// Loans a buffer for `out`, fills it with `byte`, and returns it sealed.
fn loaned<T: hprm_node::PortValue>(ctx: &mut Ctx<'_>, out: Output<T>, size: usize, byte: u8) -> Option<Buffer> {
    let result = ctx.loan(out, Dtype::U8, &[size]).and_then(|mut loan| {
        // Writing every byte is what producing the data costs; a loan left
        // as it came would hold an older object's bytes.
        loan.as_mut_bytes().fill(byte);
        loan.finish()
    });
    match result {
        Ok(b) => Some(b),
        Err(e) => {
            check(false, || format!("{}: loan of {size} bytes failed: {e}", ctx.federate()));
            None
        }
    }
}

fn broadcast(spec: &Spec) -> Program {
    let mut p = Program::new("node-bench-broadcast");
    let (warmup, total, size, variant) = (spec.warmup, spec.warmup + spec.rounds, spec.size, spec.variant);
    let src = p.federate("source");
    let recvs: Vec<_> = (0..RECEIVERS).map(|i| p.federate(format!("recv{i}"))).collect();

    let (out, ins) = {
        let mut r = p.reactor(src, "source", Broadcaster { round: 0, replies: 0, stamp: 0, latency: Vec::new(), first: Vec::new() });
        let start = r.startup();
        let stop = r.shutdown();
        let out = r.output::<Frame>("out");
        let ins: Vec<Input<Frame>> = (0..RECEIVERS).map(|i| r.input::<Frame>(&format!("reply{i}"))).collect();
        let send = move |s: &mut Broadcaster, ctx: &mut Ctx<'_>| {
            let Some(data) = loaned(ctx, out, size, fill_byte(s.round, Variant::Echo)) else {
                ctx.request_stop();
                return;
            };
            s.replies = 0;
            // The latency starts at the send: loaning and filling the
            // buffer is the producer's work, before it.
            s.stamp = ctx.physical_time();
            ctx.set(out, Frame { round: s.round, stamp: s.stamp, data });
        };
        r.reaction("start").trigger(start).effect(out).body(send);
        let mut gather = r.reaction("gather");
        for &i in &ins {
            gather = gather.trigger(i);
        }
        let inputs = ins.clone();
        gather.effect(out).body(move |s: &mut Broadcaster, ctx| {
            // Decentralized in fast mode, replies of one round may arrive
            // at different tags (late ones tardy, see STP): count them
            // across tags rather than expecting all four at one.
            let now = ctx.physical_time();
            let before = s.replies;
            for &i in &inputs {
                if let Some(f) = ctx.get(i) {
                    if f.round == s.round {
                        spot_check("source", &f.data, size, fill_byte(f.round, variant));
                        s.replies += 1;
                    }
                }
            }
            if before == 0 && s.replies > 0 && s.round >= warmup {
                s.first.push(now - s.stamp);
            }
            if s.replies < RECEIVERS {
                return;
            }
            if s.round >= warmup {
                s.latency.push(now - s.stamp);
            }
            s.round += 1;
            if s.round >= total {
                ctx.request_stop();
                return;
            }
            send(s, ctx);
        });
        r.reaction("report").trigger(stop).body(|s: &mut Broadcaster, _| {
            publish("latency", std::mem::take(&mut s.latency));
            publish("first_reply", std::mem::take(&mut s.first));
        });
        (out, ins)
    };
    for (k, &fed) in recvs.iter().enumerate() {
        let mut r = p.reactor(fed, "receiver", Receiver { received: Vec::new(), replied: Vec::new() });
        let inp = r.input::<Frame>("in");
        let reply = r.output::<Frame>("reply");
        let stop = r.shutdown();
        r.reaction("reply").trigger(inp).effect(reply).body(move |s: &mut Receiver, ctx| {
            let now = ctx.physical_time();
            let Some(f) = ctx.get(inp) else { return };
            let (round, stamp, got) = (f.round, f.stamp, f.data.clone());
            if round >= warmup {
                s.received.push(now - stamp);
            }
            spot_check(&format!("recv{k}"), &got, size, fill_byte(round, Variant::Echo));
            let data = match variant {
                // The received buffer as it is: how it is sent on (by
                // reference or copied) is the runtime's business.
                Variant::Echo => got,
                Variant::Fresh => match loaned(ctx, reply, size, fill_byte(round, Variant::Fresh)) {
                    Some(b) => b,
                    None => return,
                },
            };
            if round >= warmup {
                s.replied.push(ctx.physical_time() - stamp);
            }
            ctx.set(reply, Frame { round, stamp, data });
        });
        r.reaction("report").trigger(stop).body(|s: &mut Receiver, _| {
            publish("received", std::mem::take(&mut s.received));
            publish("replied", std::mem::take(&mut s.replied));
        });
        p.connect(out, inp);
        p.connect_after(reply, ins[k], Duration::ZERO);
    }
    p
}

// ---------------------------------------------------------------------------
// The launch and federate processes

fn spec_from_env() -> Result<Spec> {
    let json = std::env::var(SPEC_ENV).with_context(|| format!("{SPEC_ENV} is not set: this role is started by node-bench itself"))?;
    serde_json::from_str(&json).with_context(|| format!("{SPEC_ENV} does not hold a benchmark spec"))
}

fn init_tracing(default: &str) {
    let filter = std::env::var(LOG_ENV).unwrap_or_else(|_| default.to_string());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// What the launcher reports to the coordinator.
#[derive(Debug, Default, Serialize, Deserialize)]
struct LaunchOut {
    failed: Vec<String>,
    rti_exit: Option<i32>,
}

/// One program, launched as a launcher process does: taking SIGINT and
/// SIGTERM and passing them on to its federates, so that a Ctrl-C of the
/// benchmark stops federates and daemons rather than orphaning them.
fn launch_role() -> Result<()> {
    init_tracing("info");
    let spec = spec_from_env()?;
    let json = std::env::var(SPEC_ENV).context("reading the spec again")?;
    let exe = std::env::current_exe().context("cannot tell where this program is, to run its federates")?;
    let program = build_program(&spec);
    let local_transport = spec.coord.local_transport();
    let launch = Launch {
        fast: true,
        store_memory: spec.store_memory.clone(),
        federate_command: Some(Box::new(move |_name: &str| {
            let mut c = Command::new(&exe);
            c.arg("federate").env(SPEC_ENV, &json).env("HPRM_LOCAL_TRANSPORT", local_transport);
            c
        })),
        timeout: Some(LAUNCH_TIMEOUT),
        prefix_logs: true,
        handle_signals: true,
        ..Launch::default()
    };
    let report = launch.run(&program).context("the launch failed")?;
    let out = LaunchOut { failed: report.failed(), rti_exit: report.rti.and_then(|s| s.code()) };
    let path = spec.out.join("launch.json");
    std::fs::write(&path, serde_json::to_vec(&out)?).with_context(|| format!("cannot write {}", path.display()))?;
    if !out.failed.is_empty() {
        bail!("federates failed: {}", out.failed.join(", "));
    }
    Ok(())
}

/// What one federate hands back.
#[derive(Debug, Default, Serialize, Deserialize)]
struct FedOut {
    federate: String,
    series: BTreeMap<String, Vec<i64>>,
    check_failures: u64,
    tags: u64,
    reactions: u64,
    tardy: u64,
    decode_errors: u64,
    encode_errors: u64,
    error: Option<String>,
}

fn federate_role() -> Result<()> {
    init_tracing("warn");
    let spec = spec_from_env()?;
    let program = build_program(&spec);
    let opts = options_from_env(&program).context("HPRM_FEDERATE is not set: federates are started by `node-bench launch`")?;
    let name = opts.federate.clone();
    let result = run_federate(program, opts);
    let mut out = FedOut {
        federate: name.clone(),
        series: std::mem::take(&mut *SERIES.lock().unwrap_or_else(PoisonError::into_inner)),
        check_failures: CHECK_FAILURES.load(Ordering::Relaxed),
        ..FedOut::default()
    };
    match &result {
        Ok(r) => {
            out.tags = r.tags;
            out.reactions = r.reactions;
            out.tardy = r.tardy;
            out.decode_errors = r.decode_errors;
            out.encode_errors = r.encode_errors;
        }
        Err(e) => out.error = Some(e.to_string()),
    }
    let path = spec.out.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec(&out)?).with_context(|| format!("cannot write {}", path.display()))?;
    result.map(|_| ()).map_err(|e| anyhow!("federate {name}: {e}"))
}

// ---------------------------------------------------------------------------
// The socket floors

/// Frame header of the floors: payload length (u32), flags (u32), send
/// stamp (i64 ns since the epoch), little-endian.
const HEADER: usize = 16;
/// The server records one-way latency of this message.
const F_MEASURED: u32 = 1;
/// No reply (stream).
const F_STREAM: u32 = 2;
/// The stream's measured part starts with this message.
const F_MARK: u32 = 4;

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// What the floor server measured.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ServerOut {
    /// One-way latency samples (ns) by payload length.
    one_way: BTreeMap<u32, Vec<i64>>,
    /// Stream messages from the mark on, and when the mark and the last arrived.
    stream_count: u64,
    stream_mark: i64,
    stream_last: i64,
}

fn floor_server(transport: Transport, path: Option<&Path>, poll: Duration) -> Result<()> {
    let conn = match transport {
        Transport::Tcp => {
            let listener = TcpListener::bind(("127.0.0.1", 0)).context("cannot listen on 127.0.0.1")?;
            println!("ready {}", listener.local_addr()?);
            std::io::stdout().flush()?;
            let (stream, _) = listener.accept().context("accept")?;
            // As hprm-node's peers: no Nagle delay.
            stream.set_nodelay(true)?;
            Conn::Tcp(stream)
        }
        Transport::Uds => {
            let path = path.context("--path is needed for the Unix transport")?;
            let listener = UnixListener::bind(path).with_context(|| format!("cannot listen on {}", path.display()))?;
            println!("ready {}", path.display());
            std::io::stdout().flush()?;
            let (stream, _) = listener.accept().context("accept")?;
            Conn::Uds(stream)
        }
    };
    let out = serve(&conn, poll)?;
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// Echoes every frame without F_STREAM, records what it measured, until the
/// client closes. Blocking reads as hprm-node's socket readers do, or
/// polling first for `poll`.
fn serve(conn: &Conn, poll: Duration) -> Result<ServerOut> {
    // Reads as large as the socket gives, like hprm-node's frame reader.
    let mut reader = BufReader::with_capacity(256 << 10, Polled { conn, poll, yielding: false });
    let mut writer = conn;
    let mut frame = Vec::new();
    let mut out = ServerOut::default();
    loop {
        let mut header = [0u8; HEADER];
        match reader.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e).context("floor server read"),
        }
        let (len, flags, stamp) = parse_header(&header);
        frame.clear();
        frame.extend_from_slice(&header);
        frame.resize(HEADER + len as usize, 0);
        reader.read_exact(&mut frame[HEADER..]).context("floor server read")?;
        let now = now_ns();
        if flags & F_MEASURED != 0 {
            out.one_way.entry(len).or_default().push(now - stamp);
        }
        if flags & F_STREAM != 0 {
            if flags & F_MARK != 0 {
                out.stream_mark = now;
                out.stream_count = 0;
            }
            out.stream_count += 1;
            out.stream_last = now;
            continue;
        }
        // One write per message, as hprm-node's frame writer.
        writer.write_all(&frame).context("floor server write")?;
    }
    Ok(out)
}

fn parse_header(h: &[u8; HEADER]) -> (u32, u32, i64) {
    let word = |r: std::ops::Range<usize>| {
        let mut b = [0u8; 8];
        b[..r.len()].copy_from_slice(&h[r]);
        u64::from_le_bytes(b)
    };
    (word(0..4) as u32, word(4..8) as u32, word(8..16) as i64)
}

fn put_header(frame: &mut [u8], len: u32, flags: u32, stamp: i64) {
    frame[0..4].copy_from_slice(&len.to_le_bytes());
    frame[4..8].copy_from_slice(&flags.to_le_bytes());
    frame[8..16].copy_from_slice(&stamp.to_le_bytes());
}

/// The floor server process; killed if still there when dropped.
struct FloorServer {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
    addr: String,
    _dir: tempfile::TempDir,
}

impl FloorServer {
    fn start(exe: &Path, transport: Transport, poll: Duration) -> Result<FloorServer> {
        let dir = tempfile::Builder::new().prefix("node-bench-floor.").tempdir().context("cannot create a temporary directory")?;
        let mut cmd = Command::new(exe);
        cmd.arg("floor-server").arg("--transport").arg(match transport {
            Transport::Tcp => "tcp",
            Transport::Uds => "uds",
        });
        if transport == Transport::Uds {
            cmd.arg("--path").arg(dir.path().join("floor.sock"));
        }
        cmd.arg("--poll-us").arg(poll.as_micros().to_string());
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().context("cannot start the floor server")?;
        let mut stdout = BufReader::new(child.stdout.take().context("the floor server has no stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line).context("reading the floor server's address")?;
        let addr = line.trim().strip_prefix("ready ").map(str::to_string);
        let Some(addr) = addr else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the floor server did not start (it said {line:?})");
        };
        Ok(FloorServer { child, stdout, addr, _dir: dir })
    }

    /// Reads what the server measured once the client has closed, and reaps it.
    fn finish(mut self) -> Result<ServerOut> {
        let mut line = String::new();
        self.stdout.read_line(&mut line).context("reading the floor server's results")?;
        let status = self.child.wait().context("waiting for the floor server")?;
        if !status.success() {
            bail!("the floor server exited with {status}");
        }
        serde_json::from_str(line.trim()).context("the floor server's results are not JSON")
    }
}

impl Drop for FloorServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The client's end of a floor connection.
enum Conn {
    Tcp(TcpStream),
    Uds(UnixStream),
}

impl Conn {
    fn open(transport: Transport, addr: &str) -> Result<Conn> {
        Ok(match transport {
            Transport::Tcp => {
                let s = TcpStream::connect(addr).with_context(|| format!("cannot connect to the floor server at {addr}"))?;
                s.set_nodelay(true)?;
                Conn::Tcp(s)
            }
            Transport::Uds => Conn::Uds(UnixStream::connect(addr).with_context(|| format!("cannot connect to the floor server at {addr}"))?),
        })
    }

    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match self {
            Conn::Tcp(s) => s.as_raw_fd(),
            Conn::Uds(s) => s.as_raw_fd(),
        }
    }

    fn close(&self) -> Result<()> {
        match self {
            Conn::Tcp(s) => s.shutdown(std::net::Shutdown::Write)?,
            Conn::Uds(s) => s.shutdown(std::net::Shutdown::Write)?,
        }
        Ok(())
    }
}

impl Read for &Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => (&*s).read(buf),
            Conn::Uds(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => (&*s).write(buf),
            Conn::Uds(s) => (&*s).write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Samples of one path pooled over passes.
#[derive(Default)]
struct Pooled {
    one_way: Vec<i64>,
    back: Vec<i64>,
    rtt: Vec<i64>,
    /// One-way p50 of each pass, µs.
    pass_medians: Vec<f64>,
    /// Round-trip p50 of each pass, µs.
    rtt_pass_medians: Vec<f64>,
    tardy: u64,
    error: Option<String>,
}

impl Pooled {
    fn add(&mut self, one_way: &[i64], back: &[i64], rtt: &[i64], tardy: u64) {
        self.one_way.extend_from_slice(one_way);
        self.back.extend_from_slice(back);
        self.rtt.extend_from_slice(rtt);
        self.pass_medians.push(Counted::of_ns(one_way).median_us);
        self.rtt_pass_medians.push(if rtt.is_empty() { f64::NAN } else { Counted::of_ns(rtt).median_us });
        self.tardy += tardy;
    }

    /// Round trips only (the RTI round trip): the pass's median is theirs.
    fn add_round_trips(&mut self, rtt: &[i64]) {
        self.rtt.extend_from_slice(rtt);
        self.pass_medians.push(Counted::of_ns(rtt).median_us);
        self.rtt_pass_medians.push(Counted::of_ns(rtt).median_us);
    }

    /// A pass that failed: its median is NaN, so that passes stay aligned
    /// between paths (target ratios pair them).
    fn failed(&mut self, error: String) {
        self.pass_medians.push(f64::NAN);
        self.rtt_pass_medians.push(f64::NAN);
        self.error.get_or_insert(error);
    }

    fn last_median(&self) -> f64 {
        self.pass_medians.last().copied().unwrap_or(f64::NAN)
    }
}

/// Reads from a connection, first polling with non-blocking reads for up to
/// `poll` (zero: block at once).
struct Polled<'a> {
    conn: &'a Conn,
    poll: Duration,
    /// Between reads, give up the CPU (`sched_yield`) as hprm-node's
    /// scheduler does, rather than spin on it as the polling floors do.
    yielding: bool,
}

impl Read for Polled<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use nix::errno::Errno;
        use nix::sys::socket::{recv, MsgFlags};
        if !self.poll.is_zero() {
            let deadline = Instant::now() + self.poll;
            loop {
                match recv(self.conn.fd(), buf, MsgFlags::MSG_DONTWAIT) {
                    Ok(n) => return Ok(n),
                    Err(Errno::EAGAIN) | Err(Errno::EINTR) if Instant::now() < deadline => {
                        if self.yielding {
                            std::thread::yield_now()
                        } else {
                            std::hint::spin_loop()
                        }
                    }
                    Err(Errno::EAGAIN) | Err(Errno::EINTR) => break,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let mut conn = self.conn;
        conn.read(buf)
    }
}

/// Polling budget of the polling floors: what the store's client and
/// daemon spin (hprm-node's scheduler polls its inbox for
/// `hprm_node::DEFAULT_SPIN`, yielding its CPU as it goes).
const FLOOR_POLL: Duration = Duration::from_micros(50);

/// Ping-pong of `size`-byte payloads with a fresh server process: round
/// trips by the client's clock, one-way by the server's.
/// Returns the one-way and round-trip samples (ns).
fn floor_ping_pong(exe: &Path, transport: Transport, poll: Duration, size: usize, rounds: u64, warmup: u64) -> Result<(Vec<i64>, Vec<i64>)> {
    let server = FloorServer::start(exe, transport, poll)?;
    let conn = Conn::open(transport, &server.addr)?;
    let mut reader = BufReader::with_capacity(256 << 10, Polled { conn: &conn, poll, yielding: false });
    let mut writer = &conn;
    let mut frame = vec![0xA5u8; HEADER + size];
    let mut reply = vec![0u8; HEADER + size];
    let len = u32::try_from(size).context("payload too large for the floor's frame")?;
    let mut rtt = Vec::with_capacity(rounds as usize);
    for i in 0..warmup + rounds {
        let measured = i >= warmup;
        let stamp = now_ns();
        put_header(&mut frame, len, if measured { F_MEASURED } else { 0 }, stamp);
        writer.write_all(&frame).context("floor ping")?;
        reader.read_exact(&mut reply).context("floor pong")?;
        let now = now_ns();
        if measured {
            rtt.push(now - stamp);
        }
    }
    drop(reader);
    conn.close()?;
    let out = server.finish()?;
    let one_way = out.one_way.get(&len).cloned().unwrap_or_default();
    if one_way.len() != rtt.len() {
        bail!("the floor server measured {} messages, the client {}", one_way.len(), rtt.len());
    }
    Ok((one_way, rtt))
}

/// A stream of `warmup + messages` framed `RATE_SIZE`-byte messages, one
/// write each; messages per second at the receiver.
fn floor_stream(exe: &Path, transport: Transport, messages: u64, warmup: u64) -> Result<RateRow> {
    let server = FloorServer::start(exe, transport, Duration::ZERO)?;
    let conn = Conn::open(transport, &server.addr)?;
    let mut writer = &conn;
    let mut frame = vec![0x5Au8; HEADER + RATE_SIZE];
    for i in 0..warmup + messages {
        let flags = if i == warmup { F_STREAM | F_MARK } else { F_STREAM };
        put_header(&mut frame, RATE_SIZE as u32, flags, now_ns());
        writer.write_all(&frame).context("floor stream")?;
    }
    conn.close()?;
    let out = server.finish()?;
    Ok(RateRow::from_span(format!("{} floor", transport.label()), out.stream_mark, out.stream_last, out.stream_count, messages))
}

/// The RTI round trips measured beside each size's floors: over TCP and
/// the Unix socket, blocking and polling as a federate does.
const RTI_KINDS: [(Transport, Duration); 4] = [(Transport::Tcp, Duration::ZERO), (Transport::Uds, Duration::ZERO), (Transport::Tcp, hprm_node::DEFAULT_SPIN), (Transport::Uds, hprm_node::DEFAULT_SPIN)];

/// The RTI round trip's payload at sizes at or over the out-of-band
/// threshold: such a buffer goes through the store, and the RTI relays a
/// message about this long (the value's other fields and a buffer
/// descriptor). The RTI refuses relays of more than 64 KiB anyway.
const REFERENCE_PAYLOAD: usize = 64;

/// The federation id of the RTI round trip's one-federate federation.
const RTI_FEDERATION: &str = "node-bench-rti";

/// One RTI round trip, the yardstick of the centralized target: a
/// one-federate federation on a fresh `hprm-rti` (its defaults, fast
/// mode), whose federate, spoken by hand, sends itself TAGGED_MESSAGEs of
/// `size` payload bytes (what a value of that size puts in the message:
/// [`REFERENCE_PAYLOAD`] from the out-of-band threshold on) through the
/// RTI over `transport` and waits for
/// each to come back: one message to the RTI and one from it, through the
/// RTI's relay path. With a zero `poll` it blocks in its reads as the
/// blocking floors do; otherwise it polls for `poll` first, yielding its
/// CPU between reads, as hprm-node's scheduler waits for its inbox.
/// Returns the round trips (ns) by the client's clock.
fn rti_round_trip(transport: Transport, poll: Duration, size: usize, rounds: u64, warmup: u64) -> Result<Vec<i64>> {
    let dir = tempfile::Builder::new().prefix("node-bench-rti.").tempdir().context("cannot create a temporary directory")?;
    let rti = StandaloneRti::start(1, RTI_FEDERATION, &["--fast".into()], dir.path()).map_err(|e| anyhow!("{e}"))?;
    let talk = || -> Result<Vec<i64>> {
        let addr = match transport {
            Transport::Tcp => rti.addr().to_string(),
            Transport::Uds => rti.unix_socket().map_err(|e| anyhow!("{e}"))?.display().to_string(),
        };
        let conn = Conn::open(transport, &addr)?;
        let mut reader = Polled { conn: &conn, poll, yielding: true };
        let mut frames = FrameBuffer::new(256 << 10, Limits::default());
        let mut out = Vec::with_capacity(size + 64);
        let mut say = |msgs: &[Message]| -> Result<()> {
            out.clear();
            msgs.iter().for_each(|m| encode(m, &mut out));
            (&conn).write_all(&out).context("cannot write to the RTI")
        };
        say(&[Message::FedIds { fed: 0, federation: RTI_FEDERATION.as_bytes().to_vec() }])?;
        match next_frame(&mut frames, &mut reader)?.into_message() {
            Message::Ack => {}
            other => bail!("the RTI answered the join with {other:?}"),
        }
        say(&[Message::NeighborStructure { upstreams: Vec::new(), downstreams: Vec::new() }, Message::UdpPort(u16::MAX), Message::Timestamp(now_ns())])?;
        let start = match next_frame(&mut frames, &mut reader)?.into_message() {
            Message::Timestamp(t) => t,
            other => bail!("the RTI answered the start-time proposal with {other:?}"),
        };
        let in_band = if size >= hprm_node::payload::DEFAULT_THRESHOLD { REFERENCE_PAYLOAD } else { size };
        let mut payload = vec![0xA5u8; in_band.max(8)];
        let mut frame = Vec::with_capacity(payload.len() + 64);
        let mut rtt = Vec::with_capacity(rounds as usize);
        for i in 0..warmup + rounds {
            let stamp = now_ns();
            payload[..8].copy_from_slice(&stamp.to_le_bytes());
            frame.clear();
            let microstep = u32::try_from(i).context("too many rounds")?;
            encode_tagged(false, 0, 0, hprm_node::Tag::new(start, microstep), &payload, &mut frame);
            (&conn).write_all(&frame).context("cannot write to the RTI")?;
            // Grants and other notices the RTI may add are not waited for.
            loop {
                match next_frame(&mut frames, &mut reader)? {
                    RtiFrame::Tagged(t) if t.payload.len() == payload.len() && t.payload[..8] == stamp.to_le_bytes() => break,
                    RtiFrame::Tagged(t) => bail!("the RTI relayed a message of {} bytes, stamp {:?}, for the one of {} sent", t.payload.len(), &t.payload[..t.payload.len().min(8)], payload.len()),
                    RtiFrame::Other(_) => {}
                }
            }
            if i >= warmup {
                rtt.push(now_ns() - stamp);
            }
        }
        say(&[Message::Resign])?;
        Ok(rtt)
    };
    talk().map_err(|e| anyhow!("{e:#}; hprm-rti's log ends:\n{}", rti.last_words().join("\n")))
}

/// The next whole message from the RTI, reading as needed.
fn next_frame<'b>(frames: &'b mut FrameBuffer, reader: &mut impl Read) -> Result<RtiFrame<'b>> {
    while !frames.next_is_ready()? {
        let n = reader.read(frames.spare()).context("cannot read from the RTI")?;
        if n == 0 {
            bail!("the RTI closed the connection");
        }
        frames.filled(n);
    }
    frames.next()?.context("a message was ready and then was not")
}

fn memcpy_floor(size: usize, reps: usize) -> Counted {
    // Non-zero fills: `vec![0; n]` comes from calloc as untouched zero
    // pages, and the first copy would pay their faults.
    let src = vec![0x3Cu8; size];
    let mut dst = vec![0xC3u8; size];
    let mut samples = Vec::with_capacity(reps);
    for i in 0..reps + 2 {
        let t = Instant::now();
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
        let d = t.elapsed();
        if i >= 2 {
            samples.push(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        }
    }
    Counted::of_ns(&samples)
}

// ---------------------------------------------------------------------------
// The coordinator

struct Coordinator {
    exe: PathBuf,
    plan: Plan,
    /// `HPRM_BIN_DIR` for the launches: a directory whose `hprm-store`
    /// adds `--populate`, or runs some build as it is (see `bin_dir`); or
    /// none.
    bin_dir: Option<tempfile::TempDir>,
    keep_runs: bool,
}

/// The daemon binaries a launch runs; `None`: the one beside this program.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Daemons<'a> {
    rti: Option<&'a Path>,
    store: Option<&'a Path>,
}

impl Daemons<'_> {
    /// What the comparison's output names this side by.
    fn label(&self) -> String {
        let name = |p: Option<&Path>, default: &str| p.map_or_else(|| format!("{default} beside node-bench"), |p| p.display().to_string());
        format!("{}, {}", name(self.rti, "hprm-rti"), name(self.store, "hprm-store"))
    }
}

/// `Launch` starts `hprm-store` with only `--socket` and `--memory`, and
/// takes the binary from `$HPRM_BIN_DIR` first: a directory holding a
/// wrapper that adds `--populate` (and the real `hprm-rti`) is how the
/// benchmark's stores pre-fault their arenas; one holding links to given
/// builds is how `compare` runs them.
fn bin_dir(daemons: Daemons, populate: bool) -> Result<tempfile::TempDir> {
    let given = |p: &Path, name: &str| p.canonicalize().with_context(|| format!("no {name} binary at {}", p.display()));
    let store = match daemons.store {
        Some(store) => given(store, "hprm-store")?,
        None => find_binary("hprm-store").map_err(|e| anyhow!("{e}"))?,
    };
    let rti = match daemons.rti {
        Some(rti) => given(rti, "hprm-rti")?,
        None => find_binary("hprm-rti").map_err(|e| anyhow!("{e}"))?,
    };
    let dir = tempfile::Builder::new().prefix("node-bench-bin.").tempdir().context("cannot create a temporary directory")?;
    if populate {
        let quoted = store.display().to_string().replace('\'', r"'\''");
        let wrapper = dir.path().join("hprm-store");
        // exec: the launcher's kill reaches the daemon itself.
        std::fs::write(&wrapper, format!("#!/bin/sh\nexec '{quoted}' \"$@\" --populate\n")).context("cannot write the store wrapper")?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).context("cannot make the store wrapper executable")?;
    } else {
        std::os::unix::fs::symlink(&store, dir.path().join("hprm-store")).context("cannot link hprm-store")?;
    }
    std::os::unix::fs::symlink(&rti, dir.path().join("hprm-rti")).context("cannot link hprm-rti")?;
    Ok(dir)
}

/// `node-bench compare`: see [`Role::Compare`].
fn compare(daemons: [Daemons; 2], workload: Workload, coord: Coord, size: usize, launches: usize, rounds: u64, populate: bool) -> Result<()> {
    if daemons[0] == daemons[1] {
        bail!("both sides would run the same daemons: give --rti-a/--rti-b, --store-a/--store-b, or both");
    }
    if launches == 0 || rounds == 0 {
        bail!("--launches and --rounds must be at least 1");
    }
    if size == 0 || u32::try_from(size).is_err() {
        bail!("--size must be between 1 byte and 4 GiB");
    }
    let exe = std::env::current_exe().context("cannot tell where this program is, to run its federates")?;
    let mut sides = Vec::new();
    for side in daemons {
        sides.push(Coordinator { exe: exe.clone(), plan: Plan::quick(), bin_dir: Some(bin_dir(side, populate)?), keep_runs: false });
    }
    let (what, unit) = match workload {
        Workload::Small => ("one-way p50", "µs"),
        Workload::Rate => ("messages per second", "msg/s"),
        Workload::Broadcast => ("round p50, the send to the last echo", "µs"),
    };
    let size = if workload == Workload::Rate { RATE_SIZE } else { size };
    eprintln!("node-bench compare: {workload:?} over {}, {size} B, {rounds} rounds, {launches} launches of each build; {what}", coord.label());
    let mut figures = [Vec::new(), Vec::new()];
    for i in 1..=launches {
        for (side, co) in sides.iter().enumerate() {
            let warmup = rounds / 10;
            let l = co.launch(co.spec(workload, coord, size, rounds, warmup, Variant::Echo))?;
            let figure = match workload {
                Workload::Small => median_us(l.series("pong", "one_way")?),
                Workload::Broadcast => median_us(l.series("source", "latency")?),
                Workload::Rate => {
                    let s = l.series("sink", "sink_span")?;
                    let &[mark, last, count] = s else { bail!("the sink's span has {} fields, not 3", s.len()) };
                    RateRow::from_span(String::new(), mark, last, u64::try_from(count).unwrap_or(0), rounds).msgs_per_s
                }
            };
            eprintln!("  launch {i}/{launches}, {}: {figure:.1} {unit}", ["A", "B"][side]);
            figures[side].push(figure);
        }
    }
    let stores = if populate { "stores populated" } else { "stores not populated" };
    println!("{workload:?} over {}, {size} B, {launches} interleaved launches of each, {stores} ({what}, {unit}):", coord.label());
    let mut medians = [0.0; 2];
    for (side, (v, bins)) in figures.iter_mut().zip(daemons).enumerate() {
        medians[side] = median(v);
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        println!("  {}: median {:.1}, quartiles {:.1}-{:.1}, range {:.1}-{:.1}  ({})", ["A", "B"][side], medians[side], q(0.25), q(0.75), v[0], v[v.len() - 1], bins.label());
    }
    println!("  B / A: {:.2}x", medians[1] / medians[0]);
    Ok(())
}

/// The median of nanosecond samples, in µs.
fn median_us(ns: &[i64]) -> f64 {
    let mut v: Vec<f64> = ns.iter().map(|&n| n as f64 / 1000.0).collect();
    median(&mut v)
}

/// A launch's directory: removed when dropped, unless kept.
enum KeptDir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

impl KeptDir {
    fn path(&self) -> &Path {
        match self {
            KeptDir::Temp(d) => d.path(),
            KeptDir::Kept(p) => p,
        }
    }
}

/// What one launch produced.
struct Launched {
    feds: BTreeMap<String, FedOut>,
}

impl Launched {
    fn series(&self, fed: &str, name: &str) -> Result<&[i64]> {
        self.feds.get(fed).and_then(|f| f.series.get(name)).map(Vec::as_slice).with_context(|| format!("federate {fed} reported no {name} samples"))
    }

    fn tardy(&self) -> u64 {
        self.feds.values().map(|f| f.tardy).sum()
    }
}

impl Coordinator {
    /// Launches `spec`'s program through a `node-bench launch` process and
    /// collects what its federates wrote.
    fn launch(&self, mut spec: Spec) -> Result<Launched> {
        let dir = tempfile::Builder::new().prefix("node-bench-run.").tempdir().context("cannot create a temporary directory")?;
        spec.out = dir.path().to_path_buf();
        let log_path = dir.path().join("launch.log");
        let log = File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("launch").env(SPEC_ENV, serde_json::to_string(&spec)?).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        if let Some(bin) = &self.bin_dir {
            cmd.env("HPRM_BIN_DIR", bin.path());
        }
        let mut child = cmd.spawn().context("cannot start `node-bench launch`")?;
        let status = wait_or_stop(&mut child, LAUNCH_TIMEOUT + Duration::from_secs(30))?;
        let dir = if self.keep_runs {
            let path = dir.keep();
            eprintln!("    kept {}", path.display());
            KeptDir::Kept(path)
        } else {
            KeptDir::Temp(dir)
        };
        let log_tail = || {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(25)..].join("\n")
        };
        if !status.success() {
            bail!("the launch ended with {status}; its log ends:\n{}", log_tail());
        }
        let mut feds = BTreeMap::new();
        for name in spec.federates() {
            let path = dir.path().join(format!("{name}.json"));
            let text = std::fs::read(&path).with_context(|| format!("federate {name} left no results; the launch log ends:\n{}", log_tail()))?;
            let out: FedOut = serde_json::from_slice(&text).with_context(|| format!("{} is not a federate's results", path.display()))?;
            if let Some(e) = &out.error {
                bail!("federate {name} failed: {e}");
            }
            if out.check_failures > 0 || out.decode_errors > 0 || out.encode_errors > 0 {
                bail!(
                    "federate {name}: {} payload checks failed, {} decode and {} encode errors; the launch log ends:\n{}",
                    out.check_failures,
                    out.decode_errors,
                    out.encode_errors,
                    log_tail()
                );
            }
            feds.insert(name, out);
        }
        Ok(Launched { feds })
    }

    fn spec(&self, workload: Workload, coord: Coord, size: usize, rounds: u64, warmup: u64, variant: Variant) -> Spec {
        // Broadcast: the round's source object and four replies are live
        // at once, and the next round's may be allocated before the last
        // round's are released; 12 sizes leaves room for fragmentation.
        let memory = match workload {
            Workload::Broadcast => format!("{}m", (12 * size / (1 << 20)).max(256)),
            _ => "256m".into(),
        };
        Spec { workload, coord, size, rounds, warmup, variant, out: PathBuf::new(), store_memory: memory }
    }

    /// The small-message sweep, `small_passes` times: per size, the four
    /// floors then hprm decentralized and centralized; samples pooled.
    fn small(&self, floors: &mut Floors) -> Vec<SmallRow> {
        let p = &self.plan;
        let kinds = [(Transport::Tcp, Duration::ZERO), (Transport::Uds, Duration::ZERO), (Transport::Tcp, FLOOR_POLL), (Transport::Uds, FLOOR_POLL)];
        let mut floor_samples: BTreeMap<(usize, usize), Pooled> = BTreeMap::new();
        let mut node_samples: BTreeMap<(usize, usize), Pooled> = BTreeMap::new();
        let mut rti_samples: BTreeMap<(usize, usize), Pooled> = BTreeMap::new();
        let coords = COORDS;
        // A discarded ping-pong first: after a quiet spell the first
        // wake-ups of a virtual CPU are slower (the hypervisor stops
        // polling for an idle vCPU), which would count against whichever
        // path happened to be measured first.
        if let Err(e) = floor_ping_pong(&self.exe, Transport::Tcp, Duration::ZERO, 64, 20_000, 0) {
            eprintln!("  warm-up ping-pong failed: {e:#}");
        }
        for pass in 1..=p.small_passes {
            eprintln!("  pass {pass} of {}", p.small_passes);
            for &size in &p.small_sizes {
                for (k, &(transport, poll)) in kinds.iter().enumerate() {
                    let pooled = floor_samples.entry((size, k)).or_default();
                    match floor_ping_pong(&self.exe, transport, poll, size, p.small_rounds, p.small_warmup) {
                        Ok((one_way, rtt)) => {
                            eprintln!(
                                "  {:>9} {:<13} floor, {}: one-way {} µs, round trip {} µs",
                                size_label(size),
                                transport.label(),
                                if poll.is_zero() { "blocking" } else { "polling " },
                                fmt_us(Counted::of_ns(&one_way).median_us),
                                fmt_us(Counted::of_ns(&rtt).median_us)
                            );
                            pooled.add(&one_way, &[], &rtt, 0);
                        }
                        Err(e) => {
                            eprintln!("  {:>9} {} floor failed: {e:#}", size_label(size), transport.label());
                            pooled.failed(format!("{e:#}"));
                        }
                    }
                }
                for (k, &(transport, poll)) in RTI_KINDS.iter().enumerate() {
                    let pooled = rti_samples.entry((size, k)).or_default();
                    match rti_round_trip(transport, poll, size, p.small_rounds, p.small_warmup) {
                        Ok(rtt) => {
                            eprintln!(
                                "  {:>9} {:<13} RTI round trip, {}: {} µs",
                                size_label(size),
                                transport.label(),
                                if poll.is_zero() { "blocking" } else { "polling " },
                                fmt_us(Counted::of_ns(&rtt).median_us)
                            );
                            pooled.add_round_trips(&rtt);
                        }
                        Err(e) => {
                            eprintln!("  {:>9} {} RTI round trip failed: {e:#}", size_label(size), transport.label());
                            pooled.failed(format!("{e:#}"));
                        }
                    }
                }
                for (c, &coord) in coords.iter().enumerate() {
                    let spec = self.spec(Workload::Small, coord, size, p.small_rounds, p.small_warmup, Variant::Echo);
                    let t = Instant::now();
                    let pooled = node_samples.entry((size, c)).or_default();
                    let result = self.launch(spec).and_then(|l| {
                        pooled.add(l.series("pong", "one_way")?, l.series("ping", "one_way_back")?, l.series("ping", "rtt")?, l.tardy());
                        Ok(())
                    });
                    match result {
                        Ok(()) => {
                            let (one_way, rtt) = (pooled.last_median(), Counted::of_ns(&pooled.rtt[pooled.rtt.len().saturating_sub(p.small_rounds as usize)..]));
                            eprintln!(
                                "  {:>9} {:<13} hprm: one-way {} µs, round trip {} µs; {:.1} s",
                                size_label(size),
                                coord.label(),
                                fmt_us(one_way),
                                fmt_us(rtt.median_us),
                                t.elapsed().as_secs_f64()
                            );
                        }
                        Err(e) => {
                            eprintln!("  {:>9} {:<13} hprm FAILED: {e:#}", size_label(size), coord.label());
                            pooled.failed(format!("{e:#}"));
                        }
                    }
                }
            }
        }
        for ((size, k), pooled) in floor_samples {
            let (transport, poll) = kinds[k];
            if pooled.one_way.is_empty() {
                continue;
            }
            floors.ping_pong.push(FloorRow {
                transport,
                polling: !poll.is_zero(),
                size,
                label: size_label(size),
                one_way: Counted::of_ns(&pooled.one_way),
                rtt: Counted::of_ns(&pooled.rtt),
                pass_medians_us: pooled.pass_medians,
                rtt_pass_medians_us: pooled.rtt_pass_medians,
            });
        }
        for ((size, k), pooled) in rti_samples {
            let (transport, poll) = RTI_KINDS[k];
            if pooled.rtt.is_empty() {
                continue;
            }
            floors.rti_round_trip.push(RtiRow { transport, polling: !poll.is_zero(), size, label: size_label(size), rtt: Counted::of_ns(&pooled.rtt), pass_medians_us: pooled.pass_medians });
        }
        node_samples
            .into_iter()
            .map(|((size, c), pooled)| {
                let some = |v: &[i64]| (!v.is_empty()).then(|| Counted::of_ns(v));
                SmallRow {
                    size,
                    label: size_label(size),
                    coordination: coords[c],
                    one_way: some(&pooled.one_way),
                    one_way_back: some(&pooled.back),
                    rtt: some(&pooled.rtt),
                    pass_medians_us: pooled.pass_medians,
                    tardy: pooled.tardy,
                    error: pooled.error,
                }
            })
            .collect()
    }

    fn rate(&self) -> Vec<RateRow> {
        let p = &self.plan;
        let mut rows = Vec::new();
        for transport in [Transport::Tcp, Transport::Uds] {
            match floor_stream(&self.exe, transport, p.rate_messages, p.rate_warmup) {
                Ok(row) => {
                    eprintln!("  {:<27} {} messages/s", row.path, thousands(row.msgs_per_s));
                    rows.push(row);
                }
                Err(e) => eprintln!("  {} stream floor failed: {e:#}", transport.label()),
            }
        }
        for coord in COORDS {
            let spec = self.spec(Workload::Rate, coord, RATE_SIZE, p.rate_messages, p.rate_warmup, Variant::Echo);
            let t = Instant::now();
            let path = format!("hprm {}", coord.label());
            let result = self.launch(spec).and_then(|l| {
                let s = l.series("sink", "sink_span")?;
                let &[mark, last, count] = s else { bail!("the sink's span has {} fields, not 3", s.len()) };
                let count = u64::try_from(count).unwrap_or(0);
                Ok(RateRow { tardy: l.tardy(), ..RateRow::from_span(path.clone(), mark, last, count, p.rate_messages) })
            });
            match result {
                Ok(row) => {
                    eprintln!("  {:<27} {} messages/s; {:.1} s", row.path, thousands(row.msgs_per_s), t.elapsed().as_secs_f64());
                    rows.push(row);
                }
                Err(e) => {
                    eprintln!("  {path} FAILED: {e:#}");
                    rows.push(RateRow { path, messages: 0, seconds: f64::NAN, msgs_per_s: f64::NAN, tardy: 0, error: Some(format!("{e:#}")) });
                }
            }
        }
        rows
    }

    fn broadcast(&self, floors: &mut Floors) -> Vec<BroadcastRow> {
        let p = &self.plan;
        let mut rows = Vec::new();
        for &size in &p.broadcast_sizes {
            let memcpy = memcpy_floor(size, p.memcpy_reps);
            eprintln!("  {:>9} memcpy floor: {} µs (p99 {})", size_label(size), fmt_us(memcpy.median_us), fmt_us(memcpy.p99_us));
            floors.memcpy.push(MemcpyRow { size, label: size_label(size), memcpy });
            for variant in [Variant::Echo, Variant::Fresh] {
                for coord in [Coord::Decentralized, Coord::Centralized] {
                    let spec = self.spec(Workload::Broadcast, coord, size, p.broadcast_rounds, p.broadcast_warmup, variant);
                    let t = Instant::now();
                    let result = self.launch(spec).and_then(|l| {
                        // Receivers' timelines, pooled over the four.
                        let mut received = Vec::new();
                        let mut replied = Vec::new();
                        for i in 0..RECEIVERS {
                            received.extend_from_slice(l.series(&format!("recv{i}"), "received")?);
                            replied.extend_from_slice(l.series(&format!("recv{i}"), "replied")?);
                        }
                        let first = Counted::of_ns(l.series("source", "first_reply")?);
                        Ok((Counted::of_ns(l.series("source", "latency")?), Counted::of_ns(&received), Counted::of_ns(&replied), first, l.tardy()))
                    });
                    let mut row = BroadcastRow {
                        size,
                        label: size_label(size),
                        variant,
                        coordination: coord,
                        latency: None,
                        received: None,
                        replied: None,
                        first_reply: None,
                        memcpy_us: memcpy.median_us,
                        ratio_to_memcpy: None,
                        tardy: 0,
                        error: None,
                    };
                    match result {
                        Ok((latency, received, replied, first, tardy)) => {
                            let ratio = latency.median_us / memcpy.median_us;
                            eprintln!(
                                "  {:>9} {:<5} {:<13} hprm: {} µs (p99 {}), {:.1}x memcpy; receivers got it at {} µs, replies ready at {}, first back at {}; {:.1} s",
                                size_label(size),
                                variant.label(),
                                coord.label(),
                                fmt_us(latency.median_us),
                                fmt_us(latency.p99_us),
                                ratio,
                                fmt_us(received.median_us),
                                fmt_us(replied.median_us),
                                fmt_us(first.median_us),
                                t.elapsed().as_secs_f64()
                            );
                            row.latency = Some(latency);
                            row.received = Some(received);
                            row.replied = Some(replied);
                            row.first_reply = Some(first);
                            row.ratio_to_memcpy = Some(dec4(ratio));
                            row.tardy = tardy;
                        }
                        Err(e) => {
                            eprintln!("  {:>9} {:<5} {:<13} hprm FAILED: {e:#}", size_label(size), variant.label(), coord.label());
                            row.error = Some(format!("{e:#}"));
                        }
                    }
                    rows.push(row);
                }
            }
        }
        rows
    }
}

/// Waits for a launch process; past `limit`, asks it to stop (SIGTERM: it
/// passes that on to its federates, then stops its daemons), and kills it
/// if that does not end it.
fn wait_or_stop(child: &mut Child, limit: Duration) -> Result<ExitStatus> {
    let deadline = Instant::now() + limit;
    let mut termed = false;
    loop {
        if let Some(status) = child.try_wait().context("waiting for the launch")? {
            return Ok(status);
        }
        let now = Instant::now();
        if now > deadline && !termed {
            eprintln!("  the launch ran past {} s; stopping it", limit.as_secs());
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
            termed = true;
        } else if now > deadline + Duration::from_secs(15) {
            let _ = child.kill();
            return child.wait().context("waiting for the killed launch");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn coordinator(cli: &Cli) -> Result<()> {
    let mut plan = if cli.full { Plan::full() } else { Plan::quick() };
    if !cli.small_sizes.is_empty() {
        plan.small_sizes = cli.small_sizes.clone();
    }
    if !cli.broadcast_sizes.is_empty() {
        plan.broadcast_sizes = cli.broadcast_sizes.clone();
    }
    if plan.small_sizes.iter().chain(&plan.broadcast_sizes).any(|&s| s == 0 || u32::try_from(s).is_err()) {
        bail!("sizes must be between 1 byte and 4 GiB");
    }
    let started = SystemTime::now();
    let mut machine = MachineWithLoad::probe();
    let exe = std::env::current_exe().context("cannot tell where this program is, to run its federates")?;
    let only: Vec<Workload> = if cli.only.is_empty() { vec![Workload::Small, Workload::Rate, Workload::Broadcast] } else { cli.only.clone() };
    let bin_dir = if cli.no_populate { None } else { Some(bin_dir(Daemons::default(), true)?) };
    // Without a wrapper, Launch finds the daemons itself; check early.
    for name in ["hprm-store", "hprm-rti"] {
        find_binary(name).map_err(|e| anyhow!("{e}"))?;
    }
    let co = Coordinator { exe, plan: plan.clone(), bin_dir, keep_runs: cli.keep_runs };
    eprintln!(
        "node-bench: {} run of {}; stores {}populated; fast mode, decentralized STP {} ms",
        plan.mode,
        only.iter().map(|w| format!("{w:?}").to_lowercase()).collect::<Vec<_>>().join(", "),
        if cli.no_populate { "not " } else { "" },
        STP.as_millis()
    );

    let mut floors = Floors { poll_us: FLOOR_POLL.as_micros() as u64, ..Floors::default() };
    let (mut small, mut rate, mut broadcast) = (Vec::new(), Vec::new(), Vec::new());
    for w in &only {
        let t = Instant::now();
        match w {
            Workload::Small => {
                eprintln!(
                    "small messages: ping-pong, {} rounds + {} warm-up per size; floors and hprm side by side",
                    plan.small_rounds, plan.small_warmup
                );
                small = co.small(&mut floors);
            }
            Workload::Rate => {
                eprintln!("sustained rate: {} messages of {RATE_SIZE} B after {} warm-up", thousands(plan.rate_messages as f64), plan.rate_warmup);
                rate = co.rate();
            }
            Workload::Broadcast => {
                eprintln!(
                    "broadcast and gather: 1 source, {RECEIVERS} receivers, {} rounds + {} warm-up per size, echo and fresh",
                    plan.broadcast_rounds, plan.broadcast_warmup
                );
                broadcast = co.broadcast(&mut floors);
            }
        }
        eprintln!("  ({:.0} s)", t.elapsed().as_secs_f64());
    }

    let mut report = Report {
        schema: 1,
        date: utc_date(started),
        started_utc: utc_timestamp(started),
        seconds: dec4(started.elapsed().map_or(0.0, |d| d.as_secs_f64())),
        plan,
        units: Units {
            size: "bytes; KiB = 1024 bytes (small messages), KB = 10^3 and MB = 10^6 bytes (broadcast)",
            time: "microseconds",
            p99: "nearest rank over the measured rounds",
        },
        machine: {
            machine.loadavg_end = loadavg();
            machine
        },
        setup: Setup {
            workspace_revision: workspace_revision(),
            fast: true,
            stp_ms: STP.as_millis() as u64,
            store_populate: !cli.no_populate,
            receivers: RECEIVERS,
            rate_payload_bytes: RATE_SIZE,
            out_of_band_threshold: hprm_node::payload::DEFAULT_THRESHOLD,
        },
        floors,
        small,
        rate,
        broadcast,
        targets: Vec::new(),
    };
    report.targets = report.judge();
    let markdown = report.markdown();
    let (md_path, json_path) = write_files(&cli.out, &format!("node-{}", report.date), &markdown, &report)?;
    print!("{markdown}");
    eprintln!("node-bench: wrote {} and {} ({:.0} s)", md_path.display(), json_path.display(), report.seconds);
    Ok(())
}

// ---------------------------------------------------------------------------
// Results

#[derive(Debug, Serialize)]
struct FloorRow {
    transport: Transport,
    /// Both ends poll for FLOOR_POLL before blocking.
    polling: bool,
    size: usize,
    label: String,
    one_way: Counted,
    rtt: Counted,
    /// One-way p50 of each pass.
    pass_medians_us: Vec<f64>,
    /// Round-trip p50 of each pass.
    rtt_pass_medians_us: Vec<f64>,
}

/// A round trip through a real `hprm-rti` ([`rti_round_trip`]).
#[derive(Debug, Serialize)]
struct RtiRow {
    transport: Transport,
    /// The client polls (yielding) for `hprm_node::DEFAULT_SPIN` before
    /// blocking, as hprm-node's scheduler does.
    polling: bool,
    /// The small-message size measured (see `rti_round_trip` for what
    /// the TAGGED_MESSAGE then carries).
    size: usize,
    label: String,
    rtt: Counted,
    /// Round-trip p50 of each pass.
    pass_medians_us: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct MemcpyRow {
    size: usize,
    label: String,
    memcpy: Counted,
}

#[derive(Debug, Default, Serialize)]
struct Floors {
    ping_pong: Vec<FloorRow>,
    /// One-federate federations relaying to themselves through the RTI.
    rti_round_trip: Vec<RtiRow>,
    poll_us: u64,
    memcpy: Vec<MemcpyRow>,
}

#[derive(Debug, Serialize)]
struct SmallRow {
    size: usize,
    label: String,
    coordination: Coord,
    /// ping -> pong, by pong's clock against ping's stamp.
    one_way: Option<Counted>,
    /// pong -> ping.
    one_way_back: Option<Counted>,
    rtt: Option<Counted>,
    /// One-way p50 of each pass.
    pass_medians_us: Vec<f64>,
    tardy: u64,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct RateRow {
    path: String,
    messages: u64,
    seconds: f64,
    msgs_per_s: f64,
    /// Messages processed after their tag (expected 0).
    tardy: u64,
    error: Option<String>,
}

impl RateRow {
    /// From the receive times of the first measured message and the last.
    fn from_span(path: String, mark: i64, last: i64, count: u64, expected: u64) -> RateRow {
        let seconds = (last - mark) as f64 / 1e9;
        let error = (count != expected).then(|| format!("{count} of {expected} measured messages arrived"));
        // count - 1 intervals between the mark and the last message.
        let rate = if seconds > 0.0 { count.saturating_sub(1) as f64 / seconds } else { f64::NAN };
        RateRow { path, messages: count, seconds: dec4(seconds), msgs_per_s: rate.round(), tardy: 0, error }
    }
}

#[derive(Debug, Serialize)]
struct BroadcastRow {
    size: usize,
    label: String,
    variant: Variant,
    coordination: Coord,
    /// Source's send to the last reply processed.
    latency: Option<Counted>,
    /// Source's send to a receiver's reaction (all receivers' samples).
    received: Option<Counted>,
    /// Source's send to a receiver's reply being set.
    replied: Option<Counted>,
    /// Source's send to the first reply processed.
    first_reply: Option<Counted>,
    memcpy_us: f64,
    ratio_to_memcpy: Option<f64>,
    /// Replies processed after their tag (decentralized; see STP).
    tardy: u64,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct Target {
    name: &'static str,
    /// None: not measured in this run.
    pass: Option<bool>,
    line: String,
    /// Why it was missed, from this run's figures.
    why: Option<String>,
}

#[derive(Debug, Serialize)]
struct Units {
    size: &'static str,
    time: &'static str,
    p99: &'static str,
}

#[derive(Debug, Serialize)]
struct Setup {
    workspace_revision: Option<String>,
    fast: bool,
    stp_ms: u64,
    store_populate: bool,
    receivers: usize,
    rate_payload_bytes: usize,
    out_of_band_threshold: usize,
}

#[derive(Debug, Serialize)]
struct Report {
    schema: u32,
    date: String,
    started_utc: String,
    seconds: f64,
    plan: Plan,
    units: Units,
    machine: MachineWithLoad,
    setup: Setup,
    floors: Floors,
    small: Vec<SmallRow>,
    rate: Vec<RateRow>,
    broadcast: Vec<BroadcastRow>,
    targets: Vec<Target>,
}

impl Report {
    fn small_row(&self, size: usize, coord: Coord) -> Option<&SmallRow> {
        self.small.iter().find(|r| r.size == size && r.coordination == coord)
    }

    fn rti_round_trip(&self, t: Transport, polling: bool, size: usize) -> Option<&RtiRow> {
        self.floors.rti_round_trip.iter().find(|r| r.transport == t && r.polling == polling && r.size == size)
    }

    fn floor(&self, t: Transport, polling: bool, size: usize) -> Option<&FloorRow> {
        self.floors.ping_pong.iter().find(|r| r.transport == t && r.polling == polling && r.size == size)
    }

    fn judge(&self) -> Vec<Target> {
        let mut targets = Vec::new();
        let sizes = &self.plan.small_sizes;
        let threshold = self.setup.out_of_band_threshold;

        // 1. Decentralized one-way p50 within 2x of the raw socket floor
        // (TCP: the transport of hprm-node's peers), at every size. Judged
        // against the blocking floor, the same I/O as hprm-node's socket
        // readers; the polling floor (both ends spin first, which
        // hprm-node's readers do not) is the stricter reference beside it.
        let judged = [
            (Coord::Decentralized, false, "one_way", "TCP peers vs the TCP floor, blocking"),
            (Coord::DecentralizedUnix, false, "one_way_unix", "Unix-socket peers vs the Unix socket floor, blocking"),
            (Coord::Decentralized, true, "one_way_polling", "TCP peers vs the TCP floor, polling; for reference"),
        ];
        for (coord, polling, name, what) in judged {
            let ratios: Vec<Versus> = sizes
                .iter()
                .filter_map(|&s| {
                    let row = self.small_row(s, coord)?;
                    let floor = self.floor(coord.transport(), polling, s)?;
                    let (node, floor_us) = (row.one_way?.median_us, floor.one_way.median_us);
                    let best = best_pass(&row.pass_medians_us) / best_pass(&floor.pass_medians_us);
                    let ratio = paired_ratio(&row.pass_medians_us, &floor.pass_medians_us);
                    Some(Versus { size: s, ratio, node, floor: floor_us, best })
                })
                .collect();
            let head = format!("decentralized one-way p50 within {ONE_WAY_TARGET}x of the raw socket floor ({what})");
            if ratios.is_empty() {
                targets.push(Target { name, pass: None, line: format!("target: {head}: not measured"), why: None });
                continue;
            }
            let pass = ratios.iter().all(|v| v.ratio <= ONE_WAY_TARGET);
            let detail = ratios.iter().map(|v| format!("{} {:.2}x", size_label(v.size), v.ratio)).collect::<Vec<_>>().join(", ");
            let best = ratios.iter().map(|v| format!("{} {:.2}x", size_label(v.size), v.best)).collect::<Vec<_>>().join(", ");
            let mut why = Vec::new();
            let (big, small): (Vec<&Versus>, Vec<&Versus>) = ratios.iter().filter(|v| v.ratio > ONE_WAY_TARGET).partition(|v| v.size >= threshold);
            if !big.is_empty() {
                why.push(format!(
                    "at {} the buffer is at or over the {}-byte out-of-band threshold, so it goes through the store: the sender copies it into a block reserved in advance and publishes it with a one-way message, the receiver maps it from its descriptor and claims it with another; no round trip waits, but each one-way message wakes the store daemon, a process the socket floor does not have, and the copy is the floor's twice over ({})",
                    big.iter().map(|v| size_label(v.size)).collect::<Vec<_>>().join(", "),
                    thousands(threshold as f64),
                    big.iter().map(|v| format!("{} µs against {} µs", fmt_us(v.node), fmt_us(v.floor))).collect::<Vec<_>>().join(", ")
                ));
            }
            if !small.is_empty() {
                why.push(format!(
                    "at {} (in-band) the socket costs what the floor's does (the receiving scheduler reads it itself while it polls, for {} µs after its last work; a reader thread woken as the floor's is when it sleeps); the rest is the runtime's own work per message on both sides: encoding and decoding the value, the event queue, the reaction{}",
                    small.iter().map(|v| size_label(v.size)).collect::<Vec<_>>().join(", "),
                    hprm_node::DEFAULT_SPIN.as_micros(),
                    if polling { ", where the polling floor does nothing but write and read" } else { "" }
                ));
            }
            targets.push(Target {
                name,
                pass: Some(pass),
                line: format!("target: {head}: {} — median over passes of the ratio within a pass: {detail} (best pass against best pass: {best})", pass_miss(pass)),
                why: (!why.is_empty()).then(|| why.join("; ") + "."),
            });
        }

        // 2. Centralized adds at most one RTI round trip: the extra
        // one-way latency of a centralized message over a decentralized one
        // (same size, same transport), over TCP and over Unix sockets (the
        // default on one host). Judged against a round trip through a real
        // hprm-rti measured in the same run (`rti_round_trip`: a message to
        // the RTI and back), with blocking reads, as the decentralized
        // target is judged against the blocking floor. Beside it, for
        // reference, two stricter yardsticks: the same round trip with the
        // client polling as a federate's scheduler does, and the raw socket
        // round trip (a relay with no process of its own to run).
        struct Extra {
            size: usize,
            /// Centralized one-way p50 minus decentralized, µs.
            extra: f64,
            /// The same within each pass.
            extra_passes: Vec<f64>,
            floor_one_way: Option<f64>,
            /// Per yardstick: its p50, and its p50 in each pass.
            yardsticks: [Option<(f64, Vec<f64>)>; 3],
        }
        #[derive(Clone, Copy, PartialEq)]
        enum Yardstick {
            Rti,
            RtiPolling,
            Floor,
        }
        let sign = |e: f64| format!("{}{}", if e < 0.0 { "-" } else { "+" }, fmt_us(e.abs()));
        let judged = [
            (Coord::Centralized, Coord::Decentralized, ["centralized", "centralized_polling", "centralized_floor"], "TCP"),
            (Coord::CentralizedUnix, Coord::DecentralizedUnix, ["centralized_unix", "centralized_unix_polling", "centralized_unix_floor"], "Unix sockets"),
        ];
        for (central, peer, names, what) in judged {
            let t = central.transport();
            let extra: Vec<Extra> = sizes
                .iter()
                .filter_map(|&s| {
                    let (cen, dec) = (self.small_row(s, central)?, self.small_row(s, peer)?);
                    let floor = self.floor(t, false, s);
                    let rti = |polling| self.rti_round_trip(t, polling, s).map(|r| (r.rtt.median_us, r.pass_medians_us.clone()));
                    Some(Extra {
                        size: s,
                        extra: cen.one_way?.median_us - dec.one_way?.median_us,
                        extra_passes: cen.pass_medians_us.iter().zip(&dec.pass_medians_us).map(|(c, d)| c - d).collect(),
                        floor_one_way: floor.map(|f| f.one_way.median_us),
                        yardsticks: [rti(false), rti(true), floor.map(|f| (f.rtt.median_us, f.rtt_pass_medians_us.clone()))],
                    })
                })
                .collect();
            for (k, (yardstick, name)) in [Yardstick::Rti, Yardstick::RtiPolling, Yardstick::Floor].into_iter().zip(names).enumerate() {
                let head = match yardstick {
                    Yardstick::Rti => format!("centralized one-way p50 at most one RTI round trip over decentralized ({what}: a message through hprm-rti and back, measured in this run with blocking reads, same size)"),
                    Yardstick::RtiPolling => format!("centralized one-way p50 at most one RTI round trip over decentralized ({what}: the same round trip read by polling, as a federate's scheduler waits; for reference)"),
                    Yardstick::Floor => format!("centralized one-way p50 at most one raw socket round trip over decentralized ({what}: the blocking floor's round trip, no RTI process in it; for reference)"),
                };
                // Judged within each pass, as the decentralized target is:
                // the machine's slow and fast spells then hit both sides.
                let measured: Vec<(&Extra, f64, f64)> = extra.iter().filter_map(|e| e.yardsticks[k].as_ref().map(|(p50, passes)| (e, *p50, paired_ratio(&e.extra_passes, passes)))).collect();
                if measured.is_empty() {
                    targets.push(Target { name, pass: None, line: format!("target: {head}: not measured"), why: None });
                    continue;
                }
                let pass = measured.iter().all(|&(_, _, ratio)| ratio <= 1.0);
                let detail = measured.iter().map(|&(e, rt, ratio)| format!("{} {} µs vs {} µs ({ratio:.2}x)", size_label(e.size), sign(e.extra), fmt_us(rt))).collect::<Vec<_>>().join(", ");
                let missed = measured.iter().filter(|&&(_, _, ratio)| ratio > 1.0).map(|(e, _, _)| size_label(e.size)).collect::<Vec<_>>().join(", ");
                let why = match yardstick {
                    Yardstick::Rti | Yardstick::RtiPolling => format!(
                        "at {missed} a centralized message took longer over the RTI than a message to the RTI and back. It makes the same two hops (sender -> RTI -> receiver); its message, LTC and NET leave in one write, and the RTI forwards it with the grant of its tag in one write, so no round trip waits. But the RTI then handles the LTC and NET too, and it shares two CPUs with two polling federates, where the round trip's RTI has one client and a CPU to itself."
                    ),
                    Yardstick::Floor => {
                        let model = measured
                            .iter()
                            .map(|&(e, floor, _)| {
                                let rti = match &e.yardsticks[0] {
                                    Some((rti, _)) => format!(" (the RTI round trip {} µs, {} µs on the floor's)", fmt_us(*rti), sign(rti - floor)),
                                    None => String::new(),
                                };
                                format!("{} {} µs{rti}", size_label(e.size), fmt_us(e.floor_one_way.unwrap_or(f64::NAN)))
                            })
                            .collect::<Vec<_>>()
                            .join(", ");
                        format!(
                            "a centralized message is relayed by the RTI (sender -> RTI -> receiver: one socket hop more than peer to peer), and the RTI is a process of its own on the same two CPUs as the two federates: it polls its connections for a while after each message (no wake-up while the exchange goes on), but shares a CPU with a polling federate{}. The floor's round trip has no such process in it. One more hop at the floor's one-way cost would be {model}.",
                            if t == Transport::Tcp { ", and a TCP hop costs two more system calls and a pass through the loopback stack" } else { "" }
                        )
                    }
                };
                targets.push(Target {
                    name,
                    pass: Some(pass),
                    line: format!("target: {head}: {} — extra p50 vs the round trip's p50 (median over passes of the ratio within a pass): {detail}", pass_miss(pass)),
                    why: (!pass).then_some(why),
                });
            }
        }

        // 3. 50 MB broadcast+gather within 3x of one memcpy of 50 MB.
        let rows: Vec<&BroadcastRow> = self.broadcast.iter().filter(|r| r.size == BROADCAST_TARGET_SIZE).collect();
        if rows.is_empty() {
            targets.push(Target {
                name: "broadcast",
                pass: None,
                line: format!("target: {} broadcast+gather within {BROADCAST_TARGET}x of one memcpy: not measured", size_label(BROADCAST_TARGET_SIZE)),
                why: None,
            });
        } else {
            let pass = rows.iter().all(|r| r.ratio_to_memcpy.is_some_and(|x| x <= BROADCAST_TARGET));
            let detail = rows
                .iter()
                .map(|r| match r.ratio_to_memcpy {
                    Some(x) => format!("{} {} {x:.1}x", r.variant.label(), r.coordination.label()),
                    None => format!("{} {} failed", r.variant.label(), r.coordination.label()),
                })
                .collect::<Vec<_>>()
                .join(", ");
            let memcpy = rows.first().map_or(f64::NAN, |r| r.memcpy_us);
            let mut why = Vec::new();
            for r in rows.iter().filter(|r| r.ratio_to_memcpy.is_some_and(|x| x > BROADCAST_TARGET)) {
                let (Some(l), Some(rc), Some(rp), Some(f)) = (&r.latency, &r.received, &r.replied, &r.first_reply) else { continue };
                let work = match r.variant {
                    // Whether a sent-on buffer is copied is the runtime's
                    // choice (it has changed): let the figures say it.
                    Variant::Echo => format!(
                        "each of the {} receivers sends back the buffer it got; {} passed between the replies being set and the last reaching the source, {}",
                        self.setup.receivers,
                        fmt_us(l.median_us - rp.median_us),
                        if l.median_us - rp.median_us > r.memcpy_us { "more than one memcpy of the buffer: the buffers are copied on the way back" } else { "less than one memcpy of the buffer: they travel back by reference" }
                    ),
                    Variant::Fresh => format!("each of the {} receivers loans and fills a new {} buffer: {} buffers written on {} CPUs", self.setup.receivers, r.label, self.setup.receivers, self.machine.host.nproc.unwrap_or(1)),
                };
                // The smallest size of the same path: the round's fixed cost.
                let fixed = self
                    .broadcast
                    .iter()
                    .filter(|o| o.variant == r.variant && o.coordination == r.coordination && o.size < r.size)
                    .min_by_key(|o| o.size)
                    .and_then(|o| o.latency.as_ref().map(|l| format!("; the same round with {} takes {} µs, the fixed cost of waking the source and four receiver processes (each a socket read, a store get and a scheduler hand-off) on {} CPUs", o.label, fmt_us(l.median_us), self.machine.host.nproc.unwrap_or(1))))
                    .unwrap_or_default();
                why.push(format!(
                    "{} {}: {work}; receivers' reactions started {} µs after the send (p50), replies were set at {} µs, the first reached the source at {} µs and the last at {} µs{fixed}",
                    r.variant.label(),
                    r.coordination.label(),
                    fmt_us(rc.median_us),
                    fmt_us(rp.median_us),
                    fmt_us(f.median_us),
                    fmt_us(l.median_us)
                ));
            }
            targets.push(Target {
                name: "broadcast",
                pass: Some(pass),
                line: format!(
                    "target: {} broadcast+gather p50 within {BROADCAST_TARGET}x of one memcpy ({} µs): {} — {detail}",
                    size_label(BROADCAST_TARGET_SIZE),
                    fmt_us(memcpy),
                    pass_miss(pass)
                ),
                why: (!why.is_empty()).then(|| why.join("; ") + "."),
            });
        }
        targets
    }

    fn markdown(&self) -> String {
        let mut md = String::new();
        let mut line = |s: String| {
            md.push_str(&s);
            md.push('\n');
        };
        let m = &self.machine;
        line(format!("# hprm-node federate benchmark, {} ({} run)", self.date, self.plan.mode));
        line(String::new());
        line(format!(
            "Machine: {}; load average {} at the start, {} at the end. Workspace {}. Started {}, took {:.0} s.",
            m.host,
            m.loadavg_start.as_deref().unwrap_or("?"),
            m.loadavg_end.as_deref().unwrap_or("?"),
            self.setup.workspace_revision.as_deref().unwrap_or("(revision unknown)"),
            self.started_utc,
            self.seconds
        ));
        line(format!(
            "Setup: every program launched by `hprm_node::launch::Launch` (its own hprm-store{}, its own hprm-rti, one process per federate), fast mode; decentralized STP {} ms; Rust federates. Floors run in the same invocation, next to the hprm runs of the same size: socket ping-pong between two processes (TCP_NODELAY; blocking reads, and polling ones), a framed stream for the rate, memcpy between pre-touched heap buffers. Beside them, the RTI round trip: a one-federate federation on its own hprm-rti, whose federate sends itself each size through the RTI and waits for it.",
            if self.setup.store_populate { " with `--populate`" } else { "" },
            self.setup.stp_ms
        ));
        line("Units: times in µs, medians (p50) and p99 (nearest rank). One-way: receiver's clock minus sender's stamp (one host, one clock).".into());
        line(String::new());
        line("## Targets".into());
        line(String::new());
        line("```".into());
        for t in &self.targets {
            line(t.line.clone());
        }
        line("```".into());
        line(String::new());
        for t in self.targets.iter().filter(|t| t.why.is_some()) {
            line(format!("- Why `{}` is missed: {}", t.name, t.why.as_deref().unwrap_or_default()));
        }
        let first = |l: &Option<String>| l.as_deref().and_then(|l| l.split_whitespace().next()).and_then(|v| v.parse::<f64>().ok());
        let busiest = first(&m.loadavg_start).into_iter().chain(first(&m.loadavg_end)).fold(0.0, f64::max);
        let cpus = m.host.nproc.unwrap_or(1) as f64;
        if busiest >= cpus {
            line(format!(
                "- The machine was busy during this run (1-minute load average up to {busiest:.1} on {cpus:.0} CPUs): paths that poll (hprm-node's scheduler, the polling floors) lose their CPU whenever another process wants it, and their figures suffer most."
            ));
        }
        if self.targets.iter().any(|t| t.why.is_some()) || busiest >= cpus {
            line(String::new());
        }

        if !self.small.is_empty() {
            line(format!(
                "## Small messages: ping-pong ({} rounds after {} warm-up)",
                self.plan.small_rounds, self.plan.small_warmup
            ));
            line(String::new());
            line(format!(
                "ping sends a value holding a `Buffer` of the size, pong echoes it, the echo starts the next round a microstep later. Buffers of {} bytes and more go through the store (64 KiB here), smaller ones in the message. Floors: the same sizes echoed between two processes, one write per message; *blocking* reads as hprm-node's socket readers do, or *polling* (non-blocking reads for up to {} µs first, on both ends, as hprm-node's scheduler polls its inbox). *RTI round trip*: a one-federate federation on its own hprm-rti (its defaults), whose federate sends itself a TAGGED_MESSAGE with a payload of the size ({} bytes from {} bytes on: what the RTI relays when the buffer goes through the store) through the RTI and waits for it to come back, reading *blocking*, or *polling* as hprm-node's scheduler does (non-blocking reads for up to {} µs, yielding the CPU between them); its by-pass column gives round-trip p50s. Paths: *decentralized* peers over loopback TCP (as across hosts), *decentralized-unix* peers over Unix domain sockets (hprm-node's default on one host), *centralized* through the RTI over TCP, *centralized-unix* through the RTI over its Unix socket (the default on the RTI's host). Ratios: hprm one-way p50 / the one-way p50 of the floor of the same transport (TCP, or Unix sockets for the -unix paths).",
                thousands(self.setup.out_of_band_threshold as f64),
                self.floors.poll_us,
                REFERENCE_PAYLOAD,
                thousands(self.setup.out_of_band_threshold as f64),
                hprm_node::DEFAULT_SPIN.as_micros()
            ));
            line(String::new());
            line("| size | path | one-way p50 | one-way p99 | p50 by pass | round trip p50 | round trip p99 | one-way / floor blocking | one-way / floor polling |".into());
            line("|---:|---|---:|---:|---:|---:|---:|---:|---:|".into());
            for &s in &self.plan.small_sizes {
                for (t, polling) in [(Transport::Tcp, false), (Transport::Uds, false), (Transport::Tcp, true), (Transport::Uds, true)] {
                    if let Some(f) = self.floor(t, polling, s) {
                        line(format!(
                            "| {} | {} floor, {} | {} | {} | {} | {} | {} | | |",
                            f.label,
                            t.label(),
                            if polling { "polling" } else { "blocking" },
                            fmt_us(f.one_way.median_us),
                            fmt_us(f.one_way.p99_us),
                            pass_range(&f.pass_medians_us),
                            fmt_us(f.rtt.median_us),
                            fmt_us(f.rtt.p99_us)
                        ));
                    }
                }
                for (t, polling) in [(Transport::Tcp, false), (Transport::Uds, false), (Transport::Tcp, true), (Transport::Uds, true)] {
                    if let Some(r) = self.rti_round_trip(t, polling, s) {
                        line(format!(
                            "| {} | RTI round trip, {}, {} | | | {} | {} | {} | | |",
                            r.label,
                            t.label(),
                            if polling { "polling" } else { "blocking" },
                            pass_range(&r.pass_medians_us),
                            fmt_us(r.rtt.median_us),
                            fmt_us(r.rtt.p99_us)
                        ));
                    }
                }
                for c in COORDS {
                    let Some(r) = self.small_row(s, c) else { continue };
                    match (&r.one_way, &r.rtt) {
                        (Some(o), Some(rt)) => {
                            let ratio = |f: Option<&FloorRow>| f.map_or(String::new(), |f| format!("{:.2}x", o.median_us / f.one_way.median_us));
                            line(format!(
                                "| {} | hprm {} | {} | {} | {} | {} | {} | {} | {} |",
                                r.label,
                                c.label(),
                                fmt_us(o.median_us),
                                fmt_us(o.p99_us),
                                pass_range(&r.pass_medians_us),
                                fmt_us(rt.median_us),
                                fmt_us(rt.p99_us),
                                ratio(self.floor(c.transport(), false, s)),
                                ratio(self.floor(c.transport(), true, s))
                            ));
                        }
                        _ => line(format!("| {} | hprm {} | failed | | | | | | |", r.label, c.label())),
                    }
                }
            }
            line(String::new());
            let tardy: u64 = self.small.iter().map(|r| r.tardy).sum();
            line(format!(
                "{} passes, samples pooled: each pass runs every size's floors and hprm runs back to back, so background load hits both alike. The per-pass medians show how bimodal this machine is: a blocking wake-up of an idle virtual CPU costs about 25 µs more than one of a busy CPU, and pollers lose their CPU when something else (a build) wants it; hprm-node's scheduler polls its inbox, which keeps its CPU out of the idle state. Tardy messages in these runs: {tardy} (expected 0: every message's tag is later than its receiver's current tag).",
                self.plan.small_passes
            ));
            line(String::new());
        }

        if !self.rate.is_empty() {
            line(format!(
                "## Sustained rate: {}-byte messages, one sender, one receiver ({} measured after {} warm-up)",
                self.setup.rate_payload_bytes,
                thousands(self.plan.rate_messages as f64),
                thousands(self.plan.rate_warmup as f64)
            ));
            line(String::new());
            line("hprm: the source sets its output and reschedules itself one microstep later, as fast as the runtime allows; rate at the sink, first to last measured message. Floors: the same number of framed writes, one per message.".into());
            line(String::new());
            line("| path | messages | seconds | messages/s | tardy |".into());
            line("|---|---:|---:|---:|---:|".into());
            for r in &self.rate {
                let tardy = if r.path.starts_with("hprm") { r.tardy.to_string() } else { String::new() };
                match &r.error {
                    None => line(format!("| {} | {} | {:.3} | {} | {tardy} |", r.path, thousands(r.messages as f64), r.seconds, thousands(r.msgs_per_s))),
                    Some(e) => line(format!("| {} | failed: {} | | | |", r.path, e.lines().next().unwrap_or_default())),
                }
            }
            line(String::new());
        }

        if !self.broadcast.is_empty() {
            line(format!(
                "## Broadcast and gather: 1 source, {} receivers ({} rounds after {} warm-up)",
                self.setup.receivers, self.plan.broadcast_rounds, self.plan.broadcast_warmup
            ));
            line(String::new());
            line("The source loans a uint8 buffer from the store, fills it, stamps and sends it to every receiver (one store object, 4 deliveries); each receiver replies, *echo*: the buffer it got, sent on as it is (by reference or copied, as the runtime does it), *fresh*: a new buffer it loans and fills. Latency: source's send to the last reply processed, by the source's clock. memcpy: one copy of the size between pre-touched heap buffers, measured just before that size's runs.".into());
            line(String::new());
            line("| size | memcpy p50 | echo decentralized p50 (p99) | echo centralized p50 (p99) | fresh decentralized p50 (p99) | fresh centralized p50 (p99) |".into());
            line("|---:|---:|---:|---:|---:|---:|".into());
            for mrow in &self.floors.memcpy {
                let cell = |v: Variant, c: Coord| {
                    self.broadcast.iter().find(|r| r.size == mrow.size && r.variant == v && r.coordination == c).map_or(String::new(), |r| match (&r.latency, r.ratio_to_memcpy) {
                        (Some(l), Some(x)) => format!("{} ({}) = {x:.1}x", fmt_us(l.median_us), fmt_us(l.p99_us)),
                        _ => "failed".into(),
                    })
                };
                line(format!(
                    "| {} | {} | {} | {} | {} | {} |",
                    mrow.label,
                    fmt_us(mrow.memcpy.median_us),
                    cell(Variant::Echo, Coord::Decentralized),
                    cell(Variant::Echo, Coord::Centralized),
                    cell(Variant::Fresh, Coord::Decentralized),
                    cell(Variant::Fresh, Coord::Centralized)
                ));
            }
            line(String::new());
            line("Where the time goes (p50 µs after the source's send): receivers' reactions start (all four pooled), their replies are set (echo: at once; fresh: after loaning and filling), the first reply and the last are processed by the source.".into());
            line(String::new());
            line("| size | variant | coordination | receivers start | replies set | first reply back | last reply back (the figure) |".into());
            line("|---:|---|---|---:|---:|---:|---:|".into());
            for r in &self.broadcast {
                let cell = |s: &Option<Counted>| s.as_ref().map_or("—".to_string(), |s| fmt_us(s.median_us));
                line(format!(
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    r.label,
                    r.variant.label(),
                    r.coordination.label(),
                    cell(&r.received),
                    cell(&r.replied),
                    cell(&r.first_reply),
                    cell(&r.latency)
                ));
            }
            line(String::new());
            let tardy: u64 = self.broadcast.iter().filter(|r| r.coordination == Coord::Decentralized).map(|r| r.tardy).sum();
            let rounds: u64 = self.broadcast.iter().filter(|r| r.coordination == Coord::Decentralized && r.error.is_none()).count() as u64
                * (self.plan.broadcast_rounds + self.plan.broadcast_warmup);
            line(format!(
                "Decentralized runs: {tardy} replies processed tardy in {rounds} rounds. In fast mode every tag of the round chain has the start time, so after the first tag physical time is past tag + STP and the source processes each reply as it arrives rather than waiting for all four at one tag; it counts replies across tags."
            ));
            line(String::new());
        }
        let failed: Vec<String> = self
            .small
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("small {} {}: {e}", r.label, r.coordination.label())))
            .chain(self.rate.iter().filter_map(|r| r.error.as_ref().map(|e| format!("rate {}: {e}", r.path))))
            .chain(self.broadcast.iter().filter_map(|r| r.error.as_ref().map(|e| format!("broadcast {} {} {}: {e}", r.label, r.variant.label(), r.coordination.label()))))
            .collect();
        if !failed.is_empty() {
            line("## Failures".into());
            line(String::new());
            line("```".into());
            for f in failed {
                line(f);
            }
            line("```".into());
        }
        md
    }
}

/// Per-pass medians as "min–max" (µs); failed passes (NaN) left out.
fn pass_range(medians: &[f64]) -> String {
    let ok: Vec<f64> = medians.iter().copied().filter(|m| !m.is_nan()).collect();
    let min = ok.iter().copied().fold(f64::NAN, f64::min);
    let max = ok.iter().copied().fold(f64::NAN, f64::max);
    if ok.len() < 2 {
        fmt_us(min)
    } else {
        format!("{}–{}", fmt_us(min), fmt_us(max))
    }
}

/// The lowest of the per-pass medians: what a path does when the machine
/// lets it, for comparing best with best.
fn best_pass(medians: &[f64]) -> f64 {
    medians.iter().copied().fold(f64::NAN, f64::min)
}

/// Median over passes of hprm's pass median / the floor's pass median
/// (measured back to back within the pass), so that load that comes and
/// goes between passes hits both sides of each ratio alike.
fn paired_ratio(node: &[f64], floor: &[f64]) -> f64 {
    let mut ratios: Vec<f64> = node.iter().zip(floor).map(|(n, f)| n / f).filter(|r| r.is_finite()).collect();
    median(&mut ratios)
}

/// hprm against a floor at one size (µs).
struct Versus {
    size: usize,
    /// `paired_ratio` of the pass medians: what the target judges.
    ratio: f64,
    /// Pooled p50s.
    node: f64,
    floor: f64,
    /// Best hprm pass median over best floor pass median.
    best: f64,
}

/// The machine, and /proc/loadavg when the run started and when it ended:
/// on a shared 2-CPU machine, how busy the rest of it was explains a lot.
#[derive(Debug, Serialize)]
struct MachineWithLoad {
    #[serde(flatten)]
    host: Machine,
    loadavg_start: Option<String>,
    loadavg_end: Option<String>,
}

impl MachineWithLoad {
    fn probe() -> MachineWithLoad {
        MachineWithLoad { host: Machine::probe(), loadavg_start: loadavg(), loadavg_end: None }
    }
}

/// The three load averages of /proc/loadavg.
fn loadavg() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_ratios_skip_failed_passes() {
        assert_eq!(paired_ratio(&[10.0, 20.0, f64::NAN], &[5.0, 5.0, 5.0]), 3.0);
        assert_eq!(paired_ratio(&[10.0, 30.0, 8.0], &[5.0, 10.0, 8.0]), 2.0);
        assert!(paired_ratio(&[], &[]).is_nan());
        assert_eq!(pass_range(&[3.0, f64::NAN, 1.5]), "1.50–3.00");
    }

    #[test]
    fn compare_defaults_parse_and_bad_input_is_refused_before_any_launch() {
        let cli = Cli::try_parse_from(["node-bench", "compare", "--rti-a", "a", "--rti-b", "b"]).expect("the defaults parse");
        let Some(Role::Compare { workload, coord, size, launches, store_a, .. }) = cli.role else { panic!("expected compare: {cli:?}") };
        assert_eq!((workload, coord, size, launches, store_a), (Workload::Small, Coord::CentralizedUnix, 8, 12, None));
        let (missing, other) = (PathBuf::from("/no/such/hprm-rti"), PathBuf::from("/no/such/hprm-store"));
        let a = Daemons { rti: Some(&missing), store: None };
        let b = Daemons { rti: Some(&missing), store: Some(&other) };
        let err = compare([a, b], Workload::Small, Coord::CentralizedUnix, 8, 1, 10, true).expect_err("no such binary");
        assert!(format!("{err:#}").contains("no hprm-rti binary at /no/such/hprm-rti"), "{err:#}");
        let err = compare([a, b], Workload::Small, Coord::CentralizedUnix, 8, 0, 10, true).expect_err("no launches");
        assert!(err.to_string().contains("--launches"), "{err:#}");
        let err = compare([a, a], Workload::Small, Coord::CentralizedUnix, 8, 1, 10, true).expect_err("nothing differs");
        assert!(err.to_string().contains("the same daemons"), "{err:#}");
    }

    #[test]
    fn headers_round_trip() {
        let mut f = [0u8; HEADER];
        put_header(&mut f, 65536, F_STREAM | F_MARK, -5);
        assert_eq!(parse_header(&f), (65536, F_STREAM | F_MARK, -5));
    }

    /// Through a real hprm-rti (cargo builds it beside the test binary for
    /// `cargo test --workspace`), blocking and polling, both transports.
    #[test]
    fn rti_round_trips_come_back_whole() {
        for (transport, poll) in RTI_KINDS {
            for size in [8, 70_000] {
                let rtt = rti_round_trip(transport, poll, size, 30, 5).unwrap_or_else(|e| panic!("{} {size}: {e:#}", transport.label()));
                assert_eq!(rtt.len(), 30);
                assert!(rtt.iter().all(|&t| t > 0), "{rtt:?}");
            }
        }
    }

    #[test]
    fn programs_are_valid() {
        for workload in [Workload::Small, Workload::Rate, Workload::Broadcast] {
            for coord in [Coord::Centralized, Coord::Decentralized] {
                let spec = Spec { workload, coord, size: 8, rounds: 1, warmup: 0, variant: Variant::Fresh, out: PathBuf::new(), store_memory: "64m".into() };
                let p = build_program(&spec);
                p.validate().unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(p.federate_names(), spec.federates().iter().map(String::as_str).collect::<Vec<_>>());
            }
        }
    }
}
