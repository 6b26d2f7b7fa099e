//! # hprm-node: the federate runtime
//!
//! HPRM programs are graphs of *reactors* grouped into *federates* (one
//! process each). This crate runs them with Lingua Franca semantics:
//!
//! - [`Program`] (`program`) holds the graph; [`ReactorBuilder`]
//!   (`reactor`) declares a reactor's ports, timers, actions and reactions,
//!   returning typed handles ([`Input`], [`Output`], [`Timer`],
//!   [`LogicalAction`], [`PhysicalAction`]).
//! - [`Ctx`] (`context`) is what a reaction body sees: values present at
//!   its tag, and the effects it records (set, schedule, loan, stop).
//! - `scheduler` is one federate's event loop: tags in order, reactions in
//!   levels (`level`), coordination with the RTI (centralized) or waits of
//!   a safe-to-process offset (decentralized), real-time or fast.
//! - `rti` and `peer` speak the federated protocol of `hprm-rti` (LF's
//!   reactor-c message set) over tuned sockets with pre-allocated frame
//!   buffers (`socket`). Their messages reach the scheduler's `inbox`
//!   through `source`: read by the scheduler itself while it polls, by a
//!   reader thread per connection while it sleeps or is busy.
//! - [`payload`] turns port values into MessagePack with large buffers
//!   out-of-band in the shared-memory object store (`hprm-store`).
//! - [`run_federate`] runs one federate; [`launch`] starts a whole
//!   program (store, RTI, one process per federate), which is what a
//!   program binary's `main` does via [`Program::main`]. (The systemd
//!   units that run one as services are `hprm-cli`'s: `hprm deploy`.)
//!
//! Tags and delays come from `hprm_rti::tag`, the one place for their
//! arithmetic.

mod clock;
mod clock_sync;
mod context;
mod error;
mod federate;
mod inbox;
pub mod launch;
mod level;
/// How HPRM processes log: [`log::ansi`] decides whether a log may use colour.
pub mod log {
    pub use hprm_sd_notify::{ansi, ansi_for};
}
pub mod manifest;
pub mod payload;
mod peer;
mod program;
mod reactor;
mod rti;
mod scheduler;
mod signal;
mod socket;
mod source;
mod sync;
pub mod status;
pub mod tap;
pub mod trace;

pub use context::{Ctx, PhysicalScheduler};
pub use error::{NodeError, ProgramError};
pub use federate::{run_federate, RunOptions, DEFAULT_SPIN};
pub use hprm_rti::tag::{Delay, Tag};
pub use program::{Coordination, DecodeFn, EncodeFn, FederateId, PortValue, Program, ReactionId, ReactorId, TriggerId, Value};
pub use reactor::{Input, LogicalAction, Output, PhysicalAction, ReactionBuilder, ReactorBuilder, Shutdown, Startup, Timer};
pub use socket::LocalTransport;
pub use rti::RtiConfig;
pub use scheduler::RunReport;
