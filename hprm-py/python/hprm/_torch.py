"""torch tensors as buffers (ext 6 of the wire format).

The codec calls ``to_numpy`` for objects of torch's own types: a tensor
travels as the numpy array over its memory (out-of-band, in the store, when
large), with an extension type that tells a Python receiver to give back a
tensor. ``from_numpy`` builds that tensor over the received array without
copying it, so a received tensor lies in the store's shared memory.

- Tensors on another device (CUDA, MPS) are copied to the CPU first: the
  receiver gets a CPU tensor.
- Gradients do not travel: the tensor is detached (``requires_grad`` is
  False on arrival).
- Dtypes numpy lacks (bfloat16, float8, complex32, quantized tensors) and
  sparse or nested tensors are not buffers: ``to_numpy`` returns None and the
  codec pickles the tensor (torch supports it), one copy, in-band.
- torch has no read-only tensors: a tensor received over the store can be
  written in place, which would change the memory every receiver of the
  message shares. Decode with ``copy=True`` or call ``.clone()`` for a tensor
  of your own.
"""

from __future__ import annotations

import warnings
from typing import Any

# The attribute of a received tensor holding the array it was built over:
# keeps the store reference with the tensor, and lets the codec send the
# tensor on by reference (the same store object) while it still views that
# array whole.
SOURCE = "_hprm_source"

_numpy_dtypes: Any = None


def _convertible() -> Any:
    """The torch dtypes whose tensors ``Tensor.numpy()`` converts."""
    global _numpy_dtypes
    if _numpy_dtypes is None:
        import torch

        names = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64", "complex128", "uint16", "uint32", "uint64")
        # uint16/32/64 exist from torch 2.3 on.
        _numpy_dtypes = frozenset(getattr(torch, name) for name in names if hasattr(torch, name))
    return _numpy_dtypes


def to_numpy(obj: Any) -> Any:
    """A numpy array viewing a CPU tensor's memory (a CPU copy for other
    devices), or None for anything that is not a tensor numpy can hold."""
    import torch

    if not isinstance(obj, torch.Tensor):
        return None
    if obj.layout != torch.strided or obj.is_quantized or obj.is_nested or obj.is_meta or obj.dtype not in _convertible():
        return None
    source = getattr(obj, SOURCE, None)
    t = obj.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    # Lazy conjugation and negation are flags numpy cannot express: applied
    # here (a copy, only for such views).
    t = t.resolve_conj().resolve_neg()
    try:
        array = t.numpy()
    except (TypeError, RuntimeError):
        # A dtype or tensor kind this torch's numpy bridge refuses: pickled.
        return None
    if (
        source is not None
        and source.shape == array.shape
        and source.dtype == array.dtype
        and array.flags.c_contiguous
        and source.__array_interface__["data"][0] == array.__array_interface__["data"][0]
    ):
        # Still exactly the received array: sent on by reference.
        return source
    return array


def from_numpy(array: Any) -> Any:
    """A tensor over ``array``'s memory (no copy); the array itself when
    torch cannot be imported here or cannot hold its dtype."""
    try:
        import torch
    except ImportError:
        return array
    if not array.dtype.isnative:
        # Never written by HPRM's senders (they send native order); kept
        # readable rather than refused.
        array = array.astype(array.dtype.newbyteorder("="))
    with warnings.catch_warnings():
        # A stored array is read-only, which torch warns about: the module
        # docs say why receivers must not write to it.
        warnings.filterwarnings("ignore", message=".*not writable.*", category=UserWarning)
        try:
            tensor = torch.from_numpy(array)
        except TypeError:
            return array
    setattr(tensor, SOURCE, array)
    return tensor
