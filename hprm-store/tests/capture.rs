//! `HPRM_FUZZ_CAPTURE`: the daemon saves the request frames each client
//! sent (over its socket and through its outbox) and its greetings, for the
//! fuzzers' seeds; without the variable it writes nothing.

mod common;

use std::path::Path;
use std::time::Duration;

use common::Daemon;
use hprm_store::protocol::frame::{parse_header, HEADER_LEN, MAX_REQUEST_BODY};
use hprm_store::protocol::message::{decode_reply, decode_request, Reply};
use hprm_store::ObjectId;

/// A client's session with a daemon started in a fresh working directory
/// with `HPRM_FUZZ_CAPTURE` set to `capture` (or unset), then stopped
/// (SIGTERM); returns the working directory.
fn captured_run(capture: Option<&str>) -> tempfile::TempDir {
    let cwd = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_with("16M", &[], |cmd| {
        cmd.current_dir(cwd.path()).env_remove("HPRM_FUZZ_CAPTURE");
        if let Some(dir) = capture {
            cmd.env("HPRM_FUZZ_CAPTURE", cwd.path().join(dir));
        }
    });
    let store = d.light_client();
    // A small object goes into a reserved block and is published; a large
    // one is created over the socket and sealed through the outbox.
    for size in [1000, 2 << 20] {
        let id = ObjectId::random();
        store.put(id, &vec![7; size], b"meta").unwrap();
        assert_eq!(store.get_one(id, Duration::from_secs(5)).unwrap().data().len(), size);
        assert!(store.contains(id).unwrap());
    }
    assert_eq!(store.list().unwrap().len(), 2);
    store.stats().unwrap();
    drop(store);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(d.wait_exit(Duration::from_secs(10)).success(), "{}", d.log());
    cwd
}

fn files(dir: &Path) -> Vec<Vec<u8>> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("no {}: {e}", dir.display()));
    entries.map(|e| std::fs::read(e.unwrap().path()).unwrap()).collect()
}

/// The requests of a stream of frames, which must hold only whole frames.
fn requests(mut stream: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    while !stream.is_empty() {
        let header: &[u8; HEADER_LEN] = stream[..HEADER_LEN].try_into().unwrap();
        let len = HEADER_LEN + parse_header(header, MAX_REQUEST_BODY).unwrap();
        let (_, req) = decode_request(&stream[HEADER_LEN..len]).unwrap();
        names.push(req.name().to_string());
        stream = &stream[len..];
    }
    names
}

#[test]
fn with_hprm_fuzz_capture_requests_and_greetings_are_saved_as_whole_frames() {
    let cwd = captured_run(Some("captured"));
    let streams = files(&cwd.path().join("captured/store_frames"));
    let mut sent: Vec<String> = streams.iter().flat_map(|s| requests(s)).collect();
    sent.sort();
    for op in ["reserve", "publish", "create", "seal", "get", "contains", "list", "stats"] {
        assert!(sent.iter().any(|s| s == op), "no {op} in the captured requests {sent:?}");
    }
    assert_eq!(streams.len(), 2, "one stream of frames sent over the socket, one through the outbox");
    let greetings = files(&cwd.path().join("captured/store_handshake"));
    assert_eq!(greetings.len(), 1, "the one client's greeting");
    match decode_reply(&greetings[0][HEADER_LEN..]).unwrap() {
        (0, Reply::Hello(h)) => assert!(h.arena_size > 0),
        other => panic!("not a greeting: {other:?}"),
    }
}

#[test]
fn without_hprm_fuzz_capture_nothing_is_saved() {
    let cwd = captured_run(None);
    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "the daemon wrote {left:?}");
}
