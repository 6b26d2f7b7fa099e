"""One source broadcasting to a bank of N members, with HPRM (issue 25's
benchmark): members as threads (one federate), as processes (one federate
each), or the same program written by hand as separate federates, as
programs were written before banks.

A round: the source marks its payload (first and last byte), stamps
``time.perf_counter_ns()`` and sends it to every member (broadcast: one
store object, N deliveries); each member echoes the array it received (by
reference: the same store object); the round's latency is the source's
clock when its multiport has every member's reply. Replies come back one
microstep later (``after="0ms"``); the next round starts from that reaction.

    python banks_hprm.py --placement threads|processes|hand --width N
        --size BYTES --rounds N --warmup N --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import hprm

p = argparse.ArgumentParser()
p.add_argument("--placement", choices=("threads", "processes", "hand"), required=True)
p.add_argument("--width", type=int, required=True)
p.add_argument("--size", type=int, required=True)
p.add_argument("--rounds", type=int, default=20)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--out", required=True)
ARGS = p.parse_args()
N, SIZE, TOTAL = ARGS.width, ARGS.size, ARGS.rounds + ARGS.warmup


class Source(hprm.Reactor):
    out = hprm.Output()
    replies = hprm.Input(width=hprm.param("n"))

    def __init__(self, n):
        self.n = n
        self.payload = np.random.default_rng(25).integers(0, 256, SIZE, dtype=np.uint8)
        self.round = 0
        self.stamp = 0
        self.latency: list[int] = []
        self.error: str | None = None

    def send(self, ctx):
        b = self.round % 251
        self.payload[0] = self.payload[-1] = b
        self.stamp = time.perf_counter_ns()
        ctx.set(self.out, {"round": self.round, "data": self.payload})

    @hprm.reaction(triggers="startup", effects="out")
    def start(self, ctx):
        self.send(ctx)

    @hprm.reaction(triggers="replies", effects="out")
    def gather(self, ctx):
        got = ctx.get(self.replies)
        now = time.perf_counter_ns()
        b = self.round % 251
        if len(got) != self.n or any(r["round"] != self.round or r["data"][0] != b or r["data"][-1] != b or len(r["data"]) != SIZE for r in got):
            self.error = f"round {self.round}: {len(got)} of {self.n} replies, or a wrong one"
            ctx.request_stop()
            return
        if self.round >= ARGS.warmup:
            self.latency.append(now - self.stamp)
        self.round += 1
        if self.round >= TOTAL:
            ctx.request_stop()
            return
        self.send(ctx)

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        with open(ARGS.out, "w") as f:
            json.dump({"latency_ns": self.latency, "error": self.error}, f)


class Member(hprm.Reactor):
    inp = hprm.Input()
    reply = hprm.Output()

    @hprm.reaction(triggers="inp", effects="reply")
    def echo(self, ctx):
        v = ctx.get(self.inp)
        ctx.set(self.reply, {"round": v["round"], "data": v["data"]})


prog = hprm.Program(f"banks-{ARGS.placement}-{N}")
src = prog.federate("source", Source, N)
if ARGS.placement == "hand":
    # Before banks: N federates and N ports on the receiver, by hand.
    for i in range(N):
        m = prog.federate(f"member{i}", Member)
        prog.connect(src.out, m.inp)
        prog.connect(m.reply, src.replies[i], after="0ms")
else:
    bank = prog.bank("member", Member, N, placement=ARGS.placement)
    prog.connect(src.out, bank.inp, broadcast=True)
    prog.connect(bank.reply, src.replies, after="0ms")

if __name__ == "__main__":
    # The round's object and its previous one are live at once.
    mib = max(256, 4 * SIZE // 2**20)
    # --populate: the arena pre-faulted, so a copy into the store takes no page faults.
    prog.launch(fast=True, store_memory=f"{mib}m", store_args=["--populate"])
