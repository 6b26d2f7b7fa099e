"""An autonomous-driving pipeline on HPRM (the HPRM paper's Figs. 2.5-2.6):

    simulator --bev--> agent (Roach PPO) --action--\\
        \\--rgb--> detector (YOLOv5) --boxes------> fusion --control--> simulator

Four federates (processes). Each step the simulator renders a 192x192x15
bird's-eye view and a 1280x720 camera frame straight into the shared-memory
store (``ctx.alloc_array``: sending them copies nothing); the agent and the
detector read them in parallel as read-only views of that memory; fusion
combines the action and the boxes into a control, which goes back to the
simulator 50 ms of *simulated* time later (``after="50ms"``: the loop's
delay, CARLA's 20 Hz step). The program runs in fast mode: logical time is
simulation time and advances as fast as the pipeline computes, so the steps
per second it reaches are the pipeline's throughput.

Centralized coordination makes the run deterministic: fusion always sees
the action and the boxes of the same step, so the same seed gives the same
sequence of controls on every run (test_driving.py checks it). In
decentralized mode fusion waits for both inputs of a step, or at most the
STP offset.

The networks have random weights (built once as ONNX files, see models.py),
so the car drives nowhere in particular; the work per step is the real
networks'.

    python examples/python/driving/driving.py [--coordination centralized|decentralized]
        [--steps N] [--warmup W] [--seed S] [--report FILE.json] [--carla HOST:PORT] [--priority N]
        [--spin-us US]

Needs the hprm SDK (hprm-py/install.sh VENV) and `pip install onnx onnxruntime`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import hprm
import stages
from steplog import StepLog
from world import BEV_SHAPE, RGB_SHAPE, carla_problem, make_world


class Simulator(hprm.Reactor):
    """Steps the world with each control and renders the next frames."""

    control = hprm.Input()
    bev = hprm.Output()
    rgb = hprm.Output()

    def __init__(self, args):
        self.args = args
        self.log = StepLog(f"hprm-{args.coordination}", args.warmup, args.steps, args.seed, forever=args.forever)
        self.world = None

    @hprm.reaction(triggers="startup", effects="bev, rgb")
    def start(self, ctx):
        self.world = make_world(self.args.seed, self.args.carla)
        self.send_frames(ctx, 0)

    @hprm.reaction(triggers="control", effects="bev, rgb")
    def step(self, ctx):
        c = self.control.value
        self.log.control(c["control"], c["ms"], c["t"])
        self.world.apply(c["control"])
        if self.log.done:
            self.finish()
            ctx.request_stop()
        else:
            self.send_frames(ctx, c["step"] + 1)

    def send_frames(self, ctx, step):
        (bev, rgb), self.log.render_ms = stages.timed(self.render, ctx)
        self.log.sending()
        ctx.set(self.bev, {"step": step, "bev": bev, "measurements": self.world.measurements()})
        ctx.set(self.rgb, {"step": step, "rgb": rgb})

    def render(self, ctx):
        # Allocated in the store: the frames are written once, never copied.
        bev = ctx.alloc_array(BEV_SHAPE, np.uint8, port=self.bev)
        rgb = ctx.alloc_array(RGB_SHAPE, np.uint8, port=self.rgb)
        self.world.render_bev(bev)
        self.world.render_rgb(rgb)
        return bev, rgb

    def finish(self):
        self.world.close()
        r = self.log.report()
        if self.args.report:
            self.log.write(self.args.report)
        print(f"{r['system']}: {r['steps']} steps measured, {r['throughput_fps']:.2f} steps/s; last control {r['controls'][-1]}", flush=True)


class Agent(hprm.Reactor):
    """Roach's PPO policy on the bird's-eye view and the measurements."""

    bev = hprm.Input()
    action = hprm.Output()

    def __init__(self, seed):
        self.seed = seed

    @hprm.reaction(triggers="startup")
    def load(self, ctx):
        self.agent = stages.Agent(self.seed)  # in the agent's process only

    @hprm.reaction(triggers="bev", effects="action")
    def act(self, ctx):
        f = self.bev.value
        t0 = time.time()  # the frame is in hand (wall clock: hop times compare it across processes)
        action, ms = stages.timed(self.agent.act, f["bev"], f["measurements"])
        ctx.set(self.action, {"step": f["step"], "action": action, "ms": ms, "t": (t0, time.time())})


class Detector(hprm.Reactor):
    """YOLOv5 on the camera frame."""

    rgb = hprm.Input()
    boxes = hprm.Output()

    def __init__(self, seed):
        self.seed = seed

    @hprm.reaction(triggers="startup")
    def load(self, ctx):
        self.detector = stages.Detector(self.seed)

    @hprm.reaction(triggers="rgb", effects="boxes")
    def detect(self, ctx):
        f = self.rgb.value
        t0 = time.time()
        boxes, ms = stages.timed(self.detector.detect, f["rgb"])
        ctx.set(self.boxes, {"step": f["step"], "boxes": boxes, "ms": ms, "t": (t0, time.time())})


class Fusion(hprm.Reactor):
    """The control from the action and the boxes of one step."""

    action = hprm.Input()
    boxes = hprm.Input()
    control = hprm.Output()

    @hprm.reaction(triggers="action, boxes", effects="control")
    def fuse(self, ctx):
        a, b = self.action.value, self.boxes.value
        t0 = time.time()
        if a is None or b is None or a["step"] != b["step"]:
            # Decentralized, past the STP: one input is late. Skip the step's
            # fusion rather than pair outputs of different steps.
            print(f"fusion: step {(a or b)['step']} has only one input; raise --stp", file=sys.stderr, flush=True)
            return
        control, ms = stages.timed(stages.fuse, a["action"], b["boxes"])
        ctx.set(self.control, {
            "step": a["step"],
            "control": control,
            "ms": {"agent": a["ms"], "detector": b["ms"], "fusion": ms},
            "t": {"agent": a["t"], "detector": b["t"], "fusion": (t0, time.time())},
        })


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coordination", choices=("centralized", "decentralized"), default="centralized")
    p.add_argument("--steps", type=int, default=40, help="measured steps (default 40)")
    p.add_argument("--warmup", type=int, default=10, help="warm-up steps before them (default 10, at least 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stp", default="5s", help="decentralized: the longest fusion waits for a late input (default 5s)")
    p.add_argument("--report", help="write the per-step record (loop times, stage times, controls) to this JSON file")
    p.add_argument("--carla", metavar="HOST:PORT", help="drive a CARLA server instead of the synthetic simulator")
    p.add_argument("--forever", action="store_true", help="run until stopped (SIGTERM, Ctrl-C), keeping no per-step record (bench/soak)")
    p.add_argument("--detector-width", type=float, help=f"YOLOv5 width multiple (default {stages.DETECTOR_WIDTH:g}; 0.5 = YOLOv5s)")
    p.add_argument("--priority", type=int, help="run the four federates, the store and the RTI at this SCHED_FIFO priority, 1-99 (needs root or CAP_SYS_NICE; bench/realtime)")
    p.add_argument("--spin-us", type=int, help="how long the federates (HPRM_SPIN_US) and the RTI (hprm-rti --spin-us) poll before they sleep, 0-1000000 (default: theirs; bench/realtime)")
    args = p.parse_args(argv)
    if args.priority is not None and not 1 <= args.priority <= 99:
        p.error("--priority must be from 1 to 99")
    if args.spin_us is not None:
        if not 0 <= args.spin_us <= 1_000_000:
            p.error("--spin-us must be from 0 to 1000000")
        # The federate processes (this script, relaunched) inherit it.
        os.environ["HPRM_SPIN_US"] = str(args.spin_us)
    if args.detector_width is not None:
        if not 0 < args.detector_width <= 1:
            p.error("--detector-width must be in (0, 1], e.g. 0.25 (YOLOv5n) or 0.5 (YOLOv5s)")
        # The federate processes (this script, relaunched) inherit it.
        os.environ[stages.WIDTH_ENV] = str(args.detector_width)
        stages.DETECTOR_WIDTH = args.detector_width
    if args.steps < 1 or args.warmup < 1:
        p.error("--steps and --warmup must be at least 1")
    if args.carla and carla_problem(args.carla):
        p.error(carla_problem(args.carla))
    return args


def build(args) -> hprm.Program:
    prog = hprm.Program("driving", coordination=args.coordination, stp=args.stp)
    sim = prog.federate("simulator", Simulator, args)
    agent = prog.federate("agent", Agent, args.seed)
    det = prog.federate("detector", Detector, args.seed)
    fusion = prog.federate("fusion", Fusion)
    prog.connect(sim.bev, agent.bev)
    prog.connect(sim.rgb, det.rgb)
    prog.connect(agent.action, fusion.action)
    prog.connect(det.boxes, fusion.boxes)
    # The loop's delay: the control applies at the next simulation step.
    prog.connect(fusion.control, sim.control, after="50ms")
    if args.priority is not None:
        for f in (sim, agent, det, fusion):
            f.realtime(priority=args.priority)
    return prog


if __name__ == "__main__":
    args = parse_args()
    if not os.environ.get("HPRM_FEDERATE"):  # the launching process: build the models once, first
        import models

        try:
            models.ensure_models(args.seed, stages.DETECTOR_WIDTH)
        except RuntimeError as e:
            sys.exit(f"error: {e}")
    # --populate: the store's memory (and each federate's mapping of it) is
    # faulted in at start, so writing a fresh frame does not page-fault.
    placed = ["--realtime-priority", str(args.priority)] if args.priority is not None else []
    spin = ["--spin-us", str(args.spin_us)] if args.spin_us is not None else []
    build(args).launch(fast=True, store_args=["--populate", *placed], rti_args=placed + spin or None)
