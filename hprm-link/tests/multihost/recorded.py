"""Reactors of recorded.toml: a source on host a sends, every 50 ms, a
256 KiB array (through the stores and the links) and a small counter
(in-band) to a sink on host b, which acknowledges each pair to a tally on
host a. `array(k)` is the k-th array, which the test regenerates to compare
the recording with, bit for bit."""

import numpy as np

import hprm

SIZE = 256 << 10


def array(k):
    return np.random.default_rng(k).integers(0, 256, SIZE, dtype=np.uint8)


class Source(hprm.Reactor):
    big = hprm.Output()
    small = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="50ms")
        self.k = 0

    @hprm.reaction(triggers="tick", effects=["big", "small"])
    def send(self, ctx):
        ctx.set(self.big, array(self.k))
        ctx.set(self.small, self.k)
        self.k += 1


class Sink(hprm.Reactor):
    big = hprm.Input()
    small = hprm.Input()
    ack = hprm.Output()

    @hprm.reaction(triggers=["big", "small"], effects="ack")
    def receive(self, ctx):
        big = self.big.value
        ctx.set(self.ack, {"k": self.small.value, "sum": int(big.sum()), "first": big[:4].tobytes()})


class Tally(hprm.Reactor):
    ack = hprm.Input()

    @hprm.reaction(triggers="ack")
    def count(self, ctx):
        print(f"ACK k={self.ack.value['k']}", flush=True)
