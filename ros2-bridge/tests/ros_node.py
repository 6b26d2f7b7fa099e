"""A real rclpy node for the bridge tests, in its own process.

  ros_node.py pub KIND TOPIC [PERIOD_S] [QOS]      publish make(KIND, k), k = 1, 2, ... forever
  ros_node.py sub KIND TOPIC OUT N [QOS]           record the first N messages (plain) to OUT (pickle), then exit
  ros_node.py roundtrip KIND IN OUT FILE N         publish on IN, record what comes back on OUT
  ros_node.py serve SERVICE                        std_srvs/SetBool: success = data, message "got <data>"
  ros_node.py call SERVICE FILE N                  call std_srvs/Trigger N times, record the responses

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
            client = node.create_client(Trigger, service)
            print("ready", flush=True)
            while not client.wait_for_service(timeout_sec=0.5):
                pass
            got = []
            while len(got) < n:
                # A response can be lost while discovery of the response
                # path is still under way (a ROS 2 race): retry after 3 s.
                fut = client.call_async(Trigger.Request())
                rclpy.spin_until_future_complete(node, fut, timeout_sec=3.0)
                if fut.done():
                    got.append(samples.plain(fut.result()))
                else:
                    client.remove_pending_request(fut)
                    print("call timed out; retrying", flush=True)
            write(out, got)
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
