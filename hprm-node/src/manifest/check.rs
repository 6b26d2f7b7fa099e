//! Every problem of a manifest, each with where it is.
//!
//! [`Manifest::check`] finds all problems at once (a user fixing a
//! manifest wants the whole list, not one per run): names, unknown or
//! misdirected ports, inputs connected twice, port types that differ across
//! a connection, durations that do not parse, reactions naming what their
//! reactor lacks, and zero-delay cycles: through one federate they are
//! causality loops (no order of reactions can satisfy them); across
//! federates they deadlock decentralized coordination, where nothing
//! grants a provisional tag.

use std::collections::{HashMap, HashSet};
use std::fmt;

use super::bank::split_member;
use super::{parse_duration, port_decl, CoordinationMode, Manifest, ReactorSpec};

/// Where a problem is: what a user must look at to fix it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    /// The program's own settings.
    Program,
    /// The `index`th federate.
    Federate { index: usize },
    /// Reactor `reactor` of federate `federate` (indices in the manifest).
    Reactor { federate: usize, reactor: usize },
    /// The `index`th connection.
    Connection { index: usize },
    /// The `[record]` table.
    Record,
}

/// The one value a problem is about, inside the table its [`Location`]
/// names: where `hprm check` points (line and column of the value in a
/// TOML manifest) rather than at the table's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// A key of the located table itself (`after`, `timeout`, `name`).
    Key(&'static str),
    /// Key `key` of the `index`th entry of the located table's array
    /// `array` (`timer`, `action`, `reaction`).
    Entry { array: &'static str, index: usize, key: &'static str },
}

/// One problem of a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub location: Location,
    /// The value at fault, when it is one value.
    pub field: Option<Field>,
    pub message: String,
}

/// The problems found so far.
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, location: Location, message: String) {
        self.0.push(Problem { location, field: None, message });
    }

    fn add_at(&mut self, location: Location, field: Field, message: String) {
        self.0.push(Problem { location, field: Some(field), message });
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What a name in a reactor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Input,
    Output,
    Timer,
    LogicalAction,
    PhysicalAction,
    Startup,
    Shutdown,
}

/// A resolved port: federate and reactor indices, the port's name, and
/// for a multiport the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PortRef<'m> {
    federate: usize,
    reactor: usize,
    name: &'m str,
    channel: Option<u32>,
}

/// A plain name: letters, digits, `_` and `-`.
fn plain_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A valid federate, reactor or program name: plain, or a bank member's
/// (`rollout[3]`, see `bank`).
pub(crate) fn valid_name(s: &str) -> bool {
    plain_name(split_member(s).map_or(s, |(base, _)| base))
}

/// One name a reactor declares: what it is, its declared type, and a
/// multiport's width.
pub(crate) struct Declared<'m> {
    pub name: &'m str,
    pub kind: Kind,
    pub ty: Option<&'m str>,
    pub width: Option<u32>,
}

/// The names a reactor declares, with what each is (a multiport
/// `frames[4]` by its base name `frames`).
pub(crate) fn reactor_names(r: &ReactorSpec) -> Vec<Declared<'_>> {
    fn port(kind: Kind) -> impl Fn(&String) -> Declared<'_> {
        move |d| {
            let (n, ty) = port_decl(d);
            match split_member(n) {
                Some((name, w)) => Declared { name, kind, ty, width: Some(w) },
                None => Declared { name: n, kind, ty, width: None },
            }
        }
    }
    let mut v: Vec<Declared<'_>> = Vec::new();
    v.extend(r.inputs.iter().map(port(Kind::Input)));
    v.extend(r.outputs.iter().map(port(Kind::Output)));
    v.extend(r.timers.iter().map(|t| Declared { name: &t.name, kind: Kind::Timer, ty: None, width: None }));
    v.extend(r.actions.iter().map(|a| Declared {
        name: &a.name,
        kind: if a.physical { Kind::PhysicalAction } else { Kind::LogicalAction },
        ty: None,
        width: None,
    }));
    v
}

impl Declared<'_> {
    /// Each port this declares (every channel of a multiport; of one wider
    /// than [`super::bank::MAX_WIDTH`], which `expand` reports, the first
    /// that many).
    fn channels(&self) -> Vec<Option<u32>> {
        match self.width {
            Some(w) => (0..w.min(super::bank::MAX_WIDTH)).map(Some).collect(),
            None => vec![None],
        }
    }
}

/// Splits `federate.reactor.port` / `federate.port`.
pub(crate) fn split_path(path: &str) -> Option<(&str, Option<&str>, &str)> {
    let parts: Vec<&str> = path.trim().split('.').collect();
    match parts.as_slice() {
        [f, p] => Some((f, None, p)),
        [f, r, p] => Some((f, Some(r), p)),
        _ => None,
    }
}

impl Manifest {
    /// Hosts: valid and unique names and addresses, the RTI's host one of
    /// them, every federate on one of them (or, without hosts, none named).
    fn check_hosts(&self, out: &mut Problems) {
        let mut names = HashSet::new();
        for h in &self.hosts {
            if !(h.name.len() <= 64 && h.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
                || h.name.is_empty()
            {
                out.add(
                    Location::Program,
                    format!("host name {:?} is not valid; use letters, digits, '-', '_' or '.'", h.name),
                );
            }
            if !names.insert(h.name.as_str()) {
                out.add(Location::Program, format!("two hosts are named {:?}; host names must be unique", h.name));
            }
            if h.address.parse::<std::net::IpAddr>().is_err() {
                out.add(
                    Location::Program,
                    format!("host {}: address {:?} is not an IP address (e.g. \"10.0.0.2\")", h.name, h.address),
                );
            }
            if h.link.as_deref().is_some_and(|l| !l.contains('/')) {
                out.add(
                    Location::Program,
                    format!("host {}: link {:?} is not a Zenoh endpoint (e.g. \"tcp/10.0.0.2:7447\")", h.name, h.link),
                );
            }
        }
        let known = || self.hosts.iter().map(|h| h.name.as_str()).collect::<Vec<_>>().join(", ");
        if let Some(r) = &self.rti_host {
            if !names.contains(r.as_str()) {
                out.add_at(
                    Location::Program,
                    Field::Key("rti_host"),
                    format!("rti_host {r:?} is not one of the program's hosts ({})", known()),
                );
            }
        }
        for (fi, f) in self.federates.iter().enumerate() {
            let at = Location::Federate { index: fi };
            match (&f.host, self.hosts.is_empty()) {
                (Some(h), true) => out.add_at(
                    at,
                    Field::Key("host"),
                    format!(
                        "federate {} names host {h:?}, but the program has no [[host]] tables; add them or remove host",
                        f.name
                    ),
                ),
                (Some(h), false) if !names.contains(h.as_str()) => out.add_at(
                    at,
                    Field::Key("host"),
                    format!(
                        "federate {} runs on host {h:?}, which is not one of the program's hosts ({})",
                        f.name,
                        known()
                    ),
                ),
                (None, false) => out.add(
                    at,
                    format!(
                        "federate {} names no host; in a program with hosts every federate needs `host = \"...\"`",
                        f.name
                    ),
                ),
                _ => {}
            }
        }
    }

    /// Every problem of the manifest; empty when it is valid. A manifest
    /// with banks or connections naming whole banks or multiports is
    /// checked as its plain form ([`Manifest::expanded`]); each problem is
    /// located where the short form has it, once per short-form entry.
    pub fn check(&self) -> Vec<Problem> {
        let (plain, origins, mut out) = self.expand();
        let mut seen = HashSet::new();
        for mut p in plain.check_plain() {
            let (location, multiplied) = origins.locate(p.location);
            p.location = location;
            if !multiplied || seen.insert((location, p.field)) {
                out.push(p);
            }
        }
        out
    }

    /// [`Manifest::check`] of a plain manifest.
    fn check_plain(&self) -> Vec<Problem> {
        let mut out = Problems::default();
        if !valid_name(&self.name) {
            out.add_at(
                Location::Program,
                Field::Key("name"),
                format!("program name {:?} is not valid; use letters, digits, '_' and '-'", self.name),
            );
        }
        if self.federates.is_empty() {
            out.add(Location::Program, "the program has no federates; add a [[federate]] table".into());
        }
        for (what, d) in [("stp", &self.stp), ("timeout", &self.timeout)] {
            if let Some(e) = d.as_deref().and_then(|d| parse_duration(d).err()) {
                out.add_at(Location::Program, Field::Key(what), format!("{what}: {e}"));
            }
        }
        if self.stp.is_some() && self.coordination == CoordinationMode::Centralized {
            out.add_at(Location::Program, Field::Key("stp"), "stp is set, but coordination is centralized, which waits for grants, not an STP; remove stp or set coordination = \"decentralized\"".into());
        }

        self.check_hosts(&mut out);
        if let Some(r) = &self.record {
            for (key, message) in r.problems(self) {
                out.add_at(Location::Record, Field::Key(key), message);
            }
        }
        let mut seen = HashSet::new();
        for (fi, f) in self.federates.iter().enumerate() {
            let at = Location::Federate { index: fi };
            if !valid_name(&f.name) {
                out.add_at(
                    at,
                    Field::Key("name"),
                    format!("federate name {:?} is not valid; use letters, digits, '_' and '-'", f.name),
                );
            }
            if !seen.insert(f.name.as_str()) {
                out.add_at(
                    at,
                    Field::Key("name"),
                    format!("two federates are named {:?}; federate names must be unique", f.name),
                );
            }
            if f.reactors.is_empty() {
                out.add(at, format!("federate {} has no reactors; add a [[federate.reactor]] table", f.name));
            }
            if f.command.is_some() && f.module.is_some() {
                out.add_at(
                    at,
                    Field::Key("module"),
                    format!("federate {} has both a command and a module; give one", f.name),
                );
            }
            if f.restart == super::RestartPolicy::OnFailure && self.coordination == CoordinationMode::Decentralized {
                out.add_at(at, Field::Key("restart"), format!("federate {}: restart = \"on-failure\" needs centralized coordination (decentralized federates connect to each other directly and cannot take a restarted peer back); use restart = \"stop\" or coordination = \"centralized\"", f.name));
            }
            if f.max_restarts.is_some() && f.restart == super::RestartPolicy::Stop {
                out.add_at(at, Field::Key("max_restarts"), format!("federate {}: max_restarts is set, but restart = \"stop\"; set restart = \"on-failure\" or remove max_restarts", f.name));
            }
            if let Some(p) = f.priority.filter(|p| !(1..=99).contains(p)) {
                out.add_at(
                    at,
                    Field::Key("priority"),
                    format!(
                        "federate {}: priority {p} is out of range; real-time priorities are 1 (lowest) to 99",
                        f.name
                    ),
                );
            }
            if f.policy.is_some() && f.priority.is_none() {
                out.add_at(
                    at,
                    Field::Key("policy"),
                    format!(
                        "federate {}: policy is set without a priority; give priority = 1..99 or remove policy",
                        f.name
                    ),
                );
            }
            if let Some(Err(e)) = f.cpus.as_deref().map(str::parse::<hprm_realtime::CpuList>) {
                out.add_at(at, Field::Key("cpus"), format!("federate {}: {e}", f.name));
            }
            if let Some(p) = f.socket_priority.filter(|&p| p > 15) {
                out.add_at(
                    at,
                    Field::Key("socket_priority"),
                    format!("federate {}: socket_priority {p} is not 0 to 15 (above 6 needs CAP_NET_ADMIN)", f.name),
                );
            }
            let marked = f.socket_priority.is_some() || f.dscp.is_some();
            if f.best_effort && f.priority.is_none() && f.cpus.is_none() && !marked {
                out.add_at(
                    at,
                    Field::Key("best_effort"),
                    format!(
                        "federate {}: best_effort is set, but neither priority, cpus, socket_priority nor dscp; remove it or give them",
                        f.name
                    ),
                );
            }
            if f.command.as_ref().is_some_and(Vec::is_empty) {
                out.add_at(at, Field::Key("command"), format!("federate {}: command is empty; give the program and its arguments, e.g. [\"./target/release/camera\"]", f.name));
            }
            let mut reactors = HashSet::new();
            for (ri, r) in f.reactors.iter().enumerate() {
                let at = Location::Reactor { federate: fi, reactor: ri };
                let path = format!("{}.{}", f.name, r.name);
                if !valid_name(&r.name) {
                    out.add_at(
                        at,
                        Field::Key("name"),
                        format!(
                            "reactor name {:?} in federate {} is not valid; use letters, digits, '_' and '-'",
                            r.name, f.name
                        ),
                    );
                }
                if !reactors.insert(r.name.as_str()) {
                    out.add_at(
                        at,
                        Field::Key("name"),
                        format!("two reactors of federate {} are named {:?}", f.name, r.name),
                    );
                }
                if f.module.is_some() && r.class.is_none() {
                    out.add(
                        at,
                        format!(
                            "reactor {path}: its federate runs Python module {:?}, so the reactor needs a class",
                            f.module.as_deref().unwrap_or_default()
                        ),
                    );
                }
                let names = reactor_names(r);
                let mut taken = HashSet::new();
                for Declared { name: n, width, .. } in &names {
                    if *width == Some(0) {
                        out.add(
                            at,
                            format!(
                                "{path}: multiport {n:?} has width 0; give it at least one channel, e.g. \"{n}[4]\""
                            ),
                        );
                    }
                    if !plain_name(n) {
                        out.add(at, format!("{path}: {n:?} is not a valid port, timer or action name"));
                    } else if *n == "startup" || *n == "shutdown" {
                        out.add(
                            at,
                            format!("{path}: {n:?} is a built-in trigger; name the port, timer or action otherwise"),
                        );
                    } else if !taken.insert(*n) {
                        out.add(
                            at,
                            format!("{path} declares {n:?} twice; names of ports, timers and actions must be unique"),
                        );
                    }
                }
                for (ti, t) in r.timers.iter().enumerate() {
                    for (key, d) in [("offset", &t.offset), ("period", &t.period)] {
                        if let Err(e) = parse_duration(d) {
                            out.add_at(
                                at,
                                Field::Entry { array: "timer", index: ti, key },
                                format!("{path}, timer {}: {e}", t.name),
                            );
                        }
                    }
                }
                for (ai, a) in r.actions.iter().enumerate() {
                    if let Err(e) = parse_duration(&a.min_delay) {
                        out.add_at(
                            at,
                            Field::Entry { array: "action", index: ai, key: "min_delay" },
                            format!("{path}, action {}: {e}", a.name),
                        );
                    }
                }
                let kind = |n: &str| match n {
                    "startup" => Some(Kind::Startup),
                    "shutdown" => Some(Kind::Shutdown),
                    _ => names.iter().find(|d| d.name == n).map(|d| d.kind),
                };
                for (xi, rx) in r.reactions.iter().enumerate() {
                    let mut check = |list: &[String], key: &'static str, what: &str, ok: &dyn Fn(Kind) -> bool| {
                        let field = Field::Entry { array: "reaction", index: xi, key };
                        for n in list {
                            match kind(n) {
                                None => out.add_at(at, field, format!("reaction {path}.{} names {n:?} as {what}, but the reactor has no such port, timer or action", rx.name)),
                                Some(k) if !ok(k) => out.add_at(at, field, format!("reaction {path}.{} names {n:?} ({}) as {what}; {}", rx.name, article(k), allowed(what))),
                                Some(_) => {}
                            }
                        }
                    };
                    check(&rx.triggers, "triggers", "a trigger", &|k| k != Kind::Output);
                    check(&rx.sources, "sources", "a source", &|k| k == Kind::Input);
                    check(&rx.effects, "effects", "an effect", &|k| matches!(k, Kind::Output | Kind::LogicalAction));
                    if rx.triggers.is_empty() {
                        out.add_at(
                            at,
                            Field::Entry { array: "reaction", index: xi, key: "name" },
                            format!("reaction {path}.{} has no trigger; it would never run", rx.name),
                        );
                    }
                    if let Some(e) = rx.deadline.as_deref().and_then(|d| parse_duration(d).err()) {
                        out.add_at(
                            at,
                            Field::Entry { array: "reaction", index: xi, key: "deadline" },
                            format!("reaction {path}.{}, deadline: {e}", rx.name),
                        );
                    }
                }
            }
        }

        // Connections.
        let mut fed_index: HashMap<&str, usize> = HashMap::new();
        for (i, f) in self.federates.iter().enumerate() {
            fed_index.entry(f.name.as_str()).or_insert(i);
        }
        let mut resolved: Vec<Option<(PortRef<'_>, PortRef<'_>)>> = Vec::new();
        let mut fed_by: HashMap<PortRef<'_>, usize> = HashMap::new();
        for (ci, c) in self.connections.iter().enumerate() {
            let at = Location::Connection { index: ci };
            let ends = [(&c.from, Kind::Output, "from"), (&c.to, Kind::Input, "to")].map(|(path, want, key)| {
                let resolved = self.resolve(path, &fed_index);
                // A federate (or reactor) named twice is reported once, at
                // its second definition. Paths resolve against the first;
                // one that does not fit it may have meant the second, so
                // its failure is a consequence of the duplicate, not news.
                if !matches!(resolved, Ok((_, kind, _)) if kind == want) && self.names_a_duplicate(path) {
                    return None;
                }
                match resolved {
                    Err(e) => {
                        out.add_at(at, Field::Key(key), format!("{key} = {path:?}: {e}"));
                        None
                    }
                    Ok((_, kind, _)) if kind != want => {
                        out.add_at(
                            at,
                            Field::Key(key),
                            format!(
                                "{key} = {path:?} is {}, not {}; a connection goes from an output to an input",
                                article(kind),
                                article(want)
                            ),
                        );
                        None
                    }
                    Ok((p, _, ty)) => Some((p, ty)),
                }
            });
            if let Some(e) = c.after.as_deref().and_then(|d| parse_duration(d).err()) {
                out.add_at(at, Field::Key("after"), format!("after: {e}"));
            }
            match ends {
                [Some((from, ft)), Some((to, tt))] => {
                    if let (Some(a), Some(b)) = (ft, tt) {
                        if a != b {
                            out.add(
                                at,
                                format!(
                                    "{} carries {a:?} but {} expects {b:?}; connect ports of the same type",
                                    c.from, c.to
                                ),
                            );
                        }
                    }
                    if let Some(prev) = fed_by.insert(to, ci) {
                        out.add_at(at, Field::Key("to"), format!("input {} is connected twice (also by connection #{}, from {}); an input takes one connection", c.to, prev + 1, self.connections[prev].from));
                    }
                    resolved.push(Some((from, to)));
                }
                _ => resolved.push(None),
            }
        }

        // Zero-delay cycles, port to port: connections without `after`
        // (physical ones break the chain: they take a new tag) and, inside
        // a reactor, an input to the outputs its reactions may set.
        let mut edges: HashMap<PortRef<'_>, Vec<(PortRef<'_>, Option<usize>)>> = HashMap::new();
        for (ci, r) in resolved.iter().enumerate() {
            let c = &self.connections[ci];
            if let Some((from, to)) = r {
                if c.after.is_none() && !c.physical {
                    edges.entry(*from).or_default().push((*to, Some(ci)));
                }
            }
        }
        for (fi, f) in self.federates.iter().enumerate() {
            for (ri, r) in f.reactors.iter().enumerate() {
                let port = |name, channel| PortRef { federate: fi, reactor: ri, name, channel };
                let names = reactor_names(r);
                let outputs: Vec<&Declared<'_>> = names.iter().filter(|d| d.kind == Kind::Output).collect();
                for input in names.iter().filter(|d| d.kind == Kind::Input) {
                    let reached: Vec<&Declared<'_>> = if r.reactions.is_empty() {
                        outputs.clone()
                    } else {
                        // Reactions name a multiport by its base name: all its channels.
                        r.reactions
                            .iter()
                            .filter(|rx| rx.triggers.iter().chain(&rx.sources).any(|t| t == input.name))
                            .flat_map(|rx| {
                                rx.effects.iter().filter_map(|e| outputs.iter().find(|o| o.name == e).copied())
                            })
                            .collect()
                    };
                    for ic in input.channels() {
                        for o in &reached {
                            for oc in o.channels() {
                                edges.entry(port(input.name, ic)).or_default().push((port(o.name, oc), None));
                            }
                        }
                    }
                }
            }
        }
        for cycle in cycles(&edges) {
            let feds: HashSet<usize> = cycle.iter().map(|(p, _)| p.federate).collect();
            let first_conn = cycle.iter().find_map(|(_, c)| *c).unwrap_or(0);
            let at = Location::Connection { index: first_conn };
            let text = cycle
                .iter()
                .map(|(p, _)| self.path_of(*p))
                .chain(cycle.first().map(|(p, _)| self.path_of(*p)))
                .collect::<Vec<_>>()
                .join(" -> ");
            if feds.len() == 1 {
                out.add(at, format!("causality loop: {text} has no delay, so no order of reactions satisfies it; put `after` on one of its connections"));
            } else if self.coordination == CoordinationMode::Decentralized {
                out.add(at, format!("zero-delay cycle across federates in decentralized mode: {text}; decentralized federates cannot resolve it (nothing grants a provisional tag): put `after` on one of its connections, or use centralized coordination"));
            }
        }
        out.0
    }

    /// A port by path, with its kind and declared type. A multiport's
    /// channel is `port[i]`; a whole multiport is no one port.
    fn resolve<'m>(
        &'m self,
        path: &'m str,
        feds: &HashMap<&str, usize>,
    ) -> Result<(PortRef<'m>, Kind, Option<&'m str>), String> {
        let (f, r, p) = split_path(path)
            .ok_or("a port is written federate.reactor.port (or federate.port when the federate has one reactor)")?;
        let &fi = feds.get(f).ok_or_else(|| {
            format!(
                "there is no federate {f:?}; the federates are {}",
                list(self.federates.iter().map(|f| f.name.as_str()))
            )
        })?;
        let fed = &self.federates[fi];
        let ri = match r {
            Some(r) => fed.reactors.iter().position(|x| x.name == r).ok_or_else(|| {
                format!(
                    "federate {f} has no reactor {r:?}; its reactors are {}",
                    list(fed.reactors.iter().map(|r| r.name.as_str()))
                )
            })?,
            None if fed.reactors.len() == 1 => 0,
            None => return Err(format!("federate {f} has {} reactors; name one: {f}.REACTOR.{p}", fed.reactors.len())),
        };
        let reactor = &fed.reactors[ri];
        let names = reactor_names(reactor);
        let (base, channel) = match split_member(p) {
            Some((b, c)) => (b, Some(c)),
            None => (p, None),
        };
        let d = names.iter().find(|d| d.name == base).ok_or_else(|| {
            format!(
                "reactor {f}.{} has no port {base:?}; its ports are {}",
                reactor.name,
                list(names.iter().filter(|d| matches!(d.kind, Kind::Input | Kind::Output)).map(|d| d.name))
            )
        })?;
        match (d.width, channel) {
            (None, None) => {}
            (Some(w), Some(c)) if c < w => {}
            (Some(w), Some(c)) => {
                return Err(format!("multiport {f}.{}.{base} has width {w}; it has no channel {c}", reactor.name))
            }
            (Some(w), None) => {
                return Err(format!("{f}.{}.{base} is a multiport of width {w}; connect it from a bank or a multiport of width {w}, or name one channel ({base}[0])", reactor.name))
            }
            (None, Some(_)) => {
                return Err(format!("{f}.{}.{base} is not a multiport; it has no channels", reactor.name))
            }
        }
        Ok((PortRef { federate: fi, reactor: ri, name: d.name, channel }, d.kind, d.ty))
    }

    /// Whether `path` names a federate defined twice, or a reactor defined
    /// twice in (the first definition of) its federate.
    fn names_a_duplicate(&self, path: &str) -> bool {
        let Some((f, r, _)) = split_path(path) else { return false };
        let mut feds = self.federates.iter().filter(|x| x.name == f);
        let Some(first) = feds.next() else { return false };
        feds.next().is_some() || r.is_some_and(|r| first.reactors.iter().filter(|x| x.name == r).count() > 1)
    }

    fn path_of(&self, p: PortRef<'_>) -> String {
        let f = &self.federates[p.federate];
        let r = &f.reactors[p.reactor].name;
        match p.channel {
            Some(c) => format!("{}.{r}.{}[{c}]", f.name, p.name),
            None => format!("{}.{r}.{}", f.name, p.name),
        }
    }
}

fn allowed(what: &str) -> &'static str {
    match what {
        "a trigger" => "outputs do not trigger reactions of their own reactor",
        "a source" => "sources are inputs a reaction reads without being triggered",
        _ => "effects are outputs and logical actions",
    }
}

fn article(k: Kind) -> &'static str {
    match k {
        Kind::Input => "an input",
        Kind::Output => "an output",
        Kind::Timer => "a timer",
        Kind::LogicalAction => "a logical action",
        Kind::PhysicalAction => "a physical action",
        Kind::Startup | Kind::Shutdown => "a built-in trigger",
    }
}

fn list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = names.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// One cycle per strongly connected component that has one (Tarjan's
/// algorithm, then a path around the component), in a stable order.
fn cycles<'m>(
    edges: &HashMap<PortRef<'m>, Vec<(PortRef<'m>, Option<usize>)>>,
) -> Vec<Vec<(PortRef<'m>, Option<usize>)>> {
    let mut nodes: Vec<PortRef<'m>> = edges.keys().copied().chain(edges.values().flatten().map(|(n, _)| *n)).collect();
    nodes.sort_by(|a, b| (a.federate, a.reactor, a.name).cmp(&(b.federate, b.reactor, b.name)));
    nodes.dedup();
    let idx: HashMap<PortRef<'m>, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let succ: Vec<Vec<(usize, Option<usize>)>> = nodes
        .iter()
        .map(|n| edges.get(n).map(|v| v.iter().map(|(m, c)| (idx[m], *c)).collect()).unwrap_or_default())
        .collect();

    // Tarjan, iterative.
    let n = nodes.len();
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut comps, mut next) = (Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some((v, i)) = work.pop() {
            if i == 0 {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on[v] = true;
            }
            if let Some(&(w, _)) = succ[v].get(i) {
                work.push((v, i + 1));
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                comps.push(comp);
            }
        }
    }

    let mut out = Vec::new();
    for comp in comps {
        let start = *comp.iter().min().unwrap_or(&0);
        let self_loop = succ[start].iter().any(|(w, _)| *w == start);
        if comp.len() < 2 && !self_loop {
            continue;
        }
        // Breadth-first from `start` inside the component, back to it.
        let inside: HashSet<usize> = comp.iter().copied().collect();
        let mut prev: HashMap<usize, (usize, Option<usize>)> = HashMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut closing = None;
        'bfs: while let Some(v) = queue.pop_front() {
            for &(w, c) in &succ[v] {
                if w == start {
                    closing = Some((v, c));
                    break 'bfs;
                }
                if inside.contains(&w) && !prev.contains_key(&w) {
                    prev.insert(w, (v, c));
                    queue.push_back(w);
                }
            }
        }
        let Some((mut v, mut c)) = closing else { continue };
        // Walk back: each node with the connection that leaves it.
        let mut path = Vec::new();
        loop {
            path.push((nodes[v], c));
            if v == start {
                break;
            }
            let (p, pc) = prev[&v];
            c = pc;
            v = p;
        }
        path.reverse();
        out.push(path);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{ConnectionSpec, FederateSpec, ReactionSpec};

    use crate::manifest::test_reactor as reactor;

    fn federate(name: &str, reactors: Vec<ReactorSpec>) -> FederateSpec {
        FederateSpec { name: name.into(), reactors, ..Default::default() }
    }

    fn conn(from: &str, to: &str, after: Option<&str>) -> ConnectionSpec {
        ConnectionSpec { from: from.into(), to: to.into(), after: after.map(String::from), ..Default::default() }
    }

    fn manifest(federates: Vec<FederateSpec>, connections: Vec<ConnectionSpec>) -> Manifest {
        Manifest {
            name: "m".into(),
            coordination: CoordinationMode::Centralized,
            stp: None,
            threshold: None,
            timeout: None,
            store_memory: None,
            hosts: Vec::new(),
            rti_host: None,
            rti_port: None,
            federates,
            connections,
            record: None,
        }
    }

    fn messages(m: &Manifest) -> Vec<(Location, String)> {
        m.check().into_iter().map(|p| (p.location, p.message)).collect()
    }

    #[test]
    fn hosts_must_be_named_valid_and_hold_every_federate() {
        use crate::manifest::HostSpec;
        let host = |name: &str, address: &str| HostSpec { name: name.into(), address: address.into(), link: None };
        let mut m = manifest(
            vec![
                federate("cam", vec![reactor("cam", &[], &["frame"])]),
                federate("det", vec![reactor("det", &["frame"], &[])]),
            ],
            vec![conn("cam.frame", "det.frame", None)],
        );
        m.federates[0].host = Some("a".into());
        assert!(messages(&m)
            .iter()
            .any(|(_, msg)| msg.contains("names host \"a\", but the program has no [[host]] tables")));
        m.hosts = vec![host("a", "10.0.0.1"), host("b", "10.0.0.2")];
        m.federates[1].host = Some("b".into());
        assert_eq!(messages(&m), Vec::new());
        assert_eq!(m.rti_host().map(|h| h.name.as_str()), Some("a"));
        assert_eq!(m.hosts[1].link_endpoint(), "tcp/10.0.0.2:7447");
        m.federates[1].host = None;
        m.hosts.push(host("a", "robot.local"));
        m.hosts.push(host("x/y", "10.0.0.3"));
        m.rti_host = Some("c".into());
        let got: Vec<String> = messages(&m).into_iter().map(|(_, msg)| msg).collect();
        for want in [
            "federate det names no host",
            "two hosts are named \"a\"",
            "address \"robot.local\" is not an IP address",
            "host name \"x/y\" is not valid",
            "rti_host \"c\" is not one of the program's hosts",
        ] {
            assert!(got.iter().any(|g| g.contains(want)), "{want:?} not in {got:#?}");
        }
    }

    #[test]
    fn a_pipeline_is_valid() {
        let m = manifest(
            vec![
                federate("cam", vec![reactor("cam", &[], &["frame: image"])]),
                federate("det", vec![reactor("det", &["frame: image"], &["boxes"])]),
            ],
            vec![conn("cam.frame", "det.det.frame", None)],
        );
        assert_eq!(messages(&m), vec![]);
    }

    #[test]
    fn bad_real_time_placements_are_located() {
        let placed = |priority, policy, cpus: Option<&str>, best_effort| FederateSpec {
            priority,
            policy,
            cpus: cpus.map(str::to_owned),
            best_effort,
            ..federate("f", vec![reactor("r", &[], &["o"])])
        };
        let m = manifest(vec![placed(Some(80), Some(hprm_realtime::Policy::Rr), Some("0,2-3"), true)], vec![]);
        assert_eq!(messages(&m), vec![]);
        for (f, want) in [
            (placed(Some(0), None, None, false), "priority 0 is out of range"),
            (placed(None, Some(hprm_realtime::Policy::Fifo), None, false), "policy is set without a priority"),
            (placed(None, None, Some("2-1"), false), "`2-1` is not a CPU list"),
            (
                placed(None, None, None, true),
                "best_effort is set, but neither priority, cpus, socket_priority nor dscp",
            ),
        ] {
            let p = messages(&manifest(vec![f], vec![]));
            assert!(p.len() == 1 && p[0].0 == Location::Federate { index: 0 } && p[0].1.contains(want), "{p:?}");
        }
    }

    #[test]
    fn unknown_and_misdirected_ports_are_located() {
        let m = manifest(
            vec![federate("a", vec![reactor("r", &["i"], &["o"])]), federate("b", vec![reactor("r", &["i"], &["o"])])],
            vec![
                conn("a.nope", "b.i", None),
                conn("a.i", "b.o", None),
                conn("x.o", "b.i", None),
                conn("a.o", "b.i", Some("5 parsecs")),
            ],
        );
        let p = messages(&m);
        assert!(
            p.iter().any(|(l, m)| *l == Location::Connection { index: 0 }
                && m.contains("no port \"nope\"")
                && m.contains("its ports are i, o")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|(l, m)| *l == Location::Connection { index: 1 } && m.contains("is an input, not an output")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|(l, m)| *l == Location::Connection { index: 1 } && m.contains("is an output, not an input")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|(l, m)| *l == Location::Connection { index: 2 } && m.contains("no federate \"x\"")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|(l, m)| *l == Location::Connection { index: 3 }
                && m.contains("after: \"5 parsecs\" is not a duration")),
            "{p:?}"
        );
    }

    #[test]
    fn duplicates_types_and_double_connections() {
        let m = manifest(
            vec![
                federate("a", vec![reactor("r", &[], &["o: image", "o"])]),
                federate("a", vec![]),
                federate("b", vec![reactor("r", &["i: imu"], &[])]),
            ],
            vec![conn("a.o", "b.i", None), conn("a.o", "b.i", None)],
        );
        let p = messages(&m);
        assert!(
            p.iter().any(|(l, m)| *l == Location::Federate { index: 1 } && m.contains("two federates are named \"a\"")),
            "{p:?}"
        );
        assert!(p.iter().any(|(l, m)| *l == Location::Reactor { federate: 0, reactor: 0 } && m.contains("declares \"o\" twice")), "{p:?}");
        assert!(
            p.iter().any(|(l, m)| *l == Location::Connection { index: 0 }
                && m.contains("carries \"image\" but b.i expects \"imu\"")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|(l, m)| *l == Location::Connection { index: 1 }
                && m.contains("connected twice (also by connection #1")),
            "{p:?}"
        );
    }

    #[test]
    fn a_duplicate_federate_is_reported_once_without_follow_on_errors() {
        // The second `a` is what `b.o -> a.i` meant; its reactor differs
        // from the first's. Only the duplicate is news.
        let m = manifest(
            vec![
                federate("a", vec![reactor("r", &[], &["o"])]),
                federate("a", vec![reactor("s", &["i"], &[])]),
                federate("b", vec![reactor("r", &["i"], &["o"])]),
            ],
            vec![conn("a.o", "b.i", None), conn("b.o", "a.i", None), conn("b.o", "a.s.i", None)],
        );
        let p: Vec<Problem> = m.check();
        assert_eq!(
            p,
            vec![Problem {
                location: Location::Federate { index: 1 },
                field: Some(Field::Key("name")),
                message: "two federates are named \"a\"; federate names must be unique".into()
            }]
        );
        // A reference to a name defined once is still checked.
        let mut m = m;
        m.connections.push(conn("b.o", "nope.i", None));
        let p = messages(&m);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[1].0 == Location::Connection { index: 3 } && p[1].1.contains("no federate \"nope\""), "{p:?}");
    }

    #[test]
    fn bad_durations_name_their_key() {
        let mut a = reactor("r", &[], &["o"]);
        a.timers.push(crate::manifest::TimerSpec { name: "t".into(), offset: "0s".into(), period: "abc".into() });
        let mut m = manifest(
            vec![federate("a", vec![a]), federate("b", vec![reactor("r", &["i"], &[])])],
            vec![conn("a.o", "b.i", Some("5 parsecs"))],
        );
        m.timeout = Some("abc".into());
        let fields: Vec<_> = m.check().into_iter().map(|p| (p.location, p.field)).collect();
        assert_eq!(
            fields,
            vec![
                (Location::Program, Some(Field::Key("timeout"))),
                (
                    Location::Reactor { federate: 0, reactor: 0 },
                    Some(Field::Entry { array: "timer", index: 0, key: "period" })
                ),
                (Location::Connection { index: 0 }, Some(Field::Key("after"))),
            ]
        );
    }

    #[test]
    fn zero_delay_cycles_are_errors_in_decentralized_mode_only() {
        let feds = || {
            vec![federate("a", vec![reactor("r", &["i"], &["o"])]), federate("b", vec![reactor("r", &["i"], &["o"])])]
        };
        let mut m = manifest(feds(), vec![conn("a.o", "b.i", None), conn("b.o", "a.i", None)]);
        assert_eq!(messages(&m), vec![]);
        m.coordination = CoordinationMode::Decentralized;
        let p = messages(&m);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].1.contains("zero-delay cycle across federates")
                && p[0].1.contains("a.r.i -> a.r.o -> b.r.i -> b.r.o -> a.r.i"),
            "{p:?}"
        );
        m.connections[1].after = Some("0ms".into());
        assert_eq!(messages(&m), vec![]);
    }

    #[test]
    fn declared_reactions_refine_the_cycle_check() {
        let mut a = reactor("r", &["i"], &["o"]);
        // `o` comes from a timer only: the input does not reach it.
        a.timers.push(crate::manifest::TimerSpec { name: "t".into(), offset: "0s".into(), period: "10ms".into() });
        a.reactions = vec![
            ReactionSpec {
                name: "tick".into(),
                triggers: vec!["t".into()],
                sources: vec![],
                effects: vec!["o".into()],
                deadline: None,
            },
            ReactionSpec {
                name: "take".into(),
                triggers: vec!["i".into()],
                sources: vec![],
                effects: vec![],
                deadline: None,
            },
        ];
        let mut m = manifest(
            vec![federate("a", vec![a]), federate("b", vec![reactor("r", &["i"], &["o"])])],
            vec![conn("a.o", "b.i", None), conn("b.o", "a.i", None)],
        );
        m.coordination = CoordinationMode::Decentralized;
        assert_eq!(messages(&m), vec![]);
        m.federates[0].reactors[0].reactions[0].effects.push("nothing".into());
        let p = messages(&m);
        assert!(
            p.iter().any(|(l, m)| *l == Location::Reactor { federate: 0, reactor: 0 }
                && m.contains("names \"nothing\" as an effect")),
            "{p:?}"
        );
    }

    #[test]
    fn a_loop_inside_one_federate_is_a_causality_loop() {
        let m = manifest(
            vec![federate("a", vec![reactor("x", &["i"], &["o"]), reactor("y", &["i"], &["o"])])],
            vec![conn("a.x.o", "a.y.i", None), conn("a.y.o", "a.x.i", None)],
        );
        let p = messages(&m);
        assert!(
            p.len() == 1 && p[0].1.starts_with("causality loop: a.x.i -> a.x.o -> a.y.i -> a.y.o -> a.x.i"),
            "{p:?}"
        );
    }
}
