"""A camera federate sends, every 50 ms of logical time, `frame(n)` (a map:
`n` and an HxWx3 uint8 image with its `frame_id`) and `cloud(n)` (an Nx3
float32 point cloud), both small enough to travel in-band; a viewer
federate receives them. test_foxglove_live.py streams it to a Foxglove
WebSocket client (`hprm foxglove`) and compares what arrives with these.

Usage: python live_camera.py TICKS   (the program stops after TICKS periods)
"""

import sys

import numpy as np

import hprm

ARGS = sys.argv[1:] if __name__ == "__main__" else []
TICKS = int(ARGS[0]) if ARGS else 100
PERIOD_NS = 50_000_000
HEIGHT, WIDTH, POINTS = 24, 32, 200


def frame(n):
    return {"n": n, "image": np.random.default_rng(n).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8), "frame_id": "camera"}


def cloud(n):
    return np.random.default_rng(1000 + n).standard_normal((POINTS, 3)).astype(np.float32)


class Camera(hprm.Reactor):
    frame = hprm.Output()
    cloud = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period=f"{PERIOD_NS // 1_000_000}ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects=["frame", "cloud"])
    def capture(self, ctx):
        ctx.set(self.frame, frame(self.n))
        ctx.set(self.cloud, cloud(self.n))
        self.n += 1


class Viewer(hprm.Reactor):
    frame = hprm.Input()
    cloud = hprm.Input()

    @hprm.reaction(triggers=["frame", "cloud"])
    def show(self, ctx):
        pass


prog = hprm.Program("live_camera", timeout=f"{TICKS * PERIOD_NS // 1_000_000}ms")
camera = prog.federate("camera", Camera)
viewer = prog.federate("viewer", Viewer)
prog.connect(camera.frame, viewer.frame)
prog.connect(camera.cloud, viewer.cloud)

if __name__ == "__main__":
    prog.launch()
