"""One hop of a large value between two processes, as a pyarrow record
batch or as the numpy array of the same bytes (issue 28's Arrow benchmark).

    python arrow_hop.py --kind arrow|numpy --mb 10 --messages 40 --warmup 5 --out FILE.json

The source holds one private float64 array of MB megabytes, and a record
batch whose one column is that very memory (pyarrow wraps it without a
copy). Every period it stamps the monotonic clock and sends the array or
the batch: either way one copy into the store (numpy: the array's bytes;
Arrow: the IPC stream written straight into a store object). The sink
reads one element of what it got (zero-copy, in the store) and records the
time since the stamp: send to reaction start, the hop as a program sees it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import hprm

p = argparse.ArgumentParser()
p.add_argument("--kind", choices=("arrow", "numpy"), required=True)
p.add_argument("--mb", type=float, default=10)
p.add_argument("--messages", type=int, default=40)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--period", default="50ms")
p.add_argument("--out", required=True)
ARGS = p.parse_args()


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period=ARGS.period)
        self.base = np.random.default_rng(0).standard_normal(int(ARGS.mb * 1e6) // 8)
        if ARGS.kind == "arrow":
            import pyarrow as pa

            self.value = pa.record_batch({"x": pa.array(self.base)})
        else:
            self.value = self.base
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        self.n += 1
        if self.n > ARGS.warmup + ARGS.messages:
            ctx.request_stop()
            return
        ctx.set(self.out, {"sent": time.monotonic_ns(), "data": self.value})


class Sink(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self):
        self.lat: list[float] = []
        self.seen = 0

    @hprm.reaction(triggers="inp")
    def got(self, ctx):
        v = ctx.get(self.inp)
        now = time.monotonic_ns()
        data = v["data"]
        first = data.column(0)[0].as_py() if ARGS.kind == "arrow" else float(data[0])
        assert np.isfinite(first)
        self.seen += 1
        if self.seen > ARGS.warmup:
            self.lat.append((now - v["sent"]) / 1e6)
        if self.seen == ARGS.warmup + ARGS.messages:
            Path(ARGS.out).write_text(json.dumps({"kind": ARGS.kind, "mb": ARGS.mb, "latency_ms": self.lat}))


prog = hprm.Program(f"arrow-hop-{ARGS.kind}")
src = prog.federate("source", Source)
sink = prog.federate("sink", Sink)
prog.connect(src.out, sink.inp)

if __name__ == "__main__":
    prog.launch(store_memory="256m")
