"""Banks beside hand-written federates and Ray (issue 25's benchmark): one
source broadcasts to N members (4, 8, 16) which echo; the median round
latency of each placement (threads: one federate; processes: one federate
per member; hand: the same program as separate federates written by hand,
as before banks) and of Ray, in one run, with the ratios the issue asks
for and whether its targets are met.

    python banks_bench.py [--quick] [--rounds N] [--hprm-python PY] [--ray-python PY]

Writes bench/results/banks-DATE.{json,md,png}. Each point is its own
process tree (a launch of the program, or a Ray session), started one after
another on this host.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
ROOT = HERE.parents[1]

p = argparse.ArgumentParser()
p.add_argument("--quick", action="store_true", help="widths 4 and 16, sizes 1 KB, 10 MB, 50 MB")
p.add_argument("--rounds", type=int, default=30)
p.add_argument("--passes", type=int, default=2, help="HPRM points run this many times, interleaved, their samples pooled")
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--hprm-python", default=str(ROOT / ".venv" / "bin" / "python"))
p.add_argument("--ray-python", default=str(ROOT / "bench" / ".venv-ray" / "bin" / "python"))
p.add_argument(
    "--ft-python",
    default=str(ROOT / ".venv-313t" / "bin" / "python"),
    help="a free-threaded 3.13t venv with the SDK (scripts/free-threaded.sh, or HPRM_PYTHON=python3.13t hprm-py/install.sh .venv-313t); its thread placement is measured when it exists",
)
ARGS = p.parse_args()

WIDTHS = [4, 16] if ARGS.quick else [4, 8, 16]
SIZES = [1_000, 10_000_000, 50_000_000] if ARGS.quick else [1_000, 1_000_000, 10_000_000, 50_000_000]
FREE_THREADED = Path(ARGS.ft_python).exists()
SYSTEMS = ["threads", "processes", "hand", *(["threads-3.13t"] if FREE_THREADED else []), "ray"]
HPRM_SYSTEMS = [s for s in SYSTEMS if s != "ray"]


def run(system: str, width: int, size: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        common = ["--width", str(width), "--size", str(size), "--rounds", str(ARGS.rounds), "--warmup", str(ARGS.warmup), "--out", str(out)]
        if system == "ray":
            cmd = [ARGS.ray_python, str(HERE / "banks_ray.py"), *common]
        elif system == "threads-3.13t":
            cmd = [ARGS.ft_python, str(HERE / "banks_hprm.py"), "--placement", "threads", *common]
        else:
            cmd = [ARGS.hprm_python, str(HERE / "banks_hprm.py"), "--placement", system, *common]
        env = dict(os.environ, NO_COLOR="1", RUST_LOG="error")
        t = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=HERE)
        if not out.exists():
            return {"error": f"exit {r.returncode}: {r.stderr[-800:]}"}
        got = json.loads(out.read_text())
        got["wall_s"] = round(time.monotonic() - t, 1)
        return got


def label(size: int) -> str:
    return f"{size // 1_000_000} MB" if size >= 1_000_000 else f"{size // 1000} KB"


def main() -> None:
    results: dict[str, dict] = {}
    # HPRM's points run ARGS.passes times, interleaved (threads, processes,
    # hand, then again), so that a slow moment of the host does not land on
    # one placement only; Ray's once (its session start is long).
    order = [s for _ in range(ARGS.passes) for s in HPRM_SYSTEMS] + ["ray"]
    total = len(WIDTHS) * len(SIZES) * len(order)
    k = 0
    for width in WIDTHS:
        for size in SIZES:
            samples: dict[str, list[int]] = {}
            errors: dict[str, str] = {}
            for system in order:
                k += 1
                got = run(system, width, size)
                if got.get("error") or not got.get("latency_ns"):
                    errors[system] = got.get("error") or "no samples"
                    print(f"[{k}/{total}] {system:9} N={width:2} {label(size):>6}: FAILED {errors[system][:300]}", flush=True)
                    continue
                samples.setdefault(system, []).extend(got["latency_ns"])
                print(f"[{k}/{total}] {system:9} N={width:2} {label(size):>6}: median {statistics.median(got['latency_ns']) / 1e6:9.2f} ms  ({got['wall_s']} s)", flush=True)
            for system in SYSTEMS:
                key = f"{system}/{width}/{size}"
                if system in errors or system not in samples:
                    results[key] = {"error": errors.get(system, "no samples")}
                else:
                    xs = samples[system]
                    results[key] = {"median_ms": round(statistics.median(xs) / 1e6, 3), "samples_ms": [round(x / 1e6, 3) for x in xs]}

    def med(system, width, size):
        return results.get(f"{system}/{width}/{size}", {}).get("median_ms")

    ft_head = " threads 3.13t ms |" if FREE_THREADED else ""
    lines = [
        f"| N | size | threads ms | processes ms | hand-written ms |{ft_head} Ray ms | Ray/threads | Ray/processes | processes/threads | hand/processes |",
        "|---|---|---|---|---|" + ("---|" if FREE_THREADED else "") + "---|---|---|---|---|",
    ]
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"  # noqa: E731
    cell = lambda v: f"{v:.2f}" if v else "failed"  # noqa: E731
    for width in WIDTHS:
        for size in SIZES:
            t, pr, h, ft, ray = (med(s, width, size) for s in ("threads", "processes", "hand", "threads-3.13t", "ray"))
            ft_cell = f" {cell(ft)} |" if FREE_THREADED else ""
            lines.append(f"| {width} | {label(size)} | {cell(t)} | {cell(pr)} | {cell(h)} |{ft_cell} {cell(ray)} | {ratio(ray, t)} | {ratio(ray, pr)} | {ratio(pr, t)} | {ratio(h, pr)} |")
    table = "\n".join(lines)
    print("\n" + table)

    t, pr, h, ray = (med(s, 16, 10_000_000) for s in ("threads", "processes", "hand", "ray"))
    best = min(x for x in (t, pr) if x) if (t or pr) else None
    targets = [
        ("at 16 members and 10 MB, banks at least 15x faster than Ray", ray and best and ray / best >= 15, f"Ray {ray} ms, best bank placement {best} ms: {ray / best:.1f}x" if ray and best else "missing figures"),
        ("thread placement at least 2x faster than process placement there", t and pr and pr / t >= 2, f"threads {t} ms, processes {pr} ms: {pr / t:.2f}x" if t and pr else "missing figures"),
        ("banks no slower than the hand-written federates (the same graph by construction: processes vs hand, within 10% run-to-run noise)", pr and h and pr <= h * 1.10, f"bank (processes) {pr} ms, hand-written {h} ms, bank (threads) {t} ms" if pr and h else "missing figures"),
    ]
    verdicts = "\n".join(f"- {'MET' if ok else 'NOT MET'}: {what} ({why})" for what, ok, why in targets)
    print("\n" + verdicts)

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    stem = RESULTS / f"banks-{date}{'-quick' if ARGS.quick else ''}"
    RESULTS.mkdir(exist_ok=True)
    meta = {"host_cpus": os.cpu_count(), "python": "3.11 (threads, processes, hand, Ray)", "rounds": ARGS.rounds, "warmup": ARGS.warmup, "passes": ARGS.passes, "widths": WIDTHS, "sizes": SIZES}
    Path(f"{stem}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    md = [
        f"# Banks: broadcast to N members and gather, beside Ray ({date})",
        "",
        f"bench/banks/banks_bench.py{' --quick' if ARGS.quick else ''}, one run on this host ({os.cpu_count()} CPUs), Python 3.11, "
        f"{ARGS.rounds} measured rounds after {ARGS.warmup} warm-up rounds ({ARGS.passes} passes of each HPRM point, interleaved, samples pooled; Ray one), median round latency (source sends, every member echoes the array, source has all replies). "
        "HPRM: centralized, fast mode, one store and RTI per launch; threads = members as reactors of one federate, processes = one federate per member, "
        "hand = the same program written as separate federates (before banks). Ray: ray.put once per round, actors ray.get and return it.",
        "threads 3.13t: the thread placement on free-threaded CPython 3.13t (the SDK built for it, GIL off)."
        if FREE_THREADED
        else "Free-threaded 3.13t was not measured in this run (no 3.13t venv with the SDK at --ft-python).",
        "",
        table,
        "",
        "## Targets (issue 25)",
        "",
        verdicts,
        "",
        "The thesis's figures (32 vCPUs): 16 actors x 10 MB, Ray about 20 ms, LF just above 5 ms.",
    ]
    Path(f"{stem}.md").write_text("\n".join(md) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(WIDTHS), figsize=(5 * len(WIDTHS), 4), sharey=True)
        for ax, width in zip(axes if len(WIDTHS) > 1 else [axes], WIDTHS):
            for system in SYSTEMS:
                xs = [s for s in SIZES if med(system, width, s)]
                ax.plot([s / 1e6 for s in xs], [med(system, width, s) for s in xs], marker="o", label=system)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{width} members")
            ax.set_xlabel("payload (MB)")
            ax.grid(True, which="both", alpha=0.3)
        (axes[0] if len(WIDTHS) > 1 else axes).set_ylabel("round latency, median (ms)")
        (axes[0] if len(WIDTHS) > 1 else axes).legend()
        fig.tight_layout()
        fig.savefig(f"{stem}.png", dpi=110)
        print(f"wrote {stem}.json, {stem}.md, {stem}.png")
    except ImportError:
        print(f"wrote {stem}.json, {stem}.md (no matplotlib: no plot)")


if __name__ == "__main__":
    main()
