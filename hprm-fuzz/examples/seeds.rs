//! Writes the fuzzers' first inputs (`fuzz/seeds/<target>/`): every
//! message kind of each protocol as the real encoders write it (the RTI's
//! `wire::encode`, the store's `Encoder`, the payload `Encoder`), the
//! repository's manifests, and an outbox with entries laid out as the
//! client's writer lays them. libFuzzer mutates from there; `fuzz/run.sh`
//! minimizes what it finds into `fuzz/corpus/`.
//!
//! `cargo run -p hprm-fuzz --example seeds -- fuzz/seeds`
//!
//! With `--captured DIR [CORPUS] [--max-per-target N]`, it turns instead
//! the traffic the daemons captured under `HPRM_FUZZ_CAPTURE=DIR` (see
//! `hprm_local_socket::capture`, `fuzz/capture.sh`) into inputs of the
//! targets ([`hprm_fuzz::captured`]), each replayed through its harness,
//! and adds those the corpus (default `fuzz/corpus`) lacks, named by
//! content hash, at most N (default 32) per target: the first by name.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hprm_node::payload::{
    msgpack::Writer, Buffer, BufferDescriptor, Dtype, Encoder, Location, SpilledMessage, StoreLink, EXT_BUFFER,
    EXT_SPILLED,
};
use hprm_rti::tag::Delay;
use hprm_rti::wire::{encode, Message, RejectReason};
use hprm_rti::Tag;
use hprm_store::protocol::message::{
    Encoder as StoreEncoder, ErrorReply, Hello, ObjectInfo, ObjectRef, Reply, Request,
};
use hprm_store::{ErrorCode, Notification, ObjectId, Placement, Stats};

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).expect("seed folder");
    std::fs::write(d.join(name), bytes).expect("seed file");
}

fn rti(dir: &Path) {
    let tag = Tag { time: 1_000_000, microstep: 2 };
    let messages = vec![
        Message::Reject(RejectReason::HmacDoesNotMatch),
        Message::FedIds { fed: 3, federation: b"pipeline".to_vec() },
        Message::Timestamp(123_456_789),
        Message::Resign,
        Message::TaggedMessage { port: 1, fed: 2, tag, payload: vec![0x92, 0x01, 0xa3, b'a', b'b', b'c'] },
        Message::NextEventTag(tag),
        Message::TagAdvanceGrant(tag),
        Message::ProvisionalTagAdvanceGrant(tag),
        Message::LatestTagConfirmed(tag),
        Message::StopRequest(tag),
        Message::StopRequestReply(tag),
        Message::StopGranted(tag),
        Message::AddressQuery(4),
        Message::AddressQueryReply { port: 15045, addr: [127, 0, 0, 1] },
        Message::AddressAdvertisement(15046),
        Message::P2pSendingFedId { fed: 1, federation: b"pipeline".to_vec() },
        Message::P2pMessage { port: 0, fed: 1, payload: vec![7; 40] },
        Message::P2pTaggedMessage { port: 2, fed: 0, tag, payload: vec![9; 100] },
        Message::ClockSyncT1(5),
        Message::ClockSyncT3(2),
        Message::ClockSyncT4(6),
        Message::ClockSyncCodedProbe(7),
        Message::PortAbsent { port: 1, fed: 2, tag },
        Message::NeighborStructure {
            upstreams: vec![(0, Delay::None), (1, Delay::After(5_000_000))],
            downstreams: vec![2, 3],
        },
        Message::Failed,
        Message::DownstreamNextEventTag(tag),
        Message::Resume(tag),
        Message::FedNonce { fed: 1, nonce: [1; 8] },
        Message::RtiResponse { nonce: [2; 8], hmac: [3; 32] },
        Message::FedResponse { hmac: [4; 32] },
        Message::UdpPort(0xffff),
        Message::Ack,
    ];
    // A federate's session as one stream, read in chunks of 7 bytes.
    let mut session = vec![6];
    for (i, msg) in messages.iter().enumerate() {
        let mut bytes = vec![255];
        encode(msg, &mut bytes);
        write(dir, "rti_frames", &format!("message-{i:02}"), &bytes);
        encode(msg, &mut session);
    }
    write(dir, "rti_frames", "session", &session);
}

fn store(dir: &Path) {
    let id = ObjectId([0x11; ObjectId::LEN]);
    let placement = Placement { data_offset: 4096, data_size: 100, metadata_offset: 4196, metadata_size: 4 };
    let requests = vec![
        Request::Create {
            id,
            data_size: 100,
            metadata: b"meta",
            deliveries: 2,
            wait_for_space: Duration::from_millis(5),
        },
        Request::Seal { id },
        Request::Abort { id },
        Request::Get {
            ids: Cow::Owned(vec![id, ObjectId([0x22; ObjectId::LEN])]),
            timeout: Some(Duration::from_secs(1)),
        },
        Request::Get { ids: Cow::Owned(vec![id]), timeout: None },
        Request::Release { id },
        Request::Contains { id },
        Request::Delete { id },
        Request::List,
        Request::Evict { bytes: 1 << 20 },
        Request::Subscribe,
        Request::Stats,
        Request::Reserve { block_len: 4096, count: 8 },
        Request::Publish { id, offset: 8192, data_size: 100, metadata_size: 0, deliveries: 1 },
        Request::Redeliver { id, deliveries: 3 },
        Request::Claim { id, placement, timeout: Some(Duration::from_millis(250)) },
        Request::Flush,
        Request::Identify { program: "pipeline" },
    ];
    // No spill file (0: not written, so the committed seeds stay as they were).
    let hello = Hello {
        version: 4,
        arena_size: 1 << 26,
        client_id: 7,
        populate: false,
        arena_id: 99,
        outbox_size: 65536,
        spill_size: 0,
    };
    let replies = vec![
        Reply::Hello(hello),
        Reply::Created(placement),
        Reply::Done,
        Reply::Objects(vec![ObjectRef { id, placement }]),
        Reply::Presence(true),
        Reply::Deleted { deferred: true },
        Reply::Listing(vec![ObjectInfo {
            id,
            placement,
            sealed: true,
            ref_count: 1,
            pending_deliveries: 2,
            delete_pending: false,
            age_ms: 5,
        }]),
        Reply::Evicted { objects: 2, bytes: 4096 },
        Reply::Stats(Stats { capacity: 1 << 26, bytes_in_use: 4096, clients: 2, ..Stats::default() }),
        Reply::Error(ErrorReply { code: ErrorCode::Timeout, message: "not sealed in time".into(), missing: vec![id] }),
        Reply::Notification(Notification::Sealed { id, data_size: 100, metadata_size: 4 }),
        Reply::Notification(Notification::Deleted { id }),
        Reply::Reserved { block_len: 4096, offsets: vec![0, 4096, 8192] },
    ];
    let mut enc = StoreEncoder::default();
    let mut all = vec![10, 0];
    for (i, req) in requests.iter().enumerate() {
        let frame = enc.request(i as u64 + 1, req).to_vec();
        write(dir, "store_frames", &format!("request-{i:02}"), &[&[255, 0][..], &frame].concat());
        all.extend_from_slice(&frame);
        if i < 6 {
            outbox_seed(dir, i, &frame);
        }
    }
    write(dir, "store_frames", "requests", &all);
    let mut all = vec![10, 1];
    for (i, reply) in replies.iter().enumerate() {
        let frame = enc.reply(i as u64, reply).to_vec();
        write(dir, "store_frames", &format!("reply-{i:02}"), &[&[255, 1][..], &frame].concat());
        all.extend_from_slice(&frame);
    }
    write(dir, "store_frames", "replies", &all);
    let frame = enc.reply(0, &Reply::Hello(hello)).to_vec();
    for fds in 0..3u8 {
        write(dir, "store_handshake", &format!("hello-{fds}"), &[&[fds][..], &frame].concat());
    }
    let frame = enc.reply(0, &Reply::Hello(Hello { outbox_size: 0, ..hello })).to_vec();
    write(dir, "store_handshake", "hello-no-outbox", &[&[1][..], &frame].concat());
}

/// An outbox whose ring holds `frame` `n + 1` times, as the client's
/// writer lays entries out (u32 length, u32 0, u64 after, frame, padding).
fn outbox_seed(dir: &Path, n: usize, frame: &[u8]) {
    let mut ring = Vec::new();
    for after in 0..=n as u64 {
        ring.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        ring.extend_from_slice(&0u32.to_le_bytes());
        ring.extend_from_slice(&after.to_le_bytes());
        ring.extend_from_slice(frame);
        ring.resize(ring.len().next_multiple_of(8), 0);
    }
    let tail = ring.len() as u64;
    let bytes = [&tail.to_le_bytes()[..], &(n as u64).to_le_bytes(), &ring].concat();
    write(dir, "outbox", &format!("entries-{n}"), &bytes);
}

#[derive(serde::Serialize)]
struct Message2 {
    stamp: u64,
    name: String,
    pixels: Buffer,
    #[serde(with = "hprm_node::payload::oob")]
    samples: Vec<f32>,
    extra: serde_json::Value,
}

fn payload(dir: &Path) {
    let encoder = Encoder::new(StoreLink::none(), usize::MAX);
    let pixels = Buffer::from_vec((0..48u8).collect()).with_shape(&[4, 4, 3]).expect("shape");
    let value = Message2 {
        stamp: 42,
        name: "camera".into(),
        pixels: pixels.clone(),
        samples: vec![0.5, 1.5],
        extra: serde_json::json!({"k": [1, -2, 3.5, null, true, "s"]}),
    };
    write(dir, "payload", "message", &encoder.encode(&value, 1).expect("encodes inline"));
    write(
        dir,
        "payload",
        "buffers",
        &encoder.encode(&vec![pixels.clone(), Buffer::from_slice(&[1.0f64, 2.0])], 1).expect("encodes"),
    );
    write(
        dir,
        "payload",
        "value",
        &encoder.encode(&serde_json::json!({"a": {"b": [1, 2, {"c": "d"}]}}), 1).expect("encodes"),
    );
    let id = ObjectId([0x33; ObjectId::LEN]);
    let d = BufferDescriptor {
        dtype: Dtype::parse("<f4").expect("dtype"),
        shape: vec![2, 3],
        strides: None,
        nbytes: 24,
        location: Location::Store(id),
    };
    let data = d.encode().expect("descriptor");
    write(dir, "payload", "descriptor", &data);
    let mut msg = Vec::new();
    let mut w = Writer(&mut msg);
    w.array_len(2);
    w.ext_header(EXT_BUFFER, data.len());
    msg.extend_from_slice(&data);
    let strided = BufferDescriptor { strides: Some(vec![4, 8]), shape: vec![3, 2], ..d };
    let data = strided.encode().expect("strided descriptor");
    Writer(&mut msg).ext_header(EXT_BUFFER, data.len());
    msg.extend_from_slice(&data);
    write(dir, "payload", "store-references", &msg);
    let spilled = SpilledMessage { id, nbytes: 1 << 20 };
    write(dir, "payload", "spilled", &spilled.to_payload());
    write(dir, "payload", "spilled-data", &spilled.encode());
    let mut ext = Vec::new();
    Writer(&mut ext).ext_header(EXT_SPILLED, 3);
    write(dir, "payload", "spilled-short", &ext);
}

fn manifests(dir: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let folders = ["examples/manifest", "examples/multihost", "hprm-cli/tests/manifests"];
    for folder in folders {
        let Ok(entries) = std::fs::read_dir(root.join(folder)) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "toml") {
                let name = format!("{}-{}", folder.replace('/', "_"), p.file_name().expect("name").to_string_lossy());
                write(dir, "manifest", &name, &std::fs::read(&p).expect("manifest"));
            }
        }
    }
}

/// The bridge's TOML mappings: the examples of its docs (the config
/// module's and the book page's `toml` blocks) and the configs its tests
/// write, accepted and refused.
fn bridge_configs(dir: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut configs = Vec::new();
    let module = std::fs::read_to_string(root.join("ros2-bridge/src/config.rs")).expect("config.rs");
    let doc: Vec<&str> =
        module.lines().filter_map(|l| l.strip_prefix("//!")).map(|l| l.strip_prefix(' ').unwrap_or(l)).collect();
    configs.extend(toml_blocks(&doc.join("\n")));
    let book = std::fs::read_to_string(root.join("docs/src/ros2-bridge.md")).expect("ros2-bridge.md");
    configs.extend(toml_blocks(&book));
    let topic = |topic: &str, ty: &str, direction: &str, port: &str, extra: &str| {
        format!(
            "[[topic]]\ntopic = \"{topic}\"\ntype = \"{ty}\"\ndirection = \"{direction}\"\nport = \"{port}\"\n{extra}"
        )
    };
    configs.push(topic("/camera/image", "sensor_msgs/msg/Image", "ros->hprm", "img", ""));
    configs.push(topic("/a", "std_msgs/msg/String", "ros->hprm", "a", "qos = { reliability = \"best_effort\" }\n"));
    configs.push(topic("/a", "std_msgs/msg/String", "up", "a", ""));
    configs.push(topic("/1a", "std_msgs/msg/String", "hprm->ros", "a", "time = \"header\"\n"));
    configs.push("[[topic]]\n".into());
    configs.push(
        "[[service]]\nservice = \"/s\"\ntype = \"std_srvs/srv/Trigger\"\nrole = \"client\"\nrequest = \"a\"\nresponse = \"b\"\n"
            .into(),
    );
    for (i, text) in configs.iter().enumerate() {
        write(dir, "bridge_config", &format!("config-{i:02}.toml"), text.as_bytes());
    }
}

/// The contents of the fenced `toml` blocks of a Markdown text.
fn toml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```toml") => current = Some(Vec::new()),
            (Some(block), "```") => {
                blocks.push(block.join("\n") + "\n");
                current = None;
            }
            (Some(block), _) => block.push(line),
            (None, _) => {}
        }
    }
    blocks
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == "--captured") {
        return captured(&args[1..]);
    }
    let dir: PathBuf = args.first().map(PathBuf::from).unwrap_or_else(|| "fuzz/seeds".into());
    rti(&dir);
    store(&dir);
    payload(&dir);
    manifests(&dir);
    bridge_configs(&dir);
    recordings(&dir);
    link(&dir);
    println!("seeds written to {}", dir.display());
}

/// MCAP files laid out as `hprm launch --record` writes them (a program's
/// manifest, its run and summary metadata, a value channel, a deadline
/// decisions channel, a physical action channel), in the writer's
/// variants: chunks compressed with zstd or lz4 or not at all, no chunks,
/// and chunks without CRCs (so that a mutated chunk is read, not refused
/// by its CRC); and a file cut short, as a killed recorder leaves one.
/// The real recordings of the tests join them in fuzz/seeds/mcap/
/// (see fuzz/run.sh).
fn recordings(dir: &Path) {
    use std::collections::BTreeMap;
    use std::io::Cursor;
    let variants: [(&str, Option<mcap::Compression>, bool, bool); 5] = [
        ("zstd", Some(mcap::Compression::Zstd), true, true),
        ("lz4", Some(mcap::Compression::Lz4), true, true),
        ("plain", None, true, true),
        ("unchunked", None, false, true),
        ("no-crcs", None, true, false),
    ];
    let manifest = r#"{"name":"rec","federate":[{"name":"src"},{"name":"sink"}],"connection":[{"from":"src.out","to":"sink.inp"}]}"#;
    let meta = |name: &str, kv: &[(&str, &str)]| mcap::records::Metadata {
        name: name.into(),
        metadata: kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    for (name, compression, chunks, crcs) in variants {
        let mut w = mcap::WriteOptions::new()
            .compression(compression)
            .use_chunks(chunks)
            .chunk_size(Some(256))
            .calculate_chunk_crcs(crcs)
            .calculate_data_section_crc(crcs)
            .calculate_summary_section_crc(crcs)
            .create(Cursor::new(Vec::new()))
            .expect("writer");
        w.write_metadata(&meta("hprm.program", &[("manifest", manifest)])).expect("metadata");
        w.write_metadata(&meta(
            "hprm.run",
            &[("program", "rec"), ("coordination", "centralized"), ("policy", "block")],
        ))
        .expect("metadata");
        let value = w.add_schema("hprm.value", "hprm-msgpack", b"an HPRM port value").expect("schema");
        let decision = w.add_schema("hprm.deadline_decision", "hprm-msgpack", b"a deadline decision").expect("schema");
        let none = BTreeMap::new();
        let out = w.add_channel(value, "src.r.out", "msgpack", &none).expect("channel");
        let phys = w.add_channel(value, "physical/src.r.sensor", "msgpack", &none).expect("channel");
        let decisions = w.add_channel(decision, "deadlines/sink", "msgpack", &none).expect("channel");
        let start = 1_700_000_000_000_000_000u64;
        for n in 0..4u64 {
            use rmpv::Value as V;
            let v = V::Map(vec![
                (V::from("n"), V::from(n)),
                (V::from("name"), V::from(format!("frame-{n}"))),
                (V::from("list"), V::Array(vec![V::from(n), V::from(2.5), V::Nil, V::from(true)])),
                (V::from("raw"), V::Binary(vec![n as u8; 12])),
            ]);
            let mut bytes = Vec::new();
            rmpv::encode::write_value(&mut bytes, &v).expect("into a Vec");
            let v = bytes;
            let header = |channel_id| mcap::records::MessageHeader {
                channel_id,
                sequence: n as u32 % 2,
                log_time: start + n * 10_000_000,
                publish_time: start + n * 10_000_000 + 5,
            };
            w.write_to_known_channel(&header(out), &v).expect("message");
            w.write_to_known_channel(&header(phys), &v).expect("message");
            let missed = n % 2 == 1;
            let d = [
                &[0x82, 0xa8][..],
                b"reaction",
                &[0xaa],
                b"sink.r.run",
                &[0xa6],
                b"missed",
                &[0xc2 + u8::from(missed)],
            ]
            .concat();
            w.write_to_known_channel(&header(decisions), &d).expect("message");
        }
        let start_text = start.to_string();
        let last = format!("{}/0", start + 30_000_000);
        w.write_metadata(&meta(
            "hprm.summary",
            &[
                ("start", &start_text),
                ("lost", "0"),
                ("last.src", &last),
                ("last.sink", &last),
                ("lost.src.r.out", "0"),
            ],
        ))
        .expect("metadata");
        w.finish().expect("finish");
        let bytes = w.into_inner().into_inner();
        write(dir, "mcap", name, &bytes);
        if name == "plain" {
            write(dir, "mcap", "cut-short", &bytes[..bytes.len() * 2 / 3]);
        }
    }
}

/// The store link's messages (`hprm-link/src/wire.rs`, by its encoders'
/// layout): hello replies (with the link's Zenoh session id, protocol 6)
/// of this version and another, push headers of
/// both kinds, each outcome byte, a fetch, its replies, a dropped-push
/// notice and a released notice; byte 0 picks the decoder (see
/// `hprm_fuzz::link_wire`).
fn link(dir: &Path) {
    const VERSION: u8 = 6;
    let mut hello = vec![0, VERSION];
    hello.extend_from_slice(&0xfeed_0001u64.to_le_bytes());
    hello.extend_from_slice(&7u64.to_le_bytes());
    hello.extend_from_slice(&[0x5a; 16]);
    hello.extend_from_slice(b"perception");
    write(dir, "link_wire", "hello", &hello);
    write(dir, "link_wire", "hello-other-version", &[0, VERSION + 1, b'x']);
    let mut data_header = Vec::new();
    for (kind, name, meta) in [(1u8, "push-data", &b"meta"[..]), (2, "push-announce", &b""[..])] {
        let mut h = vec![1, VERSION, kind];
        h.extend_from_slice(&[0x11; ObjectId::LEN]);
        h.extend_from_slice(&3u32.to_le_bytes());
        h.extend_from_slice(&0x0123_4567_89ab_cdefu64.to_le_bytes());
        h.extend_from_slice(&(50u64 << 20).to_le_bytes());
        h.extend_from_slice(&(meta.len() as u16).to_le_bytes());
        h.extend_from_slice(meta);
        h.push(6);
        h.extend_from_slice(b"camera");
        write(dir, "link_wire", name, &h);
        if kind == 1 {
            data_header = h[1..].to_vec();
        }
    }
    for b in 1..=3u8 {
        write(dir, "link_wire", &format!("outcome-{b}"), &[2, b]);
    }
    let mut fetch = vec![3, VERSION];
    fetch.extend_from_slice(&[0x11; ObjectId::LEN]);
    fetch.extend_from_slice(b"detector");
    write(dir, "link_wire", "fetch", &fetch);
    let mut data = vec![4, VERSION, 2];
    data.extend_from_slice(&data_header);
    write(dir, "link_wire", "fetch-reply-data", &data);
    write(dir, "link_wire", "fetch-reply-pending", &[4, VERSION, 3]);
    write(dir, "link_wire", "fetch-reply-gone", &[&[4, VERSION, 4][..], b"freed"].concat());
    let mut dropped = vec![5, VERSION];
    dropped.extend_from_slice(&[0x11; ObjectId::LEN]);
    dropped.push(6);
    dropped.extend_from_slice(b"camera");
    dropped.extend_from_slice(b"its push queue is full");
    write(dir, "link_wire", "dropped", &dropped);
    let mut released = vec![6, VERSION, 8];
    released.extend_from_slice(b"detector");
    released.extend_from_slice(&[0x11; ObjectId::LEN]);
    released.extend_from_slice(&[0x22; ObjectId::LEN]);
    write(dir, "link_wire", "released", &released);
}

/// `--captured DIR [CORPUS] [--max-per-target N]`: see the module's doc.
fn captured(args: &[std::ffi::OsString]) {
    use std::collections::BTreeMap;
    let mut paths = Vec::new();
    let mut max = 32;
    let mut args = args.iter();
    while let Some(a) = args.next() {
        if a == "--max-per-target" {
            max = args
                .next()
                .and_then(|n| n.to_str()?.parse().ok())
                .unwrap_or_else(|| panic!("--max-per-target takes a number"));
        } else {
            paths.push(PathBuf::from(a));
        }
    }
    let Some(dir) = paths.first() else { panic!("usage: seeds --captured DIR [CORPUS] [--max-per-target N]") };
    let corpus = paths.get(1).cloned().unwrap_or_else(|| "fuzz/corpus".into());
    // Every input made, by target and name (so deduplicated, in name order).
    let mut made: BTreeMap<&str, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
    let mut files = 0;
    let Ok(folders) = std::fs::read_dir(dir) else {
        println!("nothing captured in {}", dir.display());
        return;
    };
    for entry in folders.flatten() {
        let folder = entry.file_name().to_string_lossy().into_owned();
        let Ok(captures) = std::fs::read_dir(entry.path()) else { continue };
        for capture in captures.flatten() {
            // Skip a capture still being written (`.tmp-*`).
            if capture.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let bytes = std::fs::read(capture.path()).unwrap_or_else(|e| panic!("{}: {e}", capture.path().display()));
            files += 1;
            for (target, input) in hprm_fuzz::captured::inputs(&folder, &bytes) {
                made.entry(target).or_default().insert(hprm_local_socket::capture::file_name(&input), input);
            }
        }
    }
    println!("{files} captured files in {}", dir.display());
    for (target, inputs) in made {
        let harness = hprm_fuzz::TARGETS.iter().find(|(t, _)| *t == target).expect("a target of TARGETS").1;
        let folder = corpus.join(target);
        std::fs::create_dir_all(&folder).expect("corpus folder");
        let total = inputs.len();
        let mut added = 0;
        for (name, input) in inputs {
            let path = folder.join(&name);
            if added == max || path.exists() {
                continue;
            }
            // A harness that panics here is a finding: it fails this run.
            harness(&input);
            std::fs::write(&path, &input).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            added += 1;
        }
        println!("{target}: {total} inputs, {added} added to {}", folder.display());
    }
}
