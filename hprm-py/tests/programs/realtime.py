"""A source at a real-time placement sends 20 ticks to a sink at none;
both print how their reactions' thread is scheduled (checked by
test_realtime.py).

Usage: python realtime.py PRIORITY CPUS POLICY BEST_EFFORT
    (PRIORITY "-" for none, CPUS "-" for none, BEST_EFFORT 0 or 1)
"""

import os
import sys

import hprm

PRIORITY, CPUS, POLICY, BEST_EFFORT = sys.argv[1:5]
POLICIES = {os.SCHED_OTHER: "other", os.SCHED_FIFO: "fifo", os.SCHED_RR: "rr"}


def scheduling():
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    return f"policy={POLICIES.get(os.sched_getscheduler(0), '?')} priority={os.sched_getparam(0).sched_priority} cpus={cpus}"


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="1ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        if self.n == 0:
            print(f"source: {scheduling()}", flush=True)
        ctx.set(self.out, self.n)
        self.n += 1


class Sink(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self):
        self.got = []

    @hprm.reaction(triggers="inp")
    def take(self, ctx):
        if not self.got:
            print(f"sink: {scheduling()}", flush=True)
        self.got.append(self.inp.value)

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        print(f"sink: got {len(self.got)} in order {self.got == list(range(len(self.got)))}", flush=True)


prog = hprm.Program("realtime", timeout="19ms")
src = prog.federate("source", Source)
src.realtime(
    priority=None if PRIORITY == "-" else int(PRIORITY),
    cpus=None if CPUS == "-" else CPUS,
    policy=POLICY,
    best_effort=BEST_EFFORT == "1",
)
snk = prog.federate("sink", Sink)
prog.connect(src.out, snk.inp)

if __name__ == "__main__":
    prog.launch()
