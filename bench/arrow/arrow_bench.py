"""A large value one hop, as an Arrow record batch and as a plain array of
the same bytes, in Python and in Rust, beside dora-rs's Arrow path, all
interleaved pass after pass in one run (issue 28: target, the record batch
within 1.2x of the array).

    python bench/arrow/arrow_bench.py [--quick] [--out DIR] [--rust-bin PATH | --no-rust] [--dora-python PATH]
        [--baseline-python PATH --baseline-label NAME] [--name STEM] [--sizes MB ...] [--passes N]

Systems, each two processes passing one value a hop:
- hprm Python: a numpy array, and a pyarrow record batch whose one column
  is that memory (``arrow_hop.py``);
- hprm Rust: an ``f64`` Buffer, and a record batch of one Float64 column
  (hprm-node's ``arrow-hop`` example, the ``arrow`` feature; built here
  with cargo unless ``--rust-bin`` names it);
- dora-rs: a pyarrow array between two Python nodes (``arrow_dora.py``,
  with ``--dora-python``, default this interpreter; skipped, and said so,
  without dora).

With ``--baseline-python`` (an interpreter whose hprm is another build,
e.g. the commit before a change), hprm Python's two hops run with it too,
interleaved with the others, as ``hprm-py@NAME``: a before/after in one run.

Each sends one copy of the bytes into its shared memory per message. The
period grows with the size (20 ms per MB, at least 50 ms), so that no
system's messages queue behind each other: what is measured is the hop.

Writes DIR/arrow-DATE[-quick].{json,md,png}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
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
p.add_argument("--dora-python", default=sys.executable, help="an interpreter with dora-rs, dora-rs-cli and pyarrow")
p.add_argument("--rust-bin", help="hprm-node's arrow-hop example (default: built here, release)")
p.add_argument("--out", default=str(ROOT / "bench" / "results"))
p.add_argument("--baseline-python", help="an interpreter with another build of hprm, run beside --python")
p.add_argument("--baseline-label", default="baseline", help="what --baseline-python's hprm is (e.g. a commit)")
p.add_argument("--name", help="the results' file stem (default arrow-DATE[-quick])")
p.add_argument("--passes", type=int, help="interleaved passes (default 3, --quick 1)")
p.add_argument("--sizes", type=lambda t: int(t) if float(t).is_integer() else float(t), nargs="+", help="message sizes, MB (default 1 10 50, --quick 10)")
p.add_argument("--no-rust", action="store_true", help="leave out the Rust hops (a before/after of the Python SDK alone)")
ARGS = p.parse_args()
SIZES = ARGS.sizes or ([10] if ARGS.quick else [1, 10, 50])
PASSES = ARGS.passes or (1 if ARGS.quick else 3)
# (system, kind): what each hop sends.
RUNS = [("hprm-py", "numpy"), ("hprm-py", "arrow"), ("hprm-rust", "buffer"), ("hprm-rust", "arrow"), ("dora", "arrow")]
BASELINE = f"hprm-py@{ARGS.baseline_label}"
if ARGS.baseline_python:
    RUNS[2:2] = [(BASELINE, "numpy"), (BASELINE, "arrow")]
if ARGS.no_rust:
    RUNS = [r for r in RUNS if r[0] != "hprm-rust"]


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def rust_bin() -> Path:
    if ARGS.rust_bin:
        return Path(ARGS.rust_bin).resolve()
    progress("building hprm-node's arrow-hop example (cargo, release, --features arrow)")
    subprocess.run(
        ["cargo", "build", "--locked", "--release", "-p", "hprm-node", "--features", "arrow", "--example", "arrow-hop"],
        cwd=ROOT,
        check=True,
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release" / "examples" / "arrow-hop"


def dora_missing() -> str | None:
    """Why dora cannot run here, or None."""
    probe = subprocess.run([ARGS.dora_python, "-c", "import dora, pyarrow"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"{ARGS.dora_python} cannot import dora and pyarrow (pip install dora-rs-cli dora-rs pyarrow)"
    if not (shutil.which("dora", path=os.path.dirname(ARGS.dora_python)) or shutil.which("dora")):
        return "the dora CLI is not installed (pip install dora-rs-cli)"
    return None


def hop(system: str, kind: str, mb: float, binary: Path | None) -> list[float]:
    n = 10 if ARGS.quick else (20 if mb >= 50 else 40)
    period_ms = max(50, int(20 * mb))
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="error")
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        common = ["--mb", str(mb), "--messages", str(n), "--out", str(out)]
        if system in ("hprm-py", BASELINE):
            python = ARGS.python if system == "hprm-py" else ARGS.baseline_python
            cmd = [python, str(HERE / "arrow_hop.py"), "--kind", kind, "--period", f"{period_ms}ms", *common]
        elif system == "dora":
            cmd = [ARGS.dora_python, str(HERE / "arrow_dora.py"), "--period-ms", str(period_ms), *common]
            env["PATH"] = f"{os.path.dirname(ARGS.dora_python)}:{env.get('PATH', '')}"
        else:
            cmd = [str(binary)]
            env.update(HOP_KIND=kind, HOP_MB=str(mb), HOP_MESSAGES=str(n), HOP_PERIOD_MS=str(period_ms), HOP_OUT=str(out))
            env["XDG_RUNTIME_DIR"] = d
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=d)
        if r.returncode != 0 or not out.exists():
            raise SystemExit(f"{system} {kind} at {mb} MB failed (exit {r.returncode}):\n{(r.stderr or r.stdout)[-2000:]}")
        return json.loads(out.read_text())["latency_ms"]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def label(system: str, kind: str) -> str:
    return f"{system} {kind}"


STARTED_LOAD = os.getloadavg()


def main() -> None:
    binary = None if ARGS.no_rust else rust_bin()
    skipped = dora_missing()
    runs = [r for r in RUNS if not (r[0] == "dora" and skipped)]
    if skipped:
        progress(f"dora-rs skipped: {skipped}")
    lat: dict[str, dict[str, list[float]]] = {str(mb): {label(*r): [] for r in runs} for mb in SIZES}
    total, k = PASSES * len(SIZES) * len(runs), 0
    for _ in range(PASSES):
        for mb in SIZES:
            for system, kind in runs:
                k += 1
                got = hop(system, kind, mb, binary)
                lat[str(mb)][label(system, kind)] += got
                progress(f"[{k}/{total}] {mb} MB {system} {kind}: p50 {statistics.median(got):.2f} ms")
    rows = {}
    for mb, by in lat.items():
        r = {name: {"p50": statistics.median(v), "p99": pct(v, 0.99), "n": len(v)} for name, v in by.items()}
        r["python_arrow_over_numpy"] = r["hprm-py arrow"]["p50"] / r["hprm-py numpy"]["p50"]
        if not ARGS.no_rust:
            r["rust_arrow_over_buffer"] = r["hprm-rust arrow"]["p50"] / r["hprm-rust buffer"]["p50"]
        if ARGS.baseline_python:
            r["baseline_python_arrow_over_numpy"] = r[f"{BASELINE} arrow"]["p50"] / r[f"{BASELINE} numpy"]["p50"]
        if "dora arrow" in r:
            r["dora_over_hprm_py_arrow"] = r["dora arrow"]["p50"] / r["hprm-py arrow"]["p50"]
        rows[mb] = r
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    stem = ARGS.name or f"arrow-{date}{'-quick' if ARGS.quick else ''}"
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    started_load = STARTED_LOAD
    (out / f"{stem}.json").write_text(json.dumps({"latency_ms": lat, "summary": rows, "loadavg_start": started_load, "loadavg": load, "dora_skipped": skipped, "baseline": ARGS.baseline_label if ARGS.baseline_python else None}, indent=1))
    names = [label(*r) for r in runs]
    lines = [
        f"# Arrow one hop, in Python and Rust, beside a plain array of the same bytes and beside dora-rs ({stem})",
        "",
        "Two processes, one hop; each message is one copy of the bytes into shared memory (hprm: the store, the Arrow IPC",
        "stream written straight into a store object; dora: its shared-memory sample). hprm Python: a numpy float64 array",
        "and a record batch whose one column is that memory; hprm Rust: an `f64` Buffer and a record batch of one Float64",
        "column; dora-rs 1.1: a pyarrow array between Python nodes. Latency: stamp before the send to the receiver's",
        f"reaction (dora: input event), after a warm-up; period 20 ms per MB (at least 50 ms); {PASSES} interleaved passes",
        f"(`bench/arrow/`). Load average (1 min) at the start {started_load[0]:.1f}, at the end {load[0]:.1f}, on {os.cpu_count()} cores.",
        "",
        "p50 (p99), ms:",
        "",
        "| size | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for mb, r in rows.items():
        lines.append(f"| {mb} MB | " + " | ".join(f"{r[n]['p50']:.2f} ({r[n]['p99']:.2f})" for n in names) + " |")
    lines += [
        "",
        f"| size | Python: Arrow / numpy | Rust: Arrow / Buffer | target <= {TARGET}x | dora-rs / hprm Python Arrow |",
        "|---|---|---|---|---|",
    ]
    for mb, r in rows.items():
        rust = r.get("rust_arrow_over_buffer")
        met = "MET" if max(r["python_arrow_over_numpy"], rust or 0) <= TARGET else "NOT MET"
        dora = f"{r['dora_over_hprm_py_arrow']:.2f}x" if "dora_over_hprm_py_arrow" in r else "skipped"
        rust_text = f"{rust:.2f}x" if rust is not None else "not run"
        lines.append(f"| {mb} MB | {r['python_arrow_over_numpy']:.2f}x | {rust_text} | {met} | {dora} |")
    if ARGS.baseline_python:
        lines += ["", f"| size | Python: Arrow / numpy, this build | the same, {BASELINE} |", "|---|---|---|"]
        for mb, r in rows.items():
            lines.append(f"| {mb} MB | {r['python_arrow_over_numpy']:.2f}x | {r['baseline_python_arrow_over_numpy']:.2f}x |")
    if skipped:
        lines += ["", f"dora-rs was skipped: {skipped}."]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 4))
        xs = range(len(rows))
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            ax.bar([x + i * width for x in xs], [r[name]["p50"] for r in rows.values()], width, label=f"{name} p50")
        ax.set_xticks([x + 0.4 - width / 2 for x in xs], [f"{mb} MB" for mb in rows])
        ax.set_yscale("log")
        ax.set_ylabel("one hop, ms (log)")
        ax.set_title("Arrow vs a plain array, one hop: hprm Python, hprm Rust, dora-rs")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / f"{stem}.png", dpi=100)
    except ImportError:
        pass
    print(out / f"{stem}.md")


if __name__ == "__main__":
    main()
