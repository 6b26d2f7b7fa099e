//! `#[serde(with = "hprm_node::payload::oob")]` for `Vec<T>` fields of
//! [`Element`]s (`Vec<u8>`, `Vec<f32>`, ...): such a field travels as a
//! buffer, so it goes out-of-band when large, exactly like a [`Buffer`]
//! field, and is readable as a numpy array from Python.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Scan {
//!     #[serde(with = "hprm_node::payload::oob")]
//!     ranges: Vec<f32>,
//!     stamp: u64,
//! }
//! ```
//!
//! The receiving side copies the bytes into the `Vec` (a `Vec` owns its
//! memory; it cannot be a view of shared memory). Where that copy matters,
//! declare the field as [`Buffer`], the zero-copy type. A received buffer
//! of any shape is accepted (flattened in C order); one of another dtype is
//! an error naming both. In human-readable formats (JSON) the field is a
//! plain list.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::buffer::View;
use super::{Buffer, Element, PayloadError};

/// Serializes `elements` as a one-dimensional buffer.
pub fn serialize<T: Element, S: Serializer>(elements: &[T], s: S) -> Result<S::Ok, S::Error> {
    if s.is_human_readable() {
        return elements.serialize(s);
    }
    let dtype = T::DTYPE;
    View { dtype: &dtype, shape: &[elements.len()], bytes: bytemuck::cast_slice(elements), data: None }.serialize(s)
}

/// Deserializes a buffer of `T`s into a `Vec` (a copy).
pub fn deserialize<'de, T: Element, D: Deserializer<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    if d.is_human_readable() {
        return Vec::<T>::deserialize(d);
    }
    let buffer = Buffer::deserialize(d)?;
    buffer.to_vec::<T>().ok_or_else(|| {
        let e = PayloadError::DtypeMismatch { expected: T::DTYPE.to_string(), found: buffer.dtype().to_string() };
        serde::de::Error::custom(e)
    })
}
