"""The pipeline's computations, independent of any middleware: the PPO
agent, the detector and the fusion of their outputs into a control. The
HPRM example (driving.py) and the benchmark's baselines (ROS 2, ROS 2 +
shared memory, dora-rs) all call these, so that only the middleware
differs between them.

Every stage runs onnxruntime with ``THREADS`` intra-op threads: the agent
and the detector run in parallel processes, one thread each on a 2-core
machine.
"""

from __future__ import annotations

import os
import time

import numpy as np

import models
from world import BEV_SHAPE, RGB_SHAPE

THREADS = 1
# YOLOv5's width_multiple for the detector: 0.25 (YOLOv5n's channels, with
# YOLOv5s's depth) keeps a 500-step run of five systems on 2 CPU cores in
# budget; 0.5 is YOLOv5s proper (about 4x the CPU time per frame). Read from
# the environment so that every process of a pipeline uses the same one
# (driving.py's and the benchmark's --detector-width set it).
WIDTH_ENV = "HPRM_DRIVING_DETECTOR_WIDTH"
DETECTOR_WIDTH = float(os.environ.get(WIDTH_ENV, "0.25"))
# COCO classes that stand in the way: person, car, bus, truck.
OBSTACLES = (0.0, 2.0, 5.0, 7.0)


def timed(fn, *args):
    """fn(*args) and the milliseconds it took (reported per step, so a
    benchmark can tell compute from middleware time)."""
    t = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - t) * 1e3


class Agent:
    """Roach's PPO policy: BEV + measurements -> (acceleration, steering),
    the mean of its Beta distribution mapped to [-1, 1]."""

    def __init__(self, seed: int) -> None:
        self.session = models.session(models.ensure_models(seed, DETECTOR_WIDTH)["agent"], THREADS)

    def act(self, bev: np.ndarray, measurements: np.ndarray) -> np.ndarray:
        assert bev.shape == BEV_SHAPE, bev.shape
        x = np.ascontiguousarray(bev.transpose(2, 0, 1)[None], np.float32) * np.float32(1 / 255)
        alpha, beta, _value = self.session.run(None, {"bev": x, "measurements": measurements.reshape(1, -1).astype(np.float32)})
        return (alpha / (alpha + beta) * 2 - 1)[0].astype(np.float32)


class Detector:
    """YOLOv5 on the camera frame: letterboxed from 1280x720 to 640x640
    (exactly half size, grey bands above and below), boxes after NMS."""

    def __init__(self, seed: int) -> None:
        self.session = models.session(models.ensure_models(seed, DETECTOR_WIDTH)["detector"], THREADS)
        s = models.YOLO_SIZE
        self.pad = (s - RGB_SHAPE[0] // 2) // 2
        self.input = np.full((1, 3, s, s), 114 / 255, np.float32)

    def detect(self, rgb: np.ndarray) -> np.ndarray:
        assert rgb.shape == RGB_SHAPE, rgb.shape
        half = rgb[::2, ::2]  # 360x640
        np.multiply(half.transpose(2, 0, 1), np.float32(1 / 255), out=self.input[0, :, self.pad : self.pad + half.shape[0]], casting="unsafe")
        (out,) = self.session.run(None, {models.YOLO_INPUT: self.input})
        return models.decode_yolo(out)


def fuse(action: np.ndarray, boxes: np.ndarray) -> list[float]:
    """The control to apply: the agent's acceleration split into throttle
    and brake, its steering, and braking harder when the detector sees an
    obstacle in the lane ahead (the middle of the lower half of the image)."""
    acc, steer = float(action[0]), float(action[1])
    throttle, brake = max(acc, 0.0), max(-acc, 0.0)
    s = models.YOLO_SIZE
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    ahead = np.isin(boxes[:, 5], OBSTACLES) & (np.abs(cx - s / 2) < s / 6) & (cy > s / 2)
    if ahead.any():
        brake = max(brake, float(boxes[ahead, 4].max()))
        throttle = 0.0
    return [throttle, steer, brake]
