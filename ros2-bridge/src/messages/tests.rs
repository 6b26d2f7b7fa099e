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
                ("stamp".into(), Value::Map(vec![("sec".into(), Value::Int(12)), ("nanosec".into(), Value::UInt(34))])),
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
    let mut img = Image { height: side, width: side, encoding: "rgb8".into(), step: 3 * side, ..Default::default() };
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
    let mut mixed =
        PointCloud2 { height: 2, width: 2, point_step: 5, row_step: 10, data: (0..20).collect(), ..Default::default() };
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
            assert!(std::time::Instant::now() < deadline, "{} did not accept connections within 30 s", bin.display());
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

/// A message's CDR bytes (what a recording holds) convert to exactly the
/// value the deserializing subscription gives (what an unrecorded run
/// sends), on the typed and the generic path alike.
#[test]
fn cdr_bytes_convert_as_a_received_message() {
    use r2r::sensor_msgs::msg::{Imu, Range};
    let mut imu = Imu::default();
    imu.header.frame_id = "imu".into();
    imu.angular_velocity.x = 0.25;
    imu.orientation_covariance = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0].to_vec();
    let bytes = imu.to_serialized_bytes().unwrap();
    assert_eq!(&bytes[..2], &[0, 1], "a little-endian CDR encapsulation header");
    let v = support("sensor_msgs/msg/Imu").unwrap().decode_cdr(&bytes).unwrap();
    assert_eq!(v, imu.clone().to_value().unwrap());
    let image = image();
    let v = support(Image::NAME).unwrap().decode_cdr(&image.to_serialized_bytes().unwrap()).unwrap();
    assert_eq!(v, image.to_value().unwrap());
    // Range has no struct of the bridge's: the generic (JSON) path.
    assert!(!TYPED.contains(&"sensor_msgs/msg/Range"));
    let range = Range { range: 1.5, max_range: 4.0, ..Default::default() };
    let untyped = support("sensor_msgs/msg/Range").unwrap();
    assert_eq!(untyped.type_name(), "sensor_msgs/msg/Range");
    let v = untyped.decode_cdr(&range.to_serialized_bytes().unwrap()).unwrap();
    assert_eq!(v, json_to_value(serde_json::to_value(&range).unwrap()));
    let e = untyped.decode_cdr(&[0, 1, 0, 0, 7]).unwrap_err().to_string();
    assert!(e.contains("sensor_msgs/msg/Range") && e.contains("CDR"), "{e}");
}
