"""DQN under a per-step deadline on a loaded machine (R3's setting): a
learner trains every 100 ms with a 100 ms deadline while two CPU hogs run.
Once with a fixed large batch, once with hprm.rl's BatchSizeController,
which reads each step's slack (``ctx.slack``) and sizes the next batch to
fit. Prints and plots the miss rates, the batch sizes and the reward
curves.

    python examples/rl/deadline.py [--quick] [--out DIR]
"""

import argparse
import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

import hprm
from hprm.rl import BatchSizeController, ReplayStorage, RolloutWorker

p = argparse.ArgumentParser()
p.add_argument("--quick", action="store_true", help="100 steps a run instead of 300")
p.add_argument("--batch", type=int, default=4096, help="the fixed batch, and the controller's start")
p.add_argument("--out", default=".")
ARGS = p.parse_args()
STEPS = 100 if ARGS.quick else 300
WARMUP = 20


def policy(w, obs, rng):
    if w is None or rng.random() < 0.1:
        return int(rng.integers(2))
    with torch.no_grad():
        return int(w(torch.from_numpy(obs)).argmax())


LEARNERS = []  # the learner of each run, to read its log afterwards


class Learner(hprm.Reactor):
    """Each tick: 4 environment steps, then one update on a batch from the replay."""

    def __init__(self, control):
        torch.manual_seed(0)
        torch.set_num_threads(1)
        self.tick = hprm.Timer(period="100ms")
        self.q = torch.nn.Sequential(torch.nn.Linear(4, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))
        self.target = copy.deepcopy(self.q)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=1e-3)
        self.actor = RolloutWorker("CartPole-v1", policy=policy, steps=4, seed=3)
        self.replay = ReplayStorage(capacity=100_000, seed=1)
        self.control = BatchSizeController(ARGS.batch, minimum=32, memory="8m", bytes_per_sample=46) if control else None
        self.size, self.log, self.control_ns = ARGS.batch, [], 0
        LEARNERS.append(self)

    @hprm.reaction(triggers="tick", deadline="100ms")
    def step(self, ctx):
        self.actor.params = self.q
        self.replay.add(self.actor.collect())
        s = {k: torch.from_numpy(v) for k, v in self.replay.sample(self.size).items()}
        q = self.q(s["obs"]).gather(1, s["action"][:, None])[:, 0]
        with torch.no_grad():
            target = s["reward"] + 0.99 * (~s["terminated"]) * self.target(s["next_obs"]).max(1).values
        loss = torch.nn.functional.smooth_l1_loss(q, target)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        if len(self.log) % 50 == 0:
            self.target.load_state_dict(self.q.state_dict())
        self.finish(ctx, trained=True)

    @step.deadline_handler
    def late(self, ctx):
        self.finish(ctx, trained=False)

    def finish(self, ctx, trained):
        slack = ctx.slack
        self.log.append({"slack_ms": slack / 1e6, "late": slack < 0, "trained": trained, "batch": self.size, "returns": self.actor.returns})
        if self.control:
            t = time.perf_counter_ns()
            self.size = self.control.update(slack, ctx.deadline, ran=trained)
            self.control_ns += time.perf_counter_ns() - t
        if len(self.log) == STEPS:
            ctx.request_stop()


def run(control):
    prog = hprm.Program("deadline-dqn")
    prog.federate("learner", Learner, control)
    t = time.perf_counter()
    prog.run()
    return LEARNERS[-1], time.perf_counter() - t


if __name__ == "__main__":
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        results = {}
        for name, control in (("fixed", False), ("controller", True)):
            learner, wall = run(control)
            log = learner.log[WARMUP:]
            miss = sum(e["late"] for e in log) / len(log)
            overhead = learner.control_ns / 1e9 / wall
            results[name] = {"miss_rate": miss, "misses": sum(e["late"] for e in log), "steps": len(log), "overhead": overhead, "log": learner.log}
            print(f"{name:10s}: {100 * miss:5.1f}% of deadlines missed after {WARMUP} warm-up steps ({results[name]['misses']}/{len(log)}), "
                  f"final batch {learner.size}, controller overhead {100 * overhead:.3f}% of the run", flush=True)
    finally:
        for h in hogs:
            h.kill()
    out = Path(ARGS.out)
    (out / "deadline-dqn.json").write_text(json.dumps(results))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4))
    for name, r in results.items():
        a.plot([e["slack_ms"] for e in r["log"]], label=f"{name}: {100 * r['miss_rate']:.0f}% missed")
        b.plot([e["batch"] for e in r["log"]], label=name)
        rets = [x for e in r["log"] for x in e["returns"]]
        c.plot(np.convolve(rets, np.ones(10) / 10, mode="valid") if len(rets) >= 10 else rets, label=name)
    a.axhline(0, color="k", lw=0.5)
    a.set(title="slack at the end of each step (ms; < 0: missed)", xlabel="step")
    b.set(title="batch size", xlabel="step", yscale="log")
    c.set(title="episode return (10-episode average)", xlabel="episode")
    for x in (a, b, c):
        x.legend()
    fig.tight_layout()
    fig.savefig(out / "deadline-dqn.png", dpi=100)
    print(f"wrote {out / 'deadline-dqn.json'} and {out / 'deadline-dqn.png'}")
