//! A federate's connection, over TCP or over the RTI's Unix socket
//! (federates on the RTI's host), split into its two halves: the
//! connection task reads, the federate's [`crate::outbox::Outbox`] writes.
//!
//! A Unix socket is a [`LocalSocket`], registered with the reactor for
//! reading only, so that a federate reading a grant does not wake an RTI
//! thread (see `hprm_local_socket`).

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use hprm_local_socket::LocalSocket;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{tcp, TcpStream, UnixStream};

pub enum ReadHalf {
    Tcp(tcp::OwnedReadHalf),
    Unix(Arc<LocalSocket>),
}

/// Dropping it shuts the write side (FIN), for either kind.
pub enum WriteHalf {
    Tcp(tcp::OwnedWriteHalf),
    Unix(LocalWriter),
}

/// The writing half of a federate's Unix-socket connection; shuts the
/// write side when dropped.
pub struct LocalWriter(Arc<LocalSocket>);

impl Drop for LocalWriter {
    fn drop(&mut self) {
        let _ = self.0.shutdown_write();
    }
}

/// Where a connection comes from.
#[derive(Debug, Clone, Copy)]
pub enum Origin {
    Tcp(SocketAddr),
    /// The RTI's Unix socket: a process on this host.
    Local,
}

impl Origin {
    /// The address other federates reach this federate's host at.
    pub fn ip(self) -> IpAddr {
        match self {
            Origin::Tcp(a) => a.ip(),
            Origin::Local => IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Tcp(a) => a.fmt(f),
            Origin::Local => f.write_str("the local socket"),
        }
    }
}

pub fn tcp(stream: TcpStream) -> (ReadHalf, WriteHalf) {
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    (ReadHalf::Tcp(rd), WriteHalf::Tcp(wr))
}

pub fn unix(stream: UnixStream) -> io::Result<(ReadHalf, WriteHalf)> {
    let socket = Arc::new(LocalSocket::new(stream)?);
    Ok((ReadHalf::Unix(socket.clone()), WriteHalf::Unix(LocalWriter(socket))))
}

impl ReadHalf {
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ReadHalf::Tcp(r) => r.read(buf).await,
            ReadHalf::Unix(s) => s.read(buf).await,
        }
    }

    /// Reads what is there now (`WouldBlock` if nothing), without waiting.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            // Not `OwnedReadHalf::try_read`: that reads only once the
            // reactor has reported the socket readable, which a poller
            // must not wait for.
            ReadHalf::Tcp(r) => {
                use std::os::fd::AsRawFd;
                let fd = r.as_ref().as_raw_fd();
                // Look before reading: a TCP read takes the socket's lock,
                // which the relays to this federate (another task, maybe
                // another thread) take to write, and a writer that finds it
                // taken sleeps. poll(2) looks without the lock.
                let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd, alive for the duration of the call.
                if unsafe { libc::poll(&mut pfd, 1, 0) } == 0 {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                // SAFETY: `buf` is valid for writes of its length for the call.
                let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
                if n < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(n as usize)
            }
            ReadHalf::Unix(s) => s.try_read(buf),
        }
    }
}

impl WriteHalf {
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            WriteHalf::Tcp(w) => w.try_write(buf),
            WriteHalf::Unix(w) => w.0.try_write(buf),
        }
    }

    pub async fn writable(&self) -> io::Result<()> {
        match self {
            WriteHalf::Tcp(w) => w.writable().await,
            WriteHalf::Unix(w) => w.0.writable().await,
        }
    }

    pub async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            WriteHalf::Tcp(w) => w.write_all(buf).await,
            WriteHalf::Unix(w) => w.0.write_all(buf).await,
        }
    }

    pub async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            WriteHalf::Tcp(w) => w.shutdown().await,
            WriteHalf::Unix(w) => w.0.shutdown_write(),
        }
    }
}

