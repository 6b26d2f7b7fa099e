//! Deploying a program as systemd units (`hprm deploy --systemd DIR PROGRAM`).
//!
//! The units are templates, kept as files in the repository's `deploy/`
//! (and embedded here, the one copy of their text): `hprm-store.service`
//! (one store per host), `hprm-rti@.service` (instance: the program),
//! `hprm-federate@.service` (instance: `<program>-<federate>`, each part
//! systemd-escaped, so `%I` reads `<program>/<federate>`) and `hprm@.target`
//! (instance: the program; enabling it starts the whole program).
//! [`systemd`] turns a [`Manifest`] and the command of each federate into
//! what one program needs on top of them, as a tree of files under `etc/`
//! to copy to `/`:
//!
//! - `etc/hprm/<program>/rti.conf`: the RTI's settings (port, federates, id);
//! - `etc/hprm/<program>/<federate>.env`: each federate's `HPRM_*` environment
//!   (and the environment its command needs);
//! - `etc/hprm/<program>/manifest.json`: the graph, as `HPRM_MANIFEST`;
//! - `etc/hprm/<program>/launch.json`: the program on this host as `hprm ps`
//!   and the link read it (`hprm_node::status::LaunchInfo::deployed`): its
//!   federates here, each writing its status into its unit's runtime
//!   directory under `/run/hprm/<program>/`;
//! - `etc/hprm/<program>/auth.key` (mode 0600, root's): the shared key of
//!   the RTI's HMAC authentication of federates, fresh for each deployment
//!   (unless [`SystemdOptions::auth`] is off). systemd hands it to the RTI
//!   and the federates as a credential (`LoadCredential=`), readable by
//!   the service's user only while it runs;
//! - `etc/systemd/system/<unit>.d/hprm-deploy.conf` drop-ins: the program
//!   target wants the RTI and every federate; each federate's command
//!   (`ExecStart=`), restart policy and ordering after its RTI;
//! - the templates themselves, with the daemons' directory filled in.
//!
//! A program whose manifest has a `[record]` table gets its recorder,
//! `hprm-record@<program>.service` (`hprm recorder`, reading the settings
//! from the manifest, its path made absolute by `hprm deploy`), which every
//! federate of the host requires and starts after, and feeds at
//! `/run/hprm/<program>/record/record.sock` (`HPRM_RECORD` in its `.env`).
//! Its drop-in lets it write the recording's directory: a `StateDirectory=`
//! under `/var/lib`, else `ReadWritePaths=` (the directory must exist).
//!
//! A program that spans hosts (`[[host]]` tables) is deployed one host at
//! a time ([`SystemdOptions::host`]): that host's federates, its
//! `hprm-link@<program>.service` (the link to the other hosts' stores, with
//! `/etc/hprm/<program>/link.conf`; the store keeps no network), and the RTI
//! only on the host that runs it, listening on that host's address, with
//! clock synchronization on. Federates reach the RTI at its host's address,
//! and the link through `/run/hprm/<program>/link/link.sock`. Every host
//! needs the same `auth.key` ([`SystemdOptions::auth_key`]).
//!
//! A process bank (federates `rollout[0]`, `rollout[1]`, .., see
//! `hprm_node::manifest::bank`) gets one template unit of its own instead
//! of a drop-in per member, `hprm-<bank>@.service`, whose instance is the
//! member's index (`systemctl restart hprm-rollout@3` restarts member 3
//! alone); the program's target wants `hprm-rollout@0` .. `@N-1`.
//!
//! Invariant: everything program-specific is in a drop-in, a bank's
//! template or under `/etc/hprm/<program>/`; the shared templates are the
//! same for every program, so deploying a second program never changes the
//! first (a bank's template is named for its bank: two programs deployed on
//! one host must not both have a bank of one name).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use hprm_node::manifest::bank::split_member;
use hprm_node::manifest::{Manifest, RestartPolicy};

/// The templates, as in `deploy/`; their daemons live in [`TEMPLATE_BIN_DIR`].
pub const TEMPLATES: [(&str, &str); 6] = [
    ("hprm-store.service", include_str!("../../deploy/hprm-store.service")),
    ("hprm-rti@.service", include_str!("../../deploy/hprm-rti@.service")),
    ("hprm-federate@.service", include_str!("../../deploy/hprm-federate@.service")),
    ("hprm-link@.service", include_str!("../../deploy/hprm-link@.service")),
    ("hprm-record@.service", include_str!("../../deploy/hprm-record@.service")),
    ("hprm@.target", include_str!("../../deploy/hprm@.target")),
];

/// Where the templates expect `hprm-store` and `hprm-rti` (what
/// `deploy/install.sh` installs to by default).
pub const TEMPLATE_BIN_DIR: &str = "/usr/local/bin";

/// Where systemd reads units and drop-ins of the administrator.
const UNIT_DIR: &str = "etc/systemd/system";

/// The store's socket, as `hprm-store.service` gives it.
const STORE_SOCKET: &str = "/run/hprm/store.sock";

/// The name of every drop-in this module writes.
const DROP_IN: &str = "hprm-deploy.conf";

/// Deployment settings beyond the manifest.
#[derive(Debug, Clone)]
pub struct SystemdOptions {
    /// Where `hprm-store` and `hprm-rti` are installed on the target host.
    pub bin_dir: PathBuf,
    /// The RTI's TCP port: one per program on a host.
    pub rti_port: u16,
    /// The address the RTI listens on (`0.0.0.0` for federates on other hosts).
    pub rti_bind: String,
    /// Whether the RTI admits only federates that hold the program's key
    /// (HMAC-SHA256; on by default).
    pub auth: bool,
    /// The key itself; `None`: a fresh one. Every host of a program that
    /// spans several needs the same.
    pub auth_key: Option<String>,
    /// In a program with hosts: the host whose units to write (its
    /// federates, its link, the RTI if it runs there).
    pub host: Option<String>,
}

impl Default for SystemdOptions {
    fn default() -> SystemdOptions {
        SystemdOptions {
            bin_dir: PathBuf::from(TEMPLATE_BIN_DIR),
            rti_port: 15045,
            rti_bind: "127.0.0.1".into(),
            auth: true,
            auth_key: None,
            host: None,
        }
    }
}

/// The name of the key file under `/etc/hprm/<program>/`, and of the
/// credential systemd makes of it.
const AUTH_KEY: &str = "auth.key";

/// Why a program cannot be deployed, one sentence each.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error("program {0:?} has no federates; there is nothing to deploy")]
    NoFederates(String),
    #[error(
        "{what} {name:?} cannot name a directory under /etc/hprm; rename it (no '/', not empty, not starting with '.')"
    )]
    BadName { what: &'static str, name: String },
    #[error("the command of federate {federate} is empty; give it a command (or a module) in the program")]
    EmptyCommand { federate: String },
    #[error("the command of federate {federate} runs {program:?}, which is not on PATH; give its absolute path")]
    NotFound { federate: String, program: String },
    #[error("the command of federate {federate} has an argument, environment variable or directory that is not UTF-8 or holds a newline ({what:?}); unit files cannot carry it")]
    Unrepresentable { federate: String, what: String },
    #[error("--bin-dir {0:?} is not an absolute path; give the directory where hprm-store and hprm-rti are installed on the target host")]
    RelativeBinDir(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    /// A `[record]` table a unit cannot carry out.
    #[error("{0}")]
    Record(String),
    /// A host that is not the program's, a program with hosts deployed
    /// without one, a bad HPRM_* setting of hosts.
    #[error("{0}")]
    Hosts(String),
}

/// One file of a deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployFile {
    /// Relative to the deployment's root (`etc/...`), i.e. to `/` on the host.
    pub path: PathBuf,
    pub contents: String,
    /// A secret: written readable by its owner only (mode 0600).
    pub secret: bool,
}

/// The files for one program, and what to do with them.
#[derive(Debug, Clone)]
pub struct Deployment {
    pub program: String,
    pub files: Vec<DeployFile>,
    /// The unit that starts the whole program (`hprm@<program>.target`).
    pub target: String,
    /// The RTI's unit, on the host that runs it (every host of a program
    /// without hosts).
    pub rti_unit: Option<String>,
    /// In a program with hosts: the host deployed, and its link's unit.
    pub host: Option<(String, String)>,
    /// The recorder's unit, for a program with a `[record]` table.
    pub record_unit: Option<String>,
    /// `(federate, unit)` for each federate (of this host).
    pub federate_units: Vec<(String, String)>,
    /// Things the operator should know (paths under /home or /tmp, ...).
    pub notes: Vec<String>,
    /// `store_memory` of the manifest, if it asks for one.
    pub store_memory: Option<String>,
}

impl Deployment {
    /// Writes every file under `dir` (created as needed).
    pub fn write(&self, dir: &Path) -> Result<(), DeployError> {
        for f in &self.files {
            let path = dir.join(&f.path);
            let err = |source| DeployError::Write { path: path.clone(), source };
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(err)?;
            }
            if f.secret {
                use std::io::Write;
                use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
                // Made 0600 before the key is in it; an older file of
                // another mode is narrowed first.
                if path.exists() {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
                }
                let mut out = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(err)?;
                out.write_all(f.contents.as_bytes()).map_err(err)?;
                continue;
            }
            std::fs::write(&path, &f.contents).map_err(err)?;
        }
        Ok(())
    }

    /// What was written and how to install and start it, for a terminal.
    pub fn summary(&self, dir: &Path) -> String {
        let mut s = String::new();
        let n = self.federate_units.len();
        let on = self.host.as_ref().map_or(String::new(), |(h, _)| format!(", host {h}'s share"));
        let _ = writeln!(
            s,
            "Deployment of program {}{on} ({n} federate{}) written to {}:",
            self.program,
            if n == 1 { "" } else { "s" },
            dir.display()
        );
        for f in &self.files {
            let _ = writeln!(s, "  {}", f.path.display());
        }
        let which = self.host.as_ref().map_or("the target host".to_string(), |(h, _)| format!("host {h}"));
        let _ = writeln!(s, "\nOn {which} (as root):");
        let _ = writeln!(s, "  1. install the daemons, templates and /etc/hprm/store.conf: deploy/install.sh");
        let _ = writeln!(s, "  2. cp -r {}/etc/. /etc/", dir.display());
        let _ = writeln!(s, "  3. systemctl daemon-reload");
        let _ = writeln!(s, "  4. systemctl enable --now '{}'", self.target);
        let _ = writeln!(s, "\nUnits: '{}' starts:", self.target);
        if let Some(rti) = &self.rti_unit {
            let _ = writeln!(s, "  {:<16} '{rti}'", "the RTI");
        }
        if let Some((_, link)) = &self.host {
            let _ = writeln!(s, "  {:<16} '{link}' (install hprm-link: it is built apart)", "the link");
        }
        if let Some(record) = &self.record_unit {
            let _ = writeln!(s, "  {:<16} '{record}'", "the recorder");
        }
        for (f, u) in &self.federate_units {
            let _ = writeln!(s, "  {f:<16} '{u}'");
        }
        let daemons: Vec<&str> = self
            .rti_unit
            .iter()
            .chain(self.host.as_ref().map(|(_, l)| l))
            .chain(&self.record_unit)
            .map(String::as_str)
            .collect();
        let logs: String = daemons.iter().map(|u| format!(" -u '{u}'")).collect();
        let _ = writeln!(s, "Check: systemctl status '{}'; logs: journalctl{logs} -u 'hprm-federate@*'", self.target);
        let _ = writeln!(
            s,
            "Stop: systemctl stop '{}'; restart the whole program: systemctl restart '{}'",
            self.target, self.target
        );
        if let Some(key) = self.files.iter().find(|f| f.secret) {
            let _ = writeln!(s, "The RTI admits only federates holding the key /{} (mode 0600: `cp -r` keeps it; federates on other hosts need the same file, copied as securely).", key.path.display());
        }
        if let Some(tls) = self
            .files
            .iter()
            .find(|f| f.path.ends_with("link.conf"))
            .filter(|f| f.contents.contains("HPRM_LINK_TLS_DIR"))
        {
            let _ = writeln!(s, "The links speak TLS: put the CA certificate, this host's certificate and its key where /{} says (see the Several hosts page).", tls.path.display());
        }
        if let Some(m) = &self.store_memory {
            let _ = writeln!(s, "The program asks for a {m} store: HPRM_STORE_MEMORY in /etc/hprm/store.conf must be at least that (the store is shared by every program on the host).");
        }
        for note in &self.notes {
            let _ = writeln!(s, "Note: {note}");
        }
        s
    }
}

/// The files that deploy `manifest` under systemd; `command` gives the
/// command that runs each federate (as a launcher would, without the
/// `HPRM_*` variables, which the units set).
pub fn systemd(
    manifest: &Manifest,
    command: &dyn Fn(&str) -> Command,
    opts: &SystemdOptions,
) -> Result<Deployment, DeployError> {
    // What runs is the plain form: a bank's members are federates.
    let manifest = &manifest.expanded();
    let program = manifest.name.as_str();
    check_name("program name", program)?;
    if manifest.federates.is_empty() {
        return Err(DeployError::NoFederates(program.into()));
    }
    if !opts.bin_dir.is_absolute() {
        return Err(DeployError::RelativeBinDir(opts.bin_dir.clone()));
    }
    let hosts = || manifest.hosts.iter().map(|h| h.name.as_str()).collect::<Vec<_>>().join(", ");
    let share = match (&opts.host, manifest.hosts.is_empty()) {
        (None, false) => {
            return Err(DeployError::Hosts(format!(
                "program {program} runs on several hosts ({}): deploy each host's units with --host NAME",
                hosts()
            )))
        }
        (Some(h), true) => {
            return Err(DeployError::Hosts(format!(
                "--host {h}: program {program} names no hosts ([[host]] tables); deploy it without --host"
            )))
        }
        (host, _) => hprm_node::launch::HostShare::of(manifest, host.as_deref())
            .map_err(|e| DeployError::Hosts(e.to_string()))?,
    };
    let p = unit_escape(program);
    let target = format!("hprm@{p}.target");
    let rti_unit = format!("hprm-rti@{p}.service");
    let link_unit = format!("hprm-link@{p}.service");
    let record_unit = format!("hprm-record@{p}.service");
    // Between hosts: the bound on noticing a lost host, clock sync.
    let between = match &share {
        Some(_) => Some((
            hprm_node::hosts::host_timeout().map_err(DeployError::Hosts)?,
            hprm_node::hosts::clock_sync().map_err(DeployError::Hosts)?,
        )),
        None => None,
    };
    let rti_here = share.as_ref().map_or(true, |s| s.rti_here);
    // This host's federates.
    let federates: Vec<_> = manifest
        .federates
        .iter()
        .filter(|f| share.as_ref().map_or(true, |s| f.host.as_deref() == Some(s.me.name.as_str())))
        .collect();
    let conf_dir = Path::new("/etc/hprm").join(program);
    let mut files = Vec::new();
    let mut notes = Vec::new();
    let file = |path: PathBuf, contents: String| DeployFile { path, contents, secret: false };
    let header = format!("# Written by `hprm deploy --systemd` for program {program}.\n");

    let bin_dir = opts.bin_dir.to_string_lossy();
    for (name, text) in TEMPLATES {
        files.push(file(
            Path::new(UNIT_DIR).join(name),
            text.replace(&format!("{TEMPLATE_BIN_DIR}/"), &format!("{}/", bin_dir.trim_end_matches('/'))),
        ));
    }

    let manifest_path = conf_dir.join("manifest.json");
    files.push(file(strip_root(&manifest_path), manifest.to_json() + "\n"));
    let defaults = SystemdOptions::default();
    if share.is_some() && (opts.rti_port != defaults.rti_port || opts.rti_bind != defaults.rti_bind) {
        notes.push(format!("program {program} spans hosts: its RTI listens on its host's address and the manifest's rti_port; --rti-port and --rti-bind are ignored"));
    }
    // The RTI's port and address: the manifest's on the RTI's host.
    let (rti_port, rti_bind) = match &share {
        Some(s) => (manifest.rti_port.unwrap_or(hprm_node::manifest::DEFAULT_RTI_PORT), s.me.address.clone()),
        None => (opts.rti_port, opts.rti_bind.clone()),
    };
    if rti_here {
        let mut rti = header.clone();
        rti.push_str(&env_line("HPRM_FEDERATION", program));
        rti.push_str(&env_line("HPRM_FEDERATES", &manifest.federates.len().to_string()));
        rti.push_str(&env_line("HPRM_RTI_PORT", &rti_port.to_string()));
        rti.push_str(&env_line("HPRM_RTI_BIND", &rti_bind));
        // As the launcher runs it: on one host, federates share its clock;
        // between hosts, the RTI measures and corrects each one's offset.
        let mut rti_args = match between {
            Some((timeout, clock_sync)) => format!(
                "--clock-sync {} --clock-sync-port 0 --host-timeout-ms {}",
                if clock_sync { "on" } else { "off" },
                timeout.as_millis().max(1)
            ),
            None => "--clock-sync off".to_string(),
        };
        // systemd restarts these federates (Restart=on-failure): the RTI takes them back.
        if let Some(restartable) = manifest.restartable() {
            rti_args.push_str(&format!(" --restartable {restartable}"));
        }
        rti.push_str(&env_line("HPRM_RTI_ARGS", &rti_args));
        files.push(file(strip_root(&conf_dir.join("rti.conf")), rti));
    }
    // The program's runtime directory, /run/hprm/<program>.
    let run_dir = conf_dir.strip_prefix("/etc").map_or(PathBuf::new(), |p| Path::new("/run").join(p));
    let link_socket = run_dir.join("link/link.sock");
    if let (Some(s), Some((timeout, _))) = (&share, between) {
        let mut args = s.link_args(timeout);
        args.extend(hprm_node::hosts::link_env_args().map_err(DeployError::Hosts)?);
        let mut link = header.clone();
        // Split at whitespace by systemd ($HPRM_LINK_ARGS): host names and
        // endpoints hold none (`hprm check`).
        link.push_str(&env_line("HPRM_LINK_ARGS", &args.join(" ")));
        let mut drop_in = String::new();
        if s.me.link_endpoint().starts_with("tls/") {
            // The identity stays root's; systemd hands it to the link as
            // credentials, readable by its user only while it runs.
            let tls_dir = conf_dir.join("tls");
            link.push_str(&format!(
                "# The links speak TLS: {0}/ca.pem (the CA), {0}/{1}.pem and {0}/{1}.key (this host's).\n",
                tls_dir.display(),
                s.me.name
            ));
            link.push_str(&env_line("HPRM_LINK_TLS_DIR", &tls_dir.to_string_lossy()));
            let _ = writeln!(drop_in, "LoadCredential=link-ca.pem:{}/ca.pem", tls_dir.display());
            let _ = writeln!(drop_in, "LoadCredential=link.pem:{}/{}.pem", tls_dir.display(), s.me.name);
            let _ = writeln!(drop_in, "LoadCredential=link.key:{}/{}.key", tls_dir.display(), s.me.name);
            let _ = writeln!(
                drop_in,
                "Environment=\"HPRM_LINK_TLS=--tls-ca=%d/link-ca.pem --tls-cert=%d/link.pem --tls-key=%d/link.key\""
            );
        }
        files.push(file(strip_root(&conf_dir.join("link.conf")), link));
        if !drop_in.is_empty() {
            let text = format!("{header}[Service]\n{drop_in}");
            files.push(file(Path::new(UNIT_DIR).join(format!("{link_unit}.d")).join(DROP_IN), text));
        }
    }
    // What the RTI's and each federate's unit add to take the key.
    let mut credential = String::new();
    if opts.auth {
        let key_path = conf_dir.join(AUTH_KEY);
        let key = opts.auth_key.clone().unwrap_or_else(hprm_rti::auth::generate_key);
        files.push(DeployFile { path: strip_root(&key_path), contents: key, secret: true });
        credential = format!("LoadCredential={AUTH_KEY}:{}\n", key_path.display());
    }
    let mut rti_service = credential.clone();
    if opts.auth {
        let _ = writeln!(rti_service, "Environment=HPRM_RTI_AUTH=--auth-key-file=%d/{AUTH_KEY}");
    }

    let rti_addr = match &share {
        Some(s) => s.rti_addr.clone(),
        None => {
            let host = match opts.rti_bind.as_str() {
                "0.0.0.0" | "::" | "[::]" => "127.0.0.1",
                other => other,
            };
            format!("{host}:{}", opts.rti_port)
        }
    };
    // What each federate's unit waits for: the RTI where it runs here, the link between hosts.
    let mut needs = Vec::new();
    if rti_here {
        needs.push(rti_unit.as_str());
    }
    if share.is_some() {
        needs.push(link_unit.as_str());
    }
    // The recorder's socket, and the policy of the federates' feeds.
    let record_socket = run_dir.join("record/record.sock");
    let record_feed = match &manifest.record {
        Some(r) => {
            let path = Path::new(&r.path);
            let dir = path.parent().filter(|d| path.is_absolute() && !d.as_os_str().is_empty()).ok_or_else(|| {
                DeployError::Record(format!(
                    "[record] path {:?} is not absolute; hprm deploy makes it absolute, give it the manifest's own",
                    r.path
                ))
            })?;
            let dir = dir.to_str().filter(|d| !d.contains(['\n', ' ', '"', '%', '$'])).ok_or_else(|| {
                DeployError::Record(format!(
                    "[record] path {:?}: a unit cannot name its directory; use a plain path",
                    r.path
                ))
            })?;
            let mut drop_in = format!("{header}[Service]\n");
            match Path::new(dir).strip_prefix("/var/lib") {
                Ok(state) if !state.as_os_str().is_empty() => {
                    let _ = writeln!(
                        drop_in,
                        "# systemd makes the recording's directory, the recorder's.\nStateDirectory={}",
                        state.display()
                    );
                }
                _ => {
                    let _ = writeln!(drop_in, "ReadWritePaths={dir}");
                    if Path::new(dir).starts_with("/home") || Path::new(dir).starts_with("/root") {
                        drop_in.push_str("# The recording goes into a home directory, which the template hides.\nProtectHome=read-only\n");
                    }
                    if Path::new(dir).starts_with("/tmp") || Path::new(dir).starts_with("/var/tmp") {
                        drop_in.push_str(
                            "# The recording goes into /tmp, which the template makes private.\nPrivateTmp=no\n",
                        );
                    }
                    notes.push(format!("the recorder writes into {dir}: it must exist and be writable by user hprm (a directory under /var/lib is made by systemd)"));
                }
            }
            if let Some(s) = &share {
                let _ = writeln!(drop_in, "Environment=\"HPRM_RECORDER_ARGS=--host {}\"", s.me.name);
            }
            files.push(file(Path::new(UNIT_DIR).join(format!("{record_unit}.d")).join(DROP_IN), drop_in));
            needs.push(record_unit.as_str());
            Some(r.policy.clone().unwrap_or_else(|| hprm_node::manifest::record::DEFAULT_POLICY.into()))
        }
        None => None,
    };
    let mut federate_units = Vec::new();
    let mut bank_templates: Vec<String> = Vec::new();
    for f in federates {
        check_name("federate name", &f.name)?;
        let member = split_member(&f.name);
        let unit = match member {
            Some((bank, i)) => format!("hprm-{}@{i}.service", unit_escape(bank)),
            None => format!("hprm-federate@{p}-{}.service", unit_escape(&f.name)),
        };
        let cmd = command(&f.name);
        let unrepresentable = |what: &std::ffi::OsStr| DeployError::Unrepresentable {
            federate: f.name.clone(),
            what: what.to_string_lossy().into_owned(),
        };
        let text = |s: &std::ffi::OsStr| {
            s.to_str().filter(|t| !t.contains('\n')).map(str::to_owned).ok_or_else(|| unrepresentable(s))
        };

        let mut env = header.clone();
        env.push_str(&env_line("HPRM_FEDERATE", &f.name));
        env.push_str(&env_line("HPRM_FEDERATION", program));
        env.push_str(&env_line("HPRM_RTI", &rti_addr));
        env.push_str(&env_line("HPRM_MANIFEST", &manifest_path.to_string_lossy()));
        if let (Some(s), Some((timeout, clock_sync))) = (&share, between) {
            // As `hprm launch --host` sets them.
            env.push_str(&env_line("HPRM_HOST", &s.me.name));
            env.push_str(&env_line("HPRM_FEDERATE_HOSTS", &s.federate_hosts));
            env.push_str(&env_line("HPRM_LINK", &link_socket.to_string_lossy()));
            env.push_str(&env_line(hprm_node::hosts::HOST_TIMEOUT_ENV, &format!("{}ms", timeout.as_millis().max(1))));
            if clock_sync {
                env.push_str(&env_line(hprm_node::hosts::CLOCK_SYNC_ENV, "1"));
            }
        }
        if let Some(policy) = &record_feed {
            env.push_str(&env_line(hprm_node::record::RECORD_ENV, &record_socket.to_string_lossy()));
            env.push_str(&env_line(hprm_node::record::POLICY_ENV, policy));
        }
        let mut paths: Vec<String> = Vec::new();
        for (k, v) in cmd.get_envs() {
            let Some(v) = v else { continue };
            env.push_str(&env_line(&text(k)?, &text(v)?));
        }
        files.push(file(strip_root(&conf_dir.join(format!("{}.env", f.name))), env));

        let exe = resolve(cmd.get_program()).ok_or_else(|| DeployError::NotFound {
            federate: f.name.clone(),
            program: cmd.get_program().to_string_lossy().into_owned(),
        })?;
        let mut argv = vec![text(exe.as_os_str())?];
        for a in cmd.get_args() {
            argv.push(text(a)?);
        }
        if argv[0].is_empty() {
            return Err(DeployError::EmptyCommand { federate: f.name.clone() });
        }
        // What the unit must reach: the command, the paths among its
        // arguments (a Python program's script), and where each leads (a
        // venv's python is a link to the interpreter it was made from,
        // pyenv's under /root or /home; systemd follows it inside the
        // sandbox).
        for a in argv.iter().filter(|a| Path::new(a.as_str()).is_absolute()) {
            paths.push(a.clone());
            if let Ok(real) = std::fs::canonicalize(a) {
                paths.push(text(real.as_os_str())?);
            }
        }
        let mut drop_in =
            format!("# Written by `hprm deploy --systemd`: federate {} of program {program}.\n[Unit]\n", f.name);
        let _ = writeln!(drop_in, "Description=HPRM federate {} of program {program}", f.name);
        for u in &needs {
            let _ = writeln!(drop_in, "Requires={u}\nAfter={u}");
        }
        let _ = writeln!(drop_in, "PartOf={target}");
        let restart = match f.restart {
            RestartPolicy::Stop => "no",
            RestartPolicy::OnFailure => {
                if let Some(n) = f.max_restarts {
                    // Starts allowed in the interval: the first and n restarts.
                    let _ = writeln!(drop_in, "StartLimitIntervalSec=10min\nStartLimitBurst={}", n.saturating_add(1));
                }
                "on-failure"
            }
        };
        let _ = writeln!(
            drop_in,
            "\n[Service]\nExecStart=\nExecStart={}",
            argv.iter().map(|a| exec_quote(a)).collect::<Vec<_>>().join(" ")
        );
        if let Some(dir) = cmd.get_current_dir() {
            let dir = text(dir.as_os_str())?;
            let _ = writeln!(drop_in, "WorkingDirectory={}", exec_quote(&dir));
            paths.push(dir);
        }
        let _ = writeln!(drop_in, "Restart={restart}");
        if opts.auth {
            let _ = writeln!(drop_in, "{credential}Environment=HPRM_AUTH_KEY_FILE=%d/{AUTH_KEY}");
        }
        if let Some(priority) = f.priority {
            // systemd sets these before it drops the unit's rights; the
            // federate, finding them in force, leaves them as they are.
            let policy = f.policy.unwrap_or_default().name();
            let _ = writeln!(drop_in, "CPUSchedulingPolicy={policy}\nCPUSchedulingPriority={priority}");
        } else {
            // Without a priority in the manifest nothing asks for one.
            let _ = writeln!(drop_in, "RestrictRealtime=yes");
        }
        if let Some(cpus) = &f.cpus {
            let _ = writeln!(drop_in, "CPUAffinity={cpus}");
        }
        if f.socket_priority.is_some_and(|p| p > 6) {
            // The one right the unit then keeps: SO_PRIORITY above 6
            // needs it (hprm_realtime's marks).
            let _ = writeln!(drop_in, "CapabilityBoundingSet=CAP_NET_ADMIN\nAmbientCapabilities=CAP_NET_ADMIN");
        }
        let under = |roots: &[&str]| paths.iter().find(|p| roots.iter().any(|r| Path::new(p).starts_with(r))).cloned();
        if let Some(home) = under(&["/home", "/root", "/run/user"]) {
            drop_in.push_str(
                "# The command lives in a home directory, which the template hides.\nProtectHome=read-only\n",
            );
            notes.push(format!("federate {} runs from {home}; the unit runs as user hprm, which must be able to read it (better: install the program under /opt or /usr/local)", f.name));
        }
        if let Some(tmp) = under(&["/tmp", "/var/tmp"]) {
            drop_in.push_str("# The command lives in /tmp, which the template makes private.\nPrivateTmp=no\n");
            notes.push(format!("federate {} runs from {tmp}, which does not survive a reboot; install the program under /opt or /usr/local", f.name));
        }
        if let Some((bank, _)) = member {
            // Every member runs the same command: its env file names it.
            if !bank_templates.iter().any(|b| b == bank) {
                bank_templates.push(bank.to_string());
                let template = bank_template(program, bank, &drop_in, &opts.bin_dir.to_string_lossy());
                files.push(file(Path::new(UNIT_DIR).join(format!("hprm-{}@.service", unit_escape(bank))), template));
            }
            federate_units.push((f.name.clone(), unit));
            continue;
        }
        files.push(file(Path::new(UNIT_DIR).join(format!("{unit}.d")).join(DROP_IN), drop_in));
        federate_units.push((f.name.clone(), unit));
    }

    // What `hprm ps` and the link read of the program on this host: a
    // launch without a launcher, its units' directories under run_dir.
    let launch = hprm_node::status::LaunchInfo {
        program: program.into(),
        pid: 0,
        started_ns: 0,
        runtime_dir: run_dir.clone(),
        federates: federate_units
            .iter()
            .map(|(name, _)| hprm_node::status::FederateProcess { name: name.clone(), pid: 0, restarts: 0 })
            .collect(),
        store: Some(hprm_node::status::StoreProcess { pid: 0, socket: Path::new(STORE_SOCKET).to_path_buf() }),
        rti: rti_here.then(|| hprm_node::status::RtiProcess { pid: 0, addr: format!("{rti_bind}:{rti_port}") }),
        hosts: share.as_ref().map(|s| hprm_node::status::ProgramHosts {
            host: s.me.name.clone(),
            federates: manifest.federates.iter().filter_map(|f| Some((f.name.clone(), f.host.clone()?))).collect(),
        }),
        deployed: true,
    };
    // Plain data with string keys: serializing cannot fail.
    let launch = serde_json::to_string_pretty(&launch).unwrap_or_default() + "\n";
    files.push(file(strip_root(&conf_dir.join(hprm_node::status::LAUNCH_FILE)), launch));

    let mut wants = format!("{header}[Unit]\n");
    for u in needs.iter().copied().chain(federate_units.iter().map(|(_, u)| u.as_str())) {
        let _ = writeln!(wants, "Wants={u}");
    }
    files.push(file(Path::new(UNIT_DIR).join(format!("{target}.d")).join(DROP_IN), wants));
    if manifest.federates.iter().all(|f| f.restart == RestartPolicy::Stop) {
        // A new RTI would wait for federates that systemd does not restart.
        rti_service.push_str("# No federate restarts on failure, so neither does the RTI.\nRestart=no\n");
    }
    if !rti_service.is_empty() && rti_here {
        let text = format!("{header}[Service]\n{rti_service}");
        files.push(file(Path::new(UNIT_DIR).join(format!("{rti_unit}.d")).join(DROP_IN), text));
    }
    Ok(Deployment {
        program: program.into(),
        files,
        target,
        rti_unit: rti_here.then_some(rti_unit),
        host: share.map(|s| (s.me.name, link_unit)),
        record_unit: record_feed.map(|_| record_unit),
        federate_units,
        notes,
        store_memory: manifest.store_memory.clone(),
    })
}

/// The template unit of process bank `bank`: the federate template, with
/// the member's index as its instance and the settings `drop_in` (the first
/// member's, the same for all but the name) folded in.
fn bank_template(program: &str, bank: &str, drop_in: &str, bin_dir: &str) -> String {
    let federate = TEMPLATES.iter().find(|(n, _)| *n == "hprm-federate@.service").map_or("", |(_, t)| *t);
    let federate = federate.replace(&format!("{TEMPLATE_BIN_DIR}/"), &format!("{}/", bin_dir.trim_end_matches('/')));
    let member = format!("{program}/{bank}[%i]");
    let mut unit = format!(
        "# Written by `hprm deploy --systemd`: the members of process bank {bank} of program {program};
# the instance is the member's index (hprm-{bank}@3 is {bank}[3]).
"
    );
    let (unit_part, service_part) = drop_in.split_once("[Service]").unwrap_or((drop_in, ""));
    for line in federate.lines() {
        let line = match line {
            l if l.starts_with("Description=") => {
                format!("Description=HPRM member %i of bank {bank} of program {program}")
            }
            l if l.starts_with("EnvironmentFile=") => format!("EnvironmentFile=/etc/hprm/{member}.env"),
            l if l.starts_with("RuntimeDirectory=") => format!("RuntimeDirectory=hprm/{program}/{bank}-%i"),
            l if l.starts_with("ExecStart=") || l.starts_with('#') => continue,
            l => l.replace("/run/hprm/%I", &format!("/run/hprm/{program}/{bank}-%i")),
        };
        unit.push_str(&line);
        unit.push('\n');
        if line == "[Unit]" {
            for l in unit_part
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("Description=") && *l != "[Unit]")
            {
                unit.push_str(l);
                unit.push('\n');
            }
        }
        if line == "[Service]" {
            for l in service_part.lines().filter(|l| !l.is_empty() && *l != "ExecStart=") {
                unit.push_str(l);
                unit.push('\n');
            }
        }
    }
    unit
}

fn check_name(what: &'static str, name: &str) -> Result<(), DeployError> {
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\n', '\0']) {
        return Err(DeployError::BadName { what, name: name.into() });
    }
    Ok(())
}

/// `/etc/x` -> `etc/x`.
fn strip_root(p: &Path) -> PathBuf {
    p.strip_prefix("/").unwrap_or(p).to_path_buf()
}

/// A string as one part of a unit instance name, as `systemd-escape`
/// writes it: ASCII letters, digits, `:`, `_` and `.` (not first) stay;
/// every other byte becomes `\xNN`. `%I` turns it back.
pub fn unit_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, b) in s.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || b == b':' || b == b'_' || (b == b'.' && i > 0) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// A `KEY="value"` line of an EnvironmentFile.
fn env_line(key: &str, value: &str) -> String {
    format!("{key}=\"{}\"\n", value.replace('\\', "\\\\").replace('"', "\\\"").replace('$', "\\$").replace('`', "\\`"))
}

/// One word of an `ExecStart=` line: bare when plain, else double-quoted;
/// `%` and `$` doubled so systemd neither expands specifiers nor variables.
fn exec_quote(word: &str) -> String {
    let escaped = word.replace('%', "%%").replace('$', "$$");
    let plain = !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@%$".contains(&b));
    if plain {
        escaped
    } else {
        format!("\"{}\"", escaped.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// The program as an absolute path: as given when it has a directory
/// part (made absolute), else found on PATH.
fn resolve(program: &std::ffi::OsStr) -> Option<PathBuf> {
    let p = Path::new(program);
    if p.components().count() > 1 {
        return std::path::absolute(p).ok();
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(&path).map(|d| d.join(p)).find(|c| c.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_node::manifest::FederateSpec;

    fn fed(name: &str, restart: RestartPolicy, max_restarts: Option<u32>) -> FederateSpec {
        FederateSpec { name: name.into(), restart, max_restarts, ..Default::default() }
    }

    fn manifest() -> Manifest {
        Manifest {
            name: "my-robot".into(),
            coordination: Default::default(),
            stp: None,
            threshold: None,
            timeout: None,
            store_memory: Some("1G".into()),
            hosts: Vec::new(),
            rti_host: None,
            rti_port: None,
            federates: vec![
                fed("camera", RestartPolicy::OnFailure, Some(3)),
                fed("plan ner", RestartPolicy::Stop, None),
            ],
            connections: Vec::new(),
            record: None,
        }
    }

    #[test]
    fn a_process_bank_gets_one_template_unit_instanced_by_member() {
        let mut m = manifest();
        m.federates = (0..3).map(|i| fed(&format!("rollout[{i}]"), RestartPolicy::OnFailure, None)).collect();
        m.federates.push(fed("learner", RestartPolicy::Stop, None));
        let d = systemd(&m, &command, &SystemdOptions::default()).unwrap();
        let units: Vec<&str> = d.federate_units.iter().map(|(_, u)| u.as_str()).collect();
        assert_eq!(
            units,
            [
                "hprm-rollout@0.service",
                "hprm-rollout@1.service",
                "hprm-rollout@2.service",
                "hprm-federate@my\\x2drobot-learner.service"
            ]
        );
        let find = |path: &str| d.files.iter().find(|f| f.path == Path::new(path)).map(|f| f.contents.clone());
        let template = find("etc/systemd/system/hprm-rollout@.service").expect("the bank's template");
        assert!(template.contains("EnvironmentFile=/etc/hprm/my-robot/rollout[%i].env"), "{template}");
        assert!(
            template.contains("Restart=on-failure") && template.contains("Requires=hprm-rti@my\\x2drobot.service"),
            "{template}"
        );
        assert!(
            template.contains("ExecStart=/opt/robot/bin/robot --mode \"50%% $$HOME \\\"quoted\\\"\""),
            "{template}"
        );
        assert!(find("etc/hprm/my-robot/rollout[2].env").is_some_and(|e| e.contains("HPRM_FEDERATE=\"rollout[2]\"")));
        let wants = find("etc/systemd/system/hprm@my\\x2drobot.target.d/hprm-deploy.conf").unwrap();
        assert!(wants.contains("Wants=hprm-rollout@2.service"), "{wants}");
        // No per-member drop-ins: the template is the members' unit.
        assert!(!d.files.iter().any(|f| f.path.to_string_lossy().contains("hprm-rollout@0.service.d")));
    }

    #[test]
    fn a_federate_with_a_priority_and_cpus_gets_them_from_systemd() {
        let mut m = manifest();
        let mut control = fed("control", RestartPolicy::Stop, None);
        control.priority = Some(80);
        control.policy = Some(hprm_node::realtime::Policy::Rr);
        control.cpus = Some("2-3".into());
        m.federates = vec![control, fed("planner", RestartPolicy::Stop, None)];
        let d = systemd(&m, &command, &SystemdOptions::default()).unwrap();
        let unit = |f: &str| {
            let path = format!("etc/systemd/system/hprm-federate@my\\x2drobot-{f}.service.d/hprm-deploy.conf");
            d.files.iter().find(|x| x.path == Path::new(&path)).map(|x| x.contents.clone()).expect(&path)
        };
        let control = unit("control");
        assert!(control.contains("CPUSchedulingPolicy=rr\nCPUSchedulingPriority=80\nCPUAffinity=2-3\n"), "{control}");
        assert!(!unit("planner").contains("CPUScheduling"));
        // Only the federate given a priority may take one.
        assert!(!control.contains("RestrictRealtime"), "{control}");
        assert!(unit("planner").contains("RestrictRealtime=yes\n"));
    }

    #[test]
    fn only_a_socket_priority_above_6_keeps_cap_net_admin() {
        let mut m = manifest();
        let mut control = fed("control", RestartPolicy::Stop, None);
        control.socket_priority = Some(7);
        let mut planner = fed("planner", RestartPolicy::Stop, None);
        planner.socket_priority = Some(6);
        planner.dscp = Some(hprm_node::realtime::Dscp(46));
        m.federates = vec![control, planner];
        let d = systemd(&m, &command, &SystemdOptions::default()).unwrap();
        let unit = |f: &str| {
            let path = format!("etc/systemd/system/hprm-federate@my\\x2drobot-{f}.service.d/hprm-deploy.conf");
            d.files.iter().find(|x| x.path == Path::new(&path)).map(|x| x.contents.clone()).expect(&path)
        };
        assert!(unit("control").contains("CapabilityBoundingSet=CAP_NET_ADMIN\nAmbientCapabilities=CAP_NET_ADMIN\n"));
        assert!(!unit("planner").contains("CAP_NET_ADMIN"));
    }

    fn command(name: &str) -> Command {
        let mut c = Command::new("/opt/robot/bin/robot");
        c.args(["--mode", "50% $HOME \"quoted\""])
            .env("PYTHONPATH", "/opt/robot/lib")
            .env_remove("GONE")
            .current_dir("/opt/robot");
        if name == "camera" {
            c.arg("--camera");
        }
        c
    }

    fn get<'a>(d: &'a Deployment, path: &str) -> &'a str {
        &d.files
            .iter()
            .find(|f| f.path == Path::new(path))
            .unwrap_or_else(|| panic!("no {path} in {:#?}", d.files.iter().map(|f| &f.path).collect::<Vec<_>>()))
            .contents
    }

    #[test]
    fn names_are_escaped_as_systemd_escape_does() {
        assert_eq!(unit_escape("my-robot"), "my\\x2drobot");
        assert_eq!(unit_escape("plan ner"), "plan\\x20ner");
        assert_eq!(unit_escape(".hidden.x"), "\\x2ehidden.x");
        assert_eq!(unit_escape("a_b:C9"), "a_b:C9");
    }

    #[test]
    fn writes_config_drop_ins_and_templates_for_a_program() {
        let opts = SystemdOptions { bin_dir: "/srv/hprm/bin/".into(), ..SystemdOptions::default() };
        let d = systemd(&manifest(), &command, &opts).unwrap();
        assert_eq!(d.target, "hprm@my\\x2drobot.target");
        assert_eq!(d.federate_units[1].1, "hprm-federate@my\\x2drobot-plan\\x20ner.service");

        let rti = get(&d, "etc/hprm/my-robot/rti.conf");
        assert!(
            rti.contains("HPRM_FEDERATES=\"2\"\n")
                && rti.contains("HPRM_FEDERATION=\"my-robot\"\n")
                && rti.contains("HPRM_RTI_PORT=\"15045\"\n"),
            "{rti}"
        );
        assert!(rti.contains("HPRM_RTI_ARGS=\"--clock-sync off --restartable 0\"\n"), "the camera restarts: {rti}");
        let env = get(&d, "etc/hprm/my-robot/plan ner.env");
        assert!(
            env.contains("HPRM_FEDERATE=\"plan ner\"\n") && env.contains("HPRM_RTI=\"127.0.0.1:15045\"\n"),
            "{env}"
        );
        assert!(
            env.contains("HPRM_MANIFEST=\"/etc/hprm/my-robot/manifest.json\"\n")
                && env.contains("PYTHONPATH=\"/opt/robot/lib\"\n")
                && !env.contains("GONE"),
            "{env}"
        );
        assert_eq!(Manifest::from_json(get(&d, "etc/hprm/my-robot/manifest.json")).unwrap(), manifest());

        let cam = get(&d, "etc/systemd/system/hprm-federate@my\\x2drobot-camera.service.d/hprm-deploy.conf");
        assert!(
            cam.contains(
                "\nExecStart=\nExecStart=/opt/robot/bin/robot --mode \"50%% $$HOME \\\"quoted\\\"\" --camera\n"
            ),
            "{cam}"
        );
        assert!(cam.contains("Requires=hprm-rti@my\\x2drobot.service\nAfter=hprm-rti@my\\x2drobot.service\nPartOf=hprm@my\\x2drobot.target\n"), "{cam}");
        assert!(
            cam.contains("Restart=on-failure\n")
                && cam.contains("StartLimitBurst=4\n")
                && cam.contains("WorkingDirectory=/opt/robot\n"),
            "{cam}"
        );
        let planner = get(&d, "etc/systemd/system/hprm-federate@my\\x2drobot-plan\\x20ner.service.d/hprm-deploy.conf");
        assert!(
            planner.contains("Restart=no\n") && !planner.contains("StartLimit") && !planner.contains("ProtectHome"),
            "{planner}"
        );

        let target = get(&d, "etc/systemd/system/hprm@my\\x2drobot.target.d/hprm-deploy.conf");
        assert!(target.contains("Wants=hprm-federate@my\\x2drobot-camera.service\nWants=hprm-federate@my\\x2drobot-plan\\x20ner.service\n"), "{target}");
        // One federate restarts, so the RTI keeps the template's policy; it
        // and every federate take the program's key.
        let rti = get(&d, "etc/systemd/system/hprm-rti@my\\x2drobot.service.d/hprm-deploy.conf");
        let credential = "LoadCredential=auth.key:/etc/hprm/my-robot/auth.key\n";
        assert!(rti.contains(credential) && !rti.contains("Restart="), "{rti}");
        assert!(rti.contains("Environment=HPRM_RTI_AUTH=--auth-key-file=%d/auth.key\n"), "{rti}");
        assert!(cam.contains(credential) && cam.contains("Environment=HPRM_AUTH_KEY_FILE=%d/auth.key\n"), "{cam}");
        let key = d.files.iter().find(|f| f.path == Path::new("etc/hprm/my-robot/auth.key")).expect("a key file");
        assert!(key.secret && key.contents.trim().len() == 64, "{key:?}");
        let again = systemd(&manifest(), &command, &opts).unwrap();
        assert_ne!(get(&again, "etc/hprm/my-robot/auth.key"), key.contents, "each deployment has its own key");
        let open = systemd(&manifest(), &command, &SystemdOptions { auth: false, ..opts.clone() }).unwrap();
        assert!(!open.files.iter().any(|f| f.path.ends_with("auth.key") || f.contents.contains("auth.key")));
        let store = get(&d, "etc/systemd/system/hprm-store.service");
        assert!(store.contains("ExecStart=/srv/hprm/bin/hprm-store ") && !store.contains(TEMPLATE_BIN_DIR), "{store}");
        assert!(d.summary(Path::new("out")).contains("systemctl enable --now 'hprm@my\\x2drobot.target'"));
        assert!(d.summary(Path::new("out")).contains("1G store"));
    }

    #[test]
    fn home_and_tmp_programs_get_the_access_they_need() {
        let mut m = manifest();
        m.federates.iter_mut().for_each(|f| f.restart = RestartPolicy::Stop);
        let home = |_: &str| Command::new("/home/ann/robot/run");
        let d = systemd(&m, &home, &SystemdOptions::default()).unwrap();
        assert!(get(&d, "etc/systemd/system/hprm-federate@my\\x2drobot-camera.service.d/hprm-deploy.conf")
            .contains("ProtectHome=read-only\n"));
        assert!(d.notes.iter().any(|n| n.contains("/home/ann/robot/run")), "{:?}", d.notes);
        assert!(get(&d, "etc/systemd/system/hprm-rti@my\\x2drobot.service.d/hprm-deploy.conf").contains("Restart=no\n"));
        let tmp = |_: &str| Command::new("/tmp/robot");
        let d = systemd(&m, &tmp, &SystemdOptions::default()).unwrap();
        assert!(get(&d, "etc/systemd/system/hprm-federate@my\\x2drobot-camera.service.d/hprm-deploy.conf")
            .contains("PrivateTmp=no\n"));

        // A link to a program in /tmp (as a venv's python links to the
        // interpreter it was made from): what systemd runs is the target.
        let target = tempfile::tempdir().unwrap();
        let real = target.path().join("robot");
        std::fs::write(&real, "#!/bin/sh\n").unwrap();
        // The link outside /tmp (the repository itself may be a clone there).
        let links = tempfile::tempdir_in("/dev/shm").unwrap();
        let link = links.path().join("robot");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let linked = |_: &str| Command::new(&link);
        let d = systemd(&m, &linked, &SystemdOptions::default()).unwrap();
        assert!(get(&d, "etc/systemd/system/hprm-federate@my\\x2drobot-camera.service.d/hprm-deploy.conf")
            .contains("PrivateTmp=no\n"));
        assert!(d.notes.iter().any(|n| n.contains(&*real.to_string_lossy())), "{:?}", d.notes);
        // A script in a home directory, run by an interpreter that is not.
        let script = |_: &str| {
            let mut c = Command::new("/bin/sh");
            c.arg("/home/ann/robot/main.py");
            c
        };
        let d = systemd(&m, &script, &SystemdOptions::default()).unwrap();
        assert!(get(&d, "etc/systemd/system/hprm-federate@my\\x2drobot-camera.service.d/hprm-deploy.conf")
            .contains("ProtectHome=read-only\n"));
    }

    #[test]
    fn bad_input_gets_one_clear_error() {
        let opts = SystemdOptions::default();
        let mut m = manifest();
        m.name = "a/b".into();
        assert!(matches!(systemd(&m, &command, &opts), Err(DeployError::BadName { .. })));
        let mut m = manifest();
        m.federates.clear();
        assert!(systemd(&m, &command, &opts).unwrap_err().to_string().contains("no federates"));
        let missing = |_: &str| Command::new("hprm-no-such-program-anywhere");
        let e = systemd(&manifest(), &missing, &opts).unwrap_err().to_string();
        assert!(e.contains("not on PATH") && e.contains("hprm-no-such-program-anywhere"), "{e}");
        let relative = SystemdOptions { bin_dir: "bin".into(), ..SystemdOptions::default() };
        assert!(matches!(systemd(&manifest(), &command, &relative), Err(DeployError::RelativeBinDir(_))));
        let newline = |_: &str| {
            let mut c = Command::new("/bin/true");
            c.arg("two\nlines");
            c
        };
        assert!(matches!(systemd(&manifest(), &newline, &opts), Err(DeployError::Unrepresentable { .. })));
    }
}
