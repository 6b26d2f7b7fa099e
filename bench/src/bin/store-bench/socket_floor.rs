//! The socket floor of the small-object round trips: a 64-byte ping-pong
//! over a Unix socket pair between two threads, blocking and polling as the
//! store's client and daemon do.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::SMALL_SIZE;

/// Times `n` 64-byte ping-pongs over a Unix socket pair with an echo thread.
/// A small cycle waits for one reply, the get's: a small create takes a
/// block the client reserved in advance (one Reserve round trip per
/// `RESERVE_BATCH` objects, not counted here), and seal (publish) and
/// release are one-way.
pub(crate) const REPLIES_PER_CYCLE: u32 = 1;

/// 64-byte ping-pong over a Unix socket pair between two threads. With a
/// `poll` budget both sides first poll (non-blocking reads) as the store's
/// client and daemon do, then block: the floor for the store's round trip.
pub(crate) fn socket_ping_pong(n: usize, poll: Duration, echo_cpu: Option<usize>) -> Result<Vec<Duration>> {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let (mut near, mut far) = UnixStream::pair().context("cannot create a Unix socket pair")?;
    let echo = std::thread::spawn(move || {
        if let Some(cpu) = echo_cpu {
            // Two polling threads at real-time priority on one CPU would
            // starve each other; the echo side gets the daemon's CPU.
            let _ = hprm_realtime::apply(None, Some(&hprm_realtime::CpuList(vec![cpu])));
        }
        let mut buf = [0u8; SMALL_SIZE];
        // Ends when the near side is dropped (read fails at EOF).
        while read_exact_polling(&far, &mut buf, poll).is_ok() && far.write_all(&buf).is_ok() {}
    });
    let mut buf = [0u8; SMALL_SIZE];
    let mut samples = Vec::with_capacity(n);
    let mut ping = || -> std::io::Result<Duration> {
        let t = Instant::now();
        near.write_all(&buf)?;
        read_exact_polling(&near, &mut buf, poll)?;
        Ok(t.elapsed())
    };
    for i in 0..n + n / 10 {
        let d = ping().context("socket ping-pong")?;
        if i >= n / 10 {
            samples.push(d);
        }
    }
    drop(near);
    echo.join().map_err(|_| anyhow::anyhow!("the echo thread panicked"))?;
    Ok(samples)
}

/// `read_exact`, polling with non-blocking reads for up to `poll` first.
fn read_exact_polling(
    mut sock: &std::os::unix::net::UnixStream,
    buf: &mut [u8],
    poll: Duration,
) -> std::io::Result<()> {
    use nix::sys::socket::{recv, MsgFlags};
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let mut got = 0;
    let deadline = Instant::now() + poll;
    while got < buf.len() {
        if Instant::now() < deadline {
            match recv(sock.as_raw_fd(), &mut buf[got..], MsgFlags::MSG_DONTWAIT) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(k) => got += k,
                Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => std::hint::spin_loop(),
                Err(e) => return Err(e.into()),
            }
        } else {
            match sock.read(&mut buf[got..])? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                k => got += k,
            }
        }
    }
    Ok(())
}
