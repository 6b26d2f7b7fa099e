//! # hprm-realtime: real-time scheduling knobs for HPRM processes
//!
//! SCHED_FIFO/RR priority ([`Policy`]) and CPU affinity ([`CpuList`]),
//! applied by [`apply`]/[`apply_policy`], and the marks a process's TCP
//! connections carry, `SO_PRIORITY` and DSCP ([`SocketMarks`], module
//! `marks`); each refused with a [`RealtimeError`] that says what right is
//! missing. Used by the daemons
//! (`hprm-store --realtime-priority`, `hprm-rti --realtime-priority`) and by
//! federates (`hprm_node::realtime`), so one crate holds these facts.
//!
//! On a loaded machine the latency of a small request is dominated not by
//! work but by preemption: a client or daemon thread that is descheduled for
//! a few hundred microseconds holds up every request behind it. Robots run
//! their data path at real-time priority on dedicated CPUs for this reason;
//! these are the knobs. Both apply to the calling thread and are inherited
//! by threads it creates afterwards, so a process calls [`apply`] before
//! starting its runtime.

use std::fmt;
use std::io;
use std::str::FromStr;

mod marks;

pub use marks::{Dscp, SocketMarks};

/// CPUs written as a list of numbers and ranges: `0`, `2-3`, `0,2-3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// The text was not a CPU list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a CPU list: write CPU numbers and ranges, e.g. 1 or 0,2-3")]
pub struct ParseCpuListError(String);

impl FromStr for CpuList {
    type Err = ParseCpuListError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseCpuListError(s.to_owned());
        let mut cpus = Vec::new();
        for part in s.split(',') {
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => {
                    (a.trim().parse::<usize>().map_err(|_| err())?, b.trim().parse::<usize>().map_err(|_| err())?)
                }
                None => {
                    let n = part.trim().parse::<usize>().map_err(|_| err())?;
                    (n, n)
                }
            };
            if lo > hi || hi >= nix::sched::CpuSet::count() {
                return Err(err());
            }
            cpus.extend(lo..=hi);
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuList(cpus))
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

/// The real-time scheduling class: SCHED_FIFO runs a thread until it
/// blocks or a higher priority preempts it; SCHED_RR also time-slices it
/// with threads of its own priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    #[default]
    Fifo,
    Rr,
}

impl Policy {
    fn raw(self) -> libc::c_int {
        match self {
            Policy::Fifo => libc::SCHED_FIFO,
            Policy::Rr => libc::SCHED_RR,
        }
    }

    /// As the kernel and systemd's `CPUSchedulingPolicy=` name it.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Rr => "rr",
        }
    }
}

impl FromStr for Policy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fifo" => Ok(Policy::Fifo),
            "rr" => Ok(Policy::Rr),
            other => Err(format!("scheduling policy {other:?} is not one of fifo, rr")),
        }
    }
}

/// Why a knob could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum RealtimeError {
    #[error("SCHED_FIFO priority must be 1 to 99, not {0}")]
    Priority(u8),
    #[error("cannot run at real-time priority {priority} ({}): {cause}; this needs root or CAP_SYS_NICE (under systemd: LimitRTPRIO={priority} or AmbientCapabilities=CAP_SYS_NICE)", policy.name())]
    Fifo { policy: Policy, priority: u8, cause: io::Error },
    #[error("cannot pin to CPUs {cpus}: {cause}; check that they exist and are allowed to this process (see `nproc` and the cgroup's cpuset)")]
    Affinity { cpus: CpuList, cause: io::Error },
    #[error("socket priority must be 0 to 15 (above 6 with CAP_NET_ADMIN), not {0}")]
    SocketPriorityRange(u8),
    #[error("cannot give connections socket priority {priority} (SO_PRIORITY): {cause}; priorities above 6 need root or CAP_NET_ADMIN (or CAP_NET_RAW; under systemd: AmbientCapabilities=CAP_NET_ADMIN), or use 0 to 6")]
    SocketPriority { priority: u8, cause: io::Error },
    #[error("cannot mark connections with DSCP {dscp}: {cause}")]
    Dscp { dscp: u8, cause: io::Error },
    #[error("cannot open a socket to check the connections' marks: {0}")]
    Probe(io::Error),
}

/// Pins the calling thread (and threads it creates later) to `cpus`, and
/// gives it SCHED_FIFO `priority` (1..=99), whichever are given.
pub fn apply(priority: Option<u8>, cpus: Option<&CpuList>) -> Result<(), RealtimeError> {
    apply_policy(Policy::Fifo, priority, cpus)
}

/// [`apply`] with the scheduling class given. A thread that already runs
/// at `policy` and `priority` (set by systemd's `CPUSchedulingPolicy=` before
/// it dropped the rights to set it) is left as it is.
pub fn apply_policy(policy: Policy, priority: Option<u8>, cpus: Option<&CpuList>) -> Result<(), RealtimeError> {
    if let Some(cpus) = cpus {
        let mut set = nix::sched::CpuSet::new();
        for &cpu in &cpus.0 {
            set.set(cpu).map_err(|e| RealtimeError::Affinity { cpus: cpus.clone(), cause: e.into() })?;
        }
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
            .map_err(|e| RealtimeError::Affinity { cpus: cpus.clone(), cause: e.into() })?;
    }
    if let Some(priority) = priority {
        if !(1..=99).contains(&priority) {
            return Err(RealtimeError::Priority(priority));
        }
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: both read the calling thread's (pid 0) scheduling; the
        // second writes into `param`, which outlives the call.
        let already = unsafe {
            libc::sched_getscheduler(0) == policy.raw()
                && libc::sched_getparam(0, &mut param) == 0
                && param.sched_priority == i32::from(priority)
        };
        if !already {
            let param = libc::sched_param { sched_priority: i32::from(priority) };
            // SAFETY: sched_setscheduler reads `param` and changes only the
            // scheduling of the calling thread (pid 0).
            let rc = unsafe { libc::sched_setscheduler(0, policy.raw(), &param) };
            if rc != 0 {
                return Err(RealtimeError::Fifo { policy, priority, cause: io::Error::last_os_error() });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_lists() {
        assert_eq!("1".parse::<CpuList>().unwrap().0, vec![1]);
        assert_eq!("0,2-3".parse::<CpuList>().unwrap().0, vec![0, 2, 3]);
        assert_eq!("3-3,1".parse::<CpuList>().unwrap().to_string(), "1,3");
        for bad in ["", "a", "3-1", "1,,2", "99999"] {
            assert!(bad.parse::<CpuList>().is_err(), "{bad}");
        }
    }

    #[test]
    fn refuses_out_of_range_priorities() {
        assert!(matches!(apply(Some(0), None), Err(RealtimeError::Priority(0))));
        assert!(matches!(apply(Some(100), None), Err(RealtimeError::Priority(100))));
    }
}
