//! `hprm bag info|echo FILE`: what a recording (`hprm launch --record`,
//! see `record`) holds.
//!
//! Both read the file from start to end, chunk by chunk, so that a file
//! whose writer was killed (no summary at its end) is read up to its last
//! complete chunk, and said to end early. A rotated recording
//! (`--record-rotate`) named as a whole, by the base name given to
//! `--record` or by its first part, is read part after part as one
//! ([`open_parts`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand};
use mcap::records::Record;

use crate::record::names;
use crate::recording::{decode_decision, scan, DECISIONS_PREFIX, META_RUN, META_SUMMARY, PHYSICAL_PREFIX};

#[derive(Args, Debug)]
pub struct BagArgs {
    #[command(subcommand)]
    pub command: BagCommand,
}

#[derive(Subcommand, Debug)]
pub enum BagCommand {
    /// Duration, connections, message counts, rates, sizes and losses.
    Info { file: PathBuf },
    /// Print each recorded message of one connection: its tag and value.
    Echo {
        file: PathBuf,
        /// The output: FEDERATE.PORT or FEDERATE.REACTOR.PORT.
        topic: String,
        /// Stop after this many messages.
        #[arg(long, short = 'n', value_name = "N")]
        count: Option<u64>,
    },
    /// Join the shares of a program that spans hosts (each host's
    /// `hprm launch --host H --record FILE`) into its whole recording.
    Merge {
        /// Each host's share, once; a share recorded with --record-rotate by
        /// its base name or its first part (the other parts are found beside
        /// it), or by every part.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The whole recording to write.
        #[arg(short, long, value_name = "WHOLE.mcap")]
        output: PathBuf,
        /// Compression of its chunks (default zstd).
        #[arg(long, value_enum)]
        compression: Option<crate::CompressionArg>,
    },
}

pub fn run(args: &BagArgs) -> Result<i32> {
    match &args.command {
        BagCommand::Info { file } => info(file),
        BagCommand::Echo { file, topic, count } => echo(file, topic, *count),
        BagCommand::Merge { files, output, compression } => crate::merge::run(&crate::merge::Options {
            inputs: files.clone(),
            output: output.clone(),
            compression: match compression.unwrap_or(crate::CompressionArg::Zstd) {
                crate::CompressionArg::Zstd => Some(mcap::Compression::Zstd),
                crate::CompressionArg::Lz4 => Some(mcap::Compression::Lz4),
                crate::CompressionArg::None => None,
            },
        }),
    }
}

/// The files of the recording `path` names, each mapped, in order: the
/// parts of a rotated recording named as a whole
/// ([`crate::record::parts_of`]), else `path` alone.
pub(crate) fn open_parts(path: &Path) -> Result<Vec<(PathBuf, memmap2::Mmap)>> {
    let paths = crate::record::parts_of(path).unwrap_or_else(|| vec![path.to_path_buf()]);
    paths.into_iter().map(|p| open(&p).map(|m| (p, m))).collect()
}

/// The file, mapped.
pub(crate) fn open(path: &Path) -> Result<memmap2::Mmap> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open the recording {}", path.display()))?;
    // SAFETY: read-only; a recording being written concurrently is read up
    // to what the reader validates (chunk CRCs).
    unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("cannot map {}", path.display()))
}

#[derive(Default)]
struct Channel {
    topic: String,
    messages: u64,
    bytes: u64,
    first: Option<u64>,
    last: u64,
    /// On a deadline decisions channel: the decisions that missed.
    missed: u64,
    /// On a Foxglove view or a foreign channel: its schema and the channel it shows.
    of: String,
    /// A physical action's values in another system's encoding (a ROS 2
    /// topic's CDR messages, `record::Foreign`): its message encoding.
    foreign: Option<String>,
}

impl Channel {
    fn decisions(&self) -> bool {
        self.topic.starts_with(DECISIONS_PREFIX)
    }

    fn physical(&self) -> bool {
        self.topic.starts_with(PHYSICAL_PREFIX)
    }

    /// A Foxglove view of another channel's values ([`crate::foxglove`]).
    fn view(&self) -> bool {
        self.topic.starts_with(crate::foxglove::PREFIX)
    }

    fn foreign(&self) -> bool {
        self.foreign.is_some()
    }
}

fn info(path: &Path) -> Result<i32> {
    let parts = open_parts(path)?;
    // By topic: a channel's id is its part's own.
    let mut channels: BTreeMap<String, Channel> = BTreeMap::new();
    let mut run: Option<BTreeMap<String, String>> = None;
    // Each part's summary (none when it has none), and why one ended early.
    let mut summaries: Vec<Option<BTreeMap<String, String>>> = Vec::new();
    let mut ended = None;
    for (file, buf) in &parts {
        let mut ids: BTreeMap<u16, String> = BTreeMap::new();
        let mut schemas: BTreeMap<u16, String> = BTreeMap::new();
        let mut summary = None;
        let why = scan(buf, |r| {
            match r {
                Record::Channel(c) => {
                    let entry = channels.entry(c.topic.clone()).or_default();
                    entry.topic = c.topic.clone();
                    if let Some(of) = c.metadata.get("view_of") {
                        let schema = schemas.get(&c.schema_id).map_or("", String::as_str);
                        entry.of = format!("{schema} of {of}");
                        if !c.topic.starts_with(crate::foxglove::PREFIX) {
                            entry.foreign = Some(c.message_encoding.clone());
                        }
                    }
                    ids.insert(c.id, c.topic);
                }
                Record::Message { header, data } => {
                    let Some(c) = ids.get(&header.channel_id).and_then(|t| channels.get_mut(t)) else { return true };
                    c.messages += 1;
                    c.bytes += data.len() as u64;
                    c.first = Some(c.first.map_or(header.log_time, |f| f.min(header.log_time)));
                    c.last = c.last.max(header.log_time);
                    if c.decisions() && decode_decision(&data).is_some_and(|(_, missed)| missed) {
                        c.missed += 1;
                    }
                }
                Record::Schema { header, .. } => {
                    schemas.insert(header.id, header.name);
                }
                Record::Metadata(m) if m.name == META_RUN => {
                    run.get_or_insert(m.metadata);
                }
                Record::Metadata(m) if m.name == META_SUMMARY => summary = Some(m.metadata),
                _ => {}
            }
            true
        })?;
        summaries.push(summary);
        if let Some(why) = why {
            ended.get_or_insert(if parts.len() > 1 { format!("{}: {why}", file.display()) } else { why });
        }
    }
    let run = run.unwrap_or_default();
    // One summary for the whole: the last part's (what only the end knows),
    // with the losses of every part added up.
    let summary = match summaries.iter().map(Option::as_ref).collect::<Option<Vec<_>>>() {
        Some(all) if !all.is_empty() => {
            let mut whole = all[all.len() - 1].clone();
            for (k, v) in whole.iter_mut().filter(|(k, _)| *k == "lost" || k.starts_with("lost.")) {
                *v = all.iter().filter_map(|s| s.get(k)?.parse::<u64>().ok()).sum::<u64>().to_string();
            }
            Some(whole)
        }
        _ => None,
    };
    let summary = summary.as_ref();
    let size: u64 = parts.iter().map(|(_, b)| b.len() as u64).sum();
    let field = |m: &BTreeMap<String, String>, k: &str| m.get(k).cloned().unwrap_or_else(|| "-".into());
    match parts.as_slice() {
        [(file, _)] => println!("file:        {} ({size} bytes)", file.display()),
        [(first, _), .., (last, _)] => {
            println!("files:       {} parts, {} to {} ({size} bytes)", parts.len(), first.display(), last.display())
        }
        [] => {}
    }
    println!("program:     {}", field(&run, "program"));
    println!("coordination: {}  policy: {}", field(&run, "coordination"), field(&run, "policy"));
    // A program that spans hosts: one host's share, or the shares merged.
    match (run.get(crate::recording::RUN_HOST), run.get(crate::recording::RUN_HOSTS)) {
        (Some(host), hosts) => println!(
            "hosts:       host {host}'s share of hosts {} (its federates only; hprm bag merge joins the shares)",
            hosts.map_or("?".to_string(), |h| h.replace(',', ", "))
        ),
        (None, Some(hosts)) => println!("hosts:       {}, merged into one recording", hosts.replace(',', ", ")),
        (None, None) => {}
    }
    // Deadline decisions are not messages between federates: listed apart.
    let (decisions, channels): (Vec<Channel>, Vec<Channel>) = channels.into_values().partition(Channel::decisions);
    // So are physical action values: the program's input from the world.
    let (physical, channels): (Vec<Channel>, Vec<Channel>) = channels.into_iter().partition(Channel::physical);
    // And the Foxglove views, which repeat values of the channels above.
    let (views, channels): (Vec<Channel>, Vec<Channel>) = channels.into_iter().partition(Channel::view);
    // And the physical action values written again in another system's encoding (ROS 2 topics).
    let (foreign, channels): (Vec<Channel>, Vec<Channel>) = channels.into_iter().partition(Channel::foreign);
    let first = channels.iter().filter_map(|c| c.first).min();
    let last = channels.iter().map(|c| c.last).max();
    let duration = match (first, last) {
        (Some(f), Some(l)) => (l - f) as f64 / 1e9,
        _ => 0.0,
    };
    let start: i64 = summary.and_then(|s| s.get("start")).and_then(|s| s.parse().ok()).unwrap_or(0);
    let since =
        |t: Option<u64>| t.map_or("-".into(), |t| format!("{:.6} s", (t as i64).saturating_sub(start) as f64 / 1e9));
    println!("duration:    {duration:.6} s of logical time (tags {} to {})", since(first), since(last));
    let total: u64 = channels.iter().map(|c| c.messages).sum();
    let bytes: u64 = channels.iter().map(|c| c.bytes).sum();
    println!("messages:    {total} ({bytes} bytes)");
    if !physical.is_empty() {
        let n: u64 = physical.iter().map(|c| c.messages).sum();
        let bytes: u64 = physical.iter().map(|c| c.bytes).sum();
        println!("physical:    {n} physical action values ({bytes} bytes), fed to replayed federates as recorded");
    }
    if !decisions.is_empty() {
        let n: u64 = decisions.iter().map(|c| c.messages).sum();
        let missed: u64 = decisions.iter().map(|c| c.missed).sum();
        println!("decisions:   {n} deadline decisions ({missed} missed), replayed as recorded");
    }
    match (summary, &ended) {
        (_, Some(why)) => println!(
            "losses:      unknown: the file ends early ({why}); the recorder was stopped before closing it, \
             and what it held after its last complete chunk is not here"
        ),
        (None, None) => println!("losses:      unknown: the recording has no summary"),
        (Some(s), None) => {
            let lost = field(s, "lost");
            let missing = field(s, "federates_not_recorded");
            if lost == "0" && missing.is_empty() {
                println!("losses:      none (every message sent was recorded)");
            } else {
                println!("losses:      {lost} messages lost");
                if !missing.is_empty() {
                    println!("             federates not recorded: {missing}");
                }
            }
        }
    }
    for (title, list) in [
        ("connections:", &channels),
        ("physical actions:", &physical),
        ("foxglove views:", &views),
        ("ros 2 topics (as the bridge received them):", &foreign),
    ] {
        if list.is_empty() && title != "connections:" {
            continue;
        }
        println!("{title}");
        let width = list.iter().map(|c| c.topic.len()).max().unwrap_or(0);
        for c in list {
            let span = c.first.map_or(0.0, |f| (c.last - f) as f64 / 1e9);
            let rate = if span > 0.0 { format!("{:.3} msg/s", (c.messages - 1) as f64 / span) } else { "-".into() };
            let lost = summary.and_then(|s| s.get(&format!("lost.{}", c.topic))).cloned().unwrap_or_else(|| "?".into());
            // A view's losses are its channel's.
            let lost = match &c.foreign {
                Some(encoding) => format!("({encoding} {})", c.of),
                None if c.view() => format!("({})", c.of),
                None => format!("lost {lost}"),
            };
            println!("  {:width$}  {:>8} messages  {:>12} bytes  {rate:>16}  {lost}", c.topic, c.messages, c.bytes);
        }
    }
    if !decisions.is_empty() {
        println!("deadline decisions:");
        let width = decisions.iter().map(|c| c.topic.len()).max().unwrap_or(0);
        for c in &decisions {
            println!("  {:width$}  {:>8} decisions  {:>8} missed", c.topic, c.messages, c.missed);
        }
    }
    Ok(0)
}

fn echo(path: &Path, topic: &str, count: Option<u64>) -> Result<i32> {
    let parts = open_parts(path)?;
    let mut known: Vec<String> = Vec::new();
    let mut start: Option<i64> = None;
    // The start is in the summary at the end (of every part): read it first.
    scan(&parts[0].1, |r| {
        if let Record::Metadata(m) = r {
            if m.name == META_SUMMARY {
                start = m.metadata.get("start").and_then(|s| s.parse().ok());
            }
        }
        true
    })?;
    let start = start.unwrap_or(0);
    let mut n = 0u64;
    let mut found = false;
    let mut ended = None;
    for (_, buf) in &parts {
        // A channel's id is its part's own.
        let mut ids: Vec<u16> = Vec::new();
        // Those of Foxglove views (protobuf, not HPRM values), and of
        // another system's messages (ROS 2's CDR): their encoding.
        let mut views: Vec<(u16, String)> = Vec::new();
        let mut done = false;
        ended = scan(buf, |r| {
            match r {
                Record::Channel(c) => {
                    if names(topic, &c.topic) {
                        ids.push(c.id);
                        if c.topic.starts_with(crate::foxglove::PREFIX) || c.metadata.contains_key("view_of") {
                            views.push((c.id, c.message_encoding.clone()));
                        }
                        found = true;
                    }
                    if !known.contains(&c.topic) {
                        known.push(c.topic);
                    }
                }
                Record::Message { header, data } if ids.contains(&header.channel_id) => {
                    println!(
                        "--- tag {}/{}",
                        crate::topic::seconds((header.log_time as i64).saturating_sub(start)),
                        header.sequence
                    );
                    match views.iter().find(|(id, _)| *id == header.channel_id) {
                        Some((_, e)) if e == crate::foxglove::ENCODING => {
                            println!("a Foxglove view (protobuf, {} bytes): open the file in Foxglove", data.len())
                        }
                        Some((_, e)) => println!(
                            "a message in {e} ({} bytes), as its system sent it: read it with that system's tools \
                             (ROS 2's CDR: mcap-ros2-support, Foxglove)",
                            data.len()
                        ),
                        None => println!("{}", crate::topic::render(&data)),
                    }
                    n += 1;
                    if count.is_some_and(|c| n >= c) {
                        done = true;
                        return false;
                    }
                }
                _ => {}
            }
            true
        })?;
        if done || ended.is_some() {
            break;
        }
    }
    if !found {
        bail!("the recording has no connection {topic:?}; it has: {}", known.join(", "));
    }
    if let Some(why) = ended {
        eprintln!("the file ends early ({why}): the recorder was stopped before closing it");
    }
    eprintln!("{n} messages");
    Ok(0)
}
