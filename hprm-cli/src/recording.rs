//! Reading a recording (`hprm launch --record`, written by
//! `crate::record`): the names and encodings of its metadata, deadline
//! decisions and tags, the scan of its records ([`scan`]) and what its
//! metadata says of the recorded program ([`program`]). `hprm bag` and
//! `hprm replay` read files with it.
//!
//! A recording is a file from anywhere: every function here takes its
//! bytes as they are and answers an error for what is not a recording,
//! never a panic. It needs nothing of the command but `mcap`, `zstd`,
//! `lz4`, `crc32fast`, `rmpv`, `anyhow` and `hprm-node`, so that the fuzz
//! harness (`hprm-fuzz`) compiles this file as it is.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{bail, Result};
use hprm_node::manifest::Manifest;
use hprm_node::Tag;
use mcap::records::{ChunkHeader, Record};

/// The metadata records.
pub const META_PROGRAM: &str = "hprm.program";
pub const META_RUN: &str = "hprm.run";
pub const META_SUMMARY: &str = "hprm.summary";

/// [`META_RUN`] keys of one host's share of a program that spans hosts
/// (`hprm launch --host H --record`, `hprm recorder --host H`): the host
/// whose federates the file holds, and the hosts whose files make the
/// program's recording whole ([`hosts_recorded`], comma-separated).
/// `hprm bag merge` joins the shares into one file, which has
/// [`RUN_HOSTS`] and no [`RUN_HOST`].
pub const RUN_HOST: &str = "host";
pub const RUN_HOSTS: &str = "hosts";

/// [`META_SUMMARY`] key: the federates of other hosts, which a host's share
/// does not hold (comma-separated; empty for a whole recording).
pub const FEDERATES_ELSEWHERE: &str = "federates_elsewhere";

/// The hosts of `m` that run federates, in the program's order: those
/// whose shares make its recording whole (a host that runs only the RTI
/// records nothing).
pub fn hosts_recorded(m: &Manifest) -> Vec<String> {
    let m = m.expanded();
    m.hosts
        .iter()
        .filter(|h| m.federates.iter().any(|f| f.host.as_deref() == Some(h.name.as_str())))
        .map(|h| h.name.clone())
        .collect()
}

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
/// large it decompresses to, and mcap 0.24's reader made room for that
/// much first: a 2.6 KB file claiming 10^17 bytes aborted `hprm bag info`
/// (found by the `mcap` fuzz target). At most `isize::MAX`, the most a
/// buffer may hold, so that a record's length plus its opcode and length
/// fields never overflows (a 64 MiB file on a 32-bit computer would
/// otherwise allow any u32 length).
pub fn record_limit(len: usize) -> usize {
    len.saturating_mul(64).max(64 << 20).min(isize::MAX as usize)
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

/// A record's body parsed as mcap 0.24 parses it, once [`check_lengths`]
/// has found every inner length within the body.
fn parse(opcode: u8, body: &[u8]) -> Result<Record<'_>, String> {
    check_lengths(opcode, body).map_err(|why| why.to_string())?;
    mcap::read::parse_record(opcode, body).map_err(|e| e.to_string())
}

/// The records of the chunk at byte `offset` of its file, decompressed
/// into exactly the size its header declares, which must be at most
/// `limit`, their CRC checked when the header gives one (not 0).
///
/// mcap 0.24's own chunk reader is not used: given a chunk that
/// decompresses to less than its header's `uncompressed_size`, it calls
/// the decompressor again with no input, which makes no progress, for
/// ever (`hprm bag info` hung on a 196-byte file; fixed in mcap 0.26,
/// whose rust-version is above ours); given one that decompresses to more,
/// or a record longer than its chunk, it overflows a subtraction (5
/// inputs of the `mcap` fuzz target).
fn chunk_records<'c>(offset: u64, header: &ChunkHeader, data: &'c [u8], limit: usize) -> Result<Cow<'c, [u8]>, String> {
    let at = format!("the chunk at byte {offset}");
    let declared = header.uncompressed_size;
    let size = usize::try_from(declared).ok().filter(|&n| n <= limit).ok_or_else(|| {
        format!("{at} claims {declared} bytes once decompressed, more than the {limit} this reader takes from a file of its size: the file is damaged")
    })?;
    let undecodable =
        |e: std::io::Error| format!("{at} cannot be decompressed ({}): {e}: the file is damaged", header.compression);
    let records = match header.compression.as_str() {
        "" => Cow::Borrowed(data),
        "zstd" => {
            Cow::Owned(zstd::stream::read::Decoder::with_buffer(data).and_then(|d| read_exactly(d, size)).map_err(undecodable)?)
        }
        "lz4" => Cow::Owned(lz4::Decoder::new(data).and_then(|d| read_exactly(d, size)).map_err(undecodable)?),
        other => {
            return Err(format!(
                "{at} is compressed with {other:?}, which this reader cannot decompress (it reads zstd, lz4 and uncompressed chunks)"
            ))
        }
    };
    if records.len() != size {
        // A decompressor is read up to one byte past the declared size.
        let got = match records.len() {
            n if n < size || header.compression.is_empty() => n.to_string(),
            _ => format!("more than {declared}"),
        };
        return Err(format!("{at} holds {got} bytes of records but its header says {declared}: the file is damaged"));
    }
    let saved = header.uncompressed_crc;
    if saved != 0 {
        let calculated = crc32fast::hash(&records);
        if calculated != saved {
            return Err(format!(
                "{at} has records whose CRC is {calculated:#010x} but its header says {saved:#010x}: the file is damaged"
            ));
        }
    }
    Ok(records)
}

/// What `from` holds when that is exactly `size` bytes, else what it holds
/// up to one byte more than `size` (never more, whatever it would give).
/// Bytes past the first `size` that do not decompress are not an error:
/// a compressor may pad its last frame, and mcap's own reader skips what
/// follows a chunk's declared size.
fn read_exactly(mut from: impl std::io::Read, size: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    from.by_ref().take(size as u64).read_to_end(&mut out)?;
    let mut one = [0u8];
    if out.len() == size && matches!(from.read(&mut one), Ok(1)) {
        out.push(one[0]);
    }
    Ok(out)
}

/// Calls `each` for every record of a chunk's `records` (as
/// [`chunk_records`] opened it) until it returns false; returns whether it
/// went on to the end.
fn each_in_chunk<'a>(offset: u64, records: &[u8], each: &mut impl FnMut(Record<'a>) -> bool) -> Result<bool, String> {
    use mcap::records::op;
    let mut rest = records;
    while !rest.is_empty() {
        let at = records.len() - rest.len();
        let Some(([opcode], (len, after))) =
            rest.split_first_chunk::<1>().and_then(|(op, rest)| Some((op, rest.split_first_chunk::<8>()?)))
        else {
            return Err(format!(
                "the chunk at byte {offset} ends inside a record's opcode and length (byte {at} of its {} bytes of records): the file is damaged",
                records.len()
            ));
        };
        let (opcode, len) = (*opcode, u64::from_le_bytes(*len));
        let Some(body) = usize::try_from(len).ok().and_then(|n| after.get(..n)) else {
            return Err(format!(
                "the chunk at byte {offset} has a record (opcode {opcode:#04x}, at byte {at} of its records) of {len} bytes but only {} remain in the chunk: the file is damaged",
                after.len()
            ));
        };
        rest = &after[body.len()..];
        if opcode == op::CHUNK {
            return Err(format!(
                "the chunk at byte {offset} holds a chunk (at byte {at} of its records): the file is damaged"
            ));
        }
        let record = parse(opcode, body).map_err(|why| format!("in the chunk at byte {offset}: {why}"))?;
        if !each(record.into_owned()) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Calls `each` for every record in file order (chunks opened, their CRCs
/// checked) until it returns false; returns why the file ended early, if
/// it did. No record longer than [`record_limit`] is read, a chunk's
/// decompressed records included.
pub fn scan<'a>(buf: &'a [u8], mut each: impl FnMut(Record<'a>) -> bool) -> Result<Option<String>> {
    scan_located(buf, |_, r| each(r))
}

/// As [`scan`], also telling `each` where each record lies: the byte
/// offset of the chunk that holds it (`None` for a record outside
/// chunks), which [`chunk_messages`] opens again.
pub fn scan_located<'a>(
    buf: &'a [u8],
    mut each: impl FnMut(Option<u64>, Record<'a>) -> bool,
) -> Result<Option<String>> {
    use mcap::sans_io::{LinearReadEvent, LinearReader, LinearReaderOptions};
    if !buf.starts_with(mcap::MAGIC) {
        bail!("not an MCAP file: it does not start with MCAP's magic bytes");
    }
    let limit = record_limit(buf.len());
    // Chunks come whole, undecoded: `chunk_records` opens them.
    let options = LinearReaderOptions::default().with_emit_chunks(true).with_record_length_limit(limit);
    let mut reader = LinearReader::new_with_options(options);
    let mut rest = buf;
    // Where the next record starts: the reader yields every record after
    // the magic, each as its opcode, its u64 length and its body.
    let mut offset = mcap::MAGIC.len() as u64;
    while let Some(event) = reader.next_event() {
        match event {
            Ok(LinearReadEvent::ReadRequest(need)) => {
                let n = need.min(rest.len());
                reader.insert(n).copy_from_slice(&rest[..n]);
                reader.notify_read(n);
                rest = &rest[n..];
            }
            Ok(LinearReadEvent::Record { data, opcode }) => {
                let at = offset;
                offset += 9 + data.len() as u64;
                let more = match parse(opcode, data) {
                    Ok(Record::Chunk { header, data }) => {
                        let mut located = |r| each(Some(at), r);
                        match chunk_records(at, &header, &data, limit).and_then(|r| each_in_chunk(at, &r, &mut located))
                        {
                            Ok(more) => more,
                            Err(why) => return Ok(Some(why)),
                        }
                    }
                    Ok(record) => each(None, record.into_owned()),
                    Err(why) => return Ok(Some(why)),
                };
                if !more {
                    return Ok(None);
                }
            }
            Err(e) => return Ok(Some(e.to_string())),
        }
    }
    Ok(None)
}

/// The messages (header and data, in order) of the chunk at byte `offset`
/// of `buf`, as [`scan_located`] found it: opened and checked as [`scan`]
/// opens it.
pub fn chunk_messages(buf: &[u8], offset: u64) -> Result<Vec<(mcap::records::MessageHeader, Vec<u8>)>> {
    let at = usize::try_from(offset).ok().filter(|&at| at < buf.len());
    let record = at.and_then(|at| {
        let (&opcode, rest) = buf[at..].split_first()?;
        let (len, rest) = rest.split_first_chunk::<8>()?;
        Some((opcode, rest.get(..usize::try_from(u64::from_le_bytes(*len)).ok()?)?))
    });
    let Some((mcap::records::op::CHUNK, body)) = record else {
        bail!("no chunk at byte {offset}: the file changed since it was read");
    };
    let Ok(Record::Chunk { header, data }) = parse(mcap::records::op::CHUNK, body) else {
        bail!("the chunk at byte {offset} is unreadable: the file changed since it was read");
    };
    let records = chunk_records(offset, &header, &data, record_limit(buf.len())).map_err(anyhow::Error::msg)?;
    let mut out = Vec::new();
    each_in_chunk(offset, &records, &mut |r| {
        if let Record::Message { header, data } = r {
            out.push((header, data.into_owned()));
        }
        true
    })
    .map_err(anyhow::Error::msg)?;
    Ok(out)
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
        assert!(
            why.starts_with(
                "the chunk at byte 8 claims 1152921504606846976 bytes once decompressed, more than the 67108864"
            ),
            "{why}"
        );
    }

    /// One record's bytes: opcode, u64 length, body.
    fn record(opcode: u8, body: &[u8]) -> Vec<u8> {
        [&[opcode][..], &(body.len() as u64).to_le_bytes(), body].concat()
    }

    /// A channel (id 1, topic "/t") and one message on it, as a chunk holds them.
    fn channel_and_message() -> Vec<u8> {
        use mcap::records::op;
        let s = |x: &str| [&(x.len() as u32).to_le_bytes()[..], x.as_bytes()].concat();
        let channel =
            [&1u16.to_le_bytes()[..], &0u16.to_le_bytes(), &s("/t"), &s("msgpack"), &0u32.to_le_bytes()].concat();
        let message =
            [&1u16.to_le_bytes()[..], &0u32.to_le_bytes(), &1u64.to_le_bytes(), &1u64.to_le_bytes(), b"*"].concat();
        [record(op::CHANNEL, &channel), record(op::MESSAGE, &message)].concat()
    }

    /// A complete file (magic, one chunk, data end, footer, magic) whose
    /// chunk holds `records` compressed with `compression` and declares
    /// `declared` bytes once decompressed and the CRC `crc`.
    fn chunked_file(compression: &str, records: &[u8], declared: u64, crc: u32) -> Vec<u8> {
        use mcap::records::op;
        let data = match compression {
            "zstd" => zstd::encode_all(records, 0).expect("zstd"),
            "lz4" => {
                let mut e = lz4::EncoderBuilder::new().build(Vec::new()).expect("lz4");
                std::io::Write::write_all(&mut e, records).expect("lz4");
                let (data, done) = e.finish();
                done.expect("lz4");
                data
            }
            _ => records.to_vec(),
        };
        let chunk = [
            &1u64.to_le_bytes()[..],
            &1u64.to_le_bytes(),
            &declared.to_le_bytes(),
            &crc.to_le_bytes(),
            &(compression.len() as u32).to_le_bytes(),
            compression.as_bytes(),
            &(data.len() as u64).to_le_bytes(),
            &data,
        ]
        .concat();
        let footer = [0u8; 20];
        [
            mcap::MAGIC,
            &record(op::CHUNK, &chunk),
            &record(op::DATA_END, &[0; 4]),
            &record(op::FOOTER, &footer),
            mcap::MAGIC,
        ]
        .concat()
    }

    /// The topics of the messages `scan` reads from `file`, and why it ended early.
    fn messages_of(file: &[u8]) -> (Vec<String>, Option<String>) {
        let (mut topics, mut seen) = (HashMap::new(), Vec::new());
        let why = scan(file, |r| {
            match r {
                Record::Channel(c) => drop(topics.insert(c.id, c.topic)),
                Record::Message { header, .. } => seen.push(topics[&header.channel_id].clone()),
                _ => {}
            }
            true
        })
        .expect("an MCAP file");
        (seen, why)
    }

    #[test]
    fn a_chunk_decompressing_to_other_than_its_declared_size_is_refused_naming_it() {
        // mcap 0.24's chunk reader looped for ever on a chunk 4 bytes
        // short (each compression), and overflowed on one 4 bytes long.
        let records = channel_and_message();
        let n = records.len() as u64;
        for compression in ["", "zstd", "lz4"] {
            let (seen, why) = messages_of(&chunked_file(compression, &records, n, crc32fast::hash(&records)));
            assert_eq!((seen, why), (vec!["/t".to_string()], None), "{compression:?}");
            let (seen, why) = messages_of(&chunked_file(compression, &records, n + 4, 0));
            assert!(seen.is_empty(), "{compression:?}");
            assert_eq!(
                why.as_deref(),
                Some(
                    format!(
                        "the chunk at byte 8 holds {n} bytes of records but its header says {}: the file is damaged",
                        n + 4
                    )
                    .as_str()
                ),
                "{compression:?}"
            );
            let (_, why) = messages_of(&chunked_file(compression, &records, n - 4, 0));
            let got = if compression.is_empty() { n.to_string() } else { format!("more than {}", n - 4) };
            assert_eq!(
                why.as_deref(),
                Some(
                    format!(
                        "the chunk at byte 8 holds {got} bytes of records but its header says {}: the file is damaged",
                        n - 4
                    )
                    .as_str()
                ),
                "{compression:?}"
            );
        }
    }

    #[test]
    fn the_fuzz_regressions_of_chunks_end_in_their_errors() {
        // fuzz/regressions/mcap/, each a complete file with one chunk of a
        // channel and a message (66 bytes of records) and no CRC. mcap
        // 0.24's chunk reader looped for ever on the zstd and lz4 chunks
        // 4 bytes short, and overflowed a subtraction on the chunk
        // decompressing to more than it claims and on the record longer
        // than its chunk (its panic caught then by a catch_unwind in
        // `scan`). It ignored an uncompressed chunk's declared size.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/mcap");
        for (file, why) in [
            ("chunk-uncompressed-4-bytes-short.mcap", "the chunk at byte 34 holds 66 bytes of records but its header says 70"),
            ("chunk-zstd-4-bytes-short.mcap", "the chunk at byte 34 holds 66 bytes of records but its header says 70"),
            ("chunk-lz4-4-bytes-short.mcap", "the chunk at byte 34 holds 66 bytes of records but its header says 70"),
            ("chunk-zstd-4-bytes-more-than-it-claims.mcap", "the chunk at byte 34 holds more than 62 bytes of records but its header says 62"),
            (
                "chunk-record-longer-than-the-chunk.mcap",
                "the chunk at byte 34 has a record (opcode 0x05, at byte 34 of its records) of 33 bytes but only 23 remain",
            ),
            // The fuzzer's input of that kind: its CRC refuses it now, before its records are read.
            ("record-longer-than-its-chunk.mcap", "the chunk at byte 39 has records whose CRC is 0x5cffc06a"),
        ] {
            let data = std::fs::read(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            let ended = scan(&data, |_| true).expect("an MCAP file").unwrap_or_default();
            assert!(ended.starts_with(why), "{file}: {ended}");
        }
    }

    #[test]
    fn a_chunk_unknown_damaged_or_holding_damaged_records_is_refused_naming_it() {
        let records = channel_and_message();
        let n = records.len() as u64;
        let refused = |file: Vec<u8>| messages_of(&file).1.expect("refused");
        assert_eq!(
            refused(chunked_file("bz2", &records, n, 0)),
            "the chunk at byte 8 is compressed with \"bz2\", which this reader cannot decompress (it reads zstd, lz4 and uncompressed chunks)"
        );
        let crc = crc32fast::hash(&records);
        let why = refused(chunked_file("zstd", &records, n, crc ^ 1));
        assert_eq!(
            why,
            format!("the chunk at byte 8 has records whose CRC is {crc:#010x} but its header says {:#010x}: the file is damaged", crc ^ 1)
        );
        // Padding after the zstd frame is skipped, as mcap skips it.
        let mut padded = chunked_file("zstd", &records, n, crc);
        let data_end = padded.len() - 8 - 29 - 13;
        padded.splice(data_end..data_end, [0u8; 5]);
        let (chunk_len, data_len) = (8 + 9, 8 + 9 + 32 + 4);
        for at in [chunk_len - 8, data_len] {
            let v = u64::from_le_bytes(padded[at..at + 8].try_into().expect("8 bytes")) + 5;
            padded[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        assert_eq!(messages_of(&padded), (vec!["/t".to_string()], None));
        // Not zstd at all.
        let mut file = chunked_file("zstd", &records, n, 0);
        file[8 + 9 + 32 + 4 + 8] ^= 0xff;
        assert!(refused(file).starts_with("the chunk at byte 8 cannot be decompressed (zstd): "));
        // A record longer than the chunk that holds it, and one cut short.
        let long = [&records[..], &record(mcap::records::op::MESSAGE, &[0; 30])[..30]].concat();
        assert_eq!(
            refused(chunked_file("lz4", &long, long.len() as u64, 0)),
            format!("the chunk at byte 8 has a record (opcode 0x05, at byte {n} of its records) of 30 bytes but only 21 remain in the chunk: the file is damaged")
        );
        let cut = [&records[..], &[5, 1]].concat();
        assert_eq!(
            refused(chunked_file("", &cut, cut.len() as u64, 0)),
            format!("the chunk at byte 8 ends inside a record's opcode and length (byte {n} of its {} bytes of records): the file is damaged", cut.len())
        );
        // A record whose inner length is past its body, and a chunk in a chunk.
        let topic = [&1u16.to_le_bytes()[..], &0u16.to_le_bytes(), &0xFFFF_FFF0u32.to_le_bytes(), b"/a"].concat();
        let bad = record(mcap::records::op::CHANNEL, &topic);
        assert_eq!(
            refused(chunked_file("zstd", &bad, bad.len() as u64, 0)),
            "in the chunk at byte 8: its Channel record's topic needs 4294967280 bytes but only 2 remain in the record: the file is damaged"
        );
        let inner = chunked_file("", &records, n, 0);
        let nested = record(mcap::records::op::CHUNK, &inner[8 + 9..inner.len() - 8 - 9 - 4 - 9 - 20]);
        assert_eq!(
            refused(chunked_file("", &nested, nested.len() as u64, 0)),
            "the chunk at byte 8 holds a chunk (at byte 0 of its records): the file is damaged"
        );
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
