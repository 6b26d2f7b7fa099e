"""Warm memory (issue 23): the Python broadcast-and-gather round with the
stores a new user gets (256 MiB, not pre-faulted) and pre-faulted ones, for
two builds of hprm-store side by side: one that keeps settled messages as
cache (``--store-a``, e.g. a build of an older tree) and one that frees them
as they settle (``--store-b``, by default the one beside the SDK).

Each configuration runs ``broadcast_hprm.py`` (4 echoing receivers, the
source sending a fresh copy of its array each round) in launches that
alternate between the builds, so that slow and fast spells of the machine
hit both alike; the figure is the median over launches of each launch's
median round. Progress on stderr; a table on stdout.

    python bench/store/warm_memory.py --store-a OLD/hprm-store [--store-b NEW/hprm-store] \\
        [--sizes 10000000] [--launches 3] [--rounds 60]
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


def bin_dir(store: Path, tmp: Path, name: str) -> Path:
    """A directory holding `store` as hprm-store and the SDK's hprm-rti."""
    d = tmp / name
    d.mkdir()
    (d / "hprm-store").symlink_to(store.resolve())
    rti = shutil.which("hprm-rti") or str(Path(sys.executable).parent / "hprm-rti")
    (d / "hprm-rti").symlink_to(Path(rti).resolve())
    return d


def one_launch(bins: Path, store: str, size: int, rounds: int, out: Path) -> float:
    env = dict(os.environ, HPRM_BIN_DIR=str(bins), RUST_LOG="error", NO_COLOR="1")
    cmd = [sys.executable, str(BROADCAST), "--coordination", "centralized", "--size", str(size), "--variant", "echo",
           "--rounds", str(rounds), "--warmup", "5", "--store", store, "--out", str(out)]
    r = subprocess.run(cmd, env=env, cwd=BROADCAST.parent, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"broadcast_hprm.py failed ({r.returncode}):\n{r.stderr[-3000:]}")
    doc = json.loads(out.read_text())
    if doc.get("error"):
        raise SystemExit(f"broadcast_hprm.py reported: {doc['error']}")
    return statistics.median(doc["latency_ns"]) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store-a", type=Path, required=True, help="hprm-store that keeps settled messages as cache")
    ap.add_argument("--store-b", type=Path, help="hprm-store that frees them [default: beside the SDK]")
    ap.add_argument("--sizes", default="10000000", help="comma-separated payload bytes")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=60)
    a = ap.parse_args()
    store_b = a.store_b or Path(shutil.which("hprm-store") or Path(sys.executable).parent / "hprm-store")
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        dirs = {"A": bin_dir(a.store_a, tmp, "a"), "B": bin_dir(store_b, tmp, "b")}
        for size in (int(s) for s in a.sizes.split(",")):
            for store in ("default", "default-populated"):
                got = {"A": [], "B": []}
                for i in range(a.launches):
                    for side in ("A", "B"):
                        us = one_launch(dirs[side], store, size, a.rounds, tmp / f"{side}-{store}-{size}-{i}.json")
                        got[side].append(us)
                        print(f"  {size} B, {store} store, launch {i + 1}/{a.launches}, {side}: {us / 1e3:.2f} ms", file=sys.stderr)
                ma, mb = statistics.median(got["A"]), statistics.median(got["B"])
                rows.append((size, store, ma, mb))
    print(f"Python broadcast and gather, 4 echoing receivers, centralized, {a.launches} alternating launches a side, "
          f"median round (ms); A = {a.store_a}, B = {store_b}:")
    print(f"{'size (B)':>10}  {'store':<18} {'A: kept as cache':>17} {'B: freed on settle':>19} {'B / A':>6}")
    for size, store, ma, mb in rows:
        print(f"{size:>10}  {store:<18} {ma / 1e3:>17.2f} {mb / 1e3:>19.2f} {mb / ma:>5.2f}x")


if __name__ == "__main__":
    main()
