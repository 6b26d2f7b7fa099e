//! Taps: copies of what a federate sends on an output, for `hprm topic
//! echo|hz`, that never disturb the program.
//!
//! A federate started with `HPRM_RUNTIME_DIR` listens on
//! `tap-<federate>.sock` there (a Unix `SOCK_SEQPACKET` socket: one
//! datagram per message, in order). A tap connects and sends the port it
//! wants (`PORT`, `REACTOR.PORT` or `FEDERATE.REACTOR.PORT`); the federate
//! answers with one JSON line, `{"ok":true,"port":"f.r.p"}` or
//! `{"ok":false,"error":"..."}`, then sends each value it puts on that port
//! as a [`HEADER`]-byte header (tag time since the start: i64 LE;
//! microstep: u32 LE; messages dropped for this tap so far: u64 LE)
//! followed by the payload bytes exactly as its receivers get them.
//! Out-of-band buffers stay in the store: the tap sees their descriptors
//! (dtype, shape, object id), never takes a reference.
//!
//! Invariants: with no tap attached, a send costs the scheduler one atomic
//! load and a branch. With taps, each copy is one non-blocking send; a tap
//! whose socket buffer is full loses that message (counted, reported in
//! the next header), and a tap that went away is forgotten. The
//! scheduler's decisions never depend on a tap, so results are the same
//! with and without one.

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hprm_rti::tag::Tag;
use nix::errno::Errno;
use nix::sys::socket::MsgFlags;
use socket2::{Domain, SockAddr, Socket, Type};

use crate::ids::TriggerId;
use crate::sync::Mutex;

/// Bytes before the payload in each tapped message.
pub const HEADER: usize = 20;

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
    use std::os::fd::AsRawFd;
    if path.as_os_str().len() < 100 {
        return Ok((SockAddr::unix(path)?, None));
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return Ok((SockAddr::unix(path)?, None)) };
    let dir = std::fs::File::open(dir)?;
    let short = Path::new("/proc/self/fd").join(dir.as_raw_fd().to_string()).join(name);
    Ok((SockAddr::unix(short)?, Some(dir)))
}

struct Subscriber {
    out: TriggerId,
    socket: Socket,
    dropped: u64,
}

/// A federate's taps.
pub(crate) struct TapHub {
    active: AtomicUsize,
    subscribers: Mutex<Vec<Subscriber>>,
    start: i64,
}

impl TapHub {
    /// Copies one sent value to the taps of `out`.
    #[inline]
    pub fn publish(&self, out: TriggerId, tag: Tag, payload: &[u8]) {
        if self.active.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.publish_to_taps(out, tag, payload);
    }

    #[cold]
    fn publish_to_taps(&self, out: TriggerId, tag: Tag, payload: &[u8]) {
        let mut subs = self.subscribers.lock();
        let before = subs.len();
        subs.retain_mut(|s| {
            if s.out != out {
                return true;
            }
            let mut header = [0u8; HEADER];
            header[..8].copy_from_slice(&tag.time.saturating_sub(self.start).to_le_bytes());
            header[8..12].copy_from_slice(&tag.microstep.to_le_bytes());
            header[12..].copy_from_slice(&s.dropped.to_le_bytes());
            match s.socket.send_vectored_with_flags(
                &[IoSlice::new(&header), IoSlice::new(payload)],
                (MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL).bits(),
            ) {
                Ok(_) => true,
                Err(e) if matches!(e.raw_os_error().map(Errno::from_raw), Some(Errno::EAGAIN | Errno::ENOBUFS)) => {
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
        }
    }
}

/// Listens for taps of this federate's `ports` (output, `f.r.p` path) on
/// its socket in `runtime_dir`. The socket file is removed when the
/// returned guard drops.
pub(crate) fn listen(
    runtime_dir: &Path,
    federate: &str,
    ports: Vec<(TriggerId, String)>,
    start: i64,
) -> std::io::Result<(Arc<TapHub>, SocketFile)> {
    let path = socket_path(runtime_dir, federate);
    let _ = std::fs::remove_file(&path);
    let listener = Socket::new(Domain::UNIX, Type::SEQPACKET, None)?;
    let (addr, _dir) = unix_addr(&path)?;
    listener.bind(&addr)?;
    listener.listen(8)?;
    let hub = Arc::new(TapHub { active: AtomicUsize::new(0), subscribers: Mutex::new(Vec::new()), start });
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
    let mut buf = [MaybeUninit::<u8>::uninit(); 512];
    let Ok(n) = socket.recv(&mut buf) else { return };
    // SAFETY: recv initialized the first n bytes.
    let wanted: Vec<u8> = buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect();
    let answer = match std::str::from_utf8(&wanted)
        .map_err(|_| "the port name is not UTF-8".to_string())
        .and_then(|w| resolve(federate, w.trim(), ports))
    {
        Ok((out, path)) => {
            if socket.send(serde_json::json!({"ok": true, "port": path}).to_string().as_bytes()).is_err() {
                return;
            }
            // Room for bursts; when even that is full, messages are dropped.
            let _ = socket.set_send_buffer_size(1 << 20);
            tracing::info!(port = %path, "tap attached");
            hub.subscribers.lock().push(Subscriber { out, socket, dropped: 0 });
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
}

/// One tapped message.
#[derive(Debug, Clone)]
pub struct TapMessage {
    /// The tag's time since the federation's start.
    pub elapsed_ns: i64,
    pub microstep: u32,
    /// Messages this tap has lost so far because it read too slowly.
    pub dropped: u64,
    /// The payload as the port's receivers get it (see `payload`).
    pub payload: Vec<u8>,
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
}

impl TapClient {
    /// Attaches to `port` of `federate`, running with runtime directory
    /// `runtime_dir`.
    pub fn attach(runtime_dir: &Path, federate: &str, port: &str) -> Result<TapClient, TapError> {
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
        socket.send(port.as_bytes()).map_err(io)?;
        socket.set_read_timeout(Some(HANDSHAKE * 2)).map_err(io)?;
        let mut client = TapClient {
            socket,
            federate: federate.to_string(),
            port: String::new(),
            buf: vec![MaybeUninit::uninit(); MAX_MESSAGE],
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
        Ok(client)
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
    /// comes or the federate ends).
    pub fn next(&mut self, timeout: Option<Duration>) -> Result<Next, TapError> {
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
        Ok(Next::Message(TapMessage {
            elapsed_ns: i64::from_le_bytes(le8(0..8)),
            microstep: u32::from_le_bytes(<[u8; 4]>::try_from(&data[8..12]).unwrap_or_default()),
            dropped: u64::from_le_bytes(le8(12..20)),
            payload: data[HEADER..].to_vec(),
        }))
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
        let (hub, file) = listen(&deep, "camera", ports, 1_000).unwrap();
        let mut tap = TapClient::attach(&deep, "camera", "image").unwrap();
        assert_eq!(tap.port, "camera.cam.image");
        // The hub learns of the tap once the handshake is done.
        while hub.active.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        hub.publish(TriggerId(4), Tag::new(5_000, 0), b"other port");
        hub.publish(TriggerId(3), Tag::new(3_000, 2), b"payload");
        match tap.next(Some(Duration::from_secs(5))).unwrap() {
            Next::Message(m) => {
                assert_eq!((m.elapsed_ns, m.microstep, m.dropped, m.payload.as_slice()), (2_000, 2, 0, &b"payload"[..]))
            }
            other => panic!("{other:?}"),
        }
        drop(tap);
        // A tap that went away is forgotten at the next send.
        hub.publish(TriggerId(3), Tag::new(4_000, 0), b"x");
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
