"""dora-rs's recorder beside hprm's (issue 29's benchmark): the camera and
sink of record_program.py as a dora dataflow, run without and with
`dora record`.

dora-rs-cli 1.1 records in one of two ways. The default injects a record
node into the dataflow, a binary (`dora-record-node`) the CLI builds or
`cargo install`s on first use; it is in no wheel and not on crates.io, so
that way cannot run here, and this script says so (the CLI's own error).
The other, `--proxy`, streams the messages through the coordinator's
WebSocket from a dataflow started with `--debug`; that one runs, and is
what is measured. Each recorded run: `dora start --debug --detach`, then
`dora record --proxy`; the camera starts only once the recorder says it
is recording (a go file the runner creates), so nothing is sent before it
listens; when the sink has every frame, the recorder gets SIGINT, as its
"press Ctrl-C to stop" asks, and its closing line gives the count it
recorded. A plain run is `dora start` without `--debug` and no recorder.

The camera holds one frame of MB megabytes (HxWx3 uint8, random) and at
every timer tick (dora's timers are whole milliseconds: 33, 17, 8 and
100 ms for 30, 60, 120 and 10 fps) marks it, stamps the monotonic clock
and sends it (`pa.array` over the frame: dora copies it into its shared
memory sample, one copy, as hprm's camera copies into its store). The
sink checks the mark (zero-copy) and records send to input event.

This script is both the runner and each node:

    python record_dora.py --mb 2.7 --fps 30 --frames 90 [--record F.drec] --out FILE.json

FILE.json: the sink's latencies, frames sent and received, and for a
recorded run the recorder's count and closing line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from dora_baseline import dora_command  # noqa: E402  (not `dora`: that is dora-rs's own package)

WIDTH = 1280


def parse() -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=float, default=2.7)
    p.add_argument("--fps", type=float, default=30)
    p.add_argument("--frames", type=int, default=90)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--record", default=None, help="record with `dora record --proxy` into this .drec file")
    p.add_argument("--out", required=True)
    p.add_argument("--go", default=None, help="(nodes) the camera starts once this file exists")
    p.add_argument("--role", choices=("camera", "sink"))
    args = p.parse_args()
    argv = [a for a in sys.argv[1:] if a not in ("--role", args.role)]
    return args, argv


def total(args) -> int:
    return args.warmup + args.frames


def camera(args) -> None:
    import numpy as np
    import pyarrow as pa
    from dora import Node

    height = max(1, int(args.mb * 1e6) // (WIDTH * 3))
    base = np.random.default_rng(0).integers(0, 256, height * WIDTH * 3, dtype=np.uint8)
    node = Node()
    sent = 0
    ready = False
    for event in node:
        if event["type"] != "INPUT":
            continue
        if event["id"] == "ready":
            ready = True
            continue
        # Until the sink runs and the recorder listens, a frame would measure
        # their start, or go unrecorded for a reason that is not the recorder's.
        if not ready or not os.path.exists(args.go):
            continue
        if sent == total(args):
            break
        sent += 1
        base[0] = sent % 256
        node.send_output("frame", pa.array(base), {"seq": sent, "sent": time.monotonic_ns()})


def sink(args) -> None:
    import pyarrow as pa
    from dora import Node

    node = Node()
    node.send_output("ready", pa.array([1]))
    latency: list[float] = []
    got = 0
    for event in node:
        if event["type"] != "INPUT":
            continue
        now = time.monotonic_ns()
        seq = event["metadata"]["seq"]
        assert int(event["value"].to_numpy(zero_copy_only=True)[0]) == seq % 256, "the frame arrived damaged"
        got += 1
        if seq > args.warmup:
            latency.append((now - event["metadata"]["sent"]) / 1e6)
        if seq == total(args):
            Path(args.out).write_text(json.dumps({"latency_ms": latency, "received": got, "sent": total(args)}))
            break


def installed_dora() -> str:
    dora = dora_command()
    if dora is None:
        raise SystemExit("the dora CLI is not installed: pip install dora-rs-cli dora-rs pyarrow")
    return dora


def flow(argv: list[str], period_ms: int) -> str:
    me = os.path.abspath(__file__)
    node = lambda role: f"    path: {sys.executable}\n    args: {shlex.join([me, *argv, '--role', role])}\n"  # noqa: E731
    return (
        "nodes:\n"
        f"  - id: camera\n{node('camera')}"
        f"    inputs:\n      tick: dora/timer/millis/{period_ms}\n      ready: sink/ready\n"
        "    outputs:\n      - frame\n"
        f"  - id: sink\n{node('sink')}"
        "    inputs:\n      frame:\n        source: camera/frame\n        queue_size: 1000\n"
        "    outputs:\n      - ready\n"
    )


def injected_recorder_error(dora: str) -> str | None:
    """Why `dora record`'s default (an injected record node) cannot run here, in the CLI's words; None if it can."""
    with tempfile.TemporaryDirectory(prefix="record-dora-probe-") as tmp:
        yml = os.path.join(tmp, "dataflow.yml")
        Path(yml).write_text(flow(["--out", os.path.join(tmp, "x.json")], 100))
        try:
            r = subprocess.run([dora, "record", "--output-yaml", os.path.join(tmp, "out.yml"), yml], cwd=tmp, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            return "`dora record --output-yaml` did not finish within 300 s"
        if r.returncode == 0:
            return None
        said = [ln.strip() for ln in (r.stderr + r.stdout).splitlines() if "dora-record-node" in ln]
        # The cause ("could not find `dora-record-node` in registry ...") before the CLI's summary of it.
        cause = [ln for ln in said if ln.startswith("error:") and "could not find" in ln]
        return (cause or said or [(r.stderr or r.stdout).strip().splitlines()[0]])[-1]


def run(args, argv: list[str]) -> None:
    """One run on a coordinator the caller started (`dora up`)."""
    dora = installed_dora()
    period_ms = max(1, round(1000 / args.fps))
    with tempfile.TemporaryDirectory(prefix="record-dora-") as tmp:
        go = os.path.join(tmp, "go")
        yml = os.path.join(tmp, "dataflow.yml")
        Path(yml).write_text(flow([*argv, "--go", go], period_ms))
        name = f"record-bench-{os.getpid()}-{time.monotonic_ns()}"
        start = [dora, "start", "--detach", "--name", name, *(["--debug"] if args.record else []), yml]
        r = subprocess.run(start, cwd=tmp, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise SystemExit(f"{shlex.join(start)} failed: {(r.stderr or r.stdout)[-2000:]}")
        recorder = None
        if args.record:
            recorder = subprocess.Popen(
                [dora, "record", "--proxy", "--name", name, "-o", args.record, yml], cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            said = []
            for line in recorder.stdout:
                said.append(line)
                if line.startswith("Recording..."):
                    break
            else:
                raise SystemExit(f"dora record ended before recording: {''.join(said)[-2000:]}")
        Path(go).touch()
        limit = time.monotonic() + 60 + total(args) * period_ms / 1e3 * 4
        while not os.path.exists(args.out) and time.monotonic() < limit:
            time.sleep(0.1)
        if recorder is not None:
            # Give the coordinator's stream a moment to hand the last frames on.
            time.sleep(1.0)
            recorder.send_signal(signal.SIGINT)
            rest, _ = recorder.communicate(timeout=60)
            said.append(rest)
        if not os.path.exists(args.out):
            subprocess.run([dora, "stop", "--name", name], capture_output=True, timeout=60)
            raise SystemExit(f"the dora sink did not get every frame within the time allowed ({name})")
        got = json.loads(Path(args.out).read_text())
        got["period_ms"] = period_ms
        if recorder is not None:
            text = "".join(said)
            m = re.search(r"Recording finished: (\d+) messages, ([\d.]+) MB", text)
            if m is None:
                raise SystemExit(f"dora record did not report its recording: {text[-2000:]}")
            got["recorded"] = int(m.group(1))
            got["recorder_line"] = m.group(0)
            # Anything the recorder says about loss, verbatim (1.1 says nothing when it records less).
            got["recorder_loss"] = [ln.strip() for ln in text.splitlines() if re.search(r"drop|lost|loss", ln, re.I)]
        Path(args.out).write_text(json.dumps(got))


class Coordinator:
    """`dora up` for the runs of one benchmark, `dora down` after (a context manager)."""

    def __enter__(self) -> str:
        self.dora = installed_dora()
        # The coordinator and daemon write their logs under `out/` of their
        # working directory: a directory of their own, not the caller's.
        self.tmp = tempfile.TemporaryDirectory(prefix="record-dora-up-")
        r = subprocess.run([self.dora, "up"], cwd=self.tmp.name, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            self.tmp.cleanup()
            raise SystemExit(f"dora up failed: {(r.stderr or r.stdout)[-2000:]}")
        return self.dora

    def __exit__(self, *_exc) -> None:
        subprocess.run([self.dora, "down", "--force"], cwd=self.tmp.name, capture_output=True, timeout=120)
        self.tmp.cleanup()


def main() -> None:
    args, argv = parse()
    if args.role == "camera":
        camera(args)
    elif args.role == "sink":
        sink(args)
    else:
        run(args, argv)


if __name__ == "__main__":
    main()
