//! How connection tasks poll their sockets after a message, and for how
//! long (`--spin-us`): one spinner watches them all.
//!
//! After handling what a federate sent, its connection task looks for the
//! next message for a while before it waits in the reactor: the next
//! message of an exchange (a reply, the next NET) often follows within
//! microseconds, and waking a worker asleep in the reactor costs more than
//! that on a virtualised machine. But a polling thread is one more thread
//! that wants a CPU, on machines where the federates poll too: with every
//! busy connection polling from its own worker, federates waited for CPUs
//! (broadcast to 4 receivers over the RTI: 1 KB round p50 about 220 µs
//! without polling, 350-530 µs with every connection polling; ad hoc), and
//! with two (one exchange between two federates: four polling threads on
//! a two-CPU machine) the latency followed where the kernel happened to
//! put them (one-way p50 13-90 µs by placement; ad hoc).
//!
//! So one connection task at a time is the [`Spinner`]: it polls its own
//! socket and those of the others that want to poll, which wait as
//! [`Watch`]es (parked tasks, their sockets not in the reactor). When a
//! watched socket has data, the spinner hands its role to that task and
//! becomes a watcher itself: the task it woke runs next on the same
//! worker (tokio's LIFO slot), no thread is woken, and only one RTI thread
//! ever polls. Against a poller per connection, at most two (`node-bench
//! compare`, launches alternating between the builds): 1 KB broadcast
//! round to four receivers over the Unix socket 377 -> 170 µs (TCP 397 ->
//! 201 µs), a two-federate exchange level at 8 B and 1.05x at 64 KiB,
//! sustained 8-byte messages 0.97x (two connections' relays no longer run
//! at once).
//!
//! Connections waiting in the reactor are watched as well
//! ([`Polling::watch`]): the spinner keeps its worker from the reactor
//! between turns, and the other worker is not always there to take it
//! (a worker that parks while another holds the reactor sleeps on a
//! condition variable instead, and stays there). Their messages waited
//! until polling ended, 200 µs, in about half the launches of a
//! two-federate exchange before they were watched (ad hoc).
//!
//! Invariant: `Set::spinner` is true exactly while one [`Spinner`] holds
//! the role, or a woken [`Watch`] was handed it and has not yet turned it
//! into one (or dropped it, which releases it). Whoever releases the role
//! wakes every watcher that only polls ([`Woken::Retry`]), so none is left
//! without a spinner; watchers in the reactor stay, the reactor wakes them.

use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How long the spinner keeps its worker thread, at most, before it gives
/// the runtime a turn. Every turn wakes the RTI's other worker (asleep in
/// the reactor while this one spins): in tokio a task that yields, or any
/// worker that finds work after it looked for some, calls a sleeping
/// worker to help, and that is a wake-up on a CPU a federate likely polls
/// on. So the spinner takes a turn when it knows of work for its worker:
/// after it woke watchers without handing off ([`Spinner::expire`]), and
/// after a flush woke a stalled outbox's writer (see `connection`); the
/// tasks it wakes then wait in its worker's LIFO slot, which no other
/// worker steals from. Everything else reaches the other worker (the
/// reactor, timers, tasks woken from other threads). This slice is a
/// backstop against a wake-up that list misses; with a turn every 25 µs
/// the RTI's threads slept 1,611 times while relaying 200 messages 300 µs
/// apart (its test, `a_polling_rti_relays_without_sleeping_between_messages`).
const RUNTIME_SLICE: Duration = Duration::from_millis(10);

#[derive(Debug)]
pub struct Polling {
    spin: Duration,
    set: Mutex<Set>,
}

#[derive(Debug, Default)]
struct Set {
    spinner: bool,
    watched: Vec<Watched>,
    next_id: u64,
}

#[derive(Debug)]
struct Watched {
    id: u64,
    fd: RawFd,
    /// When it stops polling and waits in the reactor; `None`: it waits
    /// in the reactor already (see [`Polling::watch`]).
    until: Option<Instant>,
    /// `None` until the watch is first polled.
    waker: Option<Waker>,
    woken: Arc<AtomicU8>,
}

/// `Watched::woken`: still waiting, or why it was woken.
const WAITING: u8 = 0;
const SPIN: u8 = 1;
const READY: u8 = 2;
const RETRY: u8 = 3;

/// How a connection task polls.
pub enum Role {
    Spin(Spinner),
    Watch(Watch),
}

/// Why a [`Watch`] ended.
pub enum Woken {
    /// Its socket has data, and the role of spinner is now its.
    Spinner(Spinner),
    /// Its socket has data (the spinner stays where it is).
    Ready,
    /// The spinner stopped, or this watcher's time is up: enter again, or
    /// wait in the reactor if the time is up.
    Retry,
}

/// What one look of the spinner found.
pub enum Look {
    /// Its own socket has data.
    Own(Spinner),
    /// Nothing.
    Idle(Spinner),
    /// A watched socket had data: its task is the spinner now, and this
    /// one watches.
    HandedOff(Watch),
}

impl Polling {
    pub fn new(spin: Duration) -> Polling {
        Polling { spin, set: Mutex::new(Set::default()) }
    }

    /// How long a connection polls after its last message.
    pub fn spin(&self) -> Duration {
        self.spin
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Set> {
        self.set.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Polls socket `fd` until `until`: as the spinner if there is none,
    /// else as a watcher. `None` when polling is off.
    pub fn enter(self: &Arc<Self>, fd: RawFd, until: Instant) -> Option<Role> {
        if self.spin.is_zero() {
            return None;
        }
        let mut set = self.lock();
        if !set.spinner {
            set.spinner = true;
            return Some(Role::Spin(Spinner::new(self.clone(), fd)));
        }
        Some(Role::Watch(self.watch_locked(&mut set, fd, Some(until))))
    }

    /// Watches socket `fd` for a connection task that waits in the reactor
    /// meanwhile: the spinner may keep the reactor from running (see the
    /// module doc), and sees the socket sooner anyway. Stays watched until
    /// woken or dropped. `None` when polling is off.
    pub fn watch(self: &Arc<Self>, fd: RawFd) -> Option<Watch> {
        if self.spin.is_zero() {
            return None;
        }
        Some(self.watch_locked(&mut self.lock(), fd, None))
    }

    fn watch_locked(self: &Arc<Self>, set: &mut Set, fd: RawFd, until: Option<Instant>) -> Watch {
        let id = set.next_id;
        set.next_id += 1;
        let woken = Arc::new(AtomicU8::new(WAITING));
        set.watched.push(Watched { id, fd, until, waker: None, woken: woken.clone() });
        Watch { polling: self.clone(), id, fd, woken, taken: false }
    }

    /// Gives the role up and wakes every watcher that only polls, to take
    /// it (or to wait in the reactor, if their time is up).
    fn release(&self) {
        let mut set = self.lock();
        set.spinner = false;
        let (_, wakers) = retry(&mut set, |w| w.until.is_some());
        drop(set);
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// Takes the watchers `which` picks out of the set, marked to retry: how
/// many, and the wakers to wake after the lock is released.
fn retry(set: &mut Set, which: impl Fn(&Watched) -> bool) -> (usize, Vec<Waker>) {
    let (mut n, mut wakers) = (0, Vec::new());
    set.watched.retain_mut(|w| {
        if !which(w) {
            return true;
        }
        w.woken.store(RETRY, Ordering::Release);
        n += 1;
        wakers.extend(w.waker.take());
        false
    });
    (n, wakers)
}

/// The connection task that polls for everyone; gives the role up when
/// dropped.
pub struct Spinner {
    polling: Arc<Polling>,
    fd: RawFd,
    /// Scratch for each look: this socket, then the watched ones in the
    /// order of `ids`.
    fds: Vec<libc::pollfd>,
    ids: Vec<u64>,
    /// Whether this still holds the role (not after a hand-off).
    holds: bool,
    /// Whether its own socket had data at the last look.
    had_data: bool,
    /// When it next gives the runtime a turn, at the latest.
    turn_at: Instant,
}

impl Spinner {
    fn new(polling: Arc<Polling>, fd: RawFd) -> Spinner {
        Spinner { polling, fd, fds: Vec::new(), ids: Vec::new(), holds: true, had_data: false, turn_at: Instant::now() + RUNTIME_SLICE }
    }

    /// One look at its own socket and the watched ones, without waiting.
    /// Its own socket comes first, except right after it had data: a
    /// connection that always has data (a sender at full rate) must not
    /// keep the others waiting.
    pub fn look(mut self, until: Instant) -> Look {
        self.fds.clear();
        self.ids.clear();
        self.fds.push(libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 });
        for w in &self.polling.lock().watched {
            self.fds.push(libc::pollfd { fd: w.fd, events: libc::POLLIN, revents: 0 });
            self.ids.push(w.id);
        }
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds, alive for
        // the call. A watcher that left since may have closed its fd, and
        // the number been reused: its readiness then wakes nobody, as its
        // id is gone from the set.
        let n = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, 0) };
        if n <= 0 {
            self.had_data = false;
            return Look::Idle(self);
        }
        let own = self.fds[0].revents != 0;
        if own && !std::mem::replace(&mut self.had_data, own) {
            return Look::Own(self);
        }
        match self.hand_off(until) {
            Some(watch) => Look::HandedOff(watch),
            None if own => Look::Own(self),
            None => Look::Idle(self),
        }
    }

    /// Wakes the watchers whose sockets were ready in the last look, the
    /// first as the new spinner, and becomes a watcher until `until`.
    /// `None` (and no change) if none of them is still there.
    fn hand_off(&mut self, until: Instant) -> Option<Watch> {
        let polling = self.polling.clone();
        let mut set = polling.lock();
        let (mut woken, mut wakers) = (0, Vec::new());
        for (pfd, id) in self.fds[1..].iter().zip(&self.ids) {
            if pfd.revents == 0 {
                continue;
            }
            let Some(i) = set.watched.iter().position(|w| w.id == *id) else { continue };
            let w = set.watched.swap_remove(i);
            w.woken.store(if woken == 0 { SPIN } else { READY }, Ordering::Release);
            woken += 1;
            wakers.extend(w.waker);
        }
        if woken == 0 {
            return None;
        }
        let watch = polling.watch_locked(&mut set, self.fd, Some(until));
        self.holds = false;
        drop(set);
        wakers.into_iter().for_each(Waker::wake);
        Some(watch)
    }

    /// Whether it has held the role for `RUNTIME_SLICE` since its last
    /// turn; if so, the next turn is counted from `now`.
    pub fn turn_due(&mut self, now: Instant) -> bool {
        let due = now >= self.turn_at;
        if due {
            self.turn_at = now + RUNTIME_SLICE;
        }
        due
    }

    /// Wakes the watchers whose time is up, to wait in the reactor; whether
    /// there were any (they need a turn of the runtime).
    pub fn expire(&self, now: Instant) -> bool {
        let (woken, wakers) = retry(&mut self.polling.lock(), |w| w.until.is_some_and(|u| u <= now));
        wakers.into_iter().for_each(Waker::wake);
        woken > 0
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if self.holds {
            self.polling.release();
        }
    }
}

/// A connection task waiting for the spinner to see data on its socket.
pub struct Watch {
    polling: Arc<Polling>,
    id: u64,
    fd: RawFd,
    woken: Arc<AtomicU8>,
    /// Whether the role handed to it was taken (by a [`Spinner`]).
    taken: bool,
}

impl Future for Watch {
    type Output = Woken;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Woken> {
        // `woken` changes only under the lock, with the entry's removal: a
        // watcher that finds its entry is still waiting, and its new waker
        // will be the one woken.
        let woken = {
            let mut set = self.polling.lock();
            let woken = self.woken.load(Ordering::Acquire);
            if woken == WAITING {
                if let Some(w) = set.watched.iter_mut().find(|w| w.id == self.id) {
                    match &mut w.waker {
                        Some(waker) => waker.clone_from(cx.waker()),
                        None => w.waker = Some(cx.waker().clone()),
                    }
                }
            }
            woken
        };
        match woken {
            SPIN => {
                self.taken = true;
                Poll::Ready(Woken::Spinner(Spinner::new(self.polling.clone(), self.fd)))
            }
            READY => Poll::Ready(Woken::Ready),
            RETRY => Poll::Ready(Woken::Retry),
            _ => Poll::Pending,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut set = self.polling.lock();
        if let Some(i) = set.watched.iter().position(|w| w.id == self.id) {
            set.watched.swap_remove(i);
        } else if self.woken.load(Ordering::Acquire) == SPIN && !self.taken {
            // Handed the role but gone before taking it: pass it on.
            drop(set);
            self.polling.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn polling() -> Arc<Polling> {
        Arc::new(Polling::new(Duration::from_micros(200)))
    }

    /// A connected pair: a connection's socket, and its federate's end.
    fn pair() -> (UnixStream, UnixStream) {
        UnixStream::pair().expect("socketpair")
    }

    /// A spinner's connection, and another one: each a socket and its
    /// federate's end.
    struct Two {
        p: Arc<Polling>,
        own: (UnixStream, UnixStream),
        other: (UnixStream, UnixStream),
    }

    fn two() -> Two {
        Two { p: polling(), own: pair(), other: pair() }
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    fn spinner(role: Option<Role>) -> Spinner {
        match role {
            Some(Role::Spin(s)) => s,
            _ => panic!("expected the spinner's role"),
        }
    }

    fn watch(role: Option<Role>) -> Watch {
        match role {
            Some(Role::Watch(w)) => w,
            _ => panic!("expected a watcher's role"),
        }
    }

    fn own_data(look: Look) -> Spinner {
        match look {
            Look::Own(s) => s,
            _ => panic!("expected its own socket to have data"),
        }
    }

    fn handed_off(look: Look) -> Watch {
        match look {
            Look::HandedOff(w) => w,
            _ => panic!("expected a ready watcher to take over"),
        }
    }

    #[test]
    fn one_spinner_the_others_watch_it_turns_every_slice_and_none_when_off() {
        let p = polling();
        let (a, _a) = pair();
        let s = spinner(p.enter(a.as_raw_fd(), later()));
        let _w = watch(p.enter(a.as_raw_fd(), later()));
        let _w2 = watch(p.enter(a.as_raw_fd(), later()));
        drop(s);
        let mut s = spinner(p.enter(a.as_raw_fd(), later()));
        let now = Instant::now();
        assert!(!s.turn_due(now));
        assert!(s.turn_due(now + RUNTIME_SLICE));
        assert!(!s.turn_due(now + RUNTIME_SLICE), "the next turn counts from the last");
        assert!(Arc::new(Polling::new(Duration::ZERO)).enter(a.as_raw_fd(), later()).is_none());
    }

    #[tokio::test]
    async fn the_spinner_sees_its_own_socket_first_then_hands_off_to_a_ready_watcher() {
        let Two { p, own: (own, mut own_peer), other: (other, mut other_peer) } = two();
        let s = spinner(p.enter(own.as_raw_fd(), later()));
        let w = watch(p.enter(other.as_raw_fd(), later()));
        let s = match s.look(later()) {
            Look::Idle(s) => s,
            _ => panic!("nothing was sent"),
        };
        own_peer.write_all(b"x").expect("write");
        other_peer.write_all(b"y").expect("write");
        let s = own_data(s.look(later()));
        // It had data: now the others first.
        let old = handed_off(s.look(later()));
        let Woken::Spinner(new) = w.await else { panic!("the woken watcher is the spinner") };
        // Both sockets still have data: its own first, then the old
        // spinner's turn.
        let _new = handed_off(own_data(new.look(later())).look(later()));
        assert!(matches!(old.await, Woken::Spinner(_)));
    }

    #[tokio::test]
    async fn watchers_are_retried_when_the_spinner_leaves_or_their_time_is_up() {
        let p = polling();
        let (a, _a) = pair();
        let s = spinner(p.enter(a.as_raw_fd(), later()));
        let expired = watch(p.enter(a.as_raw_fd(), Instant::now()));
        let w = watch(p.enter(a.as_raw_fd(), later()));
        assert!(s.expire(Instant::now()));
        assert!(!s.expire(Instant::now()));
        assert!(matches!(expired.await, Woken::Retry));
        drop(s);
        assert!(matches!(w.await, Woken::Retry));
        assert!(matches!(p.enter(a.as_raw_fd(), later()), Some(Role::Spin(_))));
    }

    #[tokio::test]
    async fn a_watcher_in_the_reactor_stays_when_the_spinner_leaves_and_is_handed_the_role_on_data() {
        let Two { p, own: (own, _own_peer), other: (other, mut other_peer) } = two();
        let s = spinner(p.enter(own.as_raw_fd(), later()));
        let mut w = p.watch(other.as_raw_fd()).expect("polling is on");
        drop(s);
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: Arc<Self>) {}
        }
        let noop = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&noop);
        assert!(Pin::new(&mut w).poll(&mut cx).is_pending(), "the reactor wakes it, not the spinner leaving");
        let s = spinner(p.enter(own.as_raw_fd(), later()));
        other_peer.write_all(b"y").expect("write");
        let _old = handed_off(s.look(later()));
        assert!(matches!(w.await, Woken::Spinner(_)));
        assert!(Arc::new(Polling::new(Duration::ZERO)).watch(other.as_raw_fd()).is_none());
    }

    #[tokio::test]
    async fn a_watcher_gone_before_taking_the_role_passes_it_on() {
        let Two { p, own: (own, _own_peer), other: (other, mut other_peer) } = two();
        let s = spinner(p.enter(own.as_raw_fd(), later()));
        let w = watch(p.enter(other.as_raw_fd(), later()));
        other_peer.write_all(b"y").expect("write");
        let old = handed_off(s.look(later()));
        drop(w);
        assert!(matches!(old.await, Woken::Retry));
    }
}
