"""A camera -> detector -> planner pipeline of Python federates; prints one
line per planned frame (checked by test_federation.py).

Usage: python pipeline.py [centralized|decentralized] [frames] [born|private]
(private: Program(store_arrays=False), arrays made in reactions stay
private and are copied when sent)
"""

import sys

import numpy as np

import hprm

MODE = sys.argv[1] if len(sys.argv) > 1 else "centralized"
FRAMES = int(sys.argv[2]) if len(sys.argv) > 2 else 5
STORE_ARRAYS = (sys.argv[3] if len(sys.argv) > 3 else "born") == "born"


class Camera(hprm.Reactor):
    frame = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="20ms")
        self.seq = 0

    @hprm.reaction(triggers="tick", effects="frame")
    def capture(self, ctx):
        self.seq += 1
        img = ctx.alloc_array((480, 640, 3), np.uint8)  # in the store: sent without a copy
        img[:] = self.seq
        print(f"captured seq={self.seq} object={hprm.store_object_id(img)}", flush=True)
        ctx.set(self.frame, {"rgb": img, "seq": self.seq, "stamp": ctx.logical_time})


class Detector(hprm.Reactor):
    frame = hprm.Input()
    boxes = hprm.Output()

    @hprm.reaction(triggers="frame", effects="boxes", deadline="5s")
    def detect(self, ctx):
        f = self.frame.value
        img = f["rgb"]
        ok = img.shape == (480, 640, 3) and not img.flags.writeable and int(img[0, 0, 0]) == f["seq"] % 256
        print(f"received seq={f['seq']} object={hprm.store_object_id(img)}", flush=True)
        # Computed here (300 KB): numpy makes it in the store, so it is sent
        # without a copy too (unless store_arrays=False).
        mask = img[..., 0] == f["seq"] % 256
        print(f"mask seq={f['seq']} object={hprm.store_object_id(mask)}", flush=True)
        ctx.set(self.boxes, {"seq": f["seq"], "boxes": np.arange(8, dtype=np.float32).reshape(2, 4) * f["seq"], "zero_copy_ok": ok, "mask": mask})

    @detect.deadline_handler
    def late(self, ctx):
        print("detector: late", flush=True)


class Planner(hprm.Reactor):
    boxes = hprm.Input()

    @hprm.reaction(triggers="boxes")
    def plan(self, ctx):
        b = self.boxes.value
        print(f"mask received seq={b['seq']} object={hprm.store_object_id(b['mask'])} all={bool(b['mask'].all())}", flush=True)
        print(f"planned seq={b['seq']} at={ctx.elapsed // 1_000_000}ms sum={float(b['boxes'].sum())} ok={b['zero_copy_ok']}", flush=True)


prog = hprm.Program(
    "pipeline",
    coordination=MODE,
    stp="50ms",
    timeout=f"{20 * (FRAMES - 1)}ms",
    store_arrays=STORE_ARRAYS,
)
cam = prog.federate("camera", Camera)
det = prog.federate("detector", Detector)
plan = prog.federate("planner", Planner)
prog.connect(cam.frame, det.frame)
prog.connect(det.boxes, plan.boxes, after="10ms")

if __name__ == "__main__":
    prog.launch()
