"""Sustained rate of 8-byte messages between two HPRM Python federates
(BENCHMARKS.md workload 4): ``source`` sets its output and reschedules
itself one microstep later (a logical action, fast mode) as fast as the
runtime lets it; ``sink`` counts. Rate: messages received per second at the
sink, between the first and the last measured message. The first
``--warmup`` messages are not measured.

    python rate_hprm.py --coordination centralized|decentralized \
        --messages N --warmup N --out FILE.json

Writes ``{"messages": measured intervals, "sent": N, "span_s": first to last, s}`` (see rate in
small_peers.py for the baselines, which write the same).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import hprm

# The workloads' directories beside this one (bench/README.md: the layout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broadcast"))

from broadcast_common import write_result  # noqa: E402

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--coordination", choices=("centralized", "decentralized"), required=True)
p.add_argument("--messages", type=int, required=True)
p.add_argument("--warmup", type=int, default=0)
p.add_argument("--out", required=True)
ARGS = p.parse_args()
TOTAL = ARGS.warmup + ARGS.messages


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.next = hprm.LogicalAction()
        self.sent = 0
        self.data = np.zeros(8, np.uint8)

    @hprm.reaction(triggers=["startup", "next"], effects=["out", "next"])
    def send(self, ctx):
        ctx.set(self.out, self.data)
        self.sent += 1
        if self.sent < TOTAL:
            self.next.schedule()
        else:
            ctx.request_stop()


class Sink(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self):
        self.count = 0
        self.first = self.last = 0

    @hprm.reaction(triggers="inp")
    def got(self, ctx):
        self.count += 1
        if self.count == ARGS.warmup + 1:
            self.first = time.perf_counter_ns()
        self.last = time.perf_counter_ns()

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        measured = self.count - ARGS.warmup - 1  # intervals between the first and the last measured message
        if measured < 1:
            write_result(ARGS.out, error=f"the sink received {self.count} of {TOTAL} messages")
            return
        write_result(ARGS.out, [], [], None, messages=measured, sent=ARGS.messages, span_s=(self.last - self.first) / 1e9)


# Fast mode: a decentralized sink waits at most STP of physical time for an
# input it does not know yet, then moves on (here, to the end: it has no
# events of its own). With 5 ms it could finish before a source slowed by a
# loaded machine sent anything (0 of 55 once in CI). The STP is a bound on
# that wait, not a delay per message: it does not change the rate measured.
prog = hprm.Program(f"rate-{ARGS.coordination}", coordination=ARGS.coordination, stp="1s")
src = prog.federate("source", Source)
sink = prog.federate("sink", Sink)
prog.connect(src.out, sink.inp)

if __name__ == "__main__":
    prog.launch(fast=True, timeout="300s")
