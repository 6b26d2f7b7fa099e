//! The bridge node's parameters ([[parameter]] of the config): declared on
//! the r2r node with their defaults, settable from any ROS node through the
//! standard parameter services (rclpy's parameter client, `ros2 param
//! set`), and forwarded to HPRM: each parameter's port gets its value once
//! the federate starts, then every new value set.
//!
//! A value of another type than the declared one is refused (the setter
//! gets `successful = false` and the reason); parameters the config does
//! not declare cannot be set.

use std::collections::HashMap;

use r2r::indexmap::IndexMap;
use r2r::{Parameter, ParameterValue, RosParams};

use crate::config::{ParamType, ParameterMap};
use crate::value::Value;

/// The declared parameters and their current values, as r2r's parameter
/// handler reads and sets them.
pub struct Declared {
    types: HashMap<String, ParamType>,
    values: HashMap<String, ParameterValue>,
}

impl Declared {
    pub fn new(params: &[ParameterMap]) -> Declared {
        Declared {
            types: params.iter().map(|p| (p.name.clone(), p.param_type)).collect(),
            values: params.iter().map(|p| (p.name.clone(), from_toml(p.param_type, &p.default))).collect(),
        }
    }

    pub fn value(&self, name: &str) -> Option<&ParameterValue> {
        self.values.get(name)
    }
}

/// The ROS value of a config default (checked by the config to fit `ty`).
pub fn from_toml(ty: ParamType, v: &toml::Value) -> ParameterValue {
    use toml::Value as T;
    let items = || match v {
        T::Array(items) => items.as_slice(),
        _ => &[],
    };
    let float = |x: &T| match x {
        T::Float(f) => *f,
        T::Integer(i) => *i as f64,
        _ => 0.0,
    };
    match ty {
        ParamType::Bool => ParameterValue::Bool(v.as_bool().unwrap_or_default()),
        ParamType::Integer => ParameterValue::Integer(v.as_integer().unwrap_or_default()),
        ParamType::Double => ParameterValue::Double(float(v)),
        ParamType::String => ParameterValue::String(v.as_str().unwrap_or_default().to_string()),
        ParamType::ByteArray => {
            ParameterValue::ByteArray(items().iter().filter_map(|x| x.as_integer()).map(|i| i as u8).collect())
        }
        ParamType::BoolArray => ParameterValue::BoolArray(items().iter().filter_map(|x| x.as_bool()).collect()),
        ParamType::IntegerArray => {
            ParameterValue::IntegerArray(items().iter().filter_map(|x| x.as_integer()).collect())
        }
        ParamType::DoubleArray => ParameterValue::DoubleArray(items().iter().map(float).collect()),
        ParamType::StringArray => {
            ParameterValue::StringArray(items().iter().filter_map(|x| x.as_str()).map(String::from).collect())
        }
    }
}

/// Whether `v` is of type `ty`.
fn fits(ty: ParamType, v: &ParameterValue) -> bool {
    matches!(
        (ty, v),
        (ParamType::Bool, ParameterValue::Bool(_))
            | (ParamType::Integer, ParameterValue::Integer(_))
            | (ParamType::Double, ParameterValue::Double(_))
            | (ParamType::String, ParameterValue::String(_))
            | (ParamType::ByteArray, ParameterValue::ByteArray(_))
            | (ParamType::BoolArray, ParameterValue::BoolArray(_))
            | (ParamType::IntegerArray, ParameterValue::IntegerArray(_))
            | (ParamType::DoubleArray, ParameterValue::DoubleArray(_))
            | (ParamType::StringArray, ParameterValue::StringArray(_))
    )
}

/// A parameter value as HPRM sees it: a scalar, or a list.
pub fn to_value(v: &ParameterValue) -> Value {
    match v {
        ParameterValue::NotSet => Value::Nil,
        ParameterValue::Bool(b) => Value::Bool(*b),
        ParameterValue::Integer(i) => Value::Int(*i),
        ParameterValue::Double(d) => Value::Float(*d),
        ParameterValue::String(s) => Value::Str(s.clone()),
        ParameterValue::ByteArray(b) => Value::Bin(b.clone()),
        ParameterValue::BoolArray(b) => Value::List(b.iter().map(|&x| Value::Bool(x)).collect()),
        ParameterValue::IntegerArray(a) => Value::List(a.iter().map(|&x| Value::Int(x)).collect()),
        ParameterValue::DoubleArray(a) => Value::List(a.iter().map(|&x| Value::Float(x)).collect()),
        ParameterValue::StringArray(a) => Value::List(a.iter().map(|x| Value::Str(x.clone())).collect()),
    }
}

impl RosParams for Declared {
    fn register_parameters(
        &mut self,
        prefix: &str,
        _param: Option<Parameter>,
        params: &mut IndexMap<String, Parameter>,
    ) -> r2r::Result<()> {
        let mut names: Vec<&String> = self.types.keys().collect();
        names.sort();
        for name in names {
            let full = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
            // A value given on the command line (--ros-args -p) wins over
            // the default when it has the declared type.
            if let Some(given) = params.get(&full).map(|p| p.value.clone()) {
                if fits(self.types[name], &given) {
                    self.values.insert(name.clone(), given);
                }
            }
            let mut p = Parameter::new(self.values[name].clone());
            p.description = "declared by the bridge config; each value goes to HPRM";
            params.insert(full, p);
        }
        Ok(())
    }

    fn get_parameter(&mut self, name: &str) -> r2r::Result<ParameterValue> {
        self.values.get(name).cloned().ok_or_else(|| r2r::Error::InvalidParameterName { name: name.into() })
    }

    fn set_parameter(&mut self, name: &str, value: &ParameterValue) -> r2r::Result<()> {
        self.check_parameter(name, value)?;
        self.values.insert(name.to_string(), value.clone());
        Ok(())
    }

    fn check_parameter(&self, name: &str, value: &ParameterValue) -> r2r::Result<()> {
        let ty = *self.types.get(name).ok_or_else(|| r2r::Error::InvalidParameterName { name: name.into() })?;
        if fits(ty, value) {
            Ok(())
        } else {
            Err(r2r::Error::ParameterWrongType {
                name: name.into(),
                expected_type: ty.name(),
                actual_type: value.type_name(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared() -> Declared {
        let params: Vec<ParameterMap> = vec![
            ParameterMap {
                name: "gain".into(),
                param_type: ParamType::Double,
                default: toml::Value::Integer(2),
                port: "g".into(),
            },
            ParameterMap {
                name: "names".into(),
                param_type: ParamType::StringArray,
                default: toml::Value::Array(vec!["a".into()]),
                port: "n".into(),
            },
        ];
        Declared::new(&params)
    }

    #[test]
    fn takes_values_of_the_declared_type_only() {
        let mut d = declared();
        assert_eq!(d.value("gain"), Some(&ParameterValue::Double(2.0)));
        assert_eq!(to_value(d.value("names").unwrap()), Value::List(vec![Value::Str("a".into())]));
        d.set_parameter("gain", &ParameterValue::Double(0.5)).unwrap();
        assert_eq!(d.get_parameter("gain").unwrap(), ParameterValue::Double(0.5));
        let e = d.set_parameter("gain", &ParameterValue::String("x".into())).unwrap_err().to_string();
        assert!(e.contains("expected to be of type double but was of type string"), "{e}");
        assert!(d.set_parameter("other", &ParameterValue::Bool(true)).is_err());
        assert_eq!(d.get_parameter("gain").unwrap(), ParameterValue::Double(0.5));
    }

    #[test]
    fn registers_every_declared_parameter_with_its_default() {
        let mut d = declared();
        let mut params = IndexMap::new();
        params.insert("gain".to_string(), Parameter::new(ParameterValue::Double(7.0)));
        d.register_parameters("", None, &mut params).unwrap();
        // The command line's value of the right type wins.
        assert_eq!(params["gain"].value, ParameterValue::Double(7.0));
        assert_eq!(params["names"].value, ParameterValue::StringArray(vec!["a".into()]));
    }
}
