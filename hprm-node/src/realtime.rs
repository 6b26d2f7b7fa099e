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
//! Busy polling and real-time priority do not mix: a SCHED_FIFO thread that
//! polls keeps every normal thread of its CPU off it, the store daemon and
//! the federates it waits for included. So a federate with a priority does
//! not poll its inbox: it sleeps at once and is woken by the sender, which a
//! real-time thread feels at once (it preempts whatever normal thread runs).
//! What still spins is bounded: the store client's wait for a reply
//! (`hprm_store::client::DEFAULT_SPIN`), which yields on every turn.
//!
//! No silent fallback: a federate that may not take its priority or CPUs
//! stops with an error that says what it needs, unless it asked for
//! `best_effort`, which logs a warning and runs as a normal process.

use hprm_realtime::apply_policy;
pub use hprm_realtime::{CpuList, Policy};

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
    /// Run as a normal process, with a warning, when the rights to apply
    /// these are missing (default: stop with an error).
    pub best_effort: bool,
}

impl Realtime {
    /// A priority or CPUs are asked for.
    pub fn is_set(&self) -> bool {
        self.priority.is_some() || self.cpus.is_some()
    }

    /// Applies this placement to the calling thread and the threads it
    /// starts from now on. Returns whether a real-time priority is in force
    /// (the caller then does not busy-poll).
    pub fn apply(&self, federate: &str) -> Result<bool, PlacementError> {
        if !self.is_set() {
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
