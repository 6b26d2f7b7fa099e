"""Broadcast and gather with dora-rs (BENCHMARKS.md workload 3): a dataflow
of Python nodes, a source and 4 receivers (one process each, started by
``dora run``), payloads as Arrow arrays (dora's zero-copy path: its daemon
hands large samples over in shared memory).

The source sends ``pa.array(payload)`` (a zero-copy wrap of the numpy array;
dora copies it into its sample on send) with the round number in the
metadata; echo receivers send on the Arrow array they received, fresh ones
a new array. The source reads each reply with ``to_numpy`` (no copy).
A hello round trip to every receiver runs first, so no round waits for
nodes that are still starting.

This script is both the runner (without ``--role``: writes the dataflow to a
temporary directory and runs ``dora run`` on it) and every node of it:

    python broadcast_dora.py --size BYTES --variant echo|fresh \
        --rounds N --warmup N --out FILE.json [--hosts PREFIX,ADDRESS_A,ADDRESS_B]

``--hosts`` (bench/hosts): across two network namespaces PREFIX-a and
PREFIX-b instead of ``dora run``: a coordinator and a daemon (machine ``a``)
in PREFIX-a, a daemon (machine ``b``) in PREFIX-b, the daemons joined over
Zenoh at ADDRESS_A; the source deployed on ``a``, the receivers on ``b``;
``dora start --attach`` runs the dataflow.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from dora_baseline import dora_command  # noqa: E402  (not `dora`: that is dora-rs's own package)

from broadcast_common import RECEIVERS, ROUND_TIMEOUT_S, fail, fresh_reply, make_payload, mark, parse_args, reply_problem, write_result

HELLO = -1
HELLO_TIMEOUT_S = 60.0


def source(args) -> None:
    import numpy as np
    import pyarrow as pa
    from dora import Node

    node = Node()
    replies: list = []

    def pump(timeout: float) -> None:
        event = node.next(timeout=timeout)
        if event is None:
            fail(args.out, "dora: every receiver closed its output")
        if event["type"] == "INPUT":
            replies.append((event["id"], event["metadata"].get("round"), event["value"]))
        elif event["type"] == "ERROR" and "timed out" not in str(event.get("error")):
            # (next(timeout) reports a timeout as an ERROR event: nothing came.)
            fail(args.out, f"dora: {event.get('error')}")

    deadline = time.monotonic() + HELLO_TIMEOUT_S
    seen: set = set()
    while len(seen) < RECEIVERS:
        if time.monotonic() > deadline:
            fail(args.out, f"hello: {len(seen)} of {RECEIVERS} receivers answered within {HELLO_TIMEOUT_S:g} s")
        node.send_output("data", pa.array(np.zeros(1, np.uint8)), {"round": HELLO})
        until = time.monotonic() + 0.2
        while time.monotonic() < until:
            pump(0.05)
            seen.update(i for i, r, _ in replies if r == HELLO)
            replies.clear()

    payload = make_payload(args.size)
    latency, first = [], []
    for r in range(args.warmup + args.rounds):
        mark(payload, r)
        t0 = time.perf_counter_ns()
        node.send_output("data", pa.array(payload), {"round": r})
        got, t_first = 0, None
        while got < RECEIVERS:
            pump(0.5)
            while replies:
                _, rr, value = replies.pop()
                if rr != r:
                    continue
                problem = reply_problem(value.to_numpy(zero_copy_only=True), args.size, r, args.variant)
                if problem:
                    fail(args.out, problem)
                got += 1
                t_first = t_first or time.perf_counter_ns()
            if got < RECEIVERS and time.perf_counter_ns() - t0 > ROUND_TIMEOUT_S * 1e9:
                fail(args.out, f"round {r} timed out after {ROUND_TIMEOUT_S:g} s ({got} of {RECEIVERS} replies)")
        if r >= args.warmup:
            latency.append(time.perf_counter_ns() - t0)
            first.append(t_first - t0)
    write_result(args.out, latency, first)


def receiver(args) -> None:
    import numpy as np
    import pyarrow as pa
    from dora import Node

    node = Node()
    for event in node:
        if event["type"] == "STOP":
            break
        if event["type"] != "INPUT":
            continue
        r = event["metadata"].get("round")
        if r == HELLO or args.variant == "echo":
            node.send_output("reply", event["value"], {"round": r})
        else:
            node.send_output("reply", pa.array(fresh_reply(np.empty(args.size, np.uint8), r)), {"round": r})


def dataflow(args, argv: list[str]) -> str:
    """The dataflow YAML: this script (run by this Python) as every node;
    with --hosts, the source on machine a and the receivers on b."""
    me = os.path.abspath(__file__)

    def node(id_: str, role: str, inputs: dict, outputs: list) -> str:
        lines = [f"  - id: {id_}", f"    path: {sys.executable}", f"    args: {shlex.join([me, *argv, '--role', role])}"]
        if args.hosts:
            lines += ["    deploy:", f"      machine: {'a' if role == 'source' else 'b'}"]
        if inputs:
            lines.append("    inputs:")
            lines += [f"      {k}: {v}" for k, v in inputs.items()]
        lines.append("    outputs:")
        lines += [f"      - {o}" for o in outputs]
        return "\n".join(lines)

    nodes = [node("source", "source", {f"reply{i}": f"recv{i}/reply" for i in range(RECEIVERS)}, ["data"])]
    nodes += [node(f"recv{i}", "receiver", {"data": "source/data"}, ["reply"]) for i in range(RECEIVERS)]
    return "nodes:\n" + "\n".join(nodes) + "\n"


def run(args, argv: list[str]) -> None:
    dora = dora_command()
    if dora is None:
        fail(args.out, "the dora CLI is not installed: pip install dora-rs-cli dora-rs pyarrow")
    with tempfile.TemporaryDirectory(prefix="bcast-dora-") as tmp:
        yml = os.path.join(tmp, "dataflow.yml")
        with open(yml, "w") as f:
            f.write(dataflow(args, argv))
        limit = 60 + (args.rounds + args.warmup) * ROUND_TIMEOUT_S
        daemons: list[subprocess.Popen] = []
        command = [dora, "run", yml]
        if args.hosts:
            prefix, a, b = args.hosts.split(",")
            in_ns = lambda h: ["ip", "netns", "exec", f"{prefix}-{h}"]  # noqa: E731
            logs = open(os.path.join(tmp, "daemons.log"), "wb")
            # The namespaces share /dev/shm, which Zenoh's shared-memory
            # transport would use between them: off, as between two computers.
            overlay = os.path.join(tmp, "zenoh-overlay.json5")
            with open(overlay, "w") as f:
                f.write("{ transport: { shared_memory: { enabled: false } } }\n")
            env = {**os.environ, "DORA_ZENOH_CONFIG_OVERLAY": overlay}
            daemons.append(subprocess.Popen([*in_ns("a"), dora, "coordinator", "--interface", a, "--store", "memory"], cwd=tmp, stdout=logs, stderr=logs))
            for h in "ab":
                daemons.append(
                    subprocess.Popen(
                        [*in_ns(h), dora, "daemon", "--machine-id", h, "--coordinator-addr", a, "--zenoh-peer", f"tcp/{a}:5456"],
                        cwd=tmp,
                        env=env,
                        stdout=logs,
                        stderr=logs,
                    )
                )
            time.sleep(3)
            command = [*in_ns("a"), dora, "start", "--coordinator-addr", a, "--attach", yml]
        try:
            proc = subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            fail(args.out, f"dora did not finish within {limit:g} s")
        finally:
            for d in daemons:
                d.terminate()
            for d in daemons:
                try:
                    d.wait(10)
                except subprocess.TimeoutExpired:
                    d.kill()
                    d.wait()
        if proc.returncode != 0 and not os.path.exists(args.out):
            fail(args.out, f"dora run exited with {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}")
        if not os.path.exists(args.out):
            fail(args.out, f"dora run wrote no result: {(proc.stderr or proc.stdout)[-2000:]}")


def main() -> None:
    argv = sys.argv[1:]
    def extra(p):
        p.add_argument("--role", choices=("source", "receiver"), help="(internal) the node to run")
        p.add_argument("--hosts", metavar="PREFIX,ADDRESS_A,ADDRESS_B", help="across two network namespaces (bench/hosts)")

    args = parse_args(extra=extra)
    if args.role == "source":
        source(args)
    elif args.role == "receiver":
        receiver(args)
    else:
        run(args, argv)


if __name__ == "__main__":
    main()
