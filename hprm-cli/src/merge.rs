//! `hprm bag merge A.mcap B.mcap ... -o WHOLE.mcap`: the recording of a
//! program that spans hosts, made whole from its hosts' shares.
//!
//! # Design
//!
//! Each host of such a program records its own federates, as on one host
//! (`hprm launch --host H --record FILE`, or `hprm recorder --host H` of a
//! deployment): its recorder is a client of that host's store, takes each
//! large value from shared memory there, and its feeds are local sockets.
//! Its file, a *share*, says whose it is: [`RUN_HOST`] (this host) and
//! [`RUN_HOSTS`] (the hosts whose shares make the program whole: those that
//! run federates) in `hprm.run`, and [`FEDERATES_ELSEWHERE`] (the other
//! hosts' federates, which it does not hold) in its summary, which is
//! therefore never `complete`. This module joins the shares into one file
//! that `hprm replay` and `hprm bag` read exactly as a one-host recording.
//!
//! Why join files afterwards rather than stream every host's records to one
//! recorder over the link: the recording then costs nothing between hosts
//! (a camera's frames would otherwise cross the network a second time, to
//! the recorder, beside the program's own pushes; the link is the scarce
//! resource of a robot), each host's recording stays bounded by its own
//! disk and store exactly as on one host (its `block` policy slows only
//! what that host's disk cannot take), and a lost host loses only its own
//! share, never the others' (a remote recorder's backlog would have to be
//! bounded and its losses reported across the very link that failed). The
//! cost is one step after the run: fetching the files to one place and
//! merging them.
//!
//! **Run identity.** Shares of one run are recognised by what every host's
//! share already agrees on without talking to the others: the program (its
//! name and its graph, [`META_PROGRAM`], the same manifest on every host)
//! and the start tag, which the RTI chooses once per run for every federate
//! of every host (each federate's hello tells its recorder; the summary's
//! `start`, in ns since the epoch). Two runs never share a start time, so
//! files of another run, or of another program, are refused naming them.
//!
//! **What the merge checks**, refusing with an error that names the file:
//! each input is a complete share (a summary; not cut short; not a one-host
//! recording nor a rotated part) of a host of its program that runs
//! federates, no host twice, every host of [`hosts_recorded`] present
//! (naming each missing one), the same program and the same start. A share
//! whose feeds all failed (no federate reached its recorder: no start)
//! cannot be placed in a run and is refused too.
//!
//! **What it writes**: the schemas, deduplicated (each share has HPRM's
//! own); the channels, one per topic (a topic two shares define otherwise
//! is refused); every message, in tag order (log time, then microstep;
//! ties in the program's host order, then each file's order, so that per
//! channel the order is the recorded one); the program's graph; the run's
//! metadata without [`RUN_HOST`] (the hosts' command lines as `args.HOST`);
//! and one summary: counts and losses per connection summed over the
//! shares, deadline decisions, each federate's last tag, and `complete`
//! only when every share lost nothing and recorded all its federates.
//!
//! **Bounded memory**: a first pass indexes the shares' messages (about 40
//! bytes each: tag, file, chunk, place in the chunk); the second writes
//! them in tag order, opening each chunk once and keeping it only while
//! messages of it are still to be written. A share is written in arrival
//! order, which follows tag order within the recorder's flush interval, so
//! few chunks are open at once; the bytes of the recording are never held
//! whole.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use hprm_node::manifest::Manifest;
use mcap::records::Record;

use crate::recording::{
    hosts_recorded, scan_located, FEDERATES_ELSEWHERE, LAST_PREFIX, META_PROGRAM, META_RUN, META_SUMMARY, RUN_HOST,
    RUN_HOSTS,
};

/// Target size of the merged file's chunks before compression (the recorder's).
const CHUNK_SIZE: u64 = 4 << 20;

/// `hprm bag merge`'s options.
pub struct Options {
    pub inputs: Vec<PathBuf>,
    pub output: PathBuf,
    pub compression: Option<mcap::Compression>,
}

/// The line a host's launcher (or recorder) prints beside its own: whose
/// share `path` is and how to make the program's recording whole.
pub fn share_note(manifest: &Manifest, host: &str, path: &Path) -> String {
    let hosts = hosts_recorded(manifest);
    let others: Vec<&str> = hosts.iter().map(String::as_str).filter(|h| *h != host).collect();
    format!(
        "{} is host {host}'s share of program {} (hosts {}): merge it with {}'s into the whole recording: \
         hprm bag merge {} OTHER.mcap ... -o WHOLE.mcap",
        path.display(),
        manifest.name,
        hosts.join(", "),
        if others.is_empty() { "the other hosts".to_string() } else { others.join(", ") },
        path.display()
    )
}

/// One message of a share, as the index holds it.
#[derive(Clone, Copy)]
struct At {
    log_time: u64,
    sequence: u32,
    /// The share, in the program's host order.
    share: u16,
    /// Its place in its file (file order).
    ordinal: u64,
    /// Its chunk (byte offset in the file) and place in that chunk.
    chunk: u64,
    in_chunk: u32,
}

/// One host's file, as the first pass read it.
struct Share {
    path: PathBuf,
    map: memmap2::Mmap,
    host: String,
    manifest_text: String,
    run: BTreeMap<String, String>,
    summary: BTreeMap<String, String>,
    start: i64,
    schemas: Vec<mcap::Schema<'static>>,
    /// By the file's channel id: topic, schema id, message encoding, metadata.
    channels: BTreeMap<u16, (String, u16, String, BTreeMap<String, String>)>,
}

/// What the merge wrote, for its final line.
pub struct Merged {
    pub hosts: Vec<String>,
    pub program: String,
    pub messages: u64,
    pub bytes: u64,
    pub lost: Vec<(String, u64)>,
    pub complete: bool,
    /// Why it is not complete, besides losses.
    pub not_whole: Vec<String>,
}

/// `hprm bag merge`: the exit code (0: recorded whole; 1: merged, but
/// something was lost or not recorded, as its summary says).
pub fn run(opts: &Options) -> Result<i32> {
    let m = merge(opts)?;
    let losses = if m.lost.is_empty() {
        "nothing lost".to_string()
    } else {
        let each: Vec<String> = m.lost.iter().map(|(t, n)| format!("{t}: {n}")).collect();
        format!("LOST {} ({})", m.lost.iter().map(|(_, n)| n).sum::<u64>(), each.join(", "))
    };
    eprintln!(
        "hprm: merged the shares of hosts {} of program {} into {}: {} messages ({} bytes), {losses}{}",
        m.hosts.join(", "),
        m.program,
        opts.output.display(),
        m.messages,
        m.bytes,
        if m.complete { "; recorded whole".to_string() } else { format!("; NOT complete: {}", m.not_whole.join("; ")) }
    );
    Ok(i32::from(!m.complete))
}

/// Reads `path` (pass one): its metadata, schemas, channels, and the index
/// of its messages, appended to `index`.
fn read_share(path: &Path, share: u16, index: &mut Vec<At>) -> Result<Share> {
    let map = crate::bag::open(path)?;
    let mut meta: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut schemas = Vec::new();
    let mut channels = BTreeMap::new();
    let (mut ordinal, mut outside, mut in_chunk, mut last_chunk) = (0u64, 0u64, 0u32, None);
    let why = scan_located(&map, |chunk, r| {
        match r {
            Record::Metadata(m) => drop(meta.insert(m.name, m.metadata)),
            Record::Schema { header, data } => schemas.push(mcap::Schema {
                id: header.id,
                name: header.name,
                encoding: header.encoding,
                data: std::borrow::Cow::Owned(data.into_owned()),
            }),
            Record::Channel(c) => {
                channels.insert(c.id, (c.topic, c.schema_id, c.message_encoding, c.metadata));
            }
            Record::Message { header, .. } => match chunk {
                Some(at) => {
                    if last_chunk != Some(at) {
                        (last_chunk, in_chunk) = (Some(at), 0);
                    }
                    index.push(At {
                        log_time: header.log_time,
                        sequence: header.sequence,
                        share,
                        ordinal,
                        chunk: at,
                        in_chunk,
                    });
                    in_chunk += 1;
                    ordinal += 1;
                }
                None => outside += 1,
            },
            _ => {}
        }
        true
    })
    .with_context(|| format!("{} is not a recording", path.display()))?;
    let shown = path.display();
    if let Some(why) = why {
        bail!("{shown} is cut short ({why}): its recorder was stopped before closing it; only a complete share can be merged");
    }
    if outside > 0 {
        bail!("{shown} has {outside} messages outside chunks: it was not written by hprm's recorder");
    }
    let manifest_text = meta.get(META_PROGRAM).and_then(|m| m.get("manifest")).cloned().ok_or_else(|| {
        anyhow::anyhow!("{shown} is an MCAP file but not an HPRM recording (it has no {META_PROGRAM} metadata)")
    })?;
    let run = meta.remove(META_RUN).unwrap_or_default();
    let Some(summary) = meta.remove(META_SUMMARY) else {
        bail!("{shown} has no summary ({META_SUMMARY}): its recorder did not finish it; only a complete share can be merged");
    };
    if let Some(part) = run.get("part") {
        bail!(
            "{shown} is part {part} of a rotated recording (--record-rotate): merge shares recorded without rotation"
        );
    }
    let Some(host) = run.get(RUN_HOST).cloned() else {
        bail!(
            "{shown} is not one host's share of a program that spans hosts (its {META_RUN} names no host): \
             it is a recording of its own, nothing to merge it with"
        );
    };
    let program = Manifest::from_json(&manifest_text)
        .map_err(|e| anyhow::anyhow!("{shown}: its program graph is unreadable: {e}"))?;
    if !program.hosts.iter().any(|h| h.name == host) {
        bail!("{shown}: host {host} is not a host of program {}", program.name);
    }
    if !hosts_recorded(&program).contains(&host) {
        bail!(
            "{shown} is the file of host {host}, which runs no federate of its program: it holds nothing; leave it out"
        );
    }
    let start = summary.get("start").and_then(|s| s.parse::<i64>().ok()).filter(|&s| s != 0).ok_or_else(|| {
        anyhow::anyhow!(
            "{shown} (host {host}'s share) holds no federate's feed (none of its federates reached its recorder: \
             federates not recorded: {}), so which run it belongs to cannot be told",
            summary.get("federates_not_recorded").map_or("?", String::as_str)
        )
    })?;
    Ok(Share { path: path.to_path_buf(), map, host, manifest_text, run, summary, start, schemas, channels })
}

/// The manifest of a share's [`META_PROGRAM`], for comparing programs: its
/// `record` setting left out (each host may record to a path of its own).
fn program_of(text: &str, path: &Path) -> Result<serde_json::Value> {
    let mut v: serde_json::Value = serde_json::from_str(text)
        .with_context(|| format!("{}: its program graph ({META_PROGRAM}) is unreadable", path.display()))?;
    if let Some(o) = v.as_object_mut() {
        o.remove("record");
    }
    Ok(v)
}

/// Merges `opts.inputs` into `opts.output` (written beside it first, then
/// renamed: an input is never overwritten while it is read).
pub fn merge(opts: &Options) -> Result<Merged> {
    if opts.inputs.is_empty() {
        bail!("no recording to merge: name each host's share");
    }
    if u16::try_from(opts.inputs.len()).is_err() {
        bail!("{} files: too many to merge", opts.inputs.len());
    }
    let mut index = Vec::new();
    let mut shares = Vec::new();
    for (i, path) in opts.inputs.iter().enumerate() {
        shares.push(read_share(path, i as u16, &mut index)?);
    }
    // One program, one run, each host once, every host there.
    let first = &shares[0];
    let program = program_of(&first.manifest_text, &first.path)?;
    let manifest = Manifest::from_json(&first.manifest_text)
        .map_err(|e| anyhow::anyhow!("{}: its program graph is unreadable: {e}", first.path.display()))?;
    for s in &shares[1..] {
        if program_of(&s.manifest_text, &s.path)? != program {
            let name = |t: &str| Manifest::from_json(t).map(|m| m.name).unwrap_or_default();
            bail!(
                "{} records another program than {} (program {} vs {}, or the same name with another graph): \
                 merge the shares of one run of one program",
                s.path.display(),
                first.path.display(),
                name(&s.manifest_text),
                manifest.name
            );
        }
        if s.start != first.start {
            bail!(
                "{} is of another run than {} (their runs started at {} and {} ns since the epoch): \
                 merge the shares of one run",
                s.path.display(),
                first.path.display(),
                s.start,
                first.start
            );
        }
    }
    let hosts = hosts_recorded(&manifest);
    let mut seen: BTreeMap<&str, &Path> = BTreeMap::new();
    for s in &shares {
        if let Some(other) = seen.insert(s.host.as_str(), &s.path) {
            bail!(
                "host {} is given twice: {} and {} are both its share; give each host's file once",
                s.host,
                other.display(),
                s.path.display()
            );
        }
    }
    let missing: Vec<&str> = hosts.iter().map(String::as_str).filter(|h| !seen.contains_key(h)).collect();
    if !missing.is_empty() {
        bail!(
            "host{} {}'s share{} missing: program {} runs federates on hosts {}, and its recording is whole only with \
             each one's file (the one `hprm launch --host {} --record` wrote there)",
            if missing.len() > 1 { "s" } else { "" },
            missing.join(", "),
            if missing.len() > 1 { "s are" } else { " is" },
            manifest.name,
            hosts.join(", "),
            missing[0]
        );
    }
    // Shares in the program's host order: ties in tag go to the first host.
    let rank: HashMap<u16, usize> = shares
        .iter()
        .enumerate()
        .map(|(i, s)| (i as u16, manifest.hosts.iter().position(|h| h.name == s.host).unwrap_or(usize::MAX)))
        .collect();
    index.sort_by_key(|a| (a.log_time, a.sequence, rank[&a.share], a.ordinal));

    let tmp = opts.output.with_file_name(format!(
        ".{}.merging-{}",
        opts.output.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    let result = write(opts, &tmp, &shares, &index, &manifest, &hosts);
    match result {
        Ok(m) => {
            std::fs::rename(&tmp, &opts.output)
                .with_context(|| format!("cannot move {} to {}", tmp.display(), opts.output.display()))?;
            Ok(m)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Pass two: writes the merged file at `tmp`.
fn write(
    opts: &Options,
    tmp: &Path,
    shares: &[Share],
    index: &[At],
    manifest: &Manifest,
    hosts: &[String],
) -> Result<Merged> {
    let file = std::fs::File::create(tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let mut out = mcap::WriteOptions::new()
        .compression(opts.compression)
        .chunk_size(Some(CHUNK_SIZE))
        .profile("hprm")
        .library(concat!("hprm ", env!("CARGO_PKG_VERSION")))
        .create(BufWriter::with_capacity(1 << 20, file))
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    let writing = || format!("writing {}", tmp.display());
    // Schemas by content, channels by topic; ids by (share, the file's id).
    let mut schema_ids: HashMap<(String, String, Vec<u8>), u16> = HashMap::new();
    let mut schema_of: HashMap<(u16, u16), u16> = HashMap::new();
    for (i, s) in shares.iter().enumerate() {
        for schema in &s.schemas {
            let key = (schema.name.clone(), schema.encoding.clone(), schema.data.to_vec());
            let id = match schema_ids.get(&key) {
                Some(&id) => id,
                None => {
                    let id = out.add_schema(&schema.name, &schema.encoding, &schema.data).with_context(writing)?;
                    schema_ids.insert(key, id);
                    id
                }
            };
            schema_of.insert((i as u16, schema.id), id);
        }
    }
    type ChannelKey = (u16, String, BTreeMap<String, String>);
    let mut channels: BTreeMap<String, (ChannelKey, u16, &Path)> = BTreeMap::new();
    let mut channel_of: HashMap<(u16, u16), u16> = HashMap::new();
    for (i, s) in shares.iter().enumerate() {
        for (&id, (topic, schema, encoding, meta)) in &s.channels {
            let schema = match *schema {
                0 => 0,
                n => *schema_of.get(&(i as u16, n)).ok_or_else(|| {
                    anyhow::anyhow!("{}: channel {topic} names a schema the file lacks", s.path.display())
                })?,
            };
            let key = (schema, encoding.clone(), meta.clone());
            let new = match channels.get(topic) {
                Some((k, new, _)) if *k == key => *new,
                Some((_, _, other)) => bail!(
                    "{} and {} define channel {topic} otherwise (schema, encoding or metadata): \
                     they are not shares of one program's run",
                    other.display(),
                    s.path.display()
                ),
                None => {
                    let new = out.add_channel(schema, topic, encoding, meta).with_context(writing)?;
                    channels.insert(topic.clone(), (key, new, &s.path));
                    new
                }
            };
            channel_of.insert((i as u16, id), new);
        }
    }
    let metadata = |name: &str, metadata| mcap::records::Metadata { name: name.into(), metadata };
    out.write_metadata(&metadata(
        META_PROGRAM,
        BTreeMap::from([("manifest".to_string(), shares[0].manifest_text.clone())]),
    ))
    .with_context(writing)?;
    let mut run = shares[0].run.clone();
    run.remove(RUN_HOST);
    run.remove("args");
    for s in shares {
        if let Some(args) = s.run.get("args") {
            run.insert(format!("args.{}", s.host), args.clone());
        }
    }
    run.insert(RUN_HOSTS.to_string(), hosts.join(","));
    run.insert(
        "merged_from".to_string(),
        shares.iter().map(|s| format!("{}={}", s.host, s.path.display())).collect::<Vec<_>>().join(","),
    );
    out.write_metadata(&metadata(META_RUN, run)).with_context(writing)?;

    // How many messages each chunk still has to give: a chunk is opened
    // at its first message and dropped after its last.
    let mut left: HashMap<(u16, u64), u32> = HashMap::new();
    for a in index {
        *left.entry((a.share, a.chunk)).or_default() += 1;
    }
    // The open chunks' messages, each taken when written.
    type Chunk = Vec<Option<(mcap::records::MessageHeader, Vec<u8>)>>;
    let mut open: HashMap<(u16, u64), Chunk> = HashMap::new();
    let (mut written, mut bytes) = (0u64, 0u64);
    for a in index {
        let key = (a.share, a.chunk);
        let share = &shares[a.share as usize];
        let chunk = match open.entry(key) {
            std::collections::hash_map::Entry::Occupied(c) => c.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let messages = crate::recording::chunk_messages(&share.map, a.chunk)
                    .with_context(|| format!("reading {} again", share.path.display()))?;
                v.insert(messages.into_iter().map(Some).collect())
            }
        };
        let taken = chunk.get_mut(a.in_chunk as usize).and_then(Option::take);
        let Some((header, data)) = taken else {
            bail!("{}: the chunk at byte {} changed since it was read", share.path.display(), a.chunk);
        };
        let channel_id = *channel_of.get(&(a.share, header.channel_id)).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: a message on channel {} that the file does not define",
                share.path.display(),
                header.channel_id
            )
        })?;
        out.write_to_known_channel(&mcap::records::MessageHeader { channel_id, ..header }, &data)
            .with_context(writing)?;
        written += 1;
        bytes += data.len() as u64;
        if let Some(n) = left.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&key);
            }
        }
    }

    let merged = summary(shares, hosts);
    out.write_metadata(&metadata(META_SUMMARY, merged.meta)).with_context(writing)?;
    out.finish().with_context(writing)?;
    drop(out);
    let lost: Vec<(String, u64)> = merged.lost;
    Ok(Merged {
        hosts: hosts.to_vec(),
        program: manifest.name.clone(),
        messages: written,
        bytes,
        lost,
        complete: merged.complete,
        not_whole: merged.not_whole,
    })
}

/// The merged summary, and what it says.
struct Summary {
    meta: BTreeMap<String, String>,
    lost: Vec<(String, u64)>,
    complete: bool,
    not_whole: Vec<String>,
}

/// The shares' summaries combined: per-topic and total counts summed
/// (each topic is one host's, but a sum holds whatever the shares say),
/// each federate's last tag, the federates not recorded of every host.
fn summary(shares: &[Share], hosts: &[String]) -> Summary {
    let mut meta = BTreeMap::new();
    let num = |s: &Share, k: &str| s.summary.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let mut sums: BTreeMap<String, u64> = BTreeMap::new();
    let mut not_recorded: BTreeSet<String> = BTreeSet::new();
    let mut disk_full = Vec::new();
    let mut not_whole = Vec::new();
    for s in shares {
        for (k, v) in &s.summary {
            let counted = k.starts_with("messages.")
                || k.starts_with("lost.")
                || k.starts_with("decisions.")
                || ["messages", "physical", "lost", "decisions", "decisions_lost"].contains(&k.as_str());
            if counted {
                *sums.entry(k.clone()).or_default() += v.parse::<u64>().unwrap_or(0);
            } else if k.starts_with(LAST_PREFIX) {
                meta.insert(k.clone(), v.clone());
            }
        }
        let missing: Vec<String> = s
            .summary
            .get("federates_not_recorded")
            .map(|m| m.split(',').filter(|f| !f.is_empty()).map(String::from).collect())
            .unwrap_or_default();
        if !missing.is_empty() {
            not_whole.push(format!("host {}'s federates {} were not recorded", s.host, missing.join(", ")));
        }
        not_recorded.extend(missing);
        if let Some(d) = s.summary.get("disk_full") {
            disk_full.push(format!("host {}: {d}", s.host));
            not_whole.push(format!("host {}'s disk filled up", s.host));
        }
        if num(s, "lost") > 0 {
            not_whole.push(format!("host {} lost {}", s.host, num(s, "lost")));
        }
    }
    let lost_total = sums.get("lost").copied().unwrap_or(0);
    let mut lost: Vec<(String, u64)> = sums
        .iter()
        .filter_map(|(k, &n)| Some((k.strip_prefix("lost.")?.to_string(), n)))
        .filter(|(_, n)| *n > 0)
        .collect();
    if let Some(&n) = sums.get("decisions_lost").filter(|&&n| n > 0) {
        lost.push(("deadline decisions".into(), n));
    }
    for (k, n) in sums {
        meta.insert(k, n.to_string());
    }
    meta.insert("start".into(), shares[0].start.to_string());
    meta.insert("federates_not_recorded".into(), not_recorded.into_iter().collect::<Vec<_>>().join(","));
    meta.insert(FEDERATES_ELSEWHERE.into(), String::new());
    meta.insert("hosts".into(), hosts.join(","));
    if !disk_full.is_empty() {
        meta.insert("disk_full".into(), disk_full.join("; "));
    }
    let complete = lost_total == 0 && not_whole.is_empty();
    meta.insert("complete".into(), complete.to_string());
    Summary { meta, lost, complete, not_whole }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Program `name` with a source on host a and a sink on host b (and
    /// host c, which runs nothing).
    fn manifest(name: &str) -> String {
        serde_json::json!({
            "name": name,
            "host": [
                {"name": "a", "address": "10.0.0.1"},
                {"name": "b", "address": "10.0.0.2"},
                {"name": "c", "address": "10.0.0.3"},
            ],
            "federate": [{"name": "source", "host": "a"}, {"name": "sink", "host": "b"}],
        })
        .to_string()
    }

    /// A message as a share holds it: topic, tag (time, microstep), data.
    type Message<'a> = (&'a str, u64, u32, &'a [u8]);

    struct File<'a> {
        host: Option<&'a str>,
        program: String,
        start: i64,
        messages: Vec<Message<'a>>,
        /// Summary entries besides `start` (None: no summary at all).
        summary: Option<Vec<(&'a str, &'a str)>>,
    }

    impl<'a> File<'a> {
        fn share(host: &'a str, messages: Vec<Message<'a>>) -> File<'a> {
            let last = if host == "a" { "last.source" } else { "last.sink" };
            File {
                host: Some(host),
                program: manifest("span"),
                start: 1000,
                messages,
                summary: Some(vec![("federates_not_recorded", ""), ("lost", "0"), (last, "2000/1")]),
            }
        }

        /// Writes it as the recorder does (chunks of 64 bytes, so that
        /// each holds a message or two), into `dir/NAME`.
        fn write(&self, dir: &Path, name: &str) -> PathBuf {
            let path = dir.join(name);
            let file = std::fs::File::create(&path).expect("create");
            let mut w = mcap::WriteOptions::new()
                .compression(Some(mcap::Compression::Zstd))
                .chunk_size(Some(64))
                .profile("hprm")
                .create(BufWriter::new(file))
                .expect("writer");
            let schema = w.add_schema("hprm.value", "hprm-msgpack", b"how to decode").expect("schema");
            let meta = |name: &str, kv: Vec<(String, String)>| mcap::records::Metadata {
                name: name.into(),
                metadata: kv.into_iter().collect(),
            };
            w.write_metadata(&meta(META_PROGRAM, vec![("manifest".into(), self.program.clone())])).expect("meta");
            let mut run = vec![("program".to_string(), "span".to_string()), ("args".into(), format!("hprm {name}"))];
            if let Some(h) = self.host {
                run.extend([(RUN_HOST.to_string(), h.to_string()), (RUN_HOSTS.to_string(), "a,b".to_string())]);
            }
            w.write_metadata(&meta(META_RUN, run)).expect("meta");
            let mut ids = HashMap::new();
            for (topic, time, microstep, data) in &self.messages {
                let id = *ids.entry(topic.to_string()).or_insert_with(|| {
                    let f = BTreeMap::from([("federate".to_string(), topic.split('.').next().unwrap().to_string())]);
                    w.add_channel(schema, topic, "msgpack", &f).expect("channel")
                });
                let header = mcap::records::MessageHeader {
                    channel_id: id,
                    sequence: *microstep,
                    log_time: *time,
                    publish_time: *time + 7,
                };
                w.write_to_known_channel(&header, data).expect("message");
            }
            if let Some(summary) = &self.summary {
                let mut kv: Vec<(String, String)> = vec![("start".into(), self.start.to_string())];
                kv.extend(summary.iter().map(|(k, v)| (k.to_string(), v.to_string())));
                w.write_metadata(&meta(META_SUMMARY, kv)).expect("summary");
            }
            w.finish().expect("finish");
            path
        }
    }

    /// What a merged file holds: schemas' names, channels' topics, the
    /// messages (topic, time, microstep, publish time, data) in file
    /// order, and its metadata.
    #[allow(clippy::type_complexity)]
    fn read(
        path: &Path,
    ) -> (Vec<String>, Vec<String>, Vec<(String, u64, u32, u64, Vec<u8>)>, BTreeMap<String, BTreeMap<String, String>>)
    {
        let buf = std::fs::read(path).expect("read");
        // mcap repeats a schema and a channel in each chunk that uses it: by id.
        let (mut schemas, mut topics, mut messages, mut meta) =
            (BTreeMap::new(), BTreeMap::new(), vec![], BTreeMap::new());
        let why = crate::recording::scan(&buf, |r| {
            match r {
                Record::Schema { header, .. } => drop(schemas.insert(header.id, header.name)),
                Record::Channel(c) => drop(topics.insert(c.id, c.topic)),
                Record::Message { header, data } => messages.push((
                    topics[&header.channel_id].clone(),
                    header.log_time,
                    header.sequence,
                    header.publish_time,
                    data.to_vec(),
                )),
                Record::Metadata(m) => drop(meta.insert(m.name, m.metadata)),
                _ => {}
            }
            true
        })
        .expect("an MCAP file");
        assert_eq!(why, None, "the merged file is complete");
        (schemas.into_values().collect(), topics.into_values().collect(), messages, meta)
    }

    fn merge_into(dir: &Path, inputs: Vec<PathBuf>) -> Result<Merged> {
        merge(&Options { inputs, output: dir.join("whole.mcap"), compression: Some(mcap::Compression::Lz4) })
    }

    #[test]
    fn shares_merge_in_tag_order_with_schemas_and_channels_once_and_their_summaries_summed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = File::share(
            "a",
            vec![
                // Arrival order: the physical action's value (tag 1200) before
                // the output at 1100, as a sensor thread schedules ahead.
                ("physical/source.s.p", 1200, 0, b"p0"),
                ("source.s.out", 1100, 0, b"o0"),
                ("source.s.out", 1300, 0, b"o1"),
                ("shared.x", 1250, 0, b"xa"),
                ("source.s.out", 1300, 2, b"o2"),
            ],
        );
        a.summary = Some(vec![
            ("federates_not_recorded", ""),
            ("messages", "3"),
            ("messages.source.s.out", "3"),
            ("physical", "1"),
            ("lost", "2"),
            ("lost.source.s.out", "2"),
            ("decisions", "0"),
            ("last.source", "2000/1"),
        ]);
        let mut b = File::share(
            "b",
            vec![("sink.k.ack", 1100, 1, b"k0"), ("sink.k.ack", 1300, 0, b"k1"), ("shared.x", 1250, 0, b"xb")],
        );
        b.summary = Some(vec![
            ("federates_not_recorded", ""),
            ("messages", "2"),
            ("messages.sink.k.ack", "2"),
            ("lost", "1"),
            ("lost.sink.k.ack", "1"),
            ("last.sink", "1900/0"),
        ]);
        // Given in either order, host a's messages come first at a tag both have.
        let paths = vec![b.write(dir.path(), "b.mcap"), a.write(dir.path(), "a.mcap")];
        let m = merge_into(dir.path(), paths).expect("merged");
        assert_eq!((m.messages, m.complete), (8, false));
        assert_eq!(m.lost, vec![("sink.k.ack".to_string(), 1), ("source.s.out".to_string(), 2)]);
        let (schemas, mut topics, messages, meta) = read(&dir.path().join("whole.mcap"));
        assert_eq!(schemas, vec!["hprm.value"], "one schema for both shares");
        topics.sort();
        assert_eq!(
            topics,
            vec!["physical/source.s.p", "shared.x", "sink.k.ack", "source.s.out"],
            "one channel per topic"
        );
        let order: Vec<(&str, u64, u32, &[u8])> =
            messages.iter().map(|(t, time, seq, _, d)| (t.as_str(), *time, *seq, d.as_slice())).collect();
        assert_eq!(
            order,
            vec![
                ("source.s.out", 1100, 0, &b"o0"[..]),
                ("sink.k.ack", 1100, 1, b"k0"),
                ("physical/source.s.p", 1200, 0, b"p0"),
                ("shared.x", 1250, 0, b"xa"),
                ("shared.x", 1250, 0, b"xb"),
                ("source.s.out", 1300, 0, b"o1"),
                ("sink.k.ack", 1300, 0, b"k1"),
                ("source.s.out", 1300, 2, b"o2"),
            ]
        );
        assert!(messages.iter().all(|(_, time, _, publish, _)| *publish == time + 7), "publish times kept");
        let summary = &meta[META_SUMMARY];
        let get = |k: &str| summary.get(k).map(String::as_str);
        assert_eq!(get("start"), Some("1000"));
        assert_eq!((get("messages"), get("physical"), get("lost")), (Some("5"), Some("1"), Some("3")));
        assert_eq!((get("lost.source.s.out"), get("lost.sink.k.ack")), (Some("2"), Some("1")));
        assert_eq!((get("last.source"), get("last.sink")), (Some("2000/1"), Some("1900/0")));
        assert_eq!((get("complete"), get("federates_not_recorded")), (Some("false"), Some("")));
        let run = &meta[META_RUN];
        assert_eq!(run.get(RUN_HOST), None, "the merged file is no host's share");
        assert_eq!(run.get(RUN_HOSTS).map(String::as_str), Some("a,b"));
        assert_eq!(run.get("args.a").map(String::as_str), Some("hprm a.mcap"));
        assert_eq!(meta[META_PROGRAM]["manifest"], manifest("span"));
    }

    #[test]
    fn shares_that_lost_nothing_merge_into_a_complete_recording() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = File::share("a", vec![("source.s.out", 1100, 0, b"o0")]).write(dir.path(), "a.mcap");
        let b = File::share("b", vec![("sink.k.ack", 1100, 1, b"k0")]).write(dir.path(), "b.mcap");
        let m = merge_into(dir.path(), vec![a, b]).expect("merged");
        assert!(m.complete && m.lost.is_empty() && m.not_whole.is_empty());
        let (_, _, messages, meta) = read(&dir.path().join("whole.mcap"));
        assert_eq!(messages.len(), 2);
        assert_eq!(meta[META_SUMMARY]["complete"], "true");
        // A federate that never reached its host's recorder: merged, not complete, saying whose.
        let mut b = File::share("b", vec![]);
        b.summary = Some(vec![("federates_not_recorded", "sink"), ("lost", "0")]);
        let b = b.write(dir.path(), "b2.mcap");
        let a = dir.path().join("a.mcap");
        let m = merge_into(dir.path(), vec![a, b]).expect("merged");
        assert!(!m.complete);
        assert_eq!(m.not_whole, vec!["host b's federates sink were not recorded"]);
    }

    #[test]
    fn what_is_not_the_shares_of_one_run_is_refused_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let a = File::share("a", vec![("source.s.out", 1100, 0, b"o0")]).write(d, "a.mcap");
        let b = File::share("b", vec![("sink.k.ack", 1100, 1, b"k0")]).write(d, "b.mcap");
        let refused = |inputs: Vec<PathBuf>| match merge_into(d, inputs) {
            Ok(_) => panic!("merged"),
            Err(e) => format!("{e:#}"),
        };
        let e = refused(vec![a.clone()]);
        assert!(e.starts_with("host b's share is missing: program span runs federates on hosts a, b"), "{e}");
        assert!(e.contains("hprm launch --host b --record"), "{e}");
        let e = refused(vec![a.clone(), b.clone(), a.clone()]);
        assert!(e.starts_with("host a is given twice: "), "{e}");
        let mut other = File::share("b", vec![]);
        other.program = manifest("other");
        let other = other.write(d, "other.mcap");
        let e = refused(vec![a.clone(), other.clone()]);
        assert!(e.contains("other.mcap records another program than") && e.contains("program other vs span"), "{e}");
        let mut later = File::share("b", vec![]);
        later.start = 5000;
        let later = later.write(d, "later.mcap");
        let e = refused(vec![a.clone(), later]);
        assert!(e.contains("later.mcap is of another run than") && e.contains("started at 5000 and 1000"), "{e}");
        let mut unsummed = File::share("b", vec![]);
        unsummed.summary = None;
        let e = refused(vec![a.clone(), unsummed.write(d, "unsummed.mcap")]);
        assert!(e.contains("unsummed.mcap has no summary"), "{e}");
        let mut whole = File::share("a", vec![]);
        whole.host = None;
        let e = refused(vec![whole.write(d, "one-host.mcap"), b.clone()]);
        assert!(e.contains("one-host.mcap is not one host's share"), "{e}");
        let mut empty = File::share("b", vec![]);
        empty.start = 0;
        empty.summary = Some(vec![("federates_not_recorded", "sink")]);
        let e = refused(vec![a.clone(), empty.write(d, "empty.mcap")]);
        assert!(e.contains("holds no federate's feed") && e.contains("federates not recorded: sink"), "{e}");
        // Cut short: its writer killed after the first chunks (no summary, no footer).
        let bytes = std::fs::read(&a).expect("read");
        let cut = d.join("cut.mcap");
        std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).expect("write");
        let e = refused(vec![cut, b.clone()]);
        assert!(e.contains("cut.mcap is cut short (") || e.contains("cut.mcap has no summary"), "{e}");
        // A host the program does not have.
        let mut stranger = File::share("b", vec![]);
        stranger.host = Some("z");
        let e = refused(vec![a.clone(), b.clone(), stranger.write(d, "z.mcap")]);
        assert!(e.contains("host z is not a host of program span"), "{e}");
        assert!(!d.join("whole.mcap").exists(), "nothing written for a refused merge");
        // Host c runs no federate: its file holds nothing, and none is asked for.
        let mut idle = File::share("c", vec![]);
        (idle.start, idle.summary) = (0, Some(vec![("federates_not_recorded", "")]));
        let e = refused(vec![a.clone(), b.clone(), idle.write(d, "c.mcap")]);
        assert!(e.contains("c.mcap is the file of host c, which runs no federate"), "{e}");
        merge_into(d, vec![a, b]).expect("merged");
    }
}
