"""Small messages, every system side by side (BENCHMARKS.md workload 4):
one-way and round-trip latency of a ping-pong, 8 B - 64 KiB.

Each system runs as one program over all sizes (small_hprm.py for HPRM
Python federates, centralized and decentralized; small_peers.py for the
Unix-socket floor, ROS 2 rclpy, dora-rs and iceoryx2), rotating the order
of the systems per pass so that background load falls on all of them.
Rust federates are measured by node-bench (its small-message and sustained
rate workloads, with TCP/Unix socket floors), which bench/run.sh runs and
whose JSON the report reads.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

# The workloads' directories beside this one (bench/README.md: the layout).
BENCH = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCH / "broadcast"), str(BENCH / "python")]

from broadcast_bench import System, run_program  # noqa: E402
from pybench import BenchError, log, summarize  # noqa: E402

HERE = Path(__file__).resolve().parent

PLANS = {
    # 64 KB (64,000 bytes: in the message) and 64 KiB (65,536: at the
    # out-of-band threshold, through the store) both: the issue says 64 KB.
    "quick": dict(sizes=[8, 512, 4096, 64_000, 65_536], rounds=200, warmup=20, passes=1, rate_messages=10_000, rate_warmup=1_000),
    "full": dict(sizes=[8, 64, 512, 4096, 32_768, 64_000, 65_536], rounds=1000, warmup=100, passes=3, rate_messages=100_000, rate_warmup=10_000),
}
ROUND_LIMIT_S = 0.05  # per ping, on top of the start-up allowance


def systems() -> list[System]:
    py = sys.executable
    hprm = str(HERE / "small_hprm.py")
    peers = str(HERE / "small_peers.py")
    return [
        System("hprm_py_decentralized", "HPRM Python decentralized", [py, hprm, "--coordination", "decentralized"], True),
        System("hprm_py_centralized", "HPRM Python centralized", [py, hprm, "--coordination", "centralized"], True),
        System("socket", "Unix socket floor (Python)", [py, peers, "--system", "socket"], False),
        System("iceoryx2", "iceoryx2 (Python, polling)", [py, peers, "--system", "iceoryx2"], False),
        System("rclpy", "ROS 2 rclpy (Fast DDS)", [py, peers, "--system", "rclpy"], False),
        System("dora", "dora-rs 1.1 (Python)", [py, peers, "--system", "dora"], False),
    ]


def unavailable() -> dict[str, str]:
    from broadcast_bench import unavailable as bw

    why = bw()
    out = {}
    if "ros2" in why:
        out["rclpy"] = why["ros2"]
    if "dora" in why:
        out["dora"] = why["dora"]
    import subprocess

    probe = subprocess.run([sys.executable, "-c", "import iceoryx2"], capture_output=True, text=True)
    if probe.returncode != 0:
        out["iceoryx2"] = f"iceoryx2 cannot be imported ({(probe.stderr.strip().splitlines() or ['?'])[-1]}); pip install iceoryx2"
    return out


def measure(plan: dict, skip=(), progress=log) -> dict:
    sysv = systems()
    why = unavailable()
    skipped = {s.key: ("skipped on request (--skip)" if s.key in skip else why[s.key]) for s in sysv if s.key in skip or s.key in why}
    for k, reason in skipped.items():
        progress(f"  small: {k} skipped: {reason}")
    live = [s for s in sysv if s.key not in skipped]
    pooled: dict[str, dict[int, dict[str, list[int]]]] = {s.key: {} for s in live}
    errors: dict[str, str] = {}
    sizes = ",".join(str(s) for s in plan["sizes"])
    n = len(plan["sizes"]) * (plan["rounds"] + plan["warmup"])
    with tempfile.TemporaryDirectory(prefix="small-") as tmp:
        for p in range(plan["passes"]):
            order = live[p % len(live):] + live[: p % len(live)]
            for s in order:
                if s.key in errors:
                    continue
                argv = [*s.argv, "--sizes", sizes, "--rounds", str(plan["rounds"]), "--warmup", str(plan["warmup"])]
                doc = run_program(argv, Path(tmp) / f"{s.key}-{p}", 120 + n * ROUND_LIMIT_S)
                if doc.get("error"):
                    progress(f"  small pass {p + 1}/{plan['passes']}: {s.label}: {doc['error'].splitlines()[0]}")
                    if s.required:
                        raise BenchError(f"{s.label} failed: {doc['error']}")
                    errors[s.key] = doc["error"]
                    continue
                for pt in doc["points"]:
                    acc = pooled[s.key].setdefault(pt["size"], {"one_way_ns": [], "rtt_ns": []})
                    acc["one_way_ns"] += pt["one_way_ns"]
                    acc["rtt_ns"] += pt["rtt_ns"]
                line = ", ".join(f"{sz} B {summarize(v['one_way_ns'][-plan['rounds']:])['median_us']:.0f} µs" for sz, v in pooled[s.key].items())
                progress(f"  small pass {p + 1}/{plan['passes']}: {s.label}: one-way p50 {line} ({doc['seconds']} s)")
        out_rate = measure_rate(plan, live, Path(tmp), errors, progress)
    out = {"plan": plan, "systems": {}, "skipped": skipped, "rate": out_rate}
    for s in sysv:
        entry = {"label": s.label, "points": []}
        if s.key in errors:
            entry["error"] = errors[s.key]
        for size, v in sorted(pooled.get(s.key, {}).items()):
            ow, rt = summarize(v["one_way_ns"]), summarize(v["rtt_ns"])
            ow.pop("samples_us")
            rt.pop("samples_us")
            entry["points"].append({"size_bytes": size, "one_way": ow, "rtt": rt})
        out["systems"][s.key] = entry
    return out


def measure_rate(plan: dict, live: list, workdir: Path, errors: dict, progress) -> dict:
    """Sustained rate of 8-byte messages, one sender, one receiver: each
    system's rate program (rate_hprm.py; small_peers.py --rate)."""
    if "rate_messages" not in plan:
        return {}
    py = sys.executable
    argv = {
        "hprm_py_decentralized": [py, str(HERE / "rate_hprm.py"), "--coordination", "decentralized"],
        "hprm_py_centralized": [py, str(HERE / "rate_hprm.py"), "--coordination", "centralized"],
        "socket": [py, str(HERE / "small_peers.py"), "--system", "socket", "--rate", "--sizes", "8"],
        "rclpy": [py, str(HERE / "small_peers.py"), "--system", "rclpy", "--rate", "--sizes", "8"],
        "dora": [py, str(HERE / "small_peers.py"), "--system", "dora", "--rate", "--sizes", "8"],
        "iceoryx2": [py, str(HERE / "small_peers.py"), "--system", "iceoryx2", "--rate", "--sizes", "8"],
    }
    n, w = plan["rate_messages"], plan["rate_warmup"]
    out = {}
    for s in live:
        if s.key not in argv or s.key in errors:
            continue
        count = ["--messages", str(n)] if s.key.startswith("hprm") else ["--rounds", str(n)]
        doc = run_program([*argv[s.key], *count, "--warmup", str(w)], workdir / f"rate-{s.key}", 120 + n * 0.001)
        if doc.get("error"):
            if s.required:
                raise BenchError(f"{s.label} (rate) failed: {doc['error']}")
            out[s.key] = {"label": s.label, "error": doc["error"]}
            progress(f"  rate: {s.label}: {doc['error'].splitlines()[0]}")
            continue
        rate = doc["messages"] / doc["span_s"] if doc["span_s"] > 0 else float("inf")
        out[s.key] = {"label": s.label, "sent": doc["sent"], "received": doc["messages"] + 1, "seconds": round(doc["span_s"], 4),
                      "msgs_per_s": round(rate)}
        progress(f"  rate: {s.label}: {rate:,.0f} messages/s ({doc['messages'] + 1:,} of {doc['sent']:,} received)")
    return out


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Small messages (workload 4) alone; bench/run.sh runs it with the rest.")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--skip", default="")
    a = ap.parse_args(argv)
    try:
        r = measure(PLANS["full" if a.full else "quick"], skip=a.skip.split(","))
    except BenchError as e:
        sys.exit(f"small_bench: {e}")
    json.dump(r, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
