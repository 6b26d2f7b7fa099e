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


# For banks.toml: a bank of cameras (each knows its bank_index) and a fusion
# reactor with a 4-wide multiport.


class BankCamera(hprm.Reactor):
    frame = hprm.Output()

    def __init__(self, device):
        self.device = device
        self.tick = hprm.Timer(period="50ms")

    @hprm.reaction(triggers="tick", effects="frame")
    def capture(self, ctx):
        ctx.set(self.frame, {"camera": self.bank_index, "device": self.device, "rgb": np.full((120, 160, 3), self.bank_index, np.uint8)})


class Fusion(hprm.Reactor):
    frames = hprm.Input(width=4)

    @hprm.reaction(triggers="frames")
    def fuse(self, ctx):
        got = ctx.get(self.frames)  # present channels, in camera order
        print(f"fused t={ctx.elapsed // 1_000_000}ms cameras={[f['camera'] for f in got]} devices={[f['device'] for f in got]}", flush=True)
