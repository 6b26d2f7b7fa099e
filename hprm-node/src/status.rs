//! Live status of launched programs, for `hprm ps`.
//!
//! A launcher writes [`LaunchInfo`] as `launch.json` in the program's
//! runtime directory (`$XDG_RUNTIME_DIR` or the temporary directory,
//! `hprm-<pid>-<time>/`). Each federate started with `HPRM_RUNTIME_DIR`
//! rewrites `status-<federate>.json` ([`FederateStatus`]) about once a
//! second from a thread of its own: the scheduler only bumps counters in a
//! [`Board`] (relaxed atomics, no I/O, no lock). Files are replaced by
//! rename, so a reader never sees half of one. [`scan`] finds the programs
//! whose launcher is still alive.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hprm_rti::tag::Tag;
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::figures::{ConnectionBoard, ConnectionFigures, ReactionBoard, ReactionFigures, Recent, RecentRun};
use crate::loss::{Loss, Losses};
use crate::sync::{Condvar, Mutex};

/// Name of the launcher's file in a runtime directory.
pub const LAUNCH_FILE: &str = "launch.json";

/// How often a federate rewrites its status file.
pub const STATUS_PERIOD: Duration = Duration::from_secs(1);

/// What a launcher records about a running program.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaunchInfo {
    pub program: String,
    /// The launcher's process.
    pub pid: u32,
    /// When it started, ns since the Unix epoch.
    pub started_ns: i64,
    pub runtime_dir: PathBuf,
    pub federates: Vec<FederateProcess>,
    /// The object store the launcher started for the program (absent in
    /// files of launchers older than this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreProcess>,
    /// The RTI the launcher started for the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rti: Option<RtiProcess>,
    /// In a program with hosts: this host, and where every federate runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<ProgramHosts>,
}

/// Where a program that spans hosts runs: `federates` lists every federate
/// of the program (every host's), in the order of their ids (the RTI's
/// numbering), with its host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramHosts {
    /// The host this launcher runs.
    pub host: String,
    /// `(federate, host)` for each federate of the program.
    pub federates: Vec<(String, String)>,
}

/// A program's `hprm-store`: its process and the socket clients connect to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreProcess {
    pub pid: u32,
    pub socket: PathBuf,
}

/// A program's `hprm-rti`: its process and the `host:port` federates join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RtiProcess {
    pub pid: u32,
    pub addr: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FederateProcess {
    pub name: String,
    /// 0 until the process is started.
    pub pid: u32,
    /// How many times the launcher restarted it (`restart = "on-failure"`).
    #[serde(default)]
    pub restarts: u32,
}

/// What a federate reports about itself.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FederateStatus {
    pub federate: String,
    pub pid: u32,
    /// The federation's start time, ns since the epoch.
    pub start_ns: i64,
    /// The current (last started) tag, as time since the start.
    pub tag_ns: i64,
    pub microstep: u32,
    /// Physical time minus the current tag's time: how far logical time
    /// lags behind (negative: ahead, in fast mode).
    pub lag_ns: i64,
    /// Tagged messages received, and sent (one per receiving federate).
    pub messages_in: u64,
    pub messages_out: u64,
    /// Rates over the last status period.
    pub messages_in_per_s: f64,
    pub messages_out_per_s: f64,
    /// When this was written, ns since the epoch.
    pub updated_ns: i64,
    /// Messages lost or late so far, by port (absent in files of federates
    /// older than this field).
    #[serde(default)]
    pub losses: Losses,
    /// Reactions run, and per second over the last period.
    #[serde(default)]
    pub reactions: u64,
    #[serde(default)]
    pub reactions_per_s: f64,
    /// Reactions that started after their deadline (their handler ran).
    #[serde(default)]
    pub deadline_misses: u64,
    /// The reactions that ran longest over the last period, busiest first
    /// (at most [`BUSIEST`]).
    #[serde(default)]
    pub busiest: Vec<ReactionFigures>,
    /// The connections ending at this federate (those whose messages
    /// another connection's carry excepted: see `scheduler::routes`).
    #[serde(default)]
    pub connections: Vec<ConnectionFigures>,
    /// This federate's reactions, by id: the names `timeline` refers to.
    #[serde(default)]
    pub reaction_names: Vec<(usize, String)>,
    /// Its reactions' runs over the last two status periods (so a reader
    /// reading once a period misses none), oldest first.
    #[serde(default)]
    pub timeline: Vec<RecentRun>,
    /// What clock synchronization adds to this host's system clock to
    /// read the RTI's (ns), when it runs (between hosts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ns: Option<i64>,
}

/// How many reactions a status lists in `busiest`.
pub const BUSIEST: usize = 5;

/// Counters the scheduler bumps and the status thread reads.
#[derive(Debug, Default)]
pub(crate) struct Board {
    tag_time: AtomicI64,
    microstep: AtomicU32,
    messages_in: AtomicU64,
    messages_out: AtomicU64,
    /// Rarely written (a loss), so a lock costs nothing that matters.
    losses: Mutex<Losses>,
    reactions: AtomicU64,
    deadline_misses: AtomicU64,
    /// By wire port (a connection's index in the program): those ending
    /// at this federate.
    connections: Box<[Option<ConnectionBoard>]>,
    /// By reaction id: this federate's reactions, named once the
    /// scheduler has built them.
    reaction_boards: Box<[ReactionBoard]>,
    reaction_names: std::sync::OnceLock<Vec<(usize, String)>>,
    /// The last runs, for a live timeline.
    recent: Recent,
}

impl Board {
    /// A board for a federate with these connections (by wire port: the
    /// sender's and receiver's ports of those ending here) among
    /// `reactions` reactions of the program.
    pub fn new(connections: Vec<Option<(String, String)>>, reactions: usize) -> Board {
        Board {
            connections: connections.into_iter().map(|c| c.map(|(from, to)| ConnectionBoard::new(from, to))).collect(),
            reaction_boards: (0..reactions).map(|_| ReactionBoard::default()).collect(),
            ..Board::default()
        }
    }

    /// Names this federate's reactions (by reaction id index), once.
    pub fn name_reactions(&self, names: Vec<(usize, String)>) {
        let _ = self.reaction_names.set(names);
    }

    /// The figures of connection `wire`, if it ends here.
    #[inline]
    pub fn connection(&self, wire: usize) -> Option<&ConnectionBoard> {
        self.connections.get(wire).and_then(Option::as_ref)
    }

    #[inline]
    pub fn reaction(&self, index: usize) -> Option<&ReactionBoard> {
        self.reaction_boards.get(index)
    }

    /// Reaction `index` ran at `tag` from `start` to `end` (ns since the epoch).
    #[inline]
    pub fn reaction_ran(&self, index: usize, tag: Tag, start: i64, end: i64) {
        if let Some(b) = self.reaction_boards.get(index) {
            b.ran(u64::try_from(end - start).unwrap_or(0));
            self.recent.record(index, tag, start, end);
        }
    }

    /// `n` reactions ran, `missed` of them past their deadline.
    #[inline]
    pub fn ran(&self, n: u64, missed: u64) {
        self.reactions.fetch_add(n, Ordering::Relaxed);
        if missed > 0 {
            self.deadline_misses.fetch_add(missed, Ordering::Relaxed);
        }
    }

    #[inline]
    pub fn tag(&self, tag: Tag) {
        self.tag_time.store(tag.time, Ordering::Relaxed);
        self.microstep.store(tag.microstep, Ordering::Relaxed);
    }

    #[inline]
    pub fn received(&self) {
        self.messages_in.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    pub fn sent(&self) {
        self.messages_out.fetch_add(1, Ordering::Relaxed);
    }

    pub fn lost(&self, port: &str, loss: Loss, n: u64) {
        self.losses.lock().count(port, loss, n);
    }

    pub fn losses(&self) -> Losses {
        self.losses.lock().clone()
    }
}

/// Writes `contents` to `path` through a temporary file and a rename.
fn replace(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

/// Writes (or rewrites) `launch.json` in `dir`.
pub fn write_launch(dir: &Path, info: &LaunchInfo) -> std::io::Result<()> {
    let text = serde_json::to_vec_pretty(info).map_err(std::io::Error::other)?;
    replace(&dir.join(LAUNCH_FILE), &text)
}

fn status_path(dir: &Path, federate: &str) -> PathBuf {
    dir.join(format!("status-{federate}.json"))
}

fn ended_path(dir: &Path, federate: &str) -> PathBuf {
    dir.join(format!("ended-{federate}.json"))
}

/// A federate's last status, written as it ended (by its last run, when it
/// was restarted), for its launcher's summary; `None` if it never wrote one
/// (it was killed, or it ran without a runtime directory). The launcher's
/// runtime directory goes at the end of the launch, and these files with it.
pub fn ended(dir: &Path, federate: &str) -> Option<FederateStatus> {
    serde_json::from_slice(&std::fs::read(ended_path(dir, federate)).ok()?).ok()
}

/// The thread rewriting a federate's status file; stops and removes the
/// file when dropped.
pub(crate) struct Publisher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
    path: PathBuf,
}

impl Publisher {
    pub fn start(
        dir: &Path,
        federate: &str,
        start: i64,
        board: Arc<Board>,
        clock: Arc<Clock>,
    ) -> std::io::Result<Publisher> {
        let path = status_path(dir, federate);
        let ended = ended_path(dir, federate);
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (p, s, name) = (path.clone(), stop.clone(), federate.to_string());
        let thread = std::thread::Builder::new().name("hprm-status".into()).spawn(move || {
            let (mut last_in, mut last_out, mut last_at) = (0u64, 0u64, clock.now());
            let mut last_reactions = 0u64;
            // Where the last two periods' runs begin.
            let (mut runs_before, mut runs_last) = (0u64, 0u64);
            let mut last_connections: Vec<ConnectionFigures> = Vec::new();
            let mut last_busy: std::collections::HashMap<usize, ReactionFigures> = Default::default();
            loop {
                let now = clock.now();
                let (msgs_in, msgs_out) =
                    (board.messages_in.load(Ordering::Relaxed), board.messages_out.load(Ordering::Relaxed));
                let secs = ((now - last_at) as f64 / 1e9).max(1e-9);
                let tag_time = board.tag_time.load(Ordering::Relaxed);
                let reactions = board.reactions.load(Ordering::Relaxed);
                let connections: Vec<ConnectionFigures> = board
                    .connections
                    .iter()
                    .flatten()
                    .map(|c| c.figures(last_connections.iter().find(|l| l.to == c.to && l.from == c.from), secs))
                    .collect();
                let reaction_figures: Vec<(usize, ReactionFigures)> = board
                    .reaction_names
                    .get()
                    .map(|names| {
                        names
                            .iter()
                            .filter_map(|(i, name)| {
                                Some((*i, board.reaction(*i)?.figures(name, last_busy.get(i), secs)))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let mut busiest: Vec<ReactionFigures> =
                    reaction_figures.iter().filter(|(_, f)| f.runs > 0).map(|(_, f)| f.clone()).collect();
                busiest.sort_by(|a, b| b.busy_share.total_cmp(&a.busy_share).then(b.busy_ns.cmp(&a.busy_ns)));
                busiest.truncate(BUSIEST);
                let status = FederateStatus {
                    federate: name.clone(),
                    pid: std::process::id(),
                    start_ns: start,
                    tag_ns: if tag_time == 0 { 0 } else { tag_time - start },
                    microstep: board.microstep.load(Ordering::Relaxed),
                    lag_ns: if tag_time == 0 { 0 } else { now - tag_time },
                    messages_in: msgs_in,
                    messages_out: msgs_out,
                    messages_in_per_s: (msgs_in - last_in) as f64 / secs,
                    messages_out_per_s: (msgs_out - last_out) as f64 / secs,
                    updated_ns: now,
                    losses: board.losses(),
                    reactions,
                    reactions_per_s: reactions.saturating_sub(last_reactions) as f64 / secs,
                    deadline_misses: board.deadline_misses.load(Ordering::Relaxed),
                    busiest,
                    connections,
                    reaction_names: board.reaction_names.get().cloned().unwrap_or_default(),
                    timeline: board.recent.since(runs_before, start),
                    clock_offset_ns: clock.measured_offset(),
                };
                (runs_before, runs_last) = (runs_last, board.recent.count());
                (last_in, last_out, last_at, last_reactions) = (msgs_in, msgs_out, now, reactions);
                last_connections.clone_from(&status.connections);
                last_busy = reaction_figures.into_iter().collect();
                if let Err(e) = serde_json::to_vec(&status).map_err(std::io::Error::other).and_then(|t| replace(&p, &t))
                {
                    tracing::warn!(
                        "cannot write the status file {}: {e}; `hprm ps` will not see this federate's progress",
                        p.display()
                    );
                }
                let (lock, cv) = &*s;
                let stopped = lock.lock();
                let (stopped, _) = cv.wait_timeout_while(stopped, STATUS_PERIOD, |stop| !*stop);
                if *stopped {
                    // The final counts (the scheduler has stopped), for the
                    // launcher's summary.
                    let last = FederateStatus {
                        losses: board.losses(),
                        messages_in: board.messages_in.load(Ordering::Relaxed),
                        messages_out: board.messages_out.load(Ordering::Relaxed),
                        reactions: board.reactions.load(Ordering::Relaxed),
                        deadline_misses: board.deadline_misses.load(Ordering::Relaxed),
                        updated_ns: clock.now(),
                        ..status
                    };
                    if let Err(e) =
                        serde_json::to_vec(&last).map_err(std::io::Error::other).and_then(|t| replace(&ended, &t))
                    {
                        tracing::warn!(
                            "cannot write {}: {e}; the launcher's summary will miss this federate's counts",
                            ended.display()
                        );
                    }
                    return;
                }
            }
        })?;
        Ok(Publisher { stop, thread: Some(thread), path })
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock() = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where launchers put runtime directories: `$XDG_RUNTIME_DIR` when it is
/// a directory short enough for the sockets inside (a Unix socket path
/// holds at most 107 bytes; the runtime directory's own name and a socket
/// name take about 60), else the temporary directory.
pub fn runtime_base() -> PathBuf {
    const MAX_BASE: usize = 44;
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir() && p.as_os_str().len() <= MAX_BASE)
        .unwrap_or_else(std::env::temp_dir)
}

/// The federates of `launch`'s program on other hosts; where this host runs
/// the RTI, each with the RTI's view of it (its status file in `dir`; the
/// RTI numbers federates in the order [`ProgramHosts::federates`] lists them).
fn remote_federates(dir: &Path, launch: &LaunchInfo) -> Vec<RemoteFederate> {
    let Some(hosts) = &launch.hosts else { return Vec::new() };
    let rti = launch
        .rti
        .as_ref()
        .and_then(|_| std::fs::read(dir.join(hprm_rti::figures::RTI_STATUS_FILE)).ok())
        .and_then(|t| serde_json::from_slice::<hprm_rti::figures::RtiFigures>(&t).ok());
    hosts
        .federates
        .iter()
        .enumerate()
        .filter(|(_, (_, host))| *host != hosts.host)
        .map(|(id, (name, host))| RemoteFederate {
            name: name.clone(),
            host: host.clone(),
            rti: rti.as_ref().and_then(|r| r.federates.iter().find(|f| usize::from(f.id) == id).cloned()),
        })
        .collect()
}

/// Whether process `pid` exists.
pub fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // No signal: only checks that the process exists.
    matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Ok(()) | Err(nix::errno::Errno::EPERM))
}

/// A launched program that is still running.
#[derive(Debug, Clone, Serialize)]
pub struct Running {
    pub launch: LaunchInfo,
    pub federates: Vec<FederateView>,
    /// In a program with hosts: its federates on the other hosts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub elsewhere: Vec<RemoteFederate>,
}

/// A federate of a [`Running`] program on another host: what this host
/// knows of it, the RTI's view where this host runs the RTI.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteFederate {
    pub name: String,
    pub host: String,
    /// As the RTI sees it (its grants and tags), when the RTI runs here.
    pub rti: Option<hprm_rti::figures::RtiFederate>,
}

/// One federate of a [`Running`] program.
#[derive(Debug, Clone, Serialize)]
pub struct FederateView {
    pub name: String,
    pub pid: u32,
    pub alive: bool,
    /// How many times its launcher restarted it.
    pub restarts: u32,
    /// Its last status (none before it started, or once it ended).
    pub status: Option<FederateStatus>,
}

/// Every program under `base` (see [`runtime_base`]) whose launcher is
/// alive, oldest first. Unreadable or foreign directories are skipped.
pub fn scan(base: &Path) -> Vec<Running> {
    let Ok(entries) = std::fs::read_dir(base) else { return Vec::new() };
    let mut found: Vec<Running> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("hprm-"))
        .filter_map(|e| {
            let dir = e.path();
            let launch: LaunchInfo = serde_json::from_slice(&std::fs::read(dir.join(LAUNCH_FILE)).ok()?).ok()?;
            if !alive(launch.pid) {
                return None;
            }
            let federates = launch
                .federates
                .iter()
                .map(|f| {
                    let status = std::fs::read(status_path(&dir, &f.name))
                        .ok()
                        .and_then(|t| serde_json::from_slice::<FederateStatus>(&t).ok());
                    let pid = status.as_ref().map_or(f.pid, |s| s.pid);
                    FederateView { name: f.name.clone(), pid, alive: alive(pid), restarts: f.restarts, status }
                })
                .collect();
            let elsewhere = remote_federates(&dir, &launch);
            Some(Running { launch, federates, elsewhere })
        })
        .collect();
    found.sort_by_key(|r| r.launch.started_ns);
    found
}
