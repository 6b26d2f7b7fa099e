//! The outbox (one-way requests through shared memory) against the real
//! daemon: posts take effect in the order they were sent whichever way each
//! went, and a post that someone waits for is read at once.

mod common;

use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::{eventually, pattern, Daemon};
use hprm_store::outbox::OutboxWriter;
use hprm_store::{ConnectOptions, CreateOptions, ObjectId, StoreClient};

/// Connects like the client library, keeping the outbox to look at its
/// wake word.
fn watch_outbox(d: &Daemon) -> (UnixStream, OutboxWriter) {
    let s = UnixStream::connect(&d.socket).unwrap();
    let greeting = hprm_store::protocol::handshake::recv_hello(&s).unwrap();
    (s, OutboxWriter::map(greeting.outbox.expect("an outbox"), greeting.hello.outbox_size).unwrap())
}

#[test]
fn a_waiting_get_sets_the_wake_word_and_the_creators_seal_completes_it() {
    // A delivery TTL of an hour: the expiry tick (which also reads the
    // outboxes) comes once a second, far behind the get's deadline below.
    let d = Daemon::start("16M", &["--delivery-ttl", "60m"]);
    let (_s, watched) = watch_outbox(&d);
    let creator = d.light_client();
    assert!(!watched.wake_wanted(), "nobody waits yet");
    for size in [1000usize, 300_000] {
        let id = ObjectId::random();
        let mut obj = creator.create(id, size as u64, b"").unwrap();
        obj.data_mut().copy_from_slice(&pattern(id.as_bytes(), size));
        let getter = d.light_client();
        let waiter = std::thread::spawn(move || {
            getter.get(&[id], Duration::from_secs(60)).map(|o| o[0].data() == &pattern(id.as_bytes(), size)[..])
        });
        eventually(Duration::from_secs(10), "the daemon asks every outbox for a flush while the get waits", || {
            watched.wake_wanted()
        });
        // Posted to the creator's outbox; the wake word makes it flush.
        obj.seal().unwrap();
        assert!(waiter.join().unwrap().unwrap(), "the waiter got the object's bytes");
        eventually(Duration::from_secs(10), "the wake word is cleared once nobody waits", || !watched.wake_wanted());
    }
}

#[test]
fn posts_and_socket_frames_take_effect_in_the_order_sent() {
    // The smallest outbox fills after a few dozen posts, so the rest of
    // each burst goes over the socket, interleaved with what is read from
    // the outbox.
    let d = Daemon::start("64M", &["--outbox", "4KiB"]);
    let store = d.light_client();
    let socket_only = StoreClient::connect_with(
        &d.socket,
        &ConnectOptions { socket_only: true, populate: Some(false), ..Default::default() },
    )
    .unwrap();
    let mut ids = Vec::new();
    for round in 0..20 {
        let mut placements = Vec::new();
        for i in 0..40usize {
            // Small objects: published one-way (in a reserved block).
            let id = ObjectId::random();
            let size = 100 + i * 10;
            let mut obj = store
                .create_with(id, size as u64, b"m", &CreateOptions { deliveries: 1, ..Default::default() })
                .unwrap();
            obj.data_mut().copy_from_slice(&pattern(id.as_bytes(), size));
            placements.push((id, obj.placement()));
            obj.seal().unwrap();
        }
        // Claims and their releases (on drop), all one-way, right behind
        // the publishes they depend on.
        for &(id, p) in &placements {
            let got = store.claim(id, p, Duration::from_secs(10)).unwrap();
            assert_eq!(got.data(), &pattern(id.as_bytes(), got.data().len())[..]);
        }
        if round % 5 == 0 {
            // A round trip in the middle of it all.
            store.sync().unwrap();
        }
        ids.extend(placements.iter().map(|(id, _)| *id));
    }
    store.sync().expect("no post was refused: each came after what it depends on");
    // Every message was published, claimed and released, so every one
    // was freed; a release lost or applied before its claim would have
    // left one referenced or awaited.
    let s = socket_only.stats().unwrap();
    assert_eq!((s.objects_sealed, s.objects_referenced, s.pending_deliveries), (0, 0, 0), "{s:?}");
    for id in ids.iter().step_by(37) {
        assert!(!socket_only.contains(*id).unwrap());
    }
}

#[test]
fn threads_sharing_a_connection_post_in_a_consistent_order() {
    // Four threads on one connection publish, claim and release, each of
    // its own objects, through a small outbox (so pushes and socket
    // fallbacks interleave between threads): every entry must count the
    // socket frames sent before it, whoever sent them.
    let d = Daemon::start("64M", &["--outbox", "4KiB"]);
    let store = d.light_client();
    let per_thread = 300usize;
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let store = store.clone();
            scope.spawn(move || {
                for i in 0..per_thread {
                    let id = ObjectId::random();
                    let size = 64 + (i % 50) * 16;
                    let mut obj = store
                        .create_with(id, size as u64, &[t], &CreateOptions { deliveries: 1, ..Default::default() })
                        .unwrap();
                    obj.data_mut().copy_from_slice(&pattern(id.as_bytes(), size));
                    let p = obj.placement();
                    obj.seal().unwrap();
                    let got = store.claim(id, p, Duration::from_secs(10)).unwrap();
                    assert_eq!(got.data(), &pattern(id.as_bytes(), size)[..]);
                    if i % 97 == 0 {
                        store.sync().unwrap();
                    }
                }
            });
        }
    });
    store.sync().expect("no post was refused");
    // All claimed and released: all freed (see above).
    let s = d.light_client().stats().unwrap();
    assert_eq!((s.objects_sealed, s.objects_referenced, s.pending_deliveries), (0, 0, 0), "{s:?}");
}
