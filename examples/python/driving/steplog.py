"""What the simulator records per step, in every system the benchmark runs
(HPRM, ROS 2, ROS 2 + shared memory, dora-rs), and the report it writes.

A step's *loop time* is the wall time between two controls arriving at the
simulator: applying the control and rendering the next frames, carrying
them to the agent and the detector, running both, fusing, and carrying the
control back. Each stage also reports its own compute time, so the report
can tell compute from middleware time, and the wall-clock times (time.time(),
one clock for all processes of a host) at which it started on a step and
finished it, so that the report can split the middleware time into hops:
frames to agent and to detector, the later of the two outputs to fusion,
the control back to the simulator.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

PROGRESS_EVERY = 50  # steps between progress lines (stderr)


class StepLog:
    def __init__(self, system: str, warmup: int, steps: int, seed: int, forever: bool = False) -> None:
        self.system, self.warmup, self.steps, self.seed = system, warmup, steps, seed
        # forever: never done, and nothing kept per step (a soak must not
        # see the log itself grow); only the count of steps.
        self.forever = forever
        self.counted = 0
        self.arrivals: list[float] = []
        self.controls: list[list[float]] = []
        self.stage_ms: list[dict] = []
        self.render_ms = 0.0
        self.sent_at = 0.0
        self.hop_ms: list[dict] = []

    @property
    def total(self) -> int:
        return self.warmup + self.steps

    @property
    def done(self) -> bool:
        return not self.forever and len(self.controls) >= self.total

    def sending(self) -> None:
        """Marks the step's frames as rendered and about to be sent."""
        self.sent_at = time.time()

    def control(self, control, stage_ms: dict, stamps: dict) -> None:
        """Records the control of the current step as it arrives, with the
        stages' compute ms and their (start, done) wall-clock times:
        ``stamps = {"agent": (t0, t1), "detector": (t0, t1), "fusion": (t0, t1)}``."""
        if self.forever:
            self.counted += 1
            if self.counted % PROGRESS_EVERY == 0:
                print(f"{self.system}: step {self.counted}", file=sys.stderr, flush=True)
            return
        now = time.time()
        a, d, f = stamps["agent"], stamps["detector"], stamps["fusion"]
        self.hop_ms.append({
            "bev": (a[0] - self.sent_at) * 1e3,
            "rgb": (d[0] - self.sent_at) * 1e3,
            "to_fusion": (f[0] - max(a[1], d[1])) * 1e3,
            "control": (now - f[1]) * 1e3,
        })
        self.arrivals.append(time.perf_counter())
        self.controls.append([float(c) for c in control])
        self.stage_ms.append(dict(stage_ms, render=self.render_ms))
        n = len(self.controls)
        if n % PROGRESS_EVERY == 0 or n == self.total:
            print(f"{self.system}: step {n}/{self.total}", file=sys.stderr, flush=True)

    def report(self) -> dict:
        """Loop times of the measured steps (the first measured one is
        timed from the last warm-up control, so warmup must be >= 1)."""
        w = max(self.warmup, 1)
        loops = [(b - a) * 1e3 for a, b in zip(self.arrivals[w - 1 :], self.arrivals[w:])]
        return {
            "system": self.system,
            "seed": self.seed,
            "warmup": self.warmup,
            "steps": len(loops),
            "loop_ms": loops,
            "fps": [1e3 / ms for ms in loops],
            "throughput_fps": len(loops) / (self.arrivals[-1] - self.arrivals[w - 1]) if loops else 0.0,
            "stage_ms": self.stage_ms[w:],
            "hop_ms": self.hop_ms[w:],
            "controls": self.controls,
        }

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.report()))
