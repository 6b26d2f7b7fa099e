//! The reactor runtime inside one federate (a one-federate program runs
//! without an RTI): tags and delays, reaction order, actions, timers,
//! stop, deadlines, errors in programs and in reactions.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hprm_node::loss::Loss;
use hprm_node::{run_federate, Ctx, NodeError, Program, RunOptions};

const MS: Duration = Duration::from_millis(1);

type Log = Arc<Mutex<Vec<String>>>;

fn log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

fn push(log: &Log, ctx: &Ctx<'_>, what: impl std::fmt::Display) {
    let t = ctx.tag();
    log.lock().unwrap_or_else(PoisonError::into_inner).push(format!(
        "{}.{} {what}",
        ctx.elapsed().as_millis(),
        t.microstep
    ));
}

fn lines(log: &Log) -> Vec<String> {
    log.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

fn fast(name: &str) -> RunOptions {
    let mut o = RunOptions::new(name);
    o.fast = true;
    o
}

#[test]
fn connections_deliver_at_the_tags_their_delays_say() {
    let l = log();
    let mut p = Program::new("delays");
    p.timeout(30 * MS);
    let f = p.federate("f");
    let (out, i_none, i_zero, i_d) = {
        let mut r = p.reactor(f, "src", 0u32);
        let t = r.timer("t", 10 * MS, 20 * MS);
        let out = r.output::<u32>("out");
        r.reaction("emit").trigger(t).effect(out).body(move |n, ctx| {
            *n += 1;
            ctx.set(out, *n);
        });
        let mut s = p.reactor(f, "dst", ());
        let a = s.input::<u32>("none");
        let b = s.input::<u32>("zero");
        let c = s.input::<u32>("five");
        for (name, i) in [("none", a), ("zero", b), ("five", c)] {
            let l = l.clone();
            s.reaction(name)
                .trigger(i)
                .body(move |_, ctx| push(&l, ctx, format!("{name} {}", ctx.get(i).expect("present"))));
        }
        (out, a, b, c)
    };
    p.connect(out, i_none).connect_after(out, i_zero, Duration::ZERO).connect_after(out, i_d, 5 * MS);
    run_federate(p, fast("f")).expect("runs");
    assert_eq!(lines(&l), vec!["10.0 none 1", "10.1 zero 1", "15.0 five 1", "30.0 none 2"]);
}

#[test]
fn reactions_run_in_level_order_and_in_parallel_when_independent() {
    let l = log();
    let mut p = Program::new("levels");
    p.timeout(Duration::ZERO);
    let f = p.federate("f");
    // Declared in reverse of the data flow: order must come from levels.
    let sink_in = {
        let mut r = p.reactor(f, "sink", ());
        let i = r.input::<u64>("in");
        let l = l.clone();
        r.reaction("print")
            .trigger(i)
            .body(move |_, ctx| push(&l, ctx, format!("sum {}", ctx.get(i).expect("present"))));
        i
    };
    let mut workers = Vec::new();
    for k in 0..4u64 {
        let mut r = p.reactor(f, format!("w{k}"), ());
        let s = r.startup();
        let out = r.output::<u64>("out");
        r.reaction("work").trigger(s).effect(out).body(move |_, ctx| {
            std::thread::sleep(5 * MS);
            ctx.set(out, k + 1);
        });
        workers.push(out);
    }
    let (adder_ins, adder_out) = {
        let mut r = p.reactor(f, "adder", ());
        let ins: Vec<_> = (0..4).map(|k| r.input::<u64>(&format!("in{k}"))).collect();
        let out = r.output::<u64>("out");
        let mut rb = r.reaction("add").effect(out);
        for &i in &ins {
            rb = rb.trigger(i);
        }
        let ins2 = ins.clone();
        rb.body(move |_, ctx| {
            let s: u64 = ins2.iter().filter_map(|&i| ctx.get(i)).sum();
            ctx.set(out, s);
        });
        (ins, out)
    };
    for (o, i) in workers.iter().zip(&adder_ins) {
        p.connect(*o, *i);
    }
    p.connect(adder_out, sink_in);
    let mut o = fast("f");
    o.workers = 4;
    run_federate(p, o).expect("runs");
    assert_eq!(lines(&l), vec!["0.0 sum 10"]);
}

#[test]
fn logical_actions_timers_shutdown_and_stop_requests() {
    let l = log();
    let mut p = Program::new("actions");
    let f = p.federate("f");
    {
        let mut r = p.reactor(f, "r", 0u32);
        let s = r.startup();
        let a = r.logical_action::<u32>("again", 2 * MS);
        let sd = r.shutdown();
        let (l1, l2) = (l.clone(), l.clone());
        r.reaction("go").trigger(s).trigger(a).effect(a).body(move |n, ctx| {
            *n += 1;
            push(&l1, ctx, format!("run {n} value {:?}", ctx.action_value(a)));
            if *n == 3 {
                ctx.request_stop();
            } else {
                ctx.schedule(a, MS, *n * 10);
            }
        });
        r.reaction("bye").trigger(sd).body(move |n, ctx| push(&l2, ctx, format!("shutdown after {n}")));
    }
    run_federate(p, fast("f")).expect("runs");
    assert_eq!(
        lines(&l),
        vec!["0.0 run 1 value None", "3.0 run 2 value Some(10)", "6.0 run 3 value Some(20)", "6.1 shutdown after 3"]
    );
}

#[test]
fn a_program_that_runs_out_of_events_stops_by_itself() {
    let l = log();
    let mut p = Program::new("idle");
    let f = p.federate("f");
    {
        let mut r = p.reactor(f, "r", ());
        let t = r.timer("once", 5 * MS, Duration::ZERO);
        let sd = r.shutdown();
        let (l1, l2) = (l.clone(), l.clone());
        r.reaction("tick").trigger(t).body(move |_, ctx| push(&l1, ctx, "tick"));
        r.reaction("bye").trigger(sd).body(move |_, ctx| push(&l2, ctx, "shutdown"));
    }
    let report = run_federate(p, fast("f")).expect("runs");
    assert_eq!(lines(&l), vec!["5.0 tick", "5.1 shutdown"]);
    assert_eq!(report.tags, 2);
}

#[test]
fn physical_actions_are_scheduled_from_other_threads() {
    let l = log();
    let mut p = Program::new("sensor");
    let f = p.federate("f");
    {
        let mut r = p.reactor(f, "r", 0u32);
        let s = r.startup();
        let a = r.physical_action::<u32>("reading", Duration::ZERO);
        let l1 = l.clone();
        r.reaction("start").trigger(s).body(move |_, ctx| {
            let sched = ctx.physical_scheduler(a);
            std::thread::spawn(move || {
                for k in 1..=3 {
                    std::thread::sleep(2 * MS);
                    sched.schedule(k, Duration::ZERO);
                }
            });
        });
        r.reaction("read").trigger(a).body(move |n, ctx| {
            *n += 1;
            let v = *ctx.physical_value(a).expect("present");
            l1.lock().unwrap_or_else(PoisonError::into_inner).push(format!("reading {v}"));
            assert!(ctx.tag().time <= ctx.physical_time(), "logical time never runs ahead of physical time");
            if *n == 3 {
                ctx.request_stop();
            }
        });
    }
    run_federate(p, RunOptions::new("f")).expect("runs");
    assert_eq!(lines(&l), vec!["reading 1", "reading 2", "reading 3"]);
}

#[test]
fn deadlines_and_undeclared_effects() {
    let l = log();
    let mut p = Program::new("deadline");
    p.timeout(Duration::ZERO);
    let f = p.federate("f");
    {
        let mut r = p.reactor(f, "r", ());
        let s = r.startup();
        let out = r.output::<u32>("out");
        let (l1, l2) = (l.clone(), l.clone());
        r.reaction("slow").trigger(s).body(move |_, ctx| {
            std::thread::sleep(3 * MS);
            // Not declared as an effect: logged and ignored.
            ctx.set(out, 1);
        });
        r.reaction("tight")
            .trigger(s)
            .deadline(MS, move |_, ctx| push(&l1, ctx, "late"))
            .body(move |_, ctx| push(&l2, ctx, "on time"));
    }
    let report = run_federate(p, RunOptions::new("f")).expect("runs");
    assert_eq!(lines(&l), vec!["0.0 late"]);
    assert_eq!(report.deadline_misses, 1);
}

#[test]
fn a_panicking_reaction_fails_the_federate_with_its_name() {
    let mut p = Program::new("panic");
    let f = p.federate("f");
    let mut r = p.reactor(f, "r", ());
    let s = r.startup();
    r.reaction("boom").trigger(s).body(|_, _| panic!("sensor unplugged"));
    match run_federate(p, fast("f")) {
        Err(NodeError::ReactionPanicked { reaction, message }) => {
            assert_eq!(reaction, "f.r.boom");
            assert_eq!(message, "sensor unplugged");
        }
        other => panic!("expected ReactionPanicked, got {other:?}"),
    }
}

#[test]
fn a_reaction_that_fails_stops_the_federate_with_its_message_and_no_effect() {
    let mut p = Program::new("fail");
    let f = p.federate("f");
    let mut r = p.reactor(f, "r", ());
    let s = r.startup();
    let a = r.logical_action::<u32>("again", Duration::ZERO);
    let ran = Arc::new(Mutex::new(0));
    let ran2 = ran.clone();
    r.reaction("again").trigger(a).body(move |_, _| *ran2.lock().unwrap() += 1);
    r.reaction("boom").trigger(s).effect(a).body(move |_, ctx| {
        ctx.schedule(a, Duration::ZERO, 1);
        ctx.fail("ValueError: sensor unplugged");
        ctx.fail("a second failure is not the one reported");
    });
    match run_federate(p, fast("f")) {
        Err(NodeError::ReactionFailed { reaction, message }) => {
            assert_eq!(reaction, "f.r.boom");
            assert_eq!(message, "ValueError: sensor unplugged");
        }
        other => panic!("expected ReactionFailed, got {other:?}"),
    }
    assert_eq!(*ran.lock().unwrap(), 0, "the failed reaction's effects were applied");
}

#[test]
fn program_errors_are_all_reported_at_once() {
    let mut p = Program::new("broken");
    let f = p.federate("f");
    p.federate("f");
    let (o1, o2, i) = {
        let mut r = p.reactor(f, "r", ());
        let o1 = r.output::<u32>("o1");
        let o2 = r.output::<u32>("o2");
        let i = r.input::<u32>("i");
        r.reaction("loop").trigger(i).effect(o1).body(|_, _| {});
        r.reaction("idle").effect(o2).body(|_, _| {});
        (o1, o2, i)
    };
    p.connect(o1, i).connect(o2, i);
    let err = p.validate().expect_err("invalid").to_string();
    for needle in
        ["two federates are named \"f\"", "input f.r.i is connected twice", "has no trigger", "causality loop"]
    {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
    let err = run_federate(p, fast("f")).expect_err("invalid program must not run");
    assert!(matches!(err, NodeError::Program(_)), "{err}");
}

#[test]
fn an_unknown_federate_names_the_known_ones() {
    let mut p = Program::new("one");
    let f = p.federate("camera");
    let mut r = p.reactor(f, "r", ());
    let s = r.startup();
    r.reaction("x").trigger(s).body(|_, _| {});
    let err = run_federate(p, fast("detector")).expect_err("unknown");
    assert_eq!(err.to_string(), "no federate named \"detector\" in program \"one\"; its federates are: camera");
}

#[test]
fn a_reaction_counts_what_it_drops_as_the_runtime_counts_its_losses() {
    // A bridge's reaction given a foreign message it cannot decode sets
    // nothing: `Ctx::lost` makes the drop show where the runtime's own
    // losses do, under the output's path.
    let mut p = Program::new("dropping");
    p.timeout(20 * MS);
    let f = p.federate("f");
    {
        let mut r = p.reactor(f, "bridge", 0u32);
        let t = r.timer("t", Duration::ZERO, 10 * MS);
        let out = r.output::<u32>("out");
        r.reaction("convert").trigger(t).effect(out).body(move |n, ctx| {
            *n += 1;
            if *n % 2 == 1 {
                ctx.lost(out, Loss::Undecodable);
            } else {
                ctx.set(out, *n);
            }
        });
    }
    let report = run_federate(p, fast("f")).expect("runs");
    assert_eq!(report.losses.total(Loss::Undecodable), 2, "{:?}", report.losses);
    assert_eq!(report.losses.summary(), "2 messages lost, 0 late: f.bridge.out: 2 undecodable");
}
