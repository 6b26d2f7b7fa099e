"""What the simulator records per step, in every system the benchmark runs
(HPRM, ROS 2, ROS 2 + shared memory, dora-rs), and the report it writes.

A step's *loop time* is the wall time between two controls arriving at the
simulator: applying the control and rendering the next frames, carrying
them to the agent and the detector, running both, fusing, and carrying the
control back. Each stage also reports its own compute time, so the report
can tell compute from middleware time.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

PROGRESS_EVERY = 50  # steps between progress lines (stderr)


class StepLog:
    def __init__(self, system: str, warmup: int, steps: int, seed: int) -> None:
        self.system, self.warmup, self.steps, self.seed = system, warmup, steps, seed
        self.arrivals: list[float] = []
        self.controls: list[list[float]] = []
        self.stage_ms: list[dict] = []
        self.render_ms = 0.0

    @property
    def total(self) -> int:
        return self.warmup + self.steps

    @property
    def done(self) -> bool:
        return len(self.controls) >= self.total

    def control(self, control, stage_ms: dict) -> None:
        """Records the control of the current step as it arrives."""
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
            "controls": self.controls,
        }

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.report()))
