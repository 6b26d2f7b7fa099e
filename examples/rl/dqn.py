"""Parallel DQN on CartPole-v1 with hprm.rl: a bank of rollout workers, a
replay buffer and a torch learner whose weights go to every worker at once
(one store object, read zero-copy). Centralized coordination and fixed
seeds: every run prints the same weights digest, whatever the placement.

    python examples/rl/dqn.py [--quick] [--workers 8] [--placement threads|processes]
"""

import argparse
import copy

import numpy as np

import hprm
from hprm.rl import ReplayBuffer, RolloutWorker, weights_digest, weights_message

p = argparse.ArgumentParser()
p.add_argument("--quick", action="store_true", help="200 updates instead of 3000")
p.add_argument("--workers", type=int, default=8)
p.add_argument("--placement", choices=("threads", "processes"), default="processes")
ARGS = p.parse_args()
UPDATES = 200 if ARGS.quick else 3000


def policy(w, obs, rng):
    """Epsilon-greedy; workers run the received weights in numpy (read-only views of the store)."""
    if w is None or rng.random() < 0.1:
        return int(rng.integers(2))
    h = np.maximum(w["0.weight"] @ obs + w["0.bias"], 0)
    return int(np.argmax(w["2.weight"] @ h + w["2.bias"]))


class Learner(hprm.Reactor):
    sample = hprm.Input()
    weights = hprm.Output()

    def __init__(self):
        self.updates, self.returns = 0, []

    @hprm.reaction(triggers="startup", effects="weights")
    def start(self, ctx):
        # The network is built here, in the learner's process (importing
        # torch takes seconds on a busy machine); __init__ would do as well:
        # it runs only there (docs/src/python.md, "Where __init__ runs").
        global torch
        import torch

        torch.manual_seed(0)
        torch.set_num_threads(1)
        self.q = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
        self.target = copy.deepcopy(self.q)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=1e-3)
        ctx.set(self.weights, weights_message(ctx, self.q.state_dict()))

    @hprm.reaction(triggers="sample", effects="weights")
    def learn(self, ctx):
        got = ctx.get(self.sample)
        for s in got["samples"]:
            self.update({k: torch.from_numpy(np.array(v)) for k, v in s.items()})
        self.returns += got["returns"]
        if got["samples"] and self.updates % 100 == 0:
            print(f"updates {self.updates:5d}  mean return (last 50 episodes) {np.mean(self.returns[-50:]):6.1f}  replay {got['size']}", flush=True)
        if self.updates >= UPDATES:
            print(f"weights digest {weights_digest(self.q.state_dict())[:16]}", flush=True)
            ctx.request_stop()
        else:
            ctx.set(self.weights, weights_message(ctx, self.q.state_dict(), self.updates))

    def update(self, s):
        q = self.q(s["obs"]).gather(1, s["action"].long()[:, None])[:, 0]
        with torch.no_grad():
            target = s["reward"] + 0.99 * (~s["terminated"]) * self.target(s["next_obs"]).max(1).values
        loss = torch.nn.functional.smooth_l1_loss(q, target)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.updates += 1
        if self.updates % 100 == 0:
            self.target.load_state_dict(self.q.state_dict())


prog = hprm.Program("dqn", coordination="centralized")
learner = prog.federate("learner", Learner)
replay = prog.federate("replay", ReplayBuffer, ARGS.workers, batch_size=64, samples=4, start=1000, capacity=50_000, seed=1)
workers = prog.bank("worker", RolloutWorker, ARGS.workers, placement=ARGS.placement, env="CartPole-v1", policy=policy, steps=32, seed=100)
prog.connect(learner.weights, workers.weights, broadcast=True)
prog.connect(workers.batch, replay.batches)
prog.connect(replay.sample, learner.sample, after="0ms")

if __name__ == "__main__":
    prog.launch(fast=True)
