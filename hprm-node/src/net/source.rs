//! Connections that bring messages to a federate (from its upstream peers
//! and from the RTI), read by the scheduler itself while it polls.
//!
//! A message read by a reader thread costs two thread wake-ups before it
//! is handled (the reader's, then the scheduler's hand-off), where a raw
//! socket ping-pong pays one; on a virtualised 2-CPU machine each costs
//! several microseconds, more than the rest of a small message's trip. So
//! a connection is a [`Source`] shared by two readers:
//!
//! - **The scheduler, while it polls** its inbox (`Inbox::wait`'s spin,
//!   and between tags): it takes whatever each socket has with a read
//!   that does not block. A message that arrives then is read by the very
//!   thread that handles it, with no wake-up at all.
//! - **The connection's reader thread, the rest of the time:** when the
//!   scheduler goes to sleep it hands the sockets over (`Inbox` unparks
//!   the readers), and if it has not polled for [`TAKEOVER`](crate::inbox::TAKEOVER) (a long
//!   reaction, a blocked write) the readers take over by themselves. So
//!   sockets are always drained, and two federates that write to each
//!   other cannot deadlock on full socket buffers.
//!
//! Invariant: a reader thread sleeps in poll(2) on its socket only while
//! the scheduler is not polling; while it polls, the thread is parked
//! apart from the socket, so arrivals do not wake it. Whoever holds
//! `Source::reader` reads; the other skips (the scheduler) or waits for
//! it (the thread). Either way messages reach the scheduler through the
//! same [`Receiving`] calls, in the order they were read.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::thread::JoinHandle;

use hprm_rti::frames::Frame;
use hprm_rti::wire::Message;

use hprm_rti::tag::Tag;

use crate::ids::{DecodeFn, TriggerId};
use crate::inbox::{Inbox, Incoming, PolledSource, ReaderThread, Undelivered};
use crate::net::socket::{wait_readable, FrameReader, ReadError};
use crate::payload::Decoder;
use crate::sync::atomic::{fence, AtomicBool, Ordering};
use crate::sync::Mutex;

/// Who is at the other end, which decides what its messages mean.
pub(crate) enum Peer {
    /// An upstream federate (decentralized, or a physical connection).
    Federate { fed: u16, name: String },
    /// The RTI.
    Rti { addr: String },
}

/// One inbound connection (see the module documentation).
pub(crate) struct Source {
    /// The socket, for poll(2) without taking `reader`. It stays open as
    /// long as `reader`, which owns it, and so as long as this value.
    fd: RawFd,
    reader: Mutex<FrameReader>,
    peer: Peer,
    /// `peer` in messages: "federate NAME", "the RTI at ADDR".
    label: String,
    rx: Arc<Receiving>,
    /// The connection ended (closed, broken, or the peer resigned) and its
    /// end was reported; nobody reads it again.
    ended: AtomicBool,
    thread: ReaderThread,
}

impl Source {
    /// Registers the connection with the scheduler's inbox and starts its
    /// reader thread.
    pub fn start(reader: FrameReader, peer: Peer, rx: Arc<Receiving>) -> std::io::Result<JoinHandle<()>> {
        let (name, label) = match &peer {
            Peer::Federate { name, .. } => (format!("hprm-peer-{name}"), format!("federate {name}")),
            Peer::Rti { addr } => ("hprm-rti-reader".to_string(), format!("the RTI at {addr}")),
        };
        let source = Arc::new(Source {
            fd: reader.raw_fd(),
            reader: Mutex::new(reader),
            peer,
            label,
            rx,
            ended: AtomicBool::new(false),
            thread: ReaderThread::default(),
        });
        source.rx.inbox.add_source(&source);
        let s = source.clone();
        std::thread::Builder::new().name(name).spawn(move || s.serve())
    }

    fn serve(&self) {
        self.thread.register();
        while !self.ended.load(Ordering::Acquire) {
            if self.thread.stay_away(&self.rx.inbox) {
                continue;
            }
            if let Err(e) = wait_readable(self.fd) {
                let mut reader = self.reader.lock();
                return self.end(&mut reader, Ending::Broke(ReadError::Io(e)));
            }
            let mut reader = self.reader.lock();
            self.pump(&mut reader);
        }
    }

    /// Reads and handles messages until the socket has no more now.
    /// Called with `reader` held, which orders everything it hands on.
    fn pump(&self, reader: &mut FrameReader) {
        loop {
            // Checked under the lock, before each message: the other reader
            // may have seen the end, or `close` may be waiting.
            if self.ended.load(Ordering::Acquire) {
                return;
            }
            match reader.try_next() {
                Ok(Some(frame)) => {
                    if let Err(ending) = self.handle(frame) {
                        return self.end(reader, ending);
                    }
                }
                Ok(None) => return,
                Err(ReadError::Closed) => return self.end(reader, Ending::Closed),
                Err(e) => return self.end(reader, Ending::Broke(e)),
            }
        }
    }

    /// Hands one message on, unless it ends the connection.
    fn handle(&self, frame: Frame<'_>) -> Result<(), Ending> {
        let rx = &self.rx;
        let msg = match (frame, &self.peer) {
            // Peers send P2P_TAGGED_MESSAGE, the RTI relays TAGGED_MESSAGE.
            (Frame::Tagged(m), peer) if m.p2p == matches!(peer, Peer::Federate { .. }) => {
                rx.deliver(m.port, m.tag, m.payload, &self.label);
                return Ok(());
            }
            (Frame::Tagged(m), _) => {
                tracing::warn!(p2p = m.p2p, port = m.port, tag = %m.tag, "unexpected kind of tagged message from {}; ignored", self.label);
                return Ok(());
            }
            (Frame::Other(msg), _) => msg,
        };
        match &self.peer {
            Peer::Federate { .. } => match msg {
                Message::PortAbsent { port, tag, .. } => rx.absent(port, tag),
                Message::Resign => return Err(Ending::Closed),
                other => tracing::warn!(?other, "unexpected peer message from {}; ignored", self.label),
            },
            Peer::Rti { .. } => match msg {
                Message::PortAbsent { port, tag, .. } => rx.absent(port, tag),
                Message::TagAdvanceGrant(t) => {
                    if let Some(tr) = crate::trace::tracer() {
                        tr.grant(t, false);
                    }
                    rx.inbox.push(Incoming::Grant(t))
                }
                Message::ProvisionalTagAdvanceGrant(t) => {
                    if let Some(tr) = crate::trace::tracer() {
                        tr.grant(t, true);
                    }
                    rx.inbox.push(Incoming::ProvisionalGrant(t))
                }
                Message::StopRequest(t) => rx.inbox.push(Incoming::StopRequest(t)),
                Message::StopGranted(t) => rx.inbox.push(Incoming::StopGranted(t)),
                Message::Failed => return Err(Ending::RtiFailed),
                Message::DownstreamNextEventTag(t) => rx.inbox.push(Incoming::DownstreamNext(t)),
                other => tracing::warn!(?other, "unexpected message from {}; ignored", self.label),
            },
        }
        Ok(())
    }

    /// Reports the end of the connection, once. Takes the reader to show
    /// it is held: the end is handed on after every message read before it.
    fn end(&self, _reader: &mut FrameReader, why: Ending) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        match (&self.peer, why) {
            (Peer::Federate { fed, name }, why) => {
                if let Ending::Broke(e) = why {
                    tracing::error!("peer connection from federate {name} broke: {e}");
                }
                self.rx.inbox.push(Incoming::PeerClosed(*fed));
            }
            (Peer::Rti { .. }, Ending::Closed) => {
                self.rx.inbox.push(Incoming::RtiLost("the RTI closed the connection".into()))
            }
            (Peer::Rti { .. }, Ending::RtiFailed) => {
                self.rx.inbox.push(Incoming::RtiLost("the RTI reported a failure and is going away".into()))
            }
            (Peer::Rti { addr }, Ending::Broke(e)) => {
                let why = match &e {
                    ReadError::Io(io) => crate::hosts::rti_io_error(&format!("reading from the RTI at {addr}"), io),
                    _ => e.to_string(),
                };
                self.rx.inbox.push(Incoming::RtiLost(why))
            }
        }
        // A parked reader thread is to see the end and exit.
        self.wake_reader();
    }
}

/// The inbox polls a source through this (see the module documentation).
impl PolledSource for Source {
    /// The scheduler's read: everything the socket has now, unless the
    /// reader thread is at it.
    fn poll(&self) {
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        if let Some(mut reader) = self.reader.try_lock() {
            self.pump(&mut reader);
        }
    }

    /// Tells a parked reader thread to look again (the scheduler stopped
    /// polling).
    fn wake_reader(&self) {
        self.thread.wake();
    }

    /// Stops reading for good (see `Inbox::close_sources`). When it
    /// returns, a message being handled has been handled, and no other
    /// will be: `pump` checks `ended` under `reader` before each message.
    fn close(&self) {
        self.ended.store(true, Ordering::Release);
        // A reader thread asleep in poll(2) wakes to the end of input, sees
        // `ended` and exits. Only the reading half: writes on this socket
        // (the RTI's, whose writer shares it) are not cut short.
        // `fd` is open as long as `self` (see the field).
        let _ = nix::sys::socket::shutdown(self.fd, nix::sys::socket::Shutdown::Read);
        // Pairs with the fence in `ReaderThread::register`: either this
        // sees the reader thread (and unparks it) or the thread sees
        // `ended`. Without it a thread registering now could park, while
        // the scheduler polls, until TAKEOVER ran out (the model
        // `close_wakes_a_reader_thread_parked_while_the_scheduler_polls`).
        fence(Ordering::SeqCst);
        self.wake_reader();
        drop(self.reader.lock());
    }
}

/// A network input of this federate, as messages name it.
pub(crate) struct NetworkInput {
    pub input: TriggerId,
    pub decode: DecodeFn,
    /// "federate.reactor.port" of the sender and of the receiver, for error reports.
    pub sender: String,
    pub receiver: String,
}

/// What a [`Source`]'s readers need to turn payloads into port values.
pub(crate) struct Receiving {
    /// By wire port id (a connection's index in the program, the same in
    /// every process that builds it): the network inputs of this federate.
    pub inputs: Vec<Option<NetworkInput>>,
    pub decoder: Decoder,
    pub inbox: Arc<Inbox>,
    /// Where arrivals are counted, by connection.
    pub board: Arc<crate::status::Board>,
}

impl Receiving {
    /// Decodes a tagged message and queues it for the scheduler. A payload
    /// that cannot be decoded is reported with its sender and port, and
    /// queued as an error (the scheduler counts it and treats the input as
    /// absent); the federate goes on.
    pub fn deliver(&self, port: u16, tag: Tag, payload: &[u8], peer: &str) {
        let Some(Some(n)) = self.inputs.get(usize::from(port)) else {
            tracing::error!(port, %tag, "{peer} sent a message for connection {port}, which does not end at this federate; dropped (do all federates run the same program?)");
            return;
        };
        let taken = crate::payload::taken_bytes();
        let decoded = (n.decode)(payload, &self.decoder);
        if let Some(c) = self.board.connection(usize::from(port)) {
            c.arrived(payload.len(), crate::payload::taken_bytes() - taken);
        }
        let value = decoded.map_err(|e| {
            if e.is_store_lost() {
                Undelivered::StoreLost
            } else {
                Undelivered::Undecodable(format!(
                    "a message from {} to {} at {tag} could not be decoded: {e}",
                    n.sender, n.receiver
                ))
            }
        });
        self.inbox.push(Incoming::Message { port: n.input, tag, value });
    }

    pub fn absent(&self, port: u16, tag: Tag) {
        if let Some(Some(n)) = self.inputs.get(usize::from(port)) {
            self.inbox.push(Incoming::Absent { port: n.input, tag });
        }
    }
}

/// Why a connection ended.
enum Ending {
    /// A clean end of stream, or the peer resigned.
    Closed,
    /// The RTI sent FAILED.
    RtiFailed,
    Broke(ReadError),
}

/// Models of a connection's end (loom, `scripts/loom.sh`): the real
/// [`Source`] on a socket pair, its `ended` flag, reader lock and reader
/// thread's hand-over under every interleaving and reordering (no read
/// blocks: the other end has closed, or the reader thread only parks).
/// Each was seen to fail with a mistake put in on purpose and taken out
/// again (named at each).
#[cfg(all(test, loom))]
mod source_loom {
    use std::collections::VecDeque;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    use super::*;
    use crate::net::socket::{FrameWriter, Stream};
    use crate::payload::StoreLink;
    use crate::sync::thread;

    /// An RTI connection with `grants` grants waiting to be read, and its
    /// other end (dropped: the end of the connection waits too).
    fn source(grants: i64) -> (Arc<Inbox>, Arc<Source>, FrameWriter) {
        let inbox = Arc::new(Inbox::new(Duration::ZERO));
        let rx = Arc::new(Receiving {
            inputs: Vec::new(),
            decoder: Decoder::new(StoreLink::new(None), Duration::from_secs(1)),
            inbox: inbox.clone(),
            board: Arc::default(),
        });
        let (ours, theirs) = UnixStream::pair().expect("a socket pair");
        let mut writer = FrameWriter::new(Stream::Unix(theirs));
        for t in 0..grants {
            writer.queue(&Message::TagAdvanceGrant(Tag::new(t, 0))).expect("queued");
        }
        writer.flush().expect("written");
        let reader = FrameReader::new(Stream::Unix(ours));
        let source = Arc::new(Source {
            fd: reader.raw_fd(),
            reader: Mutex::new(reader),
            peer: Peer::Rti { addr: "model".into() },
            label: "the RTI at model".into(),
            rx,
            ended: AtomicBool::new(false),
            thread: ReaderThread::default(),
        });
        inbox.add_source(&source);
        (inbox, source, writer)
    }

    /// What was handed on so far, as grant times, and -1 for the end.
    fn handed_on(inbox: &Inbox) -> Vec<i64> {
        let mut out = VecDeque::new();
        inbox.drain(&mut out);
        out.into_iter()
            .map(|i| match i {
                Incoming::Grant(t) => t.time,
                Incoming::RtiLost(_) => -1,
                _ => panic!("neither a grant nor the end"),
            })
            .collect()
    }

    /// `read` (the reader thread's loop, or the scheduler's poll) runs on
    /// two grants and the end while `close` is called: once `close`
    /// returns nothing more is handed on, and what was is in order, with
    /// the end last and once. Caught: `pump` without its check of `ended`
    /// under the lock (a reader that read `ended` before `close` stored
    /// it hands on grants after `close` returned).
    fn nothing_after_close(read: fn(&Source)) {
        loom::model(move || {
            let (inbox, source, writer) = source(2);
            drop(writer);
            let reading = {
                let source = source.clone();
                thread::spawn(move || read(&source))
            };
            source.close();
            let before = handed_on(&inbox);
            reading.join().expect("the reader");
            let after = handed_on(&inbox);
            assert!(after.is_empty(), "handed on after the close: {after:?} (before it: {before:?})");
            assert!([0, 1, -1].starts_with(&before), "out of order: {before:?}");
        });
    }

    #[test]
    fn nothing_is_handed_on_by_the_reader_thread_after_close_returns() {
        nothing_after_close(Source::serve);
    }

    #[test]
    fn nothing_is_handed_on_by_the_scheduler_after_close_returns() {
        nothing_after_close(|s| s.poll());
    }

    /// The scheduler has just polled (an empty socket, its other end
    /// open), so a reader thread that starts parks; `close` wakes it
    /// whenever it registered. Caught: `close` without its SeqCst fence
    /// (the thread registers after `close` looked for it, reads `ended`
    /// as it was, and parks for good, here where time does not pass).
    #[test]
    fn close_wakes_a_reader_thread_parked_while_the_scheduler_polls() {
        loom::model(|| {
            let (inbox, source, writer) = source(0);
            assert!(handed_on(&inbox).is_empty());
            let reading = {
                let source = source.clone();
                thread::spawn(move || source.serve())
            };
            source.close();
            reading.join().expect("the reader thread");
            assert!(handed_on(&inbox).is_empty(), "nothing but the close happened");
            drop(writer);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::inbox::TAKEOVER;
    use crate::net::socket::{FrameWriter, Stream};
    use crate::payload::StoreLink;

    /// A source for RTI messages (grants need no program) on one end of a
    /// socket pair; the other end is returned for writing.
    fn rti_source(spin: Duration) -> (Arc<Inbox>, FrameWriter, JoinHandle<()>) {
        let inbox = Arc::new(Inbox::new(spin));
        let rx = Arc::new(Receiving {
            inputs: Vec::new(),
            decoder: Decoder::new(StoreLink::new(None), Duration::from_secs(1)),
            inbox: inbox.clone(),
            board: Arc::default(),
        });
        let (ours, theirs) = UnixStream::pair().unwrap();
        let thread =
            Source::start(FrameReader::new(Stream::Unix(ours)), Peer::Rti { addr: "test".into() }, rx).unwrap();
        (inbox, FrameWriter::new(Stream::Unix(theirs)), thread)
    }

    fn voluntary_switches(thread: &JoinHandle<()>) -> u64 {
        let me = std::process::id();
        // The kernel knows threads by id; find the reader's by its name.
        let name = thread.thread().name().unwrap().to_string();
        let tasks = std::fs::read_dir(format!("/proc/{me}/task")).unwrap();
        for task in tasks.flatten() {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            if status.lines().next() == Some(&format!("Name:\t{name}")[..]) {
                return status
                    .lines()
                    .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap();
            }
        }
        panic!("no thread named {name}");
    }

    fn grants(items: &mut VecDeque<Incoming>) -> Vec<i64> {
        items.drain(..).map(|i| if let Incoming::Grant(t) = i { t.time } else { panic!("expected a grant") }).collect()
    }

    #[test]
    fn a_polling_scheduler_reads_the_socket_itself_and_the_reader_thread_sleeps() {
        // How often a thread is woken depends on the machine's load too (a
        // descheduled poller leaves the socket to the reader): the property
        // holds if one of three runs shows it; a reader asleep on the socket
        // would be woken by every message in every run.
        let runs: Vec<(u64, Duration)> = (0..3).map(|_| reader_wakeups_for_100_polled_messages()).collect();
        // The parked reader looks every TAKEOVER whatever comes: those
        // wake-ups grow with the run's length (30 ms quiet, longer on a
        // loaded machine), and are not the ones counted here.
        let by_messages =
            |(woken, took): &(u64, Duration)| woken.saturating_sub((took.as_micros() / TAKEOVER.as_micros()) as u64);
        assert!(
            runs.iter().any(|r| by_messages(r) < 50),
            "the reader thread was woken (times, during) {runs:?} for 100 messages"
        );
    }

    /// One run: 100 grants, 300 µs apart, to a scheduler polling its inbox;
    /// how many times the reader thread was woken meanwhile, and how long
    /// that took.
    fn reader_wakeups_for_100_polled_messages() -> (u64, Duration) {
        let (inbox, writer, thread) = rti_source(Duration::from_millis(100));
        let writer = std::thread::spawn(move || {
            let mut writer = writer;
            std::thread::sleep(Duration::from_millis(20));
            for i in 0..100 {
                writer.send(&Message::TagAdvanceGrant(Tag::new(i, 0))).unwrap();
                std::thread::sleep(Duration::from_micros(300));
            }
            writer
        });
        let mut got = Vec::new();
        let mut items = VecDeque::new();
        // The first wait finds the reader thread asleep on the socket.
        inbox.wait(None, &mut items);
        got.extend(grants(&mut items));
        let before = voluntary_switches(&thread);
        let started = Instant::now();
        while got.len() < 100 {
            inbox.wait(None, &mut items);
            got.extend(grants(&mut items));
        }
        let woken = voluntary_switches(&thread) - before;
        let took = started.elapsed();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        drop(writer.join().unwrap());
        thread.join().unwrap();
        inbox.wait(None, &mut items);
        assert!(matches!(items.pop_front(), Some(Incoming::RtiLost(_))));
        (woken, took)
    }

    #[test]
    fn a_busy_scheduler_leaves_the_socket_to_the_reader_thread_and_the_end_comes_last_once() {
        let (inbox, mut writer, thread) = rti_source(Duration::from_millis(1));
        let mut items = VecDeque::new();
        // The scheduler polls once, then runs a long reaction: no polling.
        inbox.drain(&mut items);
        for i in 0..5000 {
            writer.queue(&Message::TagAdvanceGrant(Tag::new(i, 0))).unwrap();
        }
        writer.flush().unwrap();
        drop(writer);
        // The reader thread takes over within TAKEOVER, reads it all and
        // sees the end, though nobody polls.
        let start = Instant::now();
        thread.join().unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        inbox.drain(&mut items);
        let end = items.pop_back();
        assert!(matches!(end, Some(Incoming::RtiLost(ref why)) if why.contains("closed")), "the end is reported last");
        assert_eq!(grants(&mut items), (0..5000).collect::<Vec<_>>());
        inbox.wait(Some(Instant::now() + Duration::from_millis(20)), &mut items);
        assert!(items.is_empty(), "the end is reported once");
    }

    fn exits_soon(thread: &JoinHandle<()>) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        thread.is_finished()
    }

    #[test]
    fn closed_sources_hand_on_nothing_more_and_their_reader_threads_exit() {
        let (inbox, mut writer, thread) = rti_source(Duration::from_millis(1));
        writer.send(&Message::TagAdvanceGrant(Tag::new(1, 0))).unwrap();
        let mut items = VecDeque::new();
        inbox.wait(None, &mut items);
        assert_eq!(grants(&mut items), vec![1]);
        // Past TAKEOVER the reader thread is back asleep in poll(2).
        std::thread::sleep(5 * TAKEOVER);
        inbox.close_sources();
        // The peer neither writes nor closes, yet the reader thread exits.
        assert!(exits_soon(&thread), "the reader thread is still there");
        let _ = writer.send(&Message::TagAdvanceGrant(Tag::new(2, 0)));
        inbox.wait(Some(Instant::now() + Duration::from_millis(20)), &mut items);
        assert!(items.is_empty(), "nothing is handed on after the close, not even the end of the connection");
        // A connection that comes later (a late peer) is closed at once.
        let rx = Arc::new(Receiving {
            inputs: Vec::new(),
            decoder: Decoder::new(StoreLink::new(None), Duration::from_secs(1)),
            inbox: inbox.clone(),
            board: Arc::default(),
        });
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mut late = FrameWriter::new(Stream::Unix(theirs));
        late.send(&Message::TagAdvanceGrant(Tag::new(3, 0))).unwrap();
        let thread =
            Source::start(FrameReader::new(Stream::Unix(ours)), Peer::Rti { addr: "late".into() }, rx).unwrap();
        assert!(exits_soon(&thread), "the late reader thread is still there");
        inbox.wait(Some(Instant::now() + Duration::from_millis(20)), &mut items);
        assert!(items.is_empty(), "a late connection hands on nothing");
    }

    #[test]
    fn scheduler_and_reader_thread_taking_turns_lose_nothing_and_keep_the_order() {
        // A short spin: the scheduler keeps handing the socket over and
        // taking it back while messages stream in.
        let (inbox, writer, thread) = rti_source(Duration::from_micros(30));
        let writer = std::thread::spawn(move || {
            let mut writer = writer;
            for i in 0..20_000 {
                writer.queue(&Message::TagAdvanceGrant(Tag::new(i, 0))).unwrap();
                if i % 7 == 0 {
                    writer.flush().unwrap();
                }
                if i % 500 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            writer.flush().unwrap();
        });
        let mut got = Vec::new();
        let mut items = VecDeque::new();
        loop {
            inbox.wait(Some(Instant::now() + Duration::from_micros(100)), &mut items);
            if let Some(Incoming::RtiLost(_)) = items.back() {
                items.pop_back();
                got.extend(grants(&mut items));
                break;
            }
            got.extend(grants(&mut items));
        }
        writer.join().unwrap();
        thread.join().unwrap();
        assert_eq!(got, (0..20_000).collect::<Vec<_>>());
    }
}
