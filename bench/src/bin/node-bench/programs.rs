//! The federate programs the benchmarks launch, one per workload: the
//! small-message ping-pong, the sustained-rate stream and the broadcast and
//! gather, built from a [`Spec`] that the coordinator hands to its `launch`
//! and `federate` processes, and the sample series their federates publish.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hprm_node::payload::{Buffer, Dtype};
use hprm_node::{Ctx, Input, Output, Program};
use serde::{Deserialize, Serialize};

use crate::cli::{Coord, Variant, Workload};
use crate::RECEIVERS;

/// What a `launch` or `federate` process needs to rebuild the program the
/// coordinator chose, identically.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Spec {
    pub(crate) workload: Workload,
    pub(crate) coord: Coord,
    /// Payload bytes.
    pub(crate) size: usize,
    /// Measured rounds (messages, for the rate).
    pub(crate) rounds: u64,
    /// Rounds before those, not measured.
    pub(crate) warmup: u64,
    pub(crate) variant: Variant,
    /// Where federates write their results.
    pub(crate) out: PathBuf,
    pub(crate) store_memory: String,
}

impl Spec {
    pub(crate) fn federates(&self) -> Vec<String> {
        match self.workload {
            Workload::Small => vec!["ping".into(), "pong".into()],
            Workload::Rate => vec!["source".into(), "sink".into()],
            Workload::Broadcast => {
                std::iter::once("source".to_string()).chain((0..RECEIVERS).map(|i| format!("recv{i}"))).collect()
            }
        }
    }
}

pub(crate) fn build_program(spec: &Spec) -> Program {
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
pub(crate) static SERIES: Mutex<BTreeMap<String, Vec<i64>>> = Mutex::new(BTreeMap::new());
/// Payloads that arrived with the wrong size or contents.
pub(crate) static CHECK_FAILURES: AtomicU64 = AtomicU64::new(0);

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
        r.reaction("report")
            .trigger(stop)
            .body(|s: &mut Sink, _| publish("sink_span", vec![s.mark, s.last, s.received as i64]));
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
    let ok =
        bytes.len() == size && bytes.first().map_or(true, |&b| b == byte) && bytes.last().map_or(true, |&b| b == byte);
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
        let mut r = p.reactor(
            src,
            "source",
            Broadcaster { round: 0, replies: 0, stamp: 0, latency: Vec::new(), first: Vec::new() },
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_valid() {
        for workload in [Workload::Small, Workload::Rate, Workload::Broadcast] {
            for coord in [Coord::Centralized, Coord::Decentralized] {
                let spec = Spec {
                    workload,
                    coord,
                    size: 8,
                    rounds: 1,
                    warmup: 0,
                    variant: Variant::Fresh,
                    out: PathBuf::new(),
                    store_memory: "64m".into(),
                };
                let p = build_program(&spec);
                p.validate().unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(p.federate_names(), spec.federates().iter().map(String::as_str).collect::<Vec<_>>());
            }
        }
    }
}
