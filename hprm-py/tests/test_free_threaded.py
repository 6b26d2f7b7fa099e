"""Free-threaded CPython (3.13t; `scripts/free-threaded.sh` builds one and
runs the whole suite on it): the extension declares that it runs without
the GIL, so importing hprm leaves the GIL off, and reactions of one level
run Python in parallel on the runtime's worker threads."""

import os
import subprocess
import sys
import sysconfig
import threading

import numpy as np
import pytest

import hprm

pytestmark = pytest.mark.skipif(
    not sysconfig.get_config_var("Py_GIL_DISABLED"),
    reason="needs free-threaded CPython: scripts/free-threaded.sh builds 3.13t and runs the tests on it",
)


def test_importing_hprm_leaves_the_gil_off():
    # A fresh interpreter, without PYTHON_GIL=0: an extension that does not
    # declare itself free-threading safe turns the GIL back on (and warns).
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    code = "import sys, hprm, hprm._native; print(sys._is_gil_enabled())"
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", out.stderr


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self, n):
        self.tick = hprm.Timer(period="1ms")
        self.n = n
        self.i = 0

    @hprm.reaction(triggers="tick", effects="out")
    def emit(self, ctx):
        self.i += 1
        if self.i > self.n:
            ctx.request_stop()
            return
        ctx.set(self.out, {"i": self.i, "a": np.full(50_000, self.i, dtype=np.int64)})


class Worker(hprm.Reactor):
    inp = hprm.Input()
    out = hprm.Output()

    def __init__(self, k, barrier, seen):
        self.k = k
        self.barrier = barrier
        self.seen = seen
        self.total = 0

    @hprm.reaction(triggers="inp", effects="out")
    def work(self, ctx):
        self.seen.append((threading.get_ident(), sys._is_gil_enabled()))
        if self.barrier is not None:
            # Passes only if the other worker's reaction runs at the same time.
            self.barrier.wait()
        v = self.inp.value
        # Pure Python and numpy: with the GIL off, both run in parallel.
        s = 0
        for x in range(2_000):
            s += x * self.k
        self.total += int((v["a"] * self.k).sum()) + s
        ctx.set(self.out, (v["i"], self.total))


class Sink(hprm.Reactor):
    in0 = hprm.Input()
    in1 = hprm.Input()
    in2 = hprm.Input()
    in3 = hprm.Input()

    def __init__(self, log):
        self.log = log

    @hprm.reaction(triggers="in0,in1,in2,in3")
    def got(self, ctx):
        self.log.append(tuple(p.value for p in (self.in0, self.in1, self.in2, self.in3) if p.is_present))


def fan(workers, n, barrier=None):
    seen, log = [], []
    prog = hprm.Program("free-threaded")
    f = prog.federate("f")
    src = f.reactor("source", Source, n)
    sink = f.reactor("sink", Sink, log)
    for k in range(workers):
        w = f.reactor(f"w{k}", Worker, k + 1, barrier, seen)
        prog.connect(src.out, w.inp)
        prog.connect(w.out, getattr(sink, f"in{k}"))
    prog.run(fast=True)
    return seen, log


def test_reactions_of_one_level_run_python_in_parallel_without_the_gil():
    seen, log = fan(2, 20, threading.Barrier(2, timeout=20))
    assert len(log) == 20
    assert all(not gil for _, gil in seen), "the GIL stayed off in every reaction"
    assert len({t for t, _ in seen}) >= 2, "reactions ran on more than one thread"


def test_four_parallel_workers_compute_exactly_what_one_thread_would():
    n = 100
    _, log = fan(4, n)
    s = sum(range(2_000))
    expect = []
    totals = [0] * 4
    for i in range(1, n + 1):
        for k in range(4):
            totals[k] += 50_000 * i * (k + 1) + s * (k + 1)
        expect.append(tuple((i, t) for t in totals))
    assert log == expect
