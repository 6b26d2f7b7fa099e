"""Programs: federates of reactors and their connections; running and
launching them."""

from __future__ import annotations

import os
import sys
from typing import Any, NamedTuple

from . import _native
from ._context import _invoker
from ._durations import Duration, duration_ns
from ._launch import LaunchFailed, _daemons_found, _fail_federate, _init_logging
from ._ports import Input, LogicalAction, Output, PhysicalAction, Timer, _BoundPort
from ._reactor import Reactor, _Reaction


class PortRef(NamedTuple):
    """A port of a reactor in a program (``camera.frame`` on what
    ``Program.federate`` or ``Federate.reactor`` returned), for
    ``Program.connect``."""

    index: int  # type: ignore[assignment]  # (shadows tuple.index)
    path: str
    kind: str = ""


class ReactorRef:
    """A reactor in a program (what ``Federate.reactor`` returns): its
    ``instance`` and, as attributes, its ports (``PortRef``)."""

    def __init__(self, program: Program, index: int, instance: Reactor, name: str) -> None:
        self._program = program
        self._index = index
        self.instance = instance
        self.name = name
        self._ports: dict[str, int] = {}
        self._kinds: dict[str, str] = {}

    def __getattr__(self, name: str) -> PortRef:
        ports = self.__dict__.get("_ports", {})
        if name in ports:
            return PortRef(ports[name], f"{self.name}.{name}", self.__dict__["_kinds"][name])
        raise AttributeError(f"reactor {self.__dict__.get('name')} has no port {name!r}")


class Federate:
    """A federate of a program (one process), what ``Program.federate``
    returns: add reactors with ``reactor``; its reactors' ports are its
    attributes (``PortRef``), for ``Program.connect``."""

    def __init__(self, program: Program, index: int, name: str) -> None:
        self._program = program
        self._index = index
        self.name = name
        self.reactors: list[ReactorRef] = []

    def reactor(self, name: str, cls: type[Reactor], *args: Any, **kwargs: Any) -> ReactorRef:
        """Adds a reactor of class ``cls`` (constructed with the arguments)."""
        if any(r.name == f"{self.name}.{name}" for r in self.reactors):
            raise ValueError(f"federate {self.name} already has a reactor named {name!r}; reactor names must be unique within a federate")
        r = self._program._add_reactor(self, name, cls, args, kwargs)
        self.reactors.append(r)
        return r

    def restart_on_failure(self, max_restarts: int | None = None) -> Federate:
        """When this federate's process fails, the launcher starts it again
        (at most ``max_restarts`` times, 3 by default) instead of stopping
        the program. Centralized coordination only: while it is down its
        downstream waits; it resumes after every tag granted downstream of
        it, with fresh state, and its startup reactions run again."""
        if self._program._coordination != "centralized":
            raise ValueError(f"federate {self.name}: restart_on_failure needs centralized coordination (decentralized federates connect to each other directly and cannot take a restarted peer back)")
        self._program._native.restart_on_failure(self._index, max_restarts)
        return self

    def __getattr__(self, name: str) -> PortRef:
        for r in self.__dict__.get("reactors", []):
            if name in r._ports:
                port: PortRef = getattr(r, name)
                return port
        raise AttributeError(f"federate {self.__dict__.get('name')} has no port {name!r}")


# The names these had before they were public.
_FederateRef = Federate
_ReactorRef = ReactorRef
_PortRef = PortRef


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
        stp: Duration = "20ms",
        timeout: Duration | None = None,
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
        self.federates: list[Federate] = []
        self._coordination = coordination
        self._connected: dict[int, str] = {}

    def federate(self, name: str, cls: type[Reactor] | None = None, *args: Any, **kwargs: Any) -> Federate:
        """Adds a federate (one process). With ``cls``, also its one reactor
        (named like the federate), constructed with the arguments."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a federate's name is a non-empty string, not {name!r}")
        if any(f.name == name for f in self.federates):
            raise ValueError(f"program {self.name} already has a federate named {name!r}; federate names must be unique")
        f = Federate(self, self._native.federate(name), name)
        self.federates.append(f)
        if cls is not None:
            f.reactor(name, cls, *args, **kwargs)
        return f

    def _add_reactor(self, fed: Federate, name: str, cls: type[Reactor], args: tuple[Any, ...], kwargs: dict[str, Any]) -> ReactorRef:
        if not (isinstance(cls, type) and issubclass(cls, Reactor)):
            raise TypeError(f"{cls!r} is not a subclass of hprm.Reactor")
        instance = cls(*args, **kwargs)
        n = self._native
        r = ReactorRef(self, n.reactor(fed._index, name, instance), instance, f"{fed.name}.{name}")
        names: dict[str, int] = {}
        bound: dict[str, _BoundPort] = {}
        for klass in reversed(cls.__mro__):
            for attr, v in vars(klass).items():
                if isinstance(v, Input):
                    names[attr] = n.input(r._index, attr)
                elif isinstance(v, Output):
                    names[attr] = n.output(r._index, attr, v.backpressure)
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

    def connect(self, source: PortRef, target: PortRef, after: Duration | None = None, physical: bool = False) -> None:
        """Connects an output to an input: with no ``after``, at the same tag;
        ``after="0ms"``, one microstep later; ``after="5ms"``, 5 ms later;
        ``physical=True``, stamped with the receiver's physical time."""
        for port, kind, role in ((source, "output", "from"), (target, "input", "to")):
            if not isinstance(port, PortRef):
                raise TypeError(f"connect takes ports of the program's reactors (e.g. prog.connect(camera.out, detector.inp)), not {port!r}")
            if port.kind != kind:
                raise ValueError(f"connect goes from an output to an input, but {port.path} (the {role} side) is an {port.kind}")
        if target.index in self._connected:
            raise ValueError(f"input {target.path} is already connected from {self._connected[target.index]}; an input takes one connection")
        self._connected[target.index] = source.path
        self._native.connect(source.index, target.index, None if after is None else duration_ns(after), physical)

    def manifest(self) -> dict[str, Any]:
        """The program's graph as data: what ``hprm check``, ``hprm graph``
        and ``hprm launch`` read (see docs/src/cli.md, "Manifests")."""
        import json

        manifest: dict[str, Any] = json.loads(self._native.manifest())
        return manifest

    def validate(self) -> None:
        """Raises ValueError listing every problem of the program."""
        problems = self._native.validate()
        if problems:
            raise ValueError(problems)

    def run(self, federate: str | None = None, fast: bool = False) -> dict[str, Any]:
        """Runs one federate in this process (the only one, when the program
        has one; or the one the launcher names). Returns its run report."""
        _init_logging()
        return self._native.run_federate(federate, fast)

    def launch(
        self,
        fast: bool = False,
        timeout: Duration | None = None,
        store_memory: str = "256m",
        commands: dict[str, list[str]] | None = None,
        trace: str | os.PathLike[str] | None = None,
        store_args: list[str] | None = None,
    ) -> None:
        """Runs the program: in a launched federate process, its federate;
        otherwise starts a store, an RTI and every federate (this script,
        re-run; or, for federates named in ``commands``, that command, e.g.
        a Rust federate built from the same program) and waits for all.
        When that does not end cleanly it prints what went wrong and raises
        ``LaunchFailed`` (a SystemExit: uncaught, the script exits with the
        launcher's exit code, 1, 2 or 3). ``trace``: write a
        Chrome/Perfetto trace of every reaction, grant and store transfer
        to this file (also ``HPRM_LAUNCH_TRACE``). ``store_args``: more
        arguments for hprm-store, e.g. ``["--populate"]`` (pre-fault the
        arena and the federates' mappings: no page faults while copying).

        In a process the launcher started (``HPRM_FEDERATE``, or
        ``HPRM_DESCRIBE`` when ``hprm`` asks for the graph) it exits the
        process with the federate's status instead of returning."""
        if os.environ.get("HPRM_DESCRIBE"):
            # `hprm check/graph/launch` asks for the graph: write it, run nothing.
            import json

            manifest = self.manifest()
            for f in manifest["federate"]:
                if f["name"] in (commands or {}):
                    f["command"] = [str(a) for a in (commands or {})[f["name"]]]
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
        _init_logging()
        argv = [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]
        trace = trace or os.environ.get("HPRM_LAUNCH_TRACE") or None
        try:
            with _daemons_found():
                code, summary = self._native.launch(
                    argv,
                    fast=fast,
                    timeout_s=None if timeout is None else duration_ns(timeout) / 1e9,
                    store_memory=store_memory,
                    commands={k: [str(a) for a in v] for k, v in (commands or {}).items()},
                    trace=None if trace is None else os.path.abspath(trace),
                    store_args=[str(a) for a in (store_args or [])],
                )
        except RuntimeError as e:
            # It never ran: no daemon, or the program or a flag is wrong.
            code, summary = 2, str(e)
        if summary:
            print(f"error: {summary}", file=sys.stderr)
        if code:
            raise LaunchFailed(code, summary or f"program {self.name} failed (exit code {code})")
