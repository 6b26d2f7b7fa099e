//! Observing running programs: `--trace` (Chrome trace of every reaction,
//! grant and store transfer), the status files `hprm ps` reads, and taps
//! (`hprm topic`). Each test launches the real `counter` example (a store,
//! an RTI and two federate processes) in a private runtime directory.

mod support;

use support::process::{finish, wait_for};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hprm_node::payload::{Decoder, StoreLink};
use hprm_node::status;
use hprm_node::tap::{Next, TapClient};

/// The `counter` example binary, built if missing.
fn counter() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let path = exe.parent().and_then(Path::parent).map(|d| d.join("examples").join("counter")).expect("target dir");
    if !path.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "hprm-node", "--example", "counter"])
            .status()
            .expect("cargo");
        assert!(status.success(), "building the counter example failed");
    }
    path
}

/// Starts `counter ARGS` as its own launcher, with `runtime` as its
/// `XDG_RUNTIME_DIR`; its output (federates' lines prefixed) on stderr.
fn launch(args: &[&str], runtime: &Path) -> Child {
    let bins = support::store_bin().parent().expect("bin dir").to_path_buf();
    support::rti_bin();
    Command::new(counter())
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime)
        .env("HPRM_BIN_DIR", bins)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the counter example")
}

/// The numbers after `key` in the line of `log` that contains `marker`.
fn number_after(log: &str, marker: &str, key: &str) -> u64 {
    let line = log.lines().find(|l| l.contains(marker)).unwrap_or_else(|| panic!("no line with {marker:?} in:\n{log}"));
    let rest = line.split(key).nth(1).unwrap_or_else(|| panic!("no {key:?} in {line:?}"));
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {key:?} in {line:?}"))
}

fn sigint(child: &Child) {
    // SAFETY: kill(2) on a child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
}

/// A run with `--trace`: the merged file is Chrome trace JSON whose
/// reaction events are exactly the reactions the run reports (per
/// reaction, as counted by the program itself, and per federate, as its
/// run report says), with grants from the RTI and to the federate, NET/LTC,
/// and one store put and get per frame.
#[test]
fn trace_holds_every_reaction_grants_and_store_transfers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("trace.json");
    let log = finish(
        launch(&["--fast", "--ticks", "60", "--trace", file.to_str().expect("utf-8")], dir.path()),
        Duration::from_secs(60),
    );
    let sent = number_after(&log, "source: sent", "sent");
    let frames = number_after(&log, "source: sent", "counts,");
    let got = number_after(&log, "sink: got", "got");
    assert_eq!((sent, got, frames), (61, 61, 7), "{log}");

    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("the trace file")).expect("valid JSON");
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    let mut process_names = std::collections::HashMap::new();
    for e in events {
        assert!(
            e["pid"].is_u64() && e["tid"].is_u64() && e["name"].is_string() && e["ph"].is_string(),
            "malformed event {e}"
        );
        match e["ph"].as_str() {
            Some("M") => {
                if e["name"] == "process_name" {
                    process_names.insert(
                        e["pid"].as_u64().unwrap_or_default(),
                        e["args"]["name"].as_str().unwrap_or_default().to_string(),
                    );
                }
            }
            Some("X") => assert!(
                e["ts"].as_f64().is_some() && e["dur"].as_f64().is_some_and(|d| d >= 0.0),
                "complete event without ts/dur: {e}"
            ),
            Some("i") => assert!(e["ts"].as_f64().is_some(), "instant event without ts: {e}"),
            other => panic!("unexpected phase {other:?} in {e}"),
        }
    }
    let named =
        |pid: &serde_json::Value| process_names.get(&pid.as_u64().unwrap_or_default()).cloned().unwrap_or_default();
    let count = |name: &str, cat: &str| events.iter().filter(|e| e["name"] == name && e["cat"] == cat).count() as u64;
    assert_eq!(count("source.counter.tick", "reaction"), sent);
    assert_eq!(count("sink.summer.add", "reaction"), got);
    assert_eq!(count("sink.summer.look", "reaction"), frames);
    assert_eq!(count("source.counter.bye", "reaction") + count("sink.summer.bye", "reaction"), 2);
    for fed in ["source", "sink"] {
        let reported = number_after(&log, &format!("lost or late federate={fed} "), "reactions=");
        let traced = events.iter().filter(|e| e["cat"] == "reaction" && named(&e["pid"]) == fed).count() as u64;
        assert_eq!(traced, reported, "{fed}: reactions in the trace vs its run report");
        let tag = events.iter().find(|e| e["cat"] == "reaction" && named(&e["pid"]) == fed).expect("a reaction")
            ["args"]["tag_ns"]
            .clone();
        assert!(tag.is_i64(), "reaction args carry the tag: {tag}");
    }
    let grants = |process: &str| events.iter().filter(|e| e["cat"] == "grant" && named(&e["pid"]) == process).count();
    assert!(grants("hprm-rti") > 0 && grants("sink") > 0, "grants sent by the RTI and received by the sink");
    assert!(count("NET", "coordination") > 0 && count("LTC", "coordination") > 0);
    assert_eq!(count("store put", "store"), frames);
    assert_eq!(count("store get", "store"), frames);
    assert!(
        events.iter().any(|e| e["name"] == "thread_name" && e["args"]["name"] == "grants to sink"),
        "RTI threads named after federates"
    );
}

/// `hprm ps`'s data: a running program is listed with its launcher, and
/// every federate with a live pid and a tag that advances; once it
/// stops, it is gone.
#[test]
fn status_lists_a_running_program_and_its_federates() {
    let runtime = tempfile::tempdir().expect("tempdir");
    let child = launch(&[], runtime.path());
    let first = wait_for(Duration::from_secs(30), "both federates publish a status", || {
        let found = status::scan(runtime.path());
        let running = found.into_iter().next()?;
        running.federates.iter().all(|f| f.status.is_some()).then_some(running)
    });
    assert_eq!(first.launch.program, "counter");
    assert_eq!(first.launch.pid, child.id());
    let names: Vec<&str> = first.federates.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["source", "sink"]);
    for f in &first.federates {
        assert!(f.alive && f.pid != 0 && f.pid != child.id(), "{f:?}");
    }
    let tag_of = |r: &status::Running, fed: &str| {
        r.federates.iter().find(|f| f.name == fed).and_then(|f| f.status.as_ref()).map(|s| s.tag_ns)
    };
    let before = (tag_of(&first, "source"), tag_of(&first, "sink"));
    wait_for(Duration::from_secs(10), "every federate's tag advances", || {
        let now = status::scan(runtime.path()).into_iter().next()?;
        (tag_of(&now, "source") > before.0 && tag_of(&now, "sink") > before.1).then_some(())
    });
    let sink = status::scan(runtime.path())
        .into_iter()
        .next()
        .and_then(|r| r.federates.into_iter().find(|f| f.name == "sink"))
        .and_then(|f| f.status)
        .expect("sink status");
    assert!(sink.messages_in > 0, "{sink:?}");
    sigint(&child);
    finish(child, Duration::from_secs(30));
    assert!(status::scan(runtime.path()).is_empty(), "a stopped program is not listed");
}

/// A tap on `source.count` sees the counts the source sends, in order, up
/// to the last one; the program's own result is the one it always
/// computes (the tap does not disturb it). A tap on a port that does not
/// leave the federate is refused with the ports that can be tapped.
#[test]
fn tap_sees_what_a_port_sends_without_changing_the_result() {
    let runtime = tempfile::tempdir().expect("tempdir");
    let ticks = 300u64;
    let child = launch(&["--ticks", &ticks.to_string()], runtime.path());
    let dir = wait_for(Duration::from_secs(30), "the program's runtime directory", || {
        status::scan(runtime.path()).into_iter().next().map(|r| r.launch.runtime_dir)
    });
    let mut tap =
        wait_for(Duration::from_secs(30), "a tap attaches", || TapClient::attach(&dir, "source", "count").ok());
    assert_eq!(tap.port, "source.counter.count");
    let refused = TapClient::attach(&dir, "source", "nope").err().expect("no such port").to_string();
    assert!(refused.contains("source.counter.count") && refused.contains("source.counter.frame"), "{refused}");

    let decoder = Decoder::new(StoreLink::none(), Duration::from_secs(1));
    let mut seen: Vec<(u64, i64)> = Vec::new();
    let mut dropped = 0;
    loop {
        match tap.next(Some(Duration::from_secs(20))).expect("tap read") {
            Next::Message(m) => {
                let v: u64 = decoder.decode(&m.payload).expect("a count");
                seen.push((v, m.elapsed_ns));
                dropped = m.dropped;
            }
            Next::Closed => break,
            Next::Timeout => panic!("no message for 20 s"),
        }
    }
    let log = finish(child, Duration::from_secs(30));
    assert!(!seen.is_empty());
    assert_eq!(seen.last().map(|s| s.0), Some(ticks), "the tap saw the last count");
    if dropped == 0 {
        for w in seen.windows(2) {
            assert_eq!(w[1].0, w[0].0 + 1, "consecutive counts");
        }
    }
    for (v, elapsed) in &seen {
        assert_eq!(*elapsed, *v as i64 * 10_000_000, "count {v} is sent at its tag");
    }
    assert_eq!(number_after(&log, "sink: got", "got"), ticks + 1);
    assert_eq!(number_after(&log, "sink: got", "sum"), ticks * (ticks + 1) / 2);
}

/// A holding tap (as `hprm foxglove` attaches one) on `source.frame`,
/// whose 64 KiB frames travel through the store: each held message's
/// object is read where it lies, with the bytes the source sent; while
/// the tap keeps [`MAX_HELD`] messages unreleased the next ones come
/// unheld, and once it releases them they come held again; the sink reads
/// every frame undamaged (it checks each), so the tap's deliveries never
/// settled one of its own.
#[test]
fn a_holding_tap_reads_frames_in_the_store_and_holds_at_most_max_held() {
    use hprm_node::tap::MAX_HELD;
    let runtime = tempfile::tempdir().expect("tempdir");
    let child = launch(&["--ticks", "400"], runtime.path());
    let running = wait_for(Duration::from_secs(30), "the program's runtime directory", || {
        status::scan(runtime.path()).into_iter().next()
    });
    let (dir, store) = (running.launch.runtime_dir, running.launch.store.expect("a store").socket);
    let decoder = Decoder::new(StoreLink::new(Some(store)), Duration::from_secs(10));
    let mut tap = wait_for(Duration::from_secs(30), "a holding tap attaches", || {
        TapClient::attach_holding(&dir, "source", "frame", decoder.clone()).ok()
    });
    assert!(tap.holds(), "a federate with a store lets a tap hold");
    let mut kept = Vec::new();
    let (mut released, mut unheld_while_full, mut after, mut held_after) = (false, 0, 0, 0);
    loop {
        let m = match tap.next(Some(Duration::from_secs(20))).expect("tap read") {
            Next::Message(m) => m,
            Next::Closed => break,
            Next::Timeout => panic!("no message for 20 s"),
        };
        let n = m.elapsed_ns / 10_000_000;
        if let Some(h) = &m.held {
            let ids = Decoder::references(h.message(&m.payload)).expect("a valid message");
            let data = h.object(&ids[0]).expect("the frame's object is held");
            assert!(
                data.len() == 64 << 10 && data.iter().all(|b| i64::from(*b) == n % 251),
                "frame {n} read in the store"
            );
        }
        if released {
            after += 1;
            held_after += u64::from(m.held.is_some());
            continue;
        }
        // Kept, not released: the first MAX_HELD are held, the next ones cannot be.
        if kept.len() as u64 >= MAX_HELD {
            unheld_while_full += u64::from(m.held.is_none());
        }
        kept.push(m);
        if kept.len() as u64 == MAX_HELD + 2 {
            assert_eq!(kept.iter().filter(|m| m.held.is_some()).count() as u64, MAX_HELD, "{kept:?}");
            // Released (the objects, then the count): later ones are held again.
            kept.clear();
            released = true;
        }
    }
    let log = finish(child, Duration::from_secs(30));
    assert_eq!(unheld_while_full, 2, "beyond {MAX_HELD} unreleased, messages come unheld");
    assert!(after > 0 && held_after == after, "held again once released: {held_after} of {after}");
    // The sink checked every frame (a damaged one fails it) and got them all.
    let frames = |who: &str| {
        let line = log.lines().find(|l| l.contains(who)).unwrap_or_else(|| panic!("no {who:?} in:\n{log}"));
        line.rsplit(", ").next().and_then(|f| f.trim().strip_suffix(" frames")).map(str::to_owned)
    };
    assert_eq!(frames("source: sent"), frames("sink: got"), "{log}");
}
