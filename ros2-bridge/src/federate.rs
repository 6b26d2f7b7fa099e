//! The HPRM side: the bridge as one federate of a program it learns from
//! the launcher's manifest (`HPRM_MANIFEST`).
//!
//! The federate's reactors are declared by the program (in Python,
//! `hprm.external(inputs=[...], outputs=[...])`); every port of theirs must
//! be a mapping of the config and the other way round ([`check_ports`]).
//! An output port is fed by a physical action scheduled from the ROS
//! thread (tag = arrival time, or the header stamp when configured); an
//! input port's reaction hands the value to ROS.

use std::collections::HashMap;
use std::path::Path;

use hprm_node::manifest::{port_decl, Manifest, ReactorSpec};
use hprm_node::{Program, ProgramError};

use hprm_node::payload::{Encoder, StoreLink, DEFAULT_THRESHOLD};

use hprm_node::loss::Loss;
use hprm_node::record::Foreign;

use crate::config::{Config, Direction, PortUse};
use crate::messages::Loaner;
use crate::ros::RosSide;
use crate::value::Value;

/// A mismatch between the program and the config, as a sentence.
#[derive(Debug, thiserror::Error)]
pub enum FederateError {
    #[error("cannot read the program manifest {path}: {message}; start the bridge from an HPRM launcher (it sets HPRM_MANIFEST), or pass --manifest")]
    Manifest { path: String, message: String },
    #[error("the program {program:?} has no federate {name:?} (it has: {known}); set HPRM_FEDERATE or --federate to the bridge's federate")]
    NoFederate { program: String, name: String, known: String },
    #[error("the bridge config and the program disagree: {0}")]
    Ports(String),
    #[error("cannot build the program: {0}")]
    Program(#[from] ProgramError),
}

pub fn load_manifest(path: &Path) -> Result<Manifest, FederateError> {
    let err = |message: String| FederateError::Manifest { path: path.display().to_string(), message };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    Manifest::from_json(&text).map_err(|e| err(e.to_string()))
}

/// Checks that the federate `name`'s reactors declare exactly the config's
/// ports, with the right directions (an output carries data into HPRM).
pub fn check_ports(manifest: &Manifest, name: &str, config: &Config) -> Result<(), FederateError> {
    let fed = manifest.federates.iter().find(|f| f.name == name).ok_or_else(|| FederateError::NoFederate {
        program: manifest.name.clone(),
        name: name.into(),
        known: manifest.federates.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", "),
    })?;
    let mut declared: HashMap<&str, (bool, &str)> = HashMap::new();
    for r in &fed.reactors {
        for (ports, output) in [(&r.inputs, false), (&r.outputs, true)] {
            for p in ports.iter().map(|d| port_decl(d).0) {
                if let Some((_, other)) = declared.insert(p, (output, &r.name)) {
                    return Err(FederateError::Ports(format!("port {p:?} is declared by both reactors {other:?} and {:?} of federate {name:?}; give them distinct names", r.name)));
                }
            }
        }
    }
    let wanted = config.ports();
    for PortUse { name: port, output } in &wanted {
        let io = |o: bool| {
            if o {
                "an output (ros->hprm, a service request served or a response received, an action's goal or cancel served or its feedback or result received, a parameter)"
            } else {
                "an input (hprm->ros, a service call or a response, an action's goal or cancel sent or its feedback or result served)"
            }
        };
        match declared.get(port.as_str()) {
            None => {
                return Err(FederateError::Ports(format!(
                "the config maps port {port:?}, which federate {name:?} does not declare; declare it as {} (ports: {})",
                io(*output),
                sorted(declared.keys().copied())
            )))
            }
            Some((o, _)) if o != output => {
                return Err(FederateError::Ports(format!("port {port:?} of federate {name:?} must be {}", io(*output))))
            }
            Some(_) => {}
        }
    }
    let unmapped: Vec<&str> = declared.keys().copied().filter(|p| !wanted.iter().any(|w| w.name == *p)).collect();
    if !unmapped.is_empty() {
        return Err(FederateError::Ports(format!(
            "federate {name:?} declares port(s) {} that no [[topic]], [[service]], [[action]] or [[parameter]] of the config maps",
            sorted(unmapped.into_iter())
        )));
    }
    Ok(())
}

fn sorted<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut v: Vec<&str> = names.collect();
    v.sort_unstable();
    v.join(", ")
}

/// For each ros->hprm port with receivers, a [`Loaner`] that puts bulk
/// data into the store for exactly those receivers (none without a store,
/// `HPRM_STORE`).
pub fn loaners(manifest: &Manifest, name: &str, config: &Config) -> HashMap<String, Loaner> {
    let Some(store) = std::env::var_os("HPRM_STORE") else { return HashMap::new() };
    let threshold = manifest.threshold.map_or(DEFAULT_THRESHOLD, |t| usize::try_from(t).unwrap_or(usize::MAX));
    let encoder = Encoder::new(StoreLink::new(Some(store.into())), threshold);
    let mut out = HashMap::new();
    for t in config.topics.iter().filter(|t| t.direction == Direction::RosToHprm) {
        // Port paths: `federate.reactor.port` or `federate.port`; port
        // names are unique within the federate (check_ports).
        let receivers = manifest
            .connections
            .iter()
            .filter(|c| {
                let parts: Vec<&str> = c.from.split('.').collect();
                parts.first() == Some(&name) && parts.last() == Some(&t.port.as_str())
            })
            .count();
        if receivers > 0 {
            out.insert(t.port.clone(), Loaner { encoder: encoder.clone(), deliveries: receivers as u32, ready: None });
        }
    }
    out
}

/// For each ros->hprm topic, by port: its channel in a recording, as
/// rosbag2 writes one (the topic's full name, schema encoding `ros2msg`
/// with the type's definition, messages in `cdr`). A type whose `.msg`
/// files cannot be found is left out, with a warning: its values are
/// still recorded, as values.
pub fn foreign(config: &Config) -> HashMap<String, Foreign> {
    let mut out = HashMap::new();
    for t in config.topics.iter().filter(|t| t.direction == Direction::RosToHprm) {
        match crate::definition::definition(&t.msg_type) {
            Ok(schema) => {
                out.insert(
                    t.port.clone(),
                    Foreign {
                        topic: crate::ros::resolve(&config.ros.namespace, &t.topic),
                        schema_name: t.msg_type.clone(),
                        schema_encoding: "ros2msg".into(),
                        schema,
                        message_encoding: "cdr".into(),
                    },
                );
            }
            Err(e) => tracing::warn!(
                topic = %t.topic,
                "the recording will not hold this topic's messages as ROS 2 messages (CDR), only as values: {e}"
            ),
        }
    }
    out
}

/// The program, with the bridge federate `name`'s reactors wired to `ros`.
/// `foreign`, by port of a ros->hprm topic: how a recording writes its
/// messages as ROS did (`record_foreign`, [`foreign`]).
pub fn build(
    manifest: &Manifest,
    name: &str,
    ros: &mut RosSide,
    mut foreign: HashMap<String, Foreign>,
) -> Result<Program, FederateError> {
    let mut inlets = std::mem::take(&mut ros.inlets);
    let mut outlets = std::mem::take(&mut ros.outlets);
    let mut cdr = std::mem::take(&mut ros.cdr);
    // Shared, not taken: the bridge's summary reads them when it stops.
    let dropped = ros.dropped.clone();
    let program = Program::from_manifest(manifest, name, |prog, fed, spec: &ReactorSpec| {
        let mut r = prog.reactor(fed, spec.name.clone(), ());
        let startup = r.startup();
        let mut connect = Vec::new();
        for port in spec.outputs.iter().map(|d| port_decl(d).0) {
            let out = r.output::<Value>(port);
            let action = r.physical_action::<Value>(&format!("{port}_from_ros"), std::time::Duration::ZERO);
            // A message from a ROS topic is scheduled as its CDR bytes when
            // the program is recorded (and comes back so in a replay):
            // converted here, the same way live and replayed. A message
            // already converted (not recorded) is any other value.
            // A publisher's bytes that do not decode as the topic's type are
            // dropped, counted by the bridge and as the output's loss.
            let decode = cdr.remove(port).zip(dropped.get(port).cloned());
            r.reaction(&format!("{port}_emit")).trigger(action).effect(out).body(move |_, ctx| {
                let v = match (ctx.physical_value(action), &decode) {
                    (Some(Value::Buffer(bytes)), Some((decode, drops))) => match decode.decode_cdr(bytes.bytes()) {
                        Ok(v) => v,
                        Err(e) => {
                            drops.drop_one(&e);
                            ctx.lost(out, Loss::Undecodable);
                            return;
                        }
                    },
                    (Some(v), _) => v.clone(),
                    (None, _) => return,
                };
                ctx.set(out, v);
            });
            if let Some(f) = foreign.remove(port) {
                r.record_foreign(action, f);
            }
            if let Some(inlet) = inlets.remove(port) {
                connect.push((inlet, action));
            }
        }
        for port in spec.inputs.iter().map(|d| port_decl(d).0) {
            let inp = r.input::<Value>(port);
            let outlet = std::sync::Arc::new(outlets.remove(port));
            let reaction = format!("{port}_to_ros");
            let port = port.to_string();
            let send = move |ctx: &mut hprm_node::Ctx<'_>| {
                let (Some(v), Some(outlet)) = (ctx.get(inp), outlet.as_ref()) else { return };
                if let Err(e) = outlet.send(v.clone()) {
                    tracing::warn!(port = %port, "not sent to ROS 2: {e}");
                }
            };
            let tardy = send.clone();
            // ROS 2 has no tags: a value that arrives tardy still goes out
            // (a service response must, or the caller waits forever).
            r.reaction(&reaction).trigger(inp).tardy(move |_, ctx| tardy(ctx)).body(move |_, ctx| send(ctx));
        }
        r.reaction("connect_ros").trigger(startup).body(move |_, ctx| {
            for (inlet, action) in connect.drain(..) {
                let scheduler = ctx.physical_scheduler(action);
                inlet.connect(move |v, extra| scheduler.schedule(v, extra));
            }
        });
        Ok(r.id())
    })?;
    Ok(program)
}
