//! The coordinator, what `node-bench` does without a subcommand: it runs
//! each workload's sweep (floors beside hprm, size by size), gathers the
//! rows into a [`Report`] and writes the report's files.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use hprm_bench::date::{utc_date, utc_timestamp};
use hprm_bench::machine::workspace_revision;
use hprm_bench::report::{fmt_us, size_label, thousands, write_files};
use hprm_bench::summary::{dec4, Counted};
use hprm_node::launch::find_binary;

use crate::cli::{Cli, Coord, Plan, Transport, Variant, Workload, COORDS};
use crate::compare::{bin_dir, Daemons};
use crate::floors::{floor_ping_pong, floor_stream, memcpy_floor, Pooled, FLOOR_POLL};
use crate::results::{
    loadavg, BroadcastRow, FloorRow, Floors, MachineWithLoad, MemcpyRow, RateRow, Report, RtiRow, Setup, SmallRow,
    Units,
};
use crate::rti_round_trip::{rti_round_trip, RTI_KINDS};
use crate::{RATE_SIZE, RECEIVERS, STP};

pub(crate) struct Coordinator {
    pub(crate) exe: PathBuf,
    pub(crate) plan: Plan,
    /// `HPRM_BIN_DIR` for the launches: a directory whose `hprm-store`
    /// adds `--populate`, or runs some build as it is (see `bin_dir`); or
    /// none.
    pub(crate) bin_dir: Option<tempfile::TempDir>,
    pub(crate) keep_runs: bool,
}

impl Coordinator {
    /// The small-message sweep, `small_passes` times: per size, the four
    /// floors then hprm decentralized and centralized; samples pooled.
    fn small(&self, floors: &mut Floors) -> Vec<SmallRow> {
        let p = &self.plan;
        let kinds = [
            (Transport::Tcp, Duration::ZERO),
            (Transport::Uds, Duration::ZERO),
            (Transport::Tcp, FLOOR_POLL),
            (Transport::Uds, FLOOR_POLL),
        ];
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
                        pooled.add(
                            l.series("pong", "one_way")?,
                            l.series("ping", "one_way_back")?,
                            l.series("ping", "rtt")?,
                            l.tardy(),
                        );
                        Ok(())
                    });
                    match result {
                        Ok(()) => {
                            let (one_way, rtt) = (
                                pooled.last_median(),
                                Counted::of_ns(&pooled.rtt[pooled.rtt.len().saturating_sub(p.small_rounds as usize)..]),
                            );
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
            floors.rti_round_trip.push(RtiRow {
                transport,
                polling: !poll.is_zero(),
                size,
                label: size_label(size),
                rtt: Counted::of_ns(&pooled.rtt),
                pass_medians_us: pooled.pass_medians,
            });
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
                    eprintln!(
                        "  {:<27} {} messages/s; {:.1} s",
                        row.path,
                        thousands(row.msgs_per_s),
                        t.elapsed().as_secs_f64()
                    );
                    rows.push(row);
                }
                Err(e) => {
                    eprintln!("  {path} FAILED: {e:#}");
                    rows.push(RateRow {
                        path,
                        messages: 0,
                        seconds: f64::NAN,
                        msgs_per_s: f64::NAN,
                        tardy: 0,
                        error: Some(format!("{e:#}")),
                    });
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
            eprintln!(
                "  {:>9} memcpy floor: {} µs (p99 {})",
                size_label(size),
                fmt_us(memcpy.median_us),
                fmt_us(memcpy.p99_us)
            );
            floors.memcpy.push(MemcpyRow { size, label: size_label(size), memcpy });
            for variant in [Variant::Echo, Variant::Fresh] {
                for coord in [Coord::Decentralized, Coord::Centralized] {
                    let spec =
                        self.spec(Workload::Broadcast, coord, size, p.broadcast_rounds, p.broadcast_warmup, variant);
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
                        Ok((
                            Counted::of_ns(l.series("source", "latency")?),
                            Counted::of_ns(&received),
                            Counted::of_ns(&replied),
                            first,
                            l.tardy(),
                        ))
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
                            eprintln!(
                                "  {:>9} {:<5} {:<13} hprm FAILED: {e:#}",
                                size_label(size),
                                variant.label(),
                                coord.label()
                            );
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

pub(crate) fn coordinator(cli: &Cli) -> Result<()> {
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
    let only: Vec<Workload> =
        if cli.only.is_empty() { vec![Workload::Small, Workload::Rate, Workload::Broadcast] } else { cli.only.clone() };
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
                eprintln!(
                    "sustained rate: {} messages of {RATE_SIZE} B after {} warm-up",
                    thousands(plan.rate_messages as f64),
                    plan.rate_warmup
                );
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
