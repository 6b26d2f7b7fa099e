"""A 10 MB pyarrow record batch one hop between Python processes, beside
the numpy array of the same bytes, interleaved pass after pass (issue 28:
target, the record batch within 1.2x of the array).

    python bench/arrow/arrow_bench.py [--quick] [--out DIR]

Writes DIR/arrow-DATE[-quick].{json,md,png}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TARGET = 1.2

p = argparse.ArgumentParser()
p.add_argument("--quick", action="store_true")
p.add_argument("--python", default=sys.executable, help="the interpreter with hprm, numpy and pyarrow")
p.add_argument("--out", default=str(ROOT / "bench" / "results"))
ARGS = p.parse_args()
SIZES = [10] if ARGS.quick else [1, 10, 50]
PASSES = 1 if ARGS.quick else 3
KINDS = ("numpy", "arrow")


def hop(kind: str, mb: float) -> list[float]:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        n = 10 if ARGS.quick else 40
        cmd = [ARGS.python, str(HERE / "arrow_hop.py"), "--kind", kind, "--mb", str(mb), "--messages", str(n), "--out", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, NO_COLOR="1", RUST_LOG="error"))
        if r.returncode != 0 or not out.exists():
            raise SystemExit(f"arrow_hop.py --kind {kind} --mb {mb} failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
        return json.loads(out.read_text())["latency_ms"]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    lat: dict[str, dict[str, list[float]]] = {str(mb): {k: [] for k in KINDS} for mb in SIZES}
    total, k = PASSES * len(SIZES) * len(KINDS), 0
    for _ in range(PASSES):
        for mb in SIZES:
            for kind in KINDS:
                k += 1
                got = hop(kind, mb)
                lat[str(mb)][kind] += got
                print(f"[{k}/{total}] {mb} MB {kind}: p50 {statistics.median(got):.2f} ms", file=sys.stderr, flush=True)
    rows = {}
    for mb, by in lat.items():
        rows[mb] = {kind: {"p50": statistics.median(v), "p99": pct(v, 0.99), "n": len(v)} for kind, v in by.items()}
        rows[mb]["ratio_p50"] = rows[mb]["arrow"]["p50"] / rows[mb]["numpy"]["p50"]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    stem = f"arrow-{date}{'-quick' if ARGS.quick else ''}"
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    (out / f"{stem}.json").write_text(json.dumps({"latency_ms": lat, "summary": rows, "loadavg": load}, indent=1))
    lines = [
        f"# A pyarrow record batch one hop, beside the numpy array of the same bytes ({stem})",
        "",
        "Two Python federates (processes), one store; a float64 array held privately by the source and a record batch",
        "whose one column is that memory. Each message costs one copy into the store either way (Arrow: the IPC stream",
        "written straight into a store object). Latency: stamp before `ctx.set` to the sink's reaction start, after a",
        f"warm-up; {PASSES} interleaved passes (`bench/arrow/`). Load average at the end: {load[0]:.1f} on {os.cpu_count()} cores.",
        "",
        f"| size | numpy p50 (ms) | numpy p99 | Arrow p50 (ms) | Arrow p99 | Arrow / numpy (p50) | target <= {TARGET}x |",
        "|---|---|---|---|---|---|---|",
    ]
    for mb, r in rows.items():
        ok = "MET" if r["ratio_p50"] <= TARGET else "NOT MET"
        lines.append(f"| {mb} MB | {r['numpy']['p50']:.2f} | {r['numpy']['p99']:.2f} | {r['arrow']['p50']:.2f} | {r['arrow']['p99']:.2f} | {r['ratio_p50']:.2f}x | {ok} |")
    lines += ["", "Not measured here yet: the Rust side (an `arrow` feature of hprm-node) and dora-rs's Arrow path."]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        xs = range(len(rows))
        for i, kind in enumerate(KINDS):
            ax.bar([x + i * 0.35 for x in xs], [r[kind]["p50"] for r in rows.values()], 0.35, label=f"{kind} p50")
        ax.set_xticks([x + 0.175 for x in xs], [f"{mb} MB" for mb in rows])
        ax.set_ylabel("one hop, ms")
        ax.set_title("pyarrow record batch vs numpy array, one hop")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / f"{stem}.png", dpi=100)
    except ImportError:
        pass
    print(out / f"{stem}.md")


if __name__ == "__main__":
    main()
