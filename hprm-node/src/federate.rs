//! Running one federate of a program: connect to the RTI (and peers),
//! agree on the start time, run the scheduler, resign.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::error::NodeError;
use crate::ids::FederateId;
use crate::inbox::Inbox;
use crate::net::rti::{self, RtiConfig};
use crate::net::source::{NetworkInput, Receiving};
use crate::payload::{Decoder, Encoder, StoreLink};
use crate::program::{Coordination, Program, TriggerKind};
use crate::scheduler::{Options, RunReport, Scheduler, Transport};

/// How to run one federate.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The federate to run.
    pub federate: String,
    /// The RTI; `None` runs a one-federate program on its own.
    pub rti: Option<RtiConfig>,
    /// The object store's socket, for values with large buffers.
    pub store: Option<PathBuf>,
    /// As fast as possible: logical time does not wait for physical time.
    pub fast: bool,
    /// Threads that run independent reactions of one level in parallel.
    pub workers: usize,
    /// How long the scheduler polls its inbox before sleeping
    /// ([`DEFAULT_SPIN`]; zero never polls).
    pub spin: Duration,
    /// How to reach the RTI and downstream peers on this host.
    pub local_transport: crate::net::socket::LocalTransport,
    /// Stop at the next common tag on SIGINT/SIGTERM (for federate
    /// processes; leave off when running federates as threads of a test).
    pub handle_signals: bool,
    /// Overrides the program's coordination (a launcher's `--coordination`;
    /// every federate of the launch gets the same).
    pub coordination: Option<Coordination>,
    /// The program's runtime directory (`HPRM_RUNTIME_DIR`): where this
    /// federate publishes its status for `hprm ps` and listens for taps
    /// (`hprm topic`). One federate per directory and name.
    pub runtime_dir: Option<PathBuf>,
    /// Where the program's federates run, when it spans hosts (the
    /// launcher's `HPRM_HOST`, see [`crate::hosts`]).
    pub hosts: Option<crate::hosts::Hosts>,
    /// The recorder's socket and backlog policy (`hprm launch --record`):
    /// every value this federate sends to another federate is copied there.
    pub record: Option<(PathBuf, hprm_store::Backpressure)>,
    /// A replay's recorded deadline decisions (`hprm replay`, see
    /// [`crate::record::Decisions`]): taken instead of the clock.
    pub decisions: Option<PathBuf>,
    /// A replay's recorded physical action values (`hprm replay`, see
    /// [`crate::record::PhysicalEvents`]): fed at their recorded tags,
    /// instead of what the program's threads schedule.
    pub physical: Option<PathBuf>,
}

/// How long a scheduler polls its inbox (yielding its CPU to anything
/// ready to run) before it sleeps: longer than a centralized round trip
/// through the RTI on a loaded 2-CPU machine, so that a reply seldom has to
/// wake a sleeping thread. The same bound holds at a real-time priority
/// (see `realtime` for what it costs normal threads there).
pub const DEFAULT_SPIN: Duration = Duration::from_micros(200);

/// The environment variable that sets how long a federate's scheduler
/// polls its inbox, in microseconds (0: never), overriding
/// [`RunOptions::spin`]; at most [`MAX_SPIN`]. The knob for processes the
/// launcher or systemd starts, where no one builds `RunOptions` by hand.
pub const SPIN_ENV: &str = "HPRM_SPIN_US";

/// The largest spin [`SPIN_ENV`] may ask for (the RTI's `--spin-us`
/// has the same bound): the spin is a bound on polling, not a way to
/// keep a CPU.
pub const MAX_SPIN: Duration = Duration::from_secs(1);

/// The spin [`SPIN_ENV`] asks for (`value`), or `default` when it is
/// unset or empty; an error saying what is wrong with a bad value.
pub fn spin_from(value: Option<&str>, default: Duration) -> Result<Duration, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else { return Ok(default) };
    match v.parse::<u64>() {
        Ok(us) if Duration::from_micros(us) <= MAX_SPIN => Ok(Duration::from_micros(us)),
        _ => Err(format!(
            "{SPIN_ENV}={v:?} is not a whole number of microseconds from 0 to {} (default {})",
            MAX_SPIN.as_micros(),
            DEFAULT_SPIN.as_micros()
        )),
    }
}

impl RunOptions {
    /// Options for federate `name` with defaults: no RTI, no store, real time.
    pub fn new(name: impl Into<String>) -> RunOptions {
        RunOptions {
            federate: name.into(),
            rti: None,
            store: None,
            fast: false,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()).min(4),
            spin: DEFAULT_SPIN,
            local_transport: crate::net::socket::LocalTransport::default(),
            handle_signals: false,
            coordination: None,
            runtime_dir: None,
            hosts: None,
            record: None,
            decisions: None,
            physical: None,
        }
    }
}

/// Closes the federate's connections when [`run_federate`] returns,
/// however it returns: after that, nothing of the runtime runs the
/// program's code (`Inbox::close_sources`).
struct ClosingSources(Arc<Inbox>);

impl Drop for ClosingSources {
    fn drop(&mut self) {
        self.0.close_sources();
    }
}

/// Runs one federate of `program` to its end. When it returns, no thread it
/// started runs the program's code any more (reactions, decoders): a
/// message that arrives later is dropped.
pub fn run_federate(mut program: Program, opts: RunOptions) -> Result<RunReport, NodeError> {
    if let Some(c) = opts.coordination {
        program.coordination = c;
    }
    program.validate()?;
    let fed = program.federate_named(&opts.federate).ok_or_else(|| NodeError::UnknownFederate {
        name: opts.federate.clone(),
        program: program.name.clone(),
        known: program.federate_names().join(", "),
    })?;
    // Before any thread starts: they inherit it (see `realtime`).
    let realtime = program.federates[fed.index()].realtime.apply(&opts.federate)?;
    let idx = |f: FederateId| f.0 as u16;
    crate::trace::init_from_env(&opts.federate);
    // What a tap may watch: outputs that leave this federate.
    let mut tappable: Vec<(crate::ids::TriggerId, String)> = Vec::new();
    for c in &program.connections {
        if program.federate_of(c.from) == fed
            && program.federate_of(c.to) != fed
            && !tappable.iter().any(|(t, _)| *t == c.from)
        {
            tappable.push((c.from, program.port_path(c.from)));
        }
    }
    // At a real-time priority too: the spin is bounded and yields on every
    // turn (`realtime` says what it costs normal threads, and the remedies).
    let spin = spin_from(std::env::var(SPIN_ENV).ok().as_deref(), opts.spin).map_err(NodeError::Launch)?;
    tracing::debug!(realtime, spin_us = spin.as_micros() as u64, "inbox polling bound");
    let inbox = Arc::new(Inbox::new(spin));
    let _closing = ClosingSources(inbox.clone());
    // Held for the run: signals stop this federate only while it runs.
    let _signals = opts.handle_signals.then(|| crate::signal::forward_to(inbox.clone())).transpose()?;
    let clock = Arc::new(Clock::default());
    let mut clock_sync = None;
    let store = StoreLink::for_program(opts.store.clone(), &program.name);
    let encoder = Encoder::new(store.clone(), program.threshold)
        .with_wait_for_space(hprm_store::Backpressure::default().wait_for_space());
    let decoder = Decoder::new(store, crate::hosts::RECEIVER_GET_TIMEOUT)
        .watching_hosts(opts.hosts.as_ref().map(|h| crate::hosts::LostHosts::of_link(&h.link)));
    let feed_decoder = decoder.clone();

    let decentralized = matches!(program.coordination, Coordination::Decentralized { .. });
    let mut inputs: Vec<Option<NetworkInput>> = program.connections.iter().map(|_| None).collect();
    // The federates this one exchanges messages with directly, over peer
    // connections: every neighbour in decentralized coordination; in
    // centralized, those of physical connections only (as in LF: the RTI
    // relays logical connections, whose tags it must account for, while a
    // physical connection's receiver stamps values with its own time).
    let mut inbound: Vec<u16> = Vec::new();
    let mut outbound: Vec<u16> = Vec::new();
    for (wire, c) in program.connections.iter().enumerate() {
        let (a, b) = (program.federate_of(c.from), program.federate_of(c.to));
        if a == b {
            continue;
        }
        let direct = decentralized || c.physical;
        if b == fed {
            if let TriggerKind::Input { decode, .. } = program.triggers[c.to.index()].kind {
                inputs[wire] = Some(NetworkInput {
                    input: c.to,
                    decode,
                    sender: program.port_path(c.from),
                    receiver: program.port_path(c.to),
                });
            }
            if direct {
                inbound.push(idx(a));
            }
        }
        if a == fed && direct {
            outbound.push(idx(b));
        }
    }
    inbound.sort();
    inbound.dedup();
    outbound.sort();
    outbound.dedup();
    let board = Arc::new(crate::status::Board::new(
        inputs.iter().map(|n| n.as_ref().map(|n| (n.sender.clone(), n.receiver.clone()))).collect(),
        program.reactions.len(),
    ));
    let rx = Arc::new(Receiving { inputs, decoder, inbox: inbox.clone(), board: board.clone() });

    let mut unix_socket = None;
    let (transport, start, resume) = match &opts.rti {
        None => {
            if program.federates.len() > 1 {
                return Err(NodeError::Launch(format!(
                    "program {:?} has {} federates; run each with the address of an RTI (`--rti HOST:PORT`), or launch them all by running the program without --federate",
                    program.name,
                    program.federates.len()
                )));
            }
            (Transport::Alone, clock.now(), None)
        }
        Some(cfg) => {
            // Decentralized federates tell the RTI no neighbours: it only starts and stops them.
            let (ups, downs) = if decentralized {
                (Vec::new(), Vec::new())
            } else {
                (
                    program.upstreams(fed).into_iter().map(|(f, d)| (idx(f), d)).collect(),
                    program.downstreams(fed).into_iter().map(idx).collect(),
                )
            };
            let mut session = rti::join(cfg, opts.local_transport, idx(fed), &opts.federate, &ups, &downs)?;
            if !inbound.is_empty() {
                let names = program.federates.iter().map(|f| f.name.clone()).collect();
                let (port, file) = crate::net::peer::listen(inbound.len(), cfg.federation.clone(), rx.clone(), names)?;
                unix_socket = file;
                session.advertise(port)?;
            }
            let mut peers = None;
            if decentralized || !outbound.is_empty() {
                let downstream: Vec<(u16, String)> =
                    outbound.iter().map(|&f| (f, program.federates[usize::from(f)].name.clone())).collect();
                peers = Some(crate::net::peer::connect_all(
                    &mut session,
                    idx(fed),
                    &cfg.federation,
                    &downstream,
                    opts.local_transport,
                    cfg.connect_timeout,
                )?);
            }
            // Measured at join: corrected before the start time is proposed.
            if let Some(offset) = session.clock_offset() {
                tracing::info!(federate = %opts.federate, offset_ns = offset, "clock synchronized with the RTI");
                clock.adjust(offset);
            }
            let (start, resume) = session.start_time(clock.now())?;
            if let Some(r) = resume {
                tracing::warn!(federate = %opts.federate, resume = %r, elapsed_ns = r.time.saturating_sub(start), "rejoined the running program after a restart: resuming at the RTI's tag (startup reactions run there; inputs sent while down are lost)");
            }
            if let Some(udp) = session.udp.take() {
                clock_sync = Some(
                    crate::net::clock_sync::spawn(udp, idx(fed), clock.clone())
                        .map_err(|e| NodeError::io("starting the clock synchronization thread", e))?,
                );
            }
            rti::spawn_reader(session.reader, session.addr, rx.clone())
                .map_err(|e| NodeError::io("starting the RTI reader", e))?;
            let transport = match peers {
                Some(peers) => Transport::Peers { rti: session.writer, peers },
                None => Transport::Rti(session.writer),
            };
            (transport, start, resume)
        }
    };
    tracing::info!(federate = %opts.federate, start, "starting");
    let watchdog = hprm_sd_notify::Watchdog::from_env();
    let decisions = match &opts.decisions {
        // A replay that cannot take the recorded decisions would differ: it does not run.
        Some(path) => Some(crate::record::Decisions::load(path).map_err(|e| NodeError::Launch(e.to_string()))?),
        None => None,
    };
    let sched_opts = Options {
        fast: opts.fast,
        workers: opts.workers.max(1),
        start,
        resume,
        watchdog,
        hosts: opts.hosts.clone(),
        decisions,
    };
    let federation = program.name.clone();
    if let Some(t) = crate::trace::tracer() {
        t.set_start(start);
    }
    let store_socket = opts.store.clone();
    // This federate's physical actions: (trigger, path, encodable).
    let physical: Vec<(crate::ids::TriggerId, String, bool)> = (0..program.triggers.len())
        .map(|i| crate::ids::TriggerId(i as u32))
        .filter_map(|t| match program.triggers[t.index()].kind {
            TriggerKind::PhysicalAction { codec, .. }
                if program.reactors[program.triggers[t.index()].reactor.index()].federate == fed =>
            {
                Some((t, program.port_path(t), codec.is_some()))
            }
            _ => None,
        })
        .collect();
    if opts.record.is_some() {
        // Known from the types: refused before this federate runs anything.
        let opaque = physical.iter().filter(|(_, _, encodable)| !encodable).map(|(_, p, _)| p.clone()).collect();
        crate::record::refuse_opaque(opaque).map_err(|e| NodeError::Record(e.to_string()))?;
    }
    let replayed = match &opts.physical {
        Some(path) => Some(crate::record::PhysicalEvents::open(path).map_err(|e| NodeError::Record(e.to_string()))?),
        None => None,
    };
    // What of them is also recorded in another system's encoding (the hello says so).
    let foreign: std::collections::BTreeMap<String, crate::record::Foreign> =
        physical.iter().filter_map(|(t, p, _)| program.foreign.get(t).map(|f| (p.clone(), f.clone()))).collect();
    let mut sched = Scheduler::new(program, fed, sched_opts, clock.clone(), inbox, encoder, transport, board, &idx)?;
    if let Some(events) = replayed {
        sched.set_physical_replay(events, feed_decoder.clone());
    }
    if let Some((path, policy)) = &opts.record {
        // Asked for by the launcher: a federate that cannot be recorded
        // does not run unrecorded.
        let hello = crate::record::Hello {
            federate: opts.federate.clone(),
            start,
            store: store_socket,
            ports: tappable.iter().map(|(_, p)| p.clone()).collect(),
            physical: physical.iter().map(|(_, p, _)| p.clone()).collect(),
            foreign,
        };
        let ports: Vec<_> = tappable.iter().map(|(t, _)| *t).chain(physical.iter().map(|(t, _, _)| *t)).collect();
        let feed = crate::record::Feed::connect(path, *policy, &hello, &ports, feed_decoder.clone())
            .map_err(|e| NodeError::Launch(e.to_string()))?;
        sched.set_record(feed);
    }
    let mut observed = None;
    if let Some(dir) = &opts.runtime_dir {
        // Observing is never a reason to fail: without it the federate runs unobserved.
        let status = crate::status::Publisher::start(dir, &opts.federate, start, sched.board(), clock.clone())
            .inspect_err(|e| {
                tracing::warn!("cannot start the status thread: {e}; `hprm ps` will not see this federate's progress")
            })
            .ok();
        let tap = match crate::tap::listen(dir, &opts.federate, tappable, start, Some(feed_decoder.clone())) {
            Ok((hub, file)) => {
                sched.set_tap(hub);
                Some(file)
            }
            Err(e) => {
                tracing::warn!(
                    "cannot listen for taps in {}: {e}; `hprm topic` will not reach this federate",
                    dir.display()
                );
                None
            }
        };
        observed = Some((status, tap));
    }
    // Joined, connected to its peers, start time agreed: under systemd the
    // units ordered after this one may start now.
    hprm_sd_notify::ready(&format!("federate {} of {federation}: running from start time {start}", opts.federate));
    crate::signal::mark_running();
    let mut report = sched.run();
    if let (Ok(r), Some(sync)) = (&mut report, clock_sync.take()) {
        r.clock_sync_rounds = sync.rounds();
    }
    if let Ok(r) = &report {
        let store_lost = r.losses.total(crate::loss::Loss::StoreLost);
        if store_lost > 0 {
            // The exit summary's line for it: never silently skipped.
            tracing::warn!(
                federate = %opts.federate,
                store_lost,
                "{store_lost} deliveries were lost because hprm-store died during the run (values this federate could not send, \
                 and messages it received whose objects died with the store)"
            );
        }
    }
    // Stops the status thread, which then writes the final counts.
    drop(observed);
    crate::trace::finish(clock.measured_offset());
    hprm_sd_notify::stopping(&match &report {
        Ok(r) => format!("federate {} finished after {} tags", opts.federate, r.tags),
        Err(e) => format!("federate {} failed: {e}", opts.federate),
    });
    drop(unix_socket);
    if let Ok(r) = &report {
        r.log_done();
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_env_is_applied_within_its_bound_and_refused_otherwise() {
        let default = Duration::from_micros(123);
        assert_eq!(spin_from(None, default), Ok(default));
        assert_eq!(spin_from(Some("  "), default), Ok(default));
        assert_eq!(spin_from(Some("50"), default), Ok(Duration::from_micros(50)));
        assert_eq!(spin_from(Some(" 0 "), default), Ok(Duration::ZERO));
        assert_eq!(spin_from(Some("1000000"), default), Ok(MAX_SPIN));
        for bad in ["1000001", "-5", "200us", "lots"] {
            let e = spin_from(Some(bad), default).expect_err(bad);
            assert!(e.contains(SPIN_ENV) && e.contains(bad), "{e}");
        }
    }
}
