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
//! - `net::rti` and `net::peer` speak the federated protocol of `hprm-rti`
//!   (LF's reactor-c message set) over tuned sockets with pre-allocated
//!   frame buffers (`net::socket`). Their messages reach the scheduler's
//!   `inbox` through `net::source`: read by the scheduler itself while it
//!   polls, by a reader thread per connection while it sleeps or is busy.
//! - [`payload`] turns port values into MessagePack with large buffers
//!   out-of-band in the shared-memory object store (`hprm-store`).
//! - [`Program::bank`] (`bank`) declares N members of one shape, and
//!   [`Program::connect_ports`] links lists of ports (banks, [`Multiport`]s,
//!   broadcast): shorter ways to write the same graph.
//! - [`run_federate`] runs one federate; [`launch`] starts a whole
//!   program (store, RTI, one process per federate), which is what a
//!   program binary's `main` does via [`Program::main`]. (The systemd
//!   units that run one as services are `hprm-cli`'s: `hprm deploy`.)
//!
//! Tags and delays come from `hprm_rti::tag`, the one place for their
//! arithmetic.
//!
//! ## Layers
//!
//! Modules import in one direction, bottom to top; a module uses its own
//! layer and lower ones only (`tests/layers.rs` checks every `crate::`
//! path against this table):
//!
//! 0. **Foundations**: `error`, `sync` (locks that do not poison),
//!    `clock`, `trace`, [`payload`], [`log`], [`loss`], [`figures`] (the
//!    counters and histograms the runtime keeps for dashboards).
//! 1. **Ids and values**: `ids` (program ids, typed handles such as
//!    [`Input`], [`Value`]), [`manifest`] (a program as plain data),
//!    [`realtime`] (a federate's priority and CPUs) and `decisions` (a
//!    replay's recorded deadline decisions).
//! 2. **The inbox**: what reaches the scheduler from other threads. It
//!    knows its connections only through a trait they implement
//!    (`inbox::PolledSource`), so the network above can feed it.
//! 3. **A reaction's context**: [`Ctx`] (`context`).
//! 4. **The graph**: `program`, `level`, `manifest::build`.
//! 5. **The outside world**: `net/` (`socket`, `source`, `rti`, `peer`,
//!    `clock_sync`), `signal`, [`status`], [`tap`], [`record`].
//! 6. **The scheduler**: one federate's event loop.
//! 7. **Builders and running**: `reactor` (the [`ReactorBuilder`] and
//!    `Program::reactor`), `bank` ([`Program::bank`]), `federate` ([`run_federate`]), [`launch`], and
//!    this root.
//!
//! Two places differ from the first sketch of this order (graph, then
//! inbox, then network, then context and scheduler). The graph holds
//! reaction bodies, and a body takes a `&mut Ctx`, whose physical-action
//! handle pushes into the inbox: so `context` and `inbox` sit below the
//! graph, and nothing in either needs more of a program than ids. And the
//! builder methods of [`Program`] (`reactor`, `reactor_mut`) live with the
//! builder in `reactor`, above the graph they fill, while the typed
//! handles they return are ids, which the context takes.

mod bank;
mod clock;
mod context;
mod decisions;
mod error;
mod federate;
pub mod figures;
pub mod hosts;
mod ids;
mod inbox;
pub mod launch;
mod level;
pub mod loss;
/// How HPRM processes log: [`log::ansi`] decides whether a log may use colour.
pub mod log {
    pub use hprm_sd_notify::{ansi, ansi_for};
}
pub mod manifest;
mod net;
pub mod payload;
mod program;
mod reactor;
pub mod realtime;
pub mod record;
mod scheduler;
mod signal;
pub mod status;
mod sync;
pub mod tap;
pub mod trace;

pub use bank::{Bank, Link, Member, Placement};
pub use context::{Ctx, PhysicalScheduler};
pub use error::{NodeError, ProgramError};
pub use federate::{run_federate, RunOptions, DEFAULT_SPIN};
pub use hprm_rti::tag::{Delay, Tag};
pub use hprm_store::Backpressure;
pub use ids::{
    DecodeFn, EncodeFn, FederateId, Input, LogicalAction, Multiport, Output, PhysicalAction, PortValue, ReactionId,
    ReactorId, Shutdown, Startup, Timer, TriggerId, Value,
};
pub use net::rti::RtiConfig;
pub use net::socket::LocalTransport;
pub use program::{Coordination, Program};
pub use reactor::{ReactionBuilder, ReactorBuilder};
pub use scheduler::RunReport;

// The Rust examples of the README and the book are compiled by `cargo test
// --doc` (their code blocks are `rust,no_run`: they launch programs or
// reach a running store), so an example that drifts from the API fails
// the tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;
#[cfg(doctest)]
#[doc = include_str!("../../docs/src/runtime.md")]
struct RuntimePageExamples;
#[cfg(doctest)]
#[doc = include_str!("../../docs/src/store.md")]
struct StorePageExamples;
