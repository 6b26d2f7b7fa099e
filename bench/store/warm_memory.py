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
that have not written them for several rounds). Progress on stderr; a
table on stdout.

    python bench/store/warm_memory.py --store-a OLD/hprm-store [--python-a OLD/venv/bin/python] \\
        [--store-b NEW/hprm-store] [--python-b NEW/venv/bin/python] [--label-a before] [--label-b after] \\
        [--sizes 10000000,1000000] [--variant echo|fresh] [--launches 3] [--rounds 60]
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


def one_launch(python: Path, bins: Path, store: str, size: int, variant: str, rounds: int,
               out: Path) -> tuple[float, float, float]:
    """(median measured round, round 1, mean of warm-up rounds 1..), in µs."""
    env = dict(os.environ, HPRM_BIN_DIR=str(bins), RUST_LOG="error", NO_COLOR="1")
    cmd = [str(python), str(BROADCAST), "--coordination", "centralized", "--size", str(size), "--variant", variant,
           "--rounds", str(rounds), "--warmup", str(WARMUP), "--store", store, "--out", str(out)]
    r = subprocess.run(cmd, env=env, cwd=BROADCAST.parent, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"broadcast_hprm.py failed ({r.returncode}):\n{r.stderr[-3000:]}")
    doc = json.loads(out.read_text())
    if doc.get("error"):
        raise SystemExit(f"broadcast_hprm.py reported: {doc['error']}")
    early = doc["warmup_ns"][1:]
    return statistics.median(doc["latency_ns"]) / 1e3, early[0] / 1e3, statistics.mean(early) / 1e3


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
    a = ap.parse_args()
    store_b = a.store_b or Path(shutil.which("hprm-store", path=str(a.python_b.parent)) or "hprm-store")
    sides = {"A": (a.python_a, a.store_a), "B": (a.python_b, store_b)}
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        dirs = {side: bin_dir(store, python, tmp, side) for side, (python, store) in sides.items()}
        for size in (int(s) for s in a.sizes.split(",")):
            for store in ("default", "default-populated"):
                got: dict[str, list[tuple[float, float, float]]] = {"A": [], "B": []}
                for i in range(a.launches):
                    for side in ("A", "B"):
                        out = tmp / f"{side}-{store}-{size}-{i}.json"
                        us = one_launch(sides[side][0], dirs[side], store, size, a.variant, a.rounds, out)
                        got[side].append(us)
                        print(f"  {size} B, {store} store, launch {i + 1}/{a.launches}, {side}: "
                              f"round {us[0] / 1e3:.2f} ms, round 1 {us[1] / 1e3:.2f} ms, warm-up rounds {us[2] / 1e3:.2f} ms",
                              file=sys.stderr)
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


if __name__ == "__main__":
    main()
