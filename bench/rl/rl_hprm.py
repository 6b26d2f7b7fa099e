"""Data collection with HPRM: a driver broadcasts the policy's weights
(``hprm.rl.weights_message``: one store object, N deliveries) to a bank of
``hprm.rl.RolloutWorker``s, which step their environment and send their
batches back through a multiport; the next round starts when all are in.

    python rl_hprm.py --env ENV --placement threads|processes --workers N
        --steps S --rounds R --warmup W --out FILE.json

Rate: transitions of the rounds after the warm-up / their time.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import collect  # noqa: E402

import hprm  # noqa: E402
from hprm.rl import RolloutWorker, weights_message  # noqa: E402

ARGS = collect.parse_args(placement=True)


class Driver(hprm.Reactor):
    weights = hprm.Output()
    batches = hprm.Input(width=hprm.param("workers"))

    def __init__(self, workers):
        self.workers, self.round, self.t0, self.n = workers, 0, 0.0, 0
        self.params = collect.initial_weights(ARGS.env)

    @hprm.reaction(triggers="startup", effects="weights")
    def start(self, ctx):
        ctx.set(self.weights, weights_message(ctx, self.params, 0))

    @hprm.reaction(triggers="batches", effects="weights")
    def gather(self, ctx):
        got = ctx.get(self.batches)
        assert len(got) == self.workers
        self.round += 1
        if self.round == ARGS.warmup:
            self.t0 = time.perf_counter()
        elif self.round > ARGS.warmup:
            self.n += sum(len(b["reward"]) for b in got)
        if self.round == ARGS.warmup + ARGS.rounds:
            dt = time.perf_counter() - self.t0
            Path(ARGS.out).write_text(json.dumps({"transitions": self.n, "seconds": dt, "rate": self.n / dt}))
            ctx.request_stop()
            return
        ctx.set(self.weights, weights_message(ctx, self.params, self.round))


prog = hprm.Program(f"rl-collect-{ARGS.placement}", coordination="centralized")
drv = prog.federate("driver", Driver, ARGS.workers)
# Member i steps one environment with seed i, as Ray's actor i and the floor's collector i do.
bank = prog.bank(
    "worker",
    RolloutWorker,
    ARGS.workers,
    placement=ARGS.placement,
    env=lambda: collect.make_env(ARGS.env),
    policy=collect.policy_for(ARGS.env),
    steps=ARGS.steps,
    seed=0,
)
prog.connect(drv.weights, bank.weights, broadcast=True)
prog.connect(bank.batch, drv.batches, after="0ms")

if __name__ == "__main__":
    prog.launch(fast=True, store_memory="512m")
