//! [`Decoder`]: payload bytes back to values, with buffers in the store
//! mapped zero-copy.
//!
//! Decoding first walks the message once (without building anything) to
//! validate its structure and find every store object it references, then
//! takes all of them, and only then runs serde. An object whose descriptor
//! gives its place in the arena (every writer since wire format 1.1) is
//! mapped at once and claimed with a one-way message: no round trip. The
//! others are taken in one `get` (one round trip however many buffers).
//! Taking every referenced object, not just those the target type reads,
//! is what settles this receiver's delivery of each: an object skipped by
//! the type (an unknown field) is released at the end of the call instead
//! of staying pinned until the store's delivery TTL. An object referenced
//! twice is taken once.
//!
//! As for encoding, `Buffer`'s `Deserialize` reaches the fetched objects
//! through a thread-local *decode context* installed for the call by a
//! guard that restores the previous one.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use hprm_store::protocol::message::Placement;
use hprm_store::{Object, ObjectId};
use serde::de::DeserializeOwned;

use super::buffer::Stored;
use super::descriptor::{
    At, DescriptorRef, LocationRef, SpilledMessage, EXT_ARROW, EXT_BUFFER, EXT_BYTES, EXT_PICKLED, EXT_SPILLED,
    EXT_TENSOR,
};
use super::msgpack::{Item, Reader};
use super::scoped::Installed;
use super::{Buffer, PayloadError, StoreLink, DEFAULT_GET_TIMEOUT};

/// Deepest nesting of arrays and maps accepted (rmp-serde's own limit).
const MAX_DEPTH: usize = 1024;

thread_local! {
    /// Bytes of store objects this thread has taken, ever: read around a
    /// decode, what one message referenced (`crate::figures`).
    static TAKEN: Cell<u64> = const { Cell::new(0) };
}

/// Bytes of store objects the calling thread has taken so far.
pub(crate) fn taken_bytes() -> u64 {
    TAKEN.with(Cell::get)
}

fn took(bytes: u64) {
    TAKEN.with(|t| t.set(t.get().wrapping_add(bytes)));
}

/// Turns payload bytes into values. Cheap to clone; share it freely
/// between threads.
#[derive(Debug, Clone)]
pub struct Decoder {
    store: StoreLink,
    get_timeout: Duration,
    /// In a program with hosts: the hosts this host's link has lost.
    lost_hosts: Option<super::LostHosts>,
}

/// How long one wait for another host's object lasts before the decoder
/// looks whether that host was lost (then gives up at once).
const HOST_CHECK: Duration = Duration::from_millis(50);

/// Every how many of those waits a receiver that could not reach its link
/// asks it again to fetch what is missing (a link that starts late).
const ASK_AGAIN: u32 = 5;

impl Decoder {
    /// A decoder reading out-of-band buffers from `store`, waiting up to
    /// `get_timeout` (usually [`DEFAULT_GET_TIMEOUT`]) for an object that is
    /// not sealed yet.
    pub fn new(store: StoreLink, get_timeout: Duration) -> Decoder {
        Decoder { store, get_timeout, lost_hosts: None }
    }

    /// In a program with hosts: a wait for objects of another host's
    /// arena ends as soon as this host's link has lost that host
    /// ([`PayloadError::HostLost`], naming it), not at the get timeout.
    pub fn watching_hosts(mut self, lost: Option<super::LostHosts>) -> Decoder {
        self.lost_hosts = lost;
        self
    }

    /// Runs `get` (a store wait of the given length, for operation `op`
    /// of `nbytes`) for objects whose descriptors name the arenas
    /// `arenas`: at once for the whole timeout when no host is watched or
    /// every arena is this store's; else in short waits, between which a
    /// lost host owning one of the arenas ends it, and after the first of
    /// which the link is asked to fetch what is still missing
    /// ([`super::FetchRequest`]): its answer that the objects are gone
    /// ends the wait too ([`PayloadError::Gone`]).
    fn wait_for<T>(
        &self,
        op: &'static str,
        nbytes: u64,
        arenas: &[u64],
        mut get: impl FnMut(Duration) -> Result<T, hprm_store::Error>,
    ) -> Result<T, PayloadError> {
        let here = self.store.client().ok().flatten().map(|c| c.arena_id());
        let mut foreign: Vec<u64> = arenas.iter().copied().filter(|a| Some(*a) != here).collect();
        foreign.sort_unstable();
        foreign.dedup();
        let Some(lost) = self.lost_hosts.as_ref().filter(|_| !foreign.is_empty()) else {
            return get(self.get_timeout).map_err(|e| PayloadError::from_store(op, nbytes, e));
        };
        let started = std::time::Instant::now();
        let mut ask: Option<super::fetch::Ask> = None;
        let mut answered = false;
        let mut slices = 0u32;
        loop {
            let left = self.get_timeout.saturating_sub(started.elapsed());
            match get(left.min(HOST_CHECK)) {
                Err(hprm_store::Error::Timeout { missing, .. }) => {
                    if let Some(host) = foreign.iter().find_map(|arena| lost.host_of(*arena)) {
                        return Err(PayloadError::HostLost { host, missing, waited: started.elapsed() });
                    }
                    // Asked once answered; until the link answers (or is
                    // reached: it may start after this receiver), again
                    // every few waits.
                    if let Some(a) = ask.as_mut() {
                        match a.poll() {
                            Some(super::FetchAnswer::Gone { host, reason }) => {
                                return Err(PayloadError::Gone { host, reason, missing, waited: started.elapsed() })
                            }
                            Some(_) => {
                                answered = true;
                                ask = None;
                            }
                            None => {}
                        }
                    } else if !answered && slices % ASK_AGAIN == 0 {
                        let req = super::FetchRequest { arenas: foreign.clone(), ids: missing.clone() };
                        ask = super::fetch::Ask::send(lost.link(), &req);
                    }
                    slices += 1;
                    if left <= HOST_CHECK {
                        return Err(PayloadError::NotInStore { missing, waited: started.elapsed() });
                    }
                }
                r => return r.map_err(|e| PayloadError::from_store(op, nbytes, e)),
            }
        }
    }

    /// Decodes one payload (as made by [`super::Encoder::encode`] or the
    /// Python SDK). Buffers in the store come back as zero-copy [`Buffer`]s
    /// holding one store reference each; dropping the last clone releases
    /// it.
    pub fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, PayloadError> {
        match self.take_spilled(bytes)? {
            // Held until the message is decoded, then released (settling
            // this receiver's delivery of it).
            Some(object) => self.decode_in_band(object.data()),
            None => self.decode_in_band(bytes),
        }
    }

    /// The store this decoder reads buffers from.
    pub fn store(&self) -> &StoreLink {
        &self.store
    }

    /// How long a get waits for an object that is not sealed yet.
    pub fn get_timeout(&self) -> Duration {
        self.get_timeout
    }

    /// If `payload` is a spilled message (ext 2), takes the store object
    /// holding the real message: read the message from its data, then drop
    /// it, which settles this receiver's delivery. `None` for an in-band
    /// payload. For codecs that read the MessagePack themselves (the Python
    /// SDK); [`Decoder::decode`] does this itself.
    pub fn take_spilled(&self, payload: &[u8]) -> Result<Option<Object>, PayloadError> {
        let Some((spilled, at)) = SpilledMessage::from_payload_at(payload)? else { return Ok(None) };
        if let Some(at) = at {
            self.check_not_dead(at.arena)?;
        }
        let client = self.store.client()?.ok_or(PayloadError::NoStoreForReceive { count: 1 })?;
        let started = crate::trace::tracer().map(|t| t.now());
        let object = match at.filter(|at| at.arena == client.arena_id()) {
            // Placed in this store's arena (wire format 1.1): mapped at
            // once, claimed one-way.
            Some(at) => client
                .claim(spilled.id, placement(at, spilled.nbytes), self.get_timeout)
                .map_err(|e| PayloadError::from_store("claim", spilled.nbytes, e))?,
            None => {
                let arenas: Vec<u64> = at.map(|at| at.arena).into_iter().collect();
                self.wait_for("get", spilled.nbytes, &arenas, |t| client.get_one(spilled.id, t))?
            }
        };
        if let (Some(t), Some(s)) = (crate::trace::tracer(), started) {
            t.get(spilled.id, 1, spilled.nbytes, s);
        }
        took(spilled.nbytes);
        if object.data().len() as u64 != spilled.nbytes {
            return Err(PayloadError::malformed(format!(
                "spilled message {} holds {} bytes, its reference says {}",
                spilled.id,
                object.data().len(),
                spilled.nbytes
            )));
        }
        Ok(Some(object))
    }

    /// Takes and releases every store object `payload` references (the
    /// spilled message and the buffers in it): settles one delivery of
    /// each, for a message this side will not read (a recording or a tap's
    /// copy given up), so that nothing stays pinned until the store's
    /// delivery TTL.
    pub fn settle(&self, payload: &[u8]) -> Result<(), PayloadError> {
        let spilled = self.take_spilled(payload)?;
        let message = spilled.as_ref().map_or(payload, |o| o.data());
        self.take_message(message).map(drop)
    }

    /// Validates an in-band message (one well-formed value, well-formed
    /// buffer descriptors, no spilled-message reference inside) and returns
    /// the distinct store objects it references, in order of appearance,
    /// those of pickled objects' buffers included. With
    /// [`Decoder::take`], what codecs reading the MessagePack themselves
    /// use to take every object of a message in one round trip.
    pub fn references(message: &[u8]) -> Result<Vec<ObjectId>, PayloadError> {
        Ok(Scan::of(message)?.objects)
    }

    /// Validates an in-band message as [`Decoder::references`] does and
    /// takes every store object it references, in order of appearance:
    /// those whose descriptors give their place in the arena without a
    /// round trip ([`hprm_store::StoreClient::claim`]), the others in one
    /// `get`. Each holds one reference until dropped; dropping it settles
    /// this receiver's delivery. For codecs reading the MessagePack
    /// themselves.
    pub fn take_message(&self, message: &[u8]) -> Result<Vec<Object>, PayloadError> {
        let scan = Scan::of(message)?;
        self.take_scanned(&scan)
    }

    /// Takes the objects `ids` from the store, in one request, waiting up
    /// to the decoder's timeout for any not sealed yet. Each holds one
    /// reference until dropped; dropping it settles this receiver's
    /// delivery.
    pub fn take(&self, ids: &[ObjectId]) -> Result<Vec<Object>, PayloadError> {
        self.take_from(ids, &[])
    }

    /// [`Decoder::take`] of objects whose descriptors name the arenas
    /// `arenas` (see [`Decoder::watching_hosts`]).
    fn take_from(&self, ids: &[ObjectId], arenas: &[u64]) -> Result<Vec<Object>, PayloadError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.store.client()?.ok_or(PayloadError::NoStoreForReceive { count: ids.len() })?;
        let started = crate::trace::tracer().map(|t| t.now());
        let objects = self.wait_for("get", 0, arenas, |t| client.get(ids, t))?;
        took(objects.iter().map(|o| o.data().len() as u64).sum());
        if let (Some(t), Some(s)) = (crate::trace::tracer(), started) {
            t.get(ids[0], ids.len() as u32, objects.iter().map(|o| o.data().len() as u64).sum(), s);
        }
        Ok(objects)
    }

    fn decode_in_band<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, PayloadError> {
        let scan = Scan::of(bytes)?;
        if let Some(len) = scan.pickled {
            // Take and release what the message references anyway, so the
            // sender's deliveries are settled; the error is the pickle.
            drop(self.fetch(&scan));
            return Err(PayloadError::Pickled { len });
        }
        let objects = self.fetch(&scan)?;
        let installed = Installed::new(&CONTEXT, Context { objects, error: None });
        let result = rmp_serde::from_slice::<T>(bytes);
        let mut context = installed.finish();
        result.map_err(|e| {
            context.error.take().unwrap_or_else(|| PayloadError::Mismatch {
                type_name: std::any::type_name::<T>(),
                message: e.to_string(),
            })
        })
    }

    /// Takes every referenced object: claimed where the message says where
    /// it lies, the rest in one get.
    fn fetch(&self, scan: &Scan) -> Result<HashMap<ObjectId, Arc<Stored>>, PayloadError> {
        let objects = self.take_scanned(scan)?;
        Ok(objects.into_iter().map(|o| (o.id(), Arc::new(Stored::new(o, None)))).collect())
    }

    fn take_scanned(&self, scan: &Scan) -> Result<Vec<Object>, PayloadError> {
        if scan.objects.is_empty() {
            return Ok(Vec::new());
        }
        for at in scan.placed.values() {
            self.check_not_dead(at.arena)?;
        }
        let client = self.store.client()?.ok_or(PayloadError::NoStoreForReceive { count: scan.objects.len() })?;
        // Offsets into another store's arena (a sender using another
        // store) mean nothing here: those objects are looked up by id.
        let here = |id: &ObjectId| scan.placed.get(id).filter(|at| at.arena == client.arena_id()).copied();
        let unplaced: Vec<ObjectId> = scan.objects.iter().filter(|id| here(id).is_none()).copied().collect();
        let arenas: Vec<u64> = unplaced.iter().filter_map(|id| scan.placed.get(id).map(|at| at.arena)).collect();
        if unplaced.len() == scan.objects.len() {
            return self.take_from(&unplaced, &arenas);
        }
        let started = crate::trace::tracer().map(|t| t.now());
        let mut fetched = self.take_from(&unplaced, &arenas)?.into_iter();
        let mut objects = Vec::with_capacity(scan.objects.len());
        let mut bytes = 0;
        for id in &scan.objects {
            match here(id) {
                Some(at) => {
                    let nbytes = scan.nbytes.get(id).copied().unwrap_or(0);
                    // On error, the objects claimed so far are released
                    // as `objects` drops.
                    objects.push(
                        client
                            .claim(*id, placement(at, nbytes), self.get_timeout)
                            .map_err(|e| PayloadError::from_store("claim", nbytes, e))?,
                    );
                    bytes += nbytes;
                }
                None => objects.extend(fetched.next()),
            }
        }
        took(bytes);
        if let (Some(t), Some(s)) = (crate::trace::tracer(), started) {
            t.get(scan.objects[0], scan.objects.len() as u32, bytes, s);
        }
        Ok(objects)
    }

    /// Fails with [`PayloadError::StoreLost`] if `arena` belonged to a
    /// store that died since this node used it: the object is gone with it
    /// (asking the new store for it would only wait for its timeout).
    fn check_not_dead(&self, arena: u64) -> Result<(), PayloadError> {
        if self.store.is_dead_arena(arena) {
            return Err(PayloadError::StoreLost {
                reason: "the message references an object of a store that has died since it was sent".into(),
            });
        }
        Ok(())
    }
}

impl Default for Decoder {
    /// No store (messages referencing store objects are refused), the
    /// default timeout.
    fn default() -> Decoder {
        Decoder::new(StoreLink::none(), DEFAULT_GET_TIMEOUT)
    }
}

/// What one walk over a message found.
#[derive(Debug, Default, PartialEq, Eq)]
struct Scan {
    /// Distinct store objects referenced, in order of appearance.
    objects: Vec<ObjectId>,
    /// Where those lie whose descriptors say so.
    placed: HashMap<ObjectId, At>,
    /// The data length of each, from its (first) descriptor.
    nbytes: HashMap<ObjectId, u64>,
    /// Data length of the first pickled object, if any.
    pickled: Option<usize>,
}

impl Scan {
    /// Walks the whole message: it must be exactly one well-formed value,
    /// with well-formed buffer descriptors, no spilled-message reference
    /// inside it, and nothing after it.
    fn of(bytes: &[u8]) -> Result<Scan, PayloadError> {
        let mut scan = Scan::default();
        let mut seen = HashSet::new();
        let mut r = Reader::new(bytes);
        scan.walk(&mut r, &mut seen, false)?;
        if r.remaining() != 0 {
            return Err(PayloadError::malformed(format!("{} stray bytes after the message", r.remaining())));
        }
        Ok(scan)
    }

    /// Walks one value (iteratively: depth is bounded by [`MAX_DEPTH`], not
    /// by the stack).
    fn walk(&mut self, r: &mut Reader<'_>, seen: &mut HashSet<ObjectId>, in_pickle: bool) -> Result<(), PayloadError> {
        // Values still to read in each open container, innermost last.
        let mut pending: Vec<u64> = vec![1];
        while let Some(left) = pending.last_mut() {
            if *left == 0 {
                pending.pop();
                continue;
            }
            *left -= 1;
            let children = match r.item()? {
                Item::Leaf => 0,
                Item::Array(n) => u64::from(n),
                Item::Map(n) => 2 * u64::from(n),
                Item::Ext(EXT_BUFFER | EXT_BYTES | EXT_ARROW | EXT_TENSOR, data) => {
                    let d = DescriptorRef::parse(data)?;
                    if let LocationRef::Store(id, at) = d.location {
                        if seen.insert(id) {
                            self.objects.push(id);
                            self.nbytes.insert(id, d.nbytes);
                            if let Some(at) = at {
                                self.placed.insert(id, at);
                            }
                        } else if at.is_some_and(|at| {
                            self.placed.get(&id) != Some(&at) || self.nbytes.get(&id) != Some(&d.nbytes)
                        }) {
                            return Err(PayloadError::malformed(format!(
                                "object {id} is referenced at two different places or sizes"
                            )));
                        }
                    }
                    0
                }
                Item::Ext(EXT_SPILLED, _) => {
                    return Err(PayloadError::malformed(
                        "a spilled-message reference (ext 2) inside a message; it may only be a whole payload",
                    ));
                }
                Item::Ext(EXT_PICKLED, data) => {
                    self.pickled.get_or_insert(data.len());
                    // Its out-of-band buffers (see the wire format) hold
                    // deliveries too. Best effort: a pickle this side
                    // cannot read is an error anyway.
                    if !in_pickle {
                        let _ = self.walk(&mut Reader::new(data), seen, true);
                    }
                    0
                }
                // Other extension types belong to the value's own types.
                Item::Ext(..) => 0,
            };
            if children > 0 {
                if pending.len() >= MAX_DEPTH {
                    return Err(PayloadError::malformed(format!("values nested more than {MAX_DEPTH} deep")));
                }
                pending.push(children);
            }
        }
        Ok(())
    }
}

/// The placement a claim of an object of `nbytes` at `at` states (codec
/// objects have no metadata).
fn placement(at: At, nbytes: u64) -> Placement {
    Placement {
        data_offset: at.offset,
        data_size: nbytes,
        metadata_offset: at.offset.saturating_add(nbytes),
        metadata_size: 0,
    }
}

/// The state of one decode, reachable by the buffers it deserializes.
struct Context {
    /// Every store object the message references, already taken.
    objects: HashMap<ObjectId, Arc<Stored>>,
    /// The typed error behind a serde error, reported instead of serde's
    /// text.
    error: Option<PayloadError>,
}

thread_local! {
    /// The decode in progress on this thread, if any.
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// The [`Buffer`] an extension value (type `ty`, data `data`) stands for;
/// called by `Buffer`'s `Deserialize`, which can only hand serde the
/// error's text. The typed error is kept in the decode context, if any,
/// for [`Decoder::decode`] to report.
pub(crate) fn buffer_from_ext(ty: i8, data: &[u8]) -> Result<Buffer, String> {
    buffer(ty, data).map_err(|e| {
        let text = e.to_string();
        CONTEXT.with(|c| {
            if let Ok(Some(context)) = c.try_borrow_mut().as_deref_mut() {
                context.error.get_or_insert(e);
            }
        });
        text
    })
}

fn buffer(ty: i8, data: &[u8]) -> Result<Buffer, PayloadError> {
    match ty {
        // A byte string, an Arrow IPC stream or a torch tensor is a buffer
        // to Rust.
        EXT_BUFFER | EXT_BYTES | EXT_ARROW | EXT_TENSOR => {}
        EXT_PICKLED => return Err(PayloadError::Pickled { len: data.len() }),
        EXT_SPILLED => {
            return Err(PayloadError::malformed("a spilled-message reference (ext 2) where a buffer was expected"))
        }
        other => {
            return Err(PayloadError::malformed(format!(
                "extension type {other} where a buffer (type {EXT_BUFFER}) was expected"
            )))
        }
    }
    let d = DescriptorRef::parse(data)?;
    d.require_contiguous()?;
    let len = d.len()?;
    match d.location {
        LocationRef::Inline(bytes) => Ok(Buffer::from_inline(d.dtype, d.shape, bytes)),
        LocationRef::Store(id, _) => {
            let stored = CONTEXT.with(|c| match c.try_borrow().as_deref() {
                Ok(Some(context)) => Some(context.objects.get(&id).cloned()),
                _ => None,
            });
            let stored = match stored {
                Some(Some(stored)) => stored,
                // The walk found every reference; only a message changed
                // under us could get here.
                Some(None) => {
                    return Err(PayloadError::malformed(format!("buffer {id} was not among the message's references")))
                }
                None => return Err(PayloadError::NeedsDecoder { id }),
            };
            let held = stored.object.data().len();
            if held != len {
                return Err(PayloadError::malformed(format!(
                    "object {id} holds {held} bytes, its descriptor says {len}"
                )));
            }
            Ok(Buffer::from_stored(d.dtype, d.shape, stored))
        }
    }
}
