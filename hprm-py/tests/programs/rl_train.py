"""Synchronized linear Q-learning on CartPole-v1 with hprm.rl's blocks: a
learner, a replay buffer and a bank of rollout workers that together step
16 environments (seeds 1000..1015) whatever the number of workers. Prints
the SHA-256 of the weights after --updates updates.

    python rl_train.py --workers N --placement threads|processes [--jitter] [--seed S]

--jitter makes each worker sleep a random (unseeded) time before it
collects, so their batches arrive in a different order on every run.
"""

import argparse
import random
import time

import numpy as np

import hprm
from hprm.rl import ReplayBuffer, RolloutWorker, weights_digest, weights_message

p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, required=True)
p.add_argument("--placement", default="threads")
p.add_argument("--updates", type=int, default=20)
p.add_argument("--jitter", action="store_true")
p.add_argument("--seed", type=int, default=1000)
ARGS = p.parse_args()
ENVS = 16
assert ENVS % ARGS.workers == 0, "the workers must share the 16 environments evenly"
PER = ENVS // ARGS.workers


def features(obs):
    return np.concatenate([obs, np.ones((*obs.shape[:-1], 1))], axis=-1)


def policy(params, obs, rng):
    """Epsilon-greedy on a linear Q function (random before any weights)."""
    if params is None or rng.random() < 0.2:
        return int(rng.integers(2))
    return int(np.argmax(features(obs.astype(np.float64)) @ params["W"]))


class Worker(RolloutWorker):
    def collect(self):
        if ARGS.jitter:
            time.sleep(random.random() * 0.02)
        return super().collect()


class Learner(hprm.Reactor):
    sample = hprm.Input()
    weights = hprm.Output()

    def __init__(self, updates):
        self.updates = updates
        self.done = 0
        self.params = {"W": np.zeros((5, 2))}

    @hprm.reaction(triggers="startup", effects="weights")
    def start(self, ctx):
        ctx.set(self.weights, weights_message(ctx, self.params, 0))

    @hprm.reaction(triggers="sample", effects="weights")
    def learn(self, ctx):
        got = ctx.get(self.sample)
        for s in got["samples"]:
            self.update(s)
        if self.done >= self.updates:
            print(f"digest {weights_digest(self.params)} updates={self.done} replay={got['size']}", flush=True)
            ctx.request_stop()
            return
        ctx.set(self.weights, weights_message(ctx, self.params, self.done))

    def update(self, s, lr=0.01, gamma=0.99):
        W = self.params["W"]
        x, xn = features(s["obs"].astype(np.float64)), features(s["next_obs"].astype(np.float64))
        q = (x @ W)[np.arange(len(x)), s["action"]]
        target = s["reward"] + gamma * (~s["terminated"]) * (xn @ W).max(axis=1)
        delta = np.zeros((len(x), 2))
        delta[np.arange(len(x)), s["action"]] = target - q
        self.params = {"W": W + lr * x.T @ delta / len(x)}
        self.done += 1


prog = hprm.Program(f"rl-train-{ARGS.workers}", coordination="centralized")
learner = prog.federate("learner", Learner, ARGS.updates)
replay = prog.federate("replay", ReplayBuffer, ARGS.workers, batch_size=64, samples=2, seed=7)
workers = prog.bank(
    "worker",
    Worker,
    ARGS.workers,
    placement=ARGS.placement,
    member_args=lambda i: {"env": "CartPole-v1", "policy": policy, "steps": 25, "envs": PER, "seeds": [ARGS.seed + i * PER + j for j in range(PER)]},
)
prog.connect(learner.weights, workers.weights, broadcast=True)
prog.connect(workers.batch, replay.batches)
prog.connect(replay.sample, learner.sample, after="0ms")

if __name__ == "__main__":
    prog.launch(fast=True)
