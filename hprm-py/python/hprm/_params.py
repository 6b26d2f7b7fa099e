"""Parameters: a reactor's constructor arguments, named in its class's
declarations (``Input(width=hprm.param("n"))``,
``Timer(period=hprm.param("period"))``), so that what they declare is known
from the class and the arguments the program passes, without running
``__init__`` (LF's reactor parameters: ``input[n] frames``)."""

from __future__ import annotations

import inspect
from typing import Any


class Param:
    """A constructor argument of the reactor, by name: what ``param``
    returns."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"hprm.param takes the name of a parameter of the reactor's __init__, not {name!r}")
        self.name = name

    def __repr__(self) -> str:
        return f"hprm.param({self.name!r})"


def param(name: str) -> Param:
    """The value of the reactor's constructor argument ``name`` (given by
    the program, else its default), for a declaration in the class: a
    multiport's width (``frames = hprm.Input(width=hprm.param("n"))``), a
    class-level timer's offset or period, an action's min delay. What is
    declared so is known without running ``__init__``: a process that only
    describes the program (or runs another federate) does not construct the
    reactor."""
    return Param(name)


class Params:
    """The arguments one reactor is constructed with, by parameter name, as
    its ``__init__`` receives them (defaults applied; a ``**kwargs``
    parameter's entries by their own names). Bound on first use: a reactor
    that names no parameter and is constructed at once never needs it
    (its ``__init__`` reports arguments that do not fit)."""

    def __init__(self, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._cls = cls
        self._args = args
        self._kwargs = kwargs
        self._values: dict[str, Any] | None = None

    def check(self) -> None:
        """Raises the TypeError that ``__init__`` would raise for arguments
        that do not fit its signature (a reactor not constructed yet must
        still be refused where the program declares it)."""
        self._bound()

    def _bound(self) -> dict[str, Any]:
        if self._values is None:
            try:
                sig = inspect.signature(self._cls)
            except (TypeError, ValueError):
                # No signature to read (a C-level __init__): nothing is
                # known by name, and only __init__ can say what fits.
                self._values = {}
                return self._values
            try:
                bound = sig.bind(*self._args, **self._kwargs)
            except TypeError as e:
                raise TypeError(f"{self._cls.__name__}(): {e}") from None
            bound.apply_defaults()
            values: dict[str, Any] = {}
            for name, p in sig.parameters.items():
                if p.kind is inspect.Parameter.VAR_KEYWORD:
                    values.update(bound.arguments.get(name, {}))
                elif p.kind is not inspect.Parameter.VAR_POSITIONAL:
                    values[name] = bound.arguments[name]
            self._values = values
        return self._values

    def value(self, p: Param, what: str) -> Any:
        """The argument ``p`` names; ``what`` (``"Sink.frames's width"``)
        says in an error which declaration named it."""
        values = self._bound()
        if p.name not in values:
            raise ValueError(f"{what} is {p!r}, but {self._cls.__name__}(...) has no parameter {p.name!r} (and was not given one)")
        return values[p.name]
