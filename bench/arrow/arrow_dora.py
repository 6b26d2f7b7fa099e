"""dora-rs's Arrow path, one hop between two Python nodes (the Arrow
benchmark's peer, beside hprm's record batch and numpy array).

The sink says when it is ready, and the source sends only after that (a
message sent to a sink still starting would measure its start). The source
holds one float64 array of MB megabytes; every period (dora's
timer) it stamps the monotonic clock and sends ``pa.array(base)`` (a
zero-copy wrap; dora copies it into its shared-memory sample, one copy, as
hprm copies into its store) with the stamp in the metadata. The sink reads
one element of what it got (``to_numpy``, zero-copy) and records the time
since the stamp: send to input event, the hop as a node sees it.

This script is both the runner (without ``--role``: writes the dataflow
into a temporary directory and runs ``dora run`` on it) and each node:

    python arrow_dora.py --mb 10 --messages 40 --warmup 5 --period-ms 50 --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from dora_baseline import dora_command  # noqa: E402  (not `dora`: that is dora-rs's own package)


def parse() -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=float, default=10)
    p.add_argument("--messages", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--period-ms", type=int, default=50)
    p.add_argument("--out", required=True)
    p.add_argument("--role", choices=("source", "sink"))
    args = p.parse_args()
    argv = [a for a in sys.argv[1:] if a not in ("--role", args.role)]
    return args, argv


def source(args) -> None:
    import numpy as np
    import pyarrow as pa
    from dora import Node

    base = np.random.default_rng(0).standard_normal(int(args.mb * 1e6) // 8)
    base[0] = 0.0
    node = Node()
    sent = 0
    ready = False
    for event in node:
        if event["type"] != "INPUT":
            continue
        if event["id"] == "ready":
            ready = True
            continue
        if not ready:
            # The sink is still starting: a message sent now would wait in
            # its queue, and measure the start, not the hop.
            continue
        if sent == args.warmup + args.messages:
            break
        sent += 1
        node.send_output("data", pa.array(base), {"sent": time.monotonic_ns()})


def sink(args) -> None:
    import pyarrow as pa
    from dora import Node

    node = Node()
    node.send_output("ready", pa.array([1]))
    latency: list[float] = []
    seen = 0
    for event in node:
        if event["type"] != "INPUT":
            continue
        now = time.monotonic_ns()
        first = event["value"].to_numpy(zero_copy_only=True)[0]
        assert first == 0.0, "the value arrived damaged"
        seen += 1
        if seen > args.warmup:
            latency.append((now - event["metadata"]["sent"]) / 1e6)
        if seen == args.warmup + args.messages:
            with open(args.out, "w") as f:
                json.dump({"kind": "dora", "mb": args.mb, "latency_ms": latency}, f)
            break


def run(args, argv: list[str]) -> None:
    dora = dora_command()
    if dora is None:
        raise SystemExit("the dora CLI is not installed: pip install dora-rs-cli dora-rs pyarrow")
    me = os.path.abspath(__file__)
    node = lambda role: f"    path: {sys.executable}\n    args: {shlex.join([me, *argv, '--role', role])}\n"  # noqa: E731
    flow = (
        "nodes:\n"
        f"  - id: source\n{node('source')}"
        f"    inputs:\n      tick: dora/timer/millis/{args.period_ms}\n      ready: sink/ready\n"
        "    outputs:\n      - data\n"
        f"  - id: sink\n{node('sink')}"
        # dora's default queue of one input is short: a sink that starts
        # after the source would drop the first messages.
        "    inputs:\n      data:\n        source: source/data\n        queue_size: 1000\n"
        "    outputs:\n      - ready\n"
    )
    with tempfile.TemporaryDirectory(prefix="arrow-dora-") as tmp:
        yml = os.path.join(tmp, "dataflow.yml")
        with open(yml, "w") as f:
            f.write(flow)
        limit = 60 + (args.warmup + args.messages) * args.period_ms / 1e3 * 4
        try:
            proc = subprocess.run([dora, "run", yml], cwd=tmp, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"dora did not finish within {limit:g} s") from None
        if proc.returncode != 0 or not os.path.exists(args.out):
            raise SystemExit(f"dora run exited with {proc.returncode} and wrote no result: {(proc.stderr or proc.stdout)[-2000:]}")


def main() -> None:
    args, argv = parse()
    {"source": source, "sink": sink, None: lambda a: run(a, argv)}[args.role](args)


if __name__ == "__main__":
    main()
