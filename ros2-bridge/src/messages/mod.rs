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

mod convert;
mod error;
mod kinds;
mod layout;
mod loaner;
mod support;
#[cfg(test)]
mod tests;

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

pub use convert::{json_to_value, plain_from_value, plain_to_value, value_to_json};
pub use error::ConvertError;
pub use layout::{cloud_layout, image_layout, multiarray_shape};
pub use loaner::Loaner;
pub use support::{header_stamp, subscribe_raw, support, Bridged, LocalTask, MessageSupport, ValuePublisher};
// The submodules share one namespace: each reads the others' helpers
// through `super::*`.
use convert::*;
use layout::*;
#[cfg(test)]
use support::TYPED;
