//! `hprm deploy --systemd DIR PROGRAM`: the systemd units and `/etc/hprm`
//! configuration that run a program as services. The files come from
//! [`hprm_cli::systemd`] (templates in the repository's `deploy/`); this
//! module resolves PROGRAM, writes them under DIR and prints what to do next.

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
}

pub fn run(dir: &Path, program: &Path, args: &[String], opts: &DeployArgs) -> Result<i32> {
    if !opts.systemd {
        bail!("say what to deploy to: `hprm deploy --systemd DIR PROGRAM` (systemd is the only kind so far)");
    }
    let source = Source::open(program, args)?;
    if let Some((loc, problem)) = source.launch_problems().into_iter().next() {
        bail!("{}: {problem}", source.locate(loc));
    }
    let settings = SystemdOptions {
        bin_dir: opts.bin_dir.clone(),
        rti_port: opts.rti_port,
        rti_bind: opts.rti_bind.clone(),
        auth: !opts.no_auth,
    };
    let deployment = hprm_cli::systemd::systemd(source.manifest(), &|name| source.federate_command(name), &settings)?;
    deployment
        .write(dir)
        .with_context(|| format!("writing the deployment of {} to {}", deployment.program, dir.display()))?;
    print!("{}", deployment.summary(dir));
    Ok(0)
}
