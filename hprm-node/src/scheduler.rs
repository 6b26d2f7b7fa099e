//! The scheduler: one federate's event loop.
//!
//! One thread owns the event queue and advances logical time tag by tag.
//! Before processing tag `g` it must be *allowed* to:
//!
//! - always: `g` is not past a stop barrier (a stop is being agreed);
//! - centralized: the RTI granted `g` (TAG ≥ g, or PTAG = g, in which case
//!   each level of reactions also waits until the network inputs it reads
//!   have a known status at `g`); a federate whose events come from
//!   physical time sends the NET for `g` only once physical time reached
//!   it, and tags those events no earlier than any NET it sent;
//! - decentralized: every network input's status is known at `g`, or
//!   physical time passed `g.time + STP`;
//! - real-time mode: physical time reached `g.time`.
//!
//! While not allowed it sleeps on the inbox (with a deadline when waiting
//! for physical time); everything that can change the answer (a message,
//! a grant, a physical action, a stop) arrives there. Processing a tag
//! runs the triggered reactions level by level (`level`), applies their
//! effects in reaction order, and sends each network output as soon as no
//! reaction of the tag can set it any more: its value, or where a receiver
//! may be waiting for it, a port-absent notice.

use std::any::Any;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use hprm_rti::tag::{Delay, Tag, FOREVER, NEVER};
use hprm_rti::wire::Message;

use crate::clock::Clock;
use crate::context::{Body, Ctx, Effect, TagView};
use crate::error::NodeError;
use crate::ids::{duration_ns, FederateId, ReactionId, TriggerId, Value};
use crate::inbox::{Inbox, Incoming, Undelivered};
use crate::loss::{Loss, Losses};
use crate::net::socket::FrameWriter;
use crate::payload::Encoder;
use crate::program::{Coordination, Program, TriggerKind};
use crate::sync::Mutex;

/// While idle, a centralized federate whose events can come from physical
/// time (physical actions, physical connections into it) and that has
/// downstream federates processes a tag at least this often (LF's
/// ADVANCE_MESSAGE_INTERVAL): its NETs never run ahead of physical time,
/// so these tags are what lets its downstreams advance, at most this much
/// behind physical time.
const ADVANCE_INTERVAL: i64 = 10_000_000;

/// What a federate did, reported when it ends.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    pub federate: String,
    /// The last tag processed (the stop tag).
    pub final_tag: Option<Tag>,
    pub tags: u64,
    pub reactions: u64,
    /// Network inputs that arrived after their tag had passed (decentralized).
    pub tardy: u64,
    pub deadline_misses: u64,
    /// Messages whose payload could not be decoded (reported and dropped).
    pub decode_errors: u64,
    pub encode_errors: u64,
    /// The first few of those errors, as logged.
    pub problems: Vec<String>,
    /// Every message lost or late, by port (`crate::loss`). Deliveries lost
    /// because the object store died (`Loss::StoreLost`) count one per
    /// receiving federate of a value this federate could not send through
    /// the store (the receivers see the port absent), plus one per received
    /// message whose objects died with the store before they could be read;
    /// not counted as encode or decode errors, nor logged one by one: the
    /// store's death is logged once ([`crate::payload::StoreLink`]).
    pub losses: Losses,
    /// Downstream peers reached over a Unix socket (decentralized).
    pub peers_over_unix: usize,
    /// The RTI was reached over its Unix socket (`LocalTransport::Unix`,
    /// the RTI on this host).
    pub rti_over_unix: bool,
    /// Runtime clock synchronization rounds with the RTI whose estimate was
    /// kept (`RtiConfig::clock_sync` and the RTI's `--clock-sync on`).
    pub clock_sync_rounds: u64,
    /// NETs sent to the RTI (centralized), and NETs skipped because the
    /// RTI's DNET said no downstream federate needed them.
    pub nets_sent: u64,
    pub nets_skipped: u64,
}

/// How many error messages a [`RunReport`] keeps.
const KEPT_PROBLEMS: usize = 16;

impl RunReport {
    /// The federate's exit summary: one line, a warning if it lost any
    /// message or got any late, saying which and where.
    pub fn log_done(&self) {
        let (name, tags, reactions) = (&self.federate, self.tags, self.reactions);
        if self.losses.is_empty() {
            tracing::info!(federate = %name, tags, reactions, "done; {}", self.losses.summary());
        } else {
            tracing::warn!(federate = %name, tags, reactions, "done; {}", self.losses.summary());
        }
    }

    fn problem(&mut self, msg: String) {
        if self.problems.len() < KEPT_PROBLEMS {
            self.problems.push(msg);
        }
    }
}

/// How this federate talks to the others.
pub(crate) enum Transport {
    /// A program of one federate: no RTI.
    Alone,
    /// Through the RTI (centralized): tagged messages and absents are relayed.
    Rti(FrameWriter),
    /// Decentralized: coordination messages to the RTI, data peer to peer.
    Peers { rti: FrameWriter, peers: HashMap<u16, FrameWriter> },
}

impl Transport {
    fn rti(&mut self) -> Option<&mut FrameWriter> {
        match self {
            Transport::Alone => None,
            Transport::Rti(w) | Transport::Peers { rti: w, .. } => Some(w),
        }
    }

    /// Writes everything queued. A downstream peer whose connection broke
    /// loses its messages and is dropped; the others go on. `ending`: see
    /// [`peer_broke`].
    fn flush(&mut self, ending: bool) -> Result<(), NodeError> {
        if let Transport::Peers { peers, .. } = self {
            peers.retain(|fed, w| match w.flush() {
                Ok(()) => true,
                Err(e) => {
                    peer_broke(*fed, &e, ending);
                    false
                }
            });
        }
        match self.rti() {
            Some(w) => w.flush().map_err(|e| NodeError::RtiLost(crate::hosts::rti_io_error("sending to the RTI", &e))),
            None => Ok(()),
        }
    }
}

pub(crate) struct Options {
    pub fast: bool,
    pub workers: usize,
    pub start: i64,
    /// A restarted federate rejoining a running program: the tag it
    /// resumes at (startup reactions and the first timer events are there
    /// or after it; logical time keeps counting from `start`).
    pub resume: Option<Tag>,
    /// systemd's watchdog (a `WatchdogSec=` unit): pinged from this loop,
    /// so a reaction that never returns stops the pings.
    pub watchdog: Option<hprm_sd_notify::Watchdog>,
    /// Where the program's federates run, when it spans hosts.
    pub hosts: Option<crate::hosts::Hosts>,
    /// A replay's recorded deadline decisions: taken instead of the clock.
    pub decisions: Option<crate::decisions::Decisions>,
}

struct Event {
    trigger: TriggerId,
    value: Value,
    tardy: Option<Tag>,
}

struct Handlers {
    body: Body,
    deadline: Option<(i64, Body)>,
    tardy: Option<Body>,
}

struct ReactorRt {
    state: Box<dyn Any + Send>,
    reactions: HashMap<ReactionId, Handlers>,
}

/// What the runtime needs to know about a reaction of this federate.
struct ReactionMeta {
    reactor: usize,
    level: u32,
    triggers: Vec<TriggerId>,
    effects: Vec<TriggerId>,
    path: String,
    /// Its name's index in the trace, when tracing.
    trace_name: u32,
    /// Its reactor's (index, width) in a bank.
    bank: Option<(u32, u32)>,
}

#[derive(Clone, Copy)]
struct NetDest {
    fed: u16,
    /// The connection's index in the program: what the wire calls a port.
    port: u16,
    delay: Delay,
    physical: bool,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Mode {
    Alone,
    Centralized,
    Decentralized { stp: i64 },
}

enum Ready {
    Now,
    /// Wait for the inbox, at most until this physical time (ns).
    Wait(Option<i64>),
}

/// A federate's scheduler, its state split by role (as tokio's worker
/// splits its `Core` from what it shares): the [`Plan`] fixed at start,
/// the [`TagState`] of the tag being processed and the events ahead, the
/// [`CoordState`] of its coordination with the RTI and its peers, and the
/// [`StopState`]. The remaining fields are the handles it shares with other
/// threads (clock, inbox, status board, taps), the encoder, and what the run
/// reports.
///
/// Invariant: one thread owns it and runs its event loop; other threads
/// reach it only through the inbox.
pub(crate) struct Scheduler {
    plan: Plan,
    tag: TagState,
    coord: CoordState,
    stop: StopState,

    clock: Arc<Clock>,
    inbox: Arc<Inbox>,
    encoder: Encoder,
    /// For outputs with a backpressure policy of their own: the encoder
    /// waiting for space as that policy says (`encoder` otherwise).
    output_encoders: HashMap<TriggerId, Encoder>,
    /// systemd's watchdog, pinged from the loop (taken from [`Options`]).
    watchdog: Option<hprm_sd_notify::Watchdog>,
    /// Items drained from the inbox and not handled yet, in arrival order.
    pending: VecDeque<Incoming>,
    /// An error met while handling an item, returned by the loop at its top.
    fatal: Option<NodeError>,
    report: RunReport,
    /// What `hprm ps` sees of this federate.
    board: Arc<crate::status::Board>,
    tap: Option<Arc<crate::tap::TapHub>>,
    /// The recorder's feed (`hprm launch --record`).
    record: Option<crate::record::Feed>,
    /// A replay's recorded physical action values (`hprm replay`).
    replay: Option<PhysicalReplay>,
    /// This host's `hprm-link`, when the program spans hosts.
    link: Option<crate::hosts::LinkClient>,
}

/// A replay's physical actions: fed from the recording at their recorded
/// tags, while what the program's own threads schedule (the live sensor)
/// is dropped. Sensor threads are the program's code, started by its
/// reactions, so they still run: only their values are not taken.
///
/// Invariant: the queue always holds the earliest recorded values not yet
/// processed (those of one tag, `queued`), so no NET this federate sends
/// promises a tag past them.
struct PhysicalReplay {
    events: crate::record::PhysicalEvents,
    decoder: crate::payload::Decoder,
    /// The tag (absolute) of the recorded values in the queue.
    queued: Option<Tag>,
    /// Live schedules dropped.
    dropped: u64,
}

/// What is fixed when the federate starts: the program, this federate's
/// reactions and their levels, and the fan-out of its ports.
///
/// Invariant: nothing here changes after [`Plan::new`] (the reactors'
/// states change, behind their own locks, while their reactions run); the
/// tables indexed by trigger have one entry per trigger of the program,
/// those indexed by level `max_level + 1` (`resolve_after`: `+ 2`).
struct Plan {
    program: Program,
    fed: FederateId,
    name: String,
    mode: Mode,
    opts: Options,
    reactors: Vec<Option<Mutex<ReactorRt>>>,
    meta: HashMap<ReactionId, ReactionMeta>,
    max_level: u32,
    /// By trigger: reactions of this federate it triggers.
    triggered: Vec<Vec<ReactionId>>,
    /// By output: connections inside this federate (to, delay, physical).
    local: Vec<Vec<(TriggerId, Delay, bool)>>,
    /// By output: receivers in other federates.
    remote: Vec<Vec<NetDest>>,
    /// By output: the deliveries its store objects are created with (see
    /// `crate::hosts`: one per receiver on this host, one per other host).
    fanout: Vec<u32>,
    /// By output: the other hosts with receivers of it, and how many each.
    pushes: Vec<Vec<(String, u32)>>,
    /// By level: network outputs whose last possible writer is at that
    /// level; index `max_level + 1` holds outputs no reaction writes.
    resolve_after: Vec<Vec<TriggerId>>,
    /// By level: network inputs read first at that level.
    gate: Vec<Vec<TriggerId>>,
    /// By input: the lowest level reading it.
    reader_level: Vec<u32>,
    net_inputs: Vec<TriggerId>,
    /// By input: the peer feeding it.
    input_peer: Vec<Option<u16>>,
    /// By input: fed by a physical connection (`~>`).
    physical_input: Vec<bool>,
    /// By input: the connection its messages arrive on (see [`Routes`]).
    input_wire: Vec<Option<u16>>,
    /// By input: how many of its messages may wait to be processed
    /// (`keep-last-N` on the output it is connected to).
    keep_last: Vec<Option<u32>>,
    /// By input: the inputs its messages also go to (`routes`).
    shared: Vec<Vec<TriggerId>>,
    has_physical_actions: bool,
    /// Centralized, real-time, with downstream federates, and events that
    /// physical time produces: the least delay from physical time to their
    /// tags (the smallest min delay of its physical actions; 0 with a
    /// physical connection into it). Such a federate sends NET(g) only
    /// once physical time plus this lead reached `g.time`.
    physical_lead: Option<i64>,
    upstreams: usize,
    downstreams: usize,
    start: Tag,
    /// The first tag this process may act at: `start`, or the resume tag
    /// of a restarted federate.
    first: Tag,
    /// The value of startup, shutdown and timer events.
    unit: Value,
}

/// The tag being processed and the events ahead.
///
/// Invariants: `values` and `tardy` are `None` outside a tag; inside one
/// (`in_tag`), exactly the triggers in `present` have a value. `buckets`
/// hold, by level, the reactions triggered at the current tag whose level
/// has not run (`passed_level` is the last level that ran, -1 before the
/// first). `queue` holds the events ahead, by tag. The vectors are
/// allocated once and reused from tag to tag: processing a tag allocates
/// nothing here.
struct TagState {
    values: Vec<Option<Value>>,
    tardy: Vec<Option<Tag>>,
    present: Vec<TriggerId>,
    buckets: Vec<Vec<ReactionId>>,
    queue: BTreeMap<Tag, Vec<Event>>,
    current: Tag,
    in_tag: bool,
    passed_level: i64,
}

/// Coordination with the RTI and the peers: grants, NET/LTC, input
/// statuses, and the connections themselves.
///
/// Invariants: `granted` only grows; `promised` is the highest NET ever
/// sent and `last_net <= promised`; `skipped_net` is NEVER unless the last
/// NET was skipped for the DNET (`last_dnet`); `known[i]` is the tag up to
/// which network input `i`'s status is known, and only grows.
struct CoordState {
    transport: Transport,
    granted: Tag,
    provisional: Option<Tag>,
    /// The NET the RTI holds for this federate: the last one sent, or
    /// lower where the RTI relayed a message here at an earlier tag.
    last_net: Tag,
    /// The highest NET ever sent: the RTI may have granted downstream
    /// federates every tag before it.
    promised: Tag,
    /// The RTI's last DNET (downstream next event tag): NETs up to it
    /// concern no downstream federate, so they may be skipped (reactor-c's
    /// rules, `net_needed`). NEVER until the first DNET; lowered to the tag
    /// of every message this federate sends, whose receiver may now have
    /// an earlier event than the RTI knew when it computed the DNET.
    last_dnet: Tag,
    received_any_dnet: bool,
    /// A NET skipped for the DNET, sent after all if a later DNET falls
    /// below it; NEVER when the last NET was sent.
    skipped_net: Tag,
    known: Vec<Tag>,
    closed_peers: Vec<u16>,
    /// With a `physical_lead`: the tag processed at the latest while idle
    /// (ADVANCE_INTERVAL past physical time), so downstreams can advance.
    advance_target: Option<Tag>,
    /// Fast decentralized mode: the tag waiting for its inputs, and until
    /// when (physical time) it waits.
    stp_wait: Option<(Tag, i64)>,
}

/// Stopping.
///
/// Invariants: `stop_tag` only decreases (a timeout, then an agreed
/// stop); no tag past `stop_barrier` is processed while a stop is being
/// agreed; `resigned` is set once, when the federate leaves.
struct StopState {
    stop_tag: Tag,
    stop_barrier: Option<Tag>,
    stop_handled: bool,
    resigned: bool,
}

impl Plan {
    /// This federate's part of `program`: its reactions, their levels, and
    /// where each of its ports leads.
    fn new(
        mut program: Program,
        fed: FederateId,
        opts: Options,
        transport: &Transport,
        federate_index: &dyn Fn(FederateId) -> u16,
    ) -> Result<Plan, NodeError> {
        let levels = crate::level::levels(&program, fed)
            .map_err(|e| crate::error::ProgramError { program: program.name.clone(), problems: vec![e] })?;
        let n = program.triggers.len();
        let mode = match (transport, program.coordination) {
            (Transport::Alone, _) => Mode::Alone,
            (_, Coordination::Centralized) => Mode::Centralized,
            (_, Coordination::Decentralized { stp }) => Mode::Decentralized { stp: duration_ns(stp) },
        };
        let name = program.federate_name(fed).to_string();

        let (reactors, meta, triggered, max_level) = take_reactions(&mut program, fed, &name, &levels);
        let Routes { local, remote, input_peer, physical_input, shared, input_wire } =
            routes(&program, fed, federate_index);
        let keep_last = keep_last(&program);
        let (fanout, pushes) = match &opts.hosts {
            None => (remote.iter().map(|d| d.len() as u32).collect(), vec![Vec::new(); remote.len()]),
            Some(hosts) => remote
                .iter()
                .map(|dests| hosts.fanout(dests.iter().map(|d| program.federates[usize::from(d.fed)].name.as_str())))
                .unzip(),
        };

        // The level after which each network output is final.
        let mut resolve_after = vec![Vec::new(); max_level as usize + 2];
        for (i, dests) in remote.iter().enumerate() {
            if dests.is_empty() {
                continue;
            }
            let last = meta.values().filter(|m| m.effects.contains(&TriggerId(i as u32))).map(|m| m.level).max();
            let slot = last.map_or(max_level as usize + 1, |l| l as usize);
            resolve_after[slot].push(TriggerId(i as u32));
        }
        let net_inputs: Vec<TriggerId> =
            (0..n).filter(|&i| input_peer[i].is_some()).map(|i| TriggerId(i as u32)).collect();
        let mut reader_level = vec![u32::MAX; n];
        for (rid, m) in &meta {
            let def = &program.reactions[rid.index()];
            for t in def.triggers.iter().chain(&def.sources) {
                reader_level[t.index()] = reader_level[t.index()].min(m.level);
            }
        }
        let mut gate = vec![Vec::new(); max_level as usize + 1];
        // A physical connection has no absent notices: its status at a tag
        // never becomes known, and waiting for it would never end.
        for &i in net_inputs.iter().filter(|i| !physical_input[i.index()]) {
            let l = reader_level[i.index()];
            if l != u32::MAX {
                gate[l as usize].push(i);
            }
        }
        let has_physical_actions = program.federates[fed.index()].reactors.iter().any(|r| {
            program.triggers.iter().any(|t| t.reactor == *r && matches!(t.kind, TriggerKind::PhysicalAction { .. }))
        });
        let upstreams = program.upstreams(fed).len();
        let downstreams = program.downstreams(fed).len();
        let physical_lead = match mode {
            Mode::Centralized if downstreams > 0 && !opts.fast => {
                let actions = program.federates[fed.index()].reactors.iter().flat_map(|r| {
                    program.triggers.iter().filter(move |t| t.reactor == *r).filter_map(|t| match t.kind {
                        TriggerKind::PhysicalAction { min_delay, .. } => Some(duration_ns(min_delay)),
                        _ => None,
                    })
                });
                let connections =
                    program.connections.iter().filter(|c| c.physical && program.federate_of(c.to) == fed).map(|_| 0);
                actions.chain(connections).min()
            }
            _ => None,
        };
        let start = Tag::new(opts.start, 0);
        let first = opts.resume.map_or(start, |r| r.max(start));
        Ok(Plan {
            program,
            fed,
            name,
            mode,
            opts,
            reactors,
            meta,
            max_level,
            triggered,
            local,
            remote,
            fanout,
            pushes,
            resolve_after,
            gate,
            reader_level,
            net_inputs,
            input_peer,
            keep_last,
            physical_input,
            input_wire,
            shared,
            has_physical_actions,
            physical_lead,
            upstreams,
            downstreams,
            start,
            first,
            unit: Arc::new(()),
        })
    }
}

/// Takes this federate's reactor states and reaction bodies out of
/// `program`: the reactors (by reactor id, `None` for other federates'),
/// each reaction's metadata, the reactions each trigger triggers, and the
/// highest level.
#[allow(clippy::type_complexity)]
fn take_reactions(
    program: &mut Program,
    fed: FederateId,
    name: &str,
    levels: &HashMap<ReactionId, u32>,
) -> (Vec<Option<Mutex<ReactorRt>>>, HashMap<ReactionId, ReactionMeta>, Vec<Vec<ReactionId>>, u32) {
    let n = program.triggers.len();
    let mut reactors: Vec<Option<Mutex<ReactorRt>>> = (0..program.reactors.len()).map(|_| None).collect();
    let mut meta = HashMap::new();
    let mut triggered: Vec<Vec<ReactionId>> = vec![Vec::new(); n];
    let mut max_level = 0;
    for &r in &program.federates[fed.index()].reactors.clone() {
        let bank = program.bank_member(r);
        let rdef = &mut program.reactors[r.index()];
        let state = rdef.state.take().unwrap_or_else(|| Box::new(()));
        let rname = rdef.name.clone();
        let mut hs = HashMap::new();
        for &rid in &rdef.reactions.clone() {
            let def = &mut program.reactions[rid.index()];
            let body = def.body.take().unwrap_or_else(|| Box::new(|_, _| {}));
            let deadline = def.deadline.take().map(|(d, b)| (duration_ns(d), b));
            hs.insert(rid, Handlers { body, deadline, tardy: def.tardy.take() });
            let level = levels.get(&rid).copied().unwrap_or(0);
            max_level = max_level.max(level);
            for t in &def.triggers {
                triggered[t.index()].push(rid);
            }
            let path = format!("{name}.{rname}.{}", def.name);
            let trace_name = crate::trace::tracer().map_or(0, |t| t.name(&path));
            meta.insert(
                rid,
                ReactionMeta {
                    reactor: r.index(),
                    level,
                    triggers: def.triggers.clone(),
                    effects: def.effects.clone(),
                    path,
                    trace_name,
                    bank,
                },
            );
        }
        reactors[r.index()] = Some(Mutex::new(ReactorRt { state, reactions: hs }));
    }
    (reactors, meta, triggered, max_level)
}

/// By input, the backlog its connection's `keep-last-N` allows.
fn keep_last(program: &Program) -> Vec<Option<u32>> {
    let mut keep = vec![None; program.triggers.len()];
    for c in &program.connections {
        keep[c.to.index()] = program.backpressure_of(c.from).keep_last();
    }
    keep
}

/// Where each port of this federate leads, by trigger.
struct Routes {
    /// By output: connections inside the federate (to, delay, physical).
    local: Vec<Vec<(TriggerId, Delay, bool)>>,
    /// By output: receivers in other federates, one per message sent.
    remote: Vec<Vec<NetDest>>,
    /// By input: the peer feeding it.
    input_peer: Vec<Option<u16>>,
    /// By input: fed by a physical connection.
    physical_input: Vec<bool>,
    /// By input: the other inputs of this federate that its messages
    /// stand for (see [`routes`]).
    shared: Vec<Vec<TriggerId>>,
    /// By input: the connection its messages arrive on (none for the
    /// inputs whose messages another's carry).
    input_wire: Vec<Option<u16>>,
}

/// Where each port of this federate leads: connections inside the
/// federate (by output), receivers in other federates (by output), the
/// peer feeding each network input, which inputs are physical.
///
/// One output's connections to several inputs of one other federate with
/// the same delay (a broadcast to a bank whose members are threads of one
/// federate) carry one message, on the first of them: its receiver
/// decodes it once and delivers the value to every one of those inputs,
/// by reference. Sender and receiver group connections alike, from the
/// graph every process holds (invariant), so no message names the others.
fn routes(program: &Program, fed: FederateId, federate_index: &dyn Fn(FederateId) -> u16) -> Routes {
    let n = program.triggers.len();
    let mut r = Routes {
        local: vec![Vec::new(); n],
        remote: vec![Vec::new(); n],
        input_peer: vec![None; n],
        physical_input: vec![false; n],
        shared: vec![Vec::new(); n],
        input_wire: vec![None; n],
    };
    // (output, receiving federate, delay, physical) -> the first input.
    let mut first: HashMap<(TriggerId, FederateId, Option<i64>, bool), TriggerId> = HashMap::new();
    for (wire, c) in program.connections.iter().enumerate() {
        r.physical_input[c.to.index()] = c.physical;
        let (from_fed, to_fed) = (program.federate_of(c.from), program.federate_of(c.to));
        if from_fed == fed && to_fed == fed {
            r.local[c.from.index()].push((c.to, c.delay, c.physical));
            continue;
        }
        let delay = match c.delay {
            Delay::None => None,
            Delay::After(d) => Some(d),
        };
        let leader = *first.entry((c.from, to_fed, delay, c.physical)).or_insert(c.to);
        if from_fed == fed && leader == c.to {
            r.remote[c.from.index()].push(NetDest {
                fed: federate_index(to_fed),
                port: wire as u16,
                delay: c.delay,
                physical: c.physical,
            });
        } else if to_fed == fed {
            r.input_peer[c.to.index()] = Some(federate_index(from_fed));
            if leader != c.to {
                r.shared[leader.index()].push(c.to);
            } else {
                r.input_wire[c.to.index()] = Some(wire as u16);
            }
        }
    }
    r
}

impl TagState {
    fn new(triggers: usize, max_level: u32) -> TagState {
        TagState {
            values: vec![None; triggers],
            tardy: vec![None; triggers],
            present: Vec::new(),
            buckets: vec![Vec::new(); max_level as usize + 1],
            queue: BTreeMap::new(),
            current: NEVER,
            in_tag: false,
            passed_level: -1,
        }
    }
}

impl CoordState {
    fn new(plan: &Plan, transport: Transport) -> CoordState {
        let (program, fed, start) = (&plan.program, plan.fed, plan.start);
        // Nothing reaches an input before its sender's start tag plus the
        // connection's delay: that much of its status is known at once (so a
        // federate on a loop does not wait the STP at its first tags).
        let mut known = vec![NEVER; program.triggers.len()];
        for c in program
            .connections
            .iter()
            .filter(|c| program.federate_of(c.to) == fed && program.federate_of(c.from) != fed && !c.physical)
        {
            known[c.to.index()] = match c.delay {
                Delay::After(d) if d > 0 => Tag::new(start.time.saturating_add(d), 0).latest_earlier(),
                Delay::After(_) => start,
                Delay::None => NEVER,
            };
        }
        CoordState {
            transport,
            granted: NEVER,
            provisional: None,
            last_net: NEVER,
            promised: NEVER,
            last_dnet: NEVER,
            received_any_dnet: false,
            skipped_net: NEVER,
            known,
            closed_peers: Vec::new(),
            advance_target: None,
            stp_wait: None,
        }
    }
}

impl StopState {
    fn new(plan: &Plan) -> StopState {
        let stop_tag = match plan.program.timeout {
            Some(t) => Tag::new(plan.opts.start.saturating_add(duration_ns(t)), 0),
            None => FOREVER,
        };
        StopState { stop_tag, stop_barrier: None, stop_handled: false, resigned: false }
    }
}

impl Scheduler {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        program: Program,
        fed: FederateId,
        mut opts: Options,
        clock: Arc<Clock>,
        inbox: Arc<Inbox>,
        encoder: Encoder,
        transport: Transport,
        board: Arc<crate::status::Board>,
        federate_index: &dyn Fn(FederateId) -> u16,
    ) -> Result<Scheduler, NodeError> {
        let peers_over_unix = match &transport {
            Transport::Peers { peers, .. } => {
                peers.values().filter(|w| matches!(w.stream(), crate::net::socket::Stream::Unix(_))).count()
            }
            _ => 0,
        };
        let rti_over_unix = match &transport {
            Transport::Alone => false,
            Transport::Rti(w) | Transport::Peers { rti: w, .. } => {
                matches!(w.stream(), crate::net::socket::Stream::Unix(_))
            }
        };
        let watchdog = opts.watchdog.take();
        let link = opts.hosts.as_ref().map(|h| crate::hosts::LinkClient::new(&h.link));
        let plan = Plan::new(program, fed, opts, &transport, federate_index)?;
        // Outputs whose policy waits for space otherwise than the default.
        let output_encoders = (0..plan.program.triggers.len())
            .map(|i| TriggerId(i as u32))
            .filter(|&t| plan.program.backpressure.contains_key(&t))
            .map(|t| (t, encoder.clone().with_wait_for_space(plan.program.backpressure_of(t).wait_for_space())))
            .collect();
        let report = RunReport { federate: plan.name.clone(), peers_over_unix, rti_over_unix, ..RunReport::default() };
        board.name_reactions(plan.meta.iter().map(|(r, m)| (r.index(), m.path.clone())).collect());
        Ok(Scheduler {
            tag: TagState::new(plan.program.triggers.len(), plan.max_level),
            coord: CoordState::new(&plan, transport),
            stop: StopState::new(&plan),
            plan,
            clock,
            inbox,
            encoder,
            output_encoders,
            watchdog,
            pending: VecDeque::new(),
            fatal: None,
            report,
            board,
            tap: None,
            record: None,
            replay: None,
            link,
        })
    }

    /// The counters this federate's status is made of.
    pub(crate) fn board(&self) -> Arc<crate::status::Board> {
        self.board.clone()
    }

    /// Copies what this federate sends to the taps of `hub`.
    pub(crate) fn set_tap(&mut self, hub: Arc<crate::tap::TapHub>) {
        self.tap = Some(hub);
    }

    /// Copies what this federate sends on the feed's ports to the
    /// recorder, which counts as one more delivery of each (its store
    /// objects stay until it has written them).
    pub(crate) fn set_record(&mut self, feed: crate::record::Feed) {
        for out in feed.ports() {
            self.plan.fanout[out.index()] += 1;
        }
        self.record = Some(feed);
    }

    /// Feeds this federate's physical actions from a replay's recorded
    /// values (see [`PhysicalReplay`]) instead of their live schedules.
    pub(crate) fn set_physical_replay(
        &mut self,
        events: crate::record::PhysicalEvents,
        decoder: crate::payload::Decoder,
    ) {
        self.replay = Some(PhysicalReplay { events, decoder, queued: None, dropped: 0 });
    }

    /// Puts the next recorded physical values (all of the earliest tag not
    /// yet queued) in the queue once the last ones were processed.
    fn feed_recorded_physical(&mut self) -> Result<(), NodeError> {
        let current = self.tag.current;
        let Some(r) = &mut self.replay else { return Ok(()) };
        if r.queued.is_some_and(|t| t > current) {
            return Ok(());
        }
        r.queued = None;
        let start = self.plan.start.time;
        let mut due = Vec::new();
        loop {
            let err = |e: crate::record::RecordError| NodeError::Record(e.to_string());
            let Some(next) = r.events.peek().map_err(err)? else { break };
            let tag = Tag::new(start.saturating_add(next.tag.time), next.tag.microstep);
            if r.queued.is_some_and(|q| q != tag) {
                break;
            }
            r.queued = Some(tag);
            if let Some(e) = r.events.take().map_err(err)? {
                due.push((tag, e));
            }
        }
        for (tag, e) in due {
            let fed = &self.plan.name;
            let Some(action) = (0..self.plan.program.triggers.len()).map(|i| TriggerId(i as u32)).find(|&t| {
                matches!(self.plan.program.triggers[t.index()].kind, TriggerKind::PhysicalAction { .. })
                    && self.plan.program.reactors[self.plan.program.triggers[t.index()].reactor.index()].federate
                        == self.plan.fed
                    && self.plan.program.port_path(t) == e.action
            }) else {
                return Err(NodeError::Record(format!(
                    "the recording has values of physical action {}, which federate {fed} of this program does not declare;                      replay it with the program that was recorded",
                    e.action
                )));
            };
            let TriggerKind::PhysicalAction { codec: Some((_, decode)), .. } =
                self.plan.program.triggers[action.index()].kind
            else {
                return Err(NodeError::Record(format!(
                    "physical action {} is opaque: its recorded values cannot be decoded",
                    e.action
                )));
            };
            let decoder = match &self.replay {
                Some(r) => r.decoder.clone(),
                None => return Ok(()),
            };
            let value = decode(&e.payload, &decoder).map_err(|err| {
                NodeError::Record(format!(
                    "the recorded value of physical action {} at {}/{} cannot be decoded ({err});                      replay it with the program that was recorded",
                    e.action,
                    e.tag.time,
                    e.tag.microstep
                ))
            })?;
            // A recorded tag is never earlier than the tag processed when it
            // was taken; the same holds in the replay, which processes the same tags.
            self.push_event(tag.max(self.after()), action, value, None);
        }
        Ok(())
    }

    /// Runs the federate to its stop tag, then resigns.
    pub(crate) fn run(mut self) -> Result<RunReport, NodeError> {
        self.schedule_initial();
        let result = self.event_loop();
        if let (Some(feed), Some(last)) = (&mut self.record, self.report.final_tag) {
            feed.ended_at(last);
        }
        self.leave(result.is_ok());
        result.map(|()| self.report)
    }

    fn schedule_initial(&mut self) {
        let first = self.plan.first;
        for i in 0..self.plan.program.triggers.len() {
            let t = &self.plan.program.triggers[i];
            if self.plan.program.reactors[t.reactor.index()].federate != self.plan.fed {
                continue;
            }
            match t.kind {
                TriggerKind::Startup => self.push_event(first, TriggerId(i as u32), self.plan.unit.clone(), None),
                TriggerKind::Timer { offset, period } => {
                    let at = self.plan.start.time.saturating_add(duration_ns(offset));
                    if let Some(tag) = first_timer_tag(at, duration_ns(period), first) {
                        self.push_event(tag, TriggerId(i as u32), self.plan.unit.clone(), None);
                    }
                }
                _ => {}
            }
        }
    }

    /// Drops the oldest messages of `port` waiting in the event queue until
    /// at most `n` are left (`keep-last-N`, before the next one is queued),
    /// counting each.
    fn keep_newest(&mut self, port: TriggerId, n: u32) {
        let waiting = self.tag.queue.values().flatten().filter(|e| e.trigger == port).count();
        for _ in n as usize..waiting {
            let Some(tag) = self.tag.queue.iter().find(|(_, es)| es.iter().any(|e| e.trigger == port)).map(|(t, _)| *t)
            else {
                break;
            };
            if let Some(events) = self.tag.queue.get_mut(&tag) {
                events.retain(|e| e.trigger != port);
                if events.is_empty() {
                    self.tag.queue.remove(&tag);
                }
            }
            self.lose(port, Loss::Dropped);
        }
    }

    fn push_event(&mut self, tag: Tag, trigger: TriggerId, value: Value, tardy: Option<Tag>) {
        let events = self.tag.queue.entry(tag).or_default();
        // One event per trigger and tag: a later schedule replaces the value (LF semantics).
        if let Some(e) = events.iter_mut().find(|e| e.trigger == trigger) {
            e.value = value;
            e.tardy = tardy;
        } else {
            events.push(Event { trigger, value, tardy });
        }
    }

    fn event_loop(&mut self) -> Result<(), NodeError> {
        loop {
            self.watchdog_tick(None);
            self.absorb();
            if let Some(e) = self.fatal.take() {
                return Err(e);
            }
            let g = self.next_tag();
            match self.ready(g)? {
                Ready::Now => {
                    self.process(g)?;
                    if g >= self.stop.stop_tag {
                        return Ok(());
                    }
                }
                Ready::Wait(until) => {
                    let deadline = until.map(|t| {
                        let wait = t.saturating_sub(self.clock.now()).max(0) as u64;
                        std::time::Instant::now() + Duration::from_nanos(wait)
                    });
                    let deadline = self.watchdog_tick(deadline);
                    self.wait(deadline)?;
                }
            }
        }
    }

    /// Whether more events can still reach this federate from outside.
    fn can_receive(&self) -> bool {
        if self.plan.has_physical_actions {
            return true;
        }
        match self.plan.mode {
            Mode::Alone => false,
            Mode::Centralized => {
                (self.plan.upstreams > 0 && self.coord.granted < FOREVER)
                    || self.plan.net_inputs.iter().any(|i| {
                        self.plan.physical_input[i.index()]
                            && self.plan.input_peer[i.index()].is_some_and(|p| !self.coord.closed_peers.contains(&p))
                    })
            }
            Mode::Decentralized { .. } => self
                .plan
                .net_inputs
                .iter()
                .any(|i| self.plan.input_peer[i.index()].is_some_and(|p| !self.coord.closed_peers.contains(&p))),
        }
    }

    fn after(&self) -> Tag {
        if self.tag.current == NEVER {
            self.plan.first
        } else {
            self.tag.current.delayed(Delay::After(0))
        }
    }

    /// The tag of an event of `trigger` that physical time `t` produces (a
    /// physical action, a message on a physical connection).
    ///
    /// Invariant (centralized, with downstream federates): it is never
    /// earlier than `promised`, the highest NET sent. That NET promised
    /// the RTI that nothing from this federate comes earlier, and the RTI
    /// may have granted downstream federates every tag before it: an
    /// earlier event would reach them after they passed its tag (tardy),
    /// or, around a zero-delay cycle, after this federate was granted past
    /// the reply. In real time no such NET runs ahead of physical time
    /// (`physical_lead`), so this moves a tag only where a NET carried a
    /// microstep or the clock stepped back; in fast mode it moves events
    /// up to the last NET. A NET of FOREVER (fast mode, nothing left to
    /// do) cannot be honoured: such events keep their physical time.
    ///
    /// Two events of one trigger never share a tag: the later goes one
    /// microstep later (LF lets physical events pile up in superdense time),
    /// so none replaces another's value.
    fn physical_tag(&self, t: i64, trigger: TriggerId) -> Tag {
        let mut tag = Tag::new(t, 0).max(self.after());
        if self.plan.mode == Mode::Centralized && self.plan.downstreams > 0 && self.coord.promised < FOREVER {
            tag = tag.max(self.coord.promised);
        }
        while self.tag.queue.get(&tag).is_some_and(|events| events.iter().any(|e| e.trigger == trigger)) {
            tag = tag.delayed(Delay::After(0));
        }
        tag
    }

    fn next_tag(&mut self) -> Tag {
        if let Err(e) = self.feed_recorded_physical() {
            self.fatal.get_or_insert(e);
        }
        if self.tag.queue.is_empty() && self.stop.stop_tag == FOREVER && !self.can_receive() {
            // Nothing can happen any more: stop (LF: at the next microstep).
            self.stop.stop_tag = self.after();
        }
        let head = self.tag.queue.keys().next().copied().unwrap_or(FOREVER);
        let mut g = head.min(self.stop.stop_tag);
        if self.plan.physical_lead.is_some() {
            let target = match self.coord.advance_target {
                Some(t) if t > self.tag.current => t,
                _ => {
                    let t = Tag::new(self.clock.now().saturating_add(ADVANCE_INTERVAL), 0).max(self.after());
                    self.coord.advance_target = Some(t);
                    t
                }
            };
            g = g.min(target);
        }
        g
    }

    fn ready(&mut self, g: Tag) -> Result<Ready, NodeError> {
        if g == FOREVER {
            if self.plan.mode == Mode::Centralized && self.coord.last_net != FOREVER {
                self.queue_rti(&Message::NextEventTag(FOREVER))?;
                if let Some(t) = crate::trace::tracer() {
                    t.sent(FOREVER, false);
                }
                self.coord.last_net = FOREVER;
                self.coord.promised = FOREVER;
            }
            return Ok(Ready::Wait(None));
        }
        if self.stop.stop_barrier.is_some_and(|b| g > b) {
            return Ok(Ready::Wait(None));
        }
        match self.plan.mode {
            Mode::Alone => {}
            Mode::Centralized => {
                if self.coord.last_net != g {
                    // NET(g) promises that nothing this federate sends is
                    // earlier than g. Events from physical time take their
                    // tags from it, so that promise holds only once physical
                    // time (plus the lead) reached g: until then the NET
                    // waits, and downstream federates stay at this
                    // federate's last tag (LF's bounded NET).
                    if let Some(lead) = self.plan.physical_lead {
                        let at = g.time.saturating_sub(lead);
                        if self.clock.now() < at {
                            return Ok(Ready::Wait(Some(at)));
                        }
                    }
                    if self.net_needed(g) {
                        self.send_net(g)?;
                    } else if self.coord.skipped_net != g {
                        self.coord.skipped_net = g;
                        self.report.nets_skipped += 1;
                    }
                }
                if self.plan.upstreams > 0 && g > self.coord.granted && self.coord.provisional != Some(g) {
                    return Ok(Ready::Wait(None));
                }
            }
            Mode::Decentralized { stp } => {
                let known = self.plan.net_inputs.iter().all(|i| self.coord.known[i.index()] >= g);
                // Real time: unknown inputs are absent once physical time
                // passes the tag's time + STP. Fast mode: logical time does
                // not follow physical time, so wait at most STP of physical
                // time from when this tag first had to wait.
                let until = if self.plan.opts.fast {
                    match self.coord.stp_wait {
                        Some((t, since)) if t == g => since,
                        _ => {
                            let since = self.clock.now().saturating_add(stp);
                            self.coord.stp_wait = Some((g, since));
                            since
                        }
                    }
                } else {
                    g.time.saturating_add(stp)
                };
                if !known && self.clock.now() < until {
                    return Ok(Ready::Wait(Some(until)));
                }
            }
        }
        if !self.plan.opts.fast && self.clock.now() < g.time {
            return Ok(Ready::Wait(Some(g.time)));
        }
        Ok(Ready::Now)
    }

    /// Whether NET(g) must go to the RTI, given the last DNET (reactor-c's
    /// `lf_send_next_event_tag`): a federate still waiting for a grant to
    /// g from upstream always sends it; otherwise only a NET above the
    /// DNET matters to anyone downstream. Already granted g, it sends
    /// while it has no DNET yet, or when the DNET is below g and no lower
    /// than the NET the RTI holds.
    fn net_needed(&self, g: Tag) -> bool {
        if self.coord.granted >= g {
            !self.coord.received_any_dnet || (self.coord.last_dnet < g && self.coord.last_dnet >= self.coord.last_net)
        } else {
            self.coord.last_dnet < g || (self.plan.upstreams > 0 && self.coord.granted < g)
        }
    }

    /// Queues NET(g) for the RTI.
    fn send_net(&mut self, g: Tag) -> Result<(), NodeError> {
        self.queue_rti(&Message::NextEventTag(g))?;
        if let Some(t) = crate::trace::tracer() {
            t.sent(g, false);
        }
        self.coord.last_net = g;
        self.coord.promised = self.coord.promised.max(g);
        self.coord.skipped_net = NEVER;
        self.report.nets_sent += 1;
        Ok(())
    }

    /// Sends `msg` to the RTI at once, behind whatever is queued.
    fn send_rti(&mut self, msg: &Message) -> Result<(), NodeError> {
        if let Some(w) = self.coord.transport.rti() {
            w.send(msg).map_err(|e| NodeError::RtiLost(crate::hosts::rti_io_error(&format!("sending {msg:?}"), &e)))?;
        }
        Ok(())
    }

    /// Queues `msg` for the RTI: it leaves with the next flush, which
    /// comes before this thread runs a reaction or waits (`wait`,
    /// `run_level`). Nothing the RTI or a peer could act on is held back
    /// longer than this federate's own bookkeeping, yet the tagged
    /// messages, LTC and NET of a tag go out in one write.
    fn queue_rti(&mut self, msg: &Message) -> Result<(), NodeError> {
        if let Some(w) = self.coord.transport.rti() {
            w.queue(msg)
                .map_err(|e| NodeError::RtiLost(crate::hosts::rti_io_error(&format!("sending {msg:?}"), &e)))?;
        }
        Ok(())
    }

    /// Flushes what is queued, then waits for the inbox (see [`Inbox::wait`]).
    fn wait(&mut self, deadline: Option<std::time::Instant>) -> Result<(), NodeError> {
        let ending = self.ending();
        self.coord.transport.flush(ending)?;
        // Nothing to run until the inbox has something: the moment a
        // Reserve's wake of the store costs this federate nothing.
        self.encoder.store().send_reserves();
        let mut items = std::mem::take(&mut self.pending);
        self.inbox.wait(deadline, &mut items);
        self.pending = items;
        Ok(())
    }

    /// Handles everything in the inbox, without waiting.
    fn absorb(&mut self) {
        self.inbox.drain(&mut self.pending);
        while let Some(item) = self.pending.pop_front() {
            self.handle(item);
        }
    }

    fn handle(&mut self, item: Incoming) {
        match item {
            Incoming::Message { port, tag, value } => {
                self.board.received();
                // Relaying it, the RTI lowered its record of this
                // federate's NET to its tag; a later NET must be sent
                // even if it equals the last one.
                if self.plan.mode == Mode::Centralized && tag < self.coord.last_net {
                    self.coord.last_net = tag;
                }
                // The message also stands for the inputs `routes` grouped with its port.
                let shared = std::mem::take(&mut self.plan.shared[port.index()]);
                let ports = || std::iter::once(port).chain(shared.iter().copied());
                match value {
                    Ok(v) => {
                        for p in ports() {
                            self.receive(p, tag, v.clone());
                        }
                    }
                    Err(Undelivered::StoreLost) => {
                        // Said once, when the store went away; counted here.
                        for p in ports() {
                            self.lose(p, Loss::StoreLost);
                            self.coord.known[p.index()] = self.coord.known[p.index()].max(tag);
                        }
                    }
                    Err(Undelivered::Undecodable(msg)) => {
                        tracing::error!(federate = %self.plan.name, "{msg}; the message is dropped and the input treated as absent");
                        self.report.decode_errors += 1;
                        self.report.problem(msg);
                        for p in ports() {
                            self.lose(p, Loss::Undecodable);
                            self.coord.known[p.index()] = self.coord.known[p.index()].max(tag);
                        }
                    }
                }
                self.plan.shared[port.index()] = shared;
            }
            Incoming::Absent { port, tag } => {
                for &p in std::iter::once(&port).chain(&self.plan.shared[port.index()]) {
                    self.coord.known[p.index()] = self.coord.known[p.index()].max(tag);
                }
            }
            Incoming::Grant(t) => {
                self.coord.granted = self.coord.granted.max(t);
                if self.coord.provisional.is_some_and(|p| p <= t) {
                    self.coord.provisional = None;
                }
            }
            Incoming::DownstreamNext(t) => {
                self.coord.received_any_dnet = true;
                // A downstream federate needs the NET skipped last after all.
                if t < self.coord.skipped_net {
                    if let Err(e) = self.send_net(self.coord.skipped_net) {
                        self.fatal.get_or_insert(e);
                    }
                }
                self.coord.last_dnet = t;
            }
            Incoming::ProvisionalGrant(t) => {
                // PTAG(t) grants every tag before t outright, and t itself
                // provisionally.
                self.coord.granted = self.coord.granted.max(t.latest_earlier());
                if t > self.coord.granted {
                    self.coord.provisional = Some(t);
                }
                // The RTI sends PTAG(t) around a zero-delay cycle for one
                // federate's NET: the others may have no event at t, yet
                // they must process it, so that their outputs at t are
                // resolved (absent) and t is confirmed; the federate at t
                // waits for exactly that (LF: a dummy event at the PTAG).
                if t > self.tag.current && t < FOREVER {
                    self.tag.queue.entry(t).or_default();
                }
            }
            Incoming::StopRequest(t) => {
                if self.stop.stop_handled {
                    return;
                }
                self.stop.stop_handled = true;
                let s = if t <= self.tag.current { self.after() } else { t };
                self.stop.stop_barrier = Some(s);
                if let Err(e) = self.send_rti(&Message::StopRequestReply(s)) {
                    self.fatal = Some(e);
                }
            }
            Incoming::StopGranted(t) => {
                let s = if t <= self.tag.current && self.tag.current != NEVER { self.after() } else { t };
                self.stop.stop_tag = self.stop.stop_tag.min(s);
                self.stop.stop_barrier = None;
            }
            Incoming::Physical { action, extra, value } => {
                if let Some(r) = &mut self.replay {
                    if r.dropped == 0 {
                        tracing::info!(federate = %self.plan.name, "replay: live physical action values are dropped; the recorded ones are fed instead");
                    }
                    r.dropped += 1;
                    return;
                }
                let (min_delay, codec) = match self.plan.program.triggers[action.index()].kind {
                    TriggerKind::PhysicalAction { min_delay, codec } => (duration_ns(min_delay), codec),
                    _ => (0, None),
                };
                let t = self.clock.now().saturating_add(min_delay).saturating_add(extra);
                let tag = self.physical_tag(t, action);
                if let (Some(feed), Some((encode, _))) = (self.record.as_mut().filter(|f| f.records(action)), codec) {
                    // The recorder is the one delivery of what the value puts in the store.
                    match encode(&value, &self.encoder, 1) {
                        Ok(payload) => feed.publish(action, tag, self.clock.now(), &payload),
                        Err(e) if e.is_store_lost() => feed.give_up(action),
                        Err(e) => {
                            let e = crate::record::RecordError::Unencodable {
                                federate: self.plan.name.clone(),
                                action: self.plan.program.port_path(action),
                                message: e.to_string(),
                            };
                            self.fatal.get_or_insert(NodeError::Record(e.to_string()));
                            return;
                        }
                    }
                }
                self.push_event(tag, action, value, None);
            }
            Incoming::PeerClosed(f) => {
                self.coord.closed_peers.push(f);
                for i in self.plan.net_inputs.clone() {
                    if self.plan.input_peer[i.index()] == Some(f) {
                        self.coord.known[i.index()] = FOREVER;
                    }
                }
            }
            Incoming::RtiLost(why) => {
                if !self.stop.resigned && self.plan.mode != Mode::Alone && self.fatal.is_none() {
                    self.fatal = Some(NodeError::RtiLost(why));
                }
            }
            Incoming::Signal => self.request_stop(),
        }
    }

    /// Records the latency of a network message on `input` carrying
    /// `sent` (its sender's tag, delayed as the connection says): from
    /// its send time to `now`, taken once per tag (see `crate::figures`).
    #[inline]
    fn record_latency(&self, input: TriggerId, sent: Tag, now: &mut Option<i64>) {
        let Some(wire) = self.plan.input_wire[input.index()] else { return };
        let Some(c) = self.board.connection(usize::from(wire)).filter(|_| !self.plan.opts.fast) else { return };
        let conn = &self.plan.program.connections[usize::from(wire)];
        let delay = match conn.delay {
            Delay::After(d) if !conn.physical => d,
            _ => 0,
        };
        let now = *now.get_or_insert_with(|| self.clock.now());
        c.latency(now.saturating_sub(sent.time.saturating_sub(delay)));
    }

    /// A network message's value for input `port` at `tag`.
    fn receive(&mut self, port: TriggerId, tag: Tag, value: Value) {
        let tag = if self.plan.physical_input[port.index()] {
            let now = self.clock.now();
            self.record_latency(port, tag, &mut Some(now));
            self.physical_tag(now, port)
        } else {
            tag
        };
        self.coord.known[port.index()] = self.coord.known[port.index()].max(tag);
        let open = tag > self.tag.current
            || (tag == self.tag.current
                && self.tag.in_tag
                && i64::from(self.plan.reader_level[port.index()]) > self.tag.passed_level);
        if open && tag == self.tag.current && self.tag.in_tag {
            if !self.plan.physical_input[port.index()] {
                self.record_latency(port, tag, &mut None);
            }
            self.make_present(port, value, None);
        } else if open {
            if let Some(n) = self.plan.keep_last[port.index()] {
                self.keep_newest(port, n - 1);
            }
            self.push_event(tag, port, value, None);
        } else {
            self.report.tardy += 1;
            // Each tardy message of a port gets a tag of its own: two read
            // in one go (both after their tags) would otherwise share the
            // next microstep, where the second replaced the first (one
            // event per trigger and tag), counted tardy but never handled.
            let mut at = self.after();
            while self.tag.queue.get(&at).is_some_and(|events| events.iter().any(|e| e.trigger == port)) {
                at = at.delayed(Delay::After(0));
            }
            // `stop_tag` only decreases: past it, no tag is left at which
            // the tardy handler could run (the message came after the
            // federate's last tag). An STP violation all the same, but its
            // value is dropped: counted lost, not late, and said so.
            if at > self.stop.stop_tag {
                self.lose(port, Loss::AfterLastTag);
                tracing::warn!(federate = %self.plan.name, port = %self.plan.program.port_path(port), intended = %tag, "tardy message (STP violation) after the federate's last tag: no tardy handler runs for it; its value is dropped (counted lost: after_last_tag)");
                return;
            }
            self.lose(port, Loss::Tardy);
            tracing::warn!(federate = %self.plan.name, port = %self.plan.program.port_path(port), intended = %tag, delivered = %at, "tardy message (STP violation): it arrived after its tag had been processed");
            self.push_event(at, port, value, Some(tag));
        }
    }

    fn request_stop(&mut self) {
        match self.plan.mode {
            Mode::Alone => self.stop.stop_tag = self.stop.stop_tag.min(self.after()),
            _ => {
                if self.stop.stop_handled {
                    return;
                }
                self.stop.stop_handled = true;
                let s = self.after();
                self.stop.stop_barrier = Some(s);
                if let Err(e) = self.send_rti(&Message::StopRequest(s)) {
                    self.fatal = Some(e);
                }
            }
        }
    }

    fn make_present(&mut self, t: TriggerId, value: Value, tardy: Option<Tag>) {
        if self.tag.values[t.index()].is_none() {
            self.tag.present.push(t);
        }
        self.tag.values[t.index()] = Some(value);
        self.tag.tardy[t.index()] = tardy;
        for r in &self.plan.triggered[t.index()] {
            let level = self.plan.meta[r].level as usize;
            self.tag.buckets[level].push(*r);
        }
    }

    fn process(&mut self, g: Tag) -> Result<(), NodeError> {
        self.tag.current = g;
        self.board.tag(g);
        self.tag.in_tag = true;
        self.tag.passed_level = -1;
        let mut now = None;
        for ev in self.tag.queue.remove(&g).unwrap_or_default() {
            if let TriggerKind::Timer { period, .. } = self.plan.program.triggers[ev.trigger.index()].kind {
                if !period.is_zero() {
                    let next = Tag::new(g.time.saturating_add(duration_ns(period)), 0);
                    self.push_event(next, ev.trigger, self.plan.unit.clone(), None);
                }
            }
            // A physical connection's latency was taken on arrival (its tag here is the arrival's).
            if !self.plan.physical_input[ev.trigger.index()] {
                self.record_latency(ev.trigger, ev.tardy.unwrap_or(g), &mut now);
            }
            self.make_present(ev.trigger, ev.value, ev.tardy);
        }
        if g == self.stop.stop_tag {
            for i in 0..self.plan.program.triggers.len() {
                let t = &self.plan.program.triggers[i];
                if matches!(t.kind, TriggerKind::Shutdown)
                    && self.plan.program.reactors[t.reactor.index()].federate == self.plan.fed
                {
                    self.make_present(TriggerId(i as u32), self.plan.unit.clone(), None);
                }
            }
        }
        let unwritten = std::mem::take(&mut self.plan.resolve_after[self.plan.max_level as usize + 1]);
        let r = self.resolve(g, &unwritten);
        self.plan.resolve_after[self.plan.max_level as usize + 1] = unwritten;
        r?;
        for level in 0..=self.plan.max_level as usize {
            self.gate_level(g, level)?;
            self.run_level(g, level)?;
            self.tag.passed_level = level as i64;
            let outs = std::mem::take(&mut self.plan.resolve_after[level]);
            let r = self.resolve(g, &outs);
            self.plan.resolve_after[level] = outs;
            r?;
        }
        if self.plan.mode == Mode::Centralized {
            self.queue_rti(&Message::LatestTagConfirmed(g))?;
            if let Some(t) = crate::trace::tracer() {
                t.sent(g, true);
            }
        }
        for t in std::mem::take(&mut self.tag.present) {
            self.tag.values[t.index()] = None;
            self.tag.tardy[t.index()] = None;
        }
        self.tag.in_tag = false;
        self.report.tags += 1;
        self.report.final_tag = Some(g);
        Ok(())
    }

    /// Under a provisional grant, waits until every network input read at
    /// `level` has a known status at `g` (a message, an absent notice, or a
    /// full grant).
    fn gate_level(&mut self, g: Tag, level: usize) -> Result<(), NodeError> {
        if self.plan.mode != Mode::Centralized || self.plan.upstreams == 0 {
            return Ok(());
        }
        loop {
            self.absorb();
            if let Some(e) = self.fatal.take() {
                return Err(e);
            }
            if g <= self.coord.granted || self.plan.gate[level].iter().all(|i| self.coord.known[i.index()] >= g) {
                return Ok(());
            }
            let deadline = self.watchdog_tick(None);
            self.wait(deadline)?;
        }
    }

    /// Pings systemd's watchdog when due, and brings a wait's `deadline`
    /// forward to the next ping (unchanged without a watchdog).
    fn watchdog_tick(&mut self, deadline: Option<std::time::Instant>) -> Option<std::time::Instant> {
        match &mut self.watchdog {
            Some(w) => {
                w.tick();
                Some(w.cap(deadline))
            }
            None => deadline,
        }
    }

    fn run_level(&mut self, g: Tag, level: usize) -> Result<(), NodeError> {
        let mut rs = std::mem::take(&mut self.tag.buckets[level]);
        if rs.is_empty() {
            return Ok(());
        }
        rs.sort_unstable();
        rs.dedup();
        let ending = self.ending();
        self.coord.transport.flush(ending)?;
        let view = TagView {
            tag: g,
            start: self.plan.start.time,
            federate: &self.plan.name,
            values: &self.tag.values,
            tardy: &self.tag.tardy,
            encoder: &self.encoder,
            fanout: &self.plan.fanout,
            inbox: &self.inbox,
            clock: &self.clock,
            decisions: self.plan.opts.decisions.as_ref(),
        };
        let reactors = &self.plan.reactors;
        let meta = &self.plan.meta;
        let tracer = crate::trace::tracer();
        let board = &*self.board;
        let clock = &*self.clock;
        let run = |r: ReactionId| {
            let started = clock.now();
            let o = match tracer {
                None => execute(r, &meta[&r], reactors, &view),
                Some(t) => {
                    let start = t.now();
                    let o = execute(r, &meta[&r], reactors, &view);
                    t.reaction(meta[&r].trace_name, g, start, t.now());
                    o
                }
            };
            board.reaction_ran(r.index(), g, started, clock.now());
            o
        };
        let workers = self.plan.opts.workers;
        let outcomes: Vec<Outcome> = if rs.len() > 1 && workers > 1 {
            // At most `workers` threads, each running a run of the level's
            // reactions in order (this thread the first): a wide level (a
            // bank of 16 members as threads) costs a thread start per
            // worker, not per reaction. Outcomes stay in reaction order.
            let chunk = rs.len().div_ceil(workers);
            std::thread::scope(|s| {
                let handles: Vec<_> = rs[chunk..]
                    .chunks(chunk)
                    .map(|c| (c.len(), s.spawn(move || c.iter().map(|&r| run(r)).collect::<Vec<_>>())))
                    .collect();
                let mut v: Vec<Outcome> = rs[..chunk].iter().map(|&r| run(r)).collect();
                for (n, h) in handles {
                    match h.join() {
                        Ok(o) => v.extend(o),
                        Err(_) => v.extend((0..n).map(|_| Outcome::panicked("worker thread"))),
                    }
                }
                v
            })
        } else {
            rs.iter().map(|&r| run(r)).collect()
        };
        let missed = outcomes.iter().filter(|o| matches!(o.ran, Ran::Deadline)).count();
        self.board.ran(rs.len() as u64, missed as u64);
        for (r, o) in rs.iter().zip(outcomes) {
            self.report.reactions += 1;
            if let (Some(missed), Some(feed)) = (o.decided, &mut self.record) {
                feed.decide(&self.plan.meta[r].path, g, self.clock.now(), missed);
            }
            match o.ran {
                Ran::Deadline => self.report.deadline_misses += 1,
                Ran::Panicked(message) => {
                    return Err(NodeError::ReactionPanicked { reaction: self.plan.meta[r].path.clone(), message })
                }
                Ran::Failed(message) => {
                    return Err(NodeError::ReactionFailed { reaction: self.plan.meta[r].path.clone(), message })
                }
                Ran::Body | Ran::Tardy => {}
            }
            for (what, id) in o.misuse {
                tracing::error!(reaction = %self.plan.meta[r].path, "{what} {} that it does not declare as an effect; add `.effect(...)` to the reaction", self.plan.program.port_path(id));
            }
            for e in o.effects {
                self.apply(g, e);
            }
        }
        Ok(())
    }

    fn apply(&mut self, g: Tag, e: Effect) {
        match e {
            Effect::Set(out, v) => {
                if self.tag.values[out.index()].is_none() {
                    self.tag.present.push(out);
                }
                self.tag.values[out.index()] = Some(v.clone());
                for k in 0..self.plan.local[out.index()].len() {
                    let (to, delay, physical) = self.plan.local[out.index()][k];
                    if physical {
                        let tag = self.physical_tag(self.clock.now(), to);
                        self.push_event(tag, to, v.clone(), None);
                    } else if delay == Delay::None {
                        self.make_present(to, v.clone(), None);
                    } else {
                        self.push_event(g.delayed(delay), to, v.clone(), None);
                    }
                }
            }
            Effect::Schedule { action, delay, value } => {
                let min = match self.plan.program.triggers[action.index()].kind {
                    TriggerKind::LogicalAction { min_delay } => min_delay,
                    _ => Duration::ZERO,
                };
                let tag = g.delayed(Delay::After(duration_ns(min + delay)));
                self.push_event(tag, action, value, None);
            }
            Effect::RequestStop => self.request_stop(),
            Effect::Lost(port, loss) => self.lose(port, loss),
        }
    }

    /// Counts a message of `port` lost or late (see `crate::loss`).
    fn lose(&mut self, port: TriggerId, loss: Loss) {
        self.lose_n(port, loss, 1);
    }

    fn lose_n(&mut self, port: TriggerId, loss: Loss, n: u64) {
        let path = self.plan.program.port_path(port);
        self.report.losses.count(&path, loss, n);
        self.board.lost(&path, loss, n);
    }

    /// Sends each of `outs` (final at this point of tag `g`): its value, or
    /// a port-absent notice to receivers that may be waiting for it.
    fn resolve(&mut self, g: Tag, outs: &[TriggerId]) -> Result<(), NodeError> {
        for &out in outs {
            let dests = &self.plan.remote[out.index()];
            let value = self.tag.values[out.index()].clone();
            // One delivery more per tap that holds the value's store objects.
            let for_taps = match (&value, &self.tap) {
                (Some(_), Some(tap)) => tap.reserve(out),
                _ => 0,
            };
            let payload = match (&value, &self.plan.program.triggers[out.index()].kind) {
                (Some(v), TriggerKind::Output { encode, .. }) => {
                    let deliveries = self.plan.fanout[out.index()] + for_taps;
                    match encode(v, self.output_encoders.get(&out).unwrap_or(&self.encoder), deliveries) {
                        Ok(p) => {
                            self.push_to_hosts(out, &p);
                            Some(p)
                        }
                        Err(e) if e.is_store_lost() => {
                            let lost = dests.len() as u64;
                            self.lose_n(out, Loss::StoreLost, lost);
                            None
                        }
                        Err(e) => {
                            self.report.encode_errors += 1;
                            self.lose(out, Loss::Unsent);
                            let msg = format!(
                                "could not send the value of {}: {e}; receivers see the port absent",
                                self.plan.program.port_path(out)
                            );
                            tracing::error!("{msg}");
                            self.report.problem(msg);
                            None
                        }
                    }
                }
                _ => None,
            };
            if let (Some(p), Some(tap)) = (&payload, &self.tap) {
                tap.publish(out, g, p, for_taps);
            }
            if let (Some(p), Some(feed)) = (&payload, &mut self.record) {
                feed.publish(out, g, self.clock.now(), p);
            }
            // By index: `send_to` needs `&mut self` (no per-tag clone of the list).
            for k in 0..self.plan.remote[out.index()].len() {
                let d = self.plan.remote[out.index()][k];
                let msg = match &payload {
                    Some(p) => {
                        self.board.sent();
                        let tag = if d.physical { g } else { g.delayed(d.delay) };
                        let direct = matches!(self.plan.mode, Mode::Decentralized { .. }) || d.physical;
                        if !self.send_tagged(d.fed, direct, d.port, tag, p)? && !self.ending() {
                            self.lose(out, Loss::PeerLost);
                        }
                        continue;
                    }
                    None => {
                        let needed = match self.plan.mode {
                            Mode::Decentralized { .. } => !d.physical,
                            _ => !d.physical && d.delay == Delay::None,
                        };
                        if !needed {
                            continue;
                        }
                        Message::PortAbsent { port: d.port, fed: d.fed, tag: g.delayed_strict(d.delay) }
                    }
                };
                self.send_to(d.fed, matches!(self.plan.mode, Mode::Decentralized { .. }), &msg)?;
            }
        }
        Ok(())
    }

    /// Asks this host's link to push the store objects of `payload` (the
    /// value of `out`) to the other hosts with receivers of `out`.
    fn push_to_hosts(&self, out: TriggerId, payload: &[u8]) {
        let hosts = &self.plan.pushes[out.index()];
        let Some(link) = self.link.as_ref().filter(|_| !hosts.is_empty()) else { return };
        let ids = match crate::payload::SpilledMessage::from_payload(payload) {
            Ok(Some(spilled)) => vec![spilled.id],
            _ => crate::payload::Decoder::references(payload).unwrap_or_default(),
        };
        if ids.is_empty() {
            return;
        }
        let request = crate::hosts::PushRequest { ids, hosts: hosts.clone() };
        if let Err(e) = link.push(&request) {
            tracing::debug!(port = %self.plan.program.port_path(out), "push not sent: {e}");
        }
    }

    /// Queues `msg` for federate `fed`, over its peer connection
    /// (`direct`) or through the RTI (see [`Self::queue_rti`] for when it
    /// leaves).
    fn send_to(&mut self, fed: u16, direct: bool, msg: &Message) -> Result<(), NodeError> {
        self.queue_for(fed, direct, |w| w.queue(msg)).map(drop)
    }

    /// Queues a tagged message for federate `fed`, its payload borrowed:
    /// an output with several receivers encodes its value once. `direct`:
    /// over the peer connection (decentralized, or a physical connection),
    /// else through the RTI.
    fn send_tagged(&mut self, fed: u16, direct: bool, port: u16, tag: Tag, payload: &[u8]) -> Result<bool, NodeError> {
        self.coord.last_dnet = self.coord.last_dnet.min(tag);
        self.queue_for(fed, direct, |w| w.queue_tagged(direct, port, fed, tag, payload))
    }

    /// Runs `queue` on the writer that reaches federate `fed`: its peer
    /// connection (`direct`) or the RTI's.
    ///
    /// False if `fed` is a peer whose connection has broken: the message is
    /// lost (the caller counts it).
    fn queue_for(
        &mut self,
        fed: u16,
        direct: bool,
        queue: impl FnOnce(&mut FrameWriter) -> std::io::Result<()>,
    ) -> Result<bool, NodeError> {
        let ending = self.ending();
        match &mut self.coord.transport {
            Transport::Alone => Ok(true),
            Transport::Peers { peers, .. } if direct => {
                let Some(w) = peers.get_mut(&fed) else { return Ok(false) };
                if let Err(e) = queue(w) {
                    // A downstream peer that went away loses its messages; the others go on.
                    peer_broke(fed, &e, ending);
                    peers.remove(&fed);
                    return Ok(false);
                }
                Ok(true)
            }
            Transport::Rti(w) | Transport::Peers { rti: w, .. } => {
                queue(w).map(|()| true).map_err(|e| NodeError::RtiLost(format!("relaying a message: {e}")))
            }
        }
    }

    /// Whether this federate is at its last tag (or done): a downstream
    /// peer may then have completed that tag and left already (in
    /// decentralized coordination nothing makes it wait for this one), so
    /// its connection breaking is the normal end, not news.
    fn ending(&self) -> bool {
        self.stop.resigned || self.tag.current >= self.stop.stop_tag
    }

    /// Resigns (or reports failure) and closes the connections.
    fn leave(&mut self, ok: bool) {
        self.stop.resigned = true;
        let msg = if ok { Message::Resign } else { Message::Failed };
        if let Transport::Peers { peers, .. } = &mut self.coord.transport {
            for w in peers.values_mut() {
                let _ = w.send(&Message::Resign);
                let _ = w.stream().shutdown(std::net::Shutdown::Write);
            }
        }
        if let Some(w) = self.coord.transport.rti() {
            let _ = w.send(&msg);
            let _ = w.stream().shutdown(std::net::Shutdown::Write);
        }
        if self.report.tardy > 0 {
            tracing::warn!(federate = %self.plan.name, tardy = self.report.tardy, "tardy messages (STP violations) this run; raise the STP offset if they are unexpected");
        }
    }
}

/// Logs that the connection to downstream peer `fed` broke: at debug level
/// when the peer may have left because the program is `ending` (a reset or
/// broken pipe from a peer that finished), else as a warning: a peer gone
/// in the middle of the run loses messages.
fn peer_broke(fed: u16, e: &std::io::Error, ending: bool) {
    if ending {
        tracing::debug!(peer = fed, "peer connection closed at the end of the run: {e}; its last messages are dropped");
    } else {
        tracing::warn!(peer = fed, "peer connection broke: {e}; its messages are dropped");
    }
}

enum Ran {
    Body,
    Deadline,
    Tardy,
    Panicked(String),
    /// The reaction called `Ctx::fail`.
    Failed(String),
}

struct Outcome {
    ran: Ran,
    /// For a reaction with a deadline (not run tardy): whether the
    /// deadline was missed, which a recording records.
    decided: Option<bool>,
    effects: Vec<Effect>,
    misuse: Vec<(&'static str, TriggerId)>,
}

impl Outcome {
    fn panicked(what: &str) -> Outcome {
        Outcome { ran: Ran::Panicked(what.to_string()), decided: None, effects: Vec::new(), misuse: Vec::new() }
    }
}

/// Runs one reaction (or its deadline or tardy handler) against `view`.
fn execute(r: ReactionId, m: &ReactionMeta, reactors: &[Option<Mutex<ReactorRt>>], view: &TagView<'_>) -> Outcome {
    let Some(cell) = reactors[m.reactor].as_ref() else { return Outcome::panicked("reaction of another federate") };
    let mut guard = cell.lock();
    let rt = &mut *guard;
    let Some(h) = rt.reactions.get_mut(&r) else { return Outcome::panicked("reaction without a body") };
    let tardy = m
        .triggers
        .iter()
        .any(|t| view.tardy.get(t.index()).copied().flatten().is_some() && view.values[t.index()].is_some());
    let mut decided = None;
    let (body, ran): (&mut Body, Ran) = match (&mut h.tardy, &mut h.deadline) {
        (Some(t), _) if tardy => (t, Ran::Tardy),
        (_, Some((d, handler))) => {
            // A replay takes the recorded decision; without one (a tag the
            // recording did not reach), the clock decides as it did live.
            let recorded =
                view.decisions.and_then(|ds| ds.get(&m.path, Tag::new(view.tag.time - view.start, view.tag.microstep)));
            let missed = recorded.unwrap_or_else(|| view.clock.now() > view.tag.time.saturating_add(*d));
            decided = Some(missed);
            if missed {
                (handler, Ran::Deadline)
            } else {
                (&mut h.body, Ran::Body)
            }
        }
        _ => (&mut h.body, Ran::Body),
    };
    let mut ctx = Ctx::new(view, r, &m.effects, m.bank);
    let state = &mut *rt.state;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(state, &mut ctx)));
    match result {
        Ok(()) => match ctx.failure {
            Some(message) => Outcome { ran: Ran::Failed(message), decided, effects: Vec::new(), misuse: ctx.misuse },
            None => Outcome { ran, decided, effects: ctx.out, misuse: ctx.misuse },
        },
        Err(p) => {
            let message = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic".into());
            Outcome::panicked(&message)
        }
    }
}

/// The first event of a timer whose first firing is at `at` (ns) with
/// `period` (0: once), at `first` or later: a restarted federate does not
/// replay the firings of the time it was down, and keeps the timer's phase.
fn first_timer_tag(at: i64, period: i64, first: Tag) -> Option<Tag> {
    if Tag::new(at, 0) >= first {
        return Some(Tag::new(at, 0));
    }
    if period <= 0 {
        return None;
    }
    // Periods missed, rounded up; one more if `first` is past a
    // microstep of the firing it lands on.
    let behind = first.time.saturating_sub(at).max(1);
    let mut t = at.saturating_add(((behind - 1) / period + 1).saturating_mul(period));
    if Tag::new(t, 0) < first {
        t = t.saturating_add(period);
    }
    Some(Tag::new(t, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_timer_keeps_its_phase_and_skips_what_it_missed() {
        let s = 1_000;
        assert_eq!(first_timer_tag(s + 5, 10, Tag::new(s, 0)), Some(Tag::new(s + 5, 0)), "not resumed: the offset");
        assert_eq!(first_timer_tag(s, 10, Tag::new(s + 31, 0)), Some(Tag::new(s + 40, 0)));
        assert_eq!(first_timer_tag(s, 10, Tag::new(s + 30, 0)), Some(Tag::new(s + 30, 0)), "on a firing: that firing");
        assert_eq!(
            first_timer_tag(s, 10, Tag::new(s + 30, 1)),
            Some(Tag::new(s + 40, 0)),
            "just after a firing: the next"
        );
        assert_eq!(first_timer_tag(s, 0, Tag::new(s + 1, 0)), None, "a one-shot timer that passed does not fire");
    }
}
