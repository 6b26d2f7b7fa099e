//! Taps: copies of what a federate sends on an output, for `hprm topic
//! echo|hz` and `hprm foxglove`, that never disturb the program.
//!
//! A federate started with `HPRM_RUNTIME_DIR` listens on
//! `tap-<federate>.sock` there (a Unix `SOCK_SEQPACKET` socket: one
//! datagram per message, in order). A tap connects and sends the port it
//! wants (`PORT`, `REACTOR.PORT` or `FEDERATE.REACTOR.PORT`), followed by
//! `\nhold` for a tap that holds store objects (below); the federate
//! answers with one JSON line, `{"ok":true,"port":"f.r.p","holds":BOOL}` or
//! `{"ok":false,"error":"..."}`, then sends each value it puts on that port
//! as a [`HEADER`]-byte header (tag time since the start: i64 LE;
//! microstep: u32 LE; messages dropped for this tap so far: u64 LE; flags:
//! u8, [`HELD`]) followed by the payload bytes exactly as its receivers get
//! them. Out-of-band buffers stay in the store: the tap sees their
//! descriptors (dtype, shape, object id).
//!
//! A plain tap never takes a reference on a store object: a release by a
//! reader that is not a receiver would settle one of the receivers'
//! deliveries, and the object could be freed while a receiver reads it.
//! A *holding* tap (one that asked to hold, of a federate with a store)
//! is a receiver like the others for the messages marked [`HELD`]: the
//! federate created (or announced) their store objects with one delivery
//! more, for it, and the tap takes them ([`Held`]), reads them where they
//! lie and releases them, which settles that delivery. It then tells the
//! federate how many held messages it has released so far (an 8-byte
//! count, u64 LE, on the same socket).
//!
//! Invariants: with no tap attached, a send costs the scheduler two
//! atomic loads and a branch. With taps, each copy is one non-blocking
//! send; a tap whose socket buffer is full loses that message (counted,
//! reported in the next header), and a tap that went away is forgotten.
//! A holding tap holds at most [`MAX_HELD`] messages of its port at a
//! time (sent to it and not yet released, as its counts say): beyond, the
//! federate sends the message unheld, so a slow or stopped tap pins at
//! most that many values in the store, never blocks the sender and never
//! makes it wait for room. Every delivery made for a tap is settled: by
//! the tap's release, or by the federate itself at once when the message
//! did not reach the tap (its buffer full, or gone); a tap killed outright
//! leaves those it had not taken to the store's delivery TTL. The
//! scheduler's decisions never depend on a tap, so results are the same
//! with and without one.

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hprm_rti::tag::Tag;
use hprm_store::{Object, ObjectId};
use nix::errno::Errno;
use nix::sys::socket::{recv, MsgFlags};
use socket2::{Domain, SockAddr, Socket, Type};

use crate::ids::TriggerId;
use crate::payload::{Decoder, PayloadError};
use crate::sync::Mutex;

/// Bytes before the payload in each tapped message.
pub const HEADER: usize = 21;

/// Header flag: the message carries a delivery for this tap, which must
/// take and release its store objects.
pub const HELD: u8 = 1;

/// Most messages of its port a holding tap holds at a time: what a live
/// viewer can pin in the store (four camera frames), whatever its pace.
pub const MAX_HELD: u64 = 4;

/// What a tap asks for, after the port, to hold store objects.
const HOLD: &str = "\nhold";

/// Room for the largest message (an in-band payload fills at most one
/// 64 KiB frame).
const MAX_MESSAGE: usize = (64 << 10) + HEADER + 64;

/// How long a tap may take to name its port.
const HANDSHAKE: Duration = Duration::from_secs(2);

/// The socket path of `federate`'s taps in a runtime directory.
pub fn socket_path(runtime_dir: &Path, federate: &str) -> PathBuf {
    runtime_dir.join(format!("tap-{federate}.sock"))
}

/// The address of the socket file at `path`, and what must stay open
/// while it is used. A Unix socket path holds at most 107 bytes, and
/// runtime directories under long temporary paths exceed that: then the
/// address goes through `/proc/self/fd/N/NAME`, N a descriptor of the
/// directory, which the kernel resolves to the same file.
pub(crate) fn unix_addr(path: &Path) -> std::io::Result<(SockAddr, Option<std::fs::File>)> {
    if path.as_os_str().len() < 100 {
        return Ok((SockAddr::unix(path)?, None));
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return Ok((SockAddr::unix(path)?, None)) };
    let dir = std::fs::File::open(dir)?;
    let short = Path::new("/proc/self/fd").join(dir.as_raw_fd().to_string()).join(name);
    Ok((SockAddr::unix(short)?, Some(dir)))
}

fn would_block(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error().map(Errno::from_raw), Some(Errno::EAGAIN | Errno::ENOBUFS))
}

struct Subscriber {
    out: TriggerId,
    socket: Socket,
    dropped: u64,
    /// It holds store objects (it asked to, and this federate has a store).
    holds: bool,
    /// Held messages sent to it, and released by it as its last count said.
    held: u64,
    released: u64,
    /// Whether the message of `out` being sent now carries a delivery for
    /// it: set by [`TapHub::reserve`], used by [`TapHub::publish`].
    reserved: bool,
}

impl Subscriber {
    /// Whether it may hold one more message: fewer than [`MAX_HELD`]
    /// unreleased (its counts are read only when that many seem to be).
    fn has_room(&mut self) -> bool {
        if self.held - self.released >= MAX_HELD {
            // Each datagram from the tap is one count (8 bytes, little
            // endian); only a whole one is read. nix's `recv` takes an
            // initialized buffer, which socket2's does not.
            let mut buf = [0u8; 8];
            while let Ok(8) = recv(self.socket.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
                let count = u64::from_le_bytes(buf);
                // Counts only grow, and never past what was sent.
                self.released = self.released.max(count.min(self.held));
            }
        }
        self.held - self.released < MAX_HELD
    }
}

/// A federate's taps.
pub(crate) struct TapHub {
    active: AtomicUsize,
    /// Subscribers that hold store objects.
    holders: AtomicUsize,
    subscribers: Mutex<Vec<Subscriber>>,
    start: i64,
    /// Settles the deliveries made for holding taps that a message did not
    /// reach; `None` without a store (then no tap holds).
    decoder: Option<Decoder>,
}

impl TapHub {
    /// The deliveries to add, for holding taps, to the store objects of
    /// the value of `out` about to be encoded: one per holding tap of
    /// `out` with room. [`TapHub::publish`] of that value uses them.
    #[inline]
    pub fn reserve(&self, out: TriggerId) -> u32 {
        if self.holders.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        self.reserve_for_holders(out)
    }

    #[cold]
    fn reserve_for_holders(&self, out: TriggerId) -> u32 {
        let mut subs = self.subscribers.lock();
        let mut n = 0;
        for s in subs.iter_mut().filter(|s| s.out == out) {
            s.reserved = s.holds && s.has_room();
            n += u32::from(s.reserved);
        }
        n
    }

    /// Copies one sent value to the taps of `out`; `reserved`: the
    /// deliveries [`TapHub::reserve`] added to its store objects. Those
    /// that did not reach their tap are settled here.
    #[inline]
    pub fn publish(&self, out: TriggerId, tag: Tag, payload: &[u8], reserved: u32) {
        if self.active.load(Ordering::Relaxed) == 0 && reserved == 0 {
            return;
        }
        self.publish_to_taps(out, tag, payload, reserved);
    }

    #[cold]
    fn publish_to_taps(&self, out: TriggerId, tag: Tag, payload: &[u8], reserved: u32) {
        let mut left = reserved;
        let mut subs = self.subscribers.lock();
        let (before, holders_before) = (subs.len(), subs.iter().filter(|s| s.holds).count());
        subs.retain_mut(|s| {
            if s.out != out {
                return true;
            }
            let held = std::mem::take(&mut s.reserved) && left > 0;
            let mut header = [0u8; HEADER];
            header[..8].copy_from_slice(&tag.time.saturating_sub(self.start).to_le_bytes());
            header[8..12].copy_from_slice(&tag.microstep.to_le_bytes());
            header[12..20].copy_from_slice(&s.dropped.to_le_bytes());
            header[20] = if held { HELD } else { 0 };
            match s.socket.send_vectored_with_flags(
                &[IoSlice::new(&header), IoSlice::new(payload)],
                (MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL).bits(),
            ) {
                Ok(_) => {
                    if held {
                        left -= 1;
                        s.held += 1;
                    }
                    true
                }
                Err(e) if would_block(&e) => {
                    s.dropped += 1;
                    true
                }
                // Gone (EPIPE, ECONNRESET) or unusable: forget it.
                Err(_) => false,
            }
        });
        let gone = before - subs.len();
        if gone > 0 {
            self.active.fetch_sub(gone, Ordering::Relaxed);
            self.holders.fetch_sub(holders_before - subs.iter().filter(|s| s.holds).count(), Ordering::Relaxed);
        }
        drop(subs);
        // The deliveries made for taps this message did not reach: settled
        // now, as those taps will never take them.
        for _ in 0..left {
            if let Some(Err(e)) = self.decoder.as_ref().map(|d| d.settle(payload)) {
                tracing::debug!("a tap's delivery of a message it did not get could not be settled: {e}");
            }
        }
    }
}

/// Listens for taps of this federate's `ports` (output, `f.r.p` path) on
/// its socket in `runtime_dir`. The socket file is removed when the
/// returned guard drops.
/// `decoder`: the federate's, when it has a store (then taps may hold
/// store objects).
pub(crate) fn listen(
    runtime_dir: &Path,
    federate: &str,
    ports: Vec<(TriggerId, String)>,
    start: i64,
    decoder: Option<Decoder>,
) -> std::io::Result<(Arc<TapHub>, SocketFile)> {
    let path = socket_path(runtime_dir, federate);
    let _ = std::fs::remove_file(&path);
    let listener = Socket::new(Domain::UNIX, Type::SEQPACKET, None)?;
    let (addr, _dir) = unix_addr(&path)?;
    listener.bind(&addr)?;
    listener.listen(8)?;
    let hub = Arc::new(TapHub {
        active: AtomicUsize::new(0),
        holders: AtomicUsize::new(0),
        subscribers: Mutex::new(Vec::new()),
        start,
        decoder: decoder.filter(|d| d.store().is_configured()),
    });
    let h = hub.clone();
    let fed = federate.to_string();
    std::thread::Builder::new().name("hprm-tap".into()).spawn(move || loop {
        match listener.accept() {
            Ok((socket, _)) => attach(&h, socket, &fed, &ports),
            Err(e) => {
                tracing::debug!("tap socket accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    })?;
    Ok((hub, SocketFile(path)))
}

/// Removes the tap socket file when dropped.
pub(crate) struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Which of `ports` `wanted` names: its full path, its path without the
/// federate, or its bare port name when that is unique.
fn resolve(federate: &str, wanted: &str, ports: &[(TriggerId, String)]) -> Result<(TriggerId, String), String> {
    let full = |p: &str| p.to_string();
    let local = |p: &str| p.strip_prefix(federate).and_then(|r| r.strip_prefix('.')).unwrap_or(p).to_string();
    let bare = |p: &str| p.rsplit('.').next().unwrap_or(p).to_string();
    for key in [&full as &dyn Fn(&str) -> String, &local, &bare] {
        let hits: Vec<_> = ports.iter().filter(|(_, p)| key(p) == wanted).collect();
        match hits.as_slice() {
            [(t, p)] => return Ok((*t, p.clone())),
            [] => {}
            many => {
                let names: Vec<&str> = many.iter().map(|(_, p)| p.as_str()).collect();
                return Err(format!(
                    "port {wanted:?} of federate {federate} is ambiguous: it could be {}; name it as REACTOR.PORT",
                    names.join(", ")
                ));
            }
        }
    }
    let names: Vec<&str> = ports.iter().map(|(_, p)| p.as_str()).collect();
    Err(if names.is_empty() {
        format!("federate {federate} sends nothing to other federates, so it has no port to tap (only outputs connected to another federate can be tapped)")
    } else {
        format!(
            "federate {federate} has no output {wanted:?} connected to another federate; tappable ports: {}",
            names.join(", ")
        )
    })
}

fn attach(hub: &TapHub, socket: Socket, federate: &str, ports: &[(TriggerId, String)]) {
    let _ = socket.set_read_timeout(Some(HANDSHAKE));
    let mut buf = [0u8; 512];
    // Blocking, bounded by the read timeout above.
    let Ok(n) = recv(socket.as_raw_fd(), &mut buf, MsgFlags::empty()) else { return };
    let wanted = &buf[..n];
    let answer = match std::str::from_utf8(wanted).map_err(|_| "the port name is not UTF-8".to_string()).and_then(|w| {
        let (port, hold) = w.strip_suffix(HOLD).map_or((w, false), |p| (p, true));
        resolve(federate, port.trim(), ports).map(|r| (r, hold))
    }) {
        Ok(((out, path), hold)) => {
            let holds = hold && hub.decoder.is_some();
            if socket
                .send(serde_json::json!({"ok": true, "port": path, "holds": holds}).to_string().as_bytes())
                .is_err()
            {
                return;
            }
            // Room for bursts; when even that is full, messages are dropped.
            let _ = socket.set_send_buffer_size(1 << 20);
            tracing::info!(port = %path, holds, "tap attached");
            // Counted under the lock, as `publish` counts departures.
            let mut subs = hub.subscribers.lock();
            subs.push(Subscriber { out, socket, dropped: 0, holds, held: 0, released: 0, reserved: false });
            if holds {
                hub.holders.fetch_add(1, Ordering::Relaxed);
            }
            hub.active.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(e) => serde_json::json!({"ok": false, "error": e}).to_string(),
    };
    let _ = socket.send(answer.as_bytes());
}

/// Why a tap could not attach or read.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    #[error("federate {federate} has no tap socket at {path}; is it running (see `hprm ps`) under `hprm launch`, which gives it a runtime directory?")]
    NoSocket { federate: String, path: PathBuf },
    #[error("federate {federate} refused the tap: {message}")]
    Refused { federate: String, message: String },
    #[error("tap on federate {federate}: {source}")]
    Io { federate: String, source: std::io::Error },
    #[error("a tap that holds store objects needs the federate's store: {0}")]
    Store(PayloadError),
}

/// One tapped message.
#[derive(Debug)]
pub struct TapMessage {
    /// The tag's time since the federation's start.
    pub elapsed_ns: i64,
    pub microstep: u32,
    /// Messages this tap has lost so far because it read too slowly.
    pub dropped: u64,
    /// The payload as the port's receivers get it (see `payload`).
    pub payload: Vec<u8>,
    /// For a holding tap, a message that carries a delivery for it: its
    /// store objects, taken (dropping them releases them). `None`: the
    /// payload's store references must not be read (a plain tap, or one
    /// that already held [`MAX_HELD`] messages when this one was sent).
    pub held: Option<Held>,
}

/// The store objects of one held message, taken by the tap: read them
/// where they lie ([`Held::message`], [`Held::object`]); dropping this
/// releases them and tells the federate.
pub struct Held {
    /// The spilled message's object (a message over the in-band limit).
    spilled: Option<Object>,
    /// The buffers' objects, in order of appearance.
    objects: Vec<Object>,
    counts: Arc<Released>,
}

impl Held {
    /// The in-band message of `payload` (this message's): `payload`
    /// itself, or the spilled message it references.
    pub fn message<'a>(&'a self, payload: &'a [u8]) -> &'a [u8] {
        self.spilled.as_ref().map_or(payload, Object::data)
    }

    /// The data of store object `id`, if the message references it.
    pub fn object(&self, id: &ObjectId) -> Option<&[u8]> {
        self.objects.iter().find(|o| o.id() == *id).map(Object::data)
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("spilled", &self.spilled.as_ref().map(Object::id))
            .field("objects", &self.objects.iter().map(Object::id).collect::<Vec<_>>())
            .finish()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Released (one-way, before the count), then counted.
        self.objects.clear();
        self.spilled = None;
        self.counts.one_more();
    }
}

/// A holding tap's count of released messages, and its way back to the
/// federate.
struct Released {
    socket: Socket,
    /// Released so far, and whether the federate may not have that count
    /// yet (its socket was full: sent again at the next chance).
    state: std::sync::Mutex<(u64, bool)>,
}

impl Released {
    fn one_more(&self) {
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        st.0 += 1;
        st.1 = true;
        self.send(&mut st);
    }

    /// Sends the count if the federate may not have it; never waits.
    fn send(&self, st: &mut (u64, bool)) {
        if st.1 {
            let sent = self
                .socket
                .send_with_flags(&st.0.to_le_bytes(), (MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL).bits());
            st.1 = sent.is_err();
        }
    }

    fn resend(&self) {
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.send(&mut st);
    }
}

impl Drop for TapClient {
    fn drop(&mut self) {
        if self.holding.is_some() {
            self.release_all();
        }
    }
}

/// What [`TapClient::next`] got.
#[derive(Debug)]
pub enum Next {
    Message(TapMessage),
    /// Nothing within the timeout.
    Timeout,
    /// The federate ended (or closed the tap).
    Closed,
}

/// The reading end of a tap.
pub struct TapClient {
    socket: Socket,
    federate: String,
    /// The port's full path (`federate.reactor.port`).
    pub port: String,
    buf: Vec<MaybeUninit<u8>>,
    /// A holding tap's: what takes the objects of held messages, and the
    /// count of those released.
    holding: Option<(Decoder, Arc<Released>)>,
}

impl TapClient {
    /// Attaches to `port` of `federate`, running with runtime directory
    /// `runtime_dir`.
    pub fn attach(runtime_dir: &Path, federate: &str, port: &str) -> Result<TapClient, TapError> {
        Self::attach_with(runtime_dir, federate, port, None)
    }

    /// Attaches as a tap that holds store objects, reading them through
    /// `decoder` (connected to the federate's store, which is checked
    /// first). The federate may not agree (it has no store): then the tap
    /// is a plain one ([`TapClient::holds`]).
    pub fn attach_holding(
        runtime_dir: &Path,
        federate: &str,
        port: &str,
        decoder: Decoder,
    ) -> Result<TapClient, TapError> {
        decoder.store().client().map_err(TapError::Store)?;
        Self::attach_with(runtime_dir, federate, port, Some(decoder))
    }

    fn attach_with(
        runtime_dir: &Path,
        federate: &str,
        port: &str,
        decoder: Option<Decoder>,
    ) -> Result<TapClient, TapError> {
        let path = socket_path(runtime_dir, federate);
        let io = |source| TapError::Io { federate: federate.to_string(), source };
        if !path.exists() {
            return Err(TapError::NoSocket { federate: federate.to_string(), path });
        }
        let socket = Socket::new(Domain::UNIX, Type::SEQPACKET, None).map_err(io)?;
        let (addr, _dir) = unix_addr(&path).map_err(io)?;
        socket.connect(&addr).map_err(|e| {
            if e.kind() == std::io::ErrorKind::ConnectionRefused {
                TapError::NoSocket { federate: federate.to_string(), path: path.clone() }
            } else {
                io(e)
            }
        })?;
        let request = if decoder.is_some() { format!("{port}{HOLD}") } else { port.to_string() };
        socket.send(request.as_bytes()).map_err(io)?;
        socket.set_read_timeout(Some(HANDSHAKE * 2)).map_err(io)?;
        let mut client = TapClient {
            socket,
            federate: federate.to_string(),
            port: String::new(),
            buf: vec![MaybeUninit::uninit(); MAX_MESSAGE],
            holding: None,
        };
        let answer = client.recv()?.ok_or_else(|| TapError::Refused {
            federate: federate.to_string(),
            message: "it closed the tap without answering".into(),
        })?;
        let v: serde_json::Value = serde_json::from_slice(&answer).map_err(|e| TapError::Refused {
            federate: federate.to_string(),
            message: format!("unreadable answer: {e}"),
        })?;
        if v["ok"] != serde_json::Value::Bool(true) {
            return Err(TapError::Refused {
                federate: federate.to_string(),
                message: v["error"].as_str().unwrap_or("no reason given").to_string(),
            });
        }
        client.port = v["port"].as_str().unwrap_or(port).to_string();
        if let (Some(decoder), Some(true)) = (decoder, v["holds"].as_bool()) {
            let socket = client.socket.try_clone().map_err(io)?;
            client.holding = Some((decoder, Arc::new(Released { socket, state: std::sync::Mutex::new((0, false)) })));
        }
        Ok(client)
    }

    /// Whether this tap holds store objects (the federate agreed).
    pub fn holds(&self) -> bool {
        self.holding.is_some()
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, TapError> {
        match self.socket.recv(&mut self.buf) {
            Ok(0) => Ok(None),
            // SAFETY: recv initialized the first n bytes.
            Ok(n) => Ok(Some(self.buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect())),
            Err(e) => Err(TapError::Io { federate: self.federate.clone(), source: e }),
        }
    }

    /// The next message, waiting at most `timeout` (`None`: until one
    /// comes or the federate ends). A held message's store objects are
    /// taken before it is returned.
    pub fn next(&mut self, timeout: Option<Duration>) -> Result<Next, TapError> {
        if let Some((_, counts)) = &self.holding {
            counts.resend();
        }
        self.socket
            .set_read_timeout(timeout)
            .map_err(|source| TapError::Io { federate: self.federate.clone(), source })?;
        let data = match self.recv() {
            Ok(Some(d)) => d,
            Ok(None) => return Ok(Next::Closed),
            Err(TapError::Io { source, .. })
                if matches!(source.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                return Ok(Next::Timeout)
            }
            Err(TapError::Io { source, .. }) if source.kind() == std::io::ErrorKind::ConnectionReset => {
                return Ok(Next::Closed)
            }
            Err(e) => return Err(e),
        };
        if data.len() < HEADER {
            return Err(TapError::Refused {
                federate: self.federate.clone(),
                message: format!("a {}-byte message is shorter than the tap header", data.len()),
            });
        }
        let le8 = |r: std::ops::Range<usize>| <[u8; 8]>::try_from(&data[r]).unwrap_or_default();
        let payload = data[HEADER..].to_vec();
        let held = match &self.holding {
            Some((decoder, counts)) if data[20] & HELD != 0 => Some(Self::take(decoder, counts, &payload)),
            _ => None,
        };
        Ok(Next::Message(TapMessage {
            elapsed_ns: i64::from_le_bytes(le8(0..8)),
            microstep: u32::from_le_bytes(<[u8; 4]>::try_from(&data[8..12]).unwrap_or_default()),
            dropped: u64::from_le_bytes(le8(12..20)),
            payload,
            held,
        }))
    }

    /// Takes and releases the store objects of the held messages still
    /// on their way. Reading is shut down first, so the federate sends
    /// nothing more (its next send fails, and it settles that message's
    /// delivery itself): every delivery made for this tap is settled.
    fn release_all(&mut self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Read);
        // After the shutdown an empty queue reads as the end, at once.
        while let Ok(Next::Message(m)) = self.next(Some(Duration::from_millis(1))) {
            drop(m);
        }
    }

    /// Takes the store objects of a held message. What cannot be taken
    /// (the store went away) is not held: its delivery is left to the
    /// store (its TTL, or its death), and the message still counts as
    /// released, as this tap holds nothing of it.
    fn take(decoder: &Decoder, counts: &Arc<Released>, payload: &[u8]) -> Held {
        let mut held = Held { spilled: None, objects: Vec::new(), counts: counts.clone() };
        let taken = decoder.take_spilled(payload).and_then(|spilled| {
            held.spilled = spilled;
            decoder.take_message(held.message(payload))
        });
        match taken {
            Ok(objects) => held.objects = objects,
            Err(e) => tracing::warn!("a held message's store objects could not be taken: {e}"),
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_resolve_by_full_local_or_unique_bare_name() {
        let ports = vec![
            (TriggerId(1), "cam.a.image".to_string()),
            (TriggerId(2), "cam.b.image".to_string()),
            (TriggerId(3), "cam.a.info".to_string()),
        ];
        assert_eq!(resolve("cam", "cam.a.image", &ports).unwrap().0, TriggerId(1));
        assert_eq!(resolve("cam", "b.image", &ports).unwrap().0, TriggerId(2));
        assert_eq!(resolve("cam", "info", &ports).unwrap(), (TriggerId(3), "cam.a.info".to_string()));
        let e = resolve("cam", "image", &ports).unwrap_err();
        assert!(e.contains("ambiguous") && e.contains("cam.a.image") && e.contains("cam.b.image"), "{e}");
        let e = resolve("cam", "depth", &ports).unwrap_err();
        assert!(e.contains("no output \"depth\"") && e.contains("cam.a.info"), "{e}");
        assert!(resolve("sink", "x", &[]).unwrap_err().contains("sends nothing to other federates"));
    }

    #[test]
    fn a_tap_attaches_in_a_runtime_directory_with_a_long_path() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("d".repeat(120));
        std::fs::create_dir(&deep).unwrap();
        let ports = vec![(TriggerId(3), "camera.cam.image".to_string())];
        let (hub, file) = listen(&deep, "camera", ports, 1_000, None).unwrap();
        let mut tap = TapClient::attach(&deep, "camera", "image").unwrap();
        assert_eq!(tap.port, "camera.cam.image");
        // The hub learns of the tap once the handshake is done.
        while hub.active.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(hub.reserve(TriggerId(3)), 0, "a plain tap holds nothing");
        hub.publish(TriggerId(4), Tag::new(5_000, 0), b"other port", 0);
        hub.publish(TriggerId(3), Tag::new(3_000, 2), b"payload", 0);
        match tap.next(Some(Duration::from_secs(5))).unwrap() {
            Next::Message(m) => {
                assert_eq!(
                    (m.elapsed_ns, m.microstep, m.dropped, m.payload.as_slice()),
                    (2_000, 2, 0, &b"payload"[..])
                );
                assert!(m.held.is_none());
            }
            other => panic!("{other:?}"),
        }
        drop(tap);
        // A tap that went away is forgotten at the next send.
        hub.publish(TriggerId(3), Tag::new(4_000, 0), b"x", 0);
        assert_eq!(hub.active.load(Ordering::Relaxed), 0);
        drop(file);
        assert!(!socket_path(&deep, "camera").exists());
    }

    #[test]
    fn a_missing_federate_socket_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = TapClient::attach(dir.path(), "cam", "image").err().unwrap().to_string();
        assert!(e.contains("tap-cam.sock") && e.contains("hprm ps"), "{e}");
    }
}
