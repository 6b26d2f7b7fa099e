"""Experience replay: batches kept as they arrived, under a memory budget,
sampled with a seeded generator."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from .._context import Context
from .._params import param
from .._ports import Input, Output
from .._reactor import Reactor, reaction
from ._sizes import byte_size

POLICIES = ("drop-oldest", "drop-newest")


def _rows(batch: dict[str, Any]) -> int:
    return len(batch["reward"])


def _nbytes(batch: dict[str, Any]) -> int:
    return sum(v.nbytes for v in batch.values() if isinstance(v, np.ndarray))


class ReplayStorage:
    """Transitions in the batches ``RolloutWorker`` sends. A batch of at
    least ``chunk_bytes`` (or with frames) is kept whole, no copy into a
    ring: received from another federate it is read-only memory of the
    store (at or above the program's threshold, 64 KiB, the very object
    the worker wrote), so holding it holds its object. Smaller batches (they
    arrive in-band) are copied into chunks of ``chunk_bytes``, so that
    sampling gathers from a few large arrays rather than thousands of small
    ones; a chunk made in a reaction is itself a store object (numpy's
    memory handler, see the SDK's docs).

    Bounds: at most ``capacity`` transitions and ``memory`` bytes of arrays
    (a chunk counts whole from its creation; keep ``memory`` below the
    store's size, ``launch(store_memory=...)``, and its quota, so that
    workers can still send). When a batch does not fit, the ``policy`` acts
    and its losses are counted in ``losses`` (transitions, by kind):
    ``"drop-oldest"`` (default; FIFO, DQN's ring) releases the oldest
    batches or chunks (``evicted``), ``"drop-newest"`` refuses the new
    batch (``refused``). A batch larger than the whole budget is an error.

    Frame stacks: a batch with ``frames``, ``obs_idx`` and ``next_idx``
    (``RolloutWorker(frame_stack=k)``) keeps each frame once; ``sample``
    rebuilds ``obs`` and ``next_obs`` stacks (n, k, *frame) from them.

    ``sample(n)`` draws n transitions uniformly with replacement from the
    generator seeded with ``seed``, by their position in arrival order: the
    same batches added in the same order give the same samples on every
    run, however they were cut into batches (until eviction, whose unit is
    a batch or a chunk).
    """

    def __init__(self, capacity: int = 100_000, memory: int | str = "64m", seed: int = 0, policy: str = "drop-oldest", chunk_bytes: int | str = "256k") -> None:
        if policy not in POLICIES:
            raise ValueError(f"ReplayStorage: policy {policy!r} is not one of {', '.join(POLICIES)}")
        if capacity < 1:
            raise ValueError(f"ReplayStorage: capacity {capacity} must be at least 1 transition")
        self.capacity = capacity
        self.memory = byte_size(memory, "ReplayStorage memory")
        # A chunk is at most an eighth of the budget: eviction stays fine-grained.
        self.chunk_bytes = min(byte_size(chunk_bytes, "ReplayStorage chunk_bytes"), self.memory // 8)
        self.policy = policy
        self.rng = np.random.default_rng(seed)
        # (arrays, rows filled, bytes held); the last may be the open chunk.
        self.batches: deque[tuple[dict[str, np.ndarray], int, int]] = deque()
        self._open: dict[str, np.ndarray] | None = None
        self._starts: np.ndarray | None = None
        self.size = 0
        self.nbytes = 0
        self.losses = {"evicted": 0, "refused": 0}

    def __len__(self) -> int:
        return self.size

    def _chunk_rows(self, kept: dict[str, np.ndarray], n: int) -> int:
        if "frames" in kept:
            return 0
        row = max(_nbytes(kept) // max(n, 1), 1)
        rows = min(self.chunk_bytes // row, self.capacity // 8)
        return rows if n < rows else 0

    def _fits_open(self, kept: dict[str, np.ndarray], n: int) -> bool:
        if self._open is None or not self.batches or self.batches[-1][0] is not self._open:
            return False
        o, filled = self._open, self.batches[-1][1]
        if o.keys() != kept.keys() or filled + n > len(o["reward"]):
            return False
        return all(o[k].dtype == v.dtype and o[k].shape[1:] == v.shape[1:] for k, v in kept.items())

    def add(self, batch: dict[str, Any]) -> None:
        """Keeps ``batch``'s arrays (other entries, e.g. ``worker``, are
        dropped): whole, or copied into a chunk; the caller must not modify
        them."""
        kept = {k: v for k, v in batch.items() if isinstance(v, np.ndarray)}
        n, nb = _rows(kept), _nbytes(kept)
        if n > self.capacity or nb > self.memory:
            raise ValueError(
                f"ReplayStorage: a batch of {n} transitions, {nb} bytes, does not fit a buffer of {self.capacity} transitions and {self.memory} bytes; "
                "send smaller batches (fewer steps per round) or give the buffer more capacity and memory"
            )
        chunk = self._chunk_rows(kept, n)
        into_open = chunk > 0 and self._fits_open(kept, n)
        grow = 0 if into_open else (sum(v[:1].nbytes for v in kept.values()) * chunk if chunk else nb)
        while self.size + n > self.capacity or self.nbytes + grow > self.memory:
            if self.policy == "drop-newest":
                self.losses["refused"] += n
                return
            old, rows, held = self.batches.popleft()
            if old is self._open:
                self._open, into_open = None, False
                grow = sum(v[:1].nbytes for v in kept.values()) * chunk if chunk else nb
            self.size -= rows
            self.nbytes -= held
            self.losses["evicted"] += rows
        if chunk and not into_open:
            self._open = {k: np.empty((chunk, *v.shape[1:]), v.dtype) for k, v in kept.items()}
            self.batches.append((self._open, 0, grow))
            self.nbytes += grow
            into_open = True
        if into_open:
            o, filled, held = self.batches[-1]
            for k, v in kept.items():
                o[k][filled : filled + n] = v
            self.batches[-1] = (o, filled + n, held)
        else:
            self.batches.append((kept, n, nb))
            self.nbytes += nb
        self.size += n
        self._starts = None

    def sample(self, n: int) -> dict[str, np.ndarray]:
        """n transitions drawn uniformly (with replacement), as arrays with
        n rows."""
        if self.size == 0:
            raise ValueError("ReplayStorage.sample: the buffer is empty; add batches first (or wait for ReplayBuffer's start size)")
        picks = self.rng.integers(0, self.size, n)
        if self._starts is None:
            self._starts = np.cumsum([0] + [rows for _, rows, _ in self.batches])
        starts = self._starts
        which = np.searchsorted(starts, picks, side="right") - 1
        offsets = picks - starts[which]
        first = self.batches[0][0]
        out: dict[str, np.ndarray] = {}
        keys = [k for k in first if k not in ("frames", "obs_idx", "next_idx")]
        if "frames" in first:
            keys += ["obs", "next_obs"]
        for i in np.unique(which):
            b = self.batches[int(i)][0]
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

    # Its width from the argument: known without running __init__, so a
    # process that only describes the program makes no ReplayStorage.
    batches = Input(width=param("workers"))
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
        chunk_bytes: int | str = "256k",
    ) -> None:
        self.workers = workers
        self.minibatch = batch_size
        self.samples = samples
        self.start = batch_size if start is None else start
        self.storage = ReplayStorage(capacity, memory, seed, policy, chunk_bytes)

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
