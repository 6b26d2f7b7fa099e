"""What every system's small-message ping-pong shares (BENCHMARKS.md
workload 4): the schedule, the payloads, the result file.

ping sends a message holding a uint8 array of the size and its send stamp
(``time.perf_counter_ns()``: CLOCK_MONOTONIC, one clock for every process
on the host); pong takes its own stamp as soon as it has the message and
echoes the array back with both stamps. One-way latency: pong's stamp minus
ping's; round trip: ping's clock when the echo is in, minus its stamp. The
next ping goes out when the echo is in. Each size runs ``--warmup`` rounds,
then ``--rounds`` measured ones.

Each program writes ``{"points": [{"size": N, "one_way_ns": [...],
"rtt_ns": [...]}]}`` or ``{"error": "..."}`` to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

# The workloads' directories beside this one (bench/README.md: the layout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broadcast"))

from broadcast_common import fail, write_result  # noqa: E402, F401  (re-exported for the programs)

# A ping that gets no echo within this long is a stuck system.
ECHO_TIMEOUT_S = 10.0


def parse_args(argv=None, extra=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", required=True, help="comma-separated payload bytes")
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--out", required=True)
    if extra:
        extra(p)
    a = p.parse_args(argv)
    a.sizes = [int(s) for s in a.sizes.split(",")]
    if not a.sizes or min(a.sizes) < 1 or a.rounds < 1 or a.warmup < 0:
        p.error("--sizes must be positive, --rounds at least 1, --warmup at least 0")
    return a


def schedule(args) -> list[tuple[int, bool]]:
    """(size, measured) for every ping, in order."""
    return [(s, i >= args.warmup) for s in args.sizes for i in range(args.warmup + args.rounds)]


def payloads(args) -> dict[int, np.ndarray]:
    return {s: np.random.default_rng(s).integers(0, 256, s, dtype=np.uint8) for s in args.sizes}


class Samples:
    """One-way and round-trip samples per size."""

    def __init__(self, sizes):
        self.points = {s: {"size": s, "one_way_ns": [], "rtt_ns": []} for s in sizes}

    def add(self, size: int, stamp: int, seen: int, back: int) -> None:
        p = self.points[size]
        p["one_way_ns"].append(seen - stamp)
        p["rtt_ns"].append(back - stamp)

    def write(self, path: str) -> None:
        import json
        import os

        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"points": list(self.points.values())}, f)
        os.replace(tmp, path)
