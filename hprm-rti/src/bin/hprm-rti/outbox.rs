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

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
        let mut st = self.lock();
        if st.closed || st.broken {
            return false;
        }
        encode(&mut st.buf);
        let list = !st.listed && !st.stalled;
        st.listed |= list;
        list
    }

    /// Writes what is queued without blocking; hands the rest to the
    /// writer task if the socket is full, and then says so (true).
    pub fn flush(&self) -> bool {
        let mut st = self.lock();
        st.listed = false;
        if st.stalled || st.broken {
            return false;
        }
        if let Drained::WouldBlock = self.drain(&mut st) {
            st.stalled = true;
            self.wake.notify_one();
            return true;
        }
        false
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

/// Outboxes with queued bytes, waiting for a flush.
#[derive(Default)]
pub struct Dirty {
    list: Mutex<Vec<Arc<Outbox>>>,
}

impl Dirty {
    pub fn add(&self, out: &Arc<Outbox>) {
        self.list.lock().unwrap_or_else(PoisonError::into_inner).push(out.clone());
    }

    /// Flushes every listed outbox; whether any woke its writer.
    pub fn flush(&self) -> bool {
        let list = std::mem::take(&mut *self.list.lock().unwrap_or_else(PoisonError::into_inner));
        list.iter().fold(false, |woke, out| out.flush() | woke)
    }
}
