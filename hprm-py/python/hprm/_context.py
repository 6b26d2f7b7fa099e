"""What a reaction sees: its Context, valid during the reaction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._durations import Duration, Tag, duration_ns
from ._ports import _BoundMultiport, _Handle, _index, _OutputRef

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from . import _native


class Context:
    """What a reaction sees at its tag (valid only during the reaction)."""

    def __init__(self, native: _native.Context, default_output: _OutputRef | None = None, instance: Any = None, deadline_ns: int | None = None) -> None:
        self._n = native
        self._default_output = default_output
        self._instance = instance
        self._deadline_ns = deadline_ns

    @property
    def bank_index(self) -> int:
        """This reactor's index in its bank (0 outside a bank)."""
        return int(getattr(self._instance, "bank_index", 0))

    @property
    def bank_width(self) -> int:
        """The width of this reactor's bank (1 outside a bank)."""
        return int(getattr(self._instance, "bank_width", 1))

    @property
    def tag(self) -> Tag:
        return Tag(*self._n.tag())

    @property
    def logical_time(self) -> int:
        """Logical time now, ns since the epoch."""
        return self._n.tag()[0]

    @property
    def physical_time(self) -> int:
        return self._n.physical_time()

    @property
    def start_time(self) -> int:
        return self._n.start_time()

    @property
    def elapsed(self) -> int:
        """Logical time since the start, ns."""
        return self._n.tag()[0] - self._n.start_time()

    @property
    def deadline(self) -> int | None:
        """The running reaction's deadline, ns (None when it has none)."""
        return self._deadline_ns

    @property
    def slack(self) -> int | None:
        """How long before the reaction's deadline it is now, ns: the tag's
        time + the deadline - physical time, the quantity the runtime
        checks before it runs the body (it runs the deadline handler when
        this is negative). Read at the end of the body, it is how early the
        reaction finished, or, negative, by how much it ran past its
        deadline. None for a reaction without a deadline."""
        if self._deadline_ns is None:
            return None
        return self._n.tag()[0] + self._deadline_ns - self._n.physical_time()

    @property
    def federate(self) -> str:
        return self._n.federate()

    def get(self, port: _Handle) -> Any:
        """The value of an input or action at this tag (None when absent);
        for a multiport, the values of its present channels in channel
        order (the same on every run, whatever order they arrived in)."""
        if isinstance(port, _BoundMultiport):
            return [self._n.get(_index(c)) for c in port.channels if self._n.is_present(_index(c))]
        return self._n.get(_index(port))

    def is_present(self, port: _Handle) -> bool:
        """Whether a port, timer or action is present (a multiport: any channel)."""
        if isinstance(port, _BoundMultiport):
            return any(self._n.is_present(_index(c)) for c in port.channels)
        return self._n.is_present(_index(port))

    def set(self, port: _Handle, value: Any) -> None:
        """Sets an output; a multiport output takes a list, one value per
        channel (None leaves a channel absent)."""
        if isinstance(port, _BoundMultiport):
            values = list(value)
            if len(values) != port.width:
                raise ValueError(f"multiport {port.name} has width {port.width}, but set got {len(values)} values")
            for c, v in zip(port.channels, values):
                if v is not None:
                    self._n.set(_index(c), v)
            return
        self._n.set(_index(port), value)

    def schedule(self, action: _Handle, value: Any = None, delay: Duration = 0) -> None:
        self._n.schedule(_index(action), value, duration_ns(delay))

    def request_stop(self) -> None:
        """Stops the program at the next microstep, at one tag for all federates."""
        self._n.request_stop()

    def intended_tag(self, port: _Handle) -> Tag | None:
        t = self._n.intended_tag(_index(port))
        return None if t is None else Tag(*t)

    def alloc_array(self, shape: int | Sequence[int], dtype: npt.DTypeLike, port: _Handle | None = None) -> np.ndarray:
        """A writable numpy array allocated straight in the object store, to
        fill and send on ``port`` (an output this reaction declares as an
        effect; the reaction's only one when omitted): sending it costs no
        copy, its store object travels by reference. Do not write to it after
        sending it. Without a store (a one-process program) it is a plain
        array."""
        import numpy as np

        dt = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if port is None:
            port = self._default_output
        if port is None or dt.hasobject or dt.fields is not None:
            return np.empty(shape, dt)
        try:
            view: Any = self._n.loan(_index(port), dt.str, list(shape))
        except RuntimeError:
            # No store configured (a program run in one process): nothing to share.
            return np.empty(shape, dt)
        array: np.ndarray = np.frombuffer(view, dtype=dt).reshape(shape)
        return array


def _invoker(fn: Callable[[Any, Context], Any], instance: Any, outputs: list[int], deadline_ns: int | None = None) -> Callable[[Any, Any], None]:
    default_output = _OutputRef(outputs[0]) if len(outputs) == 1 else None

    def invoke(_state: Any, native_ctx: Any) -> None:
        for a in instance.__dict__.get("_hprm_physical", []):
            if a._scheduler is None:
                a._scheduler = native_ctx.physical_scheduler(a._index)
        ctx = Context(native_ctx, default_output, instance, deadline_ns)
        instance.__dict__["_hprm_ctx"] = ctx
        try:
            fn(instance, ctx)
        finally:
            instance.__dict__["_hprm_ctx"] = None

    return invoke
