//! The Rust client: [`StoreClient`] and the objects it hands out.
//!
//! A client maps the daemon's arena (and spill file: `crate::space`) once at connect; [`ObjectMut`] and
//! [`Object`] are views straight into it (no copies). Each `Object` holds one
//! reference in the daemon, released when it is dropped; an `ObjectMut` that
//! is dropped unsealed is aborted. Both keep the client's connection and
//! mapping alive, so they may outlive the `StoreClient` they came from.
//!
//! Small objects (data + metadata up to [`SMALL_OBJECT_MAX`]) cost no round
//! trip to create: the client keeps a pool of blocks the daemon reserved for
//! it in advance (one Reserve per [`RESERVE_BATCH`] objects of a size class),
//! places the object in one, and publishes it at seal in one one-way
//! message. The price: an id that already exists is reported late, as
//! [`Error::Earlier`] from [`StoreClient::sync`] or a later call, not by
//! `create`. The next Reserve of a class goes out while the pool still has
//! blocks (see `Pool`), so no create waits for one.

mod connection;
mod object;
mod subscription;
mod watch;

use std::borrow::Cow;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

pub use object::{Object, ObjectMut};
pub use subscription::Subscription;
pub use watch::DAEMON_CLOSED;

use crate::arena::Arena;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::outbox::OutboxWriter;
use crate::protocol::frame::VERSION;
use crate::protocol::handshake::{recv_hello, Greeting};
use crate::protocol::message::{ObjectInfo, Placement, Reply, Request, Stats};
use crate::space::AddressSpace;
use crate::spill::SpillFile;
use connection::Connection;

/// Options for [`StoreClient::connect_with`].
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// Pre-fault the whole arena in this process at connect (MAP_POPULATE),
    /// so first writes into an object take no page faults. `None` follows the
    /// daemon's `--populate`.
    pub populate: Option<bool>,
    /// How long to poll for a reply before sleeping in `read` (default
    /// 50 µs; zero never polls). Polling saves a wake-up per request, which
    /// dominates small-request latency on busy or virtualised machines, at
    /// the price of up to this much CPU time per request.
    pub spin: Option<Duration>,
    /// Send every request over the socket, even when the daemon offers an
    /// outbox (`crate::outbox`) for the one-way ones. For comparisons.
    pub socket_only: bool,
    /// The program this client belongs to: the daemon charges what it
    /// creates to that program and holds it to the program's quota
    /// (`hprm-store --quota`). hprm-node names the program's name.
    pub program: Option<String>,
}

/// Default of [`ConnectOptions::spin`].
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// Block sizes of the small-object pool; an object goes in the smallest
/// block that holds its data and metadata.
///
/// Up to 64 KiB (the daemon's largest reservable block): a buffer just at
/// the payload codec's out-of-band threshold (65,536 bytes) then costs no
/// create round trip either.
const SMALL_CLASSES: [u64; 11] = [64, 128, 256, 512, 1024, 2048, 4096, 8 << 10, 16 << 10, 32 << 10, 64 << 10];

/// Largest data + metadata placed in a reserved block.
pub const SMALL_OBJECT_MAX: u64 = SMALL_CLASSES[SMALL_CLASSES.len() - 1];

/// Blocks reserved per round trip when a size class runs out (fewer for
/// the larger classes: see [`RESERVE_BYTES`]), to begin with.
pub const RESERVE_BATCH: u32 = 32;

/// Most bytes one Reserve asks for to begin with: the larger classes get
/// fewer blocks per round trip (4 of 64 KiB), so an idle client holds
/// little of the arena in reserve.
pub const RESERVE_BYTES: u64 = 256 << 10;

/// Most bytes one Reserve asks for once its class is in steady use (each
/// Reserve within [`RESERVE_GROWS_WITHIN`] of the one before doubles the
/// batch): the first batch's, so only the classes up to 4 KiB grow (to 64
/// blocks of 4 KiB, 256 of 1 KiB). At most a sixty-fourth of the arena.
///
/// Not more: a client's posts (publish, claim, release) are read when the
/// daemon next wakes, and with 64 KiB objects a Reserve may be the only
/// thing that wakes it. So the batch bounds the burst of work each Reserve
/// sets off, on a CPU the program may want: at 2 MiB (32 blocks of 64 KiB)
/// that was about 150 µs on the 2-core machine of `bench/results/`, and
/// one 64 KiB message in 32 took 250-300 µs instead of 17; at 512 KiB one
/// in 8 still took over 120 µs through the RTI (`bench/README.md`).
pub const RESERVE_BYTES_MAX: u64 = 256 << 10;

/// Most blocks one Reserve asks for (the daemon's limit).
pub const RESERVE_BATCH_MAX: u32 = 256;

/// A class that runs out again this soon after its last Reserve reserves
/// twice as many blocks next time, up to [`RESERVE_BYTES_MAX`]; one that
/// took longer starts again from its first batch.
pub const RESERVE_GROWS_WITHIN: Duration = Duration::from_millis(100);

/// Blocks asked for by the first Reserve of blocks of `block_len` bytes.
fn reserve_batch(block_len: u64) -> u32 {
    (RESERVE_BYTES / block_len.max(1)).clamp(1, u64::from(RESERVE_BATCH)) as u32
}

/// Most blocks of `block_len` bytes one Reserve asks for, in an arena of
/// `arena` bytes.
fn reserve_batch_max(block_len: u64, arena: u64) -> u32 {
    let bytes = RESERVE_BYTES_MAX.min(arena / 64).max(RESERVE_BYTES);
    (bytes / block_len.max(1)).clamp(1, u64::from(RESERVE_BATCH_MAX)) as u32
}

/// The size class for `total` bytes, if small.
fn small_class(total: u64) -> Option<usize> {
    let len = crate::allocator::block_len(total)?;
    SMALL_CLASSES.iter().position(|&c| c >= len)
}

/// Options for [`StoreClient::create_with`].
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// Consumers expected to `get` and release the object. Until they all
    /// have (or the daemon's delivery TTL expires) the object is pinned: it
    /// cannot be evicted. Once they have and nobody holds it, it is freed
    /// at once (an object with no deliveries stays as cache instead).
    pub deliveries: u32,
    /// When the arena is full of pinned objects, wait up to this long for
    /// space before failing with `OutOfMemory`.
    pub wait_for_space: Duration,
}

/// Outcome of [`StoreClient::delete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// The object is gone.
    Deleted,
    /// Clients still hold references; it goes when the last is released.
    Deferred,
}

/// Outcome of [`StoreClient::evict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Evicted {
    pub objects: u64,
    pub bytes: u64,
}

/// A connection to an `hprm-store` daemon. Cheap to clone; safe to share
/// across threads (calls from several threads proceed concurrently over the
/// one connection).
#[derive(Clone)]
pub struct StoreClient {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    conn: Connection,
    /// The arena and the spill file: where every placement resolves.
    pub(crate) space: AddressSpace,
    client_id: u64,
    /// The daemon's arena id (`Hello::arena_id`).
    pub(crate) arena_id: u64,
    path: PathBuf,
    pool: Mutex<Pool>,
    /// Write ends of the pipes that stop this connection's watch threads
    /// ([`StoreClient::watch_close`]): dropped with the last handle.
    watch_stops: Mutex<Vec<std::os::fd::OwnedFd>>,
}

/// The reserved blocks not in use, per size class, the Reserve of each
/// class on its way, and how many blocks the next one asks for.
///
/// A create that finds its class empty waits for a Reserve's round trip,
/// and at the daemon's pace: an idle daemon sleeps, and waking it costs
/// tens of microseconds on a virtualised machine. With 64 KiB objects (4
/// blocks per Reserve) that was every fourth message of `node-bench`'s
/// ping-pong, about three times slower than the others. So once a class
/// is down to a quarter of its batch, the next Reserve is sent without
/// waiting for its reply, which the create that empties the pool then
/// finds read or on its way. Sending it still wakes the daemon, on a CPU
/// the message in flight wants: so a class in steady use also reserves
/// more at a time (up to [`RESERVE_BYTES_MAX`]), and a caller that knows
/// a better moment to send it holds it until then
/// ([`StoreClient::send_reserves`]). (Figures:
/// `bench/results/design-measurements.md`, `bench/README.md`.)
#[derive(Default)]
struct Pool {
    free: [Vec<u64>; SMALL_CLASSES.len()],
    /// The seq of the Reserve sent ahead, whose reply nobody took yet.
    reserving: [Option<u64>; SMALL_CLASSES.len()],
    /// Blocks the last Reserve of each class asked for (0: none yet).
    batch: [u32; SMALL_CLASSES.len()],
    /// When each class last reserved.
    reserved_at: [Option<Instant>; SMALL_CLASSES.len()],
    /// Classes whose Reserve ahead is due, held for the next
    /// [`StoreClient::send_reserves`].
    due: [bool; SMALL_CLASSES.len()],
    /// Set by the first [`StoreClient::send_reserves`]: Reserves ahead are
    /// held for the next one instead of sent when a class runs low.
    deferred: bool,
}

impl Pool {
    /// The next Reserve of `class`, in an arena of `arena` bytes; counts it
    /// as sent now.
    fn reserve(&mut self, class: usize, arena: u64) -> Request<'static> {
        let block_len = SMALL_CLASSES[class];
        let (first, most) = (reserve_batch(block_len), reserve_batch_max(block_len, arena));
        let now = Instant::now();
        let count = match self.reserved_at[class] {
            Some(at) if now.duration_since(at) < RESERVE_GROWS_WITHIN => {
                self.batch[class].saturating_mul(2).clamp(first, most)
            }
            _ => first,
        };
        self.batch[class] = count;
        self.reserved_at[class] = Some(now);
        Request::Reserve { block_len, count }
    }
}

impl Inner {
    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns an unused reserved block to the pool.
    pub(crate) fn give_back(&self, class: usize, offset: u64) {
        self.pool().free[class].push(offset);
    }

    /// Sends the next Reserve of `class` without waiting for its reply.
    /// Sent under the pool's lock, so that one thread only sends it. A
    /// connection that fails here fails the next call too, which reports it.
    fn send_reserve(&self, pool: &mut Pool, class: usize) {
        let reserve = pool.reserve(class, self.space.arena().size());
        pool.reserving[class] = self.conn.start(&reserve).ok();
        pool.due[class] = false;
    }

    /// A reserved block of size class `class`: from the pool, else from the
    /// Reserve sent ahead, else from a Reserve sent now.
    fn take_block(&self, class: usize) -> Result<u64> {
        let block_len = SMALL_CLASSES[class];
        let mut pool = self.pool();
        if let Some(offset) = pool.free[class].pop() {
            let (low, left) = ((pool.batch[class] as usize / 4).max(1), pool.free[class].len());
            if left <= low && pool.reserving[class].is_none() {
                // Held, while the pool has a block left, for a caller that
                // sends it when it suits (one that never waits still gets
                // it sent a message ahead).
                if pool.deferred && left > 0 {
                    pool.due[class] = true;
                } else {
                    self.send_reserve(&mut pool, class);
                }
            }
            return Ok(offset);
        }
        pool.due[class] = false;
        let ahead = pool.reserving[class].take();
        drop(pool);
        let reply = match ahead.map(|seq| self.conn.finish(seq, "reserve")) {
            Some(Ok(reply)) => reply,
            Some(Err(e)) if !matches!(e, Error::Rejected { .. }) => return Err(e),
            // None sent ahead, or refused when it was sent (the arena was
            // full then): ask now, when the blocks are needed.
            _ => {
                let reserve = self.pool().reserve(class, self.space.arena().size());
                self.conn.call(&reserve)?
            }
        };
        match reply {
            Reply::Reserved { block_len: got, mut offsets } if got == block_len && !offsets.is_empty() => {
                if let Some(bad) = offsets.iter().find(|&&o| !self.space.contains_range(o, block_len)) {
                    return Err(Error::Protocol {
                        op: "reserve",
                        detail: format!("block at {bad} lies outside the arena and the spill file"),
                    });
                }
                let offset = offsets.pop().expect("checked non-empty");
                self.pool().free[class].extend(offsets);
                Ok(offset)
            }
            other => Err(unexpected("reserve", &other)),
        }
    }
}

impl StoreClient {
    /// Connects to the daemon listening on the Unix socket `path`.
    pub fn connect(path: impl AsRef<Path>) -> Result<StoreClient> {
        Self::connect_with(path, &ConnectOptions::default())
    }

    /// Connects with options.
    pub fn connect_with(path: impl AsRef<Path>, opts: &ConnectOptions) -> Result<StoreClient> {
        let path = path.as_ref().to_path_buf();
        let (stream, greeting) = handshake(&path)?;
        let hello = greeting.hello;
        if hello.version != VERSION {
            return Err(Error::Protocol {
                op: "connect",
                detail: format!("daemon speaks protocol {}, this client {VERSION}", hello.version),
            });
        }
        let arena = Arena::map_fd(greeting.arena, hello.arena_size, opts.populate.unwrap_or(hello.populate))?;
        let spill = greeting.spill.map(|fd| SpillFile::map_fd(fd, hello.spill_size)).transpose()?;
        let outbox = match greeting.outbox {
            Some(fd) if !opts.socket_only => Some(OutboxWriter::map(fd, hello.outbox_size)?),
            _ => None,
        };
        tracing::debug!(path = %path.display(), client_id = hello.client_id, arena = hello.arena_size, "connected to hprm-store");
        let spin = opts.spin.unwrap_or(DEFAULT_SPIN);
        let inner = Inner {
            conn: Connection::new(stream, spin, outbox),
            space: AddressSpace::new(arena, spill),
            client_id: hello.client_id,
            arena_id: hello.arena_id,
            path,
            pool: Mutex::default(),
            watch_stops: Mutex::default(),
        };
        let client = StoreClient { inner: Arc::new(inner) };
        if let Some(program) = &opts.program {
            client.inner.conn.call(&Request::Identify { program })?;
        }
        Ok(client)
    }

    /// The socket this client is connected to.
    pub fn socket_path(&self) -> &Path {
        &self.inner.path
    }

    /// The daemon's number for this connection (as in logs and `list`).
    pub fn client_id(&self) -> u64 {
        self.inner.client_id
    }

    /// The daemon's arena id: random, fixed for the daemon's lifetime. A
    /// placement handed on to other processes (in a message) goes with it,
    /// so that a receiver connected to another store does not map it.
    pub fn arena_id(&self) -> u64 {
        self.inner.arena_id
    }

    /// Size of the daemon's arena in bytes.
    pub fn arena_size(&self) -> u64 {
        self.inner.space.arena().size()
    }

    /// Creates an object of `size` data bytes with `metadata`, to be written
    /// in place and then sealed.
    pub fn create(&self, id: ObjectId, size: u64, metadata: &[u8]) -> Result<ObjectMut> {
        self.create_with(id, size, metadata, &CreateOptions::default())
    }

    /// [`StoreClient::create`] with delivery count and wait for space.
    ///
    /// Small objects (data + metadata up to [`SMALL_OBJECT_MAX`], and no
    /// wait for space) are placed in a block reserved in advance, with no
    /// round trip; a duplicate id is then reported late
    /// ([`Error::Earlier`], from [`StoreClient::sync`] or a later call).
    /// With a wait, a small object is created in the daemon, as a large
    /// one is: a Reserve cannot wait. (hprm-node's encoder, whose ids are
    /// random, asks without a wait first, and again with it only when the
    /// daemon has no block to reserve.)
    pub fn create_with(&self, id: ObjectId, size: u64, metadata: &[u8], opts: &CreateOptions) -> Result<ObjectMut> {
        let small =
            size.checked_add(metadata.len() as u64).and_then(small_class).filter(|_| opts.wait_for_space.is_zero());
        if let Some(class) = small {
            let offset = self.inner.take_block(class)?;
            let placement = Placement {
                data_offset: offset,
                data_size: size,
                metadata_offset: offset + size,
                metadata_size: metadata.len() as u64,
            };
            self.inner.space.prefault_for_write(offset, size + metadata.len() as u64);
            // SAFETY: the block is reserved for this client and taken out of
            // its pool, so nothing else writes it; it lies in the address
            // space (checked when reserved) and holds data + metadata (its class).
            unsafe {
                self.inner
                    .space
                    .ptr_at(placement.metadata_offset)
                    .copy_from_nonoverlapping(metadata.as_ptr(), metadata.len())
            };
            return Ok(ObjectMut::new(self.inner.clone(), id, placement, Some((class, opts.deliveries))));
        }
        let req = Request::Create {
            id,
            data_size: size,
            metadata,
            deliveries: opts.deliveries,
            wait_for_space: opts.wait_for_space,
        };
        match self.inner.conn.call(&req)? {
            Reply::Created(placement) => {
                self.check_placement("create", &placement)?;
                // The creator is about to write all of it (the daemon has
                // written the metadata): its pages may be resident but not yet
                // in this process's page table.
                self.inner.space.prefault_for_write(placement.data_offset, placement.data_size);
                Ok(ObjectMut::new(self.inner.clone(), id, placement, None))
            }
            other => Err(unexpected("create", &other)),
        }
    }

    /// Sends the Reserves ahead the pools of reserved blocks are due, and
    /// from now on holds them for the next call instead of sending each when
    /// its class runs low.
    ///
    /// For a caller that knows when waking the daemon costs it nothing: a
    /// federate about to wait for its next event. A Reserve wakes the
    /// daemon, which first reads every client's outbox (all that was posted
    /// since it last woke: see [`RESERVE_BYTES_MAX`]), and a Unix socket's
    /// write wakes it on the writer's CPU, which it then takes from the
    /// writer: sent in the middle of an encode, the Reserve delayed that
    /// message by the whole burst. A class that takes its last block before
    /// the next call sends its Reserve then, as if this were never called.
    pub fn send_reserves(&self) {
        let mut pool = self.inner.pool();
        pool.deferred = true;
        for class in 0..SMALL_CLASSES.len() {
            if pool.due[class] && pool.reserving[class].is_none() {
                self.inner.send_reserve(&mut pool, class);
            }
        }
    }

    /// Creates, fills and seals an object holding a copy of `data`.
    pub fn put(&self, id: ObjectId, data: &[u8], metadata: &[u8]) -> Result<()> {
        self.put_with(id, data, metadata, &CreateOptions::default())
    }

    /// [`StoreClient::put`] with delivery count and wait for space.
    pub fn put_with(&self, id: ObjectId, data: &[u8], metadata: &[u8], opts: &CreateOptions) -> Result<()> {
        let mut obj = self.create_with(id, data.len() as u64, metadata, opts)?;
        obj.data_mut().copy_from_slice(data);
        obj.seal()
    }

    /// Gets sealed objects, waiting up to `timeout` for those not sealed yet
    /// (or not created yet). `Duration::MAX` waits forever. All or nothing: on
    /// timeout no reference is taken and [`Error::Timeout`] lists the missing.
    pub fn get(&self, ids: &[ObjectId], timeout: Duration) -> Result<Vec<Object>> {
        let timeout_opt = (timeout != Duration::MAX).then_some(timeout);
        let req = Request::Get { ids: Cow::Borrowed(ids), timeout: timeout_opt };
        match self.inner.conn.call_raw(&req)? {
            Reply::Objects(refs) => {
                // Wrap every reference first, so that all are released if
                // one of them turns out to be unusable.
                let objects: Vec<Object> =
                    refs.into_iter().map(|r| Object::new(self.inner.clone(), r.id, r.placement)).collect();
                if objects.len() != ids.len() {
                    return Err(Error::Protocol {
                        op: "get",
                        detail: format!("asked for {} objects, got {}", ids.len(), objects.len()),
                    });
                }
                for o in &objects {
                    self.check_placement("get", &o.placement)?;
                }
                Ok(objects)
            }
            Reply::Error(e) if e.code == crate::ErrorCode::Timeout => {
                Err(Error::Timeout { missing: e.missing, waited: timeout })
            }
            Reply::Error(e) => Err(Error::Rejected { op: "get", code: e.code, message: e.message }),
            other => Err(unexpected("get", &other)),
        }
    }

    /// Takes the sealed object `id`, which this client was told lies at
    /// `placement` (by a message's buffer descriptor), without a round
    /// trip: the view is built here at once and the reference is claimed
    /// with a one-way message, queued ahead of this client's later requests
    /// (so ahead of the release when the returned `Object` is dropped).
    ///
    /// Safe to read at once because the sender created the object with a
    /// delivery for this receiver and sealed it (one-way, ordered on its own
    /// connection) before sending the message: until this receiver's
    /// release the object cannot be evicted or reused (short of the delivery
    /// TTL running out before the claim arrives). Once the claim has been
    /// handled, the reference is this client's like one from `get`: the
    /// daemon drops it if the client dies. The daemon checks the claim: an
    /// object that does not exist, lies elsewhere (a forged or corrupted
    /// descriptor) or is not sealed within `timeout` of the daemon reading the
    /// claim (from the outbox: see `crate::outbox`) is reported late, as
    /// [`Error::Earlier`] from a later call or [`StoreClient::sync`].
    ///
    /// Fails now, with [`Error::InvalidArgument`] and nothing mapped, if
    /// `placement` does not lie in the arena or is not aligned as every
    /// object is (64 bytes): a forged descriptor never reads out of bounds.
    /// A placement is only meaningful in the arena it came from: whoever
    /// hands one on should send [`StoreClient::arena_id`] with it, and a
    /// receiver whose arena id differs should `get` the object instead.
    pub fn claim(&self, id: ObjectId, placement: Placement, timeout: Duration) -> Result<Object> {
        let p = placement;
        let aligned = p.data_offset % crate::allocator::ALIGN == 0;
        let contiguous = p.data_offset.checked_add(p.data_size) == Some(p.metadata_offset);
        if !aligned || !contiguous {
            return Err(Error::InvalidArgument { op: "claim", detail: format!("object {id}: placement {p:?} is not one the store makes (64-byte aligned data, metadata right after it); the message referencing it is forged or corrupted") });
        }
        self.check_placement("claim", &p).map_err(|_| Error::InvalidArgument {
            op: "claim",
            detail: format!("object {id}: placement {p:?} lies outside the store's {}-byte arena (and spill file, if any); the message referencing it is forged or corrupted", self.inner.space.arena().size()),
        })?;
        let timeout = (timeout != Duration::MAX).then_some(timeout);
        self.inner.conn.post(&Request::Claim { id, placement: p, timeout })?;
        Ok(Object::new(self.inner.clone(), id, p))
    }

    /// Gets one object; see [`StoreClient::get`].
    pub fn get_one(&self, id: ObjectId, timeout: Duration) -> Result<Object> {
        let mut v = self.get(&[id], timeout)?;
        v.pop().ok_or_else(|| Error::Protocol { op: "get", detail: "empty reply".into() })
    }

    /// Whether a sealed object with this id is in the store.
    pub fn contains(&self, id: ObjectId) -> Result<bool> {
        match self.inner.conn.call(&Request::Contains { id })? {
            Reply::Presence(p) => Ok(p),
            other => Err(unexpected("contains", &other)),
        }
    }

    /// Deletes a sealed object, or marks it for deletion once every client
    /// has released it.
    pub fn delete(&self, id: ObjectId) -> Result<Deletion> {
        match self.inner.conn.call(&Request::Delete { id })? {
            Reply::Deleted { deferred: false } => Ok(Deletion::Deleted),
            Reply::Deleted { deferred: true } => Ok(Deletion::Deferred),
            other => Err(unexpected("delete", &other)),
        }
    }

    /// Every object in the store.
    pub fn list(&self) -> Result<Vec<ObjectInfo>> {
        match self.inner.conn.call(&Request::List)? {
            Reply::Listing(l) => Ok(l),
            other => Err(unexpected("list", &other)),
        }
    }

    /// Evicts least-recently-used evictable objects until at least `bytes`
    /// are freed (or none is left to evict).
    pub fn evict(&self, bytes: u64) -> Result<Evicted> {
        match self.inner.conn.call(&Request::Evict { bytes })? {
            Reply::Evicted { objects, bytes } => Ok(Evicted { objects, bytes }),
            other => Err(unexpected("evict", &other)),
        }
    }

    /// Announces `deliveries` more receivers of sealed object `id` (which
    /// this client got), so it can send the object on without copying it:
    /// the object stays pinned until those receivers release it or the
    /// delivery TTL runs out. One-way: requests on a connection are handled
    /// in order, so this precedes this client's own release of the object;
    /// a failure (the object vanished) is reported late, as
    /// [`Error::Earlier`].
    pub fn redeliver(&self, id: ObjectId, deliveries: u32) -> Result<()> {
        self.inner.conn.post(&Request::Redeliver { id, deliveries })
    }

    /// Like [`StoreClient::redeliver`], but waits for the daemon's answer,
    /// for a caller that holds no reference on the object (a link adding
    /// another host's receivers to its copy): an object no longer held is
    /// this call's error ([`ErrorCode::NotFound`]), never a later call's
    /// [`Error::Earlier`]. Atomic: the deliveries are added to the object
    /// the daemon holds at that moment, or to none.
    ///
    /// [`ErrorCode::NotFound`]: crate::protocol::message::ErrorCode::NotFound
    /// [`Error::Earlier`]: crate::Error::Earlier
    pub fn redeliver_confirmed(&self, id: ObjectId, deliveries: u32) -> Result<()> {
        match self.inner.conn.call(&Request::Redeliver { id, deliveries })? {
            Reply::Done => Ok(()),
            other => Err(unexpected("redeliver", &other)),
        }
    }

    /// Waits until the daemon has handled every request this client sent so
    /// far, and reports the first that failed without anyone waiting for
    /// its answer (a seal, the publish of a small object) as
    /// [`Error::Earlier`]. Requests on one connection are handled in order,
    /// so one round trip is enough. Later calls report such errors too, once
    /// they have arrived; `sync` is the way to know for sure.
    pub fn sync(&self) -> Result<()> {
        let probe = ObjectId::from_bytes([0; ObjectId::LEN]);
        match self.inner.conn.call(&Request::Contains { id: probe })? {
            Reply::Presence(_) => self.inner.conn.take_earlier(),
            other => Err(unexpected("sync", &other)),
        }
    }

    /// The daemon's counters.
    pub fn stats(&self) -> Result<Stats> {
        match self.inner.conn.call(&Request::Stats)? {
            Reply::Stats(s) => Ok(s),
            other => Err(unexpected("stats", &other)),
        }
    }

    /// Opens a subscription (its own connection) to seal and delete events.
    pub fn subscribe(&self) -> Result<Subscription> {
        Subscription::open(&self.inner.path)
    }

    fn check_placement(&self, op: &'static str, p: &Placement) -> Result<()> {
        let space = &self.inner.space;
        if space.contains_range(p.data_offset, p.data_size) && space.contains_range(p.metadata_offset, p.metadata_size)
        {
            Ok(())
        } else {
            let spill = match space.spill() {
                Some(s) => format!(" and the {}-byte spill file from offset {}", s.size(), space.spill_base()),
                None => String::new(),
            };
            Err(Error::Protocol {
                op,
                detail: format!("placement {p:?} lies outside the {}-byte arena{spill}", space.arena().size()),
            })
        }
    }
}

pub(crate) fn handshake(path: &Path) -> Result<(UnixStream, Greeting)> {
    let stream = UnixStream::connect(path).map_err(|source| Error::Connect { path: path.to_path_buf(), source })?;
    let greeting = recv_hello(&stream).map_err(|source| Error::Handshake { path: path.to_path_buf(), source })?;
    Ok((stream, greeting))
}

fn unexpected(op: &'static str, reply: &Reply) -> Error {
    Error::Protocol { op, detail: format!("unexpected reply {reply:?}") }
}
