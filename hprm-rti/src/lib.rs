//! # hprm-rti: coordination of HPRM federates
//!
//! HPRM programs are federations: one process per federate, exchanging
//! tagged messages. In centralized coordination, the RTI (run-time
//! infrastructure) decides when each federate may advance its logical time,
//! so that every federate processes events in one global tag order and the
//! program behaves the same on every run. This crate holds what the RTI daemon
//! and the federates share, following Lingua Franca so that HPRM federates and
//! LF federates can use either RTI:
//!
//! - [`tag`]: tags, delays and their arithmetic (the one place for it).
//! - [`grant`]: the centralized grant algorithm, a pure state machine
//!   ([`grant::Coordinator`]) from NET/LTC/message events to TAG/PTAG/DNET notices.
//! - [`wire`]: the message set and byte layouts of LF's federated protocol,
//!   with an incremental decoder that bounds what a peer can make it allocate.
//! - [`frames`]: the receiving end of a stream ([`frames::FrameBuffer`]):
//!   reads land in one buffer, messages are decoded where they lie.
//! - [`figures`]: latency histograms, and what the RTI publishes for
//!   dashboards.
//! - [`auth`]: HMAC-SHA256 authentication of federates.
//! - [`endpoint`]: the Unix sockets beside the TCP ports, for clients on
//!   the server's host.
//! - [`liveness`]: TCP keepalive and user timeout, so that connections
//!   between hosts notice a lost host (the protocol has no heartbeat).
//!
//! The protocol it follows is described in `docs/lf-federated-protocol.md`.
//! The `hprm-rti` daemon (`src/bin/hprm-rti/`) serves it over TCP (and a
//! Unix socket for federates on its host):
//! handshake, initial clock synchronization, start-time agreement,
//! centralized grants, relaying of small tagged messages, the stop protocol.

pub mod auth;
pub mod endpoint;
pub mod figures;
pub mod frames;
pub mod grant;
pub mod liveness;
pub mod tag;
pub mod wire;

pub use tag::{Delay, Tag, FOREVER, NEVER};
