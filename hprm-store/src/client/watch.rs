//! Noticing at once that the daemon went away ([`StoreClient::watch_close`]).
//!
//! Without a watch, a client learns that the daemon died only when a
//! request needs a reply: one-way requests (seal, claim, release) go into
//! the outbox, shared memory that a dead daemon never reads, so a client
//! sending small objects could go on "sending" into the void until a pool
//! runs dry. A watch thread sleeps in poll(2) on a duplicate of the
//! connection's socket, asking only for the peer's hangup: poll's wake-ups
//! are keyed by event, so the daemon's reads and writes on the socket never
//! wake it (unlike a thread asleep in read(2)); the kernel closing the
//! daemon's end (exit, kill -9) does, within microseconds.
//!
//! The thread must not keep the connection open after its client is gone
//! (the daemon would keep the client's references until the thread
//! ended): it also polls the read end of a pipe whose write end the client
//! holds, which closes when the last handle on the connection drops.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Weak};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::{Inner, StoreClient};
use crate::error::{Error, Result};

/// Why a watched connection broke, as [`crate::Error::Disconnected`] and the
/// watch's callback say it.
pub const DAEMON_CLOSED: &str = "hprm-store closed the connection (the daemon exited or was killed)";

impl StoreClient {
    /// Watches this connection from a thread of its own: as soon as the
    /// daemon closes it (it exited or was killed, or dropped this client),
    /// marks the connection broken, so that every later call fails at once
    /// with [`Error::Disconnected`] (one-way requests included), then calls
    /// `on_close` with the reason. The thread ends without calling it when
    /// the last handle on the connection (this client, its clones, its
    /// objects) is dropped.
    pub fn watch_close(&self, on_close: impl FnOnce(&str) + Send + 'static) -> Result<()> {
        let io = |e: std::io::Error| Error::Disconnected { op: "watch", reason: e.to_string() };
        let socket: OwnedFd = self.inner.conn.stream().try_clone().map_err(io)?.into();
        let (stop_rx, stop_tx) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| io(e.into()))?;
        let weak = Arc::downgrade(&self.inner);
        std::thread::Builder::new()
            .name("hprm-store-watch".into())
            .spawn(move || watch(socket, stop_rx, weak, on_close))
            .map_err(io)?;
        self.inner.watch_stops.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(stop_tx);
        Ok(())
    }

    /// Why this connection failed, once it has (the daemon went away, or a
    /// request could not be sent or answered): every call now fails.
    pub fn broken(&self) -> Option<String> {
        self.inner.conn.broken()
    }
}

/// The peer closed its end (Linux), which nix 0.29 does not name.
const POLLRDHUP: PollFlags = PollFlags::from_bits_retain(libc::POLLRDHUP);

/// Whether poll reported anything on `fd` (nix reads revents holding a bit
/// it does not name, POLLRDHUP, as `None`).
fn happened(fd: &PollFd<'_>) -> bool {
    fd.revents().map_or(true, |r| !r.is_empty())
}

fn watch(socket: OwnedFd, stop: OwnedFd, client: Weak<Inner>, on_close: impl FnOnce(&str)) {
    loop {
        // POLLHUP and POLLERR are always reported; POLLRDHUP is the peer's
        // close. POLLIN is not asked for: replies arriving never wake this.
        let mut fds = [PollFd::new(socket.as_fd(), POLLRDHUP), PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(Errno::EINTR) => continue,
            // Cannot watch (never seen in practice): the next request
            // reports the death instead.
            Err(_) => return,
            Ok(_) => {}
        }
        if happened(&fds[1]) {
            // The client is gone: nobody to tell.
            return;
        }
        if happened(&fds[0]) {
            break;
        }
    }
    let Some(inner) = client.upgrade() else { return };
    inner.conn.mark_broken("watch", DAEMON_CLOSED.to_string());
    drop(inner);
    on_close(DAEMON_CLOSED);
}
