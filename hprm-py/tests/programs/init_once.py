"""Where each reactor's ``__init__`` runs, launched for real
(tests/test_init_once.py).

    init_once.py PLACEMENT LOG

A bank of 3 sources (PLACEMENT: processes or threads; "one": the same
reactors in one federate, run in this process) into three sinks, whose
multiport's width is known three ways: from the class (``sink``), from a
constructor argument (``psink``, ``hprm.param``), and from an attribute
``__init__`` sets (``asink``: only ``__init__`` knows it). The sources'
timer and the sinks' action are declared in the class, the timer's offset
from an argument. Every ``__init__`` appends ``init NAME PID`` to LOG,
every first reaction ``run NAME PID``, and each sink ``got NAME VALUES``
once it has every source's.
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
    tick = hprm.Timer(offset=hprm.param("delay"))

    def __init__(self, delay="0ms", index=None):
        self.index = self.bank_index if index is None else index
        record("init", f"src[{self.index}]", os.getpid())

    @hprm.reaction(triggers="tick", effects="out")
    def start(self, ctx):
        record("run", f"src[{self.index}]", os.getpid())
        ctx.set(self.out, self.index)


class Sink(hprm.Reactor):
    inp = hprm.Input(width=3)
    done = hprm.LogicalAction(min_delay="1ms")

    def __init__(self, label, n=3):
        self.label, self.n = label, n
        record("init", label, os.getpid())

    @hprm.reaction(triggers="startup")
    def start(self, ctx):
        record("run", self.label, os.getpid())

    @hprm.reaction(triggers="inp", effects="done", deadline="10s")
    def got(self, ctx):
        record("got", self.label, *sorted(ctx.get(self.inp)))
        self.done.schedule()

    @got.deadline_handler
    def late(self, ctx):
        record("late", self.label)
        self.done.schedule()

    @hprm.reaction(triggers="done")
    def stop(self, ctx):
        ctx.request_stop()


class ParamSink(Sink):
    inp = hprm.Input(width=hprm.param("n"))


class AttrSink(Sink):
    inp = hprm.Input(width="n")


prog = hprm.Program("init_once", timeout="30s")
if PLACEMENT == "one":
    one = prog.federate("one")
    sources = [one.reactor(f"src{i}", Source, "1ms", index=i).out for i in range(3)]
    sinks = [one.reactor(label, cls, label, n=3).inp for label, cls in (("sink", Sink), ("psink", ParamSink), ("asink", AttrSink))]
else:
    sources = prog.bank("src", Source, 3, "1ms", placement=PLACEMENT).out
    sinks = [prog.federate(label, cls, label, n=3).inp for label, cls in (("sink", Sink), ("psink", ParamSink), ("asink", AttrSink))]
for inp in sinks:
    for i, out in enumerate(sources):
        prog.connect(out, inp[i])

if __name__ == "__main__":
    prog.launch(fast=True)
