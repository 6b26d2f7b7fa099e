"""Decentralized coordination across two hosts: a sender on host a sets an
output 5 ms (physical time) after each 20 ms tag; a receiver on host b has
a timer at the same tags, so it advances on its own and waits for the
sender's input only up to the STP offset. An STP that covers the lag plus
the link's latency: every message is on time. A smaller one (0): messages
arrive after their tag was processed, and the tardy handler runs for them;
the receiver's exit line counts them.

    hprm launch --host a|b tardy.py ADDRESS_A ADDRESS_B STP
"""

import sys
import time

import hprm


class Sender(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="20ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def emit(self, ctx):
        time.sleep(0.005)  # physical lag past the tag
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
        print(f"ON TIME {self.inp.value}", flush=True)

    @got.tardy_handler
    def late(self, ctx):
        print(f"TARDY {self.inp.value}", flush=True)


a, b, stp = sys.argv[1], sys.argv[2], sys.argv[3]
prog = hprm.Program("tardy", coordination="decentralized", stp=stp, timeout="200ms")
prog.host("a", a).host("b", b).rti_on("a")
sender = prog.federate("sender", Sender).on("a")
receiver = prog.federate("receiver", Receiver).on("b")
prog.connect(sender.out, receiver.inp)

if __name__ == "__main__":
    prog.launch()
