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
//! `OUT/store-YYYY-MM-DD.json` (`bench/plot_store.py` draws it). Targets that
//! are missed are reported as MISS; the program still exits 0, because a
//! benchmark that fails is a measurement, not a crash.

use std::fs::File;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use clap::Parser;
use hprm_bench::date::{utc_date, utc_timestamp};
use hprm_bench::machine::{read_trimmed, workspace_revision, Machine};
use hprm_bench::report::{fmt_us, pass_miss, size_label, thousands, write_files};
use hprm_bench::summary::{dec4, median, Summary};
use hprm_store::{Deletion, ObjectId, Stats, StoreClient};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;

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
    full: bool,
    /// Directory for store-DATE.md and store-DATE.json.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    out: PathBuf,
    /// The hprm-store daemon binary [default: `hprm-store` beside this program].
    #[arg(long)]
    store_bin: Option<PathBuf>,
    /// Run the client and the daemon at SCHED_FIFO priority 10 on CPUs of
    /// their own (client CPU 0, daemon CPU 1), as a robot runs its data path,
    /// so that other processes cannot preempt them. Needs root or
    /// CAP_SYS_NICE. Results go to store-DATE-realtime.{md,json}.
    #[arg(long)]
    realtime: bool,
}

/// SCHED_FIFO priority of the `--realtime` run.
const REALTIME_PRIORITY: u8 = 10;
/// CPUs of the client and the daemon in the `--realtime` run.
const CLIENT_CPU: usize = 0;
const DAEMON_CPU: usize = 1;

#[derive(Debug, Clone, Copy, Serialize)]
struct Plan {
    mode: &'static str,
    reps: usize,
    warmup_reps: usize,
    loop_seconds: f64,
    /// Small-object cycles run before each timed loop, to warm the daemon's
    /// tables and the connection.
    warmup_cycles: usize,
    /// Round trips timed for each round-trip baseline of (b).
    round_trips: usize,
}

const QUICK: Plan = Plan { mode: "quick", reps: 20, warmup_reps: 3, loop_seconds: 2.0, warmup_cycles: 2_000, round_trips: 5_000 };
const FULL: Plan = Plan { mode: "full", reps: 200, warmup_reps: 10, loop_seconds: 10.0, warmup_cycles: 10_000, round_trips: 50_000 };

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
    let started = SystemTime::now();
    let (scheduling, daemon_args) = if cli.realtime {
        use hprm_store::realtime::{apply, CpuList};
        apply(Some(REALTIME_PRIORITY), Some(&CpuList(vec![CLIENT_CPU]))).context("cannot set up the --realtime run")?;
        let args = vec!["--realtime-priority".to_string(), REALTIME_PRIORITY.to_string(), "--cpus".into(), DAEMON_CPU.to_string()];
        (format!("SCHED_FIFO priority {REALTIME_PRIORITY}, client pinned to CPU {CLIENT_CPU}, daemon to CPU {DAEMON_CPU}"), args)
    } else {
        ("default (CFS, no pinning)".to_string(), Vec::new())
    };
    eprintln!("store-bench: {} run, scheduling {scheduling}; starting {} (arena {ARENA}, --populate)", plan.mode, store_bin.display());

    // Declared before the client so that it is dropped after it: the daemon
    // outlives every connection, also when `?` leaves early.
    let mut daemon = Daemon::start(&store_bin, &daemon_args)?;
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
        small_ops: SmallOps { object_bytes: SMALL_SIZE, create_seal_get_release: explicit, put_get_release: put, round_trips },
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

fn find_store_bin(flag: Option<PathBuf>) -> Result<PathBuf> {
    let path = match flag {
        Some(p) => p,
        None => {
            let exe = std::env::current_exe().context("cannot tell where this program is, to find hprm-store beside it; pass --store-bin PATH")?;
            exe.with_file_name("hprm-store")
        }
    };
    if !path.is_file() {
        bail!(
            "no hprm-store daemon binary at {}; build it with `cargo build --release -p hprm-store`, or pass --store-bin PATH",
            path.display()
        );
    }
    Ok(path)
}

// ---------------------------------------------------------------------------
// The daemon under test

/// The child `hprm-store`. Dropping it stops the daemon (SIGTERM, then
/// SIGKILL if it lingers) so that no daemon outlives the benchmark, whichever
/// way the benchmark ends; the socket directory goes with it.
struct Daemon {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
    // Dropped after `Drop::drop` has stopped the child, so the socket's
    // directory is removed only once nobody serves it.
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start(bin: &Path, extra: &[String]) -> Result<Daemon> {
        let dir = tempfile::Builder::new()
            .prefix("hprm-store-bench.")
            .tempdir()
            .context("cannot create a temporary directory for the daemon's socket")?;
        let socket = dir.path().join("store.sock");
        let log = dir.path().join("hprm-store.log");
        // The daemon's log would interleave with our progress lines; it is
        // shown only when the daemon fails.
        let log_file = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let log_err = log_file.try_clone().with_context(|| format!("cannot reopen {}", log.display()))?;
        let child = Command::new(bin)
            .arg("--socket")
            .arg(&socket)
            .args(["--memory", ARENA, "--populate"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        Ok(Daemon { child: Some(child), socket, log, _dir: dir })
    }

    /// Connects once the daemon listens. The socket appears only after the
    /// arena is made and populated, so polling it is the readiness check.
    fn connect(&mut self, timeout: Duration) -> Result<StoreClient> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait().context("cannot check on the hprm-store child")? {
                    self.child = None;
                    bail!("hprm-store exited ({status}) before accepting connections; its log:\n{}", self.log_text());
                }
            }
            match StoreClient::connect(&self.socket) {
                Ok(client) => return Ok(client),
                // Only "nobody listens yet" is worth waiting out.
                Err(hprm_store::Error::Connect { .. }) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("hprm-store did not accept connections within {timeout:?}; its log:\n{}", self.log_text()))
                }
            }
        }
    }

    /// Stops the daemon the way an operator would (SIGTERM) and reaps it.
    fn stop(&mut self) -> Result<ExitStatus> {
        let Some(mut child) = self.child.take() else { bail!("hprm-store was already stopped") };
        let pid = Pid::from_raw(i32::try_from(child.id()).context("the child's pid does not fit a pid_t")?);
        // The child is not reaped yet, so its pid cannot have been reused.
        let signalled = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        let graceful = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if signalled.is_ok() && Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) => break Err(anyhow::anyhow!("hprm-store did not exit within 5 s of SIGTERM ({signalled:?})")),
                Err(e) => break Err(anyhow::Error::new(e).context("cannot wait for hprm-store")),
            }
        };
        graceful.map_err(|e| {
            let _ = child.kill();
            let _ = child.wait();
            e.context(format!("killed it; its log:\n{}", self.log_text()))
        })
    }

    fn log_text(&self) -> String {
        match std::fs::read_to_string(&self.log) {
            Ok(s) if s.trim().is_empty() => "(empty)".to_string(),
            Ok(s) => {
                let lines: Vec<&str> = s.lines().collect();
                lines[lines.len().saturating_sub(20)..].join("\n")
            }
            Err(e) => format!("(cannot read {}: {e})", self.log.display()),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            if let Err(e) = self.stop() {
                eprintln!("store-bench: stopping hprm-store: {e:#}");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Measurements

struct Bench<'a> {
    client: &'a StoreClient,
    plan: Plan,
    /// What producers copy in: pseudo-random so that every page is real and
    /// the read-back checksum catches a wrong object.
    src: Vec<u8>,
    /// The memcpy baseline's destination, touched up front like the
    /// store's populated arena, so neither side pays page faults.
    dst: Vec<u8>,
    next_id: u64,
    deferred_deletes: u64,
    /// CPU for the socket floor's echo thread (the `--realtime` run).
    echo_cpu: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SmallPath {
    CreateSeal,
    Put,
}

impl<'a> Bench<'a> {
    fn new(client: &'a StoreClient, plan: Plan) -> Bench<'a> {
        let max = LATENCY_SIZES.iter().chain(&BANDWIDTH_SIZES).copied().max().unwrap_or(0) as usize;
        let mut src = vec![0u8; max];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for chunk in src.chunks_mut(8) {
            // xorshift64: cheap, and no zero pages the kernel could share.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_ne_bytes()[..chunk.len()]);
        }
        // Non-zero fill: `vec![0; n]` would come from calloc as untouched
        // zero pages, and the first memcpy would pay their faults.
        let dst = vec![0xA5u8; max];
        Bench { client, plan, src, dst, next_id: 0, deferred_deletes: 0, echo_cpu: None }
    }

    /// Ids from a counter: this daemon is ours alone, and drawing random
    /// ids (a getrandom syscall each) would be counted as store time.
    fn id(&mut self) -> ObjectId {
        self.next_id += 1;
        let mut bytes = [0u8; ObjectId::LEN];
        bytes[..8].copy_from_slice(&self.next_id.to_le_bytes());
        ObjectId::from_bytes(bytes)
    }

    /// create + copy in + seal, timed; the object stays in the store.
    /// Returns the whole time and the copy's share of it.
    fn write_object(&mut self, size: usize) -> Result<(ObjectId, Duration, Duration)> {
        let id = self.id();
        let t = Instant::now();
        let mut obj = self.client.create(id, size as u64, b"").with_context(|| format!("create of a {size}-byte object"))?;
        let c = Instant::now();
        obj.data_mut().copy_from_slice(&self.src[..size]);
        let copy = c.elapsed();
        obj.seal().with_context(|| format!("seal of a {size}-byte object"))?;
        Ok((id, t.elapsed(), copy))
    }

    fn delete(&mut self, id: ObjectId) -> Result<()> {
        // Every reference was released before this (on the same connection,
        // so the daemon saw the release first): anything but an immediate
        // delete is a store bug worth reporting.
        if self.client.delete(id).with_context(|| format!("delete of {id}"))? == Deletion::Deferred {
            self.deferred_deletes += 1;
        }
        Ok(())
    }

    fn memcpy(&mut self, size: usize) -> Duration {
        let t = Instant::now();
        self.dst[..size].copy_from_slice(black_box(&self.src[..size]));
        black_box(&mut self.dst);
        t.elapsed()
    }

    fn latency(&mut self, size: u64) -> Result<LatencyRow> {
        let n = size as usize;
        let expected = sum_words(&self.src[..n]);
        let reps = self.plan.reps;
        let (mut write, mut write_copy, mut read, mut copy, mut heap_read) =
            (Vec::with_capacity(reps), Vec::with_capacity(reps), Vec::with_capacity(reps), Vec::with_capacity(reps), Vec::with_capacity(reps));
        for rep in 0..self.plan.warmup_reps + reps {
            let (id, w, wc) = self.write_object(n)?;

            let t = Instant::now();
            let got = self.client.get(&[id], GET_TIMEOUT).with_context(|| format!("get of {id} ({size} bytes)"))?;
            let obj = got.first().context("get returned no object")?;
            let sum = sum_words(black_box(obj.data()));
            let r = t.elapsed();
            // Release (a one-way message) is not part of what a reader waits for.
            drop(got);
            if sum != expected {
                bail!("object {id} ({size} bytes) read back wrong: word sum {sum:#x}, wrote {expected:#x}");
            }
            self.delete(id)?;

            let c = self.memcpy(n);
            let t = Instant::now();
            black_box(sum_words(black_box(&self.src[..n])));
            let h = t.elapsed();

            if rep >= self.plan.warmup_reps {
                write.push(w);
                write_copy.push(wc);
                read.push(r);
                copy.push(c);
                heap_read.push(h);
            }
        }
        let row = LatencyRow {
            size_bytes: size,
            label: size_label(n),
            reps,
            create_write_seal: Summary::of(&write),
            write_copy: Summary::of(&write_copy),
            get_read: Summary::of(&read),
            memcpy: Summary::of(&copy),
            heap_read: Summary::of(&heap_read),
        };
        eprintln!(
            "  {:>6}: create+write+seal {} µs (p99 {}), get+read {} µs (p99 {}), memcpy {} µs",
            row.label,
            fmt_us(row.create_write_seal.median_us),
            fmt_us(row.create_write_seal.p99_us),
            fmt_us(row.get_read.median_us),
            fmt_us(row.get_read.p99_us),
            fmt_us(row.memcpy.median_us)
        );
        Ok(row)
    }

    fn small_cycle(&mut self, path: SmallPath, payload: &[u8; SMALL_SIZE]) -> Result<()> {
        let id = self.id();
        match path {
            SmallPath::CreateSeal => {
                let mut obj = self.client.create(id, SMALL_SIZE as u64, b"").context("create of a small object")?;
                obj.data_mut().copy_from_slice(payload);
                obj.seal().context("seal of a small object")?;
            }
            SmallPath::Put => self.client.put(id, payload, b"").context("put of a small object")?,
        }
        let got = self.client.get(&[id], GET_TIMEOUT).with_context(|| format!("get of small object {id}"))?;
        black_box(sum_words(got.first().context("get returned no object")?.data()));
        // Dropping the object is the release.
        drop(got);
        Ok(())
    }

    fn small_cycles(&mut self, path: SmallPath) -> Result<SmallLoop> {
        let payload = [0x5Au8; SMALL_SIZE];
        for _ in 0..self.plan.warmup_cycles {
            self.small_cycle(path, &payload)?;
        }
        let budget = Duration::from_secs_f64(self.plan.loop_seconds);
        let mut lat = Vec::with_capacity(500_000);
        let start = Instant::now();
        loop {
            let t = Instant::now();
            if t.duration_since(start) >= budget {
                break;
            }
            self.small_cycle(path, &payload)?;
            lat.push(t.elapsed());
        }
        let elapsed = start.elapsed();
        // Released objects pile up (a cycle never deletes); one evict clears
        // them, untimed, so the next phase starts from an empty arena.
        let evicted = self.client.evict(u64::MAX).context("evict after the small-object loop")?;
        let cycles = lat.len() as u64;
        let row = SmallLoop {
            path: match path {
                SmallPath::CreateSeal => "create+seal+get+release",
                SmallPath::Put => "put+get+release",
            },
            seconds: dec4(elapsed.as_secs_f64()),
            cycles,
            cycles_per_s: (cycles as f64 / elapsed.as_secs_f64()).round(),
            cycle: Summary::of(&lat),
            evicted_after: evicted.objects,
        };
        eprintln!(
            "  {}: {} cycles/s (cycle median {} µs, p99 {} µs)",
            row.path,
            thousands(row.cycles_per_s),
            fmt_us(row.cycle.median_us),
            fmt_us(row.cycle.p99_us)
        );
        Ok(row)
    }

    /// What one request/reply costs, to read (b) against: the store's
    /// cheapest request, and a bare Unix-socket ping-pong between two threads
    /// (the floor for any design that waits for a reply). A small cycle waits
    /// for one reply (get); see `REPLIES_PER_CYCLE`.
    fn round_trips(&mut self) -> Result<RoundTrips> {
        let n = self.plan.round_trips;
        let missing = self.id();
        let mut store = Vec::with_capacity(n);
        for _ in 0..n / 10 {
            self.client.contains(missing).context("contains (warm-up)")?;
        }
        for _ in 0..n {
            let t = Instant::now();
            black_box(self.client.contains(missing).context("contains")?);
            store.push(t.elapsed());
        }
        let raw = socket_ping_pong(n, Duration::ZERO, self.echo_cpu)?;
        let polling = socket_ping_pong(n, hprm_store::client::DEFAULT_SPIN, self.echo_cpu)?;
        let rt = RoundTrips {
            samples: n,
            store_contains: Summary::of(&store),
            raw_socket: Summary::of(&raw),
            raw_socket_polling: Summary::of(&polling),
            replies_per_cycle: REPLIES_PER_CYCLE,
            cycles_per_s_at_raw_floor: 0.0,
        };
        let floor = 1e6 / (f64::from(REPLIES_PER_CYCLE) * rt.raw_socket_polling.median_us);
        let rt = RoundTrips { cycles_per_s_at_raw_floor: floor.round(), ..rt };
        eprintln!(
            "  round trip: store contains() {} µs; bare Unix socket {} µs blocking, {} µs polling (median); {REPLIES_PER_CYCLE} polling round trips per cycle allow at most {} cycles/s",
            fmt_us(rt.store_contains.median_us),
            fmt_us(rt.raw_socket.median_us),
            fmt_us(rt.raw_socket_polling.median_us),
            thousands(rt.cycles_per_s_at_raw_floor)
        );
        Ok(rt)
    }

    fn bandwidth(&mut self, size: u64) -> Result<BandwidthRow> {
        let n = size as usize;
        let reps = self.plan.reps;
        let (mut store, mut copy, mut ratio) = (Vec::with_capacity(reps), Vec::with_capacity(reps), Vec::with_capacity(reps));
        for rep in 0..self.plan.warmup_reps + reps {
            // Alternate which goes first, so neither always inherits the
            // other's cache state or a burst of noise.
            let (s, c) = if rep % 2 == 0 {
                let (id, s, _) = self.write_object(n)?;
                self.delete(id)?;
                (s, self.memcpy(n))
            } else {
                let c = self.memcpy(n);
                let (id, s, _) = self.write_object(n)?;
                self.delete(id)?;
                (s, c)
            };
            if rep >= self.plan.warmup_reps {
                store.push(size as f64 / s.as_secs_f64() / 1e9);
                copy.push(size as f64 / c.as_secs_f64() / 1e9);
                // Paired within the rep: robust to slow drifts in machine load.
                ratio.push(c.as_secs_f64() / s.as_secs_f64());
            }
        }
        let row = BandwidthRow {
            size_bytes: size,
            label: size_label(n),
            reps,
            store_gbps: dec4(median(&mut store)),
            memcpy_gbps: dec4(median(&mut copy)),
            ratio: dec4(median(&mut ratio)),
            ratio_min: dec4(ratio.first().copied().unwrap_or(f64::NAN)),
            ratio_max: dec4(ratio.last().copied().unwrap_or(f64::NAN)),
        };
        eprintln!(
            "  {:>6}: store {:.2} GB/s, memcpy {:.2} GB/s, store/memcpy {:.1}%",
            row.label,
            row.store_gbps,
            row.memcpy_gbps,
            row.ratio * 100.0
        );
        Ok(row)
    }
}

/// Times `n` 64-byte ping-pongs over a Unix socket pair with an echo thread.
/// A small cycle waits for one reply, the get's: a small create takes a
/// block the client reserved in advance (one Reserve round trip per
/// `RESERVE_BATCH` objects, not counted here), and seal (publish) and
/// release are one-way.
const REPLIES_PER_CYCLE: u32 = 1;

/// 64-byte ping-pong over a Unix socket pair between two threads. With a
/// `poll` budget both sides first poll (non-blocking reads) as the store's
/// client and daemon do, then block: the floor for the store's round trip.
fn socket_ping_pong(n: usize, poll: Duration, echo_cpu: Option<usize>) -> Result<Vec<Duration>> {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let (mut near, mut far) = UnixStream::pair().context("cannot create a Unix socket pair")?;
    let echo = std::thread::spawn(move || {
        if let Some(cpu) = echo_cpu {
            // Two polling threads at real-time priority on one CPU would
            // starve each other; the echo side gets the daemon's CPU.
            let _ = hprm_store::realtime::apply(None, Some(&hprm_store::realtime::CpuList(vec![cpu])));
        }
        let mut buf = [0u8; SMALL_SIZE];
        // Ends when the near side is dropped (read fails at EOF).
        while read_exact_polling(&far, &mut buf, poll).is_ok() && far.write_all(&buf).is_ok() {}
    });
    let mut buf = [0u8; SMALL_SIZE];
    let mut samples = Vec::with_capacity(n);
    let mut ping = || -> std::io::Result<Duration> {
        let t = Instant::now();
        near.write_all(&buf)?;
        read_exact_polling(&near, &mut buf, poll)?;
        Ok(t.elapsed())
    };
    for i in 0..n + n / 10 {
        let d = ping().context("socket ping-pong")?;
        if i >= n / 10 {
            samples.push(d);
        }
    }
    drop(near);
    echo.join().map_err(|_| anyhow::anyhow!("the echo thread panicked"))?;
    Ok(samples)
}

/// `read_exact`, polling with non-blocking reads for up to `poll` first.
fn read_exact_polling(mut sock: &std::os::unix::net::UnixStream, buf: &mut [u8], poll: Duration) -> std::io::Result<()> {
    use nix::sys::socket::{recv, MsgFlags};
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let mut got = 0;
    let deadline = Instant::now() + poll;
    while got < buf.len() {
        if Instant::now() < deadline {
            match recv(sock.as_raw_fd(), &mut buf[got..], MsgFlags::MSG_DONTWAIT) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(k) => got += k,
                Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => std::hint::spin_loop(),
                Err(e) => return Err(e.into()),
            }
        } else {
            match sock.read(&mut buf[got..])? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                k => got += k,
            }
        }
    }
    Ok(())
}

/// Sum of the bytes as native-endian u64 words: touches every byte at memory
/// speed (the compiler vectorizes it), which a real consumer would do too.
fn sum_words(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut sum = 0u64;
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        sum = sum.wrapping_add(u64::from_ne_bytes(word));
    }
    words.remainder().iter().fold(sum, |s, &b| s.wrapping_add(u64::from(b)))
}

// ---------------------------------------------------------------------------
// Results

#[derive(Debug, Serialize)]
struct Report {
    schema: u32,
    date: String,
    started_utc: String,
    plan: Plan,
    units: Units,
    machine: MachineWithThp,
    store: StoreSetup,
    latency: Vec<LatencyRow>,
    small_ops: SmallOps,
    bandwidth: Vec<BandwidthRow>,
    store_after: StoreAfter,
    targets: Targets,
}

#[derive(Debug, Serialize)]
struct Units {
    size: &'static str,
    time: &'static str,
    bandwidth: &'static str,
    p99: &'static str,
}

#[derive(Debug, Serialize)]
struct StoreSetup {
    binary: String,
    arena: &'static str,
    populate: bool,
    scheduling: String,
    workspace_revision: Option<String>,
}

#[derive(Debug, Serialize)]
struct LatencyRow {
    size_bytes: u64,
    label: String,
    reps: usize,
    create_write_seal: Summary,
    /// The copy into the object alone (inside create_write_seal): the rest
    /// of create_write_seal is the two round trips.
    write_copy: Summary,
    get_read: Summary,
    /// The same copy into a pre-touched heap buffer.
    memcpy: Summary,
    /// The same word sum over a heap buffer.
    heap_read: Summary,
}

#[derive(Debug, Serialize)]
struct SmallOps {
    object_bytes: usize,
    create_seal_get_release: SmallLoop,
    put_get_release: SmallLoop,
    round_trips: RoundTrips,
}

#[derive(Debug, Serialize)]
struct RoundTrips {
    samples: usize,
    /// `contains` of an absent id: the store's cheapest request.
    store_contains: Summary,
    /// 64-byte ping-pong over a Unix socket pair between two threads.
    raw_socket: Summary,
    /// The same, both sides polling before blocking (as the store does).
    raw_socket_polling: Summary,
    /// Replies a small cycle waits for (create, get).
    replies_per_cycle: u32,
    /// 1 / (replies_per_cycle × polling median): the most any design that
    /// waits for that many replies could do on this machine.
    cycles_per_s_at_raw_floor: f64,
}

#[derive(Debug, Serialize)]
struct SmallLoop {
    path: &'static str,
    seconds: f64,
    cycles: u64,
    cycles_per_s: f64,
    cycle: Summary,
    /// Objects the clean-up evict removed; should equal the cycles run
    /// (warm-up included), or released objects were left pinned.
    evicted_after: u64,
}

#[derive(Debug, Serialize)]
struct BandwidthRow {
    size_bytes: u64,
    label: String,
    reps: usize,
    store_gbps: f64,
    memcpy_gbps: f64,
    /// Median over reps of (store bandwidth / memcpy bandwidth) within a rep.
    ratio: f64,
    ratio_min: f64,
    ratio_max: f64,
}

#[derive(Debug, Serialize)]
struct StoreAfter {
    /// The daemon's counters at the end: nothing should be left in use.
    stats: Stats,
    /// Deletes of released objects that the daemon deferred (expected 0).
    deferred_deletes: u64,
    /// Exit code after SIGTERM (expected 0; none if killed by a signal).
    daemon_exit_code: Option<i32>,
}

#[derive(Debug, Default, Serialize)]
struct Targets {
    large_write: Option<WriteTarget>,
    small_cycles: Option<CyclesTarget>,
}

#[derive(Debug, Serialize)]
struct WriteTarget {
    threshold: f64,
    /// Median of the per-size ratios.
    ratio: f64,
    per_size: Vec<SizeRatio>,
    pass: bool,
    line: String,
}

#[derive(Debug, Serialize)]
struct SizeRatio {
    label: String,
    ratio: f64,
}

#[derive(Debug, Serialize)]
struct CyclesTarget {
    threshold: f64,
    create_seal_cycles_per_s: f64,
    put_cycles_per_s: f64,
    pass: bool,
    line: String,
}

/// The machine, and the THP modes, which matter here: memcpy's heap
/// destination may get huge pages where the store's memfd arena (shmem) does
/// not, or the reverse.
#[derive(Debug, Serialize)]
struct MachineWithThp {
    #[serde(flatten)]
    host: Machine,
    thp_enabled: Option<String>,
    thp_shmem_enabled: Option<String>,
}

impl MachineWithThp {
    fn probe() -> MachineWithThp {
        MachineWithThp {
            host: Machine::probe(),
            thp_enabled: read_trimmed("/sys/kernel/mm/transparent_hugepage/enabled"),
            thp_shmem_enabled: read_trimmed("/sys/kernel/mm/transparent_hugepage/shmem_enabled"),
        }
    }
}

impl Report {
    fn judge(&self) -> Targets {
        let per_size: Vec<SizeRatio> = self.bandwidth.iter().map(|b| SizeRatio { label: b.label.clone(), ratio: b.ratio }).collect();
        let mut ratios: Vec<f64> = per_size.iter().map(|s| s.ratio).collect();
        let ratio = median(&mut ratios);
        let pass = ratio >= WRITE_TARGET;
        let detail = per_size.iter().map(|s| format!("{} {:.1}%", s.label, s.ratio * 100.0)).collect::<Vec<_>>().join(", ");
        let line = format!(
            "target: large writes >= {:.0}% of memcpy bandwidth: {} ({:.1}%) — median of {detail}",
            WRITE_TARGET * 100.0,
            pass_miss(pass),
            ratio * 100.0
        );
        let large_write = WriteTarget { threshold: WRITE_TARGET, ratio, per_size, pass, line };

        let explicit = self.small_ops.create_seal_get_release.cycles_per_s;
        let put = self.small_ops.put_get_release.cycles_per_s;
        let pass = explicit >= CYCLES_TARGET;
        let line = format!(
            "target: >= {} small create+seal+get+release cycles/s: {} ({}/s) — put+get+release path: {}/s",
            thousands(CYCLES_TARGET),
            pass_miss(pass),
            thousands(explicit),
            thousands(put)
        );
        let small_cycles = CyclesTarget { threshold: CYCLES_TARGET, create_seal_cycles_per_s: explicit, put_cycles_per_s: put, pass, line };
        Targets { large_write: Some(large_write), small_cycles: Some(small_cycles) }
    }

    fn markdown(&self) -> String {
        let mut md = String::new();
        let mut line = |s: String| {
            md.push_str(&s);
            md.push('\n');
        };
        let m = &self.machine;
        line(format!("# hprm-store benchmark, {} ({} run)", self.date, self.plan.mode));
        line(String::new());
        line(format!(
            "Machine: {}. THP: `{}`, shmem `{}`.",
            m.host,
            m.thp_enabled.as_deref().unwrap_or("?"),
            m.thp_shmem_enabled.as_deref().unwrap_or("?"),
        ));
        line(format!(
            "Store: one daemon started by the benchmark, arena {} memfd with `--populate`, one client; scheduling: {}; workspace {}. Started {}.",
            self.store.arena,
            self.store.scheduling,
            self.store.workspace_revision.as_deref().unwrap_or("(revision unknown)"),
            self.started_utc
        ));
        line(format!(
            "Units: KB = 10^3 bytes, MB = 10^6 bytes, GB/s = 10^9 bytes/s, times in µs. {} measured reps per size after {} warm-up reps; p99 by nearest rank{}.",
            self.plan.reps,
            self.plan.warmup_reps,
            if self.plan.reps < 100 { " (with this few reps, the slowest rep)" } else { "" }
        ));
        line(String::new());
        line("## Targets".into());
        line(String::new());
        line("```".into());
        for t in [self.targets.large_write.as_ref().map(|t| &t.line), self.targets.small_cycles.as_ref().map(|t| &t.line)].into_iter().flatten() {
            line(t.clone());
        }
        line("```".into());
        line(String::new());
        if self.targets.small_cycles.as_ref().is_some_and(|t| !t.pass) {
            let rt = &self.small_ops.round_trips;
            let c = &self.small_ops.create_seal_get_release;
            let waits = f64::from(rt.replies_per_cycle) * rt.store_contains.median_us;
            line(format!(
                "Why the cycle target is missed: a cycle waits for {} reply (the get), and a store round trip costs {} µs here against {} µs for a bare Unix socket polled the same way, so the wait takes {} µs of a {} µs median cycle; the rest is the two one-way sends (publish, release) and the client's own work. The median alone would meet the target; the mean cycle ({} µs) does not because of scheduling tails (p99 {} µs): on this 2-CPU machine client and daemon compete with everything else for the two CPUs unless they run at real-time priority, as a robot's data path does (compare the `--realtime` run, where the tails are gone).",
                rt.replies_per_cycle,
                fmt_us(rt.store_contains.median_us),
                fmt_us(rt.raw_socket_polling.median_us),
                fmt_us(waits),
                fmt_us(c.cycle.median_us),
                fmt_us(1e6 / c.cycles_per_s.max(1.0)),
                fmt_us(c.cycle.p99_us),
            ));
            line(String::new());
        }
        line("## (a) Latency by object size".into());
        line(String::new());
        line("create+write+seal: create, copy the bytes in from a heap buffer, seal (of which copy: the copy alone). get+read: get, then sum every u64 word of the object. memcpy and heap read: the same copy into, and the same sum over, a heap buffer (the baselines).".into());
        line(String::new());
        line("| size | create+write+seal median µs | p99 µs | of which copy µs | get+read median µs | p99 µs | memcpy median µs | heap read median µs |".into());
        line("|---:|---:|---:|---:|---:|---:|---:|---:|".into());
        for r in &self.latency {
            line(format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.label,
                fmt_us(r.create_write_seal.median_us),
                fmt_us(r.create_write_seal.p99_us),
                fmt_us(r.write_copy.median_us),
                fmt_us(r.get_read.median_us),
                fmt_us(r.get_read.p99_us),
                fmt_us(r.memcpy.median_us),
                fmt_us(r.heap_read.median_us)
            ));
        }
        line(String::new());
        line(format!("## (b) Small-object cycles, one client, {}-byte objects", self.small_ops.object_bytes));
        line(String::new());
        line("| path | cycles | seconds | cycles/s | cycle median µs | cycle p99 µs |".into());
        line("|---|---:|---:|---:|---:|---:|".into());
        for s in [&self.small_ops.create_seal_get_release, &self.small_ops.put_get_release] {
            line(format!(
                "| {} | {} | {:.2} | {} | {} | {} |",
                s.path,
                thousands(s.cycles as f64),
                s.seconds,
                thousands(s.cycles_per_s),
                fmt_us(s.cycle.median_us),
                fmt_us(s.cycle.p99_us)
            ));
        }
        line(String::new());
        let rt = &self.small_ops.round_trips;
        line(format!(
            "Round trips, for scale (median of {}): store `contains()` {} µs (p99 {}); bare Unix-socket ping-pong between two threads {} µs (p99 {}) blocking, {} µs (p99 {}) polling first as the store does. A cycle waits for {} reply (the get; a small create uses a block reserved in advance, one round trip per 32 objects, and seal and release are one-way), so even at the polling bare-socket round trip one client could do at most {} cycles/s.",
            thousands(rt.samples as f64),
            fmt_us(rt.store_contains.median_us),
            fmt_us(rt.store_contains.p99_us),
            fmt_us(rt.raw_socket.median_us),
            fmt_us(rt.raw_socket.p99_us),
            fmt_us(rt.raw_socket_polling.median_us),
            fmt_us(rt.raw_socket_polling.p99_us),
            rt.replies_per_cycle,
            thousands(rt.cycles_per_s_at_raw_floor)
        ));
        line(String::new());
        line("## (c) Large-write bandwidth, store vs memcpy".into());
        line(String::new());
        line("store: create + copy_from_slice into the object + seal; memcpy: the same copy into a pre-touched heap buffer; alternated rep by rep. Ratio: median over reps of store/memcpy bandwidth within the rep (min–max in brackets).".into());
        line(String::new());
        line("| size | store GB/s | memcpy GB/s | store/memcpy |".into());
        line("|---:|---:|---:|---:|".into());
        for b in &self.bandwidth {
            line(format!(
                "| {} | {:.2} | {:.2} | {:.1}% [{:.0}–{:.0}%] |",
                b.label,
                b.store_gbps,
                b.memcpy_gbps,
                b.ratio * 100.0,
                b.ratio_min * 100.0,
                b.ratio_max * 100.0
            ));
        }
        line(String::new());
        line("## Store after the run".into());
        line(String::new());
        let a = &self.store_after;
        line(format!(
            "{} objects sealed, {} being written, {} bytes in use; {} deferred deletes; {} evictions; daemon exit code after SIGTERM: {}.",
            a.stats.objects_sealed,
            a.stats.objects_created,
            a.stats.bytes_in_use,
            a.deferred_deletes,
            a.stats.evictions,
            a.daemon_exit_code.map_or("none (killed by a signal)".to_string(), |c| c.to_string())
        ));
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_sums() {
        assert_eq!(sum_words(&[1, 0, 0, 0, 0, 0, 0, 0, 2]), u64::from_ne_bytes([1, 0, 0, 0, 0, 0, 0, 0]) + 2);
    }
}
