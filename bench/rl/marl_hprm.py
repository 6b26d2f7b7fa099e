"""Multi-agent inference with HPRM: one policy reactor per agent, a bank
(``placement`` threads: one federate holding the N agents; processes: one
federate per agent), and the world as a reactor that sends each agent its
observation on a multiport and steps when every action is in.

    python marl_hprm.py --placement threads|processes --agents N --steps S --warmup W --out FILE.json

Centralized coordination: each step's actions arrive at one tag, so the
world steps with all of them, in agent order, whatever order they came in.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import marl_core  # noqa: E402

import hprm  # noqa: E402

ARGS = marl_core.parse_args(placement=True)


class World(hprm.Reactor):
    obs = hprm.Output(width=hprm.param("agents"))
    actions = hprm.Input(width=hprm.param("agents"))

    def __init__(self, agents):
        self.agents = agents
        self.world = marl_core.World(agents, ARGS.seed)
        self.t0 = 0.0

    @hprm.reaction(triggers="startup", effects="obs")
    def start(self, ctx):
        ctx.set(self.obs, self.world.observations())

    @hprm.reaction(triggers="actions", effects="obs")
    def step(self, ctx):
        got = ctx.get(self.actions)
        assert len(got) == self.agents, f"{len(got)} actions for {self.agents} agents"
        self.world.step(got)
        if self.world.steps == ARGS.warmup:
            self.t0 = time.perf_counter()
        if self.world.steps == ARGS.warmup + ARGS.steps:
            Path(ARGS.out).write_text(json.dumps(self.world.result(time.perf_counter() - self.t0, ARGS.steps, self.agents)))
            ctx.request_stop()
            return
        ctx.set(self.obs, self.world.observations())


class Agent(hprm.Reactor):
    """Agent ``bank_index``'s policy, as Ray's actor of that index holds it."""

    obs = hprm.Input()
    action = hprm.Output()

    def __init__(self, obs_dim):
        self.policy = marl_core.Policy(obs_dim, self.bank_index, ARGS.seed)

    @hprm.reaction(triggers="obs", effects="action")
    def act(self, ctx):
        ctx.set(self.action, self.policy.act(ctx.get(self.obs)))


prog = hprm.Program(f"marl-{ARGS.placement}", coordination="centralized")
world = prog.federate("world", World, ARGS.agents)
agents = prog.bank("agent", Agent, ARGS.agents, placement=ARGS.placement, obs_dim=marl_core.World(ARGS.agents).obs_dim)
prog.connect(world.obs, agents.obs)
prog.connect(agents.action, world.actions, after="0ms")

if __name__ == "__main__":
    prog.launch(fast=True)
