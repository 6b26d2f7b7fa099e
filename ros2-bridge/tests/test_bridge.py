"""hprm-ros2-bridge against a real ROS 2: rclpy nodes in their own
processes, an HPRM program (tests/program.py) whose federate "ros" is the
bridge binary.

Needs the environment of ros2-bridge/setup-ros2.sh (sourced), the hprm
package in the same Python, and the bridge built
(target/release/hprm-ros2-bridge at the repository root, or $HPRM_ROS2_BRIDGE).
"""

import os
import pickle
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import samples  # noqa: E402

BRIDGE = os.environ.get("HPRM_ROS2_BRIDGE") or os.path.join(HERE, "..", "..", "target", "release", "hprm-ros2-bridge")

try:
    import rclpy  # noqa: F401

    import hprm  # noqa: F401
except ImportError as e:  # pragma: no cover - reported as the skip reason
    pytest.skip(f"needs rclpy and hprm in this Python ({e}); run ros2-bridge/test.sh", allow_module_level=True)
if not os.path.exists(BRIDGE):
    pytest.skip(f"{BRIDGE} is not built; run ros2-bridge/build.sh", allow_module_level=True)


@pytest.fixture(autouse=True, scope="session")
def ros_domain():
    """A DDS domain of this run's own: other ROS 2 users of the host see
    none of its traffic. One per pytest-xdist worker (ros2-bridge/test.sh
    runs two): the workers' tests do not see each other's either."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ["ROS_DOMAIN_ID"] = str(20 + random.randrange(80 // workers) * workers + worker)
    yield


@pytest.fixture()
def topics(request):
    """A topic prefix unique to the test."""
    return f"/t{os.getpid()}_{request.node.name.replace('[', '_').replace(']', '').replace('-', '_')}"


class Proc:
    """A child process with its output in a file; stopped with SIGINT, then
    killed."""

    def __init__(self, argv, name, tmp, ready=None):
        self.log = os.path.join(tmp, f"{name}.log")
        self.out = open(self.log, "w")
        self.p = subprocess.Popen(argv, stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True)
        if ready:
            deadline = time.monotonic() + 30
            while ready not in self.text():
                assert self.p.poll() is None, f"{name} exited: {self.text()}"
                assert time.monotonic() < deadline, f"{name} never printed {ready!r}: {self.text()}"
                time.sleep(0.05)

    def text(self):
        with open(self.log) as f:
            return f.read()

    def wait(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGINT)
            if self.wait(10) is None:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.out.close()


@pytest.fixture()
def procs(tmp_path):
    started = []

    def start(argv, name, ready=None):
        p = Proc(argv, name, str(tmp_path), ready)
        started.append(p)
        return p

    yield start
    for p in reversed(started):
        p.stop()


def ros_node(start, *args, name=None):
    name = name or f"ros_{args[0]}_{os.path.basename(str(args[1]))}"
    return start([sys.executable, os.path.join(HERE, "ros_node.py"), *map(str, args)], name, ready="ready")


def write_config(tmp_path, topics=(), services=(), name="bridge.toml"):
    """topics: (topic, kind or type, direction, port[, extra toml]);
    services: (service, type, role, request, response)."""
    lines = []
    for t in topics:
        topic, kind, direction, port = t[:4]
        lines += ["[[topic]]", f'topic = "{topic}"', f'type = "{samples.KINDS.get(kind, kind)}"', f'direction = "{direction}"', f'port = "{port}"']
        if len(t) > 4:
            lines.append(t[4])
    for service, srv_type, role, req, resp in services:
        lines += ["[[service]]", f'service = "{service}"', f'type = "{srv_type}"', f'role = "{role}"', f'request = "{req}"', f'response = "{resp}"']
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def program(start, tmp_path, config, *args, name="program"):
    out = str(tmp_path / f"{name}.pkl")
    argv = [sys.executable, os.path.join(HERE, "program.py"), BRIDGE, config, out, *map(str, args)]
    return start(argv, name), out


def finish(p, timeout=120):
    rc = p.wait(timeout)
    assert rc is not None, f"the program did not finish in {timeout}s:\n{p.text()}"
    assert rc == 0, f"the program failed ({rc}):\n{p.text()}"


def index_of(kind, v):
    """Which sample a received message is (k)."""
    if kind == "string":
        return int(v["data"].split()[1])
    if kind == "twist":
        return int(v["linear"]["x"] - 0.5)
    if kind == "floats" or kind in samples.ARRAYS:
        return int(np.ravel(v["data"])[1])
    return int(v["header"]["stamp"]["sec"]) - 1000


def check_received(kind, values):
    for v in values:
        samples.assert_same(samples.plain(samples.make(kind, index_of(kind, v))), v, kind)


def record_from_ros(procs, tmp_path, topics, kinds, period):
    """An rclpy publisher per kind (every `period(kind)` s), 3 messages of
    each recorded by an HPRM federate through the bridge and checked field
    by field; returns them by kind."""
    for kind in kinds:
        ros_node(procs, "pub", kind, f"{topics}/{kind}", period(kind))
    config = write_config(tmp_path, [(f"{topics}/{k}", k, "ros->hprm", k) for k in kinds])
    p, out = program(procs, tmp_path, config, "--record", *kinds, "--count", 3)
    finish(p)
    got = pickle.load(open(out, "rb"))
    for kind in kinds:
        assert len(got[kind]) == 3
        check_received(kind, got[kind])
    return got


def test_ros_to_hprm_exact_contents(procs, tmp_path, topics):
    kinds = ["string", "twist", "image", "image_hd", "cloud", "imu", "floats"]
    got = record_from_ros(procs, tmp_path, topics, kinds, lambda kind: 0.3 if kind == "image_hd" else 0.1)
    # Numpy-compatible buffers, shaped and typed by the message's fields.
    for kind, shape in [("image", (480, 640, 3)), ("image_hd", (1080, 1920, 3))]:
        d = got[kind][0]["data"]
        assert (d.dtype, d.shape) == (np.uint8, shape)
        assert np.array_equal(d, samples.pixels(index_of(kind, got[kind][0]), *shape[:2]))
    cloud = got["cloud"][0]["data"]
    assert (cloud.dtype, cloud.shape) == (np.float32, (1, samples.POINTS, 4))
    assert np.array_equal(cloud, samples.points(index_of("cloud", got["cloud"][0])))
    assert got["floats"][0]["data"].dtype == np.float32 and got["floats"][0]["data"].shape == (2, 3)
    assert got["imu"][0]["orientation_covariance"].dtype == np.float64


def test_ros_to_hprm_bulk_types(procs, tmp_path, topics):
    # Over the store threshold but for "shorts": out-of-band, copied once
    # from the ROS message into the store (the Rust unit test
    # bulk_data_is_copied_once_into_the_store shows the single copy).
    got = record_from_ros(procs, tmp_path, topics, ["compressed", "bytes", "doubles", "shorts"], lambda kind: 0.2)
    d = got["compressed"][0]["data"]
    assert (d.dtype, d.shape) == (np.uint8, (samples.JPEG_BYTES,))
    for kind, (dtype, shape) in samples.ARRAYS.items():
        d = got[kind][0]["data"]
        assert (d.dtype, d.shape) == (dtype, shape), kind


def test_hprm_to_ros_exact_contents(procs, tmp_path, topics):
    kinds = ["string", "twist", "image", "cloud", "floats"]
    subs = {kind: ros_node(procs, "sub", kind, f"{topics}/{kind}", tmp_path / f"{kind}.pkl", 3) for kind in kinds}
    config = write_config(tmp_path, [(f"{topics}/{k}", k, "hprm->ros", k) for k in kinds])
    p, _ = program(procs, tmp_path, config, "--send", *[f"{k}:{k}" for k in kinds], "--timeout", "60s")
    for kind, sub in subs.items():
        assert sub.wait(90) == 0, f"the {kind} subscriber got nothing:\n{sub.text()}\n{p.text()}"
        check_received(kind, pickle.load(open(tmp_path / f"{kind}.pkl", "rb")))


@pytest.mark.parametrize("kind", ["image", "cloud", "imu", "twist", "range", "compressed", "doubles"])
def test_round_trip_keeps_every_field(procs, tmp_path, topics, kind):
    config = write_config(tmp_path, [(f"{topics}/in", kind, "ros->hprm", "frm"), (f"{topics}/out", kind, "hprm->ros", "to")])
    p, _ = program(procs, tmp_path, config, "--relay", "frm:to", "--timeout", "60s")
    rt = ros_node(procs, "roundtrip", kind, f"{topics}/in", f"{topics}/out", tmp_path / "rt.pkl", 3)
    assert rt.wait(90) == 0, f"nothing came back:\n{rt.text()}\n{p.text()}"
    check_received(kind, pickle.load(open(tmp_path / "rt.pkl", "rb")))


def test_generic_path_carries_any_built_type(procs, tmp_path, topics):
    ros_node(procs, "pub", "range", f"{topics}/range")
    config = write_config(tmp_path, [(f"{topics}/range", "range", "ros->hprm", "rng")])
    p, out = program(procs, tmp_path, config, "--record", "rng", "--count", 2)
    finish(p)
    check_received("range", pickle.load(open(out, "rb"))["rng"])


def test_services_both_ways(procs, tmp_path, topics):
    # HPRM calls a ROS service (std_srvs/SetBool served by rclpy) ...
    ros_node(procs, "serve", f"{topics}/set")
    # ... and serves one (std_srvs/Trigger) that rclpy calls.
    config = write_config(
        tmp_path,
        services=[
            (f"{topics}/set", "std_srvs/srv/SetBool", "client", "set_req", "set_resp"),
            (f"{topics}/trigger", "std_srvs/srv/Trigger", "server", "trig_req", "trig_resp"),
        ],
    )
    # The sink never has its 1000: the program runs until stopped.
    p, out = program(procs, tmp_path, config, "--send", "set_req:setbool", "--record", "set_resp", "--respond", "trig_req:trig_resp", "--count", 1000)
    caller = ros_node(procs, "call", f"{topics}/trigger", tmp_path / "calls.pkl", 2)
    assert caller.wait(90) == 0, f"the ROS client got no answer:\n{caller.text()}\n{p.text()}"
    deadline = time.monotonic() + 60
    while not (os.path.exists(out) and len(pickle.load(open(out, "rb"))["set_resp"]) >= 3):
        assert time.monotonic() < deadline and p.p.poll() is None, f"HPRM got no 3 responses:\n{p.text()}"
        time.sleep(0.2)
    p.stop()
    responses = pickle.load(open(out, "rb"))["set_resp"][:3]
    # Requests alternate data=True/False from k=1; the server echoes them.
    # One sent before discovery found the server goes unanswered (it flaked
    # once so: the first response answered k=2), so the responses alternate
    # from either value, each echoing its own request.
    success = [r["success"] for r in responses]
    assert success in ([True, False, True], [False, True, False]), success
    assert [r["message"] for r in responses] == [f"got {v}" for v in success]
    calls = pickle.load(open(tmp_path / "calls.pkl", "rb"))
    # Answered by the HPRM reaction, in order (a request retried after a
    # lost response skips a number).
    assert [c["success"] for c in calls] == [True, True]
    numbers = [int(c["message"].removeprefix("served by hprm ")) for c in calls]
    assert numbers == sorted(numbers) and len(set(numbers)) == 2, calls


def bridge_check(config, *extra):
    return subprocess.run([BRIDGE, "--config", config, "--check", "--discovery-ms", "5000", *extra], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "text,message",
    [
        ('[[topic]]\ntopic = "/a"\ntype = "std_msgs/msg/String"\ndirection = "up"\nport = "a"\n', "unknown variant `up`"),
        ('[[topic]]\ntopic = "/a"\ntype = "std_msgs/msg/String"\nport = "a"\n', "missing field `direction`"),
        ("[[topic]\n", "is not valid"),
        ('[[topic]]\ntopic = "/a"\ntype = "nope_msgs/msg/Thing"\ndirection = "ros->hprm"\nport = "a"\n', "is not one this bridge was built with"),
        ('[[service]]\nservice = "/s"\ntype = "nope_srvs/srv/Thing"\nrole = "client"\nrequest = "a"\nresponse = "b"\n', "service type \"nope_srvs/srv/Thing\" is not one this bridge was built with"),
        ('[[action]]\naction = "/a"\ntype = "nope_msgs/action/Thing"\nrole = "server"\ngoal = "a"\nresult = "b"\n', "action type \"nope_msgs/action/Thing\" is not one this bridge was built with"),
        ('[[parameter]]\nname = "gain"\ntype = "double"\ndefault = "high"\nport = "g"\n', "default = \"high\" is not a double value"),
    ],
)
def test_bad_configs_fail_at_start_with_one_sentence(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    r = bridge_check(str(path))
    assert r.returncode == 1, r
    assert message in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0, f"one sentence, not a trace: {r.stderr}"


def test_qos_and_type_mismatch_with_a_running_publisher(procs, tmp_path, topics):
    ros_node(procs, "pub", "string", f"{topics}/be", 0.1, "best_effort")
    wrong = write_config(tmp_path, [(f"{topics}/be", "twist", "ros->hprm", "a", 'qos = { reliability = "best_effort" }')], name="wrong.toml")
    r = bridge_check(wrong)
    assert r.returncode == 1 and "publishes std_msgs/msg/String, the config says geometry_msgs/msg/Twist" in r.stderr, r.stderr
    config = write_config(tmp_path, [(f"{topics}/be", "string", "ros->hprm", "a")])
    r = bridge_check(config)
    assert r.returncode == 1 and "QoS mismatch" in r.stderr and "best_effort" in r.stderr, r.stderr
    # Asking best_effort is compatible.
    ok = write_config(tmp_path, [(f"{topics}/be", "string", "ros->hprm", "a", 'qos = { reliability = "best_effort" }')], name="ok.toml")
    r = bridge_check(ok)
    assert r.returncode == 0, r.stderr


def test_qos_and_type_mismatch_with_a_running_subscriber(procs, tmp_path, topics):
    # rclpy subscribers that want reliable delivery, and the last message
    # kept for late joiners (transient local).
    ros_node(procs, "sub", "string", f"{topics}/rel", tmp_path / "rel.pkl", 1000)
    ros_node(procs, "sub", "string", f"{topics}/latched", tmp_path / "latched.pkl", 1000, "transient_local")
    best_effort = write_config(tmp_path, [(f"{topics}/rel", "string", "hprm->ros", "a", 'qos = { reliability = "best_effort" }')], name="be.toml")
    r = bridge_check(best_effort)
    assert r.returncode == 1, r.stderr
    assert "QoS mismatch with subscriber /test_sub_" in r.stderr and 'it asks reliable and the bridge publishes best_effort; set qos.reliability = "reliable"' in r.stderr, r.stderr
    volatile = write_config(tmp_path, [(f"{topics}/latched", "string", "hprm->ros", "a")], name="volatile.toml")
    r = bridge_check(volatile)
    assert r.returncode == 1, r.stderr
    assert 'it asks transient_local and the bridge publishes volatile; set qos.durability = "transient_local"' in r.stderr, r.stderr
    wrong = write_config(tmp_path, [(f"{topics}/rel", "twist", "hprm->ros", "a")], name="wrong.toml")
    r = bridge_check(wrong)
    assert r.returncode == 1 and "takes std_msgs/msg/String, the config says geometry_msgs/msg/Twist" in r.stderr, r.stderr
    # Offering what they ask (or more) is compatible.
    ok = write_config(
        tmp_path,
        [(f"{topics}/rel", "string", "hprm->ros", "a"), (f"{topics}/latched", "string", "hprm->ros", "b", 'qos = { durability = "transient_local" }')],
        name="ok.toml",
    )
    r = bridge_check(ok)
    assert r.returncode == 0, r.stderr


def test_program_and_config_must_agree(procs, tmp_path, topics):
    # The program declares port "b"; the config maps "a".
    config = write_config(tmp_path, [(f"{topics}/a", "string", "ros->hprm", "a")])
    p, _ = program(procs, tmp_path, config, "--record", "b", "--timeout", "20s")
    deadline = time.monotonic() + 60
    message = "the config maps port \"a\", which federate \"ros\" does not declare"
    while message not in p.text():
        assert time.monotonic() < deadline, p.text()
        time.sleep(0.2)
    # Before joining the federation, naming the fix.
    assert "declare it as an output" in p.text(), p.text()


def test_bridge_restart_while_ros_keeps_running(procs, tmp_path, topics):
    pub = ros_node(procs, "pub", "string", f"{topics}/s")
    sub = ros_node(procs, "sub", "string", f"{topics}/back", tmp_path / "back.pkl", 1000)
    config = write_config(tmp_path, [(f"{topics}/s", "string", "ros->hprm", "s"), (f"{topics}/back", "string", "hprm->ros", "back")])
    seen = 0
    for run in range(2):
        # Each run: a new bridge joins the running ROS graph, relays until
        # the subscriber has had 2 more, and is stopped.
        p, _ = program(procs, tmp_path, config, "--relay", "s:back", "--timeout", "60s", name=f"program{run}")
        deadline = time.monotonic() + 60
        while sub.text().count("got ") < seen + 2:
            assert time.monotonic() < deadline and p.p.poll() is None, f"run {run}: nothing relayed\n{p.text()}"
            time.sleep(0.1)
        p.stop()
        assert pub.p.poll() is None and sub.p.poll() is None, "the ROS nodes kept running"
        seen = sub.text().count("got ")
    check_received("string", pickle.load(open(tmp_path / "back.pkl", "rb")))


def test_the_bridge_alone_restarts_while_hprm_and_ros_keep_running(procs, tmp_path, topics):
    """The bridge process dies (SIGKILL) mid-run: the launcher restarts it
    alone (restart on failure), it rejoins the running program and the ROS
    graph, and the loop ROS -> bridge -> relay -> bridge -> ROS (zero delay
    on the way back: centralized coordination resolves it) carries messages
    again. The ROS nodes and the HPRM program keep running throughout."""
    pub = ros_node(procs, "pub", "string", f"{topics}/s")
    sub = ros_node(procs, "sub", "string", f"{topics}/back", tmp_path / "back.pkl", 1000)
    config = write_config(tmp_path, [(f"{topics}/s", "string", "ros->hprm", "s"), (f"{topics}/back", "string", "hprm->ros", "back")])
    p, _ = program(procs, tmp_path, config, "--relay", "s:back", "--timeout", "90s", "--restartable", "--zero-delay")

    def wait_for(what, ok, within=60):
        deadline = time.monotonic() + within
        while not ok():
            assert time.monotonic() < deadline and p.p.poll() is None, f"{what}\n{p.text()}"
            time.sleep(0.1)

    wait_for("nothing relayed", lambda: sub.text().count("got ") >= 2)
    bridges = subprocess.run(["pgrep", "-f", "--", f"--config {config}"], capture_output=True, text=True).stdout.split()
    assert len(bridges) == 1, bridges
    os.kill(int(bridges[0]), signal.SIGKILL)
    wait_for("the launcher did not restart the bridge", lambda: "restarting it (1 of 3 restarts)" in p.text())
    seen = sub.text().count("got ")
    wait_for("nothing relayed after the restart", lambda: sub.text().count("got ") >= seen + 2)
    again = subprocess.run(["pgrep", "-f", "--", f"--config {config}"], capture_output=True, text=True).stdout.split()
    assert len(again) == 1 and again != bridges, (bridges, again)
    assert pub.p.poll() is None and sub.p.poll() is None, "the ROS nodes kept running"
    assert p.text().count("restarting it") == 1, "only the bridge was restarted, once"
    check_received("string", pickle.load(open(tmp_path / "back.pkl", "rb")))
