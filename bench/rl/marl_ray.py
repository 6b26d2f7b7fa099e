"""Multi-agent inference with Ray, as its docs recommend: one actor per
agent holding that agent's policy; each step the driver calls every actor
with its observation and gathers the actions with ``ray.get``.

    python marl_ray.py --agents N --steps S --warmup W --out FILE.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import marl_core  # noqa: E402
import ray  # noqa: E402

ARGS = marl_core.parse_args()


@ray.remote
class Agent:
    def __init__(self, obs_dim, index, seed):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import marl_core as m

        self.policy = m.Policy(obs_dim, index, seed)

    def ready(self):
        return True

    def act(self, obs):
        return self.policy.act(obs)


def main() -> None:
    # num_cpus=N so N actors start on a 2-core machine (as bench/banks does).
    ray.init(num_cpus=ARGS.agents, include_dashboard=False, log_to_driver=False)
    world = marl_core.World(ARGS.agents, ARGS.seed)
    agents = [Agent.remote(world.obs_dim, i, ARGS.seed) for i in range(ARGS.agents)]
    ray.get([a.ready.remote() for a in agents])
    t0 = time.perf_counter()
    for s in range(ARGS.warmup + ARGS.steps):
        if s == ARGS.warmup:
            t0 = time.perf_counter()
        world.step(ray.get([a.act.remote(o) for a, o in zip(agents, world.observations())]))
    dt = time.perf_counter() - t0
    Path(ARGS.out).write_text(json.dumps(world.result(dt, ARGS.steps, ARGS.agents)))
    ray.shutdown()


if __name__ == "__main__":
    main()
