"""Reactors of values.toml: a source on host a sends 1, 10 and 50 MB numpy
arrays and a nested dict holding arrays to two receivers on host b and one
on host a; every receiver prints one line per value with its logical time
and a SHA-256 of what it got, which the test compares with what was sent
and with a run of the same program on one host."""

import hashlib
import time

import numpy as np

import hprm

SIZES = [1 << 20, 10 << 20, 50 << 20]


def value(k):
    """The k-th value sent (k = 0, 1, 2: an array; 3: a nested dict)."""
    rng = np.random.default_rng(k)
    if k < len(SIZES):
        return rng.integers(0, 256, SIZES[k], dtype=np.uint8)
    return {
        "meta": {"k": k, "names": ["left", "right"], "pi": 3.25},
        "frames": [rng.integers(0, 256, (480, 640, 3), dtype=np.uint8), rng.standard_normal(100_000)],
        "small": np.arange(10, dtype=np.int32),
    }


def digest(v):
    """A SHA-256 over the value's structure and bytes."""
    h = hashlib.sha256()

    def walk(x):
        if isinstance(x, np.ndarray):
            h.update(f"{x.dtype.str}{x.shape}".encode())
            h.update(np.ascontiguousarray(x).tobytes())
        elif isinstance(x, dict):
            for key in sorted(x):
                h.update(repr(key).encode())
                walk(x[key])
        elif isinstance(x, list | tuple):
            h.update(b"[")
            for e in x:
                walk(e)
            h.update(b"]")
        else:
            h.update(repr(x).encode())

    walk(v)
    return h.hexdigest()


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="100ms")
        self.k = 0

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        if self.k <= len(SIZES):
            ctx.set(self.out, value(self.k))
            self.k += 1


class Receiver(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self, name):
        self.name = name

    @hprm.reaction(triggers="inp")
    def receive(self, ctx):
        print(f"RECV {self.name} t={ctx.elapsed} sha={digest(self.inp.value)}", flush=True)


class Stream(hprm.Reactor):
    """cut.toml's source: every 100 ms, a 256 KiB array filled with its number."""

    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="100ms")
        self.k = 0

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        ctx.set(self.out, np.full(256 << 10, self.k % 256, dtype=np.uint8))
        self.k += 1


class Check(hprm.Reactor):
    """cut.toml's receiver: prints each array's number and whether every byte holds it."""

    inp = hprm.Input()

    @hprm.reaction(triggers="inp")
    def receive(self, ctx):
        a = self.inp.value
        ok = a.size == 256 << 10 and bool((a == a[0]).all())
        print(f"GOT {int(a[0])} t={ctx.elapsed} {'ok' if ok else 'BAD'}", flush=True)


class Worker(hprm.Reactor):
    """bank.toml's bank member: prints what it got, and sends back the
    array XOR its member number + 1 (a value of its own, to the gatherer)."""

    inp = hprm.Input()
    out = hprm.Output()

    @hprm.reaction(triggers="inp", effects="out")
    def work(self, ctx):
        v = self.inp.value
        print(f"RECV worker[{self.bank_index}] t={ctx.elapsed} sha={digest(v)}", flush=True)
        # Physical time as this federate reads it, against the true wall
        # clock (Python's, which the test-only clock skew leaves alone).
        print(f"CLOCK worker[{self.bank_index}] err_ns={ctx.physical_time - time.time_ns()}", flush=True)
        ctx.set(self.out, worked(v, self.bank_index))


def worked(v, member):
    """What bank member `member` sends back for array `v`."""
    return np.bitwise_xor(v, np.uint8(member + 1))


class Gather(hprm.Reactor):
    """bank.toml's gatherer: one line per channel of its multiport."""

    ins = hprm.Input(width=4)

    @hprm.reaction(triggers="ins")
    def gather(self, ctx):
        for i in range(len(self.ins)):
            if self.ins[i].is_present:
                print(f"RECV gather[{i}] t={ctx.elapsed} sha={digest(self.ins[i].value)}", flush=True)


ECHO_SIZE = 10 << 20
ECHO_ROUNDS = 3


def echo_value(k):
    """echo.toml's k-th array (10 MiB)."""
    return np.random.default_rng(100 + k).integers(0, 256, ECHO_SIZE, dtype=np.uint8)


class EchoSource(hprm.Reactor):
    """echo.toml's source: every 300 ms, one of ECHO_ROUNDS 10 MiB arrays,
    with its number (as the hosts benchmark's rounds). Its timer ticks
    every 10 ms: a sender releases its own reference on a value at its
    next tag, so the home copy is held only by what the link keeps for the
    remote host's copy (as in the benchmark, whose source moves on at once)."""

    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="10ms")
        self.n = 0
        self.k = 0

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        if self.n % 30 == 0 and self.k < ECHO_ROUNDS:
            ctx.set(self.out, {"k": self.k, "data": echo_value(self.k)})
            self.k += 1
        self.n += 1


class Echo(hprm.Reactor):
    """echo.toml's echoer: sends the array it received back in a value of
    its own, as it is (the same store object, by reference)."""

    inp = hprm.Input()
    out = hprm.Output()

    @hprm.reaction(triggers="inp", effects="out")
    def echo(self, ctx):
        v = self.inp.value
        ctx.set(self.out, {"k": v["k"], "data": v["data"]})


class Back(hprm.Reactor):
    """echo.toml's receiver of the echoes: one line per echo, with a SHA-256."""

    back0 = hprm.Input()
    back1 = hprm.Input()

    @hprm.reaction(triggers="back0,back1")
    def receive(self, ctx):
        for name in ("back0", "back1"):
            port = getattr(self, name)
            if port.is_present:
                print(f"BACK {name} t={ctx.elapsed} sha={digest(port.value['data'])}", flush=True)
