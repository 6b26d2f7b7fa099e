"""Small-message ping-pong with HPRM Python federates (BENCHMARKS.md
workload 4; see small_common.py): federates ``ping`` and ``pong`` (two
processes, launched with ``prog.launch(fast=True)`` with their own store and
RTI). pong's echo comes back one microstep later (``after="0ms"``) and
ping's reaction to it sends the next ping at once. Arrays under the 64 KiB
threshold travel in the message; 64 KiB and more through the store.

    python small_hprm.py --coordination centralized|decentralized \
        --sizes 8,64,... --rounds N --warmup N --out FILE.json
"""

from __future__ import annotations

import os
import time

import hprm
from small_common import ECHO_TIMEOUT_S, Samples, parse_args, payloads, schedule, write_result

def _extra(p):
    p.add_argument("--coordination", choices=("centralized", "decentralized"), required=True)
    p.add_argument("--priority", type=int, help="run both federates, the store and the RTI at this SCHED_FIFO priority (bench/realtime)")
    p.add_argument("--cpus", help="with --priority: ping's CPUs and pong's, as PING/PONG, e.g. 0/1")
    p.add_argument("--spin-us", type=int, help="how long the federates (HPRM_SPIN_US) and the RTI (--spin-us) poll before they sleep (default: theirs)")


ARGS = parse_args(extra=_extra)
PLAN = schedule(ARGS)


class Ping(hprm.Reactor):
    out = hprm.Output()
    back = hprm.Input()

    def __init__(self):
        self.k = 0
        self.data = payloads(ARGS)
        self.samples = Samples(ARGS.sizes)
        self.error = None

    def send(self, ctx):
        size, _ = PLAN[self.k]
        ctx.set(self.out, {"k": self.k, "stamp": time.perf_counter_ns(), "data": self.data[size]})

    @hprm.reaction(triggers="startup", effects="out")
    def start(self, ctx):
        self.send(ctx)

    @hprm.reaction(triggers="back", effects="out")
    def echo(self, ctx):
        now = time.perf_counter_ns()
        v = self.back.value
        size, measured = PLAN[self.k]
        if v["k"] != self.k or len(v["data"]) != size:
            self.error = f"echo {v['k']} of {len(v['data'])} bytes, expected ping {self.k} of {size}"
            ctx.request_stop()
            return
        if measured:
            self.samples.add(size, v["stamp"], v["seen"], now)
        self.k += 1
        if self.k == len(PLAN):
            ctx.request_stop()
            return
        self.send(ctx)

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        if self.error is None and self.k < len(PLAN):
            self.error = f"stopped after {self.k} of {len(PLAN)} pings"
        if self.error:
            write_result(ARGS.out, error=self.error)
        else:
            self.samples.write(ARGS.out)


class Pong(hprm.Reactor):
    inp = hprm.Input()
    back = hprm.Output()

    @hprm.reaction(triggers="inp", effects="back")
    def answer(self, ctx):
        seen = time.perf_counter_ns()
        v = self.inp.value
        ctx.set(self.back, {"k": v["k"], "stamp": v["stamp"], "seen": seen, "data": v["data"]})


prog = hprm.Program(f"small-{ARGS.coordination}", coordination=ARGS.coordination, stp="5ms")
ping = prog.federate("ping", Ping)
pong = prog.federate("pong", Pong)
prog.connect(ping.out, pong.inp)
prog.connect(pong.back, ping.back, after="0ms")
if ARGS.priority:
    cpus = ARGS.cpus.split("/") if ARGS.cpus else [None, None]
    ping.realtime(priority=ARGS.priority, cpus=cpus[0])
    pong.realtime(priority=ARGS.priority, cpus=cpus[1])

if __name__ == "__main__":
    placed = ["--realtime-priority", str(ARGS.priority)] if ARGS.priority else []
    spin = []
    if ARGS.spin_us is not None:
        os.environ["HPRM_SPIN_US"] = str(ARGS.spin_us)  # the federate processes inherit it
        spin = ["--spin-us", str(ARGS.spin_us)]
    prog.launch(fast=True, timeout=f"{int(60 + ECHO_TIMEOUT_S * 10)}s", store_args=placed or None, rti_args=placed + spin or None)
