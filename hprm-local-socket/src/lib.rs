//! # hprm-local-socket: daemon-side sockets that do not wake their daemon
//!
//! [`Socket`] is the server side of a stream connection for HPRM's tokio
//! daemons: [`LocalSocket`] over a Unix socket (`hprm-store` serving its
//! clients, `hprm-rti` serving federates on its host), [`TcpSocket`] over
//! TCP (`hprm-rti` serving federates anywhere). It differs from tokio's
//! `UnixStream` and `TcpStream` in one way: it is registered with the
//! reactor only while a task waits on it, and then only for what that task
//! waits for.
//!
//! Why: a socket registered with the reactor (edge-triggered, as tokio
//! registers every socket) wakes whichever daemon thread sleeps in the
//! reactor at every event, whether or not any task waits for it:
//! - *readable*: every message that arrives signals it. A daemon task that
//!   polls the socket with non-blocking reads (both daemons do, for a while
//!   after each message, as the next one often follows within
//!   microseconds) reads the message itself, and the reactor's thread,
//!   woken for it, finds nothing to do;
//! - *writable*: a Unix stream socket signals it to its peer's waiters
//!   every time the peer consumes data, whether or not any buffer was ever
//!   full (TCP does so only after a writer found its buffer full). So each
//!   reply or grant a client reads would wake a daemon thread.
//!
//! One needless wake-up per message, on a machine whose CPUs the clients
//! need: an RTI thread was woken about once per round trip while the RTI
//! polled, and none once the socket was registered only to wait, which
//! about halved the RTI round trip (figures in
//! `bench/results/design-measurements.md`). So reads and writes here are plain
//! non-blocking system calls. A task that must wait to read registers the
//! socket for readability for that one wait ([`Socket::read`]); a task
//! that must wait to write registers a second descriptor of the socket for
//! writability ([`Socket::writable`]). An edge-triggered registration
//! reports a socket that is ready already at once, so nothing that arrived
//! before the registration is missed.
//!
//! How long a connection task polls its socket before it waits in the
//! reactor, and which task polls, is [`polling`]'s business: one task at a
//! time polls for all of a daemon's connections ([`Polling`], read through
//! each connection's [`Poller`]).
//!
//! What the daemons read from these sockets can be saved for the fuzzers'
//! seeds ([`capture`], with `HPRM_FUZZ_CAPTURE` set; off by default).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream as StdTcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream as StdUnixStream;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

pub mod capture;
pub mod polling;

pub use polling::{IdleWork, Polled, Poller, Polling};

/// A Unix stream connection (see [`Socket`]).
pub type LocalSocket = Socket<StdUnixStream>;

/// A TCP connection (see [`Socket`]).
pub type TcpSocket = Socket<StdTcpStream>;

/// A stream connection registered with the reactor only while a task waits
/// on it. Shared by reference between a reading task and writers
/// (`Arc<Socket<_>>`); at most one task reads at a time.
pub struct Socket<S> {
    /// Non-blocking.
    stream: S,
}

/// The std stream sockets a [`Socket`] is made of.
pub trait Stream: AsFd + Sized {
    fn read_now(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_now(&self, buf: &[u8]) -> io::Result<usize>;
    fn duplicate(&self) -> io::Result<Self>;
    fn shut(&self, how: Shutdown) -> io::Result<()>;
}

/// Both std stream sockets read and write through `&self` alike.
macro_rules! impl_stream {
    ($($socket:ty),*) => {$(
        impl Stream for $socket {
            fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
                (&*self).read(buf)
            }
            fn write_now(&self, buf: &[u8]) -> io::Result<usize> {
                (&*self).write(buf)
            }
            fn duplicate(&self) -> io::Result<Self> {
                self.try_clone()
            }
            fn shut(&self, how: Shutdown) -> io::Result<()> {
                self.shutdown(how)
            }
        }
    )*};
}

impl_stream!(StdUnixStream, StdTcpStream);

impl LocalSocket {
    /// Takes `stream` out of tokio's registration (it stays non-blocking).
    /// Call within a runtime.
    pub fn new(stream: tokio::net::UnixStream) -> io::Result<LocalSocket> {
        Ok(Socket { stream: stream.into_std()? })
    }
}

impl TcpSocket {
    /// Takes `stream` out of tokio's registration (it stays non-blocking).
    /// Call within a runtime.
    pub fn new(stream: tokio::net::TcpStream) -> io::Result<TcpSocket> {
        Ok(Socket { stream: stream.into_std()? })
    }
}

impl<S: Stream> Socket<S> {
    /// Reads what is there, waiting for something if nothing is; 0 at the
    /// end of the stream. Cancel-safe. One reader at a time: a second one
    /// waiting at once gets an error (the socket is registered already).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self.try_read(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            done => return done,
        }
        // Registered for this wait only; dropping it (the read is done, or
        // the future is cancelled) takes the registration back.
        let waiting = register(self.stream.as_fd(), Interest::READABLE)?;
        loop {
            let mut ready = waiting.readable().await?;
            match ready.try_io(|_| self.stream.read_now(buf)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Reads what is there now (`WouldBlock` if nothing), without waiting.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read_now(buf)
    }

    /// Writes what the socket takes now (`WouldBlock` if nothing).
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write_now(buf)
    }

    /// Waits until the socket takes more bytes.
    pub async fn writable(&self) -> io::Result<()> {
        // Another descriptor of the same socket: epoll keys registrations
        // by descriptor, so a reader may wait for readability meanwhile.
        let dup = self.stream.duplicate()?;
        let waiting = register(dup.as_fd(), Interest::WRITABLE)?;
        let _ready = waiting.writable().await?;
        Ok(())
    }

    /// Writes all of `buf`, waiting for room as needed.
    pub async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.try_write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable().await?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Shuts the write side (the peer reads the end of the stream).
    pub fn shutdown_write(&self) -> io::Result<()> {
        self.stream.shut(Shutdown::Write)
    }
}

impl<S: AsFd> AsFd for Socket<S> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

impl<S: AsFd> AsRawFd for Socket<S> {
    fn as_raw_fd(&self) -> RawFd {
        self.stream.as_fd().as_raw_fd()
    }
}

/// Registers `fd` with the current reactor for `interest`, until the
/// returned handle is dropped.
fn register(fd: BorrowedFd<'_>, interest: Interest) -> io::Result<AsyncFd<BorrowedFd<'_>>> {
    // SAFETY: the borrow keeps the descriptor open, and the same file, for
    // as long as the AsyncFd (which holds the borrow) is registered.
    Ok(unsafe { AsyncFd::register_with_interest(fd, interest) }?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::net::UnixStream;

    /// Voluntary context switches of thread `tid` of this process so far.
    fn switches(tid: i32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).expect("thread status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("a switch count")
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn the_peer_reading_what_was_sent_does_not_wake_the_daemon() {
        let (ours, theirs) = StdUnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // The daemon's side: a runtime thread that reads (and so sleeps in epoll).
        let daemon = std::thread::spawn(move || {
            runtime().block_on(async move {
                let socket = Arc::new(LocalSocket::new(UnixStream::from_std(ours).unwrap()).unwrap());
                // "PID/task/TID"
                let me = std::fs::read_link("/proc/thread-self").unwrap();
                tx.send((socket.clone(), me.file_name().unwrap().to_str().unwrap().parse::<i32>().unwrap())).unwrap();
                let mut buf = [0u8; 16];
                socket.read(&mut buf).await.unwrap()
            })
        });
        let (socket, tid) = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let before = switches(tid);
        let mut got = [0u8; 8];
        for _ in 0..100 {
            assert_eq!(socket.try_write(b"reply").unwrap(), 5);
            (&theirs).read_exact(&mut got[..5]).unwrap();
            // Time for the daemon's thread to go back to sleep, were it woken.
            std::thread::sleep(Duration::from_micros(300));
        }
        let woken = switches(tid) - before;
        // Registered for writability too (as tokio's UnixStream is), the
        // daemon's thread is woken by about every read on the other side.
        assert!(woken < 10, "the daemon's thread was woken {woken} times by 100 reads on the other side");
        (&theirs).write_all(b"end").unwrap();
        assert_eq!(daemon.join().unwrap(), 3);
    }

    #[test]
    fn messages_arriving_while_nobody_waits_wake_no_daemon_thread() {
        let (ours, theirs) = StdUnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        // The daemon's side: a runtime thread asleep in the reactor while
        // the messages arrive (as a polling task's runtime is: that task
        // reads them itself), which then reads them all.
        let daemon = std::thread::spawn(move || {
            runtime().block_on(async move {
                let socket = LocalSocket::new(UnixStream::from_std(ours).unwrap()).unwrap();
                let me = std::fs::read_link("/proc/thread-self").unwrap();
                tx.send(me.file_name().unwrap().to_str().unwrap().parse::<i32>().unwrap()).unwrap();
                done_rx.await.unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 64];
                while got.len() < 500 {
                    let n = socket.read(&mut buf).await.unwrap();
                    got.extend_from_slice(&buf[..n]);
                }
                got
            })
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let before = switches(tid);
        for _ in 0..100 {
            (&theirs).write_all(b"grant").unwrap();
            std::thread::sleep(Duration::from_micros(300));
        }
        let woken = switches(tid) - before;
        // Registered for reading all along (as tokio's UnixStream is), the
        // daemon's thread is woken by about every message.
        assert!(woken < 10, "the daemon's thread was woken {woken} times by 100 messages nobody waited for");
        done_tx.send(()).unwrap();
        assert_eq!(daemon.join().unwrap(), b"grant".repeat(100));
    }

    #[test]
    fn a_full_socket_is_waited_out_and_everything_arrives() {
        let (ours, theirs) = StdUnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let sent: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        let expected = sent.clone();
        // A reader that starts late and reads slowly: the writes fill the
        // socket and must wait for room.
        let reader = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match (&theirs).read(&mut buf).unwrap() {
                    0 => return got,
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
        });
        runtime().block_on(async move {
            let socket = LocalSocket::new(UnixStream::from_std(ours).unwrap()).unwrap();
            socket.write_all(&sent).await.unwrap();
            socket.shutdown_write().unwrap();
        });
        assert!(reader.join().unwrap() == expected);
    }
}
