"""A source outrunning a slow receiver, its output under the backpressure
policy given as the first argument (e.g. keep-last-2): the receiver prints
what it got; the exit summaries count what was given up."""

import sys
import time

import numpy as np

import hprm

SENT = 12


class Source(hprm.Reactor):
    out = hprm.Output(backpressure=sys.argv[1])

    def __init__(self):
        self.tick = hprm.Timer(period="1ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        self.n += 1
        ctx.set(self.out, {"n": self.n, "data": np.full(1 << 20, self.n % 256, np.uint8)})


class Receiver(hprm.Reactor):
    inp = hprm.Input()

    @hprm.reaction(triggers="inp")
    def take(self, ctx):
        v = self.inp.value
        time.sleep(0.02)
        print(f"got {v['n']} intact {bool((v['data'] == v['n'] % 256).all())}", flush=True)


prog = hprm.Program("backlog", timeout=f"{SENT - 1}ms")
s = prog.federate("source", Source)
r = prog.federate("receiver", Receiver)
prog.connect(s.out, r.inp)

if __name__ == "__main__":
    prog.launch(fast=True, store_memory="4m")
