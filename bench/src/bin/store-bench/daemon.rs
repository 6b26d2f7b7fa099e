//! The `hprm-store` daemon under test: found beside this program (or at
//! `--store-bin`), started with its own socket directory and stopped however
//! the benchmark ends.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hprm_store::StoreClient;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

pub(crate) fn find_store_bin(flag: Option<PathBuf>) -> Result<PathBuf> {
    let path = match flag {
        Some(p) => p,
        None => {
            let exe = std::env::current_exe()
                .context("cannot tell where this program is, to find hprm-store beside it; pass --store-bin PATH")?;
            exe.with_file_name("hprm-store")
        }
    };
    if !path.is_file() {
        bail!(
            "no hprm-store daemon binary at {}; build it with `cargo build --release -p hprm-store`, or pass --store-bin PATH",
            path.display()
        );
    }
    Ok(path)
}

/// The child `hprm-store`. Dropping it stops the daemon (SIGTERM, then
/// SIGKILL if it lingers) so that no daemon outlives the benchmark, whichever
/// way the benchmark ends; the socket directory goes with it.
pub(crate) struct Daemon {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
    // Dropped after `Drop::drop` has stopped the child, so the socket's
    // directory is removed only once nobody serves it.
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts `bin` with an arena of `memory` (`--populate`) and `extra`.
    pub(crate) fn start(bin: &Path, memory: &str, extra: &[String]) -> Result<Daemon> {
        let dir = tempfile::Builder::new()
            .prefix("hprm-store-bench.")
            .tempdir()
            .context("cannot create a temporary directory for the daemon's socket")?;
        let socket = dir.path().join("store.sock");
        let log = dir.path().join("hprm-store.log");
        // The daemon's log would interleave with our progress lines; it is
        // shown only when the daemon fails.
        let log_file = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let log_err = log_file.try_clone().with_context(|| format!("cannot reopen {}", log.display()))?;
        let child = Command::new(bin)
            .arg("--socket")
            .arg(&socket)
            .args(["--memory", memory, "--populate"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        Ok(Daemon { child: Some(child), socket, log, _dir: dir })
    }

    /// Connects once the daemon listens. The socket appears only after the
    /// arena is made and populated, so polling it is the readiness check.
    pub(crate) fn connect(&mut self, timeout: Duration) -> Result<StoreClient> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait().context("cannot check on the hprm-store child")? {
                    self.child = None;
                    bail!("hprm-store exited ({status}) before accepting connections; its log:\n{}", self.log_text());
                }
            }
            match StoreClient::connect(&self.socket) {
                Ok(client) => return Ok(client),
                // Only "nobody listens yet" is worth waiting out.
                Err(hprm_store::Error::Connect { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "hprm-store did not accept connections within {timeout:?}; its log:\n{}",
                            self.log_text()
                        )
                    })
                }
            }
        }
    }

    /// Stops the daemon the way an operator would (SIGTERM) and reaps it.
    pub(crate) fn stop(&mut self) -> Result<ExitStatus> {
        let Some(mut child) = self.child.take() else { bail!("hprm-store was already stopped") };
        let pid = Pid::from_raw(i32::try_from(child.id()).context("the child's pid does not fit a pid_t")?);
        // The child is not reaped yet, so its pid cannot have been reused.
        let signalled = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        let graceful = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if signalled.is_ok() && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => {
                    break Err(anyhow::anyhow!("hprm-store did not exit within 5 s of SIGTERM ({signalled:?})"))
                }
                Err(e) => break Err(anyhow::Error::new(e).context("cannot wait for hprm-store")),
            }
        };
        graceful.map_err(|e| {
            let _ = child.kill();
            let _ = child.wait();
            e.context(format!("killed it; its log:\n{}", self.log_text()))
        })
    }

    fn log_text(&self) -> String {
        match std::fs::read_to_string(&self.log) {
            Ok(s) if s.trim().is_empty() => "(empty)".to_string(),
            Ok(s) => {
                let lines: Vec<&str> = s.lines().collect();
                lines[lines.len().saturating_sub(20)..].join("\n")
            }
            Err(e) => format!("(cannot read {}: {e})", self.log.display()),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            if let Err(e) = self.stop() {
                eprintln!("store-bench: stopping hprm-store: {e:#}");
            }
        }
    }
}
