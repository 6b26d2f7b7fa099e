//! [`Encoder`]: values to payload bytes, large buffers into the store;
//! [`Loan`], a buffer written straight into the store; and
//! [`EncodeSession`], the same policy for codecs that write the MessagePack
//! themselves (the Python SDK).
//!
//! `Buffer`'s `Serialize` cannot see the encoder through serde, so
//! [`Encoder::encode`] installs an *encode context* in a thread-local for
//! the duration of the call, and [`place`] (called by every buffer as it is
//! serialized) applies the policy through it. The context is installed by
//! a guard that restores whatever was there before, so encodes may nest (a
//! `Serialize` impl may itself encode) and a panic leaves nothing behind.
//!
//! Objects are created while serializing but sealed only once the whole
//! message is encoded: if anything fails midway, dropping the unsealed
//! objects aborts them, and no object is left pinned by deliveries that
//! will never come.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use hprm_store::{CreateOptions, ErrorCode, Object, ObjectId, ObjectMut, StoreClient};
use serde::Serialize;

use super::buffer::{Data, Stored, View};
use super::descriptor::{
    contiguous_len, shape_error, At, DescriptorRef, LocationRef, SpilledMessage, EXT_ARROW, EXT_BUFFER, EXT_BYTES,
    EXT_TENSOR,
};
use super::msgpack::Writer;
use super::scoped::Installed;
use super::{Buffer, Dtype, Element, PayloadError, StoreLink, DEFAULT_THRESHOLD, MAX_INLINE};

/// Turns values into payload bytes (MessagePack, structs as maps), sending
/// buffers of `threshold` bytes or more out-of-band through the store and
/// spilling messages too large to travel in-band.
///
/// Cheap to clone; share it freely between threads.
#[derive(Debug, Clone)]
pub struct Encoder {
    store: StoreLink,
    threshold: usize,
    max_inline: usize,
    wait_for_space: Duration,
}

impl Encoder {
    /// An encoder sending buffers of `threshold` bytes or more (usually
    /// [`DEFAULT_THRESHOLD`]) through `store`.
    pub fn new(store: StoreLink, threshold: usize) -> Encoder {
        Encoder { store, threshold, max_inline: MAX_INLINE, wait_for_space: Duration::ZERO }
    }

    /// Largest in-band message; larger ones are spilled into the store
    /// (default [`MAX_INLINE`], the most a frame carries; lower it to spill
    /// earlier, never raise it over what the transport carries).
    pub fn with_max_inline(mut self, max_inline: usize) -> Encoder {
        self.max_inline = max_inline;
        self
    }

    /// When the store is full of live data, wait up to this long for space
    /// before failing (default: fail at once).
    pub fn with_wait_for_space(mut self, wait: Duration) -> Encoder {
        self.wait_for_space = wait;
        self
    }

    /// The out-of-band threshold in bytes.
    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// The store this encoder puts buffers in.
    pub fn store(&self) -> &StoreLink {
        &self.store
    }

    /// Encodes `value` for `deliveries` receivers: the payload bytes to
    /// send, at most [`Encoder::with_max_inline`] long.
    ///
    /// Every object created in the store (one per large buffer, one for a
    /// spilled message) is created with `deliveries` expected deliveries,
    /// so it stays pinned until each receiver has read and released it (or
    /// the store's delivery TTL runs out): send the bytes to exactly that
    /// many receivers. With 0 the objects are evictable as soon as sealed.
    ///
    /// A buffer already in the store (received, or sent before) travels by
    /// reference, without a copy: once the message has encoded, the store
    /// is told of `deliveries` more receivers of that object (a one-way
    /// "redeliver" on the connection holding it, so it precedes this
    /// side's own release), which keeps it pinned until they release it.
    /// A buffer from [`Loan::finish`] had its deliveries paid at loan time:
    /// its first encode with the same `deliveries` needs no redeliver. A
    /// buffer that appears several times in one message (clones of one
    /// `Buffer`) is sent once. Such buffers must come from the store this
    /// encoder's receivers read (one store per host).
    pub fn encode<T: Serialize + ?Sized>(&self, value: &T, deliveries: u32) -> Result<Vec<u8>, PayloadError> {
        let installed = Installed::new(&CONTEXT, self.context(deliveries));
        let result = rmp_serde::to_vec_named(value);
        let mut context = installed.finish();
        let outcome = match result {
            Ok(bytes) => self.spill_if_large(bytes, &mut context),
            Err(e) => Err(context.error.take().unwrap_or_else(|| PayloadError::Serialize { message: e.to_string() })),
        };
        match outcome.and_then(|bytes| context.seal_all().map(|()| bytes)) {
            Ok(bytes) => Ok(bytes),
            Err(e) => {
                context.undo();
                Err(e)
            }
        }
    }

    /// Starts an encode driven by hand, for codecs that write the
    /// MessagePack themselves (the Python SDK walks Python values, not
    /// serde types): they write the message, call
    /// [`EncodeSession::write_buffer`] for each buffer in it, and
    /// [`EncodeSession::finish`] with the message. Deliveries, the
    /// threshold and spilling are exactly those of [`Encoder::encode`].
    pub fn session(&self, deliveries: u32) -> EncodeSession {
        EncodeSession { encoder: self.clone(), context: self.context(deliveries), seen: Vec::new() }
    }

    fn context(&self, deliveries: u32) -> Context {
        Context {
            store: self.store.clone(),
            threshold: self.threshold,
            deliveries,
            wait_for_space: self.wait_for_space,
            unsealed: Vec::new(),
            placed: Vec::new(),
            prepaid_taken: Vec::new(),
            redelivered: Vec::new(),
            error: None,
        }
    }

    /// The message itself, or, when it is over the in-band limit, a
    /// reference to a store object holding it.
    fn spill_if_large(&self, bytes: Vec<u8>, context: &mut Context) -> Result<Vec<u8>, PayloadError> {
        if bytes.len() <= self.max_inline {
            return Ok(bytes);
        }
        let client = self
            .store
            .client()?
            .ok_or(PayloadError::NoStoreForMessage { nbytes: bytes.len(), max: self.max_inline })?;
        let started = crate::trace::tracer().map(|t| t.now());
        let mut object = context.create(&client, bytes.len() as u64, context.deliveries)?;
        object.data_mut().copy_from_slice(&bytes);
        if let (Some(t), Some(s)) = (crate::trace::tracer(), started) {
            t.put(object.id(), bytes.len() as u64, s);
        }
        let spilled = SpilledMessage { id: object.id(), nbytes: bytes.len() as u64 };
        let at = At::of_mut(&object);
        context.unsealed.push(object);
        tracing::trace!(id = %spilled.id, nbytes = bytes.len(), "message spilled into the store");
        Ok(spilled.to_payload_at(Some(at)))
    }

    /// Lends a buffer of `shape` elements of `dtype` to fill in place in
    /// the store, for `deliveries` receivers: the zero-copy way to produce
    /// a large output (a camera captures straight into it).
    ///
    /// The object is created with `deliveries + 1` deliveries: one for each
    /// receiver of the first message that carries it, paid in advance, and
    /// one for the producer's own reference (see [`Loan::finish`]). Encode
    /// it for at least as many receivers: more are announced to the store
    /// at the seal (a tap holding the message, `crate::tap`); for fewer,
    /// the prepaid deliveries left over pin the loaned object until the
    /// store's delivery TTL runs out. Even a loan under the threshold
    /// travels by reference the first time, for the same reason.
    pub fn loan(&self, dtype: Dtype, shape: &[usize], deliveries: u32) -> Result<Loan, PayloadError> {
        let nbytes = contiguous_len(&dtype, shape).ok_or_else(|| shape_error(&dtype, shape, 0))?;
        let client = self.store.client()?.ok_or(PayloadError::NoStoreForLoan { nbytes: nbytes as usize })?;
        let started = crate::trace::tracer().map(|t| t.now());
        let object = create_object(&client, nbytes, deliveries.saturating_add(1), self.wait_for_space)?;
        if let (Some(t), Some(s)) = (crate::trace::tracer(), started) {
            t.put(object.id(), nbytes, s);
        }
        Ok(Loan { object, dtype, shape: shape.to_vec(), deliveries })
    }
}

impl Default for Encoder {
    /// No store, the default threshold: everything small travels in-band,
    /// and anything large is refused with an error saying so.
    fn default() -> Encoder {
        Encoder::new(StoreLink::none(), DEFAULT_THRESHOLD)
    }
}

/// Creates an object of `nbytes` for `deliveries` receivers, waiting up to
/// `wait` for space (the output's backpressure policy).
///
/// An object small enough for a block the store client reserved ahead
/// ([`hprm_store::client::SMALL_OBJECT_MAX`]) is asked for without a wait
/// first, since only a create without one takes such a block, with no
/// round trip (a 64 KiB message: p50 16-20 µs peer to peer instead of 32-38,
/// `bench/README.md`); and again with the wait only if the store had no
/// block to reserve (full, or the program at its quota), so the policy
/// holds for small objects too. The id is fresh, so the one error a
/// reserved block reports late, a duplicate id, cannot happen.
fn create_object(
    client: &StoreClient,
    nbytes: u64,
    deliveries: u32,
    wait: Duration,
) -> Result<ObjectMut, PayloadError> {
    let id = ObjectId::random();
    let with = |wait_for_space| client.create_with(id, nbytes, b"", &CreateOptions { deliveries, wait_for_space });
    let made = if nbytes <= hprm_store::client::SMALL_OBJECT_MAX && !wait.is_zero() {
        match with(Duration::ZERO) {
            Err(e) if matches!(e.code(), Some(ErrorCode::OutOfMemory | ErrorCode::QuotaExceeded)) => with(wait),
            made => made,
        }
    } else {
        with(wait)
    };
    made.map_err(|e| PayloadError::from_store("create", nbytes, e))
}

/// The state of one [`Encoder::encode`] call, reachable by the buffers it
/// serializes.
struct Context {
    store: StoreLink,
    threshold: usize,
    deliveries: u32,
    wait_for_space: Duration,
    /// Objects written during this encode, sealed when it succeeds.
    unsealed: Vec<ObjectMut>,
    /// Buffers already placed in the store by this encode (their data kept
    /// alive, so their keys cannot be reused by another allocation), with
    /// where their objects lie.
    placed: Vec<(Data, ObjectId, At)>,
    /// Loaned objects whose prepaid deliveries this encode used, with
    /// how many were prepaid.
    prepaid_taken: Vec<(Arc<Stored>, u32)>,
    /// Objects sent on by reference (received earlier, or loaned for fewer
    /// receivers than this message has), with the receivers to announce.
    redelivered: Vec<(SentOn, u32)>,
    /// The typed error behind a serde error, reported instead of serde's
    /// text.
    error: Option<PayloadError>,
}

impl Context {
    fn create(&self, client: &StoreClient, nbytes: u64, deliveries: u32) -> Result<ObjectMut, PayloadError> {
        create_object(client, nbytes, deliveries, self.wait_for_space)
    }

    /// Where `view`'s bytes go: the one place the policy lives.
    fn place<'v>(&mut self, view: &View<'v>) -> Result<LocationRef<'v>, PayloadError> {
        if let Some(data) = view.data {
            let key = data.key();
            if let Some((_, id, at)) = self.placed.iter().find(|(d, ..)| d.key() == key) {
                return Ok(LocationRef::Store(*id, Some(*at)));
            }
            if let Data::Stored(stored) = data {
                let id = stored.object.id();
                let at = At::of(&stored.object);
                if let Some(more) = stored.take_prepaid(self.deliveries) {
                    self.prepaid_taken.push((stored.clone(), self.deliveries - more));
                    if more > 0 {
                        // The producer holds its own reference until after
                        // the seal: announcing more receivers is safe.
                        self.redelivered.push((SentOn::Buffer(stored.clone()), more));
                    }
                } else {
                    // Sent on (an echo, a relay): announce its new receivers
                    // to the store instead of copying it (at seal, once the
                    // whole message encoded).
                    self.redelivered.push((SentOn::Buffer(stored.clone()), self.deliveries));
                }
                self.placed.push((data.clone(), id, at));
                return Ok(LocationRef::Store(id, Some(at)));
            }
        }
        let nbytes = view.bytes.len();
        if nbytes < self.threshold {
            return Ok(LocationRef::Inline(view.bytes));
        }
        let (id, at) = self.store_new(nbytes, |data| {
            data.copy_from_slice(view.bytes);
            Ok(())
        })?;
        if let Some(data) = view.data {
            self.placed.push((data.clone(), id, at));
        }
        Ok(LocationRef::Store(id, Some(at)))
    }

    /// Creates an object of `nbytes` for this message and has `fill` write
    /// all of its bytes (sealed with the rest of the message).
    fn store_new(
        &mut self,
        nbytes: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), PayloadError>,
    ) -> Result<(ObjectId, At), PayloadError> {
        let store = self.store.clone();
        let client = store.client()?.ok_or(PayloadError::NoStoreForBuffer { nbytes, threshold: self.threshold })?;
        let started = crate::trace::tracer().map(|t| t.now());
        let mut object = self.create(&client, nbytes as u64, self.deliveries)?;
        // On failure the object is dropped unsealed: aborted.
        fill(object.data_mut())?;
        let id = object.id();
        let at = At::of_mut(&object);
        if let (Some(t), Some(s)) = (crate::trace::tracer(), started) {
            t.put(id, nbytes as u64, s);
        }
        self.unsealed.push(object);
        Ok((id, at))
    }

    /// Seals every object of the message. Seal is one-way (it fails only
    /// on a broken connection), and receivers' gets wait until it lands.
    fn seal_all(&mut self) -> Result<(), PayloadError> {
        for (sent, deliveries) in self.redelivered.drain(..) {
            sent.object().redeliver(deliveries).map_err(|e| PayloadError::from_store("redeliver", 0, e))?;
        }
        for object in self.unsealed.drain(..) {
            let id = object.id();
            object
                .seal()
                .map_err(|e| PayloadError::from_store("seal", 0, e))
                .inspect_err(|_| tracing::debug!(%id, "seal failed"))?;
        }
        Ok(())
    }

    /// After a failure: aborts what was not sealed (by dropping it) and
    /// gives loaned buffers their prepaid deliveries back.
    fn undo(&mut self) {
        self.unsealed.clear();
        self.redelivered.clear();
        for (stored, prepaid) in self.prepaid_taken.drain(..) {
            stored.restore_prepaid(prepaid);
        }
    }
}

/// A store object sent on by reference: a `Buffer`'s, or one a binding
/// holds ([`EncodeSession::write_stored`]).
enum SentOn {
    Buffer(Arc<Stored>),
    Object(Arc<Object>),
}

impl SentOn {
    fn object(&self) -> &Object {
        match self {
            SentOn::Buffer(s) => &s.object,
            SentOn::Object(o) => o,
        }
    }
}

thread_local! {
    /// The encode in progress on this thread, if any.
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// Serializes `view` into the ext 1 data for the current encode: inline or
/// in the store per the policy. Outside an encode (or if its context is
/// busy, which cannot happen as nothing re-enters it), inline.
pub(crate) fn place(view: &View<'_>) -> Result<Vec<u8>, PayloadError> {
    let location = in_context(|context| context.place(view)).unwrap_or(Ok(LocationRef::Inline(view.bytes)))?;
    let descriptor = DescriptorRef {
        dtype: view.dtype.clone(),
        shape: view.shape.to_vec(),
        strides: None,
        nbytes: view.bytes.len() as u64,
        location,
    };
    descriptor.check()?;
    Ok(descriptor.encode())
}

/// Runs `f` on the current encode's context: `None` outside an encode (or
/// if its context is busy, which cannot happen as nothing re-enters it).
/// An error is kept typed in the context (serde carries only text).
fn in_context<T>(f: impl FnOnce(&mut Context) -> Result<T, PayloadError>) -> Option<Result<T, PayloadError>> {
    CONTEXT.with(|c| {
        let mut slot = c.try_borrow_mut().ok()?;
        let context = slot.as_mut()?;
        Some(f(context).map_err(|e| {
            let text = e.to_string();
            context.error.get_or_insert(e);
            PayloadError::Serialize { message: text }
        }))
    })
}

/// The ext data of a one-dimensional `|u1` buffer of `nbytes` that `fill`
/// writes (all of them) where it will travel: straight into a new store
/// object of the current encode at or over its threshold (no copy of its
/// own), else into inline bytes. For values serialized by writers of their
/// own (an Arrow IPC stream), measured first.
#[cfg_attr(not(feature = "arrow"), allow(dead_code))]
pub(crate) fn place_written(
    nbytes: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), PayloadError>,
) -> Result<Vec<u8>, PayloadError> {
    let mut fill = Some(fill);
    let stored = in_context(|context| {
        if nbytes < context.threshold {
            return Ok(None);
        }
        match fill.take() {
            Some(fill) => context.store_new(nbytes, fill).map(Some),
            None => Ok(None),
        }
    })
    .unwrap_or(Ok(None))?;
    let inline = match (stored, fill) {
        (Some(_), _) => Vec::new(),
        (None, Some(fill)) => {
            let mut inline = vec![0; nbytes];
            fill(&mut inline)?;
            inline
        }
        (None, None) => return Err(PayloadError::Serialize { message: "a buffer was written twice".into() }),
    };
    let location = match stored {
        Some((id, at)) => LocationRef::Store(id, Some(at)),
        None => LocationRef::Inline(&inline),
    };
    let shape = [nbytes];
    let descriptor =
        DescriptorRef { dtype: Dtype::U8, shape: shape.to_vec(), strides: None, nbytes: nbytes as u64, location };
    descriptor.check()?;
    Ok(descriptor.encode())
}

/// One encode driven by hand, from [`Encoder::session`]: the caller writes
/// the MessagePack message itself and has the session write its buffers
/// (placing each inline or in the store by the encoder's policy), then
/// [`EncodeSession::finish`]es it. Objects are created as buffers are
/// written and sealed only by `finish`; a session dropped unfinished (an
/// error midway) aborts them, so nothing is left pinned.
pub struct EncodeSession {
    encoder: Encoder,
    context: Context,
    /// Memory already stored by this session (address and length, from
    /// [`EncodeSession::write_buffer`] with `stable`), so that the same
    /// bytes met again in the message are stored once; with where the
    /// object lies.
    seen: Vec<((usize, usize), ObjectId, At)>,
}

impl EncodeSession {
    /// Appends to `out` the extension value of one C-contiguous buffer of
    /// `shape` elements of `dtype`: its bytes inline when under the
    /// threshold, else copied once into a new store object created with the
    /// session's deliveries. `ext` is [`EXT_BUFFER`] (an array),
    /// [`EXT_TENSOR`] (a torch tensor, any dtype like an array), or
    /// [`EXT_BYTES`] or [`EXT_ARROW`] (a byte string: `dtype` must be `|u1`
    /// and `shape` one dimension). Returns the store object, if the bytes went there.
    ///
    /// `stable` says that `bytes` belong to the value being encoded and stay
    /// where they are until [`EncodeSession::finish`] (not a temporary
    /// copy): then a buffer over the same memory met again in this message
    /// refers to the object already written instead of storing it twice.
    ///
    /// Creating an object is a round trip to the store: callers holding a
    /// lock (Python's GIL) should release it around large buffers.
    pub fn write_buffer(
        &mut self,
        out: &mut Vec<u8>,
        ext: i8,
        dtype: &Dtype,
        shape: &[usize],
        bytes: &[u8],
        stable: bool,
    ) -> Result<Option<ObjectId>, PayloadError> {
        check_buffer_ext(ext, dtype, shape)?;
        let key = (bytes.as_ptr() as usize, bytes.len());
        let known = if stable { self.seen.iter().find(|(k, ..)| *k == key).map(|&(_, id, at)| (id, at)) } else { None };
        let location = match known {
            Some((id, at)) => LocationRef::Store(id, Some(at)),
            None => self.context.place(&View { dtype, shape, bytes, data: None })?,
        };
        let id = match location {
            LocationRef::Store(id, _) => Some(id),
            LocationRef::Inline(_) => None,
        };
        if let (LocationRef::Store(id, Some(at)), true, None) = (location, stable, known) {
            self.seen.push((key, id, at));
        }
        let descriptor = DescriptorRef {
            dtype: dtype.clone(),
            shape: shape.to_vec(),
            strides: None,
            nbytes: bytes.len() as u64,
            location,
        };
        descriptor.check()?;
        let data = descriptor.encode();
        Writer(out).ext_header(ext, data.len());
        out.extend_from_slice(&data);
        Ok(id)
    }

    /// Appends to `out` a byte string (`ext` [`EXT_BYTES`] or
    /// [`EXT_ARROW`]) of `nbytes` that `fill` writes, all of them, where it
    /// will travel: straight into a new store object (created with the
    /// session's deliveries, sealed by [`EncodeSession::finish`]) at or over
    /// the threshold, else into inline bytes. For values serialized by
    /// writers of their own (a binding's Arrow IPC stream), measured first:
    /// the bytes are written once, with no copy of their own. Returns the
    /// store object, if the bytes went there.
    ///
    /// Creating an object is a round trip to the store, as in
    /// [`EncodeSession::write_buffer`].
    pub fn write_filled(
        &mut self,
        out: &mut Vec<u8>,
        ext: i8,
        nbytes: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), PayloadError>,
    ) -> Result<Option<ObjectId>, PayloadError> {
        let shape = [nbytes];
        if ext != EXT_BYTES && ext != EXT_ARROW {
            return Err(PayloadError::Serialize { message: format!("extension type {ext} is not a byte string") });
        }
        let mut inline = Vec::new();
        let (location, id) = if nbytes >= self.context.threshold {
            let (id, at) = self.context.store_new(nbytes, fill)?;
            (LocationRef::Store(id, Some(at)), Some(id))
        } else {
            inline.resize(nbytes, 0);
            fill(&mut inline)?;
            (LocationRef::Inline(&inline), None)
        };
        let descriptor =
            DescriptorRef { dtype: Dtype::U8, shape: shape.to_vec(), strides: None, nbytes: nbytes as u64, location };
        descriptor.check()?;
        let data = descriptor.encode();
        Writer(out).ext_header(ext, data.len());
        out.extend_from_slice(&data);
        Ok(id)
    }

    /// Writes a [`Buffer`] (a binding's handle on one, e.g. a finished
    /// [`Loan`]) as [`Encoder::encode`] would: by reference when it is in
    /// the store (a loan's first send uses its prepaid deliveries), else by
    /// the threshold policy.
    pub fn write_value_buffer(&mut self, out: &mut Vec<u8>, buffer: &Buffer) -> Result<Option<ObjectId>, PayloadError> {
        let location = self.context.place(&buffer.view())?;
        let id = match location {
            LocationRef::Store(id, _) => Some(id),
            LocationRef::Inline(_) => None,
        };
        let descriptor = DescriptorRef {
            dtype: buffer.dtype().clone(),
            shape: buffer.shape().to_vec(),
            strides: None,
            nbytes: buffer.bytes().len() as u64,
            location,
        };
        descriptor.check()?;
        let data = descriptor.encode();
        Writer(out).ext_header(EXT_BUFFER, data.len());
        out.extend_from_slice(&data);
        Ok(id)
    }

    /// Writes a buffer that is a whole store object this side holds (a
    /// binding's view of a received buffer): sent on by reference, the
    /// store told of the new receivers at [`EncodeSession::finish`], as
    /// [`Encoder::encode`] does for a received `Buffer`.
    pub fn write_stored(
        &mut self,
        out: &mut Vec<u8>,
        ext: i8,
        dtype: &Dtype,
        shape: &[usize],
        object: Arc<Object>,
    ) -> Result<ObjectId, PayloadError> {
        self.write_reference(out, ext, dtype, shape, object, true)
    }

    /// Writes a buffer that is a whole store object whose receivers for
    /// this message the caller has already announced to the store (it
    /// sealed the object with them: `ObjectMut::seal_and_send` with
    /// [`EncodeSession::deliveries`]). A later write of the same object in
    /// this message announces nothing either.
    pub fn write_announced(
        &mut self,
        out: &mut Vec<u8>,
        ext: i8,
        dtype: &Dtype,
        shape: &[usize],
        object: Arc<Object>,
    ) -> Result<ObjectId, PayloadError> {
        self.write_reference(out, ext, dtype, shape, object, false)
    }

    fn write_reference(
        &mut self,
        out: &mut Vec<u8>,
        ext: i8,
        dtype: &Dtype,
        shape: &[usize],
        object: Arc<Object>,
        redeliver: bool,
    ) -> Result<ObjectId, PayloadError> {
        check_buffer_ext(ext, dtype, shape)?;
        let id = object.id();
        let nbytes = object.data().len() as u64;
        let at = At::of(&object);
        let key = (object.data().as_ptr() as usize, object.data().len());
        if !self.seen.iter().any(|(k, ..)| *k == key) {
            self.seen.push((key, id, at));
            if redeliver {
                self.context.redelivered.push((SentOn::Object(object), self.context.deliveries));
            }
        }
        let location = LocationRef::Store(id, Some(at));
        let descriptor = DescriptorRef { dtype: dtype.clone(), shape: shape.to_vec(), strides: None, nbytes, location };
        descriptor.check()?;
        let data = descriptor.encode();
        Writer(out).ext_header(ext, data.len());
        out.extend_from_slice(&data);
        Ok(id)
    }

    /// The receivers this message goes to.
    pub fn deliveries(&self) -> u32 {
        self.context.deliveries
    }

    /// Ends the encode with the complete `message`: spills it into the
    /// store when it is over the in-band limit, seals every object, and
    /// returns the payload bytes to send. On failure every object is
    /// aborted.
    pub fn finish(mut self, message: Vec<u8>) -> Result<Vec<u8>, PayloadError> {
        let outcome = self.encoder.spill_if_large(message, &mut self.context);
        match outcome.and_then(|bytes| self.context.seal_all().map(|()| bytes)) {
            Ok(bytes) => Ok(bytes),
            Err(e) => {
                self.context.undo();
                Err(e)
            }
        }
    }

    /// The encoder this session follows.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }
}

impl std::fmt::Debug for EncodeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodeSession")
            .field("deliveries", &self.context.deliveries)
            .field("unsealed", &self.context.unsealed.len())
            .finish()
    }
}

/// A buffer being written in place in the store, from [`Encoder::loan`].
/// Fill it, then [`Loan::finish`] it into a [`Buffer`] to send. Dropped
/// unfinished, the object is aborted and its memory freed.
pub struct Loan {
    object: ObjectMut,
    dtype: Dtype,
    shape: Vec<usize>,
    deliveries: u32,
}

impl Loan {
    /// The bytes to fill in (their initial content is unspecified).
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        self.object.data_mut()
    }

    /// The elements to fill in, if `T` is the loan's dtype (store objects
    /// are 64-byte aligned, so the cast always holds).
    pub fn as_mut_slice<T: Element>(&mut self) -> Option<&mut [T]> {
        if self.dtype != T::DTYPE {
            return None;
        }
        bytemuck::try_cast_slice_mut(self.object.data_mut()).ok()
    }

    /// The store object being written.
    pub fn id(&self) -> ObjectId {
        self.object.id()
    }

    pub fn dtype(&self) -> &Dtype {
        &self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Seals the object and returns it as a read-only, shared [`Buffer`]
    /// holding the producer's own reference (which settles the extra
    /// delivery when the buffer is dropped). Its first encode sends the
    /// object's reference without a copy.
    ///
    /// No round trip: the seal and the claim of the producer's reference go
    /// out one-way, in that order, on the loan's connection
    /// ([`ObjectMut::seal_and_keep`]). It fails only on a broken
    /// connection, where the daemon aborts or releases everything anyway.
    pub fn finish(self) -> Result<Buffer, PayloadError> {
        let Loan { object, dtype, shape, deliveries } = self;
        let object = object.seal_and_keep().map_err(|e| PayloadError::from_store("seal", 0, e))?;
        Ok(Buffer::from_stored(dtype, shape, Arc::new(Stored::new(object, Some(deliveries)))))
    }
}

impl std::fmt::Debug for Loan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loan").field("id", &self.id()).field("dtype", &self.dtype).field("shape", &self.shape).finish()
    }
}

/// Whether `ext` is a type written as a buffer (inline or by reference),
/// with a dtype and shape it allows: arrays and tensors any, byte strings
/// and Arrow IPC streams one dimension of bytes.
fn check_buffer_ext(ext: i8, dtype: &Dtype, shape: &[usize]) -> Result<(), PayloadError> {
    match ext {
        EXT_BUFFER | EXT_TENSOR => Ok(()),
        EXT_BYTES | EXT_ARROW if *dtype == Dtype::U8 && shape.len() == 1 => Ok(()),
        EXT_BYTES | EXT_ARROW => Err(PayloadError::Serialize {
            message: format!("a byte string (ext {ext}) must be one dimension of |u1, not {shape:?} of {dtype}"),
        }),
        other => Err(PayloadError::Serialize { message: format!("extension type {other} is not a buffer type") }),
    }
}
