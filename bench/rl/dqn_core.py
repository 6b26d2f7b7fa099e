"""Synchronized parallel DQN on Blackjack-v1, the algorithm both systems
run (no hprm import: Ray's venv has none): a numpy MLP Q-network, its
epsilon-greedy policy, a minibatch update with a target network, and a
replay sampled exactly as ``hprm.rl.ReplayStorage`` samples, so that with
the same seeds both systems train the same weights (their learning curves
agree)."""

from __future__ import annotations

import argparse

import numpy as np

HIDDEN = 64
GAMMA = 1.0  # episodic, a few steps long
LR = 0.01
EPSILON = 0.1
TARGET_EVERY = 50



def parse_args(placement: bool = False) -> argparse.Namespace:
    """The arguments both DQN programs (HPRM, Ray) take."""
    p = argparse.ArgumentParser()
    if placement:
        p.add_argument("--placement", choices=("threads", "processes"), required=True)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--updates", type=int, default=400)
    p.add_argument("--per-round", type=int, default=4)
    p.add_argument("--out", required=True)
    return p.parse_args()


def features(obs: np.ndarray) -> np.ndarray:
    """Blackjack's (player sum, dealer card, usable ace), scaled to about [0, 1]."""
    o = np.asarray(obs, np.float32).reshape(-1, 3)
    return o * np.array([1 / 32, 1 / 10, 1], np.float32)


def init_params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((3, HIDDEN)) * np.sqrt(2 / 3)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (rng.standard_normal((HIDDEN, 2)) * np.sqrt(1 / HIDDEN)).astype(np.float32),
        "b2": np.zeros(2, np.float32),
    }


def q_values(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ p["w1"] + p["b1"], 0) @ p["w2"] + p["b2"]


def policy(p, obs, rng) -> int:
    """Epsilon-greedy on the Q-network (random before any weights)."""
    if p is None or rng.random() < EPSILON:
        return int(rng.integers(2))
    return int(np.argmax(q_values(p, features(obs))[0]))


class Learner:
    """Q-learning with a target network, plain SGD on the squared TD error."""

    def __init__(self, seed: int = 0) -> None:
        self.params = init_params(seed)
        self.target = {k: v.copy() for k, v in self.params.items()}
        self.updates = 0

    def update(self, s: dict[str, np.ndarray]) -> None:
        p = self.params
        x, xn = features(s["obs"]), features(s["next_obs"])
        n = len(x)
        h = np.maximum(x @ p["w1"] + p["b1"], 0)
        q = h @ p["w2"] + p["b2"]
        target = s["reward"] + GAMMA * (~s["terminated"]) * q_values(self.target, xn).max(axis=1)
        a = s["action"].astype(np.int64)
        dq = np.zeros_like(q)
        dq[np.arange(n), a] = (q[np.arange(n), a] - target) / n
        dh = (dq @ p["w2"].T) * (h > 0)
        grads = {"w2": h.T @ dq, "b2": dq.sum(0), "w1": x.T @ dh, "b1": dh.sum(0)}
        self.params = {k: (v - LR * grads[k]).astype(np.float32) for k, v in p.items()}
        self.updates += 1
        if self.updates % TARGET_EVERY == 0:
            self.target = {k: v.copy() for k, v in self.params.items()}


class Replay:
    """``hprm.rl.ReplayStorage``'s sampling for Ray's driver: transitions
    appended to chunks of 4096 rows (one copy, as ReplayStorage copies small
    batches), picked uniformly by arrival position from a seeded generator.
    Without eviction (the benchmark stays under capacity) the picks, and so
    the weights, are the same as HPRM's."""

    CHUNK = 4096

    def __init__(self, capacity: int, seed: int) -> None:
        self.capacity, self.rng, self.chunks, self.size = capacity, np.random.default_rng(seed), [], 0

    def add(self, b: dict) -> None:
        kept = {k: v for k, v in b.items() if isinstance(v, np.ndarray)}
        n = len(kept["reward"])
        if self.size + n > self.capacity:
            raise ValueError("the benchmark's replay must stay under its capacity (no eviction)")
        if not self.chunks or self.chunks[-1][1] + n > self.CHUNK:
            self.chunks.append([{k: np.empty((self.CHUNK, *v.shape[1:]), v.dtype) for k, v in kept.items()}, 0])
        c = self.chunks[-1]
        for k, v in kept.items():
            c[0][k][c[1] : c[1] + n] = v
        c[1] += n
        self.size += n

    def sample(self, n: int) -> dict[str, np.ndarray]:
        picks = self.rng.integers(0, self.size, n)
        starts = np.cumsum([0] + [rows for _, rows in self.chunks])
        which = np.searchsorted(starts, picks, side="right") - 1
        offsets = picks - starts[which]
        out: dict[str, np.ndarray] = {}
        for i in np.unique(which):
            b, mask = self.chunks[int(i)][0], which == i
            for k, v in b.items():
                if k not in out:
                    out[k] = np.empty((n, *v.shape[1:]), v.dtype)
                out[k][mask] = v[offsets[mask]]
        return out
