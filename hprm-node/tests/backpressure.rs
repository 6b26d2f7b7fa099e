//! Backpressure policies with real processes (a launched program: store,
//! RTI, federates): a slow receiver and a source that outruns it, under
//! `keep-last-N`, `block` and `fail`; every message given up is counted in
//! the federates' losses, and what was delivered plus what was counted is
//! what was sent.

mod support;

use std::time::Duration;

use hprm_node::launch::{Launch, LaunchReport};
use hprm_node::payload::Buffer;
use hprm_node::{Backpressure, Program};

const MS: Duration = Duration::from_millis(1);
/// Messages the source sends (one per 1 ms timer tick, fast mode).
const SENT: usize = 16;

/// A source sending `SENT` values of `bytes` bytes (a store object from
/// 64 KiB) as fast as logical time goes, and a receiver taking `work` per
/// message, under `policy`.
fn outrun(name: &str, policy: Backpressure, bytes: usize, work: Duration) -> Program {
    let mut p = Program::new(name);
    p.timeout((SENT as u32 - 1) * MS);
    let src = p.federate("source");
    let dst = p.federate("receiver");
    let out = {
        let mut r = p.reactor(src, "s", 0u8);
        let t = r.timer("t", Duration::ZERO, MS);
        let out = r.output::<(u8, Buffer)>("out");
        r.reaction("send").trigger(t).effect(out).body(move |n, ctx| {
            *n += 1;
            ctx.set(out, (*n, Buffer::from_vec(vec![*n; bytes])));
        });
        out
    };
    let inp = {
        let mut r = p.reactor(dst, "r", ());
        let i = r.input::<(u8, Buffer)>("in");
        r.reaction("take").trigger(i).body(move |_, ctx| {
            let (n, data) = ctx.get(i).expect("present");
            let intact = data.bytes().iter().all(|b| b == n);
            std::thread::sleep(work);
            support::child::record(format!("got {n} intact {intact}"));
        });
        i
    };
    p.connect(out, inp);
    p.backpressure(out, policy);
    p
}

fn scenario(name: &str) -> Program {
    match name {
        "keep-last" => outrun(name, Backpressure::KeepLast(2), 8, 5 * MS),
        // 1 MiB messages into a 4 MiB store, for a receiver taking 20 ms each.
        "block" => outrun(name, Backpressure::Block { bound: Duration::from_secs(10) }, 1 << 20, 20 * MS),
        "fail" => outrun(name, Backpressure::Fail, 1 << 20, 20 * MS),
        // 64 KiB messages (the largest the store client may place in blocks
        // it reserved ahead) into a 512 KiB store.
        "block-small" => outrun(name, Backpressure::Block { bound: Duration::from_secs(10) }, SMALL, 20 * MS),
        "fail-small" => outrun(name, Backpressure::Fail, SMALL, 20 * MS),
        other => panic!("unknown scenario {other}"),
    }
}

/// The largest value of the store client's reserved blocks, the smallest
/// that travels through the store.
const SMALL: usize = 64 << 10;

fn store_memory(name: &str) -> &'static str {
    if name.ends_with("-small") {
        "512k"
    } else {
        "4m"
    }
}

#[test]
#[ignore = "run as a federate process by the other tests"]
fn federate_child() {
    support::child::run(scenario, |r| {
        let mut lines = vec![format!("losses {}", r.losses.summary())];
        for (port, c) in &r.losses.0 {
            lines.push(format!("lost {port} dropped {} unsent {}", c.dropped, c.unsent));
        }
        lines
    });
}

struct Run {
    report: LaunchReport,
    traces: std::collections::BTreeMap<String, Vec<String>>,
    _dir: tempfile::TempDir,
}

impl Run {
    fn lines(&self, fed: &str, prefix: &str) -> Vec<&str> {
        self.traces.get(fed).into_iter().flatten().filter(|l| l.starts_with(prefix)).map(String::as_str).collect()
    }

    /// (dropped, unsent) counted by `fed` for `port`.
    fn lost(&self, fed: &str, port: &str) -> (usize, usize) {
        let Some(line) = self.lines(fed, &format!("lost {port} ")).first().copied() else { return (0, 0) };
        let words: Vec<&str> = line.split(' ').collect();
        (words[3].parse().expect("dropped"), words[5].parse().expect("unsent"))
    }

    /// The values the receiver got, each checked intact.
    fn received(&self) -> Vec<u8> {
        self.lines("receiver", "got ")
            .iter()
            .map(|l| {
                assert!(l.ends_with("intact true"), "{l}");
                l.split(' ').nth(1).and_then(|n| n.parse().ok()).expect("value")
            })
            .collect()
    }
}

fn launch(name: &str) -> Run {
    let bin_dir = support::rti_bin().parent().expect("bin dir").to_path_buf();
    let _ = support::store_bin();
    std::env::set_var("HPRM_BIN_DIR", &bin_dir);
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, scen) = (dir.path().to_path_buf(), name.to_string());
    let launcher = Launch {
        fast: true,
        store_memory: store_memory(name).into(),
        federate_command: Some(Box::new(move |_fed: &str| support::child::command(&scen, &out, &[]))),
        timeout: Some(Duration::from_secs(60)),
        prefix_logs: true,
        ..Launch::default()
    };
    let report = launcher.run(&scenario(name)).expect("launch");
    let traces = support::child::read_traces(dir.path());
    let run = Run { report, traces, _dir: dir };
    for (fed, status) in &run.report.federates {
        assert!(status.success(), "federate {fed} exited with {status}; traces: {:#?}", run.traces);
    }
    run
}

#[test]
fn keep_last_drops_the_oldest_of_a_slow_receivers_backlog_and_counts_them() {
    let run = launch("keep-last");
    let got = run.received();
    let (dropped, _) = run.lost("receiver", "receiver.r.in");
    assert_eq!(got.len() + dropped, SENT, "every message delivered or counted as dropped: got {got:?}");
    assert!(dropped > 0, "a receiver 5x slower than its source kept everything: {got:?}");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order: {got:?}");
    assert_eq!(got.last(), Some(&(SENT as u8)), "the newest message is never the one dropped");
    assert_eq!(
        run.lines("receiver", "losses")[0],
        format!("losses {dropped} messages lost, 0 late: receiver.r.in: {dropped} dropped")
    );
}

#[test]
fn block_waits_for_space_and_loses_nothing() {
    let run = launch("block");
    assert_eq!(run.received(), (1..=SENT as u8).collect::<Vec<_>>());
    assert_eq!(run.lines("source", "losses"), ["losses no messages lost or late"]);
    assert_eq!(run.lines("receiver", "losses"), ["losses no messages lost or late"]);
}

#[test]
fn fail_refuses_what_does_not_fit_and_counts_it_unsent() {
    let run = launch("fail");
    let got = run.received();
    let (_, unsent) = run.lost("source", "source.s.out");
    assert!(unsent > 0, "16 MiB through a 4 MiB store to a slow receiver all fit: {got:?}");
    assert_eq!(got.len() + unsent, SENT, "every message delivered or counted as unsent: got {got:?}");
}

#[test]
fn block_waits_for_space_for_small_objects_too() {
    // Small objects may go in blocks the store client reserved ahead, with
    // no round trip; when no block can be had, `block` must still wait for
    // room rather than fail. `fail` on the same run shows the store fills.
    let run = launch("block-small");
    assert_eq!(run.received(), (1..=SENT as u8).collect::<Vec<_>>());
    assert_eq!(run.lines("source", "losses"), ["losses no messages lost or late"]);
    let run = launch("fail-small");
    let (_, unsent) = run.lost("source", "source.s.out");
    assert!(unsent > 0, "16 x 64 KiB through a 512 KiB store to a slow receiver all fit: {:?}", run.received());
}
