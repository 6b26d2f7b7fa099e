//! Real-time placement of a federate: a SCHED_FIFO/RR priority for the
//! threads that run its reactions, and the CPUs it may run on.
//!
//! A control loop on a loaded robot computer misses its deadlines not for
//! lack of CPU but for being preempted; the kernel's answer is a real-time
//! class and dedicated CPUs. A federate applies its [`Realtime`] itself, at
//! the start of [`run_federate`](crate::run_federate), before it starts any
//! thread: the scheduler's thread, its workers and its socket readers
//! inherit it, so messages are read at the priority they are handled at.
//! That covers every way a federate runs (under `hprm launch`, under
//! systemd, by hand).
//!
//! Polling at a real-time priority is bounded. A federate's scheduler polls
//! its inbox for at most its spin (`DEFAULT_SPIN`, 200 us, or
//! `HPRM_SPIN_US`) before it sleeps, at any priority; so does the RTI
//! (`--spin-us`) and the store client's wait for a reply
//! (`hprm_store::client::DEFAULT_SPIN`). Each poll is followed by
//! `sched_yield()`, which at SCHED_FIFO puts the thread behind the other
//! runnable threads of its priority: the socket readers, the RTI and the
//! store, when placed at the same priority, run while it polls. Normal
//! threads of its CPU may not run while it polls (SCHED_FIFO outranks
//! them, though a kernel may lend them some time). Between sparse messages
//! they lose at most the bound per message, because the spin ends at the
//! first message or at the bound and the thread then sleeps in the kernel
//! until a message wakes it (a wake-up a real-time thread feels at once).
//! Under a steady stream of messages closer together than the bound the
//! thread never sleeps, and normal threads of its CPU keep only what the
//! kernel's real-time throttling guarantees them (`sched_rt_runtime_us`),
//! as beside a real-time thread busy with its reactions; a normal-priority
//! store or RTI on that CPU waits up to the bound whenever it wakes. The
//! remedies are placement's own (the store and the RTI at the same
//! priority, or CPUs of the federate's own) or `HPRM_SPIN_US=0`, which
//! docs/src/deployment.md gives. An unbounded spin would be another thing:
//! it would hold the CPU for as long as no message came, and a federate
//! that waits for a normal-priority process on its CPU would wait forever.
//!
//! Its TCP connections (to the RTI and to peers on other hosts) can carry
//! marks too, `SO_PRIORITY` and DSCP ([`SocketMarks`]), so that queues in
//! the host and in the network favour its messages over bulk traffic. The
//! marks are the process's: [`Realtime::apply`] checks them on a throwaway
//! socket and installs them, and every TCP connection the federate makes
//! or accepts afterwards gets them (`connection_marks`). A process runs
//! one federate (launcher, systemd); one that runs several in turn (tests)
//! marks with the last one's.
//!
//! No silent fallback: a federate that may not take its priority, CPUs or
//! marks stops with an error that says what it needs, unless it asked for
//! `best_effort`, which logs a warning and runs without them.

use std::sync::RwLock;

use hprm_realtime::apply_policy;
pub use hprm_realtime::{CpuList, Dscp, Policy, SocketMarks};

pub use crate::error::PlacementError;

/// Where and how urgently a federate runs ([`Program::realtime`](crate::Program::realtime),
/// or `priority`, `policy`, `cpus` and `best_effort` of a manifest's federate).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Realtime {
    /// The real-time priority, 1 (lowest) to 99.
    pub priority: Option<u8>,
    /// SCHED_FIFO (default) or SCHED_RR; only with a priority.
    pub policy: Policy,
    /// The CPUs its threads may run on.
    pub cpus: Option<CpuList>,
    /// `SO_PRIORITY` and DSCP of its TCP connections.
    pub marks: SocketMarks,
    /// Run as a normal process, with a warning, when the rights to apply
    /// these are missing (default: stop with an error).
    pub best_effort: bool,
}

/// The marks this process's TCP connections get (see the module's
/// documentation); unmarked until a federate applies its placement.
static MARKS: RwLock<SocketMarks> = RwLock::new(SocketMarks { priority: None, dscp: None });

/// The marks for a TCP connection this process makes or accepts now.
pub(crate) fn connection_marks() -> SocketMarks {
    *MARKS.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Realtime {
    /// A priority, CPUs or socket marks are asked for.
    pub fn is_set(&self) -> bool {
        self.priority.is_some() || self.cpus.is_some() || self.marks.is_set()
    }

    /// Applies this placement to the calling thread and the threads it
    /// starts from now on, and its marks to the process's TCP connections
    /// from now on. Returns whether a real-time priority is in force.
    pub fn apply(&self, federate: &str) -> Result<bool, PlacementError> {
        let marks = match self.marks.check() {
            Ok(()) => self.marks,
            Err(source) if self.best_effort => {
                tracing::warn!(federate, "{source}; its connections stay unmarked (best_effort)");
                SocketMarks::default()
            }
            Err(source) => return Err(PlacementError { federate: federate.to_string(), source }),
        };
        *MARKS.write().unwrap_or_else(std::sync::PoisonError::into_inner) = marks;
        if marks.is_set() {
            tracing::info!(federate, priority = ?marks.priority, dscp = ?marks.dscp.map(|d| d.0), "its TCP connections are marked");
        }
        if self.priority.is_none() && self.cpus.is_none() {
            return Ok(false);
        }
        match apply_policy(self.policy, self.priority, self.cpus.as_ref()) {
            Ok(()) => {
                tracing::info!(
                    federate,
                    priority = ?self.priority,
                    policy = self.policy.name(),
                    cpus = %self.cpus.as_ref().map(ToString::to_string).unwrap_or_default(),
                    "real-time placement applied"
                );
                Ok(self.priority.is_some())
            }
            Err(source) if self.best_effort => {
                tracing::warn!(federate, "{source}; running without real-time placement (best_effort)");
                Ok(false)
            }
            Err(source) => Err(PlacementError { federate: federate.to_string(), source }),
        }
    }
}
