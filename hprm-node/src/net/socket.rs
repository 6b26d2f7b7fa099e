//! Sockets of the eager protocol: tuned TCP streams and framed reading
//! and writing of LF protocol messages through pre-allocated buffers.
//!
//! Every message that crosses a socket is at most 64 KiB plus its header
//! (larger values travel through the object store), so one buffer of that
//! size per direction and connection, allocated at connect, holds any
//! message: nothing is allocated per message on the write side and no size
//! handshake precedes a payload.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use hprm_rti::endpoint::{self, Server};
use hprm_rti::frames::{Frame, FrameBuffer};
use hprm_rti::wire::{self, Limits, Message};

/// Room for the largest message: payload limit plus the biggest header.
pub(crate) const FRAME_CAPACITY: usize = (64 << 10) + 64;

/// Kernel socket buffer size asked for on every connection.
const SOCKET_BUFFER: usize = 4 << 20;

/// TCP_NODELAY (no Nagle delay for small messages) and large kernel
/// buffers; in a program with hosts, keepalive and a user timeout too, so
/// that a lost host breaks the connection (`crate::hosts::tcp_loss_bound`);
/// the federate's marks (`SO_PRIORITY`, DSCP: `crate::realtime`).
pub(crate) fn tune(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    crate::realtime::connection_marks().apply(stream).map_err(io::Error::other)?;
    if let Some(bound) = crate::hosts::tcp_loss_bound() {
        hprm_rti::liveness::bound_loss(stream, bound)?;
    }
    let s = socket2::SockRef::from(stream);
    // Best effort: the kernel caps them at net.core.{w,r}mem_max.
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    Ok(())
}

/// How a federate reaches servers on its own host: the RTI and its
/// downstream peers.
///
/// Unix sockets are the default: on the benchmark machine they measured
/// faster than loopback TCP, in latency and in rate (figures in
/// `bench/results/design-measurements.md`). Servers on other hosts are
/// reached over TCP either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LocalTransport {
    /// Loopback TCP, as for servers on other hosts.
    Tcp,
    /// The server's Unix socket (`hprm_rti::endpoint`), if it has one;
    /// else TCP.
    #[default]
    Unix,
}

/// Connects to `server` at `addr`: its Unix socket when `transport` says
/// so and the address is this host's (`hprm_rti::endpoint`), else tuned
/// TCP (an unspecified address meaning this host's loopback).
pub(crate) fn connect(
    server: Server,
    addr: SocketAddr,
    transport: LocalTransport,
    timeout: Duration,
) -> io::Result<Stream> {
    if transport == LocalTransport::Unix && endpoint::is_local(addr.ip()) {
        if let Ok(s) = UnixStream::connect(endpoint::unix_socket(server, addr.port())) {
            return Ok(Stream::Unix(s));
        }
    }
    let addr = if addr.ip().is_unspecified() { SocketAddr::from(([127, 0, 0, 1], addr.port())) } else { addr };
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    tune(&s)?;
    Ok(Stream::Tcp(s))
}

/// A connection to the RTI or a peer: TCP, or a Unix socket on the same
/// host.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) => s.shutdown(how),
        }
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }

    fn raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    /// One read that does not block (`MSG_DONTWAIT`), whatever the
    /// socket's mode: `WouldBlock` when nothing is there.
    fn recv_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        nix::sys::socket::recv(self.raw_fd(), buf, nix::sys::socket::MsgFlags::MSG_DONTWAIT).map_err(io::Error::from)
    }
}

/// Blocks in poll(2) until `fd` has something to read (data, its end, or
/// an error).
///
/// Threads that wait for a connection for good sleep here, never in
/// read(2): a thread asleep in read on a Unix socket is woken each time
/// the *peer* reads what this side wrote (the socket tells every sleeper
/// it is writable again), while poll wakes only for what it asked for.
pub(crate) fn wait_readable(fd: RawFd) -> io::Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    // SAFETY: the caller keeps `fd` open for the call (a source's socket
    // lives as long as the source).
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes messages through one reused buffer.
///
/// [`queue`](FrameWriter::queue) encodes a message without writing it, so
/// that what a federate sends between two points where it could wait (a
/// tagged message, then LTC and NET) leaves in one write: one system call
/// and, on the other side, one wake-up instead of three. Queued bytes are
/// written by [`flush`](FrameWriter::flush) or [`send`](FrameWriter::send),
/// or at once when they reach a frame's capacity.
///
/// Invariant: between calls the buffer holds less than [`FRAME_CAPACITY`]
/// bytes, so with one message appended it never outgrows the two frames
/// allocated at connect.
pub(crate) struct FrameWriter {
    stream: Stream,
    buf: Vec<u8>,
}

impl FrameWriter {
    pub fn new(stream: Stream) -> FrameWriter {
        FrameWriter { stream, buf: Vec::with_capacity(2 * FRAME_CAPACITY) }
    }

    /// Writes `msg` and everything queued before it.
    pub fn send(&mut self, msg: &Message) -> io::Result<()> {
        wire::encode(msg, &mut self.buf);
        self.flush()
    }

    /// Queues `msg` behind what is queued; writes only if the queue
    /// reached a frame's capacity.
    pub fn queue(&mut self, msg: &Message) -> io::Result<()> {
        wire::encode(msg, &mut self.buf);
        if self.buf.len() >= FRAME_CAPACITY {
            self.flush()?;
        }
        Ok(())
    }

    /// Queues a tagged message (`p2p`: to a peer, else through the RTI)
    /// whose payload stays where it is: one copy, into the frame buffer.
    pub fn queue_tagged(
        &mut self,
        p2p: bool,
        port: u16,
        fed: u16,
        tag: hprm_rti::tag::Tag,
        payload: &[u8],
    ) -> io::Result<()> {
        wire::encode_tagged(p2p, port, fed, tag, payload, &mut self.buf);
        if self.buf.len() >= FRAME_CAPACITY {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes what is queued. On an error the queue is dropped: the
    /// connection is broken and the caller gives it up.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let r = self.stream.write_all(&self.buf);
        self.buf.clear();
        r
    }

    pub fn stream(&self) -> &Stream {
        &self.stream
    }
}

/// Why reading stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("connection closed")]
    Closed,
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the peer sent bytes that are not the federated protocol: {0}")]
    Wire(#[from] wire::WireError),
}

/// Reads messages through a [`FrameBuffer`] filled by the largest reads
/// the socket allows.
///
/// [`next`](FrameReader::next) blocks (handshakes, with a read timeout);
/// [`try_next`](FrameReader::try_next) never does, so that the reader
/// thread and the polling scheduler can share a connection
/// (`crate::net::source`): whoever holds the reader takes what is there.
pub(crate) struct FrameReader {
    stream: Stream,
    frames: FrameBuffer,
}

impl FrameReader {
    pub fn new(stream: Stream) -> FrameReader {
        FrameReader { stream, frames: FrameBuffer::new(2 * FRAME_CAPACITY, Limits::default()) }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.stream.raw_fd()
    }

    /// The next message, owned; `Err(Closed)` at a clean end of stream.
    pub fn next(&mut self) -> Result<Message, ReadError> {
        loop {
            if let Some(frame) = self.frames.next()? {
                return Ok(frame.into_message());
            }
            match self.stream.read(self.frames.spare()) {
                // A read timeout ran out.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(e.into()),
                r => self.took(r)?,
            };
        }
    }

    /// The next message if one is buffered or the socket has it now;
    /// `Ok(None)` when it has nothing more (a partial message stays
    /// buffered for the next call). A tagged message comes with its payload
    /// still in the read buffer: the receiver decodes the value from there,
    /// with no copy in between.
    pub fn try_next(&mut self) -> Result<Option<Frame<'_>>, ReadError> {
        loop {
            // Asked first without taking it, so that the borrow a frame
            // holds is not live across the read below.
            if self.frames.next_is_ready()? {
                return Ok(self.frames.next()?);
            }
            let r = self.stream.recv_now(self.frames.spare());
            if !self.took(r)? {
                return Ok(None);
            }
        }
    }

    /// Accounts for one read into the buffer's spare room: `Ok(false)` if
    /// it would have blocked.
    fn took(&mut self, r: io::Result<usize>) -> Result<bool, ReadError> {
        match r {
            Ok(0) if !self.frames.is_partial() => Err(ReadError::Closed),
            Ok(0) => Err(ReadError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed in the middle of a message",
            ))),
            Ok(n) => {
                self.frames.filled(n);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_rti::tag::Tag;

    fn pending(s: &UnixStream) -> usize {
        s.set_nonblocking(true).unwrap();
        let mut b = vec![0u8; 4 * FRAME_CAPACITY];
        let mut n = 0;
        loop {
            match (&*s).read(&mut b) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        s.set_nonblocking(false).unwrap();
        n
    }

    #[test]
    fn queued_messages_leave_together_at_the_flush_or_when_a_frame_is_full() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut w = FrameWriter::new(Stream::Unix(a));
        let ltc = Message::LatestTagConfirmed(Tag::new(5, 0));
        w.queue(&ltc).unwrap();
        w.queue(&Message::NextEventTag(Tag::new(6, 0))).unwrap();
        assert_eq!(pending(&b), 0, "nothing written before the flush");
        w.flush().unwrap();
        let mut r = FrameReader::new(Stream::Unix(b.try_clone().unwrap()));
        assert_eq!(r.next().unwrap(), ltc);
        assert_eq!(r.next().unwrap(), Message::NextEventTag(Tag::new(6, 0)));
        // A queue that reaches a frame's capacity is written at once, and
        // `send` writes what was queued before its own message.
        let big = Message::TaggedMessage { port: 1, fed: 2, tag: Tag::new(7, 0), payload: vec![9; 40_000] };
        w.queue(&big).unwrap();
        assert_eq!(pending(&b), 0);
        w.queue(&big).unwrap();
        assert!(pending(&b) > 80_000, "two messages over one frame's capacity are written");
        w.queue(&ltc).unwrap();
        w.send(&Message::Resign).unwrap();
        assert_eq!(r.next().unwrap(), ltc);
        assert_eq!(r.next().unwrap(), Message::Resign);
    }
}
