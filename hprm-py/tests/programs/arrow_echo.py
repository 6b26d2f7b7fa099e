"""Python -> Rust -> Python Arrow round trip: `source` sends pyarrow record
batches with nested (struct, list) and dictionary columns; `echo` (Rust,
hprm-node/examples/arrow_echo.rs, which declares the same program) sends
each back twice, `same` (the received object, by reference) and
`rewritten` (a stream the Rust side writes); `sink` checks both against the
batch sent. Run: `python arrow_echo.py PATH-TO-arrow-echo`."""

import sys

import numpy as np
import pyarrow as pa

import hprm

ROWS = 20_000


def batch(k):
    """The k-th batch, rebuilt identically on both Python sides."""
    i = np.arange(ROWS)
    ids = pa.array(i * 31 + k, pa.int64(), mask=(i % 7 == 3))
    pose = pa.StructArray.from_arrays([pa.array(i / 3.0 + k), pa.array([f"pose-{j}" for j in range(ROWS)])], names=["x", "name"])
    points = pa.array([None if j % 5 == 0 else list(range(j % 4)) for j in range(ROWS)], pa.list_(pa.int32()))
    label = pa.array([("car", "bike", "person")[j % 3] for j in range(ROWS)]).dictionary_encode()
    return pa.RecordBatch.from_arrays([ids, pose, points, label], names=["id", "pose", "points", "label"])


def in_store(b):
    """Whether every buffer of the batch lies in a shared memfd mapping (the
    store's arena), not in private memory."""
    with open("/proc/self/maps") as f:
        maps = [(int(a, 16), int(z, 16), "memfd:" in line) for line in f for a, z in [line.split()[0].split("-")]]
    buffers = [x for column in b.columns for x in column.buffers() if x is not None and x.size]
    return all(any(a <= x.address and x.address + x.size <= z and memfd for a, z, memfd in maps) for x in buffers)


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="10ms")
        self.k = 0

    @hprm.reaction(triggers="tick", effects="out")
    def emit(self, ctx):
        self.k += 1
        ctx.set(self.out, batch(self.k))


class Echo(hprm.Reactor):
    """Declared here only so both languages agree on the program; the Rust
    binary runs it."""

    inp = hprm.Input()
    out = hprm.Output()

    @hprm.reaction(triggers="inp", effects="out")
    def echo(self, ctx):
        raise RuntimeError("the echo runs in Rust")


class Sink(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self):
        self.k = 0

    @hprm.reaction(triggers="inp")
    def show(self, ctx):
        self.k += 1
        m, sent = self.inp.value, batch(self.k)
        same, rewritten = m["same"], m["rewritten"]
        print(
            f"sink: k={self.k} types={type(same).__name__},{type(rewritten).__name__} "
            f"same={same.equals(sent)} rewritten={rewritten.equals(sent)} "
            f"in_store={in_store(same)},{in_store(rewritten)}",
            flush=True,
        )


prog = hprm.Program("arrow-echo", timeout="30ms")
src = prog.federate("source", Source)
ech = prog.federate("echo", Echo)
snk = prog.federate("sink", Sink)
prog.connect(src.out, ech.inp)
prog.connect(ech.out, snk.inp)

if __name__ == "__main__":
    prog.launch(commands={"echo": [sys.argv[1]]})
