//! `hprm ps` and `hprm topic echo|hz` against a real running program: the
//! `counter` example of hprm-node (federate `source` sends a count every
//! 10 ms of logical time, and every 10th a 64 KiB frame through the store,
//! to federate `sink`), launched with its own store and RTI in a private
//! runtime directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

#[path = "../../hprm-node/tests/support/process.rs"]
mod process;
mod support;
use process::{finish, wait_for};

/// The `hprm` binary under test.
fn hprm() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hprm"))
}

/// The counter example (and the daemons it launches), built if missing.
fn counter() -> PathBuf {
    support::program("counter")
}

/// `counter ARGS` as its own launcher in runtime base `runtime`.
fn launch(args: &[&str], runtime: &Path) -> Child {
    Command::new(counter())
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime)
        .env("HPRM_BIN_DIR", support::profile_dir())
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the counter example")
}

/// Runs `hprm ARGS` with runtime base `runtime`.
fn run_hprm(args: &[&str], runtime: &Path) -> Output {
    Command::new(hprm()).args(args).env("XDG_RUNTIME_DIR", runtime).output().expect("run hprm")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `hprm ps --json` as JSON.
fn ps(runtime: &Path) -> serde_json::Value {
    let o = run_hprm(&["ps", "--json"], runtime);
    assert!(o.status.success(), "{o:?}");
    serde_json::from_slice(&o.stdout).expect("ps --json prints JSON")
}

#[test]
fn ps_lists_the_program_and_every_federate_with_an_advancing_tag() {
    let runtime = tempfile::tempdir().expect("tempdir");
    let none = run_hprm(&["ps"], runtime.path());
    assert!(stdout(&none).contains("no HPRM program is running"), "{none:?}");
    let child = launch(&[], runtime.path());
    let tags = |v: &serde_json::Value| -> Option<Vec<i64>> {
        let feds = v.get(0)?["federates"].as_array()?;
        feds.iter().map(|f| f["status"]["tag_ns"].as_i64()).collect()
    };
    let first = wait_for(Duration::from_secs(30), "ps shows both federates' tags", || {
        let v = ps(runtime.path());
        tags(&v).filter(|t| t.len() == 2).map(|t| (v, t))
    });
    let (v, before) = first;
    assert_eq!(v[0]["launch"]["program"], "counter");
    assert_eq!(v[0]["launch"]["pid"], child.id());
    for f in v[0]["federates"].as_array().expect("federates") {
        assert_eq!(f["alive"], true, "{f}");
        let pid = f["pid"].as_u64().expect("pid");
        assert!(pid != 0 && Path::new(&format!("/proc/{pid}")).exists(), "{f}");
    }
    wait_for(Duration::from_secs(10), "both tags advance", || {
        let now = tags(&ps(runtime.path()))?;
        (now[0] > before[0] && now[1] > before[1]).then_some(())
    });
    let table = stdout(&run_hprm(&["ps"], runtime.path()));
    assert!(
        table.contains("PROGRAM") && table.contains("counter") && table.contains("source") && table.contains("sink"),
        "{table}"
    );
    assert!(table.contains("LOST") && table.contains("LATE"), "{table}");
    // Nothing lost: each federate's losses, by port, are there and empty.
    for f in ps(runtime.path())[0]["federates"].as_array().expect("federates") {
        assert_eq!(f["status"]["losses"], serde_json::json!({}), "{f}");
    }
    // The program's own store and RTI: live processes of those daemons,
    // at the socket and address the federates were given.
    let launch = &v[0]["launch"];
    let runtime_dir = PathBuf::from(launch["runtime_dir"].as_str().expect("runtime_dir"));
    let cmdline = |pid: u64| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default()
    };
    let store_pid = launch["store"]["pid"].as_u64().expect("store pid");
    let socket = PathBuf::from(launch["store"]["socket"].as_str().expect("store socket"));
    assert_eq!(socket, runtime_dir.join("store.sock"), "{launch}");
    assert!(
        cmdline(store_pid).contains("hprm-store")
            && cmdline(store_pid).contains(&format!("--socket {}", socket.display())),
        "{launch}: {}",
        cmdline(store_pid)
    );
    assert!(
        std::os::unix::net::UnixStream::connect(&socket).is_ok(),
        "the store accepts clients at {}",
        socket.display()
    );
    let rti_pid = launch["rti"]["pid"].as_u64().expect("rti pid");
    let addr = launch["rti"]["addr"].as_str().expect("rti addr");
    assert!(
        cmdline(rti_pid).contains("hprm-rti") && cmdline(rti_pid).contains("--id counter"),
        "{launch}: {}",
        cmdline(rti_pid)
    );
    let port = addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).expect("host:port");
    assert!(addr.starts_with("127.0.0.1:") && port != 0, "{addr}");
    // That port is the RTI's: a TCP socket of that process listens on it.
    let listening = std::fs::read_dir(format!("/proc/{rti_pid}/fd"))
        .expect("the RTI's fds")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok())
        .collect::<Vec<_>>();
    let tcp = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let rti_listens = tcp.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // local address `0100007F:PORT`, state 0A (listen), inode.
        f.len() > 9
            && f[1].ends_with(&format!(":{port:04X}"))
            && f[3] == "0A"
            && f[9].parse::<u64>().is_ok_and(|i| listening.contains(&i))
    });
    assert!(rti_listens, "no socket of the RTI (pid {rti_pid}) listens on {addr}");
    assert!(
        table.contains(&format!("counter: store pid {store_pid} at {}; rti pid {rti_pid} at {addr}", socket.display())),
        "{table}"
    );
    // SAFETY: kill(2) on a child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    finish(child, Duration::from_secs(30));
    assert_eq!(ps(runtime.path()), serde_json::json!([]), "a stopped program is not listed");
}

#[test]
fn echo_prints_what_the_port_sends_and_leaves_the_result_unchanged() {
    let runtime = tempfile::tempdir().expect("tempdir");
    let ticks = 300u64;
    let child = launch(&["--ticks", &ticks.to_string()], runtime.path());
    let echo = wait_for(Duration::from_secs(30), "echo attaches", || {
        let o = run_hprm(&["topic", "echo", "source.count", "-n", "5"], runtime.path());
        o.status.success().then_some(o)
    });
    let text = stdout(&echo);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10, "{text}");
    let first: u64 = lines[1].parse().unwrap_or_else(|_| panic!("a count: {text}"));
    for (i, pair) in lines.chunks(2).enumerate() {
        let v = first + i as u64;
        assert_eq!(pair[1], v.to_string(), "{text}");
        // Count v is sent at tag v * 10 ms.
        assert_eq!(pair[0], format!("--- tag {}.{:09} s/0", v / 100, (v % 100) * 10_000_000), "{text}");
    }
    let frames = stdout(&run_hprm(&["topic", "echo", "source.frame", "-n", "1"], runtime.path()));
    assert!(frames.contains("<buffer |u1 [65536] 65536 bytes in store object "), "{frames}");
    let hz = stdout(&run_hprm(&["topic", "hz", "source.count", "-n", "30"], runtime.path()));
    let last = hz.lines().last().unwrap_or_default();
    assert!(last.contains("messages: 30") && last.contains("window: 30"), "{hz}");
    // Tags 10 ms apart: exactly 100 per second of logical time.
    assert!(last.contains("by tag: 100.000 msg/s"), "{hz}");
    let bad = run_hprm(&["topic", "echo", "source.nope"], runtime.path());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("refused the tap") && err.contains("source.counter.count"), "{err}");

    let log = finish(child, Duration::from_secs(60));
    let line = log.lines().find(|l| l.contains("sink: got")).unwrap_or_else(|| panic!("no result line in {log}"));
    assert!(
        line.ends_with(&format!("sink: got {} counts, sum {}, 31 frames", ticks + 1, ticks * (ticks + 1) / 2)),
        "{line}"
    );
}

#[test]
fn topic_names_what_is_wrong() {
    let runtime = tempfile::tempdir().expect("tempdir");
    let o = run_hprm(&["topic", "hz", "camera.image"], runtime.path());
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no HPRM program is running"), "{o:?}");
    let o = run_hprm(&["topic", "echo", "camera"], runtime.path());
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("is not FEDERATE.PORT"), "{o:?}");
}

/// `hprm launch --trace FILE`: one Chrome trace JSON file holding every
/// reaction the run reports (the program counts its own), the grants
/// the RTI sent and the sink received, and the frames' store transfers.
#[test]
fn launch_trace_holds_every_reaction_and_the_grants() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("run.json");
    let o = Command::new(hprm())
        .args(["launch", "--fast", "--trace"])
        .arg(&file)
        .arg(counter())
        .args(["--ticks", "40"])
        .env("XDG_RUNTIME_DIR", dir.path())
        .env("HPRM_BIN_DIR", support::profile_dir())
        .env("NO_COLOR", "1")
        .output()
        .expect("run hprm launch");
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    assert!(log.contains("sink: got 41 counts, sum 820, 5 frames"), "{log}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("trace file")).expect("valid JSON");
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    let count = |name: &str| events.iter().filter(|e| e["name"] == name && e["ph"] == "X").count();
    assert_eq!((count("source.counter.tick"), count("sink.summer.add"), count("sink.summer.look")), (41, 41, 5));
    assert_eq!((count("store put"), count("store get")), (5, 5));
    let pids_with_grants: std::collections::HashSet<u64> =
        events.iter().filter(|e| e["cat"] == "grant").filter_map(|e| e["pid"].as_u64()).collect();
    assert_eq!(pids_with_grants.len(), 2, "the RTI sends grants, the sink receives them");

    let bad = Command::new(hprm())
        .args(["launch", "--trace", "/nonexistent-dir/t.json"])
        .arg(counter())
        .env("HPRM_BIN_DIR", support::profile_dir())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("/nonexistent-dir") && err.contains("does not exist"), "{err}");
}

/// Processes a test started, killed when it ends (a failed assertion included).
struct Started(Vec<Child>);

impl Drop for Started {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A TCP port free now on localhost.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// `GET path` of the HTTP server at `addr`: its body.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the dashboard");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send the request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read the response");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("not an HTTP response: {text}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// A program deployed with `hprm deploy --systemd`, run as its units run
/// it (the daemons and each federate with its unit's environment and
/// runtime directory), with /etc/hprm and /run/hprm moved under a
/// temporary directory: `hprm ps`, `hprm topic` and the dashboard all find
/// it through its launch file, and the tap of each federate in its unit's
/// directory.
#[test]
fn topic_and_the_dashboard_see_a_deployed_program_as_ps_does() {
    let root = tempfile::tempdir().expect("tempdir");
    let (etc, run, launched) = (root.path().join("etc"), root.path().join("run"), root.path().join("launched"));
    for d in [&etc, &run, &launched] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let port = free_port();
    let out = root.path().join("deploy");
    let o = Command::new(hprm())
        .args(["deploy", "--systemd"])
        .arg(&out)
        .args(["--no-auth", "--rti-port", &port.to_string()])
        .arg(counter())
        .env("HPRM_BIN_DIR", support::profile_dir())
        .output()
        .expect("run hprm deploy");
    assert!(o.status.success(), "{o:?}");
    // What hprm deploy wrote for /etc/hprm/counter, with /run/hprm moved.
    let conf = out.join("etc/hprm/counter");
    let read = |name: &str| std::fs::read_to_string(conf.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let program_etc = etc.join("counter");
    let program_run = run.join("counter");
    std::fs::create_dir(&program_etc).expect("mkdir");
    let moved = |text: String| text.replace("/run/hprm", &run.to_string_lossy());
    std::fs::write(program_etc.join("launch.json"), moved(read("launch.json"))).expect("launch.json");
    std::fs::write(program_etc.join("manifest.json"), read("manifest.json")).expect("manifest.json");
    let store_socket = run.join("store.sock");

    // The units' processes: the store, the RTI, each federate.
    let daemon = |name: &str| Command::new(support::profile_dir().join(name));
    let mut started = Started(Vec::new());
    let mut store = daemon("hprm-store");
    store.arg("--socket").arg(&store_socket).args(["--memory", "64m"]).stderr(Stdio::null());
    started.0.push(store.spawn().expect("start hprm-store"));
    std::fs::create_dir_all(program_run.join("rti")).expect("mkdir");
    let mut rti = daemon("hprm-rti");
    rti.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--federates", "2", "--id", "counter"])
        .args(["--clock-sync", "off"])
        .env("HPRM_RUNTIME_DIR", program_run.join("rti"))
        .env("HPRM_SOCKET_DIR", &run)
        .stderr(Stdio::null());
    started.0.push(rti.spawn().expect("start hprm-rti"));
    wait_for(Duration::from_secs(30), "the store listens", || store_socket.exists().then_some(()));
    for federate in ["source", "sink"] {
        let dir = program_run.join(federate);
        std::fs::create_dir(&dir).expect("mkdir");
        let mut c = Command::new(counter());
        // Its unit's environment: its env file, then the unit's own settings.
        for line in read(&format!("{federate}.env")).lines().filter(|l| !l.starts_with('#')) {
            let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("not KEY=VALUE: {line}"));
            c.env(k, v.trim_matches('"'));
        }
        c.env("HPRM_MANIFEST", program_etc.join("manifest.json"))
            .env("HPRM_STORE", &store_socket)
            .env("HPRM_RUNTIME_DIR", &dir)
            .env("HPRM_SOCKET_DIR", &run)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        started.0.push(c.spawn().expect("start a federate"));
    }

    let hprm_at = |args: &[&str]| {
        Command::new(hprm())
            .args(args)
            .args(["--runtime-base".as_ref(), launched.as_os_str(), "--deployed".as_ref(), etc.as_os_str()])
            .output()
            .expect("run hprm")
    };
    // hprm ps lists it, with the RTI's figures (its file in the RTI's unit directory).
    let table = wait_for(Duration::from_secs(60), "ps shows the RTI with both federates joined", || {
        let text = stdout(&hprm_at(&["ps"]));
        text.contains(&format!("rti under systemd at 127.0.0.1:{port}: 2/2 federates joined")).then_some(text)
    });
    assert!(table.contains("counter  systemd") && table.contains("source") && table.contains("sink"), "{table}");

    // hprm topic: the same program, through the tap in source's unit directory.
    let echo = hprm_at(&["topic", "echo", "source.count", "-n", "3"]);
    assert!(echo.status.success(), "{echo:?}");
    let text = stdout(&echo);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    assert!(lines[0].starts_with("--- tag ") && lines[1].parse::<u64>().is_ok(), "{text}");
    let hz = hprm_at(&["topic", "hz", "sink.nope"]);
    let err = String::from_utf8_lossy(&hz.stderr);
    assert!(!hz.status.success() && err.contains("refused the tap"), "the sink's own tap answers: {err}");

    // The dashboard: the program, its federates, RTI and store figures.
    let mut dashboard = Command::new(hprm());
    dashboard
        .args(["dashboard", "--listen", "127.0.0.1:0", "--runtime-base"])
        .arg(&launched)
        .arg("--deployed")
        .arg(&etc);
    let (dashboard, addr) = start_dashboard(dashboard.stderr(Stdio::null()));
    started.0.push(dashboard);
    let snap: serde_json::Value =
        serde_json::from_str(&http_get(&addr, "/api/programs")).expect("/api/programs is JSON");
    let programs = snap["programs"].as_array().expect("programs");
    assert_eq!(programs.len(), 1, "{snap}");
    let p = &programs[0];
    assert_eq!((&p["name"], &p["deployed"], &p["pid"]), (&"counter".into(), &true.into(), &0.into()), "{p}");
    assert!(p["started_ns"].as_i64().is_some_and(|t| t > 0), "its federation's start: {p}");
    let feds = p["federates"].as_array().expect("federates");
    assert_eq!(feds.len(), 2, "{p}");
    for f in feds {
        assert!(f["alive"] == true && f["status"]["tag_ns"].as_i64().is_some(), "{f}");
    }
    assert!(!p["links"].as_array().expect("links").is_empty(), "its graph, from the deployed manifest: {p}");
    let rti = &p["rti_figures"];
    assert_eq!(rti["federates"].as_array().map(Vec::len), Some(2), "{p}");
    assert_eq!(rti["names"], serde_json::json!(["source", "sink"]), "{p}");
    assert!(p["rti_error"].is_null(), "{p}");
    assert_eq!(p["store"]["socket"].as_str(), Some(store_socket.to_string_lossy().as_ref()), "{p}");
    assert!(p["store"]["stats"]["capacity"].as_u64().is_some_and(|c| c > 0), "the store's figures: {p}");
    let metrics = http_get(&addr, "/metrics");
    assert!(metrics.contains("program=\"counter\",federate=\"source\""), "{metrics}");
    assert!(metrics.contains(r#"hprm_rti_up{program="counter"} 1"#), "{metrics}");
    assert!(metrics.contains(r#"hprm_rti_figures_readable{program="counter"} 1"#), "{metrics}");

    // The RTI's figures unreadable (a directory in the file's place: these
    // tests may run as root, whom a file's mode does not refuse; the RTI
    // then stops writing them and runs on): the dashboard still says the
    // RTI is up, that its figures are unreadable, why, and what to do.
    let figures = program_run.join("rti").join("rti.json");
    wait_for(Duration::from_secs(30), "the RTI's figures replaced by a directory", || {
        let _ = std::fs::remove_file(&figures);
        std::fs::create_dir(&figures).ok()
    });
    let metrics = wait_for(Duration::from_secs(30), "the dashboard finds the RTI's figures unreadable", || {
        let m = http_get(&addr, "/metrics");
        m.contains(r#"hprm_rti_figures_readable{program="counter"} 0"#).then_some(m)
    });
    assert!(metrics.contains(r#"hprm_rti_up{program="counter"} 1"#), "the RTI still runs: {metrics}");
    assert!(!metrics.contains("hprm_rti_relayed_messages_total"), "no figures to show: {metrics}");
    let snap: serde_json::Value =
        serde_json::from_str(&http_get(&addr, "/api/programs")).expect("/api/programs is JSON");
    let p = &snap["programs"][0];
    assert_eq!(p["rti_running"], true, "{p}");
    let why = p["rti_error"].as_str().unwrap_or_else(|| panic!("no rti_error: {p}"));
    assert!(
        why.starts_with(&format!("the RTI runs, but cannot read {}: ", figures.display()))
            && why.contains("add this user to it (sudo usermod -aG hprm USER"),
        "{why}"
    );

    // hprm foxglove: the same program, its port tapped in source's unit
    // directory (scripts/test-all.sh also runs this test with the server
    // built in).
    let mut fox = Command::new(hprm())
        .args(["foxglove", "--listen", "127.0.0.1:0", "--topics", "source.count", "--runtime-base"])
        .arg(&launched)
        .arg("--deployed")
        .arg(&etc)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start hprm foxglove");
    let err = fox.stderr.take().expect("stderr");
    started.0.push(fox);
    // Its first line that says what it does (or why not), past the log's.
    let said = std::io::BufRead::lines(std::io::BufReader::new(err))
        .map_while(Result::ok)
        .find(|l| l.contains("streaming") || l.contains("error"))
        .unwrap_or_default();
    if cfg!(feature = "foxglove-live") {
        assert!(said.contains("streaming source.counter.count of program counter"), "{said}");
    } else {
        assert!(said.contains("built without the Foxglove WebSocket server"), "{said}");
    }
}

/// A stream of `/events` from the dashboard at `addr`.
fn follow(addr: &str) -> std::io::BufReader<std::net::TcpStream> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the dashboard");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("a read timeout");
    write!(s, "GET /events HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("send the request");
    std::io::BufReader::new(s)
}

/// The data of the next event of `stream`.
fn next_event(stream: &mut std::io::BufReader<std::net::TcpStream>) -> String {
    use std::io::BufRead;
    loop {
        let mut line = String::new();
        assert!(stream.read_line(&mut line).expect("an event") > 0, "the stream ended");
        if let Some(data) = line.strip_prefix("data: ") {
            return data.trim_end().to_owned();
        }
    }
}

/// The nice value of each thread of process `pid` (field 19 of
/// `/proc/PID/task/TID/stat`), by thread id.
#[cfg(target_os = "linux")]
fn thread_nices(pid: u32) -> Vec<(String, i64)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's threads");
    tasks
        .filter_map(|t| {
            let tid = t.ok()?.file_name().to_string_lossy().into_owned();
            // A thread that ended since the listing has no stat.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 1..];
            Some((tid, rest.split_whitespace().nth(19 - 3)?.parse().ok()?))
        })
        .collect()
}

/// What watching costs the watched: `hprm dashboard` runs every thread
/// at nice 10 (the program it watches comes first on a busy core), and
/// its `/events` followers share one read a period: two browsers get the
/// same snapshots, not one each.
#[cfg(target_os = "linux")]
#[test]
fn the_dashboard_yields_to_programs_and_its_followers_share_each_read() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut dashboard = Command::new(hprm());
    dashboard.args(["dashboard", "--listen", "127.0.0.1:0", "--runtime-base"]).arg(dir.path());
    dashboard.arg("--deployed").arg(dir.path().join("etc")).env("RUST_LOG", "warn");
    let (mut dashboard, addr) = start_dashboard(dashboard.stderr(Stdio::inherit()));
    let (mut a, mut b) = (follow(&addr), follow(&addr));
    // Each read holds its number (seq) and the time it was made (now_ns):
    // the same on both streams is the same read (whole as a stream's
    // first event, a delta after).
    let read = |r: &mut std::io::BufReader<std::net::TcpStream>| {
        let event: serde_json::Value = serde_json::from_str(&next_event(r)).expect("an event is JSON");
        (event["seq"].as_u64().expect("a seq"), event["now_ns"].as_i64().expect("a now_ns"))
    };
    let mut from_a: Vec<(u64, i64)> = (0..3).map(|_| read(&mut a)).collect();
    let from_b: Vec<(u64, i64)> = (0..3).map(|_| read(&mut b)).collect();
    // b may have joined a period after a: match them from b's first.
    let start = from_a.iter().position(|e| *e == from_b[0]);
    let start = start.unwrap_or_else(|| panic!("b's first read is none of a's: a {from_a:?}, b {from_b:?}"));
    from_a.extend((0..start).map(|_| read(&mut a)));
    assert_eq!(from_a[start..start + 3], from_b[..], "the followers got reads of their own");
    let nices = thread_nices(dashboard.id());
    assert!(nices.len() >= 3, "the server, the pacer and the streams' threads: {nices:?}");
    for (tid, nice) in &nices {
        assert!(*nice >= 10, "thread {tid} of the dashboard is not at nice 10: {nices:?}");
    }
    let _ = dashboard.kill();
    let _ = dashboard.wait();
}

/// The runs of every federate's timeline in `read` (program, federate,
/// its pid, the run), and `read` without them (nor its `seq`, `base` and
/// `full`): its figures.
fn split_runs(read: &serde_json::Value) -> (Vec<String>, serde_json::Value) {
    let mut figures = read.clone();
    let mut runs = Vec::new();
    for p in figures["programs"].as_array_mut().expect("programs") {
        let program = p["name"].to_string();
        for f in p["federates"].as_array_mut().expect("federates") {
            let federate = format!("{program}/{}/{}", f["name"], f["pid"]);
            if let Some(timeline) = f["status"].get_mut("timeline") {
                for r in timeline.as_array().expect("a timeline") {
                    runs.push(format!("{federate}: {r}"));
                }
                *timeline = serde_json::Value::Array(Vec::new());
            }
        }
    }
    for k in ["seq", "base", "full"] {
        figures.as_object_mut().expect("an object").remove(k);
    }
    (runs, figures)
}

/// `/events` sends a stream's first read whole and then, each second,
/// only what changed: applied in turn, the deltas give the same figures
/// as a whole read of the same moment (a second stream's first), and the
/// runs they bring, concatenated, hold each run once and every run that
/// whole read holds. A stream opened again starts whole again.
#[test]
fn events_send_a_whole_read_then_only_what_changed() {
    let runtime = tempfile::tempdir().expect("tempdir");
    let mut started = Started(vec![launch(&[], runtime.path())]);
    let mut dashboard = Command::new(hprm());
    dashboard.args(["dashboard", "--listen", "127.0.0.1:0", "--deployed"]).arg(runtime.path().join("etc"));
    dashboard.env("XDG_RUNTIME_DIR", runtime.path()).env("RUST_LOG", "warn");
    let (dashboard, addr) = start_dashboard(dashboard.stderr(Stdio::inherit()));
    started.0.push(dashboard);
    wait_for(Duration::from_secs(30), "the dashboard shows both federates' runs", || {
        let snap: serde_json::Value = serde_json::from_str(&http_get(&addr, "/api/programs")).ok()?;
        let feds = snap["programs"].get(0)?["federates"].as_array()?.clone();
        (feds.len() == 2 && feds.iter().all(|f| f["status"]["timeline"].as_array().is_some_and(|t| !t.is_empty())))
            .then_some(())
    });
    let parse = |text: String| -> serde_json::Value { serde_json::from_str(&text).expect("an event is JSON") };

    let mut a = follow(&addr);
    let mut state = parse(next_event(&mut a));
    assert_eq!(state["full"], true, "a stream starts whole: {state}");
    let (mut sent, _) = split_runs(&state);
    let whole_bytes = serde_json::to_string(&state).map_or(0, |s| s.len());
    let mut delta_bytes = Vec::new();
    let mut next_delta = |a: &mut std::io::BufReader<std::net::TcpStream>, state: &mut serde_json::Value| {
        let text = next_event(a);
        delta_bytes.push(text.len());
        let delta = parse(text);
        assert_eq!(delta["full"], false, "a follower that keeps up is sent deltas: {delta}");
        assert_eq!(delta["base"], state["seq"], "each delta applies to the read before");
        support::page::apply(state, &delta);
        split_runs(state).0
    };
    for _ in 0..3 {
        sent.extend(next_delta(&mut a, &mut state));
    }
    // A second stream, whole, while the first goes on with deltas.
    let mut b = follow(&addr);
    let whole = parse(next_event(&mut b));
    assert_eq!(whole["full"], true, "{whole}");
    while state["seq"].as_u64() < whole["seq"].as_u64() {
        sent.extend(next_delta(&mut a, &mut state));
    }
    assert_eq!(state["seq"], whole["seq"], "the two streams share the pacer's reads");
    let (in_whole, whole_figures) = split_runs(&whole);
    let (_, figures) = split_runs(&state);
    assert_eq!(figures, whole_figures, "the deltas applied differ from the whole read");
    let unique: std::collections::HashSet<&String> = sent.iter().collect();
    assert_eq!(unique.len(), sent.len(), "a run sent twice on one stream");
    let missing: Vec<&String> = in_whole.iter().filter(|r| !unique.contains(r)).collect();
    assert!(missing.is_empty(), "runs of the whole read the deltas never brought: {missing:?}");
    assert!(in_whole.len() > 10, "the whole read holds the federates' runs: {in_whole:?}");
    eprintln!("whole read {whole_bytes} bytes, deltas {delta_bytes:?} bytes");

    // A stream opened again (a page reconnecting) starts whole.
    drop(a);
    let mut again = follow(&addr);
    let read = parse(next_event(&mut again));
    assert_eq!(read["full"], true, "{read}");
    assert!(!split_runs(&read).0.is_empty(), "a whole read holds the runs: {read}");
    let next = parse(next_event(&mut again));
    assert_eq!((&next["full"], &next["base"]), (&false.into(), &read["seq"]), "{next}");
}

/// Starts `hprm dashboard` as `cmd` says and reads the address it serves
/// on from the first line it prints.
fn start_dashboard(cmd: &mut Command) -> (Child, String) {
    use std::io::{BufRead, BufReader};
    let mut dashboard = cmd.stdout(Stdio::piped()).spawn().expect("start hprm dashboard");
    let mut first = String::new();
    BufReader::new(dashboard.stdout.take().expect("stdout")).read_line(&mut first).expect("the dashboard's address");
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first}"))
        .to_owned();
    (dashboard, addr)
}
