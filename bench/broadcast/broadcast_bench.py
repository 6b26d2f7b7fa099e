"""Broadcast and gather, every system side by side (BENCHMARKS.md workload 3,
the HPRM paper's Fig. 2.4).

For each size, each reply variant and each system, one program is started:
a source and 4 receivers, each its own process (broadcast_hprm.py,
broadcast_ros2.py, broadcast_dora.py; see broadcast_common.py for what they
share: payloads, checks, the definition of latency). Each writes its samples
to a JSON file; this harness summarizes them (median, p99 in µs) and adds
the memcpy floor: one copy of the payload between two pre-touched arrays,
in this process, in the same run.

Systems: HPRM centralized and decentralized (required: a failure fails the
run), ROS 2 rclpy (Fast DDS), ROS 2 + shared-memory pickle workaround,
dora-rs. A baseline that is not installed is skipped with the reason; one
that fails or times out at a size is reported so, and not run at the larger
sizes (it would only fail again, slower).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# The workloads' directories beside this one (bench/README.md: the layout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from pybench import BenchError, log, summarize  # noqa: E402

HERE = Path(__file__).resolve().parent
KB, MB = 1_000, 1_000_000

PLANS = {
    # --quick: the sizes of the targets, echo only; baselines up to 10 MB
    # (at 50 MB each takes 1-2 minutes, and no target compares them there).
    "quick": dict(sizes=[1 * KB, 1 * MB, 10 * MB, 50 * MB], variants=["echo"], rounds=10, warmup=2, memcpy_rounds=30, baseline_max=10 * MB),
    "full": dict(sizes=[1 * KB, 64 * KB, 1 * MB, 5 * MB, 10 * MB, 25 * MB, 50 * MB], variants=["echo", "fresh"], rounds=20, warmup=3, memcpy_rounds=100),
}
# A program gets this long to start (5 processes, discovery) plus this much
# per round before it is killed and reported as timed out.
START_LIMIT_S = 120
ROUND_LIMIT_S = 10


@dataclass
class System:
    key: str
    label: str
    argv: list[str]
    required: bool = False
    note: str = ""
    failed_at: int | None = field(default=None)


def systems() -> list[System]:
    py = sys.executable
    return [
        System("hprm_centralized", "HPRM centralized", [py, str(HERE / "broadcast_hprm.py"), "--coordination", "centralized"], True,
               "Python federates, prog.launch(fast=True); replies relayed through the RTI when small, by store reference when >= 64 KiB"),
        System("hprm_decentralized", "HPRM decentralized", [py, str(HERE / "broadcast_hprm.py"), "--coordination", "decentralized"], True,
               "Python federates, peer to peer"),
        System("ros2", "ROS 2 rclpy (Fast DDS)", [py, str(HERE / "broadcast_ros2.py"), "--transport", "plain"], False,
               "std_msgs/UInt8MultiArray, data as array.array('B')"),
        System("ros2_shm", "ROS 2 + SM (pickle)", [py, str(HERE / "broadcast_ros2.py"), "--transport", "shm"], False,
               "pickle into multiprocessing.shared_memory, segment name in a std_msgs/String"),
        System("dora", "dora-rs 1.1 (Python)", [py, str(HERE / "broadcast_dora.py")], False,
               "Python nodes, Arrow arrays, dora run"),
    ]


def unavailable() -> dict[str, str]:
    """Why each baseline cannot run here (absent: it can)."""
    why: dict[str, str] = {}
    probe = subprocess.run([sys.executable, "-c", "import rclpy, std_msgs.msg"], capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        reason = (f"rclpy cannot be imported ({last}); install ROS 2 with ros2-bridge/setup-ros2.sh VENV "
                  "and source VENV/ros2-env.sh (bench/run.sh does both)")
        why["ros2"] = why["ros2_shm"] = reason
    probe = subprocess.run([sys.executable, "-c", "import dora, pyarrow"], capture_output=True, text=True)
    dora_cli = Path(sys.executable).parent / "dora"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        why["dora"] = f"dora cannot be imported ({last}); pip install dora-rs-cli dora-rs pyarrow"
    elif not dora_cli.exists() and not any((Path(d) / "dora").exists() for d in os.environ.get("PATH", "").split(os.pathsep) if d):
        why["dora"] = "the dora CLI is not installed: pip install dora-rs-cli"
    return why


def run_program(argv: list[str], stem: Path, limit: float) -> dict:
    """Runs one benchmark program with ``--out STEM.json`` (its log in
    STEM.log) within ``limit`` seconds; the JSON it wrote plus "seconds", or
    {"error": ...} (with "timed_out" when it overran or reported a timeout)."""
    out, log_path = stem.with_suffix(".json"), stem.with_suffix(".log")
    started = time.monotonic()
    with open(log_path, "wb") as lf:
        # Its own process group: a program that overruns is stopped whole
        # (its receivers, daemons and nodes with it).
        proc = subprocess.Popen([*argv, "--out", str(out)], cwd=HERE, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(limit)
        except subprocess.TimeoutExpired:
            stop_group(proc)
            return {"error": f"timed out: no result within {limit:.0f} s", "timed_out": True}
    try:
        doc = json.loads(out.read_text())
    except (OSError, ValueError):
        tail = log_path.read_text(errors="replace")[-1500:]
        return {"error": f"exited with code {code} and wrote no result; its log ends:\n{tail}"}
    if doc.get("error"):
        return {"error": doc["error"], "timed_out": "timed out" in doc["error"]}
    doc["seconds"] = round(time.monotonic() - started, 1)
    return doc


def run_point(system: System, size: int, variant: str, rounds: int, warmup: int, workdir: Path) -> dict:
    """Runs one program; its summary, or {"error": ...}."""
    argv = [*system.argv, "--size", str(size), "--variant", variant, "--rounds", str(rounds), "--warmup", str(warmup)]
    doc = run_program(argv, workdir / f"{system.key}-{variant}-{size}", START_LIMIT_S + (rounds + warmup) * ROUND_LIMIT_S)
    if doc.get("error"):
        return doc
    point = summarize(doc["latency_ns"])
    for key, name in (("first_ns", "first_reply"), ("send_ns", "send")):
        if doc.get(key):
            point[name] = summarize(doc[key])
            point[name].pop("samples_us")
    # HPRM's receivers write their timelines beside the source's result:
    # when their reactions started and when their replies were set, from
    # the source's send stamp (all four pooled).
    started, replied = [], []
    for i in range(4):
        try:
            r = json.loads((workdir / f"{system.key}-{variant}-{size}.json.recv{i}").read_text())
        except (OSError, ValueError):
            continue
        replied += r.get("latency_ns", [])
        started += r.get("first_ns", [])
    for samples, name in ((started, "receivers_start"), (replied, "replies_set")):
        if samples:
            point[name] = summarize(samples)
            point[name].pop("samples_us")
    point["seconds"] = doc["seconds"]
    return point


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the program's process group, SIGKILL after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def memcpy_floor(size: int, rounds: int) -> dict:
    """One copy of `size` bytes between two pre-touched numpy arrays."""
    src = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        np.copyto(dst, src)
        samples.append(time.perf_counter_ns() - t0)
    return summarize(samples)


def size_text(n: int) -> str:
    return f"{n // MB} MB" if n >= MB else f"{n // KB} KB"


def measure(plan: dict, skip=(), only_systems=None, progress=log) -> dict:
    """The whole workload; raises BenchError when HPRM fails."""
    sysv = [s for s in systems() if only_systems is None or s.key in only_systems]
    why = unavailable()
    skipped = {}
    for s in sysv:
        if s.key in skip:
            skipped[s.key] = "skipped on request (--skip)"
        elif s.key in why:
            skipped[s.key] = why[s.key]
    for k, reason in skipped.items():
        progress(f"  broadcast: {k} skipped: {reason}")
    live = [s for s in sysv if s.key not in skipped]
    env_domain = os.environ.setdefault("ROS_DOMAIN_ID", str(50 + os.getpid() % 100))
    result = {
        "plan": plan,
        "receivers": 4,
        "ros_domain_id": env_domain,
        "systems": {s.key: {"label": s.label, "note": s.note, "points": []} for s in sysv},
        "skipped": skipped,
        "memcpy": [],
    }
    total = len(plan["sizes"]) * len(plan["variants"]) * len(live)
    done = 0
    with tempfile.TemporaryDirectory(prefix="bcast-") as tmp:
        for size in plan["sizes"]:
            m = memcpy_floor(size, plan["memcpy_rounds"])
            m.pop("samples_us")
            result["memcpy"].append({"size_bytes": size, **m})
            for variant in plan["variants"]:
                for s in live:
                    done += 1
                    tag = f"[{done}/{total}] broadcast {size_text(size)} {variant}: {s.label}"
                    if s.failed_at is not None:
                        p = {"error": f"not run: failed at {size_text(s.failed_at)}", "not_run": True}
                    elif not s.required and size > plan.get("baseline_max", size):
                        p = {"error": f"not run: baselines stop at {size_text(plan['baseline_max'])} in this plan", "not_run": True}
                    else:
                        p = run_point(s, size, variant, plan["rounds"], plan["warmup"], Path(tmp))
                    p.update(size_bytes=size, variant=variant)
                    result["systems"][s.key]["points"].append(p)
                    if "error" in p:
                        progress(f"  {tag}: {p['error'].splitlines()[0]}")
                        if s.required:
                            raise BenchError(f"{s.label} failed at {size_text(size)} {variant}: {p['error']}")
                        if not p.get("not_run"):
                            s.failed_at = size
                    else:
                        progress(f"  {tag}: p50 {p['median_us'] / 1e3:.2f} ms, p99 {p['p99_us'] / 1e3:.2f} ms ({p['seconds']} s)")
    return result


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Broadcast and gather (workload 3) alone; bench/run.sh runs it with the rest.")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--sizes", help="comma-separated bytes")
    ap.add_argument("--variants", help="echo,fresh")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--systems", help="comma-separated keys")
    ap.add_argument("--skip", default="", help="comma-separated keys")
    a = ap.parse_args(argv)
    plan = dict(PLANS["full" if a.full else "quick"])
    if a.sizes:
        plan["sizes"] = [int(x) for x in a.sizes.split(",")]
    if a.variants:
        plan["variants"] = a.variants.split(",")
    if a.rounds is not None:
        plan["rounds"] = a.rounds
    if a.warmup is not None:
        plan["warmup"] = a.warmup
    try:
        r = measure(plan, skip=a.skip.split(","), only_systems=a.systems.split(",") if a.systems else None)
    except BenchError as e:
        sys.exit(f"broadcast_bench: {e}")
    for s in r["systems"].values():
        for p in s["points"]:
            p.pop("samples_us", None)
    json.dump(r, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
