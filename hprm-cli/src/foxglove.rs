//! Foxglove views of recorded values: a value that is an image or a point
//! cloud is also written with Foxglove's published schemas
//! (`foxglove.RawImage`, `foxglove.PointCloud`, protobuf), on a channel of
//! its own, so that Foxglove opens the recording and shows it. The value's
//! own channel is untouched (replay and `--check` read only that one).
//!
//! What is shown is recognised by shape, never declared: an array (ext 1,
//! or ext 6 torch tensor) that is the value itself or an entry of a
//! top-level map. `|u1` of shape HxW, HxWx3 or HxWx4 is an image (`mono8`,
//! `rgb8`, `rgba8`); `<f4` of shape Nx3 or Nx4 is a point cloud (`x y z`,
//! or `x y z intensity`). A map may say more about its arrays with two
//! string entries: `encoding` (an image's, e.g. `bgr8` for OpenCV's order,
//! when it has as many channels) and `frame_id`. The view of the value
//! itself is on topic `foxglove/TOPIC`, the view of a map entry on
//! `foxglove/TOPIC/KEY`.
//!
//! The protobuf messages are written here by hand (a few fields, no
//! protobuf library): the field numbers below are those of the schemas,
//! whose FileDescriptorSets (the schema data Foxglove's own writers
//! register) are generated once from PyPI's `foxglove-schemas-protobuf`
//! by `foxglove/regen.py`, which prints the numbers to compare.
//!
//! [`live`]: the same views, and the values themselves, streamed live to
//! Foxglove's app over its WebSocket protocol (`hprm foxglove`).

pub mod live;

use hprm_node::payload::{BufferRef, Dtype, EXT_BUFFER, EXT_TENSOR};
use hprm_store::ObjectId;
use rmpv::ValueRef;

/// The topic of a channel's views: this, then the channel's topic (and
/// `/KEY` for a map entry's).
pub const PREFIX: &str = "foxglove/";
/// Schema and message encoding of the views.
pub const ENCODING: &str = "protobuf";

/// What a view shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Image,
    PointCloud,
}

impl Kind {
    /// The schema's name and data (its FileDescriptorSet).
    pub fn schema(self) -> (&'static str, &'static [u8]) {
        match self {
            Kind::Image => ("foxglove.RawImage", include_bytes!("foxglove/RawImage.fds")),
            Kind::PointCloud => ("foxglove.PointCloud", include_bytes!("foxglove/PointCloud.fds")),
        }
    }
}

/// One view of a value: where it goes (the map key, `None` for the value
/// itself) and its protobuf message.
pub struct View {
    pub key: Option<String>,
    pub kind: Kind,
    pub message: Vec<u8>,
}

/// The views of `value` (one MessagePack value, every buffer inline) at
/// logical time `time` (ns since the epoch); empty when it shows nothing.
pub fn views(value: &[u8], time: i64) -> Vec<View> {
    views_in(value, time, |_| None).0
}

/// The views of `value` at logical time `time`, its buffers in the store
/// read from `store` (the data of the objects the reader holds), and the
/// views that could not be made (their key and kind): images or clouds in
/// store objects `store` does not hold.
pub fn views_in<'a>(
    value: &'a [u8],
    time: i64,
    store: impl Fn(&ObjectId) -> Option<&'a [u8]>,
) -> (Vec<View>, Vec<(Option<String>, Kind)>) {
    let Ok(v) = rmpv::decode::read_value_ref(&mut &value[..]) else { return (Vec::new(), Vec::new()) };
    let (mut out, mut missing) = (Vec::new(), Vec::new());
    let mut shown = |key: Option<&str>, shown: Option<Shown>| match shown {
        Some(Shown::View(kind, message)) => out.push(View { key: key.map(str::to_string), kind, message }),
        Some(Shown::NotHeld(kind)) => missing.push((key.map(str::to_string), kind)),
        None => {}
    };
    match &v {
        ValueRef::Map(entries) => {
            let text = |name: &str| {
                entries.iter().find_map(|(k, v)| match (k, v) {
                    (ValueRef::String(k), ValueRef::String(v)) if k.as_str() == Some(name) => v.as_str(),
                    _ => None,
                })
            };
            let (encoding, frame) = (text("encoding"), text("frame_id").unwrap_or_default());
            for (k, v) in entries {
                if let ValueRef::String(key) = k {
                    let Some(key) = key.as_str() else { continue };
                    shown(Some(key), view(v, time, encoding, frame, &store));
                }
            }
        }
        other => shown(None, view(other, time, None, "", &store)),
    }
    (out, missing)
}

/// What [`view`] made of a value that is an image or a point cloud.
enum Shown {
    View(Kind, Vec<u8>),
    /// Its bytes are in a store object the reader does not hold.
    NotHeld(Kind),
}

/// The view of one value, if it is an image or a point cloud.
fn view<'a>(
    v: &ValueRef<'a>,
    time: i64,
    encoding: Option<&str>,
    frame: &str,
    store: &impl Fn(&ObjectId) -> Option<&'a [u8]>,
) -> Option<Shown> {
    let ValueRef::Ext(ty, data) = v else { return None };
    if !matches!(*ty, EXT_BUFFER | EXT_TENSOR) {
        return None;
    }
    // Borrowed: a value's arrays are not copied unless shown. A strided
    // one (a transposed view) is not C-contiguous: refused, not shown.
    let d = BufferRef::parse(data, store).ok()?;
    if d.dtype == Dtype::U8 {
        let (height, width, channels) = match d.shape[..] {
            [h, w] => (h, w, 1),
            [h, w, c @ (3 | 4)] => (h, w, c),
            _ => return None,
        };
        let Some(bytes) = d.bytes else { return Some(Shown::NotHeld(Kind::Image)) };
        let default = match channels {
            1 => "mono8",
            3 => "rgb8",
            _ => "rgba8",
        };
        let encoding = encoding.filter(|e| channels_of(e) == Some(channels)).unwrap_or(default);
        let image = Image { height: height.try_into().ok()?, width: width.try_into().ok()?, encoding, frame };
        return Some(Shown::View(Kind::Image, image.encode(time, bytes)));
    }
    if d.dtype.as_str() == "<f4" {
        let fields: &[&str] = match d.shape[..] {
            [_, 3] => &["x", "y", "z"],
            [_, 4] => &["x", "y", "z", "intensity"],
            _ => return None,
        };
        let Some(bytes) = d.bytes else { return Some(Shown::NotHeld(Kind::PointCloud)) };
        return Some(Shown::View(Kind::PointCloud, encode_cloud(time, frame, fields, bytes)));
    }
    None
}

/// Channels per pixel of the image encodings a map may name.
fn channels_of(encoding: &str) -> Option<usize> {
    match encoding {
        "mono8" | "8UC1" => Some(1),
        "rgb8" | "bgr8" | "8UC3" => Some(3),
        "rgba8" | "bgra8" | "8UC4" => Some(4),
        _ => None,
    }
}

struct Image<'a> {
    height: u32,
    width: u32,
    encoding: &'a str,
    frame: &'a str,
}

// foxglove.RawImage's fields.
const IMAGE_TIMESTAMP: u32 = 1;
const IMAGE_WIDTH: u32 = 2;
const IMAGE_HEIGHT: u32 = 3;
const IMAGE_ENCODING: u32 = 4;
const IMAGE_STEP: u32 = 5;
const IMAGE_DATA: u32 = 6;
const IMAGE_FRAME_ID: u32 = 7;
// foxglove.PointCloud's, and those of the messages it holds.
const CLOUD_TIMESTAMP: u32 = 1;
const CLOUD_FRAME_ID: u32 = 2;
const CLOUD_POSE: u32 = 3;
const CLOUD_POINT_STRIDE: u32 = 4;
const CLOUD_FIELDS: u32 = 5;
const CLOUD_DATA: u32 = 6;
const POSE_ORIENTATION: u32 = 2;
const QUATERNION_W: u32 = 4;
const FIELD_NAME: u32 = 1;
const FIELD_OFFSET: u32 = 2;
const FIELD_TYPE: u32 = 3;
/// `foxglove.PackedElementField.NumericType.FLOAT32`.
const FLOAT32: u64 = 7;
// google.protobuf.Timestamp's.
const TIMESTAMP_SECONDS: u32 = 1;
const TIMESTAMP_NANOS: u32 = 2;

impl Image<'_> {
    fn encode(&self, time: i64, pixels: &[u8]) -> Vec<u8> {
        let mut out = Protobuf(Vec::with_capacity(pixels.len() + 64));
        out.message(IMAGE_TIMESTAMP, &timestamp(time));
        out.fixed32(IMAGE_WIDTH, self.width);
        out.fixed32(IMAGE_HEIGHT, self.height);
        out.bytes(IMAGE_ENCODING, self.encoding.as_bytes());
        // Rows are packed: the buffer is C-contiguous.
        let step = pixels.len().checked_div(self.height as usize).unwrap_or(0);
        out.fixed32(IMAGE_STEP, u32::try_from(step).unwrap_or(u32::MAX));
        out.bytes(IMAGE_DATA, pixels);
        out.bytes(IMAGE_FRAME_ID, self.frame.as_bytes());
        out.0
    }
}

fn encode_cloud(time: i64, frame: &str, fields: &[&str], points: &[u8]) -> Vec<u8> {
    let mut out = Protobuf(Vec::with_capacity(points.len() + 128));
    out.message(CLOUD_TIMESTAMP, &timestamp(time));
    out.bytes(CLOUD_FRAME_ID, frame.as_bytes());
    // The identity pose: the points are in `frame_id` (an all-zero
    // quaternion, protobuf's default, is no rotation at all).
    let mut orientation = Protobuf(Vec::new());
    orientation.double(QUATERNION_W, 1.0);
    let mut pose = Protobuf(Vec::new());
    pose.message(POSE_ORIENTATION, &orientation.0);
    out.message(CLOUD_POSE, &pose.0);
    out.fixed32(CLOUD_POINT_STRIDE, 4 * fields.len() as u32);
    for (i, name) in fields.iter().enumerate() {
        let mut f = Protobuf(Vec::new());
        f.bytes(FIELD_NAME, name.as_bytes());
        f.fixed32(FIELD_OFFSET, 4 * i as u32);
        f.varint_field(FIELD_TYPE, FLOAT32);
        out.message(CLOUD_FIELDS, &f.0);
    }
    out.bytes(CLOUD_DATA, points);
    out.0
}

/// A `google.protobuf.Timestamp` of `time` ns since the epoch.
fn timestamp(time: i64) -> Vec<u8> {
    let mut t = Protobuf(Vec::new());
    t.varint_field(TIMESTAMP_SECONDS, time.div_euclid(1_000_000_000) as u64);
    t.varint_field(TIMESTAMP_NANOS, time.rem_euclid(1_000_000_000) as u64);
    t.0
}

/// Protobuf's wire format, the little of it these messages use.
struct Protobuf(Vec<u8>);

impl Protobuf {
    const VARINT: u32 = 0;
    const FIXED64: u32 = 1;
    const LEN: u32 = 2;
    const FIXED32: u32 = 5;

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u32) {
        self.varint(u64::from(field << 3 | wire));
    }

    fn varint_field(&mut self, field: u32, v: u64) {
        self.key(field, Self::VARINT);
        self.varint(v);
    }

    fn fixed32(&mut self, field: u32, v: u32) {
        self.key(field, Self::FIXED32);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn double(&mut self, field: u32, v: f64) {
        self.key(field, Self::FIXED64);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, Self::LEN);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn message(&mut self, field: u32, m: &[u8]) {
        self.bytes(field, m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hprm_node::payload::{BufferDescriptor, Location};

    #[test]
    fn varints_are_protobufs() {
        let mut p = Protobuf(Vec::new());
        p.varint(300);
        assert_eq!(p.0, [0xac, 0x02]);
        let mut p = Protobuf(Vec::new());
        p.fixed32(2, 640);
        assert_eq!(p.0, [0x15, 0x80, 0x02, 0, 0]);
    }

    /// An array value: ext 1 with its bytes inline.
    fn array(dtype: Dtype, shape: &[usize], strides: Option<Vec<i64>>) -> rmpv::Value {
        let nbytes = shape.iter().product::<usize>() * dtype.itemsize();
        let location = Location::Inline((0..nbytes).map(|i| i as u8).collect());
        let d = BufferDescriptor { dtype, shape: shape.to_vec(), strides, nbytes: nbytes as u64, location };
        rmpv::Value::Ext(EXT_BUFFER, d.encode().expect("a valid descriptor"))
    }

    fn encoded(v: &rmpv::Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).expect("encodes");
        out
    }

    fn shown(v: &rmpv::Value) -> Vec<(Option<String>, Kind)> {
        views(&encoded(v), 0).into_iter().map(|v| (v.key, v.kind)).collect()
    }

    #[test]
    fn images_and_clouds_are_recognised_by_dtype_and_shape() {
        let f4 = || Dtype::parse("<f4").expect("a dtype");
        for shape in [&[4, 6][..], &[4, 6, 3], &[4, 6, 4]] {
            assert_eq!(shown(&array(Dtype::U8, shape, None)), [(None, Kind::Image)], "{shape:?}");
        }
        for shape in [&[5, 3][..], &[5, 4]] {
            assert_eq!(shown(&array(f4(), shape, None)), [(None, Kind::PointCloud)], "{shape:?}");
        }
        // Neither: other shapes and dtypes, plain values.
        for v in [
            array(Dtype::U8, &[24], None),
            array(Dtype::U8, &[4, 6, 2], None),
            array(Dtype::U16, &[4, 6], None),
            array(f4(), &[5, 5], None),
            array(Dtype::F64, &[5, 3], None),
            rmpv::Value::from(3),
        ] {
            assert!(shown(&v).is_empty(), "{v:?}");
        }
        // Not C-contiguous (a transposed view): left out; C strides are fine.
        assert!(shown(&array(Dtype::U8, &[4, 6], Some(vec![1, 4]))).is_empty());
        assert_eq!(shown(&array(Dtype::U8, &[4, 6], Some(vec![6, 1]))).len(), 1);
    }

    #[test]
    fn a_maps_entries_are_shown_each_on_its_key_with_its_encoding() {
        let entry = |k: &str, v: rmpv::Value| (rmpv::Value::from(k), v);
        let map = rmpv::Value::Map(vec![
            entry("n", rmpv::Value::from(1)),
            entry("left", array(Dtype::U8, &[2, 3, 3], None)),
            entry("lidar", array(Dtype::parse("<f4").expect("a dtype"), &[7, 3], None)),
            entry("encoding", rmpv::Value::from("bgr8")),
            entry("frame_id", rmpv::Value::from("cam")),
        ]);
        let v = views(&encoded(&map), 1_500_000_000);
        let keys: Vec<_> = v.iter().map(|v| (v.key.as_deref(), v.kind)).collect();
        assert_eq!(keys, [(Some("left"), Kind::Image), (Some("lidar"), Kind::PointCloud)]);
        let image = &v[0].message;
        let mut expected = Protobuf(Vec::new());
        expected.message(IMAGE_TIMESTAMP, &timestamp(1_500_000_000));
        expected.fixed32(IMAGE_WIDTH, 3);
        expected.fixed32(IMAGE_HEIGHT, 2);
        expected.bytes(IMAGE_ENCODING, b"bgr8");
        expected.fixed32(IMAGE_STEP, 9);
        expected.bytes(IMAGE_DATA, &(0..18).collect::<Vec<u8>>());
        expected.bytes(IMAGE_FRAME_ID, b"cam");
        assert_eq!(image, &expected.0);
        // An encoding of another number of channels is not the image's: the shape decides.
        let gray = rmpv::Value::Map(vec![
            entry("g", array(Dtype::U8, &[2, 3], None)),
            entry("encoding", rmpv::Value::from("bgr8")),
        ]);
        let v = views(&encoded(&gray), 0);
        let mut mono = Protobuf(Vec::new());
        mono.bytes(IMAGE_ENCODING, b"mono8");
        assert!(v[0].message.windows(mono.0.len()).any(|w| w == mono.0), "mono8, not bgr8");
    }

    #[test]
    fn buffers_in_the_store_are_shown_from_the_objects_held_and_counted_when_not_held() {
        let id = ObjectId::random();
        let pixels: Vec<u8> = (0..4 * 6 * 3).map(|i| i as u8).collect();
        let d = BufferDescriptor {
            dtype: Dtype::U8,
            shape: vec![4, 6, 3],
            strides: None,
            nbytes: pixels.len() as u64,
            location: Location::Store(id),
        };
        let value = encoded(&rmpv::Value::Map(vec![(
            rmpv::Value::from("left"),
            rmpv::Value::Ext(EXT_BUFFER, d.encode().expect("a valid descriptor")),
        )]));
        let (shown, missing) = views_in(&value, 0, |wanted| (*wanted == id).then_some(&pixels[..]));
        assert!(missing.is_empty());
        let inline = views(
            &encoded(&rmpv::Value::Map(vec![(rmpv::Value::from("left"), array(Dtype::U8, &[4, 6, 3], None))])),
            0,
        );
        assert_eq!(shown[0].message, inline[0].message, "the same view as for the same bytes inline");
        // Not held: no view, but its key and kind, to count it.
        let (shown, missing) = views_in(&value, 0, |_| None);
        assert!(shown.is_empty());
        assert_eq!(missing, [(Some("left".to_string()), Kind::Image)]);
        // An object that is not the buffer's size is refused, not read.
        let (shown, missing) = views_in(&value, 0, |_| Some(&pixels[1..]));
        assert!(shown.is_empty() && missing.is_empty());
    }

    #[test]
    fn a_timestamp_before_the_epoch_keeps_nanos_positive() {
        let mut expected = Protobuf(Vec::new());
        expected.varint_field(TIMESTAMP_SECONDS, (-1i64) as u64);
        expected.varint_field(TIMESTAMP_NANOS, 999_999_999);
        assert_eq!(timestamp(-1), expected.0);
    }
}
