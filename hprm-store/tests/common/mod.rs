//! Shared by the integration tests: a real `hprm-store` daemon per test, and
//! real client processes (this test binary re-executed in a *role*).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use hprm_store::{ConnectOptions, StoreClient};

pub const STORE_BIN: &str = env!("CARGO_BIN_EXE_hprm-store");

/// A running daemon, killed and reaped when dropped.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts `hprm-store --socket <tmp>/store.sock --memory <memory> <extra>`
    /// and waits until it accepts connections.
    pub fn start(memory: &str, extra: &[&str]) -> Daemon {
        Daemon::start_with(memory, extra, |_| {})
    }

    /// As [`Daemon::start`], the command completed by `setup`
    /// (environment, working directory).
    pub fn start_with(memory: &str, extra: &[&str], setup: impl FnOnce(&mut Command)) -> Daemon {
        Daemon::start_under(&[], memory, extra, setup)
    }

    /// As [`Daemon::start_with`], run by `wrapper` (a program and its
    /// arguments, given the daemon's command line after them; it must exec
    /// the daemon, so that the child is the daemon); empty: none.
    pub fn start_under(wrapper: &[&str], memory: &str, extra: &[&str], setup: impl FnOnce(&mut Command)) -> Daemon {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("store.sock");
        let log = std::fs::File::create(dir.path().join("daemon.log")).expect("log file");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(STORE_BIN);
                cmd
            }
            None => Command::new(STORE_BIN),
        };
        cmd.arg("--socket")
            .arg(&socket)
            .args(["--memory", memory])
            .args(extra)
            .env("RUST_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(log);
        setup(&mut cmd);
        let child = cmd.spawn().expect("spawn hprm-store");
        let mut d = Daemon { child, socket, dir };
        d.wait_ready();
        d
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("hprm-store exited during start ({status}):\n{}", self.log());
            }
            // The daemon logs this after binding its socket. A probe
            // connection would do too, but it counts as a client until the
            // daemon sees it leave, which tests counting clients would race.
            if self.log().contains("hprm-store ready") {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("hprm-store did not start listening within 20s:\n{}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    pub fn client(&self) -> StoreClient {
        StoreClient::connect(&self.socket).expect("connect to the daemon")
    }

    /// A client that does not pre-fault (for tests that only count).
    pub fn light_client(&self) -> StoreClient {
        StoreClient::connect_with(&self.socket, &ConnectOptions { populate: Some(false), ..Default::default() })
            .expect("connect to the daemon")
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).expect("signal the daemon");
    }

    /// Waits for the daemon to exit after a signal.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "hprm-store did not exit within {within:?}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    /// Kills the daemon; when the test is failing, first shows whether the
    /// daemon was still running and the end of its log (debug level, so
    /// long), which the temp dir takes along.
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(200)..].join("\n");
            match self.child.try_wait() {
                Ok(Some(status)) => eprintln!("hprm-store had exited ({status}); the end of its log:\n{tail}"),
                _ => eprintln!("hprm-store was still running; the end of its log:\n{tail}"),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `cond` until it holds or `within` passes.
pub fn eventually(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A client process: this test binary re-run with only its `child` entry
/// point, which dispatches on `HPRM_TEST_ROLE`.
pub struct Worker {
    pub child: Child,
    stdout: BufReader<ChildStdout>,
    stdin: Option<ChildStdin>,
}

impl Worker {
    pub fn spawn(role: &str, socket: &Path, args: &[String]) -> Worker {
        let mut child = Command::new(std::env::current_exe().expect("current exe"))
            .args(["child", "--exact", "--ignored", "--nocapture", "--test-threads=1", "-q"])
            .env("HPRM_TEST_ROLE", role)
            .env("HPRM_TEST_SOCKET", socket)
            .env("HPRM_TEST_ARGS", args.join(" "))
            .stdout(Stdio::piped())
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawn worker");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let stdin = child.stdin.take();
        Worker { child, stdout, stdin }
    }

    /// Writes `line` to the worker's standard input (see [`next_command`]).
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("worker stdin open");
        writeln!(stdin, "{line}").expect("write to worker");
        stdin.flush().expect("flush worker stdin");
    }

    /// Reads the worker's output until a line starting with `prefix`.
    pub fn expect_line(&mut self, prefix: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("read worker output");
            assert!(n > 0, "worker exited before printing `{prefix}`");
            if line.starts_with(prefix) {
                return line.trim_end().to_owned();
            }
        }
    }

    /// Waits for the worker and returns all its remaining output.
    pub fn finish(mut self) -> (ExitStatus, String) {
        drop(self.stdin.take());
        let mut rest = String::new();
        let _ = self.stdout.read_to_string(&mut rest);
        let status = self.child.wait().expect("wait worker");
        (status, rest)
    }

    pub fn kill9(&mut self) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGKILL)
            .expect("kill -9");
        let status = self.child.wait().expect("wait worker");
        assert_eq!(status.signal(), Some(9));
    }
}

/// In a worker process: its role, a client connected to the test's daemon,
/// and its arguments. `None` when run as an ordinary (ignored) test.
pub fn worker() -> Option<(String, StoreClient, Vec<String>)> {
    let role = std::env::var("HPRM_TEST_ROLE").ok()?;
    let socket = PathBuf::from(std::env::var("HPRM_TEST_SOCKET").ok()?);
    let args = std::env::var("HPRM_TEST_ARGS").unwrap_or_default().split_whitespace().map(str::to_owned).collect();
    let store = StoreClient::connect(&socket).expect("worker connects");
    Some((role, store, args))
}

/// In a worker process: the object its arguments `ID OFFSET SIZE` name
/// and where it lies (data only, no metadata).
pub fn placed(args: &[String]) -> (hprm_store::ObjectId, hprm_store::Placement) {
    let id = args[0].parse().expect("an object id");
    let offset: u64 = args[1].parse().expect("an offset");
    let size: u64 = args[2].parse().expect("a size");
    (
        id,
        hprm_store::Placement {
            data_offset: offset,
            data_size: size,
            metadata_offset: offset + size,
            metadata_size: 0,
        },
    )
}

/// In a worker process: the next line the test sent (see [`Worker::send`]).
pub fn next_command() -> String {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("read a command from the test");
    line.trim_end().to_owned()
}

/// Deterministic content for an object: every byte depends on the id's
/// first bytes and the offset, so any mix-up between objects shows.
pub fn pattern(seed: &[u8], len: usize) -> Vec<u8> {
    let s = u32::from_le_bytes([seed[0], seed[1], seed[2], seed[3]]);
    (0..len).map(|i| (s.wrapping_mul(2654435761).wrapping_add((i as u32).wrapping_mul(7919)) >> 13) as u8).collect()
}

/// Names in /dev/shm now.
pub fn dev_shm() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// Polls `f` until it returns `Some`, or panics after `within`.
pub fn eventually_result<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
