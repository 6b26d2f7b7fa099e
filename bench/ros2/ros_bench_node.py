"""rclpy side of the ROS 2 bridge benchmark (its own process).

  ros_bench_node.py pub SIZE TOPIC N_LAT PERIOD_S N_RATE SUBSCRIBERS
      waits for SUBSCRIBERS subscriptions, then publishes N_LAT images of
      SIZE bytes every PERIOD_S (frame_id "lat"), then N_RATE back to back
      ("rate"), then "end" until stopped; header.stamp = wall clock at publish.
  ros_bench_node.py sub TOPIC OUT
      records (frame_id, latency ns, arrival ns) of each image until "end",
      to OUT (JSON).
"""

import json
import sys
import time

import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)


def image(size):
    """A mono8 image of exactly SIZE bytes (one row when it does not divide)."""
    width = 1024 if size % 1024 == 0 and size >= 1024 else size
    m = Image(height=size // width, width=width, encoding="mono8", step=width)
    m.data = bytes(size)
    return m


def stamp(m, tag):
    now = time.time_ns()
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(now, 1_000_000_000)
    m.header.frame_id = tag


def main():
    rclpy.init()
    node = rclpy.create_node("bench_" + sys.argv[1])
    if sys.argv[1] == "pub":
        size, topic, n_lat, period, n_rate, subs = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
        pub = node.create_publisher(Image, topic, QOS)
        m = image(size)
        while pub.get_subscription_count() < subs:
            rclpy.spin_once(node, timeout_sec=0.05)
        time.sleep(1.0)  # let the subscriber's side settle after matching
        print("ready", flush=True)
        for _ in range(n_lat):
            stamp(m, "lat")
            pub.publish(m)
            time.sleep(period)
        time.sleep(0.5)
        for _ in range(n_rate):
            stamp(m, "rate")
            pub.publish(m)
        time.sleep(1.0)
        while True:
            stamp(m, "end")
            pub.publish(m)
            time.sleep(0.2)
    else:
        topic, out = sys.argv[2], sys.argv[3]
        got = []
        done = []

        def on(m):
            now = time.time_ns()
            if m.header.frame_id == "end":
                done.append(1)
                return
            sent = m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec
            _ = memoryview(m.data)  # the data as Python sees it (already converted by rclpy)
            got.append((m.header.frame_id, now - sent, now))

        node.create_subscription(Image, topic, on, QOS)
        print("ready", flush=True)
        try:
            while not done:
                rclpy.spin_once(node, timeout_sec=0.1)
        finally:
            # Also when stopped before "end" (a receiver that cannot keep up).
            with open(out, "w") as f:
                json.dump(got, f)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
