//! The targets: each workload's figures judged against the goals (one-way
//! latency against the socket floors, the centralized extra against the RTI
//! round trip, broadcast against memcpy), pass by pass.

use hprm_bench::report::{fmt_us, pass_miss, size_label, thousands};
use hprm_bench::summary::median;

use crate::cli::{Coord, Transport, Variant};
use crate::results::{BroadcastRow, FloorRow, Report, RtiRow, SmallRow, Target};
use crate::{BROADCAST_TARGET, BROADCAST_TARGET_SIZE, ONE_WAY_TARGET};

impl Report {
    pub(crate) fn small_row(&self, size: usize, coord: Coord) -> Option<&SmallRow> {
        self.small.iter().find(|r| r.size == size && r.coordination == coord)
    }

    pub(crate) fn rti_round_trip(&self, t: Transport, polling: bool, size: usize) -> Option<&RtiRow> {
        self.floors.rti_round_trip.iter().find(|r| r.transport == t && r.polling == polling && r.size == size)
    }

    pub(crate) fn floor(&self, t: Transport, polling: bool, size: usize) -> Option<&FloorRow> {
        self.floors.ping_pong.iter().find(|r| r.transport == t && r.polling == polling && r.size == size)
    }

    pub(crate) fn judge(&self) -> Vec<Target> {
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
            let detail =
                ratios.iter().map(|v| format!("{} {:.2}x", size_label(v.size), v.ratio)).collect::<Vec<_>>().join(", ");
            let best =
                ratios.iter().map(|v| format!("{} {:.2}x", size_label(v.size), v.best)).collect::<Vec<_>>().join(", ");
            let mut why = Vec::new();
            let (big, small): (Vec<&Versus>, Vec<&Versus>) =
                ratios.iter().filter(|v| v.ratio > ONE_WAY_TARGET).partition(|v| v.size >= threshold);
            if !big.is_empty() {
                why.push(format!(
                    "at {} the buffer is at or over the {}-byte out-of-band threshold, so it goes through the store: \
                     the sender copies it into a block reserved in advance and publishes it with a one-way message, the \
                     receiver maps it from its descriptor and claims it with another; no round trip waits, but each \
                     one-way message wakes the store daemon, a process the socket floor does not have, and the copy is \
                     the floor's twice over ({})",
                    big.iter().map(|v| size_label(v.size)).collect::<Vec<_>>().join(", "),
                    thousands(threshold as f64),
                    big.iter().map(|v| format!("{} µs against {} µs", fmt_us(v.node), fmt_us(v.floor))).collect::<Vec<_>>().join(", ")
                ));
            }
            if !small.is_empty() {
                why.push(format!(
                    "at {} (in-band) the socket costs what the floor's does (the receiving scheduler reads it itself \
                     while it polls, for {} µs after its last work; a reader thread woken as the floor's is when it \
                     sleeps); the rest is the runtime's own work per message on both sides: encoding and decoding the \
                     value, the event queue, the reaction{}",
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
            (
                Coord::Centralized,
                Coord::Decentralized,
                ["centralized", "centralized_polling", "centralized_floor"],
                "TCP",
            ),
            (
                Coord::CentralizedUnix,
                Coord::DecentralizedUnix,
                ["centralized_unix", "centralized_unix_polling", "centralized_unix_floor"],
                "Unix sockets",
            ),
        ];
        for (central, peer, names, what) in judged {
            let t = central.transport();
            let extra: Vec<Extra> = sizes
                .iter()
                .filter_map(|&s| {
                    let (cen, dec) = (self.small_row(s, central)?, self.small_row(s, peer)?);
                    let floor = self.floor(t, false, s);
                    let rti = |polling| {
                        self.rti_round_trip(t, polling, s).map(|r| (r.rtt.median_us, r.pass_medians_us.clone()))
                    };
                    Some(Extra {
                        size: s,
                        extra: cen.one_way?.median_us - dec.one_way?.median_us,
                        extra_passes: cen
                            .pass_medians_us
                            .iter()
                            .zip(&dec.pass_medians_us)
                            .map(|(c, d)| c - d)
                            .collect(),
                        floor_one_way: floor.map(|f| f.one_way.median_us),
                        yardsticks: [
                            rti(false),
                            rti(true),
                            floor.map(|f| (f.rtt.median_us, f.rtt_pass_medians_us.clone())),
                        ],
                    })
                })
                .collect();
            for (k, (yardstick, name)) in
                [Yardstick::Rti, Yardstick::RtiPolling, Yardstick::Floor].into_iter().zip(names).enumerate()
            {
                let head = match yardstick {
                    Yardstick::Rti => format!(
                        "centralized one-way p50 at most one RTI round trip over decentralized ({what}: a message \
                         through hprm-rti and back, measured in this run with blocking reads, same size)"
                    ),
                    Yardstick::RtiPolling => format!(
                        "centralized one-way p50 at most one RTI round trip over decentralized ({what}: the same round \
                         trip read by polling, as a federate's scheduler waits; for reference)"
                    ),
                    Yardstick::Floor => format!(
                        "centralized one-way p50 at most one raw socket round trip over decentralized ({what}: the \
                         blocking floor's round trip, no RTI process in it; for reference)"
                    ),
                };
                // Judged within each pass, as the decentralized target is:
                // the machine's slow and fast spells then hit both sides.
                let measured: Vec<(&Extra, f64, f64)> = extra
                    .iter()
                    .filter_map(|e| {
                        e.yardsticks[k].as_ref().map(|(p50, passes)| (e, *p50, paired_ratio(&e.extra_passes, passes)))
                    })
                    .collect();
                if measured.is_empty() {
                    targets.push(Target { name, pass: None, line: format!("target: {head}: not measured"), why: None });
                    continue;
                }
                let pass = measured.iter().all(|&(_, _, ratio)| ratio <= 1.0);
                let detail = measured
                    .iter()
                    .map(|&(e, rt, ratio)| {
                        format!("{} {} µs vs {} µs ({ratio:.2}x)", size_label(e.size), sign(e.extra), fmt_us(rt))
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let missed = measured
                    .iter()
                    .filter(|&&(_, _, ratio)| ratio > 1.0)
                    .map(|(e, _, _)| size_label(e.size))
                    .collect::<Vec<_>>()
                    .join(", ");
                let why = match yardstick {
                    Yardstick::Rti | Yardstick::RtiPolling => format!(
                        "at {missed} a centralized message took longer over the RTI than a message to the RTI and back. \
                         It makes the same two hops (sender -> RTI -> receiver); its message, LTC and NET leave in one \
                         write, and the RTI forwards it with the grant of its tag in one write, so no round trip waits. \
                         But the RTI then handles the LTC and NET too, and it shares two CPUs with two polling \
                         federates, where the round trip's RTI has one client and a CPU to itself."
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
                            "a centralized message is relayed by the RTI (sender -> RTI -> receiver: one socket hop \
                             more than peer to peer), and the RTI is a process of its own on the same two CPUs as the \
                             two federates: it polls its connections for a while after each message (no wake-up while \
                             the exchange goes on), but shares a CPU with a polling federate{}. The floor's round trip \
                             has no such process in it. One more hop at the floor's one-way cost would be {model}.",
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
                line: format!(
                    "target: {} broadcast+gather within {BROADCAST_TARGET}x of one memcpy: not measured",
                    size_label(BROADCAST_TARGET_SIZE)
                ),
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
                let (Some(l), Some(rc), Some(rp), Some(f)) = (&r.latency, &r.received, &r.replied, &r.first_reply)
                else {
                    continue;
                };
                let work = match r.variant {
                    // Whether a sent-on buffer is copied is the runtime's
                    // choice (it has changed): let the figures say it.
                    Variant::Echo => format!(
                        "each of the {} receivers sends back the buffer it got; {} passed between the replies being set and the last reaching the source, {}",
                        self.setup.receivers,
                        fmt_us(l.median_us - rp.median_us),
                        if l.median_us - rp.median_us > r.memcpy_us {
                            "more than one memcpy of the buffer: the buffers are copied on the way back"
                        } else {
                            "less than one memcpy of the buffer: they travel back by reference"
                        }
                    ),
                    Variant::Fresh => format!(
                        "each of the {} receivers loans and fills a new {} buffer: {} buffers written on {} CPUs",
                        self.setup.receivers,
                        r.label,
                        self.setup.receivers,
                        self.machine.host.nproc.unwrap_or(1)
                    ),
                };
                // The smallest size of the same path: the round's fixed cost.
                let fixed = self
                    .broadcast
                    .iter()
                    .filter(|o| o.variant == r.variant && o.coordination == r.coordination && o.size < r.size)
                    .min_by_key(|o| o.size)
                    .and_then(|o| {
                        o.latency.as_ref().map(|l| {
                            format!(
                                "; the same round with {} takes {} µs, the fixed cost of waking the source and four \
                                 receiver processes (each a socket read, a store get and a scheduler hand-off) on {} CPUs",
                                o.label,
                                fmt_us(l.median_us),
                                self.machine.host.nproc.unwrap_or(1)
                            )
                        })
                    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_ratios_skip_failed_passes() {
        assert_eq!(paired_ratio(&[10.0, 20.0, f64::NAN], &[5.0, 5.0, 5.0]), 3.0);
        assert_eq!(paired_ratio(&[10.0, 30.0, 8.0], &[5.0, 10.0, 8.0]), 2.0);
        assert!(paired_ratio(&[], &[]).is_nan());
    }
}
