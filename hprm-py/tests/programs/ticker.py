"""A source federate sends {"n": n, "arr": [0..4) * n} every 10 ms of
logical time to a sink federate, which sums n and prints the result at
shutdown (checked by test_observe.py, which taps the source meanwhile).

Usage: python ticker.py TICKS   (the program stops after TICKS periods)
"""

import sys

import numpy as np

import hprm

TICKS = int(sys.argv[1]) if len(sys.argv) > 1 else 100


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="10ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        ctx.set(self.out, {"n": self.n, "arr": np.arange(4, dtype=np.int64) * self.n})
        self.n += 1


class Sink(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self):
        self.count = 0
        self.total = 0

    @hprm.reaction(triggers="inp")
    def add(self, ctx):
        v = self.inp.value
        assert list(v["arr"]) == [0, v["n"], 2 * v["n"], 3 * v["n"]]
        self.count += 1
        self.total += v["n"]

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        print(f"sink: got {self.count} values, sum {self.total}", flush=True)


prog = hprm.Program("ticker", timeout=f"{10 * TICKS}ms")
src = prog.federate("source", Source)
snk = prog.federate("sink", Sink)
prog.connect(src.out, snk.inp)

if __name__ == "__main__":
    prog.launch()
