"""Broadcast and gather with ROS 2 (rclpy, Fast DDS; BENCHMARKS.md workload
3): a source node and 4 receiver nodes, each its own process.

``--transport plain``: the payload travels in a std_msgs/UInt8MultiArray
(topic ``bcast``; replies on ``reply0`` .. ``reply3``). Its ``data`` is a
``uint8[]``, which rclpy holds as an ``array.array('B')``: filled from the
numpy array with one copy (the generated setter takes an array.array of the
right type code as it is; a numpy array would be checked element by element)
and read back with ``np.frombuffer`` (no copy). sensor_msgs/Image carries
the same ``uint8[]`` field plus a header, so it costs the same or more.
``layout.data_offset`` carries the round number. Echo receivers publish the
message they received; fresh ones a new message with a new array.

``--transport shm``: the "ROS 2 + shared memory" workaround of the HPRM
paper: the array is pickled (protocol 5) into a new
``multiprocessing.shared_memory`` segment and only ``NAME ROUND`` travels,
in a std_msgs/String. Receivers attach, unpickle (a copy out of the
segment), and reply the same way (echo: the array they unpickled; fresh: a
new one), each into a segment of its own; the source reads every reply
back and unlinks each segment once it is done with it.

The source process starts the receivers, waits until a hello message has
made it to every receiver and back (so no round is lost to discovery), runs
the rounds, then tells the receivers to stop.

    python broadcast_ros2.py --transport plain|shm --size BYTES \
        --variant echo|fresh --rounds N --warmup N --out FILE.json
"""

from __future__ import annotations

import array
import os
import pickle
import subprocess
import sys
import time
from multiprocessing import resource_tracker, shared_memory

import numpy as np
import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import String, UInt8MultiArray

from broadcast_common import RECEIVERS, ROUND_TIMEOUT_S, fail, fresh_reply, make_payload, mark, parse_args, reply_problem, write_result

# Segments cross processes: each is unlinked explicitly by the process that
# reads it last (see Shm.done). Python 3.11's resource tracker would also
# unlink, at exit, every segment a process created or attached to, whoever
# still needs it, and warn about the ones already gone: keep it out.
resource_tracker.register = resource_tracker.unregister = lambda name, rtype: None

HELLO = 2**32 - 2
STOP = 2**32 - 1
QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
# Discovery of 5 processes on a busy 2-CPU machine.
DISCOVERY_TIMEOUT_S = 60.0


def uint8_message(data: np.ndarray, round_: int) -> UInt8MultiArray:
    msg = UInt8MultiArray()
    buf = array.array("B")
    buf.frombytes(memoryview(data).cast("B"))
    msg.data = buf
    msg.layout.data_offset = round_
    return msg


class Plain:
    """Arrays in UInt8MultiArray messages."""

    msg_type = UInt8MultiArray

    def __init__(self, size: int):
        self.size = size

    def make(self, arr: np.ndarray, round_: int):
        return uint8_message(arr, round_)

    def round_of(self, msg) -> int:
        return msg.layout.data_offset

    def array_of(self, msg) -> np.ndarray:
        return np.frombuffer(msg.data, dtype=np.uint8)

    def echo(self, msg):
        return msg

    def fresh(self, round_: int):
        buf = array.array("B", [0]) * self.size
        fresh_reply(np.frombuffer(buf, dtype=np.uint8), round_)
        msg = UInt8MultiArray()
        msg.data = buf
        msg.layout.data_offset = round_
        return msg

    def done(self, msg) -> None:
        pass


class Shm:
    """Arrays pickled into shared-memory segments; only the name travels.
    Every segment of a run is named PREFIX-PID-N (PREFIX names the source
    process), so that the source can remove what a failed or interrupted
    run left behind (see sweep)."""

    msg_type = String

    def __init__(self, size: int, prefix: str):
        self.size = size
        self.prefix = prefix
        self.made = 0

    def make(self, arr: np.ndarray, round_: int):
        blob = pickle.dumps(arr, protocol=5)
        self.made += 1
        seg = shared_memory.SharedMemory(create=True, size=len(blob), name=f"{self.prefix}-{os.getpid()}-{self.made}")
        seg.buf[: len(blob)] = blob
        name = seg.name
        seg.close()
        msg = String()
        msg.data = f"{name} {round_}"
        return msg

    def round_of(self, msg) -> int:
        return int(msg.data.rsplit(" ", 1)[1])

    def array_of(self, msg) -> np.ndarray:
        name = msg.data.rsplit(" ", 1)[0]
        seg = shared_memory.SharedMemory(name=name)
        try:
            return pickle.loads(seg.buf)
        finally:
            seg.close()

    def echo(self, msg):
        arr = self.array_of(msg)
        return self.make(arr, self.round_of(msg))

    def fresh(self, round_: int):
        return self.make(fresh_reply(np.empty(self.size, np.uint8), round_), round_)

    def sweep(self) -> None:
        """Unlinks every segment of this run still there (after a failure)."""
        for name in os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []:
            if name.startswith(self.prefix + "-"):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except OSError:
                    pass

    def done(self, msg) -> None:
        """Unlinks the segment a message names (the reader of a reply, or the
        source once a round is over, is the last to need it)."""
        name = msg.data.rsplit(" ", 1)[0]
        try:
            seg = shared_memory.SharedMemory(name=name)
            seg.close()
            seg.unlink()
        except FileNotFoundError:
            pass


def hello(transport, round_: int):
    """A small message of the transport's type, for discovery and stop."""
    if isinstance(transport, Plain):
        return uint8_message(np.zeros(1, np.uint8), round_)
    msg = String()
    msg.data = f"- {round_}"
    return msg


def receiver(index: int, transport, variant: str) -> None:
    rclpy.init()
    node = rclpy.create_node(f"bcast_recv{index}")
    pub = node.create_publisher(transport.msg_type, f"reply{index}", QOS)
    state = {"stop": False}

    def on_msg(msg):
        r = transport.round_of(msg)
        if r == STOP:
            state["stop"] = True
            return
        if r == HELLO:
            pub.publish(hello(transport, HELLO))
            return
        pub.publish(transport.echo(msg) if variant == "echo" else transport.fresh(r))

    node.create_subscription(transport.msg_type, "bcast", on_msg, QOS)
    parent = os.getppid()
    while not state["stop"] and os.getppid() == parent:
        rclpy.spin_once(node, timeout_sec=0.5)
    node.destroy_node()
    rclpy.shutdown()


def source(args, transport) -> None:
    rclpy.init()
    node = rclpy.create_node("bcast_source")
    pub = node.create_publisher(transport.msg_type, "bcast", QOS)
    got: list = []
    for i in range(RECEIVERS):
        node.create_subscription(transport.msg_type, f"reply{i}", lambda m, i=i: got.append((i, m)), QOS)

    # Everyone has everyone once a hello went out and came back from all.
    deadline = time.monotonic() + DISCOVERY_TIMEOUT_S
    seen: set = set()
    while len(seen) < RECEIVERS:
        if time.monotonic() > deadline:
            fail(args.out, f"discovery: {len(seen)} of {RECEIVERS} receivers answered within {DISCOVERY_TIMEOUT_S:g} s")
        pub.publish(hello(transport, HELLO))
        until = time.monotonic() + 0.2
        while time.monotonic() < until:
            rclpy.spin_once(node, timeout_sec=0.05)
            while got:
                seen.add(got.pop()[0])
    got.clear()
    # Late hellos still on their way are dropped by round number below.

    payload = make_payload(args.size)
    latency, first = [], []
    for r in range(args.warmup + args.rounds):
        mark(payload, r)
        t0 = time.perf_counter_ns()
        msg = transport.make(payload, r)
        pub.publish(msg)
        replies, t_first = 0, None
        while replies < RECEIVERS:
            rclpy.spin_once(node, timeout_sec=0.5)
            while got:
                m = got.pop()[1]
                if transport.round_of(m) != r:
                    continue
                problem = reply_problem(transport.array_of(m), args.size, r, args.variant)
                transport.done(m)
                if problem:
                    fail(args.out, problem)
                replies += 1
                t_first = t_first or time.perf_counter_ns()
            if replies < RECEIVERS and time.perf_counter_ns() - t0 > ROUND_TIMEOUT_S * 1e9:
                fail(args.out, f"round {r} timed out after {ROUND_TIMEOUT_S:g} s ({replies} of {RECEIVERS} replies)")
        now = time.perf_counter_ns()
        transport.done(msg)
        if r >= args.warmup:
            latency.append(now - t0)
            first.append(t_first - t0)
    for _ in range(3):
        pub.publish(hello(transport, STOP))
        rclpy.spin_once(node, timeout_sec=0.05)
    write_result(args.out, latency, first)
    node.destroy_node()
    rclpy.shutdown()


def main() -> None:
    def extra(p):
        p.add_argument("--transport", choices=("plain", "shm"), required=True)
        p.add_argument("--receiver", type=int, default=None, help="(internal) run receiver N")
        p.add_argument("--receivers-netns", help="start the receivers in this network namespace (bench/hosts: another host)")

    args = parse_args(extra=extra)
    source_pid = os.getppid() if args.receiver is not None else os.getpid()
    transport = Plain(args.size) if args.transport == "plain" else Shm(args.size, f"hprm-bench-bcast-{source_pid}")
    if args.receiver is not None:
        receiver(args.receiver, transport, args.variant)
        return
    where = ["ip", "netns", "exec", args.receivers_netns] if args.receivers_netns else []
    procs = [subprocess.Popen([*where, sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--receiver", str(i)]) for i in range(RECEIVERS)]
    try:
        source(args, transport)
    finally:
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if isinstance(transport, Shm):
            transport.sweep()


if __name__ == "__main__":
    main()
