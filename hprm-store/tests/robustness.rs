//! Hostile frames, crashing clients and concurrent client processes: the
//! daemon stays up, other clients do not notice, and no memory is lost.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, pattern, worker, Daemon, Worker};
use hprm_store::outbox::OutboxWriter;
use hprm_store::protocol::frame::{parse_header, HEADER_LEN, MAX_REPLY_BODY, VERSION};
use hprm_store::protocol::message::{decode_reply, Encoder, Reply, Request};
use hprm_store::{ErrorCode, ObjectId};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[test]
#[ignore = "entry point of worker processes, run by the other tests"]
fn child() {
    let Some((role, store, args)) = worker() else { return };
    match role.as_str() {
        // Takes a reference on `id`, leaves a 4 MiB object unsealed, then
        // waits to be killed.
        "hold-and-hang" => {
            let id: ObjectId = args[0].parse().unwrap();
            let held = store.get_one(id, Duration::from_secs(10)).unwrap();
            let mut writing = store.create(ObjectId::random(), 4 << 20, b"").unwrap();
            writing.data_mut()[0] = 1;
            println!("HOLDING");
            std::thread::sleep(Duration::from_secs(600));
            drop((held, writing));
        }
        // Writes `count` objects with ids (worker, i) and reads every other
        // worker's objects, checking every byte.
        "exchange" => {
            let me: u8 = args[0].parse().unwrap();
            let workers: u8 = args[1].parse().unwrap();
            let count: u16 = args[2].parse().unwrap();
            let id_of = |w: u8, i: u16| {
                let mut b = [0u8; 20];
                b[0] = w;
                b[1..3].copy_from_slice(&i.to_le_bytes());
                b[3] = 0xA5;
                ObjectId::from_bytes(b)
            };
            let len_of = |w: u8, i: u16| 1000 + (usize::from(w) * 7919 + usize::from(i) * 104_729) % (256 << 10);
            for i in 0..count {
                let id = id_of(me, i);
                let mut obj = store.create(id, len_of(me, i) as u64, &[me]).unwrap();
                obj.data_mut().copy_from_slice(&pattern(id.as_bytes(), len_of(me, i)));
                obj.seal().unwrap();
            }
            for w in (0..workers).filter(|w| *w != me) {
                for i in 0..count {
                    let id = id_of(w, i);
                    // Waits for objects other workers have not written yet.
                    let got = store.get_one(id, Duration::from_secs(60)).unwrap();
                    assert_eq!(got.metadata(), &[w]);
                    assert!(got.data() == &pattern(id.as_bytes(), len_of(w, i))[..], "object {id} corrupted");
                }
            }
            println!("EXCHANGED");
        }
        other => panic!("unknown role {other}"),
    }
}

/// Connects at the socket level and consumes the greeting.
fn raw_connection(d: &Daemon) -> UnixStream {
    let s = UnixStream::connect(&d.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _greeting = hprm_store::protocol::handshake::recv_hello(&s).unwrap();
    s
}

/// A raw connection and its outbox, mapped as the client library does.
fn raw_connection_with_outbox(d: &Daemon) -> (UnixStream, OutboxWriter) {
    let s = UnixStream::connect(&d.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let greeting = hprm_store::protocol::handshake::recv_hello(&s).unwrap();
    let outbox =
        OutboxWriter::map(greeting.outbox.expect("the daemon hands over an outbox"), greeting.hello.outbox_size)
            .unwrap();
    (s, outbox)
}

/// Everything the daemon sends until it closes the connection.
///
/// A reset counts as the close: the daemon may close a connection it
/// refuses while bytes the client sent after the offending ones are still
/// unread (a Flush behind a junk outbox entry that another connection's
/// request made the daemon read first), and Linux then reports
/// ECONNRESET, but only after every byte the daemon sent has been read.
fn replies_until_close(mut s: &UnixStream) -> Vec<Reply> {
    let mut bytes = Vec::new();
    match s.read_to_end(&mut bytes) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the daemon closes the connection (no read timeout): {e}"),
    }
    let mut replies = Vec::new();
    let mut rest = &bytes[..];
    while rest.len() >= HEADER_LEN {
        let len = parse_header(rest[..HEADER_LEN].try_into().unwrap(), MAX_REPLY_BODY).unwrap();
        replies.push(decode_reply(&rest[HEADER_LEN..HEADER_LEN + len]).unwrap().1);
        rest = &rest[HEADER_LEN + len..];
    }
    replies
}

fn header(len: u32, version: u16) -> Vec<u8> {
    let mut h = len.to_le_bytes().to_vec();
    h.extend_from_slice(&version.to_le_bytes());
    h.extend_from_slice(&[0, 0]);
    h
}

fn error_code(replies: &[Reply]) -> Option<ErrorCode> {
    match replies.last() {
        Some(Reply::Error(e)) => Some(e.code),
        _ => None,
    }
}

/// A client doing put/get/release cycles on its own connection until told to
/// stop; counts its cycles and fails the test on any error.
fn bystander(d: &Daemon) -> (Arc<AtomicBool>, std::thread::JoinHandle<u64>) {
    let store = d.client();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::spawn(move || {
        let mut cycles = 0;
        while !flag.load(Ordering::Relaxed) {
            let id = ObjectId::random();
            let data = pattern(id.as_bytes(), 70_000);
            store.put(id, &data, b"").expect("bystander put");
            assert!(store.get_one(id, Duration::from_secs(5)).expect("bystander get").data() == &data[..]);
            store.delete(id).expect("bystander delete");
            cycles += 1;
        }
        cycles
    });
    (stop, handle)
}

/// Ends the bystander, which must never have seen an error, and checks that
/// the daemon survived and cleaned up after every hostile connection.
fn all_clear(d: &mut Daemon, (stop, watcher): (Arc<AtomicBool>, std::thread::JoinHandle<u64>)) {
    stop.store(true, Ordering::Relaxed);
    let cycles = watcher.join().expect("the bystander never saw an error");
    assert!(cycles > 0);
    assert!(d.alive(), "the daemon survived:\n{}", d.log());
    let store = d.light_client();
    eventually(Duration::from_secs(5), "every hostile connection is cleaned up", || {
        let s = store.stats().unwrap();
        s.clients == 1 && s.bytes_in_use == 0
    });
    assert!(!d.log().contains("panicked"), "{}", d.log());
}

#[test]
fn garbage_and_truncated_frames_close_only_their_connection() {
    let mut d = Daemon::start("64M", &["--frame-timeout", "300ms"]);
    let watching = bystander(&d);
    let mut rng = SmallRng::seed_from_u64(0xBAD_F00D);

    // Random bytes.
    for _ in 0..40 {
        let s = raw_connection(&d);
        let len = rng.gen_range(1..4096);
        let junk: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let _ = (&s).write_all(&junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let replies = replies_until_close(&s);
        assert!(replies.len() <= 1, "at most one error reply before closing");
    }
    // A valid header in front of random bytes: an undecodable request.
    for _ in 0..40 {
        let s = raw_connection(&d);
        let len = rng.gen_range(0..2048u32);
        let mut frame = header(len, VERSION);
        frame.extend((0..len).map(|_| rng.gen::<u8>()));
        (&s).write_all(&frame).unwrap();
        assert_eq!(error_code(&replies_until_close(&s)), Some(ErrorCode::Malformed));
    }
    // Oversized, wrong version.
    let s = raw_connection(&d);
    (&s).write_all(&header(u32::MAX, VERSION)).unwrap();
    assert_eq!(error_code(&replies_until_close(&s)), Some(ErrorCode::FrameTooLarge));
    let s = raw_connection(&d);
    (&s).write_all(&header(16, VERSION + 1)).unwrap();
    assert_eq!(error_code(&replies_until_close(&s)), Some(ErrorCode::UnsupportedVersion));
    // Truncated: half a frame, then the sender goes away...
    let mut enc = Encoder::default();
    let whole = enc.request(1, &Request::Stats).to_vec();
    let s = raw_connection(&d);
    (&s).write_all(&whole[..whole.len() / 2]).unwrap();
    drop(s);
    // ...or stalls (the daemon gives up after --frame-timeout).
    let s = raw_connection(&d);
    (&s).write_all(&whole[..whole.len() - 1]).unwrap();
    assert_eq!(error_code(&replies_until_close(&s)), Some(ErrorCode::Malformed));
    // A well-formed request after all that still works on a new connection.
    let s = raw_connection(&d);
    (&s).write_all(&whole).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reply = vec![0u8; 4096];
    let n = (&s).read(&mut reply).unwrap();
    assert!(n > HEADER_LEN);
    drop(s);

    all_clear(&mut d, watching);
}

#[test]
fn garbage_in_an_outbox_closes_only_its_connection() {
    let mut d = Daemon::start("64M", &[]);
    let watching = bystander(&d);
    let mut rng = SmallRng::seed_from_u64(0x0B0C);
    let mut enc = Encoder::default();
    let flush = enc.request(0, &Request::Flush).to_vec();
    // Random bytes as an entry, then a Flush so the daemon reads them now.
    for _ in 0..20 {
        let (s, mut outbox) = raw_connection_with_outbox(&d);
        let len = rng.gen_range(8..2048);
        let junk: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        assert!(outbox.push(0, &junk));
        (&s).write_all(&flush).unwrap();
        let replies = replies_until_close(&s);
        assert_eq!(error_code(&replies), Some(ErrorCode::Malformed), "{replies:?}");
    }
    // A request that wants a reply has no place in the outbox.
    let (s, mut outbox) = raw_connection_with_outbox(&d);
    assert!(outbox.push(0, enc.request(7, &Request::Stats)));
    (&s).write_all(&flush).unwrap();
    let replies = replies_until_close(&s);
    let Some(Reply::Error(e)) = replies.last() else { panic!("{replies:?}") };
    assert!(e.message.contains("only requests without a reply"), "{}", e.message);
    // A well-formed post the daemon refuses is reported like one sent over
    // the socket (seq 0), before the reply to the next request, and the
    // connection stays open.
    let (s, mut outbox) = raw_connection_with_outbox(&d);
    let unknown = ObjectId::random();
    assert!(outbox.push(0, enc.request(0, &Request::Release { id: unknown })));
    (&s).write_all(enc.request(9, &Request::Stats)).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let replies = replies_until_close(&s);
    assert!(
        matches!(&replies[..], [Reply::Error(e), Reply::Stats(_)] if e.message.contains(&unknown.to_string())),
        "{replies:?}"
    );

    all_clear(&mut d, watching);
}

#[test]
fn kill_9_of_a_client_returns_its_memory() {
    let d = Daemon::start("64M", &[]);
    let store = d.light_client();
    let shared = ObjectId::random();
    store.put(shared, &[5u8; 1 << 20], b"").unwrap();
    let before = store.stats().unwrap();
    let mut victim = Worker::spawn("hold-and-hang", &d.socket, &[shared.to_string()]);
    victim.expect_line("HOLDING");
    let during = store.stats().unwrap();
    assert_eq!(during.objects_referenced, 1);
    assert_eq!(during.objects_created, 1);
    assert!(during.bytes_in_use >= before.bytes_in_use + (4 << 20));
    victim.kill9();
    eventually(Duration::from_secs(10), "the daemon notices the dead client", || {
        store.stats().unwrap().clients == before.clients
    });
    let after = store.stats().unwrap();
    assert_eq!(after.bytes_in_use, before.bytes_in_use, "the unsealed object was aborted");
    assert_eq!((after.objects_referenced, after.objects_created), (0, 0));
    assert!(store.contains(shared).unwrap(), "the sealed object it held survives, unreferenced");
    assert_eq!(store.evict(u64::MAX).unwrap().objects, 1, "and is evictable again");
}

#[test]
fn concurrent_client_processes_exchange_objects_intact() {
    let d = Daemon::start("256M", &[]);
    const WORKERS: u8 = 4;
    let workers: Vec<Worker> = (0..WORKERS)
        .map(|w| Worker::spawn("exchange", &d.socket, &[w.to_string(), WORKERS.to_string(), "100".into()]))
        .collect();
    for mut w in workers {
        w.expect_line("EXCHANGED");
        let (status, out) = w.finish();
        assert!(status.success(), "worker failed: {out}");
    }
    let s = d.light_client().stats().unwrap();
    assert_eq!(s.objects_sealed, u64::from(WORKERS) * 100);
    assert_eq!(s.objects_referenced, 0, "every reference was released");
}

#[test]
fn when_the_daemon_dies_calls_fail_with_disconnected() {
    let mut d = Daemon::start("16M", &[]);
    let store = d.client();
    let id = ObjectId::random();
    store.put(id, b"before", b"").unwrap();
    let held = store.get_one(id, Duration::from_secs(1)).unwrap();
    let writing = store.create(ObjectId::random(), 100, b"").unwrap();
    d.signal(nix::sys::signal::Signal::SIGKILL);
    d.wait_exit(Duration::from_secs(10));
    // The mapping outlives the daemon: what was got stays readable.
    assert_eq!(held.data(), b"before");
    let err = store.stats().unwrap_err();
    assert!(matches!(err, hprm_store::Error::Disconnected { op: "stats", .. }), "{err}");
    assert!(err.to_string().contains("reconnect"), "{err}");
    assert!(matches!(writing.seal(), Err(hprm_store::Error::Disconnected { .. })));
    assert!(matches!(store.contains(id), Err(hprm_store::Error::Disconnected { .. })));
    drop(held); // release on a dead connection: nothing to do, no panic
}

#[test]
fn a_watched_connection_knows_at_once_that_the_daemon_died() {
    let d = Daemon::start("16M", &[]);
    let store = d.light_client();
    let (tx, rx) = std::sync::mpsc::channel();
    store.watch_close(move |why| tx.send(why.to_string()).unwrap()).unwrap();
    // Requests and replies do not wake the watch (it would report them).
    store.put(ObjectId::random(), b"small", b"").unwrap();
    store.sync().unwrap();
    assert!(rx.try_recv().is_err() && store.broken().is_none());
    d.signal(nix::sys::signal::Signal::SIGKILL);
    // A bound that only a broken watch reaches; it is told long before.
    let why = rx.recv_timeout(Duration::from_secs(30)).expect("the watch reports the daemon's death");
    assert_eq!(why, hprm_store::client::DAEMON_CLOSED);
    assert_eq!(store.broken().as_deref(), Some(hprm_store::client::DAEMON_CLOSED));
    // A small object needs no round trip: unwatched, its create and seal
    // would go into the dead daemon's outbox unnoticed.
    let err = store.put(ObjectId::random(), b"after", b"").unwrap_err();
    assert!(matches!(err, hprm_store::Error::Disconnected { .. }), "{err}");
    assert!(err.to_string().contains("exited or was killed"), "{err}");
}

#[test]
fn a_watch_lets_its_connection_go_with_the_client() {
    let d = Daemon::start("16M", &[]);
    let observer = d.light_client();
    let watched = d.light_client();
    watched.watch_close(|why| panic!("the daemon is alive, yet the watch said: {why}")).unwrap();
    // The readiness probe of `Daemon::start` may not have been seen leaving yet.
    eventually(Duration::from_secs(10), "the daemon counts the two clients", || observer.stats().unwrap().clients == 2);
    drop(watched);
    // The watch's duplicate of the socket closes too: the daemon sees the client leave.
    eventually(Duration::from_secs(10), "the daemon sees the watched client leave", || {
        observer.stats().unwrap().clients == 1
    });
}

#[test]
fn a_client_cannot_pile_up_waiting_requests() {
    let d = Daemon::start("16M", &[]);
    let (stop, watcher) = bystander(&d);
    let s = raw_connection(&d);
    let mut enc = Encoder::default();
    let limit = 1024u64;
    let mut frames = Vec::new();
    for seq in 1..=limit + 1 {
        let ids = [ObjectId::random()];
        frames.extend_from_slice(
            enc.request(seq, &Request::Get { ids: std::borrow::Cow::Borrowed(&ids), timeout: None }),
        );
    }
    (&s).write_all(&frames).unwrap();
    // The one over the limit is refused at once; the others keep waiting.
    let mut header = [0u8; HEADER_LEN];
    (&s).read_exact(&mut header).unwrap();
    let mut body = vec![0u8; parse_header(&header, MAX_REPLY_BODY).unwrap()];
    (&s).read_exact(&mut body).unwrap();
    match decode_reply(&body).unwrap() {
        (seq, Reply::Error(e)) => {
            assert_eq!(seq, limit + 1);
            assert_eq!(e.code, ErrorCode::InvalidArgument);
            assert!(e.message.contains("waiting"), "{}", e.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let store = d.light_client();
    assert_eq!(store.stats().unwrap().waiting_gets, limit);
    drop(s);
    eventually(Duration::from_secs(5), "the waits go with their connection", || {
        store.stats().unwrap().waiting_gets == 0
    });
    stop.store(true, Ordering::Relaxed);
    assert!(watcher.join().expect("the bystander never saw an error") > 0);
}

/// A client that leaves between requests with a reply still unread resets
/// its connection (Linux reports ECONNRESET to the daemon's next read, not
/// an end of file). That is a client leaving, as at the end of every
/// program whose federates exit with replies or notifications unread: the
/// daemon logs it at debug level, with no warning. (A client gone in the
/// middle of a frame still warns: see the truncated frames above.)
#[test]
fn a_client_leaving_with_a_reply_unread_is_not_a_warning() {
    use std::os::fd::AsRawFd;
    let d = Daemon::start("16M", &[]);
    let s = raw_connection(&d);
    (&s).write_all(Encoder::default().request(1, &Request::Stats)).unwrap();
    // Leave once the reply has arrived, unread: that makes the close a reset.
    let mut fd = libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd of a socket this test owns, for the call's duration.
    let ready = unsafe { libc::poll(&mut fd, 1, 10_000) };
    assert_eq!(ready, 1, "the daemon replies to Stats");
    drop(s);
    eventually(Duration::from_secs(10), "the daemon sees the client leave", || d.log().contains("client disconnected"));
    let log = d.log();
    assert!(
        log.contains("client left between requests") && log.contains("Connection reset by peer"),
        "the close was a reset:\n{log}"
    );
    assert!(!log.contains("WARN"), "a client leaving is no warning:\n{log}");
}
