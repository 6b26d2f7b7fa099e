//! [`Arrow`]: Arrow record batches as a port value (ext 5, an Arrow IPC
//! stream), zero-copy over store memory; the `arrow` feature.
//!
//! Reading: the stream is a [`Buffer`] (a view of the store object when it
//! came out-of-band); every Arrow buffer of the batches is a slice of one
//! `arrow_buffer::Buffer` over those bytes, whose owner holds the
//! [`Buffer`], so the store object stays pinned until the last Arrow
//! buffer (of any batch, column or slice) is dropped, and is released then.
//!
//! Writing ([`stream`]): the stream is planned first (its headers built,
//! its exact length known), then written straight into its store object
//! (or inline bytes under the threshold): each of the batches' buffers is
//! copied once, into the store, and nowhere else. An
//! [`Arrow`] received and sent on unchanged travels by reference (the same
//! object, no copy), as a [`Buffer`] does.

mod stream;

use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ipc::reader::{StreamDecoder, StreamReader};
use arrow_schema::{ArrowError, Field, Schema, SchemaRef};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use self::stream::Stream;
use super::{encoder, Buffer, PayloadError, EXT_ARROW};

/// The schema metadata key saying what the sender had (the wire format's
/// ext 5; the Python SDK writes and reads it too).
pub const KIND_KEY: &str = "hprm.kind";

/// What an Arrow value was on the sending side, so that a Python receiver
/// gets the same pyarrow type back (schema metadata `hprm.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrowKind {
    /// A `pyarrow.Table`: any number of batches (also a stream without the key).
    Table,
    /// A `pyarrow.RecordBatch`: one batch.
    Batch,
    /// A `pyarrow.Array`: one batch of one column named `values`.
    Array,
    /// A `pyarrow.ChunkedArray`: batches of one column named `values`.
    Chunked,
}

impl ArrowKind {
    /// The metadata value.
    pub fn as_str(self) -> &'static str {
        match self {
            ArrowKind::Table => "table",
            ArrowKind::Batch => "batch",
            ArrowKind::Array => "array",
            ArrowKind::Chunked => "chunked",
        }
    }

    /// The kind a metadata value names; a stream without one (or with one
    /// unknown) is a table, as Python reads it.
    fn parse(text: Option<&str>) -> ArrowKind {
        match text {
            Some("batch") => ArrowKind::Batch,
            Some("array") => ArrowKind::Array,
            Some("chunked") => ArrowKind::Chunked,
            _ => ArrowKind::Table,
        }
    }
}

/// Arrow record batches as a port value: ext 5 of the [wire
/// format](super#wire-format), what the Python SDK sends for pyarrow
/// tables, record batches and arrays.
///
/// Received, the batches are zero-copy views of the store object (see
/// [`Arrow::stream`]); the object stays pinned until every batch and array
/// taken from them is dropped. Sent, the IPC stream is written once,
/// straight into the store object that travels.
///
/// Invariant: every batch has [`Arrow::schema`] (which never holds the
/// `hprm.kind` key: that is [`Arrow::kind`]).
#[derive(Debug, Clone)]
pub struct Arrow {
    kind: ArrowKind,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    /// The stream these batches were read from, while unchanged: sent on
    /// by reference.
    stream: Option<Buffer>,
}

impl Arrow {
    /// One record batch (a Python receiver gets a `pyarrow.RecordBatch`).
    pub fn from_batch(batch: RecordBatch) -> Arrow {
        let schema = batch.schema();
        Arrow { kind: ArrowKind::Batch, schema, batches: vec![batch], stream: None }
    }

    /// Batches of one schema (a Python receiver gets a `pyarrow.Table`).
    /// Fails if a batch has another schema.
    pub fn from_batches(schema: SchemaRef, batches: Vec<RecordBatch>) -> Result<Arrow, PayloadError> {
        let batches = with_schema(batches, &schema)?;
        Ok(Arrow { kind: ArrowKind::Table, schema, batches, stream: None })
    }

    /// One array, as a batch of one column named `values` (a Python
    /// receiver gets a `pyarrow.Array`).
    pub fn from_array(array: ArrayRef) -> Result<Arrow, PayloadError> {
        let schema = Arc::new(Schema::new(vec![Field::new("values", array.data_type().clone(), true)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![array]).map_err(write_error)?;
        Ok(Arrow { kind: ArrowKind::Array, schema, batches: vec![batch], stream: None })
    }

    /// Reads an Arrow IPC stream (a schema, then record batches) without
    /// copying it: the batches' buffers are slices of `stream`'s bytes,
    /// which they keep alive.
    pub fn from_stream(stream: Buffer) -> Result<Arrow, PayloadError> {
        let owner = Arc::new(AssertUnwindSafe(stream.clone()));
        // SAFETY: the bytes are never written while a `Buffer` over them
        // lives (received store objects are sealed and read-only; owned
        // buffers are immutable), and the owner is a clone of that Buffer.
        let mut arrow = unsafe { Arrow::from_memory(stream.bytes(), owner) }?;
        arrow.stream = Some(stream);
        Ok(arrow)
    }

    /// Reads an Arrow IPC stream in memory that `owner` keeps (a binding's
    /// handle on a received store object), without copying it: the
    /// batches' buffers are slices of `bytes`, and hold `owner` until the
    /// last of them is dropped. Not sent on by reference (no [`Buffer`]).
    ///
    /// # Safety
    ///
    /// `bytes` must stay valid, and never be written, for as long as
    /// `owner` lives.
    pub unsafe fn from_memory(
        bytes: &[u8],
        owner: Arc<dyn arrow_buffer::alloc::Allocation>,
    ) -> Result<Arrow, PayloadError> {
        let Some(ptr) = NonNull::new(bytes.as_ptr().cast_mut()) else {
            return Err(read_error(ArrowError::IpcError("an empty stream (no schema)".into())));
        };
        check_readable(bytes).map_err(read_error)?;
        // SAFETY: the caller's: `owner` keeps the bytes valid and unchanged,
        // and every Arrow buffer sliced from this one holds `owner`.
        let mut all = unsafe { arrow_buffer::Buffer::from_custom_allocation(ptr, bytes.len(), owner) };
        let mut decoder = StreamDecoder::new();
        let mut batches = Vec::new();
        while !all.is_empty() {
            if let Some(batch) = decoder.decode(&mut all).map_err(read_error)? {
                batches.push(batch);
            }
        }
        decoder.finish().map_err(read_error)?;
        // The schema the batches were decoded under (the stream's, with its
        // metadata); this decoder does not expose it otherwise, so a stream
        // of no batch has its schema message read again, alone.
        let sent = match batches.first() {
            Some(batch) => batch.schema(),
            None => StreamReader::try_new(bytes, None).map_err(read_error)?.schema(),
        };
        let mut metadata = sent.metadata().clone();
        let kind = ArrowKind::parse(metadata.remove(KIND_KEY).as_deref());
        let schema = Arc::new(Schema::new_with_metadata(sent.fields().clone(), metadata));
        // The same columns under the schema without the key (Arc clones).
        let batches = batches
            .into_iter()
            .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(read_error)?;
        Ok(Arrow { kind, schema, batches, stream: None })
    }

    /// What the sender had.
    pub fn kind(&self) -> ArrowKind {
        self.kind
    }

    /// The batches' schema (its metadata without `hprm.kind`).
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The record batches.
    pub fn batches(&self) -> &[RecordBatch] {
        &self.batches
    }

    /// The record batches, owned (each still over the received bytes).
    pub fn into_batches(self) -> Vec<RecordBatch> {
        self.batches
    }

    /// The IPC stream the batches were read from (received values): a
    /// store object when it came out-of-band ([`Buffer::is_shared`],
    /// [`Buffer::object_id`]).
    pub fn stream(&self) -> Option<&Buffer> {
        self.stream.as_ref()
    }

    /// The same batches, sent as `kind` (what a Python receiver gets back):
    /// for bindings that know what their sender had (the Python SDK's
    /// pyarrow types). A batch and an array are one batch, an array and a
    /// chunked array one column named `values`; anything else is refused.
    pub fn with_kind(mut self, kind: ArrowKind) -> Result<Arrow, PayloadError> {
        let one_batch = self.batches.len() == 1;
        let one_column = self.schema.fields().len() == 1 && self.schema.field(0).name() == "values";
        let fits = match kind {
            ArrowKind::Table => true,
            ArrowKind::Batch => one_batch,
            ArrowKind::Array => one_batch && one_column,
            ArrowKind::Chunked => one_column,
        };
        if !fits {
            return Err(write_error(ArrowError::InvalidArgumentError(format!(
                "{} batches of {} columns cannot be sent as a {}",
                self.batches.len(),
                self.schema.fields().len(),
                kind.as_str()
            ))));
        }
        self.kind = kind;
        // A stream read from elsewhere would say another kind.
        self.stream = None;
        Ok(self)
    }

    /// Whether the stream of these batches is framed straight into its
    /// destination, each Arrow buffer copied once: every column is of a
    /// type listed in the `stream` module's docs (all but the view types,
    /// unions and run-end encoded ones). Otherwise arrow-ipc's encoder
    /// writes it, copying every buffer into a `Vec` of its own first.
    pub fn framed_in_place(&self) -> bool {
        stream::framed_here(&self.schema)
    }

    /// The IPC stream (the schema with `hprm.kind`, then the batches),
    /// planned: measured, then written where it goes. What the serializer
    /// writes, and what a binding writes through
    /// [`EncodeSession::write_filled`](super::EncodeSession::write_filled).
    pub fn plan(&self) -> Result<PlannedStream, PayloadError> {
        let mut metadata = self.schema.metadata().clone();
        metadata.insert(KIND_KEY.into(), self.kind.as_str().into());
        let schema = Arc::new(Schema::new_with_metadata(self.schema.fields().clone(), metadata));
        let batches = with_schema(self.batches.clone(), &schema)?;
        Stream::plan(&schema, &batches).map(PlannedStream).map_err(write_error)
    }
}

/// The IPC stream of an [`Arrow`] value, planned ([`Arrow::plan`]): its
/// headers built, its bodies still the batches' own buffers (which it
/// keeps alive), its exact length known before anything is allocated.
pub struct PlannedStream(Stream);

impl PlannedStream {
    /// The stream's length in bytes: what [`PlannedStream::write`] writes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never: a stream holds at least its schema message and end marker.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the stream into `out`, which must be [`PlannedStream::len`]
    /// bytes long (every byte is written, padding included: store memory
    /// is not zeroed).
    pub fn write(&self, out: &mut [u8]) -> Result<(), PayloadError> {
        self.0.write(out).map_err(write_error)
    }
}

/// Refuses a stream whose schema arrow-ipc 54's reader would panic on
/// rather than refuse (its type conversion `unimplemented!`s list views,
/// and decimals of other widths than 128 and 256 bits: what pyarrow 16 and
/// later can send). Anything else about the stream the reader checks.
fn check_readable(bytes: &[u8]) -> Result<(), ArrowError> {
    let word = |at: usize| bytes.get(at..at + 4).and_then(|b| <[u8; 4]>::try_from(b).ok());
    // The first message: the continuation marker and its length (or, in
    // the legacy format, the length alone), then its flatbuffer.
    let (start, len) = match word(0) {
        Some([0xff, 0xff, 0xff, 0xff]) => (8, word(4)),
        _ => (4, word(0)),
    };
    let Some(len) = len.and_then(|l| usize::try_from(i32::from_le_bytes(l)).ok()) else { return Ok(()) };
    let Some(Ok(message)) = bytes.get(start..start + len).map(arrow_ipc::root_as_message) else { return Ok(()) };
    let Some(schema) = message.header_as_schema() else { return Ok(()) };
    schema.fields().iter().flatten().try_for_each(|field| readable_field(&field))
}

fn readable_field(field: &arrow_ipc::Field<'_>) -> Result<(), ArrowError> {
    let name = field.name().unwrap_or_default();
    match field.type_type() {
        arrow_ipc::Type::ListView | arrow_ipc::Type::LargeListView => {
            return Err(ArrowError::IpcError(format!("field {name:?} is a list view, which arrow-rs 54 cannot read")));
        }
        arrow_ipc::Type::Decimal => {
            let bits = field.type_as_decimal().map(|d| d.bitWidth()).unwrap_or(128);
            if bits != 128 && bits != 256 {
                return Err(ArrowError::IpcError(format!(
                    "field {name:?} is a {bits}-bit decimal, which arrow-rs 54 cannot read"
                )));
            }
        }
        _ => {}
    }
    field.children().iter().flatten().try_for_each(|child| readable_field(&child))
}

/// The batches under `schema` (Arc clones; fails if one's columns differ).
fn with_schema(batches: Vec<RecordBatch>, schema: &SchemaRef) -> Result<Vec<RecordBatch>, PayloadError> {
    batches.into_iter().map(|b| b.with_schema(schema.clone())).collect::<Result<_, _>>().map_err(write_error)
}

fn read_error(e: ArrowError) -> PayloadError {
    PayloadError::Arrow {
        detail: format!(
            "cannot read it ({e}); the sender must write one schema then record batches (pyarrow.ipc.new_stream)"
        ),
    }
}

fn write_error(e: ArrowError) -> PayloadError {
    PayloadError::Arrow { detail: format!("cannot write it: {e}") }
}

impl Serialize for Arrow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        if let Some(stream) = &self.stream {
            return stream.view().serialize_as(EXT_ARROW, s);
        }
        let stream = self.plan().map_err(S::Error::custom)?;
        let nbytes = stream.len();
        if s.is_human_readable() {
            let mut bytes = vec![0; nbytes];
            stream.write(&mut bytes).map_err(S::Error::custom)?;
            return Buffer::from_vec(bytes).serialize(s);
        }
        let data = encoder::place_written(nbytes, |dst| stream.write(dst)).map_err(S::Error::custom)?;
        s.serialize_newtype_struct(rmp_serde::MSGPACK_EXT_STRUCT_NAME, &(EXT_ARROW, serde_bytes::Bytes::new(&data)))
    }
}

impl<'de> Deserialize<'de> for Arrow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Arrow, D::Error> {
        let stream = Buffer::deserialize(d)?;
        Arrow::from_stream(stream).map_err(serde::de::Error::custom)
    }
}
