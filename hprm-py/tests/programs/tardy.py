"""Decentralized, with a too-small STP: the slow sender's messages arrive
after the receiver processed their tags, so its tardy handler runs."""

import time

import hprm


class Slow(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="20ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def emit(self, ctx):
        time.sleep(0.008)  # physical lag past the tag
        self.n += 1
        ctx.set(self.out, self.n)


class Receiver(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self):
        self.tick = hprm.Timer(period="20ms")

    @hprm.reaction(triggers="tick")
    def idle(self, ctx):
        pass

    @hprm.reaction(triggers="inp")
    def got(self, ctx):
        print(f"on time {self.inp.value}", flush=True)

    @got.tardy_handler
    def late(self, ctx):
        intended = ctx.intended_tag(self.inp)
        print(f"tardy {self.inp.value} intended={(intended.time - ctx.start_time) // 1_000_000}ms", flush=True)


prog = hprm.Program("tardy", coordination="decentralized", stp=0, timeout="100ms")
s = prog.federate("slow", Slow)
r = prog.federate("receiver", Receiver)
prog.connect(s.out, r.inp)

if __name__ == "__main__":
    prog.launch()
