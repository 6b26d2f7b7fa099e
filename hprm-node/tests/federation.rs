//! Federations of real processes: `hprm-rti`, `hprm-store`, and one
//! federate process per federate (this test binary re-run as
//! `federate_child`, which builds the scenario named by
//! `HPRM_TEST_SCENARIO` and runs the federate the launcher names).
//!
//! Each federate records a trace (tag relative to the start, reaction,
//! input values) and its run report in `$HPRM_TEST_OUT/<federate>.trace`;
//! the tests check those files. Scenarios follow Lingua Franca's federated
//! tests: distributed count, feedback with a delay, a stop requested by
//! one federate, a failing federate, a too-small STP (tardy handler), a
//! missed deadline, plus the determinism federation (fan-out, fan-in, a
//! cycle with a delay and a zero-delay cycle, with random jitter).

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hprm_node::launch::{Launch, LaunchReport};
use hprm_node::payload::Buffer;
use hprm_node::{run_federate, Coordination, Ctx, Input, Program, ReactorBuilder};

const MS: Duration = Duration::from_millis(1);

fn record(ctx: &Ctx<'_>, what: impl std::fmt::Display) {
    let t = ctx.tag();
    support::child::record(format!("{} {} {} {what}", ctx.elapsed().as_micros(), t.microstep, ctx.federate()));
}

/// Sleeps up to `max_us` µs when `HPRM_TEST_JITTER` is set (the
/// determinism test), from a per-process random stream.
fn jitter(max_us: u64) {
    if std::env::var_os("HPRM_TEST_JITTER").is_none() {
        return;
    }
    use std::cell::Cell;
    thread_local!(static SEED: Cell<u64> = Cell::new((std::process::id() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1));
    let r = SEED.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x
    });
    std::thread::sleep(Duration::from_micros(r % max_us));
}

// ---------------------------------------------------------------- scenarios

fn count(coordination: Coordination) -> Program {
    let mut p = Program::new("count");
    p.coordination(coordination).timeout(100 * MS);
    let src = p.federate("source");
    let out = {
        let mut r = p.reactor(src, "counter", 0u64);
        let t = r.timer("t", Duration::ZERO, 10 * MS);
        let out = r.output::<u64>("out");
        r.reaction("emit").trigger(t).effect(out).body(move |n, ctx| {
            *n += 1;
            ctx.set(out, *n);
        });
        out
    };
    let sink = p.federate("sink");
    let inp = printer(&mut p, sink);
    p.connect_after(out, inp, 5 * MS);
    p
}

/// A reactor in `fed` that records "got N" for every u64 on its input.
fn printer(p: &mut Program, fed: hprm_node::FederateId) -> hprm_node::Input<u64> {
    let mut r = p.reactor(fed, "printer", ());
    let i = r.input::<u64>("in");
    r.reaction("print").trigger(i).body(move |_, ctx| {
        let v = *ctx.get(i).expect("triggered by in");
        record(ctx, format!("got {v}"));
    });
    i
}

/// A source whose timer ticks every millisecond but that sends once (at
/// its 50th tick, 20 ms later), to a sink whose own timer ticks every 30
/// ms: the sink's next event is its timer, so the source's NETs up to 20
/// ms before it concern nobody, and the RTI's DNETs let it skip them.
fn sparse() -> Program {
    let mut p = Program::new("sparse");
    p.timeout(100 * MS);
    let src = p.federate("source");
    let out = {
        let mut r = p.reactor(src, "ticker", 0u64);
        let t = r.timer("t", Duration::ZERO, MS);
        let out = r.output::<u64>("out");
        r.reaction("tick").trigger(t).effect(out).body(move |n, ctx| {
            *n += 1;
            if *n == 50 {
                ctx.set(out, *n);
            }
        });
        out
    };
    let sink = p.federate("sink");
    {
        let mut r = p.reactor(sink, "clock", ());
        let t = r.timer("t", Duration::ZERO, 30 * MS);
        r.reaction("tick").trigger(t).body(move |_, ctx| record(ctx, "tick"));
    }
    let inp = printer(&mut p, sink);
    p.connect_after(out, inp, 20 * MS);
    p
}

fn feedback(coordination: Coordination) -> Program {
    let mut p = Program::new("feedback");
    p.coordination(coordination).timeout(100 * MS);
    let a = p.federate("a");
    let b = p.federate("b");
    let (a_out, a_in) = {
        let mut r = p.reactor(a, "pinger", 0u64);
        let s = r.startup();
        let out = r.output::<u64>("out");
        let inp = r.input::<u64>("in");
        r.reaction("start").trigger(s).effect(out).body(move |_, ctx| ctx.set(out, 1));
        r.reaction("pong").trigger(inp).effect(out).body(move |_, ctx| {
            let v = *ctx.get(inp).expect("present");
            record(ctx, format!("pong {v}"));
            ctx.set(out, v + 1);
        });
        (out, inp)
    };
    let (b_out, b_in) = {
        let mut r = p.reactor(b, "echo", ());
        let out = r.output::<u64>("out");
        let inp = r.input::<u64>("in");
        r.reaction("echo").trigger(inp).effect(out).body(move |_, ctx| {
            let v = *ctx.get(inp).expect("present");
            record(ctx, format!("ping {v}"));
            ctx.set(out, v);
        });
        (out, inp)
    };
    p.connect(a_out, b_in);
    p.connect_after(b_out, a_in, 10 * MS);
    p
}

/// A ping-pong chained by microsteps (logical time stays at the start),
/// decentralized, where the pinger has events of its own at the tags its
/// replies arrive at: it must wait for the reply's status (up to the STP
/// of physical time), not take it as absent because physical time is past
/// the tag's time + STP.
fn chain() -> Program {
    const ROUNDS: u64 = 3000;
    let mut p = Program::new("chain");
    // Shorter than the chain's wall-clock time (about a second), and longer
    // than any stall of a reply on a machine busy with parallel tests.
    p.coordination(Coordination::Decentralized { stp: 200 * MS });
    let a = p.federate("a");
    let b = p.federate("b");
    let (a_out, a_in) = {
        let mut r = p.reactor(a, "pinger", (0u64, 0u64));
        let s = r.startup();
        let next = r.logical_action::<()>("next", Duration::ZERO);
        let out = r.output::<u64>("out");
        let inp = r.input::<u64>("in");
        r.reaction("tick").trigger(s).trigger(next).source(inp).effect(out).effect(next).body(
            move |(n, missing), ctx| {
                *n += 1;
                if *n > 1 && ctx.get(inp) != Some(&(*n - 1)) {
                    *missing += 1;
                }
                if *n <= ROUNDS {
                    ctx.set(out, *n);
                    ctx.schedule(next, Duration::ZERO, ());
                } else {
                    record(ctx, format!("done {} missing {missing}", *n - 1));
                    ctx.request_stop();
                }
            },
        );
        (out, inp)
    };
    let (b_out, b_in) = {
        let mut r = p.reactor(b, "echo", ());
        let out = r.output::<u64>("out");
        let inp = r.input::<u64>("in");
        r.reaction("echo").trigger(inp).effect(out).body(move |_, ctx| {
            let v = *ctx.get(inp).expect("present");
            ctx.set(out, v);
        });
        (out, inp)
    };
    p.connect(a_out, b_in);
    p.connect_after(b_out, a_in, Duration::ZERO);
    p
}

fn stop() -> Program {
    let mut p = Program::new("stop");
    for name in ["requester", "other1", "other2"] {
        let f = p.federate(name);
        let mut r = p.reactor(f, "r", 0u32);
        let t = r.timer("t", Duration::ZERO, 5 * MS);
        let sd = r.shutdown();
        let requester = name == "requester";
        r.reaction("tick").trigger(t).body(move |n, ctx| {
            *n += 1;
            if requester && *n == 7 {
                ctx.request_stop();
            }
        });
        r.reaction("bye").trigger(sd).body(move |n, ctx| record(ctx, format!("shutdown after {n} ticks")));
    }
    p
}

/// A source feeding a `victim` and a sink every 10 ms; with `crash`, the
/// victim's reaction panics at the third message (the vanish test kills
/// its process instead).
fn source_victim_sink(name: &str, victim: &str, timeout: Duration, crash: bool) -> Program {
    let mut p = Program::new(name);
    p.timeout(timeout);
    let src = p.federate("source");
    let bad = p.federate(victim);
    let sink = p.federate("sink");
    let (o1, o2) = {
        let mut r = p.reactor(src, "s", 0u64);
        let t = r.timer("t", Duration::ZERO, 10 * MS);
        let o1 = r.output::<u64>(&format!("to_{victim}"));
        let o2 = r.output::<u64>("to_sink");
        r.reaction("emit").trigger(t).effect(o1).effect(o2).body(move |n, ctx| {
            *n += 1;
            ctx.set(o1, *n);
            ctx.set(o2, *n);
        });
        (o1, o2)
    };
    let vi = {
        let mut r = p.reactor(bad, "c", ());
        let i = r.input::<u64>("in");
        r.reaction("crash").trigger(i).body(move |_, ctx| {
            if crash && *ctx.get(i).expect("present") == 3 {
                panic!("deliberate failure at the third message");
            }
        });
        i
    };
    let si = {
        let mut r = p.reactor(sink, "k", ());
        let i = r.input::<u64>("in");
        let sd = r.shutdown();
        r.reaction("got").trigger(i).body(move |_, ctx| record(ctx, format!("got {}", ctx.get(i).expect("present"))));
        r.reaction("bye").trigger(sd).body(|_, ctx| record(ctx, "shutdown"));
        i
    };
    p.connect(o1, vi);
    p.connect(o2, si);
    p
}

fn tardy() -> Program {
    let mut p = Program::new("tardy");
    p.coordination(Coordination::Decentralized { stp: Duration::ZERO }).timeout(100 * MS);
    let slow = p.federate("slow");
    let recv = p.federate("receiver");
    let out = {
        let mut r = p.reactor(slow, "s", 0u64);
        let t = r.timer("t", Duration::ZERO, 20 * MS);
        let out = r.output::<u64>("out");
        r.reaction("emit").trigger(t).effect(out).body(move |n, ctx| {
            // Physical lag past the tag: the receiver has moved on.
            std::thread::sleep(8 * MS);
            *n += 1;
            ctx.set(out, *n);
        });
        out
    };
    let inp = {
        let mut r = p.reactor(recv, "r", ());
        let t = r.timer("t", Duration::ZERO, 20 * MS);
        let i = r.input::<u64>("in");
        r.reaction("tick").trigger(t).body(|_, _| {});
        record_arrivals(&mut r, i);
        i
    };
    p.connect(out, inp);
    p
}

/// Reaction `got` of a receiver: records each value of `i`, on time or
/// tardy (with the tag it was meant for, from the start).
fn record_arrivals<S: Send + 'static>(r: &mut ReactorBuilder<'_, S>, i: Input<u64>) {
    r.reaction("got")
        .trigger(i)
        .tardy(move |_, ctx| {
            let intended = ctx.intended_tag(i).expect("tardy inputs carry their intended tag");
            record(
                ctx,
                format!("tardy {} intended {}", ctx.get(i).expect("present"), intended.time - ctx.start_time()),
            );
        })
        .body(move |_, ctx| record(ctx, format!("on time {}", ctx.get(i).expect("present"))));
}

/// Two messages that arrive tardy together: the sender sends for tags 0
/// and 20 ms, 200 ms late each, while the receiver is held in its reaction
/// at 20 ms (1 s), which it began with its input absent (STP 0). Both are
/// read at once afterwards, both after their tags.
fn tardy_pair() -> Program {
    let mut p = Program::new("tardy_pair");
    p.coordination(Coordination::Decentralized { stp: Duration::ZERO }).timeout(100 * MS);
    let slow = p.federate("slow");
    let recv = p.federate("receiver");
    let out = {
        let mut r = p.reactor(slow, "s", 0u64);
        let t = r.timer("t", Duration::ZERO, 20 * MS);
        let out = r.output::<u64>("out");
        r.reaction("emit").trigger(t).effect(out).body(move |n, ctx| {
            *n += 1;
            if *n <= 2 {
                std::thread::sleep(200 * MS);
                ctx.set(out, *n);
            }
        });
        out
    };
    {
        let mut r = p.reactor(recv, "r", ());
        let t = r.timer("hold", 20 * MS, Duration::ZERO);
        let i = r.input::<u64>("in");
        r.reaction("hold").trigger(t).body(|_, ctx| {
            record(ctx, "held");
            std::thread::sleep(1000 * MS);
        });
        record_arrivals(&mut r, i);
        p.connect(out, i);
    }
    p
}

fn deadline() -> Program {
    let mut p = Program::new("deadline");
    p.timeout(30 * MS);
    let f = p.federate("solo");
    let mut r = p.reactor(f, "r", ());
    let t = r.timer("t", Duration::ZERO, 10 * MS);
    r.reaction("slow").trigger(t).body(|_, _| std::thread::sleep(3 * MS));
    r.reaction("tight")
        .trigger(t)
        .deadline(MS, |_, ctx| record(ctx, "deadline missed"))
        .body(|_, ctx| record(ctx, "on time"));
    p
}

/// Fan-out (source to two workers), fan-in (both to a join), a cycle with
/// a delay (join back to source, after 5 ms) and a zero-delay cycle
/// (doubler and join acknowledge each other without delay).
fn determinism() -> Program {
    let mut p = Program::new("determinism");
    p.timeout(150 * MS);
    let src = p.federate("source");
    let dbl = p.federate("doubler");
    let inc = p.federate("incrementer");
    let join = p.federate("join");
    let (s_out, s_fb) = {
        let mut r = p.reactor(src, "s", (0u64, 0u64));
        let t = r.timer("t", Duration::ZERO, 10 * MS);
        let out = r.output::<u64>("out");
        let fb = r.input::<u64>("feedback");
        r.reaction("emit").trigger(t).effect(out).body(move |(n, extra), ctx| {
            jitter(2000);
            *n += 1;
            record(ctx, format!("emit {} extra {extra}", *n));
            ctx.set(out, *n * 100 + *extra);
        });
        r.reaction("fb").trigger(fb).body(move |(_, extra), ctx| {
            jitter(1000);
            let v = *ctx.get(fb).expect("present");
            record(ctx, format!("feedback {v}"));
            *extra = v % 7;
        });
        (out, fb)
    };
    let (d_in, d_out, d_ack) = {
        let mut r = p.reactor(dbl, "d", 0u64);
        let i = r.input::<u64>("in");
        let o = r.output::<u64>("out");
        let ack = r.input::<u64>("ack");
        r.reaction("double").trigger(i).effect(o).body(move |_, ctx| {
            jitter(2000);
            let v = *ctx.get(i).expect("present");
            record(ctx, format!("double {v}"));
            ctx.set(o, v * 2);
        });
        r.reaction("ack").trigger(ack).body(move |acks, ctx| {
            *acks += 1;
            record(ctx, format!("ack {} total {acks}", ctx.get(ack).expect("present")));
        });
        (i, o, ack)
    };
    let (i_in, i_out) = {
        let mut r = p.reactor(inc, "i", ());
        let i = r.input::<u64>("in");
        let o = r.output::<u64>("out");
        r.reaction("inc").trigger(i).effect(o).body(move |_, ctx| {
            jitter(2000);
            let v = *ctx.get(i).expect("present");
            record(ctx, format!("inc {v}"));
            ctx.set(o, v + 1);
        });
        (i, o)
    };
    let (j_a, j_b, j_ack, j_fb) = {
        let mut r = p.reactor(join, "j", 0u64);
        let a = r.input::<u64>("a");
        let b = r.input::<u64>("b");
        let ack = r.output::<u64>("ack");
        let fb = r.output::<u64>("feedback");
        r.reaction("join").trigger(a).trigger(b).effect(ack).effect(fb).body(move |sum, ctx| {
            jitter(2000);
            let (va, vb) = (ctx.get(a).copied(), ctx.get(b).copied());
            *sum += va.unwrap_or(0) + vb.unwrap_or(0);
            record(ctx, format!("join {va:?} {vb:?} sum {sum}"));
            ctx.set(ack, *sum);
            ctx.set(fb, *sum);
        });
        (a, b, ack, fb)
    };
    p.connect(s_out, d_in);
    p.connect(s_out, i_in);
    p.connect(d_out, j_a);
    p.connect(i_out, j_b);
    p.connect(j_ack, d_ack);
    p.connect_after(j_fb, s_fb, 5 * MS);
    p
}

fn large() -> Program {
    let mut p = Program::new("large");
    p.timeout(40 * MS);
    let cam = p.federate("camera");
    let det = p.federate("detector");
    let out = {
        let mut r = p.reactor(cam, "c", 0u8);
        let t = r.timer("t", Duration::ZERO, 10 * MS);
        let out = r.output::<(u8, Buffer)>("frame");
        r.reaction("capture").trigger(t).effect(out).body(move |n, ctx| {
            *n += 1;
            let mut loan = ctx.loan(out, hprm_node::payload::Dtype::U8, &[480, 640, 3]).expect("loan from the store");
            loan.as_mut_bytes().fill(*n);
            let frame = loan.finish().expect("finish the loan");
            ctx.set(out, (*n, frame));
        });
        out
    };
    let inp = {
        let mut r = p.reactor(det, "d", ());
        let i = r.input::<(u8, Buffer)>("frame");
        r.reaction("detect").trigger(i).body(move |_, ctx| {
            let (n, frame) = ctx.get(i).expect("present");
            let ok = frame.bytes().len() == 480 * 640 * 3 && frame.bytes().iter().all(|b| b == n);
            record(ctx, format!("frame {n} shape {:?} shared {} intact {ok}", frame.shape(), frame.is_shared()));
        });
        i
    };
    p.connect(out, inp);
    p
}

/// Sender and receiver disagree on the port's type (each process builds
/// the program with its own): every message fails to decode.
fn mismatch() -> Program {
    if std::env::var("HPRM_FEDERATE").is_ok_and(|f| f == "receiver") {
        mismatch_typed::<String>(|n| n.to_string())
    } else {
        mismatch_typed::<u64>(|n| n)
    }
}

fn mismatch_typed<T: hprm_node::PortValue>(make: fn(u64) -> T) -> Program {
    let mut p = Program::new("mismatch");
    p.timeout(30 * MS);
    let s = p.federate("sender");
    let r = p.federate("receiver");
    let out = {
        let mut b = p.reactor(s, "s", 0u64);
        let t = b.timer("t", Duration::ZERO, 10 * MS);
        let out = b.output::<T>("out");
        b.reaction("emit").trigger(t).effect(out).body(move |n, ctx| {
            *n += 1;
            ctx.set(out, make(*n));
        });
        out
    };
    let inp = {
        let mut b = p.reactor(r, "r", ());
        let i = b.input::<T>("in");
        let t = b.timer("t", Duration::ZERO, 10 * MS);
        b.reaction("got").trigger(i).body(|_, ctx| record(ctx, "got a value"));
        b.reaction("tick").trigger(t).body(|_, ctx| record(ctx, "tick"));
        i
    };
    p.connect(out, inp);
    p
}

/// A zero-delay cycle between federates whose sending and receiving
/// reactions sit in different reactors of one federate (independent, so
/// the same level without the network ordering rule).
fn zero_delay_cycle() -> Program {
    let mut p = Program::new("zdc");
    p.timeout(30 * MS);
    let a = p.federate("a");
    let b = p.federate("b");
    let a_in = {
        let mut r = p.reactor(a, "listener", ());
        let i = r.input::<u64>("in");
        r.reaction("hear")
            .trigger(i)
            .body(move |_, ctx| record(ctx, format!("heard {}", ctx.get(i).expect("present"))));
        i
    };
    let a_out = {
        let mut r = p.reactor(a, "talker", 0u64);
        let t = r.timer("t", Duration::ZERO, 10 * MS);
        let o = r.output::<u64>("out");
        r.reaction("talk").trigger(t).effect(o).body(move |n, ctx| {
            *n += 1;
            ctx.set(o, *n);
        });
        o
    };
    let (b_in, b_out) = {
        let mut r = p.reactor(b, "echo", ());
        let i = r.input::<u64>("in");
        let o = r.output::<u64>("out");
        r.reaction("echo").trigger(i).effect(o).body(move |_, ctx| {
            let v = *ctx.get(i).expect("present");
            ctx.set(o, v * 10);
        });
        (i, o)
    };
    p.connect(a_out, b_in);
    p.connect(b_out, a_in);
    p
}

/// A source sends each count over a physical connection and over a
/// logical one (centralized): the RTI relays the logical values, the
/// physical ones go over a peer connection, stamped by the sink's clock.
fn physical_and_logical() -> Program {
    let mut p = Program::new("physical");
    p.timeout(100 * MS);
    let src = p.federate("source");
    let (fast, slow) = {
        let mut r = p.reactor(src, "counter", 0u64);
        let t = r.timer("t", Duration::ZERO, 10 * MS);
        let fast = r.output::<u64>("fast");
        let slow = r.output::<u64>("slow");
        r.reaction("emit").trigger(t).effect(fast).effect(slow).body(move |n, ctx| {
            *n += 1;
            ctx.set(fast, *n);
            ctx.set(slow, *n);
        });
        (fast, slow)
    };
    let sink = p.federate("sink");
    let (phys, logical) = {
        let mut r = p.reactor(sink, "printer", ());
        let phys = r.input::<u64>("phys");
        let logical = r.input::<u64>("logical");
        r.reaction("phys").trigger(phys).body(move |_, ctx| {
            let v = *ctx.get(phys).expect("triggered by phys");
            record(ctx, format!("phys {v}"));
        });
        r.reaction("logical").trigger(logical).body(move |_, ctx| {
            let v = *ctx.get(logical).expect("triggered by logical");
            record(ctx, format!("logical {v}"));
        });
        (phys, logical)
    };
    p.connect_physical(fast, phys);
    p.connect(slow, logical);
    p
}

fn scenario(name: &str) -> Program {
    match name {
        "count-centralized" | "count-centralized-tcp" => count(Coordination::Centralized),
        "count-decentralized" | "count-decentralized-unix" | "count-decentralized-tcp" => {
            count(Coordination::Decentralized { stp: 20 * MS })
        }
        "feedback" => feedback(Coordination::Centralized),
        "feedback-decentralized" => feedback(Coordination::Decentralized { stp: 200 * MS }),
        "stop" => stop(),
        "chain" => chain(),
        "fail" => source_victim_sink("fail", "crasher", 200 * MS, true),
        "tardy" => tardy(),
        "tardy_pair" => tardy_pair(),
        "deadline" => deadline(),
        "determinism" => determinism(),
        "large" => large(),
        "vanish" => source_victim_sink("vanish", "victim", 500 * MS, false),
        "mismatch" => mismatch(),
        "zdc" => zero_delay_cycle(),
        "physical" => physical_and_logical(),
        "sparse" | "sparse-no-dnet" => sparse(),
        other => panic!("unknown scenario {other}"),
    }
}

/// The federate process: run by the launcher through `federate_command`.
#[test]
#[ignore = "run as a federate process by the other tests"]
fn federate_child() {
    support::child::run(scenario, |r| {
        let mut lines: Vec<String> = r.problems.iter().map(|p| format!("problem {p}")).collect();
        if r.peers_over_unix > 0 {
            lines.push(format!("peers over unix {}", r.peers_over_unix));
        }
        if r.rti_over_unix {
            lines.push("rti over unix".into());
        }
        lines.push(format!(
            "report tardy {} deadline_misses {} decode_errors {}",
            r.tardy, r.deadline_misses, r.decode_errors
        ));
        lines.push(format!("nets sent {} skipped {}", r.nets_sent, r.nets_skipped));
        lines.push(format!("losses {}", r.losses.summary()));
        lines
    });
}

struct Run {
    report: LaunchReport,
    traces: BTreeMap<String, Vec<String>>,
    _dir: tempfile::TempDir,
}

impl Run {
    fn trace(&self, fed: &str) -> &[String] {
        self.traces
            .get(fed)
            .map(Vec::as_slice)
            .unwrap_or_else(|| panic!("no trace from {fed}; traces: {:?}", self.traces.keys()))
    }

    fn lines(&self, fed: &str, containing: &str) -> Vec<&str> {
        self.trace(fed).iter().filter(|l| l.contains(containing)).map(String::as_str).collect()
    }

    fn status(&self, fed: &str) -> std::process::ExitStatus {
        self.report.federates.iter().find(|(n, _)| n == fed).map(|(_, s)| *s).expect("federate ran")
    }
}

fn launch(name: &str, fast: bool, extra_env: &[(&str, &str)]) -> Run {
    let bin_dir = support::rti_bin().parent().expect("bin dir").to_path_buf();
    let _ = support::store_bin();
    std::env::set_var("HPRM_BIN_DIR", &bin_dir);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().to_path_buf();
    let scen = name.to_string();
    let env: Vec<(String, String)> = extra_env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let launcher = Launch {
        fast,
        store_memory: "64m".into(),
        federate_command: Some(Box::new(move |_fed: &str| support::child::command(&scen, &out, &env))),
        timeout: Some(Duration::from_secs(60)),
        prefix_logs: true,
        // Local processes hear the start time in far less than LF's 1 s.
        rti_args: match (fast, name.ends_with("-no-dnet")) {
            (true, false) => Vec::new(),
            (true, true) => vec!["--disable-dnet".into()],
            (false, dnet) => ["--start-delay-ms", "200"]
                .into_iter()
                .chain(dnet.then_some("--disable-dnet"))
                .map(String::from)
                .collect(),
        },
        ..Launch::default()
    };
    let report = launcher.run(&scenario(name)).expect("launch");
    let traces = support::child::read_traces(dir.path());
    Run { report, traces, _dir: dir }
}

fn assert_all_ok(run: &Run) {
    for (name, status) in &run.report.federates {
        assert!(status.success(), "federate {name} exited with {status}; traces: {:#?}", run.traces);
    }
}

// -------------------------------------------------------------------- tests

fn check_count(run: &Run) {
    assert_all_ok(run);
    let got = run.lines("sink", "got");
    // Sent at 0, 10, ..., 100 ms (timeout 100 ms includes its tag), each
    // arriving 5 ms later; the one sent at 100 ms lands past the stop tag.
    let expect: Vec<String> = (1..=10u64).map(|n| format!("{} 0 sink got {n}", (n - 1) * 10_000 + 5_000)).collect();
    assert_eq!(got, expect.iter().map(String::as_str).collect::<Vec<_>>());
}

#[test]
fn distributed_count_centralized() {
    let run = launch("count-centralized", true, &[]);
    check_count(&run);
    // The launcher's RTI runs on this host: federates reach it over its Unix socket.
    assert_eq!(run.lines("sink", "rti over unix"), ["rti over unix"], "{:#?}", run.traces);
}

#[test]
fn distributed_count_centralized_over_tcp() {
    let run = launch("count-centralized-tcp", true, &[("HPRM_LOCAL_TRANSPORT", "tcp")]);
    check_count(&run);
    assert!(run.lines("sink", "rti over unix").is_empty(), "{:#?}", run.traces);
}

#[test]
fn dnets_let_a_source_skip_the_nets_nobody_downstream_needs() {
    let nets = |run: &Run| -> (u64, u64) {
        let line = run.lines("source", "nets sent");
        let words: Vec<&str> = line.first().expect("a nets line").split_whitespace().collect();
        (words[words.len() - 3].parse().expect("sent"), words[words.len() - 1].parse().expect("skipped"))
    };
    let expect =
        ["0 0 sink tick", "30000 0 sink tick", "60000 0 sink tick", "69000 0 sink got 50", "90000 0 sink tick"];
    // Real time: in fast mode the source, waiting for nothing, would be
    // done before the first DNET reached it.
    let with = launch("sparse", false, &[]);
    let without = launch("sparse-no-dnet", false, &[]);
    for run in [&with, &without] {
        assert_all_ok(run);
        // The same events at the same tags either way.
        assert_eq!(run.lines("sink", " sink "), expect, "{:#?}", run.traces);
    }
    let (sent_with, skipped_with) = nets(&with);
    let (sent_without, skipped_without) = nets(&without);
    assert_eq!(skipped_without, 0, "no DNET, no skipping");
    assert!(
        skipped_with > 0 && sent_with < sent_without,
        "with DNETs: {sent_with} sent, {skipped_with} skipped; without: {sent_without} sent"
    );
}

#[test]
fn distributed_count_decentralized() {
    check_count(&launch("count-decentralized", false, &[]));
}

#[test]
fn distributed_count_decentralized_over_unix_sockets() {
    let run = launch("count-decentralized-unix", false, &[("HPRM_LOCAL_TRANSPORT", "unix")]);
    check_count(&run);
    assert_eq!(run.lines("source", "peers over unix"), vec!["peers over unix 1"]);
}

#[test]
fn distributed_count_decentralized_over_tcp() {
    let run = launch("count-decentralized-tcp", false, &[("HPRM_LOCAL_TRANSPORT", "tcp")]);
    check_count(&run);
    assert!(run.lines("source", "peers over unix").is_empty());
    assert!(run.lines("source", "rti over unix").is_empty());
}

#[test]
fn physical_connections_go_peer_to_peer_in_centralized_coordination() {
    let run = launch("physical", false, &[]);
    assert_all_ok(&run);
    let value = |l: &&str| l.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()).expect("a count");
    let logical: Vec<u64> = run.lines("sink", "logical").iter().map(value).collect();
    assert_eq!(logical, (1..=11).collect::<Vec<_>>(), "every logical value, relayed by the RTI: {:#?}", run.traces);
    // Physical values take the sink's time of arrival: the last ones may
    // land after the stop tag; those that arrived come in order.
    let phys: Vec<u64> = run.lines("sink", "phys").iter().map(value).collect();
    assert!(phys.len() >= 8 && phys.windows(2).all(|w| w[0] < w[1]) && phys[0] == 1, "{phys:?}");
    assert_eq!(
        run.lines("source", "peers over unix"),
        ["peers over unix 1"],
        "the physical connection is a peer connection: {:#?}",
        run.traces
    );
}

#[test]
fn a_zero_delay_cycle_between_federates_runs_at_one_tag() {
    let run = launch("zdc", true, &[]);
    assert_all_ok(&run);
    assert_eq!(
        run.lines("a", "heard"),
        vec!["0 0 a heard 10", "10000 0 a heard 20", "20000 0 a heard 30", "30000 0 a heard 40"]
    );
}

fn check_feedback(run: &Run) {
    assert_all_ok(run);
    // a sends 1 at 0; b echoes at 0; a gets it at 10 ms and sends 2; ...
    let pings = run.lines("b", "ping");
    let pongs = run.lines("a", "pong");
    assert_eq!(pings.len(), 11, "{pings:?}");
    for (k, l) in pongs.iter().enumerate() {
        let k = k as u64 + 1;
        assert_eq!(*l, format!("{} 0 a pong {k}", k * 10_000));
    }
    for (k, l) in pings.iter().enumerate() {
        let k = k as u64;
        assert_eq!(*l, format!("{} 0 b ping {}", k * 10_000, k + 1));
    }
    for fed in ["a", "b"] {
        assert!(run.lines(fed, "report")[0].contains("tardy 0 "), "{:?}", run.trace(fed));
    }
}

#[test]
fn feedback_with_delay() {
    check_feedback(&launch("feedback", true, &[]));
}

/// Decentralized in fast mode: federates wait for their inputs' status
/// (up to the STP of physical time), so the run is the centralized one,
/// with no tardy message.
#[test]
fn feedback_with_delay_decentralized_fast() {
    check_feedback(&launch("feedback-decentralized", true, &[]));
}

#[test]
fn a_microstep_chain_decentralized_fast_waits_for_its_inputs() {
    let run = launch("chain", true, &[]);
    assert_all_ok(&run);
    assert_eq!(run.lines("a", "done"), vec!["0 3000 a done 3000 missing 0"], "{:?}", run.trace("a"));
    for fed in ["a", "b"] {
        assert!(run.lines(fed, "report")[0].contains("tardy 0 "), "{:?}", run.trace(fed));
    }
}

#[test]
fn stop_requested_by_one_federate_stops_all_at_one_tag() {
    let run = launch("stop", false, &[]);
    assert_all_ok(&run);
    let finals: Vec<&str> = ["requester", "other1", "other2"].iter().map(|f| run.lines(f, "shutdown")[0]).collect();
    let tags: Vec<(u64, u32)> = finals
        .iter()
        .map(|l| {
            let mut w = l.split(' ');
            (
                w.next().and_then(|x| x.parse().ok()).expect("time"),
                w.next().and_then(|x| x.parse().ok()).expect("microstep"),
            )
        })
        .collect();
    // Requested during the 7th tick (30 ms) for (30 ms, 1); a federate that
    // had already passed that tag when asked pushes the common stop tag to
    // its own next microstep. Either way: one tag for all.
    assert!(tags.iter().all(|t| *t == tags[0]), "{finals:?}");
    let (time_us, microstep) = tags[0];
    assert_eq!(microstep, 1, "{finals:?}");
    assert!(time_us >= 30_000 && time_us % 5_000 == 0, "{finals:?}");
    let ticks = time_us / 5_000 + 1;
    for l in &finals {
        assert!(l.ends_with(&format!("shutdown after {ticks} ticks")), "{l}");
    }
}

#[test]
fn a_failing_federate_does_not_take_the_others_down() {
    let run = launch("fail", true, &[]);
    assert!(!run.status("crasher").success());
    assert!(run.trace("crasher").iter().any(|l| l.contains("deliberate failure")), "{:?}", run.trace("crasher"));
    assert!(run.status("source").success());
    assert!(run.status("sink").success());
    assert_eq!(run.lines("sink", "got").len(), 21, "{:?}", run.trace("sink"));
    assert_eq!(run.lines("sink", "shutdown").len(), 1);
    // The RTI stays up to the end, and reports the failure in its exit code.
    assert_eq!(run.report.rti.and_then(|s| s.code()), Some(1));
}

#[test]
fn decentralized_with_too_small_stp_runs_tardy_handlers() {
    let run = launch("tardy", false, &[]);
    assert_all_ok(&run);
    let tardy = run.lines("receiver", "intended");
    assert!(!tardy.is_empty(), "{:?}", run.trace("receiver"));
    for l in &tardy {
        // The intended tag is a multiple of the 20 ms period.
        let intended: i64 = l.rsplit(' ').next().and_then(|s| s.parse().ok()).expect("intended tag");
        assert_eq!(intended % 20_000_000, 0, "{l}");
    }
    let report = run.lines("receiver", "report")[0];
    let count: u64 =
        report.split(" tardy ").nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok()).expect("count");
    assert_eq!(count as usize, tardy.len(), "{report}");
    // Counted as late (delivered to the tardy handler), not lost, under the
    // input they were meant for.
    let n = tardy.len();
    assert_eq!(
        run.lines("receiver", "losses"),
        [format!("losses 0 messages lost, {n} late: receiver.r.in: {n} tardy")]
    );
    assert_eq!(run.lines("slow", "losses"), ["losses no messages lost or late"]);
}

#[test]
fn tardy_messages_read_together_each_get_their_own_tag_and_handler() {
    let run = launch("tardy_pair", false, &[]);
    assert_all_ok(&run);
    let trace = run.trace("receiver");
    // Not on a machine so loaded that the receiver began its 20 ms tag
    // after the first message came: then they were not read together.
    let held = run.lines("receiver", "held");
    assert_eq!(held.len(), 1, "{trace:?}");
    let tardy = run.lines("receiver", " intended ");
    // Both values reached the tardy handler, one microstep apart (they
    // once shared the tag after the receiver's, and the second replaced
    // the first: counted tardy, handled once, its value gone).
    let what: Vec<String> =
        tardy.iter().map(|l| l.split_once(" receiver ").map_or("", |(_, w)| w).to_string()).collect();
    assert_eq!(what, ["tardy 1 intended 0", "tardy 2 intended 20000000"], "{trace:?}");
    let microsteps: Vec<&str> = tardy.iter().map(|l| l.split(' ').nth(1).unwrap_or("")).collect();
    assert_eq!(microsteps, ["1", "2"], "{trace:?}");
    assert_eq!(
        run.lines("receiver", "losses"),
        ["losses 0 messages lost, 2 late: receiver.r.in: 2 tardy"],
        "{trace:?}"
    );
}

#[test]
fn missed_deadlines_run_their_handlers() {
    let run = launch("deadline", false, &[]);
    assert_all_ok(&run);
    assert_eq!(run.lines("solo", "deadline missed").len(), 4, "{:?}", run.trace("solo"));
    assert!(run.lines("solo", "on time").is_empty());
    assert!(run.lines("solo", "report")[0].contains("deadline_misses 4"));
}

#[test]
fn undecodable_messages_are_reported_and_the_receiver_goes_on() {
    let run = launch("mismatch", true, &[]);
    assert_all_ok(&run);
    assert!(run.lines("receiver", "got a value").is_empty());
    assert_eq!(run.lines("receiver", "tick").len(), 4);
    assert!(run.lines("receiver", "report")[0].ends_with("decode_errors 4"), "{:?}", run.trace("receiver"));
    assert_eq!(run.lines("receiver", "losses"), ["losses 4 messages lost, 0 late: receiver.r.in: 4 undecodable"]);
    let problem = run.lines("receiver", "problem")[0];
    assert!(
        problem.contains("a message from sender.s.out to receiver.r.in at") && problem.contains("could not be decoded"),
        "{problem}"
    );
}

#[test]
fn large_values_travel_through_the_store() {
    let run = launch("large", true, &[]);
    assert_all_ok(&run);
    let frames = run.lines("detector", "frame");
    assert_eq!(frames.len(), 5, "{:?}", run.trace("detector"));
    for l in frames {
        assert!(l.ends_with("shape [480, 640, 3] shared true intact true"), "{l}");
    }
}

/// The determinism federation, 50 times in real-time mode with random
/// jitter in reactions: every run's traces must be identical.
#[test]
fn fifty_jittered_runs_give_identical_traces() {
    let runs: usize = std::env::var("HPRM_DETERMINISM_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(50);
    let first = launch("determinism", false, &[("HPRM_TEST_JITTER", "1")]);
    assert_all_ok(&first);
    assert!(first.lines("join", "join").len() >= 15, "{:?}", first.trace("join"));
    assert!(!first.lines("doubler", "ack").is_empty());
    assert!(!first.lines("source", "feedback").is_empty());
    // How many NETs DNETs saved depends on when they arrived: not part of
    // the program's behaviour.
    let behaviour = |run: &Run| -> BTreeMap<String, Vec<String>> {
        run.traces
            .iter()
            .map(|(fed, lines)| (fed.clone(), lines.iter().filter(|l| !l.contains("nets sent")).cloned().collect()))
            .collect()
    };
    let expected = behaviour(&first);
    for i in 1..runs {
        let run = launch("determinism", false, &[("HPRM_TEST_JITTER", "1")]);
        assert_all_ok(&run);
        assert_eq!(behaviour(&run), expected, "run {i} differs from run 0");
    }
}

// ---------------------------------------------------------------- bad input

/// A program of two federates whose `a` runs until stopped.
fn pair() -> Program {
    ticking_pair(50 * MS, 10 * MS)
}

/// Federates `a` and `b`, each with a timer of `period`, for `timeout`.
fn ticking_pair(timeout: Duration, period: Duration) -> Program {
    let mut p = Program::new("pair");
    p.timeout(timeout);
    for name in ["a", "b"] {
        let f = p.federate(name);
        let mut r = p.reactor(f, "r", ());
        let t = r.timer("t", Duration::ZERO, period);
        r.reaction("tick").trigger(t).body(|_, _| {});
    }
    p
}

fn rti_options(fed: &str, rti: &support::RtiDaemon, federation: &str) -> hprm_node::RunOptions {
    let mut o = hprm_node::RunOptions::new(fed);
    o.rti = Some(hprm_node::RtiConfig::new(rti.addr().to_string(), federation));
    o
}

/// Initial clock synchronization (RTI `--clock-sync init`) and HMAC
/// authentication, as federates on other hosts use them.
#[test]
fn clock_sync_and_authentication_with_the_rti() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("key");
    std::fs::write(&key, "s3cret\n").expect("key file");
    let rti = support::RtiDaemon::start(
        2,
        &["--id", "pair", "--clock-sync", "init", "--auth-key-file", key.to_str().expect("utf-8")],
    );
    let run = |fed: &'static str, secret: &'static str| {
        let mut o = rti_options(fed, &rti, "pair");
        if let Some(c) = o.rti.as_mut() {
            c.clock_sync = true;
            c.auth_key = Some(secret.as_bytes().to_vec());
        }
        std::thread::spawn(move || run_federate(pair(), o))
    };
    let a = run("a", "s3cret");
    let b = run("b", "s3cret");
    a.join().expect("no panic").expect("a runs");
    b.join().expect("no panic").expect("b runs");

    let rti = support::RtiDaemon::start(2, &["--id", "pair", "--auth-key-file", key.to_str().expect("utf-8")]);
    let mut o = rti_options("a", &rti, "pair");
    if let Some(c) = o.rti.as_mut() {
        c.auth_key = Some(b"wrong".to_vec());
    }
    let err = run_federate(pair(), o).expect_err("a wrong key must not get in");
    assert!(err.to_string().contains("did not authenticate"), "{err}");
}

/// Runtime clock synchronization (RTI `--clock-sync on`): federates that
/// ask for clock synchronization answer the RTI's UDP rounds all run long
/// and keep their estimates. On one host the RTI's clock is this clock, so
/// the offset they converge to is near zero.
#[test]
fn runtime_clock_sync_rounds_with_the_rti() {
    let rti = support::RtiDaemon::start(
        2,
        &[
            "--id",
            "pair",
            "--clock-sync",
            "on",
            "--clock-sync-port",
            "0",
            "--clock-sync-period-ms",
            "5",
            "--start-delay-ms",
            "100",
        ],
    );
    let program = || ticking_pair(400 * MS, 50 * MS);
    let run = |fed: &'static str| {
        let mut o = rti_options(fed, &rti, "pair");
        if let Some(c) = o.rti.as_mut() {
            c.clock_sync = true;
        }
        std::thread::spawn(move || run_federate(program(), o))
    };
    let (a, b) = (run("a"), run("b"));
    for (name, h) in [("a", a), ("b", b)] {
        let report = h.join().expect("no panic").unwrap_or_else(|e| panic!("{name} runs: {e}"));
        // About 80 rounds of 5 ms in 400 ms; a loaded machine drops some.
        assert!(report.clock_sync_rounds >= 10, "{name}: {} rounds kept\n{}", report.clock_sync_rounds, rti.log());
    }
}

/// A message that reaches a federate after it finished is dropped, never
/// decoded: when `run_federate` returns, no thread of the runtime runs the
/// program's code. (A Python federate's decoder takes the GIL; asked for it
/// while the interpreter finalizes, CPython crashes.)
#[test]
fn a_finished_federate_decodes_no_late_message() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;

    use hprm_node::payload::{Decoder, PayloadError};
    use hprm_node::Value;

    static SENT: AtomicUsize = AtomicUsize::new(0);
    static RETURNED: AtomicBool = AtomicBool::new(false);
    static DECODED_AFTER: AtomicUsize = AtomicUsize::new(0);
    fn decode(bytes: &[u8], dec: &Decoder) -> Result<Value, PayloadError> {
        if RETURNED.load(SeqCst) {
            DECODED_AFTER.fetch_add(1, SeqCst);
        }
        dec.decode::<u64>(bytes).map(|v| Arc::new(v) as Value)
    }
    // Decentralized with no STP: the receiver finishes at the stop tag
    // without waiting, while the sender's reaction there is still asleep.
    let program = || {
        let mut p = Program::new("late");
        p.coordination(Coordination::Decentralized { stp: Duration::ZERO }).timeout(20 * MS);
        let s = p.federate("sender");
        let out = {
            let mut r = p.reactor(s, "s", ());
            let t = r.timer("t", 20 * MS, Duration::ZERO);
            let out = r.output::<u64>("out");
            r.reaction("late").trigger(t).effect(out).body(move |_, ctx| {
                std::thread::sleep(300 * MS);
                SENT.fetch_add(1, SeqCst);
                ctx.set(out, 1);
            });
            out
        };
        let f = p.federate("receiver");
        let mut r = p.reactor(f, "r", ());
        let inp = r.input_with::<u64>("in", decode);
        r.reaction("got").trigger(inp).body(|_, _| {});
        p.connect(out, inp);
        p
    };
    let rti = support::RtiDaemon::start(2, &["--id", "late"]);
    let opts = rti_options("sender", &rti, "late");
    let sender = std::thread::spawn(move || run_federate(program(), opts));
    run_federate(program(), rti_options("receiver", &rti, "late")).expect("the receiver runs");
    RETURNED.store(true, SeqCst);
    sender.join().expect("no panic").expect("the sender runs");
    assert_eq!(SENT.load(SeqCst), 1, "the sender sent its message after the receiver finished");
    // A reader thread still at the socket would decode it within microseconds.
    std::thread::sleep(200 * MS);
    assert_eq!(DECODED_AFTER.load(SeqCst), 0, "a message was decoded after run_federate returned");
}

#[test]
fn a_wrong_federation_id_is_rejected_with_a_reason() {
    let rti = support::RtiDaemon::start(2, &["--id", "pair"]);
    let err = run_federate(pair(), rti_options("a", &rti, "other")).expect_err("must be rejected");
    let msg = err.to_string();
    assert!(msg.contains("rejected federate a") && msg.contains("wrong federation id"), "{msg}");
}

#[test]
fn a_duplicate_federate_id_is_rejected_and_the_first_keeps_its_place() {
    let rti = support::RtiDaemon::start(2, &["--id", "pair"]);
    let opts = rti_options("a", &rti, "pair");
    let first = std::thread::spawn(move || run_federate(pair(), opts));
    support::eventually(Duration::from_secs(10), "the first federate a joined", || {
        rti.log().contains("federate joined")
    });
    let err = run_federate(pair(), rti_options("a", &rti, "pair")).expect_err("duplicate must be rejected");
    assert!(err.to_string().contains("duplicate federate id"), "{err}");
    // The first one kept its place: with b, the federation runs to its end.
    run_federate(pair(), rti_options("b", &rti, "pair")).expect("b runs");
    first.join().expect("no panic").expect("the first a runs");
}

fn spawn_federate(scenario: &str, fed: &str, rti: &str, store: &Path, out: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["federate_child", "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
        .env("HPRM_TEST_SCENARIO", scenario)
        .env("HPRM_TEST_OUT", out)
        .env("HPRM_FEDERATE", fed)
        .env("HPRM_RTI", rti)
        .env("HPRM_STORE", store)
        .env("HPRM_FEDERATION", scenario)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn federate")
}

/// A federate killed with SIGKILL mid-run, and random bytes thrown at the
/// RTI's port: the others run to their end, the RTI stays up and reports
/// the failure in its exit code.
#[test]
fn a_vanishing_federate_and_random_bytes_do_not_stop_the_others() {
    use std::io::Write;
    let store = support::StoreDaemon::start("16m");
    let mut rti = support::RtiDaemon::start(3, &["--id", "vanish", "--clock-sync", "off"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = rti.addr().to_string();
    let mut kids: Vec<_> = ["source", "victim", "sink"]
        .iter()
        .map(|f| spawn_federate("vanish", f, &addr, &store.socket, dir.path()))
        .collect();
    std::thread::sleep(Duration::from_millis(1300));
    let _ = kids[1].kill();
    let mut junk = std::net::TcpStream::connect(rti.addr()).expect("connect to the RTI");
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let _ = junk.write_all(&bytes);
    for i in [0, 2] {
        let status = wait_child(&mut kids[i], Duration::from_secs(20));
        assert!(status.success(), "federate {i} exited with {status}");
    }
    let _ = kids[1].wait();
    assert_eq!(rti.wait_exit(Duration::from_secs(10)).code(), Some(1), "{}", rti.log());
    let traces = support::child::read_traces(dir.path());
    assert_eq!(traces["sink"].iter().filter(|l| l.contains("got")).count(), 51, "{:?}", traces["sink"]);
}

fn wait_child(c: &mut std::process::Child, within: Duration) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(s) = c.try_wait().expect("wait") {
            return s;
        }
        if std::time::Instant::now() > deadline {
            let _ = c.kill();
            panic!("a federate did not finish within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGTERM to one federate process (as the launcher passes on Ctrl-C):
/// the federation stops at one common tag, shutdown reactions run
/// everywhere, and every process exits 0. The federates are the `endless`
/// example (a real program binary: it blocks the signals before any
/// thread starts, which a test harness cannot do).
#[test]
fn sigterm_stops_the_federation_at_one_tag() {
    let exe = std::env::current_exe().expect("test binary");
    let endless = exe.parent().and_then(Path::parent).map(|d| d.join("examples").join("endless")).expect("target dir");
    if !endless.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "hprm-node", "--example", "endless"])
            .status()
            .expect("cargo");
        assert!(status.success(), "building the endless example failed");
    }
    let store = support::StoreDaemon::start("16m");
    let mut rti = support::RtiDaemon::start(3, &["--id", "endless", "--clock-sync", "off", "--start-delay-ms", "100"]);
    let addr = rti.addr().to_string();
    let mut kids: Vec<_> = ["f0", "f1", "f2"]
        .iter()
        .map(|f| {
            Command::new(&endless)
                .env("HPRM_FEDERATE", f)
                .env("HPRM_RTI", &addr)
                .env("HPRM_STORE", &store.socket)
                .env("RUST_LOG", "warn")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn federate")
        })
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, k) in kids.iter_mut().enumerate() {
        let out = k.stdout.take().expect("stdout");
        let tx = tx.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send((i, line));
            }
        });
    }
    drop(tx);
    // A signal before a federate's startup is a stop before the start (exit
    // 0, no shutdown reaction): wait until every federate is running.
    let mut lines: Vec<Vec<String>> = vec![Vec::new(); kids.len()];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !lines.iter().all(|l| l.iter().any(|l| l.ends_with(" running"))) {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok((i, l)) => lines[i].push(l),
            Err(_) => assert!(std::time::Instant::now() < deadline, "the federates never started: {lines:?}"),
        }
    }
    // SAFETY: kill(2) on a child this test spawned.
    unsafe { libc::kill(kids[1].id() as i32, libc::SIGTERM) };
    for k in &mut kids {
        let status = wait_child(k, Duration::from_secs(20));
        assert!(status.success(), "{status}");
    }
    for (i, l) in rx.iter() {
        lines[i].push(l);
    }
    let mut tags = Vec::new();
    for out in &lines {
        let line =
            out.iter().find(|l| l.contains("shutdown at")).unwrap_or_else(|| panic!("no shutdown line in {out:?}"));
        tags.push(line.split("shutdown at ").nth(1).and_then(|r| r.split(" after").next()).expect("tag").to_string());
    }
    assert!(tags.iter().all(|t| *t == tags[0]), "{tags:?}");
    assert!(tags[0].ends_with(", 1)"), "stopped one microstep after the tag current at the request: {tags:?}");
    assert_eq!(rti.wait_exit(Duration::from_secs(10)).code(), Some(0), "{}", rti.log());
}
