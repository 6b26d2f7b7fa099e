//! Shared by hprm-node's integration tests: real daemons, started per test.
//!
//! - [`StoreDaemon`]: an `hprm-store` on a socket in a fresh temporary
//!   directory, started and waited for until it accepts clients.
//! - [`RtiDaemon`]: an `hprm-rti` on a free TCP port of 127.0.0.1, whose
//!   stderr is drained by a thread (so the daemon never blocks on a full
//!   pipe) and kept for assertions.
//!
//! Both are killed and reaped on drop, so a failing test never leaves a
//! daemon behind. `process` waits for other child processes; `child` runs
//! programs whose federates are the test binary itself.
//!
//! The binaries belong to other packages, so Cargo does not build them for
//! `cargo test -p hprm-node` (`CARGO_BIN_EXE_*` only names a package's own
//! binaries). [`store_bin`] and [`rti_bin`] look for them in the target
//! directory of the running test binary (then in the workspace's `target/`),
//! and when either is missing, run `cargo build -p hprm-store -p hprm-rti
//! --bins` once per test process, in the test binary's profile. Cargo
//! releases its build lock before it runs tests, so this nested build does
//! not deadlock. Binaries that exist are used as they are: after changing a
//! daemon, `cargo test --workspace` (or `cargo build -p hprm-store -p
//! hprm-rti`) rebuilds them. `HPRM_STORE_BIN` / `HPRM_RTI_BIN` override the
//! search.
//!
//! Each test file uses a subset of these helpers, hence the blanket
//! `dead_code` allowance.
#![allow(dead_code)]

pub mod child;
pub mod process;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long a daemon may take to become ready. Generous: the machines that
/// run the tests may be busy building.
const START_WITHIN: Duration = Duration::from_secs(30);

/// The outcome of building the daemons: the build runs at most once per test
/// process, however many tests find a binary missing at once.
static BUILT: OnceLock<Result<(), String>> = OnceLock::new();

/// The `hprm-store` binary (built if missing; see the module docs).
pub fn store_bin() -> PathBuf {
    daemon_bin("hprm-store", "HPRM_STORE_BIN")
}

/// The `hprm-rti` binary (built if missing; see the module docs).
pub fn rti_bin() -> PathBuf {
    daemon_bin("hprm-rti", "HPRM_RTI_BIN")
}

fn daemon_bin(name: &str, env_override: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env_override) {
        return PathBuf::from(path);
    }
    if let Some(found) = find_bin(name) {
        return found;
    }
    let built = BUILT.get_or_init(build_daemons);
    if let Err(e) = built {
        panic!("{name} is not built and building it failed: {e}");
    }
    find_bin(name)
        .unwrap_or_else(|| panic!("{name} is still missing after building it; looked in {:?}", profile_dirs()))
}

/// Directories where Cargo puts this test binary's profile's executables:
/// the one holding the running test (`target/<profile>/deps/..` -> its
/// parent's parent, which follows `CARGO_TARGET_DIR` and the profile), then
/// the workspace's default `target/<profile>`.
fn profile_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::current_exe().ok().and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf())) {
        dirs.push(dir);
    }
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join(profile));
    dirs
}

fn find_bin(name: &str) -> Option<PathBuf> {
    profile_dirs().into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// Runs `cargo build -p hprm-store -p hprm-rti --bins` in the profile of
/// the running test binary.
fn build_daemons() -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).args([
        "build",
        "-p",
        "hprm-store",
        "-p",
        "hprm-rti",
        "--bins",
    ]);
    // The profile directory is named after the profile ("debug" is `dev`).
    let profile = profile_dirs().first().and_then(|d| d.file_name()).map(|n| n.to_string_lossy().into_owned());
    match profile.as_deref() {
        Some("release") => {
            cmd.arg("--release");
        }
        Some("debug") | None => {}
        Some(other) => {
            cmd.args(["--profile", other]);
        }
    }
    eprintln!("building the daemons for the tests: {cmd:?}");
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({status})"))
    }
}

/// A running `hprm-store`, killed and reaped when dropped.
pub struct StoreDaemon {
    /// The Unix socket it listens on.
    pub socket: PathBuf,
    pub child: Child,
    /// Holds the socket and the daemon's log (`daemon.log`); removed on drop.
    pub tempdir: tempfile::TempDir,
}

impl StoreDaemon {
    /// Starts `hprm-store --socket <tmp>/store.sock --memory <memory>` and
    /// waits until it accepts connections.
    pub fn start(memory: &str) -> StoreDaemon {
        Self::start_with(memory, &[])
    }

    /// [`StoreDaemon::start`] with extra flags (`--delivery-ttl 1s`, ...).
    pub fn start_with(memory: &str, extra_args: &[&str]) -> StoreDaemon {
        let tempdir = tempfile::tempdir().expect("create a temporary directory");
        let socket = tempdir.path().join("store.sock");
        let log = std::fs::File::create(tempdir.path().join("daemon.log")).expect("create the daemon log");
        let child = Command::new(store_bin())
            .arg("--socket")
            .arg(&socket)
            .args(["--memory", memory])
            .args(extra_args)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn hprm-store");
        let mut daemon = StoreDaemon { socket, child, tempdir };
        daemon.wait_ready();
        daemon
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_WITHIN;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait on hprm-store") {
                panic!("hprm-store exited during start ({status}):\n{}", self.log());
            }
            // Logged after the socket is bound. Not a probe connection: it
            // would count as a client until the daemon saw it leave, which
            // tests counting clients would race.
            if self.log().contains("hprm-store ready") {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("hprm-store did not accept connections within {START_WITHIN:?}:\n{}", self.log());
    }

    /// Everything the daemon logged so far (at debug level).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.tempdir.path().join("daemon.log")).unwrap_or_default()
    }

    /// A new client connection to the daemon.
    pub fn client(&self) -> hprm_store::StoreClient {
        hprm_store::StoreClient::connect(&self.socket).expect("connect to hprm-store")
    }

    /// Whether the daemon is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait on hprm-store").is_none()
    }
}

impl Drop for StoreDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `hprm-rti` on 127.0.0.1, killed and reaped when dropped.
pub struct RtiDaemon {
    /// The TCP port it listens on (chosen by the system).
    pub port: u16,
    pub child: Child,
    /// Every stderr line so far, appended by the draining thread.
    lines: Arc<Mutex<Vec<String>>>,
}

impl RtiDaemon {
    /// The federation id the daemon is started with, unless `extra_args`
    /// give another `--id`.
    pub const FEDERATION: &'static str = "hprm-node-tests";

    /// Starts `hprm-rti --federates <federates> --port 0 --bind 127.0.0.1
    /// --id hprm-node-tests <extra_args>` and waits for it to log the
    /// address it listens on. A `--port`, `--bind` or `--id` in
    /// `extra_args` replaces the default (the daemon refuses a flag given
    /// twice).
    pub fn start(federates: u16, extra_args: &[&str]) -> RtiDaemon {
        let mut cmd = Command::new(rti_bin());
        cmd.args(["--federates", &federates.to_string()]);
        for (flag, value) in [("--port", "0"), ("--bind", "127.0.0.1"), ("--id", Self::FEDERATION)] {
            let given = extra_args.iter().any(|a| *a == flag || a.starts_with(&format!("{flag}=")));
            if !given {
                cmd.args([flag, value]);
            }
        }
        let mut child = cmd
            .args(extra_args)
            .env("RUST_LOG", "debug")
            // Plain lines, without colour escapes (tracing writes them even
            // into a pipe, and honours NO_COLOR).
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hprm-rti");
        let stderr = child.stderr.take().expect("piped stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = mpsc::channel();
        let sink = lines.clone();
        std::thread::spawn(move || {
            // Runs until the daemon closes stderr (it exits or is killed),
            // so the pipe never fills up and blocks the daemon.
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let line = strip_escapes(&line);
                if let Some(addr) = line.split("listening on ").nth(1).and_then(|rest| rest.split_whitespace().next()) {
                    let _ = addr_tx.send(addr.to_owned());
                }
                sink.lock().unwrap_or_else(PoisonError::into_inner).push(line);
            }
        });
        let addr: Option<SocketAddr> = addr_rx.recv_timeout(START_WITHIN).ok().and_then(|a| a.parse().ok());
        match addr {
            Some(addr) => RtiDaemon { port: addr.port(), child, lines },
            None => {
                // Never leave a daemon behind a failed start.
                let _ = child.kill();
                let _ = child.wait();
                let log = lines.lock().unwrap_or_else(PoisonError::into_inner).join("\n");
                panic!("hprm-rti did not log a usable listening address within {START_WITHIN:?}:\n{log}");
            }
        }
    }

    /// The address federates connect to.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Every line the daemon wrote to stderr so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The stderr lines so far, as one text (for assertion messages).
    pub fn log(&self) -> String {
        self.lines().join("\n")
    }

    /// Waits until some stderr line contains `needle`, and returns it.
    /// Panics with the log after `within`.
    pub fn wait_for_line(&self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            if let Some(line) = self.lines().into_iter().find(|l| l.contains(needle)) {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "hprm-rti logged no line containing `{needle}` within {within:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the daemon to exit (it does once every federate has left),
    /// and returns its status. Panics with the log after `within`.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait on hprm-rti") {
                return status;
            }
            assert!(Instant::now() < deadline, "hprm-rti did not exit within {within:?}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RtiDaemon {
    /// SIGTERM first, so that the daemon removes its Unix socket (in the
    /// shared temporary directory); SIGKILL if it does not end in 2 s.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `line` without ANSI colour escapes (ESC [ ... m).
fn strip_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_escape = false;
    for c in line.chars() {
        match c {
            '\x1b' => in_escape = true,
            'm' if in_escape => in_escape = false,
            _ if in_escape => {}
            c => out.push(c),
        }
    }
    out
}

/// Polls `cond` every 10 ms until it holds; panics naming `what` after
/// `within`.
pub fn eventually(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out after {within:?} waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
