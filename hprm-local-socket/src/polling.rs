//! How a daemon's connection tasks poll their sockets after a message, and
//! for how long: one spinner polls for them all.
//!
//! After handling what a client sent, a connection task looks for the next
//! message for a while before it waits in the reactor: the next message of
//! an exchange (a reply, the next request) often follows within
//! microseconds, and waking a worker asleep in the reactor costs more than
//! that on a virtualised machine. But a polling thread is one more thread
//! that wants a CPU, on machines where the clients poll too. In `hprm-rti`,
//! with every busy connection polling from its own worker, federates
//! waited for CPUs (a broadcast round took longer with polling than
//! without), and with two (one exchange between two federates: four
//! polling threads on a two-CPU machine) the latency followed where the
//! kernel happened to put them.
//!
//! So one connection task at a time is the `Spinner`: it polls its own
//! socket and those of the others that want to poll, which wait as
//! `Watch`es (parked tasks, their sockets not in the reactor). When a
//! watched socket has data, the spinner hands its role to that task and
//! becomes a watcher itself: the task it woke runs next on the same
//! worker (tokio's LIFO slot), no thread is woken, and only one daemon
//! thread ever polls. In `hprm-rti`, against a poller per connection, that
//! halved the broadcast round and left two-federate exchanges level
//! (sustained relays slightly slower: two connections' relays no longer
//! run at once).
//!
//! Connections waiting in the reactor are watched as well
//! (`Polling::watch`): the spinner keeps its worker from the reactor
//! between turns, and the other worker is not always there to take it
//! (a worker that parks while another holds the reactor sleeps on a
//! condition variable instead, and stays there). Before they were watched,
//! their messages often waited until polling ended.
//!
//! The figures behind each of these choices are in
//! `bench/results/design-measurements.md` ("One spinner polls for all of a
//! daemon's connections").
//!
//! A connection task reads through its [`Poller`], which plays whichever
//! role it is given. The role outlives a read: the task keeps it while it
//! handles what it read, provided that handling does not suspend
//! ([`Poller::unless_suspended`]); a spinner parked in an await would
//! leave the watchers waiting for a look that does not come.
//!
//! Invariant: `Set::spinner` is true exactly while one `Spinner` holds
//! the role, or a woken `Watch` was handed it and has not yet turned it
//! into one (or dropped it, which releases it). Whoever releases the role
//! wakes every watcher that only polls (`Woken::Retry`), so none is left
//! without a spinner; watchers in the reactor stay, the reactor wakes them.

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::{Socket, Stream};

/// How long the spinner keeps its worker thread, at most, before it gives
/// the runtime a turn. Every turn wakes the daemon's other worker (asleep
/// in the reactor while this one spins): in tokio a task that yields, or
/// any worker that finds work after it looked for some, calls a sleeping
/// worker to help, and that is a wake-up on a CPU a client likely polls
/// on. So the spinner takes a turn when it knows of work for its worker:
/// after it woke watchers without handing off ([`Spinner::expire`]), and
/// when its daemon knows it woke a task (`hprm-rti`, after a flush woke a
/// stalled outbox's writer); the tasks it wakes then wait in its worker's
/// LIFO slot, which no other worker steals from. Everything else reaches
/// the other worker (the reactor, timers, tasks woken from other threads).
/// This slice is a backstop against a wake-up that list misses; a much
/// shorter one made the RTI's threads sleep between relayed messages (its
/// test, `a_polling_rti_relays_without_sleeping_between_messages`).
const RUNTIME_SLICE: Duration = Duration::from_millis(10);

/// The polling of one daemon's connections: who spins, who watches, and
/// for how long a connection polls after a message. Shared by the
/// connections' [`Poller`]s.
pub struct Polling {
    spin: Duration,
    set: Mutex<Set>,
    idle: Option<IdleWork>,
}

/// Work a daemon gives its spinner, which is the one thread sure to be
/// awake while the daemon polls: done after each look that finds nothing
/// (`stopping` false), and when the role of spinner is given up
/// (`stopping` true: maybe nobody polls for a while). Returns whether it
/// woke a task, which then needs a turn of the runtime. `hprm-rti` writes
/// the DNETs it held back for company with it.
pub type IdleWork = Box<dyn Fn(bool) -> bool + Send + Sync>;

impl std::fmt::Debug for Polling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Polling")
            .field("spin", &self.spin)
            .field("set", &self.set)
            .field("idle_work", &self.idle.is_some())
            .finish()
    }
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
enum Role {
    Spin(Spinner),
    Watch(Watch),
}

/// Why a [`Watch`] ended.
enum Woken {
    /// Its socket has data, and the role of spinner is now its.
    Spinner(Spinner),
    /// Its socket has data (the spinner stays where it is).
    Ready,
    /// The spinner stopped, or this watcher's time is up: enter again, or
    /// wait in the reactor if the time is up.
    Retry,
}

/// What one look of the spinner found.
enum Look {
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
        Polling { spin, set: Mutex::new(Set::default()), idle: None }
    }

    /// A polling whose spinner also does `work` (see [`IdleWork`]).
    pub fn with_idle_work(spin: Duration, work: IdleWork) -> Polling {
        Polling { idle: Some(work), ..Polling::new(spin) }
    }

    fn idle_work(&self, stopping: bool) -> bool {
        self.idle.as_ref().is_some_and(|work| work(stopping))
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
    fn enter(self: &Arc<Self>, fd: RawFd, until: Instant) -> Option<Role> {
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
    fn watch(self: &Arc<Self>, fd: RawFd) -> Option<Watch> {
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
        self.idle_work(true);
        let mut set = self.lock();
        set.spinner = false;
        let (_, wakers) = retry(&mut set, |w| w.until.is_some());
        drop(set);
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// A socket a [`Poller`] reads: plain non-blocking reads, and a read that
/// waits in the reactor.
pub trait Polled: AsRawFd {
    /// Reads what is there now (`WouldBlock` if nothing), without waiting.
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Reads what is there, waiting for something if nothing is; 0 at the
    /// end of the stream. Cancel-safe.
    fn read(&self, buf: &mut [u8]) -> impl Future<Output = io::Result<usize>> + Send;
}

impl<S: Stream + Sync> Polled for Socket<S> {
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        Socket::try_read(self, buf)
    }

    fn read(&self, buf: &mut [u8]) -> impl Future<Output = io::Result<usize>> + Send {
        Socket::read(self, buf)
    }
}

/// A connection whose last message came later than the spin after the one
/// before still polls on every this many reads, to notice when its
/// messages come closer together again.
const PROBE_EVERY: u32 = 8;

/// One connection task's part in the [`Polling`]: reads its socket as the
/// spinner or as a watcher, and keeps the role of spinner between reads
/// until it hands it off, its time is up, or it is dropped or stopped.
///
/// It polls only while polling pays: after a read whose data came within
/// the spin. A connection whose messages come further apart (a federate
/// with a slow timer, a store client that reserves blocks ahead) would
/// poll for the whole spin after each and then sleep anyway, taking a CPU
/// from the processes that do the work for nothing (`hprm-rti`'s test
/// `a_connection_whose_messages_come_further_apart_than_the_spin_mostly_stops_polling`
/// bounds the CPU it takes); latency did not move where messages come
/// close (figures in `bench/results/design-measurements.md`).
pub struct Poller {
    polling: Arc<Polling>,
    /// The role of spinner, between reads while this connection holds it.
    spinner: Option<Spinner>,
    /// Whether the last read's data came within the spin.
    pays: bool,
    /// Reads without polling since polling last stopped paying.
    skipped: u32,
}

impl Poller {
    pub fn new(polling: Arc<Polling>) -> Poller {
        Poller { polling, spinner: None, pays: true, skipped: 0 }
    }

    /// Reads once into `buf` (0: end of stream): polling first while that
    /// pays (see [`Poller`]), else waiting in the reactor. Cancel-safe: a
    /// read that is dropped has taken no bytes, and the role of spinner
    /// stays with this poller or goes on to another.
    pub async fn read<R: Polled + ?Sized>(&mut self, socket: &R, buf: &mut [u8]) -> io::Result<usize> {
        if !self.pays && self.skipped < PROBE_EVERY {
            self.skipped += 1;
            self.spinner = None;
            let start = Instant::now();
            let n = self.read_watched(socket, buf).await?;
            self.pays = start.elapsed() <= self.polling.spin;
            return Ok(n);
        }
        self.skipped = 0;
        let (n, polled) = self.read_polling(socket, buf).await?;
        self.pays = polled;
        Ok(n)
    }

    /// Reads once into `buf`, polling for up to `Polling`'s spin before
    /// waiting in the reactor: as the spinner, or as a watcher the spinner
    /// wakes. Between looks the spinner yields its CPU to any thread ready
    /// to run there (the clients need the CPUs more); it gives the runtime
    /// a turn when it woke watchers whose time was up, and at least every
    /// `RUNTIME_SLICE` it holds the role (a connection that always has
    /// data never waits otherwise). Also says whether the data came while
    /// it polled.
    async fn read_polling<R: Polled + ?Sized>(&mut self, socket: &R, buf: &mut [u8]) -> io::Result<(usize, bool)> {
        let until = Instant::now() + self.polling.spin;
        let mut watch = None;
        loop {
            if let Some(w) = watch.take() {
                match w.await {
                    Woken::Spinner(s) => self.spinner = Some(s),
                    Woken::Ready => {}
                    Woken::Retry if Instant::now() >= until => {
                        return Ok((self.read_watched(socket, buf).await?, false))
                    }
                    Woken::Retry => continue,
                }
                if let Some(n) = read_now(socket, buf)? {
                    return Ok((n, true));
                }
                continue;
            }
            let mut spinner = match self.spinner.take() {
                Some(s) => s,
                None => match self.polling.enter(socket.as_raw_fd(), until) {
                    None => return Ok((socket.read(buf).await?, false)),
                    Some(Role::Watch(w)) => {
                        watch = Some(w);
                        continue;
                    }
                    Some(Role::Spin(s)) => s,
                },
            };
            let now = Instant::now();
            if now >= until {
                drop(spinner);
                return Ok((self.read_watched(socket, buf).await?, false));
            }
            if spinner.turn_due(now) {
                self.spinner = Some(spinner);
                tokio::task::yield_now().await;
                continue;
            }
            match spinner.look(until) {
                Look::Own(s) => {
                    self.spinner = Some(s);
                    if let Some(n) = read_now(socket, buf)? {
                        return Ok((n, true));
                    }
                }
                Look::HandedOff(w) => watch = Some(w),
                Look::Idle(s) => {
                    let woke = s.expire(now) | self.polling.idle_work(false);
                    self.spinner = Some(s);
                    if woke {
                        tokio::task::yield_now().await;
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
    }

    /// Reads once, waiting in the reactor and, while there is a spinner,
    /// watched by it as well: a worker that spins may keep the reactor
    /// from running (see the module doc).
    async fn read_watched<R: Polled + ?Sized>(&mut self, socket: &R, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(watch) = self.polling.watch(socket.as_raw_fd()) else { return socket.read(buf).await };
            let woken = tokio::select! {
                biased;
                n = socket.read(buf) => return n,
                w = watch => w,
            };
            match woken {
                Woken::Spinner(s) => self.spinner = Some(s),
                Woken::Ready => {}
                Woken::Retry => continue,
            }
            if let Some(n) = read_now(socket, buf)? {
                return Ok(n);
            }
            // Nothing after all: back to the reactor, but not holding the
            // role, which would leave the watchers without a spinner.
            self.spinner = None;
        }
    }

    /// Runs `work` (the handling of what was read), keeping the role of
    /// spinner only while `work` does not suspend: the first time it does
    /// (a reply waits for room in a full socket, a lock is taken), the
    /// role is given up, so the watchers do not wait on a task that is
    /// itself waiting.
    pub async fn unless_suspended<F: Future>(&mut self, work: F) -> F::Output {
        let mut work = std::pin::pin!(work);
        std::future::poll_fn(|cx| {
            let done = work.as_mut().poll(cx);
            if done.is_pending() {
                self.spinner = None;
            }
            done
        })
        .await
    }

    /// Gives up the role of spinner, if it holds it: for a connection that
    /// reads no more through [`Poller::read`] for now.
    pub fn stop(&mut self) {
        self.spinner = None;
    }

    /// Whether it holds the role of spinner.
    pub fn spins(&self) -> bool {
        self.spinner.is_some()
    }

    /// Whether its next [`Poller::read`] polls (as the spinner, or watched
    /// by one) before it waits in the reactor.
    pub fn polls_next(&self) -> bool {
        !self.polling.spin.is_zero() && (self.pays || self.skipped >= PROBE_EVERY)
    }
}

/// Reads what is there now: `None` if nothing is.
fn read_now<R: Polled + ?Sized>(socket: &R, buf: &mut [u8]) -> io::Result<Option<usize>> {
    match socket.try_read(buf) {
        Ok(n) => Ok(Some(n)),
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => Ok(None),
        Err(e) => Err(e),
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
struct Spinner {
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
        Spinner {
            polling,
            fd,
            fds: Vec::new(),
            ids: Vec::new(),
            holds: true,
            had_data: false,
            turn_at: Instant::now() + RUNTIME_SLICE,
        }
    }

    /// One look at its own socket and the watched ones, without waiting.
    /// Its own socket comes first, except right after it had data: a
    /// connection that always has data (a sender at full rate) must not
    /// keep the others waiting.
    fn look(mut self, until: Instant) -> Look {
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
    fn turn_due(&mut self, now: Instant) -> bool {
        let due = now >= self.turn_at;
        if due {
            self.turn_at = now + RUNTIME_SLICE;
        }
        due
    }

    /// Wakes the watchers whose time is up, to wait in the reactor; whether
    /// there were any (they need a turn of the runtime).
    fn expire(&self, now: Instant) -> bool {
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
struct Watch {
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
    fn socket(s: UnixStream) -> crate::LocalSocket {
        s.set_nonblocking(true).expect("non-blocking");
        crate::LocalSocket::new(tokio::net::UnixStream::from_std(s).expect("register")).expect("deregister")
    }

    #[tokio::test]
    async fn a_poller_keeps_the_role_across_handling_that_does_not_suspend_and_gives_it_up_when_it_does() {
        let Two { p, own: (own, mut own_peer), other: (other, _other_peer) } = two();
        let own = socket(own);
        let mut poller = Poller::new(p.clone());
        own_peer.write_all(b"request").expect("write");
        let mut buf = [0u8; 16];
        assert_eq!(poller.read(&own, &mut buf).await.expect("read"), 7);
        assert!(poller.spins(), "it read as the spinner, and keeps the role");
        poller.unless_suspended(async {}).await;
        assert!(poller.spins());
        let w = watch(p.enter(other.as_raw_fd(), later()));
        poller.unless_suspended(tokio::task::yield_now()).await;
        assert!(!poller.spins(), "handling that suspended gave the role up");
        assert!(matches!(w.await, Woken::Retry), "and the watcher was told to take it");
    }

    #[tokio::test]
    async fn pollers_of_two_connections_read_both_whoever_spins() {
        let Two { p, own: (a, mut a_peer), other: (b, mut b_peer) } = two();
        let (a, b) = (socket(a), socket(b));
        let reader = |s: crate::LocalSocket, p: Arc<Polling>| async move {
            let mut poller = Poller::new(p);
            let (mut got, mut buf) = (Vec::new(), [0u8; 64]);
            while got.len() < 300 {
                let n = poller.read(&s, &mut buf).await.expect("read");
                got.extend_from_slice(&buf[..n]);
            }
            got
        };
        let ra = tokio::spawn(reader(a, p.clone()));
        let rb = tokio::spawn(reader(b, p.clone()));
        let writer = std::thread::spawn(move || {
            for _ in 0..100 {
                a_peer.write_all(b"abc").expect("write");
                std::thread::sleep(Duration::from_micros(50));
                b_peer.write_all(b"xyz").expect("write");
            }
        });
        // A reader left without a spinner would wait forever.
        let within = |r| tokio::time::timeout(Duration::from_secs(10), r);
        assert_eq!(within(ra).await.expect("a's reader in time").expect("a's reader"), b"abc".repeat(100));
        assert_eq!(within(rb).await.expect("b's reader in time").expect("b's reader"), b"xyz".repeat(100));
        writer.join().expect("writer");
        assert!(!p.lock().spinner, "no spinner is left once the pollers are gone");
    }
}
