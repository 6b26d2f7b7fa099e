//! One connection to the daemon, shared by any number of threads.
//!
//! Requests carry a `seq`; replies may come back out of order (a `get` that
//! waits is answered when its objects are sealed). There is no reader thread:
//! a caller waiting for its reply becomes the *leader* and reads from the
//! socket itself, parking replies meant for other callers in `replies` and
//! waking them. With one thread the reply is read by the thread that wants
//! it (no hand-off, no extra wake-up); with many, at most one reads at a time.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::error::{Error, Result};
use crate::protocol::frame::{FrameBuffer, FrameError, MAX_REPLY_BODY};
use crate::protocol::message::{decode_reply, DecodeError, Encoder, Reply, Request};

pub(crate) struct Connection {
    stream: UnixStream,
    encoder: Mutex<Encoder>,
    /// Held by the leader only, so uncontended.
    frames: Mutex<FrameBuffer>,
    state: Mutex<State>,
    cv: Condvar,
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
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves no half-updated
    // invariant behind (each critical section is a few field updates).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Connection {
    pub(crate) fn new(stream: UnixStream) -> Connection {
        Connection {
            stream,
            encoder: Mutex::new(Encoder::default()),
            frames: Mutex::new(FrameBuffer::new(MAX_REPLY_BODY)),
            state: Mutex::new(State { next_seq: 1, ..State::default() }),
            cv: Condvar::new(),
        }
    }

    /// Sends `req` and waits for its reply. Error replies become errors.
    pub(crate) fn call(&self, req: &Request<'_>) -> Result<Reply> {
        match self.call_raw(req)? {
            Reply::Error(e) => Err(Error::Rejected { op: req.name(), code: e.code, message: e.message }),
            reply => Ok(reply),
        }
    }

    /// Sends `req` without asking for a reply (release and abort on drop,
    /// which have nobody to report an error to).
    pub(crate) fn post(&self, req: &Request<'_>) {
        if lock(&self.state).broken.is_none() {
            if let Err(reason) = self.send(0, req) {
                self.mark_broken(req.name(), reason);
            }
        }
    }

    /// Like [`Connection::call`] but hands back error replies as replies
    /// (for `get`, whose timeout reply carries the missing ids).
    pub(crate) fn call_raw(&self, req: &Request<'_>) -> Result<Reply> {
        let op = req.name();
        let seq = {
            let mut st = lock(&self.state);
            if let Some(reason) = &st.broken {
                return Err(Error::Disconnected { op, reason: reason.clone() });
            }
            st.next_seq += 1;
            st.next_seq - 1
        };
        self.send(seq, req).map_err(|reason| self.mark_broken(op, reason))?;
        self.wait(seq, op)
    }

    fn send(&self, seq: u64, req: &Request<'_>) -> Result<(), String> {
        let mut enc = lock(&self.encoder);
        let frame = enc.request(seq, req);
        (&self.stream).write_all(frame).map_err(|e| e.to_string())
    }

    fn mark_broken(&self, op: &'static str, reason: String) -> Error {
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
        read_reply(&self.stream, &mut frames).map_err(|e| e.to_string())
    }
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

/// Reads the next reply frame from a blocking socket.
pub(crate) fn read_reply(mut stream: &UnixStream, frames: &mut FrameBuffer) -> Result<(u64, Reply), ReadError> {
    loop {
        if let Some(len) = frames.poll()? {
            let decoded = decode_reply(frames.body(len));
            frames.pop(len);
            return Ok(decoded?);
        }
        match stream.read(frames.spare()) {
            Ok(0) => return Err(ReadError::Closed),
            Ok(n) => frames.commit(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}
