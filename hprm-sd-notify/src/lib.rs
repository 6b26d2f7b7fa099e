//! # hprm-sd-notify: telling systemd how an HPRM process is doing
//!
//! The one implementation of systemd's service notification protocol
//! (`sd_notify(3)`) that `hprm-store`, `hprm-rti` and every federate
//! (`hprm_node::run_federate`) use under `Type=notify` units, without
//! libsystemd: a notification is one datagram of `KEY=VALUE` lines sent to
//! the Unix socket named by `$NOTIFY_SOCKET` (a leading `@` names a socket
//! in the abstract namespace).
//!
//! - [`ready`]: `READY=1` with a `STATUS=` line, once the process does what
//!   it is for (the store accepts clients, the RTI listens, a federate has
//!   joined and agreed on its start time).
//! - [`Watchdog`]: `WATCHDOG=1` every half of `$WATCHDOG_USEC`, pinged by
//!   the thread that does the real work, so a hung loop stops pinging and
//!   systemd restarts the process (`WatchdogSec=` in the unit).
//! - [`stopping`]: `STOPPING=1` when the process begins to shut down.
//!
//! Without `$NOTIFY_SOCKET` (not started by systemd, or a unit that is not
//! `Type=notify`) nothing is sent and nothing fails. A process that cannot
//! reach the socket logs one warning and carries on: systemd then reports
//! the start as timed out, which is where an operator looks.
//!
//! - [`ansi`]: whether the process's log may use ANSI colour. It lives here
//!   because it is the other half of "where does this process report to"
//!   (a terminal, or the journal, a pipe, a file), and because this crate is
//!   the one light dependency that both daemons and `hprm-node` (so `hprm`,
//!   every federate and the Python SDK) already have: one decision for every
//!   binary, without a new dependency edge.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// Where notifications go: the socket in `$NOTIFY_SOCKET`.
#[derive(Debug)]
pub struct Notifier {
    addr: SocketAddr,
    sock: UnixDatagram,
}

impl Notifier {
    /// The notifier for `$NOTIFY_SOCKET`, or `None` when it is unset.
    pub fn from_env() -> io::Result<Option<Notifier>> {
        let Some(path) = std::env::var_os("NOTIFY_SOCKET").filter(|p| !p.is_empty()) else { return Ok(None) };
        let path = path.into_encoded_bytes();
        let addr = match path.strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name)?
            }
            None => {
                use std::os::unix::ffi::OsStrExt;
                SocketAddr::from_pathname(std::ffi::OsStr::from_bytes(&path))?
            }
        };
        Ok(Some(Notifier { addr, sock: UnixDatagram::unbound()? }))
    }

    /// Sends `state`: newline-separated `KEY=VALUE` assignments.
    pub fn send(&self, state: &str) -> io::Result<()> {
        self.sock.send_to_addr(state.as_bytes(), &self.addr).map(drop)
    }
}

/// Sends `state` to `$NOTIFY_SOCKET` if systemd set one; a failure is
/// logged, never returned (see the crate's doc). Returns whether it was sent.
pub fn notify(state: &str) -> bool {
    match Notifier::from_env().and_then(|n| n.map(|n| n.send(state)).transpose()) {
        Ok(sent) => sent.is_some(),
        Err(e) => {
            let socket = std::env::var("NOTIFY_SOCKET").unwrap_or_default();
            tracing::warn!("cannot notify systemd through NOTIFY_SOCKET={socket:?}: {e}; systemd will not see this process as ready");
            false
        }
    }
}

/// `READY=1` and a one-line status for `systemctl status`.
pub fn ready(status: &str) -> bool {
    notify(&format!("READY=1\nSTATUS={}", one_line(status)))
}

/// A new one-line status for `systemctl status`.
pub fn status(status: &str) -> bool {
    notify(&format!("STATUS={}", one_line(status)))
}

/// `STOPPING=1`: the process is shutting down.
pub fn stopping(status: &str) -> bool {
    notify(&format!("STOPPING=1\nSTATUS={}", one_line(status)))
}

/// A newline would start another assignment.
fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

/// Keep-alive pings for a unit with `WatchdogSec=`.
///
/// Invariant: `next` is at most one [`interval`](Watchdog::interval) after
/// the last ping, and the interval is half of what systemd waits, so a loop
/// that calls [`tick`](Watchdog::tick) by [`next_due`](Watchdog::next_due)
/// is never killed.
#[derive(Debug)]
pub struct Watchdog {
    notifier: Notifier,
    interval: Duration,
    next: Instant,
}

impl Watchdog {
    /// The watchdog systemd asked this process for: `$WATCHDOG_USEC` set,
    /// `$WATCHDOG_PID` unset or this process (children started by a
    /// watched process inherit the variables but are not watched), and a
    /// `$NOTIFY_SOCKET`. `None` otherwise; an unreadable value is logged.
    pub fn from_env() -> Option<Watchdog> {
        let usec = std::env::var("WATCHDOG_USEC").ok()?;
        if let Ok(pid) = std::env::var("WATCHDOG_PID") {
            if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
                return None;
            }
        }
        let usec = match usec.trim().parse::<u64>() {
            Ok(u) if u > 0 => u,
            _ => {
                tracing::warn!(
                    "WATCHDOG_USEC={usec:?} is not a positive number of microseconds; sending no watchdog pings"
                );
                return None;
            }
        };
        let notifier = match Notifier::from_env() {
            Ok(Some(n)) => n,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!("cannot reach NOTIFY_SOCKET for watchdog pings: {e}");
                return None;
            }
        };
        let interval = Duration::from_micros(usec / 2);
        Some(Watchdog { notifier, interval, next: Instant::now() })
    }

    /// Time between pings: half of `$WATCHDOG_USEC`.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// When the next ping is due.
    pub fn next_due(&self) -> Instant {
        self.next
    }

    /// Sends `WATCHDOG=1` now.
    pub fn ping(&mut self) {
        if let Err(e) = self.notifier.send("WATCHDOG=1") {
            tracing::warn!("cannot send a watchdog ping to systemd: {e}");
        }
        self.next = Instant::now() + self.interval;
    }

    /// Pings if one is due; cheap enough for every turn of an event loop.
    pub fn tick(&mut self) {
        if Instant::now() >= self.next {
            self.ping();
        }
    }

    /// `deadline` brought forward to the next ping, for a loop that sleeps.
    pub fn cap(&self, deadline: Option<Instant>) -> Instant {
        deadline.map_or(self.next, |d| d.min(self.next))
    }
}

/// Whether this process's log (on stderr) may use ANSI colour.
///
/// `HPRM_COLOR=always|never` (what `hprm --color` sets, for itself and the
/// processes it starts) decides when set; otherwise colour only when stderr
/// is a terminal and `NO_COLOR` is unset or empty (<https://no-color.org>):
/// escape codes in a journal, a pipe or a `--log-dir` file are noise.
pub fn ansi() -> bool {
    use std::io::IsTerminal;
    ansi_for(
        std::env::var("HPRM_COLOR").ok().as_deref(),
        std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
        std::io::stderr().is_terminal(),
    )
}

/// [`ansi`]'s decision from its inputs: `HPRM_COLOR`'s value, whether
/// `NO_COLOR` is set to something, whether stderr is a terminal.
pub fn ansi_for(choice: Option<&str>, no_color: bool, terminal: bool) -> bool {
    match choice.map(str::trim) {
        Some("always") => true,
        Some("never") => false,
        // "auto", empty or unknown: what the environment says.
        _ => terminal && !no_color,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color_unless_forced() {
        assert!(ansi_for(None, false, true));
        assert!(!ansi_for(None, false, false), "not a terminal");
        assert!(!ansi_for(None, true, true), "NO_COLOR");
        assert!(!ansi_for(Some("auto"), true, true));
        assert!(ansi_for(Some("auto"), false, true));
        assert!(ansi_for(Some("always"), true, false), "--color always wins over NO_COLOR and a pipe");
        assert!(!ansi_for(Some("never"), false, true));
        assert!(!ansi_for(Some("bogus"), false, false));
    }

    // The environment is per process: one test changes it, in sequence.
    #[test]
    fn sends_to_path_and_abstract_sockets_and_honours_watchdog_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        listener.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let recv = || {
            let mut buf = [0u8; 256];
            let n = listener.recv(&mut buf).unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        };

        std::env::remove_var("NOTIFY_SOCKET");
        assert!(!ready("unheard"), "nothing is sent without NOTIFY_SOCKET");

        std::env::set_var("NOTIFY_SOCKET", &path);
        assert!(ready("serving\non two lines"));
        assert_eq!(recv(), "READY=1\nSTATUS=serving on two lines");
        assert!(stopping("bye"));
        assert_eq!(recv(), "STOPPING=1\nSTATUS=bye");

        std::env::set_var("WATCHDOG_USEC", "2000000");
        std::env::set_var("WATCHDOG_PID", (std::process::id() + 1).to_string());
        assert!(Watchdog::from_env().is_none(), "another process's watchdog");
        std::env::set_var("WATCHDOG_PID", std::process::id().to_string());
        let mut wd = Watchdog::from_env().expect("our watchdog");
        assert_eq!(wd.interval(), Duration::from_secs(1));
        wd.tick();
        assert_eq!(recv(), "WATCHDOG=1");
        assert!(wd.next_due() > Instant::now(), "just pinged");
        std::env::set_var("WATCHDOG_USEC", "soon");
        assert!(Watchdog::from_env().is_none());

        {
            use std::os::linux::net::SocketAddrExt;
            let name = format!("hprm-sd-notify-test-{}", std::process::id());
            let abs = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
            abs.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            std::env::set_var("NOTIFY_SOCKET", format!("@{name}"));
            assert!(status("abstract"));
            let mut buf = [0u8; 64];
            let n = abs.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"STATUS=abstract");
        }
        for v in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
            std::env::remove_var(v);
        }
    }
}
