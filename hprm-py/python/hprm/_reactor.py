"""Reactors and their reactions, as declared in Python."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeAlias

from ._durations import Duration, duration_ns
from ._ports import Input, Output, _Port

if TYPE_CHECKING:
    from ._context import Context

Names: TypeAlias = str | Iterable[str | _Port] | None
"""Ports, timers and actions a reaction names: a string (comma-separated
names), or a list of names or declared ports."""

ReactionBody: TypeAlias = "Callable[[Any, Context], Any]"
"""A reaction's method: ``(self, ctx)``."""


class _Reaction:
    """A reaction declared with the ``reaction`` decorator."""

    def __init__(self, fn: ReactionBody, triggers: list[str], sources: list[str], effects: list[str], deadline: Duration | None) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.triggers = triggers
        self.sources = sources
        self.effects = effects
        self.deadline_ns = None if deadline is None else duration_ns(deadline)
        self.on_deadline: ReactionBody | None = None
        self.on_tardy: ReactionBody | None = None

    def deadline_handler(self, fn: ReactionBody) -> ReactionBody:
        """Decorates the method run instead of the body when the reaction
        starts later than its tag's time + deadline."""
        self.on_deadline = fn
        return fn

    def tardy_handler(self, fn: ReactionBody) -> ReactionBody:
        """Decorates the method run instead of the body when a triggering
        input arrived after its tag had passed (decentralized)."""
        self.on_tardy = fn
        return fn

    def __call__(self, instance: Any, ctx: Context) -> Any:
        return self.fn(instance, ctx)


def _declared(cls: type) -> dict[str, Any]:
    """A reactor class's attributes as Python resolves them: a subclass's
    definition replaces its parent's of the same name (in the parent's place
    in the order, which for reactions is their LF priority), and one set to
    anything else (``None``) removes it. Ports and reactions are declared
    from this, so a redefined reaction or port is declared once, not once
    per class that defines it."""
    resolved: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        resolved.update(vars(klass))
    return resolved


def _names(x: Names) -> list[str]:
    if x is None:
        return []
    if isinstance(x, str):
        return [n.strip() for n in x.split(",") if n.strip()]
    return [n if isinstance(n, str) else n.name for n in x]


def reaction(triggers: Names = None, effects: Names = None, sources: Names = None, deadline: Duration | None = None) -> Callable[[ReactionBody], _Reaction]:
    """Declares a reaction method ``(self, ctx)``. ``triggers``, ``sources``
    and ``effects`` name ports, timers and actions of the reactor (a string,
    comma-separated, or a list); "startup" and "shutdown" are triggers too.
    ``deadline`` ("30ms") adds a deadline; give its handler with
    ``@method.deadline_handler``."""

    def wrap(fn: ReactionBody) -> _Reaction:
        return _Reaction(fn, _names(triggers), _names(sources), _names(effects), deadline)

    return wrap


class Reactor:
    """Base class of reactors: declare ports, timers and actions as class
    attributes (timers and actions may be created in ``__init__`` instead),
    reactions with ``@hprm.reaction``; ``hprm.param(NAME)`` in a class
    declaration is the constructor argument NAME. The instance is the
    reactor's state. What the class declares is known without running
    ``__init__``, which then runs only in the process that runs the reactor
    (docs/src/python.md, "Where ``__init__`` runs").

    ``bank_index`` and ``bank_width``: a member of a bank
    (``Program.bank``) has them set before its ``__init__`` runs (LF's
    ``bank_index``); outside a bank they are 0 and 1."""

    bank_index: int = 0
    bank_width: int = 1


def external(inputs: Iterable[str] = (), outputs: Iterable[str] = (), name: str = "External") -> type[Reactor]:
    """A Reactor class with just these ports and no reactions: declares a
    federate that another process implements (a Rust binary, the ROS 2
    bridge), which builds its side from the manifest the launcher hands it
    in ``HPRM_MANIFEST``::

        prog.federate("ros", hprm.external(outputs=["image"]))
        prog.launch(commands={"ros": ["hprm-ros2-bridge", "--config", "bridge.toml"]})
    """
    attrs: dict[str, Any] = {}
    for names, port in ((inputs, Input), (outputs, Output)):
        for n in names:
            # "frames[4]" declares a multiport of width 4, as manifests write it.
            base, _, rest = n.partition("[")
            attrs[base] = port(width=int(rest.rstrip("]"))) if rest else port()
    return type(name, (Reactor,), attrs)
