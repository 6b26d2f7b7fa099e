//! `store-bench --spill-dir DIR`: what a send costs when the store spills
//! it to its file-backed overflow arena (`hprm-store --spill-dir`), beside
//! the same send into the shared-memory arena.
//!
//! Two daemons run side by side: one whose arena takes every object (the
//! usual case), and one run with `--spill-dir DIR` whose arena this program
//! holds full with one object, so that every create lands in the spill
//! file (checked: a send that did not spill is an error). For each size,
//! rep by rep and alternating between the two, so that machine noise hits
//! both alike, one client of each:
//!
//! - **send**: `create` + copying the bytes in from a heap buffer + `seal`;
//! - **read**: `get` (a second reference) + summing every u64 word;
//! - **free**: dropping both references + `delete`; a spilled object's
//!   block is then kept warm for the next spilled object, or (past the
//!   daemon's warm reserve) punched out of the file by its punch thread,
//!   after the reply.
//!
//! Then bursts: [`BURST`] sends in a row, each held (as a receiver that
//! has not caught up pins them), then all freed, round after round,
//! alternating the stores round by round; each send of a burst is timed.
//! Bursts larger than the daemon's warm reserve of freed spill blocks (an
//! eighth of the file) show what lies past it.
//!
//! Meanwhile a second client of each store sends a small request
//! (`contains`) every [`PROBE_EVERY`] and times it: what another client
//! waits while the first one's objects are sent and freed (a spilled
//! object's free held the table's lock for its punch, before issue 23).
//!
//! The load average is recorded before and after: other work on the
//! machine shows in the figures. Both arenas are pre-faulted
//! (`--populate`); the spill file cannot be (its pages are the page
//! cache's), so a spilled send onto a fresh or punched block allocates its
//! pages, and one onto a warm block (freed and kept) finds them there.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use hprm_bench::date::{utc_date, utc_timestamp};
use hprm_bench::machine::{read_trimmed, workspace_revision, Machine};
use hprm_bench::report::{fmt_us, write_files};
use hprm_bench::summary::Summary;
use hprm_store::space::spill_base;
use hprm_store::{ObjectId, StoreClient};
use serde::Serialize;

use crate::daemon::Daemon;
use crate::{Plan, GET_TIMEOUT, STARTUP_TIMEOUT};

/// Object sizes compared (decimal units, as the other tables).
const SIZES: [u64; 2] = [1_000_000, 10_000_000];
/// The shared-memory store's arena: room for every size many times over.
const SHM_ARENA: &str = "256M";
/// The spilling store's arena, held full by one object of all but
/// [`ARENA_LEFT`] bytes of it.
const SPILL_ARENA: &str = "32M";
const SPILL_ARENA_BYTES: u64 = 32 << 20;
const ARENA_LEFT: u64 = 64 << 10;
/// How often the probe client sends its small request.
const PROBE_EVERY: Duration = Duration::from_micros(200);
/// The spill file: room for a burst of the largest size, in 2 MiB granules.
const SPILL_SIZE: &str = "256M";
/// Sends held at once in a burst.
const BURST: usize = 8;
/// The daemon's default warm reserve for a [`SPILL_SIZE`] file: an eighth
/// of it (hprm-store's `spill_blocks::warm_budget`), stated in the report.
const DEFAULT_WARM: &str = "32 MiB";

#[derive(Debug, Serialize)]
struct Row {
    size: u64,
    backing: &'static str,
    send: Summary,
    read: Summary,
    free: Summary,
    /// Bytes per second of the median send, in GB/s (10^9).
    send_gb_s: f64,
}

/// Sends within bursts of [`BURST`], of one size into one store.
#[derive(Debug, Serialize)]
struct BurstRow {
    size: u64,
    backing: &'static str,
    rounds: usize,
    send: Summary,
}

#[derive(Debug, Serialize)]
struct SpillReport {
    schema: u32,
    date: String,
    started_utc: String,
    reps: usize,
    warmup_reps: usize,
    machine: Machine,
    /// /proc/loadavg before and after the run.
    loadavg_before: Option<String>,
    loadavg_after: Option<String>,
    workspace_revision: Option<String>,
    spill_dir: String,
    /// The spilling store's `--spill-warm`, if given.
    spill_warm: Option<String>,
    /// The spilling store's counters after the run.
    objects_spilled: u64,
    spill_disk_bytes_after: u64,
    rows: Vec<Row>,
    bursts: Vec<BurstRow>,
    /// The probe client's `contains`, timed over the whole run, per store.
    probe_shm: Summary,
    probe_spill: Summary,
    /// The spilling store's probes that started while the other client
    /// freed a spilled object (release + delete), and how many.
    probe_spill_during_frees: Summary,
    probes_during_frees: usize,
}

/// When each measured free began and ended.
type Spans = Vec<(Instant, Instant)>;

/// Times `client.contains` every [`PROBE_EVERY`] until `stop`: when each
/// started, and how long it took.
fn probe(client: &StoreClient, stop: &AtomicBool) -> Result<Vec<(Instant, Duration)>> {
    let id = ObjectId::random();
    let mut times = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        client.contains(id).context("the probe's contains")?;
        times.push((t0, t0.elapsed()));
        std::thread::sleep(PROBE_EVERY);
    }
    Ok(times)
}

/// One client's connection to a store, and its timings of one size.
struct Side<'a> {
    client: &'a StoreClient,
    backing: &'static str,
    send: Vec<Duration>,
    read: Vec<Duration>,
    free: Vec<Duration>,
    free_spans: Spans,
}

impl Side<'_> {
    /// One send, read and free of `src`; the times are kept unless `warmup`.
    fn rep(&mut self, src: &[u8], warmup: bool) -> Result<u64> {
        let id = ObjectId::random();
        let t0 = Instant::now();
        let mut obj = self.client.create(id, src.len() as u64, b"").context("create")?;
        obj.data_mut().copy_from_slice(src);
        let sent = obj.seal_and_keep().context("seal")?;
        let t1 = Instant::now();
        let got = self.client.get_one(id, GET_TIMEOUT).context("get")?;
        let sum = got
            .data()
            .chunks_exact(8)
            .fold(0u64, |a, w| a.wrapping_add(u64::from_le_bytes(w.try_into().expect("chunks of 8"))));
        let t2 = Instant::now();
        let offset = sent.placement().data_offset;
        drop(got);
        drop(sent);
        self.client.delete(id).context("delete")?;
        let t3 = Instant::now();
        if !warmup {
            self.send.push(t1 - t0);
            self.read.push(t2 - t1);
            self.free.push(t3 - t2);
            self.free_spans.push((t2, t3));
        }
        std::hint::black_box(sum);
        Ok(offset)
    }

    fn row(&mut self, size: u64) -> Row {
        let send = Summary::of(&self.send);
        let row = Row {
            size,
            backing: self.backing,
            send,
            read: Summary::of(&self.read),
            free: Summary::of(&self.free),
            send_gb_s: size as f64 / (send.median_us * 1e3),
        };
        self.send.clear();
        self.read.clear();
        self.free.clear();
        row
    }
}

pub(crate) fn run(store_bin: &Path, dir: &Path, spill_warm: Option<&str>, plan: Plan, out: &Path) -> Result<()> {
    let started = SystemTime::now();
    let loadavg_before = read_trimmed("/proc/loadavg");
    eprintln!("store-bench: spill vs shared memory, {} reps + {} warm-up per size", plan.reps, plan.warmup_reps);
    let mut shm_daemon = Daemon::start(store_bin, SHM_ARENA, &[])?;
    let mut spill_args =
        vec!["--spill-dir".to_string(), dir.display().to_string(), "--spill-size".into(), SPILL_SIZE.into()];
    if let Some(warm) = spill_warm {
        spill_args.extend(["--spill-warm".to_string(), warm.to_string()]);
    }
    let mut spill_daemon = Daemon::start(store_bin, SPILL_ARENA, &spill_args)?;
    let shm = shm_daemon.connect(STARTUP_TIMEOUT)?;
    let spill = spill_daemon.connect(STARTUP_TIMEOUT)?;

    // Hold the spilling store's arena full for the whole run.
    let mut filler = spill.create(ObjectId::random(), SPILL_ARENA_BYTES - ARENA_LEFT, b"").context("fill the arena")?;
    filler.data_mut().fill(1);
    let _filler = filler.seal_and_keep().context("seal the filler")?;
    let base = spill_base(spill.arena_size());

    let shm_probe = shm_daemon.connect(STARTUP_TIMEOUT)?;
    let spill_probe = spill_daemon.connect(STARTUP_TIMEOUT)?;
    let stop = AtomicBool::new(false);
    let (rows, probe_shm, probe_spill) = std::thread::scope(|scope| -> Result<_> {
        let shm_times = scope.spawn(|| probe(&shm_probe, &stop));
        let spill_times = scope.spawn(|| probe(&spill_probe, &stop));
        let rows = measure(&shm, &spill, base, plan);
        let bursts = if rows.is_ok() { measure_bursts(&shm, &spill, base, plan) } else { Ok(vec![]) };
        let rows = rows.and_then(|r| Ok((r, bursts?)));
        stop.store(true, Ordering::Relaxed);
        let joined = |h: std::thread::ScopedJoinHandle<'_, Result<Vec<(Instant, Duration)>>>| {
            h.join().map_err(|_| anyhow::anyhow!("a probe thread panicked"))?
        };
        let (shm_s, spill_s) = (joined(shm_times)?, joined(spill_times)?);
        Ok((rows?, shm_s, spill_s))
    })?;
    let ((rows, free_spans), bursts) = rows;
    // Spans are in order and disjoint (one client, one rep at a time).
    let during: Vec<Duration> = probe_spill
        .iter()
        .filter(|(start, _)| {
            let i = free_spans.partition_point(|(_, end)| end < start);
            free_spans.get(i).is_some_and(|(begin, _)| begin <= start)
        })
        .map(|&(_, d)| d)
        .collect();
    let summary = |p: &[(Instant, Duration)]| Summary::of(&p.iter().map(|&(_, d)| d).collect::<Vec<_>>());
    let (probe_shm, probe_spill) = (summary(&probe_shm), summary(&probe_spill));
    let stats = spill.stats().context("the spilling store's counters")?;
    let loadavg_after = read_trimmed("/proc/loadavg");

    let report = SpillReport {
        schema: 1,
        date: utc_date(started),
        started_utc: utc_timestamp(started),
        reps: plan.reps,
        warmup_reps: plan.warmup_reps,
        machine: Machine::probe(),
        loadavg_before,
        loadavg_after,
        workspace_revision: workspace_revision(),
        spill_dir: dir.display().to_string(),
        spill_warm: spill_warm.map(str::to_owned),
        objects_spilled: stats.objects_spilled,
        spill_disk_bytes_after: stats.spill_disk_bytes,
        rows,
        bursts,
        probe_shm,
        probe_spill,
        probe_spill_during_frees: Summary::of(&during),
        probes_during_frees: during.len(),
    };
    let markdown = markdown(&report);
    let (md, json) = write_files(out, &format!("store-spill-{}", report.date), &markdown, &report)?;
    print!("{markdown}");
    eprintln!("store-bench: wrote {} and {}", md.display(), json.display());
    Ok(())
}

/// The send, read and free of every size, rep by rep alternating the stores.
/// Also when the spilling store's measured frees began and ended.
fn measure(shm: &StoreClient, spill: &StoreClient, base: u64, plan: Plan) -> Result<(Vec<Row>, Spans)> {
    let mut free_spans = Vec::new();
    let mut rows = Vec::new();
    for size in SIZES {
        let src: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        let mut a = Side {
            client: shm,
            backing: "shared-memory arena",
            send: vec![],
            read: vec![],
            free: vec![],
            free_spans: vec![],
        };
        let mut b =
            Side { client: spill, backing: "spill file", send: vec![], read: vec![], free: vec![], free_spans: vec![] };
        for rep in 0..plan.warmup_reps + plan.reps {
            let warmup = rep < plan.warmup_reps;
            let in_arena = a.rep(&src, warmup)?;
            let spilled = b.rep(&src, warmup)?;
            if spilled < base || in_arena >= spill_base(shm.arena_size()) {
                bail!("a send landed in the wrong backing (spill store: offset {spilled}, spill from {base}; shm store: offset {in_arena})");
            }
        }
        rows.push(a.row(size));
        free_spans.append(&mut b.free_spans);
        rows.push(b.row(size));
        eprintln!("  {} MB done", size / 1_000_000);
    }
    Ok((rows, free_spans))
}

/// Sends of every size in bursts of [`BURST`] held at once, then freed;
/// `plan.reps / 10` rounds (after one warm-up round), alternating the
/// stores round by round.
fn measure_bursts(shm: &StoreClient, spill: &StoreClient, base: u64, plan: Plan) -> Result<Vec<BurstRow>> {
    let rounds = (plan.reps / 10).max(2);
    let mut rows = Vec::new();
    for size in SIZES {
        let src: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        let mut times: [Vec<Duration>; 2] = [vec![], vec![]];
        for round in 0..=rounds {
            for (k, client) in [shm, spill].into_iter().enumerate() {
                let mut held = Vec::with_capacity(BURST);
                for _ in 0..BURST {
                    let id = ObjectId::random();
                    let t0 = Instant::now();
                    let mut obj = client.create(id, size, b"").context("create in a burst")?;
                    obj.data_mut().copy_from_slice(&src);
                    let sent = obj.seal_and_keep().context("seal in a burst")?;
                    let took = t0.elapsed();
                    let offset = sent.placement().data_offset;
                    let wrong = if k == 1 { offset < base } else { offset >= spill_base(shm.arena_size()) };
                    if wrong {
                        bail!("a burst's send landed in the wrong backing: {:?}", sent.placement());
                    }
                    if round > 0 {
                        times[k].push(took);
                    }
                    held.push((id, sent));
                }
                for (id, sent) in held {
                    drop(sent);
                    client.delete(id).context("delete after a burst")?;
                }
            }
        }
        for (k, backing) in ["shared-memory arena", "spill file"].into_iter().enumerate() {
            rows.push(BurstRow { size, backing, rounds, send: Summary::of(&times[k]) });
        }
        eprintln!("  {} MB bursts done", size / 1_000_000);
    }
    Ok(rows)
}

fn markdown(r: &SpillReport) -> String {
    let mut s = format!(
        "# store-bench --spill-dir, {}\n\nMachine: {}. Load average before: {}; after: {}.\n\
         Revision {}. Spill dir: `{}`. {} reps per size and backing ({} warm-up), alternated rep by rep.\n\
         The spilling store placed {} objects in its file; its file took {} bytes of disk after the run.\n\n\
         Times in µs, median (p99). send = create + copy in + seal; read = get + sum of every word; \
         free = release + delete (for the spill file, its block then kept warm or punched, after the reply, off the table's lock).\n\n\
         | size | backing | send | read | free | send GB/s |\n|---|---|---|---|---|---|\n",
        r.started_utc,
        r.machine,
        r.loadavg_before.as_deref().unwrap_or("?"),
        r.loadavg_after.as_deref().unwrap_or("?"),
        r.workspace_revision.as_deref().unwrap_or("?"),
        r.spill_dir,
        r.reps,
        r.warmup_reps,
        r.objects_spilled,
        r.spill_disk_bytes_after,
    );
    for row in &r.rows {
        let cell = |x: &Summary| format!("{} ({})", fmt_us(x.median_us), fmt_us(x.p99_us));
        s.push_str(&format!(
            "| {} MB | {} | {} | {} | {} | {:.2} |\n",
            row.size / 1_000_000,
            row.backing,
            cell(&row.send),
            cell(&row.read),
            cell(&row.free),
            row.send_gb_s
        ));
    }
    s.push_str(&format!(
        "\nBursts: {BURST} sends in a row, each held, then all freed; per send, µs, median (p99); \
         the spilling store keeps up to {} of freed blocks warm (`--spill-warm`).\n\n\
         | size | backing | rounds | send |\n|---|---|---|---|\n",
        r.spill_warm.as_deref().unwrap_or(DEFAULT_WARM)
    ));
    for b in &r.bursts {
        s.push_str(&format!(
            "| {} MB | {} | {} | {} ({}) |\n",
            b.size / 1_000_000,
            b.backing,
            b.rounds,
            fmt_us(b.send.median_us),
            fmt_us(b.send.p99_us)
        ));
    }
    let probe = |x: &Summary| format!("{} ({}; max {})", fmt_us(x.median_us), fmt_us(x.p99_us), fmt_us(x.max_us));
    s.push_str(&format!(
        "\nAnother client's small request (`contains`, every {} µs through the run), µs, median (p99; max): \
         shared-memory store {}; spilling store {}; spilling store, the {} that started while the other client \
         freed a spilled object, {}.\n",
        PROBE_EVERY.as_micros(),
        probe(&r.probe_shm),
        probe(&r.probe_spill),
        r.probes_during_frees,
        probe(&r.probe_spill_during_frees)
    ));
    s
}
