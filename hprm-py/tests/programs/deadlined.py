"""A pipeline whose worker has a deadline, for recording and replaying
deadline decisions (test_replay.py): a source sends COUNT numbers, one
every 200 ms of logical time; the worker's `work` reaction has a 60 ms
deadline and sends {"n", "late"}: late is False from its body, True from
its deadline handler; a sink prints the numbers that came late.

With DEADLINE_SLOW=1,3 in the environment (the live run only), the
worker's earlier reaction sleeps 120 ms on those numbers, so `work`
starts past its deadline there: a miss made certain, and one that a
replay (fast, without the sleep) would not see if it read the clock.

Usage: python deadlined.py COUNT
"""

import os
import sys
import time

import hprm

ARGS = sys.argv[1:] if __name__ == "__main__" else []
COUNT = int(ARGS[0]) if ARGS else 5
SLOW = {int(n) for n in os.environ.get("DEADLINE_SLOW", "").split(",") if n}


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(offset="200ms", period="200ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        if self.n == COUNT:
            ctx.request_stop()
            return
        ctx.set(self.out, self.n)
        self.n += 1


class Worker(hprm.Reactor):
    inp = hprm.Input()
    out = hprm.Output()

    @hprm.reaction(triggers="inp")
    def prepare(self, ctx):
        if self.inp.value in SLOW:
            time.sleep(0.12)

    @hprm.reaction(triggers="inp", effects="out", deadline="60ms")
    def work(self, ctx):
        ctx.set(self.out, {"n": self.inp.value, "late": False})

    @work.deadline_handler
    def late(self, ctx):
        ctx.set(self.out, {"n": self.inp.value, "late": True})


class Sink(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self):
        self.late = []

    @hprm.reaction(triggers="inp")
    def take(self, ctx):
        if self.inp.value["late"]:
            self.late.append(self.inp.value["n"])

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        print(f"sink: late {self.late}", flush=True)


prog = hprm.Program("deadlined")
src = prog.federate("source", Source)
work = prog.federate("worker", Worker)
sink = prog.federate("sink", Sink)
prog.connect(src.out, work.inp)
prog.connect(work.out, sink.inp)

if __name__ == "__main__":
    prog.launch()
