"""Four cameras into one fusion reactor: a bank of 4 and a 4-wide multiport.

    python examples/python/banks/fusion.py [threads|processes]
    hprm graph examples/python/banks/fusion.py -o fusion.svg   (one node "cam x4")

Each camera knows its ``bank_index`` (and its device, from ``member_args``);
the fusion reactor reads the frames of one tag in camera order, whatever
order they arrived in. ``after="10ms"`` gives the fusion 10 ms of logical
time per frame; the cameras' placement is one argument.
"""

import sys

import numpy as np

import hprm


class Camera(hprm.Reactor):
    frame = hprm.Output()

    def __init__(self, device, frames=5):
        self.device = device
        self.frames = frames
        self.tick = hprm.Timer(period="33ms")
        self.seq = 0

    @hprm.reaction(triggers="tick", effects="frame")
    def capture(self, ctx):
        self.seq += 1
        if self.seq > self.frames:
            ctx.request_stop()
            return
        image = np.full((480, 640, 3), self.bank_index, np.uint8)  # a real camera reads self.device
        ctx.set(self.frame, {"camera": self.bank_index, "seq": self.seq, "image": image})


class Fusion(hprm.Reactor):
    frames = hprm.Input(width=4)

    @hprm.reaction(triggers="frames")
    def fuse(self, ctx):
        got = ctx.get(self.frames)  # the present channels, in channel (camera) order
        mosaic = np.concatenate([f["image"] for f in got], axis=1)
        missing = [i for i in range(len(self.frames)) if not self.frames[i].is_present]
        print(f"t={ctx.elapsed / 1e6:.0f}ms fused {len(got)} frames into {mosaic.shape}, missing {missing}", flush=True)


placement = sys.argv[1] if len(sys.argv) > 1 else "processes"
prog = hprm.Program("fusion")
cams = prog.bank("cam", Camera, 4, placement=placement, member_args=[{"device": f"/dev/video{i}"} for i in range(4)])
fusion = prog.federate("fusion", Fusion)
prog.connect(cams.frame, fusion.frames, after="10ms")

if __name__ == "__main__":
    prog.launch()
