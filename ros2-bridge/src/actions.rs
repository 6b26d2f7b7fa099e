//! ROS 2 actions <-> HPRM ports, both ways.
//!
//! - HPRM calls a ROS action server ([`ActionSupport::client`]): a goal
//!   value sent on the goal port becomes a goal request; the server's
//!   feedback and its result come back as `{"goal_id", "feedback"}` and
//!   `{"goal_id", "status", "result"}` on the feedback and result ports; a
//!   goal id (or nil: every goal still running) on the cancel port cancels.
//! - A ROS action client calls HPRM ([`ActionSupport::serve`]): each goal
//!   is accepted and goes out as `{"goal_id", "goal"}`; a reaction sends
//!   `{"goal_id", "feedback"}` and, once, `{"goal_id", "status", "result"}`
//!   back; a cancel request goes out as `{"goal_id"}` when the config maps
//!   a cancel port (else it is rejected), and the goal ends when HPRM sends
//!   its result (status "canceled").
//!
//! Goals, feedback and results convert field by field like plain messages;
//! fields a value leaves out take their defaults. Goal ids are the UUIDs
//! the ROS side assigns, as strings. Every action type of the packages
//! r2r was built with is supported, each through its Rust structs: r2r 0.9
//! has no untyped action server (build.rs lists the types).

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use futures::stream::SelectAll;
use futures::{FutureExt, StreamExt};
use r2r::{GoalStatus, WrappedActionTypeSupport};

use crate::messages::{plain_from_value, plain_to_value, ConvertError, LocalTask};
use crate::value::Value;

/// Where a value for HPRM goes (a port's inlet, when it is mapped).
pub type Emit = Arc<dyn Fn(Value) + Send + Sync>;

/// The ports of an action HPRM calls, as seen from the ROS thread.
#[derive(Clone)]
pub struct ClientPorts {
    pub feedback: Option<Emit>,
    pub result: Emit,
}

/// The ports of an action HPRM serves, as seen from the ROS thread.
#[derive(Clone)]
pub struct ServerPorts {
    pub goal: Emit,
    /// Whether the goal port reaches HPRM yet (goals before that are rejected).
    pub ready: Arc<dyn Fn() -> bool + Send + Sync>,
    /// `None`: cancel requests are rejected.
    pub cancel: Option<Emit>,
}

/// A future the ROS thread makes and drives itself (r2r's action client
/// futures hold its client by a handle that is not `Send`).
pub type ThreadTask = Pin<Box<dyn Future<Output = ()>>>;

/// Sends goals to one ROS action server and cancels them; called on the
/// ROS thread only.
pub trait GoalSender: Send {
    /// Sends `goal`; the task reports the feedback and the result.
    fn send(&self, goal: Value, ports: ClientPorts) -> Result<ThreadTask, ConvertError>;
    /// Cancels the goal `goal_id` (a string), or every goal still running
    /// (nil); each task waits for the server's answer.
    fn cancel(&self, goal_id: Value) -> Result<Vec<ThreadTask>, ConvertError>;
}

/// The goals HPRM serves, by id: what feedback and results go to.
pub trait ServedGoals: Send + Sync {
    fn feedback(&self, v: Value) -> Result<(), ConvertError>;
    fn finish(&self, v: Value) -> Result<(), ConvertError>;
}

/// How the bridge handles one action type.
pub trait ActionSupport {
    fn client(&self, node: &mut r2r::Node, action: &str) -> Result<Box<dyn GoalSender>, r2r::Error>;
    fn serve(
        &self,
        node: &mut r2r::Node,
        action: &str,
        ports: ServerPorts,
    ) -> Result<(LocalTask, Arc<dyn ServedGoals>), r2r::Error>;
}

/// The action types r2r was built with (build.rs lists them).
macro_rules! action_table {
    ($($name:literal => $t:ty,)*) => {
        /// The support of action type `name`; `None` when r2r was not
        /// built with it.
        pub fn support(name: &str) -> Option<Box<dyn ActionSupport>> {
            match name {
                $($name => Some(Box::new(Typed::<$t>(PhantomData, $name))),)*
                _ => None,
            }
        }
    };
}

// The service table of the same file is `services`' to expand.
macro_rules! service_table {
    ($($t:tt)*) => {};
}

include!(concat!(env!("OUT_DIR"), "/interfaces.rs"));

/// An action type's Rust structs, and its ROS name.
struct Typed<A>(PhantomData<fn() -> A>, &'static str);

/// The name of a goal's final status, as results carry it.
pub fn status_name(s: GoalStatus) -> &'static str {
    match s {
        GoalStatus::Succeeded => "succeeded",
        GoalStatus::Canceled => "canceled",
        GoalStatus::Aborted => "aborted",
        GoalStatus::Accepted => "accepted",
        GoalStatus::Executing => "executing",
        GoalStatus::Canceling => "canceling",
        GoalStatus::Unknown => "unknown",
    }
}

/// How a served goal ends, from the `status` of HPRM's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Aborted,
    Canceled,
}

impl Outcome {
    pub fn parse(v: Option<&Value>) -> Result<Outcome, String> {
        match v {
            None | Some(Value::Nil) => Ok(Outcome::Succeeded),
            Some(Value::Str(s)) if s == "succeeded" => Ok(Outcome::Succeeded),
            Some(Value::Str(s)) if s == "aborted" => Ok(Outcome::Aborted),
            Some(Value::Str(s)) if s == "canceled" => Ok(Outcome::Canceled),
            Some(other) => {
                Err(format!("\"status\" is {other:?}; use \"succeeded\" (the default), \"aborted\" or \"canceled\""))
            }
        }
    }
}

/// `{"goal_id": id, key: value}`.
fn tagged(id: &str, key: &str, value: Value) -> Value {
    Value::Map(vec![("goal_id".into(), Value::Str(id.into())), (key.into(), value)])
}

/// The `goal_id` of a value HPRM sent about a goal.
pub fn goal_id(name: &str, v: &Value) -> Result<String, ConvertError> {
    match v.get("goal_id") {
        Some(Value::Str(s)) => Ok(s.clone()),
        _ => Err(ConvertError::shape(
            name,
            format!("a {} with no \"goal_id\" string; send {{\"goal_id\": <the goal's id>, ...}}", v.kind()),
        )),
    }
}

type Cancel = Box<dyn Fn() -> Result<ThreadTask, r2r::Error> + Send>;

struct TypedSender<A: WrappedActionTypeSupport> {
    client: r2r::ActionClient<A>,
    name: &'static str,
    /// Goals still running, by id: how to cancel each.
    running: Arc<Mutex<HashMap<String, Cancel>>>,
}

impl<A: WrappedActionTypeSupport + 'static> GoalSender for TypedSender<A>
where
    A::Goal: Send,
    A::Feedback: Send,
    A::Result: Send,
{
    fn send(&self, goal: Value, ports: ClientPorts) -> Result<ThreadTask, ConvertError> {
        let name = self.name;
        let goal: A::Goal = plain_from_value(name, goal)?;
        let accepted = self
            .client
            .send_goal_request(goal)
            .map_err(|e| ConvertError::Ros(format!("sending a {name} goal: {e}")))?;
        let running = self.running.clone();
        Ok(async move {
            let (handle, result, feedback) = match accepted.await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(action = name, "goal not accepted: {e}");
                    (ports.result)(Value::Map(vec![
                        ("goal_id".into(), Value::Nil),
                        ("status".into(), Value::Str("rejected".into())),
                        ("result".into(), Value::Nil),
                    ]));
                    return;
                }
            };
            let id = handle.uuid.to_string();
            let canceller = handle.clone();
            running.lock().unwrap_or_else(PoisonError::into_inner).insert(
                id.clone(),
                Box::new(move || {
                    let done = canceller.cancel()?;
                    Ok(async move {
                        if let Err(e) = done.await {
                            tracing::warn!(action = name, "cancel refused: {e}");
                        }
                    }
                    .boxed_local())
                }),
            );
            let mut feedback = feedback.fuse();
            let mut result = result.fuse();
            let forward = |f: A::Feedback| {
                if let Some(emit) = &ports.feedback {
                    match plain_to_value(name, &f) {
                        Ok(v) => emit(tagged(&id, "feedback", v)),
                        Err(e) => tracing::warn!(action = name, "dropped feedback: {e}"),
                    }
                }
            };
            let outcome = loop {
                futures::select! {
                    f = feedback.next() => if let Some(f) = f { forward(f) },
                    r = result => break r,
                }
            };
            // Feedback sent before the result goes first.
            while let Some(Some(f)) = feedback.next().now_or_never() {
                forward(f);
            }
            running.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
            let v = match outcome {
                Ok((status, r)) => plain_to_value(name, &r).map(|r| (status_name(status), r)),
                Err(e) => Err(ConvertError::Ros(format!("waiting for the {name} result: {e}"))),
            };
            match v {
                Ok((status, r)) => {
                    let mut out = tagged(&id, "status", Value::Str(status.into()));
                    out.set("result", r);
                    (ports.result)(out);
                }
                Err(e) => tracing::warn!(action = name, goal = %id, "no result: {e}"),
            }
        }
        .boxed_local())
    }

    fn cancel(&self, goal_id: Value) -> Result<Vec<ThreadTask>, ConvertError> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let cancels: Vec<&Cancel> = match &goal_id {
            Value::Nil => running.values().collect(),
            Value::Str(id) => match running.get(id) {
                Some(c) => vec![c],
                None => {
                    return Err(ConvertError::Ros(format!(
                        "no {} goal {id} is running (it ended, or was never accepted)",
                        self.name
                    )))
                }
            },
            other => {
                return Err(ConvertError::shape(
                    self.name,
                    format!("a cancel is a goal id (str) or nil (every goal), not a {}", other.kind()),
                ))
            }
        };
        cancels
            .into_iter()
            .map(|c| c().map_err(|e| ConvertError::Ros(format!("cancelling a {} goal: {e}", self.name))))
            .collect()
    }
}

/// A goal HPRM serves.
struct Served<A: WrappedActionTypeSupport> {
    goal: r2r::ActionServerGoal<A>,
    /// A ROS client asked to cancel it, and the bridge accepted.
    canceling: bool,
}

struct TypedGoals<A: WrappedActionTypeSupport> {
    name: &'static str,
    goals: Mutex<HashMap<String, Served<A>>>,
}

impl<A: WrappedActionTypeSupport + 'static> ServedGoals for TypedGoals<A> {
    fn feedback(&self, v: Value) -> Result<(), ConvertError> {
        let id = goal_id(self.name, &v)?;
        let goals = self.goals.lock().unwrap_or_else(PoisonError::into_inner);
        let served = goals.get(&id).ok_or_else(|| not_running(self.name, &id))?;
        let mut v = v;
        let fb: A::Feedback = plain_from_value(self.name, v.take("feedback").unwrap_or(Value::Map(Vec::new())))?;
        served.goal.publish_feedback(fb).map_err(|e| ConvertError::Ros(format!("{} feedback: {e}", self.name)))
    }

    fn finish(&self, v: Value) -> Result<(), ConvertError> {
        let id = goal_id(self.name, &v)?;
        let mut v = v;
        let outcome = Outcome::parse(v.get("status")).map_err(|what| ConvertError::shape(self.name, what))?;
        let result: A::Result = plain_from_value(self.name, v.take("result").unwrap_or(Value::Map(Vec::new())))?;
        let mut served = self
            .goals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id)
            .ok_or_else(|| not_running(self.name, &id))?;
        // A goal being canceled can only end canceled (r2r has already
        // moved it out of its running goals).
        let done = if served.canceling || outcome == Outcome::Canceled {
            served.goal.cancel(result)
        } else if outcome == Outcome::Aborted {
            served.goal.abort(result)
        } else {
            served.goal.succeed(result)
        };
        done.map_err(|e| ConvertError::Ros(format!("{} result: {e}", self.name)))
    }
}

/// Feedback or a result for a goal that is not running.
// Reached from the typed servers only: unused in a build whose packages
// define no action type (IDL_PACKAGE_FILTER="std_msgs", say).
#[allow(dead_code)]
fn not_running(name: &str, id: &str) -> ConvertError {
    ConvertError::Ros(format!("no {name} goal {id} is running (its result was sent already, or the id is wrong)"))
}

impl<A: WrappedActionTypeSupport + Send + 'static> ActionSupport for Typed<A>
where
    A::Goal: Send,
    A::Feedback: Send,
    A::Result: Send,
{
    fn client(&self, node: &mut r2r::Node, action: &str) -> Result<Box<dyn GoalSender>, r2r::Error> {
        Ok(Box::new(TypedSender {
            client: node.create_action_client::<A>(action)?,
            name: self.1,
            running: Arc::default(),
        }))
    }

    fn serve(
        &self,
        node: &mut r2r::Node,
        action: &str,
        ports: ServerPorts,
    ) -> Result<(LocalTask, Arc<dyn ServedGoals>), r2r::Error> {
        let name = self.1;
        let mut requests = node.create_action_server::<A>(action)?.fuse();
        let goals = Arc::new(TypedGoals::<A> { name, goals: Mutex::default() });
        let served = goals.clone();
        let task = async move {
            let mut cancels = SelectAll::new();
            loop {
                futures::select! {
                    request = requests.next() => {
                        let Some(request) = request else { break };
                        if !(ports.ready)() {
                            tracing::warn!(action = name, "a goal arrived before the federate started; rejected");
                            if let Err(e) = request.reject() {
                                tracing::warn!(action = name, "cannot reject a goal: {e}");
                            }
                            continue;
                        }
                        let id = request.uuid.to_string();
                        let goal = match plain_to_value(name, &request.goal) {
                            Ok(v) => v,
                            Err(e) => {
                                tracing::warn!(action = name, "rejected a goal: {e}");
                                let _ = request.reject();
                                continue;
                            }
                        };
                        match request.accept() {
                            Ok((goal_handle, cancel_requests)) => {
                                served.goals.lock().unwrap_or_else(PoisonError::into_inner)
                                    .insert(id.clone(), Served { goal: goal_handle, canceling: false });
                                let cid = id.clone();
                                cancels.push(cancel_requests.map(move |c| (cid.clone(), c)));
                                (ports.goal)(tagged(&id, "goal", goal));
                            }
                            Err(e) => tracing::warn!(action = name, "cannot accept a goal: {e}"),
                        }
                    }
                    cancel = cancels.select_next_some() => {
                        let (id, cancel) = cancel;
                        let mut goals = served.goals.lock().unwrap_or_else(PoisonError::into_inner);
                        match (&ports.cancel, goals.get_mut(&id)) {
                            (Some(emit), Some(goal)) => {
                                goal.canceling = true;
                                drop(goals);
                                cancel.accept();
                                emit(Value::Map(vec![("goal_id".into(), Value::Str(id))]));
                            }
                            _ => cancel.reject(),
                        }
                    }
                }
            }
        };
        Ok((task.boxed(), goals))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_name_how_a_goal_ends() {
        assert_eq!(Outcome::parse(None), Ok(Outcome::Succeeded));
        assert_eq!(Outcome::parse(Some(&Value::Str("aborted".into()))), Ok(Outcome::Aborted));
        assert_eq!(Outcome::parse(Some(&Value::Str("canceled".into()))), Ok(Outcome::Canceled));
        let e = Outcome::parse(Some(&Value::Str("done".into()))).unwrap_err();
        assert!(e.contains("\"succeeded\" (the default)"), "{e}");
    }

    #[test]
    fn values_about_a_goal_name_it() {
        let v = tagged("abc", "feedback", Value::Int(1));
        assert_eq!(goal_id("test_msgs/action/Fibonacci", &v).unwrap(), "abc");
        let e = goal_id("test_msgs/action/Fibonacci", &Value::Map(vec![])).unwrap_err().to_string();
        assert!(e.contains("no \"goal_id\""), "{e}");
    }

    #[test]
    fn every_built_action_type_is_supported() {
        assert!(support("test_msgs/action/Fibonacci").is_some());
        assert!(support("test_msgs/action/Nope").is_none());
    }
}
