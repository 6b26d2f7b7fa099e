//! A federate's connection, over TCP or over the RTI's Unix socket
//! (federates on the RTI's host), split into its two halves: the
//! connection task reads, the federate's [`crate::outbox::Outbox`] writes.
//!
//! A Unix socket is registered with the reactor for reading only
//! ([`LocalSocket`]). Registered for writing too, as tokio's `UnixStream`
//! always is, it would wake the RTI each time the federate *reads*
//! something the RTI sent: a Unix socket signals "writable" to its peer's
//! waiters whenever the peer consumes data, full buffer or not (TCP only
//! when a writer found the buffer full). That is one needless wake-up of
//! an RTI thread per message and grant, on the CPUs the federates need.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr};
use std::sync::Arc;

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
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

/// A connection over the RTI's Unix socket, registered for readability
/// only. Writes are non-blocking and, when the socket is full, wait on a
/// registration for writability made for that wait alone.
pub struct LocalSocket {
    fd: AsyncFd<std::os::unix::net::UnixStream>,
}

impl LocalSocket {
    async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.fd.readable().await?;
            match ready.try_io(|fd| fd.get_ref().read(buf)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.fd.get_ref().write(buf)
    }

    async fn writable(&self) -> io::Result<()> {
        // Another descriptor of the same socket: epoll keys registrations
        // by descriptor, so this one can ask for writability while the
        // reading one keeps asking for readability only. Edge-triggered
        // registration reports a socket that is writable already at once.
        let dup = register(self.fd.get_ref().try_clone()?, Interest::WRITABLE)?;
        let _ready = dup.writable().await?;
        Ok(())
    }
}

fn register(socket: std::os::unix::net::UnixStream, interest: Interest) -> io::Result<AsyncFd<std::os::unix::net::UnixStream>> {
    // SAFETY: a std UnixStream owns its descriptor and returns the same one
    // for its whole life; the AsyncFd owns the stream, so the descriptor
    // stays open (and the same file) for as long as it is registered.
    Ok(unsafe { AsyncFd::register_with_interest(socket, interest) }?)
}

/// The writing half of a [`LocalSocket`]; shuts the write side when dropped.
pub struct LocalWriter(Arc<LocalSocket>);

impl Drop for LocalWriter {
    fn drop(&mut self) {
        let _ = self.0.fd.get_ref().shutdown(Shutdown::Write);
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
    // Out of tokio's reactor (it stays non-blocking), back in for reading only.
    let fd = register(stream.into_std()?, Interest::READABLE)?;
    let socket = Arc::new(LocalSocket { fd });
    Ok((ReadHalf::Unix(socket.clone()), WriteHalf::Unix(LocalWriter(socket))))
}

impl ReadHalf {
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ReadHalf::Tcp(r) => r.read(buf).await,
            ReadHalf::Unix(s) => s.read(buf).await,
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
            WriteHalf::Unix(w) => {
                let mut rest = buf;
                while !rest.is_empty() {
                    match w.0.try_write(rest) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => rest = &rest[n..],
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => w.0.writable().await?,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
        }
    }

    pub async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            WriteHalf::Tcp(w) => w.shutdown().await,
            WriteHalf::Unix(w) => w.0.fd.get_ref().shutdown(Shutdown::Write),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Voluntary context switches of thread `tid` of this process so far.
    fn switches(tid: i32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).expect("thread status");
        status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok()).expect("a switch count")
    }

    #[test]
    fn a_federate_reading_what_the_rti_sent_does_not_wake_the_rti() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (halves_tx, halves_rx) = std::sync::mpsc::channel();
        // The RTI's side: a runtime thread that reads (and so sleeps in epoll).
        let rti = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let (mut rd, wr) = unix(UnixStream::from_std(ours).unwrap()).unwrap();
                halves_tx.send(wr).unwrap();
                // "PID/task/TID"
                let me = std::fs::read_link("/proc/thread-self").unwrap();
                tid_tx.send(me.file_name().unwrap().to_str().unwrap().parse::<i32>().unwrap()).unwrap();
                let mut buf = [0u8; 16];
                rd.read(&mut buf).await.unwrap()
            })
        });
        let tid = tid_rx.recv().unwrap();
        let wr = halves_rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let before = switches(tid);
        let mut got = [0u8; 8];
        for _ in 0..100 {
            assert_eq!(wr.try_write(b"grant").unwrap(), 5);
            (&theirs).read_exact(&mut got[..5]).unwrap();
            // Time for the RTI's thread to go back to sleep, were it woken.
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
        let woken = switches(tid) - before;
        // Registered for writability too, the runtime thread is woken by
        // about every read on the other side.
        assert!(woken < 10, "the RTI's thread was woken {woken} times by 100 reads on the other side");
        (&theirs).write_all(b"end").unwrap();
        assert_eq!(rti.join().unwrap(), 3);
    }

    #[test]
    fn a_full_socket_is_waited_out_and_everything_arrives() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let sent: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        let expected = sent.clone();
        // A reader that starts late and reads slowly: the RTI's writes
        // fill the socket and must wait for room.
        let reader = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match (&theirs).read(&mut buf).unwrap() {
                    0 => return got,
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
        });
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let (_rd, mut wr) = unix(UnixStream::from_std(ours).unwrap()).unwrap();
            wr.write_all(&sent).await.unwrap();
            wr.shutdown().await.unwrap();
        });
        assert!(reader.join().unwrap() == expected);
    }
}
