"""What every system in the multi-agent inference benchmark runs: the
environment (ma-gym's TrafficJunction, ported in ``traffic_junction.py``:
N cars, one agent each, cross a 4-way junction), each agent's own policy (a
seeded two-layer MLP, numpy), and the world's bookkeeping (no hprm import:
Ray's venv has none).

A step: the environment hands every agent its observation, each agent's
policy picks its action, the environment steps with all N actions. The
systems differ only in where the policies run and how observations and
actions travel; the trajectory is the same in all of them (the actions'
digest proves it), since the environment and every policy are seeded.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np

HIDDEN = 64
ACTIONS = 2  # gas, brake


def parse_args(placement: bool = False) -> argparse.Namespace:
    """The arguments every multi-agent program (HPRM, Ray, the floor) takes."""
    p = argparse.ArgumentParser()
    if placement:
        p.add_argument("--placement", choices=("threads", "processes"), required=True)
    p.add_argument("--agents", type=int, default=4)
    p.add_argument("--steps", type=int, default=2000, help="timed environment steps")
    p.add_argument("--warmup", type=int, default=100, help="steps before the timing starts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    return p.parse_args()


class Policy:
    """Agent ``index``'s policy: obs -> 64 -> 64 -> 5 logits (tanh), the
    argmax is the action. Its weights depend only on (seed, index)."""

    def __init__(self, obs_dim: int, index: int, seed: int = 0) -> None:
        rng = np.random.default_rng([seed, index])
        self.w1 = rng.standard_normal((obs_dim, HIDDEN)).astype(np.float32) / np.sqrt(obs_dim)
        self.w2 = rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32) / np.sqrt(HIDDEN)
        self.w3 = rng.standard_normal((HIDDEN, ACTIONS)).astype(np.float32) / np.sqrt(HIDDEN)

    def act(self, obs: np.ndarray) -> int:
        h = np.tanh(obs @ self.w1)
        h = np.tanh(h @ self.w2)
        return int(np.argmax(h @ self.w3))


class World:
    """The environment with its episode bookkeeping: ``observations()`` for
    the current step (one array per agent, agent order), ``step(actions)``
    with one action per agent (restarting the episode when every car is done;
    the environment's generator runs on), and a running digest of every action taken."""

    def __init__(self, agents: int, seed: int = 0) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from traffic_junction import TrafficJunction

        self.env = TrafficJunction(n_max=agents, seed=seed)
        self.agents = agents
        self.episodes, self.steps, self.reward, self.collisions = 0, 0, 0.0, 0
        self.digest = hashlib.sha256()
        self._obs = self.env.reset()

    @property
    def obs_dim(self) -> int:
        return self.env.obs_dim

    def observations(self) -> list[np.ndarray]:
        return self._obs

    def step(self, actions: list[int]) -> None:
        self.digest.update(bytes(actions))
        obs, rewards, done, collisions = self.env.step(actions)
        self.steps += 1
        self.reward += sum(rewards)
        self.collisions += collisions
        if all(done):
            self.episodes += 1
            obs = self.env.reset()
        self._obs = obs

    def result(self, seconds: float, timed_steps: int, agents: int) -> dict:
        return {
            "agents": agents,
            "steps": timed_steps,
            "seconds": seconds,
            "rate": timed_steps / seconds,
            "inferences_per_s": timed_steps * agents / seconds,
            "digest": self.digest.hexdigest(),
            "reward": round(self.reward, 6),
            "collisions": self.collisions,
            "episodes": self.episodes,
        }
