"""`hprm foxglove` on a real running program (tests/programs/live_camera.py:
a camera federate sending images and point clouds to a viewer federate),
read by a Foxglove WebSocket protocol client (the `websockets` package,
offering subprotocol `foxglove.sdk.v1`: the `foxglove.websocket.v1`
protocol under the name Foxglove's SDK, app and foxglove_bridge 3 use): the server's info and channels, then binary
message frames of the subscribed channels, the images and clouds decoded
with Foxglove's published schemas (foxglove-schemas-protobuf) and compared
with what was sent, stamped with their tags; the values' own channel as
JSON. Also `hprm launch --foxglove`, and the errors for an unknown
program, federate or port and a taken address."""

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

ws_client = pytest.importorskip("websockets.sync.client", reason="the protocol client (pip install websockets; the test command does)")
RawImage = pytest.importorskip("foxglove_schemas_protobuf.RawImage_pb2", reason="pip install foxglove-schemas-protobuf").RawImage
from foxglove_schemas_protobuf.PackedElementField_pb2 import PackedElementField  # noqa: E402
from foxglove_schemas_protobuf.PointCloud_pb2 import PointCloud  # noqa: E402

HERE = Path(__file__).parent
PROGRAM = HERE / "programs" / "live_camera.py"
sys.path.insert(0, str(PROGRAM.parent))
import live_camera  # noqa: E402

FRAME, CLOUD = "camera.camera.frame", "camera.camera.cloud"
IMAGE_VIEW, CLOUD_VIEW = f"foxglove/{FRAME}/image", f"foxglove/{CLOUD}"
SUBPROTOCOL = "foxglove.sdk.v1"
# Binary server messages: opcode 1 is a message of a subscription.
MESSAGE_DATA = 1
# A subscribed channel with nothing for this long is subscribed again (see Client.until).
RESUBSCRIBE_AFTER = 2.0


def hprm(exe, env, *args, timeout=60):
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def env(daemons_built):
    # Short: runtime directories hold Unix sockets, whose paths are bounded.
    base = tempfile.mkdtemp(prefix="hfox", dir="/tmp")
    yield dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=base, HPRM_PYTHON=sys.executable)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def built_in(hprm_cli, env):
    """Skips where `hprm` was built without the server (cargo feature foxglove-live; CI builds it in)."""
    r = hprm(hprm_cli, env, "foxglove", "--runtime-base", env["XDG_RUNTIME_DIR"])
    if "built without the Foxglove WebSocket server" in r.stderr:
        # scripts/test-all.sh builds it in (and says so): there, a missing server fails.
        assert "foxglove-live" not in os.environ.get("HPRM_CLI_FEATURES", ""), f"{hprm_cli} was built without foxglove-live: {r.stderr}"
        pytest.skip("this hprm has no Foxglove server: cargo build -p hprm-cli --features foxglove-live")
    assert "no HPRM program is running" in r.stderr, r.stderr
    return hprm_cli


def wait_for_line(proc, pattern, what):
    """The first match of `pattern` in `proc`'s output (other lines are kept)."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    raise AssertionError(f"no {what} in the output of {proc.args}: {''.join(seen)}")


@pytest.fixture(scope="module")
def camera(built_in, env):
    """live_camera.py running (10 s of logical time at most), stopped afterwards."""
    proc = subprocess.Popen([sys.executable, str(PROGRAM), "200"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # Both federates running: the camera's tap answers.
        deadline = time.monotonic() + 60
        while True:
            r = hprm(built_in, env, "topic", "echo", "-n", "1", FRAME)
            if r.returncode == 0:
                break
            assert proc.poll() is None and time.monotonic() < deadline, r.stderr
            time.sleep(0.2)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


@pytest.fixture(scope="module")
def server(built_in, env, camera):
    """`hprm foxglove` on a free port, streaming the camera; its address."""
    proc = subprocess.Popen([str(built_in), "foxglove", "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield wait_for_line(proc, r"ws://(127\.0\.0\.1:\d+)", "address").group(1)
    finally:
        proc.kill()
        proc.wait()


class Client:
    """A Foxglove WebSocket client: the server's info and channels, subscriptions, messages."""

    def __init__(self, address):
        self.connection = ws_client.connect(f"ws://{address}", subprotocols=[SUBPROTOCOL], max_size=None, open_timeout=30)
        self.info = None
        self.channels = {}  # topic -> advertised channel
        self.subscriptions = {}  # subscription id -> topic
        self.subscribed_at = {}  # topic -> when last subscribed
        self.messages = []  # (topic, log time, payload)

    def __enter__(self):
        self.ws = self.connection.__enter__()
        assert self.ws.subprotocol == SUBPROTOCOL
        return self

    def __exit__(self, *exc):
        return self.connection.__exit__(*exc)

    def receive(self, timeout):
        message = self.ws.recv(timeout=timeout)
        if isinstance(message, str):
            op = json.loads(message)
            if op["op"] == "serverInfo":
                self.info = op
            elif op["op"] == "advertise":
                self.channels.update({c["topic"]: c for c in op["channels"]})
            return
        assert message[0] == MESSAGE_DATA, message[:1]
        sub, log_time = int.from_bytes(message[1:5], "little"), int.from_bytes(message[5:13], "little")
        self.messages.append((self.subscriptions[sub], log_time, message[13:]))

    def until(self, done, what, timeout=30):
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"no {what} within {timeout} s: channels {sorted(self.channels)}, {len(self.messages)} messages"
            try:
                self.receive(timeout=min(RESUBSCRIBE_AFTER, max(0.01, deadline - time.monotonic())))
            except TimeoutError:
                pass
            # Foxglove's server (the foxglove crate, 0.30) adds a channel to a client's table just
            # after queueing its advertisement, so a subscription sent back at once may find it
            # unknown and be dropped (it logs "attempted to subscribe to unknown channel"): a
            # subscribed topic that stays silent is subscribed again.
            now = time.monotonic()
            silent = [t for t, at in self.subscribed_at.items() if now - at > RESUBSCRIBE_AFTER and not self.of(t)]
            if silent:
                self.subscribe(*silent)

    def subscribe(self, *topics):
        subs = []
        for topic in topics:
            sub = len(self.subscriptions) + 1
            self.subscriptions[sub] = topic
            subs.append({"id": sub, "channelId": self.channels[topic]["id"]})
            self.subscribed_at[topic] = time.monotonic()
        self.ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))

    def of(self, topic):
        return [(t, data) for top, t, data in self.messages if top == topic]


def test_images_and_clouds_stream_under_foxglove_schemas(server):
    with Client(server) as c:
        c.until(lambda: c.info is not None, "serverInfo")
        # Read-only: no capability a client could publish, call or set with.
        assert c.info["capabilities"] == [], c.info
        c.until(lambda: {FRAME, CLOUD, IMAGE_VIEW, CLOUD_VIEW} <= c.channels.keys(), "advertised channels")
        # Only the program's connections and their views, nothing else.
        assert sorted(c.channels) == sorted([FRAME, CLOUD, IMAGE_VIEW, CLOUD_VIEW])
        for topic, name in ((IMAGE_VIEW, "foxglove.RawImage"), (CLOUD_VIEW, "foxglove.PointCloud")):
            ch = c.channels[topic]
            assert (ch["encoding"], ch["schemaName"], ch["schemaEncoding"]) == ("protobuf", name, "protobuf"), ch
            assert base64.b64decode(ch["schema"]), ch
        assert c.channels[FRAME]["encoding"] == "json"

        c.subscribe(FRAME, IMAGE_VIEW, CLOUD_VIEW)
        # Three frames seen on all three channels.
        def complete():
            times = [{t for t, _ in c.of(topic)} for topic in (FRAME, IMAGE_VIEW, CLOUD_VIEW)]
            return len(times[0] & times[1] & times[2]) >= 3

        c.until(complete, "three frames with their views")
        values = {t: json.loads(data) for t, data in c.of(FRAME)}
        images = dict(c.of(IMAGE_VIEW))
        clouds = dict(c.of(CLOUD_VIEW))
        shown = sorted(set(values) & set(images) & set(clouds))
        for t in shown:
            value = values[t]
            n = value["n"]
            assert value["frame_id"] == "camera"
            assert value["image"] == {"buffer": {"dtype": "|u1", "shape": [live_camera.HEIGHT, live_camera.WIDTH, 3], "nbytes": live_camera.HEIGHT * live_camera.WIDTH * 3, "in": "inline"}}
            sent = live_camera.frame(n)["image"]
            image = RawImage.FromString(images[t])
            assert image.timestamp.ToNanoseconds() == t
            assert (image.width, image.height, image.step, image.encoding, image.frame_id) == (live_camera.WIDTH, live_camera.HEIGHT, live_camera.WIDTH * 3, "rgb8", "camera")
            assert np.array_equal(np.frombuffer(image.data, dtype=np.uint8).reshape(sent.shape), sent)

            cloud = PointCloud.FromString(clouds[t])
            assert cloud.timestamp.ToNanoseconds() == t and cloud.point_stride == 12
            assert [(f.name, f.offset, f.type) for f in cloud.fields] == [(k, 4 * i, PackedElementField.FLOAT32) for i, k in enumerate("xyz")]
            points = live_camera.cloud(n)
            assert np.array_equal(np.frombuffer(cloud.data, dtype="<f4").reshape(points.shape), points)
        # Stamped with their tags: frame n at the start plus n periods.
        first = shown[0]
        assert all(t - first == (values[t]["n"] - values[first]["n"]) * live_camera.PERIOD_NS for t in shown), [(t, values[t]["n"]) for t in shown]
        # The cloud's own channel was not subscribed: nothing of it came.
        assert not c.of(CLOUD)


def test_errors_name_what_is_wrong(built_in, env, server):
    r = hprm(built_in, env, "foxglove", "--listen", "127.0.0.1:0", "--topics", "camera.nope")
    assert r.returncode == 2 and 'no output "nope"' in r.stderr and FRAME in r.stderr, r.stderr
    r = hprm(built_in, env, "foxglove", "--listen", "127.0.0.1:0", "--topics", "ghost.image")
    assert r.returncode == 2 and 'no federate "ghost"' in r.stderr and "camera, viewer" in r.stderr, r.stderr
    r = hprm(built_in, env, "foxglove", "--listen", "127.0.0.1:0", "--program", "nope")
    assert r.returncode == 2 and 'no running program is named "nope"' in r.stderr and "live_camera" in r.stderr, r.stderr
    r = hprm(built_in, env, "foxglove", "--listen", server, "--topics", FRAME)
    assert r.returncode == 2 and f"cannot listen on {server}" in r.stderr, r.stderr


def test_launch_serves_the_program_it_starts(built_in, env):
    proc = subprocess.Popen([str(built_in), "launch", "--foxglove=127.0.0.1:0", PROGRAM, "400"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with Client(wait_for_line(proc, r"ws://(127\.0\.0\.1:\d+)", "address").group(1)) as c:
            c.until(lambda: IMAGE_VIEW in c.channels, "the image view")
            c.subscribe(IMAGE_VIEW)
            c.until(lambda: c.of(IMAGE_VIEW), "an image")
            image = RawImage.FromString(c.of(IMAGE_VIEW)[0][1])
            assert (image.width, image.height, image.encoding) == (live_camera.WIDTH, live_camera.HEIGHT, "rgb8")
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out


# Large enough for the store: 921,600-byte images, 240,000-byte clouds.
LARGE = (480, 640, 20_000)
LARGE_FRAMES = 160


def store_figures(store_bin, socket, env):
    r = subprocess.run([str(store_bin), "stats", "--socket", socket, "--json"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_values_through_the_store_are_shown_and_released(built_in, env, store_bin):
    """A 480x640x3 image and a 20,000-point cloud per frame, both in the
    store: `hprm foxglove` holds each value it shows (a delivery of its
    own, taken zero-copy and released), so Foxglove gets them pixel by
    pixel and point by point while the viewer federate reads every frame
    intact; a second `hprm foxglove` stopped with SIGINT mid-stream releases
    what it held; once the frames stop, the store holds nothing (no
    delivery left for its TTL)."""
    height, width, points = LARGE
    proc = subprocess.Popen([sys.executable, str(PROGRAM), "400", str(LARGE_FRAMES), *map(str, LARGE)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    servers = []
    try:
        deadline = time.monotonic() + 60
        while True:
            r = hprm(built_in, env, "ps", "--json")
            # This program (its launcher is the Python process), not another test's.
            running = [p for p in json.loads(r.stdout or "[]") if p["launch"]["pid"] == proc.pid]
            if running and hprm(built_in, env, "topic", "echo", "--program", proc.pid, "-n", "1", FRAME).returncode == 0:
                break
            assert proc.poll() is None and time.monotonic() < deadline, r.stderr
            time.sleep(0.2)
        socket = running[0]["launch"]["store"]["socket"]

        def serve():
            s = subprocess.Popen([str(built_in), "foxglove", "--program", str(proc.pid), "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            servers.append(s)
            return s, wait_for_line(s, r"ws://(127\.0\.0\.1:\d+)", "address").group(1)

        first, address = serve()
        second, address2 = serve()
        with Client(address) as c, Client(address2) as c2:
            c.until(lambda: {FRAME, IMAGE_VIEW, CLOUD_VIEW} <= c.channels.keys(), "advertised channels")
            assert c.channels[IMAGE_VIEW]["schemaName"] == "foxglove.RawImage" and c.channels[CLOUD_VIEW]["schemaName"] == "foxglove.PointCloud"
            c.subscribe(FRAME, IMAGE_VIEW, CLOUD_VIEW)
            c2.until(lambda: IMAGE_VIEW in c2.channels, "the image view")
            c2.subscribe(IMAGE_VIEW)

            def complete():
                times = [{t for t, _ in c.of(topic)} for topic in (FRAME, IMAGE_VIEW, CLOUD_VIEW)]
                return len(times[0] & times[1] & times[2]) >= 3

            c.until(complete, "three large frames with their views")
            try:
                c2.until(lambda: c2.of(IMAGE_VIEW), "an image on the second server")
            except Exception as e:
                second.kill()
                raise AssertionError(f"the second server said: {second.communicate()[1][-4000:]}") from e
            # Ctrl-C on the second server mid-stream: it ends, releasing what its tap held.
            second.send_signal(signal.SIGINT)
            _, err2 = second.communicate(timeout=30)
            assert second.returncode == 0 and "stopped" in err2, err2
            assert re.search(rf"hprm foxglove: {FRAME}: \d+ values, [1-9]\d* images and clouds shown", err2), err2

            values = {t: v for t, data in c.of(FRAME) if (v := json.loads(data))["n"] < LARGE_FRAMES}
            images, clouds = dict(c.of(IMAGE_VIEW)), dict(c.of(CLOUD_VIEW))
            shown = sorted(set(values) & set(images) & set(clouds))
            for t in shown:
                n = values[t]["n"]
                assert re.fullmatch(r"store object [0-9a-f]+", values[t]["image"]["buffer"]["in"]), values[t]
                assert values[t]["image"]["buffer"]["nbytes"] == height * width * 3 == 921_600
                sent = live_camera.frame(n, height, width)["image"]
                image = RawImage.FromString(images[t])
                assert image.timestamp.ToNanoseconds() == t
                assert (image.width, image.height, image.step, image.encoding) == (width, height, width * 3, "rgb8")
                assert np.array_equal(np.frombuffer(image.data, dtype=np.uint8).reshape(sent.shape), sent), f"frame {n}: pixels differ"
                cloud = PointCloud.FromString(clouds[t])
                assert np.array_equal(np.frombuffer(cloud.data, dtype="<f4").reshape(points, 3), live_camera.cloud(n, points)), f"cloud {n} differs"
            # The camera's last (tiny) frame reached the first server (it reads every value it gets, held or
            # not); the viewer let go of the last large one when it came.
            c.until(lambda: any(json.loads(d)["n"] == LARGE_FRAMES for _, d in c.of(FRAME)), "the last frame", timeout=60)

        # Every delivery settled, the tap's included: nothing left in the store, long before its 30 s TTL.
        def empty():
            s = store_figures(store_bin, socket, env)
            return s["objects_created"] + s["objects_sealed"] == 0 and s["pending_deliveries"] == 0 and s["objects_referenced"] == 0, s

        deadline = time.monotonic() + 10
        while not empty()[0]:
            assert time.monotonic() < deadline, f"objects still in the store after the last frame: {empty()[1]}"
            time.sleep(0.1)
        assert empty()[1]["expired_deliveries"] == 0, empty()[1]

        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        m = re.search(r"viewer: (\d+) frames, (\d+) intact", out)
        assert m and int(m.group(1)) == int(m.group(2)) == LARGE_FRAMES + 1, out
        _, err = first.communicate(timeout=30)
        counts = re.search(rf"hprm foxglove: {FRAME}: (\d+) values, (\d+) images and clouds shown, (\d+) not shown", err)
        assert counts and int(counts.group(2)) >= 6, err
        print(counts.group(0))
    finally:
        for s in servers:
            if s.poll() is None:
                s.kill()
                s.wait()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
