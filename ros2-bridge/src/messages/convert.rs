//! Messages field by field, through JSON: the default conversion of every
//! type, and the raw views of native (C) sequences the bulk-data kinds read.

use super::*;

/// The elements of a native rosidl sequence or string (`data`, `size`).
///
/// Safety: `data` points at `size` initialized elements (or is null),
/// alive for `'a`: the fields of a native message borrowed for `'a`.
pub(super) unsafe fn native_slice<'a, T>(data: *const T, size: usize) -> &'a [T] {
    if data.is_null() || size == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(data, size) }
    }
}

/// The bytes of a native rosidl sequence of numbers or string.
///
/// Safety: as for [`native_slice`]; `T` is a plain number type.
pub(super) unsafe fn native_bytes<'a, T: Copy>(data: *const T, size: usize) -> &'a [u8] {
    let elements = unsafe { native_slice(data, size) };
    unsafe { std::slice::from_raw_parts(elements.as_ptr().cast::<u8>(), std::mem::size_of_val(elements)) }
}

/// Any message struct field by field (what [`Bridged`] does by default).
pub fn plain_to_value<T: Serialize>(name: &str, msg: &T) -> Result<Value, ConvertError> {
    to_json(name, msg).map(json_to_value)
}

/// A value back to any message struct field by field, missing fields at
/// their defaults.
pub fn plain_from_value<T: Serialize + DeserializeOwned + Default>(name: &str, v: Value) -> Result<T, ConvertError> {
    from_json(name, v)
}

pub(super) fn to_json<T: Serialize>(name: &str, msg: &T) -> Result<Json, ConvertError> {
    serde_json::to_value(msg).map_err(|source| ConvertError::Fields { type_name: name.into(), source })
}

/// `v` laid over the message's defaults, so missing fields keep them;
/// fields the message does not have are an error.
pub(super) fn from_json<T: Serialize + DeserializeOwned + Default>(name: &str, v: Value) -> Result<T, ConvertError> {
    let mut base = to_json(name, &T::default())?;
    overlay(name, "", &mut base, value_to_json(v))?;
    serde_json::from_value(base).map_err(|source| ConvertError::Fields { type_name: name.into(), source })
}

pub(super) fn overlay(name: &str, path: &str, base: &mut Json, v: Json) -> Result<(), ConvertError> {
    match (base, v) {
        (Json::Object(b), Json::Object(v)) => {
            for (k, x) in v {
                let here = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                match b.get_mut(&k) {
                    Some(slot) => overlay(name, &here, slot, x)?,
                    None => {
                        let known: Vec<&str> = b.keys().map(String::as_str).collect();
                        return Err(ConvertError::shape(
                            name,
                            format!("{here:?} is not a field (fields: {})", known.join(", ")),
                        ));
                    }
                }
            }
            Ok(())
        }
        (_, Json::Object(_)) if !path.is_empty() => {
            Err(ConvertError::shape(name, format!("{path:?} is not a message, it cannot take a dict")))
        }
        (slot, v) => {
            *slot = v;
            Ok(())
        }
    }
}

/// JSON from r2r to a value: a non-empty list of float64s becomes a float64
/// array; other lists stay lists.
pub fn json_to_value(j: Json) -> Value {
    match j {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Bool(b),
        Json::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::UInt(u)
            } else if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::String(s) => Value::Str(s),
        Json::Array(items) => {
            if !items.is_empty() && items.iter().all(|x| matches!(x, Json::Number(n) if n.is_f64())) {
                Value::Buffer(Buffer::from_elements(items.iter().filter_map(Json::as_f64).collect::<Vec<f64>>()))
            } else {
                Value::List(items.into_iter().map(json_to_value).collect())
            }
        }
        Json::Object(m) => Value::Map(m.into_iter().map(|(k, v)| (k, json_to_value(v))).collect()),
    }
}

/// A value as JSON for r2r: arrays become lists of numbers.
pub fn value_to_json(v: Value) -> Json {
    match v {
        Value::Nil => Json::Null,
        Value::Bool(b) => Json::Bool(b),
        Value::Int(i) => Json::from(i),
        Value::UInt(u) => Json::from(u),
        Value::Float(f) => Json::from(f),
        Value::Str(s) => Json::String(s),
        Value::Bin(b) => Json::Array(b.into_iter().map(Json::from).collect()),
        Value::List(items) => Json::Array(items.into_iter().map(value_to_json).collect()),
        Value::Map(m) => Json::Object(m.into_iter().map(|(k, v)| (k, value_to_json(v))).collect()),
        Value::Buffer(b) => buffer_to_json(&b),
    }
}

pub(super) fn buffer_to_json(b: &Buffer) -> Json {
    fn list<T: Element + Into<Json>>(b: &Buffer) -> Option<Json> {
        b.as_slice::<T>().map(|s| Json::Array(s.iter().map(|&x| x.into()).collect()))
    }
    list::<f64>(b)
        .or_else(|| list::<f32>(b))
        .or_else(|| list::<i64>(b))
        .or_else(|| list::<u64>(b))
        .or_else(|| list::<i32>(b))
        .or_else(|| list::<u32>(b))
        .or_else(|| list::<i16>(b))
        .or_else(|| list::<u16>(b))
        .or_else(|| list::<i8>(b))
        .or_else(|| {
            (b.dtype() == &Dtype::BOOL).then(|| Json::Array(b.bytes().iter().map(|&x| Json::Bool(x != 0)).collect()))
        })
        .unwrap_or_else(|| Json::Array(b.bytes().iter().map(|&x| x.into()).collect()))
}
