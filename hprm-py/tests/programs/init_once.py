"""Where each reactor's ``__init__`` runs, launched for real
(tests/test_init_once.py).

    init_once.py PLACEMENT LOG

A bank of 3 sources (PLACEMENT: processes or threads) into a sink's
multiport, whose width an attribute set in ``__init__`` gives (so another
federate's process learns it from the launcher's manifest). Every
``__init__`` appends ``init NAME PID`` to LOG, every startup reaction
``run NAME PID``, and the sink ``got VALUES`` once it has every source's.
"""

import os
import sys

import hprm

PLACEMENT, LOG = sys.argv[1], sys.argv[2]


def record(*words):
    # One short line per write, in append mode: lines of several processes
    # do not interleave.
    with open(LOG, "a") as f:
        f.write(" ".join(map(str, words)) + "\n")


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self, label):
        self.label = f"{label}[{self.bank_index}]"
        record("init", self.label, os.getpid())

    @hprm.reaction(triggers="startup", effects="out")
    def start(self, ctx):
        record("run", self.label, os.getpid())
        ctx.set(self.out, self.bank_index)


class Sink(hprm.Reactor):
    inp = hprm.Input(width="n")

    def __init__(self, n):
        self.n = n
        record("init", "sink", os.getpid())

    @hprm.reaction(triggers="startup")
    def start(self, ctx):
        record("run", "sink", os.getpid())

    @hprm.reaction(triggers="inp")
    def got(self, ctx):
        record("got", *sorted(ctx.get(self.inp)))
        ctx.request_stop()


prog = hprm.Program("init_once", timeout="30s")
sources = prog.bank("src", Source, 3, label="src", placement=PLACEMENT)
sink = prog.federate("sink", Sink, n=3)
prog.connect(sources.out, sink.inp)

if __name__ == "__main__":
    prog.launch(fast=True)
