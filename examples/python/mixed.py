"""mixed: Python and Rust federates in one program.

`source` (Python) sends a counter and a numpy array; `doubler` (Rust,
examples/src/bin/mixed-doubler.rs, which declares the same program) doubles
both; `sink` (Python) prints what it gets. Both languages build the same
program, declaring federates and connections in the same order (the wire
names a federate by its index and a message's port by its connection's). Run: `python examples/python/mixed.py [PATH-TO-mixed-doubler]`
(default: target/release/mixed-doubler).
"""

import os
import sys

import numpy as np

import hprm


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="10ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def emit(self, ctx):
        self.n += 1
        # 128 KiB: over the threshold, so it travels through the store.
        ctx.set(self.out, {"n": self.n, "data": np.full(16384, self.n, np.float64)})


class Doubler(hprm.Reactor):
    """Declared here only so both languages agree on the program; the Rust
    binary runs it."""

    inp = hprm.Input()
    out = hprm.Output()

    @hprm.reaction(triggers="inp", effects="out")
    def double(self, ctx):
        raise RuntimeError("the doubler runs in Rust")


class Sink(hprm.Reactor):
    inp = hprm.Input()

    @hprm.reaction(triggers="inp")
    def show(self, ctx):
        m = self.inp.value
        d = m["data"]
        print(f"sink: n={m['n']} data={d.dtype}{list(d.shape)} all={float(d[0])} shared={not d.flags.writeable}", flush=True)


prog = hprm.Program("mixed", timeout="30ms")
src = prog.federate("source", Source)
dbl = prog.federate("doubler", Doubler)
snk = prog.federate("sink", Sink)
prog.connect(src.out, dbl.inp)
prog.connect(dbl.out, snk.inp)

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    doubler = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "target", "release", "mixed-doubler")
    prog.launch(commands={"doubler": [doubler]})
