//! Physical actions under centralized coordination, with real processes:
//! `hprm-rti`, `hprm-store`, and one process per federate (this test
//! binary re-run as `federate_child`, which builds the scenario named by
//! `HPRM_TEST_SCENARIO` and runs the federate the launcher names).
//!
//! A physical action takes its tag from physical time, while each NET a
//! federate sends promises the RTI that nothing earlier comes from it.
//! Federate `sensor` schedules a physical action from a thread of its own
//! and sends each value on without delay: to a `sink` (which also has a
//! timer of its own, so it advances as far as its grants allow), or around
//! a loop through `echo` and back, with no delay or `after 0`. Every value
//! must arrive, in order, at the tag it was sent with (one microstep later
//! back through `after 0`), none tardy, and every program stops at its
//! timeout. Runs are real-time: the checks are on tags, never on
//! wall-clock durations; the launcher's timeout only catches a hang.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use hprm_node::launch::{Launch, LaunchReport};
use hprm_node::payload::{Decoder, Encoder, StoreLink};
use hprm_node::{Coordination, Ctx, Program, Tag};

const MS: Duration = Duration::from_millis(1);

/// Values the sensor schedules, one every `PERIOD` from its thread.
const VALUES: u64 = 60;
const PERIOD: Duration = Duration::from_millis(2);
/// Logical (here: physical) time the program runs: far longer than the
/// sensor needs, so a busy machine only delays the values.
const TIMEOUT: Duration = Duration::from_secs(3);

/// Records `what` at the current tag: "NS MICROSTEP what", NS since the start.
fn record(ctx: &Ctx<'_>, what: impl std::fmt::Display) {
    let t = ctx.tag();
    support::child::record(format!("{} {} {what}", t.time - ctx.start_time(), t.microstep));
}

// ---------------------------------------------------------------- scenarios

/// How the echo's value comes back to the sensor.
#[derive(Clone, Copy)]
enum Back {
    None,
    /// No delay: a zero-delay cycle (provisional grants).
    ZeroDelay,
    /// `after 0`: one microstep later.
    After0,
}

fn program(name: &str, back: Back) -> Program {
    let mut p = Program::new(name);
    p.coordination(Coordination::Centralized).timeout(TIMEOUT);
    let sensor = p.federate("sensor");
    let other = p.federate(if matches!(back, Back::None) { "sink" } else { "echo" });
    let (out, ret) = {
        let mut r = p.reactor(sensor, "s", ());
        let start = r.startup();
        let reading = r.physical_action::<u64>("reading", Duration::ZERO);
        let out = r.output::<u64>("out");
        let ret = r.input::<u64>("ret");
        let sd = r.shutdown();
        r.reaction("start").trigger(start).body(move |_, ctx| {
            let s = ctx.physical_scheduler(reading);
            std::thread::spawn(move || {
                for v in 1..=VALUES {
                    std::thread::sleep(PERIOD);
                    s.schedule(v, Duration::ZERO);
                }
            });
        });
        r.reaction("emit").trigger(reading).effect(out).body(move |_, ctx| {
            let v = *ctx.physical_value(reading).expect("triggered by reading");
            record(ctx, format!("sent {v}"));
            ctx.set(out, v);
        });
        r.reaction("back").trigger(ret).body(move |_, ctx| {
            let v = *ctx.get(ret).expect("triggered by ret");
            record(ctx, format!("back {v}"));
        });
        r.reaction("bye").trigger(sd).body(|_, ctx| record(ctx, "shutdown"));
        (out, ret)
    };
    let (inp, echoed) = {
        let mut r = p.reactor(other, "r", ());
        let inp = r.input::<u64>("in");
        let echoed = r.output::<u64>("out");
        let sd = r.shutdown();
        r.reaction("got").trigger(inp).effect(echoed).body(move |_, ctx| {
            let v = *ctx.get(inp).expect("triggered by in");
            record(ctx, format!("got {v}"));
            ctx.set(echoed, v);
        });
        r.reaction("bye").trigger(sd).body(|_, ctx| record(ctx, "shutdown"));
        (inp, echoed)
    };
    {
        // Events of the receiver's own: it advances its tags as far as its
        // grants allow, so a value tagged earlier than promised would find
        // the tag passed.
        let mut r = p.reactor(other, "clock", 0u64);
        let t = r.timer("t", Duration::ZERO, MS);
        r.reaction("tick").trigger(t).body(|n, _| *n += 1);
    }
    p.connect(out, inp);
    match back {
        Back::None => {}
        Back::ZeroDelay => {
            p.connect(echoed, ret);
        }
        Back::After0 => {
            p.connect_after(echoed, ret, Duration::ZERO);
        }
    }
    p
}

fn scenario(name: &str) -> Program {
    match name {
        "feed" => program(name, Back::None),
        "loop" => program(name, Back::ZeroDelay),
        "loop-after0" => program(name, Back::After0),
        other => panic!("unknown scenario {other}"),
    }
}

/// The federate process: run by the launcher through `federate_command`.
#[test]
#[ignore = "run as a federate process by the other tests"]
fn federate_child() {
    support::child::run(scenario, |r| vec![format!("report tardy {}", r.tardy)]);
}

struct Run {
    report: LaunchReport,
    traces: BTreeMap<String, Vec<String>>,
    /// Each process's output (`hprm-rti.log`, `sensor.log`, ...).
    logs: BTreeMap<String, String>,
    _dir: tempfile::TempDir,
}

impl Run {
    fn trace(&self, fed: &str) -> &[String] {
        self.traces
            .get(fed)
            .map(Vec::as_slice)
            .unwrap_or_else(|| panic!("no trace from {fed}; traces: {:?}", self.traces.keys()))
    }

    /// `(tag time since the start, microstep, value)` of each line `what V`.
    fn values(&self, fed: &str, what: &str) -> Vec<(i64, u32, u64)> {
        self.trace(fed)
            .iter()
            .filter_map(|l| {
                let w: Vec<&str> = l.split(' ').collect();
                match w.as_slice() {
                    [t, m, word, v] if *word == what => Some((t.parse().ok()?, m.parse().ok()?, v.parse().ok()?)),
                    _ => None,
                }
            })
            .collect()
    }

    /// Checks every process ended well: exit 0, no tardy message counted by
    /// a federate or logged by the RTI, a shutdown at the timeout.
    fn assert_clean(&self) {
        for (name, status) in &self.report.federates {
            assert!(
                status.success(),
                "federate {name} exited with {status}; traces: {:#?}\nlogs: {:#?}",
                self.traces,
                self.logs
            );
        }
        assert_eq!(self.report.rti.and_then(|s| s.code()), Some(0), "{:#?}", self.logs);
        for (name, log) in &self.logs {
            assert!(!log.contains("STP violation"), "{name} logged a tardy message:\n{log}");
        }
        for fed in self.traces.keys() {
            assert!(self.trace(fed).iter().any(|l| l == "report tardy 0"), "{fed}: {:?}", self.trace(fed));
            let end = format!("{} 0 shutdown", TIMEOUT.as_nanos());
            assert!(self.trace(fed).contains(&end), "{fed} did not stop at its timeout: {:?}", self.trace(fed));
        }
    }
}

fn launch(name: &str) -> Run {
    let bin_dir = support::rti_bin().parent().expect("bin dir").to_path_buf();
    let _ = support::store_bin();
    std::env::set_var("HPRM_BIN_DIR", &bin_dir);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().to_path_buf();
    let logs = dir.path().join("logs");
    let scen = name.to_string();
    let launcher = Launch {
        store_memory: "16m".into(),
        federate_command: Some(Box::new(move |_fed: &str| support::child::command(&scen, &out, &[]))),
        // Only a hang takes this long.
        timeout: Some(Duration::from_secs(120)),
        prefix_logs: true,
        log_dir: Some(logs.clone()),
        // Local processes hear the start time in far less than LF's 1 s.
        rti_args: vec!["--start-delay-ms".into(), "200".into()],
        ..Launch::default()
    };
    let report = launcher.run(&scenario(name)).expect("launch");
    Run {
        report,
        traces: support::child::read_traces(dir.path()),
        logs: support::child::read_dir(&logs, "log"),
        _dir: dir,
    }
}

/// Every value, in order, each at the tag it was sent with (plus `micro`
/// microsteps).
fn assert_every_value(sent: &[(i64, u32, u64)], got: &[(i64, u32, u64)], micro: u32) {
    let values: Vec<u64> = sent.iter().map(|s| s.2).collect();
    assert_eq!(values, (1..=VALUES).collect::<Vec<_>>(), "the sensor sent {sent:?}");
    let expect: Vec<(i64, u32, u64)> = sent.iter().map(|&(t, m, v)| (t, m + micro, v)).collect();
    assert_eq!(got, expect.as_slice());
}

// -------------------------------------------------------------------- tests

/// Physical action -> another federate, no delay: no value is tardy.
#[test]
fn physical_action_values_reach_a_downstream_federate_on_time() {
    let run = launch("feed");
    run.assert_clean();
    assert_every_value(&run.values("sensor", "sent"), &run.values("sink", "got"), 0);
}

/// Physical action -> echo -> back, a zero-delay cycle: no stall, every
/// value comes back at its own tag.
#[test]
fn a_zero_delay_loop_fed_by_a_physical_action_does_not_stall() {
    let run = launch("loop");
    run.assert_clean();
    let sent = run.values("sensor", "sent");
    assert_every_value(&sent, &run.values("echo", "got"), 0);
    assert_every_value(&sent, &run.values("sensor", "back"), 0);
}

/// The same loop with `after 0` on the way back: values come back one
/// microstep later.
#[test]
fn a_loop_with_after_0_fed_by_a_physical_action_does_not_stall() {
    let run = launch("loop-after0");
    run.assert_clean();
    let sent = run.values("sensor", "sent");
    assert_every_value(&sent, &run.values("echo", "got"), 0);
    assert_every_value(&sent, &run.values("sensor", "back"), 1);
}

// ------------------------------------------------- recording and replaying

/// The payload codec, without a store (the values here are small).
fn codec() -> (Encoder, Decoder) {
    (
        Encoder::new(StoreLink::new(None), hprm_node::payload::DEFAULT_THRESHOLD),
        Decoder::new(StoreLink::new(None), Duration::from_secs(1)),
    )
}

/// A one-federate program: a thread schedules `values` on physical action
/// `app.s.reading` (u64, one every 2 ms) and the reaction keeps each value
/// with its tag (since the start), stopping the program after `stop_after`.
/// What a reaction saw: each value with its tag (since the start).
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(Tag, u64)>>>;

fn sensed(values: Vec<u64>, stop_after: usize) -> (Program, Seen) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut p = Program::new("app");
    let fed = p.federate("app");
    let mut r = p.reactor(fed, "s", ());
    let start = r.startup();
    let reading = r.physical_action::<u64>("reading", Duration::ZERO);
    r.reaction("start").trigger(start).body(move |_, ctx| {
        let s = ctx.physical_scheduler(reading);
        let values = values.clone();
        std::thread::spawn(move || {
            for v in values {
                std::thread::sleep(2 * MS);
                s.schedule(v, Duration::ZERO);
            }
        });
    });
    let kept = seen.clone();
    r.reaction("take").trigger(reading).body(move |_, ctx| {
        let v = *ctx.physical_value(reading).expect("triggered by reading");
        let t = ctx.tag();
        let mut kept = kept.lock().unwrap();
        kept.push((Tag::new(t.time - ctx.start_time(), t.microstep), v));
        if kept.len() == stop_after {
            ctx.request_stop();
        }
    });
    (p, seen)
}

/// Under a recorder (this test stands in for `hprm launch --record`'s),
/// each value scheduled on a typed physical action goes to it, encoded, at
/// the tag it took.
#[test]
fn physical_action_values_go_to_the_recorder_at_their_tags() {
    use hprm_node::record::{Header, Hello, Listener, Selection, END};
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rec.sock");
    let listener = Listener::bind(&socket).unwrap();
    let recorder = std::thread::spawn(move || {
        let mut conn = loop {
            match listener.accept().unwrap() {
                Some(c) => break c,
                None => std::thread::sleep(MS),
            }
        };
        let hello: Hello = serde_json::from_slice(conn.recv().unwrap().unwrap()).unwrap();
        conn.select(&Selection { ports: vec![0] }).unwrap();
        let mut frames = Vec::new();
        while let Some(frame) = conn.recv().unwrap() {
            let (h, payload) = Header::decode(frame).unwrap();
            if h.port == END {
                break;
            }
            frames.push((h, codec().1.decode::<u64>(payload).unwrap()));
        }
        (hello, frames)
    });
    let (program, seen) = sensed(vec![11, 22, 33], 3);
    let mut opts = hprm_node::RunOptions::new("app");
    opts.record = Some((socket, hprm_node::Backpressure::Fail));
    let report = hprm_node::run_federate(program, opts).expect("run");
    let (hello, frames) = recorder.join().unwrap();
    assert_eq!((hello.ports.len(), hello.physical), (0, vec!["app.s.reading".to_string()]));
    assert!(report.final_tag.is_some());
    let recorded: Vec<(u32, u64)> = frames.iter().map(|(h, v)| (h.port, *v)).collect();
    assert_eq!(recorded, vec![(0, 11), (0, 22), (0, 33)]);
    // The tags the reaction saw are the recorded ones.
    let seen = seen.lock().unwrap().clone();
    let tags: Vec<Tag> = frames.iter().map(|(h, _)| Tag::new(h.tag.time - hello.start, h.tag.microstep)).collect();
    assert_eq!(seen.iter().map(|(t, _)| *t).collect::<Vec<_>>(), tags);
}

/// In a replay, the recorded values come at their recorded tags (microsteps
/// included), and what the live thread schedules is dropped.
#[test]
fn a_replay_feeds_recorded_values_and_drops_live_ones() {
    use hprm_node::record::{PhysicalEvent, PhysicalEvents};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("physical.bin");
    let recorded = vec![(Tag::new(5_000_000, 0), 7u64), (Tag::new(5_000_000, 1), 8), (Tag::new(9_000_000, 0), 9)];
    let mut out = Vec::new();
    for (tag, v) in &recorded {
        let payload = codec().0.encode(v, 0).unwrap();
        PhysicalEvents::write(&mut out, &PhysicalEvent { action: "app.s.reading".into(), tag: *tag, payload }).unwrap();
    }
    std::fs::write(&file, out).unwrap();
    let (program, seen) = sensed(vec![1000, 2000, 3000], 3);
    let mut opts = hprm_node::RunOptions::new("app");
    opts.fast = true;
    opts.physical = Some(file);
    hprm_node::run_federate(program, opts).expect("replay");
    assert_eq!(*seen.lock().unwrap(), recorded);
}

/// A physical action whose type cannot be encoded cannot be recorded: the
/// federate refuses to start, naming it.
#[test]
fn an_opaque_physical_action_is_refused_under_a_recorder() {
    let mut p = Program::new("app");
    let fed = p.federate("app");
    let mut r = p.reactor(fed, "s", ());
    let handle = r.opaque_physical_action::<std::sync::mpsc::Sender<()>>("handle", Duration::ZERO);
    r.reaction("take").trigger(handle).body(|_, _| {});
    let mut opts = hprm_node::RunOptions::new("app");
    opts.record = Some((std::path::PathBuf::from("/nonexistent/rec.sock"), hprm_node::Backpressure::Fail));
    let Err(e) = hprm_node::run_federate(p, opts) else { panic!("a recorded opaque physical action ran") };
    let e = e.to_string();
    assert!(e.contains("cannot record physical actions app.s.handle") && e.contains("opaque_physical_action"), "{e}");
}
