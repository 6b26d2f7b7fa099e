//! Live status of launched programs, for `hprm ps`.
//!
//! A launcher writes [`LaunchInfo`] as `launch.json` in the program's
//! runtime directory (`$XDG_RUNTIME_DIR` or the temporary directory,
//! `hprm-<pid>-<time>/`). Each federate started with `HPRM_RUNTIME_DIR`
//! rewrites `status-<federate>.json` ([`FederateStatus`]) about once a
//! second from a thread of its own: the scheduler only bumps counters in a
//! `Board` (relaxed atomics, no I/O, no lock). Files are replaced by
//! rename, so a reader never sees half of one. [`scan`] finds the programs
//! whose launcher is still alive.
//!
//! In a program that spans hosts, each host's `hprm-link` publishes its
//! host's share ([`HostReport`], read by [`host_report`]) to the other
//! hosts' links once a period, and writes theirs into its own runtime
//! directory as `host-<host>.json` ([`write_mirror`]), so `scan` lists
//! every host's federates. A mirrored federate is never taken for a process
//! of this host: its pid is only shown, never signalled, and it counts as
//! running while its host's reports keep coming ([`MIRROR_FRESH`]).
//!
//! A program deployed under systemd (`hprm deploy --systemd`) has no
//! launcher: `hprm deploy` writes its `launch.json` into
//! `/etc/hprm/<program>/` ([`DEPLOYED_BASE`]) with [`LaunchInfo::deployed`]
//! set and `pid` 0, and each of its units has a runtime directory of its
//! own under `/run/hprm/<program>/` (a federate's `<federate>/`, the RTI's
//! `rti/`, the link's `link/`, where the link mirrors the other hosts'
//! reports). [`scan_deployed`] lists such a program while one of its
//! processes runs.
//!
//! [`discover`] is what every command that looks at running programs
//! calls (`hprm ps`, `hprm topic`, the dashboard): launched programs, then
//! deployed ones. Where a program's files are, for a reader, is
//! [`Running`]'s to say ([`Running::tap_dir`], [`Running::manifest_path`]),
//! so that a launched and a deployed program read alike.

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
    /// Deployed under systemd: no launcher (`pid` 0, `started_ns` 0, the
    /// store's and RTI's pids 0), and each unit writes into its own
    /// directory under `runtime_dir` ([`LaunchInfo::federate_dir`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deployed: bool,
}

/// Where `hprm deploy --systemd` puts each program's `launch.json`
/// (`/etc/hprm/<program>/`), which [`scan_deployed`] reads.
pub const DEPLOYED_BASE: &str = "/etc/hprm";

/// Where a deployed program's units keep their runtime directories
/// (`/run/hprm/<program>/`).
pub const DEPLOYED_RUNTIME_BASE: &str = "/run/hprm";

impl LaunchInfo {
    /// Where federate `name` writes its status, `dir` being the program's
    /// runtime directory: `dir` itself for a launch; for a deployed program
    /// its unit's own directory (`<federate>/`, a bank member `bank[3]`'s
    /// `bank-3/`, as the units name them).
    pub fn federate_dir(&self, dir: &Path, name: &str) -> PathBuf {
        if !self.deployed {
            return dir.to_path_buf();
        }
        match crate::manifest::bank::split_member(name) {
            Some((bank, i)) => dir.join(format!("{bank}-{i}")),
            None => dir.join(name),
        }
    }

    /// Where the RTI writes its figures ([`hprm_rti::figures::RTI_STATUS_FILE`]).
    pub fn rti_dir(&self, dir: &Path) -> PathBuf {
        if self.deployed {
            dir.join("rti")
        } else {
            dir.to_path_buf()
        }
    }

    /// Where the host's link mirrors the other hosts' reports.
    pub fn mirror_dir(&self, dir: &Path) -> PathBuf {
        if self.deployed {
            dir.join("link")
        } else {
            dir.to_path_buf()
        }
    }
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
/// With their own hosts' reports where this host's link mirrored them
/// (current at `now_ns`, this host's clock).
fn remote_federates(dir: &Path, launch: &LaunchInfo, now_ns: i64) -> Vec<RemoteFederate> {
    let Some(hosts) = &launch.hosts else { return Vec::new() };
    let mut mirrors: std::collections::HashMap<&str, Option<Mirror>> = std::collections::HashMap::new();
    let rti = rti_figures(dir, launch);
    hosts
        .federates
        .iter()
        .enumerate()
        .filter(|(_, (_, host))| *host != hosts.host)
        .map(|(id, (name, host))| {
            let mirror = mirrors
                .entry(host.as_str())
                .or_insert_with(|| read_mirror(&launch.mirror_dir(dir), host, &launch.program))
                .as_ref();
            let reported = mirror.and_then(|m| m.report.federates.iter().find(|f| f.name == *name));
            let fresh = mirror.is_some_and(|m| now_ns - m.received_ns < MIRROR_FRESH.as_nanos() as i64);
            RemoteFederate {
                name: name.clone(),
                host: host.clone(),
                pid: reported.map_or(0, |f| f.pid),
                restarts: reported.map_or(0, |f| f.restarts),
                reported_ns: reported.and(mirror.map(|m| m.received_ns)),
                status: reported.and_then(|f| f.status.clone()).filter(|_| fresh),
                rti: rti.as_ref().and_then(|r| r.federates.iter().find(|f| usize::from(f.id) == id).cloned()),
            }
        })
        .collect()
}

/// How long a mirrored report counts as current after it arrived: a
/// few status periods, so that one late report does not blank a row.
pub const MIRROR_FRESH: Duration = Duration::from_secs(3);

/// What one host of a program says of its share: its federates, as its
/// own `hprm ps` reads them, its store's figures and, where it runs the
/// RTI, the RTI's (for the other hosts' dashboards). Its size is bounded
/// by the program's: a status per federate, one store, one RTI.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostReport {
    pub program: String,
    pub host: String,
    pub federates: Vec<ReportedFederate>,
    /// The program's store on that host (absent from hosts older than
    /// this field, and where the launch has no store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreReport>,
    /// The RTI's figures, from the host that runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rti: Option<hprm_rti::figures::RtiFigures>,
}

/// A host's store, as its dashboard and its link read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreReport {
    pub pid: u32,
    pub socket: PathBuf,
    /// Absent when the store could not be asked (`error` says why).
    pub stats: Option<StoreFigures>,
    pub error: Option<String>,
}

impl StoreReport {
    /// The report of the store `process`, from what asking it gave: its
    /// figures, or why there are none.
    pub fn from_result(process: &StoreProcess, figures: Result<StoreFigures, String>) -> StoreReport {
        let (stats, error) = match figures {
            Ok(f) => (Some(f), None),
            Err(e) => (None, Some(e)),
        };
        StoreReport { pid: process.pid, socket: process.socket.clone(), stats, error }
    }
}

/// The store's figures that matter to a person watching a program (the
/// dashboard's, on every host: one layout for the page, `/metrics` and
/// the reports between hosts).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreFigures {
    pub capacity: u64,
    pub bytes_in_use: u64,
    pub objects: u64,
    pub objects_referenced: u64,
    pub pending_deliveries: u64,
    pub clients: u64,
    pub evictions: u64,
    pub evicted_bytes: u64,
    pub expired_deliveries: u64,
    pub creates_refused: u64,
    pub creates_over_quota: u64,
    /// The spill file (`hprm-store --spill-dir`; capacity 0: none): bytes
    /// its objects hold now, and objects placed there since the store
    /// started because the arena was full. Absent from a report of an
    /// older version: 0.
    #[serde(default)]
    pub spill_capacity: u64,
    #[serde(default)]
    pub spill_bytes_in_use: u64,
    #[serde(default)]
    pub objects_spilled: u64,
}

impl From<&hprm_store::Stats> for StoreFigures {
    fn from(s: &hprm_store::Stats) -> StoreFigures {
        StoreFigures {
            capacity: s.capacity,
            bytes_in_use: s.bytes_in_use,
            objects: s.objects_created + s.objects_sealed,
            objects_referenced: s.objects_referenced,
            pending_deliveries: s.pending_deliveries,
            clients: s.clients,
            evictions: s.evictions,
            evicted_bytes: s.evicted_bytes,
            expired_deliveries: s.expired_deliveries,
            creates_refused: s.creates_refused,
            creates_over_quota: s.creates_over_quota,
            spill_capacity: s.spill_capacity,
            spill_bytes_in_use: s.spill_bytes_in_use,
            objects_spilled: s.objects_spilled,
        }
    }
}

/// The figures the RTI of `launch` last wrote into `dir`, while it runs
/// (absent until it wrote them, and without an RTI on this host).
pub fn rti_figures(dir: &Path, launch: &LaunchInfo) -> Option<hprm_rti::figures::RtiFigures> {
    read_rti_figures(dir, launch).ok().flatten()
}

/// As [`rti_figures`], and why this reader cannot read them when the file
/// is there but not readable (a deployed RTI's, to a user outside group
/// `hprm`).
pub fn read_rti_figures(dir: &Path, launch: &LaunchInfo) -> Result<Option<hprm_rti::figures::RtiFigures>, String> {
    // A deployed RTI's pid is not known beforehand: its figures name it.
    let Some(rti) = launch.rti.as_ref().filter(|rti| launch.deployed || alive(rti.pid)) else { return Ok(None) };
    let path = launch.rti_dir(dir).join(hprm_rti::figures::RTI_STATUS_FILE);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    // Replaced by rename: never half written; anything else is not figures.
    let Ok(figures) = serde_json::from_slice::<hprm_rti::figures::RtiFigures>(&text) else { return Ok(None) };
    Ok((rti.pid != 0 || alive(figures.pid)).then_some(figures))
}

impl HostReport {
    /// The report as it travels between hosts (JSON).
    pub fn encode(&self) -> Vec<u8> {
        // Plain data with string keys: serializing cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A report another host sent; why it is not one.
    pub fn decode(bytes: &[u8]) -> Result<HostReport, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("not a host's status report: {e}"))
    }
}

/// One federate of a [`HostReport`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportedFederate {
    pub name: String,
    /// Its process on its own host (0 before it started).
    pub pid: u32,
    pub restarts: u32,
    /// Its last status, while its process runs.
    pub status: Option<FederateStatus>,
}

/// Another host's report as this host's link mirrored it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Mirror {
    /// When this host received it (its clock, ns since the epoch): the
    /// reporting host's clock may differ.
    received_ns: i64,
    report: HostReport,
}

/// The system clock, ns since the epoch.
fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn mirror_path(dir: &Path, host: &str) -> PathBuf {
    dir.join(format!("host-{host}.json"))
}

/// This host's share of the program that `launch_file` describes (a
/// launcher's `launch.json` in the program's runtime directory, or the one
/// `hprm deploy` wrote), for the other hosts; `None` when there is no
/// launch (yet) of a program with hosts. `store_figures` asks the launch's
/// store (its figures, or why not).
pub fn host_report(
    launch_file: &Path,
    store_figures: impl FnOnce(&StoreProcess) -> Result<StoreFigures, String>,
) -> Option<HostReport> {
    let launch: LaunchInfo = serde_json::from_slice(&std::fs::read(launch_file).ok()?).ok()?;
    let dir = &program_dir(launch_file, &launch);
    let host = launch.hosts.as_ref()?.host.clone();
    let federates = local_federates(dir, &launch, &mut StatusFiles::default())
        .into_iter()
        .map(|f| ReportedFederate {
            status: f.status.filter(|_| f.alive),
            name: f.name,
            pid: f.pid,
            restarts: f.restarts,
        })
        .collect();
    let store = launch.store.as_ref().map(|s| StoreReport::from_result(s, store_figures(s)));
    let rti = rti_figures(dir, &launch);
    Some(HostReport { program: launch.program, host, federates, store, rti })
}

/// The runtime directory of the program `launch_file` describes: the
/// launch file's own, or a deployed program's under `/run/hprm`.
fn program_dir(launch_file: &Path, launch: &LaunchInfo) -> PathBuf {
    if launch.deployed {
        launch.runtime_dir.clone()
    } else {
        launch_file.parent().map_or_else(PathBuf::new, Path::to_path_buf)
    }
}

/// Writes another host's report into `dir` (received now), replacing the
/// last one from that host.
pub fn write_mirror(dir: &Path, report: &HostReport) -> std::io::Result<()> {
    let mirror = Mirror { received_ns: wall_ns(), report: report.clone() };
    let text = serde_json::to_vec(&mirror).map_err(std::io::Error::other)?;
    replace(&mirror_path(dir, &report.host), &text)
}

/// Removes the mirror of `host`'s report from `dir`, if there is one.
pub fn remove_mirror(dir: &Path, host: &str) -> std::io::Result<()> {
    match std::fs::remove_file(mirror_path(dir, host)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// `host`'s mirrored report of `program` in `dir` and when it arrived;
/// `None` without one, or for another program.
fn read_mirror(dir: &Path, host: &str, program: &str) -> Option<Mirror> {
    let m: Mirror = serde_json::from_slice(&std::fs::read(mirror_path(dir, host)).ok()?).ok()?;
    (m.report.host == host && m.report.program == program).then_some(m)
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

/// A program that is still running, launched or deployed.
#[derive(Debug, Clone, Serialize)]
pub struct Running {
    pub launch: LaunchInfo,
    /// The directory of its `launch.json`, where the manifest lies beside
    /// it: the runtime directory of a launch, `/etc/hprm/<program>/` of a
    /// deployed program.
    pub launch_dir: PathBuf,
    pub federates: Vec<FederateView>,
    /// In a program with hosts: its federates on the other hosts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub elsewhere: Vec<RemoteFederate>,
    /// In a program with hosts: the other hosts' stores and the RTI.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_hosts: Vec<OtherHost>,
}

/// A federate of a [`Running`] program on another host: what this host
/// knows of it, the RTI's view where this host runs the RTI.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteFederate {
    pub name: String,
    pub host: String,
    /// Its process there, as its host reported it (0: not reported). Never
    /// signalled or looked up here: it is another machine's process.
    pub pid: u32,
    /// How many times its host's launcher restarted it.
    pub restarts: u32,
    /// When its host's last report of it arrived (this host's clock, ns
    /// since the epoch); `None`: none came (no link mirrors reports here,
    /// or that host is not up).
    pub reported_ns: Option<i64>,
    /// Its last status, from its host's report while reports keep coming
    /// ([`MIRROR_FRESH`]); `None` before it started, once it ended, and
    /// when its host went silent.
    pub status: Option<FederateStatus>,
    /// As the RTI sees it (its grants and tags), when the RTI runs here.
    pub rti: Option<hprm_rti::figures::RtiFederate>,
}

/// One federate of a [`Running`] program.
#[derive(Debug, Clone, Serialize)]
pub struct FederateView {
    pub name: String,
    /// This host, in a program with hosts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub pid: u32,
    pub alive: bool,
    /// How many times its launcher restarted it.
    pub restarts: u32,
    /// Its last status (none before it started, or once it ended).
    pub status: Option<FederateStatus>,
}

/// What another host of a [`Running`] program reported of its store and
/// the RTI, from its last report while reports keep coming ([`MIRROR_FRESH`]).
#[derive(Debug, Clone, Serialize)]
pub struct OtherHost {
    pub host: String,
    /// When its last report arrived (this host's clock, ns since the
    /// epoch); `None`: none came.
    pub reported_ns: Option<i64>,
    /// Its store; `None` when it has none, or its reports stopped.
    pub store: Option<StoreReport>,
    /// The RTI's figures, where that host runs the RTI.
    pub rti: Option<hprm_rti::figures::RtiFigures>,
}

impl OtherHost {
    /// Its store as `hprm ps` and the dashboard show it: what it last
    /// reported, or why nothing is shown (its reports stopped, or none came).
    pub fn store_report(&self) -> StoreReport {
        self.store.clone().unwrap_or_else(|| StoreReport {
            pid: 0,
            socket: PathBuf::new(),
            stats: None,
            error: Some(match self.reported_ns {
                Some(_) => format!("host {} stopped reporting", self.host),
                None => format!("no report from host {} (yet)", self.host),
            }),
        })
    }
}

/// The other hosts of `launch`'s program (in the order they first appear
/// among its federates), with their mirrored reports in `dir` (current at
/// `now_ns`, this host's clock).
fn other_hosts(dir: &Path, launch: &LaunchInfo, now_ns: i64) -> Vec<OtherHost> {
    let Some(hosts) = &launch.hosts else { return Vec::new() };
    let mut names: Vec<&str> = Vec::new();
    for (_, host) in &hosts.federates {
        if *host != hosts.host && !names.contains(&host.as_str()) {
            names.push(host);
        }
    }
    names
        .into_iter()
        .map(|host| {
            let mirror = read_mirror(&launch.mirror_dir(dir), host, &launch.program);
            let fresh = mirror.as_ref().filter(|m| now_ns - m.received_ns < MIRROR_FRESH.as_nanos() as i64);
            OtherHost {
                host: host.to_owned(),
                reported_ns: mirror.as_ref().map(|m| m.received_ns),
                store: fresh.and_then(|m| m.report.store.clone()),
                rti: fresh.and_then(|m| m.report.rti.clone()),
            }
        })
        .collect()
}

/// Every program under `base` (see [`runtime_base`]) whose launcher is
/// alive, oldest first. Unreadable or foreign directories are skipped.
pub fn scan(base: &Path) -> Vec<Running> {
    scan_with(base, &mut StatusFiles::default())
}

/// [`scan`], with the status files parsed through `files`.
fn scan_with(base: &Path, files: &mut StatusFiles) -> Vec<Running> {
    let Ok(entries) = std::fs::read_dir(base) else { return Vec::new() };
    let now = wall_ns();
    let mut found: Vec<Running> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("hprm-"))
        .filter_map(|e| {
            let dir = e.path();
            let launch: LaunchInfo = serde_json::from_slice(&std::fs::read(dir.join(LAUNCH_FILE)).ok()?).ok()?;
            if !alive(launch.pid) {
                return None;
            }
            let federates = local_federates(&dir, &launch, files);
            let elsewhere = remote_federates(&dir, &launch, now);
            let other_hosts = other_hosts(&dir, &launch, now);
            Some(Running { launch, launch_dir: dir, federates, elsewhere, other_hosts })
        })
        .collect();
    found.sort_by_key(|r| r.launch.started_ns);
    found
}

/// Every program deployed under systemd whose `launch.json` is in a
/// directory of `base` (see [`DEPLOYED_BASE`]) and of which something runs
/// on this host: a federate, the RTI, or the link (its mirrors of the other
/// hosts' reports, which it removes as it stops). Its start is the
/// federation's, once a federate or the RTI reports it.
pub fn scan_deployed(base: &Path) -> Vec<Running> {
    scan_deployed_with(base, &mut StatusFiles::default())
}

/// [`scan_deployed`], with the status files parsed through `files`.
fn scan_deployed_with(base: &Path, files: &mut StatusFiles) -> Vec<Running> {
    let Ok(entries) = std::fs::read_dir(base) else { return Vec::new() };
    let now = wall_ns();
    let mut found: Vec<Running> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let launch_dir = e.path();
            let mut launch: LaunchInfo =
                serde_json::from_slice(&std::fs::read(launch_dir.join(LAUNCH_FILE)).ok()?).ok()?;
            if !launch.deployed {
                return None;
            }
            let dir = launch.runtime_dir.clone();
            let federates = local_federates(&dir, &launch, files);
            let rti = read_rti_figures(&dir, &launch);
            let elsewhere = remote_federates(&dir, &launch, now);
            let other_hosts = other_hosts(&dir, &launch, now);
            let linked = elsewhere.iter().any(|r| r.reported_ns.is_some());
            // Figures this reader may not read still say that the RTI
            // runs: its unit's directory, and the file in it, go as it stops.
            let rti_runs = !matches!(rti, Ok(None));
            if !federates.iter().any(|f| f.alive) && !rti_runs && !linked {
                return None;
            }
            launch.started_ns = federates
                .iter()
                .filter_map(|f| f.status.as_ref().map(|s| s.start_ns))
                .chain(rti.ok().flatten().map(|r| r.start_ns))
                .filter(|&t| t > 0)
                .min()
                .unwrap_or(0);
            Some(Running { launch, launch_dir, federates, elsewhere, other_hosts })
        })
        .collect();
    found.sort_by(|a, b| a.launch.program.cmp(&b.launch.program));
    found
}

/// Every program running on this host: those launched under
/// `runtime_base` ([`scan`], oldest first), then those deployed with their
/// launch files under `deployed_base` ([`scan_deployed`], by name). The
/// one way `hprm ps`, `hprm topic` and the dashboard find programs.
pub fn discover(runtime_base: &Path, deployed_base: &Path) -> Vec<Running> {
    discover_with(runtime_base, deployed_base, &mut StatusFiles::default())
}

/// [`discover`] for a reader that reads again and again (the dashboard):
/// `files` keeps the status files it parsed, and parses again only those
/// rewritten since.
pub fn discover_with(runtime_base: &Path, deployed_base: &Path, files: &mut StatusFiles) -> Vec<Running> {
    let mut found = scan_with(runtime_base, files);
    found.extend(scan_deployed_with(deployed_base, files));
    files.forget_unread();
    found
}

/// Federates' status files as last parsed, so that a reader that reads
/// them more often than they change parses each version once: a federate
/// rewrites its file once a [`STATUS_PERIOD`], and with the timeline of its
/// last runs it is the bulk of what a dashboard reads (hundreds of KB for
/// a busy federate), while the dashboard's `/events` and `/metrics` read
/// on periods of their own.
///
/// A version is the file's inode, modification time and length: a status
/// file is only ever replaced whole, by a rename (`replace` in this module), never
/// written in place, so a new version has a new inode or (an inode number
/// reused at once) a new modification time. A file replaced between the
/// look at its version and its read is stored under the older version,
/// and so parsed again next time: never a stale status, at worst one
/// parse more.
#[derive(Debug, Default)]
pub struct StatusFiles {
    parsed: std::collections::HashMap<PathBuf, ParsedStatus>,
    /// Files parsed in all (what the cache saves shows against reads).
    parses: u64,
}

#[derive(Debug)]
struct ParsedStatus {
    version: FileVersion,
    status: FederateStatus,
    /// Read since the last [`StatusFiles::forget_unread`].
    read: bool,
}

#[derive(Debug, PartialEq, Eq)]
struct FileVersion {
    inode: u64,
    modified: Option<std::time::SystemTime>,
    len: u64,
}

impl StatusFiles {
    /// The status in the file at `path` (`None`: missing or unreadable).
    pub fn read(&mut self, path: &Path) -> Option<FederateStatus> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        let version = FileVersion { inode: meta.ino(), modified: meta.modified().ok(), len: meta.len() };
        if let Some(p) = self.parsed.get_mut(path) {
            if p.version == version {
                p.read = true;
                return Some(p.status.clone());
            }
        }
        let status: FederateStatus = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        self.parses += 1;
        self.parsed.insert(path.to_owned(), ParsedStatus { version, status: status.clone(), read: true });
        Some(status)
    }

    /// How many files it parsed in all.
    pub fn parses(&self) -> u64 {
        self.parses
    }

    /// How many files it holds.
    pub fn len(&self) -> usize {
        self.parsed.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.parsed.is_empty()
    }

    /// Forgets the files not read since the last call (federates and
    /// programs that ended), so that a long-running reader holds only
    /// what is running.
    fn forget_unread(&mut self) {
        self.parsed.retain(|_, p| std::mem::take(&mut p.read));
    }
}

/// Name of the manifest a launcher (or `hprm deploy`) writes beside
/// `launch.json`.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Where a program's RTI runs, from the program's hosts (its `[[host]]`
/// tables): that host's name and the address federates join it at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RtiPlace {
    pub host: String,
    pub addr: String,
}

impl Running {
    /// Where federate `federate` of this host listens for taps
    /// ([`crate::tap::socket_path`]): its status file's directory.
    pub fn tap_dir(&self, federate: &str) -> PathBuf {
        self.launch.federate_dir(&self.launch.runtime_dir, federate)
    }

    /// The program's manifest, beside its launch file.
    pub fn manifest_path(&self) -> PathBuf {
        self.launch_dir.join(MANIFEST_FILE)
    }

    /// The program's manifest; `None` when it is unreadable (a launcher
    /// that has not written it yet).
    pub fn manifest(&self) -> Option<crate::manifest::Manifest> {
        crate::manifest::Manifest::from_json(&std::fs::read_to_string(self.manifest_path()).ok()?).ok()
    }

    /// Where the RTI of this program runs when the program has hosts,
    /// from `manifest` (its [`Running::manifest`]); `None` without hosts.
    pub fn rti_place(&self, manifest: &crate::manifest::Manifest) -> Option<RtiPlace> {
        self.launch.hosts.as_ref()?;
        Some(RtiPlace { host: manifest.rti_host()?.name.clone(), addr: manifest.rti_addr()? })
    }

    /// The figures of this host's RTI ([`read_rti_figures`]).
    pub fn rti_figures(&self) -> Result<Option<hprm_rti::figures::RtiFigures>, String> {
        read_rti_figures(&self.launch.runtime_dir, &self.launch)
    }
}

/// The federates `launch` started in `dir`, each with its status file.
fn local_federates(dir: &Path, launch: &LaunchInfo, files: &mut StatusFiles) -> Vec<FederateView> {
    launch
        .federates
        .iter()
        .map(|f| {
            let status = files.read(&status_path(&launch.federate_dir(dir, &f.name), &f.name));
            let pid = status.as_ref().map_or(f.pid, |s| s.pid);
            FederateView {
                name: f.name.clone(),
                host: launch.hosts.as_ref().map(|h| h.host.clone()),
                pid,
                alive: alive(pid),
                restarts: f.restarts,
                status,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(dir: &Path, host: &str) -> LaunchInfo {
        LaunchInfo {
            program: "robot".into(),
            pid: std::process::id(),
            started_ns: 1,
            runtime_dir: dir.to_path_buf(),
            federates: vec![FederateProcess { name: "camera".into(), pid: std::process::id(), restarts: 1 }],
            store: None,
            rti: None,
            hosts: Some(ProgramHosts {
                host: host.into(),
                federates: vec![("camera".into(), "a".into()), ("detector".into(), "b".into())],
            }),
            deployed: false,
        }
    }

    #[test]
    fn status_files_are_parsed_once_per_version_and_forgotten_when_gone() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = StatusFiles::default();
        let (a, b) = (status_path(dir.path(), "a"), status_path(dir.path(), "b"));
        replace(&a, &serde_json::to_vec(&status("a", 1)).unwrap()).unwrap();
        replace(&b, &serde_json::to_vec(&status("b", 1)).unwrap()).unwrap();
        assert_eq!(files.read(&a).map(|s| s.tag_ns), Some(1));
        assert_eq!(files.read(&b).map(|s| s.tag_ns), Some(1));
        // Unchanged: the same status, not parsed again.
        assert_eq!(files.read(&a).map(|s| s.tag_ns), Some(1));
        assert_eq!(files.parses(), 2);
        // Rewritten (as a federate does, by a rename): parsed again, even
        // with the same length and within the clock's resolution.
        replace(&a, &serde_json::to_vec(&status("a", 2)).unwrap()).unwrap();
        assert_eq!(files.read(&a).map(|s| s.tag_ns), Some(2));
        assert_eq!(files.parses(), 3);
        files.forget_unread();
        // b ended: its file goes, and so does its entry once a pass missed it.
        std::fs::remove_file(&b).unwrap();
        assert!(files.read(&b).is_none());
        assert_eq!(files.read(&a).map(|s| s.tag_ns), Some(2));
        files.forget_unread();
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(files.parses(), 3);
    }

    fn status(name: &str, tag_ns: i64) -> FederateStatus {
        FederateStatus { federate: name.into(), pid: std::process::id(), tag_ns, ..FederateStatus::default() }
    }

    #[test]
    fn a_host_reports_its_own_federates_and_mirrors_of_other_hosts_fill_in_theirs() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        // No launch yet: nothing to report.
        assert!(host_report(&a.path().join(LAUNCH_FILE), |_| Err("no store".into())).is_none());
        write_launch(a.path(), &launch(a.path(), "a")).unwrap();
        let mut on_b = launch(b.path(), "b");
        on_b.federates[0].name = "detector".into();
        write_launch(b.path(), &on_b).unwrap();
        replace(&status_path(b.path(), "detector"), &serde_json::to_vec(&status("detector", 7)).unwrap()).unwrap();

        let figures = StoreFigures { bytes_in_use: 4096, objects: 2, evictions: 3, ..StoreFigures::default() };
        // Without a store in the launch, none is reported (and not asked).
        assert!(host_report(&b.path().join(LAUNCH_FILE), |_| unreachable!()).unwrap().store.is_none());
        on_b.store = Some(StoreProcess { pid: 42, socket: "/run/b/store.sock".into() });
        write_launch(b.path(), &on_b).unwrap();
        let report = host_report(&b.path().join(LAUNCH_FILE), |s| {
            assert_eq!(s.pid, 42);
            Ok(figures.clone())
        })
        .unwrap();
        assert_eq!(report.store.as_ref().and_then(|s| s.stats.as_ref()), Some(&figures));
        assert_eq!((report.program.as_str(), report.host.as_str()), ("robot", "b"));
        assert_eq!(report.federates.len(), 1);
        assert_eq!(report.federates[0].restarts, 1);
        assert_eq!(report.federates[0].status.as_ref().map(|s| s.tag_ns), Some(7));

        // Before any mirror: host a knows only where detector runs.
        let now = wall_ns();
        let before = remote_federates(a.path(), &launch(a.path(), "a"), now);
        assert_eq!(before.len(), 1);
        assert_eq!((before[0].name.as_str(), before[0].host.as_str(), before[0].pid), ("detector", "b", 0));
        assert!(before[0].status.is_none() && before[0].reported_ns.is_none());

        write_mirror(a.path(), &report).unwrap();
        let now = wall_ns();
        let after = remote_federates(a.path(), &launch(a.path(), "a"), now);
        assert_eq!(after[0].pid, std::process::id());
        assert_eq!(after[0].restarts, 1);
        assert_eq!(after[0].status.as_ref().map(|s| s.tag_ns), Some(7));
        let received = after[0].reported_ns.unwrap();
        let hosts = other_hosts(a.path(), &launch(a.path(), "a"), now);
        assert_eq!(hosts.len(), 1);
        assert_eq!((hosts[0].host.as_str(), hosts[0].reported_ns), ("b", Some(received)));
        assert_eq!(hosts[0].store.as_ref().and_then(|s| s.stats.as_ref()), Some(&figures));
        // Reports of older hosts, without a store or the RTI, still read.
        let old: HostReport = serde_json::from_str(r#"{"program":"robot","host":"b","federates":[]}"#).unwrap();
        assert!(old.store.is_none() && old.rti.is_none());

        // A host that went silent: its federates are still named, with
        // when it last reported, but no status.
        let later = received + MIRROR_FRESH.as_nanos() as i64 + 1;
        let stale = remote_federates(a.path(), &launch(a.path(), "a"), later);
        assert!(stale[0].status.is_none() && stale[0].reported_ns == Some(received));
        // A silent host's store figures are not shown as current.
        let stale_hosts = other_hosts(a.path(), &launch(a.path(), "a"), later);
        assert!(stale_hosts[0].store.is_none() && stale_hosts[0].reported_ns == Some(received));

        // Another program's report (a stale file, a second program) is not this one's.
        let other = HostReport { program: "other".into(), ..report.clone() };
        write_mirror(a.path(), &other).unwrap();
        assert!(remote_federates(a.path(), &launch(a.path(), "a"), wall_ns())[0].reported_ns.is_none());

        remove_mirror(a.path(), "b").unwrap();
        remove_mirror(a.path(), "b").unwrap();
        assert!(!mirror_path(a.path(), "b").exists());
        // A malformed mirror is skipped, not an error.
        std::fs::write(mirror_path(a.path(), "b"), b"{not json").unwrap();
        assert!(remote_federates(a.path(), &launch(a.path(), "a"), wall_ns())[0].reported_ns.is_none());
    }

    #[test]
    fn a_deployed_program_is_listed_from_its_units_directories_while_something_of_it_runs() {
        let etc = tempfile::tempdir().unwrap();
        let run = tempfile::tempdir().unwrap();
        let mut deployed = launch(run.path(), "a");
        deployed.pid = 0;
        deployed.started_ns = 0;
        deployed.deployed = true;
        deployed.federates =
            ["camera", "w[1]"].iter().map(|n| FederateProcess { name: (*n).into(), pid: 0, restarts: 0 }).collect();
        deployed.store = Some(StoreProcess { pid: 0, socket: "/run/hprm/store.sock".into() });
        std::fs::create_dir(etc.path().join("robot")).unwrap();
        let launch_file = etc.path().join("robot").join(LAUNCH_FILE);
        std::fs::write(&launch_file, serde_json::to_vec(&deployed).unwrap()).unwrap();
        // Nothing of it runs: not listed (its units' directories are gone).
        assert!(scan_deployed(etc.path()).is_empty());

        // Each unit writes into its own directory, a bank member's named as its unit's.
        assert_eq!(deployed.federate_dir(run.path(), "w[1]"), run.path().join("w-1"));
        for (dir, name) in [("camera", "camera"), ("w-1", "w[1]")] {
            std::fs::create_dir(run.path().join(dir)).unwrap();
            let s = FederateStatus { start_ns: 5, ..status(name, 9) };
            replace(&status_path(&run.path().join(dir), name), &serde_json::to_vec(&s).unwrap()).unwrap();
        }
        let found = scan_deployed(etc.path());
        assert_eq!(found.len(), 1);
        let r = &found[0];
        assert_eq!(r.launch.started_ns, 5, "its start is the federation's");
        assert!(r.federates.iter().all(|f| f.alive && f.status.as_ref().map(|s| s.tag_ns) == Some(9)));
        // The link's mirror of host b, in its own directory.
        std::fs::create_dir(run.path().join("link")).unwrap();
        let b = HostReport {
            program: "robot".into(),
            host: "b".into(),
            federates: vec![ReportedFederate {
                name: "detector".into(),
                pid: 77,
                restarts: 0,
                status: Some(status("detector", 3)),
            }],
            store: None,
            rti: None,
        };
        write_mirror(&run.path().join("link"), &b).unwrap();
        let found = scan_deployed(etc.path());
        assert_eq!(found[0].elsewhere[0].pid, 77);
        assert_eq!(found[0].elsewhere[0].status.as_ref().map(|s| s.tag_ns), Some(3));
        // What this host's link publishes: read through the launch file hprm deploy wrote.
        let report = host_report(&launch_file, |_| Err("none".into())).unwrap();
        assert_eq!(report.federates.len(), 2);
        assert!(report.federates.iter().all(|f| f.status.is_some()));

        // Only the link runs (the federates ended): still listed, by its mirrors.
        for (dir, name) in [("camera", "camera"), ("w-1", "w[1]")] {
            std::fs::remove_file(status_path(&run.path().join(dir), name)).unwrap();
        }
        assert_eq!(scan_deployed(etc.path()).len(), 1);
        remove_mirror(&run.path().join("link"), "b").unwrap();
        assert!(scan_deployed(etc.path()).is_empty());
    }

    #[test]
    fn discover_finds_launched_and_deployed_programs_and_says_where_their_files_are() {
        let runtime = tempfile::tempdir().unwrap();
        let etc = tempfile::tempdir().unwrap();
        let run = tempfile::tempdir().unwrap();
        assert!(discover(runtime.path(), etc.path()).is_empty());
        // A launch: its files in its runtime directory.
        let launched_dir = runtime.path().join("hprm-1-1");
        std::fs::create_dir(&launched_dir).unwrap();
        let mut launched = launch(&launched_dir, "a");
        launched.program = "launched".into();
        launched.hosts = None;
        write_launch(&launched_dir, &launched).unwrap();
        // A deployed program on host b, its RTI on host a: its launch file
        // and manifest under etc, its units' directories under run.
        let mut deployed = launch(run.path(), "b");
        (deployed.pid, deployed.started_ns, deployed.deployed) = (0, 0, true);
        deployed.federates[0].name = "detector".into();
        std::fs::create_dir(etc.path().join("robot")).unwrap();
        std::fs::write(etc.path().join("robot").join(LAUNCH_FILE), serde_json::to_vec(&deployed).unwrap()).unwrap();
        let manifest = r#"{"name": "robot", "rti_host": "a",
            "host": [{"name": "b", "address": "10.0.0.2"}, {"name": "a", "address": "10.0.0.1"}]}"#;
        std::fs::write(etc.path().join("robot").join(MANIFEST_FILE), manifest).unwrap();
        std::fs::create_dir(run.path().join("detector")).unwrap();
        let s = FederateStatus { start_ns: 5, ..status("detector", 9) };
        replace(&status_path(&run.path().join("detector"), "detector"), &serde_json::to_vec(&s).unwrap()).unwrap();

        let found = discover(runtime.path(), etc.path());
        let names: Vec<&str> = found.iter().map(|r| r.launch.program.as_str()).collect();
        assert_eq!(names, ["launched", "robot"], "launched programs first, then deployed ones");
        let (l, d) = (&found[0], &found[1]);
        assert_eq!(l.tap_dir("camera"), launched_dir);
        assert_eq!(l.manifest_path(), launched_dir.join(MANIFEST_FILE));
        assert!(l.manifest().is_none() && l.launch.hosts.is_none());
        // A deployed federate's tap is in its unit's directory, beside its status.
        assert_eq!(d.tap_dir("detector"), run.path().join("detector"));
        assert_eq!(d.manifest_path(), etc.path().join("robot").join(MANIFEST_FILE));
        let m = d.manifest().expect("the deployed manifest");
        assert_eq!(
            d.rti_place(&m),
            Some(RtiPlace { host: "a".into(), addr: format!("10.0.0.1:{}", crate::manifest::DEFAULT_RTI_PORT) })
        );
        assert!(matches!(d.rti_figures(), Ok(None)), "no RTI on host b");
    }

    #[test]
    fn a_deployed_rti_whose_figures_cannot_be_read_is_still_seen_running_and_says_why() {
        let etc = tempfile::tempdir().unwrap();
        let run = tempfile::tempdir().unwrap();
        let mut deployed = launch(run.path(), "a");
        (deployed.pid, deployed.started_ns, deployed.deployed, deployed.hosts) = (0, 0, true, None);
        deployed.federates[0].pid = 0;
        deployed.rti = Some(RtiProcess { pid: 0, addr: "127.0.0.1:15045".into() });
        std::fs::create_dir(etc.path().join("robot")).unwrap();
        std::fs::write(etc.path().join("robot").join(LAUNCH_FILE), serde_json::to_vec(&deployed).unwrap()).unwrap();
        // The RTI's unit has not started: its directory is not there.
        assert!(matches!(read_rti_figures(run.path(), &deployed), Ok(None)));
        assert!(scan_deployed(etc.path()).is_empty());
        let rti_dir = deployed.rti_dir(run.path());
        std::fs::create_dir(&rti_dir).unwrap();
        let file = rti_dir.join(hprm_rti::figures::RTI_STATUS_FILE);
        let figures = hprm_rti::figures::RtiFigures { pid: std::process::id(), start_ns: 7, ..Default::default() };
        std::fs::write(&file, serde_json::to_vec(&figures).unwrap()).unwrap();
        let found = scan_deployed(etc.path());
        assert_eq!(found.len(), 1, "only its RTI runs");
        assert_eq!(found[0].launch.started_ns, 7);
        assert_eq!(found[0].rti_figures().map(|f| f.map(|f| f.start_ns)), Ok(Some(7)));
        // A file this reader cannot read (these tests may run as root, for
        // whom modes do not refuse a read: a directory in its place refuses
        // it for everyone): the RTI runs, and why its figures are missing.
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        let found = scan_deployed(etc.path());
        assert_eq!(found.len(), 1, "its unreadable figures still say that the RTI runs");
        let why = found[0].rti_figures().unwrap_err();
        assert!(why.starts_with(&format!("cannot read {}: ", file.display())), "{why}");
        assert!(rti_figures(run.path(), &deployed).is_none());
    }
}
