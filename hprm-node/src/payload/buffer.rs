//! [`Buffer`]: the n-dimensional byte buffer that travels out-of-band.
//!
//! A buffer's bytes are either owned by this process or a sealed object in
//! the shared-memory store (received, or produced through a
//! [`super::Loan`]); either way cloning shares them. A stored buffer holds
//! one store reference, released when its last clone is dropped: that
//! release is what settles the delivery the sender announced for this
//! receiver.

use std::fmt;
use std::sync::Arc;

use hprm_store::{Object, ObjectId};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::descriptor::{contiguous_len, shape_error};
use super::{decoder, encoder, Dtype, Element, PayloadError};
use crate::sync::Mutex;

/// An n-dimensional, C-contiguous buffer of elements of one [`Dtype`]:
/// camera frames, point clouds, tensors.
///
/// In a payload it becomes a buffer descriptor (ext 1, see the [wire
/// format](super#wire-format)): the bytes inline when small, else a
/// reference to a store object. A received large buffer is a zero-copy view
/// of that object ([`Buffer::is_shared`]).
///
/// Invariants: `len_bytes() == dtype.itemsize() * product(shape)`, and the
/// bytes are aligned for the dtype's [`Element`] type, so
/// [`Buffer::as_slice`] succeeds whenever the dtype matches.
///
/// Outside an [`super::Encoder`], serialization still works: compact
/// formats (MessagePack, bincode) get the descriptor with the bytes inline
/// whatever their size, and human-readable ones (JSON) a map `{dtype,
/// shape, data}`.
#[derive(Clone)]
pub struct Buffer {
    dtype: Dtype,
    shape: Arc<[usize]>,
    data: Data,
}

/// Where a buffer's bytes live.
#[derive(Clone)]
pub(crate) enum Data {
    /// Owned by this process.
    Owned(Arc<dyn Bytes>),
    /// A sealed store object (zero-copy).
    Stored(Arc<Stored>),
}

impl Data {
    /// Identifies the shared bytes, for storing a buffer that appears
    /// several times in one message only once.
    pub(crate) fn key(&self) -> *const u8 {
        match self {
            Data::Owned(b) => Arc::as_ptr(b).cast(),
            Data::Stored(s) => Arc::as_ptr(s).cast(),
        }
    }
}

/// Owned bytes of some element type, viewed as bytes.
pub(crate) trait Bytes: Send + Sync {
    fn bytes(&self) -> &[u8];
}

impl<T: Element> Bytes for Vec<T> {
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }
}

/// Bytes copied into memory aligned for any [`Element`] (8 bytes), for
/// data whose origin gives no alignment (inline bytes of a message).
struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl Aligned {
    fn copy_of(bytes: &[u8]) -> Aligned {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Aligned { words, len: bytes.len() }
    }
}

impl Bytes for Aligned {
    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }
}

/// A sealed store object backing buffers (store objects are 64-byte
/// aligned).
pub(crate) struct Stored {
    pub object: Object,
    /// Deliveries paid for in advance: a [`super::Loan`] creates its object
    /// with the receivers' deliveries (plus one for the producer's own
    /// reference), so the first encode may send this object's reference as
    /// it is. `Some(deliveries)` until then.
    prepaid: Mutex<Option<u32>>,
}

impl Stored {
    pub(crate) fn new(object: Object, prepaid: Option<u32>) -> Stored {
        Stored { object, prepaid: Mutex::new(prepaid) }
    }

    /// Takes the prepaid deliveries for a message to `deliveries`
    /// receivers: `Some(more)`, the receivers still to announce beyond
    /// those paid (a tap holding the message besides the receivers the
    /// loan was made for, `crate::tap`); `None` when nothing was prepaid
    /// (any more), or more than `deliveries` were.
    pub(crate) fn take_prepaid(&self, deliveries: u32) -> Option<u32> {
        let mut prepaid = self.prepaid.lock();
        match *prepaid {
            Some(d) if d <= deliveries => {
                *prepaid = None;
                Some(deliveries - d)
            }
            Some(d) => {
                tracing::warn!(
                    id = %self.object.id(),
                    loaned_for = d,
                    sent_to = deliveries,
                    "a loaned buffer is sent to fewer receivers than it was loaned for; its unused deliveries pin it until the store's delivery TTL"
                );
                None
            }
            None => None,
        }
    }

    /// Gives back prepaid deliveries taken by an encode that then failed.
    pub(crate) fn restore_prepaid(&self, deliveries: u32) {
        *self.prepaid.lock() = Some(deliveries);
    }
}

impl Buffer {
    /// A one-dimensional `|u1` buffer owning `bytes` (no copy).
    pub fn from_vec(bytes: Vec<u8>) -> Buffer {
        Buffer::from_elements(bytes)
    }

    /// A one-dimensional buffer owning `elements` (no copy).
    pub fn from_elements<T: Element>(elements: Vec<T>) -> Buffer {
        let shape = Arc::from([elements.len()]);
        Buffer { dtype: T::DTYPE, shape, data: Data::Owned(Arc::new(elements)) }
    }

    /// A one-dimensional buffer holding a copy of `elements`.
    pub fn from_slice<T: Element>(elements: &[T]) -> Buffer {
        Buffer::from_elements(elements.to_vec())
    }

    /// A buffer of any dtype from its raw bytes, e.g. `<c8` data for which
    /// Rust has no [`Element`] type. Fails if `shape` does not match the
    /// byte length.
    pub fn from_bytes(dtype: Dtype, shape: &[usize], bytes: Vec<u8>) -> Result<Buffer, PayloadError> {
        check_shape(&dtype, shape, bytes.len())?;
        // Keep the allocation when it is aligned (allocators align all but
        // the tiniest blocks to 8 or 16), else copy to restore the invariant.
        let data: Arc<dyn Bytes> =
            if bytes.as_ptr().align_offset(8) == 0 { Arc::new(bytes) } else { Arc::new(Aligned::copy_of(&bytes)) };
        Ok(Buffer { dtype, shape: shape.into(), data: Data::Owned(data) })
    }

    /// The same bytes seen with another shape (of the same byte length),
    /// e.g. `[480, 640, 3]` for a camera frame.
    pub fn with_shape(self, shape: &[usize]) -> Result<Buffer, PayloadError> {
        check_shape(&self.dtype, shape, self.len_bytes())?;
        Ok(Buffer { shape: shape.into(), ..self })
    }

    /// A copy of inline bytes from a message. The caller checked the shape.
    pub(crate) fn from_inline(dtype: Dtype, shape: Vec<usize>, bytes: &[u8]) -> Buffer {
        Buffer { dtype, shape: shape.into(), data: Data::Owned(Arc::new(Aligned::copy_of(bytes))) }
    }

    /// A view of a store object. The caller checked the shape against the
    /// object's length.
    pub(crate) fn from_stored(dtype: Dtype, shape: Vec<usize>, stored: Arc<Stored>) -> Buffer {
        Buffer { dtype, shape: shape.into(), data: Data::Stored(stored) }
    }

    /// The bytes, wherever they are (zero-copy).
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Owned(b) => b.bytes(),
            Data::Stored(s) => s.object.data(),
        }
    }

    /// The elements, if `T` is the buffer's dtype (zero-copy).
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        if self.dtype != T::DTYPE {
            return None;
        }
        // Cannot fail for a matching dtype (see the invariants); `ok()`
        // keeps it a `None`, not a panic, should that ever be wrong.
        bytemuck::try_cast_slice(self.bytes()).ok()
    }

    /// A copy of the elements, if `T` is the buffer's dtype.
    pub fn to_vec<T: Element>(&self) -> Option<Vec<T>> {
        if self.dtype != T::DTYPE {
            return None;
        }
        let bytes = self.bytes();
        let mut out = vec![T::zeroed(); bytes.len() / std::mem::size_of::<T>()];
        let len = out.len() * std::mem::size_of::<T>();
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&bytes[..len]);
        Some(out)
    }

    /// The element type.
    pub fn dtype(&self) -> &Dtype {
        &self.dtype
    }

    /// Elements per dimension, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Length in bytes.
    pub fn len_bytes(&self) -> usize {
        self.bytes().len()
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len_bytes() == 0
    }

    /// Whether the bytes are a store object shared with other processes
    /// (received out-of-band, or loaned): zero-copy, read-only.
    pub fn is_shared(&self) -> bool {
        matches!(self.data, Data::Stored(_))
    }

    /// The store object holding the bytes, when shared.
    pub fn object_id(&self) -> Option<ObjectId> {
        match &self.data {
            Data::Stored(s) => Some(s.object.id()),
            Data::Owned(_) => None,
        }
    }
}

fn check_shape(dtype: &Dtype, shape: &[usize], nbytes: usize) -> Result<(), PayloadError> {
    if contiguous_len(dtype, shape) == Some(nbytes as u64) {
        Ok(())
    } else {
        Err(shape_error(dtype, shape, nbytes as u64))
    }
}

impl From<Vec<u8>> for Buffer {
    fn from(bytes: Vec<u8>) -> Buffer {
        Buffer::from_vec(bytes)
    }
}

/// Equal contents: dtype, shape and bytes (not where the bytes are).
impl PartialEq for Buffer {
    fn eq(&self, other: &Buffer) -> bool {
        self.dtype == other.dtype && self.shape == other.shape && self.bytes() == other.bytes()
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Buffer");
        d.field("dtype", &self.dtype.as_str()).field("shape", &self.shape).field("len_bytes", &self.len_bytes());
        if let Some(id) = self.object_id() {
            d.field("object", &id);
        }
        d.finish()
    }
}

/// A buffer's bytes and shape, borrowed, as they are serialized: from a
/// [`Buffer`] (with its [`Data`], which lets the encoder reuse loaned
/// objects and store a repeated buffer once) or from a plain slice
/// ([`super::oob`]).
pub(crate) struct View<'a> {
    pub dtype: &'a Dtype,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
    pub data: Option<&'a Data>,
}

/// The form of a buffer in human-readable formats.
#[derive(Serialize)]
#[serde(rename = "Buffer")]
struct ReadableRef<'a> {
    dtype: &'a str,
    shape: &'a [usize],
    #[serde(with = "serde_bytes")]
    data: &'a [u8],
}

#[derive(Deserialize)]
#[serde(rename = "Buffer")]
struct Readable {
    dtype: Dtype,
    shape: Vec<usize>,
    #[serde(with = "serde_bytes")]
    data: Vec<u8>,
}

impl View<'_> {
    pub(crate) fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.serialize_as(super::EXT_BUFFER, s)
    }

    /// Serializes the buffer as extension type `ext` (one of the buffer
    /// types, whose data is a buffer descriptor).
    pub(crate) fn serialize_as<S: Serializer>(&self, ext: i8, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            return ReadableRef { dtype: self.dtype.as_str(), shape: self.shape, data: self.bytes }.serialize(s);
        }
        let data = encoder::place(self).map_err(serde::ser::Error::custom)?;
        s.serialize_newtype_struct(rmp_serde::MSGPACK_EXT_STRUCT_NAME, &(ext, serde_bytes::Bytes::new(&data)))
    }
}

impl Buffer {
    /// The buffer as the encoder sees it.
    pub(crate) fn view(&self) -> View<'_> {
        View { dtype: &self.dtype, shape: &self.shape, bytes: self.bytes(), data: Some(&self.data) }
    }
}

impl Serialize for Buffer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.view().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Buffer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Buffer, D::Error> {
        if d.is_human_readable() {
            let r = Readable::deserialize(d)?;
            return Buffer::from_bytes(r.dtype, &r.shape, r.data).map_err(serde::de::Error::custom);
        }
        d.deserialize_newtype_struct(rmp_serde::MSGPACK_EXT_STRUCT_NAME, ext::NewtypeVisitor)
    }
}

/// Deserialization of the ext value `_ExtStruct((type: i8, data: bytes))`,
/// rmp-serde's representation of a MessagePack extension (other compact
/// formats see a plain newtype around a 2-tuple).
mod ext {
    use std::fmt;

    use serde::de::{DeserializeSeed, Deserializer, Error, SeqAccess, Visitor};

    use super::{decoder, Buffer};

    pub(super) struct NewtypeVisitor;

    impl<'de> Visitor<'de> for NewtypeVisitor {
        type Value = Buffer;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a buffer (MessagePack extension type 1)")
        }

        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Buffer, D::Error> {
            d.deserialize_tuple(2, TupleVisitor)
        }
    }

    struct TupleVisitor;

    impl<'de> Visitor<'de> for TupleVisitor {
        type Value = Buffer;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an extension type and its data")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Buffer, A::Error> {
            let ty: i8 = seq.next_element()?.ok_or_else(|| A::Error::invalid_length(0, &self))?;
            seq.next_element_seed(DataSeed(ty))?.ok_or_else(|| A::Error::invalid_length(1, &self))
        }
    }

    /// The data bytes, handed to the decoder while still borrowed from
    /// the message (no intermediate copy).
    struct DataSeed(i8);

    impl<'de> DeserializeSeed<'de> for DataSeed {
        type Value = Buffer;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Buffer, D::Error> {
            d.deserialize_bytes(self)
        }
    }

    impl<'de> Visitor<'de> for DataSeed {
        type Value = Buffer;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("the bytes of an extension value")
        }

        fn visit_bytes<E: Error>(self, data: &[u8]) -> Result<Buffer, E> {
            decoder::buffer_from_ext(self.0, data).map_err(E::custom)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Buffer, A::Error> {
            let mut data = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
            while let Some(b) = seq.next_element::<u8>()? {
                data.push(b);
            }
            self.visit_bytes(&data)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_and_views() {
        let b = Buffer::from_elements(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(b.dtype(), &Dtype::F32);
        assert_eq!(b.shape(), &[6]);
        assert_eq!(b.len_bytes(), 24);
        assert!(!b.is_shared());
        assert_eq!(b.object_id(), None);
        assert_eq!(b.as_slice::<f32>().unwrap()[5], 6.0);
        assert!(b.as_slice::<u32>().is_none(), "another dtype is not a view");
        let m = b.clone().with_shape(&[2, 3]).unwrap();
        assert_eq!(m.shape(), &[2, 3]);
        assert_eq!(m.bytes().as_ptr(), b.bytes().as_ptr(), "reshaping copies nothing");
        assert!(matches!(b.clone().with_shape(&[4, 2]), Err(PayloadError::Shape { .. })));
        assert_eq!(Buffer::from_slice(&[7u16, 8]).to_vec::<u16>(), Some(vec![7, 8]));
        assert_eq!(Buffer::from_vec(vec![9, 9]).dtype(), &Dtype::U8);
        let c8 = Buffer::from_bytes(Dtype::parse("<c8").unwrap(), &[2], vec![0; 16]).unwrap();
        assert_eq!(c8.len_bytes(), 16);
        assert!(Buffer::from_bytes(Dtype::F64, &[3], vec![0; 16]).is_err());
        let empty = Buffer::from_elements(Vec::<i64>::new());
        assert!(empty.is_empty());
        assert_eq!(empty.as_slice::<i64>(), Some(&[][..]));
    }

    #[test]
    fn inline_copies_are_aligned_for_every_element() {
        for offset in 0..8 {
            let bytes = vec![0u8; 64 + offset];
            let b = Buffer::from_inline(Dtype::F64, vec![8], &bytes[offset..offset + 64]);
            assert_eq!(b.bytes().as_ptr().align_offset(8), 0);
            assert_eq!(b.as_slice::<f64>().map(<[f64]>::len), Some(8));
        }
    }

    #[test]
    fn human_readable_formats_get_a_plain_map() {
        let b = Buffer::from_slice(&[1u16, 2]).with_shape(&[1, 2]).unwrap();
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"dtype":"{}","shape":[1,2],"data":[{}]}}"#,
                Dtype::U16,
                if cfg!(target_endian = "little") { "1,0,2,0" } else { "0,1,0,2" }
            )
        );
        let back: Buffer = serde_json::from_str(&json).unwrap();
        assert_eq!(back, b);
        let wrong = r#"{"dtype":"<f4","shape":[3],"data":[0,0,0,0]}"#;
        assert!(serde_json::from_str::<Buffer>(wrong).unwrap_err().to_string().contains("needs 12 bytes"));
    }
}
