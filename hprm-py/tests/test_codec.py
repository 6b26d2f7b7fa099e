"""The Python codec (hprm._native.Codec) against a real hprm-store: round
trips of every kind of value, buffers in and out of band, zero-copy views
over the store, deliveries, spilled messages, pickles, errors, and the
same bytes read and written by the Rust codec (hprm_node::payload)."""

import collections
import decimal
import gc
import math
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import hprm
from hprm import _native
from support import codecs, settled

Codec = _native.Codec
PayloadError = _native.PayloadError
SharedBuffer = _native.SharedBuffer

THRESHOLD = 65536
MIB = 1 << 20



def same_array(got, sent):
    """Exact equality: type, dtype, shape and every element."""
    assert type(got) is np.ndarray, type(got)
    assert got.dtype == sent.dtype, (got.dtype, sent.dtype)
    assert got.shape == sent.shape, (got.shape, sent.shape)
    assert got.tobytes() == np.ascontiguousarray(sent).tobytes()
    if got.dtype.kind not in "mMV":  # NaT is unequal to itself; void has no ==
        assert np.array_equal(got, sent, equal_nan=got.dtype.kind in "fc")


def bases(obj):
    """obj, obj.base, obj.base.base, ... (numpy arrays and memoryviews)."""
    chain = [obj]
    while True:
        last = chain[-1]
        nxt = last.obj if isinstance(last, memoryview) else getattr(last, "base", None)
        if nxt is None or not isinstance(nxt, (np.ndarray, memoryview, SharedBuffer)):
            return chain + ([nxt] if nxt is not None else [])
        chain.append(nxt)


def shared_buffer_of(obj):
    found = [b for b in bases(obj) if isinstance(b, SharedBuffer)]
    return found[0] if found else None



# ---------------------------------------------------------------------------
# Plain values


SCALARS = [
    None, True, False, 0, 1, -1, 127, 128, 255, 256, -32, -33, -128, -129, 65535, 65536, -32769,
    2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 2**64 - 1,
    0.0, -0.0, 1.5, -2.25e300, float("inf"), float("-inf"), 5e-324,
    "", "x", "héllo wörld ✓", "y" * 31, "z" * 32, "w" * 60000,
    b"", b"\x00\x01\xff", b"b" * 300,
]


@pytest.mark.parametrize("value", SCALARS, ids=lambda v: f"{type(v).__name__}-{str(v)[:12]}")
def test_scalars_round_trip_exactly(value):
    codec = Codec()
    got = codec.decode(codec.encode(value))
    assert type(got) is type(value)
    assert got == value
    if isinstance(value, float):
        assert math.copysign(1, got) == math.copysign(1, value)


def test_nan_and_nested_containers():
    codec = Codec()
    assert math.isnan(codec.decode(codec.encode(float("nan"))))
    value = {"a": [1, [2, [3, {"b": None}]], "c"], "d": {"e": {"f": [True, 1.5, b"x"]}}, "empty": {}, "none": []}
    assert codec.decode(codec.encode(value)) == value


def test_tuples_come_back_as_lists():
    codec = Codec()
    assert codec.decode(codec.encode((1, (2, 3), [4, (5,)]))) == [1, [2, 3], [4, [5]]]


def test_dict_keys_of_every_plain_type_and_others_pickled():
    codec = Codec()
    plain = {"s": 1, 2: "int", -3: "neg", 2**64 - 1: "u64", b"k": 3, True: "t", 1.5: "f", None: "n"}
    got = codec.decode(codec.encode(plain))
    assert got == plain and type(got) is dict
    # Tuple keys are not MessagePack map keys everywhere: the dict is pickled, whole.
    tupled = {(1, 2): "a", "x": np.arange(3)}
    got = codec.decode(codec.encode(tupled))
    assert list(got) == [(1, 2), "x"] and got[(1, 2)] == "a"
    same_array(got["x"], tupled["x"])


Point = collections.namedtuple("Point", "x y")


class Custom:
    def __init__(self, n):
        self.n = n
        self.items = {1, 2, 3}

    def __eq__(self, other):
        return type(other) is Custom and (self.n, self.items) == (other.n, other.items)


@pytest.mark.parametrize(
    "value",
    [2**64, -(2**63) - 1, 10**40, {1, 2}, frozenset("ab"), 1 + 2j, decimal.Decimal("1.1"), Point(1, 2), Custom(5),
     collections.OrderedDict(a=1), "\ud800 lone surrogate", range(3)],
    ids=lambda v: type(v).__name__,
)
def test_other_values_are_pickled_and_keep_their_type(value):
    codec = Codec()
    data = codec.encode(value)
    assert b"\x80\x05" in data, "a pickle (protocol 5) inside an ext 3"
    got = codec.decode(data)
    assert type(got) is type(value)
    assert got == value


def test_numpy_scalars_become_plain_numbers():
    codec = Codec()
    for value, expected in [(np.float64(1.25), 1.25), (np.float32(1.5), 1.5), (np.float16(-2.0), -2.0), (np.int8(-5), -5),
                            (np.uint64(2**64 - 1), 2**64 - 1), (np.int64(-(2**63)), -(2**63)), (np.bool_(True), True),
                            (np.str_("té"), "té"), (np.bytes_(b"ab"), b"ab")]:
        got = codec.decode(codec.encode(value))
        assert got == expected and type(got) is type(expected), (value, got)
    # Others keep their numpy type through pickle.
    for value in [np.complex64(1 + 2j), np.datetime64("2024-01-02T03:04:05", "ns"), np.longdouble(1) / 3]:
        got = codec.decode(codec.encode(value))
        assert type(got) is type(value) and got == value


# ---------------------------------------------------------------------------
# numpy arrays

DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128", "longdouble",
    "datetime64[ns]", "datetime64[D]", "timedelta64[s]", ">i4", ">f8", "S5", "U3", "V4",
]


def sample(dtype, n):
    dtype = np.dtype(dtype)
    raw = np.random.default_rng(7).integers(0, 256, n * dtype.itemsize, dtype=np.uint8)
    a = raw.view(dtype) if dtype.kind not in "bfcSUV" else None
    if dtype.kind == "b":
        a = (raw[:n] & 1).astype(bool)
    elif dtype.kind in "fc":
        a = (np.arange(n) * 0.37 - 5).astype(dtype)
        if dtype.kind == "c":
            a = a + 1j * a[::-1]
    elif dtype.kind == "S":
        a = np.array([b"ab%d" % (i % 100) for i in range(n)], dtype=dtype)
    elif dtype.kind == "U":
        a = np.array(["é%d" % (i % 100) for i in range(n)], dtype=dtype)
    elif dtype.kind == "V":
        a = raw.view(dtype)
    return a


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_plain_dtype_round_trips_and_rust_reads_it(store, dtype, size):
    sender, receiver = codecs(store)
    n = 10 if size == "small" else (2 * THRESHOLD) // np.dtype(dtype).itemsize + 3
    sent = sample(dtype, n)
    data = sender.encode(sent)
    assert len(sender.store_objects()) == (0 if size == "small" else 1)
    got = receiver.decode(data)
    same_array(got, sent)
    assert got.flags.writeable == (size == "small"), "inline: private copy; stored: read-only view"
    # A Rust Buffer reads the same dtype string and bytes.
    rust_dtype, shape, raw, shared = _native._rust_decode_buffer(sender.encode(sent), store.socket)
    assert np.dtype(rust_dtype) == sent.dtype and tuple(shape) == sent.shape
    assert raw == sent.tobytes()
    assert shared == (size == "large")


@pytest.mark.parametrize("size", ["small", "large"])
def test_structured_and_record_arrays_round_trip_through_pickle(store, size):
    sender, receiver = codecs(store)
    point = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("rgb", "u1", (3,)), ("label", "U4")], align=True)
    n = 4 if size == "small" else 20000  # 20000 * 32 bytes = 640 KB
    cloud = np.zeros(n, dtype=point)
    cloud["x"] = np.arange(n)
    cloud["rgb"][:, 1] = 7
    cloud["label"] = "car"
    got = receiver.decode(sender.encode(cloud))
    assert got.dtype == cloud.dtype and got.dtype.isalignedstruct and got.shape == cloud.shape
    assert got.tobytes() == cloud.tobytes()
    if size == "large":
        # Its data went out-of-band, and is read in place.
        [obj] = sender.store_objects()
        assert obj["size"] == cloud.nbytes
        assert not got.flags.writeable and shared_buffer_of(got) is not None
    rec = cloud[:3].view(np.recarray)
    got = receiver.decode(sender.encode(rec))
    assert type(got) is np.recarray and got.dtype == rec.dtype and np.array_equal(got.x, rec.x)
    # Rust cannot read a pickle, and says so.
    with pytest.raises(PayloadError, match="can only be read by Python federates"):
        _native._rust_decode_buffer(sender.encode(cloud), store.socket)


@pytest.mark.parametrize("size", ["small", "large"])
def test_shapes_and_layouts(store, size):
    sender, receiver = codecs(store)
    k = 1 if size == "small" else 40
    base = np.arange(60 * k * 90, dtype=np.float64).reshape(60 * k, 90)
    arrays = {
        "zero_d": np.array(3.5),
        "empty": np.zeros((0,), np.int32),
        "empty_3d": np.zeros((3, 0, 2), np.float32),
        "fortran": np.asfortranarray(base),
        "strided": base[::2, ::3],
        "reversed": base[::-1],
        "transposed": base.T,
        "column": base[:, 5],
    }
    got = receiver.decode(sender.encode(arrays))
    for name, sent in arrays.items():
        same_array(got[name], sent)
        assert got[name].flags.c_contiguous, name


@pytest.mark.parametrize("threshold, nbytes", [(4096, 4095), (4096, 4096), (THRESHOLD, MIB), (THRESHOLD, 10 * MIB)])
def test_threshold_decides_inline_or_store(store, threshold, nbytes):
    sender, receiver = codecs(store, threshold=threshold)
    sent = np.frombuffer(np.random.default_rng(1).bytes(nbytes), dtype=np.uint8)
    data = sender.encode({"img": sent, "stamp": 7})
    objects = sender.store_objects()
    if nbytes < threshold:
        assert objects == [] and len(data) > nbytes
    else:
        assert [o["size"] for o in objects] == [nbytes] and len(data) < 100
    got = receiver.decode(data)
    same_array(got["img"], sent)
    assert got["stamp"] == 7


def test_threshold_is_configurable():
    small = np.ones(100, np.uint8)
    with pytest.raises(PayloadError, match="threshold"):
        Codec(threshold=100).encode(small)
    assert Codec(threshold=101).decode(Codec(threshold=101).encode(small)).tobytes() == small.tobytes()


def test_large_arrays_are_zero_copy_views_of_the_store(store, eventually):
    sender, receiver = codecs(store)
    sent = np.arange(MIB, dtype=np.float32).reshape(1024, 1024)
    got = receiver.decode(sender.encode(sent))
    same_array(got, sent)
    assert not got.flags.writeable
    with pytest.raises(ValueError):
        got[0, 0] = 1
    with pytest.raises(ValueError):
        got.flags.writeable = True
    view = shared_buffer_of(got)
    assert view is not None, bases(got)
    [obj] = sender.store_objects()
    assert view.object_id == obj["id"] and view.nbytes == sent.nbytes == obj["size"]
    # The public helper finds the same object, through a slice too; a
    # private array lies in none.
    assert hprm.store_object_id(got) == hprm.store_object_id(got[3:, ::2]) == obj["id"]
    assert hprm.store_object_id(sent) is None
    # The data pointer is inside the store's shared mapping: the memfd arena.
    address = got.__array_interface__["data"][0]
    start, end = view.mapping
    assert start <= address and address + got.nbytes <= end and address == view.address
    with open("/proc/self/maps") as maps:
        mapped = [line for line in maps if line.split()[0] == f"{start:x}-{end:x}"]
    assert len(mapped) == 1 and "memfd:" in mapped[0] and mapped[0].split()[1].endswith("s"), mapped
    # Views share the buffer; the reference goes when the last one does.
    part = got[10:20]
    del got, view
    gc.collect()
    eventually(lambda: sender.store_objects()[0]["ref_count"] == 1, what="the claim landed")
    assert sender.store_objects()[0]["ref_count"] == 1
    del part
    gc.collect()
    assert settled(sender, eventually) == [], "the last view released it: its delivery settled, it is freed"


def test_copy_gives_private_writable_arrays_and_releases_at_once(store, eventually):
    sender, receiver = codecs(store)
    sent = {"img": np.ones((512, 512), np.float64), "raw": b"r" * MIB}
    data = sender.encode(sent)
    assert len(sender.store_objects()) == 2
    got = receiver.decode(data, copy=True)
    assert got["img"].flags.writeable and shared_buffer_of(got["img"]) is None
    got["img"][0, 0] = 5
    assert type(got["raw"]) is bytes and got["raw"] == sent["raw"]
    # Nothing refers to the store any more, though the values live on.
    assert settled(sender, eventually) == []
    assert got["img"][0, 0] == 5 and got["img"][1, 1] == 1


def test_four_receivers_share_one_object(store, eventually):
    sender, *receivers = codecs(store, 5)
    sent = np.random.default_rng(3).random((256, 1024))  # 2 MiB
    data = sender.encode({"frame": sent}, deliveries=4)
    got = [r.decode(data)["frame"] for r in receivers]
    [obj] = sender.store_objects()
    assert obj["size"] == sent.nbytes
    # Each receiver claimed its reference one-way: the store counts them
    # as the claims land.
    eventually(lambda: sender.store_objects()[0]["ref_count"] == 4, what="four references claimed")
    addresses = set()
    for g in got:
        same_array(g, sent)
        addresses.add(g.__array_interface__["data"][0])
    assert len(addresses) == 4, "four connections, four mappings of one object"
    del g
    got.clear()
    gc.collect()
    assert settled(sender, eventually) == []
    assert sender.store_stats()["pending_deliveries"] == 0


def test_deliveries_pin_until_every_receiver_has_released(store, eventually):
    sender, receiver = codecs(store)
    data = sender.encode(np.zeros(MIB, np.uint8), deliveries=2)
    [obj] = sender.store_objects()
    assert obj["pending_deliveries"] == 2
    got = receiver.decode(data)
    del got
    gc.collect()
    eventually(lambda: sender.store_objects()[0]["pending_deliveries"] == 1, what="one delivery settled")


def test_the_same_array_twice_is_stored_once(store):
    sender, receiver = codecs(store)
    big = np.ones(MIB, np.uint8)
    got = receiver.decode(sender.encode({"a": big, "b": [big, big[: MIB // 2]]}))
    sizes = sorted(o["size"] for o in sender.store_objects())
    assert sizes == [MIB // 2, MIB]
    assert shared_buffer_of(got["a"]) is shared_buffer_of(got["b"][0])


def test_a_received_array_sent_on_travels_by_reference(store, eventually):
    sender, relay, receiver = codecs(store, 3)
    sent = np.arange(MIB, dtype=np.int64)
    view = relay.decode(sender.encode(sent))
    # The relay echoes it to two receivers: the same object, two more deliveries.
    data = relay.encode({"again": view, "twice": view}, deliveries=2)
    assert len(sender.store_objects()) == 1
    forwarded = receiver.decode(data)
    same_array(forwarded["again"], sent)
    assert shared_buffer_of(forwarded["again"]).object_id == shared_buffer_of(view).object_id
    # A slice is not the whole object: it goes as a new one.
    part = receiver.decode(relay.encode(view[: MIB // 2], deliveries=1))
    same_array(part, sent[: MIB // 2])
    assert len(sender.store_objects()) == 2
    second = Codec(store.socket)
    again = second.decode(data)
    del view, forwarded, part, again, second
    gc.collect()
    assert all(o["pending_deliveries"] == 0 for o in settled(sender, eventually))


# ---------------------------------------------------------------------------
# Byte strings


def test_small_byte_strings_are_bytes():
    codec = Codec()
    floats = np.arange(4, dtype=np.float32)
    for value in [b"abc", bytearray(b"abc"), memoryview(b"abc"), memoryview(floats), memoryview(floats)[::2]]:
        got = codec.decode(codec.encode(value))
        assert type(got) is bytes and got == bytes(value if not isinstance(value, memoryview) else value.tobytes())


def test_large_byte_strings_are_read_only_memoryviews_of_the_store(store, eventually):
    sender, receiver = codecs(store)
    payload = np.random.default_rng(5).bytes(MIB)
    for value in [payload, bytearray(payload), memoryview(payload), memoryview(bytearray(payload * 2))[::2]]:
        data = sender.encode(value)
        assert len(data) < 100
        got = receiver.decode(data)
        assert type(got) is memoryview and got.readonly and got.format == "B" and got.nbytes == len(value)
        expected = value.tobytes() if isinstance(value, memoryview) else bytes(value)
        assert got == expected
        assert isinstance(got.obj, SharedBuffer)
        copied = receiver.decode(data, copy=True)
        assert type(copied) is bytes and copied == expected
        del got
    gc.collect()
    assert all(o["pending_deliveries"] == 0 for o in settled(sender, eventually))
    # A received byte string is a numpy uint8 array to nobody: Rust reads it as a buffer.
    dtype, shape, raw, shared = _native._rust_decode_buffer(sender.encode(payload), store.socket)
    assert (dtype, shape, raw, shared) == ("|u1", [MIB], payload, True)


def test_a_bytes_and_a_uint8_array_stay_apart(store):
    sender, receiver = codecs(store)
    raw = bytes(range(256)) * 1024
    got = receiver.decode(sender.encode([raw, np.frombuffer(raw, np.uint8)]))
    assert type(got[0]) is memoryview and type(got[1]) is np.ndarray


# ---------------------------------------------------------------------------
# Pickles


class Scan:
    """A user class holding a large array and a few plain fields."""

    def __init__(self, ranges, frame_id):
        self.ranges = ranges
        self.frame_id = frame_id
        self.tags = {"lidar"}


def test_a_pickled_object_sends_its_arrays_out_of_band(store, eventually):
    sender, receiver = codecs(store)
    scan = Scan(np.linspace(0, 1, 2 * MIB // 8), "base_link")
    data = sender.encode(scan)
    assert len(data) < 1024, "the array is not in the pickle"
    [obj] = sender.store_objects()
    assert obj["size"] == scan.ranges.nbytes
    got = receiver.decode(data)
    assert type(got) is Scan and got.frame_id == "base_link" and got.tags == {"lidar"}
    same_array(got.ranges, scan.ranges)
    assert not got.ranges.flags.writeable and shared_buffer_of(got.ranges) is not None
    copied = receiver.decode(data, copy=True)
    assert copied.ranges.flags.writeable and shared_buffer_of(copied.ranges) is None
    del got
    gc.collect()
    assert settled(sender, eventually) == []


def test_pickles_mixed_with_plain_values(store):
    sender, receiver = codecs(store)
    value = {"scan": Scan(np.ones(10), "x"), "n": 3, "img": np.ones((300, 300))}
    got = receiver.decode(sender.encode(value))
    assert got["n"] == 3 and type(got["scan"]) is Scan
    same_array(got["scan"].ranges, value["scan"].ranges)
    same_array(got["img"], value["img"])


# ---------------------------------------------------------------------------
# Spilled messages


@pytest.mark.parametrize("kind", ["ints", "strings"])
def test_messages_over_the_frame_limit_are_spilled(store, eventually, kind):
    sender, receiver = codecs(store)
    value = list(range(100_000)) if kind == "ints" else [f"item {i}" for i in range(100_000)]
    data = sender.encode(value)
    assert len(data) < 64 and data[2] == 2, "one ext 2 value"
    [obj] = sender.store_objects()
    assert obj["size"] > 64 * 1024
    assert receiver.decode(data) == value
    # The spilled object was released by the decode itself.
    assert settled(sender, eventually) == []
    with pytest.raises(PayloadError, match="no store"):
        Codec().encode(value)


def test_a_spilled_message_with_buffers(store, eventually):
    sender, receiver = codecs(store)
    value = {"names": [f"n{i}" for i in range(20_000)], "img": np.ones(MIB, np.uint8), "small": np.arange(5)}
    data = sender.encode(value)
    assert len(sender.store_objects()) == 2, "the spilled message and the image"
    got = receiver.decode(data)
    assert got["names"] == value["names"]
    same_array(got["img"], value["img"])
    same_array(got["small"], value["small"])
    del got
    gc.collect()
    assert all(o["pending_deliveries"] == 0 for o in settled(sender, eventually))


# ---------------------------------------------------------------------------
# Rust and Python read each other


def test_the_wire_example_of_the_rust_docs():
    # hprm_node::payload's module docs: {"a": <the u8 buffer [1, 2, 3], inline>}
    data = Codec().encode({"a": np.array([1, 2, 3], np.uint8)})
    assert data == bytes.fromhex("81a161" "c70e01" "95a37c753191 03c003" "c403010203".replace(" ", ""))


def rust_sample():
    """hprm_node::payload::conformance::Sample::new(), built in Python."""
    return {
        "seq": 42,
        "name": "rust",
        "gain": 1.5,
        "pixels": (np.arange(480 * 640) % 251).astype(np.uint8).reshape(480, 640),
        "depth": (np.arange(16, dtype=np.float32) / 2).reshape(4, 4),
        "ranges": np.array([0.5, 1.5, 2.5]),
        "tags": ["a", "b"],
        "pose": (1.0, -2.0, 0.5),
        "limits": {"hi": 2**40, "lo": -5},
        "note": None,
        "blob": b"\x00\x01\xff",
        "raw": bytes((7 * i) % 256 for i in range(100_000)),
    }


def test_python_reads_what_rust_writes(store, eventually):
    [receiver] = codecs(store, 1)
    data = _native._rust_encode_example(store.socket, deliveries=1)
    got = receiver.decode(data)
    want = rust_sample()
    assert set(got) == set(want)
    for key in ["seq", "name", "gain", "tags", "limits", "note", "blob"]:
        assert got[key] == want[key] and type(got[key]) is type(want[key]), key
    assert got["pose"] == list(want["pose"])
    for key in ["pixels", "depth", "ranges"]:
        same_array(got[key], want[key])
    # Rust sends buffers, never byte strings: `raw` is a uint8 array here.
    same_array(got["raw"], np.frombuffer(want["raw"], np.uint8))
    assert shared_buffer_of(got["pixels"]) is not None and not got["pixels"].flags.writeable
    assert shared_buffer_of(got["depth"]) is None
    del got
    gc.collect()
    assert all(o["pending_deliveries"] == 0 for o in settled(receiver, eventually))


def test_rust_reads_what_python_writes(store, eventually):
    [sender] = codecs(store, 1)
    data = sender.encode(rust_sample())
    assert len(sender.store_objects()) == 2, "pixels and raw are out of band"
    check = _native._rust_decode_check(data, store.socket)
    assert check["equal"], (check["differs"], check["debug"][:2000])
    assert sorted(check["shared"]) == ["pixels", "raw"]
    assert all(o["pending_deliveries"] == 0 for o in settled(sender, eventually))
    # A Rust port of another type says what it expected.
    with pytest.raises(PayloadError, match="does not match the type"):
        _native._rust_decode_check(sender.encode({"seq": "not a number"}), store.socket)


def test_rust_refuses_pickles_and_settles_their_deliveries(store, eventually):
    [sender] = codecs(store, 1)
    data = sender.encode({"scan": Scan(np.ones(MIB // 8), "x")}, deliveries=1)
    with pytest.raises(PayloadError, match="can only be read by Python federates"):
        _native._rust_decode_check(data, store.socket)
    assert settled(sender, eventually) == []


# ---------------------------------------------------------------------------
# Errors


def test_large_buffers_need_a_store():
    with pytest.raises(PayloadError, match="hprm-store"):
        Codec().encode(np.ones(MIB, np.uint8))
    with pytest.raises(PayloadError, match="hprm-store"):
        Codec(store_socket="/nonexistent/store.sock").encode(np.ones(MIB, np.uint8))


def test_values_that_cannot_be_sent():
    codec = Codec()
    with pytest.raises(PayloadError, match="function") as e:
        codec.encode({"callback": lambda: 1})
    assert e.value.__cause__ is not None
    with pytest.raises(PayloadError, match="lock"):
        codec.encode(threading.Lock())
    loop = []
    loop.append(loop)
    with pytest.raises(PayloadError, match="nested"):
        codec.encode(loop)


def test_malformed_payloads_are_refused_clearly():
    codec = Codec()
    good = codec.encode({"a": [1, 2, np.arange(3)], "b": "text"})
    for cut in range(len(good)):
        with pytest.raises(PayloadError, match="malformed"):
            codec.decode(good[:cut])
    with pytest.raises(PayloadError, match="malformed"):
        codec.decode(good + b"\xc0")
    with pytest.raises(PayloadError, match="malformed"):
        codec.decode(b"\xc1")
    with pytest.raises(PayloadError, match="extension of type 9"):
        codec.decode(b"\xd4\x09\x00")
    # A pickle that does not unpickle.
    with pytest.raises(PayloadError, match="unpickle"):
        codec.decode(b"\xc7\x06\x03\x92\xc4\x02\x80\x05\x90")


def test_a_missing_object_is_reported(store):
    receiver = Codec(store.socket, get_timeout=0.2)
    # A 1 MiB |u1 buffer in object ab...ab, which nobody created.
    descriptor = bytes.fromhex("95a37c753191ce00100000c0ce00100000" "91c414") + b"\xab" * 20
    data = bytes([0xC7, len(descriptor), 0x01]) + descriptor
    with pytest.raises(PayloadError, match="not in the object store"):
        receiver.decode(data)
    with pytest.raises(PayloadError, match="no store configured"):
        Codec().decode(data)


def test_decode_accepts_any_bytes_like(store):
    codec = Codec(store.socket)
    data = codec.encode({"x": 1})
    for form in [data, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)]:
        assert codec.decode(form) == {"x": 1}


def test_codec_properties():
    c = Codec("/tmp/x.sock", threshold=1000, get_timeout=0.5)
    assert c.threshold == 1000 and str(c.store_socket) == "/tmp/x.sock"
    assert "threshold=1000" in repr(c)
    with pytest.raises(ValueError):
        Codec(get_timeout=-1)
    assert PayloadError.__module__ == "hprm"


# ---------------------------------------------------------------------------
# Threads


def test_the_gil_is_released_while_waiting_for_the_store(store):
    receiver = Codec(store.socket, get_timeout=1.0)
    # A reference to an object that never comes: the get waits 1 s.
    descriptor = bytes.fromhex("95a37c753191ce00100000c0ce00100000" "91c414") + b"\xcd" * 20
    data = bytes([0xC7, len(descriptor), 0x01]) + descriptor
    errors = []

    def wait():
        try:
            receiver.decode(data)
        except PayloadError as e:
            errors.append(e)

    waiter = threading.Thread(target=wait)
    waiter.start()
    stamps = []
    while waiter.is_alive():
        stamps.append(time.monotonic())
        time.sleep(0.001)
    waiter.join()
    assert errors and "not in the object store" in str(errors[0])
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert len(stamps) > 50 and max(gaps) < 0.5, f"this thread stalled {max(gaps):.2f} s"


def test_threads_encode_and_decode_at_once(store, eventually):
    sender = Codec(store.socket)
    receivers = codecs(store, 4)
    failures = []

    def work(k):
        try:
            for i in range(10):
                sent = {"k": k, "i": i, "img": np.full((256, 1024), k * 100 + i, np.int32), "tag": b"t" * (70_000 + i)}
                got = receivers[k].decode(sender.encode(sent))
                assert got["k"] == k and got["i"] == i and got["tag"] == sent["tag"]
                same_array(got["img"], sent["img"])
        except Exception as e:  # reported below, with the thread's number
            failures.append((k, repr(e)))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    gc.collect()
    assert settled(sender, eventually) == []


def test_alloc_array_is_written_in_the_store_and_sent_by_reference(store, eventually):
    producer, receiver = codecs(store, 2)
    a = producer.alloc_array((256, 1024), np.float32, deliveries=1)
    assert a.flags.writeable
    a[:] = 1.5
    data = producer.encode({"frame": a}, deliveries=1)
    objects = producer.store_objects()
    assert len(objects) == 1  # the allocation itself: no copy was made
    got = receiver.decode(data)["frame"]
    same_array(got, np.full((256, 1024), 1.5, np.float32))
    assert shared_buffer_of(got).object_id == objects[0]["id"]
    del a, got
    gc.collect()
    assert all(o["pending_deliveries"] == 0 for o in settled(producer, eventually))


# ---------------------------------------------------------------------------
# Arrays born in the store (numpy's memory handler, as in every reaction)


def test_arrays_made_in_a_store_memory_scope_are_born_in_the_store(store, eventually):
    producer, receiver = codecs(store, 2)
    with producer.store_memory():
        frame = np.arange(256 * 1024, dtype=np.float32).reshape(256, 1024)  # 1 MiB: malloc
        zeros = np.zeros((512, 512))  # 2 MiB: calloc, must read as zeros
        small = np.ones(100)  # under the threshold: private
    private = np.arange(256 * 1024, dtype=np.float32)  # outside the scope: private
    born = {o["id"]: o for o in producer.store_objects()}
    assert len(born) == 2 and all(not o["sealed"] for o in born.values()), born
    assert hprm.store_object_id(frame) in born and hprm.store_object_id(zeros) in born
    assert hprm.store_object_id(frame[3:5]) == hprm.store_object_id(frame), "a view lies in the same object"
    assert hprm.store_object_id(small) is None and hprm.store_object_id(private) is None
    assert not zeros.any() and frame[255, 1023] == 256 * 1024 - 1
    # Sent whole: by reference, sealed with its receivers; no other object.
    data = producer.encode({"frame": frame, "n": 7}, deliveries=1)
    assert not frame.flags.writeable, "a sent array is sealed, so read-only"
    with pytest.raises(ValueError):
        frame[0, 0] = 1
    got = receiver.decode(data)
    same_array(got["frame"], np.arange(256 * 1024, dtype=np.float32).reshape(256, 1024))
    assert shared_buffer_of(got["frame"]).object_id == hprm.store_object_id(frame)
    assert {o["id"] for o in producer.store_objects()} == set(born)
    # Sent again (an object sealed earlier): the same object, one more delivery.
    again = receiver.decode(producer.encode([frame, frame], deliveries=1))
    assert {shared_buffer_of(a).object_id for a in again} == {hprm.store_object_id(frame)}
    # A part of a born array is copied, like a part of any array.
    part = receiver.decode(producer.encode(zeros[:300], deliveries=1))
    assert shared_buffer_of(part).object_id not in born and zeros.flags.writeable
    # Freed: the unsent one is aborted, the sent one settles once every
    # receiver let go; nothing stays pinned.
    del frame, zeros, got, again, part
    gc.collect()
    left = settled(producer, eventually)
    assert all(o["sealed"] for o in left), left
    assert hprm.store_object_id(small) is None


def test_an_array_born_in_a_store_that_died_is_lost_as_store_lost_not_as_an_error(store):
    # The runtime counts a value lost with the store (store_lost, one per
    # receiver, in the launcher's summary) and any other encode failure as
    # an error (unsent): the seal of a born array must say which it was.
    (producer,) = codecs(store, 1)
    with producer.store_memory():
        frames = [np.full(200_000, n, dtype=np.uint8) for n in range(100)]
    assert all(hprm.store_object_id(f) is not None for f in frames)
    store.process.kill()
    store.process.wait()
    # A seal is a one-way write to the outbox, which cannot see the death
    # until the connection has noticed it: each try seals a fresh array,
    # until one is refused.
    with pytest.raises(hprm.StoreLostError, match="went away"):
        for frame in frames:
            producer.encode({"frame": frame}, deliveries=2)
            time.sleep(0.02)


def test_born_arrays_resize_and_free_on_any_thread(store, eventually):
    (producer,) = codecs(store, 1)
    with producer.store_memory():
        a = np.arange(100_000, dtype=np.int64)  # 800 KB
        a.resize(200_000, refcheck=False)  # realloc: a new object, the old one freed
    assert (a[:100_000] == np.arange(100_000)).all() and hprm.store_object_id(a) is not None
    eventually(lambda: len(producer.store_objects()) == 1, what="the object before the resize aborted")
    holder = [a]
    del a
    t = threading.Thread(target=holder.clear)  # numpy frees it on this thread
    t.start()
    t.join()
    gc.collect()
    eventually(lambda: producer.store_objects() == [], what="the array freed on another thread aborted")


def test_temporaries_reuse_their_objects_until_the_scope_closes(store, eventually):
    (producer,) = codecs(store, 1)
    x = np.arange(200_000, dtype=np.float64)
    with producer.store_memory():
        t = x * 2
        first = hprm.store_object_id(t)
        del t  # kept as a spare, not aborted
        y = x + 1  # the same size: the same object, no create round trip
        same = hprm.store_object_id(y) == first
        del y
        z = np.zeros_like(x)  # calloc over a reused object still reads zeros
        assert hprm.store_object_id(z) == first
        assert len(producer.store_objects()) == 1
    assert same and not z.any()
    # The scope closed: spares are aborted; z, alive, stays until freed.
    assert [o["id"] for o in producer.store_objects()] == [first]
    del z
    eventually(lambda: producer.store_objects() == [], what="every object aborted")


def test_a_full_store_leaves_arrays_private(store_bin, tmp_path):
    from conftest import Store

    small = Store(store_bin, tmp_path, memory="4M")
    try:
        (producer,) = codecs(small, 1)
        with producer.store_memory():
            fits = np.ones(1 << 20, np.uint8)
            too_big = np.ones(8 << 20, np.uint8)  # more than the arena: malloc, as without a scope
        assert hprm.store_object_id(fits) is not None and hprm.store_object_id(too_big) is None
        assert too_big.sum() == 8 << 20
    finally:
        small.stop()


# ---------------------------------------------------------------------------
# pyarrow: Arrow IPC streams (ext 5)


def test_pyarrow_values_travel_as_arrow_ipc_zero_copy(store, eventually):
    pa = pytest.importorskip("pyarrow")
    producer, receiver = codecs(store, 2)
    n = 100_000
    table = pa.table({"id": pa.array(range(n), pa.int64()), "x": pa.array(np.linspace(0, 1, n)), "name": pa.array([f"p{i % 7}" for i in range(n)])})
    table = table.replace_schema_metadata({"source": "lidar"})
    probe = np.zeros(MIB, np.uint8)  # its view tells where the store is mapped
    got = receiver.decode(producer.encode({"points": table, "seq": 3, "probe": probe}))
    assert got["seq"] == 3
    assert isinstance(got["points"], pa.Table) and got["points"].equals(table)
    assert got["points"].schema.metadata == {b"source": b"lidar"}
    # Zero-copy: the received columns' memory lies in the store's mapping.
    start, end = shared_buffer_of(got["probe"]).mapping
    for name in ("id", "x"):
        address = got["points"].column(name).chunk(0).buffers()[1].address
        assert start <= address < end, (name, hex(address), hex(start), hex(end))
    small = [pa.array([1, None, 3], pa.int32()), pa.chunked_array([[1, 2], [3]]), pa.record_batch({"a": [1.5, 2.5]}), pa.table({"s": ["x", "y"]})]
    for value in small:
        back = receiver.decode(producer.encode(value))
        assert type(back) is type(value) and back.equals(value), (value, back)
    del got, table
    gc.collect()
    assert all(o["pending_deliveries"] == 0 for o in settled(producer, eventually))


def test_an_arrow_stream_is_written_once_straight_into_the_store_object_sent(store, eventually):
    pa = pytest.importorskip("pyarrow")
    from hprm._arrow import to_ipc

    producer, receiver = codecs(store, 2)
    batch = pa.record_batch({"v": pa.array(np.arange(500_000, dtype=np.float64)), "k": pa.array([f"k{i % 5}" for i in range(500_000)]).dictionary_encode()})
    with producer.store_memory():
        # `to_ipc` (not the codec's path) builds the stream in a store object inside a reaction...
        stream = to_ipc(batch)
        assert hprm.store_object_id(stream) is not None
        del stream
    # ...and the codec writes it straight into the object it sends, in a reaction or not:
    # one object, sealed by the send, no copy into another.
    data = producer.encode({"batch": batch}, deliveries=1)
    objects = producer.store_objects()
    assert len(objects) == 1 and objects[0]["sealed"], objects
    got = receiver.decode(data)["batch"]
    assert isinstance(got, pa.RecordBatch) and got.equals(batch)
    assert got.column("k").type == pa.dictionary(pa.int32(), pa.string())
    del got
    gc.collect()
    assert all(o["pending_deliveries"] == 0 for o in settled(producer, eventually))


def test_arrow_schemas_changing_between_messages_each_decode_with_their_own(store):
    """Both sides learn a schema once and reuse it (the sender its schema
    message's size, the receiver the schema it reads batches against): a
    message whose schema differs from the last, even only in metadata or
    in the kind sent, must still come back exactly as it was sent."""
    pa = pytest.importorskip("pyarrow")
    from hprm import _arrow

    producer, receiver = codecs(store, 2)
    n = 300_000  # over the threshold: the streams travel in the store
    x = np.linspace(0, 1, n)
    base = pa.record_batch({"x": pa.array(x)})
    nested = pa.record_batch({
        "l": pa.array([[i, i + 1] if i % 3 else None for i in range(n)], pa.list_(pa.int32())),
        "s": pa.array([{"a": i, "b": f"b{i % 11}"} for i in range(n)]),
        "t": pa.array([None if i % 5 == 0 else f"t{i}" for i in range(n)]),
    })
    sent = [
        base,
        base.replace_schema_metadata({"camera": "left"}),  # the same fields, other metadata
        base.replace_schema_metadata({"camera": "right"}),
        pa.record_batch({"x": pa.array(x), "y": pa.array(x * 2)}),  # a column more
        base,  # the first schema again
        pa.Table.from_batches([base]),  # the same schema, another kind
        pa.Table.from_batches([base.slice(0, 1000), base.slice(1000, 5), base.slice(1005)]),  # batches of a table
        pa.table({"x": pa.array([], pa.float64())}),  # a table of no rows
        pa.array(x),
        pa.chunked_array([x[:7], x[7:]]),
        nested.slice(17, n - 40),  # offsets into its buffers
        pa.record_batch({"k": pa.array([f"k{i % 5}" for i in range(n)]).dictionary_encode()}),  # dictionaries: the general path
        pa.record_batch({"x": pa.array(x, pa.float32())}),  # the name of the first, another type
    ]
    for i, value in enumerate(sent):
        got = receiver.decode(producer.encode(value))
        assert type(got) is type(value) and got.equals(value), (i, value, got)
        if hasattr(value, "schema"):
            assert got.schema.metadata == value.schema.metadata, (i, got.schema.metadata)
        # Which path each took: the streams without dictionaries are
        # measured from their batch sizes and read message by message.
        stream = _arrow.to_ipc(value)
        has_dictionary = i == len(sent) - 2
        assert (_arrow._direct(stream) is None) == has_dictionary, i
        assert pa.ipc.open_stream(pa.py_buffer(stream)).read_all().num_rows == (len(value) if not hasattr(value, "num_rows") else value.num_rows)


def test_an_arrow_writer_that_keeps_the_store_memory_fails_the_send_and_leaves_nothing(store):
    """The codec lends pyarrow's IPC writer (the fallback's) the object's
    memory as a memoryview and takes it back before the object is sealed: a
    writer that keeps it must fail the send, not keep a way to write into a
    sealed object. (In a process of its own: the codec looks `plan_ipc` up
    once. The batch has an ordered dictionary column, which the Rust writer
    leaves to pyarrow's.)"""
    pytest.importorskip("pyarrow")
    program = f"""
import gc, sys
import numpy as np, pyarrow as pa
from hprm import _arrow, _native
kept = []
plan = _arrow.plan_ipc
def keeping(obj):
    size, write = plan(obj)
    def write_and_keep(target):
        write(target)
        kept.append(pa.py_buffer(target))
    return size, write_and_keep
_arrow.plan_ipc = keeping
codec = _native.Codec({store.socket!r})
try:
    ordered = pa.dictionary(pa.int32(), pa.int64(), ordered=True)
    codec.encode(pa.record_batch({{"x": pa.array(np.arange(100_000, dtype=np.float64)), "o": pa.array([1] * 100_000).dictionary_encode().cast(ordered)}}))
except _native.PayloadError as e:
    print("refused:", e)
kept.clear()
gc.collect()
print("objects:", len(codec.store_objects()))
"""
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "refused: the Arrow IPC writer kept a reference to the memory it wrote into" in r.stdout, r.stdout
    assert "objects: 0" in r.stdout, r.stdout


def arrow_writers_of(codec, value):
    """What `codec` sent `value` as, and which writer wrote its stream:
    "rust" (hprm-node's, the value imported through the Arrow C data
    interface) or "python" (pyarrow's, through `hprm._arrow.plan_ipc`)."""
    rust, python = _native._arrow_writers()
    data = codec.encode(value)
    after = _native._arrow_writers()
    assert after[0] - rust + after[1] - python == 1, (value, after)
    return data, "rust" if after[0] > rust else "python"


def test_pyarrow_values_are_written_by_the_rust_writer_into_the_store_zero_copy(store, eventually):
    """Record batches, tables, arrays and chunked arrays of the types
    hprm-node frames (nested, dictionary, sliced, with nulls, with metadata)
    take the Rust writer; each comes back equal and of its own type, its
    bytes bit-exact (NaN payloads included), its schema metadata kept, and
    a large one read over the store object the sender wrote once (a batch
    or an array by the Rust reader, handed to pyarrow through the C data
    interface; the store object released when pyarrow lets go of it)."""
    pa = pytest.importorskip("pyarrow")
    producer, receiver = codecs(store, 2)
    n = 200_000
    nan = np.frombuffer(np.uint64(0x7FF8_DEAD_BEEF_0001).tobytes(), np.float64)[0]
    x = np.linspace(0, 1, n)
    i = np.arange(n)
    nested = pa.record_batch({
        "x": pa.array(x),
        "id": pa.array(i * 31, pa.int64(), mask=(i % 7 == 3)),
        "pose": pa.StructArray.from_arrays([pa.array(i / 3.0), pa.array([f"p{j % 13}" for j in range(n)])], names=["x", "name"]),
        "points": pa.array([None if j % 5 == 0 else list(range(j % 4)) for j in range(n)], pa.list_(pa.int32())),
        "label": pa.array([("car", "bike", "person")[j % 3] for j in range(n)]).dictionary_encode(),
        "flag": pa.array(i % 3 == 0),
    }).replace_schema_metadata({"frame": "base_link", "rate": "10"})
    assorted = pa.record_batch({
        "f16": pa.array(np.arange(n, dtype=np.float16)),
        "d256": pa.array([decimal.Decimal(j % 1000) / 8 for j in range(n)], pa.decimal256(40, 5)),
        "ts": pa.array(i, pa.timestamp("ns", tz="Europe/Paris")),
        "ll": pa.array([[str(j)] * (j % 3) for j in range(n)], pa.large_list(pa.large_string())),
        "fsl": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(2 * n, dtype=np.int16)), 2),
        "map": pa.array([[(f"k{j % 9}", j)] for j in range(n)], pa.map_(pa.string(), pa.int32())),
        "sd": pa.StructArray.from_arrays([pa.array([("a", "b")[j % 2] for j in range(n)]).dictionary_encode(), pa.array(i)], names=["d", "i"]),
        "null": pa.nulls(n),
        "dur": pa.array(i, pa.duration("us")),
        "bin": pa.array([bytes([j % 256]) * (j % 4) for j in range(n)], pa.binary()),
    })
    # (value, whether the receiver reads it in Rust: a batch or an array in the store)
    values = [
        (nested, True),
        (nested.slice(17, n - 40), True),  # sliced: the struct column's children are not (the C data interface's way)
        (pa.Table.from_batches([nested.slice(0, 1000), nested.slice(1000)]), False),
        (pa.array(x), True),
        (pa.array([{"a": j, "b": [j] * (j % 3)} for j in range(100)]).slice(3, 50), False),  # inline
        (pa.chunked_array([x[:7], x[7:]]), False),
        (pa.table({"x": pa.array([], pa.float64())}), False),
        (assorted, True),
        (assorted.slice(5, 77_000), True),
        # A map with keys marked sorted: arrow-rs 54's export drops the mark, so from_ipc reads it.
        (pa.record_batch({"m": pa.array([[(f"k{j % 9}", j)] for j in range(n)], pa.map_(pa.string(), pa.int32(), keys_sorted=True))}), False),
    ]
    probe = np.zeros(MIB, np.uint8)  # its view tells where the store is mapped
    start, end = shared_buffer_of(receiver.decode(producer.encode(probe))).mapping
    for k, (value, read_in_rust) in enumerate(values):
        data, writer = arrow_writers_of(producer, value)
        assert writer == "rust", (k, value.schema if hasattr(value, "schema") else value.type)
        read = _native._arrow_readers()
        got = receiver.decode(data)
        assert _native._arrow_readers() - read == read_in_rust, k
        assert type(got) is type(value) and got.equals(value), (k, value, got)
        if hasattr(value, "schema"):
            assert got.schema == value.schema and got.schema.metadata == value.schema.metadata, k
    # Bit-exact where equals() cannot tell (NaN is unequal to itself).
    with_nan = x.copy()
    with_nan[3] = nan
    sent = nested.set_column(0, "x", pa.array(with_nan))
    read = _native._arrow_readers()
    got = receiver.decode(producer.encode({"batch": sent}))["batch"]
    assert _native._arrow_readers() == read + 1
    column = got.column("x")
    assert column.buffers()[1].to_pybytes() == with_nan.tobytes(), "bit-exact, NaN payload included"
    for name in ("x", "id", "points"):
        address = got.column(name).buffers()[1].address
        assert start <= address < end, (name, hex(address), hex(start), hex(end))
    # copy=True: a private copy, read by hprm._arrow.from_ipc, not the Rust reader.
    read = _native._arrow_readers()
    copied = receiver.decode(producer.encode(nested), copy=True)
    assert _native._arrow_readers() == read and copied.equals(nested)
    assert not start <= copied.column("x").buffers()[1].address < end
    del got, column, copied
    gc.collect()
    assert all(o["pending_deliveries"] == 0 for o in settled(producer, eventually))


def test_what_the_rust_writer_cannot_take_is_written_by_pyarrow(store):
    """The fallback: an ordered dictionary (arrow-rs 54 would import it
    unordered), a view type and a union (not framed by hprm-node: pyarrow's
    writer copies once where arrow-ipc's would twice), a list view and a
    32-bit decimal (arrow-rs 54 has neither) go through
    `hprm._arrow.plan_ipc`, and come back as they were."""
    pa = pytest.importorskip("pyarrow")
    producer, receiver = codecs(store, 2)
    n = 100_000
    ordered = pa.dictionary(pa.int32(), pa.string(), ordered=True)

    values = [
        pa.record_batch({"o": pa.array([("a", "b")[j % 2] for j in range(n)]).dictionary_encode().cast(ordered)}),
        pa.record_batch({"v": pa.array([f"v{j}" for j in range(1000)], pa.string_view()), "x": pa.array(np.arange(1000.0))}),
        pa.UnionArray.from_dense(pa.array([0, 1, 0], pa.int8()), pa.array([0, 0, 1], pa.int32()), [pa.array([1, 2]), pa.array(["a"])], ["i", "s"]),
        # In the store, and of types arrow-rs 54 neither imports nor reads (its IPC reader would
        # panic on them): the receiver must leave them to from_ipc too.
        pa.record_batch({"lv": pa.array([[j] * (j % 3) for j in range(n)], pa.list_view(pa.int32()))}),
    ]
    if hasattr(pa, "decimal32"):
        values.append(pa.array([decimal.Decimal(j % 1000) for j in range(n)], pa.decimal32(9, 0)))
    for k, value in enumerate(values):
        data, writer = arrow_writers_of(producer, value)
        assert writer == "python", k
        read = _native._arrow_readers()
        got = receiver.decode(data)
        # The ordered dictionary is read in Rust (its flag survives that way); the others by from_ipc.
        assert _native._arrow_readers() - read == (k == 0), k
        assert type(got) is type(value) and got.equals(value), (k, got)
        assert got.schema == value.schema if hasattr(value, "schema") else got.type == value.type, k
    assert receiver.decode(producer.encode(values[0])).schema.field("o").type.ordered


def test_rust_reads_an_arrow_stream_as_bytes(store):
    pa = pytest.importorskip("pyarrow")
    from hprm._native import _rust_decode_buffer

    table = pa.table({"v": pa.array(np.arange(50_000, dtype=np.float64))})
    data = Codec(store.socket).encode(table)
    dtype, shape, raw, shared = _rust_decode_buffer(data, store.socket)
    assert (dtype, shared) == ("|u1", True)
    assert pa.ipc.open_stream(pa.py_buffer(raw)).read_all().column("v").equals(table.column("v"))
