"""Reactor classes for pipeline.toml: the manifest names them, `hprm launch
pipeline.toml` runs each federate with `python -m hprm.federate`."""

import numpy as np

import hprm


class Camera(hprm.Reactor):
    frame = hprm.Output()

    def __init__(self, period="20ms", height=480, width=640):
        self.tick = hprm.Timer(period=period)
        self.shape = (height, width, 3)
        self.seq = 0

    @hprm.reaction(triggers="tick", effects="frame")
    def capture(self, ctx):
        self.seq += 1
        img = ctx.alloc_array(self.shape, np.uint8)  # straight into the store
        img[:] = self.seq % 256
        ctx.set(self.frame, {"seq": self.seq, "rgb": img})


class Detector(hprm.Reactor):
    frame = hprm.Input()
    boxes = hprm.Output()

    @hprm.reaction(triggers="frame", effects="boxes")
    def detect(self, ctx):
        f = self.frame.value
        ctx.set(self.boxes, {"seq": f["seq"], "mean": float(f["rgb"][::16, ::16].mean())})


class Planner(hprm.Reactor):
    boxes = hprm.Input()

    @hprm.reaction(triggers="boxes")
    def plan(self, ctx):
        b = self.boxes.value
        print(f"planned seq={b['seq']} mean={b['mean']:.0f}", flush=True)
