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

/// A record whose field, by its size or the length it claims, needs more
/// than its body holds.
#[derive(Debug, PartialEq)]
pub struct BadLength {
    pub record: &'static str,
    pub field: &'static str,
    pub claimed: u64,
    pub left: usize,
}

impl std::fmt::Display for BadLength {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (record, field, claimed, left) = (self.record, self.field, self.claimed, self.left);
        write!(f, "its {record} record's {field} needs {claimed} bytes but only {left} remain in the record: the file is damaged")
    }
}

/// The body of one record, read field by field as mcap 0.24 parses it.
struct Fields<'a> {
    record: &'static str,
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn take(&mut self, field: &'static str, n: u64) -> Result<&'a [u8], BadLength> {
        let left = self.rest.len();
        match usize::try_from(n) {
            Ok(n) if n <= left => {
                let (taken, rest) = self.rest.split_at(n);
                self.rest = rest;
                Ok(taken)
            }
            _ => Err(BadLength { record: self.record, field, claimed: n, left }),
        }
    }

    fn fixed(&mut self, field: &'static str, n: u64) -> Result<(), BadLength> {
        self.take(field, n).map(drop)
    }

    fn length(&mut self, field: &'static str, width: usize) -> Result<u64, BadLength> {
        let bytes = self.take(field, width as u64)?;
        Ok(bytes.iter().rev().fold(0, |n, &b| n << 8 | u64::from(b)))
    }

    /// A string, or bytes, or an array or a map of fixed-size entries:
    /// a u32 length in bytes, then that many bytes.
    fn prefixed(&mut self, field: &'static str) -> Result<&'a [u8], BadLength> {
        let n = self.length(field, 4)?;
        self.take(field, n)
    }

    /// A map of strings to strings: a u32 length in bytes, then strings.
    fn string_map(&mut self, field: &'static str) -> Result<(), BadLength> {
        let mut entries = Fields { record: self.record, rest: self.prefixed(field)? };
        while !entries.rest.is_empty() {
            entries.prefixed(field)?;
            entries.prefixed(field)?;
        }
        Ok(())
    }
}

/// Refuses a record whose inner lengths (a string's u32 length, a map's or
/// an array's u32 length in bytes, a schema's or an attachment's data
/// length) claim more than its body holds, before mcap parses it: mcap
/// 0.24 makes room for what a string's length says before reading it, so
/// a record of a few bytes claiming a 4 GiB topic aborted the reader for
/// want of memory (47 inputs of the `mcap` fuzz target). What passes here
/// is parsed within its body's bytes. The fields are mcap 0.24's
/// (`mcap::records`, `mcap::read::parse_record`), as the MCAP spec
/// orders them; other opcodes mcap leaves unparsed.
pub fn check_lengths(opcode: u8, body: &[u8]) -> Result<(), BadLength> {
    use mcap::records::op;
    let record = match opcode {
        op::HEADER => "Header",
        op::SCHEMA => "Schema",
        op::CHANNEL => "Channel",
        op::CHUNK => "Chunk",
        op::MESSAGE_INDEX => "MessageIndex",
        op::CHUNK_INDEX => "ChunkIndex",
        op::ATTACHMENT => "Attachment",
        op::ATTACHMENT_INDEX => "AttachmentIndex",
        op::STATISTICS => "Statistics",
        op::METADATA => "Metadata",
        op::METADATA_INDEX => "MetadataIndex",
        // Fixed sizes (Footer, Message's header, SummaryOffset, DataEnd)
        // or not parsed: mcap reads these within the body.
        _ => return Ok(()),
    };
    let mut f = Fields { record, rest: body };
    match opcode {
        op::HEADER => {
            f.prefixed("profile")?;
            f.prefixed("library")?;
        }
        op::SCHEMA => {
            f.fixed("id", 2)?;
            f.prefixed("name")?;
            f.prefixed("encoding")?;
            f.prefixed("data")?;
        }
        op::CHANNEL => {
            f.fixed("id and schema id", 4)?;
            f.prefixed("topic")?;
            f.prefixed("message encoding")?;
            f.string_map("metadata")?;
        }
        op::CHUNK => {
            f.fixed("times, uncompressed size and CRC", 28)?;
            f.prefixed("compression")?;
            let n = f.length("records", 8)?;
            f.take("records", n)?;
        }
        op::MESSAGE_INDEX => {
            f.fixed("channel id", 2)?;
            f.prefixed("records")?;
        }
        op::CHUNK_INDEX => {
            f.fixed("times, chunk offset and length", 32)?;
            f.prefixed("message index offsets")?;
            f.fixed("message index length", 8)?;
            f.prefixed("compression")?;
            f.fixed("compressed and uncompressed sizes", 16)?;
        }
        op::ATTACHMENT => {
            f.fixed("times", 16)?;
            f.prefixed("name")?;
            f.prefixed("media type")?;
            let n = f.length("data", 8)?;
            f.take("data", n)?;
            f.fixed("CRC", 4)?;
        }
        op::ATTACHMENT_INDEX => {
            f.fixed("offset, length, times and data size", 40)?;
            f.prefixed("name")?;
            f.prefixed("media type")?;
        }
        op::STATISTICS => {
            f.fixed("counts and times", 42)?;
            f.prefixed("channel message counts")?;
        }
        op::METADATA => {
            f.prefixed("name")?;
            f.string_map("metadata")?;
        }
        op::METADATA_INDEX => {
            f.fixed("offset and length", 16)?;
            f.prefixed("name")?;
        }
        _ => {}
    }
    Ok(())
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
            Ok(LinearReadEvent::Record { data, opcode }) => match check_lengths(opcode, data)
                .map_err(|why| why.to_string())
                .and_then(|()| mcap::read::parse_record(opcode, data).map_err(|e| e.to_string()))
            {
                Ok(r) => {
                    if !each(r.into_owned()) {
                        return Ok(None);
                    }
                }
                Err(why) => return Ok(Some(why)),
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

    /// Magic, then one record (opcode, u64 length, body).
    fn file_of(opcode: u8, body: &[u8]) -> Vec<u8> {
        let mut file = mcap::MAGIC.to_vec();
        file.push(opcode);
        file.extend_from_slice(&(body.len() as u64).to_le_bytes());
        file.extend_from_slice(body);
        file
    }

    #[test]
    fn an_inner_length_past_its_record_is_refused_naming_the_field() {
        // A channel whose topic claims 0xFFFFFFF0 bytes: mcap would make
        // room for 4 GiB before reading it.
        let channel = [&1u16.to_le_bytes()[..], &0u16.to_le_bytes(), &0xFFFF_FFF0u32.to_le_bytes(), b"/a"].concat();
        let why = scan(&file_of(mcap::records::op::CHANNEL, &channel), |_| true).expect("MCAP").expect("refused");
        assert_eq!(
            why,
            "its Channel record's topic needs 4294967280 bytes but only 2 remain in the record: the file is damaged"
        );
        // A metadata map's key past the map's own length.
        let map = [&8u32.to_le_bytes()[..], &0x7FFF_FFFFu32.to_le_bytes(), b"kkkk"].concat();
        let metadata = [&1u32.to_le_bytes()[..], b"m", &map].concat();
        let why = check_lengths(mcap::records::op::METADATA, &metadata).expect_err("refused");
        assert_eq!((why.record, why.field, why.claimed, why.left), ("Metadata", "metadata", 0x7FFF_FFFF, 4));
        // An attachment without room for its CRC (mcap slices past it).
        let attachment =
            [&[0u8; 16][..], &0u32.to_le_bytes(), &0u32.to_le_bytes(), &2u64.to_le_bytes(), b"ab"].concat();
        let why = check_lengths(mcap::records::op::ATTACHMENT, &attachment).expect_err("refused");
        assert_eq!((why.record, why.field), ("Attachment", "CRC"));
    }

    #[test]
    fn records_as_mcap_writes_them_pass_the_length_check() {
        let mut out = std::io::Cursor::new(Vec::new());
        let mut w = mcap::WriteOptions::new().use_chunks(false).create(&mut out).expect("writer");
        let schema = w.add_schema("s", "jsonschema", b"{}").expect("schema");
        let meta = BTreeMap::from([("k".to_string(), "v".to_string())]);
        let channel = w.add_channel(schema, "/t", "json", &meta).expect("channel");
        let header = mcap::records::MessageHeader { channel_id: channel, sequence: 0, log_time: 1, publish_time: 1 };
        w.write_to_known_channel(&header, b"{}").expect("message");
        w.write_metadata(&mcap::records::Metadata { name: "m".into(), metadata: meta }).expect("metadata");
        let attachment = mcap::Attachment {
            log_time: 1,
            create_time: 1,
            name: "a".into(),
            media_type: "text/plain".into(),
            data: std::borrow::Cow::Borrowed(b"x"),
        };
        w.attach(&attachment).expect("attachment");
        w.finish().expect("finish");
        drop(w);
        let mut kinds = Vec::new();
        let why = scan(out.get_ref(), |r| {
            kinds.push(r.opcode());
            true
        })
        .expect("MCAP");
        assert_eq!(why, None);
        use mcap::records::op;
        for kind in [op::HEADER, op::SCHEMA, op::CHANNEL, op::MESSAGE, op::METADATA, op::ATTACHMENT, op::STATISTICS] {
            assert!(kinds.contains(&kind), "no record {kind:#x} in {kinds:x?}");
        }
    }
}
