//! Reading a recording (`hprm launch --record`, written by
//! `crate::record`): the names and encodings of its metadata, deadline
//! decisions and tags, the scan of its records ([`scan`]) and what its
//! metadata says of the recorded program ([`program`]). `hprm bag` and
//! `hprm replay` read files with it.
//!
//! A recording is a file from anywhere: every function here takes its
//! bytes as they are and answers an error for what is not a recording,
//! never a panic. It needs nothing of the command but `mcap`, `rmpv`,
//! `anyhow` and `hprm-node`, so that the fuzz harness (`hprm-fuzz`)
//! compiles this file as it is.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{bail, Result};
use hprm_node::manifest::Manifest;
use hprm_node::Tag;
use mcap::records::Record;

/// The metadata records.
pub const META_PROGRAM: &str = "hprm.program";
pub const META_RUN: &str = "hprm.run";
pub const META_SUMMARY: &str = "hprm.summary";

/// The topic of a federate's deadline decisions: this, then its name.
pub const DECISIONS_PREFIX: &str = "deadlines/";
/// The topic of a physical action's values: this, then its full path.
pub const PHYSICAL_PREFIX: &str = "physical/";

/// Summary keys `last.FEDERATE`: the federate's last tag (its stop tag),
/// as [`format_tag`] writes it; replay stops there.
pub const LAST_PREFIX: &str = "last.";

/// One decision's message data (see `crate::record`'s `DECISION_SCHEMA_TEXT`).
pub fn encode_decision(reaction: &str, missed: bool) -> Vec<u8> {
    let v = rmpv::Value::Map(vec![
        (rmpv::Value::from("reaction"), rmpv::Value::from(reaction)),
        (rmpv::Value::from("missed"), rmpv::Value::from(missed)),
    ]);
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, &v);
    out
}

/// The (reaction, missed) of a decision's message data.
pub fn decode_decision(data: &[u8]) -> Option<(String, bool)> {
    let v = rmpv::decode::read_value(&mut &data[..]).ok()?;
    let field = |k: &str| v.as_map()?.iter().find(|(key, _)| key.as_str() == Some(k)).map(|(_, x)| x.clone());
    Some((field("reaction")?.as_str()?.to_string(), field("missed")?.as_bool()?))
}

/// A tag in metadata: `TIME/MICROSTEP`, time in ns since the epoch.
pub fn format_tag(t: Tag) -> String {
    format!("{}/{}", t.time, t.microstep)
}

/// The tag [`format_tag`] wrote, `None` when `text` is not one.
pub fn parse_tag(text: &str) -> Option<Tag> {
    let (time, microstep) = text.split_once('/')?;
    Some(Tag::new(time.parse().ok()?, microstep.parse().ok()?))
}

/// The longest record (a chunk's records decompressed included) [`scan`]
/// reads from a file of `len` bytes: what compression gives a real
/// recording, never what a chunk header claims. A chunk's header says how
/// large it decompresses to, and the reader makes room for that much
/// first: a 2.6 KB file claiming 10^17 bytes aborted `hprm bag info` (found
/// by the `mcap` fuzz target).
pub fn record_limit(len: usize) -> usize {
    len.saturating_mul(64).max(64 << 20)
}

/// Calls `each` for every record in file order (chunks opened, their CRCs
/// checked) until it returns false; returns why the file ended early, if
/// it did. No record longer than [`record_limit`] is read.
pub fn scan<'a>(buf: &'a [u8], mut each: impl FnMut(Record<'a>) -> bool) -> Result<Option<String>> {
    use mcap::sans_io::{LinearReadEvent, LinearReader, LinearReaderOptions};
    if !buf.starts_with(mcap::MAGIC) {
        bail!("not an MCAP file: it does not start with MCAP's magic bytes");
    }
    // mcap::read::ChunkFlattener, with a bound on the records' lengths.
    let options =
        LinearReaderOptions::default().with_validate_chunk_crcs(true).with_record_length_limit(record_limit(buf.len()));
    let mut reader = LinearReader::new_with_options(options);
    let mut rest = buf;
    loop {
        // mcap 0.24 subtracts a record's length from what its chunk holds
        // unchecked: a record longer than its chunk overflows, which panics
        // where overflow checks are on (debug builds; a release build wraps
        // and reads on to an error). Found by the mcap fuzz target; such a
        // panic is the file's error here.
        let step = &mut reader;
        let event = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let step = step;
            step.next_event()
        })) {
            Ok(Some(event)) => event,
            Ok(None) => break,
            Err(_) => return Ok(Some("a record is longer than the chunk that holds it".into())),
        };
        match event {
            Ok(LinearReadEvent::ReadRequest(need)) => {
                let n = need.min(rest.len());
                reader.insert(n).copy_from_slice(&rest[..n]);
                reader.notify_read(n);
                rest = &rest[n..];
            }
            Ok(LinearReadEvent::Record { data, opcode }) => match mcap::read::parse_record(opcode, data) {
                Ok(r) => {
                    if !each(r.into_owned()) {
                        return Ok(None);
                    }
                }
                Err(e) => return Ok(Some(e.to_string())),
            },
            Err(e) => return Ok(Some(e.to_string())),
        }
    }
    Ok(None)
}

/// Calls `each(channel topic, tag relative to `start`, payload)` for
/// every message of the file `buf`, in file order, until it returns false;
/// returns whether it went on to the end. A tag before the epoch or past
/// the end of time saturates (a file from anywhere may say so).
pub fn messages(buf: &[u8], start: i64, mut each: impl FnMut(&str, Tag, &[u8]) -> bool) -> Result<bool> {
    // A channel's id is its file's own.
    let mut topic_of: HashMap<u16, String> = HashMap::new();
    let mut more = true;
    scan(buf, |r| match r {
        Record::Channel(c) => {
            topic_of.insert(c.id, c.topic);
            true
        }
        Record::Message { header, data } => match topic_of.get(&header.channel_id) {
            Some(t) => {
                let time = i64::try_from(header.log_time).unwrap_or(i64::MAX).saturating_sub(start);
                more = each(t, Tag::new(time, header.sequence), &data);
                more
            }
            None => true,
        },
        _ => true,
    })?;
    Ok(more)
}

/// What a complete recording's metadata says of the program it recorded.
pub struct Program {
    /// Its program graph ([`META_PROGRAM`]).
    pub manifest: Manifest,
    /// Its start time (ns since the epoch).
    pub start: i64,
    /// The last tag of each recorded federate, relative to the start.
    pub last: Vec<Tag>,
    /// Its number, when the file is one part of a rotated recording.
    pub part: Option<String>,
}

/// The [`Program`] of the recording `path`, from its metadata records (by
/// name), read to its end or up to `why` it ended early: an error, saying
/// what to do, unless it is a complete HPRM recording.
pub fn program(meta: &BTreeMap<String, BTreeMap<String, String>>, why: Option<String>, path: &Path) -> Result<Program> {
    let text = meta.get(META_PROGRAM).and_then(|m| m.get("manifest")).ok_or_else(|| {
        anyhow::anyhow!(
            "{} is an MCAP file but not an HPRM recording (it has no {META_PROGRAM} metadata); \
             record one with `hprm launch --record FILE.mcap PROGRAM`",
            path.display()
        )
    })?;
    let part = meta.get(META_RUN).and_then(|m| m.get("part")).cloned();
    let manifest = Manifest::from_json(text)
        .map_err(|e| anyhow::anyhow!("{}: its program graph is unreadable: {e}", path.display()))?;
    let summary = match (meta.get(META_SUMMARY), why) {
        (Some(s), None) => s,
        (_, Some(why)) => bail!(
            "{} ends early ({why}): its recorder was stopped before closing it; replay needs a complete recording",
            path.display()
        ),
        (None, None) => bail!("{} has no summary ({META_SUMMARY}): its recorder did not finish it", path.display()),
    };
    let start: i64 = summary.get("start").and_then(|s| s.parse().ok()).unwrap_or(0);
    let last = summary
        .iter()
        .filter(|(k, _)| k.starts_with(LAST_PREFIX))
        .filter_map(|(_, v)| parse_tag(v))
        // Saturating: the file's numbers may be any.
        .map(|t| Tag::new(t.time.saturating_sub(start), t.microstep))
        .collect();
    Ok(Program { manifest, start, last, part })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(summary: &[(&str, &str)]) -> BTreeMap<String, BTreeMap<String, String>> {
        let manifest = r#"{"name": "p"}"#;
        let own = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        BTreeMap::from([
            (META_PROGRAM.to_string(), own(&[("manifest", manifest)])),
            (META_SUMMARY.to_string(), own(summary)),
        ])
    }

    #[test]
    fn tags_at_the_ends_of_time_are_read_without_overflow() {
        let path = Path::new("x.mcap");
        let p = program(&meta(&[("start", "1"), ("last.a", "-9223372036854775808/0")]), None, path).expect("read");
        assert_eq!(p.last, vec![Tag::new(i64::MIN, 0)]);
        let p = program(&meta(&[("start", "-5"), ("last.a", "9223372036854775807/3")]), None, path).expect("read");
        assert_eq!((p.start, p.last), (-5, vec![Tag::new(i64::MAX, 3)]));
    }

    #[test]
    fn what_is_not_a_complete_recording_is_refused_saying_why() {
        let path = Path::new("x.mcap");
        let e = program(&BTreeMap::new(), None, path).err().expect("no program metadata");
        assert!(e.to_string().contains("not an HPRM recording"), "{e}");
        let e = program(&meta(&[]), Some("truncated".into()), path).err().expect("ended early");
        assert!(e.to_string().contains("ends early (truncated)"), "{e}");
        assert!(scan(b"PK\x03\x04", |_| true).is_err());
    }

    #[test]
    fn a_chunk_claiming_more_than_the_limit_is_refused_without_making_room_for_it() {
        // Magic, then a chunk record (opcode 6) whose header claims 2^60
        // bytes once decompressed, its data uncompressed.
        let mut file = mcap::MAGIC.to_vec();
        let mut chunk = Vec::new();
        chunk.extend_from_slice(&0u64.to_le_bytes()); // message start time
        chunk.extend_from_slice(&0u64.to_le_bytes()); // message end time
        chunk.extend_from_slice(&(1u64 << 60).to_le_bytes()); // uncompressed size
        chunk.extend_from_slice(&0u32.to_le_bytes()); // uncompressed CRC: none
        chunk.extend_from_slice(&0u32.to_le_bytes()); // compression: none ("")
        let records = [&[0x0cu8][..], &(1u64 << 50).to_le_bytes(), b"xxxx"].concat();
        chunk.extend_from_slice(&(records.len() as u64).to_le_bytes());
        chunk.extend_from_slice(&records);
        file.push(0x06);
        file.extend_from_slice(&(chunk.len() as u64).to_le_bytes());
        file.extend_from_slice(&chunk);
        let why = scan(&file, |_| true).expect("an MCAP file").expect("it ends early");
        assert!(why.contains("exceeds limit"), "{why}");
    }
}
