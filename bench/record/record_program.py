"""A camera and a sink, the program the recording benchmark runs with and
without `hprm launch --record` (issue 29's benchmark).

    hprm launch [--record F.mcap ...] record_program.py --mb 2.7 --fps 30 --frames 90 --out FILE.json

The camera holds one frame of MB megabytes (HxWx3 uint8, random, so that
nothing compresses it away) and, at FPS, copies it into a store object
(`ctx.alloc_array`, as a driver fills a frame buffer), stamps the
monotonic clock and sends it. The sink reads one pixel of what it got
(zero-copy) and records the time since the stamp: send to reaction start,
the live path as a program sees it. It writes FILE.json when the last
frame arrives: the latencies, how many frames it got, and the monotonic
times of its first and last frame (the saturation run's clock).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import hprm

p = argparse.ArgumentParser()
p.add_argument("--mb", type=float, default=2.7)
p.add_argument("--fps", type=float, default=30)
p.add_argument("--frames", type=int, default=90)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--out", required=True)
ARGS = p.parse_args()
WIDTH = 1280
HEIGHT = max(1, int(ARGS.mb * 1e6) // (WIDTH * 3))
TOTAL = ARGS.warmup + ARGS.frames


class Camera(hprm.Reactor):
    frame = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period=f"{round(1e9 / ARGS.fps)}ns")
        self.base = np.random.default_rng(0).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
        self.n = 0

    @hprm.reaction(triggers="tick", effects="frame")
    def capture(self, ctx):
        self.n += 1
        if self.n > TOTAL:
            ctx.request_stop()
            return
        img = ctx.alloc_array(self.base.shape, np.uint8)
        np.copyto(img, self.base)
        img[0, 0, 0] = self.n % 256
        ctx.set(self.frame, {"seq": self.n, "sent": time.monotonic_ns(), "rgb": img})


class Sink(hprm.Reactor):
    frame = hprm.Input()

    def __init__(self):
        self.lat: list[float] = []
        self.got = 0
        self.first = self.last = 0

    @hprm.reaction(triggers="frame")
    def show(self, ctx):
        v = ctx.get(self.frame)
        now = time.monotonic_ns()
        assert int(v["rgb"][0, 0, 0]) == v["seq"] % 256
        self.got += 1
        self.first = self.first or now
        self.last = now
        if v["seq"] > ARGS.warmup:
            self.lat.append((now - v["sent"]) / 1e6)
        if v["seq"] == TOTAL:
            self.write()

    def write(self):
        Path(ARGS.out).write_text(json.dumps({"latency_ms": self.lat, "received": self.got, "sent": TOTAL, "first_ns": self.first, "last_ns": self.last, "frame_bytes": HEIGHT * WIDTH * 3}))


prog = hprm.Program("record-bench", timeout=f"{round(TOTAL / ARGS.fps * 1e9) + 10**9}ns")
cam = prog.federate("camera", Camera)
sink = prog.federate("sink", Sink)
prog.connect(cam.frame, sink.frame)

if __name__ == "__main__":
    prog.launch(store_memory="1g")
