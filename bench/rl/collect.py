"""What every system in the RL benchmark runs: the environments (Gymnasium,
Atari preprocessed to 80x80), the linear policy, and the collection loop
for Ray and the no-middleware floor (no hprm import: Ray's venv has none).
``Collector.collect`` does what ``hprm.rl.RolloutWorker.collect`` does, step
for step, so the systems differ only in how rounds are driven and batches
travel."""

from __future__ import annotations

import argparse

import numpy as np

GYM = ["CartPole-v1", "Pendulum-v1", "Blackjack-v1"]
ATARI = ["ALE/Pong-v5", "ALE/MsPacman-v5", "ALE/SpaceInvaders-v5"]


def parse_args(placement: bool = False, first: bool = False) -> argparse.Namespace:
    """The arguments every collection program (HPRM, Ray, the floor) takes;
    ``first``: also the first worker's seed (the floor's share of the
    workers when one floor runs per core)."""
    p = argparse.ArgumentParser()
    p.add_argument("--env", required=True)
    if placement:
        p.add_argument("--placement", choices=("threads", "processes"), required=True)
    if first:
        p.add_argument("--first", type=int, default=0)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", required=True)
    return p.parse_args()


class _Atari80:
    """An Atari game's grayscale screen, cropped to the play field and
    halved: 80x80 uint8 (the thesis's preprocessing)."""

    def __init__(self, name: str) -> None:
        import ale_py
        import gymnasium

        gymnasium.register_envs(ale_py)
        self.env = gymnasium.make(name, obs_type="grayscale", frameskip=4, repeat_action_probability=0.0)
        self.action_space = self.env.action_space

    @staticmethod
    def _frame(o: np.ndarray) -> np.ndarray:
        return o[35:195:2, ::2]

    def reset(self, seed=None):
        o, info = self.env.reset(seed=seed)
        return self._frame(o), info

    def step(self, a):
        o, r, term, trunc, info = self.env.step(a)
        return self._frame(o), r, term, trunc, info


def make_env(name: str):
    if name.startswith("ALE/"):
        return _Atari80(name)
    import gymnasium

    return gymnasium.make(name)


def initial_weights(name: str) -> dict[str, np.ndarray]:
    """The linear policy's weights (fixed: the benchmark measures collection)."""
    rng = np.random.default_rng(0)
    dims = {"CartPole-v1": (4, 2), "Pendulum-v1": (3, 1), "Blackjack-v1": (3, 2)}
    return {"W": rng.standard_normal(dims.get(name, (1, 1))).astype(np.float32)}


def policy_for(name: str):
    if name == "Pendulum-v1":
        return lambda p, obs, rng: np.clip(obs @ p["W"], -2.0, 2.0)
    if name.startswith("ALE/"):
        return None  # the action space's seeded random action
    return lambda p, obs, rng: int(np.argmax(np.asarray(obs, np.float32) @ p["W"]))


class Collector:
    """``RolloutWorker``'s loop without a reactor around it."""

    def __init__(self, env: str, seed: int, steps: int, policy=None) -> None:
        self.env = make_env(env)
        self.policy = policy or policy_for(env)
        self.rng = np.random.default_rng(seed)
        self.steps, self.round = steps, 0
        self.env.action_space.seed(seed)
        o, _ = self.env.reset(seed=seed)
        self.obs = np.asarray(o)
        self.params = None
        self.running = 0.0

    def collect(self) -> dict:
        cols: dict[str, list] = {k: [] for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated")}
        obs, returns = self.obs, []
        for _ in range(self.steps):
            a = self.env.action_space.sample() if self.policy is None else self.policy(self.params, obs, self.rng)
            nxt, r, term, trunc, _ = self.env.step(a)
            nxt = np.asarray(nxt)
            for k, v in (("obs", obs), ("action", a), ("reward", r), ("next_obs", nxt), ("terminated", term), ("truncated", trunc)):
                cols[k].append(v)
            self.running += float(r)
            if term or trunc:
                returns.append(self.running)
                self.running = 0.0
                o, _ = self.env.reset()
                obs = np.asarray(o)
            else:
                obs = nxt
        self.obs = obs
        out = {k: np.asarray(v) for k, v in cols.items()}
        out["reward"] = out["reward"].astype(np.float32)
        out["terminated"] = out["terminated"].astype(bool)
        out["truncated"] = out["truncated"].astype(bool)
        out["round"] = self.round
        out["returns"] = returns
        self.round += 1
        return out
