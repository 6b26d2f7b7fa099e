"""The driving pipeline's nodes on dora-rs: one Python node per stage, the
same stages as the HPRM example (examples/python/driving), wired by
dora_dataflow.yml and run with `dora run` (run.py writes the dataflow with
the plan filled in).

    python dora_pipeline.py ROLE --steps N --warmup W --seed S [--report FILE]

Frames go out through ``send_output_raw`` (dora's zero-copy path: the
simulator renders straight into dora's shared memory, as HPRM's
``alloc_array``) and are read as numpy views of it; the step number and the
measurements travel as metadata; actions, boxes and controls as small
float64 Arrow arrays (with the stages' compute ms and wall-clock
start/done times, see steplog.py). Fusion waits for both the action and the boxes of a
step.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from dora import Node

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python" / "driving"))

import stages  # noqa: E402
from steplog import StepLog  # noqa: E402
from world import BEV_SHAPE, RGB_SHAPE, make_world  # noqa: E402


def inputs(node: Node):
    """The node's input events until its inputs close or it is stopped."""
    for event in node:
        if event["type"] == "INPUT":
            yield event
        elif event["type"] == "STOP":
            return


def frame(event, shape) -> np.ndarray:
    return event["value"].to_numpy(zero_copy_only=True).reshape(shape)


def simulator(node: Node, args) -> None:
    world = make_world(args.seed, args.carla)
    log = StepLog("dora", args.warmup, args.steps, args.seed)

    def send(step: int) -> None:
        t = time.perf_counter()
        meas = world.measurements()
        samples = []
        for key, shape, render, md in (("bev", BEV_SHAPE, world.render_bev, {"step": step, "meas": [float(m) for m in meas]}),
                                       ("rgb", RGB_SHAPE, world.render_rgb, {"step": step})):
            sample = node.send_output_raw(key, int(np.prod(shape)), md)
            mv = sample.as_memoryview()
            render(np.frombuffer(mv, np.uint8).reshape(shape))
            mv.release()  # no view may outlive the sample when it is sent
            samples.append(sample)
        log.render_ms = (time.perf_counter() - t) * 1e3
        log.sending()
        for sample in samples:
            sample.send()

    try:
        send(0)
        for event in inputs(node):
            c = event["value"].to_numpy()
            log.control(c[1:4].tolist(), {"agent": float(c[4]), "detector": float(c[5]), "fusion": float(c[6])},
                        {"agent": c[7:9], "detector": c[9:11], "fusion": c[11:13]})
            world.apply(c[1:4])
            if log.done:
                break
            send(int(c[0]) + 1)
    finally:
        world.close()
    if args.report and log.done:
        log.write(args.report)


def agent(node: Node, args) -> None:
    a = stages.Agent(args.seed)
    for event in inputs(node):
        md, bev = event["metadata"], frame(event, BEV_SHAPE)
        t0 = time.time()  # the frame is in hand (wall clock: hop times compare it across processes)
        action, ms = stages.timed(a.act, bev, np.array(md["meas"], np.float32))
        node.send_output("action", pa.array(np.array([*action, ms, t0, time.time()], np.float64)), {"step": md["step"]})


def detector(node: Node, args) -> None:
    d = stages.Detector(args.seed)
    for event in inputs(node):
        rgb = frame(event, RGB_SHAPE)
        t0 = time.time()
        boxes, ms = stages.timed(d.detect, rgb)
        node.send_output("boxes", pa.array(np.concatenate([[ms, t0, time.time()], boxes.ravel()])), {"step": event["metadata"]["step"]})


def fusion(node: Node, args) -> None:
    pending: dict[str, dict[int, np.ndarray]] = {"action": {}, "boxes": {}}
    for event in inputs(node):
        pending[event["id"]][event["metadata"]["step"]] = event["value"].to_numpy()
        t0 = time.time()
        # Waits for both outputs of a step before fusing them.
        for step in sorted(set(pending["action"]) & set(pending["boxes"])):
            a, b = pending["action"].pop(step), pending["boxes"].pop(step)
            # a: acc, steer, ms, t0, t1; b: ms, t0, t1, boxes
            control, ms = stages.timed(stages.fuse, a[:2].astype(np.float32), b[3:].reshape(-1, 6).astype(np.float32))
            node.send_output("control", pa.array(np.array([step, *control, a[2], b[0], ms, a[3], a[4], b[1], b[2], t0, time.time()], np.float64)))


ROLES = {"simulator": simulator, "agent": agent, "detector": detector, "fusion": fusion}


def main() -> None:
    p = argparse.ArgumentParser(description="one stage of the driving pipeline on dora-rs")
    p.add_argument("role", choices=sorted(ROLES))
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report")
    p.add_argument("--carla")
    args = p.parse_args()
    ROLES[args.role](Node(), args)


if __name__ == "__main__":
    main()
