"""A camera federate sends, every 50 ms of logical time, `frame(n)` (a map:
`n` and an HxWx3 uint8 image with its `frame_id`) and `cloud(n)` (an Nx3
float32 point cloud); a viewer federate receives them and checks each
against what was sent. By default both are small enough to travel
in-band; with a size given, they can be large enough to go through the
store (480x640x3: 921,600 bytes). test_foxglove_live.py streams it to a
Foxglove WebSocket client (`hprm foxglove`) and compares what arrives with
these.

Usage: python live_camera.py TICKS [FRAMES HEIGHT WIDTH POINTS]
(the program stops after TICKS periods; the camera sends FRAMES frames of
that size, by default one per period, then one last tiny one, frame
FRAMES, whose arrival makes the viewer let go of the last large one, then
nothing). At its end the viewer prints `viewer: N frames, M intact`.
"""

import sys

import numpy as np

import hprm

ARGS = sys.argv[1:] if __name__ == "__main__" else []
TICKS = int(ARGS[0]) if ARGS else 100
PERIOD_NS = 50_000_000
HEIGHT, WIDTH, POINTS = 24, 32, 200
FRAMES, SIZE = (int(ARGS[1]), tuple(int(a) for a in ARGS[2:5])) if len(ARGS) >= 5 else (TICKS, (HEIGHT, WIDTH, POINTS))


def size(n):
    """Frame n's (height, width, points): the last one is tiny (in-band)."""
    return SIZE if n < FRAMES else (2, 2, 2)


def frame(n, height=HEIGHT, width=WIDTH):
    return {"n": n, "image": np.random.default_rng(n).integers(0, 256, (height, width, 3), dtype=np.uint8), "frame_id": "camera"}


def cloud(n, points=POINTS):
    return np.random.default_rng(1000 + n).standard_normal((points, 3)).astype(np.float32)


class Camera(hprm.Reactor):
    frame = hprm.Output()
    cloud = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period=f"{PERIOD_NS // 1_000_000}ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects=["frame", "cloud"])
    def capture(self, ctx):
        if self.n > FRAMES:
            return
        height, width, points = size(self.n)
        ctx.set(self.frame, frame(self.n, height, width))
        ctx.set(self.cloud, cloud(self.n, points))
        self.n += 1


class Viewer(hprm.Reactor):
    frame = hprm.Input()
    cloud = hprm.Input()

    def __init__(self):
        self.frames = 0
        self.intact = 0

    @hprm.reaction(triggers=["frame", "cloud"])
    def show(self, ctx):
        got = ctx.get(self.frame)
        if got is None:
            return
        # What a receiver reads is what was sent, whoever else reads it.
        height, width, points = size(got["n"])
        self.frames += 1
        self.intact += bool(np.array_equal(got["image"], frame(got["n"], height, width)["image"]) and np.array_equal(ctx.get(self.cloud), cloud(got["n"], points)))

    @hprm.reaction(triggers="shutdown")
    def done(self, ctx):
        print(f"viewer: {self.frames} frames, {self.intact} intact", flush=True)


prog = hprm.Program("live_camera", timeout=f"{TICKS * PERIOD_NS // 1_000_000}ms")
camera = prog.federate("camera", Camera)
viewer = prog.federate("viewer", Viewer)
prog.connect(camera.frame, viewer.frame)
prog.connect(camera.cloud, viewer.cloud)

if __name__ == "__main__":
    prog.launch()
