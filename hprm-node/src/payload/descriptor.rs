//! The codec's extension values: [`BufferDescriptor`] (ext 1, and ext 4
//! for byte strings, 5 for Arrow streams, 6 for torch tensors) and [`SpilledMessage`] (ext 2), their exact bytes, and
//! their validation.
//!
//! The layouts are specified in the [module docs](super#wire-format); this
//! is the one implementation of them, public so that the Python SDK (built
//! on this crate) writes and reads the same bytes.

use hprm_store::ObjectId;

use super::msgpack::{fits_u32, Reader, Writer};
use super::{Dtype, PayloadError};

/// MessagePack extension type of a buffer descriptor.
pub const EXT_BUFFER: i8 = 1;
/// MessagePack extension type of a spilled message reference.
pub const EXT_SPILLED: i8 = 2;
/// MessagePack extension type of a pickled Python object (Python only).
pub const EXT_PICKLED: i8 = 3;
/// MessagePack extension type of a byte string sent as a buffer: the data
/// of an ext 1 value, one dimension of `|u1`. Rust reads it as a
/// [`super::Buffer`] like ext 1; Python gives it back as bytes, not as an
/// array.
pub const EXT_BYTES: i8 = 4;
/// MessagePack extension type of an Arrow IPC stream (a pyarrow table,
/// record batch or array): the data of an ext 1 value, one dimension of
/// `|u1`, holding the stream. Rust reads it as a [`super::Buffer`] of the
/// stream's bytes; Python gives back the pyarrow object, zero-copy.
pub const EXT_ARROW: i8 = 5;
/// MessagePack extension type of a torch tensor: exactly the data of an
/// ext 1 value (any plain dtype). The type only tells a Python receiver to
/// give back a `torch.Tensor` (over the same bytes, zero-copy when stored)
/// rather than a numpy array; Rust reads it as a [`super::Buffer`] like
/// ext 1.
pub const EXT_TENSOR: i8 = 6;

/// Most dimensions a descriptor may have (numpy's own limit is 64).
pub const MAX_DIMS: usize = 64;

/// Where a buffer's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// In the descriptor itself (buffers under the threshold).
    Inline(Vec<u8>),
    /// In one object of the store, whose data is exactly the buffer.
    Store(ObjectId),
}

/// Describes one buffer: element type, shape, size and where the bytes are.
/// The data of an ext 1 value.
///
/// Invariants checked by [`BufferDescriptor::decode`] (and by
/// [`BufferDescriptor::encode`], which refuses to write what `decode` would
/// refuse): the dtype parses; `strides`, when present, has one entry per
/// dimension; without strides `nbytes` equals the product of the shape
/// times the item size; inline bytes number exactly `nbytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferDescriptor {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// Byte strides per dimension, numpy-style; `None` for C-contiguous
    /// (what Rust always writes).
    pub strides: Option<Vec<i64>>,
    /// Length of the bytes, wherever they are.
    pub nbytes: u64,
    pub location: Location,
}

impl BufferDescriptor {
    /// The ext 1 data bytes (without the ext header).
    pub fn encode(&self) -> Result<Vec<u8>, PayloadError> {
        let location = match &self.location {
            Location::Inline(bytes) => LocationRef::Inline(bytes),
            Location::Store(id) => LocationRef::Store(*id, None),
        };
        let view = DescriptorRef {
            dtype: self.dtype.clone(),
            shape: self.shape.clone(),
            strides: self.strides.clone(),
            nbytes: self.nbytes,
            location,
        };
        view.check()?;
        Ok(view.encode())
    }

    /// Parses and validates ext 1 data bytes.
    pub fn decode(data: &[u8]) -> Result<BufferDescriptor, PayloadError> {
        let d = DescriptorRef::parse(data)?;
        let location = match d.location {
            LocationRef::Inline(bytes) => Location::Inline(bytes.to_vec()),
            LocationRef::Store(id, _) => Location::Store(id),
        };
        Ok(BufferDescriptor { dtype: d.dtype, shape: d.shape, strides: d.strides, nbytes: d.nbytes, location })
    }
}

/// A C-contiguous buffer read where it lies, borrowed: from the message
/// that holds it (inline), or from a store object the reader holds (a
/// recorder or a live viewer reads arrays out of a message without
/// copying them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferRef<'a> {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// `None`: in a store object the reader does not hold.
    pub bytes: Option<&'a [u8]>,
}

impl<'a> BufferRef<'a> {
    /// Parses and validates ext 1 data bytes as [`BufferDescriptor::decode`]
    /// does, and refuses a strided layout other than C order (as a
    /// [`super::Buffer`] does). The bytes of a buffer in the store are
    /// `store`'s data of its object, when the reader holds it.
    pub fn parse(data: &'a [u8], store: impl Fn(&ObjectId) -> Option<&'a [u8]>) -> Result<BufferRef<'a>, PayloadError> {
        let d = DescriptorRef::parse(data)?;
        d.require_contiguous()?;
        let bytes = match d.location {
            LocationRef::Inline(bytes) => Some(bytes),
            LocationRef::Store(id, _) => match store(&id) {
                Some(bytes) if bytes.len() as u64 != d.nbytes => {
                    return Err(PayloadError::malformed(format!(
                        "store object {id} holds {} bytes, its descriptor says {}",
                        bytes.len(),
                        d.nbytes
                    )))
                }
                found => found,
            },
        };
        Ok(BufferRef { dtype: d.dtype, shape: d.shape, bytes })
    }
}

/// [`Location`] borrowing its inline bytes (from the buffer being sent, or
/// the message being read), so the codec copies them only once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocationRef<'a> {
    Inline(&'a [u8]),
    /// A store object, and where its data lies when the writer said so
    /// (what lets a receiver map it without a get).
    Store(ObjectId, Option<At>),
}

/// Where a store object's data lies: its offset in the arena of the store
/// whose id is `arena` ([`hprm_store::StoreClient::arena_id`]). A receiver
/// connected to another store (another arena id) must not map the offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct At {
    pub offset: u64,
    pub arena: u64,
}

impl At {
    /// Where `object` lies.
    pub(crate) fn of(object: &hprm_store::Object) -> At {
        At { offset: object.placement().data_offset, arena: object.arena_id() }
    }

    /// Where `object`, being written, lies.
    pub(crate) fn of_mut(object: &hprm_store::ObjectMut) -> At {
        At { offset: object.placement().data_offset, arena: object.arena_id() }
    }
}

/// [`BufferDescriptor`] borrowing its inline bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DescriptorRef<'a> {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub strides: Option<Vec<i64>>,
    pub nbytes: u64,
    pub location: LocationRef<'a>,
}

impl<'a> DescriptorRef<'a> {
    /// Checks the invariants of [`BufferDescriptor`] (and that inline
    /// bytes fit in a MessagePack ext).
    pub fn check(&self) -> Result<(), PayloadError> {
        if self.shape.len() > MAX_DIMS {
            return Err(PayloadError::malformed(format!(
                "a buffer of {} dimensions (at most {MAX_DIMS})",
                self.shape.len()
            )));
        }
        match &self.strides {
            Some(strides) if strides.len() != self.shape.len() => {
                return Err(PayloadError::malformed(format!(
                    "{} strides for {} dimensions",
                    strides.len(),
                    self.shape.len()
                )));
            }
            Some(_) => {}
            None => {
                let needed = contiguous_len(&self.dtype, &self.shape);
                if needed != Some(self.nbytes) {
                    return Err(shape_error(&self.dtype, &self.shape, self.nbytes));
                }
            }
        }
        if let LocationRef::Inline(bytes) = self.location {
            if bytes.len() as u64 != self.nbytes {
                return Err(PayloadError::malformed(format!(
                    "a descriptor says {} bytes but carries {} inline",
                    self.nbytes,
                    bytes.len()
                )));
            }
            // The rest of the descriptor is under 2 KiB (at most MAX_DIMS
            // dimensions and strides of at most 9 bytes each, a dtype of at
            // most 32 bytes).
            if !fits_u32(bytes.len().saturating_add(2 << 10)) {
                return Err(PayloadError::TooLargeInline { nbytes: bytes.len() });
            }
        }
        Ok(())
    }

    /// Writes the ext 1 data. Call [`DescriptorRef::check`] first.
    pub fn encode(&self) -> Vec<u8> {
        let inline = match self.location {
            LocationRef::Inline(b) => b.len(),
            LocationRef::Store(..) => 0,
        };
        let mut out = Vec::with_capacity(32 + 9 * self.shape.len() + inline);
        let mut w = Writer(&mut out);
        w.array_len(5);
        w.str(self.dtype.as_str());
        // At most MAX_DIMS entries (checked), so the lengths fit.
        w.array_len(self.shape.len() as u32);
        for &n in &self.shape {
            w.uint(n as u64);
        }
        match &self.strides {
            None => w.nil(),
            Some(strides) => {
                w.array_len(strides.len() as u32);
                for &s in strides {
                    w.int(s);
                }
            }
        }
        w.uint(self.nbytes);
        match self.location {
            LocationRef::Inline(bytes) => w.bin(bytes),
            LocationRef::Store(id, at) => {
                w.array_len(if at.is_some() { 3 } else { 1 });
                w.bin(id.as_bytes());
                if let Some(at) = at {
                    w.uint(at.offset);
                    w.uint(at.arena);
                }
            }
        }
        out
    }

    /// Parses and validates ext 1 data.
    pub fn parse(data: &'a [u8]) -> Result<DescriptorRef<'a>, PayloadError> {
        let mut r = Reader::new(data);
        let fields = r.array_len("a buffer descriptor")?;
        if fields != 5 {
            return Err(PayloadError::malformed(format!("a buffer descriptor has {fields} fields, expected 5")));
        }
        let dtype = Dtype::parse(r.str("the dtype")?)?;
        let dims = r.array_len("the shape")?;
        if dims > MAX_DIMS {
            return Err(PayloadError::malformed(format!("a buffer of {dims} dimensions (at most {MAX_DIMS})")));
        }
        let mut shape = Vec::with_capacity(dims);
        for _ in 0..dims {
            let n = r.uint("a dimension")?;
            shape.push(
                usize::try_from(n)
                    .map_err(|_| PayloadError::malformed(format!("dimension {n} does not fit in memory")))?,
            );
        }
        let strides = if r.nil() {
            None
        } else {
            let n = r.array_len("the strides")?;
            if n > MAX_DIMS {
                return Err(PayloadError::malformed(format!("{n} strides (at most {MAX_DIMS})")));
            }
            let mut strides = Vec::with_capacity(n);
            for _ in 0..n {
                strides.push(r.int("a stride")?);
            }
            Some(strides)
        };
        let nbytes = r.uint("nbytes")?;
        let location = match r.peek() {
            // [id], or [id, data offset, arena id] (see the wire format).
            Some(0x91 | 0x93) => {
                let n = r.array_len("the location")?;
                let id = object_id(r.bin("an object id")?)?;
                let at = if n == 3 {
                    Some(At { offset: r.uint("the object's data offset")?, arena: r.uint("the arena id")? })
                } else {
                    None
                };
                LocationRef::Store(id, at)
            }
            _ => LocationRef::Inline(r.bin("the inline bytes")?),
        };
        if r.remaining() != 0 {
            return Err(PayloadError::malformed(format!("{} stray bytes after a buffer descriptor", r.remaining())));
        }
        let d = DescriptorRef { dtype, shape, strides, nbytes, location };
        d.check()?;
        Ok(d)
    }

    /// The byte length as a `usize` (it must fit: inline, it is in memory
    /// already; in the store, a larger object could not be mapped).
    pub fn len(&self) -> Result<usize, PayloadError> {
        usize::try_from(self.nbytes)
            .map_err(|_| PayloadError::malformed(format!("a {}-byte buffer does not fit in memory", self.nbytes)))
    }

    /// Refuses a strided layout unless it is the C-contiguous one, which is
    /// all a [`super::Buffer`] holds.
    pub fn require_contiguous(&self) -> Result<(), PayloadError> {
        let Some(strides) = &self.strides else { return Ok(()) };
        let itemsize = self.dtype.itemsize() as i128;
        let mut expected = itemsize;
        let mut contiguous = contiguous_len(&self.dtype, &self.shape) == Some(self.nbytes);
        for (&n, &s) in self.shape.iter().zip(strides).rev() {
            // A dimension of one element may have any stride (numpy
            // reports arbitrary ones there).
            if n > 1 && i128::from(s) != expected {
                contiguous = false;
            }
            expected = expected.saturating_mul(n as i128);
        }
        if contiguous {
            Ok(())
        } else {
            Err(PayloadError::Strided { shape: self.shape.clone(), strides: strides.clone() })
        }
    }
}

/// Bytes of a C-contiguous array of `shape`, if that fits in a `u64`.
pub(crate) fn contiguous_len(dtype: &Dtype, shape: &[usize]) -> Option<u64> {
    shape.iter().try_fold(dtype.itemsize() as u64, |acc, &n| acc.checked_mul(n as u64))
}

pub(crate) fn shape_error(dtype: &Dtype, shape: &[usize], nbytes: u64) -> PayloadError {
    let needed = match contiguous_len(dtype, shape) {
        Some(n) => n.to_string(),
        None => "more than 2^64".to_owned(),
    };
    PayloadError::Shape { dtype: dtype.to_string(), shape: shape.to_vec(), needed, nbytes: nbytes as usize }
}

fn object_id(bytes: &[u8]) -> Result<ObjectId, PayloadError> {
    let id: [u8; ObjectId::LEN] = bytes.try_into().map_err(|_| {
        PayloadError::malformed(format!("an object id of {} bytes, expected {}", bytes.len(), ObjectId::LEN))
    })?;
    Ok(ObjectId::from_bytes(id))
}

/// A whole message moved into the store because it was too large to travel
/// in-band. The data of an ext 2 value, which is then the entire payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpilledMessage {
    /// The object holding the encoded message.
    pub id: ObjectId,
    /// Its length: the object's data is exactly this long.
    pub nbytes: u64,
}

impl SpilledMessage {
    /// The ext 2 data bytes.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_at(None)
    }

    /// The ext 2 data bytes, with the object's data offset in the arena
    /// when known (wire format 1.1), which lets receivers claim it without
    /// a round trip.
    pub(crate) fn encode_at(&self, at: Option<At>) -> Vec<u8> {
        let mut out = Vec::with_capacity(48);
        let mut w = Writer(&mut out);
        w.array_len(if at.is_some() { 4 } else { 2 });
        w.bin(self.id.as_bytes());
        w.uint(self.nbytes);
        if let Some(at) = at {
            w.uint(at.offset);
            w.uint(at.arena);
        }
        out
    }

    /// Parses ext 2 data bytes.
    pub fn decode(data: &[u8]) -> Result<SpilledMessage, PayloadError> {
        Ok(SpilledMessage::decode_at(data)?.0)
    }

    /// Parses ext 2 data bytes: the reference and where the object lies,
    /// if given.
    pub(crate) fn decode_at(data: &[u8]) -> Result<(SpilledMessage, Option<At>), PayloadError> {
        let mut r = Reader::new(data);
        let fields = r.array_len("a spilled message reference")?;
        if fields != 2 && fields != 4 {
            return Err(PayloadError::malformed(format!(
                "a spilled message reference has {fields} fields, expected 2 or 4"
            )));
        }
        let id = object_id(r.bin("an object id")?)?;
        let nbytes = r.uint("nbytes")?;
        let at = if fields == 4 {
            Some(At { offset: r.uint("the object's data offset")?, arena: r.uint("the arena id")? })
        } else {
            None
        };
        if r.remaining() != 0 {
            return Err(PayloadError::malformed(format!(
                "{} stray bytes after a spilled message reference",
                r.remaining()
            )));
        }
        Ok((SpilledMessage { id, nbytes }, at))
    }

    /// The complete payload standing for the spilled message: the ext 2
    /// value with its header.
    pub fn to_payload(&self) -> Vec<u8> {
        self.to_payload_at(None)
    }

    pub(crate) fn to_payload_at(self, at: Option<At>) -> Vec<u8> {
        let data = self.encode_at(at);
        let mut out = Vec::with_capacity(data.len() + 3);
        Writer(&mut out).ext_header(EXT_SPILLED, data.len());
        out.extend_from_slice(&data);
        out
    }

    /// If `payload` is exactly one ext 2 value, the reference it holds.
    pub fn from_payload(payload: &[u8]) -> Result<Option<SpilledMessage>, PayloadError> {
        Ok(SpilledMessage::from_payload_at(payload)?.map(|(m, _)| m))
    }

    /// [`SpilledMessage::from_payload`], with the data offset if given.
    pub(crate) fn from_payload_at(payload: &[u8]) -> Result<Option<(SpilledMessage, Option<At>)>, PayloadError> {
        let mut r = Reader::new(payload);
        match r.ext()? {
            Some((EXT_SPILLED, data)) if r.remaining() == 0 => Ok(Some(SpilledMessage::decode_at(data)?)),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: ObjectId = ObjectId::from_bytes([0xab; 20]);

    #[test]
    fn inline_descriptor_bytes() {
        let d = BufferDescriptor {
            dtype: Dtype::U8,
            shape: vec![3],
            strides: None,
            nbytes: 3,
            location: Location::Inline(vec![1, 2, 3]),
        };
        let bytes = d.encode().unwrap();
        #[rustfmt::skip]
        assert_eq!(bytes, [
            0x95,                         // array of 5
            0xa3, b'|', b'u', b'1',       // dtype "|u1"
            0x91, 0x03,                   // shape [3]
            0xc0,                         // strides nil
            0x03,                         // nbytes 3
            0xc4, 0x03, 1, 2, 3,          // inline bin
        ]);
        assert_eq!(BufferDescriptor::decode(&bytes).unwrap(), d);
        let borrowed = BufferRef::parse(&bytes, |_| unreachable!("inline")).unwrap();
        assert_eq!((borrowed.dtype, borrowed.shape), (Dtype::U8, vec![3]));
        let inline = borrowed.bytes.expect("inline");
        assert_eq!(inline, [1, 2, 3]);
        assert!(std::ptr::eq(inline, &bytes[bytes.len() - 3..]), "borrowed, not copied");
    }

    #[test]
    fn store_descriptor_bytes() {
        let d = BufferDescriptor {
            dtype: Dtype::parse("<f4").unwrap(),
            shape: vec![480, 640, 3],
            strides: None,
            nbytes: 480 * 640 * 3 * 4,
            location: Location::Store(ID),
        };
        let bytes = d.encode().unwrap();
        let mut expected = vec![
            0x95, 0xa3, b'<', b'f', b'4', 0x93, 0xcd, 0x01, 0xe0, 0xcd, 0x02, 0x80, 0x03, 0xc0, 0xce, 0x00, 0x38, 0x40,
            0x00, 0x91, 0xc4, 20,
        ];
        expected.extend_from_slice(&[0xab; 20]);
        assert_eq!(bytes, expected);
        assert_eq!(BufferDescriptor::decode(&bytes).unwrap(), d);
        assert_eq!(BufferRef::parse(&bytes, |_| None).unwrap().bytes, None, "in the store, not held");
        // Held: the object's data, which must be the buffer's size.
        let data = vec![7u8; 480 * 640 * 3 * 4];
        assert_eq!(BufferRef::parse(&bytes, |id| (*id == ID).then_some(&data[..])).unwrap().bytes, Some(&data[..]));
        assert!(BufferRef::parse(&bytes, |_| Some(&data[1..])).is_err(), "a short object is refused");
    }

    #[test]
    fn strided_descriptor_round_trips_and_is_judged() {
        // A 2x3 u16 array, transposed view of a 3x2 one: strides (2, 6).
        let d = BufferDescriptor {
            dtype: Dtype::parse("<u2").unwrap(),
            shape: vec![2, 3],
            strides: Some(vec![2, 6]),
            nbytes: 12,
            location: Location::Inline(vec![0; 12]),
        };
        let bytes = d.encode().unwrap();
        assert_eq!(&bytes[5..9], &[0x92, 0x02, 0x03, 0x92]);
        let parsed = DescriptorRef::parse(&bytes).unwrap();
        assert!(matches!(parsed.require_contiguous(), Err(PayloadError::Strided { .. })));
        let c = BufferDescriptor { strides: Some(vec![6, 2]), ..d.clone() };
        DescriptorRef::parse(&c.encode().unwrap()).unwrap().require_contiguous().unwrap();
        // Negative strides survive the trip.
        let n = BufferDescriptor { strides: Some(vec![-6, 2]), ..d };
        assert_eq!(BufferDescriptor::decode(&n.encode().unwrap()).unwrap(), n);
    }

    #[test]
    fn spilled_reference_bytes() {
        let s = SpilledMessage { id: ID, nbytes: 200_000 };
        let payload = s.to_payload();
        let mut expected = vec![0xc7, 28, 0x02, 0x92, 0xc4, 20];
        expected.extend_from_slice(&[0xab; 20]);
        expected.extend_from_slice(&[0xce, 0x00, 0x03, 0x0d, 0x40]);
        assert_eq!(payload, expected);
        assert_eq!(SpilledMessage::from_payload(&payload).unwrap(), Some(s));
        // Not alone in the payload: not a spilled message.
        let mut more = payload.clone();
        more.push(0xc0);
        assert_eq!(SpilledMessage::from_payload(&more).unwrap(), None);
        assert_eq!(SpilledMessage::from_payload(&[0x90]).unwrap(), None);
    }

    #[test]
    fn refuses_inconsistent_descriptors() {
        let good = BufferDescriptor {
            dtype: Dtype::F32,
            shape: vec![2],
            strides: None,
            nbytes: 8,
            location: Location::Inline(vec![0; 8]),
        };
        let bad = [
            BufferDescriptor { shape: vec![3], ..good.clone() },
            BufferDescriptor { nbytes: 9, ..good.clone() },
            BufferDescriptor { location: Location::Inline(vec![0; 7]), ..good.clone() },
            BufferDescriptor { strides: Some(vec![4, 4]), ..good.clone() },
            BufferDescriptor {
                shape: vec![1; MAX_DIMS + 1],
                nbytes: 4,
                location: Location::Inline(vec![0; 4]),
                ..good.clone()
            },
            BufferDescriptor { shape: vec![usize::MAX, usize::MAX], ..good.clone() },
        ];
        for d in bad {
            assert!(d.encode().is_err(), "{d:?}");
        }
        // The same checks on the reading side, from hand-made bytes.
        let mut bytes = good.encode().unwrap();
        assert_eq!(bytes[8], 0x08);
        bytes[8] = 0x09; // nbytes 9
        assert!(matches!(BufferDescriptor::decode(&bytes), Err(PayloadError::Shape { .. })), "{bytes:x?}");
        let mut wrong_id = BufferDescriptor { location: Location::Store(ID), ..good }.encode().unwrap();
        let n = wrong_id.len();
        wrong_id[n - 21] = 19; // bin length 19
        assert!(BufferDescriptor::decode(&wrong_id[..n - 1]).is_err());
    }
}
