"""The rollout worker: Gymnasium environments stepped by a policy, their
transitions sent in batches of numpy arrays."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._context import Context
from .._ports import Input, Output
from .._reactor import Reactor, reaction
from .weights import unpack_weights

Policy = Callable[[Any, np.ndarray, np.random.Generator], Any]
"""``policy(weights, obs, rng) -> action``: ``weights`` is the last value the
worker received (None before the first), ``rng`` the environment's own
seeded generator."""


def _make(env: Any) -> Any:
    if isinstance(env, str):
        import gymnasium

        return gymnasium.make(env)
    if callable(env):
        return env()
    raise TypeError(
        f"env: {env!r} is neither a Gymnasium environment id nor a function that makes an environment; give e.g. 'CartPole-v1' or lambda: gymnasium.make('CartPole-v1')"
    )


class RolloutWorker(Reactor):
    """Steps ``envs`` environments ``steps`` times each whenever a value
    arrives on ``weights`` (the round's weights, or any token; a
    ``weights_message`` is unpacked into its parameters), then sends
    one batch on ``batch``: a dict of arrays with one row per transition,
    environment by environment (env 0's steps, then env 1's, ...), and
    ``worker``/``round`` ints.

    Arrays: ``obs``, ``action``, ``reward`` (float32), ``next_obs``,
    ``terminated``, ``truncated`` (bool); ``returns`` lists the returns of
    the episodes that ended in the round (a list: a learning curve). With ``frame_stack=k`` (the
    environment returns single frames, e.g. an 80x80 preprocessed Atari
    screen) observations are stacks of the last k frames, and the batch
    carries each frame once: ``frames`` (F, *frame) and ``obs_idx``,
    ``next_idx`` (T, k) indices into it (``ReplayStorage`` rebuilds the
    stacks when it samples); a stack at an episode's start repeats its first
    frame.

    The environments are made (and reset with their seeds) on first use,
    not in ``__init__``: only the process that steps them makes them, even
    where ``__init__`` runs and no reaction does (a subclass whose
    reactions name a timer created in ``__init__`` is constructed in the
    process that describes the program: see "Where ``__init__`` runs" in
    docs/src/python.md).

    Determinism: environment j of this worker has seed ``seeds[j]`` (by
    default ``seed + bank_index * envs + j``), used for its resets and for
    its policy generator, so the transitions depend on the seeds and the
    weights received, not on which worker runs which environment nor on
    timing. Override ``act`` to choose actions differently (e.g. a torch
    policy), or ``collect`` to change what a round does.
    """

    weights = Input()
    batch = Output()

    def __init__(
        self,
        env: str | Callable[[], Any],
        policy: Policy | None = None,
        steps: int = 200,
        envs: int = 1,
        seed: int = 0,
        seeds: Sequence[int] | None = None,
        frame_stack: int = 1,
    ) -> None:
        if steps < 1 or envs < 1 or frame_stack < 1:
            raise ValueError(f"RolloutWorker: steps ({steps}), envs ({envs}) and frame_stack ({frame_stack}) must each be at least 1")
        if seeds is None:
            seeds = [seed + self.bank_index * envs + j for j in range(envs)]
        if len(seeds) != envs:
            raise ValueError(f"RolloutWorker: {len(seeds)} seeds for {envs} environments; give one seed per environment")
        if not (isinstance(env, str) or callable(env)):
            _make(env)  # raises the TypeError that says what to give
        self.steps = steps
        self.frame_stack = frame_stack
        self.policy = policy
        self._env, self._seeds, self._envs = env, [int(s) for s in seeds], None
        self.rngs = [np.random.default_rng(s) for s in seeds]
        self.params: Any = None
        self.round = 0
        self.obs: list[Any] = []
        self.stacks: list[list[np.ndarray]] = []
        self.returns: list[float] = []
        self._running = [0.0] * envs

    @property
    def envs(self) -> list[Any]:
        """The worker's environments, made and reset with their seeds on
        the first access (see the class's docstring)."""
        if self._envs is None:
            self._envs = [_make(self._env) for _ in self._seeds]
            for e, s in zip(self._envs, self._seeds):
                e.action_space.seed(s)
                o, _ = e.reset(seed=s)
                self.obs.append(np.asarray(o))
                self.stacks.append([np.asarray(o)] * self.frame_stack)
        return self._envs

    def act(self, j: int, obs: np.ndarray) -> Any:
        """Environment j's action for ``obs``: the policy's, or a random one
        from the action space (seeded) when there is no policy."""
        if self.policy is None:
            return self.envs[j].action_space.sample()
        return self.policy(self.params, obs, self.rngs[j])

    @reaction(triggers="weights", effects="batch")
    def on_weights(self, ctx: Context) -> None:
        value = ctx.get(self.weights)
        # A weights_message becomes its parameters, read-only views of the store.
        self.params = unpack_weights(value) if isinstance(value, dict) and "layout" in value and "data" in value else value
        ctx.set(self.batch, self.collect())

    def collect(self) -> dict[str, Any]:
        """One round: ``steps`` transitions from every environment."""
        self.returns: list[float] = []
        envs = self.envs  # made on the first round, which fills self.obs and self.stacks
        if self.frame_stack > 1:
            out = self._collect_frames()
        else:
            cols: dict[str, list[Any]] = {k: [] for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated")}
            for j, env in enumerate(envs):
                obs = self.obs[j]
                for _ in range(self.steps):
                    a = self.act(j, obs)
                    nxt, r, term, trunc, _ = env.step(a)
                    nxt = np.asarray(nxt)
                    for k, v in (("obs", obs), ("action", a), ("reward", r), ("next_obs", nxt), ("terminated", term), ("truncated", trunc)):
                        cols[k].append(v)
                    obs = self._after_step(j, nxt, r, term, trunc)
                self.obs[j] = obs
            out = {k: np.asarray(v) for k, v in cols.items()}
        out["reward"] = out["reward"].astype(np.float32)
        out["terminated"] = out["terminated"].astype(bool)
        out["truncated"] = out["truncated"].astype(bool)
        out["worker"] = self.bank_index
        out["round"] = self.round
        out["returns"] = self.returns
        self.round += 1
        return out

    def _after_step(self, j: int, nxt: np.ndarray, r: float, term: bool, trunc: bool) -> np.ndarray:
        self._running[j] += float(r)
        if term or trunc:
            self.returns.append(self._running[j])
            self._running[j] = 0.0
            o, _ = self.envs[j].reset()
            return np.asarray(o)
        return nxt

    def _collect_frames(self) -> dict[str, Any]:
        k = self.frame_stack
        frames: list[np.ndarray] = []
        cols: dict[str, list[Any]] = {c: [] for c in ("obs_idx", "action", "reward", "next_idx", "terminated", "truncated")}
        for j, env in enumerate(self.envs):
            # The stack's frames go in first; each step adds one frame.
            idx = list(range(len(frames), len(frames) + k))
            frames.extend(self.stacks[j])
            for _ in range(self.steps):
                stack = np.stack([frames[i] for i in idx])
                a = self.act(j, stack)
                nxt, r, term, trunc, _ = env.step(a)
                frames.append(np.asarray(nxt))
                nidx = idx[1:] + [len(frames) - 1]
                for c, v in (("obs_idx", idx), ("action", a), ("reward", r), ("next_idx", nidx), ("terminated", term), ("truncated", trunc)):
                    cols[c].append(v)
                o = self._after_step(j, np.asarray(nxt), r, term, trunc)
                if term or trunc:
                    frames.append(o)
                    idx = [len(frames) - 1] * k
                else:
                    idx = nidx
            self.stacks[j] = [frames[i] for i in idx]
        out: dict[str, Any] = {c: np.asarray(v) for c, v in cols.items()}
        out["obs_idx"] = out["obs_idx"].astype(np.int32)
        out["next_idx"] = out["next_idx"].astype(np.int32)
        out["frames"] = np.stack(frames)
        return out
