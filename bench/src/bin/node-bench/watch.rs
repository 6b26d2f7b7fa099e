//! A launch watched by `hprm dashboard`, as a person and Prometheus would
//! watch it: the dashboard runs for the launch, a reader follows its
//! `/events` stream (an event a second, as the page does) and another
//! fetches `/metrics` every second (a scrape far more often than
//! Prometheus's usual 15 s). What the program pays for being watched is
//! the difference from an unwatched launch.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A running dashboard and its readers; [`Watched::stop`] ends them.
pub(crate) struct Watched {
    dashboard: Child,
    started: Instant,
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
    readers: Vec<JoinHandle<()>>,
}

impl Watched {
    /// Starts `hprm dashboard` on a free port and its two readers.
    pub(crate) fn start(hprm: &Path) -> Result<Watched> {
        let mut dashboard = Command::new(hprm)
            .args(["dashboard", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {} dashboard", hprm.display()))?;
        let mut first = String::new();
        if let Some(out) = dashboard.stdout.take() {
            BufReader::new(out).read_line(&mut first).context("cannot read the dashboard's address")?;
        }
        let addr: Option<SocketAddr> =
            first.split("http://").nth(1).and_then(|r| r.split('/').next()).and_then(|a| a.parse().ok());
        let Some(addr) = addr else {
            let _ = dashboard.kill();
            let _ = dashboard.wait();
            bail!("the dashboard did not say where it listens (it printed {first:?})");
        };
        let (stop, reads) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let events = {
            let (stop, reads) = (stop.clone(), reads.clone());
            std::thread::spawn(move || follow_events(addr, &stop, &reads))
        };
        let scrapes = {
            let (stop, reads) = (stop.clone(), reads.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if get(addr, "/metrics").is_ok() {
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        };
        Ok(Watched { dashboard, started: Instant::now(), stop, reads, readers: vec![events, scrapes] })
    }

    /// Stops the readers and the dashboard: how many reads they made, and
    /// what the dashboard's process cost.
    pub(crate) fn stop(mut self) -> Watching {
        let wall = self.started.elapsed();
        // Read before the kill: a reaped process has no /proc entry.
        let cpu = cpu_time(self.dashboard.id());
        self.stop.store(true, Ordering::Relaxed);
        // The events reader is blocked in a read: ending the dashboard ends it.
        let _ = self.dashboard.kill();
        let _ = self.dashboard.wait();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        Watching { reads: self.reads.load(Ordering::Relaxed), cpu, wall }
    }
}

/// What one watched launch's dashboard did.
pub(crate) struct Watching {
    /// Snapshots and scrapes its readers got.
    pub(crate) reads: u64,
    /// The CPU time its process used (every thread, ended ones included);
    /// `None` where /proc could not tell.
    pub(crate) cpu: Option<Duration>,
    /// How long it ran.
    pub(crate) wall: Duration,
}

/// The user and system CPU time of process `pid` so far, from
/// `/proc/PID/stat` (which counts the threads that ended too, unlike the
/// per-thread schedstat), in USER_HZ ticks: 100 a second on Linux's x86
/// and Arm ABIs, so the figure is good to 10 ms per launch.
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: fields count from
    // after its closing one (utime and stime are fields 14 and 15).
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// GETs `path` and reads the whole answer.
fn get(addr: SocketAddr, path: &str) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    Ok(body)
}

/// Follows `/events`, counting the events (reads), until `stop` or the end of
/// the stream.
fn follow_events(addr: SocketAddr, stop: &AtomicBool, reads: &AtomicU64) {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return };
    if write!(s, "GET /events HTTP/1.0\r\nHost: {addr}\r\n\r\n").is_err() {
        return;
    }
    let mut lines = BufReader::new(s);
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) {
        line.clear();
        match lines.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line.starts_with("data: ") => {
                reads.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
        }
    }
}
