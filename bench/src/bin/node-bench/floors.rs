//! The floors that hprm is measured against: two-process TCP and
//! Unix-socket ping-pongs and streams (`node-bench floor-server` is their far
//! end), blocking and polling, and a memcpy between pre-touched buffers.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use hprm_bench::summary::Counted;
use serde::{Deserialize, Serialize};

use crate::cli::Transport;
use crate::results::RateRow;
use crate::RATE_SIZE;

/// Frame header of the floors: payload length (u32), flags (u32), send
/// stamp (i64 ns since the epoch), little-endian.
const HEADER: usize = 16;
/// The server records one-way latency of this message.
const F_MEASURED: u32 = 1;
/// No reply (stream).
const F_STREAM: u32 = 2;
/// The stream's measured part starts with this message.
const F_MARK: u32 = 4;

pub(crate) fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// What the floor server measured.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ServerOut {
    /// One-way latency samples (ns) by payload length.
    one_way: BTreeMap<u32, Vec<i64>>,
    /// Stream messages from the mark on, and when the mark and the last arrived.
    stream_count: u64,
    stream_mark: i64,
    stream_last: i64,
}

pub(crate) fn floor_server(transport: Transport, path: Option<&Path>, poll: Duration) -> Result<()> {
    let conn = match transport {
        Transport::Tcp => {
            let listener = TcpListener::bind(("127.0.0.1", 0)).context("cannot listen on 127.0.0.1")?;
            println!("ready {}", listener.local_addr()?);
            std::io::stdout().flush()?;
            let (stream, _) = listener.accept().context("accept")?;
            // As hprm-node's peers: no Nagle delay.
            stream.set_nodelay(true)?;
            Conn::Tcp(stream)
        }
        Transport::Uds => {
            let path = path.context("--path is needed for the Unix transport")?;
            let listener = UnixListener::bind(path).with_context(|| format!("cannot listen on {}", path.display()))?;
            println!("ready {}", path.display());
            std::io::stdout().flush()?;
            let (stream, _) = listener.accept().context("accept")?;
            Conn::Uds(stream)
        }
    };
    let out = serve(&conn, poll)?;
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// Echoes every frame without F_STREAM, records what it measured, until the
/// client closes. Blocking reads as hprm-node's socket readers do, or
/// polling first for `poll`.
fn serve(conn: &Conn, poll: Duration) -> Result<ServerOut> {
    // Reads as large as the socket gives, like hprm-node's frame reader.
    let mut reader = BufReader::with_capacity(256 << 10, Polled { conn, poll, yielding: false });
    let mut writer = conn;
    let mut frame = Vec::new();
    let mut out = ServerOut::default();
    loop {
        let mut header = [0u8; HEADER];
        match reader.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e).context("floor server read"),
        }
        let (len, flags, stamp) = parse_header(&header);
        frame.clear();
        frame.extend_from_slice(&header);
        frame.resize(HEADER + len as usize, 0);
        reader.read_exact(&mut frame[HEADER..]).context("floor server read")?;
        let now = now_ns();
        if flags & F_MEASURED != 0 {
            out.one_way.entry(len).or_default().push(now - stamp);
        }
        if flags & F_STREAM != 0 {
            if flags & F_MARK != 0 {
                out.stream_mark = now;
                out.stream_count = 0;
            }
            out.stream_count += 1;
            out.stream_last = now;
            continue;
        }
        // One write per message, as hprm-node's frame writer.
        writer.write_all(&frame).context("floor server write")?;
    }
    Ok(out)
}

fn parse_header(h: &[u8; HEADER]) -> (u32, u32, i64) {
    let word = |r: std::ops::Range<usize>| {
        let mut b = [0u8; 8];
        b[..r.len()].copy_from_slice(&h[r]);
        u64::from_le_bytes(b)
    };
    (word(0..4) as u32, word(4..8) as u32, word(8..16) as i64)
}

fn put_header(frame: &mut [u8], len: u32, flags: u32, stamp: i64) {
    frame[0..4].copy_from_slice(&len.to_le_bytes());
    frame[4..8].copy_from_slice(&flags.to_le_bytes());
    frame[8..16].copy_from_slice(&stamp.to_le_bytes());
}

/// The floor server process; killed if still there when dropped.
struct FloorServer {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
    addr: String,
    _dir: tempfile::TempDir,
}

impl FloorServer {
    fn start(exe: &Path, transport: Transport, poll: Duration) -> Result<FloorServer> {
        let dir = tempfile::Builder::new()
            .prefix("node-bench-floor.")
            .tempdir()
            .context("cannot create a temporary directory")?;
        let mut cmd = Command::new(exe);
        cmd.arg("floor-server").arg("--transport").arg(match transport {
            Transport::Tcp => "tcp",
            Transport::Uds => "uds",
        });
        if transport == Transport::Uds {
            cmd.arg("--path").arg(dir.path().join("floor.sock"));
        }
        cmd.arg("--poll-us").arg(poll.as_micros().to_string());
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start the floor server")?;
        let mut stdout = BufReader::new(child.stdout.take().context("the floor server has no stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line).context("reading the floor server's address")?;
        let addr = line.trim().strip_prefix("ready ").map(str::to_string);
        let Some(addr) = addr else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the floor server did not start (it said {line:?})");
        };
        Ok(FloorServer { child, stdout, addr, _dir: dir })
    }

    /// Reads what the server measured once the client has closed, and reaps it.
    fn finish(mut self) -> Result<ServerOut> {
        let mut line = String::new();
        self.stdout.read_line(&mut line).context("reading the floor server's results")?;
        let status = self.child.wait().context("waiting for the floor server")?;
        if !status.success() {
            bail!("the floor server exited with {status}");
        }
        serde_json::from_str(line.trim()).context("the floor server's results are not JSON")
    }
}

impl Drop for FloorServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The client's end of a floor connection.
pub(crate) enum Conn {
    Tcp(TcpStream),
    Uds(UnixStream),
}

impl Conn {
    pub(crate) fn open(transport: Transport, addr: &str) -> Result<Conn> {
        Ok(match transport {
            Transport::Tcp => {
                let s = TcpStream::connect(addr)
                    .with_context(|| format!("cannot connect to the floor server at {addr}"))?;
                s.set_nodelay(true)?;
                Conn::Tcp(s)
            }
            Transport::Uds => Conn::Uds(
                UnixStream::connect(addr).with_context(|| format!("cannot connect to the floor server at {addr}"))?,
            ),
        })
    }

    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match self {
            Conn::Tcp(s) => s.as_raw_fd(),
            Conn::Uds(s) => s.as_raw_fd(),
        }
    }

    fn close(&self) -> Result<()> {
        match self {
            Conn::Tcp(s) => s.shutdown(std::net::Shutdown::Write)?,
            Conn::Uds(s) => s.shutdown(std::net::Shutdown::Write)?,
        }
        Ok(())
    }
}

impl Read for &Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => (&*s).read(buf),
            Conn::Uds(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => (&*s).write(buf),
            Conn::Uds(s) => (&*s).write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Samples of one path pooled over passes.
#[derive(Default)]
pub(crate) struct Pooled {
    pub(crate) one_way: Vec<i64>,
    pub(crate) back: Vec<i64>,
    pub(crate) rtt: Vec<i64>,
    /// One-way p50 of each pass, µs.
    pub(crate) pass_medians: Vec<f64>,
    /// Round-trip p50 of each pass, µs.
    pub(crate) rtt_pass_medians: Vec<f64>,
    pub(crate) tardy: u64,
    pub(crate) error: Option<String>,
}

impl Pooled {
    pub(crate) fn add(&mut self, one_way: &[i64], back: &[i64], rtt: &[i64], tardy: u64) {
        self.one_way.extend_from_slice(one_way);
        self.back.extend_from_slice(back);
        self.rtt.extend_from_slice(rtt);
        self.pass_medians.push(Counted::of_ns(one_way).median_us);
        self.rtt_pass_medians.push(if rtt.is_empty() { f64::NAN } else { Counted::of_ns(rtt).median_us });
        self.tardy += tardy;
    }

    /// Round trips only (the RTI round trip): the pass's median is theirs.
    pub(crate) fn add_round_trips(&mut self, rtt: &[i64]) {
        self.rtt.extend_from_slice(rtt);
        self.pass_medians.push(Counted::of_ns(rtt).median_us);
        self.rtt_pass_medians.push(Counted::of_ns(rtt).median_us);
    }

    /// A pass that failed: its median is NaN, so that passes stay aligned
    /// between paths (target ratios pair them).
    pub(crate) fn failed(&mut self, error: String) {
        self.pass_medians.push(f64::NAN);
        self.rtt_pass_medians.push(f64::NAN);
        self.error.get_or_insert(error);
    }

    pub(crate) fn last_median(&self) -> f64 {
        self.pass_medians.last().copied().unwrap_or(f64::NAN)
    }
}

/// Reads from a connection, first polling with non-blocking reads for up to
/// `poll` (zero: block at once).
pub(crate) struct Polled<'a> {
    pub(crate) conn: &'a Conn,
    pub(crate) poll: Duration,
    /// Between reads, give up the CPU (`sched_yield`) as hprm-node's
    /// scheduler does, rather than spin on it as the polling floors do.
    pub(crate) yielding: bool,
}

impl Read for Polled<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use nix::errno::Errno;
        use nix::sys::socket::{recv, MsgFlags};
        if !self.poll.is_zero() {
            let deadline = Instant::now() + self.poll;
            loop {
                match recv(self.conn.fd(), buf, MsgFlags::MSG_DONTWAIT) {
                    Ok(n) => return Ok(n),
                    Err(Errno::EAGAIN) | Err(Errno::EINTR) if Instant::now() < deadline => {
                        if self.yielding {
                            std::thread::yield_now()
                        } else {
                            std::hint::spin_loop()
                        }
                    }
                    Err(Errno::EAGAIN) | Err(Errno::EINTR) => break,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let mut conn = self.conn;
        conn.read(buf)
    }
}

/// Polling budget of the polling floors: what the store's client and
/// daemon spin (hprm-node's scheduler polls its inbox for
/// `hprm_node::DEFAULT_SPIN`, yielding its CPU as it goes).
pub(crate) const FLOOR_POLL: Duration = Duration::from_micros(50);

/// Ping-pong of `size`-byte payloads with a fresh server process: round
/// trips by the client's clock, one-way by the server's.
/// Returns the one-way and round-trip samples (ns).
pub(crate) fn floor_ping_pong(
    exe: &Path,
    transport: Transport,
    poll: Duration,
    size: usize,
    rounds: u64,
    warmup: u64,
) -> Result<(Vec<i64>, Vec<i64>)> {
    let server = FloorServer::start(exe, transport, poll)?;
    let conn = Conn::open(transport, &server.addr)?;
    let mut reader = BufReader::with_capacity(256 << 10, Polled { conn: &conn, poll, yielding: false });
    let mut writer = &conn;
    let mut frame = vec![0xA5u8; HEADER + size];
    let mut reply = vec![0u8; HEADER + size];
    let len = u32::try_from(size).context("payload too large for the floor's frame")?;
    let mut rtt = Vec::with_capacity(rounds as usize);
    for i in 0..warmup + rounds {
        let measured = i >= warmup;
        let stamp = now_ns();
        put_header(&mut frame, len, if measured { F_MEASURED } else { 0 }, stamp);
        writer.write_all(&frame).context("floor ping")?;
        reader.read_exact(&mut reply).context("floor pong")?;
        let now = now_ns();
        if measured {
            rtt.push(now - stamp);
        }
    }
    drop(reader);
    conn.close()?;
    let out = server.finish()?;
    let one_way = out.one_way.get(&len).cloned().unwrap_or_default();
    if one_way.len() != rtt.len() {
        bail!("the floor server measured {} messages, the client {}", one_way.len(), rtt.len());
    }
    Ok((one_way, rtt))
}

/// A stream of `warmup + messages` framed `RATE_SIZE`-byte messages, one
/// write each; messages per second at the receiver.
pub(crate) fn floor_stream(exe: &Path, transport: Transport, messages: u64, warmup: u64) -> Result<RateRow> {
    let server = FloorServer::start(exe, transport, Duration::ZERO)?;
    let conn = Conn::open(transport, &server.addr)?;
    let mut writer = &conn;
    let mut frame = vec![0x5Au8; HEADER + RATE_SIZE];
    for i in 0..warmup + messages {
        let flags = if i == warmup { F_STREAM | F_MARK } else { F_STREAM };
        put_header(&mut frame, RATE_SIZE as u32, flags, now_ns());
        writer.write_all(&frame).context("floor stream")?;
    }
    conn.close()?;
    let out = server.finish()?;
    Ok(RateRow::from_span(
        format!("{} floor", transport.label()),
        out.stream_mark,
        out.stream_last,
        out.stream_count,
        messages,
    ))
}

pub(crate) fn memcpy_floor(size: usize, reps: usize) -> Counted {
    // Non-zero fills: `vec![0; n]` comes from calloc as untouched zero
    // pages, and the first copy would pay their faults.
    let src = vec![0x3Cu8; size];
    let mut dst = vec![0xC3u8; size];
    let mut samples = Vec::with_capacity(reps);
    for i in 0..reps + 2 {
        let t = Instant::now();
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
        let d = t.elapsed();
        if i >= 2 {
            samples.push(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        }
    }
    Counted::of_ns(&samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let mut f = [0u8; HEADER];
        put_header(&mut f, 65536, F_STREAM | F_MARK, -5);
        assert_eq!(parse_header(&f), (65536, F_STREAM | F_MARK, -5));
    }
}
