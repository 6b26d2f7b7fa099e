//! The scheduler's inbox: everything that reaches a federate from outside
//! its scheduler thread.
//!
//! Network readers, physical-action schedulers and signal handling push
//! [`Incoming`] items; the scheduler thread drains them between tags and
//! while it waits (for a grant, for physical time to reach a tag, for an
//! input's status). The scheduler first polls for a short while before
//! sleeping on the condition variable: on virtualised machines a blocking
//! wake-up costs tens of microseconds, more than a small message's whole
//! trip, and most waits for a reply are shorter than that. It polls with
//! `sched_yield`, so its CPU stays awake (waking a thread there is cheap)
//! yet goes at once to any other thread that is ready to run: the chain
//! of a centralized message (sender, RTI, receiver) has more threads than
//! a small machine has CPUs. While it polls, and between tags, it also
//! reads the federate's connections itself ([`PolledSource`]), so a
//! message that arrives then wakes no thread at all; when it goes to sleep
//! it hands them back to their reader threads.
//!
//! Layers: the inbox knows its sources only through [`PolledSource`],
//! which the network's connections (`net::source`) implement; the network
//! is above the inbox, and the inbox needs nothing but ids and values.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use hprm_rti::tag::Tag;

use crate::ids::{TriggerId, Value};
use crate::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use crate::sync::{thread, Condvar, Mutex, OnceLock};

/// How long the scheduler may go without polling before reader threads
/// take its sockets back: far above a poll loop's period (microseconds),
/// far below what a sender with a full socket would notice.
pub(crate) const TAKEOVER: Duration = Duration::from_millis(2);

/// A connection the scheduler reads while it polls its inbox, and a reader
/// thread the rest of the time (`net::source::Source`).
///
/// Contract: `poll` reads what the connection has now without blocking
/// and pushes it into the inbox (it does nothing while the reader thread
/// is at it); `wake_reader` tells a parked reader thread to look again
/// (the scheduler stopped polling); `close` stops reading for good, and
/// when it returns no item from this connection is pushed any more.
pub(crate) trait PolledSource: Send + Sync {
    fn poll(&self);
    fn wake_reader(&self);
    fn close(&self);
}

/// One item for the scheduler.
pub(crate) enum Incoming {
    /// A message for one of this federate's inputs.
    Message { port: TriggerId, tag: Tag, value: Result<Value, Undelivered> },
    /// Nothing arrives on `port` at tags up to `tag` from its sender.
    Absent { port: TriggerId, tag: Tag },
    /// TAG from the RTI.
    Grant(Tag),
    /// PTAG from the RTI.
    ProvisionalGrant(Tag),
    /// DNET from the RTI: no downstream federate needs a NET below it.
    DownstreamNext(Tag),
    /// The RTI relays another federate's stop request.
    StopRequest(Tag),
    /// The RTI fixed the stop tag.
    StopGranted(Tag),
    /// A physical action scheduled from another thread.
    Physical { action: TriggerId, extra: i64, value: Value },
    /// A peer (decentralized) closed its connection: nothing more from it.
    PeerClosed(u16),
    /// The RTI connection broke or the RTI reported a failure.
    RtiLost(String),
    /// SIGINT or SIGTERM: stop at the next common tag.
    Signal,
}

/// Why a message that arrived has no value for its input (the scheduler
/// counts it and treats the input as absent).
#[derive(Debug)]
pub(crate) enum Undelivered {
    /// Its payload could not be decoded: the error, naming sender and port.
    Undecodable(String),
    /// Its objects were lost with a store that died
    /// ([`crate::payload::PayloadError::StoreLost`]).
    StoreLost,
}

/// A queue with a condition variable and a lock-free "non-empty" flag for
/// polling.
///
/// Invariant: `Queue::sleeping` changes only under the mutex, set by the
/// scheduler just before it waits on `ready` (which releases the mutex
/// atomically). A pusher reads it under the same mutex after pushing, so it
/// either sees the scheduler asleep and wakes it, or pushed before the
/// scheduler looked and the scheduler finds the item. A scheduler that is
/// polling costs pushers no wake-up system call.
pub(crate) struct Inbox {
    queue: Mutex<Queue>,
    ready: Condvar,
    nonempty: AtomicBool,
    spin: Duration,
    /// The connections the scheduler reads while it polls, or `None` once
    /// they are closed ([`Inbox::close_sources`]). Weak: a source holds the
    /// inbox (through `Receiving`), and lives as long as its reader thread.
    sources: Mutex<Option<Vec<Weak<dyn PolledSource>>>>,
    /// When the scheduler last read `sources` (ns since `epoch`), or
    /// [`NOT_POLLING`]: their reader threads stay away from the sockets
    /// for [`TAKEOVER`] after it.
    polled_at: AtomicU64,
    #[cfg_attr(all(test, loom), allow(dead_code))]
    epoch: Instant,
}

/// `Inbox::polled_at` while the scheduler sleeps (or has not polled yet).
const NOT_POLLING: u64 = u64::MAX;

#[derive(Default)]
struct Queue {
    items: VecDeque<Incoming>,
    sleeping: bool,
}

impl Inbox {
    pub fn new(spin: Duration) -> Inbox {
        Inbox {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            nonempty: AtomicBool::new(false),
            spin,
            sources: Mutex::new(Some(Vec::new())),
            polled_at: AtomicU64::new(NOT_POLLING),
            epoch: Instant::now(),
        }
    }

    /// Registers a connection; one that comes after [`Inbox::close_sources`]
    /// (a late peer) is closed at once.
    pub fn add_source<S: PolledSource + 'static>(&self, source: &Arc<S>) {
        match &mut *self.sources.lock() {
            Some(sources) => {
                let weak: Weak<S> = Arc::downgrade(source);
                sources.push(weak)
            }
            None => source.close(),
        }
    }

    /// Closes every connection for good, once the federate has finished.
    /// When this returns, no message is handled any more, so no decoder
    /// runs: the program's decoders are its own code (a Python federate's
    /// takes the GIL, which a finalizing interpreter must not be asked for),
    /// and nothing of the runtime may call them after `run_federate`
    /// returned. Messages still on their way are dropped, as they would be
    /// by a federate process that exited.
    pub fn close_sources(&self) {
        let sources = self.sources.lock().take();
        for s in sources.into_iter().flatten().filter_map(|s| s.upgrade()) {
            s.close();
        }
    }

    /// For reader threads: `Some(how long to stay away)` while the
    /// scheduler reads the sockets itself.
    pub fn scheduler_polls(&self) -> Option<Duration> {
        let at = self.polled_at.load(Ordering::SeqCst);
        if at == NOT_POLLING {
            return None;
        }
        let age = Duration::from_nanos(self.now_ns().saturating_sub(at));
        TAKEOVER.checked_sub(age).filter(|d| !d.is_zero())
    }

    #[cfg(not(all(test, loom)))]
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Time does not pass in a model (`crate::sync`): a reader thread never
    /// takes the sockets back by itself, only when it is handed them.
    #[cfg(all(test, loom))]
    fn now_ns(&self) -> u64 {
        0
    }

    /// Reads every source that has something (the scheduler's part).
    fn poll_sources(&self) {
        let mut sources = self.sources.lock();
        let Some(sources) = sources.as_mut().filter(|s| !s.is_empty()) else {
            return;
        };
        self.polled_at.store(self.now_ns(), Ordering::SeqCst);
        sources.retain(|s| match s.upgrade() {
            Some(s) => {
                s.poll();
                true
            }
            None => false,
        });
    }

    /// Gives the sockets back to the reader threads before the scheduler
    /// sleeps.
    fn hand_over(&self) {
        if self.polled_at.swap(NOT_POLLING, Ordering::SeqCst) == NOT_POLLING {
            return;
        }
        // Pairs with the fence in `ReaderThread::register` (see there).
        fence(Ordering::SeqCst);
        for s in self.sources.lock().iter().flatten().filter_map(Weak::upgrade) {
            s.wake_reader();
        }
    }

    pub fn push(&self, item: Incoming) {
        let mut q = self.queue.lock();
        q.items.push_back(item);
        self.nonempty.store(true, Ordering::Release);
        let wake = q.sleeping;
        drop(q);
        if wake {
            self.ready.notify_one();
        }
    }

    /// Moves every item into `out` without waiting, after reading what the
    /// sources have.
    pub fn drain(&self, out: &mut VecDeque<Incoming>) {
        self.poll_sources();
        self.take(out);
    }

    fn take(&self, out: &mut VecDeque<Incoming>) {
        if !self.nonempty.load(Ordering::Acquire) {
            return;
        }
        let mut q = self.queue.lock();
        out.append(&mut q.items);
        self.nonempty.store(false, Ordering::Release);
    }

    /// Waits until an item is there or `deadline` passes (forever if
    /// `None`), then drains into `out`.
    pub fn wait(&self, deadline: Option<Instant>, out: &mut VecDeque<Incoming>) {
        let spin_until = Instant::now() + self.spin;
        while Instant::now() < spin_until && deadline.map_or(true, |d| Instant::now() < d) {
            self.poll_sources();
            if self.nonempty.load(Ordering::Acquire) {
                return self.take(out);
            }
            // Yield, not a bare spin: the threads this one waits for (a
            // socket reader, the RTI, a peer) may be queued on this very
            // CPU, and a spinner would hold them off until its budget ends.
            thread::yield_now();
        }
        self.hand_over();
        let mut q = self.queue.lock();
        loop {
            if !q.items.is_empty() {
                out.append(&mut q.items);
                self.nonempty.store(false, Ordering::Release);
                return;
            }
            q.sleeping = true;
            match deadline {
                None => q = self.ready.wait(q),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        q.sleeping = false;
                        return;
                    }
                    q = self.ready.wait_timeout(q, d - now).0;
                }
            }
            q.sleeping = false;
        }
    }
}

/// A reader thread's half of the hand-over of the sockets (the
/// scheduler's is `Inbox::hand_over`): the thread to unpark when the
/// scheduler stops polling, published before the thread first asks
/// [`Inbox::scheduler_polls`].
#[derive(Default)]
pub(crate) struct ReaderThread(OnceLock<thread::Thread>);

impl ReaderThread {
    /// On the reader thread, before it first asks whether the scheduler
    /// polls.
    pub fn register(&self) {
        let _ = self.0.set(thread::current());
        // Pairs with the fences in `Inbox::hand_over` and `Source::close`
        // (Dekker pairs): either the scheduler sees this thread (and
        // unparks it) or this thread sees that the scheduler stopped
        // polling, and either `close` sees it or it sees the end.
        fence(Ordering::SeqCst);
    }

    /// Parks the reader thread while the scheduler reads the sockets
    /// (until it hands them over, or [`TAKEOVER`] after its last poll);
    /// false, at once, when it is the thread's turn to read.
    pub fn stay_away(&self, inbox: &Inbox) -> bool {
        match inbox.scheduler_polls() {
            Some(wait) => {
                thread::park_timeout(wait);
                true
            }
            None => false,
        }
    }

    /// Tells the parked thread to look again.
    pub fn wake(&self) {
        if let Some(t) = self.0.get() {
            t.unpark();
        }
    }
}

/// Models of the inbox's hand-offs (loom, `scripts/loom.sh`), under every
/// interleaving and every reordering the memory orderings allow; time does
/// not pass (`crate::sync`), so only a wake-up ends a wait. A lost wake-up
/// is a deadlock that loom reports. Each was seen to fail with a mistake
/// put in on purpose and taken out again (named at each).
#[cfg(all(test, loom))]
mod inbox_loom {
    use super::*;

    /// A source whose reader thread only does the hand-over: what it would
    /// read is one item, pushed once it has its turn.
    #[derive(Default)]
    struct Handed(ReaderThread);

    impl PolledSource for Handed {
        fn poll(&self) {}
        fn wake_reader(&self) {
            self.0.wake()
        }
        fn close(&self) {}
    }

    /// An item pushed while the scheduler goes to sleep wakes it: a pusher
    /// reads `sleeping` under the lock after pushing. Caught: the scheduler
    /// letting go of the lock between finding the queue empty and setting
    /// `sleeping` (`drop(q); q = self.queue.lock();` before it).
    #[test]
    fn a_push_wakes_the_scheduler_going_to_sleep() {
        loom::model(|| {
            let inbox = Arc::new(Inbox::new(Duration::ZERO));
            let pusher = {
                let inbox = inbox.clone();
                thread::spawn(move || inbox.push(Incoming::Signal))
            };
            let mut out = VecDeque::new();
            inbox.wait(None, &mut out);
            assert!(matches!(out.pop_front(), Some(Incoming::Signal)));
            pusher.join().expect("the pusher");
        });
    }

    /// A reader thread that parked because the scheduler was polling is
    /// woken when the scheduler goes to sleep (`hand_over`), whenever it
    /// registered: the Dekker pair of `ReaderThread::register` and
    /// `Inbox::hand_over`. Caught: either SeqCst fence taken out (the
    /// scheduler misses the thread and the thread misses the hand-over,
    /// and both sleep for good).
    #[test]
    fn a_reader_thread_is_handed_the_sockets_when_the_scheduler_sleeps() {
        loom::model(|| {
            let inbox = Arc::new(Inbox::new(Duration::ZERO));
            let source = Arc::new(Handed::default());
            inbox.add_source(&source);
            let reader = {
                let (inbox, source) = (inbox.clone(), source.clone());
                thread::spawn(move || {
                    source.0.register();
                    while source.0.stay_away(&inbox) {}
                    inbox.push(Incoming::Signal);
                })
            };
            let mut out = VecDeque::new();
            // The scheduler polls once (between tags), then sleeps.
            inbox.drain(&mut out);
            if out.is_empty() {
                inbox.wait(None, &mut out);
            }
            assert!(matches!(out.pop_front(), Some(Incoming::Signal)));
            reader.join().expect("the reader thread");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_sleeping_waiter_is_woken_and_a_deadline_ends_a_wait() {
        // No polling: the waiter sleeps at once, so only the wake-up can end it.
        let inbox = Arc::new(Inbox::new(Duration::ZERO));
        let pusher = {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                inbox.push(Incoming::Signal);
            })
        };
        let mut out = VecDeque::new();
        inbox.wait(None, &mut out);
        assert!(matches!(out.pop_front(), Some(Incoming::Signal)));
        pusher.join().unwrap();
        let start = Instant::now();
        inbox.wait(Some(start + Duration::from_millis(20)), &mut out);
        assert!(out.is_empty() && start.elapsed() >= Duration::from_millis(20));
        // An item pushed while nobody waits is there for the next wait.
        inbox.push(Incoming::Signal);
        inbox.wait(None, &mut out);
        assert_eq!(out.len(), 1);
    }
}
