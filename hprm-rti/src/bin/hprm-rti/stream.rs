//! A federate's connection, over TCP or over the RTI's Unix socket
//! (federates on the RTI's host), split into its two halves: the
//! connection task reads, the federate's [`crate::outbox::Outbox`] writes.
//!
//! Either kind is a [`hprm_local_socket::Socket`], registered with the
//! reactor only while a task waits on it: a message that arrives while the
//! connection task polls, or a federate reading a grant, wakes no RTI
//! thread (see `hprm_local_socket`).

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use hprm_local_socket::{LocalSocket, Socket, Stream, TcpSocket};
use tokio::net::{TcpStream, UnixStream};

pub enum ReadHalf {
    Tcp(Arc<TcpSocket>),
    Unix(Arc<LocalSocket>),
}

/// Dropping it shuts the write side (FIN), for either kind.
pub enum WriteHalf {
    Tcp(Writer<std::net::TcpStream>),
    Unix(Writer<std::os::unix::net::UnixStream>),
}

/// The writing half of a connection; shuts the write side when dropped.
pub struct Writer<S: Stream>(Arc<Socket<S>>);

impl<S: Stream> Drop for Writer<S> {
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

/// Marks a federate's accepted connection (`--socket-priority`, `--dscp`).
/// Linux starts an accepted connection at priority 0, whatever the
/// listener's or the federate's end's, and with the listener's TOS
/// (checked on 6.18, IPv4 and IPv6), which the RTI leaves unmarked; so
/// without this the RTI->federate direction (grants, relayed messages)
/// is unmarked. Marking the listener would carry the DSCP but not the
/// priority, hence each connection is marked.
pub fn mark(stream: &TcpStream, marks: &hprm_realtime::SocketMarks) -> io::Result<()> {
    let ipv6 = stream.local_addr()?.is_ipv6();
    marks.apply_to(stream, ipv6).map_err(io::Error::other)
}

pub fn tcp(stream: TcpStream) -> io::Result<(ReadHalf, WriteHalf)> {
    let _ = stream.set_nodelay(true);
    let socket = Arc::new(TcpSocket::new(stream)?);
    Ok((ReadHalf::Tcp(socket.clone()), WriteHalf::Tcp(Writer(socket))))
}

pub fn unix(stream: UnixStream) -> io::Result<(ReadHalf, WriteHalf)> {
    let socket = Arc::new(LocalSocket::new(stream)?);
    Ok((ReadHalf::Unix(socket.clone()), WriteHalf::Unix(Writer(socket))))
}

impl hprm_local_socket::Polled for ReadHalf {
    /// For a socket that poll(2) found readable: a TCP read takes the
    /// socket's lock, which the relays to this federate (other tasks,
    /// maybe on other threads) take to write, and a writer that finds it
    /// taken sleeps; poll(2) looks without the lock.
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ReadHalf::Tcp(s) => s.try_read(buf),
            ReadHalf::Unix(s) => s.try_read(buf),
        }
    }

    async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ReadHalf::Tcp(s) => s.read(buf).await,
            ReadHalf::Unix(s) => s.read(buf).await,
        }
    }
}

impl std::os::fd::AsRawFd for ReadHalf {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            ReadHalf::Tcp(s) => s.as_raw_fd(),
            ReadHalf::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl WriteHalf {
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            WriteHalf::Tcp(w) => w.0.try_write(buf),
            WriteHalf::Unix(w) => w.0.try_write(buf),
        }
    }

    pub async fn writable(&self) -> io::Result<()> {
        match self {
            WriteHalf::Tcp(w) => w.0.writable().await,
            WriteHalf::Unix(w) => w.0.writable().await,
        }
    }

    pub async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            WriteHalf::Tcp(w) => w.0.write_all(buf).await,
            WriteHalf::Unix(w) => w.0.write_all(buf).await,
        }
    }

    pub async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            WriteHalf::Tcp(w) => w.0.shutdown_write(),
            WriteHalf::Unix(w) => w.0.shutdown_write(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_realtime::{Dscp, SocketMarks};
    use nix::sys::socket::{getsockopt, sockopt};

    #[tokio::test]
    async fn an_accepted_connection_carries_the_rtis_marks_not_the_federates() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let federate = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        SocketMarks { priority: Some(5), dscp: Some(Dscp(46)) }.apply(&federate).unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        // Marked on the federate's side only: the RTI's side starts unmarked.
        assert_eq!(getsockopt(&accepted, sockopt::Priority).unwrap(), 0);
        assert_eq!(getsockopt(&accepted, sockopt::IpTos).unwrap() >> 2, 0);
        mark(&accepted, &SocketMarks { priority: Some(6), dscp: Some(Dscp(46)) }).unwrap();
        assert_eq!(getsockopt(&accepted, sockopt::Priority).unwrap(), 6);
        assert_eq!(getsockopt(&accepted, sockopt::IpTos).unwrap() >> 2, 46);
    }
}
