"""Warm memory (issue 23): the Python broadcast-and-gather round with the
store a new user gets (256 MiB, not pre-faulted) and a pre-faulted one
(``--populate``), for two builds side by side. A side is an hprm-store
binary and the Python SDK that runs the federates (an interpreter of a
virtual environment with ``hprm`` installed): what the store does about
cold pages lies in both, the daemon's arena and the client's mapping.

Each configuration runs ``broadcast_hprm.py`` (4 echoing receivers, the
source sending a fresh copy of its array each round) in launches that
alternate between the sides, so that slow and fast spells of the machine
hit both alike. Figures per side, each the median over launches: the
launch's median measured round; its round 1, the last of the echo's
rounds to land on a block no process has written yet (round 0 does too,
but it also holds the program's start); and its mean warm-up round after
the first (rounds 1-4; with fresh replies, blocks keep reaching processes
that have not written them for several rounds). Each launch's line on
stderr also gives the minor page faults over the measured rounds of the
source and of the receivers (their sum): 0 once every process writes only
pages it has written before. A table on stdout.

``--reference`` adds issue 23's item 6 target, measured in the same run:
in the default store, each echo launch with the source's private array
(copied into the store each round) is followed by one of the same program
with the array re-sent by reference (``broadcast_hprm.py --payload
reference``: nothing copied), and each source times a warm memcpy of the
payload's size in its own process. Per side: the private round against
the by-reference round plus 3 memcpys (medians over launches), met or
not.

    python bench/store/warm_memory.py --store-a OLD/hprm-store [--python-a OLD/venv/bin/python] \\
        [--store-b NEW/hprm-store] [--python-b NEW/venv/bin/python] [--label-a before] [--label-b after] \\
        [--sizes 10000000,1000000] [--variant echo|fresh] [--launches 3] [--rounds 60] [--reference]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
BROADCAST = HERE.parent / "broadcast" / "broadcast_hprm.py"
WARMUP = 5


def bin_dir(store: Path, python: Path, tmp: Path, name: str) -> Path:
    """A directory holding `store` as hprm-store and the side's SDK's hprm-rti."""
    d = tmp / name
    d.mkdir()
    (d / "hprm-store").symlink_to(store.resolve())
    rti = shutil.which("hprm-rti", path=str(python.parent)) or shutil.which("hprm-rti")
    if rti is None:
        raise SystemExit(f"no hprm-rti beside {python} or on PATH")
    (d / "hprm-rti").symlink_to(Path(rti).resolve())
    return d


class Launch(NamedTuple):
    round_us: float  # median measured round
    round1_us: float
    warmup_us: float  # mean of warm-up rounds 1..
    memcpy_us: float  # median warm memcpy of the size, in the source's process
    source_faults: int  # over the measured rounds
    receiver_faults: int  # summed over the receivers


def one_launch(python: Path, bins: Path, store: str, size: int, variant: str, rounds: int,
               out: Path, payload: str = "private") -> Launch:
    env = dict(os.environ, HPRM_BIN_DIR=str(bins), RUST_LOG="error", NO_COLOR="1")
    cmd = [str(python), str(BROADCAST), "--coordination", "centralized", "--size", str(size), "--variant", variant,
           "--rounds", str(rounds), "--warmup", str(WARMUP), "--store", store, "--payload", payload, "--out", str(out)]
    r = subprocess.run(cmd, env=env, cwd=BROADCAST.parent, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"broadcast_hprm.py failed ({r.returncode}):\n{r.stderr[-3000:]}")
    doc = json.loads(out.read_text())
    if doc.get("error"):
        raise SystemExit(f"broadcast_hprm.py reported: {doc['error']}")
    early = doc["warmup_ns"][1:]
    receivers = [json.loads(f.read_text()) for f in sorted(out.parent.glob(f"{out.name}.recv*"))]
    return Launch(statistics.median(doc["latency_ns"]) / 1e3, early[0] / 1e3, statistics.mean(early) / 1e3,
                  statistics.median(doc["memcpy_ns"] or [0]) / 1e3, doc["minor_faults"],
                  sum(r.get("minor_faults", 0) for r in receivers))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store-a", type=Path, required=True, help="side A's hprm-store")
    ap.add_argument("--python-a", type=Path, default=Path(sys.executable),
                    help="side A's Python, with its hprm SDK [default: this one]")
    ap.add_argument("--store-b", type=Path, help="side B's hprm-store [default: beside side B's Python]")
    ap.add_argument("--python-b", type=Path, default=Path(sys.executable),
                    help="side B's Python, with its hprm SDK [default: this one]")
    ap.add_argument("--label-a", default="A")
    ap.add_argument("--label-b", default="B")
    ap.add_argument("--sizes", default="10000000", help="comma-separated payload bytes")
    ap.add_argument("--variant", choices=("echo", "fresh"), default="echo",
                    help="the receivers send the array back (echo) or a new one of theirs (fresh)")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--reference", action="store_true",
                    help="also the echo with the array re-sent by reference, in the default store (issue 23's target)")
    a = ap.parse_args()
    if a.reference and a.variant != "echo":
        ap.error("--reference compares echo rounds; leave out --variant fresh")
    store_b = a.store_b or Path(shutil.which("hprm-store", path=str(a.python_b.parent)) or "hprm-store")
    sides = {"A": (a.python_a, a.store_a), "B": (a.python_b, store_b)}
    rows = []
    # (size, side) -> the default store's private launches and by-reference ones
    target: dict[tuple[int, str], tuple[list[Launch], list[Launch]]] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        dirs = {side: bin_dir(store, python, tmp, side) for side, (python, store) in sides.items()}
        for size in (int(s) for s in a.sizes.split(",")):
            for store in ("default", "default-populated"):
                got: dict[str, list[Launch]] = {"A": [], "B": []}
                for i in range(a.launches):
                    for side in ("A", "B"):
                        payloads = ("private", "reference") if a.reference and store == "default" else ("private",)
                        for payload in payloads:
                            out = tmp / f"{side}-{store}-{size}-{payload}-{i}" / "out.json"
                            out.parent.mkdir()
                            us = one_launch(sides[side][0], dirs[side], store, size, a.variant, a.rounds, out, payload)
                            if payload == "private":
                                got[side].append(us)
                            if len(payloads) > 1:
                                target.setdefault((size, side), ([], []))[payloads.index(payload)].append(us)
                            print(f"  {size} B, {store} store, {payload}, launch {i + 1}/{a.launches}, {side}: "
                                  f"round {us.round_us / 1e3:.2f} ms, round 1 {us.round1_us / 1e3:.2f} ms, warm-up rounds "
                                  f"{us.warmup_us / 1e3:.2f} ms, memcpy {us.memcpy_us / 1e3:.3f} ms, faults in the measured "
                                  f"rounds: source {us.source_faults}, receivers {us.receiver_faults}; load average "
                                  f"{os.getloadavg()[0]:.1f}", file=sys.stderr)
                med = {s: tuple(statistics.median(x[k] for x in got[s]) for k in (0, 1, 2)) for s in got}
                rows.append((size, store, med["A"], med["B"]))
    print(f"Python broadcast and gather, 4 receivers ({a.variant}), centralized, {a.launches} alternating launches a side, "
          f"medians over launches (ms); A ({a.label_a}) = {a.python_a} + {a.store_a}, "
          f"B ({a.label_b}) = {a.python_b} + {store_b}; load average {os.getloadavg()[0]:.1f}:")
    heads = ("round", "round 1", "warm-up")
    print(f"{'size (B)':>10}  {'store':<18}" + "".join(f" {'A ' + h:>11} {'B ' + h:>11} {'B / A':>6}  " for h in heads))
    for size, store, ma, mb in rows:
        print(f"{size:>10}  {store:<18}"
              + "".join(f" {ma[k] / 1e3:>11.2f} {mb[k] / 1e3:>11.2f} {mb[k] / ma[k]:>5.2f}x  " for k in range(3)))
    by = {(size, store): (ma, mb) for size, store, ma, mb in rows}
    for size in sorted({size for size, *_ in rows}, reverse=True):
        if (size, "default") in by and (size, "default-populated") in by:
            (da, db), (pa, pb) = by[(size, "default")], by[(size, "default-populated")]
            print(f"{size:>10}  default / populated: "
                  + "; ".join(f"{h}: A {da[k] / pa[k]:.2f}x, B {db[k] / pb[k]:.2f}x" for k, h in enumerate(heads)))

    for (size, side), (private, by_ref) in sorted(target.items()):
        p, r, m = (statistics.median(x.round_us for x in private), statistics.median(x.round_us for x in by_ref),
                   statistics.median(x.memcpy_us for x in private + by_ref))
        bound = r + 3 * m
        label = a.label_a if side == "A" else a.label_b
        print(f"{size:>10}  target (issue 23, item 6), {side} ({label}), default store: private-array round "
              f"{p / 1e3:.2f} ms <= by-reference round {r / 1e3:.2f} ms + 3 x memcpy {m / 1e3:.3f} ms = "
              f"{bound / 1e3:.2f} ms: {'met' if p <= bound else 'NOT met'} ({p / bound:.2f}x the bound)")


if __name__ == "__main__":
    main()
