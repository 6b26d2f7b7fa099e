"""Ports, timers and actions: what a Reactor declares and its reactions
read, set and schedule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, overload

from ._durations import Duration, duration_ns
from ._params import Param, Params

if TYPE_CHECKING:
    from typing import Self

    from . import _native
    from ._context import Context


class _Port:
    """A port declared as a class attribute of a Reactor; read on an
    instance, the port bound to it (``_BoundPort``, or ``_BoundMultiport``
    for a multiport).

    ``width``: None for a single port; for a multiport, its number of
    channels: an int, ``"bank"`` (the width of the bank the reactor is a
    member of), a constructor argument (``hprm.param("n_cameras")``), or
    the name of an attribute the reactor's ``__init__`` sets
    (``Input(width="n_cameras")``: the only width known only once
    ``__init__`` has run)."""

    def __init__(self, width: int | str | Param | None = None) -> None:
        self.name = ""
        if isinstance(width, bool) or not (width is None or isinstance(width, (int, str, Param))):
            raise TypeError(f"a port's width is an int, \"bank\", hprm.param(NAME) or the name of an attribute, not {width!r}")
        self.width = width

    @property
    def _width_needs_init(self) -> bool:
        """Whether only ``__init__`` knows this port's width (an attribute
        it sets)."""
        return isinstance(self.width, str) and self.width != "bank"

    def _width_of(self, instance: Any, params: Params) -> int | None:
        """This port's width on ``instance`` (None: a single port), whose
        arguments are ``params``."""
        w = self.width
        if w is None:
            return None
        if isinstance(w, Param):
            w = params.value(w, f"{type(instance).__name__}.{self.name}'s width")
        elif w == "bank":
            w = instance.bank_width
        elif isinstance(w, str):
            if not hasattr(instance, w):
                raise ValueError(f"{type(instance).__name__}.{self.name} takes its width from attribute {w!r}, which __init__ did not set")
            w = getattr(instance, w)
        if not isinstance(w, int) or isinstance(w, bool) or w < 1:
            raise ValueError(f"multiport {type(instance).__name__}.{self.name} has width {w!r}; a multiport needs at least one channel")
        return w

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Self: ...
    @overload
    def __get__(self, instance: object, owner: type | None = None) -> Any: ...
    def __get__(self, instance: object | None, owner: type | None = None) -> Self | Any:
        if instance is None:
            return self
        return instance.__dict__["_hprm_bound"][self.name]


class Input(_Port):
    """An input port. In a reaction, ``self.port.value`` is its value at the
    current tag (None when absent) and ``self.port.is_present`` says whether
    it has one. ``Input(width=N)`` is a multiport: ``self.port[i]`` is
    channel ``i``, and ``ctx.get(self.port)`` the values of the present
    channels in channel order."""


class Output(_Port):
    """An output port: ``ctx.set(self.port, value)`` or ``self.port.set(value)``.
    ``Output(width=N)`` is a multiport: ``self.port[i].set(value)``.

    ``backpressure``: what a send does when the store has no room for the
    value or a receiver falls behind. ``"block"`` (the default) waits up to
    1 s for space (``"block:250ms"``: another bound), then fails;
    ``"keep-last-N"`` lets each receiver keep only the newest N messages
    waiting to be processed; ``"fail"`` fails at once. Whatever is given up
    is counted in the federates' losses (``hprm ps``, the exit summary)."""

    def __init__(self, backpressure: str | None = None, width: int | str | Param | None = None) -> None:
        super().__init__(width)
        self.backpressure = backpressure


def _ns(d: Duration | Param) -> int:
    """A declared duration in ns; 0 for a parameter, which ``_bind``
    resolves for each reactor."""
    return 0 if isinstance(d, Param) else duration_ns(d)


def _resolved(d: Duration | Param, params: Params, what: str) -> Duration:
    return params.value(d, what) if isinstance(d, Param) else d


class Timer:
    """A timer: fires at start + offset, then every period (once when the
    period is zero). Declare it as a class attribute (``tick =
    Timer(period="10ms")``, or ``Timer(period=hprm.param("period"))`` for
    a constructor argument): then the program knows it without running
    ``__init__``; or create it in ``__init__`` (``self.tick =
    Timer(period=period)``)."""

    def __init__(self, offset: Duration | Param = 0, period: Duration | Param = 0) -> None:
        self._given = (offset, period)
        self.offset_ns = _ns(offset)
        self.period_ns = _ns(period)
        self._index: int | None = None

    def _bind(self, params: Params, what: str) -> Timer:
        """This timer for one reactor (its own object: the runtime's index
        is per reactor), its parameters resolved; ``what`` names it in
        errors."""
        offset, period = self._given
        return Timer(_resolved(offset, params, f"{what}'s offset"), _resolved(period, params, f"{what}'s period"))


class _Present:
    """Reading a port or action of the reactor `_owner` in a reaction."""

    _owner: Any = None
    _index: int | None = None

    @property
    def value(self) -> Any:
        """The value at the current tag, None when absent."""
        return _current(self._owner).get(self)

    @property
    def is_present(self) -> bool:
        return _current(self._owner).is_present(self)


class _Action(_Present):
    def __init__(self, min_delay: Duration | Param = 0) -> None:
        self._given = min_delay
        self.min_delay_ns = _ns(min_delay)
        self._index: int | None = None
        self._owner: Any = None

    def _bind(self, params: Params, what: str) -> Self:
        """This action for one reactor, as ``Timer._bind``."""
        return type(self)(_resolved(self._given, params, f"{what}'s min delay"))


class LogicalAction(_Action):
    """A logical action: ``self.act.schedule(value, delay)`` in a reaction
    that declares it as an effect; it triggers at the current tag + its min
    delay + delay (one microstep later when both are zero)."""

    def schedule(self, value: Any = None, delay: Duration = 0) -> None:
        _current(self._owner).schedule(self, value, delay)


class PhysicalAction(_Action):
    """A physical action: ``self.act.schedule(value)`` from any thread (a
    sensor callback), once the program has started (from the first reaction
    of its reactor on, e.g. a startup reaction); its tag comes from physical
    time."""

    def __init__(self, min_delay: Duration | Param = 0) -> None:
        super().__init__(min_delay)
        self._scheduler: _native.PhysicalScheduler | None = None

    def schedule(self, value: Any = None, delay: Duration = 0) -> None:
        if self._scheduler is None:
            raise RuntimeError("a physical action can be scheduled once its reactor has run a reaction (e.g. a startup reaction)")
        self._scheduler.schedule(value, duration_ns(delay))


class _BoundPort(_Present):
    """A port of one reactor instance (``self.port`` in a reaction):
    ``.value``, ``.is_present``, ``.set(value)``."""

    def __init__(self, owner: Any, index: int, name: str) -> None:
        self._owner = owner
        self._index = index
        self.name = name

    def set(self, value: Any) -> None:
        _current(self._owner).set(self, value)


class _BoundMultiport:
    """A multiport of one reactor instance (``self.frames`` in a reaction):
    its channels (``self.frames[i]``, each a ``_BoundPort``) in order."""

    def __init__(self, channels: list[_BoundPort], name: str) -> None:
        self.channels = channels
        self.name = name

    def __len__(self) -> int:
        return len(self.channels)

    def __getitem__(self, i: int) -> _BoundPort:
        return self.channels[i]

    def __iter__(self) -> Any:
        return iter(self.channels)

    @property
    def width(self) -> int:
        return len(self.channels)

    @property
    def value(self) -> list[Any]:
        """The values of the present channels, in channel order."""
        return [c.value for c in self.channels if c.is_present]

    @property
    def is_present(self) -> bool:
        """Whether any channel is present."""
        return any(c.is_present for c in self.channels)


class _OutputRef:
    """An output by its index (a reaction's only output, for alloc_array)."""

    __slots__ = ("_index",)

    def __init__(self, index: int) -> None:
        self._index = index


_Handle: TypeAlias = _Present | Timer | _OutputRef | _BoundMultiport
"""What a Context reads, sets or schedules: a reactor's port
(``self.port``), timer or action."""


def _current(owner: Any) -> Context:
    ctx: Context | None = owner.__dict__.get("_hprm_ctx") if owner is not None else None
    if ctx is None:
        raise RuntimeError("ports and actions are read and set only inside a reaction")
    return ctx


def _index(x: object) -> int:
    i: int | None = getattr(x, "_index", None)
    if i is None:
        raise TypeError(f"{x!r} is not a port or action of a reactor in a program")
    return i
