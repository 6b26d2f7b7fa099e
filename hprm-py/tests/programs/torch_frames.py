"""A camera sending torch tensors to a detector, two Python federates;
prints one line per received frame (checked by test_torch.py).

Usage: python torch_frames.py [frames]
"""

import sys

import torch

import hprm

FRAMES = int(sys.argv[1]) if len(sys.argv) > 1 else 3


class Camera(hprm.Reactor):
    frame = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="20ms")
        self.seq = 0

    @hprm.reaction(triggers="tick", effects="frame")
    def capture(self, ctx):
        self.seq += 1
        img = torch.arange(480 * 640 * 3, dtype=torch.float32).reshape(480, 640, 3) * self.seq  # 3.5 MiB: in the store
        ctx.set(self.frame, {"img": img, "small": torch.tensor([self.seq, -self.seq], dtype=torch.int16), "seq": self.seq})


class Detector(hprm.Reactor):
    frame = hprm.Input()

    @hprm.reaction(triggers="frame")
    def detect(self, ctx):
        f = self.frame.value
        img, small, seq = f["img"], f["small"], f["seq"]
        want = torch.arange(480 * 640 * 3, dtype=torch.float32).reshape(480, 640, 3) * seq
        exact = isinstance(img, torch.Tensor) and img.dtype == torch.float32 and torch.equal(img, want) and torch.equal(small, torch.tensor([seq, -seq], dtype=torch.int16))
        print(f"received seq={seq} exact={exact} stored={hprm.store_object_id(img) is not None} small_stored={hprm.store_object_id(small) is not None}", flush=True)


prog = hprm.Program("torch-frames", stp="50ms", timeout=f"{20 * (FRAMES - 1)}ms")
cam = prog.federate("camera", Camera)
det = prog.federate("detector", Detector)
prog.connect(cam.frame, det.frame)

if __name__ == "__main__":
    prog.launch()
