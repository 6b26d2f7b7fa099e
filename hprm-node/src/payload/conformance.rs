//! A reference value for checking other implementations of the wire format
//! against this one: the Python SDK's tests have Rust encode [`Sample`] and
//! check what Python decodes, and have Python encode the same value as a
//! dict and check that Rust decodes it into an equal [`Sample`]. Not an API
//! for programs (hence hidden from the docs); it lives here so that the
//! Rust and Python test suites share one definition.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{oob, Buffer};

/// Every kind of field a port value has: scalars, text, a large buffer (out
/// of band at the default threshold), a small one (inline), an `oob` vector,
/// lists, a tuple, a map, an option, raw bytes, and a large byte string.
/// [`Sample::new`] gives the reference contents; the field docs say what
/// they are, so a Python test can build the same value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// 42
    pub seq: u64,
    /// "rust"
    pub name: String,
    /// 1.5
    pub gain: f32,
    /// 480 x 640 of `|u1`, byte `i` (C order) = `i % 251` (300 KiB).
    pub pixels: Buffer,
    /// 4 x 4 of `<f4`, element `i` = `i / 2`.
    pub depth: Buffer,
    /// `[0.5, 1.5, 2.5]`, as a buffer of `<f8`.
    #[serde(with = "oob")]
    pub ranges: Vec<f64>,
    /// `["a", "b"]`
    pub tags: Vec<String>,
    /// `(1.0, -2.0, 0.5)`
    pub pose: (f64, f64, f64),
    /// `{"hi": 2^40, "lo": -5}`
    pub limits: BTreeMap<String, i64>,
    /// None
    pub note: Option<String>,
    /// The bytes `00 01 ff` (MessagePack bin).
    #[serde(with = "serde_bytes")]
    pub blob: Vec<u8>,
    /// 100 000 bytes, byte `i` = `(7 * i) % 256`, one dimension of `|u1`
    /// (Python sends it as `bytes`: ext 4).
    pub raw: Buffer,
}

impl Sample {
    /// The reference contents.
    pub fn new() -> Sample {
        let pixels = (0..480 * 640).map(|i| (i % 251) as u8).collect();
        let depth: Vec<f32> = (0..16).map(|i| i as f32 / 2.0).collect();
        let raw = (0..100_000u32).map(|i| ((7 * i) % 256) as u8).collect();
        Sample {
            seq: 42,
            name: "rust".into(),
            gain: 1.5,
            pixels: Buffer::from_vec(pixels).with_shape(&[480, 640]).expect("480 x 640 bytes"),
            depth: Buffer::from_elements(depth).with_shape(&[4, 4]).expect("16 elements"),
            ranges: vec![0.5, 1.5, 2.5],
            tags: vec!["a".into(), "b".into()],
            pose: (1.0, -2.0, 0.5),
            limits: [("hi".to_owned(), 1i64 << 40), ("lo".to_owned(), -5)].into(),
            note: None,
            blob: vec![0, 1, 0xff],
            raw: Buffer::from_vec(raw),
        }
    }
}

impl Default for Sample {
    fn default() -> Sample {
        Sample::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{Decoder, Encoder, StoreLink};

    #[test]
    fn sample_round_trips_in_band() {
        // A threshold over every buffer: no store needed, but a message
        // this large needs one to spill into, so lift the in-band limit.
        let encoder = Encoder::new(StoreLink::none(), usize::MAX).with_max_inline(usize::MAX);
        let bytes = encoder.encode(&Sample::new(), 1).unwrap();
        assert_eq!(Decoder::default().decode::<Sample>(&bytes).unwrap(), Sample::new());
    }
}
