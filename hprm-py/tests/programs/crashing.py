"""Reactors for crash.toml: a source, a relay that raises on the first
message at or past ``crash_on`` (so its federate fails; with ``once``, only
its first process does: later ones, restarted by the launcher, relay), and
a sink that prints what it gets and its shutdown."""

import os
from pathlib import Path

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

    def __init__(self, crash_on=0, once=False):
        self.crash_on = crash_on
        # One launch, one runtime directory: a restarted relay finds the mark.
        self.mark = Path(os.environ.get("HPRM_RUNTIME_DIR", ".")) / "relay-crashed" if once else None

    @hprm.reaction(triggers="inp", effects="out")
    def relay(self, ctx):
        v = self.inp.value
        if self.crash_on and v >= self.crash_on and not (self.mark and self.mark.exists()):
            if self.mark:
                self.mark.touch()
            raise RuntimeError(f"relay: cannot handle {v}")
        ctx.set(self.out, v)


class Sink(hprm.Reactor):
    inp = hprm.Input()

    @hprm.reaction(triggers="inp")
    def take(self, ctx):
        print(f"sink got {self.inp.value}", flush=True)

    @hprm.reaction(triggers="shutdown")
    def bye(self, ctx):
        print("sink shutdown", flush=True)
