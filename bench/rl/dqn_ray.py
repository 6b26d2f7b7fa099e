"""Synchronized parallel DQN on Blackjack-v1 with Ray, as its docs
recommend: rollout actors, the weights ``ray.put`` once a round, batches
gathered with ``ray.wait``; replay and learner in the driver. The same
algorithm, seeds and sampling as dqn_hprm.py, so the curves agree (batches
are added in worker order, as HPRM's multiport hands them over).

    python dqn_ray.py --workers N --steps S --batch B --updates U --per-round K --out FILE.json
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dqn_core  # noqa: E402
import ray  # noqa: E402

ARGS = dqn_core.parse_args()


@ray.remote
class Worker:
    def __init__(self, seed, steps):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import collect
        import dqn_core as d

        self.c = collect.Collector("Blackjack-v1", seed, steps, policy=d.policy)
        self.c.params = None

    def ready(self):
        return True

    def sample(self, params):
        self.c.params = params
        return self.c.collect()


def digest(params):
    h = hashlib.sha256()
    for k, a in params.items():
        h.update(f"{k}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def main():
    ray.init(num_cpus=ARGS.workers, include_dashboard=False, log_to_driver=False)
    workers = [Worker.remote(i, ARGS.steps) for i in range(ARGS.workers)]
    ray.get([w.ready.remote() for w in workers])
    learner, replay, curve = dqn_core.Learner(seed=0), dqn_core.Replay(100_000, seed=7), []
    t0 = time.perf_counter()
    params = learner.params
    while learner.updates < ARGS.updates:
        ref = ray.put(params)
        pending = {w.sample.remote(ref): i for i, w in enumerate(workers)}
        got = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for d in done:
                got[pending.pop(d)] = ray.get(d)
        returns = []
        for i in range(ARGS.workers):
            replay.add(got[i])
            returns.extend(got[i]["returns"])
        if replay.size >= ARGS.batch:
            for _ in range(ARGS.per_round):
                learner.update(replay.sample(ARGS.batch))
        curve.append([learner.updates, float(sum(returns) / len(returns)) if returns else 0.0, time.perf_counter() - t0])
        params = learner.params
    out = {"seconds": time.perf_counter() - t0, "updates": learner.updates, "curve": curve, "digest": digest(learner.params)}
    Path(ARGS.out).write_text(json.dumps(out))
    ray.shutdown()


if __name__ == "__main__":
    main()
