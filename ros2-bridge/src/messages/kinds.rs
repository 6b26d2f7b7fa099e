//! The message kinds that carry bulk data (images, compressed images, point
//! clouds, laser scans, multi-arrays) and the plain types converted field by
//! field.

use super::*;

/// The bytes of a bulk-data field coming back from HPRM: an array (any
/// dtype, its raw bytes), bytes, or a list of 0..=255.
pub(super) fn bulk_bytes(name: &str, field: &str, v: Option<Value>) -> Result<(Vec<u8>, Option<Buffer>), ConvertError> {
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
pub(super) fn elements<T: Element + DeserializeOwned>(
    name: &str,
    field: &str,
    v: Option<Value>,
) -> Result<Vec<T>, ConvertError> {
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

pub(super) fn set_default(v: &mut Value, key: &str, x: impl FnOnce() -> Option<Value>) {
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
