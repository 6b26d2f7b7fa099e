//! `hprm launch PROGRAM`: a store, an RTI, every federate as a process.
//!
//! The heavy lifting is `hprm_node::launch::Launch` (the same launcher a
//! Rust program binary or `Program.launch()` in Python uses); this module
//! turns the command line and the program's [`Source`] into one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use hprm_node::launch::Launch;
use hprm_node::manifest::record::{Compression, DEFAULT_POLICY};
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
    /// `--record FILE.mcap` and its options.
    pub record: Option<crate::record::Options>,
}

/// `--record FILE.mcap` and the flags that go with it, as given; the
/// manifest's `[record]` supplies what they leave out.
#[derive(Default)]
pub struct RecordFlags {
    pub path: Option<PathBuf>,
    /// `--no-record`.
    pub off: bool,
    pub topics: Vec<String>,
    pub policy: Option<String>,
    pub compression: Option<Compression>,
    pub rotate: Option<crate::record::Rotate>,
    /// `--record-foxglove on|off`.
    pub foxglove: Option<bool>,
    pub throttle: Option<Duration>,
}

impl RecordFlags {
    /// The recording to make, if any: each flag given, else the program's
    /// `[record]` setting (its relative path is relative to the manifest's
    /// directory), else the default.
    pub fn resolve(self, source: &Source) -> Result<Option<crate::record::Options>> {
        let base = source.path().parent().map(Path::to_path_buf).unwrap_or_default();
        self.over(source.manifest(), &base)
    }

    /// As [`RecordFlags::resolve`], for `manifest`, whose relative paths
    /// are relative to `base`.
    pub fn over(self, manifest: &hprm_node::manifest::Manifest, base: &Path) -> Result<Option<crate::record::Options>> {
        let spec = manifest.record.as_ref().filter(|_| !self.off);
        let path = match (self.path, spec) {
            (Some(p), _) => p,
            (None, Some(s)) => base.join(&s.path),
            (None, None) => {
                let given = [
                    (!self.topics.is_empty(), "--topics"),
                    (self.policy.is_some(), "--record-policy"),
                    (self.compression.is_some(), "--record-compression"),
                    (self.rotate.is_some(), "--record-rotate"),
                    (self.foxglove.is_some(), "--record-foxglove"),
                    (self.throttle.is_some(), "--record-throttle"),
                ];
                if let Some((_, flag)) = given.iter().find(|(g, _)| *g) {
                    bail!(
                        "{flag} applies to a recording: add --record FILE.mcap{}",
                        if self.off { " (not --no-record)" } else { ", or a [record] table to the manifest" }
                    );
                }
                return Ok(None);
            }
        };
        let topics =
            if self.topics.is_empty() { spec.map(|s| s.topics.clone()).unwrap_or_default() } else { self.topics };
        let policy =
            self.policy.or_else(|| spec.and_then(|s| s.policy.clone())).unwrap_or_else(|| DEFAULT_POLICY.to_string());
        let compression = self.compression.or_else(|| spec.and_then(|s| s.compression)).unwrap_or_default();
        let rotate = match (self.rotate, spec.and_then(|s| s.rotate.as_deref())) {
            (Some(r), _) => Some(r),
            (None, Some(text)) => Some(text.parse().map_err(|e| anyhow::anyhow!("[record] rotate: {e}"))?),
            (None, None) => None,
        };
        Ok(Some(crate::record::Options {
            path,
            topics,
            policy,
            compression: match compression {
                Compression::Zstd => Some(mcap::Compression::Zstd),
                Compression::Lz4 => Some(mcap::Compression::Lz4),
                Compression::None => None,
            },
            throttle: self.throttle,
            rotate,
            foxglove: self.foxglove.or_else(|| spec.and_then(|s| s.foxglove)).unwrap_or(true),
        }))
    }
}

/// Refuses a program that `hprm check` finds problems in, or that a
/// launcher cannot run (a federate without a command).
pub fn ensure_launchable(source: &Source) -> Result<()> {
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
    Ok(())
}

/// Runs the program to its end; the exit code for `hprm`.
pub fn run(source: Source, opts: Options) -> Result<i32> {
    ensure_launchable(&source)?;
    let mut manifest = source.manifest().clone();
    if let Some(m) = opts.store_memory {
        manifest.store_memory = Some(m);
    }
    let recorder = match opts.record {
        Some(r) => {
            let path = r.path.clone();
            let policy = r.policy.clone();
            let socket = hprm_node::status::runtime_base().join(format!("hprm-record-{}.sock", std::process::id()));
            let recorder =
                start_recorder(r, &manifest, opts.coordination, opts.fast, socket.clone(), opts.host.as_deref())?;
            // Before the launcher starts any federate: each inherits them.
            std::env::set_var(hprm_node::record::RECORD_ENV, &socket);
            std::env::set_var(hprm_node::record::POLICY_ENV, policy);
            Some((recorder, path))
        }
        None => None,
    };
    // A host's share records only its own federates: say how to make it whole.
    let share = match (&recorder, opts.host.as_deref()) {
        (Some((_, path)), Some(h)) if !manifest.hosts.is_empty() => Some(crate::merge::share_note(&manifest, h, path)),
        _ => None,
    };
    let source = std::sync::Arc::new(source);
    let commands = source.clone();
    // The recorder reads its feeds to their end before the store stops.
    let drain = recorder.as_ref().map(|(r, _)| {
        let progress = r.progress();
        Box::new(move || crate::record::Recorder::drain(&progress, crate::record::DRAIN_BOUND))
            as Box<dyn Fn() + Send + Sync>
    });
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
        before_daemons_stop: drain,
        ..Launch::default()
    };
    let report = launch.run_manifest(&manifest);
    // The recording is closed (its summary written) whatever the run's end.
    let recorded = recorder.map(|(r, path)| (r.finish(), path));
    let report = report?;
    let mut code = report.exit_code();
    if let Some((recorded, path)) = recorded {
        match recorded {
            Ok(s) => {
                let losses = if s.lost.is_empty() {
                    "nothing lost".to_string()
                } else {
                    let each: Vec<String> = s.lost.iter().map(|(t, n)| format!("{t}: {n}")).collect();
                    format!("LOST {} ({})", s.lost.iter().map(|(_, n)| n).sum::<u64>(), each.join(", "))
                };
                let into = match s.files.as_slice() {
                    [one] => one.display().to_string(),
                    [first, .., last] => {
                        format!("{} files, {} to {}", s.files.len(), first.display(), last.display())
                    }
                    [] => path.display().to_string(),
                };
                let mut also = Vec::new();
                if s.physical > 0 {
                    also.push(format!("{} physical action values", s.physical));
                }
                if s.decisions > 0 {
                    also.push(format!("{} deadline decisions", s.decisions));
                }
                let decisions = if also.is_empty() { String::new() } else { format!(" and {}", also.join(" and ")) };
                eprintln!(
                    "hprm: recorded {} messages ({} bytes){decisions} into {into}: {losses}",
                    s.messages, s.bytes
                );
                if let Some(full) = &s.disk_full {
                    eprintln!("hprm: the recording {} ended early: {full}", path.display());
                    code = code.max(1);
                }
                if !s.federates_missing.is_empty() {
                    eprintln!(
                        "hprm: federates not recorded (they never reached the recorder): {}",
                        s.federates_missing.join(", ")
                    );
                }
                if let Some(share) = &share {
                    eprintln!("hprm: {share}");
                }
            }
            Err(e) => {
                eprintln!("hprm: the recording {} is incomplete: {e:#}", path.display());
                code = code.max(1);
            }
        }
    }
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
    Ok(code)
}

/// Starts the recorder of `manifest`'s program, listening for its
/// federates at `socket`; in a program with hosts, of host `host`'s
/// federates (its share, which `hprm bag merge` joins with the other
/// hosts' into the program's recording: see `crate::merge`).
pub fn start_recorder(
    opts: crate::record::Options,
    manifest: &hprm_node::manifest::Manifest,
    coordination: Option<Coordination>,
    fast: bool,
    socket: PathBuf,
    host: Option<&str>,
) -> Result<crate::record::Recorder> {
    let expanded = manifest.expanded();
    // Opaque physical actions are known from the program's types: refused
    // before anything runs (values that fail to encode are known only when
    // scheduled: the federate stops there, see `hprm_node::record`).
    let opaque = expanded
        .federates
        .iter()
        .flat_map(|f| expanded.physical_actions(&f.name))
        .filter_map(|(path, opaque)| opaque.then_some(path))
        .collect();
    hprm_node::record::refuse_opaque(opaque)?;
    for t in &opts.topics {
        if let Some(e) = hprm_node::manifest::record::unknown_topic(&expanded, t) {
            bail!("--topics {e}");
        }
    }
    let mut run = std::collections::BTreeMap::new();
    run.insert("program".to_string(), manifest.name.clone());
    let coordination = match coordination {
        Some(c) => format!("{c:?}"),
        None => format!("{:?} (stp {})", manifest.coordination, manifest.stp.as_deref().unwrap_or("-")),
    };
    run.insert("coordination".to_string(), coordination);
    run.insert("fast".to_string(), fast.to_string());
    run.insert("policy".to_string(), opts.policy.clone());
    run.insert("topics".to_string(), opts.topics.join(","));
    run.insert("args".to_string(), std::env::args().collect::<Vec<_>>().join(" "));
    if let Some(h) = host.filter(|_| !manifest.hosts.is_empty()) {
        run.insert(crate::recording::RUN_HOST.to_string(), h.to_string());
        run.insert(crate::recording::RUN_HOSTS.to_string(), crate::recording::hosts_recorded(manifest).join(","));
    }
    let program = serde_json::from_str(&expanded.to_json())?;
    crate::record::Recorder::start(opts, socket, program, run)
}
