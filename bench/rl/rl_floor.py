"""The floor: the same workers' collection in one process, one after
another, with no middleware; its rate is what one core does, so the
machine's limit is cores x this rate.

    python rl_floor.py --env ENV --workers N --steps S --rounds R --warmup W --out FILE.json
        [--first I]

``--first I``: the workers' seeds start at I (rl_bench.py runs one floor
per core side by side, each with its share of the seeds, to measure the
machine's limit under the load it has rather than extrapolate it).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import collect  # noqa: E402

ARGS = collect.parse_args(first=True)

workers = [collect.Collector(ARGS.env, ARGS.first + i, ARGS.steps) for i in range(ARGS.workers)]
params = collect.initial_weights(ARGS.env)
n, t0 = 0, time.perf_counter()
for r in range(ARGS.warmup + ARGS.rounds):
    if r == ARGS.warmup:
        n, t0 = 0, time.perf_counter()
    for w in workers:
        w.params = params
        n += len(w.collect()["reward"])
dt = time.perf_counter() - t0
Path(ARGS.out).write_text(json.dumps({"transitions": n, "seconds": dt, "rate": n / dt}))
