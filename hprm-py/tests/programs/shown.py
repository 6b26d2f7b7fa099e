"""A camera federate sends COUNT frames, one every 10 ms of logical time:
`frame(n)`, a map holding a BGR image (tagged `encoding: bgr8`, `frame_id:
camera`) and a grayscale one, and `cloud(n)`, an Nx4 float32 point cloud.
A relay flips each image and sends it on (an RGB image of its own); a sink
counts what it gets. test_record_foxglove.py records it and reads the
Foxglove views back; `frame` and `cloud` let it compare them with what was
sent.

Usage: python shown.py COUNT
"""

import sys

import numpy as np

import hprm

ARGS = sys.argv[1:] if __name__ == "__main__" else []
COUNT = int(ARGS[0]) if ARGS else 3
# The colour image (230 KB) goes through the store, the rest inline.
HEIGHT, WIDTH = 240, 320


def frame(n):
    rng = np.random.default_rng(n)
    return {
        "n": n,
        "image": rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8),
        "gray": rng.integers(0, 256, (HEIGHT // 2, WIDTH // 2), dtype=np.uint8),
        "encoding": "bgr8",
        "frame_id": "camera",
    }


def cloud(n):
    return np.random.default_rng(1000 + n).standard_normal((500 + n, 4)).astype(np.float32)


def flipped(image):
    return np.ascontiguousarray(image[::-1, :, ::-1])


class Camera(hprm.Reactor):
    frame = hprm.Output()
    cloud = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="10ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects=["frame", "cloud"])
    def capture(self, ctx):
        if self.n < COUNT:
            ctx.set(self.frame, frame(self.n))
            ctx.set(self.cloud, cloud(self.n))
            self.n += 1
        else:
            ctx.request_stop()


class Relay(hprm.Reactor):
    frame = hprm.Input()
    cloud = hprm.Input()
    out = hprm.Output()

    @hprm.reaction(triggers=["frame", "cloud"], effects="out")
    def relay(self, ctx):
        ctx.set(self.out, flipped(self.frame.value["image"]))


class Sink(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self):
        self.count = 0

    @hprm.reaction(triggers="inp")
    def take(self, ctx):
        self.count += 1

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        print(f"sink: got {self.count} images", flush=True)


prog = hprm.Program("shown")
camera = prog.federate("camera", Camera)
relay = prog.federate("relay", Relay)
prog.connect(camera.frame, relay.frame)
prog.connect(camera.cloud, relay.cloud)
prog.connect(relay.out, prog.federate("sink", Sink).inp)

if __name__ == "__main__":
    prog.launch()
