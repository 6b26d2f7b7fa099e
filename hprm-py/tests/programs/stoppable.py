"""A program that runs until it is stopped: a source sends a 2 MB array
every 20 ms (real time) to two receivers; every federate prints a line at
startup and at shutdown. It imports the libraries named on its command
line before hprm (numpy, torch, onnxruntime): those start threads of their
own when imported, which a signal may be delivered to.

Usage: python stoppable.py [LIB[,LIB...]] [--after] [--slow-shutdown] [--report-sigterm]
  --after: import the libraries after hprm
  --slow-shutdown: the source's shutdown reaction takes a minute
  --report-sigterm: each federate prints, as its process exits, what
    SIGTERM would do to it then ("NAME exits with SIGTERM default" when it
    would kill the process)
"""

import importlib
import sys

libs = [l for l in (sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "numpy").split(",") if l]
after = "--after" in sys.argv
if not after:
    for lib in libs:
        importlib.import_module(lib)

import hprm  # noqa: E402

if after:
    for lib in libs:
        importlib.import_module(lib)

import numpy as np  # noqa: E402


def threads_started():
    """Threads the imported libraries started (beyond the main one)."""
    import threading

    with open("/proc/self/status") as f:
        native = int(next(l for l in f if l.startswith("Threads:")).split()[1])
    return native - threading.active_count()


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="20ms")
        self.n = 0

    @hprm.reaction(triggers="startup")
    def hello(self, ctx):
        print(f"source started with {threads_started()} library threads", flush=True)

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        ctx.set(self.out, np.full(2 << 20, self.n % 251, dtype=np.uint8))
        self.n += 1

    @hprm.reaction(triggers="shutdown")
    def bye(self, ctx):
        print(f"source shutdown after {self.n}", flush=True)
        if "--slow-shutdown" in sys.argv:
            import time

            time.sleep(60)


class Receiver(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self, name):
        self.name = name
        self.count = 0

    @hprm.reaction(triggers="inp")
    def got(self, ctx):
        v = self.inp.value
        assert v.shape == (2 << 20,) and int(v[0]) == int(v[-1])
        self.count += 1
        if self.count == 3:
            print(f"{self.name} receiving", flush=True)

    @hprm.reaction(triggers="shutdown")
    def bye(self, ctx):
        print(f"{self.name} shutdown after {self.count}", flush=True)


prog = hprm.Program("stoppable")
src = prog.federate("source", Source)
for name in ("left", "right"):
    r = prog.federate(name, Receiver, name)
    prog.connect(src.out, r.inp)



def report_sigterm():
    """Prints this process's SIGTERM disposition as the kernel has it
    (Python's `signal.getsignal` knows only its own handlers)."""
    import os

    with open("/proc/self/status") as f:
        masks = {k: int(v, 16) for k, v in (l.split(":\t") for l in f) if k in ("SigIgn", "SigCgt")}
    bit = 1 << (15 - 1)
    how = "caught" if masks["SigCgt"] & bit else "ignored" if masks["SigIgn"] & bit else "default"
    print(f"{os.environ['HPRM_FEDERATE']} exits with SIGTERM {how}", flush=True)


if __name__ == "__main__":
    import os

    if "--report-sigterm" in sys.argv and os.environ.get("HPRM_FEDERATE"):
        import atexit

        atexit.register(report_sigterm)
    prog.launch()
