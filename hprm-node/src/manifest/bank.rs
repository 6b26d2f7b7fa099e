//! Banks and multiports as data: how members and channels are named, and
//! how a manifest's short form becomes the plain graph that runs.
//!
//! A *bank* is N instances of one federate's reactors (LF's `new[N]`); a
//! *multiport* is a port of width N (LF's `input[N]`). Neither is a new
//! kind of thing at run time: a bank is only a shorter way to write the
//! same graph, so coordination and ordering rules do not change.
//!
//! Names are the one place membership is written (invariant): a federate
//! or reactor named `rollout[3]` is member 3 of bank `rollout`, and a
//! channel `frames[2]` is channel 2 of multiport `frames`. A bank's width
//! is the number of its members. A program written by hand with the same
//! names is the same program, which is what lets `hprm graph`, `hprm ps`
//! and `hprm deploy` see banks in any program.
//!
//! [`Manifest::expanded`] turns the short form (a federate with `width`,
//! connections naming a whole bank or multiport) into the plain form:
//!
//! - `placement = "processes"` (the default): member `i` is federate
//!   `name[i]`, holding the federate's reactors as `reactor[i]`;
//! - `placement = "threads"`: one federate `name` holds every member's
//!   reactors as `reactor[i]` (reactions run on the runtime's worker
//!   threads; values between members pass by reference).
//!
//! A connection end naming a bank lists its members' ports in member order
//! (each multiport channel by channel; `interleaved` lists channel by
//! channel, then member by member); one naming a multiport, its channels.
//! The two lists are linked one to one and must have equal widths, or with
//! `broadcast` the sending list repeats until it covers the receiving one.

use serde::{Deserialize, Serialize};

use super::check::split_path;
use super::{port_decl, ConnectionSpec, FederateSpec, Manifest};
use super::{Field, Location, Problem};

/// The widest bank or multiport a manifest may declare. Each member is a
/// process (or a set of reactors) and each channel a connection, so wider
/// is a typo, not a robot; the bound keeps a manifest from making `hprm
/// check` or the launcher build billions of them.
pub const MAX_WIDTH: u32 = 4096;

/// Where a bank's members run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// One federate (process) each: isolation, restart of one member,
    /// placement on other hosts.
    #[default]
    Processes,
    /// All in one federate: reactions on the runtime's worker threads,
    /// values passed by reference (no store round trip).
    Threads,
}

/// The name of member (or channel) `index` of `base`: `rollout[3]`.
pub fn member_name(base: &str, index: u32) -> String {
    format!("{base}[{index}]")
}

/// `rollout[3]` -> `("rollout", 3)`; `None` for a name without an index.
/// Also reads a multiport declaration (`frames[4]`: base and width).
pub fn split_member(name: &str) -> Option<(&str, u32)> {
    let (base, rest) = name.split_once('[')?;
    let digits = rest.strip_suffix(']')?;
    if base.is_empty() || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((base, digits.parse().ok()?))
}

/// The base name and width of a multiport declaration (`"frames[4]"` or
/// `"frames[4]: image"`), `None` for a single port.
pub fn multiport(decl: &str) -> Option<(&str, u32)> {
    split_member(port_decl(decl).0)
}

/// The bank a federate or reactor name belongs to, with its index and the
/// bank's width among `names` (all names at its level: the program's
/// federates, or one federate's reactors).
pub fn membership<'a>(name: &'a str, names: impl IntoIterator<Item = &'a str>) -> Option<(&'a str, u32, u32)> {
    let (base, index) = split_member(name)?;
    let width = names.into_iter().filter(|n| split_member(n).is_some_and(|(b, _)| b == base)).count();
    Some((base, index, width as u32))
}

/// Where each entry of an expanded manifest came from: indices in the
/// short form (to locate a problem where the user wrote it).
#[derive(Debug, Default)]
pub(crate) struct Origins {
    pub federates: Vec<usize>,
    /// Per expanded federate, the short form's index of each reactor.
    pub reactors: Vec<Vec<usize>>,
    pub connections: Vec<usize>,
    /// Short-form federates and connections written out more than once (a
    /// problem of one is reported once, not once per member).
    pub multiplied_federates: Vec<usize>,
    pub multiplied_connections: Vec<usize>,
}

impl Origins {
    /// `loc` (in the expanded manifest) where the short form has it, and
    /// whether that entry was written out more than once.
    pub fn locate(&self, loc: Location) -> (Location, bool) {
        match loc {
            Location::Program | Location::Record => (loc, false),
            Location::Federate { index } => {
                let f = self.federates.get(index).copied().unwrap_or(index);
                (Location::Federate { index: f }, self.multiplied_federates.contains(&f))
            }
            Location::Reactor { federate, reactor } => {
                let f = self.federates.get(federate).copied().unwrap_or(federate);
                let r = self.reactors.get(federate).and_then(|v| v.get(reactor)).copied().unwrap_or(reactor);
                (Location::Reactor { federate: f, reactor: r }, self.multiplied_federates.contains(&f))
            }
            Location::Connection { index } => {
                let c = self.connections.get(index).copied().unwrap_or(index);
                (Location::Connection { index: c }, self.multiplied_connections.contains(&c))
            }
        }
    }
}

impl Manifest {
    /// The plain form of this manifest: banks written out as their
    /// members, connections naming banks or multiports as one connection
    /// per pair of ports. A manifest without banks or whole-bank or
    /// whole-multiport connections is returned as it is. Problems of the
    /// short form (widths that differ, a bank of width 0) are
    /// [`Manifest::check`]'s; where they are, the result leaves out what it
    /// could not write.
    pub fn expanded(&self) -> Manifest {
        self.expand().0
    }

    pub(crate) fn expand(&self) -> (Manifest, Origins, Vec<Problem>) {
        let mut problems = Vec::new();
        let mut origins = Origins::default();
        let mut federates = Vec::new();
        for (fi, f) in self.federates.iter().enumerate() {
            let at = Location::Federate { index: fi };
            for (ri, r) in f.reactors.iter().enumerate() {
                let n = r.member_args.len();
                match f.width {
                    _ if n == 0 => {}
                    None => problems.push(Problem {
                        location: Location::Reactor { federate: fi, reactor: ri },
                        field: Some(Field::Key("member_args")),
                        message: format!("reactor {}.{}: member_args is for banks, but federate {} has no width; add width = {n} to the federate, or give the arguments in args", f.name, r.name, f.name),
                    }),
                    Some(w) if w as usize != n => problems.push(Problem {
                        location: Location::Reactor { federate: fi, reactor: ri },
                        field: Some(Field::Key("member_args")),
                        message: format!("reactor {}.{}: member_args has {n} tables but bank {} has {w} members; give one table per member", f.name, r.name, f.name),
                    }),
                    Some(_) => {}
                }
            }
            let hosts_problem = match (f.width, f.placement.unwrap_or_default(), &f.host) {
                _ if f.hosts.is_empty() => None,
                (None, ..) => Some(format!("federate {}: hosts spreads a bank's members over hosts, but the federate is not a bank; add width = N, or write host = \"...\" for one host", f.name)),
                (Some(_), Placement::Threads, _) => Some(format!("bank {}: hosts spreads members over hosts, but placement = \"threads\" runs them all in one process; use placement = \"processes\", or host = \"...\"", f.name)),
                (Some(_), _, Some(h)) => Some(format!("bank {}: both host = {h:?} and hosts are set; keep one (host puts every member on one host)", f.name)),
                _ => None,
            };
            if let Some(message) = hosts_problem {
                problems.push(Problem { location: at, field: Some(Field::Key("hosts")), message });
            }
            let Some(width) = f.width else {
                if f.placement.is_some() {
                    problems.push(Problem {
                        location: at,
                        field: Some(Field::Key("placement")),
                        message: format!("federate {}: placement is set, but the federate is not a bank; add width = N to make it a bank of N members, or remove placement", f.name),
                    });
                }
                federates.push(f.clone());
                origins.federates.push(fi);
                origins.reactors.push((0..f.reactors.len()).collect());
                continue;
            };
            if width > MAX_WIDTH {
                problems.push(Problem {
                    location: at,
                    field: Some(Field::Key("width")),
                    message: format!(
                        "bank {} has width {width}, over the limit of {MAX_WIDTH} members; is a digit too many?",
                        f.name
                    ),
                });
                continue;
            }
            if width == 0 {
                problems.push(Problem {
                    location: at,
                    field: Some(Field::Key("width")),
                    message: format!(
                        "bank {} has width 0; a bank needs at least one member: width = 1 or more",
                        f.name
                    ),
                });
                continue;
            }
            origins.multiplied_federates.push(fi);
            let member = |i: u32, name: String| {
                let reactors = f
                    .reactors
                    .iter()
                    .map(|r| {
                        let mut r = r.clone();
                        r.name = member_name(&r.name, i);
                        if let Some(extra) = r.member_args.get(i as usize) {
                            r.args.extend(extra.clone());
                        }
                        r.member_args.clear();
                        r
                    })
                    .collect();
                // Round robin over `hosts` (invariant: every member of a
                // spread bank names its host, so the plain form needs no
                // notion of spreading).
                let host = match f.hosts.is_empty() {
                    true => f.host.clone(),
                    false => f.hosts.get(i as usize % f.hosts.len()).cloned(),
                };
                FederateSpec { name, width: None, placement: None, host, hosts: Vec::new(), reactors, ..f.clone() }
            };
            match f.placement.unwrap_or_default() {
                Placement::Processes => {
                    for i in 0..width {
                        federates.push(member(i, member_name(&f.name, i)));
                        origins.federates.push(fi);
                        origins.reactors.push((0..f.reactors.len()).collect());
                    }
                }
                Placement::Threads => {
                    let mut all = member(0, f.name.clone());
                    all.reactors.clear();
                    let mut from = Vec::new();
                    for i in 0..width {
                        all.reactors.extend(member(i, f.name.clone()).reactors);
                        from.extend(0..f.reactors.len());
                    }
                    federates.push(all);
                    origins.federates.push(fi);
                    origins.reactors.push(from);
                }
            }
        }

        for (fi, f) in self.federates.iter().enumerate() {
            for (ri, r) in f.reactors.iter().enumerate() {
                for (d, w) in r.inputs.iter().chain(&r.outputs).filter_map(|d| Some((d, multiport(d)?.1))) {
                    if w > MAX_WIDTH {
                        problems.push(Problem {
                            location: Location::Reactor { federate: fi, reactor: ri },
                            field: None,
                            message: format!(
                                "reactor {}.{}: multiport {d:?} has width {w}, over the limit of {MAX_WIDTH} channels; is a digit too many?",
                                f.name, r.name
                            ),
                        });
                    }
                }
            }
        }
        let mut connections = Vec::new();
        for (ci, c) in self.connections.iter().enumerate() {
            let (from, from_listed) = self.ends(&c.from, c.interleaved);
            let (to, to_listed) = self.ends(&c.to, c.interleaved);
            if !from_listed && !to_listed && !c.broadcast {
                connections.push(c.clone());
                origins.connections.push(ci);
                continue;
            }
            let (l, r) = (from.len(), to.len());
            let fits = if c.broadcast { l > 0 && r % l == 0 } else { l == r };
            if !fits {
                let how = if c.broadcast {
                    format!("a broadcast needs {}'s width to be a multiple of {}'s", c.to, c.from)
                } else {
                    "connect equal widths (a bank of N to a multiport of width N), or set broadcast = true to send each value to several inputs".into()
                };
                problems.push(Problem {
                    location: Location::Connection { index: ci },
                    field: None,
                    message: format!(
                        "connection {} -> {}: {} has width {l} but {} has width {r}; {how}",
                        c.from, c.to, c.from, c.to
                    ),
                });
                continue;
            }
            if r > 1 {
                origins.multiplied_connections.push(ci);
            }
            for (j, to) in to.into_iter().enumerate() {
                connections.push(ConnectionSpec {
                    from: from[j % l].clone(),
                    to,
                    broadcast: false,
                    interleaved: false,
                    ..c.clone()
                });
                origins.connections.push(ci);
            }
        }
        (Manifest { federates, connections, ..self.clone() }, origins, problems)
    }

    /// The ports a connection end names, in order, and whether it named a
    /// bank or a whole multiport (else it is `path` itself, left for
    /// `check` to resolve).
    fn ends(&self, path: &str, interleaved: bool) -> (Vec<String>, bool) {
        let single = || (vec![path.to_string()], false);
        let Some((f, r, p)) = split_path(path) else { return single() };
        let Some(fed) = self.federates.iter().find(|x| x.name == f) else { return single() };
        let reactor = match r {
            Some(r) => fed.reactors.iter().find(|x| x.name == r),
            None if fed.reactors.len() == 1 => fed.reactors.first(),
            None => None,
        };
        let Some(reactor) = reactor else { return single() };
        let width = reactor.inputs.iter().chain(&reactor.outputs).find_map(|d| match multiport(d) {
            Some((base, w)) if base == p => Some(w),
            _ => None,
        });
        if width.is_some_and(|w| w > MAX_WIDTH) || fed.width.is_some_and(|w| w > MAX_WIDTH) {
            // Reported by `expand`; left unexpanded.
            return single();
        }
        let channels: Vec<String> = match width {
            Some(w) => (0..w).map(|k| member_name(p, k)).collect(),
            None => vec![p.to_string()],
        };
        let Some(members) = fed.width else {
            if width.is_none() {
                return single();
            }
            let prefix = match r {
                Some(r) => format!("{f}.{r}"),
                None => f.to_string(),
            };
            return (channels.iter().map(|c| format!("{prefix}.{c}")).collect(), true);
        };
        let at = |i: u32, c: &str| {
            let fed_name = match fed.placement.unwrap_or_default() {
                Placement::Processes => member_name(f, i),
                Placement::Threads => f.to_string(),
            };
            format!("{fed_name}.{}.{c}", member_name(&reactor.name, i))
        };
        let mut out = Vec::new();
        if interleaved {
            for c in &channels {
                out.extend((0..members).map(|i| at(i, c)));
            }
        } else {
            for i in 0..members {
                out.extend(channels.iter().map(|c| at(i, c)));
            }
        }
        (out, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::ReactorSpec;

    #[test]
    fn member_names_read_back() {
        assert_eq!(member_name("rollout", 3), "rollout[3]");
        assert_eq!(split_member("rollout[3]"), Some(("rollout", 3)));
        assert_eq!(split_member("frames[12]"), Some(("frames", 12)));
        for bad in ["rollout", "rollout[]", "[3]", "a[3]b", "a[-1]", "a[x]"] {
            assert_eq!(split_member(bad), None, "{bad}");
        }
        assert_eq!(multiport("frames[4]: image"), Some(("frames", 4)));
        assert_eq!(membership("w[1]", ["w[0]", "w[1]", "x", "w2[0]"]), Some(("w", 1, 2)));
    }

    use crate::manifest::test_reactor as reactor;

    fn cameras(placement: Placement) -> Manifest {
        Manifest {
            name: "m".into(),
            coordination: Default::default(),
            stp: None,
            threshold: None,
            timeout: None,
            store_memory: None,
            hosts: Vec::new(),
            rti_host: None,
            rti_port: None,
            federates: vec![
                FederateSpec {
                    name: "cam".into(),
                    width: Some(3),
                    placement: Some(placement),
                    reactors: vec![ReactorSpec {
                        member_args: (0..3).map(|i| [("device".to_string(), i.into())].into_iter().collect()).collect(),
                        ..reactor("cam", &["go"], &["frame"])
                    }],
                    ..Default::default()
                },
                FederateSpec {
                    name: "fusion".into(),
                    reactors: vec![reactor("fusion", &["frames[3]"], &["tick"])],
                    ..Default::default()
                },
            ],
            connections: vec![
                ConnectionSpec { from: "cam.frame".into(), to: "fusion.frames".into(), ..Default::default() },
                ConnectionSpec {
                    from: "fusion.tick".into(),
                    to: "cam.go".into(),
                    after: Some("10ms".into()),
                    broadcast: true,
                    ..Default::default()
                },
            ],
            record: None,
        }
    }

    #[test]
    fn a_process_bank_becomes_one_federate_per_member() {
        let m = cameras(Placement::Processes).expanded();
        let names: Vec<_> = m.federates.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["cam[0]", "cam[1]", "cam[2]", "fusion"]);
        assert_eq!(m.federates[2].reactors[0].name, "cam[2]");
        assert_eq!(m.federates[2].reactors[0].args["device"], 2);
        let c: Vec<_> = m.connections.iter().map(|c| (c.from.as_str(), c.to.as_str(), c.after.as_deref())).collect();
        assert_eq!(
            c,
            [
                ("cam[0].cam[0].frame", "fusion.frames[0]", None),
                ("cam[1].cam[1].frame", "fusion.frames[1]", None),
                ("cam[2].cam[2].frame", "fusion.frames[2]", None),
                ("fusion.tick", "cam[0].cam[0].go", Some("10ms")),
                ("fusion.tick", "cam[1].cam[1].go", Some("10ms")),
                ("fusion.tick", "cam[2].cam[2].go", Some("10ms")),
            ]
        );
        assert_eq!(m.check(), vec![]);
        // Expanding the plain form changes nothing.
        assert_eq!(m.expanded(), m);
    }

    #[test]
    fn a_thread_bank_is_one_federate() {
        let m = cameras(Placement::Threads).expanded();
        assert_eq!(m.federates.len(), 2);
        let names: Vec<_> = m.federates[0].reactors.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["cam[0]", "cam[1]", "cam[2]"]);
        assert_eq!(m.connections[1].from, "cam.cam[1].frame");
        assert_eq!(m.check(), vec![]);
    }

    #[test]
    fn widths_that_differ_are_refused_naming_both_sides() {
        let mut m = cameras(Placement::Processes);
        m.federates[1].reactors[0].inputs = vec!["frames[4]".into()];
        let p = m.check();
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].location, Location::Connection { index: 0 });
        assert!(p[0].message.contains("cam.frame has width 3 but fusion.frames has width 4"), "{p:?}");
        m.federates[0].width = Some(0);
        let p = m.check();
        assert!(p
            .iter()
            .any(|p| p.location == Location::Federate { index: 0 } && p.message.contains("bank cam has width 0")));
    }

    #[test]
    fn a_process_bank_spreads_its_members_over_hosts() {
        use crate::manifest::HostSpec;
        let mut m = cameras(Placement::Processes);
        m.hosts = ["a", "b"].map(|h| HostSpec { name: h.into(), address: "10.0.0.1".into(), link: None }).to_vec();
        m.federates[1].host = Some("a".into());
        // Round robin: a list shorter than the bank repeats.
        m.federates[0].hosts = vec!["a".into(), "b".into()];
        let hosts = |m: &Manifest| m.expanded().federates.iter().map(|f| f.host.clone().unwrap()).collect::<Vec<_>>();
        assert_eq!(hosts(&m), ["a", "b", "a", "a"]);
        assert_eq!(m.check(), vec![]);
        // Explicit: one host per member.
        m.federates[0].hosts = vec!["b".into(), "b".into(), "a".into()];
        assert_eq!(hosts(&m), ["b", "b", "a", "a"]);
        // A host the program has not: reported once, at the bank.
        m.federates[0].hosts = vec!["a".into(), "c".into()];
        let p = m.check();
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].location, Location::Federate { index: 0 });
        assert!(p[0].message.contains("runs on host \"c\", which is not one of the program's hosts (a, b)"), "{p:?}");
        // Threads share one process; host and hosts contradict; not a bank.
        m.federates[0].hosts = vec!["a".into(), "b".into()];
        m.federates[0].placement = Some(Placement::Threads);
        assert!(m.check().iter().any(|p| p.message.contains("placement = \"threads\" runs them all in one process")));
        m.federates[0].placement = None;
        m.federates[0].host = Some("a".into());
        assert!(m.check().iter().any(|p| p.message.contains("both host = \"a\" and hosts are set")));
        m.federates[1].hosts = vec!["a".into()];
        assert!(m.check().iter().any(|p| p.message.contains("federate fusion: hosts spreads a bank's members")));
    }

    #[test]
    fn a_width_past_the_limit_is_refused_without_building_it() {
        // Four billion members or channels: refused at once (check and
        // expansion would otherwise build every one).
        let mut m = cameras(Placement::Processes);
        m.federates[0].width = Some(u32::MAX);
        m.federates[0].reactors[0].member_args.clear();
        m.federates[1].reactors[0].inputs = vec![format!("frames[{}]", MAX_WIDTH + 1)];
        let p = m.check();
        assert!(
            p.iter().any(|p| p.message.contains(&format!("bank cam has width {}, over the limit", u32::MAX))),
            "{p:?}"
        );
        assert!(p.iter().any(|p| p.message.contains("multiport \"frames[4097]\" has width 4097")), "{p:?}");
        assert!(m.expanded().federates.len() <= 2);
    }
}
