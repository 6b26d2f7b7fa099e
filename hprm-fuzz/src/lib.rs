//! # hprm-fuzz: the fuzz harnesses of HPRM's decoders
//!
//! One function per decoder that reads bytes another process wrote: each
//! takes arbitrary bytes and must return (never panic, hang or allocate
//! without bound) whatever they hold. The cargo-fuzz targets in `fuzz/`
//! (nightly, libFuzzer) call them; `tests/replay.rs` replays the committed
//! corpora (`fuzz/corpus/<target>/`) and the crashes once found
//! (`fuzz/regressions/<target>/`) through them on stable, in the normal test
//! command. Where a decoder accepts a value, the harness also checks that
//! encoding it again decodes to the same value, so a decoder that misreads
//! is caught as well as one that crashes.
//!
//! A stream decoder is fed in chunks whose size the input's first byte
//! picks, so that the fuzzer explores messages split across reads.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

pub mod captured;

/// A harness: takes any bytes, returns (a panic is a finding).
pub type Harness = fn(&[u8]);

/// Every target, by the name of its cargo-fuzz target and corpus folder.
pub const TARGETS: [(&str, Harness); 9] = [
    ("rti_frames", rti_frames),
    ("store_frames", store_frames),
    ("store_handshake", store_handshake),
    ("outbox", outbox),
    ("payload", payload),
    ("manifest", manifest),
    ("bridge_config", bridge_config),
    ("mcap", mcap),
    ("link_wire", link_wire),
];

/// Splits `data` into the chunk size its first byte picks (1..=256) and
/// the stream that follows.
fn chunked(data: &[u8]) -> Option<(usize, &[u8])> {
    let (&first, stream) = data.split_first()?;
    Some((usize::from(first) + 1, stream))
}

/// The RTI's LF frames: the one-shot decoders ([`hprm_rti::wire::decode`],
/// [`hprm_rti::wire::decode_tagged`]) and the incremental one the RTI and
/// the federates read sockets with ([`hprm_rti::frames::FrameBuffer`]),
/// fed in chunks, with a small first buffer so that it grows.
pub fn rti_frames(data: &[u8]) {
    use hprm_rti::frames::{Frame, FrameBuffer};
    use hprm_rti::wire::{decode, decode_tagged, encode, Limits};
    let Some((chunk, stream)) = chunked(data) else { return };
    // Small limits, so that the fuzzer reaches them with small inputs.
    let limits = Limits { max_payload: 1024, max_neighbors: 64 };
    if let Ok(Some((msg, n))) = decode(stream, &limits) {
        assert!(n <= stream.len(), "consumed {n} of {} bytes", stream.len());
        let mut again = Vec::new();
        encode(&msg, &mut again);
        let (back, m) = decode(&again, &limits).expect("re-encoded message decodes").expect("complete");
        assert_eq!((back, m), (msg, again.len()), "decode(encode(m)) != m");
    }
    if let Ok(Some((tagged, n))) = decode_tagged(stream, &limits) {
        assert!(n <= stream.len() && tagged.payload.len() <= limits.max_payload);
    }
    let mut frames = FrameBuffer::new(chunk % 64 + 1, limits);
    let mut rest = stream;
    while let Ok(ready) = frames.next_is_ready() {
        match frames.next() {
            Ok(Some(Frame::Tagged(t))) => assert!(ready && t.payload.len() <= limits.max_payload),
            Ok(Some(Frame::Other(_))) => assert!(ready),
            Ok(None) => {
                assert!(!ready, "next_is_ready said yes, next said no");
                if rest.is_empty() {
                    break;
                }
                let spare = frames.spare();
                let n = chunk.min(spare.len()).min(rest.len());
                spare[..n].copy_from_slice(&rest[..n]);
                frames.filled(n);
                rest = &rest[n..];
            }
            Err(_) => break,
        }
    }
}

/// The store's frames, both ways: byte 1 picks the daemon's side (frames
/// of requests, cut by [`hprm_store::protocol::frame::FrameBuffer`] and
/// decoded by `decode_request`) or the client's (replies and
/// notifications, `decode_reply`). Each decoded frame is encoded again
/// and must decode to the same value. Both sides take frames of up to
/// 1 MiB here: a reply's limit (64 MiB) is the same code with a larger
/// number, and would make every input that claims it allocate that much.
pub fn store_frames(data: &[u8]) {
    use hprm_store::protocol::frame::{FrameBuffer, MAX_REQUEST_BODY};
    use hprm_store::protocol::message::{decode_reply, decode_request, Encoder};
    let Some((chunk, rest)) = chunked(data) else { return };
    let Some((&side, mut rest)) = rest.split_first() else { return };
    let requests = side % 2 == 0;
    let mut frames = FrameBuffer::new(MAX_REQUEST_BODY);
    let mut encoder = Encoder::default();
    loop {
        match frames.poll() {
            Ok(Some(len)) => {
                let body = frames.body(len);
                if requests {
                    if let Ok((seq, req)) = decode_request(body) {
                        let frame = encoder.request(seq, &req).to_vec();
                        let again = decode_request(&frame[8..]).expect("re-encoded request decodes");
                        assert_eq!(again, (seq, req), "decode(encode(request)) != request");
                    }
                } else if let Ok((seq, reply)) = decode_reply(body) {
                    let frame = encoder.reply(seq, &reply).to_vec();
                    let again = decode_reply(&frame[8..]).expect("re-encoded reply decodes");
                    assert_eq!(again, (seq, reply), "decode(encode(reply)) != reply");
                }
                frames.pop(len);
            }
            Ok(None) => {
                if rest.is_empty() {
                    break;
                }
                let spare = frames.spare();
                let n = chunk.min(spare.len()).min(rest.len());
                spare[..n].copy_from_slice(&rest[..n]);
                frames.commit(n);
                rest = &rest[n..];
            }
            Err(_) => break,
        }
    }
}

/// The client's end of the store's handshake
/// ([`hprm_store::protocol::handshake::recv_hello`]) reading what a
/// hostile peer wrote: byte 0 says how many descriptors ride with it (0-3,
/// copies of /dev/null, neither an arena, an outbox nor a spill file).
pub fn store_handshake(data: &[u8]) {
    use hprm_store::protocol::handshake::{recv_hello, send_hello};
    use std::os::fd::AsFd;
    let Some((&fds, bytes)) = data.split_first() else { return };
    let Ok((ours, theirs)) = UnixStream::pair() else { return };
    let Ok(null) = std::fs::File::open("/dev/null") else { return };
    // Bounded by the socket's buffer: the peer writes it all before we read.
    let bytes = &bytes[..bytes.len().min(32 << 10)];
    let mut sent = 0;
    if !bytes.is_empty() && fds % 4 > 0 {
        let outbox = (fds % 4 > 1).then(|| null.as_fd());
        let spill = (fds % 4 > 2).then(|| null.as_fd());
        sent = send_hello(theirs.as_fd(), bytes, null.as_fd(), outbox, spill).unwrap_or(0);
    }
    if (&theirs).write_all(&bytes[sent..]).is_err() {
        return;
    }
    drop(theirs);
    let _ = ours.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = recv_hello(&ours);
}

/// The daemon's reading of a client's outbox
/// ([`hprm_store::outbox::OutboxReader::take`]), whose control words and
/// ring the client writes at will: bytes 0-7 are the tail, 8-15 how many
/// socket frames were handled, the rest lands in the ring.
pub fn outbox(data: &[u8]) {
    use hprm_store::outbox::{OutboxReader, MIN_CAPACITY, RING};
    if data.len() < 16 {
        return;
    }
    let tail = &data[..8];
    let handled = u64::from_le_bytes(data[8..16].try_into().expect("8 bytes"));
    let ring = &data[16..data.len().min(16 + MIN_CAPACITY as usize)];
    let Ok(mut reader) = OutboxReader::create(MIN_CAPACITY) else { return };
    let Ok(fd) = reader.fd().try_clone_to_owned() else { return };
    let file = std::fs::File::from(fd);
    if file.write_all_at(ring, RING).is_err() || file.write_all_at(tail, 0).is_err() {
        return;
    }
    let mut frame = Vec::new();
    // Each entry taken moves the head by at least 16 bytes: a 4 KiB ring
    // holds at most 256 entries, so a reader that loops longer is stuck.
    for _ in 0..=(MIN_CAPACITY / 16) {
        match reader.take(handled, &mut frame) {
            Ok(true) => assert!(frame.len() >= hprm_store::protocol::frame::HEADER_LEN),
            Ok(false) | Err(_) => return,
        }
    }
    panic!("the outbox reader took more entries than its ring holds");
}

/// A value with every kind of field the payload codec treats itself:
/// buffers (inline, or references to store objects), byte strings,
/// nested values.
#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)] // Read only through Debug: decoding is what is tested.
struct Message {
    stamp: u64,
    name: String,
    pixels: hprm_node::payload::Buffer,
    #[serde(with = "hprm_node::payload::oob")]
    samples: Vec<f32>,
    extra: serde_json::Value,
}

/// The payload codec (MessagePack value trees with buffer descriptors), as
/// a receiver reads a message: scanned for store references, decoded as a
/// plain value tree and as a typed message, and its extension values on
/// their own. No store is connected: a reference to a store object must
/// be refused with an error, never followed.
pub fn payload(data: &[u8]) {
    use hprm_node::payload::{BufferDescriptor, Decoder, SpilledMessage, StoreLink};
    let decoder = Decoder::new(StoreLink::none(), Duration::ZERO);
    let _ = Decoder::references(data);
    let _ = decoder.decode::<serde_json::Value>(data);
    let _ = decoder.decode::<Message>(data);
    let _ = decoder.decode::<Vec<hprm_node::payload::Buffer>>(data);
    let _ = decoder.decode::<hprm_node::payload::conformance::Sample>(data);
    let _ = SpilledMessage::from_payload(data);
    if let Ok(d) = BufferDescriptor::decode(data) {
        if let Ok(again) = d.encode() {
            assert_eq!(BufferDescriptor::decode(&again).expect("re-encoded descriptor decodes"), d);
        }
    }
    if let Ok(s) = SpilledMessage::decode(data) {
        assert_eq!(SpilledMessage::decode(&s.encode()).expect("re-encoded reference decodes"), s);
    }
}

/// A program's manifest (TOML, as `hprm launch` and `hprm check` read it):
/// parsed, checked, its banks expanded and written as the JSON the
/// launcher hands to federates, which must read back.
pub fn manifest(data: &[u8]) {
    use hprm_node::manifest::Manifest;
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(m) = toml::from_str::<Manifest>(text) else { return };
    let problems = m.check();
    let expanded = m.expanded();
    let _ = expanded.check();
    if problems.is_empty() {
        let _ = Manifest::from_json(&expanded.to_json());
    }
}

// The ROS 2 bridge's config parser, compiled here from the bridge's own
// source file: the bridge needs a ROS 2 install to build (r2r), its
// config module needs only serde, toml and thiserror. (Its unit tests run
// here too, in the root workspace's test command.) A plain comment, not a
// doc comment: rustdoc resolves the links of a module whose docs are both
// outer and inner in the outer docs' scope (rust-lang/rust#134904), where
// the file's own links (`Config::load`...) would not resolve.
#[path = "../../ros2-bridge/src/config.rs"]
// `Config::load` reads a file: the harness parses text. The bridge's own
// code is not held to clippy's style lints (its build needs ROS 2, which
// scripts/lint.sh does without), so neither is this copy of it.
#[allow(dead_code, clippy::nonminimal_bool)]
mod bridge_config;

/// The ROS 2 bridge's TOML mappings (`hprm-ros2-bridge --config`): parsed
/// and checked; an accepted config lists one port per topic and
/// parameter, two per service and two to four per action, each named once
/// (what the bridge federate's ports are built from), and a refused one
/// gives an error that names the file.
pub fn bridge_config(data: &[u8]) {
    use bridge_config::{Config, ConfigError};
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = std::path::Path::new("bridge.toml");
    match Config::parse(text, path) {
        Ok(config) => {
            let ports = config.ports();
            let actions: usize = config
                .actions
                .iter()
                .map(|a| 2 + usize::from(a.feedback.is_some()) + usize::from(a.cancel.is_some()))
                .sum();
            assert_eq!(
                ports.len(),
                config.topics.len() + config.parameters.len() + 2 * config.services.len() + actions
            );
            let names: std::collections::HashSet<&str> = ports.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(names.len(), ports.len(), "a port named twice passed the check");
        }
        Err(e @ (ConfigError::Syntax { .. } | ConfigError::Invalid { .. })) => {
            assert!(e.to_string().contains("bridge.toml"), "an error that does not name the file: {e}");
        }
        Err(e @ ConfigError::Read { .. }) => panic!("parsing text read a file: {e}"),
    }
}

// How `hprm bag` and `hprm replay` read a recording, compiled here from
// the command's own source file (`hprm-cli` is a binary; its reading
// needs only mcap, zstd, lz4, crc32fast, rmpv, anyhow and hprm-node).
// Not a doc comment, for the reason given at `bridge_config`.
#[path = "../../hprm-cli/src/recording.rs"]
// The writer's half (`encode_decision`, `format_tag`) is not a decoder.
#[allow(dead_code)]
mod recording;

/// A recording (MCAP), read as `hprm bag info|echo` and `hprm replay`
/// read one: every record, chunks opened (zstd, lz4, CRCs checked); each
/// message's value decoded (a deadline decision, or the MessagePack value
/// `hprm bag echo` prints); the messages with their tags relative to the
/// start; and what the metadata says of the recorded program (its
/// manifest, start, last tags). Every reading ends in an error at worst.
pub fn mcap(data: &[u8]) {
    use mcap::records::Record;
    use std::collections::BTreeMap;
    let mut meta: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut topics: std::collections::HashMap<u16, String> = std::collections::HashMap::new();
    let scanned = recording::scan(data, |r| {
        match r {
            Record::Channel(c) => {
                topics.insert(c.id, c.topic);
            }
            Record::Message { header, data } => match topics.get(&header.channel_id) {
                Some(t) if t.starts_with(recording::DECISIONS_PREFIX) => {
                    let _ = recording::decode_decision(&data);
                }
                _ => {
                    let _ = rmpv::decode::read_value(&mut &data[..]);
                }
            },
            Record::Metadata(m) => {
                meta.insert(m.name, m.metadata);
            }
            _ => {}
        }
        true
    });
    let Ok(why) = scanned else { return };
    let start = recording::program(&meta, why, std::path::Path::new("fuzz.mcap")).map_or(0, |p| p.start);
    let whole = recording::messages(data, start, |_, _, _| true);
    assert!(whole.is_ok(), "messages() refused what scan() read");
}

// The store link's wire format, compiled here alone from the link's
// source file: the link's crate needs Zenoh, its wire format only
// `hprm-store`'s object ids. (Its unit tests run here too.) Not a doc
// comment, for the reason given at `bridge_config`.
#[path = "../../hprm-link/src/wire.rs"]
// The keys and host names are the link's own, not decoders.
#[allow(dead_code)]
mod link_wire;

/// The store link's messages between hosts, as a link reads what a peer
/// sent: byte 0 picks the hello reply (0), a push's header (1), a push's
/// outcome byte (2), a fetch (3), a fetch's reply (4), a dropped-push
/// notice (5) or a released notice (6); a message that decodes is encoded
/// again and must decode to the same.
pub fn link_wire(data: &[u8]) {
    use link_wire::{hello, parse_hello, Dropped, Fetch, FetchReply, Header, Outcome, Released, LINK_VERSION};
    let Some((&which, bytes)) = data.split_first() else { return };
    match which % 7 {
        0 => {
            if let Ok(h) = parse_hello(bytes) {
                if h.version == LINK_VERSION {
                    let again = hello(&h.host, h.arena, h.incarnation, h.session);
                    assert_eq!(parse_hello(&again), Ok(h), "parse(hello(h)) != h");
                }
            }
        }
        1 => {
            if let Ok(h) = Header::decode(bytes) {
                assert!(h.metadata.len() <= usize::from(u16::MAX));
                // The name read lossily may outgrow the 255 bytes a header holds.
                if h.from.len() <= 255 {
                    assert_eq!(Header::decode(&h.encode()), Ok(h), "decode(encode(h)) != h");
                }
            }
        }
        2 => {
            if let Some(&b) = bytes.first() {
                assert_eq!(Outcome::from_byte(b).map(|o| o as u8), Some(b).filter(|b| (1..=3).contains(b)));
            }
        }
        3 => {
            // The name read lossily is re-encoded as read.
            if let Ok(f) = Fetch::decode(bytes) {
                assert_eq!(Fetch::decode(&f.encode()), Ok(f), "decode(encode(fetch)) != fetch");
            }
        }
        4 => {
            if let Ok(r) = FetchReply::decode(bytes) {
                let fits = !matches!(&r, FetchReply::Data { header, .. } if header.from.len() > 255);
                if fits {
                    assert_eq!(FetchReply::decode(&r.encode()), Ok(r), "decode(encode(reply)) != reply");
                }
            }
        }
        5 => {
            if let Ok(d) = Dropped::decode(bytes) {
                if d.from.len() <= 255 {
                    assert_eq!(Dropped::decode(&d.encode()), Ok(d), "decode(encode(notice)) != notice");
                }
            }
        }
        _ => {
            // The name read lossily may outgrow the 255 bytes a notice holds.
            if let Ok(r) = Released::decode(bytes) {
                if r.from.len() <= 255 {
                    assert_eq!(Released::decode(&r.encode()), Ok(r), "decode(encode(released)) != released");
                }
            }
        }
    }
}
