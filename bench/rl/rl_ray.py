"""Data collection with Ray, as its docs recommend: one actor per worker,
the weights ``ray.put`` once per round and passed by reference to every
actor, batches gathered with ``ray.wait`` as they complete.

    python rl_ray.py --env ENV --workers N --steps S --rounds R --warmup W --out FILE.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import collect  # noqa: E402
import ray  # noqa: E402

ARGS = collect.parse_args()


@ray.remote
class Worker:
    def __init__(self, env, seed, steps):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import collect as c

        self.c = c.Collector(env, seed, steps)

    def ready(self):
        return True

    def sample(self, params):
        self.c.params = params
        return self.c.collect()


def main():
    # num_cpus=N so N actors start on a 2-core machine (as bench/banks does).
    ray.init(num_cpus=ARGS.workers, include_dashboard=False, log_to_driver=False)
    workers = [Worker.remote(ARGS.env, i, ARGS.steps) for i in range(ARGS.workers)]
    ray.get([w.ready.remote() for w in workers])
    params = collect.initial_weights(ARGS.env)
    n, t0 = 0, time.perf_counter()
    for r in range(ARGS.warmup + ARGS.rounds):
        if r == ARGS.warmup:
            n, t0 = 0, time.perf_counter()
        ref = ray.put(params)
        pending = [w.sample.remote(ref) for w in workers]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for b in ray.get(done):
                n += len(b["reward"])
    dt = time.perf_counter() - t0
    Path(ARGS.out).write_text(json.dumps({"transitions": n, "seconds": dt, "rate": n / dt}))
    ray.shutdown()


if __name__ == "__main__":
    main()
