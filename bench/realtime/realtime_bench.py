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

The driving pipeline (examples/python/driving/driving.py, the models of
bench/pipeline; HPRM centralized and decentralized) runs under the same four
conditions, placement on being `driving.py --priority 10`: its four
federates, the store and the RTI at SCHED_FIFO 10 (no CPUs pinned: four
federates share the two CPUs). It reports the loop time (control to control
at the simulator) p50 / p99 / jitter and the same target.

Needs root or CAP_SYS_NICE (it says so otherwise). Writes
OUT/realtime-DATE.{json,md,png} (DATE-quick for --quick). The load average
before each condition goes into the report: on a shared machine the
"unloaded" runs are not idle.

    python bench/realtime/realtime_bench.py [--quick] [--out bench/results] [--only small,pipeline] [--spin-us N]
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
DRIVING = HERE.parents[1] / "examples" / "python" / "driving" / "driving.py"
PRIORITY = 10
PARTS = ("small", "pipeline")

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--quick", action="store_true", help="fewer rounds, sizes and steps (a run of about 2 minutes; a full one about 3.5)")
p.add_argument("--out", default=str(HERE.parent / "results"))
p.add_argument("--only", default=",".join(PARTS), help="comma-separated parts of: small (the ping-pong), pipeline (the driving pipeline)")
p.add_argument("--spin-us", type=int, help="how long federates and the RTI poll before they sleep, in every run (HPRM_SPIN_US, hprm-rti --spin-us; default: theirs)")
ARGS = p.parse_args()
ONLY = [x for x in ARGS.only.split(",") if x]
if any(x not in PARTS for x in ONLY) or not ONLY:
    p.error(f"--only takes parts of: {', '.join(PARTS)}")
SIZES = [8, 4096] if ARGS.quick else [8, 512, 4096, 32_768]
ROUNDS, WARMUP = (300, 30) if ARGS.quick else (2000, 200)
STEPS, STEP_WARMUP = (40, 5) if ARGS.quick else (300, 20)
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
    if ARGS.spin_us is not None:
        cmd += ["--spin-us", str(ARGS.spin_us)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, RUST_LOG="warn", NO_COLOR="1"))
    if r.returncode != 0 or not out.exists():
        raise SystemExit(f"realtime bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    res = json.loads(out.read_text())
    if "error" in res:
        raise SystemExit(f"realtime bench: {res['error']}")
    return {pt["size"]: np.array(pt["one_way_ns"]) / 1e3 for pt in res["points"]}


def run_pipeline(coordination: str, placed: bool, out: Path) -> np.ndarray:
    """The driving pipeline's loop times (ms) of its measured steps."""
    cmd = [sys.executable, str(DRIVING), "--coordination", coordination, "--steps", str(STEPS), "--warmup", str(STEP_WARMUP), "--report", str(out)]
    if placed:
        cmd += ["--priority", str(PRIORITY)]
    if ARGS.spin_us is not None:
        cmd += ["--spin-us", str(ARGS.spin_us)]
    env = dict(os.environ, RUST_LOG="warn", NO_COLOR="1")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300 + 10 * (STEPS + STEP_WARMUP), env=env)
    if r.returncode != 0 or not out.exists():
        raise SystemExit(f"realtime bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return np.array(json.loads(out.read_text())["loop_ms"])


def main() -> None:
    if os.geteuid() != 0:
        raise SystemExit("realtime bench: placement needs root or CAP_SYS_NICE; run it as root")
    ncpu = len(os.sched_getaffinity(0))
    results: dict = {}
    loads: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for part in ONLY:
            for coordination in ("centralized", "decentralized"):
                for load, placed, loaded in CONDITIONS:
                    name = f"{part}: {coordination} {load} placement {'on' if placed else 'off'}"
                    what = f"{len(SIZES)} sizes x {ROUNDS} rounds" if part == "small" else f"{STEPS} steps after {STEP_WARMUP}"
                    loads[(part, coordination, load, placed)] = os.getloadavg()[0]
                    log(f"{name}: {what}{' with ' + str(ncpu) + ' CPU hogs' if loaded else ''} (load average {os.getloadavg()[0]:.2f})")
                    running = hogs(ncpu) if loaded else []
                    try:
                        out = Path(tmp) / f"{part}-{coordination}-{load}-{placed}.json"
                        if part == "small":
                            results[(part, coordination, load, placed)] = run(coordination, placed, out)
                        else:
                            results[(part, coordination, load, placed)] = {"loop": run_pipeline(coordination, placed, out)}
                    finally:
                        for h in running:
                            h.kill()
                            h.wait()
    write(results, loads, ncpu)


def stats(us: np.ndarray) -> tuple[float, float, float]:
    p50, p99 = np.percentile(us, 50), np.percentile(us, 99)
    return float(p50), float(p99), float(p99 - p50)


def table(results: dict, part: str, keys: list, unit: str, label) -> tuple[list[str], list[str], dict]:
    """Rows, target verdicts and raw figures of one part: per coordination
    and key (a size, or the pipeline's loop), the four conditions."""
    rows, verdicts, raw = [], [], {}
    for coordination in ("centralized", "decentralized"):
        for key in keys:
            base_p99 = stats(results[(part, coordination, "unloaded", False)][key])[1]
            cells = []
            for load, placed, _ in CONDITIONS:
                p50, p99, jitter = stats(results[(part, coordination, load, placed)][key])
                raw[f"{part} {coordination} {load} {'on' if placed else 'off'} {key}"] = {f"p50_{unit}": p50, f"p99_{unit}": p99, f"jitter_{unit}": jitter}
                cells.append(f"{p50:.1f} / {p99:.1f} / {jitter:.1f}" if unit == "ms" else f"{p50:.0f} / {p99:.0f} / {jitter:.0f}")
            on_p99 = stats(results[(part, coordination, "loaded", True)][key])[1]
            off_p99 = stats(results[(part, coordination, "loaded", False)][key])[1]
            unloaded_on_p99 = stats(results[(part, coordination, "unloaded", True)][key])[1]
            met = on_p99 <= 2 * base_p99
            rows.append(f"| {coordination} | {label(key)} | " + " | ".join(cells) + f" | {on_p99 / base_p99:.2f}x | {off_p99 / base_p99:.2f}x |")
            verdicts.append(
                f"- {'MET' if met else 'NOT MET'}: {coordination}, {label(key)}: p99 under load with placement {on_p99:.1f} {unit} vs unloaded {base_p99:.1f} {unit} "
                f"({on_p99 / base_p99:.2f}x; vs unloaded with placement {on_p99 / unloaded_on_p99:.2f}x; without placement {off_p99 / base_p99:.2f}x)"
            )
    return rows, verdicts, raw


def write(results: dict, loads: dict, ncpu: int) -> None:
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    date = dt.date.today().isoformat()
    stem = out / f"realtime-{date}{'-quick' if ARGS.quick else ''}"
    cmd = f"bench/realtime/realtime_bench.py{' --quick' if ARGS.quick else ''}{'' if ARGS.only == ','.join(PARTS) else ' --only ' + ARGS.only}{'' if ARGS.spin_us is None else f' --spin-us {ARGS.spin_us}'}"
    spin = "the runtime's default polling bound (federates 200 us, RTI --spin-us 200, at any priority)" if ARGS.spin_us is None else f"polling bound {ARGS.spin_us} us (HPRM_SPIN_US, hprm-rti --spin-us)"
    md = [
        f"# Real-time placement under load ({date})",
        "",
        f"`{cmd}` on {ncpu} CPUs, {spin}. Loaded: {ncpu} CPU hogs (`while True: pass`) at normal priority. "
        "Target (issue 28): with placement on, the p99 under load within 2x of the unloaded p99 (placement off).",
        "",
    ]
    raw: dict = {}
    header = "| coordination | {} | unloaded, off | unloaded, on | loaded, off | loaded, on | loaded on / unloaded p99 | loaded off / unloaded p99 |"
    if "small" in ONLY:
        rows, verdicts, r = table(results, "small", SIZES, "us", lambda k: f"{k} B")
        raw.update(r)
        md += [
            "## Small messages",
            "",
            f"The ping-pong of two Python federates (bench/small/small_hprm.py, fast mode), {ROUNDS} measured rounds per size after {WARMUP}; "
            f"one-way latency in microseconds, p50 / p99 / jitter (p99 - p50). Placement on: both federates, the store and the RTI at SCHED_FIFO {PRIORITY}, "
            "ping and pong on CPUs of their own.",
            "",
            header.format("bytes"),
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            *verdicts,
            "",
        ]
    if "pipeline" in ONLY:
        rows, verdicts, r = table(results, "pipeline", ["loop"], "ms", lambda k: "loop time")
        raw.update(r)
        md += [
            "## The driving pipeline",
            "",
            f"examples/python/driving/driving.py (simulator -> BEV agent + YOLOv5 detector -> fusion), {STEPS} measured steps after {STEP_WARMUP}; "
            f"loop time (control to control at the simulator) in milliseconds, p50 / p99 / jitter. Placement on: `driving.py --priority {PRIORITY}`, "
            f"its four federates, the store and the RTI at SCHED_FIFO {PRIORITY}, on any CPU.",
            "",
            header.format("figure"),
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            *verdicts,
            "",
        ]
    md += ["## Load average (1 min) before each condition", "", "Other work shared the machine; these are the load averages as each run began (hogs excluded).", ""]
    md += [f"- {part} {coordination} {load}, placement {'on' if placed else 'off'}: {la:.2f}" for (part, coordination, load, placed), la in loads.items()]
    md.append("")
    stem.with_suffix(".md").write_text("\n".join(md))
    stem.with_suffix(".json").write_text(json.dumps({"load_average": {" ".join(map(str, k)): v for k, v in loads.items()}, "figures": raw}, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        panels = [(part, c) for part in ONLY for c in ("centralized", "decentralized")]
        fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4))
        for ax, (part, coordination) in zip(np.atleast_1d(axes), panels):
            keys = SIZES if part == "small" else ["loop"]
            labels = [f"{load}\nplacement {'on' if placed else 'off'}" for load, placed, _ in CONDITIONS]
            for k, key in enumerate(keys):
                p99 = [stats(results[(part, coordination, load, placed)][key])[1] for load, placed, _ in CONDITIONS]
                ax.bar(np.arange(len(CONDITIONS)) + k * 0.8 / len(keys), p99, 0.8 / len(keys), label=f"{key} B" if part == "small" else "loop")
            ax.set_xticks(np.arange(len(CONDITIONS)) + 0.4 - 0.4 / len(keys), labels, fontsize=8)
            ax.set_title(f"{part}, {coordination}: p99 ({'us, one-way' if part == 'small' else 'ms, loop'})")
            ax.set_yscale("log")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(stem.with_suffix(".png"), dpi=110)
    except ImportError:
        log("matplotlib missing: no plot")
    log(f"wrote {stem}.md")
    print("\n".join(md))


if __name__ == "__main__":
    main()
