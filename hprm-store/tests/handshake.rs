//! A peer on the socket path that is not a daemon of ours: a valid Hello
//! with more descriptors than a daemon sends. The client must refuse it
//! clearly and keep none of them (each would be an open file, mapped or
//! not, for the client's lifetime). Alone in its test binary: it counts
//! the process's open descriptors, which other tests' threads would move.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::sync::mpsc;

use hprm_store::protocol::frame::VERSION;
use hprm_store::protocol::handshake::HandshakeError;
use hprm_store::protocol::message::{Encoder, Hello, Reply};
use hprm_store::{Error, StoreClient};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}

#[test]
fn extra_descriptors_in_a_greeting_are_refused_and_none_leaks() {
    const ARENA: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.sock");
    let listener = UnixListener::bind(&path).unwrap();
    // Five files, the first an arena of the announced size, opened before
    // the count and kept open by the peer until after it.
    let files: Vec<OwnedFd> = (0..5)
        .map(|_| {
            let f = tempfile::tempfile().unwrap();
            f.set_len(ARENA).unwrap();
            OwnedFd::from(f)
        })
        .collect();
    let raws: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
    let (sent_tx, sent_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let before = open_fds();
    let peer = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let hello = Hello {
            version: VERSION,
            arena_size: ARENA,
            client_id: 1,
            populate: false,
            arena_id: 7,
            outbox_size: 0,
            spill_size: 0,
        };
        let frame = Encoder::default().reply(0, &Reply::Hello(hello)).to_vec();
        let cmsg = [ControlMessage::ScmRights(&raws)];
        let sent = sendmsg::<()>(stream.as_raw_fd(), &[IoSlice::new(&frame)], &cmsg, MsgFlags::empty(), None).unwrap();
        assert_eq!(sent, frame.len());
        // Both the accepted socket and the listener closed before the
        // client counts: the count then differs only by what it kept.
        drop(stream);
        drop(listener);
        sent_tx.send(()).unwrap();
        done_rx.recv().unwrap();
        drop(files);
    });
    let result = StoreClient::connect(&path);
    sent_rx.recv().unwrap();
    let refused_as_such = matches!(&result, Err(Error::Handshake { source: HandshakeError::TooManyDescriptors, .. }));
    let outcome = match &result {
        Ok(_) => "accepted".to_string(),
        Err(e) => e.to_string(),
    };
    drop(result);
    // The listener (closed by the peer) was counted before: one fewer.
    let after = open_fds();
    done_tx.send(()).unwrap();
    peer.join().unwrap();
    assert_eq!(after, before - 1, "descriptors left in the client after the greeting ({outcome})");
    assert!(refused_as_such, "a greeting with 5 descriptors must be refused as such, not: {outcome}");
}
