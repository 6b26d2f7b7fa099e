"""Recording a program with the ROS 2 bridge (`hprm launch --record`):
what the bridge received from ROS is in the file as ROS 2 messages (a
`ros2msg` schema with the type's definition, `cdr` messages, one channel
per ROS topic), read back here with the public `mcap` and
`mcap-ros2-support` packages, as a reader that knows nothing of HPRM would,
and compared field by field with what the rclpy nodes published. The
recording replays with `hprm replay --check`, the bridge too when named (its
physical actions fed the recorded CDR bytes, converted again).

Same needs as test_bridge.py, plus `hprm` next to this Python
(hprm-py/install.sh puts it there) and mcap-ros2-support (setup-ros2.sh).
"""

import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import samples  # noqa: E402

# procs, topics and ros_domain are test_bridge's fixtures (ros_domain: the session's DDS domain).
from test_bridge import BRIDGE, finish, index_of, procs, ros_domain, ros_node, topics, write_config  # noqa: E402, F401

HPRM = shutil.which("hprm", path=os.path.dirname(sys.executable)) or shutil.which("hprm")
if HPRM is None:
    pytest.skip("no `hprm` command next to this Python; run ros2-bridge/test.sh", allow_module_level=True)
mcap_ros2 = pytest.importorskip("mcap_ros2", reason="needs mcap-ros2-support (ros2-bridge/setup-ros2.sh installs it)")

PROGRAM = os.path.join(HERE, "program.py")
# A typed message, a typed one with nested messages and fixed arrays, one
# with an array of messages and bulk data, an image (over the store's
# threshold: its CDR bytes go through the store), and one of the generic
# (untyped) path.
KINDS = ["string", "imu", "cloud", "image", "range"]


def norm(x):
    """A message (rclpy's, or one mcap-ros2-support decoded) as dicts,
    lists and scalars, every sequence of numbers as a numpy array."""
    fields = getattr(x, "get_fields_and_field_types", None)
    if fields is not None:
        return {k: norm(getattr(x, k)) for k in fields()}
    if hasattr(x, "__slots__") and not isinstance(x, (str, bytes)):
        return {k: norm(getattr(x, k)) for k in x.__slots__}
    if isinstance(x, (bytes, bytearray)):
        return np.frombuffer(bytes(x), dtype=np.uint8)
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "typecode"):  # array.array
        return np.asarray(x)
    if isinstance(x, (list, tuple)):
        if all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in x) and x:
            return np.asarray(x)
        return [norm(e) for e in x]
    return x


def same(expected, got, path):
    if isinstance(expected, dict):
        assert isinstance(got, dict) and set(expected) == set(got), f"{path}: {expected} != {got}"
        for k in expected:
            same(expected[k], got[k], f"{path}.{k}")
    elif isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        e, g = np.asarray(expected), np.asarray(got)
        assert e.shape == g.shape and np.array_equal(e, g), f"{path}: {e[:8]}... != {g[:8]}..."
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(expected) == len(got), f"{path}: {expected} != {got}"
        for i, (e, g) in enumerate(zip(expected, got)):
            same(e, g, f"{path}[{i}]")
    else:
        assert expected == got, f"{path}: {expected!r} != {got!r}"


def sample_of(kind, msg):
    """Which sample k a message (normalized) is."""
    if kind == "string":
        return int(msg["data"].split()[1])
    return int(msg["header"]["stamp"]["sec"]) - 1000


def hprm(*args, timeout=180):
    return subprocess.run([HPRM, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_bridged_values_are_recorded_as_ros2_cdr_and_replay(procs, tmp_path, topics):  # noqa: F811
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    from hprm import _native

    for kind in KINDS:
        ros_node(procs, "pub", kind, f"{topics}/{kind}", 0.2)
    config = write_config(tmp_path, [(f"{topics}/{k}", k, "ros->hprm", k) for k in KINDS])
    rec, out = tmp_path / "bridge.mcap", tmp_path / "got.pkl"
    args = [PROGRAM, BRIDGE, config, out, "--record", *KINDS, "--count", 3]
    p = procs([HPRM, "launch", "--record", str(rec), *map(str, args)], "launch")
    finish(p)
    assert "nothing lost" in p.text(), p.text()
    live = pickle.load(open(out, "rb"))

    # Read back as any MCAP reader would, decoding with the schema in the file.
    codec = _native.Codec()
    decoded, physical, values = {}, {}, {}
    with open(rec, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        for schema, channel, m, msg in reader.iter_decoded_messages(topics=[f"{topics}/{k}" for k in KINDS]):
            kind = channel.topic.rsplit("/", 1)[1]
            assert (schema.encoding, channel.message_encoding, schema.name) == ("ros2msg", "cdr", samples.KINDS[kind])
            assert channel.metadata == {"view_of": f"physical/ros.ros.{kind}_from_ros"}, channel.metadata
            decoded.setdefault(kind, []).append((m.log_time, m.sequence, m.data, norm(msg)))
        f.seek(0)
        for _, channel, m in make_reader(f).iter_messages():
            if channel.topic.startswith("physical/ros.ros."):
                kind = channel.topic[len("physical/ros.ros.") : -len("_from_ros")]
                physical.setdefault(kind, []).append((m.log_time, m.sequence, codec.decode(m.data, copy=True)))
            elif channel.topic.startswith("ros.ros."):
                values.setdefault(channel.topic[len("ros.ros.") :], []).append(
                    (m.log_time, m.sequence, codec.decode(m.data, copy=True))
                )
        f.seek(0)
        summary = next(r for r in make_reader(f).iter_metadata() if r.name == "hprm.summary").metadata
    # The bridge's stop tag: a ROS message that arrived as the program was
    # stopping took a later tag, which no reaction reached. It is recorded
    # (the world sent it) but has no output.
    last = tuple(map(int, summary["last.ros"].split("/")))
    for kind in KINDS:
        got = decoded.get(kind, [])
        assert len(got) >= 3, f"{kind}: {len(got)} ROS 2 messages in the recording"
        for _, _, _, msg in got:
            same(norm(samples.make(kind, sample_of(kind, msg))), msg, kind)
        # Each is the bytes the bridge received, the physical action's value, at its tag.
        assert [(t, s, bytes(d)) for t, s, d, _ in got] == [(t, s, v.tobytes()) for t, s, v in physical[kind]], kind
        assert all(v.dtype == np.uint8 and v.ndim == 1 for _, _, v in physical[kind])
        assert bytes(got[0][2][:4]) in (b"\x00\x01\x00\x00", b"\x00\x00\x00\x00"), "a CDR encapsulation header first"
        # The bridge's output, converted from those bytes at the same tag, as
        # without recording: one for each value up to the stop tag.
        reached = [(t, s) for t, s, _ in physical[kind] if (t, s) <= last]
        assert len(reached) >= 3, f"{kind}: {len(reached)} of {len(physical[kind])} values up to the stop tag {last}"
        assert [(t, s) for t, s, _ in values[kind]] == reached, (kind, last)
        for _, _, v in values[kind]:
            samples.assert_same(samples.plain(samples.make(kind, index_of(kind, v))), v, kind)
        assert len(live[kind]) == 3
        for v in live[kind]:
            samples.assert_same(samples.plain(samples.make(kind, index_of(kind, v))), v, kind)

    info = hprm("bag", "info", rec)
    assert info.returncode == 0, info.stderr
    listed = info.stdout.split("ros 2 topics (as the bridge received them):\n")[1]
    for kind in KINDS:
        assert f"{topics}/{kind}" in listed and f"(cdr {samples.KINDS[kind]} of physical/ros.ros.{kind}_from_ros)" in listed, info.stdout

    # Replayed: by default the bridge, an external federate, is replaced by
    # the recording of its outputs; named, it runs again (it needs ROS 2),
    # fed the recorded CDR bytes, which it converts as it did live.
    os.replace(out, tmp_path / "live.pkl")
    n = sum(len(v) for v in values.values())
    m = sum(len(v) for v in physical.values())
    for federates, line in [
        ([], "replay: federates=1 messages=0 identical"),
        (["--federate", "ros", "--federate", "sink"], f"replay: federates=2 messages={n} physical_values={m} identical"),
    ]:
        r = hprm("replay", rec, "--check", *federates, *args)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.strip().splitlines()[-1] == line, r.stdout + r.stderr
        replayed = pickle.load(open(out, "rb"))
        os.remove(out)
        for kind in KINDS:
            assert len(replayed[kind]) == 3, kind
            for a, b in zip(live[kind], replayed[kind]):
                samples.assert_same(a, b, kind)


def test_a_message_the_bridge_cannot_decode_is_counted_lost_per_topic(procs, tmp_path, topics):  # noqa: F811
    """A publisher's bytes that are not a message of the topic's type: ROS
    delivers them as they are to the bridge's raw subscription (recording),
    and the bridge's reaction cannot decode them. Each is dropped and
    counted: in the federate's losses (its exit summary, `hprm ps`), under
    the bridge's output port, and in the bridge's own summary by topic."""
    ros_node(procs, "garble", "string", f"{topics}/string", 0.2)
    config = write_config(tmp_path, [(f"{topics}/string", "string", "ros->hprm", "string")])
    rec, out = tmp_path / "bridge.mcap", tmp_path / "got.pkl"
    p = procs([HPRM, "launch", "--record", str(rec), PROGRAM, BRIDGE, str(config), str(out), "--record", "string", "--count", "3"], "launch")
    finish(p)
    text = p.text()
    # Only whole messages (odd k) came through.
    got = pickle.load(open(out, "rb"))["string"]
    assert len(got) == 3 and all(index_of("string", v) % 2 == 1 for v in got), got
    ros = [line for line in text.splitlines() if line.startswith("[ros]")]
    warned = [line for line in ros if "dropped a message that could not be decoded as std_msgs/msg/String" in line]
    # Between the first whole message and the third, a garbled one at least.
    assert warned, text
    n = len(warned)
    done = [line for line in ros if "done; " in line]
    assert len(done) == 1 and f"done; {n} messages lost, 0 late: ros.ros.string: {n} undecodable" in done[0], text
    stopped = [line for line in ros if "bridge stopped; " in line]
    assert len(stopped) == 1, text
    assert f"bridge stopped; {n} ROS 2 message(s) dropped: {topics}/string: {n} undecodable (std_msgs/msg/String)" in stopped[0], text
