//! `hprm ps`: the programs launched on this machine that are still
//! running, each federate with its process, current tag, how far logical
//! time lags behind physical time, messages per second, and messages lost
//! and late so far (`--json`: by port and kind, `hprm_node::loss`), the
//! clock offset synchronization measured (between hosts); and each
//! program's store (pid, socket) and RTI (pid, host:port, and its figures
//! where they are readable). A program that spans hosts lists every host's
//! federates, with a HOST column, and each other host's store with its
//! figures as that host last reported them; on a host without the RTI, the
//! RTI's host and address (from the program's manifest).
//!
//! Launchers write `launch.json` and federates `status-<name>.json` into
//! the program's runtime directory, and each host's `hprm-link` mirrors the
//! other hosts' there (`hprm_node::status`); this only reads them, so it
//! never disturbs a program. Programs deployed under systemd are found as
//! launched ones are ([`Places`], `hprm_node::status::discover`).

use std::path::PathBuf;

use clap::Args;
use hprm_node::status::{self, Running};
use hprm_rti::figures::RtiFigures;
use hprm_store::bytesize::ByteSize;

#[derive(Args, Debug)]
pub struct PsArgs {
    /// Print JSON (one array of programs) instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub places: Places,
}

/// Where the commands that watch running programs (`hprm ps`, `hprm
/// topic`, `hprm dashboard`) look for them: launched and deployed alike.
#[derive(Args, Debug, Clone)]
pub struct Places {
    /// Where launchers put runtime directories (default: $XDG_RUNTIME_DIR,
    /// else the temporary directory, as `hprm launch` does).
    #[arg(long, value_name = "DIR")]
    pub runtime_base: Option<PathBuf>,
    /// Where `hprm deploy --systemd` put the launch files of programs
    /// deployed on this host (DIR/PROGRAM/launch.json).
    #[arg(long, value_name = "DIR", default_value = status::DEPLOYED_BASE)]
    pub deployed: PathBuf,
}

impl Default for Places {
    fn default() -> Places {
        Places { runtime_base: None, deployed: status::DEPLOYED_BASE.into() }
    }
}

impl Places {
    pub fn runtime_base(&self) -> PathBuf {
        self.runtime_base.clone().unwrap_or_else(status::runtime_base)
    }

    /// The programs running here: launched ones, then deployed ones.
    pub fn running(&self) -> Vec<Running> {
        status::discover(&self.runtime_base(), &self.deployed)
    }

    /// [`Places::running`] for a reader that reads again and again: the
    /// status files unchanged since `files` parsed them are not parsed again.
    pub fn running_with(&self, files: &mut status::StatusFiles) -> Vec<Running> {
        status::discover_with(&self.runtime_base(), &self.deployed, files)
    }

    /// Where [`Places::running`] looked, for a message saying it found nothing.
    pub fn looked(&self) -> String {
        format!(
            "looked for hprm-*/launch.json in {} and deployed programs' in {}",
            self.runtime_base().display(),
            self.deployed.display()
        )
    }
}

pub fn run(args: &PsArgs) -> anyhow::Result<i32> {
    let running = args.places.running();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&running)?);
        return Ok(0);
    }
    if running.is_empty() {
        println!("no HPRM program is running ({})", args.places.looked());
        return Ok(0);
    }
    print!("{}", table(&running, now_ns()));
    Ok(0)
}

/// The system clock in ns since the epoch (the clock status files use).
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// `ns` as a short duration: `850 µs`, `12.3 ms`, `4.20 s`, `3m05s`.
pub fn human(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs() as f64;
    let text = if a < 1e6 {
        format!("{:.0} µs", a / 1e3)
    } else if a < 1e9 {
        format!("{:.1} ms", a / 1e6)
    } else if a < 60e9 {
        format!("{:.2} s", a / 1e9)
    } else {
        let s = (a / 1e9) as u64;
        format!("{}m{:02}s", s / 60, s % 60)
    };
    format!("{sign}{text}")
}

/// A federate's figures from its status: TAG, LAG, IN/S, OUT/S, LOST, LATE, CLOCK.
fn figures(s: &status::FederateStatus) -> Vec<String> {
    vec![
        format!("{}/{}", human(s.tag_ns), s.microstep),
        human(s.lag_ns),
        format!("{:.0}", s.messages_in_per_s),
        format!("{:.0}", s.messages_out_per_s),
        s.losses.lost().to_string(),
        s.losses.late().to_string(),
        // Between hosts: what clock synchronization adds to this host's clock.
        s.clock_offset_ns.map_or("-".into(), |o| format!("{}{}", if o > 0 { "+" } else { "" }, human(o))),
    ]
}

fn table(programs: &[Running], now: i64) -> String {
    // A HOST column only where a program spans hosts.
    let hosts = programs.iter().any(|p| p.launch.hosts.is_some());
    let mut header = vec!["PROGRAM", "PID", "UP", "FEDERATE"];
    if hosts {
        header.push("HOST");
    }
    header.extend(["FED PID", "TAG", "LAG", "IN/S", "OUT/S", "LOST", "LATE", "CLOCK"]);
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    for p in programs {
        let mut first = true;
        let mut head = |name: &str, host: Option<&str>| {
            let mut row = if std::mem::take(&mut first) {
                // Deployed: systemd runs it, and it is up since the federation's start.
                let (pid, up) = match (p.launch.deployed, p.launch.started_ns) {
                    (true, 0) => ("systemd".into(), "-".into()),
                    (true, t) => ("systemd".into(), human(now - t)),
                    (false, t) => (p.launch.pid.to_string(), human(now - t)),
                };
                vec![p.launch.program.clone(), pid, up]
            } else {
                vec![String::new(); 3]
            };
            row.push(name.to_owned());
            if hosts {
                row.push(host.unwrap_or("-").to_owned());
            }
            row
        };
        for f in &p.federates {
            let pid = if f.alive {
                f.pid.to_string()
            } else if f.pid == 0 {
                "-".into()
            } else {
                format!("{} (exited)", f.pid)
            };
            let rest = match &f.status {
                Some(s) => figures(s),
                None => {
                    let mut cells = vec!["-".to_owned(); 7];
                    cells[0] = if f.alive { "starting" } else { "-" }.into();
                    cells
                }
            };
            let mut row = head(&f.name, f.host.as_deref());
            row.push(pid);
            row.extend(rest);
            rows.push(row);
        }
        // Other hosts' federates: as their hosts report them (through the
        // links), and where this host runs the RTI, its view (joined, last
        // tag granted). Their pids are other machines' processes.
        for r in &p.elsewhere {
            let mut pid = if r.pid == 0 { "-".to_string() } else { r.pid.to_string() };
            if let Some(f) = &r.rti {
                pid.push_str(if f.connected { " (joined)" } else { " (not joined)" });
            }
            let rest = match (&r.status, r.reported_ns, &r.rti) {
                (Some(s), _, _) => figures(s),
                // Its host stopped reporting (lost, or its share ended).
                (None, Some(t), _) if now - t >= status::MIRROR_FRESH.as_nanos() as i64 => {
                    vec![format!("silent {}", human(now - t))]
                }
                (None, _, Some(f)) => vec![f.granted_ns.map_or("-".into(), |t| format!("{} (granted)", human(t)))],
                _ => vec!["-".into()],
            };
            let mut row = head(&r.name, Some(&r.host));
            row.push(pid);
            row.extend(rest);
            row.resize(rows[0].len(), "-".into());
            rows.push(row);
        }
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    // The daemons under the table, one line per program: a socket path is
    // too long for a column.
    for p in programs {
        // A deployed program's store and RTI are systemd's units: their pids are not recorded.
        let daemon = |pid: u32, at: String| match pid {
            0 if p.launch.deployed => format!("under systemd at {at}"),
            _ => format!("pid {}{} at {at}", pid, if status::alive(pid) { "" } else { " (exited)" }),
        };
        let store = p.launch.store.as_ref().map_or("-".into(), |s| daemon(s.pid, s.socket.display().to_string()));
        let rti = match &p.launch.rti {
            Some(r) => local_rti(
                daemon(r.pid, r.addr.clone()),
                p.rti_figures(),
                &rti_figures_fix(&p.launch.program, p.launch.deployed),
            ),
            None => remote_rti(p),
        };
        out.push_str(&format!("{}: store {store}; rti {rti}\n", p.launch.program));
        // The other hosts' stores, as their links last reported them
        // (this host's own is not asked: `hprm ps` only reads files).
        for h in &p.other_hosts {
            out.push_str(&format!(
                "{}: store on host {}: {}\n",
                p.launch.program,
                h.host,
                store_figures(&h.store_report())
            ));
        }
        if let Some(h) = &p.launch.hosts {
            let others = p.elsewhere.len();
            let reported = p.elsewhere.iter().filter(|r| r.status.is_some()).count();
            let rti = if p.launch.rti.is_some() { "; joined: as the RTI sees them" } else { "" };
            out.push_str(&format!(
                "{}: this is host {}; {others} federate{} on other hosts ({reported} reporting through hprm-link{rti})\n",
                p.launch.program,
                h.host,
                if others == 1 { "" } else { "s" }
            ));
        }
    }
    out
}

/// The RTI of this host (`at`: its process and address) with its figures
/// when they are readable, or why not.
fn local_rti(at: String, figures: Result<Option<RtiFigures>, String>, fix: &str) -> String {
    match figures {
        Ok(Some(f)) => format!("{at}: {}", rti_figures(&f)),
        // It has not written them yet (it writes them once a second).
        Ok(None) => at,
        Err(why) => format!("{at}: its figures are not readable here ({why}); {fix}"),
    }
}

/// What to do when a running RTI's figures cannot be read here (the one
/// advice `hprm ps` and the dashboard give): a deployed RTI's `rti.json`
/// is readable by group `hprm` (mode 0640, in a directory of mode 0750), a
/// launched one's by the user who launched it.
pub(crate) fn rti_figures_fix(program: &str, deployed: bool) -> String {
    if deployed {
        "its file is readable by group hprm: add this user to it \
         (sudo usermod -aG hprm USER, then log in again) or run this as a member"
            .to_string()
    } else {
        format!("run this as the user who launched {program}")
    }
}

/// The RTI of a program whose RTI runs on another host: where (its host
/// and address from the program's hosts), and its figures as that host's
/// link last reported them, or that they are not readable here.
fn remote_rti(p: &Running) -> String {
    let Some(place) = p.manifest().and_then(|m| p.rti_place(&m)) else { return "-".into() };
    let at = format!("on host {} ({})", place.host, place.addr);
    match p.other_hosts.iter().find_map(|h| Some((h.host.as_str(), h.rti.as_ref()?))) {
        Some((host, f)) => format!("{at}: {} (as host {host} reports through hprm-link)", rti_figures(f)),
        None => format!(
            "{at}: its figures are not readable here (they are on host {}; hprm-link brings them while it runs there and here)",
            place.host
        ),
    }
}

/// The RTI's figures in a few words: federates joined, messages relayed.
fn rti_figures(f: &RtiFigures) -> String {
    let joined = f.federates.iter().filter(|x| x.connected).count();
    format!(
        "{joined}/{} federates joined, {} messages relayed ({:.0}/s)",
        f.federates.len(),
        f.relayed,
        f.relayed_per_s
    )
}

/// A store's figures in a line (or why there are none): bytes in use of
/// its capacity, objects (held by a client; deliveries not yet taken),
/// evictions, creates refused (no room; over the program's quota); with a
/// spill file, what spilled to it.
fn store_figures(r: &status::StoreReport) -> String {
    let Some(f) = &r.stats else { return r.error.clone().unwrap_or_else(|| "no figures".into()) };
    let spill = if f.spill_capacity > 0 {
        format!(
            ", {} objects spilled ({} of {} in the spill file now)",
            f.objects_spilled,
            ByteSize(f.spill_bytes_in_use),
            ByteSize(f.spill_capacity)
        )
    } else {
        String::new()
    };
    format!(
        "pid {}: {} in use of {}, {} objects ({} held, {} deliveries pending), {} evictions, {} creates refused for room, {} over quota",
        r.pid,
        ByteSize(f.bytes_in_use),
        ByteSize(f.capacity),
        f.objects,
        f.objects_referenced,
        f.pending_deliveries,
        f.evictions,
        f.creates_refused,
        f.creates_over_quota
    ) + &spill
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_across_hosts_lists_every_hosts_federates_with_its_host() {
        use hprm_node::status::{
            FederateStatus, FederateView, LaunchInfo, OtherHost, ProgramHosts, RemoteFederate, StoreFigures,
            StoreReport,
        };
        let now = 100_000_000_000;
        let remote = |name: &str, status: Option<FederateStatus>, reported_ns| RemoteFederate {
            name: name.into(),
            host: "b".into(),
            pid: 4321,
            restarts: 0,
            reported_ns,
            status,
            rti: None,
        };
        let running = Running {
            launch: LaunchInfo {
                program: "robot".into(),
                pid: 1,
                started_ns: now - 5_000_000_000,
                runtime_dir: "/nonexistent".into(),
                federates: vec![],
                store: None,
                rti: None,
                hosts: Some(ProgramHosts { host: "a".into(), federates: vec![] }),
                deployed: false,
            },
            launch_dir: "/nonexistent".into(),
            federates: vec![FederateView {
                name: "camera".into(),
                host: Some("a".into()),
                pid: 0,
                alive: false,
                restarts: 0,
                status: None,
            }],
            elsewhere: vec![
                remote("detector", Some(FederateStatus { tag_ns: 1_500_000_000, ..Default::default() }), Some(now)),
                remote("planner", None, Some(now - 10_000_000_000)),
            ],
            other_hosts: vec![
                OtherHost {
                    host: "b".into(),
                    reported_ns: Some(now),
                    store: Some(StoreReport {
                        pid: 77,
                        socket: "/run/b/store.sock".into(),
                        stats: Some(StoreFigures {
                            capacity: 256 << 20,
                            bytes_in_use: 3 << 20,
                            objects: 4,
                            objects_referenced: 1,
                            pending_deliveries: 2,
                            evictions: 5,
                            creates_refused: 6,
                            creates_over_quota: 7,
                            ..StoreFigures::default()
                        }),
                        error: None,
                    }),
                    rti: None,
                },
                OtherHost { host: "c".into(), reported_ns: Some(now - 10_000_000_000), store: None, rti: None },
            ],
        };
        let text = table(std::slice::from_ref(&running), now);
        assert!(
            text.contains(
                "robot: store on host b: pid 77: 3 MiB in use of 256 MiB, 4 objects (1 held, 2 deliveries pending), 5 evictions, 6 creates refused for room, 7 over quota\n"
            ),
            "{text}"
        );
        assert!(text.contains("robot: store on host c: host c stopped reporting\n"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("FEDERATE  HOST  FED PID"), "{text}");
        let cells = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(cells(lines[1])[4..7], ["camera", "a", "-"], "{text}");
        assert_eq!(cells(lines[2])[..4], ["detector", "b", "4321", "1.50"], "{text}");
        assert_eq!(cells(lines[3])[..5], ["planner", "b", "4321", "silent", "10.00"], "{text}");
        assert!(
            text.contains("robot: this is host a; 2 federates on other hosts (1 reporting through hprm-link)"),
            "{text}"
        );
        // Without hosts, no HOST column.
        let mut one = Running { elsewhere: vec![], ..running };
        one.launch.hosts = None;
        assert!(!table(&[one], now).contains("HOST"));
    }

    #[test]
    fn a_store_with_a_spill_file_says_what_spilled_and_one_without_says_nothing_of_it() {
        use hprm_node::status::{StoreFigures, StoreReport};
        let report = |spill_capacity| StoreReport {
            pid: 9,
            socket: "/run/hprm/store.sock".into(),
            stats: Some(StoreFigures {
                spill_capacity,
                spill_bytes_in_use: 4 << 20,
                objects_spilled: 3,
                ..StoreFigures::default()
            }),
            error: None,
        };
        let line = store_figures(&report(1 << 30));
        assert!(line.ends_with(", 3 objects spilled (4 MiB of 1 GiB in the spill file now)"), "{line}");
        assert!(!store_figures(&report(0)).contains("spill"));
    }

    #[test]
    fn a_host_without_the_rti_says_where_it_runs_and_whether_its_figures_are_readable() {
        use hprm_node::status::{LaunchInfo, OtherHost, ProgramHosts};
        use hprm_rti::figures::RtiFederate;
        let etc = tempfile::tempdir().unwrap();
        let manifest = r#"{"name": "robot", "rti_port": 15050,
            "host": [{"name": "a", "address": "10.0.0.1"}, {"name": "b", "address": "10.0.0.2"}]}"#;
        std::fs::write(etc.path().join(status::MANIFEST_FILE), manifest).unwrap();
        let on_b = Running {
            launch: LaunchInfo {
                program: "robot".into(),
                pid: 0,
                started_ns: 0,
                runtime_dir: "/nonexistent".into(),
                federates: vec![],
                store: None,
                rti: None,
                hosts: Some(ProgramHosts {
                    host: "b".into(),
                    federates: vec![("camera".into(), "a".into()), ("detector".into(), "b".into())],
                }),
                deployed: true,
            },
            launch_dir: etc.path().to_path_buf(),
            federates: vec![],
            elsewhere: vec![],
            other_hosts: vec![OtherHost { host: "a".into(), reported_ns: Some(1), store: None, rti: None }],
        };
        let text = table(std::slice::from_ref(&on_b), 2);
        assert!(
            text.contains("robot: store -; rti on host a (10.0.0.1:15050): its figures are not readable here (they are on host a;"),
            "{text}"
        );
        // Host a's link reports them: shown, saying whose report they are.
        let joined = |connected| RtiFederate { connected, ..RtiFederate::default() };
        let figures = RtiFigures {
            relayed: 12,
            relayed_per_s: 3.0,
            federates: vec![joined(true), joined(false)],
            ..RtiFigures::default()
        };
        let mut reported = on_b.clone();
        reported.other_hosts[0].rti = Some(figures.clone());
        let text = table(&[reported], 2);
        assert!(
            text.contains("rti on host a (10.0.0.1:15050): 1/2 federates joined, 12 messages relayed (3/s) (as host a reports through hprm-link)"),
            "{text}"
        );
        // Without its manifest, where the RTI runs is not known.
        std::fs::remove_file(etc.path().join(status::MANIFEST_FILE)).unwrap();
        assert!(table(&[on_b], 2).contains("robot: store -; rti -\n"));
        // On the RTI's host: its figures, or plainly why they are not shown.
        let at = || "under systemd at 10.0.0.1:15050".to_string();
        assert_eq!(
            local_rti(at(), Ok(Some(figures)), "never shown"),
            "under systemd at 10.0.0.1:15050: 1/2 federates joined, 12 messages relayed (3/s)"
        );
        let fix = rti_figures_fix("robot", true);
        assert_eq!(local_rti(at(), Ok(None), &fix), at());
        assert_eq!(
            local_rti(at(), Err("cannot read /run/hprm/robot/rti/rti.json: Permission denied".into()), &fix),
            "under systemd at 10.0.0.1:15050: its figures are not readable here (cannot read /run/hprm/robot/rti/rti.json: \
             Permission denied); its file is readable by group hprm: add this user to it (sudo usermod -aG hprm USER, \
             then log in again) or run this as a member"
        );
        assert_eq!(rti_figures_fix("robot", false), "run this as the user who launched robot");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human(850_000), "850 µs");
        assert_eq!(human(12_340_000), "12.3 ms");
        assert_eq!(human(4_200_000_000), "4.20 s");
        assert_eq!(human(185_000_000_000), "3m05s");
        assert_eq!(human(-2_000_000), "-2.0 ms");
    }
}
