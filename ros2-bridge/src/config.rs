//! The bridge's configuration file (TOML): which ROS 2 topics, services,
//! actions and parameters map to which ports of the bridge federate, with
//! QoS and time mapping.
//!
//! ```toml
//! [ros]
//! node = "hprm_bridge"          # ROS node name (default hprm_bridge)
//! namespace = "/"               # default "/"
//!
//! [[topic]]
//! topic = "/camera/image"
//! type = "sensor_msgs/msg/Image"
//! direction = "ros->hprm"       # or "hprm->ros"
//! port = "image"                # the bridge reactor's port of that name
//! time = "arrival"              # or "header": tag from header.stamp
//! qos = { reliability = "reliable", durability = "volatile", depth = 10 }
//!
//! [[service]]
//! service = "/reset"
//! type = "std_srvs/srv/Trigger"
//! role = "client"               # HPRM calls ROS: request = input, response = output
//! request = "reset"             # "server": ROS calls HPRM: request = output, response = input
//! response = "reset_done"
//!
//! [[action]]
//! action = "/fibonacci"
//! type = "test_msgs/action/Fibonacci"
//! role = "client"               # HPRM sends goals: goal, cancel = inputs; feedback, result = outputs
//! goal = "fib_goal"             # "server": ROS sends goals: goal, cancel = outputs; feedback, result = inputs
//! result = "fib_result"
//! feedback = "fib_feedback"     # optional
//! cancel = "fib_cancel"         # optional (a server without it rejects cancel requests)
//!
//! [[parameter]]
//! name = "gain"                 # a parameter of the bridge's node, settable from ROS
//! type = "double"               # bool, integer, double, string, byte[], bool[], integer[], double[], string[]
//! default = 1.5
//! port = "gain"                 # output: the value at start, then each new value set
//! ```
//!
//! [`Config::load`]/[`Config::parse`] check everything that can be checked
//! without ROS 2 (syntax, names, directions, duplicate ports);
//! [`ConfigError`] says what is wrong and where.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Everything wrong with a config file, one sentence each.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the bridge config {path}: {source}; pass an existing file with --config")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the bridge config {path} is not valid: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("the bridge config {path}: {what}")]
    Invalid { path: PathBuf, what: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub ros: RosSection,
    #[serde(default, rename = "topic")]
    pub topics: Vec<TopicMap>,
    #[serde(default, rename = "service")]
    pub services: Vec<ServiceMap>,
    #[serde(default, rename = "action")]
    pub actions: Vec<ActionMap>,
    #[serde(default, rename = "parameter")]
    pub parameters: Vec<ParameterMap>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RosSection {
    #[serde(default = "default_node")]
    pub node: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
}

impl Default for RosSection {
    fn default() -> RosSection {
        RosSection { node: default_node(), namespace: default_namespace() }
    }
}

fn default_node() -> String {
    "hprm_bridge".into()
}

fn default_namespace() -> String {
    "/".into()
}

/// One topic mapped to one port.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicMap {
    pub topic: String,
    #[serde(rename = "type")]
    pub msg_type: String,
    pub direction: Direction,
    pub port: String,
    #[serde(default)]
    pub time: TimeSource,
    #[serde(default)]
    pub qos: Qos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Direction {
    #[serde(rename = "ros->hprm")]
    RosToHprm,
    #[serde(rename = "hprm->ros")]
    HprmToRos,
}

/// How a ROS message's arrival maps to an HPRM tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeSource {
    /// The physical time the bridge received it (a physical action).
    #[default]
    Arrival,
    /// `header.stamp`, when not already in the past (tags never go back):
    /// the message is scheduled for that time.
    Header,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Qos {
    #[serde(default)]
    pub reliability: Reliability,
    #[serde(default)]
    pub durability: Durability,
    #[serde(default = "default_depth")]
    pub depth: usize,
}

impl Default for Qos {
    fn default() -> Qos {
        Qos { reliability: Reliability::default(), durability: Durability::default(), depth: default_depth() }
    }
}

fn default_depth() -> usize {
    10
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reliability {
    #[default]
    Reliable,
    BestEffort,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    #[default]
    Volatile,
    TransientLocal,
}

/// One service mapped to a request port and a response port.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceMap {
    pub service: String,
    #[serde(rename = "type")]
    pub srv_type: String,
    pub role: Role,
    pub request: String,
    pub response: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// HPRM calls a ROS 2 service: requests arrive on an input port, the
    /// responses leave on an output port.
    Client,
    /// HPRM serves a ROS 2 service: requests leave on an output port; a
    /// reaction answers on the response input port, in request order.
    Server,
}

/// One action mapped to goal, result and (optional) feedback and cancel
/// ports. Client: HPRM sends goals and cancels (inputs), feedback and
/// results come back (outputs). Server: the other way round.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionMap {
    pub action: String,
    #[serde(rename = "type")]
    pub action_type: String,
    pub role: Role,
    pub goal: String,
    pub result: String,
    #[serde(default)]
    pub feedback: Option<String>,
    #[serde(default)]
    pub cancel: Option<String>,
}

impl ActionMap {
    /// Its ports, with whether each is an output of the bridge.
    pub fn ports(&self) -> Vec<PortUse> {
        let server = self.role == Role::Server;
        let mut out = vec![PortUse { name: self.goal.clone(), output: server }];
        out.extend(self.cancel.iter().map(|p| PortUse { name: p.clone(), output: server }));
        out.extend(self.feedback.iter().map(|p| PortUse { name: p.clone(), output: !server }));
        out.push(PortUse { name: self.result.clone(), output: !server });
        out
    }
}

/// A parameter the bridge's node declares: ROS nodes set it (rclpy's
/// parameter client, `ros2 param set`), HPRM gets each value on `port`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParameterMap {
    pub name: String,
    #[serde(rename = "type")]
    pub param_type: ParamType,
    pub default: toml::Value,
    pub port: String,
}

/// A ROS 2 parameter type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ParamType {
    #[serde(rename = "bool")]
    Bool,
    #[serde(rename = "integer")]
    Integer,
    #[serde(rename = "double")]
    Double,
    #[serde(rename = "string")]
    String,
    #[serde(rename = "byte[]")]
    ByteArray,
    #[serde(rename = "bool[]")]
    BoolArray,
    #[serde(rename = "integer[]")]
    IntegerArray,
    #[serde(rename = "double[]")]
    DoubleArray,
    #[serde(rename = "string[]")]
    StringArray,
}

impl ParamType {
    /// Whether `v` is a value of this type (an integer is a double too).
    pub fn fits(self, v: &toml::Value) -> bool {
        use toml::Value as T;
        let each = |ok: fn(&T) -> bool| matches!(v, T::Array(items) if items.iter().all(ok));
        match self {
            ParamType::Bool => matches!(v, T::Boolean(_)),
            ParamType::Integer => matches!(v, T::Integer(_)),
            ParamType::Double => matches!(v, T::Float(_) | T::Integer(_)),
            ParamType::String => matches!(v, T::String(_)),
            ParamType::ByteArray => each(|x| matches!(x, T::Integer(0..=255))),
            ParamType::BoolArray => each(|x| matches!(x, T::Boolean(_))),
            ParamType::IntegerArray => each(|x| matches!(x, T::Integer(_))),
            ParamType::DoubleArray => each(|x| matches!(x, T::Float(_) | T::Integer(_))),
            ParamType::StringArray => each(|x| matches!(x, T::String(_))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ParamType::Bool => "bool",
            ParamType::Integer => "integer",
            ParamType::Double => "double",
            ParamType::String => "string",
            ParamType::ByteArray => "byte[]",
            ParamType::BoolArray => "bool[]",
            ParamType::IntegerArray => "integer[]",
            ParamType::DoubleArray => "double[]",
            ParamType::StringArray => "string[]",
        }
    }
}

/// A port the config asks for, with the direction HPRM sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortUse {
    pub name: String,
    /// True for an output of the bridge reactor (data into HPRM).
    pub output: bool,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Config::parse(&text, path)
    }

    /// Parses and checks `text`; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.into(),
            message: e.message().trim().replace('\n', "; ") + &location(text, e.span()),
        })?;
        config.check().map_err(|what| ConfigError::Invalid { path: path.into(), what })?;
        Ok(config)
    }

    fn check(&self) -> Result<(), String> {
        if self.topics.is_empty() && self.services.is_empty() && self.actions.is_empty() && self.parameters.is_empty() {
            return Err("it maps nothing; add at least one [[topic]], [[service]], [[action]] or [[parameter]]".into());
        }
        check_ros_name("node", &self.ros.node, false)?;
        let mut ports = HashSet::new();
        let mut port = |name: &str, what: &str| -> Result<(), String> {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("{what}: port name {name:?} must be letters, digits and _"));
            }
            if !ports.insert(name.to_string()) {
                return Err(format!("{what}: port {name:?} is used twice; each mapping needs its own port"));
            }
            Ok(())
        };
        for t in &self.topics {
            let what = format!("topic {:?}", t.topic);
            check_ros_name(&what, &t.topic, true)?;
            check_type_name(&what, &t.msg_type, "msg")?;
            port(&t.port, &what)?;
            if t.qos.depth == 0 {
                return Err(format!("{what}: qos.depth must be at least 1"));
            }
            if t.time == TimeSource::Header && t.direction == Direction::HprmToRos {
                return Err(format!("{what}: time = \"header\" applies to ros->hprm topics only"));
            }
        }
        for s in &self.services {
            let what = format!("service {:?}", s.service);
            check_ros_name(&what, &s.service, true)?;
            check_type_name(&what, &s.srv_type, "srv")?;
            port(&s.request, &what)?;
            port(&s.response, &what)?;
        }
        for a in &self.actions {
            let what = format!("action {:?}", a.action);
            check_ros_name(&what, &a.action, true)?;
            check_type_name(&what, &a.action_type, "action")?;
            for p in a.ports() {
                port(&p.name, &what)?;
            }
        }
        let mut names = HashSet::new();
        for p in &self.parameters {
            let what = format!("parameter {:?}", p.name);
            check_parameter_name(&what, &p.name)?;
            if !names.insert(p.name.as_str()) {
                return Err(format!("{what} is declared twice; each [[parameter]] needs its own name"));
            }
            if !p.param_type.fits(&p.default) {
                return Err(format!(
                    "{what}: default = {} is not a {} value; give a default of the parameter's type",
                    p.default,
                    p.param_type.name()
                ));
            }
            port(&p.port, &what)?;
        }
        Ok(())
    }

    /// Every port the bridge reactor needs, in config order.
    pub fn ports(&self) -> Vec<PortUse> {
        let mut out = Vec::new();
        for t in &self.topics {
            out.push(PortUse { name: t.port.clone(), output: t.direction == Direction::RosToHprm });
        }
        for s in &self.services {
            out.push(PortUse { name: s.request.clone(), output: s.role == Role::Server });
            out.push(PortUse { name: s.response.clone(), output: s.role == Role::Client });
        }
        for a in &self.actions {
            out.extend(a.ports());
        }
        for p in &self.parameters {
            out.push(PortUse { name: p.port.clone(), output: true });
        }
        out
    }
}

/// ` (line L, column C)` for a span of `text`.
fn location(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(span) = span else { return String::new() };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!(" (line {line}, column {col})")
}

/// A ROS 2 topic/service/node name: letters, digits, `_` and (for
/// topics) `/` and `~`, not starting with a digit.
fn check_ros_name(what: &str, name: &str, path: bool) -> Result<(), String> {
    // A topic may be `/` alone, but no longer one ends with `/`.
    let trailing_slash = path && name.len() > 1 && name.ends_with('/');
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || (path && (c == '/' || c == '~')))
        && !name.trim_start_matches('/').starts_with(|c: char| c.is_ascii_digit())
        && !name.contains("//")
        && !trailing_slash;
    if ok {
        Ok(())
    } else {
        Err(format!("{what}: {name:?} is not a valid ROS 2 name (letters, digits, _ and / separators, not starting with a digit)"))
    }
}

/// A parameter name: letters, digits and `_`, in `.`-separated parts that
/// do not start with a digit.
fn check_parameter_name(what: &str, name: &str) -> Result<(), String> {
    let ok = name.split('.').all(|part| {
        !part.is_empty()
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !part.starts_with(|c: char| c.is_ascii_digit())
    });
    if ok {
        Ok(())
    } else {
        Err(format!("{what}: not a valid parameter name (letters, digits and _, in parts separated by ., each not starting with a digit)"))
    }
}

/// `pkg/msg/Name` (or `pkg/srv/Name`, `pkg/action/Name`).
fn check_type_name(what: &str, name: &str, kind: &str) -> Result<(), String> {
    let parts: Vec<&str> = name.split('/').collect();
    if parts.len() == 3 && parts[1] == kind && !parts[0].is_empty() && !parts[2].is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{what}: type {name:?} must be written package/{kind}/Name, e.g. {}",
            match kind {
                "msg" => "sensor_msgs/msg/Image",
                "srv" => "std_srvs/srv/Trigger",
                _ => "test_msgs/action/Fibonacci",
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("bridge.toml"))
    }

    const GOOD: &str = r#"
[ros]
node = "bridge"

[[topic]]
topic = "/camera/image"
type = "sensor_msgs/msg/Image"
direction = "ros->hprm"
port = "image"
time = "header"
qos = { reliability = "best_effort", depth = 2 }

[[topic]]
topic = "cmd_vel"
type = "geometry_msgs/msg/Twist"
direction = "hprm->ros"
port = "cmd"

[[service]]
service = "/reset"
type = "std_srvs/srv/Trigger"
role = "server"
request = "reset"
response = "reset_done"

[[action]]
action = "/fibonacci"
type = "test_msgs/action/Fibonacci"
role = "client"
goal = "fib_goal"
result = "fib_result"
feedback = "fib_feedback"
cancel = "fib_cancel"

[[action]]
action = "navigate"
type = "nav2_msgs/action/NavigateToPose"
role = "server"
goal = "nav_goal"
result = "nav_result"

[[parameter]]
name = "control.gain"
type = "double"
default = 2
port = "gain"
"#;

    #[test]
    fn parses_a_full_config() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.ros.node, "bridge");
        assert_eq!(c.ros.namespace, "/");
        assert_eq!(c.topics.len(), 2);
        assert_eq!(
            c.topics[0].qos,
            Qos { reliability: Reliability::BestEffort, durability: Durability::Volatile, depth: 2 }
        );
        assert_eq!(c.topics[0].time, TimeSource::Header);
        assert_eq!(c.topics[1].qos, Qos::default());
        assert_eq!(c.topics[1].time, TimeSource::Arrival);
        let ports: Vec<(String, bool)> = c.ports().into_iter().map(|p| (p.name, p.output)).collect();
        assert_eq!(
            ports,
            vec![
                ("image".into(), true),
                ("cmd".into(), false),
                ("reset".into(), true),
                ("reset_done".into(), false),
                // An action HPRM calls: goal and cancel in, feedback and result out.
                ("fib_goal".into(), false),
                ("fib_cancel".into(), false),
                ("fib_feedback".into(), true),
                ("fib_result".into(), true),
                // One HPRM serves: the other way round.
                ("nav_goal".into(), true),
                ("nav_result".into(), false),
                ("gain".into(), true),
            ]
        );
        assert_eq!(c.parameters[0].param_type, ParamType::Double);
    }

    const FIB: &str = "[[action]]\naction = \"/fib\"\ntype = \"test_msgs/action/Fibonacci\"\nrole = \"client\"\ngoal = \"g\"\nresult = \"r\"\n";

    #[test]
    fn refuses_bad_actions_and_parameters_with_a_sentence() {
        assert!(parse(FIB).is_ok());
        let e = error(&FIB.replace("action/Fibonacci", "srv/Fibonacci"));
        assert!(e.contains("package/action/Name, e.g. test_msgs/action/Fibonacci"), "{e}");
        let e = error(&FIB.replace("client", "caller"));
        assert!(e.contains("unknown variant `caller`"), "{e}");
        let e = error(&FIB.replace("result = \"r\"", "result = \"g\""));
        assert!(e.contains("port \"g\" is used twice"), "{e}");
        let e = error(&FIB.replace("/fib", "/2fib"));
        assert!(e.contains("not a valid ROS 2 name"), "{e}");
        let e = error(&(FIB.to_string() + "feedbacks = \"f\"\n"));
        assert!(e.contains("unknown field `feedbacks`"), "{e}");
        let param = |name: &str, ty: &str, default: &str| {
            error(&format!("[[parameter]]\nname = \"{name}\"\ntype = \"{ty}\"\ndefault = {default}\nport = \"p\"\n"))
        };
        let e = param("gain", "float", "1.0");
        assert!(e.contains("unknown variant `float`") && e.contains("double"), "{e}");
        let e = param("gain", "double", "\"high\"");
        assert!(e.contains("default = \"high\" is not a double value"), "{e}");
        let e = param("gain", "byte[]", "[1, 256]");
        assert!(e.contains("is not a byte[] value"), "{e}");
        let e = param("2gain", "double", "1.0");
        assert!(e.contains("not a valid parameter name"), "{e}");
        let e = param("a..b", "double", "1.0");
        assert!(e.contains("not a valid parameter name"), "{e}");
        let e = error("[[parameter]]\nname = \"a\"\ntype = \"bool\"\nport = \"p\"\n");
        assert!(e.contains("missing field `default`"), "{e}");
        let twice = "[[parameter]]\nname = \"a\"\ntype = \"bool\"\ndefault = true\nport = \"p\"\n[[parameter]]\nname = \"a\"\ntype = \"bool\"\ndefault = true\nport = \"q\"\n";
        assert!(error(twice).contains("declared twice"));
        for (ty, default) in
            [("integer[]", "[1, -2]"), ("double[]", "[1, 2.5]"), ("string[]", "[]"), ("string", "\"x\"")]
        {
            let text = format!("[[parameter]]\nname = \"a.b\"\ntype = \"{ty}\"\ndefault = {default}\nport = \"p\"\n");
            assert!(parse(&text).is_ok(), "{ty} = {default}");
        }
    }

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn refuses_bad_configs_with_a_sentence() {
        let e = error(
            "[[topic]]\ntopic = \"/a\"\ntype = \"std_msgs/msg/String\"\ndirection = \"sideways\"\nport = \"a\"\n",
        );
        assert!(e.contains("unknown variant `sideways`") && e.contains("line 4"), "{e}");
        let e =
            error("[[topic]]\ntopic = \"/a\"\ntype = \"std_msgs/String\"\ndirection = \"ros->hprm\"\nport = \"a\"\n");
        assert!(e.contains("package/msg/Name"), "{e}");
        let e = error("[[topic]]\ntopic = \"/a\"\ntype = \"std_msgs/msg/String\"\ndirection = \"ros->hprm\"\nport = \"a\"\n[[topic]]\ntopic = \"/b\"\ntype = \"std_msgs/msg/String\"\ndirection = \"ros->hprm\"\nport = \"a\"\n");
        assert!(e.contains("used twice"), "{e}");
        let e = error(
            "[[topic]]\ntopic = \"/1a\"\ntype = \"std_msgs/msg/String\"\ndirection = \"ros->hprm\"\nport = \"a\"\n",
        );
        assert!(e.contains("not a valid ROS 2 name"), "{e}");
        let e = error("[[topic]]\ntopic = \"/a\"\ntype = \"std_msgs/msg/String\"\ndirection = \"ros->hprm\"\nport = \"a\"\nqos = { reliability = \"sometimes\" }\n");
        assert!(e.contains("sometimes"), "{e}");
        let e = error("[[topic]]\ntopic = \"/a\"\ntype = \"std_msgs/msg/String\"\ndirection = \"ros->hprm\"\nport = \"a\"\nprot = 3\n");
        assert!(e.contains("unknown field `prot`"), "{e}");
        let e = error("[[topic]]\ntopic = \"/a\"\ntype = \"std_msgs/msg/String\"\ndirection = \"hprm->ros\"\nport = \"a\"\ntime = \"header\"\n");
        assert!(e.contains("ros->hprm topics only"), "{e}");
        assert!(error("").contains("maps nothing"));
        assert!(error("[[topic]]\ntopic = ").contains("line 2"));
        let e = Config::load(Path::new("/nonexistent/bridge.toml")).unwrap_err().to_string();
        assert!(e.contains("cannot read the bridge config /nonexistent/bridge.toml"), "{e}");
    }
}
