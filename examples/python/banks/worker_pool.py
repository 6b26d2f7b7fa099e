"""A worker pool: a learner broadcasts its weights to a bank of rollout
workers (one value, one store object, N deliveries) and gathers their
results through a multiport as wide as the bank.

    python examples/python/banks/worker_pool.py [threads|processes] [WORKERS]

With fixed seeds and centralized coordination every run prints the same
numbers, whatever order the workers finish in.
"""

import sys

import numpy as np

import hprm


class Learner(hprm.Reactor):
    weights = hprm.Output()

    def __init__(self, workers, rounds=3):
        self.workers = workers
        self.rounds = rounds
        self.w = np.zeros(1_000_000, np.float32)  # 4 MB: travels through the store
        self.round = 0

    results = hprm.Input(width=hprm.param("workers"))  # one channel per worker

    @hprm.reaction(triggers="startup", effects="weights")
    def start(self, ctx):
        ctx.set(self.weights, {"round": 0, "w": self.w})

    @hprm.reaction(triggers="results", effects="weights")
    def learn(self, ctx):
        returns = [r["return"] for r in ctx.get(self.results)]
        print(f"round {self.round}: returns {np.round(returns, 3).tolist()}", flush=True)
        self.round += 1
        if self.round == self.rounds:
            ctx.request_stop()
            return
        self.w = self.w + np.float32(np.mean(returns))
        ctx.set(self.weights, {"round": self.round, "w": self.w})


class Rollout(hprm.Reactor):
    weights = hprm.Input()
    result = hprm.Output()

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    @hprm.reaction(triggers="weights", effects="result")
    def rollout(self, ctx):
        w = ctx.get(self.weights)["w"]  # a read-only view of the store object: no copy
        ret = float(w[:100].mean() + self.rng.normal())
        ctx.set(self.result, {"worker": ctx.bank_index, "return": ret})


placement = sys.argv[1] if len(sys.argv) > 1 else "threads"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 4
prog = hprm.Program("pool")
learner = prog.federate("learner", Learner, n)
workers = prog.bank("rollout", Rollout, n, placement=placement, member_args=lambda i: {"seed": 1000 + i})
prog.connect(learner.weights, workers.weights, broadcast=True)
prog.connect(workers.result, learner.results, after="0ms")

if __name__ == "__main__":
    prog.launch()
