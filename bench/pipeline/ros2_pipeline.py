"""The driving pipeline on ROS 2 (rclpy, Fast DDS): one node per stage, each
its own process, with the same stages as the HPRM example
(examples/python/driving: world, stages, steplog).

    python ros2_pipeline.py ROLE --variant ros2|ros2-sm --steps N --warmup W --seed S [--report FILE]

ROLE is simulator, agent, detector or fusion. Variants:
- ``ros2``: frames travel as sensor_msgs/Image (filled the fast way,
  ``array.array.frombytes``, as cv_bridge does; read with np.frombuffer).
- ``ros2-sm``: the paper's "ROS 2 (Shared Memory)": the simulator pickles
  each frame message into a new ``multiprocessing.shared_memory`` segment
  and only its name travels (std_msgs/String); readers attach and unpickle.
  The simulator unlinks a step's segments when that step's control
  arrives (both readers are done with them by then).

Small messages are std_msgs/Float64MultiArray with the step number first
(measurements; actions, boxes and controls with their stages' compute ms
and wall-clock start/done times, see steplog.py). Fusion waits for
both the action and the boxes of a step, as in the paper. Needs the
environment of ros2-bridge/setup-ros2.sh (source VENV/ros2-env.sh).
"""

from __future__ import annotations

import argparse
import array
import json
import os
import pickle
import sys
import time
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python" / "driving"))

import rclpy  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import Float64MultiArray, String  # noqa: E402

import stages  # noqa: E402
from steplog import StepLog  # noqa: E402
from world import BEV_SHAPE, RGB_SHAPE, make_world  # noqa: E402

QOS = QoSProfile(depth=4, reliability=ReliabilityPolicy.RELIABLE)
TOPICS = ("bev", "rgb", "action", "boxes", "control")
# Segments are named with the runner's prefix, so that it can sweep what a
# crashed simulator left behind (run.py removes /dev/shm/PREFIX* after a run).
SHM_PREFIX = os.environ.get("PIPELINE_SHM_PREFIX", f"hprm-pipeline-{os.getpid()}-")
RESEND_S = 3.0  # step 0 is sent again until a control comes back (discovery may drop it)


def floats(values) -> Float64MultiArray:
    m = Float64MultiArray()
    a = array.array("d")
    a.frombytes(np.asarray(values, np.float64).tobytes())
    m.data = a
    return m


def image(step: int, arr: np.ndarray) -> Image:
    m = Image()
    m.header.frame_id = str(step)
    m.height, m.width = arr.shape[0], arr.shape[1]
    m.encoding = "rgb8" if arr.shape[2] == 3 else f"8UC{arr.shape[2]}"
    m.step = arr.shape[1] * arr.shape[2]
    data = array.array("B")
    data.frombytes(memoryview(np.ascontiguousarray(arr)).cast("B"))
    m.data = data
    return m


def from_image(m: Image, shape) -> tuple[int, np.ndarray]:
    return int(m.header.frame_id), np.frombuffer(m.data, np.uint8).reshape(shape)


class Frames:
    """How a frame message (a dict with a step and arrays) crosses: the
    variant's publish side and read side."""

    def __init__(self, node: Node, variant: str) -> None:
        self.node, self.sm = node, variant == "ros2-sm"
        self.segments: dict[int, list] = {}

    def msg_type(self, key: str):
        return String if self.sm else Image

    def encode(self, key: str, frame: dict, step: int):
        if not self.sm:
            return image(step, frame[key])
        blob = pickle.dumps(frame, protocol=5)
        seg = shared_memory.SharedMemory(name=f"{SHM_PREFIX}{step}-{key}", create=True, size=len(blob))
        seg.buf[: len(blob)] = blob
        self.segments.setdefault(step, []).append(seg)
        return String(data=json.dumps({"step": step, "segment": seg.name}))

    def decode(self, key: str, msg, shape) -> tuple[int, dict]:
        if not self.sm:
            step, arr = from_image(msg, shape)
            return step, {key: arr}
        d = json.loads(msg.data)
        seg = shared_memory.SharedMemory(name=d["segment"])
        # Python 3.11 registers attached segments for unlinking at exit;
        # the simulator owns them.
        resource_tracker.unregister(seg._name, "shared_memory")  # noqa: SLF001
        try:
            frame = pickle.loads(seg.buf)
        finally:
            seg.close()
        return d["step"], frame

    def release(self, step: int) -> None:
        for seg in self.segments.pop(step, []):
            seg.close()
            seg.unlink()

    def release_all(self) -> None:
        for step in list(self.segments):
            self.release(step)


class Simulator(Node):
    def __init__(self, args) -> None:
        super().__init__("simulator")
        self.args = args
        self.frames = Frames(self, args.variant)
        self.log = StepLog(args.variant, args.warmup, args.steps, args.seed)
        self.world = make_world(args.seed, args.carla)
        self.pub_meas = self.create_publisher(Float64MultiArray, "meas", QOS)
        self.pub_bev = self.create_publisher(self.frames.msg_type("bev"), "bev", QOS)
        self.pub_rgb = self.create_publisher(self.frames.msg_type("rgb"), "rgb", QOS)
        self.create_subscription(Float64MultiArray, "control", self.on_control, QOS)
        self.step = 0
        self.sent_at = None
        self.create_timer(0.5, self.resend)

    def graph_ready(self) -> bool:
        return all(self.count_publishers(t) >= 1 and self.count_subscribers(t) >= 1 for t in TOPICS + ("meas",))

    def send(self) -> None:
        t = time.perf_counter()
        bev = np.empty(BEV_SHAPE, np.uint8)
        rgb = np.empty(RGB_SHAPE, np.uint8)
        self.world.render_bev(bev)
        self.world.render_rgb(rgb)
        meas = self.world.measurements()
        self.log.render_ms = (time.perf_counter() - t) * 1e3
        self.log.sending()
        self.pub_meas.publish(floats([self.step, *meas]))
        self.pub_bev.publish(self.frames.encode("bev", {"step": self.step, "bev": bev, "measurements": meas}, self.step))
        self.pub_rgb.publish(self.frames.encode("rgb", {"step": self.step, "rgb": rgb}, self.step))
        self.sent_at = time.monotonic()

    def resend(self) -> None:
        if self.step == 0 and self.sent_at is not None and time.monotonic() - self.sent_at > RESEND_S:
            self.get_logger().info("no control for step 0 yet: sending it again")
            self.frames.release(0)
            self.send()

    def on_control(self, msg) -> None:
        c = np.asarray(msg.data, np.float64)
        if int(c[0]) != self.step:
            return  # a duplicate of a resent step 0
        self.log.control(c[1:4].tolist(), {"agent": float(c[4]), "detector": float(c[5]), "fusion": float(c[6])},
                         {"agent": c[7:9], "detector": c[9:11], "fusion": c[11:13]})
        self.frames.release(self.step)
        self.world.apply(c[1:4])
        self.step += 1
        if self.log.done:
            raise SystemExit
        self.send()


class Agent(Node):
    def __init__(self, args) -> None:
        super().__init__("agent")
        self.frames = Frames(self, args.variant)
        self.agent = stages.Agent(args.seed)
        self.meas: dict[int, np.ndarray] = {}
        self.bevs: dict[int, dict] = {}
        self.pub = self.create_publisher(Float64MultiArray, "action", QOS)
        self.create_subscription(Float64MultiArray, "meas", self.on_meas, QOS)
        self.create_subscription(self.frames.msg_type("bev"), "bev", self.on_bev, QOS)

    def on_meas(self, msg) -> None:
        m = np.asarray(msg.data, np.float32)
        self.meas[int(m[0])] = m[1:]
        self.run()

    def on_bev(self, msg) -> None:
        step, frame = self.frames.decode("bev", msg, BEV_SHAPE)
        t0 = time.time()  # the frame is in hand (wall clock: hop times compare it across processes)
        self.bevs[step] = (t0, frame)
        self.run()

    def run(self) -> None:
        for step in sorted(set(self.meas) & set(self.bevs)):
            t0, frame = self.bevs.pop(step)
            meas = self.meas.pop(step)
            action, ms = stages.timed(self.agent.act, frame["bev"], meas)
            self.pub.publish(floats([step, *action, ms, t0, time.time()]))


class Detector(Node):
    def __init__(self, args) -> None:
        super().__init__("detector")
        self.frames = Frames(self, args.variant)
        self.detector = stages.Detector(args.seed)
        self.pub = self.create_publisher(Float64MultiArray, "boxes", QOS)
        self.create_subscription(self.frames.msg_type("rgb"), "rgb", self.on_rgb, QOS)

    def on_rgb(self, msg) -> None:
        step, frame = self.frames.decode("rgb", msg, RGB_SHAPE)
        t0 = time.time()
        boxes, ms = stages.timed(self.detector.detect, frame["rgb"])
        self.pub.publish(floats([step, ms, t0, time.time(), *boxes.ravel()]))


class Fusion(Node):
    def __init__(self, args) -> None:
        super().__init__("fusion")
        self.actions: dict[int, np.ndarray] = {}
        self.boxes: dict[int, np.ndarray] = {}
        self.pub = self.create_publisher(Float64MultiArray, "control", QOS)
        self.create_subscription(Float64MultiArray, "action", self.on_action, QOS)
        self.create_subscription(Float64MultiArray, "boxes", self.on_boxes, QOS)

    def on_action(self, msg) -> None:
        a = np.asarray(msg.data, np.float64)
        t0 = time.time()
        self.actions[int(a[0])] = a[1:]
        self.run(t0)

    def on_boxes(self, msg) -> None:
        b = np.asarray(msg.data, np.float64)
        t0 = time.time()
        self.boxes[int(b[0])] = b[1:]
        self.run(t0)

    def run(self, t0: float) -> None:
        # Waits for both outputs of a step before fusing them.
        for step in sorted(set(self.actions) & set(self.boxes)):
            a, b = self.actions.pop(step), self.boxes.pop(step)
            # a: acc, steer, ms, t0, t1; b: ms, t0, t1, boxes
            control, ms = stages.timed(stages.fuse, a[:2].astype(np.float32), b[3:].reshape(-1, 6).astype(np.float32))
            self.pub.publish(floats([step, *control, a[2], b[0], ms, a[3], a[4], b[1], b[2], t0, time.time()]))


ROLES = {"simulator": Simulator, "agent": Agent, "detector": Detector, "fusion": Fusion}


def main() -> None:
    p = argparse.ArgumentParser(description="one stage of the driving pipeline on ROS 2")
    p.add_argument("role", choices=sorted(ROLES))
    p.add_argument("--variant", choices=("ros2", "ros2-sm"), required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report")
    p.add_argument("--carla")
    args = p.parse_args()
    rclpy.init()
    node = ROLES[args.role](args)
    try:
        if isinstance(node, Simulator):
            while rclpy.ok() and not node.graph_ready():
                rclpy.spin_once(node, timeout_sec=0.1)
            node.send()
        rclpy.spin(node)
    except (SystemExit, KeyboardInterrupt):
        pass
    finally:
        if isinstance(node, Simulator):
            node.frames.release_all()
            node.world.close()
            if args.report and node.log.done:
                node.log.write(args.report)
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
