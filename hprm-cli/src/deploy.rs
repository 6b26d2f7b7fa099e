//! `hprm deploy --systemd DIR PROGRAM`: the systemd units and `/etc/hprm`
//! configuration that run a program as services. The files come from
//! [`hprm_cli::systemd`] (templates in the repository's `deploy/`); this
//! module resolves PROGRAM, writes them under DIR and prints what to do next.
//! A program that spans hosts gets one set of units per host: under
//! DIR/HOST for each, or, with `--host NAME`, that host's under DIR.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use hprm_cli::systemd::SystemdOptions;

use crate::source::Source;

/// `hprm deploy`'s options beyond DIR and PROGRAM.
#[derive(clap::Args)]
pub struct DeployArgs {
    /// Write systemd units (the one kind of deployment so far).
    #[arg(long)]
    pub systemd: bool,
    /// Where hprm-store and hprm-rti are installed on the target host.
    #[arg(long, default_value = hprm_cli::systemd::TEMPLATE_BIN_DIR)]
    pub bin_dir: PathBuf,
    /// The RTI's TCP port; give each program on a host its own.
    #[arg(long, default_value_t = 15045)]
    pub rti_port: u16,
    /// The address the RTI listens on (0.0.0.0 for federates on other hosts).
    #[arg(long, default_value = "127.0.0.1")]
    pub rti_bind: String,
    /// Let the RTI admit federates without authentication. By default it
    /// admits only those holding the program's key (HMAC-SHA256), a fresh
    /// one written to etc/hprm/PROGRAM/auth.key (mode 0600).
    #[arg(long)]
    pub no_auth: bool,
    /// The RTI's key: this file's contents instead of a fresh key (every
    /// host of a program that spans several needs the same).
    #[arg(long, value_name = "FILE")]
    pub auth_key_file: Option<PathBuf>,
    /// In a program with hosts: write only this host's units, under DIR
    /// (default: every host's, each under DIR/HOST, sharing one key).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
}

pub fn run(dir: &Path, program: &Path, args: &[String], opts: &DeployArgs) -> Result<i32> {
    if !opts.systemd {
        bail!("say what to deploy to: `hprm deploy --systemd DIR PROGRAM` (systemd is the only kind so far)");
    }
    let source = Source::open(program, args)?;
    if let Some((loc, problem)) = source.launch_problems().into_iter().next() {
        bail!("{}: {problem}", source.locate(loc));
    }
    let mut manifest = source.manifest().clone();
    if manifest.record.is_some() {
        let problems: Vec<String> = manifest
            .check()
            .into_iter()
            .filter(|p| p.location == hprm_node::manifest::Location::Record)
            .map(|p| format!("{}: {}", source.locate_field(p.location, p.field), p.message))
            .collect();
        if !problems.is_empty() {
            bail!("the program's [record] table has problems (see `hprm check`):\n  {}", problems.join("\n  "));
        }
    }
    if let Some(record) = &mut manifest.record {
        // The units run elsewhere: the recording's path, as `hprm launch` resolves it.
        let base = source.path().parent().map(Path::to_path_buf).unwrap_or_default();
        record.path = base.join(&record.path).to_string_lossy().into_owned();
    }
    let auth_key = match &opts.auth_key_file {
        Some(f) => {
            let key =
                std::fs::read_to_string(f).with_context(|| format!("reading the RTI's key from {}", f.display()))?;
            if key.trim().is_empty() {
                bail!(
                    "--auth-key-file {}: the file is empty; give the key file of the program's other hosts",
                    f.display()
                );
            }
            Some(key)
        }
        // Written on every host: the same for all.
        None if opts.host.is_none() && !source.manifest().hosts.is_empty() => Some(hprm_rti::auth::generate_key()),
        None => None,
    };
    let settings = SystemdOptions {
        bin_dir: opts.bin_dir.clone(),
        rti_port: opts.rti_port,
        rti_bind: opts.rti_bind.clone(),
        auth: !opts.no_auth,
        auth_key,
        host: opts.host.clone(),
    };
    // One host's units under DIR, or, for a program with hosts and no
    // --host, every host's under DIR/HOST.
    let shares: Vec<(Option<String>, PathBuf)> = match (&opts.host, manifest.hosts.as_slice()) {
        (None, hosts) if !hosts.is_empty() => hosts.iter().map(|h| (Some(h.name.clone()), dir.join(&h.name))).collect(),
        (host, _) => vec![(host.clone(), dir.to_path_buf())],
    };
    for (host, dir) in shares {
        let settings = SystemdOptions { host, ..settings.clone() };
        let deployment = hprm_cli::systemd::systemd(&manifest, &|name| source.federate_command(name), &settings)?;
        deployment
            .write(&dir)
            .with_context(|| format!("writing the deployment of {} to {}", deployment.program, dir.display()))?;
        print!("{}", deployment.summary(&dir));
    }
    Ok(0)
}
