"""Reactors for crash.toml: a source, a relay that raises on message
``crash_on`` (so its federate fails), and a sink that prints its shutdown."""

import hprm


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="20ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def emit(self, ctx):
        self.n += 1
        ctx.set(self.out, self.n)


class Relay(hprm.Reactor):
    inp = hprm.Input()
    out = hprm.Output()

    def __init__(self, crash_on=0):
        self.crash_on = crash_on

    @hprm.reaction(triggers="inp", effects="out")
    def relay(self, ctx):
        if self.inp.value == self.crash_on:
            raise RuntimeError(f"relay: cannot handle {self.crash_on}")
        ctx.set(self.out, self.inp.value)


class Sink(hprm.Reactor):
    inp = hprm.Input()

    @hprm.reaction(triggers="inp")
    def take(self, ctx):
        print(f"sink got {self.inp.value}", flush=True)

    @hprm.reaction(triggers="shutdown")
    def bye(self, ctx):
        print("sink shutdown", flush=True)
