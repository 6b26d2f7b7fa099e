//! Payloads: adaptive, out-of-band serialization of port values.
//!
//! A port value is any Rust type with serde's `Serialize`/`Deserialize`. It
//! travels as one MessagePack value (rmp-serde, structs as maps with field
//! names, so Python reads it as a dict). Large buffers do not travel in the
//! message: each goes once into the shared-memory object store
//! (`hprm-store`) and only a reference moves; receivers map the object
//! zero-copy. Small buffers travel inline, where a store round trip would
//! cost more than the copy.
//!
//! - [`Buffer`]: an n-dimensional byte buffer with a numpy [`Dtype`]; the
//!   type of fields that may go out-of-band, and zero-copy when received.
//!   [`oob`] does the same for plain `Vec<T>` fields (copied on receipt).
//! - [`Encoder`]: value → payload bytes. It applies the policy: a buffer of
//!   [`Encoder::threshold`] bytes or more ([`DEFAULT_THRESHOLD`], 64 KiB)
//!   goes into the store, smaller ones inline; a message still over
//!   [`MAX_INLINE`] is itself moved into the store ("spilled"). Containers
//!   are walked by serde itself, so a struct holding images and scalars
//!   sends the scalars in-band and the images out-of-band.
//!   [`Encoder::loan`] lends a [`Loan`]: a buffer written in place in the
//!   store, so producing a camera frame costs no copy at all.
//! - [`Decoder`]: payload bytes → value; store references become
//!   [`Buffer`]s backed by the store object.
//! - [`StoreLink`]: the lazily connected store both share.
//! - [`BufferDescriptor`], [`SpilledMessage`]: the extension values below,
//!   public for the Python SDK, which writes and reads the MessagePack
//!   itself and applies the same policy through [`EncodeSession`]
//!   ([`Encoder::session`]) and [`Decoder::take_spilled`],
//!   [`Decoder::references`] and [`Decoder::take`].
//! - `Arrow` (the `arrow` feature): Arrow record batches (ext 5),
//!   zero-copy over store memory.
//! - [`PayloadError`]: every failure, as a sentence saying what to do.
//!
//! ```no_run
//! use hprm_node::payload::{Buffer, Decoder, Encoder, StoreLink, DEFAULT_GET_TIMEOUT, DEFAULT_THRESHOLD};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Frame {
//!     stamp: u64,
//!     pixels: Buffer, // 480 x 640 x 3: out-of-band
//! }
//!
//! let store = StoreLink::new(Some("/run/hprm/store.sock".into()));
//! let encoder = Encoder::new(store.clone(), DEFAULT_THRESHOLD);
//! let pixels = Buffer::from_vec(vec![0x80; 480 * 640 * 3]).with_shape(&[480, 640, 3])?;
//! let bytes = encoder.encode(&Frame { stamp: 1, pixels }, 2)?; // for 2 receivers
//! assert!(bytes.len() < 100);
//!
//! // In each receiver:
//! let frame: Frame = Decoder::new(store, DEFAULT_GET_TIMEOUT).decode(&bytes)?;
//! assert!(frame.pixels.is_shared()); // a view of the store object
//! # Ok::<(), hprm_node::payload::PayloadError>(())
//! ```
//!
//! # Deliveries
//!
//! [`Encoder::encode`] takes the number of receivers the bytes will be sent
//! to, and creates every store object of the message with that many
//! expected deliveries: the store keeps the object (it cannot be evicted)
//! until each receiver has taken and released it, or the store's delivery
//! TTL runs out. A receiver takes every object its message references (even
//! those its type ignores) and releases each when the last clone of its
//! [`Buffer`] is dropped; so a receiver holding a buffer keeps the memory
//! alive, and a receiver that is done frees it. Sending a received buffer
//! on (an echo, a relay) sends the same object, never a copy: the store is
//! told of the new receivers ("redeliver"); a [`Loan`]'s buffer is sent the
//! first time with the deliveries paid when it was loaned.
//!
//! # Wire format
//!
//! Version 1.1 (version 1 plus the data offset in store locations). A
//! payload is one MessagePack value, written by rmp-serde with structs as
//! maps keyed by field name. Buffers appear in it as extension
//! values; integers in the codec's own structures always take their
//! smallest encoding, and extension values the smallest header (`fixext`
//! 1/2/4/8/16 when the data has that length, else `ext 8/16/32`), as
//! msgpack-python writes them, so both SDKs produce identical bytes.
//!
//! **Ext type 1, buffer descriptor.** The data is a MessagePack array of 5:
//!
//! ```text
//! [ dtype:    str                      numpy's dtype.str: "<f4", "|u1", "<M8[ns]" (never "O", never structured)
//!   shape:    array of uint            elements per dimension, outermost first (at most 64)
//!   strides:  nil | array of int       byte strides per dimension; nil = C-contiguous
//!   nbytes:   uint                     length of the bytes = itemsize * product(shape) when strides is nil
//!   location: bin                      the bytes inline (exactly nbytes of them)
//!           | [ bin(20) ]              a 1-element array: the store object holding exactly nbytes bytes
//!           | [ bin(20), offset: uint, arena: uint ]
//!                                      the same, and where the object's data lies: its offset in the
//!                                      arena of the store whose arena id (`StoreClient::arena_id`) is arena
//! ]
//! ```
//!
//! Writers give the offset whenever they know it (always, from version
//! 1.1: every object they send is one they created or hold). A receiver
//! connected to that same arena then maps the bytes at once from its own
//! mapping and claims its reference with a one-way message, instead of a
//! `get` it would wait for (see "Store objects" below); without the offset,
//! or with another arena's id, it gets the object by id. Readers of version
//! 1 refuse the 3-element form, so every federate of a program must be at
//! least 1.1.
//!
//! The dtype is always a plain one ([`Dtype`]'s grammar): numpy's
//! `dtype.str` of a structured dtype (`|V12`) would lose its fields, so
//! Python sends structured and record arrays pickled (ext 3), their bytes
//! still out-of-band as the pickle's buffers; a plain `|V` dtype (no
//! fields) is an ordinary buffer.
//!
//! Writers always send C-contiguous buffers with strides nil; Rust readers
//! accept strides only when they describe the C-contiguous layout (numpy
//! may write explicit strides for it), and refuse any other. Example: the
//! map `{"a": <the u8 buffer [1, 2, 3], inline>}` is
//!
//! ```text
//! 81 a1 61                     map of 1, key "a"
//! c7 0e 01                     ext 8: 14 data bytes, type 1
//! 95 a3 7c 75 31 91 03 c0 03   [ "|u1", [3], nil, 3,
//! c4 03 01 02 03                 bin [1 2 3] ]
//! ```
//!
//! **Ext type 4, byte string.** The same data as ext 1, with dtype `|u1`
//! and one dimension: a Python `bytes`, `bytearray` or `memoryview` at or
//! over the threshold (smaller ones are plain MessagePack bin). The type
//! is what tells a Python receiver to give back bytes (a read-only
//! `memoryview` over the store object, or `bytes` when copying) rather than
//! a numpy `uint8` array, which is what ext 1 of `|u1` gives. Rust reads it
//! exactly as ext 1 (a [`Buffer`], or a `Vec<u8>` through [`oob`]); Rust
//! itself always writes ext 1.
//!
//! **Ext type 5, Arrow IPC stream.** The same data as ext 4: one buffer
//! holding an Arrow IPC stream (schema, then record batches), out-of-band
//! at or over the threshold like any buffer. The schema's metadata key
//! `hprm.kind` says what the sender had: `table`, `batch`, `array` (one
//! column named `values`) or `chunked` (the same, a chunked array).
//! Python receivers get that pyarrow object back over the received bytes
//! (zero-copy when stored). Rust reads the stream's bytes as a [`Buffer`],
//! or, with the `arrow` feature, as `Arrow`: record batches whose buffers
//! are slices of the store object (zero-copy), pinning it until the last
//! is dropped; an `Arrow` is written as one IPC stream straight into its
//! store object.
//!
//! **Ext type 6, torch tensor.** Exactly the data of ext 1 (any plain
//! dtype, the tensor's shape, C-contiguous): a Python `torch.Tensor` whose
//! dtype numpy has (others, like bfloat16, go pickled as ext 3). The type
//! only tells a Python receiver to give back a `torch.Tensor` over the
//! bytes (zero-copy when stored) rather than a numpy array; Rust reads it
//! exactly as ext 1 (a [`Buffer`]).
//!
//! **Ext type 2, spilled message.** When the encoded message exceeds
//! [`MAX_INLINE`] bytes, it is written into one store object (created with
//! the same deliveries), and the payload is instead this single ext value,
//! whose data is the array `[ bin(20) object id, nbytes: uint ]`, or
//! (from version 1.1) `[ bin(20) object id, nbytes: uint, offset: uint,
//! arena: uint ]` with where the object's data lies, claimed without a
//! round trip as for buffers. The object's data (exactly nbytes) is the real
//! payload, which never is a spilled message itself; ext 2 anywhere but as
//! the whole payload is malformed. Receivers take the object, decode it, and release it.
//!
//! **Ext type 3, pickled Python object.** Python-only: Python falls back to
//! pickle (protocol 5) for values it cannot express otherwise. The data is
//! the array `[ bin pickle, array of ext 1 ]`, the ext 1 values being the
//! pickle's out-of-band buffers in order (each its raw bytes: `|u1`, one
//! dimension). Rust refuses it
//! ([`PayloadError::Pickled`]), after taking and releasing the store objects
//! its buffers reference, so their deliveries are settled.
//!
//! **Store objects.** One per out-of-band buffer, data exactly the buffer's
//! bytes (64-byte aligned by the store), metadata empty, created with the
//! message's delivery count and sealed before the payload is sent. A
//! receiver takes each distinct object its payload references once, and
//! releases it when done. Taking an object whose descriptor gives its
//! offset costs no round trip ([`hprm_store::StoreClient::claim`]): the
//! delivery the sender announced for this receiver pins the object until
//! the receiver's release, and the seal went out on the sender's store
//! connection before the message, so the bytes are complete and stay put.
//! An offset outside the arena or unaligned is refused at once; one that
//! is not the object's (a forged message) is refused by the store, and
//! reported late. Any extension type other than 1–6 belongs to the
//! value's own types and is left to them.

#[cfg(feature = "arrow")]
mod arrow;
mod buffer;
#[doc(hidden)]
pub mod conformance;
mod decoder;
mod descriptor;
mod dtype;
mod encoder;
mod error;
mod fetch;
mod lost;
pub mod msgpack;
pub mod oob;
mod scoped;
mod store;

use std::time::Duration;

#[cfg(feature = "arrow")]
pub use arrow::{Arrow, ArrowKind, PlannedStream, KIND_KEY};
pub use buffer::Buffer;
pub(crate) use decoder::taken_bytes;
pub use decoder::Decoder;
pub use descriptor::{
    BufferDescriptor, BufferRef, Location, SpilledMessage, EXT_ARROW, EXT_BUFFER, EXT_BYTES, EXT_PICKLED, EXT_SPILLED,
    EXT_TENSOR, MAX_DIMS,
};
pub use dtype::{Dtype, Element};
pub use encoder::{EncodeSession, Encoder, Loan};
pub use error::PayloadError;
pub use fetch::{FetchAnswer, FetchRequest, FETCH_MAX_ITEMS, FETCH_TAG};
pub use lost::LostHosts;
pub use store::StoreLink;

/// Default out-of-band threshold: buffers of at least this many bytes go
/// through the store (64 KiB; configurable per program and connection).
pub const DEFAULT_THRESHOLD: usize = 64 << 10;

/// Headroom kept in a 64 KiB frame for the message header around the
/// payload (21 bytes for LF's TAGGED_MESSAGE: type, port, federate, length,
/// tag), rounded up so that framing may grow a little.
pub const HEADER_HEADROOM: usize = 64;

/// Largest payload that travels in-band: a 64 KiB frame (the most the RTI
/// relays, and what peer transports read without allocating) minus
/// [`HEADER_HEADROOM`]. Larger encoded messages are spilled into the store.
pub const MAX_INLINE: usize = (64 << 10) - HEADER_HEADROOM;

/// Default time a [`Decoder`] waits for a referenced object to be sealed.
/// Senders seal before sending, so an object is normally there at once;
/// this bounds the wait for one whose sender failed.
pub const DEFAULT_GET_TIMEOUT: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests;
