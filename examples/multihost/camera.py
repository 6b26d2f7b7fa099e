"""Reactors of multihost.toml: a camera on one host sends 1280x720 RGB
frames at 30 fps to a detector on another. Each frame carries its CRC-32
and the wall-clock time it was sent (the hosts here are namespaces of one
machine: one clock); the detector checks every frame and reports at
shutdown how many it got, how many differed, and the latency percentiles."""

import time
import zlib

import numpy as np

import hprm

HEIGHT, WIDTH = 720, 1280


class Camera(hprm.Reactor):
    frame = hprm.Output()

    def __init__(self, period="33ms"):
        self.tick = hprm.Timer(period=period)
        self.row = np.arange(WIDTH * 3, dtype=np.uint8).reshape(WIDTH, 3)
        self.sent = 0

    @hprm.reaction(triggers="tick", effects="frame")
    def capture(self, ctx):
        img = ctx.alloc_array((HEIGHT, WIDTH, 3), np.uint8)  # straight into this host's store
        img[:] = self.row  # a pattern that differs per frame:
        img[self.sent % HEIGHT] = 255 - self.sent % 256
        self.sent += 1
        ctx.set(self.frame, {"seq": self.sent, "crc": zlib.crc32(img), "sent_ns": time.time_ns(), "rgb": img})

    @hprm.reaction(triggers="shutdown")
    def bye(self, ctx):
        print(f"CAMERA sent={self.sent}", flush=True)


class Detector(hprm.Reactor):
    frame = hprm.Input()

    def __init__(self):
        self.seqs = []
        self.bad = 0
        self.latency_ms = []

    @hprm.reaction(triggers="frame")
    def detect(self, ctx):
        f = self.frame.value
        self.latency_ms.append((time.time_ns() - f["sent_ns"]) / 1e6)
        rgb = f["rgb"]
        if rgb.shape != (HEIGHT, WIDTH, 3) or zlib.crc32(rgb) != f["crc"]:
            self.bad += 1
        self.seqs.append(f["seq"])

    @hprm.reaction(triggers="shutdown")
    def bye(self, ctx):
        lat = sorted(self.latency_ms) or [0.0]
        p50 = lat[len(lat) // 2]
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        missing = sorted(set(range(1, max(self.seqs, default=0) + 1)) - set(self.seqs))
        print(f"DETECTOR frames={len(self.seqs)} mismatched={self.bad} missing={missing} p50_ms={p50:.1f} p99_ms={p99:.1f}", flush=True)
