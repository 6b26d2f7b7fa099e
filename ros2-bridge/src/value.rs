//! [`Value`]: the dynamic port value of the bridge's ports.
//!
//! The bridge forwards messages of types known only at run time (from its
//! config), so its ports carry a MessagePack value tree rather than a Rust
//! struct. It is what the Python SDK sends and receives as dicts, lists and
//! scalars; its [`Buffer`]s are numpy arrays there, out-of-band in the
//! store when large. Maps keep their key order (ROS field order).

use std::fmt;

use hprm_node::payload::Buffer;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};

/// One port value: a MessagePack value tree whose leaves may be buffers.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    List(Vec<Value>),
    /// String-keyed, in field order.
    Map(Vec<(String, Value)>),
    /// An n-dimensional numeric array (numpy on the Python side).
    Buffer(Buffer),
}

impl Value {
    /// The entry `key` of a map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Removes and returns the entry `key` of a map.
    pub fn take(&mut self, key: &str) -> Option<Value> {
        match self {
            Value::Map(m) => m.iter().position(|(k, _)| k == key).map(|i| m.remove(i).1),
            _ => None,
        }
    }

    /// Sets the entry `key` of a map (in place when present, else appended).
    pub fn set(&mut self, key: &str, value: Value) {
        if let Value::Map(m) = self {
            match m.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = value,
                None => m.push((key.to_string(), value)),
            }
        }
    }

    /// An unsigned integer (also from a non-negative signed one).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::UInt(u) => Some(u),
            Value::Int(i) if i >= 0 => Some(i as u64),
            _ => None,
        }
    }

    #[cfg(test)]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A short name of the variant, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Nil => "nil",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::UInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bin(_) => "bytes",
            Value::List(_) => "list",
            Value::Map(_) => "dict",
            Value::Buffer(_) => "array",
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Nil => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(i) => s.serialize_i64(*i),
            Value::UInt(u) => s.serialize_u64(*u),
            Value::Float(f) => s.serialize_f64(*f),
            Value::Str(t) => s.serialize_str(t),
            Value::Bin(b) => s.serialize_bytes(b),
            Value::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Value::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            Value::Buffer(b) => b.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a MessagePack value (nil, bool, number, str, bytes, list, str-keyed map or buffer)")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Nil)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Nil)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::UInt(v))
    }
    fn visit_f32<E>(self, v: f32) -> Result<Value, E> {
        Ok(Value::Float(v as f64))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::Bin(v.to_vec()))
    }
    fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Value, E> {
        Ok(Value::Bin(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some(k) = map.next_key::<KeyString>()? {
            entries.push((k.0, map.next_value()?));
        }
        Ok(Value::Map(entries))
    }
    /// rmp-serde hands an extension value (a buffer) to `deserialize_any`
    /// visitors as a newtype around `(type, data)`; `Buffer`'s own
    /// `Deserialize` expects to be offered exactly that newtype, which
    /// [`ExtNewtype`] re-creates.
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Buffer::deserialize(ExtNewtype(d)).map(Value::Buffer)
    }
}

/// A map key, which must be a string (the Python SDK's dict keys of ROS
/// messages always are).
struct KeyString(String);

impl<'de> Deserialize<'de> for KeyString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyString, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = KeyString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string map key (ROS messages are dicts keyed by field name)")
            }
            fn visit_str<E>(self, v: &str) -> Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<KeyString, E> {
                Ok(KeyString(v))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Presents an extension value's deserializer to `Buffer::deserialize` as
/// the newtype it asks for; everything else goes straight through.
struct ExtNewtype<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ExtNewtype<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(v)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, v: V) -> Result<V::Value, D::Error> {
        v.visit_newtype_struct(self.0)
    }

    /// Only MessagePack extension values come here, and MessagePack is
    /// compact (rmp-serde's extension deserializer does not say so itself):
    /// `Buffer` must not take its readable form.
    fn is_human_readable(&self) -> bool {
        false
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_node::payload::{Decoder, Encoder, StoreLink, DEFAULT_GET_TIMEOUT, DEFAULT_THRESHOLD};

    #[test]
    fn round_trips_through_the_payload_codec_with_buffers() {
        let store = StoreLink::new(None);
        let img = Buffer::from_vec((0..48u8).collect()).with_shape(&[4, 4, 3]).unwrap();
        let v = Value::Map(vec![
            ("encoding".into(), Value::Str("rgb8".into())),
            ("height".into(), Value::UInt(4)),
            ("neg".into(), Value::Int(-3)),
            ("f".into(), Value::Float(1.5)),
            ("ok".into(), Value::Bool(true)),
            ("none".into(), Value::Nil),
            ("raw".into(), Value::Bin(vec![1, 2])),
            ("list".into(), Value::List(vec![Value::UInt(1), Value::Str("x".into())])),
            ("data".into(), Value::Buffer(img.clone())),
        ]);
        let bytes = Encoder::new(store.clone(), DEFAULT_THRESHOLD).encode(&v, 1).unwrap();
        let back: Value = Decoder::new(store, DEFAULT_GET_TIMEOUT).decode(&bytes).unwrap();
        assert_eq!(back, v);
        match back.get("data") {
            Some(Value::Buffer(b)) => assert_eq!(b.shape(), &[4, 4, 3]),
            other => panic!("data is {other:?}"),
        }
    }

    #[test]
    fn refuses_non_string_keys() {
        let mut bytes = Vec::new();
        rmp::encode::write_map_len(&mut bytes, 1).unwrap();
        rmp::encode::write_uint(&mut bytes, 7).unwrap();
        rmp::encode::write_nil(&mut bytes).unwrap();
        let err = Decoder::new(StoreLink::new(None), DEFAULT_GET_TIMEOUT).decode::<Value>(&bytes).unwrap_err();
        assert!(err.to_string().contains("string map key"), "{err}");
    }
}
