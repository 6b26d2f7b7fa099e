//! What the RTI has to say to one federate, and how it gets written.
//!
//! Handlers append encoded messages to the destination's [`Outbox`] under
//! the federation's lock, so each outbox holds its messages in protocol
//! order (a relayed message before any grant computed after it). The
//! bytes are written later, outside that lock, by whoever flushes: the
//! connection task that produced them, once it has handled every message
//! its last read brought. So a relayed message and the grant that follows
//! it leave in one write from the task that handled them: no hand-over to
//! a writer task, whose wake-up costs more than the write on a small
//! machine.
//!
//! Flushes use non-blocking writes under the outbox's own lock (never the
//! federation's). A federate that does not read fills its socket: the
//! outbox then stalls and its writer task takes over, waiting until the
//! socket is writable; flushes leave a stalled outbox alone, so one slow
//! federate never holds up the handling of others.
//!
//! Hints (DNETs) may wait a little for company. An outbox that holds
//! nothing but hints is *held* by the flush after a burst, for up to the
//! hold (`--dnet-hold-us`, 50 µs by default): a message for the same
//! federate in that time takes them along in its write. In an exchange
//! through the RTI the DNET for a sender follows every message it sends,
//! and the next message for it (the reply) comes a few tens of
//! microseconds later. Written alone, the DNET is one more write for the
//! RTI and one more read for the federate, and its segment and the reply's
//! arriving unacknowledged make the federate's TCP acknowledge the reply
//! at once, by a segment of its own (held DNETs halve the segments of a
//! round trip), and about half the launches of such an exchange ran slow
//! (figures in `bench/results/design-measurements.md`). A DNET only lets
//! a federate leave out NETs nobody needs, so a late one costs at most a
//! NET sent in vain or one sent late, as a slower network would; and
//! every hold ends: the polling spinner writes held outboxes once their
//! hold is over and when it stops polling (`Federation::idle`), and any
//! flush not after a burst writes them at once.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hprm_rti::grant::FedId;
use tokio::sync::Notify;

use crate::stream::WriteHalf;

/// One federate's queue of encoded messages and its socket's write half.
pub struct Outbox {
    fed: FedId,
    wr: WriteHalf,
    state: Mutex<State>,
    /// Wakes the writer task: the outbox stalled or closed.
    wake: Notify,
}

#[derive(Default)]
struct State {
    buf: Vec<u8>,
    /// How much of `buf` is written (after a partial write).
    done: usize,
    /// On the federation's list of outboxes to flush.
    listed: bool,
    /// The writer task owns the socket: the last write would have blocked,
    /// or the outbox is closing.
    stalled: bool,
    closed: bool,
    /// A write failed: the federate is gone, and so is what was queued.
    broken: bool,
    /// `Some(when the first was queued)` while `buf` holds hints only
    /// (nothing else unwritten); `None` otherwise.
    hints_since: Option<Instant>,
    /// On the list of held outboxes ([`Dirty`]).
    held: bool,
}

/// What a flush did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// Wrote what was queued, or left it to the writer task without waking
    /// it.
    Done,
    /// Woke the writer task (the socket is full, or the outbox closed).
    WokeWriter,
    /// Kept hints back: put it on the held list.
    Held,
    /// Kept hints back; it is on the held list already.
    StillHeld,
}

enum Drained {
    Empty,
    WouldBlock,
    Broken,
}

impl Outbox {
    /// The outbox of federate `fed`; spawn [`Outbox::run`] next to it.
    pub fn new(fed: FedId, wr: WriteHalf) -> Arc<Outbox> {
        Arc::new(Outbox { fed, wr, state: Mutex::new(State::default()), wake: Notify::new() })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a message (`encode` appends its bytes). Returns whether the
    /// outbox must be put on the list of outboxes to flush (it was not on
    /// it, and no writer task owns it).
    pub fn push(&self, encode: impl FnOnce(&mut Vec<u8>)) -> bool {
        self.push_as(false, encode)
    }

    /// Appends a hint (a DNET), which may wait for company (see the module
    /// doc); otherwise as [`Outbox::push`].
    pub fn push_hint(&self, encode: impl FnOnce(&mut Vec<u8>)) -> bool {
        self.push_as(true, encode)
    }

    fn push_as(&self, hint: bool, encode: impl FnOnce(&mut Vec<u8>)) -> bool {
        let mut st = self.lock();
        if st.closed || st.broken {
            return false;
        }
        st.hints_since = match (hint, st.done < st.buf.len()) {
            (false, _) => None,
            (true, false) => Some(Instant::now()),
            (true, true) => st.hints_since,
        };
        encode(&mut st.buf);
        let list = !st.listed && !st.stalled;
        st.listed |= list;
        list
    }

    /// Writes what is queued without blocking, handing the rest to the
    /// writer task if the socket is full; or, given `(now, hold)`, keeps
    /// back hints with no company queued less than `hold` before `now`.
    pub fn flush(&self, hold: Option<(Instant, Duration)>) -> Flushed {
        let mut st = self.lock();
        st.listed = false;
        if st.stalled || st.broken {
            // The writer task writes what is queued, or nobody will.
            st.held = false;
            return Flushed::Done;
        }
        if let (Some(since), Some((now, hold))) = (st.hints_since, hold) {
            if now < since + hold {
                return match std::mem::replace(&mut st.held, true) {
                    false => Flushed::Held,
                    true => Flushed::StillHeld,
                };
            }
        }
        st.held = false;
        if let Drained::WouldBlock = self.drain(&mut st) {
            st.stalled = true;
            self.wake.notify_one();
            return Flushed::WokeWriter;
        }
        Flushed::Done
    }

    /// The federate left: what is queued is still written, then the
    /// socket's write side is shut and the writer task ends.
    pub fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        st.stalled = true;
        self.wake.notify_one();
    }

    fn drain(&self, st: &mut State) -> Drained {
        while st.done < st.buf.len() {
            match self.wr.try_write(&st.buf[st.done..]) {
                Ok(0) => return self.broke(st, io::ErrorKind::WriteZero.into()),
                Ok(n) => st.done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Drained::WouldBlock,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.broke(st, e),
            }
        }
        st.buf.clear();
        st.done = 0;
        st.hints_since = None;
        Drained::Empty
    }

    fn broke(&self, st: &mut State, e: io::Error) -> Drained {
        // The message loop sees the same connection end and reports it.
        tracing::debug!(fed = self.fed, error = %e, "cannot write to federate");
        st.broken = true;
        st.buf = Vec::new();
        st.done = 0;
        Drained::Broken
    }

    /// The writer task: drains a stalled outbox as the socket takes it;
    /// ends once the outbox is closed and empty (or broken).
    pub async fn run(self: Arc<Self>) {
        loop {
            self.wake.notified().await;
            loop {
                {
                    let mut st = self.lock();
                    if !st.stalled {
                        break;
                    }
                    match self.drain(&mut st) {
                        Drained::WouldBlock => {}
                        Drained::Empty if !st.closed => {
                            st.stalled = false;
                            break;
                        }
                        // The write half shuts (FIN) when the last holder of
                        // the outbox drops it: this task, the connection's.
                        Drained::Empty | Drained::Broken => return,
                    }
                }
                if self.wr.writable().await.is_err() {
                    let mut st = self.lock();
                    self.broke(&mut st, io::ErrorKind::BrokenPipe.into());
                    return;
                }
            }
        }
    }
}

/// Outboxes with queued bytes, waiting for a flush, and held ones.
///
/// Invariant: an outbox that is held (`State::held`) is on `held`, from
/// just after the flush that held it until one writes it; `any_held` is
/// true while `held` is not empty.
pub struct Dirty {
    list: Mutex<Vec<Arc<Outbox>>>,
    held: Mutex<Vec<Arc<Outbox>>>,
    /// Lets the spinner's idle looks skip the lock when nothing is held.
    any_held: AtomicBool,
    /// How long hints may wait for company; zero: never.
    hold: Duration,
}

impl Dirty {
    pub fn new(hold: Duration) -> Dirty {
        Dirty { list: Mutex::default(), held: Mutex::default(), any_held: AtomicBool::new(false), hold }
    }

    pub fn add(&self, out: &Arc<Outbox>) {
        self.list.lock().unwrap_or_else(PoisonError::into_inner).push(out.clone());
    }

    /// Flushes every listed outbox, and the held ones whose hold is over
    /// (every held one unless `hold`). `hold`: a spinner polls after this
    /// flush, so listed outboxes with hints only may be held. Whether a
    /// writer task was woken.
    pub fn flush(&self, hold: bool) -> bool {
        let list = std::mem::take(&mut *self.list.lock().unwrap_or_else(PoisonError::into_inner));
        let now = Instant::now();
        let hold = (hold && !self.hold.is_zero()).then_some((now, self.hold));
        let mut woke = false;
        for out in list {
            match out.flush(hold) {
                Flushed::WokeWriter => woke = true,
                Flushed::Held => {
                    let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
                    held.push(out);
                    self.any_held.store(true, Ordering::Release);
                }
                Flushed::Done | Flushed::StillHeld => {}
            }
        }
        self.flush_held(now, hold.is_none()) | woke
    }

    /// Writes the held outboxes whose hold is over at `now` (all of them
    /// if `all`). Whether a writer task was woken.
    pub fn flush_held(&self, now: Instant, all: bool) -> bool {
        if !self.any_held.load(Ordering::Acquire) {
            return false;
        }
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let hold = (!all).then_some((now, self.hold));
        let mut woke = false;
        held.retain(|out| match out.flush(hold) {
            Flushed::WokeWriter => {
                woke = true;
                false
            }
            Flushed::Held | Flushed::StillHeld => true,
            Flushed::Done => false,
        });
        self.any_held.store(!held.is_empty(), Ordering::Release);
        woke
    }
}
