//! `hprm replay FILE.mcap PROGRAM`: runs some of a program's federates on
//! the inputs a recording (`hprm launch --record`) holds, at their recorded
//! tags, and with `--check` compares what they send with what they sent.
//!
//! Replay is a launch like any other (`hprm_node::launch::Launch`): a
//! store, an RTI and one process per federate, in centralized
//! coordination. The federates replayed run their own code, unmodified
//! (Python or Rust, started as `hprm launch` starts them). Every other
//! federate is replaced by a *replay federate*: `hprm replay-federate`, a
//! process that joins the RTI under the replaced federate's name with its
//! ports (built from the manifest, `Program::from_manifest`) and sends the
//! recorded values of its outputs, byte for byte, each at its recorded tag
//! (relative to the start; a logical action steps from one tag to the
//! next, microsteps included), then asks for the stop at the tag where
//! the recorded program stopped. Since a centralized federate's outputs are
//! a function of its inputs and their tags, a replayed federate sends
//! again what it sent.
//!
//! `--check` records the replayed federates' outputs with the recorder of
//! `--record` into a scratch file, then compares each channel, message by
//! message in tag order, with the recording: bit-exact on the encoded value
//! (every buffer inline in both, so large buffers are compared by
//! content). The first difference by tag is reported with the port and
//! where in the value the two differ.
//!
//! Deadline decisions depend on physical time, so a replayed federate does
//! not read the clock for them: `hprm replay` hands it the decisions its
//! recording holds ([`hprm_node::record::DECISIONS_ENV`]), and its scheduler
//! runs, at each recorded tag, the body or the deadline handler as it did.
//! `--check` compares its decisions with the recorded ones too.
//!
//! Physical actions take their values from the world (sensors), so a
//! replayed federate's physical actions are fed from the recording: `hprm
//! replay` hands it the values of its `physical/` channels
//! ([`hprm_node::record::PHYSICAL_ENV`]), and its scheduler puts each in its
//! queue at its recorded tag; what the program's own threads schedule (the
//! live sensor, started by its reactions as usual) is dropped. A federate
//! whose physical actions were recorded counts as one with recorded inputs.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use hprm_node::manifest::bank::multiport;
use hprm_node::manifest::{port_decl, Manifest, ReactorSpec};
use hprm_node::payload::{
    BufferDescriptor, Decoder, Encoder, Location, PayloadError, EXT_ARROW, EXT_BUFFER, EXT_BYTES, EXT_TENSOR,
};
use hprm_node::{Coordination, LogicalAction, Output, Program, Tag, Value};
use mcap::records::Record;

use crate::bag::open_parts;
use crate::record::names;
use crate::recording::{
    self, decode_decision, messages, parse_tag, program, scan, DECISIONS_PREFIX, META_RUN, META_SUMMARY,
    PHYSICAL_PREFIX,
};
use crate::source::Source;

/// Messages a replay federate reads ahead of its tag.
const READ_AHEAD: usize = 16;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The recording (`hprm launch --record FILE.mcap`).
    pub file: PathBuf,
    /// The program: a Python file, a TOML manifest or a program binary,
    /// with the same federates and connections as the recorded one.
    pub program: PathBuf,
    /// Replay this federate (repeat for several); default: every federate
    /// that received a recorded message.
    #[arg(long = "federate", value_name = "NAME")]
    pub federates: Vec<String>,
    /// Deliver recorded messages from this logical time on (since the start, e.g. 2s).
    #[arg(long, value_parser = crate::duration)]
    pub from: Option<Duration>,
    /// Deliver recorded messages up to this logical time, and stop there.
    #[arg(long, value_parser = crate::duration)]
    pub to: Option<Duration>,
    /// Deliver only these recorded outputs (FEDERATE.PORT or FEDERATE.REACTOR.PORT).
    #[arg(long, value_delimiter = ',')]
    pub topics: Vec<String>,
    /// Logical time follows physical time, at the recorded speed (default: as fast as possible).
    #[arg(long)]
    pub realtime: bool,
    /// Compare every output of the replayed federates with the recording;
    /// exit 1 at the first difference.
    #[arg(long)]
    pub check: bool,
    /// With --check: leave map entries with these keys out of the
    /// comparison, at any depth (values measured from physical time, e.g.
    /// latencies: `--ignore ms,t`).
    #[arg(long, value_delimiter = ',', requires = "check")]
    pub ignore: Vec<String>,
    /// Arguments for the program.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// `hprm replay-federate`: one replay federate, started by `hprm replay`'s
/// launcher (its federate, RTI and store come in the `HPRM_*` environment).
#[derive(Args, Debug)]
pub struct FederateArgs {
    pub file: PathBuf,
    /// Relative to the start, ns.
    #[arg(long, default_value_t = 0)]
    pub from: i64,
    #[arg(long)]
    pub to: Option<i64>,
    #[arg(long, value_delimiter = ',')]
    pub topics: Vec<String>,
    /// Ask for the stop at this tag (since the start, as
    /// `crate::recording::format_tag` writes it).
    #[arg(long)]
    pub stop_at: Option<String>,
}

/// What a recording says of itself.
struct Recording {
    /// Its files, mapped: one, or the parts of a rotated recording in order.
    maps: Vec<memmap2::Mmap>,
    /// The file a replay federate opens to read it all again (its first).
    first: PathBuf,
    manifest: Manifest,
    /// The recorded program's start time (ns since the epoch).
    start: i64,
    /// Channel topics (`federate.reactor.port`).
    topics: Vec<String>,
    /// The last tag of each recorded federate, relative to the start.
    last: Vec<Tag>,
    /// Its number, when it is one part of a rotated recording.
    part: Option<String>,
}

impl Recording {
    /// Opens `path`: one file, or a rotated recording as a whole (its base
    /// name or its first part, see `bag::open_parts`), every part complete.
    fn open(path: &Path) -> Result<Recording> {
        let parts = open_parts(path)?;
        let mut meta: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut topics: Vec<String> = Vec::new();
        let mut ended = None;
        for (file, map) in &parts {
            // Each part has its own summary: the last one's holds the end.
            meta.remove(META_SUMMARY);
            let why = scan(map, |r| {
                match r {
                    Record::Metadata(m) => {
                        meta.insert(m.name, m.metadata);
                    }
                    Record::Channel(c) if !topics.contains(&c.topic) => topics.push(c.topic),
                    _ => {}
                }
                true
            })
            .with_context(|| format!("{} is not a recording", file.display()))?;
            let summarized = meta.contains_key(META_SUMMARY);
            if why.is_some() || !summarized {
                ended = Some((file.clone(), why));
                break;
            }
        }
        let (at, why) = match ended {
            Some((file, why)) => (file, why),
            None => (path.to_path_buf(), None),
        };
        let recording::Program { manifest, start, last, part } = program(&meta, why, &at)?;
        if let Some(host) = meta.get(META_RUN).and_then(|r| r.get(recording::RUN_HOST)) {
            let hosts = recording::hosts_recorded(&manifest);
            bail!(
                "{} is host {host}'s share of program {} (hosts {}): it holds only that host's federates;                  merge every host's share into the whole recording first (hprm bag merge A.mcap B.mcap -o WHOLE.mcap)                  and replay that",
                path.display(),
                manifest.name,
                hosts.join(", ")
            );
        }
        let part = part.filter(|_| parts.len() == 1);
        let first = parts[0].0.clone();
        Ok(Recording { maps: parts.into_iter().map(|(_, m)| m).collect(), first, manifest, start, topics, last, part })
    }

    /// Calls `each(channel topic, tag relative to the start, payload)` for
    /// every message, in file order (per channel, tag order).
    fn messages(&self, mut each: impl FnMut(&str, Tag, &[u8]) -> bool) -> Result<()> {
        for map in &self.maps {
            if !messages(map, self.start, &mut each)? {
                break;
            }
        }
        Ok(())
    }
}

/// `m` on this host alone: a replay runs every federate here, whatever
/// hosts the program was recorded on (the recording holds what crossed
/// between them), so the hosts, and each federate's, are left out.
fn one_host(m: &Manifest) -> Manifest {
    let mut m = m.clone();
    m.hosts.clear();
    (m.rti_host, m.rti_port) = (None, None);
    for f in &mut m.federates {
        f.host = None;
        f.hosts.clear();
    }
    m
}

/// `federate.…` of a port path.
fn federate_of(path: &str) -> &str {
    path.split('.').next().unwrap_or_default()
}

/// Connections as the wire sees them: (from, to, delay, physical), in order.
fn wiring(m: &Manifest) -> Vec<(String, String, Option<String>, bool)> {
    m.expanded().connections.iter().map(|c| (c.from.clone(), c.to.clone(), c.after.clone(), c.physical)).collect()
}

pub fn run(args: &ReplayArgs) -> Result<i32> {
    let recording = Recording::open(&args.file)?;
    if let Some(part) = &recording.part {
        tracing::warn!(
            "{} is part {part} of a rotated recording (--record-rotate): only its own messages are replayed",
            args.file.display()
        );
    }
    let source = Source::open(&args.program, &args.args)?;
    crate::launch::ensure_launchable(&source)?;
    let manifest = source.manifest().expanded();
    let recorded = recording.manifest.expanded();
    let names_of = |m: &Manifest| m.federates.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
    if names_of(&manifest) != names_of(&recorded) || wiring(&manifest) != wiring(&recorded) {
        bail!(
            "{} does not have the recorded program's graph: replay needs the same federates and connections, in the same order \
             (recorded: federates {}; this program: federates {}); compare `hprm manifest {}` with the recording's hprm.program metadata",
            args.program.display(),
            names_of(&recorded).join(", "),
            names_of(&manifest).join(", "),
            args.program.display()
        );
    }
    for t in &args.topics {
        if !recording.topics.iter().any(|c| names(t, c)) {
            bail!("--topics {t:?}: the recording has no such connection; it has: {}", recording.topics.join(", "));
        }
    }
    let delivered = |topic: &str| args.topics.is_empty() || args.topics.iter().any(|t| names(t, topic));
    let conns = &manifest.connections;
    let crossing = |from: &str, to: &str| federate_of(from) != federate_of(to);
    // A federate run by a command of its own that builds its reactors
    // from the manifest when it starts (an external federate: the ROS 2
    // bridge) declares no physical action in the manifest, and may have
    // some: those the recording has for it are its own (it refuses one it
    // does not declare, as any replayed federate does).
    let external = |f: &str| {
        manifest.federate(f).is_some_and(|s| s.command.as_ref().is_some_and(|c| !c.is_empty()))
            && manifest.physical_actions(f).is_empty()
    };
    // Per federate: the recorded channels of its physical actions.
    let physical_of = |f: &str| -> Vec<String> {
        if external(f) {
            let prefix = format!("{PHYSICAL_PREFIX}{f}.");
            return recording.topics.iter().filter(|t| t.starts_with(&prefix)).cloned().collect();
        }
        manifest
            .physical_actions(f)
            .into_iter()
            .map(|(path, _)| format!("{PHYSICAL_PREFIX}{path}"))
            .filter(|t| recording.topics.contains(t))
            .collect()
    };
    // Federates that received a recorded message, or whose physical actions
    // were recorded. An external federate is not replayed unless named
    // (it needs what it bridges to, e.g. ROS 2): its outputs are recorded.
    let fed_inputs: Vec<String> = manifest
        .federates
        .iter()
        .map(|f| f.name.clone())
        .filter(|f| {
            (!external(f) && !physical_of(f).is_empty())
                || conns.iter().any(|c| {
                    crossing(&c.from, &c.to)
                        && federate_of(&c.to) == f
                        && recording.topics.iter().any(|t| names(&c.from, t) && delivered(t))
                })
        })
        .collect();
    let replayed: Vec<String> = if args.federates.is_empty() {
        if fed_inputs.is_empty() {
            bail!(
                "no federate of {} received a recorded message{}: nothing to replay (name one with --federate)",
                manifest.name,
                if args.topics.is_empty() { "" } else { " of --topics" }
            );
        }
        fed_inputs
    } else {
        for f in &args.federates {
            if manifest.federate(f).is_none() {
                bail!(
                    "--federate {f}: the recorded program {} has no such federate; its federates are {}",
                    manifest.name,
                    names_of(&manifest).join(", ")
                );
            }
        }
        manifest.federates.iter().map(|f| f.name.clone()).filter(|f| args.federates.contains(f)).collect()
    };
    let is_replayed = |f: &str| replayed.iter().any(|r| r == f);
    // Inputs of replayed federates that nothing will send: their senders are
    // replaced, and their values are not in the recording.
    for c in conns.iter().filter(|c| crossing(&c.from, &c.to) && is_replayed(federate_of(&c.to))) {
        if !is_replayed(federate_of(&c.from)) && !recording.topics.iter().any(|t| names(&c.from, t)) {
            tracing::warn!("{} was not recorded: {} receives nothing on it during the replay", c.from, c.to);
        }
    }
    // What the replayed federates send to others, by channel topic.
    let mut checked: Vec<String> = Vec::new();
    if args.check {
        for c in conns.iter().filter(|c| crossing(&c.from, &c.to) && is_replayed(federate_of(&c.from))) {
            match recording.topics.iter().find(|t| names(&c.from, t)) {
                Some(t) if !checked.contains(t) => checked.push(t.clone()),
                Some(_) => {}
                None => tracing::warn!("{} was not recorded: its values are not compared", c.from),
            }
        }
    }
    // The replayed federates' recorded deadline decisions, one file each.
    let mut decision_files: HashMap<String, Scratch> = HashMap::new();
    let mut decision_topics: Vec<String> = Vec::new();
    for f in &replayed {
        let topic = format!("{DECISIONS_PREFIX}{f}");
        if !recording.topics.contains(&topic) {
            continue;
        }
        let mut decisions = hprm_node::record::Decisions::default();
        let mut unreadable = 0;
        recording.messages(|t, tag, data| {
            if t == topic {
                match decode_decision(data) {
                    Some((reaction, missed)) => decisions.insert(&reaction, tag, missed),
                    None => unreadable += 1,
                }
            }
            true
        })?;
        if unreadable > 0 {
            bail!(
                "{}: {unreadable} deadline decisions of {f} are unreadable; the recording is damaged",
                args.file.display()
            );
        }
        let file = Scratch::named(&args.file, &format!("deadlines-{f}.txt"));
        std::fs::write(&file.0, decisions.to_text())
            .with_context(|| format!("writing the recorded deadline decisions into {}", file.0.display()))?;
        decision_files.insert(f.clone(), file);
        if args.check {
            decision_topics.push(topic);
        }
    }
    let from = args.from.map_or(0, |d| d.as_nanos() as i64);
    let to = args.to.map(|d| d.as_nanos() as i64);
    // The replayed federates' recorded physical action values, one file each.
    let mut physical_files: HashMap<String, Scratch> = HashMap::new();
    let mut physical_values = 0u64;
    for f in &replayed {
        let declared = manifest.physical_actions(f);
        let prefix = format!("{PHYSICAL_PREFIX}{f}.");
        if let Some(t) = recording
            .topics
            .iter()
            .filter(|t| t.starts_with(&prefix) && !external(f))
            .find(|t| !declared.iter().any(|(path, _)| t.strip_prefix(PHYSICAL_PREFIX) == Some(path.as_str())))
        {
            bail!(
                "{} has values of physical action {}, which {} does not declare; replay the program that was recorded",
                args.file.display(),
                &t[PHYSICAL_PREFIX.len()..],
                args.program.display()
            );
        }
        let channels = physical_of(f);
        if channels.is_empty() {
            for (path, _) in &declared {
                tracing::warn!("physical action {path} was not recorded: it runs live in the replay");
            }
            continue;
        }
        let mut events: Vec<hprm_node::record::PhysicalEvent> = Vec::new();
        recording.messages(|t, tag, data| {
            if channels.iter().any(|c| c == t) && tag.time >= from && to.map_or(true, |to| tag.time <= to) {
                let action = t[PHYSICAL_PREFIX.len()..].to_string();
                events.push(hprm_node::record::PhysicalEvent { action, tag, payload: data.to_vec() });
            }
            true
        })?;
        // Per channel the file is in tag order; across channels, chunks interleave.
        events.sort_by_key(|e| e.tag);
        physical_values += events.len() as u64;
        let file = Scratch::named(&args.file, &format!("physical-{f}.bin"));
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(&file.0).with_context(|| format!("creating {}", file.0.display()))?,
        );
        for e in &events {
            hprm_node::record::PhysicalEvents::write(&mut out, e)
                .with_context(|| format!("writing the recorded physical action values into {}", file.0.display()))?;
        }
        std::io::Write::flush(&mut out)
            .with_context(|| format!("writing the recorded physical action values into {}", file.0.display()))?;
        physical_files.insert(f.clone(), file);
    }
    // Where the recorded program stopped (each federate's last tag: the
    // latest is the stop); the replay asks for the stop there, by `--to`
    // at the latest. A stop at microstep 0 is a timeout, which the
    // replayed program has too.
    let stop =
        recording.last.iter().max().copied().filter(|t| t.microstep > 0).map(|t| Tag::new(t.time, t.microstep - 1));
    let stop = match (stop, to) {
        (Some(s), Some(t)) => Some(s.min(Tag::new(t, 0))),
        (s, None) => s,
        (None, Some(t)) => Some(Tag::new(t, 0)),
    };
    let scratch = Scratch::new(&args.file);
    let recorder = if checked.is_empty() && decision_topics.is_empty() {
        None
    } else {
        let opts = crate::record::Options {
            path: scratch.0.clone(),
            topics: checked.clone(),
            policy: "block:60s".into(),
            compression: None,
            throttle: None,
            rotate: None,
            // Only the outputs' own channels are compared.
            foxglove: false,
        };
        let mut run = BTreeMap::new();
        run.insert("program".to_string(), manifest.name.clone());
        run.insert("replay_of".to_string(), args.file.display().to_string());
        let program = serde_json::from_str(&manifest.to_json())?;
        let socket = hprm_node::status::runtime_base().join(format!("hprm-replay-{}.sock", std::process::id()));
        let recorder = crate::record::Recorder::start(opts, socket.clone(), program, run)?;
        std::env::set_var(hprm_node::record::RECORD_ENV, &socket);
        std::env::set_var(hprm_node::record::POLICY_ENV, "block:60s");
        Some(recorder)
    };
    let exe = std::env::current_exe().context("finding the hprm binary")?;
    let file = recording.first.canonicalize().with_context(|| format!("resolving {}", recording.first.display()))?;
    let source = Arc::new(source);
    let commands = source.clone();
    let (replayed_c, topics) = (replayed.clone(), args.topics.clone());
    let decision_paths: HashMap<String, PathBuf> =
        decision_files.iter().map(|(f, s)| (f.clone(), s.0.clone())).collect();
    let physical_paths: HashMap<String, PathBuf> =
        physical_files.iter().map(|(f, s)| (f.clone(), s.0.clone())).collect();
    let launch = hprm_node::launch::Launch {
        fast: !args.realtime,
        coordination: Some(Coordination::Centralized),
        color: hprm_node::log::ansi(),
        handle_signals: true,
        federate_command: Some(Box::new(move |name: &str| {
            if replayed_c.iter().any(|r| r == name) {
                let mut c = commands.federate_command(name);
                if let Some(p) = decision_paths.get(name) {
                    c.env(hprm_node::record::DECISIONS_ENV, p);
                }
                if let Some(p) = physical_paths.get(name) {
                    c.env(hprm_node::record::PHYSICAL_ENV, p);
                }
                return c;
            }
            let mut c = std::process::Command::new(&exe);
            c.arg("replay-federate").arg(&file).args(["--from", &from.to_string()]);
            if let Some(t) = to {
                c.args(["--to", &t.to_string()]);
            }
            if !topics.is_empty() {
                c.args(["--topics", &topics.join(",")]);
            }
            if let Some(s) = stop {
                c.args(["--stop-at", &crate::recording::format_tag(s)]);
            }
            c
        })),
        ..hprm_node::launch::Launch::default()
    };
    let report = launch.run_manifest(&one_host(source.manifest()));
    let recorded = recorder.map(|r| r.finish());
    let report = report?;
    if let Some(summary) = report.failure_summary(&manifest.name) {
        eprintln!("hprm: {summary}");
        return Ok(report.exit_code().max(1));
    }
    let (mut messages, mut decisions) = (0, 0);
    if let Some(recorded) = recorded {
        let summary = recorded.context("recording the replayed federates' outputs")?;
        if !summary.lost.is_empty() {
            bail!("the replay's outputs were not all captured for the comparison ({:?} lost)", summary.lost);
        }
        let replay = Recording::open(&scratch.0);
        let window =
            (Tag::new(from, 0), stop.map_or(Tag::new(i64::MAX, u32::MAX), |s| Tag::new(s.time, s.microstep + 1)));
        let compared: Vec<String> = checked.iter().chain(&decision_topics).cloned().collect();
        match compare(&recording, &replay?, &compared, window, &args.ignore)? {
            Ok(n) => {
                messages = n[..checked.len()].iter().sum();
                decisions = n[checked.len()..].iter().sum();
            }
            Err(difference) => {
                println!("replay: {difference}");
                return Ok(1);
            }
        }
    }
    if args.check {
        let decisions =
            if decision_topics.is_empty() { String::new() } else { format!(" deadline_decisions={decisions}") };
        let physical =
            if physical_files.is_empty() { String::new() } else { format!(" physical_values={physical_values}") };
        println!("replay: federates={} messages={messages}{physical}{decisions} identical", replayed.len());
    } else {
        eprintln!("hprm: replayed {} of {}: {}", replayed.len(), manifest.name, replayed.join(", "));
    }
    Ok(0)
}

/// The replay's own recording of what the replayed federates send
/// (`--check`), removed however the replay ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(file: &Path) -> Scratch {
        Scratch::named(file, "mcap")
    }

    /// A scratch file for the replay of `file`, its name ending in `what`.
    fn named(file: &Path, what: &str) -> Scratch {
        let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Scratch(std::env::temp_dir().join(format!("hprm-replay-{}-{stem}.{what}", std::process::id())))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// One channel's messages: (tag, payload), in tag order.
type Channel = Vec<(Tag, Vec<u8>)>;

/// Per channel, its messages within `window` (from, up to and including
/// the stop tag).
fn channel_messages(r: &Recording, topics: &[String], window: (Tag, Tag)) -> Result<Vec<Channel>> {
    let mut out = vec![Vec::new(); topics.len()];
    r.messages(|topic, tag, data| {
        if let Some(i) = topics.iter().position(|t| t == topic) {
            if tag >= window.0 && tag <= window.1 {
                out[i].push((tag, data.to_vec()));
            }
        }
        true
    })?;
    Ok(out)
}

/// The number of messages compared per topic, or the first difference (by tag).
fn compare(
    recorded: &Recording,
    replayed: &Recording,
    topics: &[String],
    window: (Tag, Tag),
    ignore: &[String],
) -> Result<std::result::Result<Vec<u64>, String>> {
    let a = channel_messages(recorded, topics, window)?;
    let b = channel_messages(replayed, topics, window)?;
    let mut first: Option<(Tag, String)> = None;
    let mut compared = vec![0u64; topics.len()];
    for (i, topic) in topics.iter().enumerate() {
        let (a, b) = (&a[i], &b[i]);
        for k in 0..a.len().max(b.len()) {
            let found = match (a.get(k), b.get(k)) {
                (Some((ta, da)), Some((tb, db))) if ta == tb => {
                    compared[i] += 1;
                    if da == db {
                        continue;
                    }
                    match what_differs(da, db, ignore) {
                        Some(d) => (*ta, d),
                        None => continue,
                    }
                }
                (Some((ta, _)), Some((tb, _))) if ta < tb => {
                    (*ta, "the recording has a value here, the replay none".into())
                }
                (Some(_), Some((tb, _))) => (*tb, "the replay sent a value here, the recording has none".into()),
                (Some((ta, _)), None) => (*ta, "the recording has a value here, the replay none".into()),
                (None, Some((tb, _))) => (*tb, "the replay sent a value here, the recording has none".into()),
                (None, None) => unreachable!("k < the longer length"),
            };
            let line = format!(
                "first difference at tag {}/{} on {topic}: {}",
                crate::topic::seconds(found.0.time),
                found.0.microstep,
                found.1
            );
            if first.as_ref().map_or(true, |(t, _)| found.0 < *t) {
                first = Some((found.0, line));
            }
            break;
        }
    }
    Ok(match first {
        Some((_, line)) => Err(line),
        None => Ok(compared),
    })
}

/// Where two encoded values differ, in words; `None` when they differ only
/// in map entries whose key is in `ignore`.
fn what_differs(recorded: &[u8], replayed: &[u8], ignore: &[String]) -> Option<String> {
    let decode = |b: &[u8]| rmpv::decode::read_value(&mut &b[..]);
    Some(match (decode(recorded), decode(replayed)) {
        (Ok(mut a), Ok(mut b)) => match diff(&a, &b, &mut String::new()) {
            Some(_)
                if !ignore.is_empty() && {
                    strip(&mut a, ignore);
                    strip(&mut b, ignore);
                    a == b
                } =>
            {
                return None
            }
            Some(d) if ignore.is_empty() => d,
            Some(_) => diff(&a, &b, &mut String::new())?,
            None => {
                let at = recorded
                    .iter()
                    .zip(replayed)
                    .position(|(x, y)| x != y)
                    .unwrap_or(recorded.len().min(replayed.len()));
                format!(
                    "the values are equal but encoded differently from byte {at} ({} and {} bytes)",
                    recorded.len(),
                    replayed.len()
                )
            }
        },
        _ => format!("the payloads differ ({} and {} bytes)", recorded.len(), replayed.len()),
    })
}

/// `v` without the map entries whose key is one of `keys`, at any depth.
fn strip(v: &mut rmpv::Value, keys: &[String]) {
    match v {
        rmpv::Value::Map(pairs) => {
            pairs.retain(|(k, _)| !k.as_str().is_some_and(|k| keys.iter().any(|i| i == k)));
            pairs.iter_mut().for_each(|(_, x)| strip(x, keys));
        }
        rmpv::Value::Array(items) => items.iter_mut().for_each(|x| strip(x, keys)),
        _ => {}
    }
}

fn show(v: &rmpv::Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

/// The first place `a` and `b` differ, under `path`.
fn diff(a: &rmpv::Value, b: &rmpv::Value, path: &mut String) -> Option<String> {
    use rmpv::Value as V;
    let at = |path: &str| if path.is_empty() { "the value".to_string() } else { path.to_string() };
    match (a, b) {
        (V::Map(x), V::Map(y)) => {
            let key = |k: &V| match k {
                V::String(s) => format!("[{:?}]", s.as_str().unwrap_or_default()),
                other => format!("[{other}]"),
            };
            for (k, va) in x {
                let Some((_, vb)) = y.iter().find(|(kb, _)| kb == k) else {
                    return Some(format!("{}: key {} recorded, not in the replay", at(path), key(k)));
                };
                let len = path.len();
                path.push_str(&key(k));
                if let Some(d) = diff(va, vb, path) {
                    return Some(d);
                }
                path.truncate(len);
            }
            y.iter()
                .find(|(kb, _)| !x.iter().any(|(ka, _)| ka == kb))
                .map(|(k, _)| format!("{}: key {} in the replay, not recorded", at(path), key(k)))
        }
        (V::Array(x), V::Array(y)) => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                if let Some(d) = diff(va, vb, path) {
                    return Some(d);
                }
                path.truncate(len);
            }
            (x.len() != y.len()).then(|| format!("{}: {} items recorded, {} replayed", at(path), x.len(), y.len()))
        }
        (V::Ext(ta, da), V::Ext(tb, db))
            if ta == tb && matches!(*ta, EXT_BUFFER | EXT_BYTES | EXT_ARROW | EXT_TENSOR) =>
        {
            let (Ok(x), Ok(y)) = (BufferDescriptor::decode(da), BufferDescriptor::decode(db)) else {
                return (da != db).then(|| format!("{}: the buffers differ", at(path)));
            };
            if (x.dtype.as_str(), &x.shape) != (y.dtype.as_str(), &y.shape) {
                return Some(format!(
                    "{}: buffer {} {:?} recorded, {} {:?} replayed",
                    at(path),
                    x.dtype.as_str(),
                    x.shape,
                    y.dtype.as_str(),
                    y.shape
                ));
            }
            match (&x.location, &y.location) {
                (Location::Inline(p), Location::Inline(q)) => {
                    let i = p.iter().zip(q).position(|(u, v)| u != v)?;
                    Some(format!(
                        "{}: buffer {} {:?} differs from byte {i} (recorded 0x{:02x}, replayed 0x{:02x})",
                        at(path),
                        x.dtype.as_str(),
                        x.shape,
                        p[i],
                        q[i]
                    ))
                }
                _ => (da != db).then(|| format!("{}: the buffers differ", at(path))),
            }
        }
        _ if a == b => None,
        _ => Some(format!("{}: recorded {}, replayed {}", at(path), show(a), show(b))),
    }
}

/// A recorded payload, sent as it was recorded.
struct Recorded(Vec<u8>);

/// One recorded message for a replay federate's reactor.
struct Due {
    /// Relative to the start.
    tag: Tag,
    output: usize,
    payload: Vec<u8>,
}

/// The recorded payload, every buffer at or over the threshold moved back
/// into the store (as its sender's encoder did), so that receivers get it
/// as they did; a message over the in-band limit is spilled.
fn encode_recorded(value: &Value, encoder: &Encoder, deliveries: u32) -> Result<Vec<u8>, PayloadError> {
    let Some(Recorded(payload)) = value.downcast_ref::<Recorded>() else {
        return Err(PayloadError::Mismatch { type_name: "a recorded value", message: "not set by the replay".into() });
    };
    let mut session = encoder.session(deliveries);
    let message = match rmpv::decode::read_value(&mut &payload[..]) {
        Ok(mut v) => {
            outline(&mut v, &mut session)?;
            let mut out = Vec::with_capacity(payload.len().min(1 << 16));
            rmpv::encode::write_value(&mut out, &v).map_err(|e| PayloadError::Serialize { message: e.to_string() })?;
            out
        }
        Err(_) => payload.clone(),
    };
    session.finish(message)
}

/// Moves `v`'s inline buffers back to the store where the threshold says.
fn outline(v: &mut rmpv::Value, session: &mut hprm_node::payload::EncodeSession) -> Result<(), PayloadError> {
    use rmpv::Value as V;
    match v {
        V::Array(items) => items.iter_mut().try_for_each(|x| outline(x, session)),
        V::Map(pairs) => pairs.iter_mut().try_for_each(|(_, x)| outline(x, session)),
        V::Ext(ty, data) if matches!(*ty, EXT_BUFFER | EXT_BYTES | EXT_ARROW | EXT_TENSOR) => {
            let d = BufferDescriptor::decode(data)?;
            if d.strides.is_some() {
                return Ok(());
            }
            if let Location::Inline(bytes) = &d.location {
                let mut out = Vec::new();
                if session.write_buffer(&mut out, *ty, &d.dtype, &d.shape, bytes, false)?.is_some() {
                    if let Ok(V::Ext(_, moved)) = rmpv::decode::read_value(&mut &out[..]) {
                        *data = moved;
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Takes and releases what a message to a replay federate references: it
/// stands in for a federate whose own reactions are not run.
fn settle(payload: &[u8], decoder: &Decoder) -> Result<Value, PayloadError> {
    let spilled = decoder.take_spilled(payload)?;
    decoder.take_message(spilled.as_ref().map_or(payload, |o| o.data()))?;
    Ok(Arc::new(()))
}

/// Streams the recorded messages of `outputs` (channel topics; `None`: an
/// output not delivered) in tag order from `file`, within `[from, to]`.
fn stream(file: PathBuf, outputs: Vec<Option<String>>, from: i64, to: Option<i64>) -> Result<Receiver<Due>> {
    let recording = Recording::open(&file)?;
    let (tx, rx) = sync_channel(READ_AHEAD);
    std::thread::Builder::new().name("hprm-replay-read".into()).spawn(move || {
        let result = recording.messages(|topic, tag, data| {
            let Some(output) = outputs.iter().position(|o| o.as_deref() == Some(topic)) else { return true };
            if tag.time < from || to.is_some_and(|t| tag.time > t) {
                return true;
            }
            tx.send(Due { tag, output, payload: data.to_vec() }).is_ok()
        });
        if let Err(e) = result {
            tracing::error!("reading {}: {e:#}", file.display());
        }
    })?;
    Ok(rx)
}

/// A replay reactor's state.
struct Replayer {
    due: Receiver<Due>,
    next: Option<Due>,
    outputs: Vec<Output<Recorded>>,
    stop_at: Option<Tag>,
    start: Option<i64>,
    step: LogicalAction<()>,
}

impl Replayer {
    fn react(&mut self, ctx: &mut hprm_node::Ctx<'_>) {
        let now = ctx.tag();
        let start = *self.start.get_or_insert(now.time);
        let here = Tag::new(now.time - start, now.microstep);
        loop {
            if self.next.is_none() {
                self.next = self.due.recv().ok();
            }
            match &self.next {
                Some(d) if d.tag < here => {
                    tracing::warn!(tag = %d.tag, "a recorded message before the replay's current tag is skipped");
                    self.next = None;
                }
                Some(d) if d.tag == here => {
                    if let Some(d) = self.next.take() {
                        ctx.set(self.outputs[d.output], Recorded(d.payload));
                    }
                }
                _ => break,
            }
        }
        if self.stop_at == Some(here) {
            ctx.request_stop();
            return;
        }
        let target =
            [self.next.as_ref().map(|d| d.tag), self.stop_at].into_iter().flatten().filter(|t| *t > here).min();
        if let Some(t) = target {
            let extra =
                if t.time > here.time { Duration::from_nanos((t.time - here.time) as u64) } else { Duration::ZERO };
            ctx.schedule(self.step, extra, ());
        }
    }
}

/// Runs the replay federate the launcher's environment names.
pub fn federate(args: &FederateArgs) -> Result<i32> {
    let manifest = Manifest::from_env()
        .map_err(|e| anyhow::anyhow!(e))?
        .context("hprm replay-federate runs under `hprm replay` (HPRM_MANIFEST is not set)")?;
    let name = std::env::var("HPRM_FEDERATE").context("HPRM_FEDERATE is not set: run this under `hprm replay`")?;
    let stop_at = match &args.stop_at {
        Some(s) => Some(parse_tag(s).with_context(|| format!("--stop-at {s:?}: expected NS/MICROSTEP"))?),
        None => None,
    };
    let delivered = |topic: &str| args.topics.is_empty() || args.topics.iter().any(|t| names(t, topic));
    let mut failure: Option<anyhow::Error> = None;
    let program = Program::from_manifest(&manifest, &name, |p, fed, spec: &ReactorSpec| {
        let path = |port: &str| format!("{name}.{}.{port}", spec.name);
        let mut r = p.reactor(fed, spec.name.clone(), ());
        let mut outputs: Vec<Output<Recorded>> = Vec::new();
        let mut topics: Vec<String> = Vec::new();
        for d in &spec.outputs {
            match multiport(d) {
                Some((base, w)) => {
                    let m = r.output_multiport_with::<Recorded>(base, w, encode_recorded);
                    for (i, o) in m.channels().iter().enumerate() {
                        outputs.push(*o);
                        topics.push(path(&format!("{base}[{i}]")));
                    }
                }
                None => {
                    let port = port_decl(d).0;
                    outputs.push(r.output_with::<Recorded>(port, encode_recorded));
                    topics.push(path(port));
                }
            }
        }
        for d in &spec.inputs {
            match multiport(d) {
                Some((base, w)) => drop(r.input_multiport_with::<()>(base, w, settle)),
                None => drop(r.input_with::<()>(port_decl(d).0, settle)),
            }
        }
        let startup = r.startup();
        let step = r.logical_action::<()>("replay_step", Duration::ZERO);
        let wanted: Vec<Option<String>> = topics.into_iter().map(|t| delivered(&t).then_some(t)).collect();
        let due = match stream(args.file.clone(), wanted, args.from, args.to) {
            Ok(rx) => rx,
            Err(e) => {
                failure = Some(e);
                sync_channel(0).1
            }
        };
        let mut state = Replayer { due, next: None, outputs: outputs.clone(), stop_at, start: None, step };
        let mut reaction = r.reaction("replay").trigger(startup).trigger(step).effect(step);
        for o in &outputs {
            reaction = reaction.effect(*o);
        }
        reaction.body(move |_, ctx| state.react(ctx));
        Ok(r.id())
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    let mut opts = hprm_node::launch::options_from_env(&program)
        .context("HPRM_FEDERATE is not set: run this under `hprm replay`")?;
    // Its messages are the recording's: never recorded again.
    opts.record = None;
    hprm_node::run_federate(program, opts)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_node::payload::Dtype;
    use rmpv::Value as V;

    fn encode(v: &V) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    fn buffer(bytes: Vec<u8>) -> V {
        let n = bytes.len();
        let d = BufferDescriptor {
            dtype: Dtype::parse("|u1").unwrap(),
            shape: vec![n],
            strides: None,
            nbytes: n as u64,
            location: Location::Inline(bytes),
        };
        V::Ext(EXT_BUFFER, d.encode().unwrap())
    }

    fn value(n: i64, big: Vec<u8>) -> V {
        V::Map(vec![
            (V::from("n"), V::from(n)),
            (V::from("nested"), V::Map(vec![(V::from("list"), V::Array(vec![V::from(1), V::from("x")]))])),
            (V::from("big"), buffer(big)),
        ])
    }

    #[test]
    fn a_difference_is_named_by_its_place_in_the_value() {
        let a = encode(&value(3, vec![1, 2, 3]));
        assert_eq!(
            what_differs(&a, &encode(&value(4, vec![1, 2, 3])), &[]).unwrap(),
            r#"["n"]: recorded 3, replayed 4"#
        );
        assert_eq!(
            what_differs(&a, &encode(&value(3, vec![1, 9, 3])), &[]).unwrap(),
            r#"["big"]: buffer |u1 [3] differs from byte 1 (recorded 0x02, replayed 0x09)"#
        );
        assert_eq!(
            what_differs(&a, &encode(&value(3, vec![1, 2])), &[]).unwrap(),
            r#"["big"]: buffer |u1 [3] recorded, |u1 [2] replayed"#
        );
        let mut other = value(3, vec![1, 2, 3]);
        if let V::Map(m) = &mut other {
            m[1].1 = V::Map(vec![(V::from("list"), V::Array(vec![V::from(1)]))]);
        }
        assert_eq!(
            what_differs(&a, &encode(&other), &[]).unwrap(),
            r#"["nested"]["list"]: 2 items recorded, 1 replayed"#
        );
        let mut other = value(3, vec![1, 2, 3]);
        if let V::Map(m) = &mut other {
            m.pop();
        }
        assert_eq!(
            what_differs(&a, &encode(&other), &[]).unwrap(),
            r#"the value: key ["big"] recorded, not in the replay"#
        );
        // The same value in another encoding (a u8 written as u16).
        // Ignoring a key: equal when only it differs; else the difference elsewhere.
        let ignore = ["n".to_string()];
        assert_eq!(what_differs(&a, &encode(&value(4, vec![1, 2, 3])), &ignore), None);
        assert_eq!(
            what_differs(&a, &encode(&value(4, vec![1, 9, 3])), &ignore).unwrap(),
            r#"["big"]: buffer |u1 [3] differs from byte 1 (recorded 0x02, replayed 0x09)"#
        );
        assert!(what_differs(&[0x05], &[0xcd, 0x00, 0x05], &[])
            .unwrap()
            .starts_with("the values are equal but encoded differently from byte 0"));
    }

    #[test]
    fn tags_in_metadata_read_back() {
        let t = Tag::new(1_795_738_290_400_866_613, 2);
        assert_eq!(parse_tag(&crate::recording::format_tag(t)), Some(t));
        assert_eq!(parse_tag("12"), None);
        assert_eq!(parse_tag("x/1"), None);
    }
}
