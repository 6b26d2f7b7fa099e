//! Delivery settling against a real daemon and a real client process: a
//! message is freed once every delivery settled, and not before a claim
//! posted ahead of the last release has been read, even when the daemon
//! reads the claimer's outbox after the release (the echo race); and a
//! release that comes before the delivery it settles is counted settles
//! it when it is, so nothing stays pinned for the delivery TTL.

mod common;

use std::time::Duration;

use common::{next_command, pattern, placed, worker, Daemon, Worker};
use hprm_store::{CreateOptions, ErrorCode, ObjectId, Placement, StoreClient};

const CLAIM_TIMEOUT: Duration = Duration::from_secs(2);
const MIB: usize = 1 << 20;

#[test]
#[ignore = "entry point of worker processes, run by the other tests"]
fn child() {
    let Some((role, store, args)) = worker() else { return };
    match role.as_str() {
        // The forwarder: told where a message lies and to how many it goes
        // on (1: an echo back to its sender), claims it and sends it on
        // (redeliver), then, told to, checks what it holds and lets go.
        "forward" => {
            let (id, p) = placed(&args);
            let receivers: u32 = args[3].parse().expect("a count of receivers");
            println!("CLIENT {}", store.client_id());
            assert_eq!(next_command(), "forward");
            let held = store.claim(id, p, CLAIM_TIMEOUT).unwrap();
            held.redeliver(receivers).unwrap();
            println!("FORWARDED");
            assert_eq!(next_command(), "check");
            // A frame of its own: the daemon reads its outbox now.
            let synced = store.sync();
            let intact = held.data() == &pattern(id.as_bytes(), p.data_size as usize)[..];
            println!(
                "RESULT claim {} bytes {}",
                if synced.is_ok() { "ok" } else { "failed" },
                if intact { "intact" } else { "overwritten" }
            );
            drop(held);
            store.sync().unwrap();
            println!("DONE");
        }
        other => panic!("unknown role {other}"),
    }
}

/// A 1 MiB message with one delivery, sealed by `sender`, taken by a
/// forwarder process that sends it on to `receivers` (a redeliver) and
/// whose outbox the daemon reads only on the forwarder's own frames until
/// `hold` is emptied (the daemon's `--debug-hold-outboxes` hook).
fn held_forwarder(
    d: &Daemon,
    hold: &std::path::Path,
    sender: &StoreClient,
    receivers: u32,
) -> (ObjectId, Placement, Worker) {
    let id = ObjectId::random();
    let mut obj =
        sender.create_with(id, MIB as u64, b"", &CreateOptions { deliveries: 1, ..Default::default() }).unwrap();
    obj.data_mut().copy_from_slice(&pattern(id.as_bytes(), MIB));
    let p = obj.placement();
    obj.seal().unwrap();
    let args = [id.to_string(), p.data_offset.to_string(), p.data_size.to_string(), receivers.to_string()];
    let mut forward = Worker::spawn("forward", &d.socket, &args);
    let client = forward.expect_line("CLIENT ");
    std::fs::write(hold, client.trim_start_matches("CLIENT ")).unwrap();
    forward.send("forward");
    forward.expect_line("FORWARDED");
    (id, p, forward)
}

#[test]
fn an_echo_whose_claim_is_read_after_the_last_release_keeps_its_message() {
    // The daemon reads the echoer's outbox only on the echoer's own frames
    // (the test hook), so the sender's claim and release of the echo are
    // read before the echoer's claim and redeliver, which were posted
    // first: the release settles the message's only counted delivery while
    // the echoer still holds it. Another client then needs the room.
    let hold = tempfile::NamedTempFile::new().unwrap();
    let hold_path = hold.path().to_str().unwrap().to_owned();
    let d = Daemon::start("4M", &["--debug-hold-outboxes", &hold_path]);
    let sender = d.light_client();
    let (id, p, mut echo) = held_forwarder(&d, hold.path(), &sender, 1);

    // The echo comes back: claimed, read, released; then a frame of the
    // sender's, so the daemon reads every outbox it may.
    let back = sender.claim(id, p, CLAIM_TIMEOUT).unwrap();
    assert!(back.data() == &pattern(id.as_bytes(), MIB)[..]);
    drop(back);
    sender.sync().unwrap();
    let s = sender.stats().unwrap();
    assert_eq!((s.pending_deliveries, s.objects_referenced), (0, 0), "the sender's release settled the count: {s:?}");

    // Room for 3.5 MiB only if the message goes.
    let pressure = d.light_client();
    let squeezed = pressure.create(ObjectId::random(), (3 * MIB + MIB / 2) as u64, b"");
    let squeezed = match squeezed {
        Ok(mut big) => {
            big.data_mut().fill(0xEE);
            big.seal().unwrap();
            "created (the message was evicted)".to_owned()
        }
        Err(e) => format!("{:?}", e.code()),
    };

    // The echoer's next frame lets its outbox be read.
    std::fs::write(hold.path(), "").unwrap();
    echo.send("check");
    assert_eq!(echo.expect_line("RESULT "), "RESULT claim ok bytes intact", "the echoer lost its message");
    echo.expect_line("DONE");
    assert_eq!(squeezed, format!("{:?}", Some(ErrorCode::OutOfMemory)), "the message was not pinned");
    let (status, _) = echo.finish();
    assert!(status.success());
    // Every delivery (the echoer's, the sender's) settled: freed.
    let s = sender.stats().unwrap();
    assert_eq!((s.objects_sealed, s.objects_referenced, s.bytes_in_use), (0, 0, 0), "{s:?}");
}

#[test]
fn releases_read_before_the_redeliver_that_counts_them_settle_it_and_nothing_stays_pinned() {
    // A forwarder claims a message and sends it on to two receivers
    // (redeliver 2); the daemon reads the forwarder's outbox only on its
    // own frames (the test hook), so the receivers' claims and releases
    // are read first: the first release settles the forwarder's delivery,
    // the second finds none pending. The TTL is long: only settling can
    // free the message within this test.
    let hold = tempfile::NamedTempFile::new().unwrap();
    let hold_path = hold.path().to_str().unwrap().to_owned();
    let d = Daemon::start("4M", &["--debug-hold-outboxes", &hold_path, "--delivery-ttl", "10m"]);
    let sender = d.light_client();
    let (id, p, mut forward) = held_forwarder(&d, hold.path(), &sender, 2);

    // The two receivers (their descriptors came another way) read it and
    // let go; each sync is a frame, so its release has been read.
    for receiver in 1..=2 {
        let store = d.light_client();
        let got = store.claim(id, p, CLAIM_TIMEOUT).unwrap();
        assert!(got.data() == &pattern(id.as_bytes(), MIB)[..], "receiver {receiver} read it changed");
        drop(got);
        store.sync().unwrap();
    }
    let s = sender.stats().unwrap();
    assert_eq!((s.pending_deliveries, s.objects_referenced, s.objects_sealed), (0, 0, 1), "{s:?}");
    // It stays until the forwarder's claim and redeliver are read: the
    // room it takes cannot be had.
    let pressure = d.light_client();
    let squeezed = pressure.create(ObjectId::random(), (3 * MIB + MIB / 2) as u64, b"").map(drop).map_err(|e| e.code());
    assert_eq!(squeezed, Err(Some(ErrorCode::OutOfMemory)), "the message was not kept");

    // The forwarder's next frame lets its outbox be read: its redeliver
    // counts two deliveries, one of them settled already.
    std::fs::write(hold.path(), "").unwrap();
    forward.send("check");
    assert_eq!(forward.expect_line("RESULT "), "RESULT claim ok bytes intact", "the forwarder lost its message");
    forward.expect_line("DONE");
    let (status, _) = forward.finish();
    assert!(status.success());
    // Both receivers released before their deliveries were counted, and
    // the forwarder let go: every delivery settled, the message freed now,
    // not left pending for the TTL.
    let s = sender.stats().unwrap();
    assert_eq!((s.objects_sealed, s.pending_deliveries, s.bytes_in_use, s.expired_deliveries), (0, 0, 0, 0), "{s:?}");
    let mut big = pressure.create(ObjectId::random(), (3 * MIB + MIB / 2) as u64, b"").expect("its room is free");
    big.data_mut().fill(0xEE);
    big.seal().unwrap();
}

#[test]
fn an_echo_read_at_home_before_the_links_announce_leaves_nothing_pinned() {
    // A home object sent to another host: the link (a client here) holds
    // it for that host's copy, the one delivery its sender counted. The
    // echo's two receivers on this host read it (their descriptors came
    // through the RTI) before the echoing host's announce reaches the
    // link; then the announce, as the link applies it (a confirmed
    // redeliver); then the other host frees its copy and the link lets go.
    let d = Daemon::start("4M", &["--delivery-ttl", "10m"]);
    let sender = d.light_client();
    let link = d.light_client();
    let id = ObjectId::random();
    let mut obj =
        sender.create_with(id, MIB as u64, b"", &CreateOptions { deliveries: 1, ..Default::default() }).unwrap();
    obj.data_mut().copy_from_slice(&pattern(id.as_bytes(), MIB));
    obj.seal().unwrap();
    let lent = link.get_one(id, CLAIM_TIMEOUT).unwrap();
    for receiver in 1..=2 {
        let store = d.light_client();
        let got = store.get_one(id, CLAIM_TIMEOUT).unwrap();
        assert!(got.data() == &pattern(id.as_bytes(), MIB)[..], "receiver {receiver} read it changed");
        drop(got);
        store.sync().unwrap();
    }
    link.redeliver_confirmed(id, 2).unwrap();
    let info = sender.list().unwrap().into_iter().find(|o| o.id == id).expect("held by the link");
    assert_eq!((info.ref_count, info.pending_deliveries), (1, 1), "one of the echo's receivers settled early");
    drop(lent);
    link.sync().unwrap();
    let s = sender.stats().unwrap();
    assert_eq!((s.objects_sealed, s.pending_deliveries, s.bytes_in_use), (0, 0, 0), "{s:?}");
}
