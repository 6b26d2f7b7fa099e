"""Parallel RL data collection: HPRM (banks as threads and as processes)
beside Ray and the no-middleware floor, in one run (issue 27's workloads).

    python rl_bench.py [--quick] [--workers N] [--hprm-python PY] [--ray-python PY]

Per environment, every system collects with the same workers (N, one
environment each, seeds 0..N-1, the same linear policy, the same steps a
round), warm-up rounds excluded. The systems run interleaved, one after
another, pass after pass, so a busy moment of the host falls on all of
them alike; the load average before each run is recorded beside its
rate. Beside the floor (one process: one core's rate; the issue's limit
is cores x that), "floor x cores" runs one floor per core side by side,
each with its share of the seeds: the limit as measured under the load
the machine has at that moment. Writes
bench/results/rl-DATE[-quick].{json,md,png}.
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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from collect import ATARI, GYM  # noqa: E402  (numpy only: no hprm, no Ray)

p = argparse.ArgumentParser()
p.add_argument("--quick", action="store_true", help="fewer rounds, one pass")
p.add_argument("--workers", type=int, default=16)
p.add_argument("--hprm-python", default=str(ROOT / ".venv" / "bin" / "python"))
p.add_argument("--ray-python", default=str(ROOT / "bench" / ".venv-ray" / "bin" / "python"))
p.add_argument(
    "--ft-python",
    default=str(ROOT / "bench" / ".venv-ft" / "bin" / "python"),
    help="a free-threaded CPython (3.13t) with hprm and gymnasium: adds the threads placement with the GIL off (bench/run.sh makes one when scripts/free-threaded.sh has built 3.13t)",
)
p.add_argument("--out", default=str(ROOT / "bench" / "results"))
p.add_argument("--only", default="collect,dqn,marl", help="collect (Gym and Atari data collection), dqn (synchronized parallel DQN), marl (multi-agent inference), comma-separated")
ARGS = p.parse_args()

FT = "hprm-threads-3.13t"  # the threads placement on free-threaded CPython, the GIL off
HPRM = ("hprm-threads", FT, "hprm-processes")
CORES = os.cpu_count() or 1
FLOORS = "floor-x-cores"  # one floor per core side by side: the limit, measured
SYSTEMS = ["floor", FLOORS, "hprm-threads", FT, "hprm-processes", "ray"]
MARL_SYSTEMS = ["floor", "hprm-threads", FT, "hprm-processes", "ray"]
PASSES = 1 if ARGS.quick else 2


def has_module(python: str, module: str) -> bool:
    return Path(python).exists() and subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


def python_for(system: str) -> str:
    return ARGS.ft_python if system == FT else ARGS.hprm_python


def placement(system: str) -> str:
    return system.split("-")[1]


def available(systems: list[str], skipped: dict | None = None) -> list[str]:
    """The systems this machine can run: Ray only with its venv, 3.13t only with its own."""
    out = []
    for s in systems:
        if s == "ray" and not has_module(ARGS.ray_python, "ray"):
            if skipped is not None:
                skipped["ray"] = f"no Ray at {ARGS.ray_python}"
            continue
        if s == FT and not has_module(ARGS.ft_python, "hprm, gymnasium"):
            if skipped is not None:
                skipped[FT] = f"no free-threaded CPython with hprm and gymnasium at {ARGS.ft_python}"
            continue
        out.append(s)
    return out


def launch(system: str, stem: str, args: list[str]) -> dict:
    """Runs `system`'s program of a workload (`STEM_ray.py`, `STEM_floor.py`
    or `STEM_hprm.py --placement P`) with `args` and an output file: what it
    wrote, or {"error": ...}."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        if system == "ray":
            cmd = [ARGS.ray_python, str(HERE / f"{stem}_ray.py")]
        elif system == "floor":
            cmd = [ARGS.hprm_python, str(HERE / f"{stem}_floor.py")]
        else:
            cmd = [python_for(system), str(HERE / f"{stem}_hprm.py"), "--placement", placement(system)]
        r = subprocess.run([*cmd, *args, "--out", str(out)], capture_output=True, text=True, timeout=900, env=dict(os.environ, NO_COLOR="1", RUST_LOG="error"))
        if not out.exists():
            return {"error": f"exit {r.returncode}: {r.stderr[-600:]}"}
        return json.loads(out.read_text())


def floors_side_by_side(args: list[str]) -> dict:
    """One floor per core at once, the workers' seeds shared out among
    them: the rate the machine gives the collection without middleware
    now (the sum of theirs), under whatever else it runs."""
    n = min(CORES, ARGS.workers)
    shares = [ARGS.workers // n + (1 if i < ARGS.workers % n else 0) for i in range(n)]
    with tempfile.TemporaryDirectory() as d:
        procs, first = [], 0
        for i, w in enumerate(shares):
            out = Path(d) / f"r{i}.json"
            cmd = [ARGS.hprm_python, str(HERE / "rl_floor.py"), *args, "--workers", str(w), "--first", str(first), "--out", str(out)]
            procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), out))
            first += w
        # Every floor is waited for before any failure is reported: none is left running.
        ended = [(proc.communicate(timeout=900)[1], proc.returncode, out) for proc, out in procs]
        failed = [f"exit {code}: {err[-600:]}" for err, code, out in ended if not out.exists()]
        if failed:
            return {"error": failed[0]}
        got = [json.loads(out.read_text()) for _, _, out in ended]
    return {"transitions": sum(g["transitions"] for g in got), "rate": sum(g["rate"] for g in got), "floors": got}


def run(system: str, env: str) -> dict:
    atari = env.startswith("ALE/")
    steps = (50 if ARGS.quick else 100) if atari else 200
    # Long enough that a second of another session's build is a small part
    # of a run (15 Gym rounds lasted 0.3-0.6 s, and passes differed up to 2x;
    # rl-2026-11-28.md: at 10 Atari rounds Ray led HPRM on Pong, at 20 HPRM
    # led Ray, interleaved, minutes apart).
    rounds = (2 if atari else 5) if ARGS.quick else (20 if atari else 30)
    warmup = 1 if atari else 2
    args = ["--env", env, "--steps", str(steps), "--rounds", str(rounds), "--warmup", str(warmup)]
    if system == FLOORS:
        return floors_side_by_side(args)
    return launch(system, "rl", [*args, "--workers", str(ARGS.workers)])


DQN_SYSTEMS = ["hprm-threads", "hprm-processes", "ray"]


def run_dqn(system: str, batch: int) -> dict:
    updates = 200 if ARGS.quick else 600
    return launch(system, "dqn", ["--workers", str(ARGS.workers), "--steps", "16", "--batch", str(batch), "--updates", str(updates), "--per-round", "4"])


def sweep(name: str, systems: list[str], points: list, runner, label, figure) -> dict[str, dict[str, list[dict]]]:
    """Every system at every point, interleaved pass after pass, so a busy
    moment of the host falls on all of them alike: {point: {system: [run]}}."""
    runs: dict[str, dict[str, list[dict]]] = {str(p): {s: [] for s in systems} for p in points}
    total, k = PASSES * len(points) * len(systems), 0
    for _ in range(PASSES):
        for p in points:
            for s in systems:
                k += 1
                load = os.getloadavg()[0]
                got = runner(s, p)
                if "error" in got:
                    print(f"[{name} {k}/{total}] {label(p)} {s}: FAILED {got['error'][-200:]}", flush=True)
                    continue
                # The load average before the run: the machine may be shared.
                got["load"] = load
                runs[str(p)][s].append(got)
                print(f"[{name} {k}/{total}] {label(p)} {s}: {figure(got)}, digest {got['digest'][:12]}, load {load:.1f}", flush=True)
    return runs


def dqn() -> dict:
    batches = [500] if ARGS.quick else [250, 2000]
    return sweep("dqn", available(DQN_SYSTEMS), batches, run_dqn, lambda b: f"batch {b}", lambda g: f"{g['updates']} updates in {g['seconds']:.1f} s")


MARL_TARGET = 5.12  # the thesis's multi-agent inference speed-up over Ray


def run_marl(system: str, agents: int) -> dict:
    steps = 300 if ARGS.quick else 1000
    return launch(system, "marl", ["--agents", str(agents), "--steps", str(steps), "--warmup", "50"])


def marl() -> dict:
    """Multi-agent inference (TrafficJunction, one policy per agent)."""
    counts = [2, 10] if ARGS.quick else [1, 2, 4, 6, 8, 10]
    return sweep("marl", available(MARL_SYSTEMS), counts, run_marl, lambda n: f"{n} agents", lambda g: f"{g['rate']:,.0f} steps/s")


def main() -> None:
    only = set(ARGS.only.split(","))
    dqn_runs = dqn() if "dqn" in only else {}
    marl_runs = marl() if "marl" in only else {}
    if "collect" not in only:
        finish({}, {}, {}, dqn_runs, marl_runs)
        return
    envs = list(GYM)
    skipped = {}
    if has_module(ARGS.hprm_python, "ale_py") and has_module(ARGS.ray_python, "ale_py"):
        envs += ATARI
    else:
        skipped["atari"] = "ale-py is not installed in both venvs"
    systems = available(SYSTEMS, skipped)
    # ale-py has no free-threaded wheel (pip would build numpy from source).
    ft_atari = FT in systems and has_module(ARGS.ft_python, "ale_py")
    if FT in systems and envs != GYM and not ft_atari:
        skipped[f"{FT} on Atari"] = f"no ale-py at {ARGS.ft_python}"
    rates: dict[str, dict[str, list[float]]] = {e: {s: [] for s in systems} for e in envs}
    loads: dict[str, dict[str, list[float]]] = {e: {s: [] for s in systems} for e in envs}
    errors: dict[str, str] = {}
    total, k, t_start = PASSES * len(envs) * len(systems), 0, time.monotonic()
    for _ in range(PASSES):
        for env in envs:
            for s in systems:
                k += 1
                if s == FT and env in ATARI and not ft_atari:
                    continue
                t = time.monotonic()
                load = os.getloadavg()[0]
                got = run(s, env)
                if "error" in got:
                    errors[f"{env} {s}"] = got["error"]
                    print(f"[{k}/{total}] {env} {s}: FAILED {got['error'][-200:]}", flush=True)
                    continue
                rates[env][s].append(got["rate"])
                loads[env][s].append(load)
                print(f"[{k}/{total}] {env} {s}: {got['rate']:,.0f}/s, load {load:.1f} ({time.monotonic() - t:.0f} s; {time.monotonic() - t_start:.0f} s so far)", flush=True)
    finish(rates, errors, skipped, dqn_runs, marl_runs, loads)


def finish(rates: dict, errors: dict, skipped: dict, dqn_runs: dict, marl_runs: dict, loads: dict | None = None) -> None:
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    stem = f"rl-{date}{'-quick' if ARGS.quick else ''}"
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    # A run of one part (--only) keeps the other part of today's results.
    earlier = json.loads((out / f"{stem}.json").read_text()) if (out / f"{stem}.json").exists() else {}
    if not rates and earlier.get("rates"):
        rates, errors, skipped = earlier["rates"], {**earlier.get("errors", {}), **errors}, {**earlier.get("skipped", {}), **skipped}
        loads = earlier.get("loads")
    loads = loads or {}
    if not dqn_runs and earlier.get("dqn"):
        dqn_runs = earlier["dqn"]
    if not marl_runs and earlier.get("marl"):
        marl_runs = earlier["marl"]
    summary = {}
    for env in rates:
        med = {s: statistics.median(v) for s, v in rates[env].items() if v}
        hprm = max(((med[s], s) for s in HPRM if s in med), default=(None, None))
        row = {"median": med, "best_hprm": hprm[1], "cores": CORES}
        if hprm[0] is not None and "ray" in med:
            row["vs_ray"] = hprm[0] / med["ray"]
        if hprm[0] is not None and "floor" in med:
            row["limit"] = CORES * med["floor"]
            row["of_limit"] = hprm[0] / row["limit"]
        if hprm[0] is not None and FLOORS in med:
            row["of_measured_limit"] = hprm[0] / med[FLOORS]
        every = [x for v in loads.get(env, {}).values() for x in v]
        if every:
            row["load"] = [min(every), statistics.median(every), max(every)]
        summary[env] = row
    load = os.getloadavg()
    result = {"rates": rates, "loads": loads, "summary": summary, "dqn": dqn_runs, "marl": marl_runs, "errors": errors, "skipped": skipped, "workers": ARGS.workers, "loadavg": load}
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    write_md(out / f"{stem}.md", summary, errors, skipped, load, stem, dqn_runs, marl_runs)
    if summary:
        plot(out / f"{stem}.png", summary)
    if dqn_runs:
        plot_dqn(out / f"{stem}-dqn.png", dqn_runs)
    if marl_runs:
        plot_marl(out / f"{stem}-marl.png", marl_runs)
    print(f"wrote {out / stem}.{{json,md,png}}")


def sweep_load(by: dict) -> str:
    """min/median/max of the load averages before a sweep point's runs
    ("—" for runs of before they were recorded)."""
    every = [r["load"] for v in by.values() for r in v if "load" in r]
    return "/".join(f"{x:.1f}" for x in (min(every), statistics.median(every), max(every))) if every else "—"


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def marl_medians(by: dict) -> dict:
    return {s: statistics.median(r["rate"] for r in v) for s, v in by.items() if v}


def write_md(path: Path, summary: dict, errors: dict, skipped: dict, load, stem: str, dqn_runs: dict, marl_runs: dict) -> None:
    lines = [
        f"# Parallel reinforcement learning: HPRM beside Ray ({stem})",
        "",
        f"{ARGS.workers} workers, one environment each (seeds 0..{ARGS.workers - 1}), the same linear policy (Atari: the action space's seeded",
        f"random action), 200 steps a round (Atari {50 if ARGS.quick else 100}, 80x80 grayscale, frameskip 4), warm-up rounds excluded; transitions",
        "(Atari: observations) per second, median of the",
        f"passes ({PASSES}). Floor: the same collection in one process without middleware (one core); the machine's limit is",
        f"{CORES} cores x floor (the issue's definition); floor x {CORES}: {CORES} floors side by side, each with its share of the seeds,",
        "the limit as measured under the machine's load at that moment. HPRM: `hprm.rl.RolloutWorker` banks driven by a weights",
        "broadcast; Ray: one actor per worker, `ray.put` weights, `ray.wait` gathering (`bench/rl/`).",
        "",
        f"Load average (1 min) before the runs: the last column, min/median/max over every run of the row; {CORES} cores.",
        "The machine is shared with other sessions' builds: the systems ran interleaved so they saw the same load, and",
        f"the load average at the end was {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}.",
        "",
        "## Data collection",
        "",
        f"| environment | floor (1 core) | floor x {CORES} | HPRM threads | HPRM threads, 3.13t | HPRM processes | Ray | best HPRM / Ray (target >= 2x) | best HPRM / {CORES} x floor (target >= 90%) | best HPRM / floor x {CORES} | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for env, row in summary.items():
        m = row["median"]
        f = {s: f"{m[s]:,.0f}" if s in m else "—" for s in SYSTEMS}

        vr = f"{row['vs_ray']:.2f}x: {verdict(row['vs_ray'] >= 2)}" if "vs_ray" in row else "—"
        ol = f"{100 * row['of_limit']:.0f}%: {verdict(row['of_limit'] >= 0.9)}" if "of_limit" in row else "—"
        om = f"{100 * row['of_measured_limit']:.0f}%" if "of_measured_limit" in row else "—"
        ld = "/".join(f"{x:.1f}" for x in row["load"]) if "load" in row else "—"
        lines.append(f"| {env} | {f['floor']} | {f[FLOORS]} | {f['hprm-threads']} | {f[FT]} | {f['hprm-processes']} | {f['ray']} | {vr} | {ol} | {om} | {ld} |")
    if dqn_runs:
        lines += [
            "",
            "## Synchronized parallel DQN, Blackjack-v1",
            "",
            f"{ARGS.workers} rollout workers (16 steps a round each), replay, and a numpy MLP learner (64 hidden units, 4 updates a round);",
            "the same algorithm, seeds and sampling in both systems (`bench/rl/dqn_core.py`). Time from the first round to the last update,",
            "median of the passes; target: HPRM's best placement takes >= 31% less time than Ray.",
            "",
            "| batch | HPRM threads (s) | HPRM processes (s) | Ray (s) | time saved vs Ray | target | weights equal | load |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for b, by in dqn_runs.items():
            med = {s: statistics.median(r["seconds"] for r in v) for s, v in by.items() if v}
            digests = {r["digest"] for v in by.values() for r in v}
            h = min((med[s] for s in ("hprm-threads", "hprm-processes") if s in med), default=None)
            saved = f"{100 * (1 - h / med['ray']):.0f}%" if h is not None and "ray" in med else "—"
            ok = verdict(h is not None and "ray" in med and h <= 0.69 * med["ray"]) if "ray" in med else "—"

            def cell(s, med=med):
                return f"{med[s]:.1f}" if s in med else "—"

            lines.append(f"| {b} | {cell('hprm-threads')} | {cell('hprm-processes')} | {cell('ray')} | {saved} | {ok} | {'yes (one digest)' if len(digests) == 1 else f'no ({len(digests)} digests)'} | {sweep_load(by)} |")
        lines += ["", f"Learning curves: `{stem}-dqn.png` (mean episode return a round against updates; the systems' curves coincide)."]
    if marl_runs:
        lines += [
            "",
            "## Multi-agent inference, TrafficJunction",
            "",
            "ma-gym's TrafficJunction (ported to a seeded, dependency-free form: `bench/rl/traffic_junction.py`), one car per",
            "agent and one policy per agent (a seeded 2-layer MLP, numpy); each step every agent gets its observation, picks",
            "its action, and the environment steps with all of them. HPRM: the world a reactor, the agents a bank (threads: one",
            "federate of N reactors; processes: N federates), centralized; Ray: one actor per agent, `ray.get` of the N calls",
            "each step (`bench/rl/marl_*.py`). Environment steps per second, median of the passes; target: best HPRM >= 5.12x",
            "Ray (the thesis's ratio). Every system takes the same actions (one digest of the action sequence per agent count).",
            "",
            "| agents | floor (no middleware) | HPRM threads | HPRM threads, 3.13t | HPRM processes | Ray | best HPRM / Ray (target >= 5.12x) | same actions | load |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for n, by in marl_runs.items():
            med = marl_medians(by)
            digests = {r["digest"] for v in by.values() for r in v}
            h = max((med[s] for s in HPRM if s in med), default=None)
            ratio = f"{h / med['ray']:.2f}x: {verdict(h / med['ray'] >= MARL_TARGET)}" if h is not None and "ray" in med else "—"

            def mcell(s, med=med):
                return f"{med[s]:,.0f}" if s in med else "—"

            lines.append(f"| {n} | {mcell('floor')} | {mcell('hprm-threads')} | {mcell(FT)} | {mcell('hprm-processes')} | {mcell('ray')} | {ratio} | {'yes (one digest)' if len(digests) == 1 else f'no ({len(digests)} digests)'} | {sweep_load(by)} |")
        lines += ["", f"Plot: `{stem}-marl.png` (steps per second against agents)."]
    for k, v in skipped.items():
        lines += ["", f"Skipped {k}: {v}."]
    for k, v in errors.items():
        lines += ["", f"Failed {k}: `{v[-300:]}`"]
    path.write_text("\n".join(lines) + "\n")


def plot(path: Path, summary: dict) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    envs = list(summary)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(SYSTEMS)
    for i, s in enumerate(SYSTEMS):
        vals = [summary[e]["median"].get(s, 0) for e in envs]
        ax.bar([x + i * width for x in range(len(envs))], vals, width, label=s)
    ax.set_xticks([x + (len(SYSTEMS) - 1) * width / 2 for x in range(len(envs))], [e.replace("ALE/", "").replace("-v5", "").replace("-v1", "") for e in envs])
    ax.set_ylabel("transitions / s")
    ax.set_yscale("log")
    ax.set_title(f"RL data collection, {ARGS.workers} workers ({CORES}-core machine, shared)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_dqn(path: Path, runs: dict) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4), squeeze=False)
    for ax, (b, by) in zip(axes[0], runs.items()):
        for s, v in by.items():
            if not v:
                continue
            c = np.array(v[0]["curve"])
            # Blackjack's returns are -1, 0, 1 an episode: smooth over 10 rounds.
            k = min(10, len(c))
            smooth = np.convolve(c[:, 1], np.ones(k) / k, mode="valid")
            ax.plot(c[k - 1 :, 0], smooth, label=f"{s} ({statistics.median(r['seconds'] for r in v):.1f} s)", linestyle="--" if s == "ray" else "-")
        ax.set_xlabel("updates")
        ax.set_ylabel("mean episode return (10-round average)")
        ax.set_title(f"DQN on Blackjack-v1, batch {b}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_marl(path: Path, runs: dict) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    counts = [int(n) for n in runs]
    for s in MARL_SYSTEMS:
        pts = [(int(n), marl_medians(by)[s]) for n, by in runs.items() if s in marl_medians(by)]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=s, linestyle="--" if s == "floor" else "-")
    ax.set_xticks(counts)
    ax.set_xlabel("agents (one policy each)")
    ax.set_ylabel("environment steps / s")
    ax.set_yscale("log")
    ax.set_title("Multi-agent inference, TrafficJunction")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
