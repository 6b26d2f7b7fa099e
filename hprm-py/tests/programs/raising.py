"""Reactions that fail as a new user's do: a source sends a 1 MB array every
10 ms to two receivers.

Usage: python raising.py MODE
  readonly:   both receivers write into the (read-only, shared) array they got
  undeclared: the source sets an output its reaction does not declare
"""

import sys

import numpy as np

import hprm

MODE = sys.argv[1] if len(sys.argv) > 1 else "readonly"


class Source(hprm.Reactor):
    out = hprm.Output()
    other = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="10ms")

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        if MODE == "undeclared":
            self.other.set(1)
        ctx.set(self.out, np.zeros(1 << 20, dtype=np.uint8))


class Receiver(hprm.Reactor):
    inp = hprm.Input()

    @hprm.reaction(triggers="inp")
    def scale(self, ctx):
        frame = self.inp.value
        frame *= 2


prog = hprm.Program("raising", timeout="2s")
src = prog.federate("source", Source)
for name in ("left", "right"):
    prog.connect(src.out, prog.federate(name, Receiver).inp)

if __name__ == "__main__":
    prog.launch()
