//! Manifests: a program's graph as data.
//!
//! A [`Manifest`] is what every way of writing a program (Rust builder,
//! Python `hprm.Program`, a TOML file) comes down to: federates, their
//! reactors with ports, timers, actions and reactions, the connections
//! (with `after` and physical `~>`), the coordination mode, STP and
//! out-of-band threshold, and per-federate launch settings (command,
//! Python module, restart policy, real-time priority and CPUs). The `hprm` command reads one to check,
//! draw, launch and deploy a program; a launcher hands the JSON form to
//! every federate in `HPRM_MANIFEST`, so a process that does not contain
//! the program's code (the ROS 2 bridge) can still join it
//! ([`Program::from_manifest`](crate::Program::from_manifest)).
//!
//! Names: a port is `federate.reactor.port`, or `federate.port` when the
//! federate has one reactor. A port may carry a type after a colon
//! (`"frame: image"`), which `check` compares across each connection.
//! Durations are strings with a unit (`"5ms"`, `"20 us"`, `"1s"`).
//!
//! Banks and multiports: a federate with `width = N` is a bank of N
//! members (`placement = "processes"`, one federate `name[i]` each, or
//! `"threads"`, reactors `reactor[i]` in one federate); a port declared
//! `"frames[4]"` is a multiport of width 4 whose channels are
//! `frames[0]`..`frames[3]`; a connection naming a bank or a multiport
//! links every member or channel (`broadcast`, `interleaved`). Such a
//! manifest is the short form of a plain one ([`Manifest::expanded`]),
//! which is what runs.
//!
//! Submodules: `bank` (member and channel names, expansion), `check`
//! (every problem of a manifest, with its location), `build` (to and from
//! [`Program`](crate::Program)), `record` (the `[record]` table: the
//! program records itself when it runs).

pub mod bank;
mod build;
mod check;
pub mod record;

use serde::{Deserialize, Serialize};

pub use bank::Placement;
pub(crate) use check::valid_name;
pub use check::{Field, Location, Problem};
pub use record::RecordSpec;

/// A program's graph. Field names are the TOML manifest's keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The program's name; also its federation id.
    pub name: String,
    #[serde(default)]
    pub coordination: CoordinationMode,
    /// Decentralized only: how long past a tag federates wait for inputs of unknown status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stp: Option<String>,
    /// Buffers of at least this many bytes travel out-of-band.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<u64>,
    /// Logical time after which the program stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Size of the store a launcher starts (e.g. "512m").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_memory: Option<String>,
    /// The hosts the program runs on (none: one host, as `hprm launch`
    /// without `--host` runs it). See [`HostSpec`].
    #[serde(default, rename = "host", skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostSpec>,
    /// With hosts: the host that runs the RTI (default: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rti_host: Option<String>,
    /// With hosts: the RTI's TCP port on its host (default [`DEFAULT_RTI_PORT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rti_port: Option<u16>,
    #[serde(default, rename = "federate")]
    pub federates: Vec<FederateSpec>,
    #[serde(default, rename = "connection")]
    pub connections: Vec<ConnectionSpec>,
    /// `[record]`: record the program whenever it runs (see [`record`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<RecordSpec>,
}

/// The RTI's port on its host in a program with hosts, unless `rti_port` says otherwise.
pub const DEFAULT_RTI_PORT: u16 = 15045;

/// One host of a program that spans several (`[[host]]`): each runs its
/// own store and `hprm-link`; `hprm launch --host NAME` starts its share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Its name: letters, digits, '-', '_', '.'.
    pub name: String,
    /// Its IP address, where the other hosts' federates reach the RTI
    /// when this host runs it.
    pub address: String,
    /// The Zenoh endpoint its link listens on (`tcp/10.0.0.1:7447`);
    /// default `tcp/ADDRESS:7447`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

impl HostSpec {
    /// [`HostSpec::link`], or its default.
    pub fn link_endpoint(&self) -> String {
        self.link.clone().unwrap_or_else(|| format!("tcp/{}:7447", self.address))
    }
}

/// How federates coordinate (see [`Coordination`](crate::Coordination)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CoordinationMode {
    #[default]
    Centralized,
    Decentralized,
}

/// One federate: a process (or, with `width`, a bank of them).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FederateSpec {
    pub name: String,
    /// The command that runs it (argv); the launcher adds `HPRM_*` variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A Python module or file defining its reactors' classes (`class`
    /// names a class in it); run by `python -m hprm.federate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// What the launcher does when the process fails.
    #[serde(default)]
    pub restart: RestartPolicy,
    /// With `restart = "on-failure"`: how many restarts before giving up
    /// (default [`DEFAULT_MAX_RESTARTS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
    /// Makes this federate a bank of `width` members (see the module
    /// documentation); [`Manifest::expanded`] writes them out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// Where a bank's members run (default: one process each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// The host it runs on (a `[[host]]`'s name), in a program with hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// A process bank's hosts: member `i` runs on `hosts[i % len]` (round
    /// robin; a list as long as the bank places each member explicitly).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// A real-time priority (1-99) for its reactions' threads (see
    /// [`crate::realtime`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// `"fifo"` (default) or `"rr"`, with `priority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<hprm_realtime::Policy>,
    /// The CPUs it runs on: `"2"`, `"2-3"`, `"0,2-3"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// `SO_PRIORITY` of its TCP connections, 0 to 6 (7 to 15 with
    /// `CAP_NET_ADMIN`); see [`crate::realtime`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_priority: Option<u8>,
    /// The DSCP its TCP connections' packets carry: 0 to 63, or a name
    /// (`"EF"`, `"CS6"`, `"AF41"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp: Option<hprm_realtime::Dscp>,
    /// Run without `priority`/`cpus`/socket marks, with a warning, where the
    /// rights to them are missing (default: stop with an error).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub best_effort: bool,
    #[serde(default, rename = "reactor")]
    pub reactors: Vec<ReactorSpec>,
}

/// What a launcher does when a federate's process fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// Stop the whole program cleanly and exit non-zero.
    #[default]
    Stop,
    /// Start the federate again (centralized coordination only): the RTI
    /// holds its downstream until it rejoins, and it resumes at a tag
    /// after everything granted downstream of it.
    OnFailure,
}

/// Restarts of an `on-failure` federate without `max_restarts`.
pub const DEFAULT_MAX_RESTARTS: u32 = 3;

/// One reactor of a federate.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReactorSpec {
    pub name: String,
    /// The class implementing it (Python: a class of the federate's module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Keyword arguments for the class.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub args: serde_json::Map<String, serde_json::Value>,
    /// In a bank: keyword arguments per member (one table each, in member
    /// order), added to `args`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub member_args: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Input ports: `"name"` or `"name: type"`; `"name[4]"` is a multiport.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// Output ports: `"name"` or `"name: type"`; `"name[4]"` is a multiport.
    #[serde(default)]
    pub outputs: Vec<String>,
    #[serde(default, rename = "timer", skip_serializing_if = "Vec::is_empty")]
    pub timers: Vec<TimerSpec>,
    #[serde(default, rename = "action", skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionSpec>,
    /// Reactions, in order. Optional in a TOML manifest: without them,
    /// every input is assumed to affect every output (for cycle checks).
    #[serde(default, rename = "reaction", skip_serializing_if = "Vec::is_empty")]
    pub reactions: Vec<ReactionSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerSpec {
    pub name: String,
    #[serde(default = "zero")]
    pub offset: String,
    #[serde(default = "zero")]
    pub period: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    pub name: String,
    #[serde(default)]
    pub physical: bool,
    #[serde(default = "zero")]
    pub min_delay: String,
    /// A physical action whose values the payload codec cannot encode (a
    /// Rust `opaque_physical_action`): `hprm launch --record` refuses the
    /// program, since a recording holds every physical action's values.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub opaque: bool,
}

/// A reaction: what triggers it, what it reads, what it may set.
/// Names are the reactor's ports, timers, actions, `startup`, `shutdown`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReactionSpec {
    pub name: String,
    #[serde(default)]
    pub triggers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
}

/// A connection from an output to an input; or, when an end names a bank
/// or a multiport, from each of its members or channels to the other end's.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionSpec {
    /// `federate.reactor.port` (or `federate.port`) of an output.
    pub from: String,
    /// `federate.reactor.port` (or `federate.port`) of an input.
    pub to: String,
    /// Logical delay: absent for none, "0ms" for one microstep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// `~>`: stamped with the receiver's physical time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub physical: bool,
    /// LF's `(from)+`: `from`'s ports repeat until every input of `to` has
    /// one (one value to every member of a bank).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub broadcast: bool,
    /// LF's `interleaved`: a bank of multiports is listed channel by
    /// channel (`b[0].p[0], b[1].p[0], ..`) rather than member by member.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interleaved: bool,
}

fn zero() -> String {
    "0s".into()
}

impl Manifest {
    /// Reads the JSON form (what launchers write to `HPRM_MANIFEST`).
    pub fn from_json(text: &str) -> Result<Manifest, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The JSON form.
    pub fn to_json(&self) -> String {
        // Plain data with string keys: serializing cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The host holding the RTI in a program with hosts: `rti_host`, else
    /// the first host.
    pub fn rti_host(&self) -> Option<&HostSpec> {
        match &self.rti_host {
            Some(name) => self.hosts.iter().find(|h| h.name == *name),
            None => self.hosts.first(),
        }
    }

    /// Where every federate of a program with hosts joins the RTI: its
    /// host's address and the program's `rti_port`.
    pub fn rti_addr(&self) -> Option<String> {
        let port = self.rti_port.unwrap_or(DEFAULT_RTI_PORT);
        Some(format!("{}:{port}", self.rti_host()?.address))
    }

    /// The manifest in `$HPRM_MANIFEST`, when a launcher set it.
    pub fn from_env() -> Result<Option<Manifest>, String> {
        let Some(path) = std::env::var_os("HPRM_MANIFEST") else { return Ok(None) };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read the manifest {} named by HPRM_MANIFEST: {e}", path.to_string_lossy()))?;
        Manifest::from_json(&text)
            .map(Some)
            .map_err(|e| format!("the manifest {} named by HPRM_MANIFEST is not valid: {e}", path.to_string_lossy()))
    }

    /// The federate named `name`.
    pub fn federate(&self, name: &str) -> Option<&FederateSpec> {
        self.federates.iter().find(|f| f.name == name)
    }

    /// The physical actions of federate `name` (of an expanded manifest):
    /// full paths (`federate.reactor.action`) and whether each is opaque.
    pub fn physical_actions(&self, name: &str) -> Vec<(String, bool)> {
        self.federate(name)
            .into_iter()
            .flat_map(|f| f.reactors.iter())
            .flat_map(|r| {
                r.actions
                    .iter()
                    .filter(|a| a.physical)
                    .map(move |a| (format!("{name}.{}.{}", r.name, a.name), a.opaque))
            })
            .collect()
    }

    /// The ids of the federates restarted on failure (`restart =
    /// "on-failure"`), as the RTI's `--restartable` takes them (`0,2`);
    /// `None` when there are none.
    pub fn restartable(&self) -> Option<String> {
        let ids: Vec<String> = self
            .federates
            .iter()
            .enumerate()
            .filter(|(_, f)| f.restart == RestartPolicy::OnFailure)
            .map(|(i, _)| i.to_string())
            .collect();
        (!ids.is_empty()).then(|| ids.join(","))
    }
}

/// A port declaration's name and optional type: `"frame: image"`. A
/// multiport's name keeps its width (`"frames[4]"`); see
/// [`bank::multiport`].
pub fn port_decl(decl: &str) -> (&str, Option<&str>) {
    match decl.split_once(':') {
        Some((n, t)) => (n.trim(), Some(t.trim()).filter(|t| !t.is_empty())),
        None => (decl.trim(), None),
    }
}

pub use hprm_store::duration::{format_duration, parse_duration};

/// A reactor of a manifest a test builds: its name and port declarations.
#[cfg(test)]
pub(crate) fn test_reactor(name: &str, inputs: &[&str], outputs: &[&str]) -> ReactorSpec {
    ReactorSpec {
        name: name.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_read_and_write_back() {
        for (s, d) in [
            ("5ms", Duration::from_millis(5)),
            ("2.5 s", Duration::from_millis(2500)),
            ("100us", Duration::from_micros(100)),
            ("7ns", Duration::from_nanos(7)),
            ("1min", Duration::from_secs(60)),
        ] {
            assert_eq!(parse_duration(s).unwrap(), d, "{s}");
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
        assert_eq!(format_duration(Duration::ZERO), "0ms");
        for bad in ["", "5", "ms", "5 parsecs", "-1ms", "1e3ms"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn port_declarations_split_name_and_type() {
        assert_eq!(port_decl("frame"), ("frame", None));
        assert_eq!(port_decl("frame: image"), ("frame", Some("image")));
        assert_eq!(port_decl(" frame :"), ("frame", None));
    }
}
