"""hprm-ros2-bridge's services of any type, actions and parameters, against
real rclpy servers and clients (tests/ros_node.py) in their own processes.

One HPRM program (tests/interfaces_program.py) and one bridge run for the
whole module: the bridge calls a test_msgs/BasicTypes service and a
test_msgs/Fibonacci action server of rclpy's, serves both to rclpy
clients, and declares a parameter that an rclpy parameter client sets.
"""

import os
import pickle
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from test_bridge import BRIDGE, Proc, ros_domain, ros_node  # noqa: E402, F401 (ros_domain: the session's DDS domain)

# rclpy's test_msgs/action/Fibonacci server (ros_node.py servers): order n
# ends with this sequence; feedback carries its prefixes from 3 numbers on.
ROS_FIB_5 = [0, 1, 1, 2, 3, 5]
SUCCEEDED, CANCELED = 4, 5  # action_msgs/GoalStatus


@pytest.fixture(scope="module")
def bridged(tmp_path_factory, ros_domain):  # noqa: F811
    """The rclpy servers, the bridge's config and the running program."""
    tmp = tmp_path_factory.mktemp("interfaces")
    prefix = f"/i{os.getpid()}"
    node = f"bridge_{os.getpid()}"
    started = []

    def start(argv, name, ready=None):
        p = Proc(argv, name, str(tmp), ready)
        started.append(p)
        return p

    ros_node(start, "servers", f"{prefix}/basic", f"{prefix}/fib", name="ros_servers")
    config = tmp / "bridge.toml"
    config.write_text(
        f"""
[ros]
node = "{node}"

[[service]]
service = "{prefix}/basic"
type = "test_msgs/srv/BasicTypes"
role = "client"
request = "basic_req"
response = "basic_resp"

[[service]]
service = "{prefix}/served"
type = "test_msgs/srv/BasicTypes"
role = "server"
request = "served_req"
response = "served_resp"

[[action]]
action = "{prefix}/fib"
type = "test_msgs/action/Fibonacci"
role = "client"
goal = "fib_goal"
feedback = "fib_feedback"
result = "fib_result"
cancel = "fib_cancel"

[[action]]
action = "{prefix}/served_fib"
type = "test_msgs/action/Fibonacci"
role = "server"
goal = "served_goal"
feedback = "served_feedback"
result = "served_result"
cancel = "served_cancel"

[[parameter]]
name = "gain"
type = "double"
default = 1.5
port = "gain"
"""
    )
    out = str(tmp / "got.pkl")
    program = start([sys.executable, os.path.join(HERE, "interfaces_program.py"), BRIDGE, str(config), out], "program")

    class Bridged:
        def __init__(self):
            self.prefix, self.node, self.tmp, self.program, self.start = prefix, node, tmp, program, start

        def recorded(self):
            try:
                with open(out, "rb") as f:
                    return pickle.load(f)
            except (FileNotFoundError, EOFError):
                return None

        def wait_for(self, what, ok, within=60):
            """The recording once ok(recording) holds."""
            deadline = time.monotonic() + within
            while True:
                got = self.recorded()
                if got is not None and ok(got):
                    return got
                assert time.monotonic() < deadline and program.p.poll() is None, f"{what}:\n{program.text()}"
                time.sleep(0.2)

    bridged = Bridged()
    # The ROS 2 nodes a test starts reach the bridge's node as soon as it is
    # up, which on a loaded machine can be before its federate has started:
    # a goal is then rejected ("a goal arrived before the federate
    # started"), and a parameter set reaches HPRM only as the value it
    # starts with. The default of `gain` reaching HPRM says it has started.
    bridged.wait_for("the bridge's federate did not start (no value of gain reached HPRM)", lambda g: g.get("gain"))
    yield bridged
    for p in reversed(started):
        p.stop()


def test_hprm_calls_a_ros_service_of_any_type(bridged):
    got = bridged.wait_for("HPRM got no 3 BasicTypes responses", lambda g: len(g["basic_resp"]) >= 3)
    for r in got["basic_resp"][:3]:
        # Each answers its own request (one sent before discovery found
        # the server may go unanswered, as in test_services_both_ways).
        k = int(r["string_value"].removeprefix("ros got hprm "))
        assert r["int32_value"] == k + 100, r
    ks = [int(r["string_value"].split()[-1]) for r in got["basic_resp"][:3]]
    assert ks == sorted(set(ks)), ks


def test_ros_calls_an_hprm_reaction_of_any_type(bridged):
    caller = ros_node(bridged.start, "call_basic", f"{bridged.prefix}/served", bridged.tmp / "calls.pkl", 2)
    assert caller.wait(90) == 0, f"the ROS client got no answer:\n{caller.text()}\n{bridged.program.text()}"
    calls = pickle.load(open(bridged.tmp / "calls.pkl", "rb"))
    for k, c in enumerate(calls, 1):
        assert (c["int32_value"], c["string_value"]) == (2 * k, f"hprm got ros {k}"), c
    requests = bridged.recorded()["served_req"]
    assert [r["string_value"] for r in requests][-2:] == ["ros 1", "ros 2"], requests
    # Fields the request did not set arrive with their defaults.
    assert requests[-1]["bool_value"] is False and requests[-1]["float64_value"] == 0.0


def test_hprm_sends_action_goals_with_feedback_and_cancel(bridged):
    got = bridged.wait_for("HPRM's two Fibonacci goals did not end", lambda g: len(g["fib_result"]) >= 2)
    done, canceled = got["fib_result"][:2]
    assert (done["status"], done["result"]["sequence"]) == ("succeeded", ROS_FIB_5), done
    assert canceled["status"] == "canceled", canceled
    assert canceled["goal_id"] != done["goal_id"]
    by_goal = {}
    for f in got["fib_feedback"]:
        by_goal.setdefault(f["goal_id"], []).append(f["feedback"]["sequence"])
    # Every feedback of the first goal, in order, before its result.
    assert by_goal[done["goal_id"]] == [ROS_FIB_5[:n] for n in range(3, 7)], by_goal
    # The long goal was canceled at its second feedback: the server
    # stopped early, its result the sequence so far.
    seq = canceled["result"]["sequence"]
    assert 4 <= len(seq) < 100 and seq[:4] == [0, 1, 1, 2], seq
    assert len(by_goal[canceled["goal_id"]]) >= 2


def test_ros_action_client_gets_feedback_result_and_cancel_from_hprm(bridged):
    client = ros_node(bridged.start, "fib_client", f"{bridged.prefix}/served_fib", bridged.tmp / "fib.pkl")
    assert client.wait(90) == 0, f"the ROS action client did not finish:\n{client.text()}\n{bridged.program.text()}"
    fib = pickle.load(open(bridged.tmp / "fib.pkl", "rb"))
    short, canceled = fib["short"], fib["canceled"]
    # HPRM's reaction: a step every 100 ms, the result at `order` steps.
    assert (short["status"], short["sequence"]) == (SUCCEEDED, [0, 1, 1, 2, 3]), short
    assert short["feedback"] and all(short["sequence"][: len(f)] == f for f in short["feedback"]), short
    assert canceled["status"] == CANCELED and canceled["canceling"] == 1, canceled
    assert len(canceled["feedback"]) >= 2 and canceled["sequence"][:3] == [0, 1, 1], canceled
    got = bridged.recorded()
    goals = [g for g in got["served_goal"] if g["goal"]["order"] == 1000]
    assert [g["goal"]["order"] for g in got["served_goal"]][-2:] == [4, 1000], got["served_goal"]
    assert [c["goal_id"] for c in got["served_cancel"]] == [goals[-1]["goal_id"]], got["served_cancel"]


def test_parameters_set_from_ros_reach_hprm(bridged):
    setter = ros_node(bridged.start, "params", f"/{bridged.node}", bridged.tmp / "params.pkl")
    assert setter.wait(60) == 0, f"the parameter client did not finish:\n{setter.text()}\n{bridged.program.text()}"
    params = pickle.load(open(bridged.tmp / "params.pkl", "rb"))
    assert params["double"] == (True, ""), params
    ok, reason = params["string"]
    assert not ok and "double" in reason and "string" in reason, params
    assert params["undeclared"][0] is False, params
    assert params["gain"] == 0.25, params
    # The default once the federate started, then the value set; the
    # refused ones never reach HPRM.
    got = bridged.wait_for("HPRM did not get the new gain", lambda g: 0.25 in g["gain"])
    assert got["gain"] == [1.5, 0.25], got["gain"]
