//! The markdown report: the tables and the targets' verdicts that
//! `node-bench` prints and writes to `node-DATE.md`.

use hprm_bench::report::{fmt_us, thousands};
use hprm_bench::summary::Counted;

use crate::cli::{Coord, Transport, Variant, COORDS};
use crate::results::{FloorRow, Report};
use crate::rti_round_trip::REFERENCE_PAYLOAD;

impl Report {
    pub(crate) fn markdown(&self) -> String {
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
            "Setup: every program launched by `hprm_node::launch::Launch` (its own hprm-store{}, its own hprm-rti, one \
             process per federate), fast mode; decentralized STP {} ms; Rust federates. Floors run in the same \
             invocation, next to the hprm runs of the same size: socket ping-pong between two processes (TCP_NODELAY; \
             blocking reads, and polling ones), a framed stream for the rate, memcpy between pre-touched heap buffers. \
             Beside them, the RTI round trip: a one-federate federation on its own hprm-rti, whose federate sends \
             itself each size through the RTI and waits for it.",
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
        let first = |l: &Option<String>| {
            l.as_deref().and_then(|l| l.split_whitespace().next()).and_then(|v| v.parse::<f64>().ok())
        };
        let busiest = first(&m.loadavg_start).into_iter().chain(first(&m.loadavg_end)).fold(0.0, f64::max);
        let cpus = m.host.nproc.unwrap_or(1) as f64;
        if busiest >= cpus {
            line(format!(
                "- The machine was busy during this run (1-minute load average up to {busiest:.1} on {cpus:.0} CPUs): \
                 paths that poll (hprm-node's scheduler, the polling floors) lose their CPU whenever another process \
                 wants it, and their figures suffer most."
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
                "ping sends a value holding a `Buffer` of the size, pong echoes it, the echo starts the next round a \
                 microstep later. Buffers of {} bytes and more go through the store (64 KiB here), smaller ones in the \
                 message. Floors: the same sizes echoed between two processes, one write per message; *blocking* reads \
                 as hprm-node's socket readers do, or *polling* (non-blocking reads for up to {} µs first, on both \
                 ends, as hprm-node's scheduler polls its inbox). *RTI round trip*: a one-federate federation on its \
                 own hprm-rti (its defaults), whose federate sends itself a TAGGED_MESSAGE with a payload of the size \
                 ({} bytes from {} bytes on: what the RTI relays when the buffer goes through the store) through the \
                 RTI and waits for it to come back, reading *blocking*, or *polling* as hprm-node's scheduler does \
                 (non-blocking reads for up to {} µs, yielding the CPU between them); its by-pass column gives \
                 round-trip p50s. Paths: *decentralized* peers over loopback TCP (as across hosts), \
                 *decentralized-unix* peers over Unix domain sockets (hprm-node's default on one host), *centralized* \
                 through the RTI over TCP, *centralized-unix* through the RTI over its Unix socket (the default on the \
                 RTI's host). Ratios: hprm one-way p50 / the one-way p50 of the floor of the same transport (TCP, or \
                 Unix sockets for the -unix paths).",
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
                for (t, polling) in
                    [(Transport::Tcp, false), (Transport::Uds, false), (Transport::Tcp, true), (Transport::Uds, true)]
                {
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
                for (t, polling) in
                    [(Transport::Tcp, false), (Transport::Uds, false), (Transport::Tcp, true), (Transport::Uds, true)]
                {
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
                            let ratio = |f: Option<&FloorRow>| {
                                f.map_or(String::new(), |f| format!("{:.2}x", o.median_us / f.one_way.median_us))
                            };
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
                "{} passes, samples pooled: each pass runs every size's floors and hprm runs back to back, so \
                 background load hits both alike. The per-pass medians show how bimodal this machine is: a blocking \
                 wake-up of an idle virtual CPU costs about 25 µs more than one of a busy CPU, and pollers lose their \
                 CPU when something else (a build) wants it; hprm-node's scheduler polls its inbox, which keeps its CPU \
                 out of the idle state. Tardy messages in these runs: {tardy} (expected 0: every message's tag is later \
                 than its receiver's current tag).",
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
            line(
                "hprm: the source sets its output and reschedules itself one microstep later, as fast as the runtime \
                  allows; rate at the sink, first to last measured message. Floors: the same number of framed writes, \
                  one per message."
                    .into(),
            );
            line(String::new());
            line("| path | messages | seconds | messages/s | tardy |".into());
            line("|---|---:|---:|---:|---:|".into());
            for r in &self.rate {
                let tardy = if r.path.starts_with("hprm") { r.tardy.to_string() } else { String::new() };
                match &r.error {
                    None => line(format!(
                        "| {} | {} | {:.3} | {} | {tardy} |",
                        r.path,
                        thousands(r.messages as f64),
                        r.seconds,
                        thousands(r.msgs_per_s)
                    )),
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
            line(
                "The source loans a uint8 buffer from the store, fills it, stamps and sends it to every receiver (one \
                  store object, 4 deliveries); each receiver replies, *echo*: the buffer it got, sent on as it is (by \
                  reference or copied, as the runtime does it), *fresh*: a new buffer it loans and fills. Latency: \
                  source's send to the last reply processed, by the source's clock. memcpy: one copy of the size \
                  between pre-touched heap buffers, measured just before that size's runs."
                    .into(),
            );
            line(String::new());
            line("| size | memcpy p50 | echo decentralized p50 (p99) | echo centralized p50 (p99) | fresh decentralized p50 (p99) | fresh centralized p50 (p99) |".into());
            line("|---:|---:|---:|---:|---:|---:|".into());
            for mrow in &self.floors.memcpy {
                let cell = |v: Variant, c: Coord| {
                    self.broadcast.iter().find(|r| r.size == mrow.size && r.variant == v && r.coordination == c).map_or(
                        String::new(),
                        |r| match (&r.latency, r.ratio_to_memcpy) {
                            (Some(l), Some(x)) => format!("{} ({}) = {x:.1}x", fmt_us(l.median_us), fmt_us(l.p99_us)),
                            _ => "failed".into(),
                        },
                    )
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
            line("Where the time goes (p50 µs after the source's send): receivers' reactions start (all four pooled), \
                  their replies are set (echo: at once; fresh: after loaning and filling), the first reply and the last \
                  are processed by the source.".into());
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
            let tardy: u64 =
                self.broadcast.iter().filter(|r| r.coordination == Coord::Decentralized).map(|r| r.tardy).sum();
            let rounds: u64 =
                self.broadcast.iter().filter(|r| r.coordination == Coord::Decentralized && r.error.is_none()).count()
                    as u64
                    * (self.plan.broadcast_rounds + self.plan.broadcast_warmup);
            line(format!(
                "Decentralized runs: {tardy} replies processed tardy in {rounds} rounds. In fast mode every tag of the \
                 round chain has the start time, so after the first tag physical time is past tag + STP and the source \
                 processes each reply as it arrives rather than waiting for all four at one tag; it counts replies \
                 across tags."
            ));
            line(String::new());
        }
        let failed: Vec<String> = self
            .small
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("small {} {}: {e}", r.label, r.coordination.label())))
            .chain(self.rate.iter().filter_map(|r| r.error.as_ref().map(|e| format!("rate {}: {e}", r.path))))
            .chain(self.broadcast.iter().filter_map(|r| {
                r.error
                    .as_ref()
                    .map(|e| format!("broadcast {} {} {}: {e}", r.label, r.variant.label(), r.coordination.label()))
            }))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_ranges_skip_failed_passes() {
        assert_eq!(pass_range(&[3.0, f64::NAN, 1.5]), "1.50–3.00");
    }
}
