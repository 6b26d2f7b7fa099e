"""Foxglove views in a recording (`hprm launch --record`), with real
processes: images and point clouds are also written with Foxglove's
published schemas (foxglove.RawImage, foxglove.PointCloud, protobuf), read
back with the public `mcap` package, decoded both from the schema the file
carries (mcap-protobuf-support) and with PyPI's foxglove-schemas-protobuf,
and compared pixel by pixel and point by point with what was sent; the
values' own channels and their replay are unchanged."""

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

mcap_reader = pytest.importorskip("mcap.reader", reason="the `mcap` package reads recordings back (pip install mcap)")
mcap_protobuf = pytest.importorskip(
    "mcap_protobuf.decoder", reason="mcap-protobuf-support decodes protobuf channels (pip install mcap-protobuf-support)"
)
fox_image = pytest.importorskip(
    "foxglove_schemas_protobuf.RawImage_pb2", reason="Foxglove's schemas (pip install foxglove-schemas-protobuf)"
)
from foxglove_schemas_protobuf.PackedElementField_pb2 import PackedElementField  # noqa: E402
from foxglove_schemas_protobuf.PointCloud_pb2 import PointCloud  # noqa: E402

from hprm import _native  # noqa: E402

PROGRAM = Path(__file__).parent / "programs" / "shown.py"
COUNT = 3
FRAME, CLOUD, RELAYED = "camera.camera.frame", "camera.camera.cloud", "relay.relay.out"


@pytest.fixture(scope="module")
def shown():
    """shown.py's `frame`, `cloud` and `flipped`, without running the program."""
    spec = importlib.util.spec_from_file_location("shown_values", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def env():
    # A short runtime directory: socket paths have a length limit.
    runtime = tempfile.mkdtemp(prefix="fox-", dir="/tmp")
    return dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=runtime, HPRM_PYTHON=sys.executable)


def hprm(exe, env, *args):
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=180, env=env)


@pytest.fixture(scope="module")
def recording(hprm_cli, env, tmp_path_factory):
    out = tmp_path_factory.mktemp("fox") / "run.mcap"
    r = hprm(hprm_cli, env, "launch", "--fast", "--record", out, PROGRAM, COUNT)
    assert r.returncode == 0, r.stderr
    assert f"recorded {3 * COUNT} messages" in r.stderr and "nothing lost" in r.stderr, r.stderr
    assert f"sink: got {COUNT} images" in r.stderr, r.stderr
    return out


def read(path):
    """{topic: [(schema name, message encoding, log_time, data, decoded)]}: views decoded
    from the schema in the file, values by the codec."""
    codec = _native.Codec()
    decoder = mcap_protobuf.DecoderFactory()
    by_topic = {}
    with open(path, "rb") as f:
        for schema, channel, message in mcap_reader.make_reader(f).iter_messages():
            if channel.message_encoding == "protobuf":
                decoded = decoder.decoder_for("protobuf", schema)(message.data)
            else:
                decoded = codec.decode(message.data, copy=True)
            by_topic.setdefault(channel.topic, []).append((schema.name, schema.encoding, channel.metadata, message.log_time, message.data, decoded))
    return by_topic


def check_image(view, time, pixels, encoding, frame_id):
    """`view` (a RawImage however decoded) shows `pixels` (HxW or HxWxC uint8) at `time`."""
    height, width = pixels.shape[:2]
    assert (view.width, view.height, view.step) == (width, height, pixels.strides[0])
    assert (view.encoding, view.frame_id) == (encoding, frame_id)
    assert view.timestamp.ToNanoseconds() == time
    got = np.frombuffer(view.data, dtype=np.uint8).reshape(pixels.shape)
    assert np.array_equal(got, pixels)


def test_images_and_point_clouds_are_written_with_foxglove_schemas(recording, shown):
    by_topic = read(recording)
    views = sorted(t for t in by_topic if t.startswith("foxglove/"))
    assert views == [f"foxglove/{CLOUD}", f"foxglove/{FRAME}/gray", f"foxglove/{FRAME}/image", f"foxglove/{RELAYED}"]
    for topic in views:
        messages = by_topic[topic]
        assert len(messages) == COUNT, topic
        of = topic.removeprefix("foxglove/").removesuffix("/gray").removesuffix("/image")
        # Each view is at its value's tag, on a channel that names it.
        assert [m[3] for m in messages] == [m[3] for m in by_topic[of]], topic
        assert all(m[2] == {"view_of": of} and m[1] == "protobuf" for m in messages), topic

    for n in range(COUNT):
        sent = shown.frame(n)
        for key, encoding, frame_id in (("image", "bgr8", "camera"), ("gray", "mono8", "camera")):
            schema, _, _, time, data, decoded = by_topic[f"foxglove/{FRAME}/{key}"][n]
            assert schema == "foxglove.RawImage"
            # Decoded with the schema the file carries, and with Foxglove's published one.
            check_image(decoded, time, sent[key], encoding, frame_id)
            check_image(fox_image.RawImage.FromString(data), time, sent[key], encoding, frame_id)
        schema, _, _, time, data, decoded = by_topic[f"foxglove/{RELAYED}"][n]
        assert schema == "foxglove.RawImage"
        check_image(fox_image.RawImage.FromString(data), time, shown.flipped(sent["image"]), "rgb8", "")

        points = shown.cloud(n)
        schema, _, _, time, data, decoded = by_topic[f"foxglove/{CLOUD}"][n]
        assert schema == "foxglove.PointCloud"
        for cloud in (decoded, PointCloud.FromString(data)):
            assert cloud.timestamp.ToNanoseconds() == time and cloud.frame_id == ""
            assert cloud.point_stride == 16
            assert [(f.name, f.offset, f.type) for f in cloud.fields] == [
                (name, 4 * i, PackedElementField.FLOAT32) for i, name in enumerate(("x", "y", "z", "intensity"))
            ]
            assert cloud.pose.orientation.w == 1.0
            got = np.frombuffer(cloud.data, dtype="<f4").reshape(points.shape)
            assert np.array_equal(got, points)

    # The values' own channels hold what was sent, as without views.
    for n, (schema, encoding, _, _, _, value) in enumerate(by_topic[FRAME]):
        assert (schema, encoding) == ("hprm.value", "hprm-msgpack")
        assert value.keys() == shown.frame(n).keys() and np.array_equal(value["image"], shown.frame(n)["image"])
    assert all(np.array_equal(m[5], shown.cloud(n)) for n, m in enumerate(by_topic[CLOUD]))


def test_bag_info_lists_the_views_apart_and_replay_is_unchanged(recording, hprm_cli, env):
    info = hprm(hprm_cli, env, "bag", "info", recording)
    assert info.returncode == 0, info.stderr
    out = info.stdout
    # The counts are the connections' own; the views are listed apart, with what they show.
    assert f"messages:    {3 * COUNT} (" in out and "losses:      none" in out, out
    connections, views = out.split("connections:\n")[1].split("foxglove views:\n")
    assert "foxglove/" not in connections and FRAME in connections, out
    assert f"foxglove/{FRAME}/image" in views and f"(foxglove.RawImage of {FRAME})" in views, out
    assert f"(foxglove.PointCloud of {CLOUD})" in views, out
    echo = hprm(hprm_cli, env, "bag", "echo", recording, f"foxglove/{CLOUD}", "-n", "1")
    assert echo.returncode == 0 and "a Foxglove view (protobuf, " in echo.stdout, echo.stdout + echo.stderr

    replay = hprm(hprm_cli, env, "replay", recording, PROGRAM, "--check", COUNT)
    assert replay.returncode == 0, replay.stderr
    assert f"replay: federates=2 messages={COUNT} identical" in replay.stdout, replay.stdout + replay.stderr


def test_views_can_be_turned_off(hprm_cli, env, tmp_path):
    out = tmp_path / "off.mcap"
    r = hprm(hprm_cli, env, "launch", "--fast", "--record", out, "--record-foxglove", "off", PROGRAM, 1)
    assert r.returncode == 0, r.stderr
    topics = set(read(out))
    assert topics == {FRAME, CLOUD, RELAYED}, topics
