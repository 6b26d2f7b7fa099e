//! ROS 2 messages <-> bridge [`Value`]s.
//!
//! Each message type the bridge can carry has a [`MessageSupport`]: it
//! subscribes and publishes on an r2r node and converts messages both ways.
//!
//! - Types compiled into the bridge by name ([`TYPED`]: std_msgs,
//!   sensor_msgs, geometry_msgs, builtin_interfaces) go through their r2r
//!   Rust structs. Fields become a map in field order; arrays of float64
//!   (covariances, camera matrices) become float64 arrays.
//! - The bulk data of images, point clouds, laser scans and multi-arrays is
//!   not converted element by element: it becomes one buffer, shaped and
//!   typed from the message's own fields ([`image_layout`],
//!   [`cloud_layout`], [`multiarray_shape`]). Images, compressed images,
//!   point clouds and multi-arrays are read from the native (C) message
//!   and copied once, into a store object loaned for the port's receivers
//!   ([`Loaner`], [`Bridged::native_to_value`]), which is sent by
//!   reference. Laser scans (a few KiB) move r2r's vectors into buffers.
//! - Any other type r2r was built with goes through r2r's untyped
//!   (JSON) messages: the generic path, lists and scalars.
//!
//! Back from HPRM, a value may leave out fields: they take the message's
//! defaults, and an image's or point cloud's height, width, step and
//! encoding follow from the array's shape and dtype.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use futures::StreamExt;
use hprm_node::payload::{Buffer, Dtype, Element, Encoder};
use r2r::{QosProfile, WrappedTypesupport};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value as Json;

use crate::value::Value;

/// A conversion or ROS-side failure, as a sentence.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{type_name}: {what}")]
    Shape { type_name: String, what: String },
    #[error("{type_name}: the value does not fit the message: {source}")]
    Fields { type_name: String, source: serde_json::Error },
    #[error("{0}")]
    Ros(String),
}

impl ConvertError {
    fn shape(type_name: &str, what: impl Into<String>) -> ConvertError {
        ConvertError::Shape { type_name: type_name.into(), what: what.into() }
    }
}

/// A future driven by the bridge's ROS thread.
pub type LocalTask = Pin<Box<dyn Future<Output = ()> + Send>>;
/// Where received messages go.
pub type Sink = Box<dyn FnMut(Result<Value, ConvertError>) + Send>;

/// Puts received bulk data straight into the store: one copy from the ROS
/// message, none after (a buffer loaned for the port's receivers is sent
/// by reference). Without it, the data is moved into a vector that the
/// encoder copies into the store.
#[derive(Clone)]
pub struct Loaner {
    pub encoder: Encoder,
    /// Receivers of the port the data goes to.
    pub deliveries: u32,
    /// Whether the data will be sent: a loan never sent would pin its
    /// object until the store's delivery TTL.
    pub ready: Option<std::sync::Arc<dyn Fn() -> bool + Send + Sync>>,
}

impl Loaner {
    /// A buffer holding a copy of `bytes`: in the store when at or over
    /// the threshold, else owned.
    pub fn buffer(&self, name: &str, dtype: Dtype, shape: &[usize], bytes: &[u8]) -> Result<Buffer, ConvertError> {
        let err = |e: hprm_node::payload::PayloadError| ConvertError::shape(name, e.to_string());
        if bytes.len() < self.encoder.threshold()
            || self.deliveries == 0
            || !self.ready.as_ref().is_some_and(|ready| ready())
        {
            return Buffer::from_bytes(dtype, shape, bytes.to_vec()).map_err(err);
        }
        let mut loan = self.encoder.loan(dtype, shape, self.deliveries).map_err(err)?;
        let target = loan.as_mut_bytes();
        if target.len() != bytes.len() {
            return Err(ConvertError::shape(
                name,
                format!("{} data bytes for a {}-byte buffer", bytes.len(), target.len()),
            ));
        }
        target.copy_from_slice(bytes);
        tracing::trace!(id = %loan.id(), nbytes = bytes.len(), "bulk data copied into the store");
        loan.finish().map_err(err)
    }
}

/// Publishes values on one topic.
pub trait ValuePublisher: Send + Sync {
    fn publish(&self, v: Value) -> Result<(), ConvertError>;
}

/// How the bridge carries one message type.
pub trait MessageSupport: Send + Sync {
    /// Subscribes on `node`; the returned task feeds `sink` until the
    /// node goes away.
    /// With `loaner`, bulk data goes straight into the store (types that
    /// support it).
    fn subscribe(
        &self,
        node: &mut r2r::Node,
        topic: &str,
        qos: QosProfile,
        sink: Sink,
        loaner: Option<Loaner>,
    ) -> Result<LocalTask, r2r::Error>;
    fn publisher(
        &self,
        node: &mut r2r::Node,
        topic: &str,
        qos: QosProfile,
    ) -> Result<Box<dyn ValuePublisher>, r2r::Error>;
}

/// A message type with a Rust struct in r2r; `to_value`/`from_value`
/// default to the field-by-field conversion, bulk-data types move their
/// data instead.
pub trait Bridged: WrappedTypesupport + Serialize + DeserializeOwned + Default + Send + 'static {
    const NAME: &'static str;

    fn to_value(self) -> Result<Value, ConvertError> {
        to_json(Self::NAME, &self).map(json_to_value)
    }

    fn from_value(v: Value) -> Result<Self, ConvertError> {
        from_json(Self::NAME, v)
    }

    /// Whether [`Bridged::native_to_value`] reads the native message.
    const NATIVE: bool = false;

    /// The native (C) message as a value, its bulk data copied once,
    /// straight into the store.
    fn native_to_value(_msg: &Self::CStruct, _loaner: &Loaner) -> Result<Value, ConvertError> {
        unreachable!("only called when NATIVE")
    }
}

/// The elements of a native rosidl sequence or string (`data`, `size`).
///
/// Safety: `data` points at `size` initialized elements (or is null),
/// alive for `'a`: the fields of a native message borrowed for `'a`.
unsafe fn native_slice<'a, T>(data: *const T, size: usize) -> &'a [T] {
    if data.is_null() || size == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(data, size) }
    }
}

/// The bytes of a native rosidl sequence of numbers or string.
///
/// Safety: as for [`native_slice`]; `T` is a plain number type.
unsafe fn native_bytes<'a, T: Copy>(data: *const T, size: usize) -> &'a [u8] {
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

fn to_json<T: Serialize>(name: &str, msg: &T) -> Result<Json, ConvertError> {
    serde_json::to_value(msg).map_err(|source| ConvertError::Fields { type_name: name.into(), source })
}

/// `v` laid over the message's defaults, so missing fields keep them;
/// fields the message does not have are an error.
fn from_json<T: Serialize + DeserializeOwned + Default>(name: &str, v: Value) -> Result<T, ConvertError> {
    let mut base = to_json(name, &T::default())?;
    overlay(name, "", &mut base, value_to_json(v))?;
    serde_json::from_value(base).map_err(|source| ConvertError::Fields { type_name: name.into(), source })
}

fn overlay(name: &str, path: &str, base: &mut Json, v: Json) -> Result<(), ConvertError> {
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

fn buffer_to_json(b: &Buffer) -> Json {
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

/// Element type and shape of an image's data, from its encoding, size and
/// step (`sensor_msgs/image_encodings.hpp`). Unknown encodings, and rows
/// with padding, give `|u1` of `[height, step]`.
pub fn image_layout(
    encoding: &str,
    height: usize,
    width: usize,
    step: usize,
    bigendian: bool,
    nbytes: usize,
) -> (Dtype, Vec<usize>) {
    let order = if bigendian { '>' } else { '<' };
    let known = image_pixel(encoding).and_then(|(kind, size, channels)| {
        let dtype = Dtype::parse(&if size == 1 { format!("|{kind}1") } else { format!("{order}{kind}{size}") }).ok()?;
        (step == width * channels * size && nbytes == height * step).then(|| {
            let shape = if channels == 1 { vec![height, width] } else { vec![height, width, channels] };
            (dtype, shape)
        })
    });
    known.unwrap_or_else(|| {
        if height > 0 && nbytes == height * step {
            (Dtype::U8, vec![height, step])
        } else {
            (Dtype::U8, vec![nbytes])
        }
    })
}

/// (numpy kind, item size, channels) of an image encoding.
fn image_pixel(encoding: &str) -> Option<(char, usize, usize)> {
    let fixed = match encoding {
        "mono8" => ('u', 1, 1),
        "mono16" => ('u', 2, 1),
        "rgb8" | "bgr8" => ('u', 1, 3),
        "rgba8" | "bgra8" => ('u', 1, 4),
        "rgb16" | "bgr16" => ('u', 2, 3),
        "rgba16" | "bgra16" => ('u', 2, 4),
        "yuv422" | "uyvy" | "yuyv" | "yuv422_yuy2" => ('u', 1, 2),
        e if e.starts_with("bayer_") && e.ends_with('8') => ('u', 1, 1),
        e if e.starts_with("bayer_") && e.ends_with("16") => ('u', 2, 1),
        e => {
            // "32FC3": bits, kind (U, S, F), "C", channels (1-4 or none).
            let (bits, rest) = e.split_at(e.find(|c: char| !c.is_ascii_digit())?);
            let mut chars = rest.chars();
            let kind = match chars.next()? {
                'U' => 'u',
                'S' => 'i',
                'F' => 'f',
                _ => return None,
            };
            let rest: String = chars.collect();
            let channels = if rest.is_empty() { 1 } else { rest.strip_prefix('C')?.parse().ok()? };
            let size = bits.parse::<usize>().ok()? / 8;
            if !(1..=8).contains(&size) || (kind == 'f' && size < 4) || channels == 0 {
                return None;
            }
            (kind, size, channels)
        }
    };
    Some(fixed)
}

/// The encoding of an image array: channels from its third dimension.
fn image_encoding(dtype: &Dtype, shape: &[usize]) -> Option<String> {
    let channels = match shape.len() {
        2 => 1,
        3 => shape[2],
        _ => return None,
    };
    let text = dtype.as_str();
    let kind = text.chars().nth(1)?;
    let size = dtype.itemsize();
    Some(match (kind, size, channels) {
        ('u', 1, 1) => "mono8".into(),
        ('u', 1, 3) => "rgb8".into(),
        ('u', 1, 4) => "rgba8".into(),
        ('u', 2, 1) => "mono16".into(),
        ('u', 2, 3) => "rgb16".into(),
        ('u', 2, 4) => "rgba16".into(),
        ('u', s, c) => format!("{}UC{c}", s * 8),
        ('i', s, c) => format!("{}SC{c}", s * 8),
        ('f', s, c) => format!("{}FC{c}", s * 8),
        _ => return None,
    })
}

/// PointField datatype codes -> (numpy kind, size).
fn point_field(datatype: u8) -> Option<(char, usize)> {
    Some(match datatype {
        1 => ('i', 1),
        2 => ('u', 1),
        3 => ('i', 2),
        4 => ('u', 2),
        5 => ('i', 4),
        6 => ('u', 4),
        7 => ('f', 4),
        8 => ('f', 8),
        _ => return None,
    })
}

/// Element type and shape of a point cloud's `nbytes` of data (`c.data`
/// itself is not read): `[height, width, point_step / size]` of the
/// fields' type when every field has the same type and sits on its own
/// element (x, y, z, padding: the usual clouds), else `|u1` of `[height,
/// row_step]`.
pub fn cloud_layout(c: &r2r::sensor_msgs::msg::PointCloud2, nbytes: usize) -> (Dtype, Vec<usize>) {
    let (h, w, ps, rs, n) = (c.height as usize, c.width as usize, c.point_step as usize, c.row_step as usize, nbytes);
    let order = if c.is_bigendian { '>' } else { '<' };
    let common = c.fields.first().and_then(|f| point_field(f.datatype)).filter(|&(kind, size)| {
        c.fields
            .iter()
            .all(|f| point_field(f.datatype) == Some((kind, size)) && f.offset as usize % size == 0 && f.count <= 1)
            && ps % size == 0
            && ps > 0
    });
    if let Some((kind, size)) = common {
        if rs == w * ps && n == h * rs {
            let text = if size == 1 { format!("|{kind}1") } else { format!("{order}{kind}{size}") };
            if let Ok(dtype) = Dtype::parse(&text) {
                return (dtype, vec![h, w, ps / size]);
            }
        }
    }
    if h > 0 && n == h * rs {
        (Dtype::U8, vec![h, rs])
    } else {
        (Dtype::U8, vec![n])
    }
}

/// A multi-array's shape from its layout, when the layout describes all
/// of the data (no offset); else one dimension.
pub fn multiarray_shape(layout: &r2r::std_msgs::msg::MultiArrayLayout, len: usize) -> Vec<usize> {
    let dims: Vec<usize> = layout.dim.iter().map(|d| d.size as usize).collect();
    if !dims.is_empty() && layout.data_offset == 0 && dims.iter().product::<usize>() == len {
        dims
    } else {
        vec![len]
    }
}

/// The bytes of a bulk-data field coming back from HPRM: an array (any
/// dtype, its raw bytes), bytes, or a list of 0..=255.
fn bulk_bytes(name: &str, field: &str, v: Option<Value>) -> Result<(Vec<u8>, Option<Buffer>), ConvertError> {
    match v {
        None | Some(Value::Nil) => Ok((Vec::new(), None)),
        Some(Value::Buffer(b)) => Ok((b.bytes().to_vec(), Some(b))),
        Some(Value::Bin(b)) => Ok((b, None)),
        Some(Value::List(items)) => items
            .iter()
            .map(|x| x.as_u64().and_then(|u| u8::try_from(u).ok()))
            .collect::<Option<Vec<u8>>>()
            .map(|b| (b, None))
            .ok_or_else(|| ConvertError::shape(name, format!("{field} must be an array, bytes or a list of 0..=255"))),
        Some(other) => {
            Err(ConvertError::shape(name, format!("{field} must be an array or bytes, not {}", other.kind())))
        }
    }
}

/// The elements of a numeric field coming back from HPRM: an array of that
/// exact dtype, or a list of numbers.
fn elements<T: Element + DeserializeOwned>(name: &str, field: &str, v: Option<Value>) -> Result<Vec<T>, ConvertError> {
    match v {
        None | Some(Value::Nil) => Ok(Vec::new()),
        Some(Value::Buffer(b)) => b.to_vec::<T>().ok_or_else(|| {
            ConvertError::shape(
                name,
                format!("{field} is an array of {}, the message needs {}", b.dtype().as_str(), T::DTYPE.as_str()),
            )
        }),
        Some(v @ Value::List(_)) => serde_json::from_value(value_to_json(v))
            .map_err(|source| ConvertError::Fields { type_name: name.into(), source }),
        Some(other) => {
            Err(ConvertError::shape(name, format!("{field} must be an array or a list, not {}", other.kind())))
        }
    }
}

fn set_default(v: &mut Value, key: &str, x: impl FnOnce() -> Option<Value>) {
    if v.get(key).is_none() {
        if let Some(x) = x() {
            v.set(key, x);
        }
    }
}

/// `r2r::pkg::msg::Name` with the default field-by-field conversion.
macro_rules! plain {
    ($($path:ident :: $msg:ident => $name:literal),* $(,)?) => {
        $(impl Bridged for r2r::$path::msg::$msg {
            const NAME: &'static str = $name;
        })*
    };
}

plain! {
    std_msgs::String => "std_msgs/msg/String",
    std_msgs::Bool => "std_msgs/msg/Bool",
    std_msgs::Byte => "std_msgs/msg/Byte",
    std_msgs::Char => "std_msgs/msg/Char",
    std_msgs::Float32 => "std_msgs/msg/Float32",
    std_msgs::Float64 => "std_msgs/msg/Float64",
    std_msgs::Int8 => "std_msgs/msg/Int8",
    std_msgs::Int16 => "std_msgs/msg/Int16",
    std_msgs::Int32 => "std_msgs/msg/Int32",
    std_msgs::Int64 => "std_msgs/msg/Int64",
    std_msgs::UInt8 => "std_msgs/msg/UInt8",
    std_msgs::UInt16 => "std_msgs/msg/UInt16",
    std_msgs::UInt32 => "std_msgs/msg/UInt32",
    std_msgs::UInt64 => "std_msgs/msg/UInt64",
    std_msgs::Empty => "std_msgs/msg/Empty",
    std_msgs::Header => "std_msgs/msg/Header",
    std_msgs::ColorRGBA => "std_msgs/msg/ColorRGBA",
    sensor_msgs::Imu => "sensor_msgs/msg/Imu",
    sensor_msgs::CameraInfo => "sensor_msgs/msg/CameraInfo",
    geometry_msgs::Twist => "geometry_msgs/msg/Twist",
    geometry_msgs::TwistStamped => "geometry_msgs/msg/TwistStamped",
    geometry_msgs::Pose => "geometry_msgs/msg/Pose",
    geometry_msgs::PoseStamped => "geometry_msgs/msg/PoseStamped",
    geometry_msgs::Transform => "geometry_msgs/msg/Transform",
    geometry_msgs::TransformStamped => "geometry_msgs/msg/TransformStamped",
    geometry_msgs::Point => "geometry_msgs/msg/Point",
    geometry_msgs::Vector3 => "geometry_msgs/msg/Vector3",
    geometry_msgs::Quaternion => "geometry_msgs/msg/Quaternion",
    builtin_interfaces::Time => "builtin_interfaces/msg/Time",
    builtin_interfaces::Duration => "builtin_interfaces/msg/Duration",
}

impl Bridged for r2r::sensor_msgs::msg::Image {
    const NAME: &'static str = "sensor_msgs/msg/Image";

    fn to_value(mut self) -> Result<Value, ConvertError> {
        let data = std::mem::take(&mut self.data);
        let (dtype, shape) = image_layout(
            &self.encoding,
            self.height as usize,
            self.width as usize,
            self.step as usize,
            self.is_bigendian != 0,
            data.len(),
        );
        let buffer =
            Buffer::from_bytes(dtype, &shape, data).map_err(|e| ConvertError::shape(Self::NAME, e.to_string()))?;
        let mut v = json_to_value(to_json(Self::NAME, &self)?);
        v.set("data", Value::Buffer(buffer));
        Ok(v)
    }

    const NATIVE: bool = true;

    fn native_to_value(c: &Self::CStruct, loaner: &Loaner) -> Result<Value, ConvertError> {
        let meta = Self {
            header: r2r::std_msgs::msg::Header::from_native(&c.header),
            height: c.height,
            width: c.width,
            // Safety: fields of the native message `c` borrows.
            encoding: String::from_utf8_lossy(unsafe { native_bytes(c.encoding.data, c.encoding.size) }).into_owned(),
            is_bigendian: c.is_bigendian,
            step: c.step,
            data: Vec::new(),
        };
        // Safety: as above.
        let data = unsafe { native_bytes(c.data.data, c.data.size) };
        let (dtype, shape) = image_layout(
            &meta.encoding,
            meta.height as usize,
            meta.width as usize,
            meta.step as usize,
            meta.is_bigendian != 0,
            data.len(),
        );
        let buffer = loaner.buffer(Self::NAME, dtype, &shape, data)?;
        let mut v = json_to_value(to_json(Self::NAME, &meta)?);
        v.set("data", Value::Buffer(buffer));
        Ok(v)
    }

    fn from_value(mut v: Value) -> Result<Self, ConvertError> {
        let (data, buffer) = bulk_bytes(Self::NAME, "data", v.take("data"))?;
        if let Some(b) = &buffer {
            let (shape, dtype) = (b.shape(), b.dtype());
            set_default(&mut v, "height", || shape.first().map(|&h| Value::UInt(h as u64)));
            set_default(&mut v, "width", || shape.get(1).map(|&w| Value::UInt(w as u64)));
            set_default(&mut v, "encoding", || image_encoding(dtype, shape).map(Value::Str));
            set_default(&mut v, "is_bigendian", || Some(Value::UInt(dtype.as_str().starts_with('>') as u64)));
            let row = shape.get(1).copied().unwrap_or(0) * shape.get(2).copied().unwrap_or(1) * dtype.itemsize();
            set_default(&mut v, "step", || Some(Value::UInt(row as u64)));
        }
        let mut msg: Self = from_json(Self::NAME, v)?;
        if data.len() != msg.height as usize * msg.step as usize {
            return Err(ConvertError::shape(
                Self::NAME,
                format!(
                    "data holds {} bytes, height {} x step {} needs {}",
                    data.len(),
                    msg.height,
                    msg.step,
                    msg.height as usize * msg.step as usize
                ),
            ));
        }
        msg.data = data;
        Ok(msg)
    }
}

impl Bridged for r2r::sensor_msgs::msg::CompressedImage {
    const NAME: &'static str = "sensor_msgs/msg/CompressedImage";

    fn to_value(mut self) -> Result<Value, ConvertError> {
        let data = Buffer::from_vec(std::mem::take(&mut self.data));
        let mut v = json_to_value(to_json(Self::NAME, &self)?);
        v.set("data", Value::Buffer(data));
        Ok(v)
    }

    const NATIVE: bool = true;

    fn native_to_value(c: &Self::CStruct, loaner: &Loaner) -> Result<Value, ConvertError> {
        let meta = Self {
            header: r2r::std_msgs::msg::Header::from_native(&c.header),
            // Safety: fields of the native message `c` borrows.
            format: String::from_utf8_lossy(unsafe { native_bytes(c.format.data, c.format.size) }).into_owned(),
            data: Vec::new(),
        };
        // Safety: as above.
        let data = unsafe { native_bytes(c.data.data, c.data.size) };
        let buffer = loaner.buffer(Self::NAME, Dtype::U8, &[data.len()], data)?;
        let mut v = json_to_value(to_json(Self::NAME, &meta)?);
        v.set("data", Value::Buffer(buffer));
        Ok(v)
    }

    fn from_value(mut v: Value) -> Result<Self, ConvertError> {
        let (data, _) = bulk_bytes(Self::NAME, "data", v.take("data"))?;
        let mut msg: Self = from_json(Self::NAME, v)?;
        msg.data = data;
        Ok(msg)
    }
}

impl Bridged for r2r::sensor_msgs::msg::PointCloud2 {
    const NAME: &'static str = "sensor_msgs/msg/PointCloud2";

    fn to_value(mut self) -> Result<Value, ConvertError> {
        let data = std::mem::take(&mut self.data);
        let (dtype, shape) = cloud_layout(&self, data.len());
        let buffer =
            Buffer::from_bytes(dtype, &shape, data).map_err(|e| ConvertError::shape(Self::NAME, e.to_string()))?;
        let mut v = json_to_value(to_json(Self::NAME, &self)?);
        v.set("data", Value::Buffer(buffer));
        Ok(v)
    }

    const NATIVE: bool = true;

    fn native_to_value(c: &Self::CStruct, loaner: &Loaner) -> Result<Value, ConvertError> {
        let meta = Self {
            header: r2r::std_msgs::msg::Header::from_native(&c.header),
            height: c.height,
            width: c.width,
            // Safety: fields of the native message `c` borrows.
            fields: unsafe { native_slice(c.fields.data, c.fields.size) }
                .iter()
                .map(r2r::sensor_msgs::msg::PointField::from_native)
                .collect(),
            is_bigendian: c.is_bigendian,
            point_step: c.point_step,
            row_step: c.row_step,
            data: Vec::new(),
            is_dense: c.is_dense,
        };
        // Safety: as above.
        let data = unsafe { native_bytes(c.data.data, c.data.size) };
        let (dtype, shape) = cloud_layout(&meta, data.len());
        let buffer = loaner.buffer(Self::NAME, dtype, &shape, data)?;
        let mut v = json_to_value(to_json(Self::NAME, &meta)?);
        v.set("data", Value::Buffer(buffer));
        Ok(v)
    }

    fn from_value(mut v: Value) -> Result<Self, ConvertError> {
        let (data, buffer) = bulk_bytes(Self::NAME, "data", v.take("data"))?;
        if let Some(b) = &buffer {
            // [height, width, elements per point] of the fields' type.
            if let [h, w, k] = *b.shape() {
                let point = k * b.dtype().itemsize();
                set_default(&mut v, "height", || Some(Value::UInt(h as u64)));
                set_default(&mut v, "width", || Some(Value::UInt(w as u64)));
                set_default(&mut v, "point_step", || Some(Value::UInt(point as u64)));
                set_default(&mut v, "row_step", || Some(Value::UInt((w * point) as u64)));
                set_default(&mut v, "is_bigendian", || Some(Value::Bool(b.dtype().as_str().starts_with('>'))));
            }
        }
        let mut msg: Self = from_json(Self::NAME, v)?;
        if data.len() != msg.height as usize * msg.row_step as usize {
            return Err(ConvertError::shape(
                Self::NAME,
                format!(
                    "data holds {} bytes, height {} x row_step {} needs {}",
                    data.len(),
                    msg.height,
                    msg.row_step,
                    msg.height as usize * msg.row_step as usize
                ),
            ));
        }
        msg.data = data;
        Ok(msg)
    }
}

impl Bridged for r2r::sensor_msgs::msg::LaserScan {
    const NAME: &'static str = "sensor_msgs/msg/LaserScan";

    fn to_value(mut self) -> Result<Value, ConvertError> {
        let ranges = Buffer::from_elements(std::mem::take(&mut self.ranges));
        let intensities = Buffer::from_elements(std::mem::take(&mut self.intensities));
        let mut v = json_to_value(to_json(Self::NAME, &self)?);
        v.set("ranges", Value::Buffer(ranges));
        v.set("intensities", Value::Buffer(intensities));
        Ok(v)
    }

    fn from_value(mut v: Value) -> Result<Self, ConvertError> {
        let ranges = elements::<f32>(Self::NAME, "ranges", v.take("ranges"))?;
        let intensities = elements::<f32>(Self::NAME, "intensities", v.take("intensities"))?;
        let mut msg: Self = from_json(Self::NAME, v)?;
        msg.ranges = ranges;
        msg.intensities = intensities;
        Ok(msg)
    }
}

/// `std_msgs/msg/*MultiArray`: `data` as an array of the element type,
/// shaped by the layout.
macro_rules! multiarray {
    ($($msg:ident($t:ty) => $name:literal),* $(,)?) => {
        $(impl Bridged for r2r::std_msgs::msg::$msg {
            const NAME: &'static str = $name;

            fn to_value(mut self) -> Result<Value, ConvertError> {
                let data = std::mem::take(&mut self.data);
                let shape = multiarray_shape(&self.layout, data.len());
                let buffer = Buffer::from_elements(data).with_shape(&shape).map_err(|e| ConvertError::shape(Self::NAME, e.to_string()))?;
                let mut v = json_to_value(to_json(Self::NAME, &self)?);
                v.set("data", Value::Buffer(buffer));
                Ok(v)
            }

            const NATIVE: bool = true;

            fn native_to_value(c: &Self::CStruct, loaner: &Loaner) -> Result<Value, ConvertError> {
                let meta = Self { layout: r2r::std_msgs::msg::MultiArrayLayout::from_native(&c.layout), data: Vec::new() };
                // Safety: fields of the native message `c` borrows.
                let data: &[$t] = unsafe { native_slice(c.data.data, c.data.size) };
                let shape = multiarray_shape(&meta.layout, data.len());
                // Safety: as above.
                let bytes = unsafe { native_bytes(c.data.data, c.data.size) };
                let buffer = loaner.buffer(Self::NAME, <$t as Element>::DTYPE, &shape, bytes)?;
                let mut v = json_to_value(to_json(Self::NAME, &meta)?);
                v.set("data", Value::Buffer(buffer));
                Ok(v)
            }

            fn from_value(mut v: Value) -> Result<Self, ConvertError> {
                let data = v.take("data");
                if let (Some(Value::Buffer(b)), None) = (&data, v.get("layout")) {
                    // No layout given: the array's own shape, C order.
                    let mut stride = b.shape().iter().product::<usize>();
                    let dim = b.shape().iter().map(|&size| {
                        let d = Value::Map(vec![("label".into(), Value::Str(String::new())), ("size".into(), Value::UInt(size as u64)), ("stride".into(), Value::UInt(stride as u64))]);
                        stride /= size.max(1);
                        d
                    }).collect();
                    v.set("layout", Value::Map(vec![("dim".into(), Value::List(dim)), ("data_offset".into(), Value::UInt(0))]));
                }
                let data = elements::<$t>(Self::NAME, "data", data)?;
                let mut msg: Self = from_json(Self::NAME, v)?;
                msg.data = data;
                Ok(msg)
            }
        })*
    };
}

multiarray! {
    Float32MultiArray(f32) => "std_msgs/msg/Float32MultiArray",
    Float64MultiArray(f64) => "std_msgs/msg/Float64MultiArray",
    Int8MultiArray(i8) => "std_msgs/msg/Int8MultiArray",
    Int16MultiArray(i16) => "std_msgs/msg/Int16MultiArray",
    Int32MultiArray(i32) => "std_msgs/msg/Int32MultiArray",
    Int64MultiArray(i64) => "std_msgs/msg/Int64MultiArray",
    UInt8MultiArray(u8) => "std_msgs/msg/UInt8MultiArray",
    UInt16MultiArray(u16) => "std_msgs/msg/UInt16MultiArray",
    UInt32MultiArray(u32) => "std_msgs/msg/UInt32MultiArray",
    UInt64MultiArray(u64) => "std_msgs/msg/UInt64MultiArray",
    ByteMultiArray(u8) => "std_msgs/msg/ByteMultiArray",
}

/// A type with a Rust struct.
struct Typed<T>(PhantomData<fn() -> T>);

/// Publishes through r2r's typed publisher.
struct TypedPublisher<T: WrappedTypesupport>(r2r::Publisher<T>);

// r2r's publisher is a weak handle to the rcl publisher, whose
// `rcl_publish` is thread-safe; r2r marks it `Send` only.
unsafe impl<T: WrappedTypesupport> Sync for TypedPublisher<T> {}

impl<T: Bridged> ValuePublisher for TypedPublisher<T> {
    fn publish(&self, v: Value) -> Result<(), ConvertError> {
        let msg = T::from_value(v)?;
        self.0.publish(&msg).map_err(|e| ConvertError::Ros(format!("publishing {}: {e}", T::NAME)))
    }
}

impl<T: Bridged> MessageSupport for Typed<T> {
    fn subscribe(
        &self,
        node: &mut r2r::Node,
        topic: &str,
        qos: QosProfile,
        mut sink: Sink,
        loaner: Option<Loaner>,
    ) -> Result<LocalTask, r2r::Error> {
        if let (true, Some(loaner)) = (T::NATIVE, loaner) {
            let stream = node.subscribe_native::<T>(topic, qos)?;
            let task = stream.for_each(move |msg| {
                sink(T::native_to_value(&msg, &loaner));
                std::future::ready(())
            });
            return Ok(Box::pin(MovedOnce(task)));
        }
        let stream = node.subscribe::<T>(topic, qos)?;
        Ok(Box::pin(stream.for_each(move |msg| {
            sink(msg.to_value());
            std::future::ready(())
        })))
    }

    fn publisher(
        &self,
        node: &mut r2r::Node,
        topic: &str,
        qos: QosProfile,
    ) -> Result<Box<dyn ValuePublisher>, r2r::Error> {
        Ok(Box::new(TypedPublisher(node.create_publisher::<T>(topic, qos)?)))
    }
}

/// A future built on one thread and then polled only by the ROS thread it
/// is moved to once, before its first poll.
struct MovedOnce<F>(F);

// Safety: what makes r2r's native stream `!Send` is the raw pointer of the
// C message each `WrappedNativeMsg` owns exclusively (created and destroyed
// by it, never shared); moving the owner between threads before any poll
// moves that ownership with it.
unsafe impl<F> Send for MovedOnce<F> {}

impl<F: Future + Unpin> Future for MovedOnce<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

/// Any other type r2r was built with, as JSON.
struct Untyped(String);

struct UntypedPublisher(r2r::PublisherUntyped, String);

// As for `TypedPublisher`.
unsafe impl Sync for UntypedPublisher {}

impl ValuePublisher for UntypedPublisher {
    fn publish(&self, v: Value) -> Result<(), ConvertError> {
        self.0.publish(value_to_json(v)).map_err(|e| {
            ConvertError::Ros(format!("publishing {}: {e} (send a dict with exactly the message's fields)", self.1))
        })
    }
}

impl MessageSupport for Untyped {
    fn subscribe(
        &self,
        node: &mut r2r::Node,
        topic: &str,
        qos: QosProfile,
        mut sink: Sink,
        _loaner: Option<Loaner>,
    ) -> Result<LocalTask, r2r::Error> {
        let stream = node.subscribe_untyped(topic, &self.0, qos)?;
        let name = self.0.clone();
        Ok(Box::pin(stream.for_each(move |msg| {
            sink(msg.map(json_to_value).map_err(|e| ConvertError::Ros(format!("receiving {name}: {e}"))));
            std::future::ready(())
        })))
    }

    fn publisher(
        &self,
        node: &mut r2r::Node,
        topic: &str,
        qos: QosProfile,
    ) -> Result<Box<dyn ValuePublisher>, r2r::Error> {
        Ok(Box::new(UntypedPublisher(node.create_publisher_untyped(topic, &self.0, qos)?, self.0.clone())))
    }
}

/// Every type with a Rust struct, by ROS name.
macro_rules! typed_table {
    ($($t:ty),* $(,)?) => {
        fn typed(name: &str) -> Option<Box<dyn MessageSupport>> {
            $(if name == <$t as Bridged>::NAME {
                return Some(Box::new(Typed::<$t>(PhantomData)));
            })*
            None
        }
        /// The names of [`typed`]'s types.
        #[cfg(test)]
        pub const TYPED: &[&str] = &[$(<$t as Bridged>::NAME),*];
    };
}

use r2r::{builtin_interfaces::msg as bi, geometry_msgs::msg as gm, sensor_msgs::msg as sm, std_msgs::msg as st};

typed_table! {
    st::String, st::Bool, st::Byte, st::Char, st::Float32, st::Float64, st::Int8, st::Int16, st::Int32, st::Int64,
    st::UInt8, st::UInt16, st::UInt32, st::UInt64, st::Empty, st::Header, st::ColorRGBA,
    st::Float32MultiArray, st::Float64MultiArray, st::Int8MultiArray, st::Int16MultiArray, st::Int32MultiArray,
    st::Int64MultiArray, st::UInt8MultiArray, st::UInt16MultiArray, st::UInt32MultiArray, st::UInt64MultiArray,
    st::ByteMultiArray,
    sm::Image, sm::CompressedImage, sm::PointCloud2, sm::Imu, sm::LaserScan, sm::CameraInfo,
    gm::Twist, gm::TwistStamped, gm::Pose, gm::PoseStamped, gm::Transform, gm::TransformStamped, gm::Point,
    gm::Vector3, gm::Quaternion,
    bi::Time, bi::Duration,
}

/// The support of `name`: its Rust struct, else the generic path when r2r
/// was built with the type; `None` when the bridge cannot carry it.
pub fn support(name: &str) -> Option<Box<dyn MessageSupport>> {
    typed(name).or_else(|| {
        r2r::WrappedNativeMsgUntyped::new_from(name)
            .ok()
            .map(|_| Box::new(Untyped(name.to_string())) as Box<dyn MessageSupport>)
    })
}

/// `header.stamp` of a received value, in ns since the epoch.
pub fn header_stamp(v: &Value) -> Option<i64> {
    let stamp = v.get("header")?.get("stamp")?;
    let sec = match stamp.get("sec")? {
        Value::Int(i) => *i,
        Value::UInt(u) => i64::try_from(*u).ok()?,
        _ => return None,
    };
    let nanosec = stamp.get("nanosec")?.as_u64()? as i64;
    sec.checked_mul(1_000_000_000)?.checked_add(nanosec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use r2r::sensor_msgs::msg::{Image, PointCloud2, PointField};

    #[test]
    fn image_shapes_follow_the_encoding() {
        assert_eq!(image_layout("rgb8", 480, 640, 1920, false, 480 * 1920), (Dtype::U8, vec![480, 640, 3]));
        assert_eq!(image_layout("mono16", 2, 3, 6, false, 12), (Dtype::parse("<u2").unwrap(), vec![2, 3]));
        assert_eq!(image_layout("mono16", 2, 3, 6, true, 12), (Dtype::parse(">u2").unwrap(), vec![2, 3]));
        assert_eq!(image_layout("32FC1", 2, 2, 8, false, 16), (Dtype::F32, vec![2, 2]));
        assert_eq!(image_layout("16SC3", 1, 2, 12, false, 12), (Dtype::parse("<i2").unwrap(), vec![1, 2, 3]));
        // Padded rows and unknown encodings: bytes by row.
        assert_eq!(image_layout("rgb8", 2, 3, 12, false, 24), (Dtype::U8, vec![2, 12]));
        assert_eq!(image_layout("weird", 2, 3, 4, false, 8), (Dtype::U8, vec![2, 4]));
        assert_eq!(image_layout("rgb8", 2, 3, 9, false, 5), (Dtype::U8, vec![5]));
    }

    fn image() -> Image {
        let mut img = Image { height: 4, width: 5, encoding: "rgb8".into(), step: 15, ..Default::default() };
        img.header.frame_id = "cam".into();
        img.header.stamp.sec = 12;
        img.header.stamp.nanosec = 34;
        img.data = (0..60u8).collect();
        img
    }

    #[test]
    fn image_round_trips_with_an_array() {
        let v = image().to_value().unwrap();
        let Some(Value::Buffer(b)) = v.get("data") else { panic!("{v:?}") };
        assert_eq!((b.dtype(), b.shape()), (&Dtype::U8, &[4usize, 5, 3][..]));
        assert_eq!(header_stamp(&v), Some(12_000_000_034));
        assert_eq!(v.get("encoding").and_then(Value::as_str), Some("rgb8"));
        let back = Image::from_value(v).unwrap();
        assert_eq!(back, image());
    }

    #[test]
    fn image_from_an_array_and_a_little_metadata() {
        let b = Buffer::from_vec((0..60u8).collect()).with_shape(&[4, 5, 3]).unwrap();
        let v = Value::Map(vec![
            (
                "header".into(),
                Value::Map(vec![
                    ("frame_id".into(), Value::Str("cam".into())),
                    (
                        "stamp".into(),
                        Value::Map(vec![("sec".into(), Value::Int(12)), ("nanosec".into(), Value::UInt(34))]),
                    ),
                ]),
            ),
            ("data".into(), Value::Buffer(b)),
        ]);
        assert_eq!(Image::from_value(v).unwrap(), image());
        let bad = Value::Map(vec![
            ("height".into(), Value::UInt(3)),
            ("data".into(), Value::Buffer(Buffer::from_vec(vec![0; 60]).with_shape(&[4, 5, 3]).unwrap())),
        ]);
        let e = Image::from_value(bad).unwrap_err().to_string();
        assert!(e.contains("data holds 60 bytes, height 3 x step 15 needs 45"), "{e}");
        let e = Image::from_value(Value::Map(vec![("hieght".into(), Value::UInt(3))])).unwrap_err().to_string();
        assert!(e.contains("\"hieght\" is not a field"), "{e}");
    }

    #[test]
    fn point_cloud_is_points_by_fields() {
        let field = |name: &str, offset| PointField { name: name.into(), offset, datatype: 7, count: 1 };
        let cloud = PointCloud2 {
            height: 1,
            width: 3,
            fields: vec![field("x", 0), field("y", 4), field("z", 8)],
            point_step: 16,
            row_step: 48,
            data: (0..48u8).collect(),
            is_dense: true,
            ..Default::default()
        };
        assert_eq!(cloud_layout(&cloud, 48), (Dtype::F32, vec![1, 3, 4]));
        let v = cloud.clone().to_value().unwrap();
        assert_eq!(PointCloud2::from_value(v).unwrap(), cloud);
        // Mixed field types: bytes by row.
        let mut mixed = cloud.clone();
        mixed.fields[2].datatype = 2;
        assert_eq!(cloud_layout(&mixed, 48), (Dtype::U8, vec![1, 48]));
    }

    #[test]
    fn multiarray_shape_from_layout_and_back() {
        use r2r::std_msgs::msg::{Float32MultiArray, MultiArrayDimension};
        let mut m = Float32MultiArray::default();
        m.layout.dim = vec![
            MultiArrayDimension { label: "rows".into(), size: 2, stride: 6 },
            MultiArrayDimension { label: "cols".into(), size: 3, stride: 3 },
        ];
        m.data = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let v = m.clone().to_value().unwrap();
        let Some(Value::Buffer(b)) = v.get("data") else { panic!() };
        assert_eq!((b.dtype(), b.shape()), (&Dtype::F32, &[2usize, 3][..]));
        assert_eq!(Float32MultiArray::from_value(v).unwrap(), m);
        // An array alone: layout from its shape.
        let only = Value::Map(vec![(
            "data".into(),
            Value::Buffer(Buffer::from_elements(m.data.clone()).with_shape(&[2, 3]).unwrap()),
        )]);
        let back = Float32MultiArray::from_value(only).unwrap();
        assert_eq!(back.layout.dim.iter().map(|d| (d.size, d.stride)).collect::<Vec<_>>(), vec![(2, 6), (3, 3)]);
        let wrong = Value::Map(vec![("data".into(), Value::Buffer(Buffer::from_elements(vec![1.0f64])))]);
        assert!(Float32MultiArray::from_value(wrong).unwrap_err().to_string().contains("<f8, the message needs <f4"));
    }

    #[test]
    fn plain_messages_field_by_field() {
        use r2r::geometry_msgs::msg::Twist;
        let mut t = Twist::default();
        t.linear.x = 1.5;
        t.angular.z = -0.25;
        let v = t.clone().to_value().unwrap();
        assert_eq!(v.get("linear").and_then(|l| l.get("x")), Some(&Value::Float(1.5)));
        assert_eq!(Twist::from_value(v).unwrap(), t);
        // Integers where floats are expected, and fields left out.
        let partial = Value::Map(vec![("linear".into(), Value::Map(vec![("x".into(), Value::Int(2))]))]);
        assert_eq!(Twist::from_value(partial).unwrap().linear.x, 2.0);
        let imu = r2r::sensor_msgs::msg::Imu { orientation_covariance: vec![0.5; 9], ..Default::default() };
        let v = imu.clone().to_value().unwrap();
        let Some(Value::Buffer(c)) = v.get("orientation_covariance") else { panic!("{v:?}") };
        assert_eq!(c.as_slice::<f64>(), Some(&[0.5; 9][..]));
        assert_eq!(r2r::sensor_msgs::msg::Imu::from_value(v).unwrap(), imu);
    }

    /// A loaner without a store: small data stays in-band.
    fn inband() -> Loaner {
        Loaner { encoder: Encoder::default(), deliveries: 1, ready: Some(std::sync::Arc::new(|| true)) }
    }

    /// `msg` read from its native (C) form, as received from ROS, and
    /// checked against the typed conversion: same fields, dtypes, shapes and
    /// bytes.
    fn native<T: Bridged>(msg: &T, loaner: &Loaner) -> Value {
        let c = r2r::NativeMsg::<T>::from(msg);
        let v = T::native_to_value(&c, loaner).unwrap_or_else(|e| panic!("{}: {e}", T::NAME));
        assert_eq!(v, msg.clone().to_value().unwrap(), "{}", T::NAME);
        v
    }

    fn data(v: &Value) -> &Buffer {
        match v.get("data") {
            Some(Value::Buffer(b)) => b,
            other => panic!("data is {other:?}"),
        }
    }

    type NativeCase = (&'static str, (Dtype, Vec<usize>), Box<dyn Fn(&Loaner) -> Value>);

    /// A message of every type read natively, with at least `nbytes` of
    /// data, and the dtype and shape its data takes.
    fn every_native_type(nbytes: usize) -> Vec<NativeCase> {
        use r2r::std_msgs::msg as st;
        fn case<T: Bridged>(msg: T, dtype: Dtype, shape: Vec<usize>) -> NativeCase {
            (T::NAME, (dtype, shape), Box::new(move |loaner: &Loaner| native(&msg, loaner)))
        }
        let side = (nbytes as f64 / 3.0).sqrt().ceil() as u32;
        let mut img =
            Image { height: side, width: side, encoding: "rgb8".into(), step: 3 * side, ..Default::default() };
        img.header.frame_id = "cam".into();
        img.data = (0..img.height * img.step).map(|i| (i % 251) as u8).collect();
        let jpeg = r2r::sensor_msgs::msg::CompressedImage {
            format: "jpeg".into(),
            data: (0..nbytes).map(|i| (i % 253) as u8).collect(),
            ..Default::default()
        };
        let points = nbytes.div_ceil(16) as u32;
        let field = |name: &str, offset| PointField { name: name.into(), offset, datatype: 7, count: 1 };
        let cloud = PointCloud2 {
            height: 1,
            width: points,
            fields: vec![field("x", 0), field("y", 4), field("z", 8)],
            point_step: 16,
            row_step: 16 * points,
            data: (0..16 * points).map(|i| (i % 241) as u8).collect(),
            is_dense: true,
            ..Default::default()
        };
        let mut cases = vec![
            case(img, Dtype::U8, vec![side as usize, side as usize, 3]),
            case(jpeg, Dtype::U8, vec![nbytes]),
            case(cloud, Dtype::F32, vec![1, points as usize, 4]),
        ];
        macro_rules! arrays {
            ($($msg:ident($t:ty)),*) => {$({
                let n = (nbytes / std::mem::size_of::<$t>()).div_ceil(4) * 4;
                let mut m = st::$msg::default();
                m.layout.dim = vec![
                    st::MultiArrayDimension { label: "rows".into(), size: 4, stride: n as u32 },
                    st::MultiArrayDimension { label: "cols".into(), size: (n / 4) as u32, stride: (n / 4) as u32 },
                ];
                m.data = (0..n).map(|i| (i % 120) as $t).collect();
                cases.push(case(m, <$t as Element>::DTYPE, vec![4, n / 4]));
            })*};
        }
        arrays!(
            Float32MultiArray(f32),
            Float64MultiArray(f64),
            Int8MultiArray(i8),
            Int16MultiArray(i16),
            Int32MultiArray(i32),
            Int64MultiArray(i64),
            UInt8MultiArray(u8),
            UInt16MultiArray(u16),
            UInt32MultiArray(u32),
            UInt64MultiArray(u64),
            ByteMultiArray(u8)
        );
        cases
    }

    #[test]
    fn native_reading_matches_the_typed_conversion() {
        let cases = every_native_type(600);
        assert_eq!(cases.len(), 14);
        for (name, (dtype, shape), convert) in cases {
            let v = convert(&inband());
            let b = data(&v);
            assert_eq!((b.dtype(), b.shape()), (&dtype, &shape[..]), "{name}");
            assert!(!b.is_shared(), "{name}: under the threshold, in-band");
        }
        // The odd cloud: bytes by row, as the typed path gives.
        let mut mixed = PointCloud2 {
            height: 2,
            width: 2,
            point_step: 5,
            row_step: 10,
            data: (0..20).collect(),
            ..Default::default()
        };
        mixed.fields = vec![
            PointField { name: "x".into(), offset: 0, datatype: 7, count: 1 },
            PointField { name: "i".into(), offset: 4, datatype: 2, count: 1 },
        ];
        let b = data(&native(&mixed, &inband())).clone();
        assert_eq!((b.dtype(), b.shape()), (&Dtype::U8, &[2usize, 10][..]));
        // A layout that does not describe the data: one dimension.
        let mut flat = r2r::std_msgs::msg::UInt16MultiArray { data: vec![1, 2, 3], ..Default::default() };
        flat.layout.data_offset = 1;
        let b = data(&native(&flat, &inband())).clone();
        assert_eq!((b.dtype(), b.shape()), (&Dtype::U16, &[3usize][..]));
        let empty = native(&r2r::std_msgs::msg::Float64MultiArray::default(), &inband());
        assert!(data(&empty).is_empty());
    }

    /// A real `hprm-store` daemon ($HPRM_STORE_BIN, else the one on PATH:
    /// test.sh installs the hprm SDK, daemons included, into the venv it
    /// puts first on PATH), killed when dropped.
    struct Store {
        child: std::process::Child,
        socket: std::path::PathBuf,
        _dir: tempfile::TempDir,
    }

    impl Store {
        fn start() -> Store {
            let bin = std::env::var_os("HPRM_STORE_BIN")
                .map(std::path::PathBuf::from)
                .or_else(|| std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join("hprm-store")).find(|p| p.is_file()))
                .expect("hprm-store is not on PATH: run ros2-bridge/test.sh (it installs the hprm SDK and its daemons into the venv), or set HPRM_STORE_BIN");
            let dir = tempfile::tempdir().unwrap();
            let socket = dir.path().join("store.sock");
            let child = std::process::Command::new(&bin)
                .arg("--socket")
                .arg(&socket)
                .args(["--memory", "64M"])
                .env("RUST_LOG", "warn")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let mut store = Store { child, socket, _dir: dir };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while std::os::unix::net::UnixStream::connect(&store.socket).is_err() {
                assert!(store.child.try_wait().unwrap().is_none(), "{} exited at start", bin.display());
                assert!(
                    std::time::Instant::now() < deadline,
                    "{} did not accept connections within 30 s",
                    bin.display()
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            store
        }
    }

    impl Drop for Store {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[test]
    fn bulk_data_is_copied_once_into_the_store() {
        use hprm_node::payload::{Decoder, StoreLink, DEFAULT_GET_TIMEOUT, DEFAULT_THRESHOLD};
        let store = Store::start();
        let admin = hprm_store::StoreClient::connect(&store.socket).unwrap();
        let encoder = Encoder::new(StoreLink::new(Some(store.socket.clone())), DEFAULT_THRESHOLD);
        let loaner = Loaner { encoder: encoder.clone(), deliveries: 1, ready: Some(std::sync::Arc::new(|| true)) };
        let decoder = Decoder::new(StoreLink::new(Some(store.socket.clone())), DEFAULT_GET_TIMEOUT);
        // Nothing evicts in this test: the store holds every object made.
        // Seals travel one-way (store protocol 2): wait until the daemon
        // lists what it was sent, then check that nothing more arrives.
        let objects = |expect: usize| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let n = admin.list().unwrap().len();
                if n >= expect || std::time::Instant::now() > deadline {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    return admin.list().unwrap().len();
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        for (name, (dtype, shape), convert) in every_native_type(DEFAULT_THRESHOLD) {
            let before = objects(0);
            // The one copy: native message -> a store object loaned for
            // the port's receivers.
            let v = convert(&loaner);
            let b = data(&v);
            let id = b.object_id().unwrap_or_else(|| panic!("{name}: the data is not a store object"));
            assert_eq!((b.dtype(), b.shape()), (&dtype, &shape[..]), "{name}");
            assert_eq!(objects(before + 1), before + 1, "{name}");
            // None after: the message refers to that object.
            let payload = encoder.encode(&v, 1).unwrap();
            assert_eq!(Decoder::references(&payload).unwrap(), vec![id], "{name}");
            assert_eq!(objects(before + 1), before + 1, "{name}: the encoder copied the data");
            let received: Value = decoder.decode(&payload).unwrap();
            assert_eq!(received, v, "{name}");
        }
    }

    #[test]
    fn knows_its_types() {
        for name in TYPED {
            assert!(support(name).is_some(), "{name}");
        }
        assert!(support("no_such_msgs/msg/Nothing").is_none());
    }
}
