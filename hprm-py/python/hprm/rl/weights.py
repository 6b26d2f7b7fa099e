"""Weights broadcast: a model's parameters written once into the store as
one buffer, read zero-copy by every receiver."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._context import Context
from .._ports import Input, Output
from .._ports import _Handle as Port
from .._reactor import Reactor, reaction

_ALIGN = 64


def _as_numpy(name: str, v: Any) -> np.ndarray:
    if isinstance(v, np.ndarray):
        return v
    if type(v).__module__.startswith("torch"):
        return v.detach().cpu().numpy()
    raise TypeError(f"weights: parameter {name!r} is a {type(v).__name__}; give numpy arrays or torch tensors (a dict such as model.state_dict())")


def weights_message(ctx: Context, params: Mapping[str, Any], version: int = 0, port: Port | None = None) -> dict[str, Any]:
    """The value to send for ``params`` (name -> numpy array or CPU torch
    tensor, e.g. ``model.state_dict()``): every parameter copied once into
    one buffer allocated in the store for ``port`` (an output of the
    running reaction; its only one when omitted), each at a 64-byte
    aligned offset, with the layout to read them back (``unpack_weights``).
    Sent to a bank with ``broadcast=True`` it is one store object with one
    delivery per member."""
    arrays = {k: np.ascontiguousarray(_as_numpy(k, v)) for k, v in params.items()}
    layout, offset = [], 0
    for k, a in arrays.items():
        if a.dtype.hasobject:
            raise TypeError(f"weights: parameter {k!r} has dtype object; parameters must be numeric arrays")
        layout.append([k, a.dtype.str, list(a.shape), offset])
        offset += -(-a.nbytes // _ALIGN) * _ALIGN
    buf = ctx.alloc_array(max(offset, 1), np.uint8, port)
    for (_, _, _, off), a in zip(layout, arrays.values()):
        buf[off : off + a.nbytes] = a.reshape(-1).view(np.uint8)
    return {"version": version, "layout": layout, "data": buf}


def unpack_weights(message: Mapping[str, Any], torch: bool = False) -> dict[str, Any]:
    """The parameters of a ``weights_message``, as read-only numpy views of
    the received buffer (no copy), or torch tensors over it with
    ``torch=True`` (shared memory every receiver reads: never modify them
    in place; ``.clone()`` for a private copy)."""
    data = message["data"]
    out: dict[str, Any] = {}
    for name, dtype, shape, off in message["layout"]:
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        out[name] = np.frombuffer(data, dt, count, off).reshape(shape)
    if torch:
        import torch as _torch

        with warnings.catch_warnings():
            # The buffer is read-only shared memory; torch has no read-only tensors.
            warnings.simplefilter("ignore", UserWarning)
            out = {k: _torch.from_numpy(v) for k, v in out.items()}
    return out


def weights_digest(params: Mapping[str, Any]) -> str:
    """A SHA-256 of the parameters' names, dtypes, shapes and bytes, in
    order: equal digests mean bit-identical weights."""
    h = hashlib.sha256()
    for k, v in params.items():
        a = np.ascontiguousarray(_as_numpy(k, v))
        h.update(f"{k}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


class WeightBroadcast(Reactor):
    """Receives parameters on ``params`` (a dict of arrays or tensors, sent
    by a learner of the same federate: by reference, no copy) and sends
    them on ``weights`` as a ``weights_message`` with a version that counts
    up from 0. Connect ``weights`` to a bank with ``broadcast=True``. A
    learner may as well call ``weights_message`` itself."""

    params = Input()
    weights = Output()

    def __init__(self) -> None:
        self.version = 0

    @reaction(triggers="params", effects="weights")
    def publish(self, ctx: Context) -> None:
        ctx.set(self.weights, weights_message(ctx, ctx.get(self.params), self.version))
        self.version += 1
