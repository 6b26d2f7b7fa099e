"""What every system's broadcast-and-gather program shares (BENCHMARKS.md
workload 3), so that they all send the same payloads, reply the same way and
measure the same thing.

One source, RECEIVERS receivers, each its own process. A round: the source
marks the round in its payload (first and last byte), takes
``time.perf_counter_ns()``, sends the array to every receiver; each replies,
*echo* (the array it received, as its system lets it send it on) or *fresh*
(a new array of the same size, filled with the next byte); the round's
latency is the source's clock when the last reply of the round has been
received, minus the stamp. Warm-up rounds are run and dropped.

Each program is started by broadcast_bench.py with the same command line
(``--size --variant --rounds --warmup --out``) and writes its samples as JSON
to ``--out``: ``{"latency_ns": [...], "first_ns": [...]}`` (send to first
reply), or ``{"error": "..."}`` when a round failed a check or timed out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

RECEIVERS = 4
VARIANTS = ("echo", "fresh")
# A round that takes longer than this is a stuck system (50 MB through
# ROS 2 takes about 1.3 s here): the program stops and reports a timeout.
ROUND_TIMEOUT_S = 30.0


def fill_byte(round_: int, variant: str) -> int:
    """The byte that marks a round: the source's first and last byte, and
    every byte of a fresh reply (the next value, so an echo and a fresh reply
    cannot be mistaken for each other)."""
    b = round_ % 251
    return b if variant == "echo" else (b + 1) % 256


def make_payload(size: int) -> np.ndarray:
    """The source's array: the same pseudo-random bytes for every system."""
    return np.random.default_rng(20261122).integers(0, 256, size, dtype=np.uint8)


def mark(payload: np.ndarray, round_: int) -> None:
    """Writes the round's byte at both ends of the source's payload."""
    payload[0] = payload[-1] = fill_byte(round_, "echo")


def fresh_reply(out: np.ndarray, round_: int) -> np.ndarray:
    """Fills a receiver's new array: what producing a reply costs."""
    out.fill(fill_byte(round_, "fresh"))
    return out


def reply_problem(data, size: int, round_: int, variant: str) -> str | None:
    """Why a reply is not the one expected for this round (None: it is)."""
    a = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    want = fill_byte(round_, variant)
    if a.size != size:
        return f"reply of round {round_} has {a.size} bytes, expected {size}"
    if int(a[0]) != want or int(a[-1]) != want:
        return f"reply of round {round_} starts {int(a[0])} and ends {int(a[-1])}, expected {want} ({variant})"
    return None


def parse_args(argv=None, extra=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, required=True, help="payload bytes")
    p.add_argument("--variant", choices=VARIANTS, required=True)
    p.add_argument("--rounds", type=int, required=True, help="measured rounds")
    p.add_argument("--warmup", type=int, default=0, help="rounds run before, not measured")
    p.add_argument("--out", required=True, help="JSON file for the samples")
    if extra:
        extra(p)
    a = p.parse_args(argv)
    if a.size < 2 or a.rounds < 1 or a.warmup < 0:
        p.error("--size must be at least 2, --rounds at least 1 and --warmup at least 0")
    return a


def write_result(path: str, latency_ns=None, first_ns=None, error: str | None = None, **extra) -> None:
    """Writes the samples (or the error) atomically: the harness reads the file
    only once the program has exited."""
    doc = {"error": error} if error else {"latency_ns": list(latency_ns or []), "first_ns": list(first_ns or [])}
    doc.update(extra)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def fail(path: str, error: str) -> None:
    """Reports an error of the system under test and exits non-zero."""
    write_result(path, error=error)
    print(f"error: {error}", file=sys.stderr, flush=True)
    sys.exit(1)
