//! One connection to the daemon, shared by any number of threads.
//!
//! Requests carry a `seq`; replies may come back out of order (a `get` that
//! waits is answered when its objects are sealed). There is no reader thread:
//! a caller waiting for its reply becomes the *leader* and reads from the
//! socket itself, parking replies meant for other callers in `replies` and
//! waking them. With one thread the reply is read by the thread that wants
//! it (no hand-off, no extra wake-up); with many, at most one reads at a time.
//!
//! Requests sent without a reply go to the outbox when the daemon gave us
//! one (`crate::outbox`): no system call, no wake-up of the daemon. Every
//! send, either way, happens under the one `tx` lock, so the count of
//! socket frames each outbox entry records is exact.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{recv, send, MsgFlags};

use crate::error::{Error, Result};
use crate::outbox::OutboxWriter;
use crate::protocol::frame::{FrameBuffer, FrameError, MAX_REPLY_BODY};
use crate::protocol::message::{decode_reply, DecodeError, Encoder, ErrorReply, Reply, Request};

pub(crate) struct Connection {
    stream: UnixStream,
    /// How long a leader polls for a reply before sleeping in `read`.
    spin: Duration,
    tx: Mutex<Tx>,
    /// Held by the leader only, so uncontended.
    frames: Mutex<FrameBuffer>,
    state: Mutex<State>,
    cv: Condvar,
}

/// Everything that sends.
struct Tx {
    encoder: Encoder,
    /// Frames written to the socket so far (the `after` of an outbox entry).
    sent: u64,
    outbox: Option<OutboxWriter>,
}

impl Tx {
    /// Writes the frame of `req` to the socket.
    fn send(&mut self, stream: &UnixStream, seq: u64, req: &Request<'_>) -> std::io::Result<()> {
        self.sent += 1;
        send_all(stream, self.encoder.request(seq, req))
    }

    /// Appends the one-way `req` to the outbox; false if there is no
    /// outbox or no room in it.
    fn push(&mut self, req: &Request<'_>) -> bool {
        let Tx { encoder, sent, outbox } = self;
        outbox.as_mut().is_some_and(|o| o.push(*sent, encoder.request(0, req)))
    }

    /// After pushes: tells the daemon to read them now if it asked to be told.
    fn flush_if_wanted(&mut self, stream: &UnixStream) -> std::io::Result<()> {
        if self.outbox.as_ref().is_some_and(OutboxWriter::wake_wanted) {
            self.send(stream, 0, &Request::Flush)?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct State {
    next_seq: u64,
    /// Replies read by a leader for other callers.
    replies: HashMap<u64, Reply>,
    /// Someone is reading the socket.
    leader: bool,
    /// Callers blocked on `cv`.
    sleepers: usize,
    /// Set once the socket failed; every later call fails with this reason.
    broken: Option<String>,
    /// Errors of requests sent without waiting for a reply, read since;
    /// the next call reports the oldest.
    earlier: Vec<ErrorReply>,
}

impl State {
    /// Reports the oldest unreported error of a request sent without a reply.
    fn take_earlier(&mut self) -> Result<()> {
        if self.earlier.is_empty() {
            return Ok(());
        }
        let e = self.earlier.remove(0);
        Err(Error::Earlier { code: e.code, message: e.message })
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves no half-updated
    // invariant behind (each critical section is a few field updates).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Connection {
    pub(crate) fn new(stream: UnixStream, spin: Duration, outbox: Option<OutboxWriter>) -> Connection {
        Connection {
            stream,
            spin,
            tx: Mutex::new(Tx { encoder: Encoder::default(), sent: 0, outbox }),
            frames: Mutex::new(FrameBuffer::new(MAX_REPLY_BODY)),
            state: Mutex::new(State { next_seq: 1, ..State::default() }),
            cv: Condvar::new(),
        }
    }

    /// Sends `req` and waits for its reply. Error replies become errors.
    pub(crate) fn call(&self, req: &Request<'_>) -> Result<Reply> {
        let seq = self.send_request(req, true)?;
        self.finish(seq, req.name())
    }

    /// The oldest error of a request sent without a reply that has been read
    /// and not reported yet.
    pub(crate) fn take_earlier(&self) -> Result<()> {
        lock(&self.state).take_earlier()
    }

    /// Sends `req` without asking for a reply, for requests the daemon has
    /// no reason to refuse (see `ObjectMut::seal`) or whose failure nobody
    /// could act on (release and abort on drop). Fails only if the
    /// connection is broken.
    pub(crate) fn post(&self, req: &Request<'_>) -> Result<()> {
        self.post_all(std::slice::from_ref(req))
    }

    /// Posts `reqs` in order: to the outbox while it has room, otherwise in
    /// one write to the socket (one wake-up of the daemon for a seal and
    /// what follows it).
    ///
    /// A claim or redeliver that went over the socket is waited for: the
    /// call returns once the daemon has read it. Whatever this client does
    /// next (send the object on to another process, which claims and
    /// releases it) must not reach the daemon first, through another
    /// connection, while the claim or redeliver still sits unread in this
    /// socket: the daemon could free the message under this client. Posts
    /// in the outbox need no wait; the daemon reads every outbox past what
    /// was in it before it frees anything (see the daemon's `outboxes.rs`).
    pub(crate) fn post_all(&self, reqs: &[Request<'_>]) -> Result<()> {
        let Some(first) = reqs.first() else { return Ok(()) };
        let op = first.name();
        if let Some(reason) = &lock(&self.state).broken {
            return Err(Error::Disconnected { op, reason: reason.clone() });
        }
        let mut tx = lock(&self.tx);
        let pushed = reqs.iter().take_while(|req| tx.push(req)).count();
        let sent = match &reqs[pushed..] {
            [] => tx.flush_if_wanted(&self.stream),
            [one] => tx.send(&self.stream, 0, one),
            rest => {
                let mut frames = Vec::new();
                for req in rest {
                    frames.extend_from_slice(tx.encoder.request(0, req));
                }
                tx.sent += rest.len() as u64;
                send_all(&self.stream, &frames)
            }
        };
        drop(tx);
        sent.map_err(|e| self.mark_broken(op, e.to_string()))?;
        if reqs[pushed..].iter().any(|r| matches!(r, Request::Claim { .. } | Request::Redeliver { .. })) {
            // Any request with a reply will do: replies come in order.
            let probe = Request::Contains { id: crate::ObjectId::from_bytes([0; crate::ObjectId::LEN]) };
            let seq = self.start(&probe)?;
            self.finish(seq, op)?;
        }
        Ok(())
    }

    /// Like [`Connection::call`] but hands back error replies as replies
    /// (for `get`, whose timeout reply carries the missing ids).
    pub(crate) fn call_raw(&self, req: &Request<'_>) -> Result<Reply> {
        let seq = self.send_request(req, true)?;
        self.wait(seq, req.name())
    }

    /// Sends `req` and returns its seq without waiting for the reply, which
    /// [`Connection::finish`] takes. Errors of earlier requests are left
    /// for the next call to report.
    pub(crate) fn start(&self, req: &Request<'_>) -> Result<u64> {
        self.send_request(req, false)
    }

    /// Sends `req` under a new seq, unless the connection is broken or
    /// (`report_earlier`) an earlier request sent without a reply failed:
    /// then that error, oldest first.
    fn send_request(&self, req: &Request<'_>, report_earlier: bool) -> Result<u64> {
        let op = req.name();
        let seq = {
            let mut st = lock(&self.state);
            if let Some(reason) = &st.broken {
                return Err(Error::Disconnected { op, reason: reason.clone() });
            }
            if report_earlier {
                st.take_earlier()?;
            }
            st.next_seq += 1;
            st.next_seq - 1
        };
        self.send(seq, req).map_err(|reason| self.mark_broken(op, reason))?;
        Ok(seq)
    }

    /// The reply to the `op` request [`Connection::start`] sent as `seq`.
    /// Error replies become errors.
    pub(crate) fn finish(&self, seq: u64, op: &'static str) -> Result<Reply> {
        match self.wait(seq, op)? {
            Reply::Error(e) => Err(Error::Rejected { op, code: e.code, message: e.message }),
            reply => Ok(reply),
        }
    }

    fn send(&self, seq: u64, req: &Request<'_>) -> Result<(), String> {
        lock(&self.tx).send(&self.stream, seq, req).map_err(|e| e.to_string())
    }

    /// The socket to the daemon (for `StoreClient::watch_close`, which
    /// polls a duplicate of it).
    pub(crate) fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Why the connection failed, once it has (every call now fails).
    pub(crate) fn broken(&self) -> Option<String> {
        lock(&self.state).broken.clone()
    }

    /// Marks the connection failed for `reason`: every later call fails
    /// with [`Error::Disconnected`], and callers waiting for a reply wake.
    pub(crate) fn mark_broken(&self, op: &'static str, reason: String) -> Error {
        let mut st = lock(&self.state);
        st.broken.get_or_insert(reason.clone());
        if st.sleepers > 0 {
            self.cv.notify_all();
        }
        Error::Disconnected { op, reason }
    }

    fn wait(&self, seq: u64, op: &'static str) -> Result<Reply> {
        let mut st = lock(&self.state);
        loop {
            if let Some(reply) = st.replies.remove(&seq) {
                return Ok(reply);
            }
            if let Some(reason) = &st.broken {
                return Err(Error::Disconnected { op, reason: reason.clone() });
            }
            if st.leader {
                st.sleepers += 1;
                st = self.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
                st.sleepers -= 1;
                continue;
            }
            st.leader = true;
            drop(st);
            let read = self.read_one();
            st = lock(&self.state);
            st.leader = false;
            let mine = match read {
                Ok((s, reply)) if s == seq => Some(reply),
                Ok((0, Reply::Error(e))) => {
                    tracing::warn!(error = %e.message, "a request sent without waiting for its reply failed");
                    st.earlier.push(e);
                    None
                }
                // Notifications only flow on subscription connections.
                Ok((0, _)) => None,
                Ok((s, reply)) => {
                    st.replies.insert(s, reply);
                    None
                }
                Err(reason) => {
                    st.broken.get_or_insert(reason);
                    None
                }
            };
            // Wake the others: one of them must take over reading, or find
            // its reply parked.
            if st.sleepers > 0 {
                self.cv.notify_all();
            }
            if let Some(reply) = mine {
                return Ok(reply);
            }
        }
    }

    fn read_one(&self) -> Result<(u64, Reply), String> {
        let mut frames = lock(&self.frames);
        read_reply(&self.stream, &mut frames, self.spin).map_err(|e| e.to_string())
    }
}

/// Writes all of `frame`. MSG_NOSIGNAL: a daemon that went away must
/// surface as an error here, not as a SIGPIPE killing a host process that
/// did not ignore that signal (Rust binaries do; C hosts may not).
pub(crate) fn send_all(stream: &UnixStream, mut frame: &[u8]) -> std::io::Result<()> {
    while !frame.is_empty() {
        match send(stream.as_raw_fd(), frame, MsgFlags::MSG_NOSIGNAL) {
            Ok(n) => frame = &frame[n..],
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Why no reply could be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("the daemon closed the connection")]
    Closed,
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

impl ReadError {
    /// A read timeout set on the socket ran out (the frame buffer keeps any
    /// partial frame, so reading may resume).
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, ReadError::Io(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
    }
}

/// Reads the next reply frame from a blocking socket, first polling for up
/// to `spin` (the daemon usually answers within microseconds; sleeping in
/// `read` and being woken costs more than that on a busy or virtualised
/// machine).
pub(crate) fn read_reply(
    mut stream: &UnixStream,
    frames: &mut FrameBuffer,
    spin: Duration,
) -> Result<(u64, Reply), ReadError> {
    let mut spin_until = (!spin.is_zero()).then(|| Instant::now() + spin);
    loop {
        if let Some(len) = frames.poll()? {
            let decoded = decode_reply(frames.body(len));
            frames.pop(len);
            return Ok(decoded?);
        }
        if let Some(deadline) = spin_until {
            match recv(stream.as_raw_fd(), frames.spare(), MsgFlags::MSG_DONTWAIT) {
                Ok(0) => return Err(ReadError::Closed),
                Ok(n) => frames.commit(n),
                // Yield, not a bare spin: the daemon may be queued on this CPU.
                Err(Errno::EAGAIN) | Err(Errno::EINTR) if Instant::now() < deadline => std::thread::yield_now(),
                Err(Errno::EAGAIN) | Err(Errno::EINTR) => spin_until = None,
                Err(e) => return Err(ReadError::Io(e.into())),
            }
            continue;
        }
        match stream.read(frames.spare()) {
            Ok(0) => return Err(ReadError::Closed),
            Ok(n) => frames.commit(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}
