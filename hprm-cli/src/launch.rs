//! `hprm launch PROGRAM`: a store, an RTI, every federate as a process.
//!
//! The heavy lifting is `hprm_node::launch::Launch` (the same launcher a
//! Rust program binary or `Program.launch()` in Python uses); this module
//! turns the command line and the program's [`Source`] into one.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use hprm_node::launch::Launch;
use hprm_node::Coordination;

use crate::source::Source;

/// What `hprm launch` was asked for, beyond PROGRAM.
pub struct Options {
    pub coordination: Option<Coordination>,
    pub fast: bool,
    pub timeout: Option<Duration>,
    pub log_dir: Option<PathBuf>,
    pub store_memory: Option<String>,
    /// `--trace FILE`.
    pub trace: Option<PathBuf>,
    /// `--host NAME`: this host's share of a program with hosts.
    pub host: Option<String>,
}

/// Runs the program to its end; the exit code for `hprm`.
pub fn run(source: Source, opts: Options) -> Result<i32> {
    let mut problems: Vec<String> = source
        .manifest()
        .check()
        .into_iter()
        .map(|p| format!("{}: {}", source.locate_field(p.location, p.field), p.message))
        .collect();
    problems.extend(source.launch_problems().into_iter().map(|(l, m)| format!("{}: {m}", source.locate(l))));
    if !problems.is_empty() {
        bail!("the program has problems (see `hprm check`):\n  {}", problems.join("\n  "));
    }
    let mut manifest = source.manifest().clone();
    if let Some(m) = opts.store_memory {
        manifest.store_memory = Some(m);
    }
    let source = std::sync::Arc::new(source);
    let commands = source.clone();
    let launch = Launch {
        fast: opts.fast,
        timeout: opts.timeout,
        log_dir: opts.log_dir,
        coordination: opts.coordination,
        color: hprm_node::log::ansi(),
        federate_command: Some(Box::new(move |name: &str| commands.federate_command(name))),
        handle_signals: true,
        trace: opts.trace,
        host: opts.host,
        ..Launch::default()
    };
    let report = launch.run_manifest(&manifest)?;
    match report.failure_summary(&manifest.name) {
        None => {
            let restarts = report.restarts_summary().map(|r| format!(" ({r})")).unwrap_or_default();
            eprintln!(
                "hprm: program {} finished: {} federates exited cleanly{restarts}",
                manifest.name,
                report.federates.len()
            );
        }
        Some(summary) => eprintln!("hprm: {summary}"),
    }
    Ok(report.exit_code())
}
