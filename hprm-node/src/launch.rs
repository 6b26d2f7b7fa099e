//! Launching a whole program: an object store, an RTI, one process per
//! federate, their logs multiplexed with a `[federate]` prefix.
//!
//! A program binary is its own launcher: [`Program::main`] with no
//! `--federate` starts the daemons and re-runs the binary once per
//! federate with `--federate NAME --rti ADDR --store SOCKET`; with
//! `--federate` it runs that one federate. Daemon binaries (`hprm-store`,
//! `hprm-rti`) are looked up in `$HPRM_BIN_DIR`, next to the running
//! binary (and its parent, for cargo's `deps/`), then on `PATH`.
//! [`StandaloneRti`] starts an RTI alone, for tools that speak its
//! protocol themselves (`node-bench`'s RTI round trip).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::error::NodeError;
use crate::federate::{run_federate, RunOptions};
use crate::manifest::{CoordinationMode, Manifest, RestartPolicy, DEFAULT_MAX_RESTARTS};
use crate::net::rti::RtiConfig;
use crate::program::{Coordination, Program};
use crate::sync::Mutex;

/// Builds the command that runs one federate, given its name.
pub type FederateCommand = Box<dyn Fn(&str) -> Command + Send + Sync>;

/// How to launch a program.
pub struct Launch {
    /// Run federates in fast mode.
    pub fast: bool,
    /// `--memory` of the store started for the program.
    pub store_memory: String,
    /// Builds the command that runs one federate (default: this binary
    /// with `--federate NAME`). The launcher adds the RTI and store
    /// through `HPRM_RTI` / `HPRM_STORE` / `HPRM_FEDERATE` environment
    /// variables, so any command that ends in [`Program::main`] or
    /// [`options_from_env`] works.
    pub federate_command: Option<FederateCommand>,
    /// Kill everything if the program runs longer than this.
    pub timeout: Option<Duration>,
    /// Extra arguments for `hprm-rti` (e.g. `--auth-key-file`).
    pub rti_args: Vec<String>,
    /// Extra arguments for `hprm-store` (e.g. `--populate`, `--spin 0`).
    pub store_args: Vec<String>,
    /// Print each federate's output with a `[name]` prefix (else inherit).
    pub prefix_logs: bool,
    /// Take SIGINT/SIGTERM and pass them on to the federates (a
    /// launcher process); leave off when launching from inside a test.
    pub handle_signals: bool,
    /// Also write each federate's (and daemon's) output to `DIR/NAME.log`.
    pub log_dir: Option<PathBuf>,
    /// Colour the `[name]` prefixes (see [`crate::log::ansi`]).
    pub color: bool,
    /// Overrides the program's coordination (`hprm launch --coordination`).
    pub coordination: Option<Coordination>,
    /// Write a Chrome/Perfetto trace of the run here: every reaction,
    /// grant and store transfer (see [`crate::trace`]).
    pub trace: Option<PathBuf>,
    /// Use the store already listening on this socket (a host's store, as
    /// systemd runs it; a soak test's) instead of starting one; default
    /// `$HPRM_LAUNCH_STORE` ([`STORE_ENV`]). The launcher does not own it:
    /// it neither restarts it nor stops it; `store_memory` and `store_args`
    /// do not apply.
    pub store: Option<PathBuf>,
    /// In a program with hosts (`[[host]]`): launch only this host's share
    /// (its store, its `hprm-link`, its federates, and the RTI if it is the
    /// RTI's host). Required for such a program; refused for one without.
    pub host: Option<String>,
    /// Called once every federate has exited, before the daemons the
    /// launcher started are stopped: whoever still holds references into
    /// the store takes their objects here. A recorder reads the messages
    /// its feeds still hold (`hprm launch --record`); after the store
    /// stops, their objects could no longer be taken.
    pub before_daemons_stop: Option<Box<dyn Fn() + Send + Sync>>,
}

/// The environment variable naming a running store for launches to use
/// ([`Launch::store`]), so that programs launching themselves
/// (`prog.launch()`) can share one.
pub const STORE_ENV: &str = "HPRM_LAUNCH_STORE";

impl Default for Launch {
    fn default() -> Launch {
        Launch {
            fast: false,
            store_memory: "256m".into(),
            federate_command: None,
            timeout: None,
            rti_args: Vec::new(),
            store_args: Vec::new(),
            prefix_logs: true,
            handle_signals: false,
            log_dir: None,
            color: false,
            coordination: None,
            trace: None,
            store: std::env::var_os(STORE_ENV).filter(|s| !s.is_empty()).map(PathBuf::from),
            host: None,
            before_daemons_stop: None,
        }
    }
}

/// How each federate process ended.
#[derive(Debug)]
pub struct LaunchReport {
    pub federates: Vec<(String, ExitStatus)>,
    pub rti: Option<ExitStatus>,
    /// By federate: its last lines of output, which usually say why it failed.
    pub last_words: Vec<Vec<String>>,
    /// By federate: whether the launcher stopped it because another failed.
    pub stopped: Vec<bool>,
    /// By federate: how many times it was restarted after a failure
    /// (`restart = "on-failure"`).
    pub restarts: Vec<u32>,
    /// The daemons that exited while federates still ran and were not
    /// restarted (`hprm-rti (signal: 9 (SIGKILL))`, or a store that died
    /// more than [`STORE_MAX_RESTARTS`] times); the launcher then stopped
    /// the program.
    pub lost: Vec<String>,
    /// How the store ended each time it died during the run and was
    /// restarted (`signal: 9 (SIGKILL)`); the federates reconnected.
    pub store_deaths: Vec<String>,
    /// By federate: deliveries it lost because the store died
    /// (`RunReport::losses`, kind `store_lost`, from its final status; 0 when it wrote
    /// none, e.g. it was killed).
    pub store_lost: Vec<u64>,
}

/// How many times a launch restarts a store that dies; one that dies more
/// often is lost, and the program stopped (a store that cannot stay up,
/// e.g. killed for memory each time, is not helped by more tries).
pub const STORE_MAX_RESTARTS: usize = 3;

/// How a launcher's process exits, as `hprm launch`, a Python program's
/// `Program.launch()` and a Rust program's `Program::main` report it.
pub mod exit_code {
    /// Every federate exited cleanly.
    pub const CLEAN: i32 = 0;
    /// A federate failed (a reaction raised or panicked, it crashed, or a
    /// second signal ended it at once).
    pub const FEDERATE_FAILED: i32 = 1;
    /// The program never ran: it is not valid, a flag is wrong, or a
    /// daemon could not be started.
    pub const BAD_PROGRAM: i32 = 2;
    /// A daemon died during the run: the RTI (the launcher stopped the
    /// program), or the store, which the launcher restarted: the program
    /// went on, and the values in flight then were lost (the summary counts
    /// them, per federate).
    pub const DAEMON_LOST: i32 = 3;
}

/// Tells every federate still running to stop (SIGTERM: each stops at
/// the next common tag) and marks it as stopped by the launcher.
fn stop_running(children: &[(Child, LogSink)], done: &[Option<ExitStatus>], stopped: &mut [bool]) {
    for (j, (child, _)) in children.iter().enumerate() {
        if done[j].is_none() {
            stopped[j] = true;
            if let Ok(pid) = i32::try_from(child.id()) {
                // A child not yet reaped: its pid is still ours.
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
        }
    }
}

/// Whether the RTI died: killed by a signal (it exits by itself, with a
/// status, once every federate has left).
fn rti_lost(rti: &mut Daemon) -> Option<String> {
    match rti.0.try_wait() {
        Ok(Some(s)) if s.signal().is_some() => Some(format!("hprm-rti ({s})")),
        _ => None,
    }
}

impl LaunchReport {
    /// "camera restarted 2 times, lidar 1 time", or `None` when no federate
    /// was restarted.
    pub fn restarts_summary(&self) -> Option<String> {
        let parts: Vec<String> = self
            .federates
            .iter()
            .zip(&self.restarts)
            .filter(|(_, n)| **n > 0)
            .map(|((name, _), n)| format!("{name} restarted {n} time{}", if *n == 1 { "" } else { "s" }))
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// Federates that did not exit 0, with their status and last line of output.
    pub fn failed(&self) -> Vec<String> {
        self.federates
            .iter()
            .zip(&self.last_words)
            .zip(&self.stopped)
            // A federate the launcher stopped before it could take the signal
            // (still starting up) did not fail: it was told to go. One that
            // had already failed (its error line is out) and then met the
            // launcher's SIGTERM on its way out did.
            .filter(|(((_, s), words), stopped)| {
                let told_to_go = **stopped
                    && s.signal() == Some(Signal::SIGTERM as i32)
                    && !words.iter().any(|l| l.trim_start().starts_with("error:"));
                !(s.success() || told_to_go)
            })
            .map(|(x, _)| x)
            .map(|((n, s), words)| match why_failed(n, words) {
                Some(why) => format!("{n} ({s}): {why}"),
                None => format!("{n} ({s})"),
            })
            .collect()
    }

    /// What became of the store's deaths: "hprm-store died during the run
    /// (signal: 9 (SIGKILL)) and was restarted; 12 deliveries were lost
    /// with it (source 6, sink 6)", or `None` when it never died.
    pub fn store_summary(&self) -> Option<String> {
        let deaths = &self.store_deaths;
        if deaths.is_empty() {
            return None;
        }
        let times = if deaths.len() == 1 { String::new() } else { format!(" {} times", deaths.len()) };
        let mut out = format!("hprm-store died{times} during the run ({}) and was restarted", deaths.join("; "));
        let total: u64 = self.store_lost.iter().sum();
        if total == 0 {
            out.push_str("; no value was lost with it");
        } else {
            let each: Vec<String> = self
                .federates
                .iter()
                .zip(&self.store_lost)
                .filter(|(_, n)| **n > 0)
                .map(|((name, _), n)| format!("{name} {n}"))
                .collect();
            out.push_str(&format!(
                "; {total} deliver{} lost with it ({})",
                if total == 1 { "y was" } else { "ies were" },
                each.join(", ")
            ));
        }
        Some(out)
    }

    /// The exit code a launcher reports this run with (see [`exit_code`]).
    pub fn exit_code(&self) -> i32 {
        if !self.lost.is_empty() || !self.store_deaths.is_empty() {
            exit_code::DAEMON_LOST
        } else if self.failed().is_empty() {
            exit_code::CLEAN
        } else {
            exit_code::FEDERATE_FAILED
        }
    }

    /// What a launcher prints when the run did not end cleanly: which
    /// daemon died (and, for a restarted store, what was lost with it), and
    /// every failed federate with its error, one a line.
    pub fn failure_summary(&self, program: &str) -> Option<String> {
        let failed = self.failed();
        let store = self.store_summary();
        if failed.is_empty() && self.lost.is_empty() {
            // The program went on after the store's restart.
            return store.map(|s| format!("program {program}: {s}"));
        }
        let restarts = self.restarts_summary().map(|r| format!(" ({r})")).unwrap_or_default();
        let mut out = format!("program {program} failed{restarts}");
        if !self.lost.is_empty() {
            out.push_str(&format!(": {} exited during the run", self.lost.join(" and ")));
        }
        if let Some(s) = store {
            out.push_str(&format!("; {s}"));
        }
        if !failed.is_empty() {
            out.push_str("; federates that failed:");
            for f in &failed {
                out.push_str(&format!("\n  - {f}"));
            }
        }
        Some(out)
    }
}

/// Why federate `name` failed, from its last lines: its last `error:`
/// line (a Rust federate's `Program::main`, a Python federate's reaction
/// error) without the `error: federate NAME:` its own process prefixed,
/// else its last line (a Python traceback's exception line).
fn why_failed(name: &str, words: &[String]) -> Option<String> {
    let own = format!("error: federate {name}: ");
    let line = words
        .iter()
        .rev()
        .find(|l| l.trim_start().starts_with("error:"))
        .or_else(|| words.iter().rev().find(|l| !l.trim().is_empty()))?;
    let line = line.trim();
    Some(line.strip_prefix(&own).unwrap_or(line).to_string())
}

/// A daemon binary: `$HPRM_BIN_DIR`, next to this executable (or one
/// directory up, for test binaries in `deps/`), or `PATH`.
pub fn find_binary(name: &str) -> Result<PathBuf, NodeError> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("HPRM_BIN_DIR") {
        dirs.push(PathBuf::from(d));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(d) = exe.parent() {
            dirs.push(d.to_path_buf());
            if let Some(up) = d.parent() {
                dirs.push(up.to_path_buf());
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()).ok_or_else(|| {
        NodeError::Launch(format!("cannot find the `{name}` binary next to this program or on PATH; build it (`cargo build --release`) or set HPRM_BIN_DIR to the directory holding it"))
    })
}

/// A child process killed when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An `hprm-rti` started on its own, outside a launch: tools and
/// benchmarks that speak the RTI protocol themselves (`node-bench`
/// measures a round trip through it). Its Unix socket lies in the
/// runtime directory it was given; it is killed when dropped.
pub struct StandaloneRti {
    _daemon: Daemon,
    addr: String,
    runtime_dir: PathBuf,
    log: LogSink,
}

impl StandaloneRti {
    /// Starts `hprm-rti --federates N --id ID` and `extra` on a free port of
    /// 127.0.0.1, with `HPRM_RUNTIME_DIR=runtime_dir`. Its log is kept, not
    /// printed ([`StandaloneRti::last_words`]).
    pub fn start(federates: usize, id: &str, extra: &[String], runtime_dir: &Path) -> Result<StandaloneRti, NodeError> {
        let log = LogSink::kept("[hprm-rti]");
        let (daemon, addr) = start_rti(federates, id, extra, runtime_dir, &log, ("127.0.0.1", 0))?;
        Ok(StandaloneRti { _daemon: daemon, addr, runtime_dir: runtime_dir.to_path_buf(), log })
    }

    /// Its TCP address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Its Unix socket (in the runtime directory it was given), for
    /// clients on this host.
    pub fn unix_socket(&self) -> Result<PathBuf, NodeError> {
        let port =
            self.addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()).ok_or_else(|| {
                NodeError::Launch(format!("hprm-rti reported an address without a port: {}", self.addr))
            })?;
        let path = hprm_rti::endpoint::unix_socket(hprm_rti::endpoint::Server::Rti, port);
        Ok(self.runtime_dir.join(path.file_name().unwrap_or(path.as_os_str())))
    }

    /// Its last lines of log, to say why a conversation with it failed.
    pub fn last_words(&self) -> Vec<String> {
        self.log.last_words()
    }
}

/// Where one process's output goes: stderr behind a `[name]` prefix (when
/// `echo`), an optional log file, and the last few lines (kept to say why
/// it failed).
#[derive(Clone)]
struct LogSink {
    prefix: String,
    echo: bool,
    file: Option<Arc<Mutex<std::fs::File>>>,
    tail: Arc<Mutex<VecDeque<String>>>,
    /// The threads copying this process's pipes (one more per restart).
    /// A process's exit is seen before its last lines are copied: whoever
    /// reads `tail` to say why it failed [`drain`](LogSink::drain)s first.
    relays: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>>,
}

/// Lines of a federate's output kept for the failure report.
const TAIL_LINES: usize = 8;

/// ANSI colours for prefixes, one per process in turn.
const COLORS: [u8; 6] = [36, 33, 35, 32, 34, 31];

impl LogSink {
    fn new(name: &str, index: usize, launch: &Launch) -> Result<LogSink, NodeError> {
        let prefix = if launch.color {
            format!("\x1b[{}m[{name}]\x1b[0m", COLORS[index % COLORS.len()])
        } else {
            format!("[{name}]")
        };
        let file = match &launch.log_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| NodeError::io(format!("creating the log directory {}", dir.display()), e))?;
                let path = dir.join(format!("{name}.log"));
                let f = std::fs::File::create(&path)
                    .map_err(|e| NodeError::io(format!("creating {}", path.display()), e))?;
                Some(Arc::new(Mutex::new(f)))
            }
            None => None,
        };
        Ok(LogSink { prefix, echo: true, file, tail: Arc::default(), relays: Arc::default() })
    }

    /// A sink that only keeps the last lines (nothing echoed, no file).
    fn kept(prefix: &str) -> LogSink {
        LogSink { prefix: prefix.into(), echo: false, file: None, tail: Arc::default(), relays: Arc::default() }
    }

    /// Copies a child's output here, line by line, on a thread of its own.
    fn relay(&self, out: impl Read + Send + 'static) {
        let sink = self.clone();
        let relay = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if sink.echo {
                    eprintln!("{} {line}", sink.prefix);
                }
                if let Some(f) = &sink.file {
                    let _ = writeln!(f.lock(), "{line}");
                }
                let mut tail = sink.tail.lock();
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        self.relays.lock().push(relay);
    }

    /// Waits until every pipe of this (exited) process is copied to its
    /// end, or `until`: a grandchild that inherited a pipe may hold it open.
    fn drain(&self, until: Instant) {
        while self.relays.lock().iter().any(|r| !r.is_finished()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn last_words(&self) -> Vec<String> {
        self.tail.lock().iter().cloned().collect()
    }
}

/// Starts `hprm-store` on a socket in `dir`; returns once it accepts clients.
fn start_store(dir: &Path, memory: &str, extra: &[String], log: &LogSink) -> Result<(Daemon, PathBuf), NodeError> {
    let socket = dir.join("store.sock");
    let mut cmd = Command::new(find_binary("hprm-store")?);
    cmd.args(["--socket".as_ref(), socket.as_os_str(), "--memory".as_ref(), memory.as_ref()])
        .args(extra)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    crate::signal::detach(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| NodeError::io("starting hprm-store", e))?;
    if let Some(err) = child.stderr.take() {
        log.relay(err);
    }
    let daemon = Daemon(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if Instant::now() > deadline {
            return Err(NodeError::Launch(format!(
                "hprm-store did not open {} within 20 s; see its log above",
                socket.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((daemon, socket))
}

/// Starts `hprm-rti` on a free port; returns it with its address.
fn start_rti(
    n: usize,
    id: &str,
    extra: &[String],
    dir: &Path,
    log: &LogSink,
    (bind, port): (&str, u16),
) -> Result<(Daemon, String), NodeError> {
    let mut cmd = Command::new(find_binary("hprm-rti")?);
    let port = port.to_string();
    cmd.args(["--port", &port, "--bind", bind, "--federates", &n.to_string(), "--id", id]).args(extra);
    // Off unless `extra` says otherwise: processes on one host share a clock.
    if !extra.iter().any(|a| a == "--clock-sync") {
        cmd.args(["--clock-sync", "off"]);
    }
    cmd.env("NO_COLOR", "1")
        // Its Unix socket goes where the federates look for it.
        .env("HPRM_RUNTIME_DIR", dir)
        // The address comes from its "listening on" log line: keep that line.
        .env("RUST_LOG", rti_log_filter())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    crate::signal::detach(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| NodeError::io("starting hprm-rti", e))?;
    let err = child.stderr.take().ok_or_else(|| NodeError::Launch("hprm-rti has no stderr".into()))?;
    let daemon = Daemon(child);
    let (tx, rx) = mpsc::channel();
    // Read the address off the first lines, then hand the rest to the log.
    let mut lines = BufReader::new(err);
    let log = log.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
            let text = line.trim_end().to_string();
            line.clear();
            if log.echo {
                eprintln!("{} {text}", log.prefix);
            }
            if let Some(addr) = text.split("listening on ").nth(1) {
                let _ = tx.send(addr.split_whitespace().next().unwrap_or_default().to_string());
                log.relay(lines);
                return;
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .map_err(|_| NodeError::Launch("hprm-rti did not report its address within 20 s; see its log above".into()))?;
    Ok((daemon, addr))
}

/// Whether host `me`'s link dials host `other`'s: the host whose name sorts
/// first dials, the other only listens ([`HostShare::link_args`] says why
/// only one of each pair does).
pub fn dials(me: &str, other: &str) -> bool {
    me < other
}

/// One host's share of a program with hosts: what `hprm launch --host`
/// starts there, and what `hprm deploy --systemd` writes units for.
#[derive(Debug, Clone)]
pub struct HostShare {
    pub me: crate::manifest::HostSpec,
    /// Whether this host runs the RTI.
    pub rti_here: bool,
    /// Where every federate reaches the RTI: its host's address and port.
    pub rti_addr: String,
    /// `HPRM_FEDERATE_HOSTS` for the federates.
    pub federate_hosts: String,
    /// The other hosts.
    pub others: Vec<crate::manifest::HostSpec>,
}

impl HostShare {
    /// The arguments of this host's `hprm-link`, besides its store, socket,
    /// queue policy and TLS identity: its name, where it listens, every
    /// other host's name, the endpoints of those it dials, and the bound on
    /// noticing a lost host.
    ///
    /// Each pair of hosts is dialed from one side only ([`dials`]): when
    /// both sides dial, a cut can leave Zenoh's session between them split
    /// for good (Zenoh issue #2806; docs/src/hosts.md, "The way back after
    /// a cut link", says how, and why one dialer prevents it).
    pub fn link_args(&self, host_timeout: Duration) -> Vec<String> {
        let mut args = vec!["--host".to_string(), self.me.name.clone(), "--listen".into(), self.me.link_endpoint()];
        args.extend(["--host-timeout-ms".to_string(), host_timeout.as_millis().max(1).to_string()]);
        for other in &self.others {
            if dials(&self.me.name, &other.name) {
                args.extend(["--connect".to_string(), other.link_endpoint()]);
            }
            args.extend(["--peer".to_string(), other.name.clone()]);
        }
        args
    }

    /// Host `host`'s share of `m` (expanded and checked), `None` for a
    /// program without hosts (and no `host`).
    pub fn of(m: &Manifest, host: Option<&str>) -> Result<Option<HostShare>, NodeError> {
        let names = || m.hosts.iter().map(|h| h.name.as_str()).collect::<Vec<_>>().join(", ");
        let me = match (host, m.hosts.is_empty()) {
            (None, true) => return Ok(None),
            (Some(h), true) => {
                let why = format!(
                    "--host {h}: program {} names no hosts ([[host]] tables); launch it without --host",
                    m.name
                );
                return Err(NodeError::Launch(why));
            }
            (None, false) => {
                let why = format!(
                    "program {} runs on several hosts ({}): launch each host's share there with `hprm launch --host NAME`",
                    m.name,
                    names()
                );
                return Err(NodeError::Launch(why));
            }
            (Some(h), false) => m.hosts.iter().find(|x| x.name == h).cloned().ok_or_else(|| {
                NodeError::Launch(format!("--host {h}: program {} has no such host; its hosts are {}", m.name, names()))
            })?,
        };
        let no_rti = || NodeError::Launch("the program names no host for the RTI".into());
        let rti = m.rti_host().ok_or_else(no_rti)?;
        Ok(Some(HostShare {
            rti_here: rti.name == me.name,
            rti_addr: m.rti_addr().ok_or_else(no_rti)?,
            federate_hosts: crate::hosts::Hosts::format_list(
                m.federates.iter().filter_map(|f| Some((f.name.as_str(), f.host.as_deref()?))),
            ),
            others: m.hosts.iter().filter(|h| h.name != me.name).cloned().collect(),
            me,
        }))
    }
}

/// Starts `hprm-link` for `share`, its push socket in `dir`; returns once
/// it accepts federates.
fn start_link(
    share: &HostShare,
    store: &Path,
    dir: &Path,
    host_timeout: Duration,
    log: &LogSink,
) -> Result<(Daemon, PathBuf), NodeError> {
    let socket = dir.join("link.sock");
    let mut cmd = Command::new(find_binary("hprm-link")?);
    cmd.args(share.link_args(host_timeout))
        .arg("--store")
        .arg(store)
        .arg("--socket")
        .arg(&socket)
        // Where it reads this host's federates' status, and mirrors the
        // other hosts' (`crate::status`), for `hprm ps` and the dashboard.
        .arg("--runtime-dir")
        .arg(dir)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // What a push does when its host's queue is full, the DSCP of its
    // connections, how long a dropped push is kept for a fetch.
    cmd.args(crate::hosts::link_env_args().map_err(NodeError::Launch)?);
    // This host's TLS identity, for links over `tls/` endpoints.
    let tls: Vec<_> = crate::hosts::LINK_TLS_ENV.iter().map(|(var, _)| std::env::var_os(var)).collect();
    match tls.iter().filter(|v| v.is_some()).count() {
        0 => {}
        3 => {
            for ((_, flag), value) in crate::hosts::LINK_TLS_ENV.iter().zip(tls.into_iter().flatten()) {
                cmd.arg(flag).arg(value);
            }
        }
        _ => {
            let vars = crate::hosts::LINK_TLS_ENV.map(|(v, _)| v).join(", ");
            return Err(NodeError::Launch(format!(
                "set all of {vars} (this host's TLS identity for hprm-link) or none"
            )));
        }
    }
    crate::signal::detach(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| NodeError::io("starting hprm-link", e))?;
    if let Some(err) = child.stderr.take() {
        log.relay(err);
    }
    let mut daemon = Daemon(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Ok(Some(status)) = daemon.0.try_wait() {
            return Err(NodeError::Launch(format!("hprm-link exited during start ({status}); see its log above")));
        }
        if Instant::now() > deadline {
            return Err(NodeError::Launch(format!(
                "hprm-link did not open {} within 20 s; see its log above",
                socket.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((daemon, socket))
}

/// The user's RUST_LOG with `hprm_rti` at `info` at least.
fn rti_log_filter() -> String {
    match std::env::var("RUST_LOG") {
        Ok(f) if f.contains("hprm_rti") => f,
        Ok(f) if !f.trim().is_empty() => format!("{f},hprm_rti=info"),
        _ => "info".into(),
    }
}

impl Launch {
    /// Launches every federate of `program` and waits for all to end.
    pub fn run(&self, program: &Program) -> Result<LaunchReport, NodeError> {
        program.validate()?;
        self.run_manifest(&program.manifest())
    }

    /// Launches the program `m` describes: a store, an RTI, then each
    /// federate with [`Launch::federate_command`]. When a federate fails,
    /// it is started again if its policy says so (`restart = "on-failure"`,
    /// at most `max_restarts` times; the RTI holds its downstream until it
    /// rejoins); otherwise the others are asked to stop (SIGTERM: a stop at
    /// a common tag, so shutdown reactions run).
    pub fn run_manifest(&self, m: &Manifest) -> Result<LaunchReport, NodeError> {
        let mut m = m.clone();
        if let Some(c) = self.coordination {
            (m.coordination, m.stp) = match c {
                Coordination::Centralized => (CoordinationMode::Centralized, None),
                Coordination::Decentralized { stp } => (
                    CoordinationMode::Decentralized,
                    Some(m.stp.clone().unwrap_or_else(|| crate::manifest::format_duration(stp))),
                ),
            };
        }
        let problems = m.check();
        if !problems.is_empty() {
            return Err(crate::error::ProgramError {
                program: m.name.clone(),
                problems: problems.into_iter().map(|p| p.message).collect(),
            }
            .into());
        }
        // What runs is the plain graph: a bank's members are federates.
        let m = m.expanded();
        let share = HostShare::of(&m, self.host.as_deref())?;
        let auth_key = crate::hosts::auth_key_file(&m.name, share.is_some()).map_err(NodeError::Launch)?;
        // Between hosts, a lost host or link is noticed within this bound
        // (the RTI's and federates' TCP connections, the links' Zenoh lease).
        let host_timeout = match &share {
            Some(_) => Some(crate::hosts::host_timeout().map_err(NodeError::Launch)?),
            None => None,
        };
        if let Some(out) = &self.trace {
            let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !parent.is_dir() {
                return Err(NodeError::Launch(format!(
                    "cannot write the trace to {}: the directory {} does not exist",
                    out.display(),
                    parent.display()
                )));
            }
        }
        let pids = Arc::new(Mutex::new(Vec::new()));
        // Held for the launch: a signal stops this launch's federates.
        let _signals = self.handle_signals.then(|| crate::signal::forward_to_children(pids.clone())).transpose()?;
        let dir = tempfile_dir()?;
        // Every federate gets the graph, so a process without the program's code can join it.
        let manifest = dir.path().join("manifest.json");
        std::fs::write(&manifest, m.to_json())
            .map_err(|e| NodeError::io(format!("writing {}", manifest.display()), e))?;
        let n_all = m.federates.len();
        let memory = m.store_memory.clone().unwrap_or_else(|| self.store_memory.clone());
        let store_log = LogSink::new("hprm-store", n_all, self)?;
        // None: the store is not this launch's (`Launch::store`).
        let (mut store, socket) = match &self.store {
            Some(socket) => {
                if let Err(e) = std::os::unix::net::UnixStream::connect(socket) {
                    return Err(NodeError::Launch(format!(
                        "no hprm-store listens on {} ({STORE_ENV} or Launch::store): {e}; start it, or leave {STORE_ENV} unset to have the launcher start one",
                        socket.display()
                    )));
                }
                (None, socket.clone())
            }
            None => {
                let (daemon, socket) = start_store(dir.path(), &memory, &self.store_args, &store_log)?;
                (Some(daemon), socket)
            }
        };
        let mut rti_args = Vec::new();
        rti_args.extend(self.rti_args.iter().cloned());
        // Federates find the key in HPRM_AUTH_KEY_FILE, which they inherit.
        if let Some(key) = auth_key.filter(|_| !rti_args.iter().any(|a| a == "--auth-key-file")) {
            rti_args.extend(["--auth-key-file".to_string(), key.to_string_lossy().into_owned()]);
        }
        if self.fast {
            rti_args.push("--fast".into());
        }
        if let Some(restartable) = m.restartable() {
            rti_args.extend(["--restartable".to_string(), restartable]);
        }
        // Each process writes its part of the trace here; merged at the end.
        let trace_parts = dir.path().join("trace");
        if self.trace.is_some() {
            std::fs::create_dir_all(&trace_parts)
                .map_err(|e| NodeError::io(format!("creating {}", trace_parts.display()), e))?;
            rti_args.extend(["--trace".to_string(), trace_parts.join("hprm-rti.json").to_string_lossy().into_owned()]);
        }
        if let Some(t) = host_timeout {
            rti_args.extend(["--host-timeout-ms".to_string(), t.as_millis().max(1).to_string()]);
        }
        // Between hosts, clocks differ: the RTI measures each federate's
        // offset at join and corrects it every period (UDP, any free port).
        let clock_sync = share.is_some() && crate::hosts::clock_sync().map_err(NodeError::Launch)?;
        if clock_sync {
            rti_args.extend(["--clock-sync", "on", "--clock-sync-port", "0"].map(String::from));
        }
        let rti_log = LogSink::new("hprm-rti", n_all + 1, self)?;
        let (mut rti, addr) = match &share {
            None => {
                let (d, addr) = start_rti(n_all, &m.name, &rti_args, dir.path(), &rti_log, ("127.0.0.1", 0))?;
                (Some(d), addr)
            }
            Some(s) if s.rti_here => {
                let port = m.rti_port.unwrap_or(crate::manifest::DEFAULT_RTI_PORT);
                let (d, _) = start_rti(n_all, &m.name, &rti_args, dir.path(), &rti_log, (&s.me.address, port))?;
                (Some(d), s.rti_addr.clone())
            }
            // On the RTI's host; federates retry until it is up.
            Some(s) => (None, s.rti_addr.clone()),
        };
        let link = match &share {
            Some(s) => {
                let log = LogSink::new("hprm-link", n_all + 2, self)?;
                Some(start_link(
                    s,
                    &socket,
                    dir.path(),
                    host_timeout.unwrap_or(crate::hosts::DEFAULT_HOST_TIMEOUT),
                    &log,
                )?)
            }
            None => None,
        };
        // For `hprm ps`: every host's federates, in id order.
        let placement = share.as_ref().map(|s| crate::status::ProgramHosts {
            host: s.me.name.clone(),
            federates: m.federates.iter().map(|f| (f.name.clone(), f.host.clone().unwrap_or_default())).collect(),
        });
        // From here on: this host's federates only.
        let m = match &share {
            Some(s) => Manifest {
                federates: m
                    .federates
                    .iter()
                    .filter(|f| f.host.as_deref() == Some(s.me.name.as_str()))
                    .cloned()
                    .collect(),
                ..m
            },
            None => m,
        };
        let n = m.federates.len();
        let mut daemons = (
            store.as_ref().map(|d| crate::status::StoreProcess { pid: d.0.id(), socket: socket.clone() }),
            rti.as_ref().map(|r| crate::status::RtiProcess { pid: r.0.id(), addr: addr.clone() }),
        );
        let trace = self.trace.as_ref().map(|_| trace_parts.as_path());
        let env = ChildEnv {
            dir: dir.path(),
            manifest: &manifest,
            rti: &addr,
            store: &socket,
            federation: &m.name,
            coordination: &m,
            trace,
            host_timeout,
            clock_sync,
            hosts: share
                .as_ref()
                .zip(link.as_ref())
                .map(|(s, (_, sock))| (s.me.name.as_str(), s.federate_hosts.as_str(), sock.as_path())),
        };
        let mut children = Vec::new();
        for (i, f) in m.federates.iter().enumerate() {
            let log = LogSink::new(&f.name, i, self)?;
            let child = self.spawn_federate(&f.name, &env, &log, &pids)?;
            children.push((child, log));
        }
        let started_ns = crate::clock::system_now();
        let mut restarts = vec![0u32; n];
        let base = crate::status::LaunchInfo {
            program: m.name.clone(),
            pid: std::process::id(),
            started_ns,
            runtime_dir: dir.path().to_path_buf(),
            federates: m
                .federates
                .iter()
                .map(|f| crate::status::FederateProcess { name: f.name.clone(), pid: 0, restarts: 0 })
                .collect(),
            store: None,
            rti: None,
            hosts: placement,
            deployed: false,
        };
        self.record_launch(&base, &children, &restarts, &daemons);
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let mut done: Vec<Option<ExitStatus>> = vec![None; n];
        let mut stopping = false;
        let mut stopped = vec![false; n];
        let mut lost: Vec<String> = Vec::new();
        let mut store_deaths: Vec<String> = Vec::new();
        while done.iter().any(Option::is_none) {
            // The store never exits on its own while a launch holds it: it
            // died. Federates find out by themselves at once (each logs it
            // once), lose what is in flight, and reconnect once it is back.
            let lost_before = lost.len();
            let store_died = match &mut store {
                Some(d) if lost.is_empty() => d.0.try_wait().ok().flatten(),
                _ => None,
            };
            if let Some(status) = store_died {
                let restarted = if store_deaths.len() < STORE_MAX_RESTARTS {
                    store_deaths.push(status.to_string());
                    tracing::error!(
                        "hprm-store died ({status}); restarting it ({} of {STORE_MAX_RESTARTS} restarts): the federates reconnect, \
                         and the values in flight are lost (each federate counts them: store_lost)",
                        store_deaths.len()
                    );
                    match start_store(dir.path(), &memory, &self.store_args, &store_log) {
                        Ok((restarted, _)) => {
                            daemons.0 =
                                Some(crate::status::StoreProcess { pid: restarted.0.id(), socket: socket.clone() });
                            store = Some(restarted);
                            self.record_launch(&base, &children, &restarts, &daemons);
                            true
                        }
                        Err(e) => {
                            tracing::error!("cannot restart hprm-store: {e}");
                            false
                        }
                    }
                } else {
                    tracing::error!("hprm-store died again ({status}) after {STORE_MAX_RESTARTS} restarts; giving up");
                    false
                };
                if !restarted {
                    lost.push(format!("hprm-store ({status})"));
                }
            }
            if lost.is_empty() {
                if let Some(rti) = &mut rti {
                    lost.extend(rti_lost(rti));
                }
            }
            if lost.len() > lost_before {
                tracing::error!(
                    "{} exited during the run; the program cannot go on without it: stopping the federates",
                    lost.join(" and ")
                );
                stopping = true;
                stop_running(&children, &done, &mut stopped);
            }
            for i in 0..n {
                if done[i].is_some() {
                    continue;
                }
                let Ok(Some(status)) = children[i].0.try_wait() else { continue };
                let f = &m.federates[i];
                if status.success() || stopping {
                    done[i] = Some(status);
                    continue;
                }
                if f.restart == RestartPolicy::OnFailure && !crate::signal::stop_requested() {
                    let max = f.max_restarts.unwrap_or(DEFAULT_MAX_RESTARTS);
                    let why =
                        children[i].1.last_words().into_iter().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
                    if restarts[i] < max {
                        restarts[i] += 1;
                        tracing::warn!(federate = %f.name, %status, "federate failed ({}); restarting it ({} of {max} restarts)", why.trim(), restarts[i]);
                        match self.spawn_federate(&f.name, &env, &children[i].1, &pids) {
                            Ok(child) => {
                                let old = std::mem::replace(&mut children[i].0, child).id();
                                pids.lock().retain(|p| *p != old);
                                self.record_launch(&base, &children, &restarts, &daemons);
                                continue;
                            }
                            Err(e) => tracing::error!(federate = %f.name, "cannot restart it: {e}"),
                        }
                    } else {
                        tracing::error!(federate = %f.name, %status, "federate failed again ({}) after {max} restarts (max_restarts); giving up", why.trim());
                    }
                }
                done[i] = Some(status);
                tracing::error!(federate = %f.name, %status, "federate failed; stopping the program");
                stopping = true;
                stop_running(&children, &done, &mut stopped);
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                for (i, (child, _)) in children.iter_mut().enumerate() {
                    if done[i].is_none() && child.try_wait().ok().flatten().is_none() {
                        tracing::error!(federate = %m.federates[i].name, "killed: the program ran past its launch timeout");
                        let _ = child.kill();
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(hook) = &self.before_daemons_stop {
            hook();
        }
        let rti_status = match &mut rti {
            Some(rti) => wait_timeout(&mut rti.0, Duration::from_secs(5)),
            // Another host's: this share ended cleanly as far as it knows.
            None => Some(ExitStatus::default()),
        };
        // This host's federates are done: the link may go (SIGTERM, so it
        // logs its counters; killed with the Daemon if it lingers).
        if let Some((mut link, _)) = link {
            let pid = nix::unistd::Pid::from_raw(link.0.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            wait_timeout(&mut link.0, Duration::from_secs(2));
        }
        if let Some(out) = &self.trace {
            let names: Vec<String> = m.federates.iter().map(|f| f.name.clone()).collect();
            let events =
                crate::trace::merge(&trace_parts, &names, out).map_err(|e| NodeError::Launch(e.to_string()))?;
            tracing::info!(events, "trace written to {} (open it in ui.perfetto.dev)", out.display());
        }
        // Every process but the store has exited: its last lines (a federate's
        // error, the RTI's farewell) come before the report, which names
        // a federate as failed only if its error line is in.
        let until = Instant::now() + Duration::from_secs(2);
        children.iter().map(|(_, log)| log).chain([&rti_log]).for_each(|log| log.drain(until));
        let last_words = children.iter().map(|(_, log)| log.last_words()).collect();
        let federates = m
            .federates
            .iter()
            .map(|f| f.name.clone())
            .zip(done.into_iter().map(|s| s.expect("every federate has exited")))
            .collect();
        let store_lost = m
            .federates
            .iter()
            .map(|f| {
                crate::status::ended(dir.path(), &f.name).map_or(0, |s| s.losses.total(crate::loss::Loss::StoreLost))
            })
            .collect();
        Ok(LaunchReport { federates, rti: rti_status, last_words, stopped, restarts, lost, store_deaths, store_lost })
    }

    /// Writes what `hprm ps` lists: the program, its federates' pids, and
    /// the store and RTI it started.
    /// `base` holds what does not change during the launch (its
    /// `federates` name this host's, in the order of `children`).
    fn record_launch(
        &self,
        base: &crate::status::LaunchInfo,
        children: &[(Child, LogSink)],
        restarts: &[u32],
        daemons: &(Option<crate::status::StoreProcess>, Option<crate::status::RtiProcess>),
    ) {
        let info = crate::status::LaunchInfo {
            federates: base
                .federates
                .iter()
                .zip(children)
                .zip(restarts)
                .map(|((f, (c, _)), &restarts)| crate::status::FederateProcess {
                    name: f.name.clone(),
                    pid: c.id(),
                    restarts,
                })
                .collect(),
            store: daemons.0.clone(),
            rti: daemons.1.clone(),
            ..base.clone()
        };
        let dir = &base.runtime_dir;
        if let Err(e) = crate::status::write_launch(dir, &info) {
            tracing::warn!(
                "cannot write {}: {e}; `hprm ps` will not list this program",
                dir.join(crate::status::LAUNCH_FILE).display()
            );
        }
    }

    fn spawn_federate(
        &self,
        name: &str,
        env: &ChildEnv<'_>,
        log: &LogSink,
        pids: &crate::signal::Pids,
    ) -> Result<Child, NodeError> {
        let mut cmd = match &self.federate_command {
            Some(f) => f(name),
            None => {
                let exe = std::env::current_exe().map_err(|e| NodeError::io("finding this program's binary", e))?;
                let mut c = Command::new(exe);
                // The program's own arguments too: every process must build the same program.
                c.args(std::env::args().skip(1)).args(["--federate", name]);
                c
            }
        };
        if self.prefix_logs {
            // Their output goes through a pipe to our terminal: no colour codes.
            cmd.env("NO_COLOR", "1");
        }
        cmd.env("HPRM_RUNTIME_DIR", env.dir).env("HPRM_MANIFEST", env.manifest);
        cmd.env("HPRM_FEDERATE", name)
            .env("HPRM_RTI", env.rti)
            .env("HPRM_STORE", env.store)
            .env("HPRM_FEDERATION", env.federation);
        if self.fast {
            cmd.env("HPRM_FAST", "1");
        }
        if let Some((host, federate_hosts, link)) = env.hosts {
            cmd.env("HPRM_HOST", host).env("HPRM_FEDERATE_HOSTS", federate_hosts).env("HPRM_LINK", link);
        }
        if let Some(t) = env.host_timeout {
            cmd.env(crate::hosts::HOST_TIMEOUT_ENV, format!("{}ms", t.as_millis().max(1)));
        }
        if env.clock_sync {
            cmd.env(crate::hosts::CLOCK_SYNC_ENV, "1");
        }
        if let Some(dir) = env.trace {
            cmd.env(crate::trace::TRACE_ENV, dir);
        }
        if self.coordination.is_some() {
            let m = env.coordination;
            let mode = match m.coordination {
                CoordinationMode::Centralized => "centralized".to_string(),
                CoordinationMode::Decentralized => format!("decentralized:{}", m.stp.as_deref().unwrap_or("20ms")),
            };
            cmd.env("HPRM_COORDINATION", mode);
        }
        if self.prefix_logs {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        crate::signal::detach(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| NodeError::io(format!("starting federate {name} ({cmd:?})"), e))?;
        pids.lock().push(child.id());
        if self.prefix_logs {
            if let Some(o) = child.stdout.take() {
                log.relay(o);
            }
            if let Some(e) = child.stderr.take() {
                log.relay(e);
            }
        }
        Ok(child)
    }
}

/// What every federate process of one launch is told.
struct ChildEnv<'a> {
    dir: &'a Path,
    manifest: &'a Path,
    rti: &'a str,
    store: &'a Path,
    federation: &'a str,
    coordination: &'a Manifest,
    /// Where federates write their trace parts (`--trace`).
    trace: Option<&'a Path>,
    /// In a program with hosts: how soon a lost host is noticed (`HPRM_HOST_TIMEOUT`).
    host_timeout: Option<Duration>,
    /// Whether federates synchronize their clocks with the RTI's (`HPRM_CLOCK_SYNC`).
    clock_sync: bool,
    /// In a program with hosts: this host, `HPRM_FEDERATE_HOSTS`, the link's socket.
    hosts: Option<(&'a str, &'a str, &'a Path)>,
}

fn wait_timeout(child: &mut Child, t: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + t;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A private runtime directory for the daemons' sockets.
fn tempfile_dir() -> Result<TempDir, NodeError> {
    let path =
        crate::status::runtime_base().join(format!("hprm-{}-{}", std::process::id(), crate::clock::system_now()));
    std::fs::create_dir_all(&path).map_err(|e| NodeError::io(format!("creating {}", path.display()), e))?;
    Ok(TempDir(path))
}

struct TempDir(PathBuf);

impl TempDir {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Federate options from the environment a launcher sets (`HPRM_FEDERATE`,
/// `HPRM_RTI`, `HPRM_STORE`, `HPRM_FEDERATION`, `HPRM_FAST`, `HPRM_AUTH_KEY_FILE`, `HPRM_CLOCK_SYNC`,
/// `HPRM_LOCAL_TRANSPORT`, `HPRM_COORDINATION` = `centralized` or `decentralized:STP`), or `None`
/// when `HPRM_FEDERATE` is unset.
pub fn options_from_env(program: &Program) -> Option<RunOptions> {
    let name = std::env::var("HPRM_FEDERATE").ok()?;
    let mut o = RunOptions::new(name);
    o.rti = std::env::var("HPRM_RTI").ok().map(|addr| {
        let mut c =
            RtiConfig::new(addr, std::env::var("HPRM_FEDERATION").unwrap_or_else(|_| program.name().to_string()));
        c.auth_key = std::env::var_os("HPRM_AUTH_KEY_FILE").and_then(|f| std::fs::read(f).ok()).map(|mut k| {
            while k.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                k.pop();
            }
            k
        });
        c.clock_sync = std::env::var(crate::hosts::CLOCK_SYNC_ENV).is_ok_and(|v| v == "1");
        c
    });
    o.store = std::env::var_os("HPRM_STORE").map(PathBuf::from);
    o.runtime_dir = std::env::var_os("HPRM_RUNTIME_DIR").filter(|d| !d.is_empty()).map(PathBuf::from);
    o.fast = std::env::var("HPRM_FAST").is_ok_and(|v| v == "1");
    if let Ok(t) = std::env::var("HPRM_LOCAL_TRANSPORT") {
        match t.as_str() {
            "unix" => o.local_transport = crate::net::socket::LocalTransport::Unix,
            "tcp" => o.local_transport = crate::net::socket::LocalTransport::Tcp,
            other => tracing::warn!(
                "HPRM_LOCAL_TRANSPORT={other:?} is neither `unix` nor `tcp`; using {:?}",
                o.local_transport
            ),
        }
    }
    if let Ok(c) = std::env::var("HPRM_COORDINATION") {
        o.coordination = match c.split_once(':') {
            None if c == "centralized" => Some(Coordination::Centralized),
            Some(("decentralized", stp)) => {
                crate::manifest::parse_duration(stp).ok().map(|stp| Coordination::Decentralized { stp })
            }
            _ => None,
        };
        if o.coordination.is_none() {
            tracing::warn!(
                "HPRM_COORDINATION={c:?} is neither `centralized` nor `decentralized:STP`; using the program's own"
            );
        }
    }
    o.hosts = match crate::hosts::Hosts::from_env() {
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => {
            tracing::error!("{e}; values for receivers on other hosts will not reach them");
            None
        }
        None => None,
    };
    if let Some(path) = std::env::var_os(crate::record::RECORD_ENV).filter(|p| !p.is_empty()) {
        let text = std::env::var(crate::record::POLICY_ENV).unwrap_or_else(|_| "block".into());
        match crate::record::parse_policy(&text) {
            Ok(policy) => o.record = Some((PathBuf::from(path), policy)),
            Err(e) => tracing::error!("{}; this federate is not recorded", crate::record::RecordError::Policy(text, e)),
        }
    }
    o.decisions = std::env::var_os(crate::record::DECISIONS_ENV).filter(|p| !p.is_empty()).map(PathBuf::from);
    o.physical = std::env::var_os(crate::record::PHYSICAL_ENV).filter(|p| !p.is_empty()).map(PathBuf::from);
    o.handle_signals = true;
    Some(o)
}

impl Program {
    /// The `main` of a program binary. With `--federate NAME` (or
    /// `HPRM_FEDERATE`), runs that federate (`--rti HOST:PORT`, `--store
    /// SOCKET`, `--fast`); otherwise launches the whole program: a store,
    /// an RTI and every federate (`--fast`, `--timeout SECONDS`, `--trace
    /// FILE`).
    /// Exits the process with 0 on success, 1 on failure.
    pub fn main(self) -> ! {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
            .with_writer(std::io::stderr)
            .with_ansi(crate::log::ansi())
            .try_init();
        if let Some(path) = std::env::var_os("HPRM_DESCRIBE") {
            // `hprm` asks for the program's graph: write it, run nothing.
            let code = match std::fs::write(&path, self.manifest().to_json()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!(
                        "error: cannot write the program's manifest to {} (HPRM_DESCRIBE): {e}",
                        path.to_string_lossy()
                    );
                    1
                }
            };
            std::process::exit(code);
        }
        let args: Vec<String> = std::env::args().skip(1).collect();
        let flag = |f: &str| args.iter().position(|a| a == f).and_then(|i| args.get(i + 1)).cloned();
        if let Some(name) = flag("--federate") {
            std::env::set_var("HPRM_FEDERATE", name);
            if let Some(a) = flag("--rti") {
                std::env::set_var("HPRM_RTI", a);
            }
            if let Some(s) = flag("--store") {
                std::env::set_var("HPRM_STORE", s);
            }
        }
        if args.iter().any(|a| a == "--fast") {
            std::env::set_var("HPRM_FAST", "1");
        }
        let code = match options_from_env(&self) {
            Some(opts) => {
                let name = opts.federate.clone();
                match run_federate(self, opts) {
                    Ok(_) => 0,
                    Err(e) => {
                        eprintln!("error: federate {name}: {e}");
                        1
                    }
                }
            }
            None if self.federates.len() == 1 => {
                let mut opts = RunOptions::new(self.federates[0].name.clone());
                opts.fast = std::env::var("HPRM_FAST").is_ok_and(|v| v == "1");
                opts.handle_signals = true;
                match run_federate(self, opts) {
                    Ok(_) => 0,
                    Err(e) => {
                        eprintln!("error: {e}");
                        1
                    }
                }
            }
            None => {
                let launch = Launch {
                    fast: std::env::var("HPRM_FAST").is_ok_and(|v| v == "1"),
                    timeout: flag("--timeout").and_then(|s| s.parse::<f64>().ok()).map(Duration::from_secs_f64),
                    trace: flag("--trace").map(PathBuf::from),
                    handle_signals: true,
                    color: crate::log::ansi(),
                    ..Launch::default()
                };
                let name = self.name.clone();
                match launch.run(&self) {
                    Ok(r) => {
                        if let Some(summary) = r.failure_summary(&name) {
                            eprintln!("error: {summary}");
                        }
                        r.exit_code()
                    }
                    Err(e) => {
                        eprintln!("error: {e}");
                        exit_code::BAD_PROGRAM
                    }
                }
            }
        };
        std::process::exit(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process's exit is seen before its last lines are read: here a
    /// grandchild holds the pipe and writes 300 ms after the child exited,
    /// so the line is certainly not in yet when the child is reaped, and a
    /// report that did not drain would miss it.
    #[test]
    fn drain_waits_for_the_last_lines_of_an_exited_process() {
        let sink = LogSink::kept("[t]");
        let mut child = Command::new("sh")
            .args(["-c", "(sleep 0.3; echo 'error: the last words') & exit 1"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh");
        sink.relay(child.stdout.take().expect("piped"));
        assert!(!child.wait().expect("wait").success());
        assert!(sink.last_words().is_empty(), "the line was written after the exit");
        sink.drain(Instant::now() + Duration::from_secs(30));
        assert_eq!(sink.last_words(), ["error: the last words"]);
    }

    /// Of three hosts, every pair is dialed exactly once, and each link
    /// names every other host as a peer.
    #[test]
    fn each_pair_of_hosts_is_dialed_from_one_side() {
        let spec = |name: &str, n: u8| crate::manifest::HostSpec {
            name: name.into(),
            address: format!("10.0.0.{n}"),
            link: None,
        };
        let hosts = [spec("planning", 1), spec("control", 2), spec("perception", 3)];
        let mut dialed = Vec::new();
        for me in &hosts {
            let share = HostShare {
                me: me.clone(),
                rti_here: false,
                rti_addr: "10.0.0.1:15045".into(),
                federate_hosts: String::new(),
                others: hosts.iter().filter(|h| h.name != me.name).cloned().collect(),
            };
            let args = share.link_args(Duration::from_millis(500));
            for (flag, value) in args.iter().zip(args.iter().skip(1)) {
                if flag == "--connect" {
                    let to = hosts.iter().find(|h| h.link_endpoint() == *value).expect("a host's endpoint");
                    dialed.push((me.name.clone(), to.name.clone()));
                }
            }
            let peers = args.iter().zip(args.iter().skip(1)).filter(|(f, _)| *f == "--peer").count();
            assert_eq!(peers, 2, "{} names both other hosts: {args:?}", me.name);
        }
        dialed.sort();
        let want = [("control", "perception"), ("control", "planning"), ("perception", "planning")];
        assert_eq!(dialed, want.map(|(a, b)| (a.to_string(), b.to_string())));
    }

    /// A pipe held open past the bound does not hold the launcher.
    #[test]
    fn drain_gives_up_at_its_bound() {
        let sink = LogSink::kept("[t]");
        let mut child =
            Command::new("sh").args(["-c", "(sleep 30) & exit 0"]).stdout(Stdio::piped()).spawn().expect("sh");
        sink.relay(child.stdout.take().expect("piped"));
        child.wait().expect("wait");
        sink.drain(Instant::now() + Duration::from_millis(200));
        assert!(sink.relays.lock().iter().any(|r| !r.is_finished()), "drain returned only once the pipe closed");
    }
}
