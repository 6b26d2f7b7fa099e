//! # hprm-local-socket: Unix stream sockets that do not wake their daemon
//!
//! [`LocalSocket`] is the server side of a Unix stream connection for
//! HPRM's tokio daemons (`hprm-store` serving its clients, `hprm-rti`
//! serving federates on its host). It differs from tokio's `UnixStream` in
//! one way: it is registered with the reactor for *readability only*.
//!
//! Why: a Unix stream socket signals "writable" to its peer's waiters every
//! time the peer consumes data, whether or not any buffer was ever full
//! (TCP does so only after a writer found its buffer full). tokio registers
//! every `UnixStream` for writability too, edge-triggered, so each reply or
//! grant a client reads wakes whichever daemon thread sleeps in the reactor:
//! one needless wake-up per message, on a machine whose CPUs the clients
//! need. A daemon rarely waits to write, so writes here are plain
//! non-blocking system calls; when the socket is full, [`LocalSocket::writable`]
//! registers a second descriptor of the socket for writability for that one
//! wait.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream as StdUnixStream;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::UnixStream;

/// A Unix stream connection registered for readability only. Shared by
/// reference between a reading task and writers (`Arc<LocalSocket>`).
pub struct LocalSocket {
    fd: AsyncFd<StdUnixStream>,
}

impl LocalSocket {
    /// Takes `stream` out of tokio's registration (it stays non-blocking)
    /// and registers it again for reading only. Call within a runtime.
    pub fn new(stream: UnixStream) -> io::Result<LocalSocket> {
        Ok(LocalSocket { fd: register(stream.into_std()?, Interest::READABLE)? })
    }

    /// Reads what is there, waiting for something if nothing is; 0 at the
    /// end of the stream. Cancel-safe.
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.fd.readable().await?;
            match ready.try_io(|fd| fd.get_ref().read(buf)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Reads what is there now (`WouldBlock` if nothing), without waiting.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.fd.get_ref().read(buf)
    }

    /// Writes what the socket takes now (`WouldBlock` if nothing).
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.fd.get_ref().write(buf)
    }

    /// Waits until the socket takes more bytes.
    pub async fn writable(&self) -> io::Result<()> {
        // Another descriptor of the same socket: epoll keys registrations
        // by descriptor, so this one can ask for writability while the
        // reading one keeps asking for readability only. An edge-triggered
        // registration reports a socket that is writable already at once.
        let dup = register(self.fd.get_ref().try_clone()?, Interest::WRITABLE)?;
        let _ready = dup.writable().await?;
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
        self.fd.get_ref().shutdown(Shutdown::Write)
    }
}

impl AsFd for LocalSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.get_ref().as_fd()
    }
}

impl AsRawFd for LocalSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.get_ref().as_raw_fd()
    }
}

fn register(socket: StdUnixStream, interest: Interest) -> io::Result<AsyncFd<StdUnixStream>> {
    // SAFETY: a std UnixStream owns its descriptor and returns the same one
    // for its whole life; the AsyncFd owns the stream, so the descriptor
    // stays open (and the same file) for as long as it is registered.
    Ok(unsafe { AsyncFd::register_with_interest(socket, interest) }?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// Voluntary context switches of thread `tid` of this process so far.
    fn switches(tid: i32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).expect("thread status");
        status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok()).expect("a switch count")
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
