//! Execution traces in Chrome's trace event format (opens in
//! ui.perfetto.dev): every reaction, the grants a federate receives and
//! the NET/LTC it sends, and its store transfers.
//!
//! Tracing is on in a federate process whose environment has
//! `HPRM_TRACE=DIR` (a launcher's `--trace FILE` sets it); the federate
//! then writes `DIR/<federate>.json` when it ends. [`merge`] joins those
//! parts and the RTI's (`hprm-rti --trace FILE`) into one file.
//!
//! Invariants: recording never does I/O and never allocates beyond the
//! buffer reserved up front (until that fills; then it grows like any
//! `Vec`); with tracing off, a recording point costs one load and branch
//! (`tracer`). One process traces one federate: the recorder is global
//! because the payload codec, which has no federate handle, records too.
//!
//! Timestamps are the system clock (ns since the Unix epoch), the clock
//! every process of a host shares, so parts from different processes line
//! up. A part stores `ts` in µs relative to its own `hprm_epoch_ns`
//! (`otherData`), which keeps µs fractions exact in an f64; [`merge`]
//! rebases all parts onto the earliest epoch. A federate on another host
//! whose clock synchronization measured an offset to the RTI's host writes
//! its epoch on that host's clock (its own epoch plus the offset, as its
//! physical time is), so that parts from several hosts line up too; the
//! offset is the one measured last (a trace spans seconds, drift within it
//! is below the sync's own error).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hprm_rti::tag::Tag;
use hprm_store::ObjectId;

use crate::clock::system_now;
use crate::sync::Mutex;

/// The environment variable naming the directory for trace parts.
pub const TRACE_ENV: &str = "HPRM_TRACE";

/// Events reserved up front (about 4 MiB): a few seconds of a busy federate.
const RESERVED: usize = 1 << 16;

static TRACER: OnceLock<Option<Tracer>> = OnceLock::new();

/// The recorder, when tracing is on in this process.
#[inline]
pub(crate) fn tracer() -> Option<&'static Tracer> {
    TRACER.get().and_then(Option::as_ref)
}

/// Turns tracing on for `federate` when `HPRM_TRACE` names a directory.
/// Only the first call of a process counts.
pub(crate) fn init_from_env(federate: &str) {
    TRACER.get_or_init(|| {
        let dir = std::env::var_os(TRACE_ENV).filter(|d| !d.is_empty())?;
        Some(Tracer::new(PathBuf::from(dir), federate))
    });
}

#[derive(Clone, Copy)]
enum Kind {
    /// A reaction ran (index into `names`).
    Reaction(u32),
    Grant,
    ProvisionalGrant,
    NextEventTag,
    LatestTagConfirmed,
    Put {
        id: ObjectId,
        bytes: u64,
    },
    Get {
        id: ObjectId,
        count: u32,
        bytes: u64,
    },
}

#[derive(Clone, Copy)]
struct Event {
    kind: Kind,
    tag: Tag,
    start: i64,
    end: i64,
    tid: u32,
}

struct Recorded {
    events: Vec<Event>,
    names: Vec<String>,
    threads: Vec<(u32, String)>,
    start_tag: i64,
}

/// One process's recorder.
pub(crate) struct Tracer {
    dir: PathBuf,
    federate: String,
    epoch: i64,
    recorded: Mutex<Recorded>,
}

thread_local! {
    /// This thread's id, once registered with the tracer.
    static TID: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

impl Tracer {
    fn new(dir: PathBuf, federate: &str) -> Tracer {
        let recorded =
            Recorded { events: Vec::with_capacity(RESERVED), names: Vec::new(), threads: Vec::new(), start_tag: 0 };
        Tracer { dir, federate: federate.to_string(), epoch: system_now(), recorded: Mutex::new(recorded) }
    }

    fn lock(&self) -> crate::sync::MutexGuard<'_, Recorded> {
        self.recorded.lock()
    }

    /// The clock events are stamped with.
    #[inline]
    pub fn now(&self) -> i64 {
        system_now()
    }

    /// Registers a reaction's name (`federate.reactor.reaction`); returns
    /// the index [`Tracer::reaction`] takes.
    pub fn name(&self, path: &str) -> u32 {
        let mut r = self.lock();
        r.names.push(path.to_string());
        (r.names.len() - 1) as u32
    }

    /// The federation's start time: tags in `args` are relative to it.
    pub fn set_start(&self, start: i64) {
        self.lock().start_tag = start;
    }

    fn tid(&self) -> u32 {
        let known = TID.with(std::cell::Cell::get);
        if known != 0 {
            return known;
        }
        let tid = nix::unistd::gettid().as_raw() as u32;
        let name = std::thread::current().name().unwrap_or("thread").to_string();
        self.lock().threads.push((tid, name));
        TID.with(|c| c.set(tid));
        tid
    }

    fn push(&self, kind: Kind, tag: Tag, start: i64, end: i64) {
        let tid = self.tid();
        self.lock().events.push(Event { kind, tag, start, end, tid });
    }

    pub fn reaction(&self, name: u32, tag: Tag, start: i64, end: i64) {
        self.push(Kind::Reaction(name), tag, start, end);
    }

    /// A TAG (`provisional`: PTAG) received from the RTI.
    pub fn grant(&self, tag: Tag, provisional: bool) {
        let now = self.now();
        self.push(if provisional { Kind::ProvisionalGrant } else { Kind::Grant }, tag, now, now);
    }

    /// A NET (`confirmed`: LTC) sent to the RTI.
    pub fn sent(&self, tag: Tag, confirmed: bool) {
        let now = self.now();
        self.push(if confirmed { Kind::LatestTagConfirmed } else { Kind::NextEventTag }, tag, now, now);
    }

    /// An object written into the store (created and filled).
    pub fn put(&self, id: ObjectId, bytes: u64, start: i64) {
        self.push(Kind::Put { id, bytes }, NO_TAG, start, self.now());
    }

    /// Objects taken from the store (`id`: the first of `count`).
    pub fn get(&self, id: ObjectId, count: u32, bytes: u64, start: i64) {
        self.push(Kind::Get { id, count, bytes }, NO_TAG, start, self.now());
    }

    /// Writes `DIR/<federate>.json`, its epoch moved by `clock_offset` ns
    /// (clock synchronization's, 0 without); returns its path.
    pub fn write(&self, clock_offset: i64) -> std::io::Result<PathBuf> {
        let r = self.lock();
        let pid = std::process::id();
        let mut out = String::with_capacity(r.events.len() * 160 + 1024);
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !std::mem::take(&mut first) {
                out.push_str(",\n");
            }
        };
        sep(&mut out);
        let _ = write!(
            out,
            r#"{{"name":"process_name","ph":"M","pid":{pid},"tid":0,"args":{{"name":{}}}}}"#,
            json_str(&self.federate)
        );
        for (tid, name) in &r.threads {
            sep(&mut out);
            let _ = write!(
                out,
                r#"{{"name":"thread_name","ph":"M","pid":{pid},"tid":{tid},"args":{{"name":{}}}}}"#,
                json_str(name)
            );
        }
        let ts = |t: i64| (t - self.epoch) as f64 / 1000.0;
        for e in &r.events {
            sep(&mut out);
            let tag = |out: &mut String| {
                let _ = write!(
                    out,
                    r#""tag_ns":{},"microstep":{}"#,
                    e.tag.time.saturating_sub(r.start_tag),
                    e.tag.microstep
                );
            };
            let (name, cat) = match e.kind {
                Kind::Reaction(i) => (json_str(r.names.get(i as usize).map_or("?", String::as_str)), "reaction"),
                Kind::Grant => (json_str("TAG"), "grant"),
                Kind::ProvisionalGrant => (json_str("PTAG"), "grant"),
                Kind::NextEventTag => (json_str("NET"), "coordination"),
                Kind::LatestTagConfirmed => (json_str("LTC"), "coordination"),
                Kind::Put { .. } => (json_str("store put"), "store"),
                Kind::Get { .. } => (json_str("store get"), "store"),
            };
            let _ =
                write!(out, r#"{{"name":{name},"cat":"{cat}","pid":{pid},"tid":{},"ts":{:.3},"#, e.tid, ts(e.start));
            match e.kind {
                Kind::Reaction(_) => {
                    let _ = write!(out, r#""ph":"X","dur":{:.3},"args":{{"#, (e.end - e.start) as f64 / 1000.0);
                    tag(&mut out);
                }
                Kind::Grant | Kind::ProvisionalGrant | Kind::NextEventTag | Kind::LatestTagConfirmed => {
                    out.push_str(r#""ph":"i","s":"t","args":{"#);
                    tag(&mut out);
                }
                Kind::Put { id, bytes } => {
                    let _ = write!(
                        out,
                        r#""ph":"X","dur":{:.3},"args":{{"object":"{id}","bytes":{bytes}"#,
                        (e.end - e.start) as f64 / 1000.0
                    );
                }
                Kind::Get { id, count, bytes } => {
                    let _ = write!(
                        out,
                        r#""ph":"X","dur":{:.3},"args":{{"object":"{id}","objects":{count},"bytes":{bytes}"#,
                        (e.end - e.start) as f64 / 1000.0
                    );
                }
            }
            out.push_str("}}");
        }
        std::fs::create_dir_all(&self.dir)?;
        let path = self.dir.join(format!("{}.json", self.federate));
        let text = format!("{PART_HEAD}{out}\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{{\"hprm_epoch_ns\":{},\"federate\":{}}}}}\n", self.epoch.saturating_add(clock_offset), json_str(&self.federate));
        std::fs::write(&path, text)?;
        Ok(path)
    }
}

/// Store events carry no tag (the codec does not know it).
const NO_TAG: Tag = Tag { time: 0, microstep: 0 };

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

/// Writes this process's part, if tracing is on, on the clock
/// synchronization's reference clock (`clock_offset`, when measured); logs
/// where it went.
pub(crate) fn finish(clock_offset: Option<i64>) {
    if let Some(t) = tracer() {
        match t.write(clock_offset.unwrap_or(0)) {
            Ok(path) => tracing::debug!(path = %path.display(), "trace written"),
            Err(e) => tracing::error!("could not write the trace of {} into {}: {e}", t.federate, t.dir.display()),
        }
    }
}

/// Failures of [`merge`].
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("cannot read the trace part {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the trace part {path} is not Chrome trace JSON: {detail}")]
    Parse { path: PathBuf, detail: String },
    #[error("cannot write the trace {path}: {source}; check that its directory exists and is writable")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Joins trace parts (every `*.json` in `dir`) into one Chrome trace at
/// `out`, all on the earliest part's epoch. The RTI part's per-federate
/// threads (named `federate N`) are renamed after `federates` (by index).
/// Returns the number of events written.
///
/// Parts are the ones this module and `hprm-rti` write: one event per
/// line between `{"traceEvents":[` and `],`, each event's `ts` written
/// as `"ts":NUMBER`. So the merge works line by line (each line checked
/// to be one JSON value), in time linear in the bytes, without building
/// a tree of millions of events.
pub fn merge(dir: &Path, federates: &[String], out: &Path) -> Result<usize, MergeError> {
    let entries = std::fs::read_dir(dir).map_err(|source| MergeError::Read { path: dir.to_path_buf(), source })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut parts = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|source| MergeError::Read { path: path.clone(), source })?;
        let bad = |detail: &str| MergeError::Parse { path: path.clone(), detail: detail.to_string() };
        let body = text.strip_prefix(PART_HEAD).ok_or_else(|| bad("it does not start with {\"traceEvents\":["))?;
        let end = body.rfind("\n],").ok_or_else(|| bad("its traceEvents array is not closed"))?;
        let tail = &body[end..];
        let epoch = tail
            .split("\"hprm_epoch_ns\":")
            .nth(1)
            .and_then(|r| r.split(|c: char| c != '-' && !c.is_ascii_digit()).next())
            .and_then(|n| n.parse::<i64>().ok())
            .ok_or_else(|| bad("no otherData.hprm_epoch_ns"))?;
        let body_end = text.len() - tail.len();
        parts.push(Part { path, epoch, text, body_end });
    }
    let base = parts.iter().map(|p| p.epoch).min().unwrap_or(0);
    let write = |f: &mut std::io::BufWriter<std::fs::File>| -> Result<usize, MergeError> {
        let io = |source| MergeError::Write { path: out.to_path_buf(), source };
        f.write_all(PART_HEAD.as_bytes()).map_err(io)?;
        let mut count = 0usize;
        for part in &parts {
            let shift = (part.epoch - base) as f64 / 1000.0;
            for line in part.text[PART_HEAD.len()..part.body_end].lines() {
                let line = line.strip_suffix(',').unwrap_or(line);
                if line.trim().is_empty() {
                    continue;
                }
                serde_json::from_str::<serde::de::IgnoredAny>(line).map_err(|e| MergeError::Parse {
                    path: part.path.clone(),
                    detail: format!("event {}: {e}", count + 1),
                })?;
                let line = rebase(line, shift);
                let line = rename_rti_thread(&line, federates);
                if count > 0 {
                    f.write_all(b",\n").map_err(io)?;
                }
                f.write_all(line.as_bytes()).map_err(io)?;
                count += 1;
            }
        }
        write!(f, "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{{\"hprm_epoch_ns\":{base}}}}}\n").map_err(io)?;
        f.flush().map_err(io)?;
        Ok(count)
    };
    let file = std::fs::File::create(out).map_err(|source| MergeError::Write { path: out.to_path_buf(), source })?;
    write(&mut std::io::BufWriter::new(file))
}

/// How every part (and the merged file) begins: events follow, one a line.
const PART_HEAD: &str = "{\"traceEvents\":[\n";

/// A part read for [`merge`]: its events are `text[PART_HEAD.len()..body_end]`.
struct Part {
    path: PathBuf,
    epoch: i64,
    text: String,
    body_end: usize,
}

/// `line` with its `"ts":NUMBER` moved later by `shift` µs.
fn rebase(line: &str, shift: f64) -> std::borrow::Cow<'_, str> {
    const KEY: &str = "\"ts\":";
    if shift == 0.0 {
        return line.into();
    }
    let Some(at) = line.find(KEY).map(|i| i + KEY.len()) else { return line.into() };
    let len = line[at..]
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e' || c == 'E' || c == '+'))
        .unwrap_or(line.len() - at);
    let Ok(ts) = line[at..at + len].parse::<f64>() else { return line.into() };
    format!("{}{:.3}{}", &line[..at], ts + shift, &line[at + len..]).into()
}

/// An RTI thread-name event, `federate N`, renamed after federate N.
fn rename_rti_thread<'a>(line: &'a str, federates: &[String]) -> std::borrow::Cow<'a, str> {
    let key = format!("\"args\":{{\"name\":\"{RTI_THREAD_PREFIX}");
    if !line.contains("\"name\":\"thread_name\"") {
        return line.into();
    }
    let Some(at) = line.find(&key).map(|i| i + key.len()) else { return line.into() };
    let digits = line[at..].find(|c: char| !c.is_ascii_digit()).unwrap_or(0);
    let Some(name) = line[at..at + digits].parse::<usize>().ok().and_then(|i| federates.get(i)) else {
        return line.into();
    };
    let start = at - RTI_THREAD_PREFIX.len();
    format!("{}{}{}", &line[..start], json_str(&format!("grants to {name}")).trim_matches('"'), &line[at + digits..])
        .into()
}

/// How `hprm-rti --trace` names the thread of its grants to federate N.
pub const RTI_THREAD_PREFIX: &str = "federate ";

#[cfg(test)]
mod tests {
    use super::*;

    /// A part as the writers lay it out: one event a line.
    fn part(dir: &Path, name: &str, epoch: i64, events: &[&str]) {
        std::fs::write(
            dir.join(name),
            format!("{PART_HEAD}{}\n],\n\"otherData\":{{\"hprm_epoch_ns\":{epoch}}}}}\n", events.join(",\n")),
        )
        .unwrap();
    }

    #[test]
    fn merge_rebases_parts_on_the_earliest_epoch_and_names_rti_threads() {
        let dir = tempfile::tempdir().unwrap();
        part(dir.path(), "a.json", 1_000_000, &[r#"{"name":"r \"ts\":9","ph":"X","pid":1,"tid":1,"ts":1.5,"dur":2}"#]);
        part(
            dir.path(),
            "hprm-rti.json",
            3_000_000,
            &[
                r#"{"name":"thread_name","ph":"M","pid":2,"tid":2,"args":{"name":"federate 1"}}"#,
                r#"{"name":"TAG \"ts\":7","ph":"i","pid":2,"tid":2,"ts":0}"#,
            ],
        );
        std::fs::write(dir.path().join("notes.txt"), "not a part").unwrap();
        let out = dir.path().join("out").with_extension("trace");
        assert_eq!(merge(dir.path(), &["src".into(), "sink".into()], &out).unwrap(), 3);
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        assert_eq!(v["otherData"]["hprm_epoch_ns"], 1_000_000);
        assert_eq!(ev.iter().find(|e| e["name"] == "r \"ts\":9").unwrap()["ts"], 1.5);
        assert_eq!(ev.iter().find(|e| e["name"] == "TAG \"ts\":7").unwrap()["ts"], 2000.0, "2 ms later epoch");
        assert_eq!(ev.iter().find(|e| e["name"] == "thread_name").unwrap()["args"]["name"], "grants to sink");
    }

    #[test]
    fn merge_names_a_bad_part_and_an_unwritable_output() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("broken.json"), "{\"traceEvents\": [").unwrap();
        let e = merge(dir.path(), &[], &dir.path().join("x.json.out")).unwrap_err().to_string();
        assert!(e.contains("broken.json") && e.contains("not Chrome trace JSON"), "{e}");
        part(dir.path(), "broken.json", 5, &[r#"{"name":"a","ts":1}"#, r#"{"name":"b","ts":"#]);
        let e = merge(dir.path(), &[], &dir.path().join("x.json.out")).unwrap_err().to_string();
        assert!(e.contains("broken.json") && e.contains("event 2"), "{e}");
        std::fs::remove_file(dir.path().join("broken.json")).unwrap();
        let e = merge(dir.path(), &[], Path::new("/nonexistent-dir/t.json")).unwrap_err().to_string();
        assert!(e.contains("/nonexistent-dir/t.json") && e.contains("writable"), "{e}");
    }

    #[test]
    fn a_part_is_valid_chrome_json_with_every_event() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tracer::new(dir.path().to_path_buf(), "fed \"quoted\"");
        t.set_start(100);
        let name = t.name("fed.r.react");
        let s = t.now();
        t.reaction(name, Tag::new(1100, 2), s, s + 1500);
        t.grant(Tag::new(1100, 0), true);
        t.sent(Tag::new(1100, 0), false);
        t.put(ObjectId::from_bytes([7; 20]), 65536, t.now());
        let path = t.write(0).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        let r = ev.iter().find(|e| e["name"] == "fed.r.react").unwrap();
        assert_eq!(
            (r["ph"].as_str(), r["args"]["tag_ns"].as_i64(), r["args"]["microstep"].as_u64(), r["dur"].as_f64()),
            (Some("X"), Some(1000), Some(2), Some(1.5))
        );
        assert_eq!(ev.iter().find(|e| e["name"] == "PTAG").unwrap()["ph"], "i");
        assert_eq!(ev.iter().find(|e| e["name"] == "store put").unwrap()["args"]["bytes"], 65536);
        assert!(ev.iter().any(|e| e["name"] == "process_name" && e["args"]["name"] == "fed \"quoted\""));
    }

    #[test]
    fn a_synchronized_federates_part_is_on_the_reference_clock() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tracer::new(dir.path().to_path_buf(), "far");
        let name = t.name("far.r.react");
        let s = t.now();
        t.reaction(name, Tag::new(0, 0), s, s + 1000);
        let epoch_of = |offset| {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(t.write(offset).unwrap()).unwrap()).unwrap();
            let ts = v["traceEvents"].as_array().unwrap().iter().find(|e| e["name"] == "far.r.react").unwrap()["ts"]
                .as_f64();
            (v["otherData"]["hprm_epoch_ns"].as_i64().unwrap(), ts)
        };
        // This clock is 3 s behind the RTI's: every event moves 3 s later,
        // the events' spacing within the part unchanged.
        let (plain, ts) = epoch_of(0);
        assert_eq!(epoch_of(3_000_000_000), (plain + 3_000_000_000, ts));
    }
}
