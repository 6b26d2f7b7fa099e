//! Views of objects in the mapped arena.

use std::fmt;
use std::sync::Arc;

use super::{unexpected, Inner};
use crate::error::Result;
use crate::id::ObjectId;
use crate::protocol::message::{Placement, Reply, Request};

/// A sealed object: read-only bytes in shared memory, shared by every
/// process that got it. Holds one reference in the daemon until dropped.
pub struct Object {
    inner: Arc<Inner>,
    id: ObjectId,
    pub(super) placement: Placement,
}

impl Object {
    pub(super) fn new(inner: Arc<Inner>, id: ObjectId, placement: Placement) -> Object {
        Object { inner, id, placement }
    }

    pub fn id(&self) -> ObjectId {
        self.id
    }

    /// Announces `deliveries` more receivers of this object, on the
    /// connection that holds it, so it can be sent on without a copy (see
    /// [`crate::StoreClient::redeliver`]). Posted before this `Object`'s
    /// own release, so the object stays pinned throughout.
    pub fn redeliver(&self, deliveries: u32) -> crate::error::Result<()> {
        self.inner.conn.post(&crate::protocol::message::Request::Redeliver { id: self.id, deliveries })
    }

    /// The object's data, zero-copy.
    pub fn data(&self) -> &[u8] {
        // SAFETY: the placement was checked to lie inside the address space (arena or spill file)
        // (`StoreClient::check_placement`) before this value was handed out,
        // and a sealed object's bytes are never written again while a
        // reference (this one) is held.
        unsafe {
            std::slice::from_raw_parts(
                self.inner.space.ptr_at(self.placement.data_offset),
                self.placement.data_size as usize,
            )
        }
    }

    /// The object's metadata, zero-copy.
    pub fn metadata(&self) -> &[u8] {
        // SAFETY: as for `data`.
        unsafe {
            std::slice::from_raw_parts(
                self.inner.space.ptr_at(self.placement.metadata_offset),
                self.placement.metadata_size as usize,
            )
        }
    }

    /// Where the object lies in the arena (for handing to other mappings).
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// The addresses of this process's mapping of the store memory the
    /// object lies in (the arena, or the spill file: `crate::space`).
    pub fn mapping(&self) -> std::ops::Range<usize> {
        self.inner.space.mapping_of(self.placement.data_offset)
    }

    /// The id of the arena it lies in ([`crate::StoreClient::arena_id`]).
    pub fn arena_id(&self) -> u64 {
        self.inner.arena_id
    }
}

impl AsRef<[u8]> for Object {
    fn as_ref(&self) -> &[u8] {
        self.data()
    }
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object").field("id", &self.id).field("placement", &self.placement).finish()
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        // A broken connection already dropped every reference daemon-side.
        let _ = self.inner.conn.post(&Request::Release { id: self.id });
    }
}

/// An object being written: the creator's exclusive, writable view until
/// [`ObjectMut::seal`]. Dropped unsealed, it is aborted and its memory freed.
pub struct ObjectMut {
    inner: Arc<Inner>,
    id: ObjectId,
    placement: Placement,
    /// For a small object in a reserved block: its size class and the
    /// deliveries to announce when publishing. `None`: created in the daemon.
    reserved: Option<(usize, u32)>,
    finished: bool,
}

impl ObjectMut {
    pub(super) fn new(
        inner: Arc<Inner>,
        id: ObjectId,
        placement: Placement,
        reserved: Option<(usize, u32)>,
    ) -> ObjectMut {
        ObjectMut { inner, id, placement, reserved, finished: false }
    }

    pub fn id(&self) -> ObjectId {
        self.id
    }

    /// The data bytes to fill in. Their initial content is unspecified.
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: the placement lies inside the address space (checked at create),
        // the daemon gave this creator sole use of the block until seal, and
        // `&mut self` makes this the only view in this process.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.inner.space.ptr_at(self.placement.data_offset),
                self.placement.data_size as usize,
            )
        }
    }

    /// The data bytes as written so far.
    pub fn data(&self) -> &[u8] {
        // SAFETY: as for `data_mut`, shared.
        unsafe {
            std::slice::from_raw_parts(
                self.inner.space.ptr_at(self.placement.data_offset),
                self.placement.data_size as usize,
            )
        }
    }

    /// Where the object lies in the arena: what a receiver that maps it
    /// without a `get` needs ([`crate::StoreClient::claim`]).
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// The id of the arena it lies in ([`crate::StoreClient::arena_id`]).
    pub fn arena_id(&self) -> u64 {
        self.inner.arena_id
    }

    /// The metadata given at create (written by the daemon).
    pub fn metadata(&self) -> &[u8] {
        // SAFETY: as for `data`.
        unsafe {
            std::slice::from_raw_parts(
                self.inner.space.ptr_at(self.placement.metadata_offset),
                self.placement.metadata_size as usize,
            )
        }
    }

    /// Makes the object immutable and visible to `get`.
    ///
    /// One-way: an `ObjectMut` is proof that this connection created the
    /// object and has neither sealed nor aborted it, so the daemon has no
    /// reason to refuse, and waiting for its answer would only add a round
    /// trip to every publish. The one exception is a small object placed in
    /// a reserved block (see `StoreClient::create_with`): the daemon first
    /// learns of it here, and an id that already exists is reported late, by
    /// `StoreClient::sync` or a later call ([`crate::Error::Earlier`]).
    /// Requests on one connection are handled in order, so this client's
    /// next request already sees the object sealed; other clients' `get`s
    /// wait until the daemon has sealed it. Fails now only if the connection
    /// is broken.
    pub fn seal(mut self) -> Result<()> {
        self.finished = true;
        self.inner.conn.post_all(&self.seal_requests(0))
    }

    /// The requests that seal this object with `deliveries` more receivers
    /// than it was created with, in order. Normally a redeliver (if any)
    /// then the seal: the daemon counts receivers an unsealed object's
    /// creator announces, and counting them before the seal wakes the
    /// claims waiting for it means no receiver's release can overtake
    /// them. For a small object in a reserved block, one publish (create
    /// and seal at once: the daemon learns of it only now) carrying all
    /// its deliveries.
    fn seal_requests(&self, deliveries: u32) -> Vec<Request<'static>> {
        let (id, p) = (self.id, self.placement);
        match self.reserved {
            Some((_, created_with)) => vec![Request::Publish {
                id,
                offset: p.data_offset,
                data_size: p.data_size,
                metadata_size: p.metadata_size,
                deliveries: created_with.saturating_add(deliveries),
            }],
            None if deliveries == 0 => vec![Request::Seal { id }],
            None => vec![Request::Redeliver { id, deliveries }, Request::Seal { id }],
        }
    }

    /// Seals the object and keeps a reference on it, as if this client had
    /// then got it, without waiting for any reply: the seal (or publish)
    /// and a claim of the object are posted, in that order, on this
    /// connection (to its outbox, or in one write to the socket), so the
    /// claim always finds the object sealed. The returned `Object` releases
    /// its reference (settling one delivery) when dropped. For a producer
    /// that goes on reading what it wrote (a loan sent on by reference).
    pub fn seal_and_keep(self) -> Result<Object> {
        self.seal_and_send(0)
    }

    /// [`ObjectMut::seal_and_keep`] for a producer that sends the object by
    /// reference as it seals it: `deliveries` more receivers are announced
    /// in the same post, counted before the seal (see `seal_requests`).
    pub fn seal_and_send(mut self, deliveries: u32) -> Result<Object> {
        self.finished = true;
        let (id, placement) = (self.id, self.placement);
        let mut requests = self.seal_requests(deliveries);
        requests.push(Request::Claim { id, placement, timeout: Some(std::time::Duration::ZERO) });
        self.inner.conn.post_all(&requests)?;
        Ok(Object::new(self.inner.clone(), id, placement))
    }

    /// Gives the object up; its memory returns to the arena.
    pub fn abort(mut self) -> Result<()> {
        self.finished = true;
        if let Some((class, _)) = self.reserved {
            // The daemon never heard of it: the block just goes back.
            self.inner.give_back(class, self.placement.data_offset);
            return Ok(());
        }
        match self.inner.conn.call(&Request::Abort { id: self.id })? {
            Reply::Done => Ok(()),
            other => Err(unexpected("abort", &other)),
        }
    }
}

impl fmt::Debug for ObjectMut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectMut").field("id", &self.id).field("placement", &self.placement).finish()
    }
}

impl Drop for ObjectMut {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        match self.reserved {
            Some((class, _)) => self.inner.give_back(class, self.placement.data_offset),
            // A broken connection already aborted the object daemon-side.
            None => {
                let _ = self.inner.conn.post(&Request::Abort { id: self.id });
            }
        }
    }
}
