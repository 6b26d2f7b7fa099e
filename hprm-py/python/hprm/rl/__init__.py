"""Building blocks for parallel reinforcement learning on HPRM: reactors
a program connects like any other, not a framework. Algorithms (DQN, PPO)
stay in user code (``examples/rl/``).

- ``RolloutWorker``: steps Gymnasium environments with a policy (a
  function, or weights it receives) and sends batches of transitions as
  numpy arrays; a bank of them is a pool of actors.
- ``ReplayBuffer`` (and its storage, ``ReplayStorage``): keeps the batches
  as they arrived (large ones are the store objects the workers wrote) under
  a memory budget with a loss policy whose losses are counted, samples with a
  seeded generator, and keeps stacked frames once (``frame_stack``).
- ``WeightBroadcast`` (and ``weights_message``/``unpack_weights``):
  parameters written once into the store, read zero-copy by every worker.
- ``BatchSizeController``: a batch size that follows a reaction's deadline
  slack (``ctx.slack``), bounded by a memory budget.

Install with the extra ``pip install 'hprm[rl]'`` (gymnasium). Every class
is meant to be subclassed or replaced: they only use the public SDK.
"""

from __future__ import annotations

from .deadline import BatchSizeController
from .replay import ReplayBuffer, ReplayStorage
from .rollout import RolloutWorker
from .weights import WeightBroadcast, unpack_weights, weights_digest, weights_message

__all__ = [
    "BatchSizeController",
    "ReplayBuffer",
    "ReplayStorage",
    "RolloutWorker",
    "WeightBroadcast",
    "unpack_weights",
    "weights_digest",
    "weights_message",
]
