//! systemd's notification protocol, as the real processes speak it: each
//! test binds its own Unix datagram socket, hands it to a real `hprm-store`,
//! `hprm-rti` or federate process as `NOTIFY_SOCKET` (with `WATCHDOG_USEC`),
//! and checks what arrives: `READY=1` only once the process does its job
//! (the store serves clients, the RTI accepts connections, a federate has
//! agreed on its start time with the others), `WATCHDOG=1` again and again
//! while it runs, `STOPPING=1` at the end.

mod support;

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hprm_node::launch::options_from_env;
use hprm_node::{run_federate, Coordination, Program};

/// Generous: the machines that run the tests may be busy building.
const WITHIN: Duration = Duration::from_secs(30);
/// `WATCHDOG_USEC` given to the processes: a ping every 100 ms.
const WATCHDOG_USEC: &str = "200000";

/// Our end of `NOTIFY_SOCKET`.
struct NotifySocket {
    sock: UnixDatagram,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl NotifySocket {
    fn bind() -> NotifySocket {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
        NotifySocket { sock, path, _dir: dir }
    }

    /// The next message, or `None` after `within`.
    fn recv(&self, within: Duration) -> Option<String> {
        self.sock.set_read_timeout(Some(within)).expect("set_read_timeout");
        let mut buf = [0u8; 4096];
        match self.sock.recv(&mut buf) {
            Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => None,
            Err(e) => panic!("reading the notify socket: {e}"),
        }
    }

    /// Messages until one contains `line` (returned last); panics with
    /// what came instead after `within`.
    fn until(&self, line: &str, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut got = Vec::new();
        while let Some(m) = self.recv(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)))
        {
            let done = m.lines().any(|l| l == line);
            got.push(m);
            if done {
                return got;
            }
        }
        panic!("no {line} within {within:?}; got {got:?}");
    }

    /// Waits for `n` more `WATCHDOG=1` pings.
    fn pings(&self, n: usize) {
        for _ in 0..n {
            self.until("WATCHDOG=1", WITHIN);
        }
    }
}

/// A child process, killed and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + WITHIN;
        loop {
            if let Some(s) = self.0.try_wait().expect("try_wait") {
                return s;
            }
            assert!(Instant::now() < deadline, "the process did not exit on SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn status_of(messages: &[String]) -> String {
    messages
        .iter()
        .flat_map(|m| m.lines())
        .filter_map(|l| l.strip_prefix("STATUS="))
        .next_back()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn store_is_ready_once_it_serves_clients_and_pings_its_watchdog() {
    let notify = NotifySocket::bind();
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("store.sock");
    let mut store = Proc(
        Command::new(support::store_bin())
            .arg("--socket")
            .arg(&socket)
            .args(["--memory", "16m"])
            .env("NOTIFY_SOCKET", &notify.path)
            .env("WATCHDOG_USEC", WATCHDOG_USEC)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn hprm-store"),
    );
    let ready = notify.until("READY=1", WITHIN);
    // At READY, with no retry: a client connects, gets the arena, is served.
    let client = hprm_store::StoreClient::connect(&socket).expect("the store serves clients once it said READY=1");
    assert_eq!(client.stats().expect("stats").capacity, 16 << 20);
    assert!(status_of(&ready).contains(&socket.display().to_string()), "STATUS names the socket: {ready:?}");
    notify.pings(3);
    assert!(store.terminate().success());
    notify.until("STOPPING=1", WITHIN);
}

#[test]
fn rti_is_ready_once_it_listens_and_pings_its_watchdog() {
    let notify = NotifySocket::bind();
    let mut rti = Proc(
        Command::new(support::rti_bin())
            .args(["--port", "0", "--bind", "127.0.0.1", "--federates", "2", "--id", "notified"])
            .env("NOTIFY_SOCKET", &notify.path)
            .env("WATCHDOG_USEC", WATCHDOG_USEC)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn hprm-rti"),
    );
    let ready = notify.until("READY=1", WITHIN);
    let status = status_of(&ready);
    // "listening on 127.0.0.1:PORT for 2 federates of notified"
    let addr = status
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("STATUS names the address: {status:?}"));
    std::net::TcpStream::connect(addr).expect("the RTI accepts connections once it said READY=1");
    notify.pings(3);
    assert!(status.contains("2 federates of notified"), "{status}");
    rti.terminate();
    notify.until("STOPPING=1", WITHIN);
}

#[test]
fn watchdog_of_another_process_is_not_pinged() {
    // systemd sets WATCHDOG_PID to the unit's main process; a child that
    // inherits the variables must not ping in its name.
    let notify = NotifySocket::bind();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = Proc(
        Command::new(support::store_bin())
            .arg("--socket")
            .arg(dir.path().join("store.sock"))
            .args(["--memory", "16m"])
            .env("NOTIFY_SOCKET", &notify.path)
            .env("WATCHDOG_USEC", WATCHDOG_USEC)
            .env("WATCHDOG_PID", std::process::id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn hprm-store"),
    );
    notify.until("READY=1", WITHIN);
    // Ten watchdog intervals of silence, then the shutdown message: had
    // the store pinged, the pings would have come first.
    std::thread::sleep(Duration::from_secs(1));
    assert!(store.terminate().success());
    let rest = notify.until("STOPPING=1", WITHIN);
    assert!(rest.iter().all(|m| !m.contains("WATCHDOG=1")), "{rest:?}");
}

/// Two federates in real time for 1.5 s: `pulse` sends `sink` a count
/// every 20 ms.
fn pulse() -> Program {
    let mut p = Program::new(support::RtiDaemon::FEDERATION);
    p.coordination(Coordination::Centralized).timeout(Duration::from_millis(1500));
    let a = p.federate("pulse");
    let out = {
        let mut r = p.reactor(a, "counter", 0u64);
        let t = r.timer("t", Duration::ZERO, Duration::from_millis(20));
        let out = r.output::<u64>("out");
        r.reaction("emit").trigger(t).effect(out).body(move |n, ctx| {
            *n += 1;
            ctx.set(out, *n);
        });
        out
    };
    let b = p.federate("sink");
    let inp = {
        let mut r = p.reactor(b, "sink", ());
        let i = r.input::<u64>("in");
        r.reaction("take").trigger(i).body(|_, _| {});
        i
    };
    p.connect(out, inp);
    p
}

/// A federate process of [`pulse`], run by the test below.
#[test]
#[ignore = "run as a federate process by federate_is_ready_once_the_start_is_agreed_and_pings_while_it_runs"]
fn notify_federate_child() {
    let program = pulse();
    let opts = options_from_env(&program).expect("HPRM_FEDERATE");
    if let Err(e) = run_federate(program, opts) {
        eprintln!("federate failed: {e}");
        std::process::exit(1);
    }
}

fn federate(name: &str, rti: &support::RtiDaemon, notify: Option<&NotifySocket>) -> Proc {
    let mut c = Command::new(std::env::current_exe().expect("test binary"));
    c.args(["notify_federate_child", "--exact", "--ignored", "--nocapture", "--test-threads", "1"]);
    c.env("HPRM_FEDERATE", name)
        .env("HPRM_RTI", rti.addr().to_string())
        .env("HPRM_FEDERATION", support::RtiDaemon::FEDERATION)
        .env("RUST_LOG", "warn");
    for v in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        c.env_remove(v);
    }
    if let Some(n) = notify {
        c.env("NOTIFY_SOCKET", &n.path).env("WATCHDOG_USEC", WATCHDOG_USEC);
    }
    Proc(c.stdout(Stdio::null()).spawn().expect("spawn a federate"))
}

#[test]
fn federate_is_ready_once_the_start_is_agreed_and_pings_while_it_runs() {
    let notify = NotifySocket::bind();
    let rti = support::RtiDaemon::start(2, &["--start-delay-ms", "200"]);
    let mut pulse = federate("pulse", &rti, Some(&notify));
    // pulse has joined and proposed a start; without sink there is none.
    rti.wait_for_line("start time proposed", WITHIN);
    assert_eq!(
        notify.recv(Duration::from_millis(300)),
        None,
        "a federate is not ready before the start time is agreed"
    );
    let mut sink = federate("sink", &rti, None);
    let ready = notify.until("READY=1", WITHIN);
    // The RTI's log reaches this test through a pipe and a reader thread,
    // so its line may come after READY=1 even though the RTI agreed first
    // (that READY=1 waits for the agreement is the check above).
    rti.wait_for_line("start time agreed", WITHIN);
    assert!(status_of(&ready).contains("federate pulse"), "{ready:?}");
    // It runs 1.5 s of real time: pings every 100 ms meanwhile.
    notify.pings(3);
    notify.until("STOPPING=1", WITHIN);
    for (name, p) in [("pulse", &mut pulse), ("sink", &mut sink)] {
        let s = p.0.wait().expect("wait");
        assert!(s.success(), "federate {name} exited with {s}");
    }
}
