"""A source federate sends COUNT nested values, one every PERIOD of
logical time, to a sink federate and a logger federate (test_record.py
records them). With BIG 1, each value holds a 1, 3 or 10 MB array (through
the store); with BIG s, a 100 KB one (through the store too); without,
only small ones. `value(n)` is the n-th value, so the
test can compare what it reads back with what was sent. The sink checks
each value and prints how many it got and their sum.

Usage: python recorded.py COUNT [PERIOD] [BIG: 0|1|s]
"""

import sys

import numpy as np

import hprm

# Imported by the test for `value` only: then the arguments are not ours.
ARGS = sys.argv[1:] if __name__ == "__main__" else []
COUNT = int(ARGS[0]) if ARGS else 6
PERIOD = ARGS[1] if len(ARGS) > 1 else "10ms"
BIG = {"1": True, "s": "s"}.get(ARGS[2], False) if len(ARGS) > 2 else False


def value(n, big):
    v = {
        "n": n,
        "name": f"frame-{n}",
        "nested": {"list": [n, n * 2.5, "x" * (n % 7), None, True], "small": np.arange(n + 4, dtype=np.int32)},
    }
    if big:
        size = 100_000 if big == "s" else (1_000_000, 3_000_000, 10_000_000)[n % 3]
        v["big"] = (np.arange(size, dtype=np.uint32) * (n + 1)).astype(np.uint8)
    return v


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period=PERIOD)
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        if self.n < COUNT:
            ctx.set(self.out, value(self.n, BIG))
            self.n += 1
        else:
            ctx.request_stop()

    @hprm.reaction(triggers="shutdown")
    def bye(self, ctx):
        print(f"source: sent {self.n}", flush=True)


class Sink(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self, name):
        self.name = name
        self.count = 0
        self.total = 0

    @hprm.reaction(triggers="inp")
    def add(self, ctx):
        v = self.inp.value
        assert list(v["nested"]["small"]) == list(range(v["n"] + 4)), v
        if BIG:
            assert v["big"][1] == (v["n"] + 1) % 256, v["n"]
        self.count += 1
        self.total += v["n"]

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        print(f"{self.name}: got {self.count} values, sum {self.total}", flush=True)


prog = hprm.Program("recorded")
src = prog.federate("source", Source)
for name in ("sink", "logger"):
    prog.connect(src.out, prog.federate(name, Sink, name).inp)

if __name__ == "__main__":
    prog.launch()
