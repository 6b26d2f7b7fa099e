//! The Arrow IPC stream of an [`Arrow`](super::Arrow) value, planned then
//! framed straight into where it goes (a store object, or inline bytes).
//!
//! [`Stream::plan`] builds every message's flatbuffer header (small) and
//! lists its body as the batches' own Arrow buffers (reference-counted
//! slices, not copies), so the stream's exact length is known before
//! anything is allocated; [`Stream::write`] then writes each header and
//! copies each buffer exactly once, into the destination. This is what
//! pyarrow does; arrow-ipc 54's `IpcDataGenerator::encoded_batch` instead
//! copies every buffer into a `Vec` of its own first (two copies, and at
//! tens of MB page faults on fresh memory for each message).
//!
//! The messages are those of arrow-ipc's `StreamWriter` (IPC format V5,
//! no compression, bodies aligned to 64 bytes): the schema (from
//! arrow-ipc's own encoder), then for each batch its dictionary batches
//! (new or replaced dictionaries, in arrow-ipc's order and with its ids)
//! and its record batch, then the end-of-stream marker. Sliced arrays
//! are written as arrow-ipc writes them: only their rows (offsets
//! re-based when the first is not 0, booleans and bitmaps shifted when
//! they start inside a byte; those are the only buffers made anew).
//! Unlike arrow-ipc, a column without nulls gets an empty validity
//! bitmap (the format allows it; pyarrow writes the same) instead of one
//! of all ones built for each message.
//!
//! Handled here: null, boolean, every fixed-width type (integers,
//! floats, decimals, dates, times, timestamps, durations, intervals,
//! fixed-size binary), utf8/binary (and their large forms), list, large
//! list, fixed-size list, map, struct, and dictionaries of any of these.
//! A schema with anything else anywhere (the view types, union,
//! run-end encoded) goes through `encoded_batch` as before, whole: see
//! [`framed_here`].

use arrow_array::{make_array, RecordBatch};
use arrow_buffer::Buffer as ArrowBuffer;
use arrow_data::ArrayData;
use arrow_ipc::writer::{DictionaryTracker, EncodedData, IpcDataGenerator, IpcWriteOptions};
use arrow_ipc::MetadataVersion;
use arrow_schema::{ArrowError, DataType, Schema};
use flatbuffers::FlatBufferBuilder;

/// What every body buffer, and every header with its prefix, is padded
/// to: `IpcWriteOptions`'s default.
const ALIGNMENT: usize = 64;

/// A message's prefix: the continuation marker, then the padded header's
/// length (i32, little-endian).
const CONTINUATION: [u8; 4] = [0xff; 4];

/// The end of an IPC stream: a continuation marker and a zero length.
const END_OF_STREAM: [u8; 8] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];

/// An IPC stream, planned: its messages' headers encoded, their bodies
/// still the batches' buffers.
pub(super) struct Stream {
    messages: Vec<Message>,
}

/// One IPC message.
///
/// Invariant: `header`'s `bodyLength` and buffer offsets are those of
/// `body` laid out one after another, each padded to [`ALIGNMENT`]
/// ([`padded`]); [`Stream::write`] lays them out so.
struct Message {
    /// The flatbuffer `Message` (schema, dictionary batch or record batch).
    header: Vec<u8>,
    /// The body's buffers in order (none for the schema).
    body: Vec<ArrowBuffer>,
}

impl Message {
    /// A message arrow-ipc encoded: its body is one part, already padded.
    fn encoded(encoded: EncodedData) -> Message {
        let body =
            if encoded.arrow_data.is_empty() { Vec::new() } else { vec![ArrowBuffer::from_vec(encoded.arrow_data)] };
        Message { header: encoded.ipc_message, body }
    }

    /// The prefix and header, padded: what comes before the body.
    fn framed_header_len(&self) -> usize {
        (8 + self.header.len()).next_multiple_of(ALIGNMENT)
    }

    fn len(&self) -> usize {
        self.framed_header_len() + self.body.iter().map(|b| padded(b.len())).sum::<usize>()
    }
}

fn padded(len: usize) -> usize {
    len.next_multiple_of(ALIGNMENT)
}

impl Stream {
    /// Plans the stream of `batches` under `schema` (which every batch
    /// has; it carries the `hprm.kind` metadata).
    pub(super) fn plan(schema: &Schema, batches: &[RecordBatch]) -> Result<Stream, ArrowError> {
        let options = IpcWriteOptions::try_new(ALIGNMENT, false, MetadataVersion::V5)?;
        // As `StreamWriter` does (arrow-ipc 54): dictionary ids as the
        // options say, a replaced dictionary written again, not refused.
        #[allow(deprecated)]
        let mut tracker = DictionaryTracker::new_with_preserve_dict_id(false, options.preserve_dict_id());
        let generator = IpcDataGenerator::default();
        // The schema message also gives every dictionary field its id, in
        // the order `Batches::dictionaries` takes them.
        let schema_message = generator.schema_to_bytes_with_dictionary_tracker(schema, &mut tracker, &options);
        let mut messages = vec![Message::encoded(schema_message)];
        if framed_here(schema) {
            for batch in batches {
                let ids = tracker.dict_id().to_vec();
                let mut ids = ids.into_iter();
                for column in batch.columns() {
                    dictionaries(&column.to_data(), &mut ids, &mut tracker, &mut messages)?;
                }
                let mut body = Body::default();
                for column in batch.columns() {
                    body.array(&column.to_data())?;
                }
                messages.push(body.message(batch.num_rows(), None));
            }
        } else {
            for batch in batches {
                let (dictionaries, batch) = generator.encoded_batch(batch, &mut tracker, &options)?;
                messages.extend(dictionaries.into_iter().map(Message::encoded));
                messages.push(Message::encoded(batch));
            }
        }
        Ok(Stream { messages })
    }

    /// The framed stream's length in bytes: what [`Stream::write`] writes.
    pub(super) fn len(&self) -> usize {
        self.messages.iter().map(Message::len).sum::<usize>() + END_OF_STREAM.len()
    }

    /// Writes the framed stream into `out`, which must be [`Stream::len`]
    /// bytes long: each header, then each body buffer copied once, with
    /// every padding byte written (store memory is not zeroed).
    pub(super) fn write(&self, out: &mut [u8]) -> Result<(), ArrowError> {
        if out.len() != self.len() {
            return Err(ArrowError::MemoryError(format!(
                "{} bytes to write the stream into, where it takes {}",
                out.len(),
                self.len()
            )));
        }
        let mut at = 0;
        let mut put = |bytes: &[u8], padded_to: usize| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            out[at + bytes.len()..at + padded_to].fill(0);
            at += padded_to;
        };
        for message in &self.messages {
            let framed = message.framed_header_len();
            let length = i32::try_from(framed - 8)
                .map_err(|_| ArrowError::IpcError(format!("a message header of {} bytes", message.header.len())))?;
            put(&CONTINUATION, CONTINUATION.len());
            put(&length.to_le_bytes(), 4);
            put(&message.header, framed - 8);
            for part in &message.body {
                put(part.as_slice(), padded(part.len()));
            }
        }
        put(&END_OF_STREAM, END_OF_STREAM.len());
        Ok(())
    }
}

/// Whether every column of `schema` is of a type [`Body::array`] writes
/// (the module doc lists them); otherwise the whole stream goes through
/// arrow-ipc's encoder.
pub(super) fn framed_here(schema: &Schema) -> bool {
    schema.fields().iter().all(|f| type_framed_here(f.data_type()))
}

fn type_framed_here(data_type: &DataType) -> bool {
    match data_type {
        DataType::Null
        | DataType::Boolean
        | DataType::Utf8
        | DataType::Binary
        | DataType::LargeUtf8
        | DataType::LargeBinary
        | DataType::FixedSizeBinary(_) => true,
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) | DataType::Map(f, _) => {
            type_framed_here(f.data_type())
        }
        DataType::Struct(fields) => fields.iter().all(|f| type_framed_here(f.data_type())),
        DataType::Dictionary(key, values) => key.primitive_width().is_some() && type_framed_here(values),
        other => other.primitive_width().is_some(),
    }
}

/// The dictionary batches `column` needs before its record batch: as
/// arrow-ipc's `encode_dictionaries` walks it (children first, depth
/// first, a dictionary's own values before it), so that each takes the
/// id the schema message gave its field; a dictionary already sent with
/// these very values (the tracker says) is not sent again.
fn dictionaries(
    column: &ArrayData,
    ids: &mut impl Iterator<Item = i64>,
    tracker: &mut DictionaryTracker,
    messages: &mut Vec<Message>,
) -> Result<(), ArrowError> {
    let DataType::Dictionary(_, _) = column.data_type() else {
        for child in column.child_data() {
            dictionaries(child, ids, tracker, messages)?;
        }
        return Ok(());
    };
    let values = column
        .child_data()
        .first()
        .ok_or_else(|| ArrowError::IpcError("a dictionary array without its values".into()))?;
    dictionaries(values, ids, tracker, messages)?;
    let id = ids.next().ok_or_else(|| ArrowError::IpcError("a dictionary the schema gave no id".into()))?;
    if tracker.insert(id, &make_array(column.clone()))? {
        let mut body = Body::default();
        body.array(values)?;
        messages.push(body.message(values.len(), Some(id)));
    }
    Ok(())
}

/// A record batch's body, planned: its field nodes and buffer entries
/// (the header's) and the buffers themselves.
#[derive(Default)]
struct Body {
    nodes: Vec<arrow_ipc::FieldNode>,
    entries: Vec<arrow_ipc::Buffer>,
    parts: Vec<ArrowBuffer>,
    /// The body's length so far: every part padded.
    len: usize,
}

impl Body {
    fn push(&mut self, part: ArrowBuffer) {
        self.entries.push(arrow_ipc::Buffer::new(self.len as i64, part.len() as i64));
        self.len += padded(part.len());
        self.parts.push(part);
    }

    /// Plans `data` (its node, its buffers, its children): what arrow-ipc
    /// 54's `write_array_data` writes, for the types [`framed_here`].
    fn array(&mut self, data: &ArrayData) -> Result<(), ArrowError> {
        let (offset, len) = (data.offset(), data.len());
        let data_type = data.data_type();
        if let DataType::Null = data_type {
            // No buffer at all (V5); every row is null.
            self.nodes.push(arrow_ipc::FieldNode::new(len as i64, len as i64));
            return Ok(());
        }
        self.nodes.push(arrow_ipc::FieldNode::new(len as i64, data.null_count() as i64));
        // The validity bitmap: empty without nulls (the reader then makes
        // none); shifted only when the slice starts inside a byte.
        match data.nulls() {
            Some(nulls) if nulls.null_count() > 0 => self.push(nulls.inner().sliced()),
            _ => self.push(ArrowBuffer::from_vec(Vec::<u8>::new())),
        }
        let buffer = |i: usize| {
            data.buffers().get(i).ok_or_else(|| ArrowError::IpcError(format!("a {data_type} array without buffer {i}")))
        };
        let child = || {
            data.child_data().first().ok_or_else(|| ArrowError::IpcError(format!("a {data_type} array without values")))
        };
        match data_type {
            DataType::Utf8 | DataType::Binary => {
                let (offsets, start, end) = offsets::<4>(buffer(0)?, offset, len)?;
                self.push(offsets);
                self.push(slice(buffer(1)?, start, end - start)?);
            }
            DataType::LargeUtf8 | DataType::LargeBinary => {
                let (offsets, start, end) = offsets::<8>(buffer(0)?, offset, len)?;
                self.push(offsets);
                self.push(slice(buffer(1)?, start, end - start)?);
            }
            DataType::Boolean => self.push(buffer(0)?.bit_slice(offset, len)),
            DataType::List(_) | DataType::Map(_, _) => {
                let (offsets, start, end) = offsets::<4>(buffer(0)?, offset, len)?;
                self.push(offsets);
                self.array(&child_slice(child()?, start, end - start)?)?;
            }
            DataType::LargeList(_) => {
                let (offsets, start, end) = offsets::<8>(buffer(0)?, offset, len)?;
                self.push(offsets);
                self.array(&child_slice(child()?, start, end - start)?)?;
            }
            DataType::FixedSizeList(_, size) => {
                let size = usize::try_from(*size).map_err(|_| ArrowError::IpcError(format!("a {data_type}")))?;
                self.array(&child_slice(child()?, offset * size, len * size)?)?;
            }
            // Its children are sliced with it (ArrayData keeps them so).
            DataType::Struct(_) => {
                for child in data.child_data() {
                    self.array(child)?;
                }
            }
            // The keys; the values went in a dictionary batch.
            DataType::Dictionary(key, _) => {
                let width = key.primitive_width().ok_or_else(|| ArrowError::IpcError(format!("a {data_type}")))?;
                self.push(slice(buffer(0)?, offset * width, len * width)?);
            }
            DataType::FixedSizeBinary(width) => {
                let width = usize::try_from(*width).map_err(|_| ArrowError::IpcError(format!("a {data_type}")))?;
                self.push(slice(buffer(0)?, offset * width, len * width)?);
            }
            other => {
                let width = other.primitive_width().ok_or_else(|| {
                    ArrowError::IpcError(format!("{other} is not written here (framed_here lets it through)"))
                })?;
                self.push(slice(buffer(0)?, offset * width, len * width)?);
            }
        }
        Ok(())
    }

    /// The message: a record batch of `rows` rows, or the dictionary
    /// batch of id `dictionary` (as arrow-ipc's encoder builds them).
    fn message(self, rows: usize, dictionary: Option<i64>) -> Message {
        let mut fbb = FlatBufferBuilder::new();
        let entries = fbb.create_vector(&self.entries);
        let nodes = fbb.create_vector(&self.nodes);
        let batch = {
            let mut b = arrow_ipc::RecordBatchBuilder::new(&mut fbb);
            b.add_length(rows as i64);
            b.add_nodes(nodes);
            b.add_buffers(entries);
            b.finish()
        };
        let (header_type, header) = match dictionary {
            None => (arrow_ipc::MessageHeader::RecordBatch, batch.as_union_value()),
            Some(id) => {
                let mut b = arrow_ipc::DictionaryBatchBuilder::new(&mut fbb);
                b.add_id(id);
                b.add_data(batch);
                (arrow_ipc::MessageHeader::DictionaryBatch, b.finish().as_union_value())
            }
        };
        let mut m = arrow_ipc::MessageBuilder::new(&mut fbb);
        m.add_version(MetadataVersion::V5);
        m.add_header_type(header_type);
        m.add_bodyLength(self.len as i64);
        m.add_header(header);
        let root = m.finish();
        fbb.finish(root, None);
        Message { header: fbb.finished_data().to_vec(), body: self.parts }
    }
}

/// `len` bytes of `buffer` from `start` (a reference-counted slice, no
/// copy); an error, not a panic, when the buffer is shorter.
fn slice(buffer: &ArrowBuffer, start: usize, len: usize) -> Result<ArrowBuffer, ArrowError> {
    if start.checked_add(len).map_or(true, |end| end > buffer.len()) {
        return Err(ArrowError::IpcError(format!(
            "bytes {start}..{} of a buffer of {}",
            start.saturating_add(len),
            buffer.len()
        )));
    }
    Ok(buffer.slice_with_length(start, len))
}

/// `len` rows of `child` from row `start`, checked.
fn child_slice(child: &ArrayData, start: usize, len: usize) -> Result<ArrayData, ArrowError> {
    if start.checked_add(len).map_or(true, |end| end > child.len()) {
        return Err(ArrowError::IpcError(format!(
            "rows {start}..{} of a child of {} rows",
            start.saturating_add(len),
            child.len()
        )));
    }
    Ok(child.slice(start, len))
}

/// The offsets of rows `offset..offset + len` (`W`-byte offsets: 4 or 8),
/// as the body holds them (starting at 0), and the range of values or
/// child rows they cover. A slice of `buffer` when its first offset is
/// already 0, else re-based (the only copy: offsets, not values). Read
/// byte-wise, since a received buffer need not be aligned.
fn offsets<const W: usize>(
    buffer: &ArrowBuffer,
    offset: usize,
    len: usize,
) -> Result<(ArrowBuffer, usize, usize), ArrowError> {
    if len == 0 {
        // As arrow-ipc writes an empty array: no offsets at all.
        return Ok((ArrowBuffer::from_vec(Vec::<u8>::new()), 0, 0));
    }
    let bytes = slice(buffer, offset * W, (len + 1) * W)?;
    let at = |i: usize| -> Result<usize, ArrowError> {
        let mut word = [0u8; 8];
        word[..W].copy_from_slice(&bytes[i * W..(i + 1) * W]);
        // Sign-extend a 4-byte offset, so that a negative one is refused.
        let value = if W == 4 {
            i64::from(i32::from_le_bytes([word[0], word[1], word[2], word[3]]))
        } else {
            i64::from_le_bytes(word)
        };
        usize::try_from(value).map_err(|_| ArrowError::IpcError(format!("a negative offset ({value})")))
    };
    let (start, end) = (at(0)?, at(len)?);
    if end < start {
        return Err(ArrowError::IpcError(format!("offsets that go down ({start} to {end})")));
    }
    if start == 0 {
        return Ok((bytes, 0, end));
    }
    let mut rebased = Vec::with_capacity(bytes.len());
    for i in 0..=len {
        let value = at(i)?.checked_sub(start).ok_or_else(|| ArrowError::IpcError("offsets that go down".into()))?;
        rebased.extend_from_slice(&(value as u64).to_le_bytes()[..W]);
    }
    Ok((ArrowBuffer::from_vec(rebased), start, end))
}

#[cfg(test)]
mod tests {
    //! The planned-and-framed stream against arrow-ipc's own reader: every
    //! type written here, sliced, with nulls, empty; dictionaries sent once
    //! and again when replaced; and the fallback for a type not written here.

    use std::io::Cursor;
    use std::sync::Arc;

    use arrow_array::builder::{
        FixedSizeListBuilder, Float32Builder, Int32Builder, LargeListBuilder, ListBuilder, MapBuilder, StringBuilder,
    };
    use arrow_array::types::{Int32Type, Int8Type, UInt16Type};
    use arrow_array::{
        Array, ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, DictionaryArray,
        DurationNanosecondArray, FixedSizeBinaryArray, Float32Array, Float64Array, Int16Array, Int64Array, Int8Array,
        IntervalMonthDayNanoArray, LargeBinaryArray, LargeStringArray, NullArray, RecordBatch, StringArray,
        StringViewArray, StructArray, Time64MicrosecondArray, TimestampNanosecondArray, UInt32Array, UInt64Array,
        UInt8Array,
    };
    use arrow_buffer::IntervalMonthDayNano;
    use arrow_ipc::reader::StreamReader;
    use arrow_schema::{DataType, Field, Fields, SchemaRef};

    use super::{framed_here, Stream};

    /// Writes `batches` through [`Stream`] and reads them back with
    /// arrow-ipc's `StreamReader`.
    fn round_trip(schema: &SchemaRef, batches: &[RecordBatch]) -> Vec<RecordBatch> {
        let stream = Stream::plan(schema, batches).expect("plan");
        let mut bytes = vec![0xa5; stream.len()];
        stream.write(&mut bytes).expect("write");
        let reader = StreamReader::try_new(Cursor::new(bytes), None).expect("a stream arrow-ipc reads");
        assert_eq!(&reader.schema(), schema);
        reader.collect::<Result<Vec<_>, _>>().expect("batches")
    }

    /// Every column read back equal to the one sent (arrays compare
    /// logically, so a sliced one equals its rows; primitives compare
    /// byte for byte, NaN payloads included).
    fn assert_round_trips(batches: &[RecordBatch]) {
        let schema = batches[0].schema();
        assert!(framed_here(&schema), "not written here: {schema}");
        let got = round_trip(&schema, batches);
        assert_eq!(got.len(), batches.len());
        for (sent, got) in batches.iter().zip(&got) {
            assert_eq!(sent.num_rows(), got.num_rows());
            for (i, (s, g)) in sent.columns().iter().zip(got.columns()).enumerate() {
                assert_eq!(s.to_data(), g.to_data(), "column {} ({})", i, schema.field(i));
            }
        }
    }

    /// The batch, whole and sliced at offsets inside and across bytes
    /// (every offset from 0 to 9, several lengths, empty included).
    fn assert_slices_round_trip(batch: &RecordBatch) {
        assert_round_trips(std::slice::from_ref(batch));
        for offset in 0..10.min(batch.num_rows()) {
            for len in [0, 1, 7, batch.num_rows() - offset] {
                assert_round_trips(&[batch.slice(offset, len.min(batch.num_rows() - offset))]);
            }
        }
        // Two slices of it in one stream.
        let half = batch.num_rows() / 2;
        assert_round_trips(&[batch.slice(1, half), batch.slice(half, batch.num_rows() - half)]);
    }

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter_with_nullable(columns.into_iter().map(|(n, c)| (n, c, true))).expect("batch")
    }

    const ROWS: usize = 37;

    /// Row `i` is null when `i % 4 == 1`.
    fn maybe<T>(i: usize, value: T) -> Option<T> {
        (i % 4 != 1).then_some(value)
    }

    #[test]
    fn fixed_width_columns_round_trip_sliced_and_with_nulls() {
        let nan = f64::from_bits(0x7ff8_dead_beef_0001);
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("i8", Arc::new(Int8Array::from_iter((0..ROWS).map(|i| maybe(i, i as i8 - 9))))),
            ("u8", Arc::new(UInt8Array::from_iter_values((0..ROWS).map(|i| i as u8)))),
            ("i16", Arc::new(Int16Array::from_iter((0..ROWS).map(|i| maybe(i, -(i as i16)))))),
            ("u32", Arc::new(UInt32Array::from_iter_values((0..ROWS).map(|i| i as u32 * 7)))),
            ("i64", Arc::new(Int64Array::from_iter((0..ROWS).map(|i| maybe(i, i as i64 * 31))))),
            ("u64", Arc::new(UInt64Array::from_iter_values((0..ROWS).map(|i| u64::MAX - i as u64)))),
            ("f32", Arc::new(Float32Array::from_iter((0..ROWS).map(|i| maybe(i, i as f32 / 3.0))))),
            ("f64", Arc::new(Float64Array::from_iter_values((0..ROWS).map(|i| if i == 2 { nan } else { i as f64 })))),
            (
                "dec",
                Arc::new(
                    Decimal128Array::from_iter((0..ROWS).map(|i| maybe(i, i as i128 * 1_000_001)))
                        .with_precision_and_scale(20, 3)
                        .expect("decimal"),
                ),
            ),
            ("date", Arc::new(Date32Array::from_iter((0..ROWS).map(|i| maybe(i, 19_000 + i as i32))))),
            ("time", Arc::new(Time64MicrosecondArray::from_iter_values((0..ROWS).map(|i| i as i64 * 1_000)))),
            (
                "ts",
                Arc::new(
                    TimestampNanosecondArray::from_iter(
                        (0..ROWS).map(|i| maybe(i, 1_700_000_000_000_000_000 + i as i64)),
                    )
                    .with_timezone("Europe/Paris"),
                ),
            ),
            ("dur", Arc::new(DurationNanosecondArray::from_iter_values((0..ROWS).map(|i| i as i64)))),
            (
                "interval",
                Arc::new(IntervalMonthDayNanoArray::from_iter(
                    (0..ROWS).map(|i| maybe(i, IntervalMonthDayNano::new(i as i32, 2, 3 * i as i64))),
                )),
            ),
            (
                "fsb",
                Arc::new(
                    FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                        (0..ROWS).map(|i| maybe(i, [i as u8, 1, 2])),
                        3,
                    )
                    .expect("fixed-size binary"),
                ),
            ),
            ("bool", Arc::new(BooleanArray::from_iter((0..ROWS).map(|i| maybe(i, i % 3 == 0))))),
            ("bool_valid", Arc::new(BooleanArray::from_iter((0..ROWS).map(|i| Some(i % 5 < 2))))),
            ("null", Arc::new(NullArray::new(ROWS))),
        ];
        assert_slices_round_trip(&batch(columns));
    }

    #[test]
    fn variable_width_columns_round_trip_sliced_and_with_nulls() {
        let text = |i: usize| "é".repeat(i % 6);
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("utf8", Arc::new(StringArray::from_iter((0..ROWS).map(|i| maybe(i, text(i)))))),
            ("large_utf8", Arc::new(LargeStringArray::from_iter_values((0..ROWS).map(text)))),
            ("binary", Arc::new(BinaryArray::from_iter((0..ROWS).map(|i| maybe(i, vec![i as u8; i % 3]))))),
            ("large_binary", Arc::new(LargeBinaryArray::from_iter_values((0..ROWS).map(|i| vec![0xee; i % 4])))),
        ];
        assert_slices_round_trip(&batch(columns));
    }

    #[test]
    fn nested_columns_round_trip_sliced_and_with_nulls() {
        let mut list = ListBuilder::new(Int32Builder::new());
        let mut large = LargeListBuilder::new(StringBuilder::new());
        let mut fixed = FixedSizeListBuilder::new(Float32Builder::new(), 2);
        let mut map = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
        for i in 0..ROWS {
            match i % 5 {
                0 => list.append_null(),
                _ => list.append_value((0..(i % 4) as i32).map(|v| maybe(v as usize, v))),
            }
            large.append_value((0..i % 3).map(|v| Some(format!("{i}.{v}"))));
            fixed.values().append_value(i as f32);
            fixed.values().append_option(maybe(i, -(i as f32)));
            fixed.append(i % 6 != 2);
            for k in 0..i % 3 {
                map.keys().append_value(format!("k{k}"));
                map.values().append_option(maybe(k, i as i32));
            }
            map.append(i % 7 != 3).expect("map entry");
        }
        let x = Float64Array::from_iter((0..ROWS).map(|i| maybe(i, i as f64)));
        let name = StringArray::from_iter_values((0..ROWS).map(|i| format!("pose-{i}")));
        let flag = BooleanArray::from_iter((0..ROWS).map(|i| Some(i % 2 == 0)));
        let fields = Fields::from(vec![
            Field::new("x", DataType::Float64, true),
            Field::new("name", DataType::Utf8, false),
            Field::new("flag", DataType::Boolean, false),
        ]);
        let nulls = arrow_buffer::NullBuffer::from_iter((0..ROWS).map(|i| i % 6 != 4));
        let pose = StructArray::new(fields, vec![Arc::new(x), Arc::new(name), Arc::new(flag)], Some(nulls));
        // A list of structs: the struct child sliced by the list's offsets.
        let mut points = ListBuilder::new(Int32Builder::new());
        for i in 0..ROWS {
            points.append_value((0..(i % 3) as i32).map(Some));
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("list", Arc::new(list.finish())),
            ("large_list", Arc::new(large.finish())),
            ("fixed_list", Arc::new(fixed.finish())),
            ("map", Arc::new(map.finish())),
            ("pose", Arc::new(pose)),
            ("points", Arc::new(points.finish())),
        ];
        assert_slices_round_trip(&batch(columns));
    }

    #[test]
    fn dictionary_columns_round_trip_sent_once_and_again_when_replaced() {
        let labels = |rows: usize, words: [&'static str; 3]| -> ArrayRef {
            Arc::new((0..rows).map(|i| maybe(i, words[i % 3])).collect::<DictionaryArray<Int32Type>>())
        };
        // A dictionary inside a list: its values written before the batch.
        let mut tags = ListBuilder::new(arrow_array::builder::StringDictionaryBuilder::<Int8Type>::new());
        for i in 0..ROWS {
            for t in 0..i % 3 {
                tags.values().append_value(["red", "green", "blue"][(i + t) % 3]);
            }
            tags.append(true);
        }
        let small: ArrayRef =
            Arc::new((0..ROWS).map(|i| Some(["a", "b"][i % 2])).collect::<DictionaryArray<UInt16Type>>());
        let first = batch(vec![
            ("label", labels(ROWS, ["car", "bike", "person"])),
            ("tags", Arc::new(tags.finish())),
            ("small", small),
        ]);
        assert_slices_round_trip(&first);
        // The same dictionaries again (not re-sent), then replaced ones.
        let replaced = RecordBatch::try_new(
            first.schema(),
            vec![labels(5, ["tram", "bus", "van"]), first.column(1).slice(0, 5), first.column(2).slice(3, 5)],
        )
        .expect("batch");
        assert_round_trips(&[first.clone(), first.slice(2, 9), replaced]);
        let schema = first.schema();
        let once = Stream::plan(&schema, &[first.clone(), first.slice(2, 9)]).expect("plan");
        // The schema, three dictionaries, two record batches.
        assert_eq!(once.messages.len(), 6, "each dictionary sent once");
    }

    #[test]
    fn empty_batches_and_streams_of_no_batch_round_trip() {
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("f64", Arc::new(Float64Array::from(Vec::<f64>::new()))),
            ("utf8", Arc::new(StringArray::from(Vec::<String>::new()))),
            ("list", Arc::new(ListBuilder::new(Int32Builder::new()).finish())),
        ];
        let empty = batch(columns);
        assert_round_trips(&[empty.clone(), empty.clone()]);
        assert!(round_trip(&empty.schema(), &[]).is_empty());
    }

    #[test]
    fn large_buffers_are_planned_as_references_then_copied_once() {
        let values: ArrayRef = Arc::new(Float64Array::from_iter_values((0..100_000).map(|i| i as f64)));
        let b = batch(vec![("x", values.clone())]);
        let stream = Stream::plan(&b.schema(), std::slice::from_ref(&b)).expect("plan");
        let record = stream.messages.last().expect("the record batch");
        // An empty bitmap (no nulls), then the column's own memory.
        assert_eq!(record.body.len(), 2);
        assert!(record.body[0].is_empty());
        assert_eq!(record.body[1].as_ptr(), values.to_data().buffers()[0].as_ptr());
        assert_round_trips(&[b]);
    }

    #[test]
    fn other_types_go_through_arrow_ipc_encoder() {
        let view: ArrayRef = Arc::new(StringViewArray::from_iter_values((0..ROWS).map(|i| format!("view {i}"))));
        let b = batch(vec![("view", view), ("x", Arc::new(Float64Array::from(vec![1.5; ROWS])))]);
        assert!(!framed_here(&b.schema()));
        let got = round_trip(&b.schema(), std::slice::from_ref(&b));
        assert_eq!(got, vec![b]);
    }

    #[test]
    fn a_destination_of_another_length_is_refused() {
        let b = batch(vec![("x", Arc::new(Float64Array::from(vec![1.0, 2.0])) as ArrayRef)]);
        let stream = Stream::plan(&b.schema(), &[b]).expect("plan");
        let mut short = vec![0; stream.len() - 1];
        assert!(stream.write(&mut short).is_err());
    }
}
