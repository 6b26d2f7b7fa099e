//! The ROS 2 side of the bridge: one r2r node with every mapping of the
//! config, spun by its own thread.
//!
//! [`RosSide::start`] creates the node, its subscriptions, publishers,
//! service and action clients and servers and declared parameters, checks
//! the QoS and types of the publishers and subscriptions already on the
//! graph, and starts the thread.
//! Everything that can be wrong with a mapping is found there, before the
//! federate joins the federation. What arrives from ROS goes to an
//! [`Inlet`] (set once the federate has started: until then, messages are
//! dropped with a log line); what HPRM sends goes through
//! [`RosSide::outlets`].

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use futures::{FutureExt, StreamExt};
use r2r::qos::{DurabilityPolicy, HistoryPolicy, ReliabilityPolicy};
use r2r::QosProfile;

use crate::actions::{self, ActionSupport, ClientPorts, Emit, GoalSender, ServerPorts, ThreadTask};
use crate::config::{Config, Direction, Durability, Qos, Reliability, Role, TimeSource};
use crate::dropped::Dropped;
use crate::graph;
use crate::messages::{self, ConvertError, LocalTask, MessageSupport, ValuePublisher};
use crate::parameters::{self, Declared};
use crate::services::{self, Responder, ServiceSupport};
use crate::value::Value;
use hprm_node::payload::Buffer;

/// A start-up failure of the ROS side, as a sentence.
#[derive(Debug, thiserror::Error)]
pub enum RosError {
    #[error("topic {topic:?}: message type {type_name:?} is not one this bridge was built with; install its package into the ROS 2 prefix and rebuild the bridge (ros2-bridge/build.sh), or fix the type name")]
    UnknownType { topic: String, type_name: String },
    #[error("service {service:?}: service type {type_name:?} is not one this bridge was built with; install its package into the ROS 2 prefix and rebuild the bridge (ros2-bridge/build.sh), or fix the type name")]
    UnknownService { service: String, type_name: String },
    #[error("action {action:?}: action type {type_name:?} is not one this bridge was built with; install its package into the ROS 2 prefix and rebuild the bridge (ros2-bridge/build.sh), or fix the type name")]
    UnknownAction { action: String, type_name: String },
    #[error("cannot start ROS 2 ({what}): {source}; source the environment that ros2-bridge/setup-ros2.sh prints")]
    Start { what: String, source: r2r::Error },
    #[error("cannot start the ROS 2 thread: {0}")]
    Thread(std::io::Error),
    #[error("{name}: {what}")]
    Mapping { name: String, what: String },
}

/// Where values from ROS go: the scheduler of the physical action that
/// emits them on the bridge's port, once the federate runs.
#[derive(Clone, Default)]
pub struct Inlet(Arc<OnceLock<Schedule>>);

/// Schedules a value on a physical action, `Duration` after now.
type Schedule = Box<dyn Fn(Value, Duration) + Send + Sync>;

impl Inlet {
    pub fn connect(&self, schedule: impl Fn(Value, Duration) + Send + Sync + 'static) {
        let _ = self.0.set(Box::new(schedule));
    }

    /// Whether `v` went to HPRM (false before the federate started).
    fn deliver(&self, port: &str, v: Value, extra: Duration) -> bool {
        match self.0.get() {
            Some(schedule) => {
                schedule(v, extra);
                true
            }
            None => {
                tracing::debug!(port, "a ROS message arrived before the federate started; dropped");
                false
            }
        }
    }

    fn is_connected(&self) -> bool {
        self.0.get().is_some()
    }

    /// Delivers to `port` with no delay, for the ROS thread's tasks.
    fn emitter(&self, port: &str) -> Emit {
        let (inlet, port) = (self.clone(), port.to_string());
        Arc::new(move |v| {
            inlet.deliver(&port, v, Duration::ZERO);
        })
    }
}

/// What the ROS thread does with a value HPRM sent on a port: the tasks
/// it returns are driven by that thread.
type Handler = Box<dyn FnMut(Value) -> Vec<ThreadTask> + Send>;

/// What HPRM sends into ROS, by port.
pub enum Outlet {
    Topic(Box<dyn ValuePublisher>),
    /// To the ROS thread's [`Handler`] of the port: requests of a service
    /// HPRM calls, goals and cancels of actions, feedback and results of
    /// goals HPRM serves.
    Thread(mpsc::Sender<Value>),
    /// Responses to requests HPRM serves, answered in request order.
    Respond(Arc<Mutex<VecDeque<Box<dyn Responder>>>>),
}

impl Outlet {
    /// Sends `v` on; errors are the sender's to log.
    pub fn send(&self, v: Value) -> Result<(), ConvertError> {
        match self {
            Outlet::Topic(p) => p.publish(v),
            Outlet::Thread(tx) => tx.send(v).map_err(|_| ConvertError::Ros("the ROS thread has stopped".into())),
            Outlet::Respond(pending) => {
                let next = pending.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
                match next {
                    Some(r) => r.respond(v),
                    None => Err(ConvertError::Ros(
                        "a service response with no request waiting for one; respond once per request".into(),
                    )),
                }
            }
        }
    }
}

pub struct RosSide {
    pub inlets: HashMap<String, Inlet>,
    pub outlets: HashMap<String, Outlet>,
    /// By port of a ros->hprm topic: its message type, which turns the
    /// CDR bytes scheduled on the port's physical action (when recording,
    /// and in a replay of a recording) into the port's value.
    pub cdr: HashMap<String, Arc<dyn MessageSupport>>,
    /// By port of a ros->hprm topic: the messages it dropped undecoded.
    pub dropped: HashMap<String, Arc<Dropped>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// r2r's QoS profile for a config's.
pub fn qos_profile(q: &Qos) -> QosProfile {
    let mut p = QosProfile::default();
    p.history = HistoryPolicy::KeepLast;
    p.depth = q.depth;
    p.reliability = match q.reliability {
        Reliability::Reliable => ReliabilityPolicy::Reliable,
        Reliability::BestEffort => ReliabilityPolicy::BestEffort,
    };
    p.durability = match q.durability {
        Durability::Volatile => DurabilityPolicy::Volatile,
        Durability::TransientLocal => DurabilityPolicy::TransientLocal,
    };
    p
}

/// Why a subscription with `want` gets nothing from a publisher offering
/// `offered` (DDS request/offer rules), if it does not.
pub fn incompatible(want: &Qos, offered: &QosProfile) -> Option<String> {
    if want.reliability == Reliability::Reliable && offered.reliability == ReliabilityPolicy::BestEffort {
        return Some(
            "it publishes best_effort and the bridge asks reliable; set qos.reliability = \"best_effort\"".into(),
        );
    }
    if want.durability == Durability::TransientLocal && offered.durability == DurabilityPolicy::Volatile {
        return Some(
            "it publishes volatile and the bridge asks transient_local; set qos.durability = \"volatile\"".into(),
        );
    }
    None
}

/// Why a subscription that wants `wanted` gets nothing from the bridge's
/// publisher offering `offer` (DDS request/offer rules), if it does not.
pub fn incompatible_offer(offer: &Qos, wanted: &QosProfile) -> Option<String> {
    if wanted.reliability == ReliabilityPolicy::Reliable && offer.reliability == Reliability::BestEffort {
        return Some(
            "it asks reliable and the bridge publishes best_effort; set qos.reliability = \"reliable\"".into(),
        );
    }
    if wanted.durability == DurabilityPolicy::TransientLocal && offer.durability == Durability::Volatile {
        return Some(
            "it asks transient_local and the bridge publishes volatile; set qos.durability = \"transient_local\""
                .into(),
        );
    }
    None
}

/// `/ns/node` of an endpoint.
fn endpoint_node(namespace: &str, name: &str) -> String {
    format!("{namespace}{}{name}", if namespace.ends_with('/') { "" } else { "/" })
}

impl RosSide {
    /// Sets up every mapping of `config` and starts spinning. `discovery`
    /// is how long to let the graph settle before checking the publishers
    /// and subscriptions already on it. With `raw` (the program is
    /// recorded), messages from ROS topics reach their inlets as ROS
    /// serialized them, a `uint8` array of CDR bytes, and the port's
    /// reaction converts them ([`RosSide::cdr`]): so the recording holds
    /// the bytes, and a replay converts them as the live run did.
    pub fn start(
        config: &Config,
        discovery: Duration,
        mut loaners: HashMap<String, messages::Loaner>,
        raw: bool,
    ) -> Result<RosSide, RosError> {
        // Types first: they need no ROS context.
        let mut topic_support: Vec<Arc<dyn MessageSupport>> = Vec::new();
        for t in &config.topics {
            topic_support.push(
                messages::support(&t.msg_type)
                    .ok_or_else(|| RosError::UnknownType { topic: t.topic.clone(), type_name: t.msg_type.clone() })?,
            );
        }
        let mut service_support: Vec<Box<dyn ServiceSupport>> = Vec::new();
        for s in &config.services {
            service_support.push(services::support(&s.srv_type).ok_or_else(|| RosError::UnknownService {
                service: s.service.clone(),
                type_name: s.srv_type.clone(),
            })?);
        }
        let mut action_support: Vec<Box<dyn ActionSupport>> = Vec::new();
        for a in &config.actions {
            action_support.push(actions::support(&a.action_type).ok_or_else(|| RosError::UnknownAction {
                action: a.action.clone(),
                type_name: a.action_type.clone(),
            })?);
        }

        let start = |what: &str| {
            let what = what.to_string();
            move |source| RosError::Start { what, source }
        };
        let ctx = r2r::Context::create().map_err(start("context"))?;
        let mut node = r2r::Node::create(ctx, &config.ros.node, &config.ros.namespace).map_err(start("node"))?;
        // Created now, so that it discovers the graph during the same wait.
        let probe = if config.topics.iter().any(|t| t.direction == Direction::HprmToRos) {
            graph::GraphProbe::create(&format!("{}_qos_check", config.ros.node))
                .inspect_err(|e| tracing::warn!("cannot check the QoS of the subscriptions already running: {e}"))
                .ok()
        } else {
            None
        };

        let mut tasks: Vec<LocalTask> = Vec::new();
        let mut inlets = HashMap::new();
        let mut outlets = HashMap::new();
        let mut cdr = HashMap::new();
        let mut dropped = HashMap::new();
        let mut handlers: Vec<(mpsc::Receiver<Value>, Handler)> = Vec::new();
        let mut handle = |port: &str, outlets: &mut HashMap<String, Outlet>, h: Handler| {
            let (tx, rx) = mpsc::channel();
            outlets.insert(port.to_string(), Outlet::Thread(tx));
            handlers.push((rx, h));
        };
        for (t, support) in config.topics.iter().zip(&topic_support) {
            let mapping = |source: r2r::Error| RosError::Mapping {
                name: format!("topic {:?}", t.topic),
                what: format!("r2r refused it: {source}"),
            };
            let qos = qos_profile(&t.qos);
            if t.direction == Direction::RosToHprm {
                dropped.insert(t.port.clone(), Arc::new(Dropped::new(&t.topic, support.type_name())));
            }
            match t.direction {
                Direction::RosToHprm if raw => {
                    let inlet = Inlet::default();
                    let (to, port, time, decode) = (inlet.clone(), t.port.clone(), t.time, support.clone());
                    let sink = Box::new(move |bytes: Vec<u8>| {
                        // The stamp needs the message: converted here too
                        // (an unreadable one is dropped by the reaction).
                        let extra = match time {
                            TimeSource::Arrival => Duration::ZERO,
                            TimeSource::Header => {
                                decode.decode_cdr(&bytes).map_or(Duration::ZERO, |v| header_delay(&v))
                            }
                        };
                        to.deliver(&port, Value::Buffer(Buffer::from_vec(bytes)), extra);
                    });
                    tasks.push(
                        messages::subscribe_raw(&mut node, &t.topic, support.type_name(), qos, sink)
                            .map_err(mapping)?,
                    );
                    inlets.insert(t.port.clone(), inlet);
                    cdr.insert(t.port.clone(), support.clone());
                }
                Direction::RosToHprm => {
                    let inlet = Inlet::default();
                    let (to, port, time, drops) = (inlet.clone(), t.port.clone(), t.time, dropped[&t.port].clone());
                    let sink = Box::new(move |v: Result<Value, ConvertError>| match v {
                        Ok(v) => {
                            let extra = match time {
                                TimeSource::Arrival => Duration::ZERO,
                                TimeSource::Header => header_delay(&v),
                            };
                            to.deliver(&port, v, extra);
                        }
                        Err(e) => drops.drop_one(&e),
                    });
                    let loaner = loaners.remove(&t.port).map(|mut l| {
                        let inlet = inlet.clone();
                        l.ready = Some(Arc::new(move || inlet.is_connected()));
                        l
                    });
                    tasks.push(support.subscribe(&mut node, &t.topic, qos, sink, loaner).map_err(mapping)?);
                    inlets.insert(t.port.clone(), inlet);
                    cdr.insert(t.port.clone(), support.clone());
                }
                Direction::HprmToRos => {
                    outlets.insert(
                        t.port.clone(),
                        Outlet::Topic(support.publisher(&mut node, &t.topic, qos).map_err(mapping)?),
                    );
                }
            }
        }
        for (s, support) in config.services.iter().zip(service_support) {
            let mapping = |source: r2r::Error| RosError::Mapping {
                name: format!("service {:?}", s.service),
                what: format!("r2r refused the service: {source}"),
            };
            match s.role {
                Role::Client => {
                    let inlet = Inlet::default();
                    let caller = support.client(&mut node, &s.service).map_err(mapping)?;
                    let (emit, service) = (inlet.emitter(&s.response), s.service.clone());
                    handle(
                        &s.request,
                        &mut outlets,
                        Box::new(move |request| match caller.call(request) {
                            Ok(response) => {
                                let (emit, service) = (emit.clone(), service.clone());
                                vec![response
                                    .map(move |r| match r {
                                        Ok(v) => emit(v),
                                        Err(e) => tracing::warn!(service = %service, "call failed: {e}"),
                                    })
                                    .boxed_local()]
                            }
                            Err(e) => {
                                tracing::warn!(service = %service, "cannot call: {e}");
                                Vec::new()
                            }
                        }),
                    );
                    inlets.insert(s.response.clone(), inlet);
                }
                Role::Server => {
                    let inlet = Inlet::default();
                    let pending = Arc::new(Mutex::new(VecDeque::new()));
                    let (to, port, queue, name) =
                        (inlet.clone(), s.request.clone(), pending.clone(), s.service.clone());
                    let sink = Box::new(move |req: Result<(Value, Box<dyn Responder>), ConvertError>| match req {
                        // Responses pair with requests in order: queue only
                        // requests that reach HPRM (unanswered ones time
                        // out at the caller).
                        Ok((v, responder)) if to.is_connected() => {
                            queue.lock().unwrap_or_else(PoisonError::into_inner).push_back(responder);
                            to.deliver(&port, v, Duration::ZERO);
                        }
                        Ok(_) => {
                            tracing::warn!(service = %name, "a request arrived before the federate started; not answered")
                        }
                        Err(e) => tracing::warn!(service = %name, "dropped a request: {e}"),
                    });
                    tasks.push(support.serve(&mut node, &s.service, sink).map_err(mapping)?);
                    outlets.insert(s.response.clone(), Outlet::Respond(pending));
                    inlets.insert(s.request.clone(), inlet);
                }
            }
        }

        for (a, support) in config.actions.iter().zip(action_support) {
            let mapping = |source: r2r::Error| RosError::Mapping {
                name: format!("action {:?}", a.action),
                what: format!("r2r refused the action: {source}"),
            };
            // Inlets of the ports that carry data into HPRM, by port.
            let mut inlet = |port: &str| {
                let i = Inlet::default();
                inlets.insert(port.to_string(), i.clone());
                i
            };
            match a.role {
                Role::Client => {
                    let sender: Arc<Mutex<Box<dyn GoalSender>>> =
                        Arc::new(Mutex::new(support.client(&mut node, &a.action).map_err(mapping)?));
                    let ports = ClientPorts {
                        feedback: a.feedback.as_deref().map(|p| inlet(p).emitter(p)),
                        result: inlet(&a.result).emitter(&a.result),
                    };
                    let (goals, name) = (sender.clone(), a.action.clone());
                    handle(
                        &a.goal,
                        &mut outlets,
                        Box::new(move |goal| {
                            let sent = goals.lock().unwrap_or_else(PoisonError::into_inner).send(goal, ports.clone());
                            sent.map(|t| vec![t])
                                .inspect_err(|e| tracing::warn!(action = %name, "goal not sent: {e}"))
                                .unwrap_or_default()
                        }),
                    );
                    if let Some(cancel) = &a.cancel {
                        let name = a.action.clone();
                        handle(
                            cancel,
                            &mut outlets,
                            Box::new(move |id| {
                                sender
                                    .lock()
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .cancel(id)
                                    .inspect_err(|e| tracing::warn!(action = %name, "not canceled: {e}"))
                                    .unwrap_or_default()
                            }),
                        );
                    }
                }
                Role::Server => {
                    let goal = inlet(&a.goal);
                    let ready = goal.clone();
                    let ports = ServerPorts {
                        goal: goal.emitter(&a.goal),
                        ready: Arc::new(move || ready.is_connected()),
                        cancel: a.cancel.as_deref().map(|p| inlet(p).emitter(p)),
                    };
                    let (task, served) = support.serve(&mut node, &a.action, ports).map_err(mapping)?;
                    tasks.push(task);
                    if let Some(feedback) = &a.feedback {
                        let (goals, name) = (served.clone(), a.action.clone());
                        handle(
                            feedback,
                            &mut outlets,
                            Box::new(move |v| {
                                if let Err(e) = goals.feedback(v) {
                                    tracing::warn!(action = %name, "feedback not sent: {e}");
                                }
                                Vec::new()
                            }),
                        );
                    }
                    let name = a.action.clone();
                    handle(
                        &a.result,
                        &mut outlets,
                        Box::new(move |v| {
                            if let Err(e) = served.finish(v) {
                                tracing::warn!(action = %name, "result not sent: {e}");
                            }
                            Vec::new()
                        }),
                    );
                }
            }
        }
        // Each parameter's value goes to HPRM once the federate has
        // started, then each new one.
        let mut initial = Vec::new();
        if !config.parameters.is_empty() {
            let declared = Arc::new(Mutex::new(Declared::new(&config.parameters)));
            let (serve, events) = node.make_derived_parameter_handler(declared.clone()).map_err(|source| {
                RosError::Mapping { name: "parameters".into(), what: format!("r2r refused them: {source}") }
            })?;
            tasks.push(serve.boxed());
            let mut by_name = HashMap::new();
            for p in &config.parameters {
                let i = Inlet::default();
                inlets.insert(p.port.clone(), i.clone());
                by_name.insert(p.name.clone(), i.emitter(&p.port));
                let current = declared.clone();
                let name = p.name.clone();
                initial.push((
                    i,
                    Box::new(move || {
                        let d = current.lock().unwrap_or_else(PoisonError::into_inner);
                        d.value(&name).map(parameters::to_value).unwrap_or(Value::Nil)
                    }) as Box<dyn Fn() -> Value + Send>,
                ));
            }
            tasks.push(
                events
                    .for_each(move |(name, value)| {
                        if let Some(emit) = by_name.get(&name) {
                            emit(parameters::to_value(&value));
                        }
                        std::future::ready(())
                    })
                    .boxed(),
            );
        }

        // Let discovery find the publishers already running, then check them.
        let until = Instant::now() + discovery;
        while Instant::now() < until {
            node.spin_once(Duration::from_millis(20));
        }
        for t in config.topics.iter().filter(|t| t.direction == Direction::RosToHprm) {
            let publishers =
                node.get_publishers_info_by_topic(&resolve(&config.ros.namespace, &t.topic), false).unwrap_or_default();
            tracing::debug!(topic = %t.topic, publishers = publishers.len(), "publishers already on the graph");
            for p in publishers {
                let who = format!("publisher {}", endpoint_node(&p.node_namespace, &p.node_name));
                if p.topic_type != t.msg_type {
                    return Err(RosError::Mapping {
                        name: format!("topic {:?}", t.topic),
                        what: format!("{who} publishes {}, the config says {}; fix `type`", p.topic_type, t.msg_type),
                    });
                }
                if let Some(why) = incompatible(&t.qos, &p.qos_profile) {
                    return Err(RosError::Mapping {
                        name: format!("topic {:?}", t.topic),
                        what: format!("QoS mismatch with {who}: {why}"),
                    });
                }
            }
        }
        if let Some(probe) = probe {
            let bridge = endpoint_node(&config.ros.namespace, &config.ros.node);
            for t in config.topics.iter().filter(|t| t.direction == Direction::HprmToRos) {
                let subscriptions =
                    probe.subscriptions(&resolve(&config.ros.namespace, &t.topic)).unwrap_or_else(|e| {
                        tracing::warn!(topic = %t.topic, "cannot list the subscriptions: {e}");
                        Vec::new()
                    });
                tracing::debug!(topic = %t.topic, subscriptions = subscriptions.len(), "subscriptions already on the graph");
                for s in subscriptions {
                    let who = endpoint_node(&s.node_namespace, &s.node_name);
                    // The bridge's own subscription (a topic mapped both
                    // ways) has the config's QoS, which is checked above.
                    if who == bridge {
                        continue;
                    }
                    if s.topic_type != t.msg_type {
                        return Err(RosError::Mapping {
                            name: format!("topic {:?}", t.topic),
                            what: format!(
                                "subscriber {who} takes {}, the config says {}; fix `type`",
                                s.topic_type, t.msg_type
                            ),
                        });
                    }
                    if let Some(why) = incompatible_offer(&t.qos, &s.qos) {
                        return Err(RosError::Mapping {
                            name: format!("topic {:?}", t.topic),
                            what: format!("QoS mismatch with subscriber {who}: {why}"),
                        });
                    }
                }
            }
        }

        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ros2-spin".into())
            .spawn(move || spin(node, tasks, handlers, initial, halt))
            .map_err(RosError::Thread)?;
        Ok(RosSide { inlets, outlets, cdr, dropped, stop, thread: Some(thread) })
    }
}

impl Drop for RosSide {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A topic name as the graph knows it (relative names under the node's
/// namespace).
pub fn resolve(namespace: &str, topic: &str) -> String {
    if topic.starts_with('/') {
        topic.to_string()
    } else {
        format!("{}/{topic}", namespace.trim_end_matches('/'))
    }
}

/// How far in the future a message's `header.stamp` is (zero when absent
/// or past: tags never go back).
fn header_delay(v: &Value) -> Duration {
    let Some(stamp) = messages::header_stamp(v) else { return Duration::ZERO };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
    Duration::from_nanos(stamp.saturating_sub(now).max(0) as u64)
}

/// A parameter's port, and its current value: sent once the port is connected.
type Initial = (Inlet, Box<dyn Fn() -> Value + Send>);

fn spin(
    mut node: r2r::Node,
    tasks: Vec<LocalTask>,
    mut handlers: Vec<(mpsc::Receiver<Value>, Handler)>,
    mut initial: Vec<Initial>,
    stop: Arc<AtomicBool>,
) {
    let mut pool = LocalPool::new();
    let spawner = pool.spawner();
    for t in tasks {
        if let Err(e) = spawner.spawn_local(t) {
            tracing::error!("cannot start a ROS subscription task: {e}");
        }
    }
    while !stop.load(Ordering::Relaxed) {
        node.spin_once(Duration::from_millis(5));
        for (rx, handler) in &mut handlers {
            while let Ok(v) = rx.try_recv() {
                for task in handler(v) {
                    if let Err(e) = spawner.spawn_local(task) {
                        tracing::error!("cannot start a ROS task: {e}");
                    }
                }
            }
        }
        initial.retain(|(inlet, value)| !(inlet.is_connected() && inlet.deliver("parameter", value(), Duration::ZERO)));
        pool.run_until_stalled();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qos(reliability: Reliability, durability: Durability) -> Qos {
        Qos { reliability, durability, ..Qos::default() }
    }

    fn profile(reliability: ReliabilityPolicy, durability: DurabilityPolicy) -> QosProfile {
        QosProfile { reliability, durability, ..QosProfile::default() }
    }

    #[test]
    fn the_bridge_subscribing_asks_no_more_than_publishers_offer() {
        let offered = profile(ReliabilityPolicy::BestEffort, DurabilityPolicy::Volatile);
        let why = incompatible(&qos(Reliability::Reliable, Durability::Volatile), &offered).unwrap();
        assert!(why.contains("set qos.reliability = \"best_effort\""), "{why}");
        assert_eq!(incompatible(&qos(Reliability::BestEffort, Durability::Volatile), &offered), None);
        let why = incompatible(&qos(Reliability::BestEffort, Durability::TransientLocal), &offered).unwrap();
        assert!(why.contains("set qos.durability = \"volatile\""), "{why}");
        let rich = profile(ReliabilityPolicy::Reliable, DurabilityPolicy::TransientLocal);
        assert_eq!(incompatible(&qos(Reliability::Reliable, Durability::TransientLocal), &rich), None);
    }

    #[test]
    fn the_bridge_publishing_offers_what_subscribers_ask() {
        let reliable = profile(ReliabilityPolicy::Reliable, DurabilityPolicy::Volatile);
        let why = incompatible_offer(&qos(Reliability::BestEffort, Durability::Volatile), &reliable).unwrap();
        assert!(why.contains("it asks reliable") && why.contains("set qos.reliability = \"reliable\""), "{why}");
        assert_eq!(incompatible_offer(&qos(Reliability::Reliable, Durability::Volatile), &reliable), None);
        let latched = profile(ReliabilityPolicy::Reliable, DurabilityPolicy::TransientLocal);
        let why = incompatible_offer(&qos(Reliability::Reliable, Durability::Volatile), &latched).unwrap();
        assert!(
            why.contains("it asks transient_local") && why.contains("set qos.durability = \"transient_local\""),
            "{why}"
        );
        assert_eq!(incompatible_offer(&qos(Reliability::Reliable, Durability::TransientLocal), &latched), None);
        // A best-effort, volatile subscriber takes anything.
        let modest = profile(ReliabilityPolicy::BestEffort, DurabilityPolicy::Volatile);
        assert_eq!(incompatible_offer(&qos(Reliability::BestEffort, Durability::Volatile), &modest), None);
        assert_eq!(incompatible_offer(&qos(Reliability::Reliable, Durability::TransientLocal), &modest), None);
    }
}
