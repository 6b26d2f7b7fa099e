//! Recording: each federate's side of `hprm launch --record`, and the
//! frames it sends to the recorder.
//!
//! A launcher that records listens on a Unix `SOCK_SEQPACKET` socket and
//! names it to every federate in [`RECORD_ENV`], with the backlog policy
//! in [`POLICY_ENV`]. Each federate connects once at start (`Feed::connect`)
//! and sends, one datagram each:
//! - a [`Hello`] (JSON): its name, its start tag, its store's socket and the
//!   outputs it sends to other federates (a message names its port by its
//!   index in that list) and its physical actions (numbered after the
//!   outputs), with, for those of them whose values are messages of
//!   another system in its own encoding, how to record those too
//!   ([`Foreign`]); the recorder answers with a [`Selection`], the indices of
//!   the ports it records (`--topics`; physical actions always);
//! - for each value it sends on one of them, a [`HEADER`]-byte header (port
//!   index: u32 LE; microstep: u32 LE; tag time, ns since the epoch: i64
//!   LE; physical time at sending: i64 LE; messages of this port lost
//!   before this one: u64 LE) and the payload exactly as its receivers get
//!   it: out-of-band buffers stay in the store and travel as references;
//! - for each decision it takes on a reaction with a deadline (its body
//!   ran, or its deadline handler because the deadline was missed), a
//!   header with port [`DECISION`], the tag, the physical time, and the
//!   decisions given up before this one, then one byte (1: missed) and the
//!   reaction's path (`federate.reactor.reaction`): deadlines depend on
//!   physical time, so replay takes these instead of reading the clock
//!   (see [`Decisions`]);
//! - for each value scheduled on one of its physical actions, a header with
//!   the action's index, the tag the value took, the physical time, and
//!   the payload as the action's codec encodes it (large buffers through
//!   the store, the recorder counting as their one delivery): sensor input
//!   depends on the world, so replay feeds these back ([`PhysicalEvents`])
//!   instead of running the hardware. A physical action whose values
//!   cannot be encoded makes the recording impossible: an opaque one
//!   (its type is known, so the federate refuses to start,
//!   [`RecordError::Opaque`]), or a value the codec fails on (a Python
//!   object that cannot be pickled: known only when it is scheduled, so
//!   the federate stops there, [`RecordError::Unencodable`]);
//! - at its end, a header with port [`END`] and the federate's last tag
//!   (its stop tag; time 0 when it stopped before processing any)
//!   followed by the final loss counts (JSON array of `[port index,
//!   messages given up]`, [`DECISION`] for decisions given up). Replay stops where the recorded program stopped.
//!
//! Invariants: the recorder counts as one more delivery of every store
//! object sent on a recorded port (the scheduler adds it to the port's
//! fan-out), so each object stays in the store until the recorder has
//! written it and released it; a message the feed gives up is taken and
//! released here instead, so that nothing stays pinned. The backlog is the
//! socket's buffer, bounded: under `block` a send waits up to the policy's
//! bound (the program waits; centralized programs stay deterministic);
//! under `fail` a message that does not fit is given up at once. Either
//! way a message given up is counted per port and reported to the
//! recorder, never silent.

use std::collections::BTreeMap;
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hprm_rti::tag::Tag;
use hprm_store::Backpressure;
use nix::errno::Errno;
use nix::sys::socket::MsgFlags;
use serde::{Deserialize, Serialize};
use socket2::{Domain, Socket, Type};

pub use crate::decisions::Decisions;
use crate::ids::TriggerId;
use crate::payload::Decoder;

/// The recorder's socket, for federates.
pub const RECORD_ENV: &str = "HPRM_RECORD";
/// The recorder's backlog policy ([`Backpressure`]: `block[:T]` or `fail`).
pub const POLICY_ENV: &str = "HPRM_RECORD_POLICY";

/// Bytes before the payload in each message frame.
pub const HEADER: usize = 32;

/// The port index of a federate's last frame.
pub const END: u32 = u32::MAX;

/// The port index of a deadline decision's frame.
pub const DECISION: u32 = u32::MAX - 1;

/// The file of recorded deadline decisions a replayed federate takes
/// (written by `hprm replay`, read by [`Decisions::load`]).
pub const DECISIONS_ENV: &str = "HPRM_REPLAY_DECISIONS";

/// The file of recorded physical action values a replayed federate takes
/// instead of its live ones (written by `hprm replay` with
/// [`PhysicalEvents::write`]).
pub const PHYSICAL_ENV: &str = "HPRM_REPLAY_PHYSICAL";

/// Room for the largest frame: an in-band payload fills at most one 64 KiB
/// frame (a larger message is spilled into the store).
pub const MAX_FRAME: usize = (64 << 10) + HEADER + 64;

/// The socket buffer: the feed's bounded backlog (the kernel doubles it,
/// within `net.core.wmem_max`): a few hundred small messages.
const BACKLOG_BYTES: usize = 256 << 10;

/// How long a federate waits for the recorder's answer to its hello.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// How long a federate waits to send its last frame.
const END_WAIT: Duration = Duration::from_secs(5);

/// A federate's first frame.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub federate: String,
    /// The federation's start time, ns since the epoch.
    pub start: i64,
    /// The store socket its payloads' references point into.
    pub store: Option<PathBuf>,
    /// Full paths (`federate.reactor.port`) of the recorded outputs; a
    /// message's port index is its place here.
    pub ports: Vec<String>,
    /// Full paths (`federate.reactor.action`) of its physical actions; the
    /// index of a value scheduled on one is its place here plus the number
    /// of `ports`.
    #[serde(default)]
    pub physical: Vec<String>,
    /// By path in `physical`: the actions whose values are messages of
    /// another system in its own encoding, which the recorder also writes
    /// as such (a ROS 2 bridge's topics: `ros2msg` schemas, `cdr`
    /// messages).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub foreign: BTreeMap<String, Foreign>,
}

/// How a physical action's values in another system's encoding are
/// recorded a second time (declared by the program, hence kept with the
/// program's data: `manifest::record`).
pub use crate::manifest::record::Foreign;

/// The recorder's answer to a [`Hello`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Selection {
    /// Indices in [`Hello::ports`] of the ports recorded.
    pub ports: Vec<u32>,
}

/// One recorded message's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Index in [`Hello::ports`], or [`END`].
    pub port: u32,
    pub tag: Tag,
    /// Physical time at sending, ns since the epoch.
    pub sent: i64,
    /// Messages of this port the feed gave up before this one.
    pub lost_before: u64,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0..4].copy_from_slice(&self.port.to_le_bytes());
        h[4..8].copy_from_slice(&self.tag.microstep.to_le_bytes());
        h[8..16].copy_from_slice(&self.tag.time.to_le_bytes());
        h[16..24].copy_from_slice(&self.sent.to_le_bytes());
        h[24..32].copy_from_slice(&self.lost_before.to_le_bytes());
        h
    }

    /// The header of `frame` and the payload after it; `None` when the
    /// frame is shorter than a header.
    pub fn decode(frame: &[u8]) -> Option<(Header, &[u8])> {
        let h = frame.get(..HEADER)?;
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let header = Header {
            port: u32_at(0),
            tag: Tag::new(u64_at(8) as i64, u32_at(4)),
            sent: u64_at(16) as i64,
            lost_before: u64_at(24),
        };
        Some((header, &frame[HEADER..]))
    }
}

/// Why recording was not set up.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{POLICY_ENV}={0:?}: {1}")]
    Policy(String, String),
    #[error("cannot reach the recorder at {path}: {source}; is `hprm launch --record` still running?")]
    Connect { path: PathBuf, source: std::io::Error },
    #[error("cannot read the recorded deadline decisions {path} ({DECISIONS_ENV}): {message}")]
    Decisions { path: PathBuf, message: String },
    #[error("cannot record physical actions {}: their values cannot be encoded (declared with `opaque_physical_action`), \
             and a recording holds every physical action's values so that replay needs no hardware; \
             declare them with `physical_action` (a serde type), or run without --record", actions.join(", "))]
    Opaque { actions: Vec<String> },
    #[error("cannot record physical action {action} of federate {federate}: it was scheduled with a value the payload codec \
             cannot encode ({message}); a recording holds every physical action's values so that replay needs no hardware: \
             schedule plain values, arrays or picklable objects, or run without --record")]
    Unencodable { federate: String, action: String, message: String },
    #[error("cannot read the recorded physical action values {path} ({PHYSICAL_ENV}): {message}")]
    Physical { path: PathBuf, message: String },
}

/// Refuses a recording of `actions` (full paths) when any is opaque.
pub fn refuse_opaque(opaque: Vec<String>) -> Result<(), RecordError> {
    if opaque.is_empty() {
        Ok(())
    } else {
        Err(RecordError::Opaque { actions: opaque })
    }
}

/// Recorded physical action values, as a replayed federate takes them: a
/// file of events in tag order, each `[u32 LE path length][path][i64 LE
/// tag time since the start][u32 LE microstep][u64 LE payload length]
/// [payload]`, the payload self-contained (its buffers inline). Read one
/// event at a time, so a replay holds one value ahead, whatever the
/// file's size.
pub struct PhysicalEvents {
    path: PathBuf,
    reader: std::io::BufReader<std::fs::File>,
    ahead: Option<PhysicalEvent>,
    /// The file's end was reached: no read again.
    ended: bool,
}

/// One recorded physical action value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhysicalEvent {
    /// The action's full path (`federate.reactor.action`).
    pub action: String,
    /// Relative to the start.
    pub tag: Tag,
    pub payload: Vec<u8>,
}

impl PhysicalEvents {
    /// Appends `event` to a file of events (see [`PhysicalEvents`]).
    pub fn write(out: &mut impl std::io::Write, event: &PhysicalEvent) -> std::io::Result<()> {
        out.write_all(&(event.action.len() as u32).to_le_bytes())?;
        out.write_all(event.action.as_bytes())?;
        out.write_all(&event.tag.time.to_le_bytes())?;
        out.write_all(&event.tag.microstep.to_le_bytes())?;
        out.write_all(&(event.payload.len() as u64).to_le_bytes())?;
        out.write_all(&event.payload)
    }

    pub fn open(path: &Path) -> Result<PhysicalEvents, RecordError> {
        let file = std::fs::File::open(path)
            .map_err(|e| RecordError::Physical { path: path.to_path_buf(), message: e.to_string() })?;
        Ok(PhysicalEvents {
            path: path.to_path_buf(),
            reader: std::io::BufReader::new(file),
            ahead: None,
            ended: false,
        })
    }

    /// The next event, without taking it; `Ok(None)` at the end.
    pub fn peek(&mut self) -> Result<Option<&PhysicalEvent>, RecordError> {
        if self.ahead.is_none() && !self.ended {
            self.ahead =
                self.read().map_err(|e| RecordError::Physical { path: self.path.clone(), message: e.to_string() })?;
        }
        Ok(self.ahead.as_ref())
    }

    /// Takes the next event.
    pub fn take(&mut self) -> Result<Option<PhysicalEvent>, RecordError> {
        self.peek()?;
        Ok(self.ahead.take())
    }

    fn read(&mut self) -> std::io::Result<Option<PhysicalEvent>> {
        use std::io::Read;
        let mut len = [0u8; 4];
        match self.reader.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                self.ended = true;
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
        let mut action = vec![0u8; u32::from_le_bytes(len) as usize];
        self.reader.read_exact(&mut action)?;
        let action = String::from_utf8(action).map_err(|_| std::io::Error::other("an action path is not UTF-8"))?;
        let (mut time, mut micro, mut n) = ([0u8; 8], [0u8; 4], [0u8; 8]);
        self.reader.read_exact(&mut time)?;
        self.reader.read_exact(&mut micro)?;
        self.reader.read_exact(&mut n)?;
        let mut payload = vec![0u8; u64::from_le_bytes(n) as usize];
        self.reader.read_exact(&mut payload)?;
        let tag = Tag::new(i64::from_le_bytes(time), u32::from_le_bytes(micro));
        Ok(Some(PhysicalEvent { action, tag, payload }))
    }
}

/// Loading a replay's decisions, with this module's error (the type lives
/// low, in `decisions`, because the reaction context holds it).
impl Decisions {
    pub fn load(path: &Path) -> Result<Decisions, RecordError> {
        let err = |message: String| RecordError::Decisions { path: path.to_path_buf(), message };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        Decisions::parse(&text).map_err(err)
    }
}

/// The policies a recorder's backlog accepts (also a manifest's `[record]`'s).
pub use crate::manifest::record::parse_policy;

/// A federate's feed into the recorder.
pub(crate) struct Feed {
    socket: Socket,
    policy: Backpressure,
    /// The recorded outputs, with their index in the hello.
    ports: Vec<(TriggerId, u32)>,
    /// Messages given up, per entry of `ports`.
    lost: Vec<u64>,
    /// Takes and releases the store objects of a message given up.
    decoder: Decoder,
    /// The recorder went away: every later message is given up.
    gone: bool,
    /// The last tag the federate processed, sent in the last frame.
    last: Tag,
    /// Deadline decisions given up.
    decisions_lost: u64,
}

impl Feed {
    /// Connects to the recorder at `path` and says hello; `ports` are the
    /// triggers of `hello.ports`, and the feed keeps those the recorder
    /// selects.
    pub fn connect(
        path: &Path,
        policy: Backpressure,
        hello: &Hello,
        ports: &[TriggerId],
        decoder: Decoder,
    ) -> Result<Feed, RecordError> {
        let io = |source| RecordError::Connect { path: path.to_path_buf(), source };
        let socket = Socket::new(Domain::UNIX, Type::SEQPACKET, None).map_err(io)?;
        let (addr, _dir) = crate::tap::unix_addr(path).map_err(io)?;
        socket.connect(&addr).map_err(io)?;
        let _ = socket.set_send_buffer_size(BACKLOG_BYTES);
        let text = serde_json::to_vec(hello).map_err(|e| io(std::io::Error::other(e)))?;
        socket.send(&text).map_err(io)?;
        socket.set_read_timeout(Some(HANDSHAKE)).map_err(io)?;
        let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); MAX_FRAME];
        let n = socket.recv(&mut buf).map_err(io)?;
        // SAFETY: recv initialized the first n bytes.
        let answer: Vec<u8> = buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect();
        let selection: Selection = serde_json::from_slice(&answer)
            .map_err(|e| io(std::io::Error::other(format!("unreadable answer from the recorder: {e}"))))?;
        let ports: Vec<(TriggerId, u32)> =
            selection.ports.iter().filter_map(|&i| ports.get(i as usize).map(|t| (*t, i))).collect();
        if let Backpressure::Block { bound } = policy {
            socket.set_write_timeout(Some(bound.max(Duration::from_millis(1)))).map_err(io)?;
        }
        let lost = vec![0; ports.len()];
        Ok(Feed { socket, policy, ports, lost, decoder, gone: false, last: Tag::new(0, 0), decisions_lost: 0 })
    }

    /// The outputs recorded: each counts the recorder as one more delivery.
    pub fn ports(&self) -> impl Iterator<Item = TriggerId> + '_ {
        self.ports.iter().map(|(t, _)| *t)
    }

    /// Whether values of `out` (an output or a physical action) are recorded.
    pub fn records(&self, out: TriggerId) -> bool {
        self.ports.iter().any(|(p, _)| *p == out)
    }

    /// Notes the federate's last tag, which its last frame carries.
    pub fn ended_at(&mut self, last: Tag) {
        self.last = last;
    }

    /// Sends one value of `out` (sent at tag `tag`, physical time `sent`)
    /// to the recorder, or gives it up (counted) as the policy says.
    pub fn publish(&mut self, out: TriggerId, tag: Tag, sent: i64, payload: &[u8]) {
        let Some(i) = self.ports.iter().position(|(p, _)| *p == out) else { return };
        let header = Header { port: self.ports[i].1, tag, sent, lost_before: self.lost[i] };
        if !self.send(&header, &[payload]) {
            self.lost[i] += 1;
            self.settle(payload);
        }
    }

    /// Counts a value of `out` given up before it reached the feed (its
    /// encoding failed because the store went away).
    pub fn give_up(&mut self, out: TriggerId) {
        if let Some(i) = self.ports.iter().position(|(p, _)| *p == out) {
            self.lost[i] += 1;
        }
    }

    /// Sends the decision taken at `tag` (physical time `now`) on
    /// `reaction`, which has a deadline: `missed`, its deadline handler
    /// ran; else its body. Given up (counted) as the policy says.
    pub fn decide(&mut self, reaction: &str, tag: Tag, now: i64, missed: bool) {
        let header = Header { port: DECISION, tag, sent: now, lost_before: self.decisions_lost };
        if !self.send(&header, &[&[u8::from(missed)], reaction.as_bytes()]) {
            self.decisions_lost += 1;
        }
    }

    /// Sends one frame: `header`, then `parts`; false when it was given up.
    fn send(&mut self, header: &Header, parts: &[&[u8]]) -> bool {
        if self.gone {
            return false;
        }
        let header = header.encode();
        let flags = match self.policy {
            Backpressure::Block { .. } => MsgFlags::MSG_NOSIGNAL,
            _ => MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        };
        let mut slices = vec![IoSlice::new(&header)];
        slices.extend(parts.iter().map(|p| IoSlice::new(p)));
        match self.socket.send_vectored_with_flags(&slices, flags.bits()) {
            Ok(_) => true,
            Err(e) if matches!(e.raw_os_error().map(Errno::from_raw), Some(Errno::EAGAIN | Errno::ENOBUFS)) => false,
            Err(e) => {
                tracing::error!(
                    "the recorder went away ({e}): this federate's later messages are not recorded (counted as lost)"
                );
                self.gone = true;
                false
            }
        }
    }

    /// Takes and releases what `payload` references, settling the
    /// recorder's delivery of each store object of a message given up.
    fn settle(&self, payload: &[u8]) {
        if let Err(e) = self.decoder.settle(payload) {
            tracing::debug!("a lost recording's store objects could not be released: {e}");
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        if self.gone {
            return;
        }
        let header = Header { port: END, tag: self.last, sent: 0, lost_before: 0 }.encode();
        let mut counts: Vec<(u32, u64)> = self.ports.iter().map(|(_, i)| *i).zip(self.lost.iter().copied()).collect();
        counts.push((DECISION, self.decisions_lost));
        let counts = serde_json::to_vec(&counts).unwrap_or_default();
        let _ = self.socket.set_nonblocking(false);
        let _ = self.socket.set_write_timeout(Some(END_WAIT));
        if let Err(e) = self
            .socket
            .send_vectored_with_flags(&[IoSlice::new(&header), IoSlice::new(&counts)], MsgFlags::MSG_NOSIGNAL.bits())
        {
            tracing::warn!("could not send the recorder this federate's final loss counts: {e}");
        }
    }
}

/// The recorder's listening socket.
pub struct Listener {
    socket: Socket,
}

impl Listener {
    /// Listens at `path` (replacing a stale socket file there).
    pub fn bind(path: &Path) -> std::io::Result<Listener> {
        let _ = std::fs::remove_file(path);
        let socket = Socket::new(Domain::UNIX, Type::SEQPACKET, None)?;
        let (addr, _dir) = crate::tap::unix_addr(path)?;
        socket.bind(&addr)?;
        socket.listen(64)?;
        socket.set_nonblocking(true)?;
        Ok(Listener { socket })
    }

    /// A federate's connection, if one is waiting.
    pub fn accept(&self) -> std::io::Result<Option<Connection>> {
        match self.socket.accept() {
            Ok((socket, _)) => {
                socket.set_nonblocking(false)?;
                Ok(Some(Connection { socket, buf: vec![std::mem::MaybeUninit::uninit(); MAX_FRAME] }))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The recorder's end of one federate's feed.
pub struct Connection {
    socket: Socket,
    buf: Vec<std::mem::MaybeUninit<u8>>,
}

impl Connection {
    /// The next frame; `None` once the federate closed its feed.
    pub fn recv(&mut self) -> std::io::Result<Option<&[u8]>> {
        match self.socket.recv(&mut self.buf) {
            Ok(0) => Ok(None),
            Ok(n) => {
                // SAFETY: recv initialized the first n bytes, and u8 has no invalid values.
                Ok(Some(unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), n) }))
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Answers the federate's hello.
    pub fn select(&self, selection: &Selection) -> std::io::Result<()> {
        let text = serde_json::to_vec(selection).map_err(std::io::Error::other)?;
        self.socket.send(&text).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let h = Header { port: 3, tag: Tag::new(1_700_000_000_123_456_789, 7), sent: -5, lost_before: 42 };
        let mut frame = h.encode().to_vec();
        frame.extend_from_slice(b"value");
        assert_eq!(Header::decode(&frame), Some((h, &b"value"[..])));
        assert_eq!(Header::decode(&frame[..HEADER - 1]), None);
    }

    #[test]
    fn a_hello_names_the_actions_recorded_in_another_encoding() {
        let foreign = Foreign {
            topic: "/chatter".into(),
            schema_name: "std_msgs/msg/String".into(),
            schema_encoding: "ros2msg".into(),
            schema: "string data\n".into(),
            message_encoding: "cdr".into(),
        };
        let hello = Hello {
            federate: "ros".into(),
            start: 5,
            store: None,
            ports: vec!["ros.ros.chatter".into()],
            physical: vec!["ros.ros.chatter_from_ros".into()],
            foreign: BTreeMap::from([("ros.ros.chatter_from_ros".to_string(), foreign.clone())]),
        };
        let back: Hello = serde_json::from_slice(&serde_json::to_vec(&hello).unwrap()).unwrap();
        assert_eq!(back.foreign.get("ros.ros.chatter_from_ros"), Some(&foreign));
        // Without any, the hello says nothing of them.
        let plain = Hello { foreign: BTreeMap::new(), ..hello };
        let text = serde_json::to_string(&plain).unwrap();
        assert!(!text.contains("foreign"), "{text}");
        assert!(serde_json::from_str::<Hello>(&text).unwrap().foreign.is_empty());
    }

    #[test]
    fn physical_events_read_back_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("physical");
        let events = [
            PhysicalEvent { action: "s.r.reading".into(), tag: Tag::new(2_000_000, 0), payload: vec![1, 2, 3] },
            PhysicalEvent { action: "s.r.other".into(), tag: Tag::new(2_000_000, 1), payload: Vec::new() },
        ];
        let mut out = Vec::new();
        for e in &events {
            PhysicalEvents::write(&mut out, e).unwrap();
        }
        std::fs::write(&path, &out).unwrap();
        let mut r = PhysicalEvents::open(&path).unwrap();
        assert_eq!(r.peek().unwrap(), Some(&events[0]));
        assert_eq!(r.take().unwrap().as_ref(), Some(&events[0]));
        assert_eq!(r.take().unwrap().as_ref(), Some(&events[1]));
        assert_eq!(r.take().unwrap(), None);
        // A file cut inside an event is named, not read as its end.
        std::fs::write(&path, &out[..out.len() - 1]).unwrap();
        let mut r = PhysicalEvents::open(&path).unwrap();
        r.take().unwrap();
        let e = r.take().unwrap_err().to_string();
        assert!(e.contains(PHYSICAL_ENV) && e.contains("physical"), "{e}");
        let e = refuse_opaque(vec!["cam.c.handle".into()]).unwrap_err().to_string();
        assert!(e.contains("cam.c.handle") && e.contains("opaque_physical_action"), "{e}");
    }
}
