"""Multi-agent inference without middleware: the environment and every
agent's policy in one loop, one process (the floor).

    python marl_floor.py --agents N --steps S --warmup W --out FILE.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import marl_core  # noqa: E402

ARGS = marl_core.parse_args()


def main() -> None:
    world = marl_core.World(ARGS.agents, ARGS.seed)
    policies = [marl_core.Policy(world.obs_dim, i, ARGS.seed) for i in range(ARGS.agents)]
    t0 = time.perf_counter()
    for s in range(ARGS.warmup + ARGS.steps):
        if s == ARGS.warmup:
            t0 = time.perf_counter()
        world.step([p.act(o) for p, o in zip(policies, world.observations())])
    Path(ARGS.out).write_text(json.dumps(world.result(time.perf_counter() - t0, ARGS.steps, ARGS.agents)))


if __name__ == "__main__":
    main()
