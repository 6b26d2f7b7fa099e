//! A stream of seal and delete notifications, on a connection of its own so
//! that a slow reader never delays request traffic.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use super::{handshake, unexpected};
use crate::error::{Error, Result};
use crate::protocol::frame::{FrameBuffer, MAX_REPLY_BODY};
use crate::protocol::message::{Encoder, Notification, Reply, Request};

/// Notifications of objects sealed and deleted, in the order the daemon saw
/// them. If this reader falls too far behind, the daemon ends the
/// subscription with a `Lagged` error rather than buffer without bound.
pub struct Subscription {
    stream: UnixStream,
    frames: FrameBuffer,
}

impl Subscription {
    pub(super) fn open(path: &Path) -> Result<Subscription> {
        // The descriptors of this connection's Hello are not needed: dropped.
        let (stream, _greeting) = handshake(path)?;
        let mut sub = Subscription { stream, frames: FrameBuffer::new(MAX_REPLY_BODY) };
        let mut enc = Encoder::default();
        super::connection::send_all(&sub.stream, enc.request(1, &Request::Subscribe))
            .map_err(|e| Error::Disconnected { op: "subscribe", reason: e.to_string() })?;
        match sub.next_frame("subscribe")? {
            Reply::Done => Ok(sub),
            Reply::Error(e) => Err(Error::Rejected { op: "subscribe", code: e.code, message: e.message }),
            other => Err(unexpected("subscribe", &other)),
        }
    }

    /// Blocks until the next notification.
    pub fn recv(&mut self) -> Result<Notification> {
        self.stream
            .set_read_timeout(None)
            .map_err(|e| Error::Disconnected { op: "subscription", reason: e.to_string() })?;
        self.next_notification()
    }

    /// The next notification, or `None` if none comes within `timeout`.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<Notification>> {
        self.stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| Error::Disconnected { op: "subscription", reason: e.to_string() })?;
        match super::connection::read_reply(&self.stream, &mut self.frames, Duration::ZERO) {
            Err(e) if e.is_timeout() => Ok(None),
            other => Self::notification(
                other.map(|(_, r)| r).map_err(|e| Error::Disconnected { op: "subscription", reason: e.to_string() })?,
            )
            .map(Some),
        }
    }

    fn next_notification(&mut self) -> Result<Notification> {
        let reply = self.next_frame("subscription")?;
        Self::notification(reply)
    }

    fn notification(reply: Reply) -> Result<Notification> {
        match reply {
            Reply::Notification(n) => Ok(n),
            Reply::Error(e) => Err(Error::Rejected { op: "subscription", code: e.code, message: e.message }),
            other => Err(unexpected("subscription", &other)),
        }
    }

    fn next_frame(&mut self, op: &'static str) -> Result<Reply> {
        super::connection::read_reply(&self.stream, &mut self.frames, Duration::ZERO)
            .map(|(_, reply)| reply)
            .map_err(|e| Error::Disconnected { op, reason: e.to_string() })
    }
}
