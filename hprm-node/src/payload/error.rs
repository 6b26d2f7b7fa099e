//! [`PayloadError`]: everything that can go wrong encoding or decoding a
//! payload. Each message is one sentence naming what was wrong and what to
//! do, because these reach users in federate logs and CLI output.

use std::path::PathBuf;
use std::time::Duration;

use hprm_store::{ErrorCode, ObjectId};

/// An error of the payload codec ([`super::Encoder`], [`super::Decoder`],
/// [`super::Buffer`], [`super::BufferDescriptor`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// A buffer at or over the threshold must go out-of-band, and there is
    /// no store to put it in.
    #[error(
        "a {nbytes}-byte buffer is at or over the {threshold}-byte out-of-band threshold, so it must go through the object store, \
         but this node has no store configured; start one (`hprm-store --socket PATH --memory 1G`) and give the node its socket, \
         or raise the threshold"
    )]
    NoStoreForBuffer { nbytes: usize, threshold: usize },
    /// The in-band message is too large for a frame, and there is no store
    /// to spill it into.
    #[error(
        "the encoded message is {nbytes} bytes, more than the {max} bytes that travel in-band, so it must be spilled into the object store, \
         but this node has no store configured; start one (`hprm-store --socket PATH --memory 1G`) and give the node its socket"
    )]
    NoStoreForMessage { nbytes: usize, max: usize },
    /// A loan is memory in the store; without one there is nothing to lend.
    #[error(
        "cannot loan a {nbytes}-byte buffer: loans are written straight into the object store, and this node has no store configured; \
         start one (`hprm-store --socket PATH --memory 1G`) and give the node its socket"
    )]
    NoStoreForLoan { nbytes: usize },
    /// A received message references store objects, and this node has no
    /// store to read them from.
    #[error(
        "the message references {count} object(s) in the object store, but this node has no store configured; \
         configure the socket of the store its sender uses (same host)"
    )]
    NoStoreForReceive { count: usize },
    /// The store's socket is configured but the daemon cannot be reached.
    #[error("cannot use the object store at {path}: {source}", path = path.display())]
    Connect { path: PathBuf, source: hprm_store::Error },
    /// The store daemon this node was connected to died (or dropped this
    /// node's connection): the value is lost. The node reconnects by itself
    /// once a store listens on the socket again.
    #[error(
        "the object store went away ({reason}), so this value is lost; values go through it again once it is restarted \
         (the launcher and systemd do that; this node reconnects by itself): see the store's log for why it died"
    )]
    StoreLost { reason: String },
    /// The store has no room for a new object (all of it is live data).
    #[error(
        "the object store has no room for a {nbytes}-byte object: {message} (how long a send waits for room is \
         its output's backpressure policy, e.g. block:5s)"
    )]
    StoreFull { nbytes: u64, message: String },
    /// Referenced objects did not appear in the store in time.
    #[error(
        "{} object(s) referenced by the message were not in the object store within {waited:?} ({}): the sender may have failed \
         before sealing them, or they were evicted after their delivery TTL ran out (raise hprm-store's --delivery-ttl)",
        missing.len(), list_ids(missing)
    )]
    NotInStore { missing: Vec<ObjectId>, waited: Duration },
    /// Referenced objects of another host's store were still on their way
    /// when this host's link lost that host.
    #[error(
        "host {host} is lost (this host's hprm-link has not heard from it within HPRM_HOST_TIMEOUT), so {} object(s) of this value \
         sent from there cannot arrive ({}; waited {waited:?}): the value is lost; check the network between the hosts \
         (values flow again once the link is back)",
        missing.len(), list_ids(missing)
    )]
    HostLost { host: String, missing: Vec<ObjectId>, waited: Duration },
    /// Referenced objects of another host's store were not pushed here,
    /// and this host's link, asked to fetch them, heard from that host
    /// that it no longer has them.
    #[error(
        "{} object(s) of this value sent from host {host} did not reach this host and cannot be fetched from there any \
         more ({}; {reason}; waited {waited:?}): the value is lost; a push dropped by the sending host's link queue \
         (HPRM_LINK_QUEUE) or failed is kept for a fetch only for the link's --fetch-window",
        missing.len(), list_ids(missing)
    )]
    Gone { host: String, reason: String, missing: Vec<ObjectId>, waited: Duration },
    /// Any other failure of a store operation.
    #[error("object store {op} failed: {source}")]
    Store { op: &'static str, source: hprm_store::Error },
    /// A store object is referenced, but the value is decoded outside a
    /// [`super::Decoder`], which alone can fetch it.
    #[error(
        "buffer {id} is in the object store, but this value is being deserialized outside hprm_node::payload::Decoder, \
         which alone can fetch it; decode payloads with Decoder::decode"
    )]
    NeedsDecoder { id: ObjectId },
    /// Ext type 3: only Python can unpickle.
    #[error(
        "the message holds a pickled Python object ({len} bytes), which can only be read by Python federates; \
         to reach Rust federates, send numpy arrays, bytes, or plain values (dicts, lists, strings, numbers)"
    )]
    Pickled { len: usize },
    /// The bytes are not a well-formed payload.
    #[error("malformed payload: {detail}; are sender and receiver using the same payload format?")]
    Malformed { detail: String },
    /// The bytes are a well-formed payload, but not of the expected type.
    #[error(
        "the payload does not match the type {type_name}: {message}; do sender and receiver agree on the port's type?"
    )]
    Mismatch { type_name: &'static str, message: String },
    /// The value's own `Serialize` implementation failed.
    #[error("cannot serialize the value: {message}")]
    Serialize { message: String },
    /// Not a dtype string this codec handles.
    #[error(
        "`{text}` is not a supported dtype: expected numpy's dtype.str, a byte order (<, >, |) then a kind (b i u f c m M S U V) \
         and an item size, like `<f4` or `|u1` (object arrays are pickled, not sent as buffers)"
    )]
    Dtype { text: String },
    /// The buffer holds elements of another type than asked for.
    #[error("the buffer holds {found} elements, not {expected}; read it as its own dtype")]
    DtypeMismatch { expected: String, found: String },
    /// Shape and byte length disagree.
    #[error("a shape of {shape:?} of {dtype} needs {needed} bytes, but the buffer holds {nbytes}")]
    Shape { dtype: String, shape: Vec<usize>, needed: String, nbytes: usize },
    /// A non-contiguous buffer; HPRM buffers are C-contiguous.
    #[error(
        "a non-contiguous buffer (shape {shape:?}, strides {strides:?}) reached Rust, which reads C-contiguous buffers only; \
         the sender must make it contiguous (numpy: np.ascontiguousarray)"
    )]
    Strided { shape: Vec<usize>, strides: Vec<i64> },
    /// The buffer cannot be described in MessagePack (an ext or bin is at
    /// most 4 GiB).
    #[error("a {nbytes}-byte buffer cannot travel inline (MessagePack limits it to 4 GiB); send it through an Encoder with a store")]
    TooLargeInline { nbytes: usize },
    /// An Arrow IPC stream (ext 5) that the arrow crates cannot read or
    /// write (the `arrow` feature).
    #[error(
        "Arrow IPC stream: {detail}; the sender must write one schema then record batches (pyarrow.ipc.new_stream)"
    )]
    Arrow { detail: String },
}

impl PayloadError {
    /// Whether the value was lost because the store died
    /// ([`PayloadError::StoreLost`]).
    pub fn is_store_lost(&self) -> bool {
        matches!(self, PayloadError::StoreLost { .. })
    }

    /// Shorthand for [`PayloadError::Malformed`].
    pub(crate) fn malformed(detail: impl Into<String>) -> PayloadError {
        PayloadError::Malformed { detail: detail.into() }
    }

    /// Classifies a failed store operation: a full store and a timed-out
    /// get deserve their own advice.
    pub fn from_store(op: &'static str, nbytes: u64, source: hprm_store::Error) -> PayloadError {
        match source {
            hprm_store::Error::Rejected { code: ErrorCode::OutOfMemory, message, .. } => {
                PayloadError::StoreFull { nbytes, message }
            }
            hprm_store::Error::Timeout { missing, waited } => PayloadError::NotInStore { missing, waited },
            hprm_store::Error::Disconnected { reason, .. } => PayloadError::StoreLost { reason },
            source => PayloadError::Store { op, source },
        }
    }
}

fn list_ids(ids: &[ObjectId]) -> String {
    const SHOWN: usize = 3;
    let mut s: Vec<String> = ids.iter().take(SHOWN).map(ToString::to_string).collect();
    if ids.len() > SHOWN {
        s.push(format!("and {} more", ids.len() - SHOWN));
    }
    s.join(", ")
}
