"""Which store object a value lies in."""

from __future__ import annotations

from typing import Any

from . import _native


def store_object_id(value: Any) -> str | None:
    """The id (hex) of the store object a numpy array, torch tensor or
    buffer lies in: one received over a port, made by ``ctx.alloc_array``,
    or made by numpy inside a reaction (``Program(store_arrays=True)``);
    None for private memory. For checking that data travels without copies
    (``hprm store list --socket S`` lists the objects)."""
    a = getattr(value, "_hprm_source", value)
    while a is not None and not hasattr(a, "object_id"):
        a = a.obj if isinstance(a, memoryview) else getattr(a, "base", None)
    if a is not None:
        oid: str = a.object_id
        return oid
    interface = getattr(value, "__array_interface__", None)
    if interface is None or not interface.get("data"):
        return None
    return _native._store_object_at(interface["data"][0], max(getattr(value, "nbytes", 1), 1))
