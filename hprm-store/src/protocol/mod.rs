//! The store's wire protocol, in one place.
//!
//! - [`frame`]: the 8-byte header, size limits, and the receive buffer.
//! - [`message`]: requests, replies and notifications as Rust types, and their
//!   encoding as flatbuffers tables (schema: `hprm-store/schema/store.fbs`).
//! - [`handshake`]: the daemon's first frame, which carries the arena's file
//!   descriptor (SCM_RIGHTS).
//!
//! A connection: the daemon sends Hello (+ arena fd); the client then sends
//! requests, each with a `seq` that its reply echoes (replies to a `get` that
//! waits may overtake later requests); `seq` 0 means "no reply" (if such a
//! request fails, the daemon still sends its Error, with `seq` 0, for the
//! client to report late). After Subscribe, the daemon also pushes
//! Notification frames with `seq` 0. Small objects skip the create round
//! trip: Reserve hands the client blocks in advance, and Publish
//! (one-way) turns a filled block into a sealed object. A receiver that
//! learnt an object's placement from a message takes it with a one-way
//! Claim (version 2) instead of a Get it would wait for.

pub mod frame;
pub mod handshake;
pub mod message;

#[allow(clippy::all, unused_imports, dead_code, non_snake_case, non_camel_case_types, unsafe_op_in_unsafe_fn, mismatched_lifetime_syntaxes)]
#[rustfmt::skip]
mod wire_generated;

pub(crate) use wire_generated::hprm::store::wire;
