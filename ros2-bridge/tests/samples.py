"""Test messages, the same on both sides of the bridge.

``make(kind, k)`` is the k-th rclpy message of a kind; ``as_hprm(kind, k)``
what an HPRM Python federate sends for it (an array plus the metadata that
cannot be derived from it); ``plain(msg)`` turns an rclpy message into
dicts and numpy arrays, field by field; ``assert_same`` compares that
with what HPRM received, arrays by their exact bytes.
"""

import array

import numpy as np

KINDS = {
    "string": "std_msgs/msg/String",
    "twist": "geometry_msgs/msg/Twist",
    "image": "sensor_msgs/msg/Image",
    "image_hd": "sensor_msgs/msg/Image",
    "cloud": "sensor_msgs/msg/PointCloud2",
    "imu": "sensor_msgs/msg/Imu",
    "floats": "std_msgs/msg/Float32MultiArray",
    # Bulk data over the store threshold (64 KiB): out-of-band.
    "compressed": "sensor_msgs/msg/CompressedImage",
    "bytes": "std_msgs/msg/UInt8MultiArray",
    "doubles": "std_msgs/msg/Float64MultiArray",
    "shorts": "std_msgs/msg/Int16MultiArray",
    "time": "builtin_interfaces/msg/Time",
    # Not among the bridge's typed messages: the generic path.
    "range": "sensor_msgs/msg/Range",
    # Service requests.
    "setbool": "std_srvs/srv/SetBool",
}

SIZES = {"image": (480, 640), "image_hd": (1080, 1920)}
POINTS = 5000
# Multi-arrays: (element type, shape).
ARRAYS = {"bytes": (np.uint8, (2, 3, 20000)), "doubles": (np.float64, (100, 120)), "shorts": (np.int16, (3, 4))}
JPEG_BYTES = 100_000


def pixels(k, h, w):
    """An rgb8 frame whose every byte depends on k and its position."""
    base = (np.arange(h * w * 3, dtype=np.uint32) * 7 + k * 13) % 251
    return base.astype(np.uint8).reshape(h, w, 3)


def points(k):
    """x, y, z and an unused 4th float32 per point (point_step 16)."""
    return (np.arange(POINTS * 4, dtype=np.float32).reshape(1, POINTS, 4) * 0.5 + k).astype(np.float32)


def series(k, n, dtype):
    """n elements depending on k and their index; the second is k."""
    a = ((np.arange(n, dtype=np.uint32) * 7 + k * 13) % 251).astype(dtype)
    a[1] = k
    return a


def _layout(shape):
    from std_msgs.msg import MultiArrayDimension, MultiArrayLayout

    strides = [int(np.prod(shape[i:])) for i in range(len(shape))]
    return MultiArrayLayout(dim=[MultiArrayDimension(label="", size=n, stride=st) for i, (n, st) in enumerate(zip(shape, strides))])


def _header(k):
    from std_msgs.msg import Header

    h = Header()
    h.frame_id = f"frame{k}"
    h.stamp.sec = 1000 + k
    h.stamp.nanosec = 17 * k
    return h


def make(kind, k):
    """The k-th rclpy message of `kind`."""
    if kind == "string":
        from std_msgs.msg import String

        return String(data=f"hello {k} ünïcode")
    if kind == "twist":
        from geometry_msgs.msg import Twist

        t = Twist()
        t.linear.x, t.linear.y, t.linear.z = k + 0.5, -k * 1.25, 3.0
        t.angular.z = 0.125 * k
        return t
    if kind in SIZES:
        from sensor_msgs.msg import Image

        h, w = SIZES[kind]
        m = Image(header=_header(k), height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3)
        m.data = array.array("B", pixels(k, h, w).tobytes())
        return m
    if kind == "cloud":
        from sensor_msgs.msg import PointCloud2, PointField

        fields = [PointField(name=n, offset=4 * i, datatype=PointField.FLOAT32, count=1) for i, n in enumerate("xyz")]
        m = PointCloud2(header=_header(k), height=1, width=POINTS, fields=fields, is_bigendian=False, point_step=16, row_step=16 * POINTS, is_dense=True)
        m.data = array.array("B", points(k).tobytes())
        return m
    if kind == "imu":
        from sensor_msgs.msg import Imu

        m = Imu(header=_header(k))
        m.orientation.w = 1.0
        m.angular_velocity.x = 0.1 * k
        m.orientation_covariance = [float(i + k) for i in range(9)]
        return m
    if kind == "floats":
        from std_msgs.msg import Float32MultiArray, MultiArrayDimension

        m = Float32MultiArray()
        m.layout.dim = [MultiArrayDimension(label="rows", size=2, stride=6), MultiArrayDimension(label="cols", size=3, stride=3)]
        m.data = [float(i * k) for i in range(6)]
        return m
    if kind == "compressed":
        from sensor_msgs.msg import CompressedImage

        m = CompressedImage(header=_header(k), format="jpeg")
        m.data = array.array("B", series(k, JPEG_BYTES, np.uint8).tobytes())
        return m
    if kind in ARRAYS:
        import std_msgs.msg

        dtype, shape = ARRAYS[kind]
        cls = {"bytes": std_msgs.msg.UInt8MultiArray, "doubles": std_msgs.msg.Float64MultiArray, "shorts": std_msgs.msg.Int16MultiArray}[kind]
        m = cls(layout=_layout(shape))
        m.data = array.array(np.dtype(dtype).char, series(k, int(np.prod(shape)), dtype).tobytes())
        return m
    if kind == "time":
        from builtin_interfaces.msg import Time

        return Time(sec=k, nanosec=k * 1000)
    if kind == "range":
        from sensor_msgs.msg import Range

        return Range(header=_header(k), radiation_type=Range.INFRARED, field_of_view=0.5, min_range=0.25, max_range=4.0, range=0.125 * k)
    if kind == "setbool":
        from std_srvs.srv import SetBool

        return SetBool.Request(data=k % 2 == 1)
    raise ValueError(kind)


def as_hprm(kind, k):
    """What an HPRM federate sends for make(kind, k): arrays, and only the
    metadata the bridge cannot derive from them."""
    if kind in SIZES:
        return {"header": plain(_header(k)), "encoding": "rgb8", "data": pixels(k, *SIZES[kind])}
    if kind == "cloud":
        fields = [{"name": n, "offset": 4 * i, "datatype": 7, "count": 1} for i, n in enumerate("xyz")]
        return {"header": plain(_header(k)), "fields": fields, "is_dense": True, "data": points(k)}
    if kind == "floats":
        return {"data": np.arange(6, dtype=np.float32).reshape(2, 3) * k, "layout": plain(make(kind, k))["layout"]}
    if kind == "compressed":
        return {"header": plain(_header(k)), "format": "jpeg", "data": series(k, JPEG_BYTES, np.uint8)}
    if kind in ARRAYS:
        dtype, shape = ARRAYS[kind]
        # No layout: the bridge writes the array's own (make's labels are empty too).
        return {"data": series(k, int(np.prod(shape)), dtype).reshape(shape)}
    return plain(make(kind, k))


def plain(msg):
    """An rclpy message as dicts, lists, scalars and numpy arrays."""
    if hasattr(msg, "get_fields_and_field_types"):
        return {name: plain(getattr(msg, name)) for name in msg.get_fields_and_field_types()}
    if isinstance(msg, array.array):
        return np.frombuffer(msg.tobytes(), dtype=msg.typecode if msg.typecode != "B" else np.uint8)
    if isinstance(msg, np.ndarray):
        return msg.copy()
    if isinstance(msg, (list, tuple)):
        return [plain(x) for x in msg]
    if isinstance(msg, bytes):
        return np.frombuffer(msg, dtype=np.uint8)
    return msg


def assert_same(expected, got, path="msg"):
    """Field-by-field equality; arrays equal as bytes (the receiver may see
    them shaped and typed: an rgb8 image as (h, w, 3) uint8)."""
    if isinstance(expected, dict):
        assert isinstance(got, dict), f"{path}: expected a dict, got {type(got).__name__}"
        assert set(expected) == set(got), f"{path}: fields {sorted(expected)} != {sorted(got)}"
        for key in expected:
            assert_same(expected[key], got[key], f"{path}.{key}")
    elif isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        e, g = np.ascontiguousarray(expected), np.ascontiguousarray(got)
        if e.dtype != g.dtype and e.size and g.size and e.dtype.itemsize != g.dtype.itemsize and e.dtype.kind == "f" and g.dtype.kind == "f":
            e = e.astype(g.dtype)
        assert e.tobytes() == g.tobytes(), f"{path}: arrays differ ({e.dtype}{list(e.shape)} vs {g.dtype}{list(g.shape)})"
    elif isinstance(expected, list):
        assert isinstance(got, (list, tuple)), f"{path}: expected a list, got {type(got).__name__}"
        assert len(expected) == len(got), f"{path}: {len(expected)} items != {len(got)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            assert_same(e, g, f"{path}[{i}]")
    else:
        assert expected == got and type(expected) in (type(got), int, float) , f"{path}: {expected!r} != {got!r}"
