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
//! **Rotated shares.** A host that records with `--record-rotate` writes
//! its share as parts (`FILE-0000.mcap`, `FILE-0001.mcap`, ...), each a
//! complete file with its own summary: its own counts and losses, the
//! run's start, and, in each part but the last, `next` (the path of the
//! part that follows); only the last knows each federate's last tag. A
//! rotated share is named as `hprm bag info` and `hprm replay` name one: by
//! the base name given to `--record` or by its first part, the other parts
//! found beside it; every part may also be named (a shell's
//! `share-a-*.mcap`). Its parts are that host's share: their counts and
//! losses summed, the rest as the last part says. Every part from the
//! first to the last must be there, once, or the merge is refused naming
//! each missing part's file (where it belongs, beside the others): a share
//! without one of its parts is not that host's share.
//!
//! **What the merge checks**, refusing with an error that names the file:
//! each input is a complete share, or a complete part of one (a summary;
//! not cut short; not a one-host recording), of a host of its program that
//! runs federates, no host twice (nor a part), every part of a rotated
//! share, every host of [`hosts_recorded`] present (naming each missing
//! one), the same program and the same start. A share whose feeds all
//! failed (no federate reached its recorder: no start) cannot be placed in
//! a run and is refused too.
//!
//! **What it writes**: the schemas, deduplicated (each share has HPRM's
//! own); the channels, one per topic (a topic two shares define otherwise
//! is refused); every message, in tag order (log time, then microstep;
//! ties in the program's host order, then a share's part order, then each
//! file's order, so that per channel the order is the recorded one); the
//! program's graph; the run's metadata without [`RUN_HOST`] nor a part
//! number (the hosts' command lines as `args.HOST`);
//! and one summary: counts and losses per connection summed over the
//! shares, deadline decisions, each federate's last tag, and `complete`
//! only when every share lost nothing and recorded all its federates.
//!
//! **Bounded memory**: a first pass indexes the files' messages (about 40
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

/// One message of an input file, as the index holds it.
#[derive(Clone, Copy)]
struct At {
    log_time: u64,
    sequence: u32,
    /// Its file, by its place in [`Inputs::files`].
    file: u16,
    /// Its place in its file (file order).
    ordinal: u64,
    /// Its chunk (byte offset in the file) and place in that chunk.
    chunk: u64,
    in_chunk: u32,
}

/// One input file, as the first pass read it: a host's share, or one part
/// of a share recorded with `--record-rotate`.
struct File {
    path: PathBuf,
    map: memmap2::Mmap,
    host: String,
    manifest_text: String,
    run: BTreeMap<String, String>,
    summary: BTreeMap<String, String>,
    start: i64,
    /// Its part number (`part` in [`META_RUN`]) when the share was rotated.
    part: Option<u32>,
    schemas: Vec<mcap::Schema<'static>>,
    /// By the file's channel id: topic, schema id, message encoding, metadata.
    channels: BTreeMap<u16, (String, u16, String, BTreeMap<String, String>)>,
}

impl File {
    /// Whether this part's summary says another part follows it: the
    /// recorder writes `next` (the following part's path) in each part it
    /// closes to go on in another, never in the last.
    fn followed(&self) -> bool {
        self.summary.contains_key(NEXT)
    }
}

/// [`META_SUMMARY`] key of a rotated recording's part that is not the last:
/// the next part's path (see `crate::record`).
const NEXT: &str = "next";

/// One host's share: its file, or its rotated parts, every one present.
struct Share {
    host: String,
    /// Its files (by their place in [`Inputs::files`]) in part order.
    files: Vec<usize>,
    /// The share's summary: its parts' counts summed, the rest (what only
    /// the end knows: each federate's last tag, the federates not recorded,
    /// a full disk) as its last part says.
    summary: BTreeMap<String, String>,
}

/// What a merge reads: every file, and the hosts' shares they make, in the
/// program's host order.
struct Inputs {
    files: Vec<File>,
    shares: Vec<Share>,
}

/// Summary keys that count (messages, losses, decisions) and so add up
/// over a share's parts and over the shares.
fn counted(key: &str) -> bool {
    key.starts_with("messages.")
        || key.starts_with("lost.")
        || key.starts_with("decisions.")
        || ["messages", "physical", "lost", "decisions", "decisions_lost"].contains(&key)
}

/// What a merged file holds, for its final line.
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

/// The files `inputs` name, in order: a rotated share named as a whole (by
/// the base name given to `--record`, which itself is not written, or by
/// its first part `FILE-0000.mcap`, as `hprm bag info` and `hprm replay`
/// take one: [`crate::record::parts_of`]) gives every part beside it
/// ([`parts_beside`]); any other path is itself. A part both found so and
/// named itself (a shell's `share-a-*.mcap`) is read once; a file named
/// twice is kept twice, to be refused as given twice.
fn files_named(inputs: &[PathBuf]) -> Vec<PathBuf> {
    let key = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let (mut out, mut found) = (Vec::new(), BTreeSet::new());
    let mut named: BTreeSet<PathBuf> = BTreeSet::new();
    for path in inputs {
        match crate::record::parts_of(path).map(|first| parts_beside(&first[0])) {
            Some(parts) => {
                for p in parts {
                    let k = key(&p);
                    if !named.contains(&k) && found.insert(k) {
                        out.push(p);
                    }
                }
            }
            None => {
                let k = key(path);
                if !found.contains(&k) {
                    named.insert(k);
                    out.push(path.clone());
                }
            }
        }
    }
    out
}

/// Every part of the rotated recording whose first part is `first`
/// (`FILE-0000.mcap`): the files beside it named `FILE-N.mcap`, N of four
/// digits or more, in part order, past any gap (unlike
/// [`crate::record::parts_of`], which stops there), so that a part missing
/// in the middle is named as missing rather than taken for the end.
fn parts_beside(first: &Path) -> Vec<PathBuf> {
    let stem = first.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let Some(base) = stem.strip_suffix("-0000") else { return vec![first.to_path_buf()] };
    let ext = first.extension().map_or(String::new(), |e| format!(".{}", e.to_string_lossy()));
    let dir = first.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(entries) = std::fs::read_dir(dir) else { return vec![first.to_path_buf()] };
    let mut parts: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let n = name.strip_prefix(base)?.strip_prefix('-')?.strip_suffix(ext.as_str())?;
            (n.len() >= 4 && n.bytes().all(|b| b.is_ascii_digit())).then_some(())?;
            Some((n.parse().ok()?, first.with_file_name(&name)))
        })
        .collect();
    parts.sort();
    parts.into_iter().map(|(_, p)| p).collect()
}

/// Reads `path` (pass one): its metadata, schemas, channels, and the index
/// of its messages, appended to `index` as file number `file`.
fn read_file(path: &Path, file: u16, index: &mut Vec<At>) -> Result<File> {
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
                        file,
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
    let part = match run.get("part") {
        Some(p) => {
            Some(p.parse::<u32>().map_err(|_| anyhow::anyhow!("{shown}: its part number {p:?} is not a number"))?)
        }
        None => None,
    };
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
    Ok(File { path: path.to_path_buf(), map, host, manifest_text, run, summary, start, part, schemas, channels })
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

/// Part `n` of the rotated recording whose part `m` is `path`: beside it,
/// named as the recorder names its parts ([`crate::record::part_path`]).
fn part_beside(path: &Path, m: u32, n: u32) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let base = stem.strip_suffix(&format!("-{m:04}")).unwrap_or(&stem).to_string();
    let ext = path.extension().map_or(String::new(), |e| format!(".{}", e.to_string_lossy()));
    crate::record::part_path(&path.with_file_name(format!("{base}{ext}")), n)
}

/// Host `host`'s share made of `files` (indices into `all`): one file, or
/// its rotated parts, every one from the first to the last present (a
/// part that is not the last says so in its summary), each once. Refuses,
/// naming them, a missing part, a part given twice, and a host given both
/// as one file and as parts.
fn share_of(host: &str, mut files: Vec<usize>, all: &[File]) -> Result<Share> {
    let shown = |i: usize| all[i].path.display().to_string();
    if files.len() > 1 && files.iter().any(|&i| all[i].part.is_none()) {
        let names: Vec<String> = files.iter().map(|&i| shown(i)).collect();
        bail!(
            "host {host} is given twice: {} are all its share; give each host's file once (or, recorded with \
             --record-rotate, its parts)",
            names.join(" and ")
        );
    }
    files.sort_by_key(|&i| all[i].part);
    let parts: Vec<u32> = files.iter().filter_map(|&i| all[i].part).collect();
    if !parts.is_empty() {
        for pair in files.windows(2) {
            if all[pair[0]].part == all[pair[1]].part {
                bail!(
                    "host {host}'s part {} is given twice: {} and {}; give each part once",
                    all[pair[0]].part.unwrap_or(0),
                    shown(pair[0]),
                    shown(pair[1])
                );
            }
        }
        // Parts are numbered from 0; the last one's summary has no `next`.
        let (first, last) = (files[0], files[files.len() - 1]);
        let (top, at) = (parts[parts.len() - 1], &all[first]);
        let mut missing: Vec<String> = (0..top)
            .filter(|n| !parts.contains(n))
            .map(|n| part_beside(&at.path, at.part.unwrap_or(0), n).display().to_string())
            .collect();
        if all[last].followed() {
            missing.push(format!(
                "{} (and any after it: {} is not the last part, its summary names the next)",
                part_beside(&all[last].path, top, top + 1).display(),
                shown(last)
            ));
        }
        if !missing.is_empty() {
            bail!(
                "host {host}'s share was recorded with --record-rotate and {} of its parts {} missing: {}; the merge \
                 needs every part, from the first (-0000) to the last (give its first part or its base name and the \
                 others beside it are found)",
                missing.len(),
                if missing.len() > 1 { "are" } else { "is" },
                missing.join(", ")
            );
        }
        if let Some(&early) = files[..files.len() - 1].iter().find(|&&i| !all[i].followed()) {
            bail!(
                "{} says it is the last part of host {host}'s share, but {} follows it: parts of two recordings; \
                 give the parts of one",
                shown(early),
                shown(last)
            );
        }
    }
    // Counts add up over the parts; the rest is what the last part says.
    let mut summary = all[files[files.len() - 1]].summary.clone();
    summary.remove(NEXT);
    for (k, v) in summary.iter_mut().filter(|(k, _)| counted(k)) {
        *v = files.iter().filter_map(|&i| all[i].summary.get(k)?.parse::<u64>().ok()).sum::<u64>().to_string();
    }
    for &i in &files {
        for (k, v) in &all[i].summary {
            if counted(k) && !summary.contains_key(k) {
                summary.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(Share { host: host.to_string(), files, summary })
}

/// Pass one over `inputs`: every file read and indexed, checked to be the
/// shares of one run of one program, each host's there once and whole.
fn read_inputs(inputs: &[PathBuf], index: &mut Vec<At>) -> Result<(Inputs, Manifest)> {
    let paths = files_named(inputs);
    if u16::try_from(paths.len()).is_err() {
        bail!("{} files: too many to merge", paths.len());
    }
    let mut files = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        files.push(read_file(path, i as u16, index)?);
    }
    // One program, one run.
    let first = &files[0];
    let program = program_of(&first.manifest_text, &first.path)?;
    let manifest = Manifest::from_json(&first.manifest_text)
        .map_err(|e| anyhow::anyhow!("{}: its program graph is unreadable: {e}", first.path.display()))?;
    for s in &files[1..] {
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
    // Each host once (its file or its parts), every host there.
    let hosts = hosts_recorded(&manifest);
    let mut by_host: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        by_host.entry(f.host.as_str()).or_default().push(i);
    }
    let missing: Vec<&str> = hosts.iter().map(String::as_str).filter(|h| !by_host.contains_key(h)).collect();
    let mut shares = Vec::new();
    for h in &hosts {
        if let Some(of) = by_host.remove(h.as_str()) {
            shares.push(share_of(h, of, &files)?);
        }
    }
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
    Ok((Inputs { files, shares }, manifest))
}

/// Merges `opts.inputs` into `opts.output` (written beside it first, then
/// renamed: an input is never overwritten while it is read).
pub fn merge(opts: &Options) -> Result<Merged> {
    if opts.inputs.is_empty() {
        bail!("no recording to merge: name each host's share");
    }
    let mut index = Vec::new();
    let (inputs, manifest) = read_inputs(&opts.inputs, &mut index)?;
    let hosts = hosts_recorded(&manifest);
    // Ties in tag go to the program's first host (shares are in its host
    // order), then to a share's earlier part, then to file order: per
    // channel, the order recorded.
    let mut place = vec![(usize::MAX, 0); inputs.files.len()];
    for (rank, s) in inputs.shares.iter().enumerate() {
        for (n, &i) in s.files.iter().enumerate() {
            place[i] = (rank, n);
        }
    }
    index.sort_by_key(|a| (a.log_time, a.sequence, place[a.file as usize], a.ordinal));

    let tmp = opts.output.with_file_name(format!(
        ".{}.merging-{}",
        opts.output.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    let result = write(opts, &tmp, &inputs, &index, &manifest, &hosts);
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
    inputs: &Inputs,
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
    let files = &inputs.files;
    // Schemas by content, channels by topic; ids by (file, the file's id):
    // each part of a rotated share has its own.
    let mut schema_ids: HashMap<(String, String, Vec<u8>), u16> = HashMap::new();
    let mut schema_of: HashMap<(u16, u16), u16> = HashMap::new();
    for (i, s) in files.iter().enumerate() {
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
    for (i, s) in files.iter().enumerate() {
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
        BTreeMap::from([("manifest".to_string(), files[0].manifest_text.clone())]),
    ))
    .with_context(writing)?;
    let mut run = files[0].run.clone();
    run.remove(RUN_HOST);
    run.remove("args");
    run.remove("part");
    for s in &inputs.shares {
        if let Some(args) = files[s.files[0]].run.get("args") {
            run.insert(format!("args.{}", s.host), args.clone());
        }
    }
    run.insert(RUN_HOSTS.to_string(), hosts.join(","));
    // HOST=FILE for each file, a rotated share's parts in order.
    let from =
        inputs.shares.iter().flat_map(|s| s.files.iter().map(|&i| format!("{}={}", s.host, files[i].path.display())));
    run.insert("merged_from".to_string(), from.collect::<Vec<_>>().join(","));
    out.write_metadata(&metadata(META_RUN, run)).with_context(writing)?;

    // How many messages each chunk still has to give: a chunk is opened
    // at its first message and dropped after its last.
    let mut left: HashMap<(u16, u64), u32> = HashMap::new();
    for a in index {
        *left.entry((a.file, a.chunk)).or_default() += 1;
    }
    // The open chunks' messages, each taken when written.
    type Chunk = Vec<Option<(mcap::records::MessageHeader, Vec<u8>)>>;
    let mut open: HashMap<(u16, u64), Chunk> = HashMap::new();
    let (mut written, mut bytes) = (0u64, 0u64);
    for a in index {
        let key = (a.file, a.chunk);
        let share = &files[a.file as usize];
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
        let channel_id = *channel_of.get(&(a.file, header.channel_id)).ok_or_else(|| {
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

    let merged = summary(&inputs.shares, files[0].start, hosts);
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
/// each federate's last tag, the federates not recorded of every host;
/// `start`, the run's.
fn summary(shares: &[Share], start: i64, hosts: &[String]) -> Summary {
    let mut meta = BTreeMap::new();
    let num = |s: &Share, k: &str| s.summary.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let mut sums: BTreeMap<String, u64> = BTreeMap::new();
    let mut not_recorded: BTreeSet<String> = BTreeSet::new();
    let mut disk_full = Vec::new();
    let mut not_whole = Vec::new();
    for s in shares {
        for (k, v) in &s.summary {
            if counted(k) {
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
    meta.insert("start".into(), start.to_string());
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

    /// Summary entries.
    fn kv(entries: &[(&str, &str)]) -> Vec<(String, String)> {
        entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// A message as a share holds it: topic, tag (time, microstep), data.
    type Message<'a> = (&'a str, u64, u32, &'a [u8]);

    struct File<'a> {
        host: Option<&'a str>,
        program: String,
        start: i64,
        messages: Vec<Message<'a>>,
        /// Summary entries besides `start` (None: no summary at all).
        summary: Option<Vec<(String, String)>>,
        /// Its part number, as a rotated recording's part.
        part: Option<u32>,
    }

    impl<'a> File<'a> {
        fn share(host: &'a str, messages: Vec<Message<'a>>) -> File<'a> {
            let last = if host == "a" { "last.source" } else { "last.sink" };
            File {
                host: Some(host),
                program: manifest("span"),
                start: 1000,
                messages,
                summary: Some(kv(&[("federates_not_recorded", ""), ("lost", "0"), (last, "2000/1")])),
                part: None,
            }
        }

        /// Host `host`'s share of `messages` recorded with rotation, cut
        /// before each message of `cuts`: parts `NAME-0000.mcap`, ... in
        /// `dir`, each with the summary the recorder gives it (its own
        /// counts; `next` in all but the last, which alone has the last
        /// tags), as [`File::whole`] gives the same share in one file.
        fn rotated(host: &'a str, messages: &[Message<'a>], cuts: &[usize], dir: &Path, name: &str) -> Vec<PathBuf> {
            let bounds: Vec<usize> = [0].into_iter().chain(cuts.iter().copied()).chain([messages.len()]).collect();
            let base = dir.join(format!("{name}.mcap"));
            let n = bounds.len() - 1;
            (0..n)
                .map(|p| {
                    let mine = messages[bounds[p]..bounds[p + 1]].to_vec();
                    let mut f = File::whole(host, mine);
                    f.part = Some(p as u32);
                    let s = f.summary.as_mut().expect("summary");
                    if p + 1 < n {
                        s.retain(|(k, _)| !k.starts_with(LAST_PREFIX));
                        let next = crate::record::part_path(&base, p as u32 + 1).display().to_string();
                        s.push((NEXT.into(), next));
                    }
                    let path = crate::record::part_path(&base, p as u32);
                    f.write(dir, path.file_name().and_then(|n| n.to_str()).expect("name"))
                })
                .collect()
        }

        /// Host `host`'s share of `messages`, nothing lost, its summary's
        /// counts as the recorder writes them.
        fn whole(host: &'a str, messages: Vec<Message<'a>>) -> File<'a> {
            let mut f = File::share(host, messages);
            let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
            for (topic, ..) in &f.messages {
                *counts.entry(topic).or_default() += 1;
            }
            let s = f.summary.as_mut().expect("summary");
            for (topic, n) in counts {
                s.push((format!("messages.{topic}"), n.to_string()));
            }
            s.push(("messages".into(), f.messages.len().to_string()));
            f
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
            if let Some(p) = self.part {
                run.push(("part".into(), p.to_string()));
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
                kv.extend(summary.iter().cloned());
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
        a.summary = Some(kv(&[
            ("federates_not_recorded", ""),
            ("messages", "3"),
            ("messages.source.s.out", "3"),
            ("physical", "1"),
            ("lost", "2"),
            ("lost.source.s.out", "2"),
            ("decisions", "0"),
            ("last.source", "2000/1"),
        ]));
        let mut b = File::share(
            "b",
            vec![("sink.k.ack", 1100, 1, b"k0"), ("sink.k.ack", 1300, 0, b"k1"), ("shared.x", 1250, 0, b"xb")],
        );
        b.summary = Some(kv(&[
            ("federates_not_recorded", ""),
            ("messages", "2"),
            ("messages.sink.k.ack", "2"),
            ("lost", "1"),
            ("lost.sink.k.ack", "1"),
            ("last.sink", "1900/0"),
        ]));
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
        b.summary = Some(kv(&[("federates_not_recorded", "sink"), ("lost", "0")]));
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
        empty.summary = Some(kv(&[("federates_not_recorded", "sink")]));
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
        (idle.start, idle.summary) = (0, Some(kv(&[("federates_not_recorded", "")])));
        let e = refused(vec![a.clone(), b.clone(), idle.write(d, "c.mcap")]);
        assert!(e.contains("c.mcap is the file of host c, which runs no federate"), "{e}");
        merge_into(d, vec![a, b]).expect("merged");
    }

    /// Host a's messages for the rotation tests: arrival order not tag
    /// order (a physical action's value ahead), ties in tag with host b's.
    fn host_a<'a>() -> Vec<Message<'a>> {
        vec![
            ("physical/source.s.p", 1200, 0, b"p0"),
            ("source.s.out", 1100, 0, b"o0"),
            ("source.s.out", 1300, 0, b"o1"),
            ("shared.x", 1250, 0, b"xa"),
            ("source.s.out", 1300, 2, b"o2"),
            ("source.s.out", 1400, 0, b"o3"),
        ]
    }

    fn host_b<'a>() -> Vec<Message<'a>> {
        vec![("sink.k.ack", 1100, 1, b"k0"), ("shared.x", 1250, 0, b"xb"), ("sink.k.ack", 1300, 0, b"k1")]
    }

    #[test]
    fn rotated_shares_merge_into_what_the_same_shares_unrotated_give() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        // Unrotated, each share in one file.
        let a = File::whole("a", host_a()).write(d, "a.mcap");
        let b = File::whole("b", host_b()).write(d, "b.mcap");
        let once =
            merge(&Options { inputs: vec![a, b], output: d.join("once.mcap"), compression: None }).expect("merged");
        // Host a in three parts (a tie in tag across two of them), host b in two.
        let parts_a = File::rotated("a", &host_a(), &[2, 4], d, "ra");
        let parts_b = File::rotated("b", &host_b(), &[1], d, "rb");
        assert_eq!(parts_a.len(), 3);
        // Each share named by its base name (as --record gave it, never
        // written itself), by its first part, or by every part (a shell's
        // glob, the first part among them): the same merge.
        for inputs in [
            vec![d.join("rb.mcap"), d.join("ra.mcap")],
            vec![parts_a[0].clone(), parts_b[0].clone()],
            [parts_b.clone(), parts_a.clone()].concat(),
            vec![parts_a[2].clone(), parts_a[1].clone(), parts_a[0].clone(), parts_b[1].clone(), parts_b[0].clone()],
        ] {
            let shown = format!("{inputs:?}");
            let m = merge(&Options { inputs, output: d.join("rotated.mcap"), compression: None }).expect(&shown);
            assert_eq!((m.messages, m.complete, &m.lost), (once.messages, true, &once.lost), "{shown}");
            let (schemas, mut topics, messages, meta) = read(&d.join("rotated.mcap"));
            let (want_schemas, mut want_topics, want, want_meta) = read(&d.join("once.mcap"));
            assert_eq!(messages, want, "every message, in tag order, as unrotated: {shown}");
            assert_eq!(messages.len(), 9);
            topics.sort();
            want_topics.sort();
            assert_eq!((schemas, topics), (want_schemas, want_topics), "{shown}");
            assert_eq!(meta[META_SUMMARY], want_meta[META_SUMMARY], "counts summed over the parts: {shown}");
            let summary = &meta[META_SUMMARY];
            assert_eq!((summary["messages"].as_str(), summary["messages.source.s.out"].as_str()), ("9", "4"));
            assert_eq!((summary["last.source"].as_str(), summary["complete"].as_str()), ("2000/1", "true"));
            assert!(!summary.contains_key(NEXT), "{summary:?}");
            let run = &meta[META_RUN];
            assert_eq!((run.get("part"), run.get(RUN_HOST)), (None, None), "{run:?}");
            let from = &run["merged_from"];
            assert!(from.starts_with(&format!("a={},a=", parts_a[0].display())), "{from}");
            assert_eq!(from.matches("a=").count(), 3, "{from}");
        }
    }

    #[test]
    fn a_rotated_share_missing_a_part_or_given_twice_is_refused_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let parts = File::rotated("a", &host_a(), &[2, 4], d, "ra");
        let b = File::whole("b", host_b()).write(d, "b.mcap");
        let refused =
            |inputs: Vec<PathBuf>| match merge(&Options { inputs, output: d.join("w.mcap"), compression: None }) {
                Ok(_) => panic!("merged"),
                Err(e) => format!("{e:#}"),
            };
        // A part in the middle gone (the base name finds the parts beside
        // it, past the gap): named where it belongs.
        let middle = d.join("ra-0001.mcap");
        std::fs::rename(&middle, d.join("away.mcap")).expect("rename");
        let e = refused(vec![d.join("ra.mcap"), b.clone()]);
        assert!(
            e.starts_with(&format!(
                "host a's share was recorded with --record-rotate and 1 of its parts is missing: {}",
                middle.display()
            )),
            "{e}"
        );
        std::fs::rename(d.join("away.mcap"), &middle).expect("rename");
        // The first part, given the later ones.
        let e = refused(vec![parts[1].clone(), parts[2].clone(), b.clone()]);
        assert!(e.contains(&format!("is missing: {};", d.join("ra-0000.mcap").display())), "{e}");
        // The last part gone: the one before it names a next.
        std::fs::rename(&parts[2], d.join("elsewhere.mcap")).expect("rename");
        let e = refused(vec![parts[0].clone(), b.clone()]);
        assert!(
            e.contains(&format!(
                "is missing: {} (and any after it: {} is not the last part",
                parts[2].display(),
                parts[1].display()
            )),
            "{e}"
        );
        std::fs::rename(d.join("elsewhere.mcap"), &parts[2]).expect("rename");
        // A part twice (a copy elsewhere), a host given as one file and as parts.
        let copy = d.join("copy-0001.mcap");
        std::fs::copy(&parts[1], &copy).expect("copy");
        let e = refused(vec![parts[0].clone(), copy.clone(), b.clone()]);
        assert!(
            e.starts_with(&format!("host a's part 1 is given twice: {} and {}", parts[1].display(), copy.display()))
                || e.starts_with(&format!(
                    "host a's part 1 is given twice: {} and {}",
                    copy.display(),
                    parts[1].display()
                )),
            "{e}"
        );
        let whole = File::whole("a", host_a()).write(d, "a.mcap");
        let e = refused(vec![whole, parts[0].clone(), b.clone()]);
        assert!(e.starts_with("host a is given twice: "), "{e}");
        // Parts of two recordings: a last part followed by another.
        let other = File::rotated("a", &host_a(), &[2], d, "two");
        std::fs::rename(&other[1], d.join("rx-0001.mcap")).expect("rename");
        std::fs::copy(&parts[0], d.join("rx-0000.mcap")).expect("copy");
        std::fs::copy(&parts[2], d.join("rx-0002.mcap")).expect("copy");
        let e = refused(vec![d.join("rx.mcap"), b.clone()]);
        assert!(e.contains("rx-0001.mcap says it is the last part of host a's share, but"), "{e}");
        assert!(!d.join("w.mcap").exists(), "nothing written for a refused merge");
        merge(&Options { inputs: vec![d.join("ra.mcap"), b], output: d.join("w.mcap"), compression: None })
            .expect("merged");
    }
}
