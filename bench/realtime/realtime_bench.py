"""Real-time placement under load (issue 28): the small-message ping-pong
(bench/small/small_hprm.py, two Python federates) with and without two CPU
hogs, with placement off and on (both federates, the store and the RTI at
SCHED_FIFO priority 10, ping on one CPU and pong on the other), centralized and
decentralized. Reports p50, p99 and jitter (p99 - p50) of the one-way
latency per size, and the target: with placement on, the p99 under load
within 2x of the unloaded p99 (placement off).

The hogs are `python -c "while True: pass"` processes at normal priority,
one per CPU: what a busy robot computer's other work looks like to the
scheduler. With placement on, the RTI runs at that priority too
(`prog.launch(rti_args=...)`): in centralized coordination every message's
grant goes through it.

Needs root or CAP_SYS_NICE (it says so otherwise). Writes
OUT/realtime-DATE.{json,md,png}.

    python bench/realtime/realtime_bench.py [--quick] [--out bench/results]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SMALL = HERE.parent / "small" / "small_hprm.py"
PRIORITY = 10

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--quick", action="store_true", help="fewer rounds and sizes (a smoke run)")
p.add_argument("--out", default=str(HERE.parent / "results"))
ARGS = p.parse_args()
SIZES = [8, 4096] if ARGS.quick else [8, 512, 4096, 32_768]
ROUNDS, WARMUP = (300, 30) if ARGS.quick else (2000, 200)
CONDITIONS = [("unloaded", False, False), ("unloaded", True, False), ("loaded", False, True), ("loaded", True, True)]


def log(msg: str) -> None:
    print(f"[realtime] {msg}", file=sys.stderr, flush=True)


def hogs(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def run(coordination: str, placed: bool, out: Path) -> dict:
    cmd = [sys.executable, str(SMALL), "--coordination", coordination, "--sizes", ",".join(map(str, SIZES)), "--rounds", str(ROUNDS), "--warmup", str(WARMUP), "--out", str(out)]
    if placed:
        cpus = os.sched_getaffinity(0)
        pair = f"{min(cpus)}/{max(cpus)}"
        cmd += ["--priority", str(PRIORITY), "--cpus", pair]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, RUST_LOG="warn", NO_COLOR="1"))
    if r.returncode != 0 or not out.exists():
        raise SystemExit(f"realtime bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    res = json.loads(out.read_text())
    if "error" in res:
        raise SystemExit(f"realtime bench: {res['error']}")
    return {pt["size"]: np.array(pt["one_way_ns"]) / 1e3 for pt in res["points"]}


def main() -> None:
    if os.geteuid() != 0:
        raise SystemExit("realtime bench: placement needs root or CAP_SYS_NICE; run it as root")
    ncpu = len(os.sched_getaffinity(0))
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for coordination in ("centralized", "decentralized"):
            for load, placed, loaded in CONDITIONS:
                name = f"{coordination} {load} placement {'on' if placed else 'off'}"
                log(f"{name}: {len(SIZES)} sizes x {ROUNDS} rounds{' with ' + str(ncpu) + ' CPU hogs' if loaded else ''}")
                running = hogs(ncpu) if loaded else []
                try:
                    samples = run(coordination, placed, Path(tmp) / f"{coordination}-{load}-{placed}.json")
                finally:
                    for h in running:
                        h.kill()
                        h.wait()
                results[(coordination, load, placed)] = samples
    write(results, ncpu)


def stats(us: np.ndarray) -> tuple[float, float, float]:
    p50, p99 = np.percentile(us, 50), np.percentile(us, 99)
    return float(p50), float(p99), float(p99 - p50)


def write(results: dict, ncpu: int) -> None:
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    date = dt.date.today().isoformat()
    stem = out / f"realtime-{date}{'-quick' if ARGS.quick else ''}"
    rows, verdicts, raw = [], [], {}
    for coordination in ("centralized", "decentralized"):
        for size in SIZES:
            base_p99 = stats(results[(coordination, "unloaded", False)][size])[1]
            cells = []
            for load, placed, _ in CONDITIONS:
                p50, p99, jitter = stats(results[(coordination, load, placed)][size])
                raw[f"{coordination} {load} {'on' if placed else 'off'} {size}"] = {"p50_us": p50, "p99_us": p99, "jitter_us": jitter}
                cells.append(f"{p50:.0f} / {p99:.0f} / {jitter:.0f}")
            on_p99 = stats(results[(coordination, "loaded", True)][size])[1]
            off_p99 = stats(results[(coordination, "loaded", False)][size])[1]
            met = on_p99 <= 2 * base_p99
            rows.append(f"| {coordination} | {size} | " + " | ".join(cells) + f" | {on_p99 / base_p99:.2f}x | {off_p99 / base_p99:.2f}x |")
            verdicts.append(f"- {'MET' if met else 'NOT MET'}: {coordination}, {size} B: p99 under load with placement {on_p99:.0f} us vs unloaded {base_p99:.0f} us ({on_p99 / base_p99:.2f}x; without placement {off_p99 / base_p99:.2f}x)")
    md = [
        f"# Real-time placement under load ({date})",
        "",
        f"`bench/realtime/realtime_bench.py{' --quick' if ARGS.quick else ''}` on {ncpu} CPUs: the small-message ping-pong of two Python federates (bench/small/small_hprm.py, fast mode), {ROUNDS} measured rounds per size after {WARMUP}; one-way latency in microseconds, p50 / p99 / jitter (p99 - p50). Loaded: {ncpu} CPU hogs (`while True: pass`) at normal priority. Placement on: both federates, the store and the RTI at SCHED_FIFO {PRIORITY}, ping and pong on CPUs of their own.",
        "",
        "| coordination | bytes | unloaded, off | unloaded, on | loaded, off | loaded, on | loaded on / unloaded p99 | loaded off / unloaded p99 |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "## Target (issue 28): with placement on, the p99 under load within 2x of the unloaded p99",
        "",
        *verdicts,
        "",
    ]
    stem.with_suffix(".md").write_text("\n".join(md))
    stem.with_suffix(".json").write_text(json.dumps(raw, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        for ax, coordination in zip(axes, ("centralized", "decentralized")):
            labels = [f"{load}\nplacement {'on' if placed else 'off'}" for load, placed, _ in CONDITIONS]
            for k, size in enumerate(SIZES):
                p99 = [stats(results[(coordination, load, placed)][size])[1] for load, placed, _ in CONDITIONS]
                ax.bar(np.arange(len(CONDITIONS)) + k * 0.8 / len(SIZES), p99, 0.8 / len(SIZES), label=f"{size} B")
            ax.set_xticks(np.arange(len(CONDITIONS)) + 0.4 - 0.4 / len(SIZES), labels, fontsize=8)
            ax.set_title(f"{coordination}: one-way p99")
            ax.set_yscale("log")
        axes[0].set_ylabel("microseconds")
        axes[0].legend()
        fig.tight_layout()
        fig.savefig(stem.with_suffix(".png"), dpi=110)
    except ImportError:
        log("matplotlib missing: no plot")
    log(f"wrote {stem}.md")
    print("\n".join(md))


if __name__ == "__main__":
    main()
