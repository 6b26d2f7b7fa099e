//! Arrow record batches (ext 5, the `arrow` feature) against a real
//! `hprm-store` daemon: bit-exact round trips of nested and dictionary
//! columns, zero-copy reads that pin the store object until the last
//! Arrow buffer is dropped, and received batches sent on by reference.
#![cfg(feature = "arrow")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::builder::{Int32Builder, ListBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef, DictionaryArray, Float64Array, Int64Array, RecordBatch, StringArray, StructArray};
use arrow_schema::{DataType, Field, Fields, Schema};
use hprm_node::payload::{
    Arrow, ArrowKind, Buffer, Decoder, Encoder, PayloadError, StoreLink, DEFAULT_GET_TIMEOUT, DEFAULT_THRESHOLD,
    EXT_ARROW,
};
use hprm_store::ObjectId;
use support::{eventually, StoreDaemon};

/// A batch of `rows` rows with a nested struct, a list and a dictionary
/// column, nulls, and a NaN with a payload (compared bit for bit).
fn batch(rows: usize) -> RecordBatch {
    let id: ArrayRef = Arc::new(Int64Array::from_iter((0..rows as i64).map(|i| (i % 7 != 3).then_some(i * 31))));
    let x = Float64Array::from_iter_values((0..rows).map(|i| {
        if i == 1 {
            f64::from_bits(0x7ff8_dead_beef_0001)
        } else {
            i as f64 / 3.0
        }
    }));
    let name = StringArray::from_iter_values((0..rows).map(|i| format!("pose-{i}")));
    let pose: ArrayRef = Arc::new(StructArray::new(
        Fields::from(vec![Field::new("x", DataType::Float64, false), Field::new("name", DataType::Utf8, false)]),
        vec![Arc::new(x), Arc::new(name)],
        None,
    ));
    let mut list = ListBuilder::new(Int32Builder::new());
    for i in 0..rows {
        if i % 5 == 0 {
            list.append_null();
        } else {
            list.append_value((0..(i % 4) as i32).map(Some));
        }
    }
    let points: ArrayRef = Arc::new(list.finish());
    let label: ArrayRef =
        Arc::new((0..rows).map(|i| ["car", "bike", "person"][i % 3]).collect::<DictionaryArray<Int32Type>>());
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("pose", pose.data_type().clone(), false),
        Field::new("points", points.data_type().clone(), true),
        Field::new("label", label.data_type().clone(), false),
    ])
    .with_metadata([("robot".to_string(), "r2".to_string())].into());
    RecordBatch::try_new(Arc::new(schema), vec![id, pose, points, label]).expect("batch")
}

fn codec(store: &StoreDaemon) -> (Encoder, Decoder) {
    (
        Encoder::new(StoreLink::new(Some(store.socket.clone())), DEFAULT_THRESHOLD),
        Decoder::new(StoreLink::new(Some(store.socket.clone())), DEFAULT_GET_TIMEOUT),
    )
}

/// Every column equal, and the float column bit for bit (NaN payloads).
fn assert_bit_exact(sent: &RecordBatch, got: &RecordBatch) {
    assert_eq!(sent.schema(), got.schema());
    assert_eq!(sent.columns(), got.columns());
    let x = |b: &RecordBatch| {
        let pose = b.column(1).as_any().downcast_ref::<StructArray>().expect("struct").column(0).clone();
        let x = pose.as_any().downcast_ref::<Float64Array>().expect("f64").values().to_vec();
        x.into_iter().map(f64::to_bits).collect::<Vec<_>>()
    };
    assert_eq!(x(sent), x(got));
}

/// The memory of every buffer of `array`, its children (a dictionary's
/// values included) and their validity bitmaps.
fn buffer_ranges(array: &ArrayRef) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut stack = vec![array.to_data()];
    while let Some(data) = stack.pop() {
        let nulls = data.nulls().map(|n| n.buffer());
        for b in data.buffers().iter().chain(nulls) {
            out.push((b.as_ptr() as usize, b.len()));
        }
        stack.extend(data.child_data().iter().cloned());
    }
    out
}

fn refs(store: &StoreDaemon, id: ObjectId) -> u32 {
    store.client().list().expect("list").iter().find(|o| o.id == id).map_or(0, |o| o.ref_count)
}

#[test]
fn record_batch_round_trips_zero_copy_and_pins_its_object() {
    let store = StoreDaemon::start("64M");
    let (encoder, decoder) = codec(&store);
    let sent = batch(20_000);
    let bytes = encoder.encode(&Arrow::from_batch(sent.clone()), 1).expect("encode");
    assert!(bytes.len() < 128, "the stream travels out-of-band: {} in-band bytes", bytes.len());
    let ids = Decoder::references(&bytes).expect("references");
    assert_eq!(ids.len(), 1);
    assert_eq!((bytes[0], bytes[2]), (0xc7, EXT_ARROW as u8), "an ext 8 of type 5: {:02x?}", &bytes[..4]);

    let got: Arrow = decoder.decode(&bytes).expect("decode");
    assert_eq!(got.kind(), ArrowKind::Batch);
    assert!(got.schema().metadata().get("hprm.kind").is_none(), "{:?}", got.schema().metadata());
    assert_eq!(got.batches().len(), 1);
    assert_bit_exact(&sent, &got.batches()[0]);

    // No copy: every buffer of every column (children, dictionaries and
    // validity bitmaps included) lies inside the store object's mapping.
    let stream = got.stream().expect("a received stream");
    assert!(stream.is_shared());
    assert_eq!(stream.object_id(), Some(ids[0]));
    let (start, len) = (stream.bytes().as_ptr() as usize, stream.len_bytes());
    for column in got.batches()[0].columns() {
        for (ptr, n) in buffer_ranges(column) {
            assert!(ptr >= start && ptr + n <= start + len, "a buffer at {ptr:#x}+{n} outside {start:#x}+{len}");
        }
    }

    // One column kept: the object stays pinned; dropped: released.
    let label = got.batches()[0].column(3).clone();
    drop(got);
    eventually(Duration::from_secs(5), "the receiver's claim lands", || refs(&store, ids[0]) > 0);
    std::thread::sleep(Duration::from_millis(100));
    assert!(refs(&store, ids[0]) > 0, "released while a column still views it");
    assert_eq!(label.len(), 20_000);
    drop(label);
    eventually(Duration::from_secs(5), "the object is released with the last buffer", || refs(&store, ids[0]) == 0);
}

#[test]
fn received_batches_are_sent_on_by_reference() {
    let store = StoreDaemon::start("64M");
    let (encoder, decoder) = codec(&store);
    let bytes = encoder.encode(&Arrow::from_batch(batch(20_000)), 1).expect("encode");
    let got: Arrow = decoder.decode(&bytes).expect("decode");
    let echo = encoder.encode(&got, 1).expect("echo");
    assert_eq!(Decoder::references(&echo).expect("refs"), Decoder::references(&bytes).expect("refs"));
    let again: Arrow = decoder.decode(&echo).expect("decode the echo");
    assert_eq!(again.kind(), ArrowKind::Batch);
    assert_bit_exact(&got.batches()[0], &again.batches()[0]);
}

#[test]
fn tables_arrays_and_small_values_round_trip_inline_and_stored() {
    let store = StoreDaemon::start("64M");
    let (encoder, decoder) = codec(&store);
    // A table of two batches, small enough to travel inline.
    let small = batch(10);
    let table = Arrow::from_batches(small.schema(), vec![small.clone(), batch(3)]).expect("table");
    let bytes = encoder.encode(&table, 1).expect("encode");
    assert!(Decoder::references(&bytes).expect("refs").is_empty(), "under the threshold: inline");
    let got: Arrow = decoder.decode(&bytes).expect("decode");
    assert_eq!(got.kind(), ArrowKind::Table);
    assert!(!got.stream().expect("stream").is_shared());
    assert_eq!(got.batches().len(), 2);
    assert_bit_exact(&small, &got.batches()[0]);
    assert_bit_exact(&batch(3), &got.batches()[1]);

    // A table of no batch: its schema (metadata and dictionary fields
    // included) and kind come from the schema message alone.
    let empty = Arrow::from_batches(small.schema(), Vec::new()).expect("table");
    let got: Arrow = decoder.decode(&encoder.encode(&empty, 1).expect("encode")).expect("decode");
    assert_eq!((got.kind(), got.schema(), got.batches().len()), (ArrowKind::Table, &small.schema(), 0));

    // An array, large: stored.
    let values: ArrayRef = Arc::new(Float64Array::from_iter_values((0..100_000).map(f64::from)));
    let bytes = encoder.encode(&Arrow::from_array(values.clone()).expect("array"), 1).expect("encode");
    assert_eq!(Decoder::references(&bytes).expect("refs").len(), 1);
    let got: Arrow = decoder.decode(&bytes).expect("decode");
    assert_eq!(got.kind(), ArrowKind::Array);
    assert_eq!(got.batches()[0].column(0), &values);
    assert_eq!(got.schema().field(0).name(), "values");
}

#[test]
fn batches_of_another_schema_and_bad_streams_are_refused() {
    let store = StoreDaemon::start("64M");
    let (encoder, decoder) = codec(&store);
    let err = Arrow::from_batches(
        batch(2).schema(),
        vec![Arrow::from_array(Arc::new(Int64Array::from(vec![1]))).expect("array").into_batches().remove(0)],
    )
    .unwrap_err();
    assert!(matches!(err, PayloadError::Arrow { .. }), "{err}");

    // Bytes that are no IPC stream, sent as a plain buffer: one clear error.
    let bytes = encoder.encode(&Buffer::from_vec(vec![7; 100]), 1).expect("encode");
    let err = decoder.decode::<Arrow>(&bytes).unwrap_err();
    assert!(err.to_string().contains("Arrow IPC stream"), "{err}");
}

/// What a binding says it sent (`with_kind`, as the Python SDK does for a
/// pyarrow chunked array) is what the receiver gets; a kind the batches
/// cannot be is refused. The stream a binding writes itself (`plan`, then
/// `write` into a destination of exactly its length) reads back the same.
#[test]
fn kinds_set_by_a_binding_travel_and_impossible_ones_are_refused() {
    let store = StoreDaemon::start("64M");
    let (encoder, decoder) = codec(&store);
    let values = Arrow::from_array(Arc::new(Float64Array::from(vec![1.5, 2.5]))).expect("array");
    let schema = values.schema().clone();
    let chunks = values.into_batches();
    let chunked = Arrow::from_batches(schema.clone(), vec![chunks[0].clone(), chunks[0].slice(1, 1)])
        .and_then(|a| a.with_kind(ArrowKind::Chunked))
        .expect("chunked");
    let got: Arrow = decoder.decode(&encoder.encode(&chunked, 1).expect("encode")).expect("decode");
    assert_eq!((got.kind(), got.batches().len()), (ArrowKind::Chunked, 2));
    assert_eq!(got.batches()[1].columns(), chunks[0].slice(1, 1).columns());

    let two = Arrow::from_batches(schema, vec![chunks[0].clone(), chunks[0].clone()]).expect("table");
    assert!(matches!(two.clone().with_kind(ArrowKind::Batch), Err(PayloadError::Arrow { .. })));
    assert!(matches!(Arrow::from_batch(batch(3)).with_kind(ArrowKind::Array), Err(PayloadError::Arrow { .. })));

    assert!(two.framed_in_place());
    let planned = two.plan().expect("plan");
    let mut bytes = vec![0xa5; planned.len()];
    planned.write(&mut bytes).expect("write");
    assert!(planned.write(&mut bytes[1..]).is_err(), "a destination of another length");
    let got = Arrow::from_stream(Buffer::from_vec(bytes)).expect("read");
    assert_eq!((got.kind(), got.batches().len()), (ArrowKind::Table, 2));
}
