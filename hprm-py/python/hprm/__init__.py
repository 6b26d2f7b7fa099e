"""HPRM: deterministic, zero-copy robotic middleware — the Python SDK.

Reactors are Python classes; their reactions run on HPRM's Rust runtime
(``hprm._native``), with the GIL held only while Python code runs. A
program groups reactors into federates (one process each) and connects
their ports; ``Program.launch()`` starts an object store, an RTI and every
federate, and the same script, re-run as each federate, builds the same
program and runs its own part::

    import hprm, numpy as np

    class Camera(hprm.Reactor):
        frame = hprm.Output()
        def __init__(self, period="50ms"):
            self.tick = hprm.Timer(period=period)
        @hprm.reaction(triggers="tick", effects="frame")
        def capture(self, ctx):
            ctx.set(self.frame, {"rgb": np.zeros((720, 1280, 3), np.uint8), "seq": ctx.tag.time})

    prog = hprm.Program("drive")
    cam = prog.federate("camera", Camera)
    ...
    if __name__ == "__main__":
        prog.launch()

Values travel as DESIGN.md's "Payloads" says: scalars, strings and small
buffers in-band (MessagePack); numpy arrays and byte buffers of at least
the threshold (64 KiB) out-of-band in the shared-memory store; anything
else pickled (protocol 5, its buffers out-of-band too). Receivers get
read-only numpy arrays over the shared memory itself.
"""

from __future__ import annotations

import datetime
import os
import re
import sys
from typing import Any, Callable, NamedTuple

from . import _native

_native.init_logging()


def _find_daemons() -> None:
    """The launcher looks for hprm-store and hprm-rti in $HPRM_BIN_DIR: point
    it at this environment's scripts (where install.sh puts them) unless
    it is set."""
    import sysconfig

    for d in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        if d and os.path.exists(os.path.join(d, "hprm-store")):
            os.environ.setdefault("HPRM_BIN_DIR", d)
            return


_find_daemons()

PayloadError = _native.PayloadError

__all__ = [
    "PayloadError",
    "Reactor",
    "Input",
    "Output",
    "Timer",
    "LogicalAction",
    "PhysicalAction",
    "reaction",
    "Program",
    "Context",
    "Tag",
    "duration_ns",
    "external",
    "store_object_id",
]

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "sec": 1_000_000_000, "min": 60_000_000_000}
_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d*)?)\s*(ns|us|µs|ms|s|sec|min)\s*$")


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
        return a.object_id
    interface = getattr(value, "__array_interface__", None)
    if interface is None or not interface.get("data"):
        return None
    return _native._store_object_at(interface["data"][0], max(getattr(value, "nbytes", 1), 1))


def duration_ns(d: Any) -> int:
    """A duration in nanoseconds from "50ms", "2 s", a timedelta, or a
    number of seconds."""
    if d is None:
        return 0
    if isinstance(d, datetime.timedelta):
        return int(d.total_seconds() * 1e9)
    if isinstance(d, (int, float)):
        return int(d * 1e9)
    m = _DURATION.match(str(d))
    if not m:
        raise ValueError(f"cannot read {d!r} as a duration; write e.g. '50ms', '2s', '100us'")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


class Tag(NamedTuple):
    """A point of logical time: ns since the epoch, and a microstep."""

    time: int
    microstep: int


# ----------------------------------------------------------------- declarations


class _Port:
    """A port declared as a class attribute of a Reactor."""

    def __init__(self) -> None:
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return instance.__dict__["_hprm_bound"][self.name]


class Input(_Port):
    """An input port. In a reaction, ``self.port.value`` is its value at the
    current tag (None when absent) and ``self.port.is_present`` says whether
    it has one."""


class Output(_Port):
    """An output port: ``ctx.set(self.port, value)`` or ``self.port.set(value)``."""


class Timer:
    """A timer: fires at start + offset, then every period (once when the
    period is zero). Create it in ``__init__``: ``self.tick = Timer(period="10ms")``."""

    def __init__(self, offset: Any = 0, period: Any = 0) -> None:
        self.offset_ns = duration_ns(offset)
        self.period_ns = duration_ns(period)
        self._index: int | None = None


class _Present:
    """Reading a port or action of the reactor `_owner` in a reaction."""

    _owner: Any = None

    @property
    def value(self) -> Any:
        """The value at the current tag, None when absent."""
        return _current(self._owner).get(self)

    @property
    def is_present(self) -> bool:
        return _current(self._owner).is_present(self)


class _Action(_Present):
    def __init__(self, min_delay: Any = 0) -> None:
        self.min_delay_ns = duration_ns(min_delay)
        self._index: int | None = None
        self._owner: Any = None


class LogicalAction(_Action):
    """A logical action: ``self.act.schedule(value, delay)`` in a reaction
    that declares it as an effect; it triggers at the current tag + its min
    delay + delay (one microstep later when both are zero)."""

    def schedule(self, value: Any = None, delay: Any = 0) -> None:
        _current(self._owner).schedule(self, value, delay)


class PhysicalAction(_Action):
    """A physical action: ``self.act.schedule(value)`` from any thread (a
    sensor callback), once the program has started (from the first reaction
    of its reactor on, e.g. a startup reaction); its tag comes from physical
    time."""

    def __init__(self, min_delay: Any = 0) -> None:
        super().__init__(min_delay)
        self._scheduler: Any = None

    def schedule(self, value: Any = None, delay: Any = 0) -> None:
        if self._scheduler is None:
            raise RuntimeError("a physical action can be scheduled once its reactor has run a reaction (e.g. a startup reaction)")
        self._scheduler.schedule(value, duration_ns(delay))


class _Reaction:
    """A reaction declared with the ``reaction`` decorator."""

    def __init__(self, fn: Callable, triggers: list[str], sources: list[str], effects: list[str], deadline: Any) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.triggers = triggers
        self.sources = sources
        self.effects = effects
        self.deadline_ns = None if deadline is None else duration_ns(deadline)
        self.on_deadline: Callable | None = None
        self.on_tardy: Callable | None = None

    def deadline_handler(self, fn: Callable) -> Callable:
        """Decorates the method run instead of the body when the reaction
        starts later than its tag's time + deadline."""
        self.on_deadline = fn
        return fn

    def tardy_handler(self, fn: Callable) -> Callable:
        """Decorates the method run instead of the body when a triggering
        input arrived after its tag had passed (decentralized)."""
        self.on_tardy = fn
        return fn

    def __call__(self, instance: Any, ctx: Any) -> Any:
        return self.fn(instance, ctx)


def _names(x: Any) -> list[str]:
    if x is None:
        return []
    if isinstance(x, str):
        return [n.strip() for n in x.split(",") if n.strip()]
    return [n if isinstance(n, str) else n.name for n in x]


def reaction(triggers: Any = None, effects: Any = None, sources: Any = None, deadline: Any = None) -> Callable[[Callable], _Reaction]:
    """Declares a reaction method ``(self, ctx)``. ``triggers``, ``sources``
    and ``effects`` name ports, timers and actions of the reactor (a string,
    comma-separated, or a list); "startup" and "shutdown" are triggers too.
    ``deadline`` ("30ms") adds a deadline; give its handler with
    ``@method.deadline_handler``."""

    def wrap(fn: Callable) -> _Reaction:
        return _Reaction(fn, _names(triggers), _names(sources), _names(effects), deadline)

    return wrap


class Reactor:
    """Base class of reactors: declare ports as class attributes, timers
    and actions in ``__init__``, reactions with ``@hprm.reaction``. The
    instance is the reactor's state."""


# --------------------------------------------------------------------- runtime


class _BoundPort(_Present):
    def __init__(self, owner: Any, index: int, name: str) -> None:
        self._owner = owner
        self._index = index
        self.name = name

    def set(self, value: Any) -> None:
        _current(self._owner).set(self, value)


def _current(owner: Any) -> "Context":
    ctx = owner.__dict__.get("_hprm_ctx") if owner is not None else None
    if ctx is None:
        raise RuntimeError("ports and actions are read and set only inside a reaction")
    return ctx


def _index(x: Any) -> int:
    i = getattr(x, "_index", None)
    if i is None:
        raise TypeError(f"{x!r} is not a port or action of a reactor in a program")
    return i


class Context:
    """What a reaction sees at its tag (valid only during the reaction)."""

    def __init__(self, native: Any, default_output: Any = None) -> None:
        self._n = native
        self._default_output = default_output

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
    def federate(self) -> str:
        return self._n.federate()

    def get(self, port: Any) -> Any:
        return self._n.get(_index(port))

    def is_present(self, port: Any) -> bool:
        return self._n.is_present(_index(port))

    def set(self, port: Any, value: Any) -> None:
        self._n.set(_index(port), value)

    def schedule(self, action: Any, value: Any = None, delay: Any = 0) -> None:
        self._n.schedule(_index(action), value, duration_ns(delay))

    def request_stop(self) -> None:
        """Stops the program at the next microstep, at one tag for all federates."""
        self._n.request_stop()

    def intended_tag(self, port: Any) -> Tag | None:
        t = self._n.intended_tag(_index(port))
        return None if t is None else Tag(*t)

    def alloc_array(self, shape: Any, dtype: Any, port: Any = None) -> Any:
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
            view = self._n.loan(_index(port), dt.str, list(shape))
        except RuntimeError:
            # No store configured (a program run in one process): nothing to share.
            return np.empty(shape, dt)
        return np.frombuffer(view, dtype=dt).reshape(shape)


def external(inputs: Any = (), outputs: Any = (), name: str = "External") -> type:
    """A Reactor class with just these ports and no reactions: declares a
    federate that another process implements (a Rust binary, the ROS 2
    bridge), which builds its side from the manifest the launcher hands it
    in ``HPRM_MANIFEST``::

        prog.federate("ros", hprm.external(outputs=["image"]))
        prog.launch(commands={"ros": ["hprm-ros2-bridge", "--config", "bridge.toml"]})
    """
    attrs: dict[str, Any] = {i: Input() for i in inputs}
    attrs.update({o: Output() for o in outputs})
    return type(name, (Reactor,), attrs)


class _OutputRef:
    """An output by its index (a reaction's only output, for alloc_array)."""

    __slots__ = ("_index",)

    def __init__(self, index: int) -> None:
        self._index = index


def _invoker(fn: Callable, instance: Any, outputs: list[int]) -> Callable[[Any, Any], None]:
    default_output = _OutputRef(outputs[0]) if len(outputs) == 1 else None

    def invoke(_state: Any, native_ctx: Any) -> None:
        for a in instance.__dict__.get("_hprm_physical", []):
            if a._scheduler is None:
                a._scheduler = native_ctx.physical_scheduler(a._index)
        ctx = Context(native_ctx, default_output)
        instance.__dict__["_hprm_ctx"] = ctx
        try:
            fn(instance, ctx)
        finally:
            instance.__dict__["_hprm_ctx"] = None

    return invoke


class _ReactorRef:
    def __init__(self, program: "Program", index: int, instance: Any, name: str) -> None:
        self._program = program
        self._index = index
        self.instance = instance
        self.name = name
        self._ports: dict[str, int] = {}
        self._kinds: dict[str, str] = {}

    def __getattr__(self, name: str) -> "_PortRef":
        ports = self.__dict__.get("_ports", {})
        if name in ports:
            return _PortRef(ports[name], f"{self.name}.{name}", self.__dict__["_kinds"][name])
        raise AttributeError(f"reactor {self.__dict__.get('name')} has no port {name!r}")


class _PortRef(NamedTuple):
    index: int
    path: str
    kind: str = ""


class _FederateRef:
    def __init__(self, program: "Program", index: int, name: str) -> None:
        self._program = program
        self._index = index
        self.name = name
        self.reactors: list[_ReactorRef] = []

    def reactor(self, name: str, cls: type, *args: Any, **kwargs: Any) -> _ReactorRef:
        """Adds a reactor of class ``cls`` (constructed with the arguments)."""
        if any(r.name == f"{self.name}.{name}" for r in self.reactors):
            raise ValueError(f"federate {self.name} already has a reactor named {name!r}; reactor names must be unique within a federate")
        r = self._program._add_reactor(self, name, cls, args, kwargs)
        self.reactors.append(r)
        return r

    def restart_on_failure(self, max_restarts: int | None = None) -> "_FederateRef":
        """When this federate's process fails, the launcher starts it again
        (at most ``max_restarts`` times, 3 by default) instead of stopping
        the program. Centralized coordination only: while it is down its
        downstream waits; it resumes after every tag granted downstream of
        it, with fresh state, and its startup reactions run again."""
        if self._program._coordination != "centralized":
            raise ValueError(f"federate {self.name}: restart_on_failure needs centralized coordination (decentralized federates connect to each other directly and cannot take a restarted peer back)")
        self._program._native.restart_on_failure(self._index, max_restarts)
        return self

    def __getattr__(self, name: str) -> _PortRef:
        for r in self.__dict__.get("reactors", []):
            if name in r._ports:
                return getattr(r, name)
        raise AttributeError(f"federate {self.__dict__.get('name')} has no port {name!r}")


def _fail_federate(name: str, e: BaseException) -> None:
    """Exits a launched federate that failed, with its error line. The
    launcher, seeing another federate fail, may send SIGTERM meanwhile: this
    one is on its way out with its own status, which the stop must not
    replace (the launcher names it by that status and this line)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"error: federate {name}: {e}", file=sys.stderr)
    sys.exit(1)


class Program:
    """Federates of reactors and their connections.

    ``coordination``: "centralized" (the RTI grants every advance) or
    "decentralized" (peer to peer, waiting ``stp`` for unknown inputs).
    ``timeout`` stops the program at start + timeout. ``threshold``: buffers
    of at least this many bytes go out-of-band. ``on_error``: what a
    raising reaction does: "stop" its federate (default) or "continue".
    ``store_arrays``: numpy arrays of at least ``threshold`` bytes made
    inside a reaction are allocated in the store, so sending one costs no
    copy; a sent one becomes read-only (default; False keeps every array
    private, and sending copies it).
    """

    def __init__(
        self,
        name: str,
        coordination: str = "centralized",
        stp: Any = "20ms",
        timeout: Any = None,
        threshold: int = 65536,
        on_error: str = "stop",
        store_arrays: bool = True,
    ) -> None:
        self.name = name
        self._native = _native.NativeProgram(
            name,
            coordination=coordination,
            stp_ns=duration_ns(stp),
            threshold=threshold,
            timeout_ns=None if timeout is None else duration_ns(timeout),
            on_error=on_error,
            store_arrays=store_arrays,
        )
        self.federates: list[_FederateRef] = []
        self._coordination = coordination
        self._connected: dict[int, str] = {}

    def federate(self, name: str, cls: type | None = None, *args: Any, **kwargs: Any) -> _FederateRef:
        """Adds a federate (one process). With ``cls``, also its one reactor
        (named like the federate), constructed with the arguments."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a federate's name is a non-empty string, not {name!r}")
        if any(f.name == name for f in self.federates):
            raise ValueError(f"program {self.name} already has a federate named {name!r}; federate names must be unique")
        f = _FederateRef(self, self._native.federate(name), name)
        self.federates.append(f)
        if cls is not None:
            f.reactor(name, cls, *args, **kwargs)
        return f

    def _add_reactor(self, fed: _FederateRef, name: str, cls: type, args: tuple, kwargs: dict) -> _ReactorRef:
        if not (isinstance(cls, type) and issubclass(cls, Reactor)):
            raise TypeError(f"{cls!r} is not a subclass of hprm.Reactor")
        instance = cls(*args, **kwargs)
        n = self._native
        r = _ReactorRef(self, n.reactor(fed._index, name, instance), instance, f"{fed.name}.{name}")
        names: dict[str, int] = {}
        bound: dict[str, _BoundPort] = {}
        for klass in reversed(cls.__mro__):
            for attr, v in vars(klass).items():
                if isinstance(v, Input):
                    names[attr] = n.input(r._index, attr)
                elif isinstance(v, Output):
                    names[attr] = n.output(r._index, attr)
                else:
                    continue
                bound[attr] = _BoundPort(instance, names[attr], attr)
                r._ports[attr] = names[attr]
                r._kinds[attr] = "input" if isinstance(v, Input) else "output"
        instance.__dict__["_hprm_bound"] = bound
        physical = []
        for attr, v in list(vars(instance).items()):
            if isinstance(v, Timer):
                v._index = names[attr] = n.timer(r._index, attr, v.offset_ns, v.period_ns)
            elif isinstance(v, LogicalAction):
                v._index = names[attr] = n.logical_action(r._index, attr, v.min_delay_ns)
                v._owner = instance
            elif isinstance(v, PhysicalAction):
                v._index = names[attr] = n.physical_action(r._index, attr, v.min_delay_ns)
                v._owner = instance
                physical.append(v)
        instance.__dict__["_hprm_physical"] = physical
        reactions = [v for klass in reversed(cls.__mro__) for v in vars(klass).values() if isinstance(v, _Reaction)]
        for rx in reactions:

            def resolve(ns: list[str], what: str, rx: _Reaction = rx) -> list[int]:
                out = []
                for nm in ns:
                    if nm in ("startup", "shutdown"):
                        if nm not in names:
                            names[nm] = n.startup(r._index) if nm == "startup" else n.shutdown(r._index)
                    elif nm not in names:
                        raise ValueError(f"reaction {cls.__name__}.{rx.name} names {nm!r} as a {what}, but the reactor has no such port, timer or action")
                    out.append(names[nm])
                return out

            effects = resolve(rx.effects, "effect")
            outputs = [i for nm, i in zip(rx.effects, effects) if nm in r._ports]
            n.reaction(
                r._index,
                rx.name,
                resolve(rx.triggers, "trigger"),
                resolve(rx.sources, "source"),
                effects,
                _invoker(rx.fn, instance, outputs),
                deadline_ns=rx.deadline_ns,
                deadline_handler=None if rx.on_deadline is None else _invoker(rx.on_deadline, instance, outputs),
                tardy_handler=None if rx.on_tardy is None else _invoker(rx.on_tardy, instance, outputs),
            )
        return r

    def connect(self, source: _PortRef, target: _PortRef, after: Any = None, physical: bool = False) -> None:
        """Connects an output to an input: with no ``after``, at the same tag;
        ``after="0ms"``, one microstep later; ``after="5ms"``, 5 ms later;
        ``physical=True``, stamped with the receiver's physical time."""
        for port, kind, role in ((source, "output", "from"), (target, "input", "to")):
            if not isinstance(port, _PortRef):
                raise TypeError(f"connect takes ports of the program's reactors (e.g. prog.connect(camera.out, detector.inp)), not {port!r}")
            if port.kind != kind:
                raise ValueError(f"connect goes from an output to an input, but {port.path} (the {role} side) is an {port.kind}")
        if target.index in self._connected:
            raise ValueError(f"input {target.path} is already connected from {self._connected[target.index]}; an input takes one connection")
        self._connected[target.index] = source.path
        self._native.connect(source.index, target.index, None if after is None else duration_ns(after), physical)

    def manifest(self) -> dict:
        """The program's graph as data: what ``hprm check``, ``hprm graph``
        and ``hprm launch`` read (see docs/src/cli.md, "Manifests")."""
        import json

        return json.loads(self._native.manifest())

    def validate(self) -> None:
        """Raises ValueError listing every problem of the program."""
        problems = self._native.validate()
        if problems:
            raise ValueError(problems)

    def run(self, federate: str | None = None, fast: bool = False) -> dict:
        """Runs one federate in this process (the only one, when the program
        has one; or the one the launcher names). Returns its run report."""
        return self._native.run_federate(federate, fast)

    def launch(self, fast: bool = False, timeout: Any = None, store_memory: str = "256m", commands: dict[str, list[str]] | None = None, trace: str | None = None, store_args: list[str] | None = None) -> None:
        """Runs the program: in a launched federate process, its federate;
        otherwise starts a store, an RTI and every federate (this script,
        re-run; or, for federates named in ``commands``, that command, e.g.
        a Rust federate built from the same program), waits for all, and
        exits non-zero naming failed federates. ``trace``: write a
        Chrome/Perfetto trace of every reaction, grant and store transfer
        to this file (also ``HPRM_LAUNCH_TRACE``). ``store_args``: more
        arguments for hprm-store, e.g. ``["--populate"]`` (pre-fault the
        arena and the federates' mappings: no page faults while copying)."""
        if os.environ.get("HPRM_DESCRIBE"):
            # `hprm check/graph/launch` asks for the graph: write it, run nothing.
            import json

            manifest = self.manifest()
            for f in manifest["federate"]:
                if f["name"] in (commands or {}):
                    f["command"] = [str(a) for a in commands[f["name"]]]
            with open(os.environ["HPRM_DESCRIBE"], "w") as out:
                json.dump(manifest, out)
            sys.exit(0)
        fast = fast or os.environ.get("HPRM_FAST") == "1"
        if timeout is None and os.environ.get("HPRM_LAUNCH_TIMEOUT"):
            timeout = os.environ["HPRM_LAUNCH_TIMEOUT"]
        if os.environ.get("HPRM_FEDERATE"):
            try:
                self.run(fast=fast)
            except RuntimeError as e:
                _fail_federate(os.environ["HPRM_FEDERATE"], e)
            sys.exit(0)
        if len(self.federates) == 1 and not commands:
            self.run(fast=fast)
            return
        argv = [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]
        trace = trace or os.environ.get("HPRM_LAUNCH_TRACE") or None
        code, summary = self._native.launch(
            argv,
            fast=fast,
            timeout_s=None if timeout is None else duration_ns(timeout) / 1e9,
            store_memory=store_memory,
            commands={k: [str(a) for a in v] for k, v in (commands or {}).items()},
            trace=None if trace is None else os.path.abspath(trace),
            store_args=[str(a) for a in (store_args or [])],
        )
        if summary:
            print(f"error: {summary}", file=sys.stderr)
        if code:
            sys.exit(code)
