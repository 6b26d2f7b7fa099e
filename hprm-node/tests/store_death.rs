//! The store dying in the middle of a program, with real processes: the
//! launcher's `hprm-store` and `hprm-rti`, and three federate processes
//! (this test binary re-run as `federate_child`). A camera sends a 100 kB
//! frame (out-of-band, through the store) every 2 ms to two receivers; the
//! test kills the store with SIGKILL once frames flow. Then: each federate
//! says so once, the launcher restarts the store, the federates reconnect
//! and frames flow again; the deliveries lost are counted (and the count
//! is exactly what the receivers missed); the launch exits with
//! `DAEMON_LOST` and says what was lost; nothing is left behind.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use hprm_node::launch::{exit_code, Launch};
use hprm_node::payload::Buffer;
use hprm_node::{Program, RunReport};

const PERIOD: Duration = Duration::from_millis(2);
/// Long enough for frames to flow before the kill (federates publish their
/// status once a second) and for many to flow after the restart.
const RUN: Duration = Duration::from_secs(5);
const FRAME_BYTES: usize = 100_000;
const RECEIVERS: [&str; 2] = ["left", "right"];

fn record(line: String) {
    support::child::record(line);
}

fn program() -> Program {
    let mut p = Program::new("storedeath");
    p.timeout(RUN);
    let cam = p.federate("camera");
    let out = {
        let mut r = p.reactor(cam, "c", 0u64);
        let t = r.timer("t", Duration::ZERO, PERIOD);
        let out = r.output::<(u64, Buffer)>("frame");
        r.reaction("capture").trigger(t).effect(out).body(move |n, ctx| {
            *n += 1;
            record(format!("sent {n}"));
            ctx.set(out, (*n, Buffer::from_vec(vec![*n as u8; FRAME_BYTES])));
        });
        out
    };
    for name in RECEIVERS {
        let fed = p.federate(name);
        let i = {
            let mut r = p.reactor(fed, "d", ());
            let i = r.input::<(u64, Buffer)>("frame");
            r.reaction("detect").trigger(i).body(move |_, ctx| {
                let (n, frame) = ctx.get(i).expect("present");
                let intact = frame.bytes().len() == FRAME_BYTES && frame.bytes().iter().all(|b| *b == *n as u8);
                assert!(intact, "frame {n} arrived damaged");
                record(format!("got {n}"));
            });
            i
        };
        p.connect(out, i);
    }
    p
}

/// The federate process: run by the launcher through `federate_command`.
#[test]
#[ignore = "run as a federate process by the other tests"]
fn federate_child() {
    // Its log (RUST_LOG=warn) goes to the launcher's log directory.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    support::child::run(
        |_| program(),
        |r: &RunReport| {
            vec![format!(
                "report store_lost {} encode_errors {} decode_errors {}",
                r.losses.total(hprm_node::loss::Loss::StoreLost),
                r.encode_errors,
                r.decode_errors
            )]
        },
    );
}

/// The numbers after `word` in `lines` (`sent 12` -> 12).
fn numbers(lines: &[String], word: &str) -> BTreeSet<u64> {
    lines.iter().filter_map(|l| l.strip_prefix(word)?.trim().parse().ok()).collect()
}

fn report_field(lines: &[String], field: &str) -> u64 {
    let line = lines.iter().find(|l| l.starts_with("report ")).unwrap_or_else(|| panic!("no report in {lines:?}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == field).unwrap_or_else(|| panic!("no {field} in {line}"));
    words[at + 1].parse().expect("a count")
}

#[test]
fn a_killed_store_is_restarted_and_the_program_goes_on_counting_what_was_lost() {
    let bin_dir = support::rti_bin().parent().expect("bin dir").to_path_buf();
    let _ = support::store_bin();
    std::env::set_var("HPRM_BIN_DIR", &bin_dir);
    let out = tempfile::tempdir().expect("tempdir");
    let logs = out.path().join("logs");
    let shm_before = shm_entries();
    let launcher = {
        let out = out.path().to_path_buf();
        Launch {
            store_memory: "64m".into(),
            federate_command: Some(Box::new(move |_fed: &str| support::child::command("storedeath", &out, &[]))),
            timeout: Some(Duration::from_secs(120)),
            log_dir: Some(logs.clone()),
            rti_args: vec!["--start-delay-ms".into(), "200".into()],
            ..Launch::default()
        }
    };
    let run = std::thread::spawn(move || launcher.run(&program()));

    // Wait until frames flow (a receiver's status counts them), then kill
    // the store the launcher started.
    let base = hprm_node::status::runtime_base();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (runtime_dir, store_pid) = loop {
        assert!(Instant::now() < deadline, "frames never reached the receivers");
        let mine = hprm_node::status::scan(&base).into_iter().find(|r| r.launch.pid == std::process::id());
        if let Some(r) = mine {
            let flowing = r.federates.iter().any(|f| f.status.as_ref().is_some_and(|s| s.messages_in >= 20));
            if flowing {
                break (r.launch.runtime_dir.clone(), r.launch.store.expect("the launcher records its store").pid);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(store_pid as i32), nix::sys::signal::Signal::SIGKILL)
        .expect("kill the store");
    let report = run.join().expect("the launch thread").expect("the launch");
    let traces = support::child::read_traces(out.path());
    let trace = |f: &str| traces.get(f).unwrap_or_else(|| panic!("no trace from {f}: {traces:?}"));

    // The store was restarted once, and the program ran to its end.
    assert_eq!(report.store_deaths, vec!["signal: 9 (SIGKILL)".to_string()], "{report:?}");
    assert!(report.lost.is_empty(), "{report:?}");
    for (name, status) in &report.federates {
        assert!(status.success(), "{name} exited with {status}: {:?}", traces.get(name));
    }
    let sent = numbers(trace("camera"), "sent ");
    let last = *sent.last().expect("the camera sent frames");
    assert_eq!(sent.len() as u64, last, "the camera ran every step");

    // Lost deliveries: counted, and exactly those the receivers missed.
    let mut missed = 0;
    for name in RECEIVERS {
        let got = numbers(trace(name), "got ");
        let gap: Vec<u64> = sent.difference(&got).copied().collect();
        assert!(!gap.is_empty(), "{name} missed nothing: was the store killed while frames flowed?");
        // The program went on: frames reached it again after those lost.
        assert!(got.last() > gap.last(), "{name} got nothing after the store's restart; gap {gap:?}");
        missed += gap.len() as u64;
    }
    let counted: u64 = ["camera", "left", "right"].iter().map(|f| report_field(trace(f), "store_lost")).sum();
    assert_eq!(counted, missed, "store_lost of camera, left and right against the frames missed");
    assert_eq!(report.store_lost.iter().sum::<u64>(), counted, "the launcher's totals: {report:?}");
    for f in ["camera", "left", "right"] {
        assert_eq!(report_field(trace(f), "encode_errors"), 0, "{f}: a lost value is not an encode error");
        assert_eq!(report_field(trace(f), "decode_errors"), 0, "{f}: a lost value is not a decode error");
    }

    // Said once per federate, and in the exit summary; the exit code says a daemon died.
    for f in ["camera", "left", "right"] {
        let log = std::fs::read_to_string(logs.join(format!("{f}.log"))).expect("the federate's log");
        assert_eq!(log.matches("hprm-store went away").count(), 1, "{f}'s log:\n{log}");
        assert!(!log.contains("could not send the value"), "{f} logged a failure per message:\n{log}");
    }
    assert_eq!(report.exit_code(), exit_code::DAEMON_LOST);
    let summary = report.failure_summary("storedeath").expect("a summary");
    assert!(
        summary.starts_with(&format!(
            "program storedeath: hprm-store died during the run (signal: 9 (SIGKILL)) and was restarted; {missed} deliveries were lost with it ("
        )),
        "{summary}"
    );

    // Nothing left behind: no daemon, no runtime directory, nothing in /dev/shm.
    assert!(!hprm_node::status::alive(store_pid), "the killed store is gone");
    assert!(!runtime_dir.exists(), "{} is left behind", runtime_dir.display());
    let new_in_shm: Vec<String> = shm_entries().difference(&shm_before).cloned().collect();
    assert!(new_in_shm.is_empty(), "left in /dev/shm: {new_in_shm:?}");
}

fn shm_entries() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}
