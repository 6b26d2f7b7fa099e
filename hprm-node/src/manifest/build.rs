//! Between [`Program`] and [`Manifest`]: a program describes itself, and a
//! process that lacks a program's code builds it from its manifest.
//!
//! Invariant: `Program::from_manifest(&p.manifest(), ..)` has the same
//! federates and connections, in the same order, as `p`. The wire names a
//! federate by its index and a message's port by its connection's index,
//! so that order is all that processes must agree on.

use std::time::Duration;

use hprm_rti::tag::Delay;

use super::bank::{member_name, multiport, split_member};
use super::check::split_path;
use super::{
    format_duration, parse_duration, port_decl, ActionSpec, ConnectionSpec, CoordinationMode, FederateSpec, Manifest,
    ReactionSpec, ReactorSpec, TimerSpec,
};
use crate::error::ProgramError;
use crate::ids::{duration_ns, FederateId, ReactorId, TriggerId, Value};
use crate::payload::{Decoder, Encoder, PayloadError};
use crate::program::{Coordination, Program, TriggerKind};

impl Program {
    /// The program's graph as data (for `hprm check`/`graph`/`launch`, and
    /// for processes that join it without its code).
    pub fn manifest(&self) -> Manifest {
        let (coordination, stp) = match self.coordination {
            Coordination::Centralized => (CoordinationMode::Centralized, None),
            Coordination::Decentralized { stp } => (CoordinationMode::Decentralized, Some(format_duration(stp))),
        };
        let federates = self
            .federates
            .iter()
            .map(|f| FederateSpec {
                name: f.name.clone(),
                restart: f.restart,
                max_restarts: f.max_restarts,
                host: f.host.clone(),
                priority: f.realtime.priority,
                policy: f.realtime.priority.map(|_| f.realtime.policy),
                cpus: f.realtime.cpus.as_ref().map(ToString::to_string),
                socket_priority: f.realtime.marks.priority,
                dscp: f.realtime.marks.dscp,
                best_effort: f.realtime.best_effort,
                reactors: f.reactors.iter().map(|&r| self.reactor_spec(r)).collect(),
                ..Default::default()
            })
            .collect();
        let connections = self
            .connections
            .iter()
            .map(|c| ConnectionSpec {
                from: self.port_path(c.from),
                to: self.port_path(c.to),
                after: match c.delay {
                    Delay::None => None,
                    Delay::After(ns) => Some(format_duration(Duration::from_nanos(ns.max(0) as u64))),
                },
                physical: c.physical,
                ..Default::default()
            })
            .collect();
        Manifest {
            name: self.name.clone(),
            coordination,
            stp,
            threshold: Some(self.threshold as u64),
            timeout: self.timeout.map(format_duration),
            store_memory: None,
            hosts: self.hosts.clone(),
            rti_host: self.rti_host.clone(),
            rti_port: self.rti_port,
            federates,
            connections,
            record: None,
        }
    }

    fn reactor_spec(&self, r: ReactorId) -> ReactorSpec {
        let def = &self.reactors[r.index()];
        let mut spec = ReactorSpec { name: def.name.clone(), ..Default::default() };
        let triggers: Vec<_> = self.triggers.iter().filter(|t| t.reactor == r).collect();
        // A multiport's channels (`frames[0]`, ..) are declared as one `frames[N]`.
        let port = |name: &str, input: bool| match split_member(name) {
            Some((base, 0)) => {
                let width = triggers
                    .iter()
                    .filter(|t| matches!(t.kind, TriggerKind::Input { .. }) == input)
                    .filter(|t| matches!(t.kind, TriggerKind::Input { .. } | TriggerKind::Output { .. }))
                    .filter(|t| split_member(&t.name).is_some_and(|(b, _)| b == base))
                    .count();
                Some(member_name(base, width as u32))
            }
            Some(_) => None,
            None => Some(name.to_string()),
        };
        for t in &triggers {
            let name = t.name.clone();
            match &t.kind {
                TriggerKind::Input { .. } => spec.inputs.extend(port(&name, true)),
                TriggerKind::Output { .. } => spec.outputs.extend(port(&name, false)),
                TriggerKind::Timer { offset, period } => spec.timers.push(TimerSpec {
                    name,
                    offset: format_duration(*offset),
                    period: format_duration(*period),
                }),
                TriggerKind::LogicalAction { min_delay } => spec.actions.push(ActionSpec {
                    name,
                    physical: false,
                    min_delay: format_duration(*min_delay),
                    opaque: false,
                }),
                TriggerKind::PhysicalAction { min_delay, codec } => spec.actions.push(ActionSpec {
                    name,
                    physical: true,
                    min_delay: format_duration(*min_delay),
                    opaque: codec.is_none(),
                }),
                TriggerKind::Startup | TriggerKind::Shutdown => {}
            }
        }
        // A reaction names a multiport by its base name, once.
        let names = |ids: &[TriggerId]| {
            let mut v: Vec<String> = Vec::new();
            for t in ids {
                let name = &self.triggers[t.index()].name;
                let name = split_member(name).map_or(name.as_str(), |(base, _)| base);
                if !v.iter().any(|n| n == name) {
                    v.push(name.to_string());
                }
            }
            v
        };
        spec.reactions = def
            .reactions
            .iter()
            .map(|&x| {
                let rx = &self.reactions[x.index()];
                ReactionSpec {
                    name: rx.name.clone(),
                    triggers: names(&rx.triggers),
                    sources: names(&rx.sources),
                    effects: names(&rx.effects),
                    deadline: rx.deadline.as_ref().map(|(d, _)| format_duration(*d)),
                }
            })
            .collect();
        spec
    }

    /// Builds the program `m` describes, for running its federate `local`.
    /// `build` declares each reactor of `local` (with
    /// [`Program::reactor`], the spec's name, and ports of the spec's
    /// names, typed as it likes, with its reactions); every other
    /// federate's reactors become port-only stubs. Then connections are
    /// wired by path. Any problem of the manifest, a port the callback did
    /// not declare, or a problem of the result is an error.
    pub fn from_manifest(
        m: &Manifest,
        local: &str,
        mut build: impl FnMut(&mut Program, FederateId, &ReactorSpec) -> Result<ReactorId, ProgramError>,
    ) -> Result<Program, ProgramError> {
        let invalid = |problems: Vec<String>| ProgramError { program: m.name.clone(), problems };
        let problems = m.check();
        if !problems.is_empty() {
            return Err(invalid(problems.into_iter().map(|p| p.message).collect()));
        }
        let m = &m.expanded();
        if m.federate(local).is_none() {
            return Err(invalid(vec![format!(
                "the manifest has no federate {local:?}; its federates are {}",
                m.federates.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ")
            )]));
        }
        // Checked above: every duration parses.
        let dur = |s: &str| parse_duration(s).unwrap_or_default();
        let mut p = Program::new(m.name.clone());
        p.hosts = m.hosts.clone();
        p.rti_host = m.rti_host.clone();
        p.rti_port = m.rti_port;
        if m.coordination == CoordinationMode::Decentralized {
            p.coordination(Coordination::Decentralized {
                stp: m.stp.as_deref().map(dur).unwrap_or(Duration::from_millis(20)),
            });
        }
        if let Some(t) = m.threshold {
            p.threshold(usize::try_from(t).unwrap_or(usize::MAX));
        }
        if let Some(t) = &m.timeout {
            p.timeout(dur(t));
        }
        for f in &m.federates {
            let fed = p.federate(f.name.clone());
            if f.restart == super::RestartPolicy::OnFailure {
                p.restart_on_failure(fed, f.max_restarts);
            }
            if let Some(h) = &f.host {
                p.run_on(fed, h.clone());
            }
            if f.priority.is_some() || f.cpus.is_some() || f.socket_priority.is_some() || f.dscp.is_some() {
                // A bad CPU list was reported by `check`.
                let cpus = f.cpus.as_deref().and_then(|c| c.parse().ok());
                p.realtime(
                    fed,
                    crate::realtime::Realtime {
                        priority: f.priority,
                        policy: f.policy.unwrap_or_default(),
                        cpus,
                        marks: crate::realtime::SocketMarks { priority: f.socket_priority, dscp: f.dscp },
                        best_effort: f.best_effort,
                    },
                );
            }
            for r in &f.reactors {
                if f.name == local {
                    build(&mut p, fed, r)?;
                } else {
                    let mut b = p.reactor(fed, r.name.clone(), ());
                    for d in &r.inputs {
                        match multiport(d) {
                            Some((base, w)) => drop(b.input_multiport_with::<()>(base, w, stub_decode)),
                            None => drop(b.input_with::<()>(port_decl(d).0, stub_decode)),
                        }
                    }
                    for d in &r.outputs {
                        match multiport(d) {
                            Some((base, w)) => drop(b.output_multiport_with::<()>(base, w, stub_encode)),
                            None => drop(b.output_with::<()>(port_decl(d).0, stub_encode)),
                        }
                    }
                }
            }
        }
        let mut missing = Vec::new();
        for c in &m.connections {
            let ends = [&c.from, &c.to].map(|path| {
                let found = p.port_by_path(path);
                if found.is_none() {
                    missing.push(format!(
                        "the manifest connects {path}, but federate {local}'s code declares no such port"
                    ));
                }
                found
            });
            if let [Some(from), Some(to)] = ends {
                let delay = c.after.as_deref().map_or(Delay::None, |d| Delay::After(duration_ns(dur(d))));
                p.add_connection(from, to, delay, c.physical);
            }
        }
        if !missing.is_empty() {
            return Err(invalid(missing));
        }
        p.validate()?;
        Ok(p)
    }

    /// The port at `federate.reactor.port` (or `federate.port` when the
    /// federate has one reactor).
    pub fn port_by_path(&self, path: &str) -> Option<TriggerId> {
        let (f, r, port) = split_path(path)?;
        let fed = self.federates.iter().find(|d| d.name == f)?;
        let reactor = match r {
            Some(r) => *fed.reactors.iter().find(|&&x| self.reactors[x.index()].name == r)?,
            None if fed.reactors.len() == 1 => fed.reactors[0],
            None => return None,
        };
        self.triggers
            .iter()
            .position(|t| {
                t.reactor == reactor
                    && t.name == port
                    && matches!(t.kind, TriggerKind::Input { .. } | TriggerKind::Output { .. })
            })
            .map(|i| TriggerId(i as u32))
    }
}

/// Ports of other federates are never encoded or decoded in this process:
/// their values live in their own federate.
fn stub_decode(_: &[u8], _: &Decoder) -> Result<Value, PayloadError> {
    Err(PayloadError::Mismatch {
        type_name: "a port of another federate",
        message: "this process does not run that federate".into(),
    })
}

fn stub_encode(_: &Value, _: &Encoder, _: u32) -> Result<Vec<u8>, PayloadError> {
    Err(PayloadError::Serialize { message: "a port of another federate cannot be set in this process".into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-federate program with a timer, a delayed and a physical connection.
    fn program() -> Program {
        let mut p = Program::new("m");
        p.coordination(Coordination::Decentralized { stp: Duration::from_millis(5) }).timeout(Duration::from_secs(1));
        let a = p.federate("a");
        let b = p.federate("b");
        let mut src = p.reactor(a, "src", 0u32);
        let t = src.timer("tick", Duration::ZERO, Duration::from_millis(10));
        let out = src.output::<u32>("out");
        let out2 = src.output::<u32>("raw");
        src.reaction("emit").trigger(t).effect(out).effect(out2).body(move |n, ctx| {
            *n += 1;
            ctx.set(out, *n);
        });
        let mut dst = p.reactor(b, "dst", ());
        let inp = dst.input::<u32>("inp");
        let inp2 = dst.input::<u32>("raw");
        dst.reaction("take").trigger(inp).source(inp2).body(|_, _| {});
        p.connect_after(out, inp, Duration::from_millis(2));
        p.connect_physical(out2, inp2);
        p
    }

    #[test]
    fn a_program_describes_itself() {
        let m = program().manifest();
        assert_eq!(m.check(), vec![]);
        assert_eq!(m.coordination, CoordinationMode::Decentralized);
        assert_eq!(m.stp.as_deref(), Some("5ms"));
        assert_eq!(m.timeout.as_deref(), Some("1s"));
        let src = &m.federates[0].reactors[0];
        assert_eq!(src.outputs, vec!["out", "raw"]);
        assert_eq!(src.timers, vec![TimerSpec { name: "tick".into(), offset: "0ms".into(), period: "10ms".into() }]);
        assert_eq!(src.reactions[0].effects, vec!["out", "raw"]);
        assert_eq!(
            m.connections[0],
            ConnectionSpec {
                from: "a.src.out".into(),
                to: "b.dst.inp".into(),
                after: Some("2ms".into()),
                ..Default::default()
            }
        );
        assert!(m.connections[1].physical);
        // The JSON form reads back the same.
        assert_eq!(Manifest::from_json(&m.to_json()).unwrap(), m);
    }

    #[test]
    fn a_manifest_builds_the_same_graph_around_a_local_federate() {
        let m = program().manifest();
        let p = Program::from_manifest(&m, "b", |p, fed, spec| {
            let mut r = p.reactor(fed, spec.name.clone(), ());
            let i = r.input::<u32>("inp");
            r.input::<u32>("raw");
            r.reaction("take").trigger(i).body(|_, _| {});
            Ok(r.id())
        })
        .unwrap();
        let again = p.manifest();
        assert_eq!(again.connections, m.connections);
        assert!(again.hosts.is_empty() && again.federates.iter().all(|f| f.host.is_none()));
        assert_eq!(again.federates.iter().map(|f| &f.name).collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(again.federates[0].reactors[0].outputs, vec!["out", "raw"]);
    }

    #[test]
    fn hosts_and_placements_go_into_the_manifest_and_back() {
        let mut p = program();
        p.host("pc1", "10.0.0.1", None)
            .host("pc2", "10.0.0.2", Some("tcp/10.0.0.2:7500".into()))
            .rti_on("pc2", Some(16000));
        let (a, b) = (p.federate_named("a").unwrap(), p.federate_named("b").unwrap());
        p.run_on(a, "pc1").run_on(b, "pc2");
        let m = p.manifest();
        assert_eq!(m.check(), vec![]);
        assert_eq!((m.rti_host().map(|h| h.name.as_str()), m.rti_port), (Some("pc2"), Some(16000)));
        assert_eq!(m.hosts[1].link_endpoint(), "tcp/10.0.0.2:7500");
        assert_eq!(m.federates.iter().map(|f| f.host.as_deref()).collect::<Vec<_>>(), vec![Some("pc1"), Some("pc2")]);
        let back = Program::from_manifest(&m, "a", |p, fed, spec| {
            let mut r = p.reactor(fed, spec.name.clone(), ());
            r.output::<u32>("out");
            r.output::<u32>("raw");
            Ok(r.id())
        })
        .unwrap();
        let again = back.manifest();
        assert_eq!((again.hosts, again.rti_host, again.rti_port), (m.hosts.clone(), m.rti_host.clone(), m.rti_port));
        assert_eq!(again.federates[1].host.as_deref(), Some("pc2"));
    }

    #[test]
    fn a_local_federate_missing_a_port_is_an_error() {
        let m = program().manifest();
        let e =
            Program::from_manifest(&m, "b", |p, fed, spec| Ok(p.reactor(fed, spec.name.clone(), ()).id())).unwrap_err();
        assert!(
            e.to_string().contains("the manifest connects b.dst.inp, but federate b's code declares no such port"),
            "{e}"
        );
        let e = Program::from_manifest(&m, "zz", |p, fed, spec| Ok(p.reactor(fed, spec.name.clone(), ()).id()))
            .unwrap_err();
        assert!(e.to_string().contains("no federate \"zz\"; its federates are a, b"), "{e}");
    }
}
