//! The Rust client: [`StoreClient`] and the objects it hands out.
//!
//! A client maps the daemon's arena once at connect; [`ObjectMut`] and
//! [`Object`] are views straight into it (no copies). Each `Object` holds one
//! reference in the daemon, released when it is dropped; an `ObjectMut` that
//! is dropped unsealed is aborted. Both keep the client's connection and
//! mapping alive, so they may outlive the `StoreClient` they came from.

mod connection;
mod object;
mod subscription;

use std::borrow::Cow;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use object::{Object, ObjectMut};
pub use subscription::Subscription;

use crate::arena::Arena;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::protocol::frame::VERSION;
use crate::protocol::handshake::recv_hello;
use crate::protocol::message::{ObjectInfo, Placement, Reply, Request, Stats};
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
}

/// Default of [`ConnectOptions::spin`].
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// Options for [`StoreClient::create_with`].
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// Consumers expected to `get` and release the object. Until they all
    /// have (or the daemon's delivery TTL expires) the object is pinned: it
    /// cannot be evicted.
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
    arena: Arena,
    client_id: u64,
    path: PathBuf,
}

impl StoreClient {
    /// Connects to the daemon listening on the Unix socket `path`.
    pub fn connect(path: impl AsRef<Path>) -> Result<StoreClient> {
        Self::connect_with(path, &ConnectOptions::default())
    }

    /// Connects with options.
    pub fn connect_with(path: impl AsRef<Path>, opts: &ConnectOptions) -> Result<StoreClient> {
        let path = path.as_ref().to_path_buf();
        let (stream, hello, fd) = handshake(&path)?;
        if hello.version != VERSION {
            return Err(Error::Protocol { op: "connect", detail: format!("daemon speaks protocol {}, this client {VERSION}", hello.version) });
        }
        let arena = Arena::map_fd(fd, hello.arena_size, opts.populate.unwrap_or(hello.populate))?;
        tracing::debug!(path = %path.display(), client_id = hello.client_id, arena = hello.arena_size, "connected to hprm-store");
        let spin = opts.spin.unwrap_or(DEFAULT_SPIN);
        Ok(StoreClient { inner: Arc::new(Inner { conn: Connection::new(stream, spin), arena, client_id: hello.client_id, path }) })
    }

    /// The socket this client is connected to.
    pub fn socket_path(&self) -> &Path {
        &self.inner.path
    }

    /// The daemon's number for this connection (as in logs and `list`).
    pub fn client_id(&self) -> u64 {
        self.inner.client_id
    }

    /// Size of the daemon's arena in bytes.
    pub fn arena_size(&self) -> u64 {
        self.inner.arena.size()
    }

    /// Creates an object of `size` data bytes with `metadata`, to be written
    /// in place and then sealed.
    pub fn create(&self, id: ObjectId, size: u64, metadata: &[u8]) -> Result<ObjectMut> {
        self.create_with(id, size, metadata, &CreateOptions::default())
    }

    /// [`StoreClient::create`] with delivery count and wait for space.
    pub fn create_with(&self, id: ObjectId, size: u64, metadata: &[u8], opts: &CreateOptions) -> Result<ObjectMut> {
        let req = Request::Create { id, data_size: size, metadata, deliveries: opts.deliveries, wait_for_space: opts.wait_for_space };
        match self.inner.conn.call(&req)? {
            Reply::Created(placement) => {
                self.check_placement("create", &placement)?;
                Ok(ObjectMut::new(self.inner.clone(), id, placement))
            }
            other => Err(unexpected("create", &other)),
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
                let objects: Vec<Object> = refs.into_iter().map(|r| Object::new(self.inner.clone(), r.id, r.placement)).collect();
                if objects.len() != ids.len() {
                    return Err(Error::Protocol { op: "get", detail: format!("asked for {} objects, got {}", ids.len(), objects.len()) });
                }
                for o in &objects {
                    self.check_placement("get", &o.placement)?;
                }
                Ok(objects)
            }
            Reply::Error(e) if e.code == crate::ErrorCode::Timeout => Err(Error::Timeout { missing: e.missing, waited: timeout }),
            Reply::Error(e) => Err(Error::Rejected { op: "get", code: e.code, message: e.message }),
            other => Err(unexpected("get", &other)),
        }
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
        let arena = &self.inner.arena;
        if arena.contains_range(p.data_offset, p.data_size) && arena.contains_range(p.metadata_offset, p.metadata_size) {
            Ok(())
        } else {
            Err(Error::Protocol { op, detail: format!("placement {p:?} lies outside the {}-byte arena", arena.size()) })
        }
    }
}

pub(crate) fn handshake(path: &Path) -> Result<(UnixStream, crate::protocol::message::Hello, std::os::fd::OwnedFd)> {
    let stream = UnixStream::connect(path).map_err(|source| Error::Connect { path: path.to_path_buf(), source })?;
    let (hello, fd) = recv_hello(&stream).map_err(|source| Error::Handshake { path: path.to_path_buf(), source })?;
    Ok((stream, hello, fd))
}

fn unexpected(op: &'static str, reply: &Reply) -> Error {
    Error::Protocol { op, detail: format!("unexpected reply {reply:?}") }
}
