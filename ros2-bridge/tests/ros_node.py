"""A real rclpy node for the bridge tests, in its own process.

  ros_node.py pub KIND TOPIC [PERIOD_S] [QOS]      publish make(KIND, k), k = 1, 2, ... forever
  ros_node.py garble KIND TOPIC [PERIOD_S]         as pub, but every even k sends make(KIND, k)'s CDR bytes cut
                                                   in half (rclpy publishes bytes as they are): no reader
                                                   can decode those
  ros_node.py sub KIND TOPIC OUT N [QOS]           record the first N messages (plain) to OUT (pickle), then exit
  ros_node.py roundtrip KIND IN OUT FILE N         publish on IN, record what comes back on OUT
  ros_node.py serve SERVICE                        std_srvs/SetBool: success = data, message "got <data>"
  ros_node.py call SERVICE FILE N                  call std_srvs/Trigger N times, record the responses
  ros_node.py servers SERVICE ACTION               test_msgs BasicTypes (int32_value + 100, "ros got <string_value>")
                                                   and Fibonacci (a step every 100 ms, cancelable)
  ros_node.py call_basic SERVICE FILE N            call test_msgs/BasicTypes N times, record the responses
  ros_node.py fib_client ACTION FILE               a Fibonacci goal of order 4 to its result, then one of
                                                   order 1000 canceled at its second feedback; records both
  ros_node.py params NODE FILE                     set and get the bridge node's parameter "gain" (rclpy's
                                                   parameter client), record the outcomes

QOS is "reliable" (default), "best_effort" or "transient_local" (reliable,
transient local). Prints "ready" once its entities exist.
"""

import os
import pickle
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rclpy  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402

import samples  # noqa: E402


def msg_class(kind):
    return type(samples.make(kind, 1))


def qos(name="reliable"):
    return QoSProfile(
        depth=10,
        reliability=ReliabilityPolicy.BEST_EFFORT if name == "best_effort" else ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if name == "transient_local" else DurabilityPolicy.VOLATILE,
    )


def write(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(obj, f)
    os.replace(tmp, path)


def serve_interfaces(node, service, action):
    """A BasicTypes service and a Fibonacci action server, spun by several
    threads (the action's execute callback sleeps between steps)."""
    from rclpy.action import ActionServer, CancelResponse, GoalResponse
    from rclpy.callback_groups import ReentrantCallbackGroup
    from rclpy.executors import MultiThreadedExecutor
    from test_msgs.action import Fibonacci
    from test_msgs.srv import BasicTypes

    def basic(req, resp):
        resp.int32_value = req.int32_value + 100
        resp.string_value = f"ros got {req.string_value}"
        resp.float64_value = req.float64_value
        return resp

    def execute(goal):
        seq = [0, 1]
        for _ in range(1, goal.request.order):
            if goal.is_cancel_requested:
                goal.canceled()
                return Fibonacci.Result(sequence=seq)
            seq.append(seq[-1] + seq[-2])
            goal.publish_feedback(Fibonacci.Feedback(sequence=seq))
            time.sleep(0.1)
        goal.succeed()
        return Fibonacci.Result(sequence=seq)

    group = ReentrantCallbackGroup()
    node.create_service(BasicTypes, service, basic, callback_group=group)
    ActionServer(
        node,
        Fibonacci,
        action,
        execute_callback=execute,
        goal_callback=lambda _: GoalResponse.ACCEPT,
        cancel_callback=lambda _: CancelResponse.ACCEPT,
        callback_group=group,
    )
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    print("ready", flush=True)
    executor.spin()


def call_n(node, srv, service, n, request):
    """Calls `service` until `n` calls have answered (the k-th call, from 1,
    sends `request(k)`) and returns the answers as plain values."""
    client = node.create_client(srv, service)
    print("ready", flush=True)
    while not client.wait_for_service(timeout_sec=0.5):
        pass
    got = []
    while len(got) < n:
        # A response can be lost while discovery of the response path is
        # still under way (a ROS 2 race): retry after 3 s.
        fut = client.call_async(request(len(got) + 1))
        rclpy.spin_until_future_complete(node, fut, timeout_sec=3.0)
        if fut.done():
            got.append(samples.plain(fut.result()))
        else:
            client.remove_pending_request(fut)
            print("call timed out; retrying", flush=True)
    return got


def spin_until(node, fut, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not fut.done():
        if time.monotonic() > deadline:
            raise SystemExit(f"no {what} in {timeout:.0f} s")
        rclpy.spin_once(node, timeout_sec=0.05)
    return fut.result()


def fibonacci_client(node, action):
    """Goal order 4 to its result; then order 1000, canceled at its second
    feedback. Returns what each goal got."""
    from rclpy.action import ActionClient
    from test_msgs.action import Fibonacci

    client = ActionClient(node, Fibonacci, action)
    print("ready", flush=True)
    while not client.wait_for_server(timeout_sec=0.5):
        pass
    out = {}
    for name, order in [("short", 4), ("canceled", 1000)]:
        feedback = []
        sent = client.send_goal_async(Fibonacci.Goal(order=order), feedback_callback=lambda f, got=feedback: got.append(list(f.feedback.sequence)))
        goal = spin_until(node, sent, "goal response")
        assert goal.accepted, "the goal was rejected"
        result = goal.get_result_async()
        cancel = None
        while not result.done():
            rclpy.spin_once(node, timeout_sec=0.05)
            if name == "canceled" and cancel is None and len(feedback) >= 2:
                cancel = spin_until(node, goal.cancel_goal_async(), "cancel response")
        res = result.result()
        out[name] = {
            "feedback": feedback,
            "status": res.status,
            "sequence": list(res.result.sequence),
            "canceling": None if cancel is None else len(cancel.goals_canceling),
        }
        print(f"{name}: status {res.status}", flush=True)
    return out


def set_parameters(node, bridge):
    """Sets the bridge's "gain" to 0.25 (a double), then to a string (of the
    wrong type), then "undeclared"; reads "gain" back."""
    from rclpy.parameter import Parameter
    from rclpy.parameter_client import AsyncParameterClient

    client = AsyncParameterClient(node, bridge)
    print("ready", flush=True)
    while not client.wait_for_services(timeout_sec=0.5):
        pass
    out = {}
    for name, param in [
        ("double", Parameter("gain", Parameter.Type.DOUBLE, 0.25)),
        ("string", Parameter("gain", Parameter.Type.STRING, "high")),
        ("undeclared", Parameter("undeclared", Parameter.Type.DOUBLE, 1.0)),
    ]:
        r = spin_until(node, client.set_parameters([param]), f"answer to setting {name}").results[0]
        out[name] = (r.successful, r.reason)
    values = spin_until(node, client.get_parameters(["gain"]), "parameter values").values
    out["gain"] = values[0].double_value
    return out


def main():
    mode = sys.argv[1]
    rclpy.init()
    node = rclpy.create_node(f"test_{mode}_{os.getpid()}")
    try:
        if mode == "pub":
            kind, topic = sys.argv[2], sys.argv[3]
            period = float(sys.argv[4]) if len(sys.argv) > 4 else 0.1
            pub = node.create_publisher(msg_class(kind), topic, qos(sys.argv[5] if len(sys.argv) > 5 else "reliable"))
            print("ready", flush=True)
            k = 0
            while True:
                k += 1
                pub.publish(samples.make(kind, k))
                rclpy.spin_once(node, timeout_sec=period)
        elif mode == "garble":
            from rclpy.serialization import serialize_message

            kind, topic = sys.argv[2], sys.argv[3]
            period = float(sys.argv[4]) if len(sys.argv) > 4 else 0.1
            pub = node.create_publisher(msg_class(kind), topic, qos())
            print("ready", flush=True)
            k = 0
            while True:
                k += 1
                msg = samples.make(kind, k)
                if k % 2 == 0:
                    cdr = serialize_message(msg)
                    msg = cdr[: len(cdr) // 2]
                pub.publish(msg)
                rclpy.spin_once(node, timeout_sec=period)
        elif mode == "sub":
            kind, topic, out, n = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
            got = []

            def record(m):
                # Written at every message: a test may stop this node early.
                if len(got) < n:
                    got.append(samples.plain(m))
                    write(out, got)
                    print(f"got {len(got)}", flush=True)

            node.create_subscription(msg_class(kind), topic, record, qos(sys.argv[6] if len(sys.argv) > 6 else "reliable"))
            print("ready", flush=True)
            while len(got) < n:
                rclpy.spin_once(node, timeout_sec=0.1)
        elif mode == "roundtrip":
            kind, topic_in, topic_out, out, n = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
            got = []
            pub = node.create_publisher(msg_class(kind), topic_in, qos())
            node.create_subscription(msg_class(kind), topic_out, lambda m: got.append(samples.plain(m)), qos())
            print("ready", flush=True)
            k = 0
            while len(got) < n:
                k += 1
                pub.publish(samples.make(kind, k))
                end = time.monotonic() + 0.1
                while time.monotonic() < end and len(got) < n:
                    rclpy.spin_once(node, timeout_sec=0.02)
            write(out, got[:n])
        elif mode == "serve":
            from std_srvs.srv import SetBool

            def handle(req, resp):
                resp.success = req.data
                resp.message = f"got {req.data}"
                return resp

            node.create_service(SetBool, sys.argv[2], handle)
            print("ready", flush=True)
            rclpy.spin(node)
        elif mode == "call":
            from std_srvs.srv import Trigger

            service, out, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
            write(out, call_n(node, Trigger, service, n, lambda k: Trigger.Request()))
        elif mode == "servers":
            serve_interfaces(node, sys.argv[2], sys.argv[3])
        elif mode == "call_basic":
            from test_msgs.srv import BasicTypes

            service, out, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
            def request(k):
                return BasicTypes.Request(int32_value=k, string_value=f"ros {k}")

            write(out, call_n(node, BasicTypes, service, n, request))
        elif mode == "fib_client":
            write(sys.argv[3], fibonacci_client(node, sys.argv[2]))
        elif mode == "params":
            write(sys.argv[3], set_parameters(node, sys.argv[2]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
