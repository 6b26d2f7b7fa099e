"""Decentralized, with no STP: the receiver finishes at the stop tag at
once, and the sender's message for that tag reaches it `argv[1]` ms later,
while its interpreter is exiting. The message must be dropped, not decoded
(decoding takes the GIL)."""

import sys
import time

import hprm

LATE_S = float(sys.argv[1]) / 1000


class Slow(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(offset="20ms")

    @hprm.reaction(triggers="tick", effects="out")
    def emit(self, ctx):
        time.sleep(LATE_S)
        ctx.set(self.out, 1)


class Receiver(hprm.Reactor):
    inp = hprm.Input()

    @hprm.reaction(triggers="inp")
    def got(self, ctx):
        print(f"got {self.inp.value}", flush=True)


prog = hprm.Program("late", coordination="decentralized", stp=0, timeout="20ms")
s = prog.federate("slow", Slow)
r = prog.federate("receiver", Receiver)
prog.connect(s.out, r.inp)

if __name__ == "__main__":
    prog.launch()
