"""A camera sends a 100 kB numpy frame (through the store) every 2 ms to
two receivers, for SECONDS of logical time. Each receiver prints
"NAME receiving" at its third frame and, at shutdown, the numbers of the
frames it got; the camera prints how many it sent. test_store_death.py
kills the store in the middle.

Usage: python frames.py [SECONDS]   (default 4)
"""

import sys

import numpy as np

import hprm

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
FRAME = 100_000


class Camera(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="2ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def capture(self, ctx):
        self.n += 1
        ctx.set(self.out, {"n": self.n, "pixels": np.full(FRAME, self.n % 251, dtype=np.uint8)})

    @hprm.reaction(triggers="shutdown")
    def bye(self, ctx):
        print(f"camera sent {self.n}", flush=True)


class Receiver(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self, name):
        self.name = name
        self.got = []

    @hprm.reaction(triggers="inp")
    def receive(self, ctx):
        v = self.inp.value
        assert v["pixels"].shape == (FRAME,) and (v["pixels"] == v["n"] % 251).all(), f"frame {v['n']} damaged"
        self.got.append(v["n"])
        if len(self.got) == 3:
            print(f"{self.name} receiving", flush=True)

    @hprm.reaction(triggers="shutdown")
    def bye(self, ctx):
        print(f"{self.name} got {' '.join(map(str, self.got))}", flush=True)


prog = hprm.Program("frames", timeout=f"{int(SECONDS * 1000)}ms")
cam = prog.federate("camera", Camera)
for name in ("left", "right"):
    r = prog.federate(name, Receiver, name)
    prog.connect(cam.out, r.inp)

if __name__ == "__main__":
    prog.launch()
