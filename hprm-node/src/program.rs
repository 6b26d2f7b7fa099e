//! Programs: federates, their reactors, and the connections between ports
//! (the graph layer, with `level` and `manifest::build`).
//!
//! A [`Program`] is the whole graph. Every process of a federation builds
//! the same program (it is cheap: reactors are descriptions plus closures
//! that are never called outside their own federate), then runs one
//! federate of it. That is what lets each federate know the full graph:
//! its neighbours, their delays, which of its outputs go where.
//!
//! Ids are indices into the program's tables (`ids`). The builders that
//! declare reactors (`Program::reactor`, [`ReactorBuilder`]) sit a layer
//! above, in `reactor`: the graph holds reaction bodies, which take a
//! [`Ctx`](crate::Ctx), so it is above `context`, and the builder is
//! above the graph.
//!
//! [`ReactorBuilder`]: crate::ReactorBuilder

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use hprm_rti::tag::Delay;
use hprm_store::Backpressure;

use crate::context::Body;
use crate::error::ProgramError;
use crate::ids::{duration_ns, DecodeFn, EncodeFn, FederateId, Input, Output, ReactionId, ReactorId, TriggerId};
use crate::payload::DEFAULT_THRESHOLD;

/// How federates coordinate (DESIGN.md "Coordination").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coordination {
    /// The RTI grants every tag advance: consistency first.
    Centralized,
    /// Federates talk peer to peer and wait a safe-to-process offset (STP)
    /// for unknown inputs: availability first.
    Decentralized {
        /// How long past a tag's time a federate waits for inputs whose
        /// status is unknown (LF's `maxwait`).
        stp: Duration,
    },
}

/// What a trigger is.
pub(crate) enum TriggerKind {
    Startup,
    Shutdown,
    Timer {
        offset: Duration,
        period: Duration,
    },
    LogicalAction {
        min_delay: Duration,
    },
    /// `codec`: how its values are encoded for a recording and decoded in
    /// a replay; `None` for an opaque action, whose values the payload
    /// codec cannot encode (such a program cannot be recorded).
    PhysicalAction {
        min_delay: Duration,
        codec: Option<(EncodeFn, DecodeFn)>,
    },
    Input {
        decode: DecodeFn,
    },
    Output {
        encode: EncodeFn,
    },
}

impl TriggerKind {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            TriggerKind::Startup => "startup",
            TriggerKind::Shutdown => "shutdown",
            TriggerKind::Timer { .. } => "timer",
            TriggerKind::LogicalAction { .. } => "logical action",
            TriggerKind::PhysicalAction { .. } => "physical action",
            TriggerKind::Input { .. } => "input",
            TriggerKind::Output { .. } => "output",
        }
    }
}

pub(crate) struct TriggerDef {
    pub name: String,
    pub reactor: ReactorId,
    pub kind: TriggerKind,
}

pub(crate) struct ReactionDef {
    pub name: String,
    pub reactor: ReactorId,
    pub triggers: Vec<TriggerId>,
    pub sources: Vec<TriggerId>,
    pub effects: Vec<TriggerId>,
    pub body: Option<Body>,
    pub deadline: Option<(Duration, Body)>,
    pub tardy: Option<Body>,
}

pub(crate) struct ReactorDef {
    pub name: String,
    pub federate: FederateId,
    pub state: Option<Box<dyn Any + Send>>,
    pub reactions: Vec<ReactionId>,
    pub startup: Option<TriggerId>,
    pub shutdown: Option<TriggerId>,
}

pub(crate) struct FederateDef {
    pub name: String,
    pub reactors: Vec<ReactorId>,
    /// What a launcher does when its process fails.
    pub restart: crate::manifest::RestartPolicy,
    pub max_restarts: Option<u32>,
    /// The host it runs on, in a program with hosts.
    pub host: Option<String>,
    /// Its priority and CPUs, which it applies as it starts.
    pub realtime: crate::realtime::Realtime,
}

/// A connection from an output to an input.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionDef {
    pub from: TriggerId,
    pub to: TriggerId,
    pub delay: Delay,
    /// `~>`: the receiver stamps the message with its own physical time.
    pub physical: bool,
}

/// A program: federates of reactors, and connections.
pub struct Program {
    pub(crate) name: String,
    pub(crate) coordination: Coordination,
    pub(crate) threshold: usize,
    pub(crate) timeout: Option<Duration>,
    pub(crate) federates: Vec<FederateDef>,
    pub(crate) reactors: Vec<ReactorDef>,
    pub(crate) triggers: Vec<TriggerDef>,
    pub(crate) reactions: Vec<ReactionDef>,
    pub(crate) connections: Vec<ConnectionDef>,
    /// The hosts, in a program that spans several ([`Program::host`]).
    pub(crate) hosts: Vec<crate::manifest::HostSpec>,
    /// The RTI's host and port there ([`Program::rti_on`]).
    pub(crate) rti_host: Option<String>,
    pub(crate) rti_port: Option<u16>,
    /// Outputs whose backpressure is not the default, by output.
    pub(crate) backpressure: HashMap<TriggerId, Backpressure>,
    /// Physical actions whose values are messages of another system in
    /// its own encoding, recorded a second time as such
    /// ([`crate::ReactorBuilder::record_foreign`]).
    pub(crate) foreign: HashMap<TriggerId, crate::manifest::record::Foreign>,
    /// Problems found while building, reported all at once by [`Program::validate`].
    pub(crate) problems: Vec<String>,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("name", &self.name)
            .field("coordination", &self.coordination)
            .field("federates", &self.federates.iter().map(|f| &f.name).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Program {
    /// An empty program, centralized, with the default out-of-band threshold.
    pub fn new(name: impl Into<String>) -> Program {
        Program {
            name: name.into(),
            coordination: Coordination::Centralized,
            threshold: DEFAULT_THRESHOLD,
            timeout: None,
            federates: Vec::new(),
            reactors: Vec::new(),
            triggers: Vec::new(),
            reactions: Vec::new(),
            connections: Vec::new(),
            backpressure: HashMap::new(),
            foreign: HashMap::new(),
            hosts: Vec::new(),
            rti_host: None,
            rti_port: None,
            problems: Vec::new(),
        }
    }

    /// The program's name; also the default federation id.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the coordination mode (default centralized).
    pub fn coordination(&mut self, c: Coordination) -> &mut Program {
        self.coordination = c;
        self
    }

    /// Buffers of at least this many bytes travel out-of-band through the
    /// object store (default 64 KiB).
    pub fn threshold(&mut self, bytes: usize) -> &mut Program {
        self.threshold = bytes;
        self
    }

    /// Stops every federate at logical time start + `d` (LF's `timeout`).
    pub fn timeout(&mut self, d: Duration) -> &mut Program {
        self.timeout = Some(d);
        self
    }

    /// Adds a federate (one process).
    pub fn federate(&mut self, name: impl Into<String>) -> FederateId {
        let name = name.into();
        if self.federates.iter().any(|f| f.name == name) {
            self.problems.push(format!("two federates are named {name:?}; federate names must be unique"));
        }
        if !crate::manifest::valid_name(&name) {
            self.problems.push(format!(
                "federate name {name:?} is not valid; use letters, digits, '_' and '-' (a bank member: name[i])"
            ));
        }
        self.federates.push(FederateDef {
            name,
            reactors: Vec::new(),
            restart: Default::default(),
            max_restarts: None,
            host: None,
            realtime: Default::default(),
        });
        FederateId(self.federates.len() as u32 - 1)
    }

    /// Has the launcher start `fed` again when its process fails, at most
    /// `max_restarts` times (default
    /// [`DEFAULT_MAX_RESTARTS`](crate::manifest::DEFAULT_MAX_RESTARTS)),
    /// instead of stopping the program. Centralized coordination only: the
    /// RTI holds the federate's downstream while it is down, and it resumes
    /// at a tag after everything granted downstream of it (its state and
    /// the inputs sent to it while down are lost; its startup reactions run
    /// again there).
    pub fn restart_on_failure(&mut self, fed: FederateId, max_restarts: Option<u32>) {
        if let Some(f) = self.federates.get_mut(fed.index()) {
            f.restart = crate::manifest::RestartPolicy::OnFailure;
            f.max_restarts = max_restarts;
        }
    }

    /// Adds a host: the program then spans several, each running its own
    /// store and `hprm-link`, and every federate must be placed on one
    /// ([`Program::run_on`]). `link`: the Zenoh endpoint its link listens
    /// on (default `tcp/ADDRESS:7447`). See the book's "Several hosts".
    pub fn host(&mut self, name: impl Into<String>, address: impl Into<String>, link: Option<String>) -> &mut Program {
        self.hosts.push(crate::manifest::HostSpec { name: name.into(), address: address.into(), link });
        self
    }

    /// Runs federate `fed` on host `host` (one of [`Program::host`]'s).
    pub fn run_on(&mut self, fed: FederateId, host: impl Into<String>) -> &mut Program {
        if let Some(f) = self.federates.get_mut(fed.index()) {
            f.host = Some(host.into());
        }
        self
    }

    /// Runs `fed`'s reactions at a real-time priority and/or on chosen CPUs
    /// (see [`realtime`](crate::realtime)); its process applies them as it
    /// starts, and stops with an error if it may not (unless
    /// `best_effort`).
    pub fn realtime(&mut self, fed: FederateId, realtime: crate::realtime::Realtime) -> &mut Program {
        if let Some(p) = realtime.priority.filter(|p| !(1..=99).contains(p)) {
            self.problems.push(format!("federate priority {p} is out of range; real-time priorities are 1 to 99"));
        }
        if let Some(f) = self.federates.get_mut(fed.index()) {
            f.realtime = realtime;
        }
        self
    }

    /// Runs the RTI on `host` (default: the first host), listening on
    /// `port` there (default [`DEFAULT_RTI_PORT`](crate::manifest::DEFAULT_RTI_PORT)).
    pub fn rti_on(&mut self, host: impl Into<String>, port: Option<u16>) -> &mut Program {
        self.rti_host = Some(host.into());
        self.rti_port = port;
        self
    }

    /// What `out` does when the store has no room for its value or a
    /// receiver falls behind (default [`Backpressure::default`]: the send
    /// waits up to 1 s for space). `keep-last-N` bounds each receiver's
    /// backlog of this output's messages. `drop-oldest` applies to queues of
    /// messages not yet handed to receivers (links, recorders) and is
    /// refused for an output: a receiver may already map a sent message.
    pub fn backpressure<T>(&mut self, out: Output<T>, policy: Backpressure) -> &mut Program {
        if policy == Backpressure::DropOldest {
            self.problems.push(format!(
                "output {} asks for drop-oldest, which applies to queues of messages not yet sent (links, recorders); for an output use keep-last-N (each receiver keeps the newest N)",
                self.port_path(out.id)
            ));
        }
        self.backpressure.insert(out.id, policy);
        self
    }

    /// The backpressure of output `out`.
    pub(crate) fn backpressure_of(&self, out: TriggerId) -> Backpressure {
        self.backpressure.get(&out).copied().unwrap_or_default()
    }

    /// Connects `from` to `to` with no delay: the value arrives at the
    /// sender's tag.
    pub fn connect<T>(&mut self, from: Output<T>, to: Input<T>) -> &mut Program {
        self.add_connection(from.id, to.id, Delay::None, false)
    }

    /// Connects `from` to `to` with `after d`: a value sent at (t, m)
    /// arrives at (t + d, 0), or at (t, m + 1) when `d` is zero.
    pub fn connect_after<T>(&mut self, from: Output<T>, to: Input<T>, d: Duration) -> &mut Program {
        self.add_connection(from.id, to.id, Delay::After(duration_ns(d)), false)
    }

    /// A physical connection (`~>`): the receiver stamps each value with
    /// its own physical time. Not deterministic; for sensors and UIs.
    pub fn connect_physical<T>(&mut self, from: Output<T>, to: Input<T>) -> &mut Program {
        self.add_connection(from.id, to.id, Delay::None, true)
    }

    pub(crate) fn add_connection(
        &mut self,
        from: TriggerId,
        to: TriggerId,
        delay: Delay,
        physical: bool,
    ) -> &mut Program {
        if let Some(c) = self.connections.iter().find(|c| c.to == to) {
            let other = self.port_path(c.from);
            self.problems.push(format!(
                "input {} is connected twice (from {} and from {}); an input takes one connection",
                self.port_path(to),
                other,
                self.port_path(from)
            ));
        }
        self.connections.push(ConnectionDef { from, to, delay, physical });
        self
    }

    /// Every problem in the program, one sentence each: duplicate names,
    /// inputs connected twice, causality loops.
    pub fn validate(&self) -> Result<(), ProgramError> {
        let mut problems = self.problems.clone();
        if self.federates.is_empty() {
            problems.push("the program has no federates".into());
        }
        if self.federates.len() > usize::from(u16::MAX) {
            problems.push(format!("{} federates is over the protocol's limit of 65535", self.federates.len()));
        }
        // Messages name their connection by its index (a u16 on the wire).
        if self.connections.len() > usize::from(u16::MAX) {
            problems.push(format!("{} connections is over the protocol's limit of 65535", self.connections.len()));
        }
        for (i, f) in self.federates.iter().enumerate() {
            if let Err(e) = crate::level::levels(self, FederateId(i as u32)) {
                problems.push(format!("federate {}: {e}", f.name));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ProgramError { program: self.name.clone(), problems })
        }
    }

    /// The federate named `name`.
    pub fn federate_named(&self, name: &str) -> Option<FederateId> {
        self.federates.iter().position(|f| f.name == name).map(|i| FederateId(i as u32))
    }

    /// Names of all federates, in id order.
    pub fn federate_names(&self) -> Vec<&str> {
        self.federates.iter().map(|f| f.name.as_str()).collect()
    }

    pub(crate) fn federate_name(&self, f: FederateId) -> &str {
        self.federates.get(f.index()).map(|f| f.name.as_str()).unwrap_or("?")
    }

    pub(crate) fn federate_of(&self, t: TriggerId) -> FederateId {
        self.reactors[self.triggers[t.index()].reactor.index()].federate
    }

    /// `federate.reactor.port`, for messages.
    pub(crate) fn port_path(&self, t: TriggerId) -> String {
        let Some(trig) = self.triggers.get(t.index()) else { return format!("<unknown port {}>", t.0) };
        let r = &self.reactors[trig.reactor.index()];
        format!("{}.{}.{}", self.federate_name(r.federate), r.name, trig.name)
    }

    /// Reactor `r`'s (index, width) in its bank: a thread bank's member is
    /// a reactor named `name[i]`, a process bank's a federate named so
    /// (`manifest::bank`: the name is where membership is written).
    pub(crate) fn bank_member(&self, r: ReactorId) -> Option<(u32, u32)> {
        use crate::manifest::bank::membership;
        let def = self.reactors.get(r.index())?;
        let fed = &self.federates[def.federate.index()];
        let reactors = fed.reactors.iter().map(|x| self.reactors[x.index()].name.as_str());
        membership(&def.name, reactors)
            .filter(|_| crate::manifest::bank::split_member(&fed.name).is_none())
            .or_else(|| membership(&fed.name, self.federates.iter().map(|f| f.name.as_str())))
            .map(|(_, i, w)| (i, w))
    }

    /// Connections whose ends are in different federates, with `fed` at one end.
    pub(crate) fn network_connections(&self, fed: FederateId) -> impl Iterator<Item = &ConnectionDef> + '_ {
        self.connections.iter().filter(move |c| {
            let (a, b) = (self.federate_of(c.from), self.federate_of(c.to));
            a != b && (a == fed || b == fed)
        })
    }

    /// Upstream federates of `fed` with the smallest logical delay from
    /// each (physical connections excluded), as NEIGHBOR_STRUCTURE wants.
    pub(crate) fn upstreams(&self, fed: FederateId) -> Vec<(FederateId, Delay)> {
        let mut m: HashMap<FederateId, Delay> = HashMap::new();
        for c in self.network_connections(fed).filter(|c| !c.physical && self.federate_of(c.to) == fed) {
            let from = self.federate_of(c.from);
            let d = m.get(&from).map_or(c.delay, |d| d.min(c.delay));
            m.insert(from, d);
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by_key(|(f, _)| *f);
        v
    }

    /// Downstream federates of `fed` over logical connections.
    pub(crate) fn downstreams(&self, fed: FederateId) -> Vec<FederateId> {
        let mut v: Vec<_> = self
            .network_connections(fed)
            .filter(|c| !c.physical && self.federate_of(c.from) == fed)
            .map(|c| self.federate_of(c.to))
            .collect();
        v.sort();
        v.dedup();
        v
    }
}
