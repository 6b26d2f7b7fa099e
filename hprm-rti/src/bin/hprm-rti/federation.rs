//! The federation's shared state: the grant coordinator, each federate's
//! outbound queue, start-time agreement, the stop protocol, and restartable
//! federates that fail and rejoin.
//!
//! Every handler runs under one mutex and only *enqueues* what it sends
//! (appends to the destination's [`Outbox`]), so relaying never does I/O
//! behind the lock. Enqueueing under the lock is what keeps the protocol's
//! ordering: a tagged message forwarded to a federate is queued before any
//! grant computed after it was recorded, so the federate can never be
//! granted past a message it has not received. The writes happen at
//! [`Federation::flush`], which the connection tasks call once they have
//! handled what they read; methods called from elsewhere flush themselves.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hprm_rti::grant::{Coordinator, FedId, Grant, NodeState, Notice, Relay, Upstream};
use hprm_rti::tag::{Instant, Tag, NEVER};
use hprm_rti::wire::{encode, encode_tagged, Message, RejectReason, Tagged};
use tokio::sync::watch;

use crate::outbox::{Dirty, Outbox};

/// Added to the latest proposed start time, so that every federate hears
/// the start time before it comes (LF's DELAY_START). `--start-delay`
/// overrides it; `--fast` makes it zero.
pub const DELAY_START: Instant = 1_000_000_000;

#[derive(Default)]
struct Slot {
    out: Option<Arc<Outbox>>,
    ip: Option<Ipv4Addr>,
    /// Port of its P2P server (ADDRESS_ADVERTISEMENT), -1 until known.
    server_port: i32,
    joined: bool,
    requested_stop: bool,
    /// Where it takes runtime clock synchronization (UDP), if it does.
    clock_sync_udp: Option<std::net::SocketAddr>,
    /// May fail and rejoin (`--restartable`).
    restartable: bool,
    /// A restarted incarnation is in its handshake.
    rejoining: bool,
    /// How many times it failed while restartable: tells a rejoin deadline
    /// which failure it was set for.
    failures: u32,
    /// Resigned (ended cleanly, past its last tag).
    resigned: bool,
}

/// Which federates may fail and come back, and how long they have.
#[derive(Debug, Clone, Default)]
pub struct Restarts {
    pub federates: Vec<FedId>,
    pub timeout: std::time::Duration,
    /// Fast mode: a rejoining federate resumes where it left off, not at
    /// the current physical time.
    pub fast: bool,
}

/// What became of a federate that left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// Gone for good (resigned or failed).
    Gone,
    /// Failed, restartable: it has until the deadline to rejoin; pass
    /// `failure` to [`Federation::rejoin_deadline`] then.
    Suspended { failure: u32 },
}

struct Stop {
    max_tag: Tag,
    handling: usize,
    in_progress: bool,
    granted: bool,
}

struct Inner {
    coord: Coordinator,
    slots: Vec<Slot>,
    proposals: usize,
    max_proposal: Instant,
    stop: Stop,
    left: usize,
    failed: bool,
    start: Option<Instant>,
    /// Grants sent, with `--trace`.
    trace: Option<crate::trace::GrantTrace>,
    /// Outboxes with something queued (shared with [`Federation::dirty`]).
    dirty: Arc<Dirty>,
    /// What the RTI publishes for dashboards.
    board: crate::status::Board,
}

/// How the RTI ended: whether some federate failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Running,
    AllResigned,
    SomeFailed,
}

pub struct Federation {
    pub id: Vec<u8>,
    pub size: u16,
    /// Added to the latest start-time proposal.
    start_delay: Instant,
    pub restarts: Restarts,
    inner: Mutex<Inner>,
    /// Flushed without the federation's lock.
    dirty: Arc<Dirty>,
    outcome: watch::Sender<Outcome>,
}

impl Federation {
    /// `dnet_hold`: how long a DNET may wait for a message to ride with
    /// (see `outbox`); `None`: no DNETs at all.
    pub fn new(
        id: &str,
        size: u16,
        start_delay: Instant,
        dnet_hold: Option<std::time::Duration>,
        trace: bool,
        restarts: Restarts,
    ) -> Federation {
        let mut coord = Coordinator::new(size);
        coord.set_dnet(dnet_hold.is_some());
        let dirty = Arc::new(Dirty::new(dnet_hold.unwrap_or_default()));
        let inner = Inner {
            coord,
            slots: (0..size)
                .map(|f| Slot { server_port: -1, restartable: restarts.federates.contains(&f), ..Slot::default() })
                .collect(),
            proposals: 0,
            max_proposal: 0,
            stop: Stop { max_tag: NEVER, handling: 0, in_progress: false, granted: false },
            left: 0,
            failed: false,
            start: None,
            trace: trace.then(crate::trace::GrantTrace::new),
            dirty: dirty.clone(),
            board: crate::status::Board::new(size),
        };
        Federation {
            id: id.as_bytes().to_vec(),
            size,
            start_delay,
            restarts,
            inner: Mutex::new(inner),
            dirty,
            outcome: watch::channel(Outcome::Running).0,
        }
    }

    /// Writes what handlers queued (see the module doc). Connection tasks
    /// call it before they wait for more input. Whether it woke an
    /// outbox's writer task (a federate that does not read fast enough).
    pub fn flush(&self) -> bool {
        self.dirty.flush(false)
    }

    /// [`Federation::flush`] after a connection task handled a burst of
    /// messages. `polls`: the task polls next (as the spinner, or watched
    /// by one), so DNETs with nothing to ride with may be held: the
    /// spinner's [`Federation::idle`] writes them.
    pub fn flush_burst(&self, polls: bool) -> bool {
        self.dirty.flush(polls)
    }

    /// The polling spinner's idle work: writes held DNETs whose hold is
    /// over, or all of them when it stops polling (`stopping`). Whether it
    /// woke a writer task.
    pub fn idle(&self, stopping: bool) -> bool {
        self.dirty.flush_held(std::time::Instant::now(), stopping)
    }

    /// The figures dashboards read (see `status`).
    pub fn figures(&self, last: Option<&hprm_rti::figures::RtiFigures>, secs: f64) -> hprm_rti::figures::RtiFigures {
        let inner = self.lock();
        inner.board.figures(inner.start, |f| inner.slots[usize::from(f)].out.is_some(), last, secs)
    }

    /// Writes the grants sent so far (`--trace`).
    pub fn write_trace(&self, path: &std::path::Path) -> std::io::Result<()> {
        let inner = self.lock();
        match &inner.trace {
            Some(t) => t.write(path, inner.start.unwrap_or(0)),
            None => Ok(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many federates have proposed a start time, and how many have
    /// left, read under the state lock: the watchdog's proof that the lock
    /// is not stuck, and the daemon's status line.
    pub fn progress(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.proposals, inner.left)
    }

    /// Watches for the end of the run.
    pub fn outcome(&self) -> watch::Receiver<Outcome> {
        self.outcome.subscribe()
    }

    /// Admits federate `fed` of federation `federation`, or says why not.
    /// The id must match exactly (LF compares only a prefix, which accepts
    /// an empty id; federates cut ids at 255 bytes, and so do we).
    pub fn admit(&self, fed: FedId, federation: &[u8]) -> Result<(), RejectReason> {
        let ours = &self.id[..self.id.len().min(255)];
        if federation != ours {
            return Err(RejectReason::FederationIdDoesNotMatch);
        }
        if fed >= self.size {
            return Err(RejectReason::FederateIdOutOfRange);
        }
        let mut inner = self.lock();
        if inner.coord.state(fed) == NodeState::Restarting {
            // A restarted incarnation: it rejoins when it proposes a start time.
            let stopping = inner.stop.in_progress;
            let slot = &mut inner.slots[usize::from(fed)];
            if slot.rejoining || stopping {
                return Err(RejectReason::FederateIdInUse);
            }
            slot.rejoining = true;
            return Ok(());
        }
        if inner.coord.state(fed) != NodeState::NotConnected || inner.slots[usize::from(fed)].joined {
            return Err(RejectReason::FederateIdInUse);
        }
        inner.coord.set_state(fed, NodeState::Pending);
        inner.slots[usize::from(fed)].joined = true;
        Ok(())
    }

    /// Gives back an admitted id whose handshake did not complete.
    pub fn abandon(&self, fed: FedId) {
        let mut inner = self.lock();
        let slot = &mut inner.slots[usize::from(fed)];
        if slot.rejoining && slot.out.is_none() {
            // Still Restarting: the next incarnation may try again.
            slot.rejoining = false;
        } else if slot.out.is_none() {
            inner.coord.set_state(fed, NodeState::NotConnected);
            inner.slots[usize::from(fed)].joined = false;
        }
    }

    /// Completes the handshake: neighbours known, queue open.
    pub fn join(
        &self,
        fed: FedId,
        upstreams: Vec<Upstream>,
        downstreams: Vec<FedId>,
        out: Arc<Outbox>,
        ip: Option<Ipv4Addr>,
    ) {
        let mut inner = self.lock();
        inner.coord.set_neighbors(fed, upstreams, downstreams);
        let slot = &mut inner.slots[usize::from(fed)];
        slot.out = Some(out);
        slot.ip = ip;
    }

    /// A start-time proposal; once all have proposed, everyone gets the
    /// same start time: the latest proposal plus the start delay.
    pub fn propose_start(&self, fed: FedId, proposal: Instant) {
        let mut inner = self.lock();
        if let (true, Some(start)) = (inner.slots[usize::from(fed)].rejoining, inner.start) {
            self.rejoin(&mut inner, fed, start);
            return;
        }
        inner.proposals += 1;
        inner.max_proposal = inner.max_proposal.max(proposal);
        tracing::debug!(fed, proposal, "start time proposed");
        if inner.proposals < usize::from(self.size) {
            return;
        }
        let start = inner.max_proposal.saturating_add(self.start_delay);
        inner.coord.set_start_time(start);
        inner.start = Some(start);
        tracing::info!(start, "all federates joined; start time agreed");
        for f in 0..self.size {
            if inner.coord.state(f) == NodeState::Pending {
                inner.coord.set_state(f, NodeState::Granted);
            }
            send(&inner, f, &Message::Timestamp(start));
        }
    }

    /// A restarted federate is back: it resumes at a tag the coordinator
    /// picks (RESUME), in the federation's original time line (TIMESTAMP).
    fn rejoin(&self, inner: &mut Inner, fed: FedId, start: Instant) {
        let now = (!self.restarts.fast).then(crate::connection::physical_now);
        let (resume, notices) = inner.coord.rejoin(fed, now);
        inner.slots[usize::from(fed)].rejoining = false;
        tracing::info!(fed, %resume, "federate rejoined after a restart");
        send(inner, fed, &Message::Resume(resume));
        send(inner, fed, &Message::Timestamp(start));
        deliver(inner, &notices);
    }

    pub fn next_event_tag(&self, fed: FedId, tag: Tag) {
        let mut inner = self.lock();
        inner.board.next_event_tag(fed, tag);
        let notices = inner.coord.next_event_tag(fed, tag);
        deliver(&mut inner, &notices);
    }

    pub fn latest_tag_confirmed(&self, fed: FedId, tag: Tag) {
        let mut inner = self.lock();
        inner.board.latest_tag_confirmed(fed, tag);
        let notices = inner.coord.latest_tag_confirmed(fed, tag);
        deliver(&mut inner, &notices);
    }

    /// Relays a tagged message (forwarded byte for byte) and accounts for it.
    pub fn relay_tagged(&self, from: FedId, msg: &Tagged<'_>) {
        let Tagged { port, fed: dest, tag, .. } = msg;
        if *dest >= self.size {
            tracing::error!(from, dest, port, "message for federate {dest}, which does not exist; dropped");
            return;
        }
        let mut inner = self.lock();
        match inner.coord.tagged_message(*dest, *tag) {
            // One that is down for a restart loses what is sent meanwhile,
            // by design (it was warned of when it failed): not worth a line each.
            Relay::Drop if inner.coord.state(*dest) == NodeState::Restarting => {
                tracing::debug!(from, dest, port, %tag, "message for a federate down for a restart; dropped")
            }
            // A federate that resigned processed every tag up to its stop:
            // this one is later (an `after` delay past the last tag).
            Relay::Drop if inner.slots[usize::from(*dest)].resigned => {
                tracing::debug!(from, dest, port, %tag, "message tagged after the end of a federate that has finished; dropped")
            }
            Relay::Drop => {
                tracing::warn!(from, dest, port, %tag, "message for a federate that is not connected (or for its incarnation before a restart); dropped")
            }
            Relay::Forward(notices) => {
                inner.board.relayed();
                send_tagged(&inner, msg);
                deliver(&mut inner, &notices);
            }
            Relay::Tardy(notices) => {
                tracing::warn!(from, dest, port, %tag, "message arrives after its destination completed that tag (STP violation); forwarded");
                inner.board.relayed();
                send_tagged(&inner, msg);
                deliver(&mut inner, &notices);
            }
        }
    }

    /// Relays PORT_ABSENT; it changes no coordination state.
    pub fn relay_port_absent(&self, from: FedId, msg: &Message) {
        let Message::PortAbsent { fed: dest, .. } = msg else { return };
        if *dest >= self.size {
            tracing::error!(from, dest, "port-absent for federate {dest}, which does not exist; dropped");
            return;
        }
        let inner = self.lock();
        send(&inner, *dest, msg);
    }

    pub fn address_query(&self, fed: FedId, remote: FedId) {
        let inner = self.lock();
        let (port, addr) = match inner.slots.get(usize::from(remote)) {
            Some(s) if s.out.is_some() => (s.server_port, s.ip.map_or([0; 4], |ip| ip.octets())),
            _ => (-1, [0; 4]),
        };
        send(&inner, fed, &Message::AddressQueryReply { port, addr });
    }

    /// Records where a federate takes runtime clock synchronization.
    pub fn set_clock_sync_udp(&self, fed: FedId, addr: std::net::SocketAddr) {
        self.lock().slots[usize::from(fed)].clock_sync_udp = Some(addr);
    }

    /// The agreed start time, once every federate has proposed one.
    pub fn start_time(&self) -> Option<Instant> {
        self.lock().start
    }

    /// Connected federates that take runtime clock synchronization, and
    /// whether any federate is still connected at all.
    pub fn clock_sync_targets(&self) -> (Vec<(FedId, std::net::SocketAddr)>, bool) {
        let inner = self.lock();
        let connected = inner.slots.iter().any(|s| s.out.is_some());
        let targets = inner
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.out.is_some())
            .filter_map(|(i, s)| s.clock_sync_udp.map(|a| (i as FedId, a)))
            .collect();
        (targets, connected)
    }

    pub fn address_advertisement(&self, fed: FedId, port: i32) {
        self.lock().slots[usize::from(fed)].server_port = port;
    }

    /// A federate asks to stop at `tag`: every other federate is asked, and
    /// the stop tag is the latest of all answers.
    pub fn stop_request(&self, fed: FedId, tag: Tag) {
        let mut inner = self.lock();
        if inner.slots[usize::from(fed)].requested_stop {
            return;
        }
        inner.stop.max_tag = inner.stop.max_tag.max(tag);
        if self.mark_stopping(&mut inner, fed) || inner.stop.in_progress {
            return;
        }
        inner.stop.in_progress = true;
        let request = Message::StopRequest(inner.stop.max_tag);
        for f in 0..self.size {
            if f == fed || inner.slots[usize::from(f)].requested_stop {
                continue;
            }
            if inner.slots[usize::from(f)].out.is_none() {
                // Gone: it cannot reply, and need not. One waiting to be
                // restarted will not be: its downstream must reach the stop tag.
                if inner.coord.state(f) == NodeState::Restarting {
                    tracing::warn!(
                        fed = f,
                        "the federation stops while federate {f} is down for a restart; going on without it"
                    );
                    self.give_up(&mut inner, f);
                }
                self.mark_stopping(&mut inner, f);
            } else {
                send(&inner, f, &request);
            }
        }
    }

    pub fn stop_reply(&self, fed: FedId, tag: Tag) {
        let mut inner = self.lock();
        inner.stop.max_tag = inner.stop.max_tag.max(tag);
        self.mark_stopping(&mut inner, fed);
    }

    /// Counts `fed` as having answered the stop protocol; grants the stop
    /// once all have. Returns whether the stop was granted.
    fn mark_stopping(&self, inner: &mut Inner, fed: FedId) -> bool {
        let slot = &mut inner.slots[usize::from(fed)];
        if !slot.requested_stop {
            slot.requested_stop = true;
            inner.stop.handling += 1;
        }
        if inner.stop.handling < usize::from(self.size) || inner.stop.granted {
            return inner.stop.granted;
        }
        inner.stop.granted = true;
        let stop = inner.stop.max_tag;
        tracing::info!(%stop, "stop granted");
        for f in 0..self.size {
            send(inner, f, &Message::StopGranted(stop));
        }
        true
    }

    /// A federate left: resigned (`failed` false), or failed or vanished.
    /// A restartable one that fails after the start is suspended instead:
    /// its downstream waits for it to rejoin.
    pub fn leave(&self, fed: FedId, failed: bool) -> Left {
        let left = self.leave_locked(fed, failed);
        self.flush();
        left
    }

    fn leave_locked(&self, fed: FedId, failed: bool) -> Left {
        let mut inner = self.lock();
        let (started, stopping) = (inner.start.is_some(), inner.stop.in_progress);
        let slot = &mut inner.slots[usize::from(fed)];
        let Some(out) = slot.out.take() else { return Left::Gone };
        out.close();
        if failed && slot.restartable && started && !stopping {
            slot.failures += 1;
            slot.rejoining = false;
            let failure = slot.failures;
            inner.coord.suspend(fed);
            tracing::warn!(fed, "federate failed; it is restartable: its downstream waits for it to rejoin (at most {:?}), and messages for it are dropped until then", self.restarts.timeout);
            return Left::Suspended { failure };
        }
        self.depart(&mut inner, fed, failed);
        Left::Gone
    }

    /// A suspended federate's time to rejoin is up: if it has not, the
    /// federation goes on without it, as after a failure.
    pub fn rejoin_deadline(&self, fed: FedId, failure: u32) {
        {
            let mut inner = self.lock();
            let slot = &inner.slots[usize::from(fed)];
            if inner.coord.state(fed) != NodeState::Restarting || slot.failures != failure || slot.rejoining {
                return;
            }
            tracing::error!(
                fed,
                "federate {fed} did not rejoin within {:?}; the federation goes on without it",
                self.restarts.timeout
            );
            self.give_up(&mut inner, fed);
        }
        self.flush();
    }

    /// Ends the wait for a suspended federate: it counts as failed.
    fn give_up(&self, inner: &mut Inner, fed: FedId) {
        inner.slots[usize::from(fed)].rejoining = false;
        self.depart(inner, fed, true);
    }

    /// Removes `fed` from coordination for good and counts it as left.
    fn depart(&self, inner: &mut Inner, fed: FedId, failed: bool) {
        let notices = inner.coord.resign(fed);
        deliver(inner, &notices);
        inner.slots[usize::from(fed)].resigned = !failed;
        inner.left += 1;
        inner.failed |= failed;
        if inner.stop.in_progress {
            self.mark_stopping(inner, fed);
        }
        if inner.left == usize::from(self.size) {
            let outcome = if inner.failed { Outcome::SomeFailed } else { Outcome::AllResigned };
            let _ = self.outcome.send(outcome);
        }
    }

    /// Tells every connected federate that the RTI is going away.
    pub fn fail_all(&self) -> usize {
        let mut told = 0;
        {
            let inner = self.lock();
            for f in 0..self.size {
                if inner.slots[usize::from(f)].out.is_some() {
                    send(&inner, f, &Message::Failed);
                    told += 1;
                }
            }
        }
        self.flush();
        told
    }
}

fn send(inner: &Inner, fed: FedId, msg: &Message) {
    push(inner, fed, |buf| encode(msg, buf));
}

/// Relays a TAGGED_MESSAGE as it came (to `msg.fed`), its payload copied
/// once, from the sender's read buffer into the destination's outbox.
fn send_tagged(inner: &Inner, msg: &Tagged<'_>) {
    push(inner, msg.fed, |buf| encode_tagged(false, msg.port, msg.fed, msg.tag, msg.payload, buf));
}

fn push(inner: &Inner, fed: FedId, encode: impl FnOnce(&mut Vec<u8>)) {
    if let Some(out) = &inner.slots[usize::from(fed)].out {
        if out.push(encode) {
            inner.dirty.add(out);
        }
    }
}

/// As [`push`], for a hint that may wait for company (see `outbox`).
fn push_hint(inner: &Inner, fed: FedId, encode: impl FnOnce(&mut Vec<u8>)) {
    if let Some(out) = &inner.slots[usize::from(fed)].out {
        if out.push_hint(encode) {
            inner.dirty.add(out);
        }
    }
}

fn deliver(inner: &mut Inner, notices: &[Notice]) {
    for n in notices {
        inner.board.granted(n.to, &n.grant);
        let msg = match n.grant {
            Grant::Tag(t) => Message::TagAdvanceGrant(t),
            Grant::Provisional(t) => Message::ProvisionalTagAdvanceGrant(t),
            Grant::DownstreamNext(t) => Message::DownstreamNextEventTag(t),
        };
        tracing::debug!(to = n.to, ?msg, "grant");
        if let Some(t) = &inner.trace {
            t.record(n.to, &n.grant);
        }
        match n.grant {
            Grant::DownstreamNext(_) => push_hint(inner, n.to, |buf| encode(&msg, buf)),
            Grant::Tag(_) | Grant::Provisional(_) => send(inner, n.to, &msg),
        }
    }
}
