"""Experience replay: batches kept as they arrived, under a memory budget,
sampled with a seeded generator."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from .._context import Context
from .._ports import Input, Output
from .._reactor import Reactor, reaction
from ._sizes import byte_size

POLICIES = ("drop-oldest", "drop-newest")


def _rows(batch: dict[str, Any]) -> int:
    return len(batch["reward"])


def _nbytes(batch: dict[str, Any]) -> int:
    return sum(v.nbytes for v in batch.values() if isinstance(v, np.ndarray))


class ReplayStorage:
    """Transitions in the batches ``RolloutWorker`` sends, kept whole: no
    copy into a ring. A batch received from another federate is read-only
    memory of the store (at or above the program's threshold, 64 KiB, it is
    the very object the worker wrote; smaller ones arrive in-band), so the
    buffer's memory is the store's, and holding a batch holds its object.

    Bounds: at most ``capacity`` transitions and ``memory`` bytes of arrays
    (keep it below the store's size, ``launch(store_memory=...)``, and its
    quota, so that workers can still send). When a batch does not fit, the
    ``policy`` acts and its losses are counted in ``losses`` (transitions, by
    kind): ``"drop-oldest"`` (default; FIFO, DQN's ring) releases the
    oldest batches (``evicted``), ``"drop-newest"`` refuses the new one
    (``refused``). A batch larger than the whole budget is an error.

    Frame stacks: a batch with ``frames``, ``obs_idx`` and ``next_idx``
    (``RolloutWorker(frame_stack=k)``) keeps each frame once; ``sample``
    rebuilds ``obs`` and ``next_obs`` stacks (n, k, *frame) from them.

    ``sample(n)`` draws n transitions uniformly with replacement from the
    generator seeded with ``seed``: the same batches added in the same order
    give the same samples on every run.
    """

    def __init__(self, capacity: int = 100_000, memory: int | str = "64m", seed: int = 0, policy: str = "drop-oldest") -> None:
        if policy not in POLICIES:
            raise ValueError(f"ReplayStorage: policy {policy!r} is not one of {', '.join(POLICIES)}")
        if capacity < 1:
            raise ValueError(f"ReplayStorage: capacity {capacity} must be at least 1 transition")
        self.capacity = capacity
        self.memory = byte_size(memory, "ReplayStorage memory")
        self.policy = policy
        self.rng = np.random.default_rng(seed)
        self.batches: deque[dict[str, np.ndarray]] = deque()
        self.size = 0
        self.nbytes = 0
        self.losses = {"evicted": 0, "refused": 0}

    def __len__(self) -> int:
        return self.size

    def add(self, batch: dict[str, Any]) -> None:
        """Keeps ``batch``'s arrays (other entries, e.g. ``worker``, are
        dropped) as they are: the caller must not modify them."""
        kept = {k: v for k, v in batch.items() if isinstance(v, np.ndarray)}
        n, nb = _rows(kept), _nbytes(kept)
        if n > self.capacity or nb > self.memory:
            raise ValueError(
                f"ReplayStorage: a batch of {n} transitions, {nb} bytes, does not fit a buffer of {self.capacity} transitions and {self.memory} bytes; "
                "send smaller batches (fewer steps per round) or give the buffer more capacity and memory"
            )
        while self.size + n > self.capacity or self.nbytes + nb > self.memory:
            if self.policy == "drop-newest":
                self.losses["refused"] += n
                return
            old = self.batches.popleft()
            self.size -= _rows(old)
            self.nbytes -= _nbytes(old)
            self.losses["evicted"] += _rows(old)
        self.batches.append(kept)
        self.size += n
        self.nbytes += nb

    def sample(self, n: int) -> dict[str, np.ndarray]:
        """n transitions drawn uniformly (with replacement), as arrays with
        n rows."""
        if self.size == 0:
            raise ValueError("ReplayStorage.sample: the buffer is empty; add batches first (or wait for ReplayBuffer's start size)")
        picks = self.rng.integers(0, self.size, n)
        starts = np.cumsum([0] + [_rows(b) for b in self.batches])
        which = np.searchsorted(starts, picks, side="right") - 1
        offsets = picks - starts[which]
        first = self.batches[0]
        out: dict[str, np.ndarray] = {}
        keys = [k for k in first if k not in ("frames", "obs_idx", "next_idx")]
        if "frames" in first:
            keys += ["obs", "next_obs"]
        for i in np.unique(which):
            b = self.batches[int(i)]
            mask = which == i
            rows = offsets[mask]
            for k in keys:
                if k in ("obs", "next_obs") and "frames" in b:
                    v = b["frames"][b["obs_idx" if k == "obs" else "next_idx"][rows]]
                else:
                    v = b[k][rows]
                if k not in out:
                    out[k] = np.empty((n, *v.shape[1:]), v.dtype)
                out[k][mask] = v
        return out


class ReplayBuffer(Reactor):
    """A reactor around ``ReplayStorage``: ``batches`` (one channel per
    worker, ``workers`` wide) are added in channel order, so the same on
    every run whatever order they arrived in; then, once it holds ``start``
    transitions, it sends ``samples`` minibatches of ``batch_size`` on
    ``sample``, as ``{"samples": [dict, ...], "size": n, "losses": {...},
    "returns": [...]}`` (``returns``: the batches' episode returns, in
    channel order)
    (an empty list before ``start``, so a synchronous learner still gets
    its turn). A value on ``batch_size`` changes the minibatch size from
    that tag on (``BatchSizeController``).
    """

    batches = Input(width="workers")
    batch_size = Input()
    sample = Output()

    def __init__(
        self,
        workers: int,
        batch_size: int = 64,
        samples: int = 1,
        start: int | None = None,
        capacity: int = 100_000,
        memory: int | str = "64m",
        seed: int = 0,
        policy: str = "drop-oldest",
    ) -> None:
        self.workers = workers
        self.minibatch = batch_size
        self.samples = samples
        self.start = batch_size if start is None else start
        self.storage = ReplayStorage(capacity, memory, seed, policy)

    @reaction(triggers="batch_size")
    def resize(self, ctx: Context) -> None:
        self.minibatch = int(ctx.get(self.batch_size))

    @reaction(triggers="batches", effects="sample")
    def on_batches(self, ctx: Context) -> None:
        returns: list[float] = []
        for b in ctx.get(self.batches):
            self.storage.add(b)
            returns.extend(b.get("returns", ()))
        ready = len(self.storage) >= self.start
        samples = [self.storage.sample(self.minibatch) for _ in range(self.samples)] if ready else []
        ctx.set(self.sample, {"samples": samples, "size": len(self.storage), "losses": dict(self.storage.losses), "returns": returns})
