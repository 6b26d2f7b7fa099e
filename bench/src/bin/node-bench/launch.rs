//! Running one program: the coordinator spawns a `node-bench launch`
//! process for a [`Spec`], waits for it (stopping it past its time limit),
//! and collects the samples its federates wrote into the launch's directory.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::cli::{Coord, Variant, Workload};
use crate::coordinator::Coordinator;
use crate::programs::Spec;
use crate::roles::FedOut;
use crate::{LAUNCH_TIMEOUT, SPEC_ENV};

/// A launch's directory: removed when dropped, unless kept.
enum KeptDir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

impl KeptDir {
    fn path(&self) -> &Path {
        match self {
            KeptDir::Temp(d) => d.path(),
            KeptDir::Kept(p) => p,
        }
    }
}

/// What one launch produced.
pub(crate) struct Launched {
    feds: BTreeMap<String, FedOut>,
}

impl Launched {
    pub(crate) fn series(&self, fed: &str, name: &str) -> Result<&[i64]> {
        self.feds
            .get(fed)
            .and_then(|f| f.series.get(name))
            .map(Vec::as_slice)
            .with_context(|| format!("federate {fed} reported no {name} samples"))
    }

    pub(crate) fn tardy(&self) -> u64 {
        self.feds.values().map(|f| f.tardy).sum()
    }
}

impl Coordinator {
    /// Launches `spec`'s program through a `node-bench launch` process and
    /// collects what its federates wrote.
    pub(crate) fn launch(&self, mut spec: Spec) -> Result<Launched> {
        let dir = tempfile::Builder::new()
            .prefix("node-bench-run.")
            .tempdir()
            .context("cannot create a temporary directory")?;
        spec.out = dir.path().to_path_buf();
        let log_path = dir.path().join("launch.log");
        let log = File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("launch")
            .env(SPEC_ENV, serde_json::to_string(&spec)?)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(bin) = &self.bin_dir {
            cmd.env("HPRM_BIN_DIR", bin.path());
        }
        let mut child = cmd.spawn().context("cannot start `node-bench launch`")?;
        let status = wait_or_stop(&mut child, LAUNCH_TIMEOUT + Duration::from_secs(30))?;
        let dir = if self.keep_runs {
            let path = dir.keep();
            eprintln!("    kept {}", path.display());
            KeptDir::Kept(path)
        } else {
            KeptDir::Temp(dir)
        };
        let log_tail = || {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(25)..].join("\n")
        };
        if !status.success() {
            bail!("the launch ended with {status}; its log ends:\n{}", log_tail());
        }
        let mut feds = BTreeMap::new();
        for name in spec.federates() {
            let path = dir.path().join(format!("{name}.json"));
            let text = std::fs::read(&path)
                .with_context(|| format!("federate {name} left no results; the launch log ends:\n{}", log_tail()))?;
            let out: FedOut = serde_json::from_slice(&text)
                .with_context(|| format!("{} is not a federate's results", path.display()))?;
            if let Some(e) = &out.error {
                bail!("federate {name} failed: {e}");
            }
            if out.check_failures > 0 || out.decode_errors > 0 || out.encode_errors > 0 {
                bail!(
                    "federate {name}: {} payload checks failed, {} decode and {} encode errors; the launch log ends:\n{}",
                    out.check_failures,
                    out.decode_errors,
                    out.encode_errors,
                    log_tail()
                );
            }
            feds.insert(name, out);
        }
        Ok(Launched { feds })
    }

    pub(crate) fn spec(
        &self,
        workload: Workload,
        coord: Coord,
        size: usize,
        rounds: u64,
        warmup: u64,
        variant: Variant,
    ) -> Spec {
        // Broadcast: the round's source object and four replies are live
        // at once, and the next round's may be allocated before the last
        // round's are released; 12 sizes leaves room for fragmentation.
        let memory = match workload {
            Workload::Broadcast => format!("{}m", (12 * size / (1 << 20)).max(256)),
            _ => "256m".into(),
        };
        Spec { workload, coord, size, rounds, warmup, variant, out: PathBuf::new(), store_memory: memory }
    }
}

/// Waits for a launch process; past `limit`, asks it to stop (SIGTERM: it
/// passes that on to its federates, then stops its daemons), and kills it
/// if that does not end it.
fn wait_or_stop(child: &mut Child, limit: Duration) -> Result<ExitStatus> {
    let deadline = Instant::now() + limit;
    let mut termed = false;
    loop {
        if let Some(status) = child.try_wait().context("waiting for the launch")? {
            return Ok(status);
        }
        let now = Instant::now();
        if now > deadline && !termed {
            eprintln!("  the launch ran past {} s; stopping it", limit.as_secs());
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
            termed = true;
        } else if now > deadline + Duration::from_secs(15) {
            let _ = child.kill();
            return child.wait().context("waiting for the killed launch");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
