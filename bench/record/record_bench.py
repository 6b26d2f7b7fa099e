"""What recording costs (issue 29's benchmark): a camera program run with
and without `hprm launch --record`, interleaved, and the recorder's
sustained rate beside the disk's own, measured in the same run.

    python bench/record/record_bench.py [--quick] [--hprm PATH] [--dir DIR] [--out DIR]

Live workloads: 2.7 MB frames (1280x704x3 uint8) at 30, 60 and 120 fps and
10 MB frames at 10 fps, for a fixed number of frames. Each pass runs the
program twice, without and with `--record` (no compression, the default
`block:30s` policy), and reports frames lost (the recorder's own count and
what the sink missed) and the live path's latency (send to the sink's
reaction start) with and without the recorder.

Saturation: the same camera with `--fast` (no pacing: a frame as soon as
the last one is taken), `--record-compression none`, and an fsync of the
file once the program ends, counted in the time. Beside it, the disk: `dd`
of as many bytes, in the recorder's chunk size (4 MiB), `conv=fsync`, into
the same directory, just before.

dora-rs, where its wheels are installed (`dora` beside this Python or on
PATH): the same camera and sink as a dora dataflow (record_dora.py), each
live workload run without and with `dora record --proxy` (its default way
needs a binary no wheel ships; record_dora.py says why), after HPRM's runs: frames the recorder counts, frames the sink missed, and the
live path's latency; plus a 1 KB control row, which shows the harness
records what dora's recorder does record. rosbag2 has no wheels here, and
its published sustained rate (about 110-120 MB/s) is quoted as context
only.

Writes OUT/record-DATE[-quick].{json,md,png}. Targets: no silent loss; the
saturation rate within 1.5x of the disk's; added p50 latency under 5%.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROGRAM = HERE / "record_program.py"
DORA = HERE / "record_dora.py"
CHUNK = 4 << 20  # the recorder's chunk size (hprm-cli/src/record.rs)
SATURATION_TARGET = 1.5
LATENCY_TARGET = 0.05

LIVE = [(2.7, 30), (2.7, 60), (2.7, 120), (10.0, 10)]
# dora only: frames small enough for what `dora record --proxy` does record.
DORA_CONTROL = (0.001, 30)
# Set by main() from the command line, so the module imports without one.
ARGS = argparse.Namespace()
SECONDS = PASSES = SATURATION_FRAMES = 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--hprm", default=shutil.which("hprm") or str(Path(sys.executable).parent / "hprm"), help="the hprm command")
    p.add_argument("--dir", default=None, help="where recordings and dd's file go (default: a temporary directory in /var/tmp)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--skip-dora", action="store_true", help="leave dora-rs's recorder out")
    return p.parse_args(argv)


def log(msg: str) -> None:
    print(f"[record-bench] {msg}", file=sys.stderr, flush=True)


def run(work: Path, mb: float, fps: float, frames: int, record: Path | None, fast: bool = False) -> dict:
    out = work / "sink.json"
    out.unlink(missing_ok=True)
    cmd = [ARGS.hprm, "launch", "--store-memory", "1g"]
    if fast:
        cmd.append("--fast")
    if record is not None:
        # The frames are HxWx3 images: without `off` each would be written twice (its
        # Foxglove view too); the benchmark measures the values' own path, as it did before views.
        cmd += ["--record", str(record), "--record-compression", "none", "--record-foxglove", "off"]
    cmd += [str(PROGRAM), "--mb", str(mb), "--fps", str(fps), "--frames", str(frames), "--out", str(out)]
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", HPRM_PYTHON=sys.executable)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    ended = time.monotonic_ns()
    if r.returncode != 0 or not out.exists():
        raise SystemExit(f"{' '.join(cmd)} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    got = json.loads(out.read_text())
    got["ended_ns"] = ended
    if record is not None:
        got["recorder"] = recorder_line(r.stderr)
    return got


def recorder_line(stderr: str) -> dict:
    """The launcher's last word on the recording: `recorded N messages (B bytes) into F: nothing lost` or `... LOST K (...)`."""
    for line in reversed(stderr.splitlines()):
        m = re.search(r"recorded (\d+) messages \((\d+) bytes\)", line)
        if m:
            lost = re.search(r"LOST (\d+)", line)
            return {"messages": int(m.group(1)), "bytes": int(m.group(2)), "lost": int(lost.group(1)) if lost else 0, "line": line.strip()}
    raise SystemExit(f"the launcher did not report its recording:\n{stderr[-3000:]}")


def dd(work: Path, nbytes: int) -> float:
    """The disk's sequential write rate (bytes/s), in the recorder's chunk size, fsync included."""
    target = work / "dd.bin"
    count = max(1, nbytes // CHUNK)
    t0 = time.monotonic()
    r = subprocess.run(["dd", "if=/dev/zero", f"of={target}", f"bs={CHUNK}", f"count={count}", "conv=fsync"], capture_output=True, text=True)
    elapsed = time.monotonic() - t0
    target.unlink(missing_ok=True)
    if r.returncode != 0:
        raise SystemExit(f"dd failed: {r.stderr}")
    return count * CHUNK / elapsed


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dora_run(work: Path, mb: float, fps: float, frames: int, record: bool) -> dict:
    out = work / "dora-sink.json"
    out.unlink(missing_ok=True)
    drec = work / "dora.drec"
    cmd = [sys.executable, str(DORA), "--mb", str(mb), "--fps", str(fps), "--frames", str(frames), "--out", str(out)]
    if record:
        cmd += ["--record", str(drec)]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    drec.unlink(missing_ok=True)
    if r.returncode != 0 or not out.exists():
        raise SystemExit(f"{' '.join(cmd)} failed (exit {r.returncode}):\n{(r.stderr or r.stdout)[-3000:]}")
    return json.loads(out.read_text())


def dora_side(base: Path) -> dict:
    """dora-rs's recorder on the same workloads, or why it did not run."""
    sys.path.insert(0, str(HERE))
    import record_dora

    dora = record_dora.dora_command()
    if dora is None:
        return {"status": "not run: no `dora` command (pip install dora-rs-cli dora-rs; bench/run.sh installs it)", "rows": {}}
    r = subprocess.run([dora, "record", "--help"], capture_output=True, text=True)
    if r.returncode != 0:
        return {"status": "not run: this dora-rs-cli has no `dora record` command", "rows": {}}
    version = subprocess.run([dora, "--version"], capture_output=True, text=True).stdout.strip()
    injected = record_dora.injected_recorder_error(dora)
    status = f"{version}, `dora record --proxy`" + (f" (its default, an injected record node, cannot run here: {injected})" if injected else "")
    rows: dict[str, dict] = {}
    work = [(mb, fps) for mb, fps in LIVE] + [DORA_CONTROL]
    total, k = PASSES * len(work) * 2, 0
    with record_dora.Coordinator():
        for _ in range(PASSES):
            for mb, fps in work:
                key = f"{mb:g} MB @ {fps:g} fps"
                row = rows.setdefault(key, {"mb": mb, "fps": fps, "plain": [], "recorded": [], "sent": 0, "kept": 0, "missed": 0, "loss_said": []})
                for mode in ("plain", "recorded"):
                    k += 1
                    got = dora_run(base, mb, fps, int(SECONDS * fps), mode == "recorded")
                    row[mode] += got["latency_ms"]
                    row["missed"] += got["sent"] - got["received"]
                    row["period_ms"] = got["period_ms"]
                    if mode == "recorded":
                        # The recorder counts every message it kept: the frames and the
                        # sink's one `ready`, which is not a frame.
                        row["sent"] += got["sent"]
                        row["kept"] += max(0, got["recorded"] - 1)
                        row["loss_said"] += got["recorder_loss"]
                    log(f"[dora {k}/{total}] {key} {mode}: p50 {statistics.median(got['latency_ms']):.2f} ms, received {got['received']}/{got['sent']}"
                        + (f", {got['recorder_line']}" if mode == "recorded" else ""))
    summary = {}
    for key, row in rows.items():
        a, b = statistics.median(row["plain"]), statistics.median(row["recorded"])
        summary[key] = {
            "plain_p50": a, "recorded_p50": b, "added_p50": (b - a) / a, "frames": row["sent"], "recorded": row["kept"],
            "missed": row["missed"], "loss_said": sorted(set(row["loss_said"])), "period_ms": row["period_ms"],
        }
    return {"status": status, "rows": summary}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    global ARGS, SECONDS, PASSES, SATURATION_FRAMES
    ARGS = parse_args()
    SECONDS = 2 if ARGS.quick else 6
    PASSES = 1 if ARGS.quick else 3
    SATURATION_FRAMES = 150 if ARGS.quick else 600
    base = Path(ARGS.dir) if ARGS.dir else Path(tempfile.mkdtemp(prefix="hprm-record-bench-", dir="/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    live: dict[str, dict] = {}
    try:
        total, k = PASSES * len(LIVE) * 2, 0
        for _ in range(PASSES):
            for mb, fps in LIVE:
                key = f"{mb:g} MB @ {fps:g} fps"
                row = live.setdefault(key, {"mb": mb, "fps": fps, "plain": [], "recorded": [], "lost": 0, "missed": 0, "messages": 0, "bytes": 0})
                frames = int(SECONDS * fps)
                for mode in ("plain", "recorded"):
                    k += 1
                    rec = base / "live.mcap" if mode == "recorded" else None
                    got = run(base, mb, fps, frames, rec)
                    row[mode] += got["latency_ms"]
                    row["missed"] += got["sent"] - got["received"]
                    if rec is not None:
                        row["lost"] += got["recorder"]["lost"]
                        row["messages"] += got["recorder"]["messages"]
                        row["bytes"] += got["recorder"]["bytes"]
                        rec.unlink(missing_ok=True)
                    log(f"[{k}/{total}] {key} {mode}: p50 {statistics.median(got['latency_ms']):.2f} ms, received {got['received']}/{got['sent']}")
        # Saturation: the disk first, then the recorder, same bytes, same directory.
        frame_bytes = int(2.7e6) // (1280 * 3) * 1280 * 3  # record_program.py's frame of 2.7 MB
        disk = dd(base, SATURATION_FRAMES * frame_bytes)
        log(f"disk (dd bs=4M conv=fsync): {disk / 1e6:.0f} MB/s")
        rec = base / "saturation.mcap"
        got = run(base, 2.7, 1000, SATURATION_FRAMES, rec, fast=True)
        fsync_file(rec)
        synced = time.monotonic_ns()
        size = rec.stat().st_size
        rate = size / ((synced - got["first_ns"]) / 1e9)
        rec.unlink(missing_ok=True)
        log(f"recorder, saturated: {rate / 1e6:.0f} MB/s ({size / 1e6:.0f} MB, {got['recorder']['line']})")
        dora = dora_side(base) if not ARGS.skip_dora else {"status": "not run: --skip-dora", "rows": {}}
    finally:
        if not ARGS.dir:
            shutil.rmtree(base, ignore_errors=True)
    summary = {}
    for key, row in live.items():
        a, b = statistics.median(row["plain"]), statistics.median(row["recorded"])
        summary[key] = {
            "plain_p50": a, "plain_p99": pct(row["plain"], 0.99), "recorded_p50": b, "recorded_p99": pct(row["recorded"], 0.99),
            "added_p50": (b - a) / a, "lost": row["lost"], "missed": row["missed"], "messages": row["messages"], "MB_per_s": row["mb"] * row["fps"],
        }
    sat = {"disk_Bps": disk, "recorder_Bps": rate, "ratio": disk / rate, "bytes": size, "lost": got["recorder"]["lost"], "line": got["recorder"]["line"]}
    write(summary, sat, dora)


def write(summary: dict, sat: dict, dora: dict) -> None:
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    stem = f"record-{date}{'-quick' if ARGS.quick else ''}"
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    (out / f"{stem}.json").write_text(json.dumps({"live": summary, "saturation": sat, "dora": dora, "loadavg": load, "passes": PASSES, "seconds": SECONDS}, indent=1))
    met = lambda ok: "MET" if ok else "NOT MET"  # noqa: E731
    lines = [
        f"# What recording costs ({stem})",
        "",
        "`bench/record/record_bench.py`: a camera federate and a sink (Python processes, one store), run without and",
        f"with `hprm launch --record` (no compression, policy `block:30s`), interleaved, {PASSES} pass(es) of {SECONDS} s per",
        "workload. Latency: the camera's stamp before `ctx.set` to the sink's reaction start. Lost: what the recorder",
        "reports it did not record; missed: frames the sink did not get. Load average at the end:",
        f"{load[0]:.1f} on {os.cpu_count()} cores.",
        "",
        f"| workload | MB/s | p50 plain (ms) | p50 recorded (ms) | added p50 | target < {LATENCY_TARGET:.0%} | p99 plain | p99 recorded | recorded | lost | missed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, r in summary.items():
        lines.append(
            f"| {key} | {r['MB_per_s']:.0f} | {r['plain_p50']:.2f} | {r['recorded_p50']:.2f} | {r['added_p50']:+.1%} | {met(r['added_p50'] < LATENCY_TARGET)} | "
            f"{r['plain_p99']:.2f} | {r['recorded_p99']:.2f} | {r['messages']} | {r['lost']} | {r['missed']} |"
        )
    silent = all(r["missed"] == 0 for r in summary.values())
    lines += [
        "",
        "## Saturation",
        "",
        "The camera in `--fast` mode (a frame as soon as the last is taken), no compression, the file fsynced once the program",
        "ends (counted); beside it `dd if=/dev/zero bs=4M conv=fsync` of as many bytes into the same directory.",
        "",
        f"| disk (dd) | recorder | disk / recorder | target <= {SATURATION_TARGET}x | bytes | lost |",
        "|---|---|---|---|---|---|",
        f"| {sat['disk_Bps'] / 1e6:.0f} MB/s | {sat['recorder_Bps'] / 1e6:.0f} MB/s | {sat['ratio']:.2f}x | {met(sat['ratio'] <= SATURATION_TARGET)} | {sat['bytes']} | {sat['lost']} |",
        "",
        f"Silent loss: {'none' if silent else 'FRAMES MISSED BY THE SINK'} (every loss the recorder had is in the `lost` column, from its own count).",
        "",
        "## Beside dora-rs's recorder",
        "",
    ]
    if dora["rows"]:
        lines += [
            f"The same camera and sink as a dora dataflow (`bench/record/record_dora.py`), run without and with the recorder: {dora['status']}.",
            "Without: `dora start`; with: `dora start --debug` and `dora record --proxy`, the camera starting once the recorder",
            "says it records. dora's timers are whole milliseconds (the period is in the table). Recorded: frames in the",
            "recording by the recorder's own closing count (less the sink's one `ready` message); loss reported: what the",
            "recorder said about loss.",
            "",
            "| workload | period (ms) | p50 plain (ms) | p50 recorded (ms) | added p50 | frames recorded / sent | loss reported | missed by the sink |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, r in dora["rows"].items():
            said = "; ".join(r["loss_said"]) or "none"
            lines.append(
                f"| {key} | {r['period_ms']} | {r['plain_p50']:.2f} | {r['recorded_p50']:.2f} | {r['added_p50']:+.1%} | {r['recorded']} / {r['frames']} | {said} | {r['missed']} |"
            )
        silent = [k for k, r in dora["rows"].items() if r["recorded"] < r["frames"] and not r["loss_said"]]
        lines += [
            "",
            f"dora-rs silent loss: {', '.join(silent) if silent else 'none'} (frames missing from its recording while it reported no loss).",
        ]
    else:
        lines.append(f"dora-rs: {dora['status']}.")
    lines += ["", "rosbag2 (no wheels here): its published sustained rate is about 110-120 MB/s, context only."]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1]})
        xs = range(len(summary))
        ax.bar([x - 0.2 for x in xs], [r["plain_p50"] for r in summary.values()], 0.4, label="without --record")
        ax.bar([x + 0.2 for x in xs], [r["recorded_p50"] for r in summary.values()], 0.4, label="with --record")
        ax.set_xticks(list(xs), list(summary), fontsize=8)
        ax.set_ylabel("send to reaction start, p50 (ms)")
        ax.set_title("live path, with and without recording")
        ax.legend()
        ax2.bar(["disk (dd)", "recorder"], [sat["disk_Bps"] / 1e6, sat["recorder_Bps"] / 1e6], color=["grey", "tab:orange"])
        ax2.set_ylabel("MB/s, fsync included")
        ax2.set_title("sustained write")
        fig.tight_layout()
        fig.savefig(out / f"{stem}.png", dpi=100)
    except ImportError:
        pass
    print(out / f"{stem}.md")


if __name__ == "__main__":
    main()
