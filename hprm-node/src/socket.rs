//! Sockets of the eager protocol: tuned TCP streams and framed reading
//! and writing of LF protocol messages through pre-allocated buffers.
//!
//! Every message that crosses a socket is at most 64 KiB plus its header
//! (larger values travel through the object store), so one buffer of that
//! size per direction and connection, allocated at connect, holds any
//! message: nothing is allocated per message on the write side and no size
//! handshake precedes a payload.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use hprm_rti::wire::{self, Limits, Message};

/// Room for the largest message: payload limit plus the biggest header.
pub(crate) const FRAME_CAPACITY: usize = (64 << 10) + 64;

/// Kernel socket buffer size asked for on every connection.
const SOCKET_BUFFER: usize = 4 << 20;

/// TCP_NODELAY (no Nagle delay for small messages) and large kernel buffers.
pub(crate) fn tune(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let s = socket2::SockRef::from(stream);
    // Best effort: the kernel caps them at net.core.{w,r}mem_max.
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    Ok(())
}

/// A connection to the RTI (TCP) or a peer (TCP, or a Unix socket on the
/// same host).
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
pub(crate) struct FrameWriter {
    stream: Stream,
    buf: Vec<u8>,
}

impl FrameWriter {
    pub fn new(stream: Stream) -> FrameWriter {
        FrameWriter { stream, buf: Vec::with_capacity(FRAME_CAPACITY) }
    }

    pub fn send(&mut self, msg: &Message) -> io::Result<()> {
        self.buf.clear();
        wire::encode(msg, &mut self.buf);
        self.stream.write_all(&self.buf)
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

/// Reads messages through one buffer filled by the largest reads the
/// socket allows.
pub(crate) struct FrameReader {
    stream: Stream,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    limits: Limits,
}

impl FrameReader {
    pub fn new(stream: Stream) -> FrameReader {
        FrameReader { stream, buf: vec![0; 2 * FRAME_CAPACITY].into_boxed_slice(), start: 0, end: 0, limits: Limits::default() }
    }

    /// The next message; `Err(Closed)` at a clean end of stream.
    pub fn next(&mut self) -> Result<Message, ReadError> {
        loop {
            if let Some((msg, n)) = wire::decode(&self.buf[self.start..self.end], &self.limits)? {
                self.start += n;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                }
                return Ok(msg);
            }
            if self.end == self.buf.len() {
                // Move the partial message to the front; a message always
                // fits in half the buffer, so room appears.
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) if self.start == self.end => return Err(ReadError::Closed),
                Ok(0) => return Err(ReadError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed in the middle of a message"))),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}
