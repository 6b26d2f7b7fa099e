//! Errors of the runtime, one sentence each: what went wrong and what to do.

use std::fmt;

/// Problems in a program's definition, all of them at once.
#[derive(Debug, Clone)]
pub struct ProgramError {
    pub program: String,
    pub problems: Vec<String>,
}

impl fmt::Display for ProgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "program {:?} is not valid:", self.program)?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ProgramError {}

/// Why a federate could not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Program(#[from] ProgramError),
    #[error("no federate named {name:?} in program {program:?}; its federates are: {known}")]
    UnknownFederate { name: String, program: String, known: String },
    #[error("could not reach the RTI at {addr} within {secs} s ({source}); start it with `hprm-rti --federates N --port P` and pass its address")]
    RtiUnreachable { addr: String, secs: u64, source: std::io::Error },
    #[error("the RTI at {addr} rejected federate {federate}: {reason}")]
    Rejected { addr: String, federate: String, reason: String },
    #[error("the RTI at {addr} did not authenticate: its answer does not match the shared key; check --auth-key-file on both sides")]
    RtiAuth { addr: String },
    #[error("protocol error with {peer}: {detail}")]
    Protocol { peer: String, detail: String },
    #[error("lost the connection to the RTI: {0}; the federation cannot go on without it")]
    RtiLost(String),
    #[error("could not connect to federate {peer} for peer-to-peer messages: {detail}")]
    Peer { peer: String, detail: String },
    #[error("reaction {reaction} panicked: {message}")]
    ReactionPanicked { reaction: String, message: String },
    /// A reaction called [`Ctx::fail`](crate::Ctx::fail).
    #[error("reaction {reaction} failed: {message}")]
    ReactionFailed { reaction: String, message: String },
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("{0}")]
    Launch(String),
    /// A recording (`--record`) or a replay (`hprm replay`) cannot go on.
    #[error("{0}")]
    Record(String),
    #[error(transparent)]
    Placement(#[from] PlacementError),
}

/// A federate could not take its real-time placement
/// ([`Realtime`](crate::realtime::Realtime)).
#[derive(Debug, thiserror::Error)]
#[error("federate {federate}: {source}; or let it run without (best_effort = true in the manifest, best_effort=True in Python)")]
pub struct PlacementError {
    pub federate: String,
    #[source]
    pub source: hprm_realtime::RealtimeError,
}

impl NodeError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> NodeError {
        NodeError::Io { context: context.into(), source }
    }
}
