//! What the dashboard shows, read afresh for each request (a status file
//! parsed again only once its federate rewrote it): the programs
//! launched or deployed on this host (`hprm_node::status::discover`, as
//! `hprm ps`, with the federates of their other hosts that the links
//! mirror here), each one's graph (the manifest beside its launch file)
//! and its store's figures (asked over a store connection kept per socket).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use hprm_node::manifest::Manifest;
use hprm_node::status::{FederateStatus, RtiPlace, RtiProcess, StatusFiles, StoreFigures, StoreReport};
use hprm_rti::figures::RtiFigures;
use hprm_store::{ConnectOptions, StoreClient};
use serde::Serialize;

use crate::ps::Places;

/// Every running program, at `now_ns` (ns since the epoch).
#[derive(Debug, Serialize)]
pub struct Snapshot {
    pub now_ns: i64,
    pub programs: Vec<Program>,
}

#[derive(Debug, Serialize)]
pub struct Program {
    pub name: String,
    /// The launcher's process (0 for a deployed program: systemd runs it).
    pub pid: u32,
    /// Deployed under systemd (`hprm deploy --systemd`), not launched.
    pub deployed: bool,
    /// Since when it runs: the launch, or a deployed program's federation
    /// start (0 until a federate or the RTI reports one).
    pub started_ns: i64,
    pub federates: Vec<Federate>,
    /// Federate to federate, from the manifest (empty if it is unreadable).
    pub links: Vec<Link>,
    /// This host's store.
    pub store: Option<Store>,
    /// The other hosts' stores, as their links report them (a program with
    /// hosts), in the order the hosts first appear among the federates.
    pub other_stores: Vec<Store>,
    /// The RTI's process, where it runs on this host.
    pub rti: Option<RtiProcess>,
    /// The RTI's own figures (absent until it wrote them, and without an
    /// RTI), read here or reported by the host that runs it.
    pub rti_figures: Option<RtiView>,
    /// Where the RTI whose figures these are runs.
    pub rti_host: Option<String>,
    /// Where the RTI runs in a program with hosts (from its manifest).
    pub rti_place: Option<RtiPlace>,
    /// Whether the program's RTI runs: on this host, its process is alive
    /// (a deployed one's pid is not recorded: its figures file is there,
    /// readable or not, since its unit's directory goes as it stops); on
    /// another host, that host's reports bring its figures. Not whether its
    /// figures could be read: see `rti_error`.
    pub rti_running: bool,
    /// Why this host's RTI's figures are not shown though it runs and
    /// writes them (its file is not readable by this dashboard's user), and
    /// what to do about it.
    pub rti_error: Option<String>,
}

/// The RTI's figures, its federates named.
#[derive(Debug, Serialize)]
pub struct RtiView {
    #[serde(flatten)]
    pub figures: RtiFigures,
    /// By federate id: its name (from the manifest).
    pub names: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Federate {
    pub name: String,
    /// Where it runs: its `[[host]]` in a program with hosts, else this machine.
    pub host: String,
    pub pid: u32,
    pub alive: bool,
    /// How many times its launcher restarted it.
    pub restarts: u32,
    /// Its own report; absent until its first (it is starting) and once
    /// it ended.
    pub status: Option<FederateStatus>,
}

/// A connection between two federates.
#[derive(Debug, Serialize)]
pub struct Link {
    pub from: String,
    pub to: String,
    pub from_port: String,
    pub to_port: String,
    pub after: Option<String>,
    pub physical: bool,
}

/// A store of the program: this host's (asked here) or another host's (as
/// that host's link last reported it).
#[derive(Debug, Serialize)]
pub struct Store {
    /// The host it runs on (this machine's name in a program without hosts).
    pub host: String,
    #[serde(flatten)]
    pub report: StoreReport,
}

/// Reads snapshots; keeps one store connection per socket between reads.
pub struct Reader {
    places: Places,
    /// This machine's name, the host of federates of programs without hosts.
    host: String,
    stores: HashMap<PathBuf, StoreClient>,
    /// The federates' status files as last parsed: `/events` and
    /// `/metrics` read on periods of their own, and a file is parsed once
    /// whichever reads it first after the federate rewrote it.
    status_files: StatusFiles,
    /// The programs whose RTI's figures this reader could not read, each
    /// logged once (until they are readable again): snapshots come every
    /// second.
    unreadable: HashSet<String>,
}

impl Reader {
    pub fn new(places: Places) -> Reader {
        Reader {
            places,
            host: hostname(),
            stores: HashMap::new(),
            status_files: StatusFiles::default(),
            unreadable: HashSet::new(),
        }
    }

    /// Logs, once, that `program`'s RTI's figures are unreadable (`why`),
    /// or forgets it once they are readable again.
    fn say_once(&mut self, program: &str, why: Option<&str>) {
        match why {
            Some(why) if self.unreadable.insert(program.to_owned()) => {
                tracing::warn!(program, "the RTI runs, but its figures are not readable by this dashboard: {why}");
            }
            Some(_) => {}
            None => drop(self.unreadable.remove(program)),
        }
    }

    pub fn read(&mut self) -> Snapshot {
        let here = self.host.clone();
        let programs = self
            .places
            .running_with(&mut self.status_files)
            .into_iter()
            .map(|r| {
                let manifest = r.manifest();
                let links = manifest.as_ref().map(links).unwrap_or_default();
                let rti_place = manifest.as_ref().and_then(|m| r.rti_place(m));
                // This host's name in the program (its `[[host]]`), else the machine's.
                let local = r.launch.hosts.as_ref().map_or_else(|| here.clone(), |h| h.host.clone());
                let read = r.rti_figures();
                let rti_here = r.launch.rti.as_ref().is_some_and(|rti| match rti.pid {
                    0 => r.launch.deployed && !matches!(read, Ok(None)),
                    pid => hprm_node::status::alive(pid),
                });
                let (local_rti, rti_error) = match read {
                    Ok(f) => (f, None),
                    Err(why) => (None, Some(unreadable(&r.launch.program, r.launch.deployed, &why))),
                };
                self.say_once(&r.launch.program, rti_error.as_deref());
                let (rti_host, rti_figures) = match local_rti {
                    Some(f) => (Some(local.clone()), Some(f)),
                    None => r
                        .other_hosts
                        .iter()
                        .find_map(|h| Some((Some(h.host.clone()), Some(h.rti.clone()?))))
                        .unwrap_or((None, None)),
                };
                let rti_figures = rti_figures.map(|figures| {
                    // Federate ids are their places in the program, as
                    // the launcher started them (a launch of one host's
                    // share lists fewer: the manifest lists them all).
                    let launched: Vec<String> = r.launch.federates.iter().map(|f| f.name.clone()).collect();
                    let names = match &manifest {
                        Some(m) if launched.len() != figures.federates.len() => {
                            m.federates.iter().map(|f| f.name.clone()).collect()
                        }
                        _ => launched,
                    };
                    RtiView { figures, names }
                });
                let other_stores =
                    r.other_hosts.iter().map(|h| Store { host: h.host.clone(), report: h.store_report() }).collect();
                let host_of = |name: &str| {
                    manifest
                        .as_ref()
                        .and_then(|m| m.federates.iter().find(|f| f.name == name)?.host.clone())
                        .unwrap_or_else(|| here.clone())
                };
                let store = r.launch.store.as_ref().map(|s| Store {
                    host: local.clone(),
                    report: StoreReport::from_result(s, self.store_figures(&s.socket)),
                });
                Program {
                    name: r.launch.program,
                    pid: r.launch.pid,
                    deployed: r.launch.deployed,
                    started_ns: r.launch.started_ns,
                    federates: r
                        .federates
                        .into_iter()
                        .map(|f| Federate {
                            host: host_of(&f.name),
                            name: f.name,
                            pid: f.pid,
                            alive: f.alive,
                            restarts: f.restarts,
                            status: f.status.filter(|_| f.alive),
                        })
                        // Other hosts' federates, as their hosts report them
                        // through the links: running while reports come.
                        .chain(r.elsewhere.into_iter().map(|f| Federate {
                            alive: f.status.is_some(),
                            name: f.name,
                            host: f.host,
                            pid: f.pid,
                            restarts: f.restarts,
                            status: f.status,
                        }))
                        .collect(),
                    links,
                    store,
                    other_stores,
                    rti: r.launch.rti,
                    rti_running: rti_here || rti_figures.is_some(),
                    rti_figures,
                    rti_host,
                    rti_place,
                    rti_error,
                }
            })
            .collect();
        Snapshot { now_ns: crate::ps::now_ns(), programs }
    }

    fn store_figures(&mut self, socket: &PathBuf) -> Result<StoreFigures, String> {
        if !self.stores.contains_key(socket) {
            // Not pre-faulted: the dashboard maps the arena but never touches it.
            let opts = ConnectOptions { populate: Some(false), ..Default::default() };
            let client = StoreClient::connect_with(socket, &opts).map_err(|e| e.to_string())?;
            self.stores.insert(socket.clone(), client);
        }
        let stats = self.stores.get(socket).map(StoreClient::stats);
        match stats {
            Some(Ok(s)) => Ok(StoreFigures::from(&s)),
            Some(Err(e)) => {
                // A store that died and came back: a new connection next time.
                self.stores.remove(socket);
                Err(e.to_string())
            }
            None => Err("no connection".into()),
        }
    }
}

/// Why `program`'s RTI's figures cannot be read (`why`, the error reading
/// its file), and what to do ([`crate::ps::rti_figures_fix`]).
fn unreadable(program: &str, deployed: bool, why: &str) -> String {
    format!("the RTI runs, but {why}; {}", crate::ps::rti_figures_fix(program, deployed))
}

/// The federate a port path (`federate.reactor.port`) belongs to.
fn federate_of(port: &str) -> &str {
    port.split('.').next().unwrap_or(port)
}

fn links(m: &Manifest) -> Vec<Link> {
    m.connections
        .iter()
        .map(|c| Link {
            from: federate_of(&c.from).to_owned(),
            to: federate_of(&c.to).to_owned(),
            from_port: c.from.clone(),
            to_port: c.to.clone(),
            after: c.after.clone(),
            physical: c.physical,
        })
        .collect()
}

/// This machine's name (`localhost` if it has none).
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if rc == 0 { &buf[..buf.iter().position(|&b| b == 0).unwrap_or(buf.len())] } else { &[][..] };
    match String::from_utf8_lossy(name).into_owned() {
        n if n.is_empty() => "localhost".into(),
        n => n,
    }
}
