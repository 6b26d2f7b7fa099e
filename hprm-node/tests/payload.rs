//! The payload codec against a real `hprm-store` daemon: buffers out of
//! band, deliveries settled by receivers, spilled messages, loans, and no
//! object left behind.

mod support;

use std::time::Duration;

use hprm_node::payload::{
    oob, Buffer, Decoder, Dtype, Encoder, PayloadError, SpilledMessage, StoreLink, DEFAULT_GET_TIMEOUT,
    DEFAULT_THRESHOLD, MAX_INLINE,
};
use hprm_store::{ObjectId, ObjectInfo, StoreClient};
use serde::{Deserialize, Serialize};
use support::{eventually, StoreDaemon};

const MIB: usize = 1 << 20;

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Frame {
    stamp: u64,
    camera: String,
    gain: f32,
    pixels: Buffer,
}

fn frame(len: usize) -> Frame {
    let pixels = (0..len).map(|i| (i % 251) as u8).collect();
    Frame { stamp: 7, camera: "front".into(), gain: 1.25, pixels: Buffer::from_vec(pixels) }
}

/// An encoder and a decoder with connections of their own, as a sender and
/// a receiver in two processes would have.
fn codec(store: &StoreDaemon) -> (Encoder, Decoder) {
    (encoder(store), decoder(store))
}

fn encoder(store: &StoreDaemon) -> Encoder {
    Encoder::new(StoreLink::new(Some(store.socket.clone())), DEFAULT_THRESHOLD)
}

fn decoder(store: &StoreDaemon) -> Decoder {
    Decoder::new(StoreLink::new(Some(store.socket.clone())), DEFAULT_GET_TIMEOUT)
}

/// The store's objects, once every claim and release sent so far has
/// landed (both are one-way, and other connections' requests may overtake
/// them: a receiver's claim may not have been handled yet when it is done
/// with the buffer, so "no reference" alone does not mean "settled").
fn settled_objects(admin: &StoreClient) -> Vec<ObjectInfo> {
    let mut objects = Vec::new();
    eventually(Duration::from_secs(5), "every reference is released and every delivery settled", || {
        objects = admin.list().expect("list");
        objects.iter().all(|o| o.ref_count == 0 && o.pending_deliveries == 0)
    });
    objects
}

/// Nothing leaked: every object is sealed, unreferenced and fully
/// delivered, so evicting everything empties the store.
fn assert_clean(admin: &StoreClient) {
    let objects = settled_objects(admin);
    for o in &objects {
        assert!(o.sealed && o.pending_deliveries == 0 && !o.delete_pending, "object left pinned: {o:?}");
    }
    admin.evict(u64::MAX).expect("evict");
    let left = admin.list().expect("list");
    assert!(left.is_empty(), "objects left after evicting everything: {left:?}");
    let stats = admin.stats().expect("stats");
    assert_eq!((stats.pending_deliveries, stats.objects_referenced), (0, 0), "{stats:?}");
}

#[test]
fn large_buffer_travels_out_of_band() {
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);
    let sent = frame(MIB);
    let bytes = encoder.encode(&sent, 1).unwrap();
    assert!(bytes.len() < 128, "in-band bytes: {}", bytes.len());
    let objects = admin.list().unwrap();
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0].placement.data_size, MIB as u64);
    assert_eq!(objects[0].pending_deliveries, 1);

    let got: Frame = decoder.decode(&bytes).unwrap();
    assert_eq!(got, sent);
    assert!(got.pixels.is_shared(), "the receiver's buffer is a view of the store object");
    assert_eq!(got.pixels.object_id(), Some(objects[0].id));
    assert_eq!(got.pixels.shape(), &[MIB]);
    // Clones share the reference; the last drop releases it.
    let clone = got.pixels.clone();
    drop(got);
    assert_eq!(clone.bytes()[MIB - 1], ((MIB - 1) % 251) as u8);
    drop(clone);
    assert_clean(&admin);
}

#[test]
fn small_buffers_stay_in_band_next_to_large_ones() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Mixed {
        big: Buffer,
        small: Buffer,
        #[serde(with = "oob")]
        edge: Vec<u8>,
    }
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);
    let sent = Mixed {
        big: Buffer::from_vec(vec![1; 200_000]),
        small: Buffer::from_vec(vec![2; 1000]),
        edge: vec![3; DEFAULT_THRESHOLD], // exactly the threshold: out-of-band
    };
    let bytes = encoder.encode(&sent, 1).unwrap();
    assert!(bytes.len() < 1000 + 200);
    // `edge` went into a block reserved in advance, published one-way: it
    // shows on another connection once the publish has landed.
    eventually(Duration::from_secs(5), "both objects are listed", || admin.list().unwrap().len() == 2);
    let got: Mixed = decoder.decode(&bytes).unwrap();
    assert_eq!(got, sent);
    assert!(got.big.is_shared() && !got.small.is_shared());
    drop(got);
    assert_clean(&admin);
}

#[test]
fn each_receiver_settles_one_delivery() {
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let encoder = encoder(&store);
    let bytes = encoder.encode(&frame(MIB), 2).unwrap();
    let id = admin.list().unwrap()[0].id;
    let pending = |admin: &StoreClient| {
        admin.list().unwrap().iter().find(|o| o.id == id).map(|o| (o.ref_count, o.pending_deliveries))
    };
    assert_eq!(pending(&admin), Some((0, 2)));

    // Two receivers, each with its own connection.
    let (first, second) = (decoder(&store), decoder(&store));
    let a: Frame = first.decode(&bytes).unwrap();
    let b: Frame = second.decode(&bytes).unwrap();
    assert_eq!(a.pixels.object_id(), Some(id));
    // Each receiver claims its reference one-way: the claims land soon.
    eventually(Duration::from_secs(5), "both claims land; deliveries settle on release, not on claim", || {
        pending(&admin) == Some((2, 2))
    });
    drop(a);
    eventually(Duration::from_secs(5), "the first release lands", || pending(&admin) == Some((1, 1)));
    // Still pinned for the second receiver: eviction cannot touch it.
    assert_eq!(admin.evict(u64::MAX).unwrap().objects, 0);
    drop(b);
    eventually(Duration::from_secs(5), "the second release lands, and the settled message is freed", || {
        pending(&admin).is_none()
    });
    assert_clean(&admin);
}

#[test]
fn buffers_the_type_ignores_are_settled_too() {
    #[derive(Deserialize)]
    struct StampOnly {
        stamp: u64,
    }
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);
    let bytes = encoder.encode(&frame(MIB), 1).unwrap();
    let got: StampOnly = decoder.decode(&bytes).unwrap();
    assert_eq!(got.stamp, 7);
    assert_clean(&admin);
}

#[test]
fn oversized_message_is_spilled_into_the_store() {
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);
    let lines: Vec<String> = (0..2000).map(|i| format!("{i:>6}: {}", "lidar return ".repeat(7))).collect();
    let in_band = rmp_serde::to_vec_named(&lines).unwrap().len();
    assert!(in_band > 190_000, "{in_band}");
    const { assert!(MAX_INLINE < 190_000) };

    let bytes = encoder.encode(&lines, 1).unwrap();
    let spilled = SpilledMessage::from_payload(&bytes).unwrap().expect("a spilled-message reference");
    assert_eq!(spilled.nbytes, in_band as u64);
    assert!(bytes.len() < 50, "{}", bytes.len());
    let objects = admin.list().unwrap();
    assert_eq!(objects.len(), 1);
    assert_eq!((objects[0].id, objects[0].pending_deliveries), (spilled.id, 1));
    // ext 8 of type 2 holding [id, nbytes, offset]: receivers claim it
    // without a round trip.
    assert_eq!((bytes[0], bytes[2], bytes[3]), (0xc7, 2, 0x94), "{bytes:02x?}");

    let got: Vec<String> = decoder.decode(&bytes).unwrap();
    assert_eq!(got, lines);
    assert_clean(&admin);
}

#[test]
fn spilled_message_with_buffers_inside() {
    // Many buffers just under the threshold: each inline, together too big.
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);
    let mut sent: Vec<Buffer> = (0..3u8).map(|i| Buffer::from_vec(vec![i; DEFAULT_THRESHOLD - 1])).collect();
    sent.push(Buffer::from_vec(vec![9; 2 * MIB]));
    let bytes = encoder.encode(&sent, 3).unwrap();
    assert!(SpilledMessage::from_payload(&bytes).unwrap().is_some());
    assert_eq!(admin.list().unwrap().len(), 2, "the spilled message and the large buffer");
    let receivers: Vec<Decoder> = (0..3).map(|_| decoder.clone()).collect();
    for r in &receivers {
        let got: Vec<Buffer> = r.decode(&bytes).unwrap();
        assert_eq!(got, sent);
        assert!(!got[0].is_shared() && got[3].is_shared());
    }
    assert_clean(&admin);
}

#[test]
fn loan_is_written_in_place_and_sent_without_a_copy() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Depth {
        stamp: u64,
        meters: Buffer,
    }
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);

    let mut loan = encoder.loan(Dtype::F32, &[480, 640], 1).unwrap();
    let loan_id = loan.id();
    assert!(loan.as_mut_slice::<u16>().is_none(), "another element type");
    for (i, v) in loan.as_mut_slice::<f32>().unwrap().iter_mut().enumerate() {
        *v = i as f32 * 0.5;
    }
    let meters = loan.finish().unwrap();
    assert!(meters.is_shared());
    assert_eq!(meters.object_id(), Some(loan_id));
    assert_eq!(meters.shape(), &[480, 640]);
    assert_eq!(meters.as_slice::<f32>().unwrap()[1001], 500.5);
    assert_eq!(admin.list().unwrap().len(), 1);

    // First encode: the loan's own object travels, no copy.
    let sent = Depth { stamp: 1, meters: meters.clone() };
    let bytes = encoder.encode(&sent, 1).unwrap();
    assert_eq!(admin.list().unwrap().len(), 1, "no new object");
    let got: Depth = decoder.decode(&bytes).unwrap();
    assert_eq!(got.meters.object_id(), Some(loan_id));
    assert_eq!(got, sent);

    // A later encode sends the same object on (its prepaid deliveries are
    // spent: the store is told of the new receiver), still without a copy.
    let again = encoder.encode(&sent, 1).unwrap();
    assert_eq!(admin.list().unwrap().len(), 1, "no new object");
    let copy: Depth = decoder.decode(&again).unwrap();
    assert_eq!(copy.meters.object_id(), Some(loan_id));
    assert_eq!(copy, sent);

    drop((got, copy, sent, meters));
    assert_clean(&admin);
}

#[test]
fn small_loan_travels_by_reference_too() {
    // Under the threshold, but its deliveries are paid: inlining it would
    // leave them pinning the object until the delivery TTL.
    let store = StoreDaemon::start("16M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);
    let mut loan = encoder.loan(Dtype::I64, &[4], 2).unwrap();
    loan.as_mut_slice::<i64>().unwrap().copy_from_slice(&[1, -2, 3, -4]);
    let id = loan.id();
    let sent = loan.finish().unwrap();
    let bytes = encoder.encode(&sent, 2).unwrap();
    for _ in 0..2 {
        let got: Buffer = decoder.decode(&bytes).unwrap();
        assert_eq!(got.object_id(), Some(id));
        assert_eq!(got.as_slice::<i64>(), Some(&[1i64, -2, 3, -4][..]));
    }
    drop(sent);
    assert_clean(&admin);
}

#[test]
fn loan_sent_to_more_receivers_than_loaned_for_announces_the_others() {
    // A tap that holds the message (`hprm_node::tap`) is one receiver more
    // than the loan was made for: the object still travels as it is, and
    // once every receiver released it nothing is left pinned.
    let store = StoreDaemon::start("16M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);
    let mut loan = encoder.loan(Dtype::U8, &[MIB], 1).unwrap();
    loan.as_mut_slice::<u8>().unwrap().fill(5);
    let id = loan.id();
    let sent = loan.finish().unwrap();
    let bytes = encoder.encode(&sent, 2).unwrap();
    assert_eq!(admin.list().unwrap().len(), 1, "no copy");
    for _ in 0..2 {
        let got: Buffer = decoder.decode(&bytes).unwrap();
        assert_eq!(got.object_id(), Some(id));
        assert!(got.bytes().iter().all(|b| *b == 5));
    }
    drop(sent);
    assert_clean(&admin);
}

#[test]
fn unfinished_loan_is_aborted() {
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let loan = encoder(&store).loan(Dtype::U8, &[MIB], 2).unwrap();
    drop(loan);
    eventually(Duration::from_secs(5), "the abort lands", || admin.list().unwrap().is_empty());
}

#[test]
fn received_buffer_sent_on_travels_by_reference_and_repeats_are_sent_once() {
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);
    let bytes = encoder.encode(&frame(MIB), 1).unwrap();
    let got: Frame = decoder.decode(&bytes).unwrap();
    let original = got.pixels.object_id().unwrap();

    // A relay sends the received buffer on to two receivers, twice in one
    // message: the same object, two more deliveries, no copy.
    let relayed = encoder.encode(&(got.pixels.clone(), got.pixels.clone()), 2).unwrap();
    drop(got);
    // The redeliver and the release are one-way, on the relay's connection:
    // another connection sees them land a moment later.
    eventually(Duration::from_secs(5), "the redeliver and the release land", || {
        admin.list().unwrap().first().is_some_and(|o| o.pending_deliveries == 2 && o.ref_count == 0)
    });
    let objects = admin.list().unwrap();
    assert_eq!(objects.len(), 1, "no copy: {objects:?}");
    for _ in 0..2 {
        let (a, b): (Buffer, Buffer) = decoder.decode(&relayed).unwrap();
        assert_eq!((a.object_id(), b.object_id()), (Some(original), Some(original)));
        assert_eq!(a, frame(MIB).pixels);
    }
    assert_clean(&admin);
}

#[test]
fn oob_vec_fields_go_out_of_band() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Cloud {
        #[serde(with = "oob")]
        xyz: Vec<f32>,
        #[serde(with = "oob")]
        intensity: Vec<u16>,
        frame_id: String,
    }
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);
    let sent = Cloud {
        xyz: (0..3 * 50_000).map(|i| i as f32 / 3.0).collect(),
        intensity: vec![7; 100],
        frame_id: "lidar".into(),
    };
    let bytes = encoder.encode(&sent, 1).unwrap();
    assert!(bytes.len() < 400, "{}", bytes.len());
    assert_eq!(admin.list().unwrap()[0].placement.data_size, 3 * 50_000 * 4);
    let got: Cloud = decoder.decode(&bytes).unwrap();
    assert_eq!(got, sent);
    // The Vec is a copy: the object was released during decode.
    assert_clean(&admin);
}

#[test]
fn no_store_configured_is_a_clear_error() {
    let e = Encoder::new(StoreLink::none(), DEFAULT_THRESHOLD).encode(&frame(MIB), 1).unwrap_err();
    assert!(matches!(e, PayloadError::NoStoreForBuffer { nbytes: MIB, .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("no store configured") && text.contains("hprm-store --socket"), "{text}");

    // A configured socket nobody serves names the socket.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("absent.sock");
    let e = Encoder::new(StoreLink::new(Some(socket.clone())), DEFAULT_THRESHOLD).encode(&frame(MIB), 1).unwrap_err();
    assert!(matches!(e, PayloadError::Connect { .. }), "{e:?}");
    assert!(e.to_string().contains(&socket.display().to_string()), "{e}");
}

#[test]
fn full_store_is_reported_and_a_failed_encode_leaves_nothing() {
    let store = StoreDaemon::start("4M");
    let admin = store.client();
    let encoder = encoder(&store);
    // The first buffer fits, the second cannot: the whole encode fails,
    // and the first buffer's object is aborted, not left pinned.
    let e = encoder.encode(&(Buffer::from_vec(vec![1; MIB]), Buffer::from_vec(vec![2; 8 * MIB])), 1).unwrap_err();
    assert!(matches!(e, PayloadError::StoreFull { nbytes, .. } if nbytes == 8 * MIB as u64), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("--memory") && text.contains("no room"), "{text}");
    eventually(Duration::from_secs(5), "the aborted object is gone", || admin.list().unwrap().is_empty());
    assert_clean(&admin);
}

#[test]
fn missing_object_times_out_with_a_reason() {
    let store = StoreDaemon::start("16M");
    let descriptor = hprm_node::payload::BufferDescriptor {
        dtype: Dtype::U8,
        shape: vec![MIB],
        strides: None,
        nbytes: MIB as u64,
        location: hprm_node::payload::Location::Store(ObjectId::random()),
    };
    let data = descriptor.encode().unwrap();
    let mut bytes = vec![0xc7, data.len() as u8, 1]; // ext 8, type 1
    bytes.extend_from_slice(&data);
    let decoder = Decoder::new(StoreLink::new(Some(store.socket.clone())), Duration::from_millis(100));
    let e = decoder.decode::<Buffer>(&bytes).unwrap_err();
    assert!(matches!(&e, PayloadError::NotInStore { missing, .. } if missing.len() == 1), "{e:?}");
    assert!(e.to_string().contains("delivery TTL"), "{e}");
}

#[test]
fn threads_share_one_codec() {
    let store = StoreDaemon::start("128M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let (encoder, decoder) = (encoder.clone(), decoder.clone());
            s.spawn(move || {
                for i in 0..20u8 {
                    let sent = (t, i, Buffer::from_vec(vec![t ^ i; 100_000 + usize::from(i)]));
                    let bytes = encoder.encode(&sent, 1).unwrap();
                    let got: (u8, u8, Buffer) = decoder.decode(&bytes).unwrap();
                    assert_eq!(got, sent);
                    assert!(got.2.is_shared());
                }
            });
        }
    });
    assert_clean(&admin);
}

/// The payload of one `|u1` buffer of `nbytes` in store object `id`, its
/// location naming data offset `at` in arena `arena` (wire format 1.1),
/// written by hand as a forger would.
fn placed_payload(id: ObjectId, nbytes: usize, at: u64, arena: u64) -> Vec<u8> {
    let descriptor = hprm_node::payload::BufferDescriptor {
        dtype: Dtype::U8,
        shape: vec![nbytes],
        strides: None,
        nbytes: nbytes as u64,
        location: hprm_node::payload::Location::Store(id),
    };
    let mut data = descriptor.encode().unwrap();
    // ... 0x91 (array of 1), bin 8 of 20: the id; make it [id, offset, arena].
    let array_at = data.len() - 23;
    assert_eq!(&data[array_at..array_at + 3], &[0x91, 0xc4, 20]);
    data[array_at] = 0x93;
    data.push(0xcf);
    data.extend_from_slice(&at.to_be_bytes());
    data.push(0xcf);
    data.extend_from_slice(&arena.to_be_bytes());
    let mut bytes = vec![0xc7, u8::try_from(data.len()).unwrap(), 1]; // ext 8, type 1
    bytes.extend_from_slice(&data);
    bytes
}

#[test]
fn descriptors_say_where_the_object_lies() {
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let (encoder, decoder) = codec(&store);
    let bytes = encoder.encode(&frame(MIB), 1).unwrap();
    let at = admin.list().unwrap()[0].placement.data_offset;
    let mut location = vec![0x93, 0xc4, 20];
    location.extend_from_slice(admin.list().unwrap()[0].id.as_bytes());
    let tail = {
        let mut t = location.clone();
        // The offset, in its smallest encoding.
        t.extend_from_slice(&match at {
            0..=0x7f => vec![at as u8],
            0x80..=0xff => vec![0xcc, at as u8],
            0x100..=0xffff => [vec![0xcd], (at as u16).to_be_bytes().to_vec()].concat(),
            0x1_0000..=0xffff_ffff => [vec![0xce], (at as u32).to_be_bytes().to_vec()].concat(),
            _ => [vec![0xcf], at.to_be_bytes().to_vec()].concat(),
        });
        t
    };
    assert!(bytes.windows(tail.len()).any(|w| w == tail), "the location is [id, offset, arena]");
    assert!(
        bytes.ends_with(&[&[0xcf][..], &admin.arena_id().to_be_bytes()].concat())
            || admin.arena_id() < u64::from(u32::MAX),
        "the arena id ends it"
    );
    let got: Frame = decoder.decode(&bytes).unwrap();
    assert_eq!(got, frame(MIB));
    drop(got);
    assert_clean(&admin);
}

#[test]
fn a_placed_buffer_is_mapped_without_waiting_for_a_get() {
    let store = StoreDaemon::start("16M");
    let sender = store.client();
    let id = ObjectId::random();
    let mut object = sender
        .create_with(id, MIB as u64, b"", &hprm_store::CreateOptions { deliveries: 1, ..Default::default() })
        .unwrap();
    object.data_mut().fill(0x5a);
    let at = object.placement().data_offset;
    // Not sealed yet: a get would wait for the seal (here: up to 10 s); the
    // claim does not make the receiver wait at all.
    let decoder = Decoder::new(StoreLink::new(Some(store.socket.clone())), Duration::from_secs(10));
    let started = std::time::Instant::now();
    let got: Buffer = decoder.decode(&placed_payload(id, MIB, at, sender.arena_id())).unwrap();
    assert!(started.elapsed() < Duration::from_secs(2), "decode waited {:?}", started.elapsed());
    assert!(got.is_shared() && got.object_id() == Some(id));
    assert!(got.bytes().iter().all(|&b| b == 0x5a));
    object.seal().unwrap();
    drop(got);
    // The claim completed on the seal, and the release (which overtook it)
    // settled the delivery.
    assert_clean(&sender);
}

#[test]
fn a_forged_offset_is_a_clear_error_not_a_read_out_of_bounds() {
    let store = StoreDaemon::start("4M");
    let admin = store.client();
    let decoder = decoder(&store);
    let arena = admin.arena_size();
    for at in [arena - 64, arena + (1 << 30), u64::MAX - 63, 100] {
        let e = decoder.decode::<Buffer>(&placed_payload(ObjectId::random(), MIB, at, admin.arena_id())).unwrap_err();
        assert!(matches!(e, PayloadError::Store { op: "claim", .. }), "{e:?}");
        assert!(e.to_string().contains("forged"), "{e}");
    }
    let s = admin.stats().unwrap();
    assert_eq!((s.objects_referenced, s.waiting_gets), (0, 0));
}

#[test]
fn echoes_at_the_threshold_leave_nothing_behind() {
    let store = StoreDaemon::start("64M");
    let admin = store.client();
    let (source_enc, source_dec) = codec(&store);
    let receivers: Vec<(Encoder, Decoder)> = (0..2).map(|_| codec(&store)).collect();
    for round in 0..200usize {
        // 65,536 bytes: at the threshold, out-of-band (a reserved block, no
        // create round trip); and 1 MiB.
        let len = if round % 2 == 0 { 64 << 10 } else { MIB };
        let sent = Buffer::from_vec(vec![round as u8; len]);
        let bytes = source_enc.encode(&sent, 2).unwrap();
        let mut replies = Vec::new();
        for (enc, dec) in &receivers {
            let got: Buffer = dec.decode(&bytes).unwrap();
            assert!(got.is_shared());
            replies.push(enc.encode(&got, 1).unwrap());
        }
        for reply in replies {
            let back: Buffer = source_dec.decode(&reply).unwrap();
            assert_eq!(back, sent);
        }
    }
    assert_clean(&admin);
    let s = admin.stats().unwrap();
    assert_eq!(s.bytes_in_use, s.bytes_reserved, "only reserved blocks remain: {s:?}");
}

#[test]
fn an_offset_into_another_stores_arena_is_not_mapped() {
    // Two stores: a message whose objects lie in the first reaches a
    // receiver of the second. Their offsets mean nothing there: the
    // receiver looks the objects up by id (and does not find them) instead
    // of reading whatever its own arena holds at those offsets.
    let (one, two) = (StoreDaemon::start("16M"), StoreDaemon::start("16M"));
    assert_ne!(one.client().arena_id(), two.client().arena_id());
    let bytes = encoder(&one).encode(&frame(MIB), 1).unwrap();
    let elsewhere = Decoder::new(StoreLink::new(Some(two.socket.clone())), Duration::from_millis(100));
    let e = elsewhere.decode::<Frame>(&bytes).unwrap_err();
    assert!(matches!(&e, PayloadError::NotInStore { missing, .. } if missing.len() == 1), "{e:?}");
    let got: Frame = decoder(&one).decode(&bytes).unwrap();
    assert_eq!(got, frame(MIB));
    drop(got);
    assert_clean(&one.client());
}

#[test]
fn a_value_from_a_host_its_link_lost_fails_at_once_naming_the_host() {
    // Host a's store holds the value; host b's receiver waits for it in
    // its own store, where it never comes. Once b's link lists host a as
    // lost (with its store's arena), the wait ends with an error naming
    // the host, well before the get timeout.
    let (a, b) = (StoreDaemon::start("16M"), StoreDaemon::start("16M"));
    let bytes = encoder(&a).encode(&frame(MIB), 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lost = hprm_node::hosts::LostHosts::of_link(&dir.path().join("link.sock"));
    lost.write([("a", a.client().arena_id())]).unwrap();
    let timeout = Duration::from_secs(30);
    let receiver = Decoder::new(StoreLink::new(Some(b.socket.clone())), timeout).watching_hosts(Some(lost.clone()));
    let started = std::time::Instant::now();
    let e = receiver.decode::<Frame>(&bytes).unwrap_err();
    assert!(matches!(&e, PayloadError::HostLost { host, missing, .. } if host == "a" && missing.len() == 1), "{e:?}");
    assert!(e.to_string().contains("host a is lost"), "{e}");
    assert!(started.elapsed() < timeout, "the receiver waited out its get timeout");
    // A host that is not lost is waited for as before (here: until the timeout).
    lost.write([]).unwrap();
    let patient =
        Decoder::new(StoreLink::new(Some(b.socket.clone())), Duration::from_millis(200)).watching_hosts(Some(lost));
    assert!(matches!(patient.decode::<Frame>(&bytes).unwrap_err(), PayloadError::NotInStore { .. }));
    drop(decoder(&a).decode::<Frame>(&bytes).unwrap());
    assert_clean(&a.client());
}
