"""Synchronized parallel DQN on Blackjack-v1 with HPRM and hprm.rl: a
learner broadcasts its weights to a bank of rollout workers, whose batches
go to a replay buffer (in the learner's federate), which sends the learner
its minibatches; a round is
one pass around that loop (centralized coordination: the same weights on
every run).

    python dqn_hprm.py --placement threads|processes --workers N --steps S
        --batch B --updates U --per-round K --out FILE.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dqn_core  # noqa: E402

import hprm  # noqa: E402
from hprm.rl import ReplayBuffer, RolloutWorker, weights_digest, weights_message  # noqa: E402

ARGS = dqn_core.parse_args(placement=True)


class Learner(hprm.Reactor):
    sample = hprm.Input()
    weights = hprm.Output()

    def __init__(self):
        self.learner = dqn_core.Learner(seed=0)
        self.curve: list[list[float]] = []
        self.t0 = 0.0

    @hprm.reaction(triggers="startup", effects="weights")
    def start(self, ctx):
        self.t0 = time.perf_counter()
        ctx.set(self.weights, weights_message(ctx, self.learner.params))

    @hprm.reaction(triggers="sample", effects="weights")
    def learn(self, ctx):
        got = ctx.get(self.sample)
        for s in got["samples"]:
            self.learner.update(s)
        r = got["returns"]
        self.curve.append([self.learner.updates, float(sum(r) / len(r)) if r else 0.0, time.perf_counter() - self.t0])
        if self.learner.updates >= ARGS.updates:
            out = {"seconds": time.perf_counter() - self.t0, "updates": self.learner.updates, "curve": self.curve, "digest": weights_digest(self.learner.params)}
            Path(ARGS.out).write_text(json.dumps(out))
            ctx.request_stop()
            return
        ctx.set(self.weights, weights_message(ctx, self.learner.params))


prog = hprm.Program(f"dqn-{ARGS.placement}", coordination="centralized")
# Replay beside the learner, in its process (as Ray's driver holds both):
# its minibatches reach the learner by reference.
lf = prog.federate("learner")
learner = lf.reactor("learner", Learner)
replay = lf.reactor("replay", ReplayBuffer, ARGS.workers, batch_size=ARGS.batch, samples=ARGS.per_round, capacity=100_000, memory="256m", seed=7)
workers = prog.bank("worker", RolloutWorker, ARGS.workers, placement=ARGS.placement, env="Blackjack-v1", policy=dqn_core.policy, steps=ARGS.steps, seed=0)
prog.connect(learner.weights, workers.weights, broadcast=True)
prog.connect(workers.batch, replay.batches)
prog.connect(replay.sample, learner.sample, after="0ms")

if __name__ == "__main__":
    prog.launch(fast=True, store_memory="512m")
