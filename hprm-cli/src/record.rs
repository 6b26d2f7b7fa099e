//! `hprm launch --record FILE.mcap`: the recorder, a client of the store
//! that writes every message sent between federates into an MCAP file.
//!
//! Each federate feeds it over a socket (`hprm_node::record`): the
//! message's port, tag and physical send time, and its payload as the
//! receivers get it, large buffers as store references. One thread per
//! federate takes the store objects a message references (the recorder
//! counts as one of their deliveries, so they stay until written) and
//! hands the message to the writer through a bounded queue; the writer
//! copies each buffer from shared memory into the file and then releases
//! it. What the recorder holds is bounded: [`BACKLOG`] messages of at most
//! one in-band frame each, plus store objects the store accounts for.
//! When the writer falls behind, the queue fills, the feeds' sockets fill,
//! and the federates' policy decides (`block`: they wait; `fail`: they give
//! the message up and count it).
//!
//! The file: one channel per recorded output (topic `federate.reactor.port`,
//! message encoding `msgpack`, schema [`SCHEMA_NAME`], whose text says how
//! to read a value); a message's log time is its tag's time, its publish
//! time the physical time it was sent, its sequence the tag's microstep.
//! Store references are replaced by the buffers themselves (inline buffer
//! descriptors), so a record needs nothing but the file. Metadata:
//! [`META_PROGRAM`] (the program's manifest: federates, reactors, ports,
//! connections, delays), [`META_RUN`] (how it was run) and, at the end,
//! [`META_SUMMARY`] (messages and losses per channel). Deadline
//! decisions (a reaction with a deadline ran its body, or its deadline
//! handler because the deadline was missed: physical time decided, so
//! replay needs them) go on one channel per federate, topic
//! [`DECISIONS_PREFIX`]`FEDERATE`, schema [`DECISION_SCHEMA`]: one small
//! message per decision (a MessagePack map `{reaction, missed}`) at its tag;
//! the summary counts them (`decisions`, `decisions.FEDERATE`). Values
//! scheduled on physical actions (sensor input: replay feeds them back
//! instead of running the hardware) go on one channel per action, topic
//! [`PHYSICAL_PREFIX`]`federate.reactor.action`, schema [`SCHEMA_NAME`] like
//! a connection's, at the tag each value took; always recorded, whatever
//! `--topics` says, and counted apart (`physical`). A physical action whose
//! values are another system's messages in its own encoding (the ROS 2
//! bridge's topics, `hprm_node::record::Foreign`) has them written a second
//! time, their bytes as they are, on a channel of that topic, schema and
//! encoding (`ros2msg`, `cdr`), as Foxglove views are. Chunks are closed at
//! least every [`FLUSH_EVERY`], so a recorder killed outright leaves a file
//! readable up to its last complete chunk. In a program that spans hosts,
//! each host's recorder records that host's federates: its file is the
//! host's *share* (`host` and `hosts` in [`META_RUN`], the other hosts'
//! federates as `federates_elsewhere` in the summary), which `crate::merge`
//! joins with the other hosts' into the program's whole recording.

use std::collections::{BTreeMap, HashMap};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
pub use hprm_node::manifest::record::Rotate;
use hprm_node::payload::{
    BufferDescriptor, Decoder, Location, StoreLink, EXT_ARROW, EXT_BUFFER, EXT_BYTES, EXT_TENSOR,
};
use hprm_node::record::{Connection, Foreign, Header, Hello, Listener, Selection, DECISION, END};
use hprm_node::Tag;

use crate::foxglove;
use hprm_store::Object;

// The file's names and encodings, defined with its reader.
use crate::recording::{
    encode_decision, format_tag, DECISIONS_PREFIX, FEDERATES_ELSEWHERE, LAST_PREFIX, META_PROGRAM, META_RUN,
    META_SUMMARY, PHYSICAL_PREFIX, RUN_HOST,
};

/// Messages queued between the federates' threads and the writer.
const BACKLOG: usize = 64;

/// The longest a chunk stays open (unwritten) in the file.
const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// Target size of a chunk before compression.
const CHUNK_SIZE: u64 = 4 << 20;

/// Room the writer keeps free on the recording's filesystem beyond the
/// open chunk and the next message: its buffer (1 MiB), the summary and
/// the footer. Below that, the recording ends cleanly ([`DiskFull`]).
const RESERVE: u64 = 4 << 20;

/// How long the recorder waits for a store object a message references.
const GET_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `hprm launch` waits, once its federates have exited, for the
/// recorder to read its feeds to their end before it stops the store
/// ([`Recorder::drain`]): a backlog is at most the store's memory, which a
/// disk writes in seconds.
pub const DRAIN_BOUND: Duration = Duration::from_secs(120);

/// The schema of every channel.
pub const SCHEMA_NAME: &str = "hprm.value";
/// Its encoding (the schema data is a text for people and programs that
/// know nothing of HPRM).
pub const SCHEMA_ENCODING: &str = "hprm-msgpack";

/// The schema of deadline decision channels.
pub const DECISION_SCHEMA: &str = "hprm.deadline_decision";
const DECISION_SCHEMA_TEXT: &str = "\
A deadline decision of an HPRM federate: one MessagePack map
{\"reaction\": the reaction's path (federate.reactor.reaction), \"missed\": true when
its deadline was missed (its deadline handler ran), false when its body ran}.
Message header: log_time = the tag's time (ns since the epoch), sequence = the
tag's microstep, publish_time = physical time of the decision.";

/// The schema text: how to decode a value of any channel.
const SCHEMA_TEXT: &str = "\
An HPRM port value: one MessagePack value (structs are maps with field names).
Extension types carry what MessagePack lacks:
  ext 1 buffer, ext 4 bytes, ext 5 Arrow IPC stream, ext 6 torch tensor: the data
    is a MessagePack array [dtype, shape, strides, nbytes, location] where dtype is a
    numpy type string (e.g. \"<f4\", \"|u1\"), shape an array of ints, strides nil
    (C-contiguous) or an array of byte strides, nbytes an int, and location a bin
    holding the nbytes bytes themselves (in a recording every buffer is inline).
  ext 3 pickled Python object: Python pickle protocol 5 bytes.
Message header: log_time = the tag's time (ns since the epoch), sequence = the
tag's microstep, publish_time = physical time of sending (ns since the epoch).
The hprm.summary metadata's `start` is the program's start time (ns since the epoch).";

/// `--record` and its options.
pub struct Options {
    pub path: PathBuf,
    /// Topics to record (`federate.port` or `federate.reactor.port`);
    /// empty: every connection.
    pub topics: Vec<String>,
    pub policy: String,
    pub compression: Option<mcap::Compression>,
    /// Test aid: the writer sleeps this long per message (a slow disk).
    pub throttle: Option<Duration>,
    /// `--record-rotate`: several files, each closed (complete) when full.
    pub rotate: Option<Rotate>,
    /// Also write images and point clouds with Foxglove's schemas
    /// ([`crate::foxglove`]); `--record-foxglove`, on by default.
    pub foxglove: bool,
}

/// Whether `topic` names the output `port` (`federate.reactor.port`):
/// exactly, or as `federate.port`.
pub fn names(topic: &str, port: &str) -> bool {
    if topic == port {
        return true;
    }
    match (topic.split_once('.'), port.split_once('.'), port.rsplit_once('.')) {
        (Some((tf, tp)), Some((pf, _)), Some((_, pp))) => !tp.contains('.') && tf == pf && tp == pp,
        _ => false,
    }
}

/// What each federate's thread hands the writer.
enum Entry {
    /// A federate's recorded ports: one channel each; and for those of its
    /// physical actions whose values are another system's messages
    /// (`Hello::foreign`), by topic, how to write them as such.
    Ports { federate: String, start: i64, ports: Vec<Arc<str>>, foreign: Vec<(Arc<str>, Foreign)> },
    Message {
        topic: Arc<str>,
        tag: Tag,
        sent: i64,
        /// The in-band message (a spilled one's data is in `spilled`).
        payload: Vec<u8>,
        spilled: Option<Object>,
        objects: Vec<Object>,
    },
    /// Messages of `topic` lost: given up by the feed, or whose store
    /// objects the recorder could not take.
    Lost { topic: Arc<str>, count: u64 },
    /// A federate's last tag (its stop tag), from its feed's last frame.
    End { federate: String, last: Tag },
    /// A deadline decision: `reaction` (of `federate`) at `tag`, taken at
    /// physical time `sent`.
    Decision { federate: Arc<str>, tag: Tag, sent: i64, reaction: String, missed: bool },
    /// Deadline decisions of `federate` the feed gave up.
    DecisionsLost { federate: Arc<str>, count: u64 },
}

/// Per channel, what the summary reports.
#[derive(Default, Clone)]
struct Counts {
    messages: u64,
    bytes: u64,
    lost: u64,
}

/// A running recorder. [`Recorder::finish`] once the program ended.
pub struct Recorder {
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    acceptor: JoinHandle<Vec<JoinHandle<()>>>,
    writer: JoinHandle<Result<Summary>>,
}

/// Which federates' feeds are open and which ended (a recorder that runs
/// apart from its launcher, `hprm recorder`, ends with the program).
#[derive(Default)]
pub struct Progress {
    open: std::sync::atomic::AtomicUsize,
    /// Federates whose feed sent its last frame (their end), in order.
    ended: std::sync::Mutex<Vec<String>>,
}

impl Progress {
    /// Whether every federate of `federates` has ended and no feed is open.
    pub fn all_ended(&self, federates: &[String]) -> bool {
        let ended = self.ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.open.load(Ordering::SeqCst) == 0 && federates.iter().all(|f| ended.contains(f))
    }
}

/// What a recording holds, for the final line.
pub struct Summary {
    pub messages: u64,
    pub bytes: u64,
    /// Physical action values recorded (not in `messages`).
    pub physical: u64,
    /// Deadline decisions recorded.
    pub decisions: u64,
    /// (topic, messages lost), only those that lost some.
    pub lost: Vec<(String, u64)>,
    pub federates_missing: Vec<String>,
    /// The disk filled up: the file was closed early (complete and
    /// readable), and what came after is counted in `lost`.
    pub disk_full: Option<DiskFull>,
    /// The files written, in order (one without `--record-rotate`).
    pub files: Vec<PathBuf>,
}

/// Why and where a recording ended before its program did.
#[derive(Debug, Clone)]
pub struct DiskFull {
    /// Bytes free on the recording's filesystem when it ended.
    pub free: u64,
    /// Bytes the next message needed (with the open chunk and [`RESERVE`]).
    pub needed: u64,
    /// The tag of the first message not recorded, since the start.
    pub at: Tag,
}

impl std::fmt::Display for DiskFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the disk is full ({} bytes free, {} needed): the recording was closed at tag {}/{}, complete and readable up to there; \
             what came after was not recorded (counted as lost). Record onto a larger disk, or fewer --topics",
            self.free,
            self.needed,
            crate::topic::seconds(self.at.time),
            self.at.microstep
        )
    }
}

/// Bytes an unprivileged writer may still use on `file`'s filesystem.
fn free_bytes(file: &std::fs::File) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: fstatvfs fills `st` when it returns 0; the fd is open.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: initialized by the successful call above.
    let st = unsafe { st.assume_init() };
    // Both are 32 bits wide on 32-bit targets.
    #[allow(clippy::unnecessary_cast)]
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

impl Recorder {
    /// Creates `opts.path`, listens at `socket`, and writes the program's
    /// graph and the run's parameters. Federates connect through
    /// `hprm_node::record::RECORD_ENV`.
    pub fn start(
        opts: Options,
        socket: PathBuf,
        program: serde_json::Value,
        run: BTreeMap<String, String>,
    ) -> Result<Recorder> {
        hprm_node::record::parse_policy(&opts.policy).map_err(|e| anyhow::anyhow!("--record-policy: {e}"))?;
        // One host's share ([`RUN_HOST`] in `run`) holds that host's
        // federates; the others' are `federates_elsewhere` in its summary.
        let host = run.get(RUN_HOST).cloned();
        let (mut federates, mut elsewhere) = (Vec::new(), Vec::new());
        for f in program["federates"].as_array().into_iter().flatten() {
            let Some(name) = f["name"].as_str() else { continue };
            if host.is_none() || f["host"].as_str() == host.as_deref() {
                federates.push(name.to_string());
            } else {
                elsewhere.push(name.to_string());
            }
        }
        let layout = Layout {
            path: opts.path.clone(),
            compression: opts.compression,
            rotate: opts.rotate,
            foxglove: opts.foxglove,
            program: program.to_string(),
            run,
        };
        // The first file now: a path that cannot be written is refused before the program starts.
        let first = layout.open(0)?;
        let listener =
            Listener::bind(&socket).with_context(|| format!("cannot listen for federates at {}", socket.display()))?;
        let (tx, rx) = sync_channel(BACKLOG);
        let stop = Arc::new(AtomicBool::new(false));
        let topics = Arc::new(opts.topics.clone());
        let s = stop.clone();
        let progress = Arc::new(Progress::default());
        let p = progress.clone();
        let acceptor = std::thread::Builder::new()
            .name("hprm-record-accept".into())
            .spawn(move || accept(listener, tx, topics, s, p))?;
        let throttle = opts.throttle;
        let writer = std::thread::Builder::new()
            .name("hprm-record-write".into())
            .spawn(move || write(layout, first, rx, throttle, federates, elsewhere))?;
        Ok(Recorder { socket, stop, progress, acceptor, writer })
    }

    /// The federates' feeds so far.
    pub fn progress(&self) -> Arc<Progress> {
        self.progress.clone()
    }

    /// Once the federates have exited: waits (up to `bound`, [`DRAIN_BOUND`]
    /// under `hprm launch`) until every
    /// feed is read to its end, so that each message left in a feed has
    /// taken its store objects (the entries waiting for the writer keep
    /// them mapped) before the store stops. A program faster than the disk
    /// leaves such a backlog behind it (`block` policy).
    pub fn drain(progress: &Progress, bound: Duration) {
        let deadline = Instant::now() + bound;
        while progress.open.load(Ordering::SeqCst) > 0 {
            if Instant::now() > deadline {
                tracing::warn!(
                    "the recorder's feeds were not read to their end within {bound:?} of the program's end; \
                     what they still hold is lost when the store stops (and counted)"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for every federate's feed to end, writes the summary and
    /// closes the file.
    pub fn finish(self) -> Result<Summary> {
        self.stop.store(true, Ordering::Relaxed);
        let readers = self.acceptor.join().map_err(|_| anyhow::anyhow!("the recorder's accepting thread panicked"))?;
        for r in readers {
            let _ = r.join();
        }
        let _ = std::fs::remove_file(&self.socket);
        self.writer.join().map_err(|_| anyhow::anyhow!("the recorder's writer panicked"))?
    }
}

fn accept(
    listener: Listener,
    tx: SyncSender<Entry>,
    topics: Arc<Vec<String>>,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> Vec<JoinHandle<()>> {
    let mut readers = Vec::new();
    loop {
        match listener.accept() {
            Ok(Some(conn)) => {
                progress.open.fetch_add(1, Ordering::SeqCst);
                let (tx, topics, mine) = (tx.clone(), topics.clone(), progress.clone());
                match std::thread::Builder::new().name("hprm-record-feed".into()).spawn(move || {
                    feed(conn, &tx, &topics, &mine);
                    mine.open.fetch_sub(1, Ordering::SeqCst);
                }) {
                    Ok(h) => readers.push(h),
                    Err(e) => {
                        progress.open.fetch_sub(1, Ordering::SeqCst);
                        tracing::error!("cannot start a thread for a federate's recording: {e}");
                    }
                }
            }
            Ok(None) if stop.load(Ordering::Relaxed) => return readers,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                tracing::warn!("the recorder's socket failed to accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Reads one federate's feed until it ends.
fn feed(mut conn: Connection, tx: &SyncSender<Entry>, topics: &[String], progress: &Progress) {
    let hello: Hello = match conn.recv() {
        Ok(Some(frame)) => match serde_json::from_slice(frame) {
            Ok(h) => h,
            Err(e) => return tracing::error!("a federate's hello to the recorder is unreadable: {e}"),
        },
        Ok(None) => return,
        Err(e) => return tracing::error!("reading a federate's hello to the recorder: {e}"),
    };
    // Physical actions are numbered after the ports, and always recorded.
    let outputs = hello.ports.len() as u32;
    let selected: Vec<u32> = (0..outputs)
        .filter(|&i| topics.is_empty() || topics.iter().any(|t| names(t, &hello.ports[i as usize])))
        .chain(outputs..outputs + hello.physical.len() as u32)
        .collect();
    if let Err(e) = conn.select(&Selection { ports: selected.clone() }) {
        return tracing::error!(federate = %hello.federate, "cannot answer the federate's hello: {e}");
    }
    let topic_of: Vec<Arc<str>> = hello
        .ports
        .iter()
        .map(|p| Arc::from(p.as_str()))
        .chain(hello.physical.iter().map(|p| Arc::from(format!("{PHYSICAL_PREFIX}{p}"))))
        .collect();
    let ports = selected.iter().map(|&i| topic_of[i as usize].clone()).collect();
    let foreign = hello
        .foreign
        .iter()
        .filter(|(path, _)| hello.physical.contains(path))
        .map(|(path, f)| (Arc::from(format!("{PHYSICAL_PREFIX}{path}")), f.clone()))
        .collect();
    if tx.send(Entry::Ports { federate: hello.federate.clone(), start: hello.start, ports, foreign }).is_err() {
        return;
    }
    let decoder = Decoder::new(StoreLink::new(hello.store.clone()), GET_TIMEOUT);
    // Per port: messages the feed says it gave up (the last count seen).
    let mut lost: HashMap<u32, u64> = HashMap::new();
    let federate: Arc<str> = Arc::from(hello.federate.as_str());
    let mut decisions_lost = 0;
    loop {
        let frame = match conn.recv() {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                tracing::error!(federate = %hello.federate, "reading the federate's recording feed: {e}");
                break;
            }
        };
        let Some((header, payload)) = Header::decode(frame) else {
            tracing::error!(federate = %hello.federate, "a {}-byte frame is shorter than a header", frame.len());
            continue;
        };
        if header.port == DECISION {
            let (Some(&missed), Ok(reaction)) =
                (payload.first(), std::str::from_utf8(payload.get(1..).unwrap_or_default()))
            else {
                tracing::error!(federate = %hello.federate, "an unreadable deadline decision");
                continue;
            };
            decisions_lost = header.lost_before;
            let entry = Entry::Decision {
                federate: federate.clone(),
                tag: header.tag,
                sent: header.sent,
                reaction: reaction.to_string(),
                missed: missed != 0,
            };
            if tx.send(entry).is_err() {
                return;
            }
            continue;
        }
        if header.port == END {
            if header.tag.time != 0 {
                let _ = tx.send(Entry::End { federate: hello.federate.clone(), last: header.tag });
            }
            match serde_json::from_slice::<Vec<(u32, u64)>>(payload) {
                Ok(counts) => lost.extend(counts),
                Err(e) => tracing::error!(federate = %hello.federate, "unreadable final loss counts: {e}"),
            }
            progress.ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(hello.federate.clone());
            break;
        }
        let Some(topic) = topic_of.get(header.port as usize).cloned() else {
            tracing::error!(federate = %hello.federate, port = header.port, "a message names no port of the hello");
            continue;
        };
        lost.insert(header.port, header.lost_before);
        let entry = match take(&decoder, payload) {
            Ok((spilled, objects)) => Entry::Message {
                topic,
                tag: header.tag,
                sent: header.sent,
                payload: payload.to_vec(),
                spilled,
                objects,
            },
            Err(e) => {
                tracing::error!(%topic, "a message could not be recorded: its store objects could not be taken: {e}");
                Entry::Lost { topic, count: 1 }
            }
        };
        if tx.send(entry).is_err() {
            return;
        }
    }
    decisions_lost = lost.remove(&DECISION).unwrap_or(decisions_lost);
    if decisions_lost > 0 {
        let _ = tx.send(Entry::DecisionsLost { federate, count: decisions_lost });
    }
    for (port, count) in lost {
        if let (Some(topic), true) = (topic_of.get(port as usize), count > 0) {
            let _ = tx.send(Entry::Lost { topic: topic.clone(), count });
        }
    }
}

/// Takes the store objects `payload` references (its spilled message, and
/// the buffers of the message): each held until written.
fn take(decoder: &Decoder, payload: &[u8]) -> Result<(Option<Object>, Vec<Object>), hprm_node::payload::PayloadError> {
    let spilled = decoder.take_spilled(payload)?;
    let objects = decoder.take_message(spilled.as_ref().map_or(payload, |o| o.data()))?;
    Ok((spilled, objects))
}

/// Part `n` of the rotated recording `--record FILE.mcap`: `FILE-000n.mcap` beside it.
pub fn part_path(path: &Path, n: u32) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = path.extension().map_or(String::new(), |e| format!(".{}", e.to_string_lossy()));
    path.with_file_name(format!("{stem}-{n:04}{ext}"))
}

/// The parts of a rotated recording (`--record-rotate`), in order, when
/// `path` names one as a whole: the base name given to `--record` (which
/// itself is not written) or its first part `FILE-0000.mcap`. `None` for
/// any other path (a recording of one file, or a later part alone).
pub fn parts_of(path: &Path) -> Option<Vec<PathBuf>> {
    let base = if path.exists() {
        let stem = path.file_stem()?.to_str()?.strip_suffix("-0000")?;
        let ext = path.extension().map_or(String::new(), |e| format!(".{}", e.to_string_lossy()));
        path.with_file_name(format!("{stem}{ext}"))
    } else {
        path.to_path_buf()
    };
    let parts: Vec<PathBuf> = (0..).map(|n| part_path(&base, n)).take_while(|p| p.exists()).collect();
    (!parts.is_empty()).then_some(parts)
}

/// Where a recording's files go and what each one starts with.
struct Layout {
    /// `--record FILE.mcap`.
    path: PathBuf,
    compression: Option<mcap::Compression>,
    rotate: Option<Rotate>,
    /// Whether values get Foxglove views ([`crate::foxglove`]).
    foxglove: bool,
    /// [`META_PROGRAM`]'s manifest (JSON).
    program: String,
    run: BTreeMap<String, String>,
}

impl Layout {
    /// The file of part `n`: `FILE.mcap` itself without rotation, else
    /// `FILE-0000.mcap`, `FILE-0001.mcap`, ... beside it.
    fn path(&self, n: u32) -> PathBuf {
        if self.rotate.is_none() {
            return self.path.clone();
        }
        part_path(&self.path, n)
    }

    /// Creates part `n`: its schema and the program's and run's metadata.
    fn open(&self, n: u32) -> Result<Part> {
        let path = self.path(n);
        let file =
            std::fs::File::create(&path).with_context(|| format!("cannot create the recording {}", path.display()))?;
        let probe = file.try_clone().with_context(|| format!("cannot open {} twice", path.display()))?;
        let mut mcap = mcap::WriteOptions::new()
            .compression(self.compression)
            .chunk_size(Some(CHUNK_SIZE))
            .profile("hprm")
            .library(concat!("hprm ", env!("CARGO_PKG_VERSION")))
            .create(BufWriter::with_capacity(1 << 20, file))
            .with_context(|| format!("cannot write the recording {}", path.display()))?;
        let schema = mcap.add_schema(SCHEMA_NAME, SCHEMA_ENCODING, SCHEMA_TEXT.as_bytes())?;
        let decision_schema = mcap.add_schema(DECISION_SCHEMA, SCHEMA_ENCODING, DECISION_SCHEMA_TEXT.as_bytes())?;
        let meta = |name: &str, metadata| mcap::records::Metadata { name: name.into(), metadata };
        mcap.write_metadata(&meta(META_PROGRAM, BTreeMap::from([("manifest".into(), self.program.clone())])))?;
        let mut run = self.run.clone();
        if self.rotate.is_some() {
            run.insert("part".into(), n.to_string());
        }
        mcap.write_metadata(&meta(META_RUN, run))?;
        Ok(Part {
            mcap,
            probe,
            schema,
            decision_schema,
            path,
            channels: HashMap::new(),
            views: HashMap::new(),
            foreign: HashMap::new(),
            decisions: BTreeMap::new(),
            counts: BTreeMap::new(),
            first: None,
            bytes: 0,
            unflushed: 0,
            largest: 0,
        })
    }
}

/// One file of a recording (one per part with `--record-rotate`).
struct Part {
    mcap: mcap::Writer<BufWriter<std::fs::File>>,
    /// The file, to ask its filesystem for room.
    probe: std::fs::File,
    schema: u16,
    decision_schema: u16,
    path: PathBuf,
    channels: HashMap<Arc<str>, u16>,
    /// Foxglove views' channels, by topic: (id, what it shows).
    views: HashMap<String, (u16, foxglove::Kind)>,
    /// The channels of physical action values in another system's
    /// encoding ([`Foreign`]), by the action's own channel's topic.
    foreign: HashMap<Arc<str>, u16>,
    /// Per federate: its decisions channel and the decisions written there.
    decisions: BTreeMap<Arc<str>, (u16, u64)>,
    /// This part's messages and losses.
    counts: BTreeMap<Arc<str>, Counts>,
    /// The tag time of its first message.
    first: Option<i64>,
    /// Bytes of messages written into it.
    bytes: u64,
    /// Bytes written since the last flush, and the largest message among
    /// them: what the open chunk may still hold in memory.
    unflushed: u64,
    largest: u64,
}

impl Part {
    fn add_channel(&mut self, topic: &Arc<str>, federate: &str) -> Result<()> {
        let meta = BTreeMap::from([("federate".to_string(), federate.to_string())]);
        let id = self.mcap.add_channel(self.schema, topic, "msgpack", &meta)?;
        self.channels.insert(topic.clone(), id);
        self.counts.entry(topic.clone()).or_default();
        Ok(())
    }

    /// The channel of `topic`'s values as `f` says (a ROS 2 topic, its
    /// message definition, CDR): its metadata `view_of` names `topic`.
    fn add_foreign(&mut self, topic: &Arc<str>, f: &Foreign) -> Result<()> {
        let schema = self.mcap.add_schema(&f.schema_name, &f.schema_encoding, f.schema.as_bytes())?;
        let meta = BTreeMap::from([("view_of".to_string(), topic.to_string())]);
        let id = self.mcap.add_channel(schema, &f.topic, &f.message_encoding, &meta)?;
        self.foreign.insert(topic.clone(), id);
        Ok(())
    }

    /// Writes `view`, of a message of `topic` with `header`, on its view
    /// channel (made at its first view). A view whose kind differs from
    /// its channel's (a map entry that was an image and is now a point
    /// cloud) is left out: a channel has one schema.
    fn show(&mut self, topic: &str, header: &mcap::records::MessageHeader, view: &foxglove::View) -> Result<u64> {
        let name = match &view.key {
            Some(key) => format!("{}{topic}/{key}", foxglove::PREFIX),
            None => format!("{}{topic}", foxglove::PREFIX),
        };
        let channel_id = match self.views.get(&name) {
            Some(&(id, kind)) if kind == view.kind => id,
            Some(_) => return Ok(0),
            None => {
                let (schema_name, fds) = view.kind.schema();
                let schema = self.mcap.add_schema(schema_name, foxglove::ENCODING, fds)?;
                let meta = BTreeMap::from([("view_of".to_string(), topic.to_string())]);
                let id = self.mcap.add_channel(schema, &name, foxglove::ENCODING, &meta)?;
                self.views.insert(name, (id, view.kind));
                id
            }
        };
        self.mcap.write_to_known_channel(&mcap::records::MessageHeader { channel_id, ..*header }, &view.message)?;
        Ok(view.message.len() as u64)
    }

    /// Writes a deadline decision on `federate`'s decisions channel.
    fn decide(&mut self, federate: &Arc<str>, tag: Tag, sent: i64, reaction: &str, missed: bool) -> Result<()> {
        let channel_id = match self.decisions.get(federate) {
            Some((id, _)) => *id,
            None => {
                let meta = BTreeMap::from([("federate".to_string(), federate.to_string())]);
                let topic = format!("{DECISIONS_PREFIX}{federate}");
                let id = self.mcap.add_channel(self.decision_schema, &topic, "msgpack", &meta)?;
                self.decisions.insert(federate.clone(), (id, 0));
                id
            }
        };
        let header = mcap::records::MessageHeader {
            channel_id,
            sequence: tag.microstep,
            log_time: tag.time.max(0) as u64,
            publish_time: sent.max(0) as u64,
        };
        self.mcap.write_to_known_channel(&header, &encode_decision(reaction, missed))?;
        if let Some((_, n)) = self.decisions.get_mut(federate) {
            *n += 1;
        }
        Ok(())
    }

    /// Whether a message at `tag` of `len` bytes goes into the next part.
    fn full(&self, rotate: Option<&Rotate>, tag: Tag) -> bool {
        let Some(r) = rotate else { return false };
        let by_size = r.size.is_some_and(|s| self.bytes >= s);
        let by_time = match (r.duration, self.first) {
            (Some(d), Some(f)) => tag.time.saturating_sub(f) >= i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
            _ => false,
        };
        by_size || by_time
    }

    /// Writes the summary `meta` (with this part's counts) and closes the file.
    fn close(mut self, mut meta: BTreeMap<String, String>) -> Result<()> {
        let (mut messages, mut physical, mut lost) = (0, 0, 0);
        for (topic, c) in &self.counts {
            meta.insert(format!("messages.{topic}"), c.messages.to_string());
            meta.insert(format!("lost.{topic}"), c.lost.to_string());
            if topic.starts_with(PHYSICAL_PREFIX) {
                physical += c.messages;
            } else {
                messages += c.messages;
            }
            lost += c.lost;
        }
        meta.insert("messages".into(), messages.to_string());
        meta.insert("physical".into(), physical.to_string());
        let mut decisions = 0;
        for (federate, (_, n)) in &self.decisions {
            meta.insert(format!("decisions.{federate}"), n.to_string());
            decisions += n;
        }
        meta.insert("decisions".into(), decisions.to_string());
        if let Some(l) = meta.get("decisions_lost").and_then(|l| l.parse::<u64>().ok()) {
            lost += l;
        }
        meta.insert("lost".into(), lost.to_string());
        // A host's share is never whole: the other hosts' federates are elsewhere.
        let complete = lost == 0
            && meta.get("federates_not_recorded").is_some_and(|m| m.is_empty())
            && meta.get(FEDERATES_ELSEWHERE).map_or(true, |m| m.is_empty());
        meta.insert("complete".into(), complete.to_string());
        self.mcap.write_metadata(&mcap::records::Metadata { name: META_SUMMARY.into(), metadata: meta })?;
        self.mcap.finish().with_context(|| format!("finishing {}", self.path.display()))?;
        Ok(())
    }
}

fn write(
    layout: Layout,
    mut part: Part,
    rx: Receiver<Entry>,
    throttle: Option<Duration>,
    federates: Vec<String>,
    elsewhere: Vec<String>,
) -> Result<Summary> {
    // Every port recorded, with its federate: each part has a channel for each.
    let mut ports: Vec<(Arc<str>, String)> = Vec::new();
    // And every one recorded in another system's encoding too: each part has those channels.
    let mut foreign: Vec<(Arc<str>, Foreign)> = Vec::new();
    let mut totals: BTreeMap<Arc<str>, Counts> = BTreeMap::new();
    let mut connected: Vec<String> = Vec::new();
    let mut ends: BTreeMap<String, Tag> = BTreeMap::new();
    let mut start = None;
    let mut last_flush = Instant::now();
    let mut data = Vec::new();
    let mut failed: Option<anyhow::Error> = None;
    let mut disk_full: Option<DiskFull> = None;
    let mut files = vec![part.path.clone()];
    // Deadline decisions written, and given up or not written.
    let (mut decisions, mut decisions_lost) = (0u64, 0u64);
    // Losses are counted in the part open when they are reported, and in total.
    let lose = |part: &mut Part, totals: &mut BTreeMap<Arc<str>, Counts>, topic: &Arc<str>, n: u64| {
        part.counts.entry(topic.clone()).or_default().lost += n;
        totals.entry(topic.clone()).or_default().lost += n;
    };
    for entry in rx {
        if failed.is_some() || (disk_full.is_some() && matches!(entry, Entry::Message { .. } | Entry::Decision { .. }))
        {
            // The file is unusable, or closed early for want of room: the
            // rest is released unwritten (counted).
            match entry {
                Entry::Message { topic, .. } => lose(&mut part, &mut totals, &topic, 1),
                Entry::Decision { .. } => decisions_lost += 1,
                _ => {}
            }
            continue;
        }
        match entry {
            Entry::Ports { federate, start: s, ports: mine, foreign: theirs } => {
                start.get_or_insert(s);
                connected.push(federate.clone());
                for p in mine {
                    part.add_channel(&p, &federate)?;
                    totals.entry(p.clone()).or_default();
                    ports.push((p, federate.clone()));
                }
                for (p, f) in theirs {
                    part.add_foreign(&p, &f)?;
                    foreign.push((p, f));
                }
            }
            Entry::Lost { topic, count } => lose(&mut part, &mut totals, &topic, count),
            Entry::End { federate, last } => {
                ends.insert(federate, last);
            }
            Entry::DecisionsLost { federate, count } => {
                tracing::warn!(%federate, count, "deadline decisions not recorded: a replay of this federate may differ");
                decisions_lost += count;
            }
            Entry::Decision { federate, tag, sent, reaction, missed } => {
                match part.decide(&federate, tag, sent, &reaction, missed) {
                    Ok(()) => decisions += 1,
                    Err(e) => {
                        decisions_lost += 1;
                        failed = Some(e.context(format!("writing {}", part.path.display())));
                    }
                }
            }
            Entry::Message { topic, tag, sent, payload, spilled, objects } => {
                let message = spilled.as_ref().map_or(payload.as_slice(), |o| o.data());
                if !part.channels.contains_key(&topic) {
                    continue;
                }
                if let Err(e) = self_contained(message, &objects, &mut data) {
                    tracing::error!(%topic, "a message could not be recorded: {e}");
                    lose(&mut part, &mut totals, &topic, 1);
                    continue;
                }
                if part.full(layout.rotate.as_ref(), tag) {
                    let next = layout.open(files.len() as u32);
                    let meta = BTreeMap::from([
                        ("start".to_string(), start.unwrap_or(0i64).to_string()),
                        ("federates_not_recorded".to_string(), String::new()),
                        (FEDERATES_ELSEWHERE.to_string(), elsewhere.join(",")),
                        ("next".to_string(), layout.path(files.len() as u32).display().to_string()),
                    ]);
                    let closed = std::mem::replace(&mut part, next?);
                    closed.close(meta)?;
                    files.push(part.path.clone());
                    for (p, federate) in &ports {
                        part.add_channel(p, federate)?;
                    }
                    for (p, f) in &foreign {
                        part.add_foreign(p, f)?;
                    }
                }
                let views = if layout.foxglove { foxglove::views(&data, tag.time) } else { Vec::new() };
                // The value's bytes in another system's encoding, borrowed from `data`.
                let native = part.foreign.get(&topic).and_then(|&id| Some((id, foreign_bytes(&data)?)));
                let shown: u64 = views.iter().map(|v| v.message.len() as u64).sum::<u64>()
                    + native.map_or(0, |(_, b)| b.len() as u64);
                // Checked before each message, so that the file can still be
                // closed properly (chunk, summary, footer) when the disk fills.
                let pending = part.unflushed.min(CHUNK_SIZE + part.largest);
                let needed = pending + data.len() as u64 + shown + RESERVE;
                if let Some(free) = free_bytes(&part.probe).filter(|&free| free < needed) {
                    tracing::error!(%topic, free, needed, "the recording's disk is full: closing the recording");
                    disk_full =
                        Some(DiskFull { free, needed, at: Tag::new(tag.time - start.unwrap_or(0), tag.microstep) });
                    lose(&mut part, &mut totals, &topic, 1);
                    continue;
                }
                let Some(&channel_id) = part.channels.get(&topic) else { continue };
                let header = mcap::records::MessageHeader {
                    channel_id,
                    sequence: tag.microstep,
                    log_time: tag.time.max(0) as u64,
                    publish_time: sent.max(0) as u64,
                };
                if let Err(e) = part.mcap.write_to_known_channel(&header, &data) {
                    lose(&mut part, &mut totals, &topic, 1);
                    failed = Some(anyhow::Error::new(e).context(format!("writing {}", part.path.display())));
                    continue;
                }
                let n = data.len() as u64;
                for c in [part.counts.entry(topic.clone()).or_default(), totals.entry(topic.clone()).or_default()] {
                    c.messages += 1;
                    c.bytes += n;
                }
                // The views count in the file's size, not in the messages.
                let mut written = n;
                if let Some((channel_id, bytes)) = native {
                    let native_header = mcap::records::MessageHeader { channel_id, ..header };
                    match part.mcap.write_to_known_channel(&native_header, bytes) {
                        Ok(()) => written += bytes.len() as u64,
                        Err(e) => {
                            failed = Some(anyhow::Error::new(e).context(format!("writing {}", part.path.display())))
                        }
                    }
                }
                for v in &views {
                    match part.show(&topic, &header, v) {
                        Ok(w) => written += w,
                        Err(e) => {
                            failed = Some(e.context(format!("writing {}", part.path.display())));
                            break;
                        }
                    }
                }
                part.first.get_or_insert(tag.time);
                part.bytes += written;
                part.unflushed += written;
                part.largest = part.largest.max(written);
                drop((spilled, objects));
                if let Some(t) = throttle {
                    std::thread::sleep(t);
                }
                if last_flush.elapsed() >= FLUSH_EVERY {
                    last_flush = Instant::now();
                    (part.unflushed, part.largest) = (0, 0);
                    if let Err(e) = part.mcap.flush() {
                        failed = Some(anyhow::Error::new(e).context(format!("writing {}", part.path.display())));
                    }
                }
            }
        }
    }
    let missing: Vec<String> = federates.iter().filter(|f| !connected.contains(f)).cloned().collect();
    let (mut messages, mut bytes, mut physical, mut lost_total) = (0, 0, 0, 0);
    let mut lost = Vec::new();
    for (topic, c) in &totals {
        if topic.starts_with(PHYSICAL_PREFIX) {
            physical += c.messages;
        } else {
            messages += c.messages;
            bytes += c.bytes;
        }
        lost_total += c.lost;
        if c.lost > 0 {
            lost.push((topic.to_string(), c.lost));
        }
    }
    if let Some(e) = failed {
        // The summary cannot be written either: say what was lost here.
        return Err(e.context(format!("the recording stopped: {lost_total} messages lost")));
    }
    let mut meta = BTreeMap::new();
    meta.insert("start".into(), start.unwrap_or(0i64).to_string());
    meta.insert("decisions_lost".into(), decisions_lost.to_string());
    meta.insert("federates_not_recorded".into(), missing.join(","));
    meta.insert(FEDERATES_ELSEWHERE.into(), elsewhere.join(","));
    if let Some(d) = &disk_full {
        meta.insert("disk_full".into(), d.to_string());
    }
    for (federate, last) in &ends {
        meta.insert(format!("{LAST_PREFIX}{federate}"), format_tag(*last));
    }
    part.close(meta)?;
    if decisions_lost > 0 {
        lost.push(("deadline decisions".into(), decisions_lost));
    }
    Ok(Summary { messages, bytes, physical, decisions, lost, federates_missing: missing, disk_full, files })
}

/// The bytes of a value that is one message in another system's encoding
/// (`Hello::foreign`): a MessagePack bin, or a one-dimensional `uint8`
/// buffer (ext 1 or ext 4, inline), borrowed from `value`. `None` for a
/// value of another form, which has no copy in that encoding.
fn foreign_bytes(value: &[u8]) -> Option<&[u8]> {
    use rmpv::ValueRef;
    match rmpv::decode::read_value_ref(&mut &value[..]).ok()? {
        ValueRef::Binary(b) => Some(b),
        ValueRef::Ext(EXT_BUFFER | EXT_BYTES, data) => {
            // Inline only: a recorded message is self-contained by now.
            let d = hprm_node::payload::BufferRef::parse(data, |_| None).ok()?;
            (d.dtype == hprm_node::payload::Dtype::U8 && d.shape.len() == 1).then_some(d.bytes).flatten()
        }
        _ => None,
    }
}

/// `message` with every store reference replaced by the buffer itself,
/// into `out`.
fn self_contained(message: &[u8], objects: &[Object], out: &mut Vec<u8>) -> Result<()> {
    out.clear();
    if objects.is_empty() {
        out.extend_from_slice(message);
        return Ok(());
    }
    let mut value = rmpv::decode::read_value(&mut &message[..])?;
    inline(&mut value, objects)?;
    rmpv::encode::write_value(out, &value)?;
    Ok(())
}

fn inline(v: &mut rmpv::Value, objects: &[Object]) -> Result<()> {
    use rmpv::Value as V;
    match v {
        V::Array(items) => items.iter_mut().try_for_each(|x| inline(x, objects)),
        V::Map(pairs) => pairs.iter_mut().try_for_each(|(k, x)| {
            inline(k, objects)?;
            inline(x, objects)
        }),
        V::Ext(ty, data) if matches!(*ty, EXT_BUFFER | EXT_BYTES | EXT_ARROW | EXT_TENSOR) => {
            let mut d = BufferDescriptor::decode(data)?;
            if let Location::Store(id) = d.location {
                let Some(o) = objects.iter().find(|o| o.id() == id) else {
                    bail!("buffer {id} was not taken from the store");
                };
                d.location = Location::Inline(o.data().to_vec());
                *data = d.encode()?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::decode_decision;

    #[test]
    fn decisions_read_back() {
        let data = encode_decision("app.r.work", true);
        assert_eq!(decode_decision(&data), Some(("app.r.work".to_string(), true)));
        assert_eq!(decode_decision(&encode_decision("x", false)), Some(("x".to_string(), false)));
        assert_eq!(decode_decision(b"\xc0"), None, "nil is not a decision");
    }

    #[test]
    fn foreign_bytes_are_a_bin_or_a_flat_uint8_buffer() {
        use hprm_node::payload::{Buffer, Encoder, StoreLink, DEFAULT_THRESHOLD};
        let encoder = Encoder::new(StoreLink::new(None), DEFAULT_THRESHOLD);
        let cdr = vec![0u8, 1, 0, 0, 5, 0, 0, 0];
        let flat = encoder.encode(&Buffer::from_vec(cdr.clone()), 1).unwrap();
        assert_eq!(foreign_bytes(&flat), Some(&cdr[..]));
        let mut bin = Vec::new();
        rmpv::encode::write_value(&mut bin, &rmpv::Value::Binary(cdr.clone())).unwrap();
        assert_eq!(foreign_bytes(&bin), Some(&cdr[..]));
        // Shaped, of another dtype, or not bytes at all: no copy in another encoding.
        let shaped = encoder.encode(&Buffer::from_vec(cdr.clone()).with_shape(&[2, 4]).unwrap(), 1).unwrap();
        assert_eq!(foreign_bytes(&shaped), None);
        let floats = encoder.encode(&Buffer::from_elements(vec![1.0f32, 2.0]), 1).unwrap();
        assert_eq!(foreign_bytes(&floats), None);
        assert_eq!(foreign_bytes(&encoder.encode(&"text", 1).unwrap()), None);
        assert_eq!(foreign_bytes(b""), None);
    }

    #[test]
    fn topics_name_ports_in_full_or_without_the_reactor() {
        assert!(names("cam.c.image", "cam.c.image"));
        assert!(names("cam.image", "cam.c.image"));
        assert!(!names("cam.info", "cam.c.image"));
        assert!(!names("det.image", "cam.c.image"));
        assert!(!names("cam", "cam.c.image"));
    }
}
