//! Claims: a receiver maps an object straight from the placement a message
//! told it, with a one-way claim instead of a blocking get, against a real
//! daemon and real client processes. The view is there at once, the
//! reference is the receiver's (released on drop, or by the daemon when the
//! receiver dies), forged placements never read out of bounds, and nothing
//! leaks.

mod common;

use std::time::Duration;

use common::{eventually, pattern, placed, worker, Daemon, Worker};
use hprm_store::protocol::message::Placement;
use hprm_store::{CreateOptions, Error, ErrorCode, ObjectId};

const CLAIM_TIMEOUT: Duration = Duration::from_secs(2);

#[test]
#[ignore = "entry point of worker processes, run by the other tests"]
fn child() {
    let Some((role, store, args)) = worker() else { return };
    match role.as_str() {
        // Claims the object `id` at data offset `offset`, `size` bytes,
        // checks its bytes, then waits to be killed.
        "claim-and-hang" => {
            let (id, p) = placed(&args);
            let size = p.data_size;
            let held = store.claim(id, p, CLAIM_TIMEOUT).unwrap();
            assert!(held.data() == &pattern(id.as_bytes(), size as usize)[..]);
            store.sync().unwrap();
            println!("CLAIMED");
            std::thread::sleep(Duration::from_secs(600));
            drop(held);
        }
        other => panic!("unknown role {other}"),
    }
}

/// Creates, fills and seals an object for `deliveries` receivers; returns
/// its id and placement.
fn publish(store: &hprm_store::StoreClient, size: usize, deliveries: u32) -> (ObjectId, Placement) {
    let id = ObjectId::random();
    let mut obj = store.create_with(id, size as u64, b"", &CreateOptions { deliveries, ..Default::default() }).unwrap();
    obj.data_mut().copy_from_slice(&pattern(id.as_bytes(), size));
    let placement = obj.placement();
    obj.seal().unwrap();
    (id, placement)
}

#[test]
fn a_claim_maps_without_a_get_and_its_release_settles_the_delivery() {
    let d = Daemon::start("16M", &[]);
    let sender = d.light_client();
    let (a, b) = (d.light_client(), d.light_client());
    let (id, p) = publish(&sender, 1 << 20, 2);
    let va = a.claim(id, p, CLAIM_TIMEOUT).unwrap();
    let vb = b.claim(id, p, CLAIM_TIMEOUT).unwrap();
    assert!(va.data() == &pattern(id.as_bytes(), 1 << 20)[..] && vb.data() == va.data());
    a.sync().unwrap();
    b.sync().unwrap();
    let s = sender.stats().unwrap();
    assert_eq!(
        (s.objects_referenced, s.pending_deliveries),
        (1, 2),
        "both claims hold a reference, no delivery settled yet"
    );
    let listed = sender.list().unwrap();
    assert_eq!(listed[0].ref_count, 2);
    drop(va);
    a.sync().unwrap();
    assert_eq!(sender.stats().unwrap().pending_deliveries, 1, "a release settles one delivery");
    drop(vb);
    b.sync().unwrap();
    let s = sender.stats().unwrap();
    assert_eq!(
        (s.objects_referenced, s.pending_deliveries, s.objects_sealed, s.bytes_in_use),
        (0, 0, 0, 0),
        "settled and released: freed"
    );
    assert!(!sender.contains(id).unwrap());
}

#[test]
fn a_claim_that_overtakes_the_seal_waits_for_it_even_when_released_first() {
    let d = Daemon::start("16M", &[]);
    let sender = d.light_client();
    let receiver = d.light_client();
    let id = ObjectId::random();
    let mut obj = sender.create_with(id, 100_000, b"", &CreateOptions { deliveries: 1, ..Default::default() }).unwrap();
    obj.data_mut().fill(7);
    let p = obj.placement();
    // The seal is still "in flight": the claim waits for it, and the
    // release overtakes the claim.
    let view = receiver.claim(id, p, Duration::from_secs(10)).unwrap();
    assert_eq!(view.data()[99_999], 7);
    drop(view);
    receiver.sync().unwrap();
    assert_eq!(sender.stats().unwrap().waiting_gets, 1, "the claim waits for the seal");
    obj.seal().unwrap();
    eventually(Duration::from_secs(5), "the claim completes and its early release settles", || {
        let s = sender.stats().unwrap();
        (s.waiting_gets, s.objects_referenced, s.pending_deliveries) == (0, 0, 0)
    });
    receiver.sync().unwrap();
}

#[test]
fn an_echo_of_a_claimed_object_waits_for_the_seal_with_its_claim() {
    let d = Daemon::start("16M", &[]);
    let (sender, echoer, source) = (d.light_client(), d.light_client(), d.light_client());
    // 65,536 bytes: a reserved block, published one-way; the daemon learns
    // of the object only when the publish lands.
    let id = ObjectId::random();
    let mut obj = sender.create_with(id, 65_536, b"", &CreateOptions { deliveries: 1, ..Default::default() }).unwrap();
    obj.data_mut().fill(9);
    let p = obj.placement();
    // The echoer claims it and sends it on before the publish lands.
    let view = echoer.claim(id, p, Duration::from_secs(10)).unwrap();
    echoer.redeliver(id, 1).unwrap();
    drop(view);
    echoer.sync().unwrap();
    obj.seal().unwrap();
    let back = source.claim(id, p, CLAIM_TIMEOUT).unwrap();
    assert!(back.data().iter().all(|&b| b == 9));
    drop(back);
    source.sync().unwrap();
    eventually(Duration::from_secs(5), "every delivery settled", || {
        let s = sender.stats().unwrap();
        (s.objects_referenced, s.pending_deliveries, s.waiting_gets) == (0, 0, 0)
    });
    echoer.sync().unwrap();
}

#[test]
fn seal_and_send_counts_its_receivers_before_claims_waiting_for_the_seal_complete() {
    let d = Daemon::start("16M", &[]);
    let producer = d.light_client();
    // Both sizes: one created in the daemon, one in a reserved block
    // (published one-way with all its deliveries).
    for size in [200_000u64, 65_536] {
        let id = ObjectId::random();
        // Created with the producer's own delivery only: its receivers are
        // not known until it is sent.
        let mut obj =
            producer.create_with(id, size, b"", &CreateOptions { deliveries: 1, ..Default::default() }).unwrap();
        obj.data_mut().fill(7);
        let p = obj.placement();
        // Two receivers claim it before it is sealed (their claims wait) and
        // let go at once, which they may well do before the producer's claim.
        let receivers: Vec<_> = (0..2).map(|_| d.light_client()).collect();
        let threads: Vec<_> = receivers
            .iter()
            .map(|r| {
                let r = r.clone();
                std::thread::spawn(move || {
                    let view = r.claim(id, p, Duration::from_secs(10)).unwrap();
                    assert!(view.data().iter().all(|&b| b == 7));
                    drop(view);
                    r.sync().unwrap();
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        let mine = obj.seal_and_send(2).unwrap();
        for t in threads {
            t.join().unwrap();
        }
        assert!(mine.data().iter().all(|&b| b == 7), "the producer still reads what it sent");
        drop(mine);
        producer.sync().unwrap();
        // Nothing lost to the race: no delivery left pinned until the TTL.
        eventually(Duration::from_secs(5), "every delivery settled", || {
            let s = producer.stats().unwrap();
            (s.objects_referenced, s.pending_deliveries, s.waiting_gets) == (0, 0, 0)
        });
    }
}

#[test]
fn forged_placements_are_clear_errors_never_out_of_bounds_reads() {
    let d = Daemon::start("4M", &[]);
    let sender = d.light_client();
    let receiver = d.light_client();
    let arena = receiver.arena_size();
    let (id, p) = publish(&sender, 70_000, 1);
    // Sealed now, so a refused claim is answered in order (one waiting for
    // a seal would be refused whenever the seal comes).
    sender.sync().unwrap();
    let forged = [
        Placement {
            data_offset: arena - 64,
            data_size: 70_000,
            metadata_offset: arena - 64 + 70_000,
            metadata_size: 0,
        },
        Placement { data_offset: u64::MAX - 63, data_size: 128, metadata_offset: 64, metadata_size: 0 },
        Placement {
            data_offset: p.data_offset + 1,
            data_size: 10,
            metadata_offset: p.data_offset + 11,
            metadata_size: 0,
        },
        Placement { data_offset: 0, data_size: 10, metadata_offset: 0, metadata_size: 0 },
    ];
    for f in forged {
        match receiver.claim(id, f, CLAIM_TIMEOUT) {
            Err(Error::InvalidArgument { op: "claim", detail }) => assert!(detail.contains("forged"), "{detail}"),
            other => panic!("{f:?}: expected a refused claim, got {other:?}"),
        }
    }
    // Inside the arena but not where the object is: the daemon refuses the
    // claim (reported late) and holds no reference for it.
    let elsewhere = Placement {
        data_offset: p.data_offset + 128 * 1024,
        data_size: 1000,
        metadata_offset: p.data_offset + 128 * 1024 + 1000,
        metadata_size: 0,
    };
    drop(receiver.claim(id, elsewhere, CLAIM_TIMEOUT).unwrap());
    match receiver.sync() {
        Err(Error::Earlier { code: ErrorCode::InvalidArgument, message }) => {
            assert!(message.contains("forged"), "{message}")
        }
        other => panic!("expected the refused claim reported, got {other:?}"),
    }
    // An object that never comes: the claim times out, reported late. Its
    // wait starts when the daemon reads the claim from the outbox, which
    // the next frame makes it do.
    let ghost = ObjectId::random();
    drop(receiver.claim(ghost, p, Duration::from_millis(50)).unwrap());
    receiver.sync().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    match receiver.sync() {
        Err(Error::Earlier { code: ErrorCode::Timeout, .. }) => {}
        other => panic!("expected the unsealed claim reported, got {other:?}"),
    }
    let s = sender.stats().unwrap();
    assert_eq!(
        (s.objects_referenced, s.waiting_gets, s.pending_deliveries),
        (0, 0, 1),
        "nothing held for the refused claims"
    );
    assert!(d.log().find("panicked").is_none());
}

#[test]
fn a_crashed_receivers_claimed_reference_is_released() {
    let d = Daemon::start("16M", &[]);
    let sender = d.light_client();
    let (id, p) = publish(&sender, 300_000, 1);
    let mut victim = Worker::spawn(
        "claim-and-hang",
        &d.socket,
        &[id.to_string(), p.data_offset.to_string(), p.data_size.to_string()],
    );
    victim.expect_line("CLAIMED");
    let s = sender.stats().unwrap();
    assert_eq!((s.objects_referenced, s.pending_deliveries), (1, 1));
    victim.kill9();
    eventually(Duration::from_secs(10), "the daemon drops the dead receiver's reference", || {
        let s = sender.stats().unwrap();
        (s.objects_referenced, s.pending_deliveries) == (0, 0)
    });
    assert_eq!(sender.stats().unwrap().objects_sealed, 0, "its delivery settled by the crash, the message is freed");
}

#[test]
fn seal_and_keep_holds_the_creators_reference_without_a_round_trip() {
    let d = Daemon::start("16M", &[]);
    let store = d.light_client();
    for size in [100u64, 65_536, 1 << 20] {
        let id = ObjectId::random();
        let mut obj = store.create_with(id, size, b"", &CreateOptions { deliveries: 1, ..Default::default() }).unwrap();
        obj.data_mut().fill(3);
        let kept = obj.seal_and_keep().unwrap();
        assert_eq!(kept.data().len() as u64, size);
        assert!(kept.data().iter().all(|&b| b == 3));
        store.sync().unwrap();
        let s = store.stats().unwrap();
        assert_eq!((s.objects_referenced, s.pending_deliveries), (1, 1), "size {size}");
        drop(kept);
        store.sync().unwrap();
        let s = store.stats().unwrap();
        assert_eq!((s.objects_referenced, s.pending_deliveries), (0, 0), "size {size}");
    }
}

#[test]
fn many_claimed_messages_leave_nothing_behind() {
    let d = Daemon::start("64M", &[]);
    let sender = d.light_client();
    let receivers = [d.light_client(), d.light_client()];
    for i in 0..600usize {
        // Sizes around the pool's largest class and well over it.
        let size = [65_536, 64_000, 200_000, 1 << 20][i % 4];
        let (id, p) = publish(&sender, size, 2);
        for r in &receivers {
            let v = r.claim(id, p, CLAIM_TIMEOUT).unwrap();
            assert_eq!(v.data()[size - 1], pattern(id.as_bytes(), size)[size - 1]);
        }
    }
    for r in &receivers {
        r.sync().unwrap();
    }
    sender.sync().unwrap();
    let s = sender.stats().unwrap();
    assert_eq!((s.objects_referenced, s.pending_deliveries, s.waiting_gets, s.expired_deliveries), (0, 0, 0, 0));
    sender.evict(u64::MAX).unwrap();
    let s = sender.stats().unwrap();
    assert_eq!((s.objects_sealed, s.objects_created), (0, 0), "no object left");
    assert_eq!(s.bytes_in_use, s.bytes_reserved, "only the sender's reserved blocks remain");
    drop(sender);
    drop(receivers);
    let s = d.light_client().stats().unwrap();
    eventually(Duration::from_secs(5), "the reserved blocks return with their client", || {
        d.light_client().stats().unwrap().bytes_in_use == 0
    });
    let _ = s;
}
