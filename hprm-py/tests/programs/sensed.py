"""A program fed by a physical action, for recording and replaying sensor
input (test_replay.py): federate `sensor` starts a thread at startup that
schedules COUNT readings, one every 20 ms, each made from physical time
(its nanoseconds, and a 160 KB numpy array seeded by them, which goes
through the store), so that no two live runs read the same; its reaction
sends each reading on, counted, and stops the program after the last; a
sink prints what it got.

With SENSED_LOCK=N in the environment, reading N also carries a
threading.Lock, which no codec encodes (the reaction never sends it on):
the program runs, but cannot be recorded. With SENSED_EXTRA=1, the reaction
to the last reading schedules one more as it asks the program to stop: its
tag (physical time) is past the stop tag, so no reaction sees it.

Usage: python sensed.py COUNT
"""

import os
import sys
import threading
import time

import numpy as np

import hprm

ARGS = sys.argv[1:] if __name__ == "__main__" else []
COUNT = int(ARGS[0]) if ARGS else 5
LOCK = int(os.environ.get("SENSED_LOCK", "-1"))
EXTRA = os.environ.get("SENSED_EXTRA") == "1"


class Sensor(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.reading = hprm.PhysicalAction()
        self.n = 0

    @hprm.reaction(triggers="startup")
    def start(self, ctx):
        def sense():
            for i in range(COUNT):
                time.sleep(0.02)
                t = time.time_ns()
                value = {"t": t, "data": np.random.default_rng(t).random(20_000)}
                if i == LOCK:
                    value["lock"] = threading.Lock()
                self.reading.schedule(value)

        threading.Thread(target=sense, daemon=True).start()

    @hprm.reaction(triggers="reading", effects="out")
    def send(self, ctx):
        value = self.reading.value
        self.n += 1
        ctx.set(self.out, {"n": self.n, "t": value["t"], "sum": float(value["data"].sum()), "data": value["data"]})
        if self.n == COUNT:
            if EXTRA:
                t = time.time_ns()
                self.reading.schedule({"t": t, "data": np.random.default_rng(t).random(20_000)})
            ctx.request_stop()


class Sink(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self):
        self.got = []

    @hprm.reaction(triggers="inp")
    def take(self, ctx):
        v = self.inp.value
        assert v["sum"] == float(v["data"].sum()), v
        self.got.append((v["n"], v["t"], ctx.elapsed))

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        print(f"sink: got {self.got}", flush=True)


prog = hprm.Program("sensed")
sensor = prog.federate("sensor", Sensor)
sink = prog.federate("sink", Sink)
prog.connect(sensor.out, sink.inp)

if __name__ == "__main__":
    prog.launch()
