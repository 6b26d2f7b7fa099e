//! Tests of the codec without a store: in-band round trips, the exact
//! bytes of the wire format, and refusal of bad input. The store paths are
//! tested against a real daemon in `tests/payload.rs`.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Pose {
    x: f64,
    y: f64,
    label: String,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Reading {
    seq: u64,
    pose: Pose,
    image: Buffer,
    extra: Vec<Buffer>,
    by_name: BTreeMap<String, Buffer>,
    maybe: Option<Buffer>,
    #[serde(with = "oob")]
    ranges: Vec<f32>,
    #[serde(with = "oob")]
    raw: Vec<u8>,
}

fn reading() -> Reading {
    Reading {
        seq: 42,
        pose: Pose { x: 1.5, y: -2.0, label: "base".into() },
        image: Buffer::from_vec((0..=255).collect()).with_shape(&[16, 16]).unwrap(),
        extra: vec![Buffer::from_slice(&[1i16, -2, 3]), Buffer::from_elements(Vec::<u64>::new())],
        by_name: [("depth".to_owned(), Buffer::from_slice(&[0.5f64; 4]).with_shape(&[2, 2]).unwrap())].into(),
        maybe: None,
        ranges: vec![0.25, 1.0, 1e9],
        raw: vec![9; 100],
    }
}

#[test]
fn nested_values_round_trip_in_band() {
    let value = reading();
    let bytes = Encoder::default().encode(&value, 1).unwrap();
    let back: Reading = Decoder::default().decode(&bytes).unwrap();
    assert_eq!(back, value);
    assert!(!back.image.is_shared());
    assert_eq!(back.image.shape(), &[16, 16]);
    assert_eq!(back.extra[0].as_slice::<i16>(), Some(&[1i16, -2, 3][..]));
    assert_eq!(back.by_name["depth"].as_slice::<f64>().unwrap()[3], 0.5);
    // Plain rmp-serde reads in-band payloads too (no store references).
    let plain: Reading = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(plain, value);
}

#[test]
fn structs_are_maps_with_field_names() {
    let bytes = Encoder::default().encode(&reading(), 1).unwrap();
    let generic: serde_json::Value = {
        // Re-read as a generic map: every field is named.
        #[derive(Deserialize)]
        struct Keys(BTreeMap<String, serde::de::IgnoredAny>);
        let keys: Keys = rmp_serde::from_slice(&bytes).unwrap();
        keys.0.keys().cloned().collect()
    };
    assert_eq!(generic, serde_json::json!(["by_name", "extra", "image", "maybe", "pose", "ranges", "raw", "seq"]));
}

#[test]
fn wire_example_of_the_module_docs() {
    let mut value = BTreeMap::new();
    value.insert("a", Buffer::from_vec(vec![1, 2, 3]));
    let bytes = Encoder::default().encode(&value, 1).unwrap();
    #[rustfmt::skip]
    assert_eq!(bytes, [
        0x81, 0xa1, b'a',
        0xc7, 0x0e, 0x01,
        0x95, 0xa3, b'|', b'u', b'1', 0x91, 0x03, 0xc0, 0x03,
        0xc4, 0x03, 1, 2, 3,
    ]);
    // The same bytes from serializing without an encoder.
    assert_eq!(rmp_serde::to_vec_named(&value).unwrap(), bytes);
}

#[test]
fn oob_vec_is_a_buffer_on_the_wire() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Scan {
        #[serde(with = "oob")]
        ranges: Vec<f32>,
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct AsBuffer {
        ranges: Buffer,
    }
    let scan = Scan { ranges: vec![1.0, 2.0] };
    let bytes = Encoder::default().encode(&scan, 1).unwrap();
    let as_buffer: AsBuffer = Decoder::default().decode(&bytes).unwrap();
    assert_eq!(as_buffer.ranges.dtype(), &Dtype::F32);
    assert_eq!(as_buffer.ranges.as_slice::<f32>(), Some(&[1.0f32, 2.0][..]));
    // And back: a buffer field read as an oob Vec.
    let bytes = Encoder::default().encode(&as_buffer, 1).unwrap();
    assert_eq!(Decoder::default().decode::<Scan>(&bytes).unwrap(), scan);
    // Another element type is refused, naming both.
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Wrong {
        #[serde(with = "oob")]
        ranges: Vec<f64>,
    }
    let e = Decoder::default().decode::<Wrong>(&bytes).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, PayloadError::Mismatch { .. }) && text.contains("<f4") && text.contains("<f8"), "{text}");
    // In JSON, a plain list.
    assert_eq!(serde_json::to_string(&scan).unwrap(), r#"{"ranges":[1.0,2.0]}"#);
    assert_eq!(serde_json::from_str::<Scan>(r#"{"ranges":[1.0,2.0]}"#).unwrap(), scan);
}

#[test]
fn large_buffer_without_a_store_is_refused_clearly() {
    let big = Buffer::from_vec(vec![0; DEFAULT_THRESHOLD]);
    let e = Encoder::default().encode(&big, 1).unwrap_err();
    assert!(
        matches!(e, PayloadError::NoStoreForBuffer { nbytes: DEFAULT_THRESHOLD, threshold: DEFAULT_THRESHOLD }),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(text.contains("hprm-store") && text.contains("threshold"), "{text}");
    // One byte less travels inline, and then the message is too big for a frame.
    let under = Buffer::from_vec(vec![0; DEFAULT_THRESHOLD - 1]);
    let e = Encoder::default().encode(&under, 1).unwrap_err();
    assert!(matches!(e, PayloadError::NoStoreForMessage { max: MAX_INLINE, .. }), "{e:?}");
    // A message of many small parts, too.
    let e = Encoder::default().encode(&vec!["x".repeat(100); 1000], 1).unwrap_err();
    assert!(matches!(e, PayloadError::NoStoreForMessage { .. }), "{e:?}");
    assert!(matches!(Encoder::default().loan(Dtype::U8, &[10], 1), Err(PayloadError::NoStoreForLoan { nbytes: 10 })));
}

#[test]
fn threshold_is_inclusive_and_configurable() {
    // With threshold 0 every buffer needs the store, even an empty one.
    let e = Encoder::new(StoreLink::none(), 0).encode(&Buffer::from_vec(vec![]), 1).unwrap_err();
    assert!(matches!(e, PayloadError::NoStoreForBuffer { nbytes: 0, threshold: 0 }));
    let fine = Encoder::new(StoreLink::none(), 5).encode(&Buffer::from_vec(vec![1; 4]), 1).unwrap();
    assert_eq!(Decoder::default().decode::<Buffer>(&fine).unwrap().bytes(), &[1; 4]);
}

#[test]
fn store_reference_without_a_store_or_outside_a_decoder() {
    let id = hprm_store::ObjectId::from_bytes([7; 20]);
    let descriptor = BufferDescriptor {
        dtype: Dtype::U8,
        shape: vec![100_000],
        strides: None,
        nbytes: 100_000,
        location: Location::Store(id),
    };
    let bytes = ext_payload(EXT_BUFFER, &descriptor.encode().unwrap());
    let e = Decoder::default().decode::<Buffer>(&bytes).unwrap_err();
    assert!(matches!(e, PayloadError::NoStoreForReceive { count: 1 }), "{e:?}");
    assert!(e.to_string().contains("no store configured"));
    // Plain rmp-serde cannot fetch it, and says who can.
    let e = rmp_serde::from_slice::<Buffer>(&bytes).unwrap_err().to_string();
    assert!(e.contains("Decoder::decode") && e.contains(&id.to_string()), "{e}");
}

/// An ext value alone as a payload.
fn ext_payload(ty: i8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    msgpack::Writer(&mut out).ext_header(ty, data.len());
    out.extend_from_slice(data);
    out
}

#[test]
fn pickled_python_objects_are_refused_by_name() {
    // As Python writes one: [pickle bytes, [out-of-band buffers]].
    let mut data = Vec::new();
    let mut w = msgpack::Writer(&mut data);
    w.array_len(2);
    w.bin(b"\x80\x05pickled");
    w.array_len(0);
    let lone = ext_payload(EXT_PICKLED, &data);
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Anything {
        value: Buffer,
    }
    let mut nested = vec![0x81, 0xa5];
    nested.extend_from_slice(b"value");
    nested.extend_from_slice(&lone);
    for bytes in [&lone, &nested] {
        let e = Decoder::default().decode::<Anything>(bytes).unwrap_err();
        assert!(matches!(e, PayloadError::Pickled { len } if len == data.len()), "{e:?}");
        assert!(e.to_string().contains("can only be read by Python federates"), "{e}");
    }
    // Whatever type was asked for.
    assert!(matches!(Decoder::default().decode::<u32>(&nested), Err(PayloadError::Pickled { .. })));
}

#[test]
fn malformed_payloads_give_malformed_errors() {
    let good = Encoder::default().encode(&reading(), 1).unwrap();
    // Every truncation.
    for cut in 0..good.len() {
        let e = Decoder::default().decode::<Reading>(&good[..cut]).unwrap_err();
        assert!(matches!(e, PayloadError::Malformed { .. }), "cut at {cut}: {e:?}");
    }
    // Trailing bytes.
    let mut long = good.clone();
    long.push(0xc0);
    assert!(matches!(Decoder::default().decode::<Reading>(&long), Err(PayloadError::Malformed { .. })));
    // A spilled-message reference inside a message.
    let spilled = SpilledMessage { id: hprm_store::ObjectId::from_bytes([1; 20]), nbytes: 10 }.to_payload();
    let mut inside = vec![0x91];
    inside.extend_from_slice(&spilled);
    let e = Decoder::default().decode::<Vec<Buffer>>(&inside).unwrap_err();
    assert!(matches!(e, PayloadError::Malformed { .. }) && e.to_string().contains("ext 2"), "{e:?}");
    // A spilled message with no store to read it from.
    assert!(matches!(Decoder::default().decode::<Buffer>(&spilled), Err(PayloadError::NoStoreForReceive { .. })));
    // Another ext type where a buffer belongs.
    let e = Decoder::default().decode::<Buffer>(&ext_payload(9, &[1, 2, 3])).unwrap_err();
    assert!(e.to_string().contains("extension type 9"), "{e}");
    // A bad descriptor inside an otherwise fine message.
    let bad = ext_payload(EXT_BUFFER, &[0x95, 0xa3, b'<', b'f', b'4', 0x91, 0x03, 0xc0, 0x0c, 0xc4, 0x0b]);
    assert!(matches!(Decoder::default().decode::<Buffer>(&bad), Err(PayloadError::Malformed { .. })));
    // Too deep.
    let deep = vec![0x91; 5000];
    assert!(matches!(Decoder::default().decode::<serde::de::IgnoredAny>(&deep), Err(PayloadError::Malformed { .. })));
    // Well-formed, wrong type.
    let e = Decoder::default().decode::<Pose>(&good).unwrap_err();
    assert!(matches!(e, PayloadError::Mismatch { .. }) && e.to_string().contains("Pose"), "{e}");
}

#[test]
fn non_contiguous_buffers_are_refused_and_contiguous_strides_accepted() {
    let d = BufferDescriptor {
        dtype: Dtype::U16,
        shape: vec![2, 3],
        strides: Some(vec![2, 4]),
        nbytes: 12,
        location: Location::Inline((0..12).collect()),
    };
    let e = Decoder::default().decode::<Buffer>(&ext_payload(EXT_BUFFER, &d.encode().unwrap())).unwrap_err();
    assert!(matches!(e, PayloadError::Strided { .. }) && e.to_string().contains("ascontiguousarray"), "{e:?}");
    let c = BufferDescriptor { strides: Some(vec![6, 2]), ..d };
    let b = Decoder::default().decode::<Buffer>(&ext_payload(EXT_BUFFER, &c.encode().unwrap())).unwrap();
    assert_eq!(b.shape(), &[2, 3]);
    assert_eq!(b.len_bytes(), 12);
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5eed);
    let good = Encoder::default().encode(&reading(), 1).unwrap();
    let decoder = Decoder::default();
    for round in 0..3000 {
        let bytes: Vec<u8> = if round % 2 == 0 {
            // Pure noise.
            let len = rng.gen_range(0..200);
            (0..len).map(|_| rng.gen()).collect()
        } else {
            // A good message with a few bytes flipped: reaches deeper.
            let mut b = good.clone();
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..b.len());
                b[i] = rng.gen();
            }
            b
        };
        // Any outcome but a panic (or a store lookup: there is none).
        let _ = decoder.decode::<Reading>(&bytes);
        let _ = decoder.decode::<serde::de::IgnoredAny>(&bytes);
        let _ = BufferDescriptor::decode(&bytes);
        let _ = SpilledMessage::decode(&bytes);
        if let Err(e) = decoder.decode::<Buffer>(&bytes) {
            assert!(!e.to_string().is_empty());
        }
    }
}

#[test]
fn contexts_nest_and_survive_panics() {
    /// Encodes a buffer with its own encoder while being encoded.
    struct Nested;
    impl Serialize for Nested {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let inner =
                Encoder::default().encode(&Buffer::from_vec(vec![5; 3]), 1).map_err(serde::ser::Error::custom)?;
            (Buffer::from_vec(vec![1]), serde_bytes::ByteBuf::from(inner), Buffer::from_vec(vec![2])).serialize(s)
        }
    }
    let bytes = Encoder::default().encode(&Nested, 1).unwrap();
    let (a, inner, b): (Buffer, serde_bytes::ByteBuf, Buffer) = Decoder::default().decode(&bytes).unwrap();
    assert_eq!((a.bytes(), b.bytes()), (&[1u8][..], &[2u8][..]));
    assert_eq!(Decoder::default().decode::<Buffer>(&inner).unwrap().bytes(), &[5; 3]);

    /// Panics in the middle of an encode.
    struct Bomb;
    impl Serialize for Bomb {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            panic!("boom");
        }
    }
    let caught = std::panic::catch_unwind(|| Encoder::default().encode(&(Buffer::from_vec(vec![1]), Bomb), 1));
    assert!(caught.is_err());
    // The thread's context is clean again: a plain serialization is inline.
    let plain = rmp_serde::to_vec_named(&Buffer::from_vec(vec![0; DEFAULT_THRESHOLD * 2])).unwrap();
    assert!(plain.len() > DEFAULT_THRESHOLD * 2);
}

#[test]
fn serialize_errors_are_reported() {
    struct Fails;
    impl Serialize for Fails {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("sensor unplugged"))
        }
    }
    let e = Encoder::default().encode(&Fails, 1).unwrap_err();
    assert!(matches!(e, PayloadError::Serialize { .. }) && e.to_string().contains("sensor unplugged"), "{e:?}");
}

#[test]
fn types_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Buffer>();
    send_sync::<Encoder>();
    send_sync::<Decoder>();
    send_sync::<StoreLink>();
    send_sync::<PayloadError>();
    send::<Loan>();
}

#[test]
fn a_session_writes_what_encode_writes() {
    // The wire example of the module docs, written by hand.
    let mut session = Encoder::default().session(1);
    let mut message = vec![0x81, 0xa1, b'a'];
    let placed = session.write_buffer(&mut message, EXT_BUFFER, &Dtype::U8, &[3], &[1, 2, 3], true).unwrap();
    assert_eq!(placed, None, "under the threshold: inline");
    let bytes = session.finish(message).unwrap();
    let mut value = BTreeMap::new();
    value.insert("a", Buffer::from_vec(vec![1, 2, 3]));
    assert_eq!(bytes, Encoder::default().encode(&value, 1).unwrap());
    // Over the threshold and no store: the encoder's own error.
    let mut session = Encoder::new(StoreLink::none(), 4).session(1);
    let e = session.write_buffer(&mut Vec::new(), EXT_BUFFER, &Dtype::U8, &[4], &[0; 4], false).unwrap_err();
    assert!(matches!(e, PayloadError::NoStoreForBuffer { nbytes: 4, threshold: 4 }), "{e:?}");
    // A message over the in-band limit needs a store to spill into.
    let session = Encoder::default().session(1);
    let e = session.finish(vec![0xc0; MAX_INLINE + 1]).unwrap_err();
    assert!(matches!(e, PayloadError::NoStoreForMessage { .. }), "{e:?}");
    // Shape and length must agree, as for any descriptor.
    let mut session = Encoder::default().session(1);
    assert!(matches!(
        session.write_buffer(&mut Vec::new(), EXT_BUFFER, &Dtype::F32, &[2], &[0; 4], false),
        Err(PayloadError::Shape { .. })
    ));
}

#[test]
fn byte_strings_are_buffers_to_rust() {
    let mut session = Encoder::default().session(1);
    let mut message = Vec::new();
    session.write_buffer(&mut message, EXT_BYTES, &Dtype::U8, &[5], b"hello", false).unwrap();
    let bytes = session.finish(message).unwrap();
    // 16 bytes of descriptor: a fixext 16 of type 4.
    assert_eq!(&bytes[..2], &[0xd8, EXT_BYTES as u8], "an ext 4 of ext 1's data");
    assert_eq!(
        &bytes[2..],
        &BufferDescriptor {
            dtype: Dtype::U8,
            shape: vec![5],
            strides: None,
            nbytes: 5,
            location: Location::Inline(b"hello".to_vec())
        }
        .encode()
        .unwrap()[..]
    );
    let b: Buffer = Decoder::default().decode(&bytes).unwrap();
    assert_eq!((b.dtype(), b.shape(), b.bytes()), (&Dtype::U8, &[5usize][..], &b"hello"[..]));
    #[derive(Deserialize)]
    struct Raw {
        #[serde(with = "oob")]
        raw: Vec<u8>,
    }
    let mut message = vec![0x81, 0xa3, b'r', b'a', b'w'];
    let mut session = Encoder::default().session(1);
    session.write_buffer(&mut message, EXT_BYTES, &Dtype::U8, &[2], &[7, 8], false).unwrap();
    let raw: Raw = Decoder::default().decode(&session.finish(message).unwrap()).unwrap();
    assert_eq!(raw.raw, [7, 8]);
    // Only one dimension of |u1 is a byte string.
    let mut session = Encoder::default().session(1);
    let e = session.write_buffer(&mut Vec::new(), EXT_BYTES, &Dtype::F32, &[1], &[0; 4], false).unwrap_err();
    assert!(e.to_string().contains("byte string"), "{e}");
    assert!(session.write_buffer(&mut Vec::new(), 9, &Dtype::U8, &[1], &[0], false).is_err());
}

#[test]
fn a_byte_string_filled_in_place_is_what_the_same_bytes_written_make() {
    // What the Python SDK's Arrow path writes: measured, then filled where
    // it travels (inline here: under the threshold, no store).
    let written = {
        let mut session = Encoder::default().session(1);
        let mut message = Vec::new();
        session.write_buffer(&mut message, EXT_ARROW, &Dtype::U8, &[5], b"arrow", false).unwrap();
        session.finish(message).unwrap()
    };
    let mut session = Encoder::default().session(1);
    let mut message = Vec::new();
    let placed = session.write_filled(&mut message, EXT_ARROW, 5, |bytes| {
        bytes.copy_from_slice(b"arrow");
        Ok(())
    });
    assert_eq!(placed.unwrap(), None, "under the threshold: inline");
    assert_eq!(session.finish(message).unwrap(), written);
    // A fill that fails fails the write, which appends nothing.
    let mut session = Encoder::default().session(1);
    let mut message = Vec::new();
    let e = session
        .write_filled(&mut message, EXT_BYTES, 3, |_| Err(PayloadError::Serialize { message: "no".into() }))
        .unwrap_err();
    assert!(matches!(&e, PayloadError::Serialize { message } if message == "no"), "{e:?}");
    assert!(message.is_empty());
    // Over the threshold and no store: the encoder's own error, before any fill.
    let mut session = Encoder::new(StoreLink::none(), 4).session(1);
    let e = session.write_filled(&mut Vec::new(), EXT_ARROW, 4, |_| unreachable!("filled")).unwrap_err();
    assert!(matches!(e, PayloadError::NoStoreForBuffer { nbytes: 4, threshold: 4 }), "{e:?}");
    // Only byte strings are filled this way.
    let e = Encoder::default().session(1).write_filled(&mut Vec::new(), EXT_BUFFER, 1, |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("not a byte string"), "{e}");
}

#[test]
fn torch_tensors_are_buffers_to_rust() {
    // Python writes a tensor as ext 6 over ext 1's data, any plain dtype.
    let values: Vec<u8> = [1.5f32, -2.0, 3.25, 0.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut session = Encoder::default().session(1);
    let mut message = Vec::new();
    session.write_buffer(&mut message, EXT_TENSOR, &Dtype::F32, &[2, 2], &values, false).unwrap();
    let bytes = session.finish(message).unwrap();
    let descriptor = BufferDescriptor {
        dtype: Dtype::F32,
        shape: vec![2, 2],
        strides: None,
        nbytes: 16,
        location: Location::Inline(values.clone()),
    }
    .encode()
    .unwrap();
    assert_eq!(bytes, ext_payload(EXT_TENSOR, &descriptor), "an ext 6 of ext 1's data");
    let b: Buffer = Decoder::default().decode(&bytes).unwrap();
    assert_eq!((b.dtype(), b.shape(), b.bytes()), (&Dtype::F32, &[2usize, 2][..], &values[..]));
    assert_eq!(b.to_vec::<f32>().unwrap(), [1.5, -2.0, 3.25, 0.0]);
    // Inside a struct, and through oob like ext 1.
    #[derive(Deserialize)]
    struct Ranges {
        #[serde(with = "oob")]
        ranges: Vec<f32>,
    }
    let mut message = vec![0x81, 0xa6, b'r', b'a', b'n', b'g', b'e', b's'];
    let mut session = Encoder::default().session(1);
    session.write_buffer(&mut message, EXT_TENSOR, &Dtype::F32, &[4], &values, false).unwrap();
    let r: Ranges = Decoder::default().decode(&session.finish(message).unwrap()).unwrap();
    assert_eq!(r.ranges, [1.5, -2.0, 3.25, 0.0]);
    // Its store references are found like ext 1's.
    let id = hprm_store::ObjectId::from_bytes([6; 20]);
    let stored = BufferDescriptor {
        dtype: Dtype::F32,
        shape: vec![20_000],
        strides: None,
        nbytes: 80_000,
        location: Location::Store(id),
    };
    assert_eq!(Decoder::references(&ext_payload(EXT_TENSOR, &stored.encode().unwrap())).unwrap(), [id]);
    // Shape and length must agree, as for any descriptor.
    let mut session = Encoder::default().session(1);
    assert!(matches!(
        session.write_buffer(&mut Vec::new(), EXT_TENSOR, &Dtype::F32, &[2], &[0; 4], false),
        Err(PayloadError::Shape { .. })
    ));
}

#[test]
fn references_are_found_in_buffers_byte_strings_and_pickles() {
    let id = |n: u8| hprm_store::ObjectId::from_bytes([n; 20]);
    let stored = |n: u8| BufferDescriptor {
        dtype: Dtype::U8,
        shape: vec![70_000],
        strides: None,
        nbytes: 70_000,
        location: Location::Store(id(n)),
    };
    let mut pickle = Vec::new();
    let mut w = msgpack::Writer(&mut pickle);
    w.array_len(2);
    w.bin(b"\x80\x05");
    w.array_len(1);
    let d3 = stored(3).encode().unwrap();
    w.ext_header(EXT_BUFFER, d3.len());
    pickle.extend_from_slice(&d3);
    let mut message = vec![0x94];
    message.extend_from_slice(&ext_payload(EXT_BUFFER, &stored(1).encode().unwrap()));
    message.extend_from_slice(&ext_payload(EXT_BYTES, &stored(2).encode().unwrap()));
    message.extend_from_slice(&ext_payload(EXT_PICKLED, &pickle));
    message.extend_from_slice(&ext_payload(EXT_BUFFER, &stored(1).encode().unwrap()));
    assert_eq!(Decoder::references(&message).unwrap(), [id(1), id(2), id(3)], "each object once, in order");
    assert!(matches!(Decoder::references(&message[..message.len() - 1]), Err(PayloadError::Malformed { .. })));
    // In-band payloads are not spilled; without a store nothing can be taken.
    assert!(Decoder::default().take_spilled(&message).unwrap().is_none());
    assert!(matches!(Decoder::default().take(&[id(1)]), Err(PayloadError::NoStoreForReceive { count: 1 })));
    assert!(Decoder::default().take(&[]).unwrap().is_empty());
}
