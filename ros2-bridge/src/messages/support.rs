//! How the bridge carries a message type on an r2r node: [`MessageSupport`]
//! and [`Bridged`], the typed (r2r struct) and untyped (JSON) paths, and
//! [`support`], which picks one by ROS name.

use super::*;

use std::sync::Arc;

/// A future driven by the bridge's ROS thread.
pub type LocalTask = Pin<Box<dyn Future<Output = ()> + Send>>;
/// Where received messages go.
pub type Sink = Box<dyn FnMut(Result<Value, ConvertError>) + Send>;
/// Where received messages go as ROS serialized them (CDR, its 4-byte
/// encapsulation header first).
pub type RawSink = Box<dyn FnMut(Vec<u8>) + Send>;

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

    /// The ROS name of the type (`pkg/msg/Name`).
    fn type_name(&self) -> &str;

    /// A message as ROS serialized it (what [`subscribe_raw`] gives) to the
    /// value [`MessageSupport::subscribe`] gives for it, without a
    /// [`Loaner`]: deserialized by ROS (rmw) into the same message, then
    /// converted by the same code.
    fn decode_cdr(&self, bytes: &[u8]) -> Result<Value, ConvertError>;
}

/// Subscribes on `node` to `topic` of type `type_name` without
/// deserializing: `sink` gets each message's CDR bytes (rosbag2's way).
pub fn subscribe_raw(
    node: &mut r2r::Node,
    topic: &str,
    type_name: &str,
    qos: QosProfile,
    mut sink: RawSink,
) -> Result<LocalTask, r2r::Error> {
    let stream = node.subscribe_raw(topic, type_name, qos)?;
    Ok(Box::pin(stream.for_each(move |bytes| {
        sink(bytes);
        std::future::ready(())
    })))
}

fn deserialize_error(name: &str, e: r2r::Error) -> ConvertError {
    ConvertError::Ros(format!("deserializing a {name} from its CDR bytes: {e}"))
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

/// A type with a Rust struct.
pub(super) struct Typed<T>(PhantomData<fn() -> T>);

/// Publishes through r2r's typed publisher.
pub(super) struct TypedPublisher<T: WrappedTypesupport>(r2r::Publisher<T>);

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

    fn type_name(&self) -> &str {
        T::NAME
    }

    fn decode_cdr(&self, bytes: &[u8]) -> Result<Value, ConvertError> {
        T::from_serialized_bytes(bytes).map_err(|e| deserialize_error(T::NAME, e))?.to_value()
    }
}

/// A future built on one thread and then polled only by the ROS thread it
/// is moved to once, before its first poll.
pub(super) struct MovedOnce<F>(F);

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
pub(super) struct Untyped(String);

pub(super) struct UntypedPublisher(r2r::PublisherUntyped, String);

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

    fn type_name(&self) -> &str {
        &self.0
    }

    fn decode_cdr(&self, bytes: &[u8]) -> Result<Value, ConvertError> {
        let mut msg = r2r::WrappedNativeMsgUntyped::new_from(&self.0).map_err(|e| deserialize_error(&self.0, e))?;
        msg.from_serialized_bytes(bytes).map_err(|e| deserialize_error(&self.0, e))?;
        // As r2r's untyped subscription converts what it takes.
        msg.to_json().map(json_to_value).map_err(|e| ConvertError::Ros(format!("receiving {}: {e}", self.0)))
    }
}

/// Every type with a Rust struct, by ROS name.
macro_rules! typed_table {
    ($($t:ty),* $(,)?) => {
        fn typed(name: &str) -> Option<Arc<dyn MessageSupport>> {
            $(if name == <$t as Bridged>::NAME {
                return Some(Arc::new(Typed::<$t>(PhantomData)));
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
pub fn support(name: &str) -> Option<Arc<dyn MessageSupport>> {
    typed(name).or_else(|| {
        r2r::WrappedNativeMsgUntyped::new_from(name)
            .ok()
            .map(|_| Arc::new(Untyped(name.to_string())) as Arc<dyn MessageSupport>)
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
