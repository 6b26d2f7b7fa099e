"""A three-federate pipeline for replay (test_replay.py): a source sends
COUNT nested values holding a 2 MB array, one every 10 ms of logical time,
then stops; a worker turns each into a result (a sum, a scaled 2 MB array,
nested fields) at the same tag and an acknowledgement one microstep later;
a sink counts both. With REPLAY_CHANGE=N in the environment, the worker's
sum is off by one for value N: the "changed reaction" a replay must catch.

Usage: python replayed.py COUNT
"""

import os
import sys

import numpy as np

import hprm

ARGS = sys.argv[1:] if __name__ == "__main__" else []
COUNT = int(ARGS[0]) if ARGS else 5
CHANGE = int(os.environ.get("REPLAY_CHANGE", "-1"))


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="10ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        if self.n == COUNT:
            ctx.request_stop()
            return
        n = self.n
        big = (np.arange(2_000_000, dtype=np.uint32) * (n + 3)).astype(np.uint8)
        ctx.set(self.out, {"n": n, "meta": {"name": f"frame-{n}", "list": [n, n / 4, None, "x" * n]}, "small": np.arange(n + 2, dtype=np.float32), "big": big})
        self.n += 1


class Worker(hprm.Reactor):
    inp = hprm.Input()
    out = hprm.Output()
    ack = hprm.Output()

    def __init__(self):
        self.later = hprm.LogicalAction()
        self.seen = 0

    @hprm.reaction(triggers="inp", effects=["out", "later"])
    def work(self, ctx):
        v = self.inp.value
        self.seen += 1
        total = int(v["big"].sum()) + (1 if v["n"] == CHANGE else 0)
        ctx.set(self.out, {"n": v["n"], "sum": total, "seen": self.seen, "scaled": v["big"] * 2, "meta": v["meta"], "small": v["small"] + 1})
        self.later.schedule(v["n"])

    @hprm.reaction(triggers="later", effects="ack")
    def acknowledge(self, ctx):
        ctx.set(self.ack, {"n": self.later.value, "microstep": ctx.tag.microstep})


class Sink(hprm.Reactor):
    out = hprm.Input()
    ack = hprm.Input()

    def __init__(self):
        self.results = 0
        self.acks = 0

    @hprm.reaction(triggers=["out", "ack"])
    def take(self, ctx):
        self.results += self.out.is_present
        self.acks += self.ack.is_present

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        print(f"sink: {self.results} results, {self.acks} acks", flush=True)


prog = hprm.Program("replayed")
src = prog.federate("source", Source)
work = prog.federate("worker", Worker)
sink = prog.federate("sink", Sink)
prog.connect(src.out, work.inp)
prog.connect(work.out, sink.out)
prog.connect(work.ack, sink.ack)

if __name__ == "__main__":
    prog.launch()
