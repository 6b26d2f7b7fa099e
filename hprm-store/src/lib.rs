//! # hprm-store: HPRM's shared-memory object store
//!
//! Every payload over the inline threshold (64 KiB) lives exactly once in the
//! store's arena, a shared-memory region that the daemon (`hprm-store`)
//! creates at start and passes to every client; messages carry only an
//! [`ObjectId`]. This crate is what clients link, plus the parts the daemon
//! shares with them:
//!
//! - [`client`]: [`StoreClient`] (connect, create/seal, put, get, delete,
//!   list, evict, stats, subscribe) and the zero-copy views [`Object`] and
//!   [`ObjectMut`]. Start here.
//! - [`protocol`]: frames (8-byte header + flatbuffers body), messages, and
//!   the SCM_RIGHTS handshake that hands over the arena.
//! - [`arena`]: making (memfd / unnamed file, reserved with fallocate) and
//!   mapping the shared region.
//! - [`space`]: one range of offsets over the arena and, with
//!   `--spill-dir`, the [`spill`] file (a file-backed overflow arena): the
//!   one place an object's offset becomes a pointer.
//! - [`outbox`]: each client's queue of one-way requests (seal, claim,
//!   release, ...) in shared memory, which the daemon reads when they can
//!   matter instead of being woken for each.
//! - `prefault`: mapping an object's pages into the writer's page table in
//!   one system call when the store is not pre-faulted (`--populate`).
//! - [`allocator`]: best-fit placement of objects inside the arena.
//! - [`policy`]: [`Backpressure`], what a producer does when the store is
//!   full or a receiver falls behind: the vocabulary the whole runtime uses.
//! - [`id`], [`bytesize`], [`duration`]: object ids, human byte sizes and
//!   durations.
//!
//! Object life cycle: `create` (the creator writes in place) → `seal`
//! (immutable, visible to `get`) → `get` (or `claim`, with no round trip,
//! by a consumer told where the object lies)/release by consumers → `delete`;
//! or, once no client references it and every expected delivery was
//! settled, freed at once if it was sent with deliveries (a message), else
//! kept as cache until LRU eviction needs its room. The daemon itself (object table, eviction, connection
//! handling) lives in `src/bin/hprm-store/`.
//!
//! ```no_run
//! use hprm_store::{ObjectId, StoreClient};
//! use std::time::Duration;
//!
//! let store = StoreClient::connect("/run/hprm/store.sock")?;
//! let id = ObjectId::random();
//! let mut frame = store.create(id, 640 * 480 * 3, b"rgb8")?;
//! frame.data_mut().fill(0x80); // write the camera frame in place
//! frame.seal()?;
//! let got = store.get(&[id], Duration::from_secs(1))?;
//! assert_eq!(got[0].data().len(), 640 * 480 * 3);
//! # Ok::<(), hprm_store::Error>(())
//! ```

pub mod allocator;
pub mod arena;
pub mod bytesize;
pub mod client;
pub mod duration;
mod error;
pub mod id;
mod mapping;
pub mod outbox;
pub mod policy;
mod prefault;
pub mod protocol;
pub mod space;
pub mod spill;

pub use client::{ConnectOptions, CreateOptions, Deletion, Evicted, Object, ObjectMut, StoreClient, Subscription};
pub use error::{Error, Result};
pub use id::ObjectId;
pub use policy::Backpressure;
pub use prefault::set_thread_policy;
pub use protocol::message::{ErrorCode, Notification, ObjectInfo, Placement, Stats};
