"""Workload 5 of BENCHMARKS.md: the autonomous-driving pipeline (the HPRM
paper's Figs. 2.5-2.6), the same four stages on every system:

    simulator -> {BEV -> Roach PPO agent, RGB -> YOLOv5 detector} -> fusion -> simulator

HPRM centralized and decentralized (examples/python/driving/driving.py),
ROS 2 + shared memory and ROS 2 (ros2_pipeline.py), and dora-rs
(dora_dataflow.yml, dora_pipeline.py). Every system runs the same model code
(examples/python/driving/stages.py), the same frames and the same
onnxruntime thread settings: only the middleware differs. After the
warm-up steps, each measured step's loop time (control to control at the
simulator) gives one FPS sample.

    python bench/pipeline/run.py --quick|--full --out DIR [--only SYSTEMS] [--carla HOST:PORT]

Writes DIR/pipeline-DATE.json, .md (medians, ratios to HPRM, targets) and
.png (box plot of FPS per system); DATE-quick for --quick, and
-detector-wW after it for a --detector-width other than the default. A baseline that is not installed is
skipped with the reason (and how to install it) in the report. ROS 2 comes
from ros2-bridge/setup-ros2.sh: this script looks for VENV/ros2-env.sh in
$HPRM_ROS2_VENV, this Python's venv, then .venv-ros2 at the repository
root; the ROS 2 venv also needs numpy and onnxruntime
(HPRM_ROS2_EXTRA="onnx onnxruntime"). dora-rs: pip install dora-rs-cli
dora-rs pyarrow (the `dora` command on PATH or in this Python's venv).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DRIVING = ROOT / "examples" / "python" / "driving"
sys.path.insert(0, str(DRIVING))

SYSTEMS = ("hprm-centralized", "hprm-decentralized", "ros2-sm", "ros2", "dora")
LABELS = {
    "hprm-centralized": "HPRM centralized",
    "hprm-decentralized": "HPRM decentralized",
    "ros2-sm": "ROS 2 + SM",
    "ros2": "ROS 2",
    "dora": "dora-rs",
}
# Per system: `rounds` runs of `warmup` + `steps` steps. The systems take
# turns round by round, so that the load of a shared machine drifting over
# the minutes of a run falls on all of them alike; the full plan's 4 rounds
# add up to BENCHMARKS.md's 100 warm-up and 400 measured steps.
PLANS = {
    "quick": dict(rounds=1, warmup=5, steps=20),
    "full": dict(rounds=4, warmup=25, steps=100),
    "smoke": dict(rounds=1, warmup=1, steps=2),  # the test suite's: does every part still run
}
# (HPRM variant, baseline, the ratio HPRM FPS / baseline FPS must reach; the paper's)
TARGETS = (("ros2-sm", 1.3, 1.41), ("ros2", 3.0, 4.79))
HOPS = {"bev": "BEV to agent", "rgb": "camera frame to detector", "to_fusion": "later output to fusion", "control": "control to simulator"}
START_S = 120  # seconds a system may take to start (model loading, ROS 2 discovery) on a busy machine
STEP_S = 5  # and per step, as a bound on a hung run


current = [""]  # the system running now (for the message when terminated)


class Skip(Exception):
    """A baseline that is not installed here: the reason and how to get it."""


def log(msg: str) -> None:
    print(msg, flush=True)


def limit(plan: dict) -> float:
    return START_S + STEP_S * (plan["warmup"] + plan["steps"])


def stage_args(plan: dict, seed: int, report: Path, carla: str | None) -> list[str]:
    a = ["--steps", str(plan["steps"]), "--warmup", str(plan["warmup"]), "--seed", str(seed), "--report", str(report)]
    return a + (["--carla", carla] if carla else [])


def read_report(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RuntimeError(f"{what} wrote no report ({e}); see its output above") from e


# ------------------------------------------------------------------ systems


def run_hprm(coordination: str, plan: dict, seed: int, tmp: Path, carla: str | None) -> dict:
    try:
        import hprm  # noqa: F401
    except ImportError as e:
        raise RuntimeError(f"the hprm SDK is not importable ({e}); install it with hprm-py/install.sh VENV and run this with VENV/bin/python") from e
    report = tmp / f"hprm-{coordination}.json"
    cmd = [sys.executable, str(DRIVING / "driving.py"), "--coordination", coordination, *stage_args(plan, seed, report, carla)]
    p = subprocess.Popen(cmd)
    try:
        rc = p.wait(timeout=limit(plan))
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"did not finish within {limit(plan):.0f} s") from e
    finally:
        stop([p])  # on a timeout or Ctrl-C: the launcher stops its store, RTI and federates
    if rc != 0:
        raise RuntimeError(f"driving.py exited with status {rc}")
    return read_report(report, "driving.py")


def ros2_env_script() -> Path:
    candidates = [os.environ.get("HPRM_ROS2_VENV"), sys.prefix, str(ROOT / ".venv-ros2")]
    for c in filter(None, candidates):
        p = Path(c) / "ros2-env.sh"
        if p.exists():
            return p
    raise Skip("ROS 2 is not installed: run HPRM_ROS2_EXTRA='onnx onnxruntime' ros2-bridge/setup-ros2.sh VENV and point HPRM_ROS2_VENV at VENV")


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGINT (a clean shutdown: the HPRM launcher stops its daemons and
    federates, rclpy and `dora run` stop theirs), then SIGKILL for what is left."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 15
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_ros2(variant: str, plan: dict, seed: int, tmp: Path, carla: str | None) -> dict:
    env_script = ros2_env_script()
    check = subprocess.run(["bash", "-c", f'. "{env_script}" && python -c "import rclpy, onnxruntime, numpy"'], capture_output=True, text=True)
    if check.returncode != 0:
        raise Skip(f"the ROS 2 venv of {env_script} lacks rclpy, onnxruntime or numpy ({check.stderr.strip().splitlines()[-1:]}); "
                   "rerun HPRM_ROS2_EXTRA='onnx onnxruntime' ros2-bridge/setup-ros2.sh VENV")
    report = tmp / f"{variant}.json"
    # A domain of its own, so a run next to another ROS 2 program does not cross-talk.
    prefix = f"hprm-pipeline-{os.getpid()}-{variant}-"
    env = dict(os.environ, PIPELINE_SHM_PREFIX=prefix)
    env.setdefault("ROS_DOMAIN_ID", str(40 + os.getpid() % 50))
    procs, logs = [], []
    try:
        for role in ("fusion", "agent", "detector", "simulator"):
            args = [role, "--variant", variant, *stage_args(plan, seed, report, carla)]
            cmd = f'. "{env_script}" && exec python "{HERE / "ros2_pipeline.py"}" ' + " ".join(f"'{a}'" for a in args)
            out = None if role == "simulator" else open(tmp / f"{variant}-{role}.log", "w")
            logs.append(out)
            procs.append(subprocess.Popen(["bash", "-c", cmd], env=env, stdout=out, stderr=subprocess.STDOUT if out else None))
        sim = procs[-1]
        try:
            rc = sim.wait(timeout=limit(plan))
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"did not finish within {limit(plan):.0f} s; node logs in {tmp}") from e
        for p, role in zip(procs[:-1], ("fusion", "agent", "detector")):
            if p.poll() not in (None, 0):
                log((tmp / f"{variant}-{role}.log").read_text()[-2000:])
                raise RuntimeError(f"the {role} node failed (status {p.returncode})")
        if rc != 0:
            raise RuntimeError(f"the simulator node exited with status {rc}")
    finally:
        stop(procs)
        for f in logs:
            if f:
                f.close()
        # What a crashed or killed simulator did not unlink.
        for seg in Path("/dev/shm").glob(f"{prefix}*"):
            seg.unlink(missing_ok=True)
    return read_report(report, f"{variant} simulator")


def dora_command() -> str:
    sys.path.insert(0, str(ROOT / "bench" / "common"))
    from dora_baseline import dora_command as installed

    dora = installed()
    if dora:
        return dora
    raise Skip("dora-rs is not installed: pip install dora-rs-cli dora-rs pyarrow (into this Python's venv)")


def run_dora(plan: dict, seed: int, tmp: Path, carla: str | None) -> dict:
    dora = dora_command()
    report = tmp / "dora.json"
    dataflow = tmp / "dataflow.yml"
    import shlex  # noqa: PLC0415

    text = (HERE / "dora_dataflow.yml").read_text()
    for k, v in {"PYTHON": sys.executable, "NODES": str(HERE / "dora_pipeline.py"), "ARGS": shlex.join(stage_args(plan, seed, report, carla))}.items():
        text = text.replace(f"${{{k}}}", v)
    dataflow.write_text(text)
    # dora logs every large send at WARN level: keep its output in a file
    # and echo only the simulator's progress lines.
    out = tmp / "dora.log"
    with open(out, "w") as f:
        p = subprocess.Popen([dora, "run", str(dataflow)], cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        expired = threading.Event()
        timer = threading.Timer(limit(plan), lambda: (expired.set(), p.kill()))
        timer.start()
        try:
            for line in p.stdout:
                f.write(line)
                if ": step " in line or "error" in line.lower():
                    log(line.rstrip())
            rc = p.wait()
        finally:
            timer.cancel()
            stop([p])
    if expired.is_set():
        raise RuntimeError(f"did not finish within {limit(plan):.0f} s; its log: {out.read_text()[-1500:]}")
    if rc != 0:
        raise RuntimeError(f"dora run exited with status {rc}: {out.read_text()[-1500:]}")
    return read_report(report, "the dora simulator node")


def run_system(name: str, plan: dict, seed: int, tmp: Path, carla: str | None) -> dict:
    if name.startswith("hprm-"):
        return run_hprm(name.removeprefix("hprm-"), plan, seed, tmp, carla)
    if name.startswith("ros2"):
        return run_ros2(name, plan, seed, tmp, carla)
    return run_dora(plan, seed, tmp, carla)


# ------------------------------------------------------------------ results


def merge(runs: list[dict]) -> dict:
    """One system's rounds as one record: measured steps pooled, the
    controls of each round kept (they repeat: one seed)."""
    loops = [ms for r in runs for ms in r["loop_ms"]]
    return {
        "system": runs[0]["system"], "seed": runs[0]["seed"], "rounds": len(runs),
        "warmup": sum(r["warmup"] for r in runs), "steps": len(loops),
        "loop_ms": loops, "fps": [f for r in runs for f in r["fps"]],
        "throughput_fps": 1e3 * len(loops) / sum(loops),
        "stage_ms": [s for r in runs for s in r["stage_ms"]],
        "hop_ms": [h for r in runs for h in r.get("hop_ms", [])],
        "controls": [r["controls"] for r in runs],
    }


def summary(r: dict) -> dict:
    fps = sorted(r["fps"])
    stages = r["stage_ms"]
    # The step's compute on the critical path: render, the slower of agent
    # and detector (they run in parallel), fusion; the rest of the loop is
    # the middleware's (transport, serialization, scheduling, waking up).
    compute = [s["render"] + max(s["agent"], s["detector"]) + s["fusion"] for s in stages]
    med = statistics.median
    return {
        "steps": r["steps"],
        "median_fps": med(fps),
        "p10_fps": fps[len(fps) // 10],
        "p90_fps": fps[(len(fps) * 9) // 10],
        "throughput_fps": r["throughput_fps"],
        "median_loop_ms": med(r["loop_ms"]),
        "median_compute_ms": med(compute),
        "median_middleware_ms": med([l - c for l, c in zip(r["loop_ms"], compute)]),
        "median_stage_ms": {k: med([s[k] for s in stages]) for k in ("render", "agent", "detector", "fusion")},
        "median_hop_ms": {k: med([h[k] for h in r["hop_ms"]]) for k in HOPS} if r.get("hop_ms") else {},
    }


def targets(results: dict) -> list[dict]:
    """HPRM's ratio to each baseline against BENCHMARKS.md's targets, and
    the ceiling the compute alone puts on that ratio."""
    out = []
    for h in ("hprm-centralized", "hprm-decentralized"):
        if h not in results:
            continue
        hs = results[h]["summary"]
        for base, want, paper in TARGETS:
            if base not in results:
                continue
            bs = results[base]["summary"]
            ratio = hs["median_fps"] / bs["median_fps"]
            # Even with no middleware time at all, HPRM's loop is at least its compute.
            ceiling = bs["median_loop_ms"] / hs["median_compute_ms"]
            out.append({"hprm": h, "baseline": base, "ratio": ratio, "target": want, "paper": paper, "met": ratio >= want, "ceiling": ceiling,
                        "throughput_ratio": hs["throughput_fps"] / bs["throughput_fps"]})
    return out


def plan_text(plan: dict) -> str:
    one = f"{plan['warmup']} warm-up + {plan['steps']} measured steps"
    return one if plan["rounds"] == 1 else f"{plan['rounds']} rounds (systems in turns) of {one}"


def markdown(rep: dict) -> str:
    res, ref = rep["results"], rep["reference"]
    lines = [
        f"# Driving pipeline (workload 5), {rep['date']}",
        "",
        f"{plan_text(rep['plan'])} per system, seed {rep['seed']}, "
        f"simulator: {rep['simulator']}. Detector: YOLOv5 width {rep['detector_width']} at 640x640, agent: Roach PPO "
        f"on 192x192x15; onnxruntime CPU, {rep['threads']} intra-op thread per stage, random weights. Machine: {rep['machine']}.",
        "",
        f"FPS = 1 / loop time of each measured step (control to control at the simulator). FPS ratio = {LABELS[ref]}'s median FPS / the system's. "
        "Compute = render + max(agent, detector) + fusion of the step (each stage times itself); middleware = loop - compute, "
        f"per step (median); middleware ratio = the system's middleware ms / {LABELS[ref]}'s.",
        "",
        "| system | median FPS | p10-p90 FPS | throughput FPS | loop ms | compute ms | middleware ms | FPS ratio | middleware ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    h = res[ref]["summary"]
    for name in SYSTEMS:
        if name in res:
            s = res[name]["summary"]
            lines.append(f"| {LABELS[name]} | {s['median_fps']:.2f} | {s['p10_fps']:.2f}-{s['p90_fps']:.2f} | {s['throughput_fps']:.2f} | "
                         f"{s['median_loop_ms']:.1f} | {s['median_compute_ms']:.1f} | {s['median_middleware_ms']:.1f} | "
                         f"{h['median_fps'] / s['median_fps']:.2f}x | {s['median_middleware_ms'] / h['median_middleware_ms']:.2f}x |")
    for name, why in rep["skipped"].items():
        lines.append(f"| {LABELS[name]} | skipped: {why} | | | | | | | |")
    for name, why in rep["failed"].items():
        lines.append(f"| {LABELS[name]} | FAILED: {why} | | | | | | | |")
    lines += ["", "Median stage times (ms): " + "; ".join(
        f"{LABELS[n]}: " + ", ".join(f"{k} {v:.1f}" for k, v in res[n]["summary"]["median_stage_ms"].items()) for n in SYSTEMS if n in res), ""]
    hopped = [n for n in SYSTEMS if n in res and res[n]["summary"].get("median_hop_ms")]
    if hopped:
        lines += ["Where the middleware time goes: median ms per hop, from the sender's end of work (frames rendered; "
                  "output computed) to the receiver holding it (its reaction or callback started and the value decoded; wall clock, "
                  "one host).", "",
                  "| system | " + " | ".join(HOPS.values()) + " |", "|---" * (len(HOPS) + 1) + "|"]
        for n in hopped:
            hop = res[n]["summary"]["median_hop_ms"]
            lines.append(f"| {LABELS[n]} | " + " | ".join(f"{hop[k]:.2f}" for k in HOPS) + " |")
        lines.append("")
    if rep["targets"]:
        lines += ["## Targets", "",
                  "Judged on median FPS. Throughput ratio: steps per second over the whole run (stalls included) / the baseline's.", "",
                  "| HPRM | vs | median FPS ratio | target | paper | met | ceiling (baseline loop / HPRM compute) | throughput ratio |",
                  "|---|---|---|---|---|---|---|---|"]
        for t in rep["targets"]:
            lines.append(f"| {LABELS[t['hprm']]} | {LABELS[t['baseline']]} | {t['ratio']:.3f}x | {t['target']}x | {t['paper']}x | "
                         f"{'yes' if t['met'] else 'NO'} | {t['ceiling']:.2f}x | {t['throughput_ratio']:.2f}x |")
        missed = [t for t in rep["targets"] if not t["met"]]
        if missed:
            lines += ["", "### Why a target is missed", "", rep["why_missed"]]
    return "\n".join(lines) + "\n"


def why_missed(rep: dict) -> str:
    """The profile behind a missed target, from the stage times of the run."""
    res = rep["results"]
    h = res.get(rep["reference"], {}).get("summary")
    if not h:
        return ""
    st = h["median_stage_ms"]
    text = (
        f"The step is bound by CPU inference: HPRM's median loop is {h['median_loop_ms']:.1f} ms, of which "
        f"{h['median_compute_ms']:.1f} ms is compute on the critical path (detector {st['detector']:.1f} ms, in parallel with the agent's "
        f"{st['agent']:.1f} ms; render {st['render']:.1f} ms; fusion {st['fusion']:.1f} ms) and {h['median_middleware_ms']:.1f} ms is "
        "middleware. No ratio can exceed the 'ceiling' column (the baseline's loop over HPRM's compute alone), however little HPRM's "
        "transport costs. "
    )
    slower = [f"{LABELS[n]} {res[n]['summary']['median_stage_ms']['detector']:.0f} ms" for n in ("ros2", "ros2-sm", "dora")
              if n in res and res[n]["summary"]["median_stage_ms"]["detector"] > 1.1 * st["detector"]]
    if slower:
        text += (f"The same detector took longer beside some baselines ({', '.join(slower)}, vs {st['detector']:.0f} ms beside HPRM): "
                 "on 2 cores a middleware's own CPU work (copies, serialization, its daemons) competes with the inference, so part of "
                 "its cost shows up as compute; on a shared machine part of such a gap is also other load. ")
    hops = h.get("median_hop_ms")
    if hops:
        worst = max(HOPS, key=lambda k: hops[k])
        text += f"HPRM's largest middleware hop is the {HOPS[worst]} ({hops[worst]:.1f} ms"
        text += "".join(f"; {LABELS[n]} {res[n]['summary']['median_hop_ms'][worst]:.1f} ms" for n in ("ros2", "ros2-sm", "dora")
                        if n in res and res[n]["summary"].get("median_hop_ms"))
        text += ", see the hop table). "
    text += (
        "The paper ran the networks on a GPU, where inference takes a few ms per frame and moving the 2.7 MB camera frame and the "
        "0.55 MB BEV dominates a step. What would close it: inference on an accelerator, so that compute per step falls well below "
        "a baseline's middleware time per step"
    )
    if rep["detector_width"] > 0.0625:
        return text + " (run.py --detector-width 0.0625, a much lighter detector, approaches that regime on this CPU)."
    return text + "; and for HPRM itself, fewer hops per step (see the middleware column against dora-rs)."


def plot(rep: dict, path: Path) -> None:
    sys.path.insert(0, str(ROOT / "bench" / "common"))
    from plotting import plt, save  # noqa: PLC0415

    names = [n for n in SYSTEMS if n in rep["results"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.boxplot([rep["results"][n]["fps"] for n in names], showfliers=True)
    ax.set_xticks(range(1, len(names) + 1), [LABELS[n] for n in names], rotation=15)
    ax.set_ylabel("frames per second (per step)")
    ax.set_title(f"Driving pipeline: FPS per step, {plan_text(rep['plan'])}", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--quick", action="store_true", help=f"{PLANS['quick']['warmup']} warm-up + {PLANS['quick']['steps']} measured steps per system")
    g.add_argument("--full", action="store_true", help="4 rounds of 25 warm-up + 100 measured steps per system, in turns (BENCHMARKS.md's 100 + 400)")
    p.add_argument("--out", type=Path, required=True, help="directory for pipeline-DATE.{json,md,png}")
    p.add_argument("--only", help=f"comma-separated systems of: {', '.join(SYSTEMS)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--carla", metavar="HOST:PORT", help="drive a CARLA server instead of the synthetic simulator")
    p.add_argument("--detector-width", type=float, help="YOLOv5 width multiple for every system (default 0.25; 0.5 = YOLOv5s; "
                   "smaller ones make the middleware's share of a step larger)")
    args = p.parse_args(argv)
    if args.carla:
        from world import carla_problem  # noqa: PLC0415

        if carla_problem(args.carla):
            p.error(carla_problem(args.carla))
    if args.detector_width is not None:
        if not 0 < args.detector_width <= 1:
            p.error("--detector-width must be in (0, 1], e.g. 0.25 (YOLOv5n) or 0.5 (YOLOv5s)")
        os.environ["HPRM_DRIVING_DETECTOR_WIDTH"] = str(args.detector_width)  # every system's processes inherit it
    systems = SYSTEMS
    if args.only:
        systems = tuple(s.strip() for s in args.only.split(",") if s.strip())
        bad = [s for s in systems if s not in SYSTEMS]
        if bad:
            p.error(f"--only: unknown system(s) {', '.join(bad)}; choose from {', '.join(SYSTEMS)}")
    plan = PLANS["full" if args.full else "quick"]
    args.out.mkdir(parents=True, exist_ok=True)
    # Killed (SIGTERM): unwind like Ctrl-C, so that each system's processes are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"run.py: terminated; stopped the {LABELS.get(current[0], 'running')} run"))
    rep = run(systems, plan, args.seed, args.carla)
    # DATE-quick for --quick (as bench/run.sh names its reports), so that a
    # quick run never overwrites the day's full results.
    stem = args.out / f"pipeline-{rep['date']}{'' if args.full else '-quick'}"
    if args.detector_width is not None:
        stem = stem.with_name(f"{stem.name}-detector-w{args.detector_width:g}")
    write(rep, stem)
    log(Path(f"{stem}.md").read_text())
    return 1 if rep["failed"] else 0


def run(systems, plan: dict, seed: int = 0, carla: str | None = None) -> dict:
    """Runs each system in turn; returns the report (results, skipped, failed)."""
    import models  # noqa: PLC0415
    import stages  # noqa: PLC0415

    try:
        paths = models.ensure_models(seed, stages.DETECTOR_WIDTH)  # once, before any system starts
    except RuntimeError as e:
        sys.exit(f"error: {e}")
    rep = {
        "benchmark": "pipeline", "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(), "plan": plan, "seed": seed,
        "simulator": f"CARLA at {carla}" if carla else "synthetic (CARLA's frame sizes)",
        "detector_width": stages.DETECTOR_WIDTH, "threads": stages.THREADS, "models": {k: str(v) for k, v in paths.items()},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "results": {}, "skipped": {}, "failed": {},
    }
    rounds: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        for k in range(plan["rounds"]):
            for i, name in enumerate(systems, 1):
                if name in rep["skipped"] or name in rep["failed"]:
                    continue
                log(f"==> round {k + 1}/{plan['rounds']}, [{i}/{len(systems)}] {LABELS[name]}: {plan['warmup']} warm-up + {plan['steps']} measured steps")
                t = time.monotonic()
                current[0] = name
                try:
                    r = run_system(name, plan, seed, Path(tmp), carla)
                except Skip as e:
                    rep["skipped"][name] = str(e)
                    log(f"==> skipping {LABELS[name]}: {e}")
                    continue
                except RuntimeError as e:
                    rep["failed"][name] = str(e)
                    rounds.pop(name, None)
                    log(f"==> {LABELS[name]} FAILED: {e}")
                    continue
                rounds.setdefault(name, []).append(r)
                log(f"==> {LABELS[name]}: median {statistics.median(r['fps']):.2f} FPS ({time.monotonic() - t:.0f} s)")
    for name in systems:
        if name in rounds:
            r = merge(rounds[name])
            r["summary"] = summary(r)
            rep["results"][name] = r
    rep["reference"] = next((n for n in ("hprm-centralized", "hprm-decentralized") if n in rep["results"]), None)
    rep["targets"] = targets(rep["results"])
    rep["why_missed"] = why_missed(rep) if any(not t["met"] for t in rep["targets"]) else ""
    return rep


def write(rep: dict, stem: Path) -> None:
    Path(f"{stem}.json").write_text(json.dumps(rep))
    if rep["reference"]:
        Path(f"{stem}.md").write_text(markdown(rep))
        if importlib.util.find_spec("matplotlib") is None:
            log(f"==> no {stem}.png: the box plot needs matplotlib (pip install matplotlib)")
        else:
            plot(rep, Path(f"{stem}.png"))
    else:
        Path(f"{stem}.md").write_text(f"# Driving pipeline, {rep['date']}\n\nNo HPRM result: {rep['failed'] or rep['skipped']}\n")


if __name__ == "__main__":
    sys.exit(main())
