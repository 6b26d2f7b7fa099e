//! The network: the federate's connections to the RTI and to its peers.
//!
//! - `socket`: tuned TCP and Unix sockets, frames read and written with
//!   pre-allocated buffers;
//! - `source`: an inbound connection, read by the scheduler while it polls
//!   and by a reader thread the rest of the time; it implements the
//!   inbox's [`PolledSource`](crate::inbox::PolledSource), and turns
//!   messages into the inbox's items (`Receiving`);
//! - `rti`: the federate side of the RTI protocol (handshake, then a
//!   source);
//! - `peer`: peer-to-peer connections (decentralized coordination);
//! - `clock_sync`: runtime clock synchronization with the RTI.
//!
//! The network sits above the inbox it feeds and below the scheduler that
//! writes to it; nothing here knows the program's graph beyond ids.

pub(crate) mod clock_sync;
pub(crate) mod peer;
pub(crate) mod rti;
pub(crate) mod socket;
pub(crate) mod source;
