//! Where and from what a benchmark ran: the machine's CPU, memory and
//! kernel, and the workspace revision the binary was built from. Each
//! binary records these beside its figures, plus facts of its own.

use std::fmt;
use std::process::{Command, Stdio};

use serde::Serialize;

/// The machine, as read from /proc; a field is absent where the file or the
/// line is not there. Binaries that record more (THP modes, load averages)
/// put this in their own struct with `#[serde(flatten)]`, so that their
/// JSON keeps one flat `machine` object.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: Option<usize>,
    pub cpu_model: Option<String>,
    pub kernel: Option<String>,
    pub mem_total_kib: Option<u64>,
}

impl Machine {
    pub fn probe() -> Machine {
        let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            // "model name" on x86; aarch64 kernels print no model name.
            .find_map(|l| l.strip_prefix("model name").or_else(|| l.strip_prefix("Model")))
            .and_then(|rest| rest.split_once(':'))
            .map(|(_, v)| v.trim().to_string());
        let mem_total_kib = read("/proc/meminfo").and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        });
        Machine {
            nproc: std::thread::available_parallelism().ok().map(|n| n.get()),
            cpu_model,
            kernel: read_trimmed("/proc/version"),
            mem_total_kib,
        }
    }
}

/// `CPU model, N CPUs, M GiB RAM; Linux version x.y.z`, as the reports'
/// "Machine:" lines begin.
impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, {} CPUs, {} GiB RAM; {}",
            self.cpu_model.as_deref().unwrap_or("unknown CPU"),
            self.nproc.map_or("?".to_string(), |n| n.to_string()),
            self.mem_total_kib.map_or("?".to_string(), |k| format!("{:.0}", k as f64 / 1048576.0)),
            self.kernel.as_deref().and_then(|k| k.split(" (").next()).unwrap_or("unknown kernel"),
        )
    }
}

/// A /proc or /sys file's text without surrounding white space; none where
/// it cannot be read.
pub fn read_trimmed(path: &str) -> Option<String> {
    read(path).map(|s| s.trim().to_string())
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// `git describe` of the workspace this binary was built from, so results can
/// be tied to a revision; absent where git or the checkout is not there.
pub fn workspace_revision() -> Option<String> {
    let out = Command::new("git")
        .args(["-C", concat!(env!("CARGO_MANIFEST_DIR"), "/.."), "describe", "--always", "--dirty"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_what_it_knows() {
        let m = Machine {
            nproc: Some(2),
            cpu_model: None,
            kernel: Some("Linux version 6.1.0 (gcc) #1 SMP".into()),
            mem_total_kib: Some(8 * 1048576),
        };
        assert_eq!(m.to_string(), "unknown CPU, 2 CPUs, 8 GiB RAM; Linux version 6.1.0");
        let m = Machine { nproc: None, cpu_model: None, kernel: None, mem_total_kib: None };
        assert_eq!(m.to_string(), "unknown CPU, ? CPUs, ? GiB RAM; unknown kernel");
    }
}
