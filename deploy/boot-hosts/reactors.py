"""Reactors of span.toml: the source prints `SENT k=K sha=S` for each
value it sends, the sink `RECV k=K sha=S` for each it receives, S being a
SHA-256 of the 256 KiB array and K the small counter sent beside it."""

import hashlib

import numpy as np

import hprm

SIZE = 256 << 10


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


class Source(hprm.Reactor):
    big = hprm.Output()
    small = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="100ms")
        self.k = 0

    @hprm.reaction(triggers="tick", effects=["big", "small"])
    def send(self, ctx):
        a = np.random.default_rng(self.k).integers(0, 256, SIZE, dtype=np.uint8)
        ctx.set(self.big, a)
        ctx.set(self.small, self.k)
        print(f"SENT k={self.k} sha={sha(a)}", flush=True)
        self.k += 1


class Sink(hprm.Reactor):
    big = hprm.Input()
    small = hprm.Input()

    @hprm.reaction(triggers=["big", "small"])
    def receive(self, ctx):
        print(f"RECV k={self.small.value} sha={sha(self.big.value)}", flush=True)
