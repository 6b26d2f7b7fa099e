"""Programs: federates of reactors and their connections; running and
launching them."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from . import _native
from ._context import _invoker
from ._durations import Duration, duration_ns
from ._launch import LaunchFailed, _daemons_found, _fail_federate, _init_logging
from ._params import Param, Params
from ._ports import Input, LogicalAction, Output, PhysicalAction, Timer, _BoundMultiport, _BoundPort
from ._reactor import Reactor, _declared, _Reaction

_manifests: dict[str, dict[str, Any]] = {}


def _launch_manifest() -> dict[str, Any] | None:
    """The program's manifest that the launcher hands a federate's process
    (``HPRM_MANIFEST``, JSON), read once; None without one."""
    path = os.environ.get("HPRM_MANIFEST")
    if not path:
        return None
    if path not in _manifests:
        import json

        try:
            with open(path) as f:
                _manifests[path] = json.load(f)
        except (OSError, ValueError):
            return None
    return _manifests[path]


def _port_widths(declared: dict[str, Any], instance: Reactor, params: Params, manifest: tuple[str, str] | None) -> dict[str, int | None] | None:
    """The widths of a reactor's ports (None for a single port) known
    without running its ``__init__``: from the class (an int, "bank": the
    member's bank_width, set already) or the arguments (``hprm.param``),
    else, given ``manifest`` (federate, reactor), from the launcher's
    manifest. None when some width is known only to ``__init__`` (an
    attribute it sets) and no manifest names it: then the reactor is
    constructed, as it must be to have the same ports as where it runs."""
    widths: dict[str, int | None] = {}
    manifest_widths: dict[str, int | None] | None = None
    for attr, v in declared.items():
        if not isinstance(v, (Input, Output)):
            continue
        if not v._width_needs_init:
            widths[attr] = v._width_of(instance, params)
            continue
        if manifest_widths is None:
            manifest_widths = None if manifest is None else _manifest_widths(*manifest)
            if manifest_widths is None:
                return None
        if attr not in manifest_widths:
            return None
        widths[attr] = manifest_widths[attr]
    return widths


def _class_names(declared: dict[str, Any]) -> bool:
    """Whether every name the reactions of a class use (triggers, sources,
    effects) is declared by the class: a port, a class-level timer or
    action, startup or shutdown. A name only ``__init__`` declares (``self.tick
    = Timer(...)``) is known once it has run."""
    known = {a for a, v in declared.items() if isinstance(v, (Input, Output, Timer, LogicalAction, PhysicalAction))}
    known |= {"startup", "shutdown"}
    return all(
        nm in known
        for rx in declared.values()
        if isinstance(rx, _Reaction)
        for nm in (*rx.triggers, *rx.sources, *rx.effects)
    )


def _has_param(v: Timer | LogicalAction | PhysicalAction) -> bool:
    given = v._given if isinstance(v, Timer) else (v._given,)
    return any(isinstance(d, Param) for d in given)


def _construct(instance: Reactor, args: tuple[Any, ...], kwargs: dict[str, Any], what: str, described: bool) -> None:
    """Runs a reactor's ``__init__``. The timers and actions its class
    declares are in place already, and are the ones the program has:
    ``__init__`` putting another in place of one is an error. So is, for a
    reactor ``described`` from its class already (see
    ``Program._add_reactor``, "deferred"), a timer or action ``__init__``
    creates: the program declared only the class's."""
    before = {a: v for a, v in vars(instance).items() if isinstance(v, (Timer, LogicalAction, PhysicalAction))}
    instance.__init__(*args, **kwargs)  # type: ignore[misc]
    for a, v in vars(instance).items():
        if not isinstance(v, (Timer, LogicalAction, PhysicalAction)) or before.get(a) is v:
            continue
        kind = type(v).__name__
        if a in before:
            raise ValueError(f"{what}: __init__ sets {a} to a new {kind}, but the class declares {a} already; declare it in one place")
        if described:
            raise ValueError(
                f"{what}: __init__ creates {kind} {a!r}, which no reaction names; the program declared the reactor from its "
                f"class without running __init__, so it has only the class's timers and actions: declare it in the class "
                f"({a} = hprm.{kind}(...)) or drop it"
            )


def _manifest_widths(federate: str, reactor: str) -> dict[str, int | None] | None:
    """Port widths of reactor ``reactor`` of ``federate`` in the launcher's
    manifest (``frames[4]`` -> 4, ``out`` -> None)."""
    m = _launch_manifest()
    if m is None:
        return None
    for f in m.get("federate", []):
        if f.get("name") != federate:
            continue
        for r in f.get("reactor", []):
            if r.get("name") != reactor:
                continue
            widths: dict[str, int | None] = {}
            for name in _port_names([*r.get("inputs", []), *r.get("outputs", [])]):
                base, channel = _split_channel(name)
                widths[base] = channel
            return widths
    return None


class PortRef(NamedTuple):
    """A port of a reactor in a program (``camera.frame`` on what
    ``Program.federate`` or ``Federate.reactor`` returned), for
    ``Program.connect``."""

    index: int  # type: ignore[assignment]  # (shadows tuple.index)
    path: str
    kind: str = ""


class Ports:
    """Several ports in order, for ``Program.connect``: a multiport's
    channels (``fusion.frames``), or one port of every member of a bank
    (``cameras.frame``). ``ports[i]`` is one ``PortRef``."""

    def __init__(self, ports: list[PortRef], path: str, kind: str) -> None:
        self.ports = ports
        self.path = path
        self.kind = kind

    def __len__(self) -> int:
        return len(self.ports)

    def __getitem__(self, i: int) -> PortRef:
        return self.ports[i]

    def __iter__(self) -> Iterator[PortRef]:
        return iter(self.ports)

    @property
    def width(self) -> int:
        return len(self.ports)

    def __repr__(self) -> str:
        return f"Ports({self.path}, width {self.width})"


def _port_names(decls: list[str]) -> list[str]:
    """The port names of a manifest's port declarations (``"frames[4]: bytes"``
    -> ``"frames[4]"``)."""
    return [str(d).split(":", 1)[0].strip() for d in decls]


def _split_channel(name: str) -> tuple[str, int | None]:
    """``frames[2]`` -> ``("frames", 2)``; ``frame`` -> ``("frame", None)``."""
    base, bracket, rest = name.partition("[")
    if bracket and rest.endswith("]") and rest[:-1].isdigit():
        return base, int(rest[:-1])
    return name, None


class ReactorRef:
    """A reactor in a program (what ``Federate.reactor`` returns): its
    ``instance`` and, as attributes, its ports (``PortRef``; ``Ports`` for
    a multiport, whose channel ``i`` is ``ref.frames[i]``)."""

    def __init__(self, program: Program, index: int, instance: Reactor, name: str) -> None:
        self._program = program
        self._index = index
        self._instance = instance
        # Set while the reactor's ``__init__`` has not run (a stub or a
        # reactor declared from its class, see ``Program._add_reactor``):
        # what runs it.
        self._pending_init: Callable[[], None] | None = None
        self.name = name
        self._ports: dict[str, int | list[int]] = {}
        self._kinds: dict[str, str] = {}

    @property
    def instance(self) -> Reactor:
        """The reactor object. A reactor that runs no reaction in this
        process (another federate's, in a launched federate's process; any
        described from its class, in a launcher or a describing process) is
        constructed (its ``__init__`` run) only when this is read."""
        init = self.__dict__.get("_pending_init")
        if init is not None:
            self._pending_init = None
            init()
        instance: Reactor = self.__dict__["_instance"]
        return instance

    def _port(self, name: str) -> PortRef | Ports | None:
        ports = self.__dict__.get("_ports", {})
        base, channel = _split_channel(name)
        if base not in ports:
            return None
        kind = self.__dict__["_kinds"][base]
        index = ports[base]
        if isinstance(index, int):
            return PortRef(index, f"{self.name}.{base}", kind) if channel is None else None
        channels = [PortRef(i, f"{self.name}.{base}[{k}]", kind) for k, i in enumerate(index)]
        if channel is None:
            return Ports(channels, f"{self.name}.{base}", kind)
        return channels[channel] if channel < len(channels) else None

    def __getattr__(self, name: str) -> Any:
        port = self._port(name)
        if port is not None:
            return port
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

    def on(self, host: str) -> Federate:
        """Runs this federate on ``host`` (one of ``Program.host``'s), in a
        program that spans several hosts."""
        self._program._native.run_on(self._index, host)
        return self

    def realtime(
        self,
        priority: int | None = None,
        cpus: str | None = None,
        policy: str = "fifo",
        best_effort: bool = False,
        socket_priority: int | None = None,
        dscp: int | str | None = None,
    ) -> Federate:
        """Runs this federate's reactions at real-time ``priority`` (1-99,
        SCHED_FIFO, or ``policy="rr"``) and/or on ``cpus`` (``"2"``,
        ``"0,2-3"``). Its process applies them as it starts, before its
        threads exist; its inbox polling stays bounded (``HPRM_SPIN_US``,
        200 us after each message by default; a stream faster than that
        keeps it polling, so place the store and the RTI too, give it CPUs
        of its own, or set ``HPRM_SPIN_US=0``: see the deployment docs,
        "Real-time placement"). Without the
        right to (root or CAP_SYS_NICE) it stops with an error saying so,
        unless ``best_effort``: then it warns and runs as a normal process.
        ``hprm deploy`` writes them into the federate's unit.
        ``socket_priority`` (SO_PRIORITY, 0-6; up to 15 with CAP_NET_ADMIN)
        and ``dscp`` (0-63, or a name: ``"EF"``, ``"CS6"``, ``"AF41"``) mark
        its TCP connections (to the RTI and to peers on other hosts), so that
        queues in the host and the network favour them."""
        native_dscp = None if dscp is None else str(dscp)
        self._program._native.realtime(
            self._index, priority, policy if priority is not None else None, cpus, best_effort, socket_priority, native_dscp
        )
        return self

    def __getattr__(self, name: str) -> Any:
        for r in self.__dict__.get("reactors", []):
            port = r._port(name)
            if port is not None:
                return port
        raise AttributeError(f"federate {self.__dict__.get('name')} has no port {name!r}")


class Bank:
    """A bank: ``width`` members of one reactor class (what
    ``Program.bank`` returns). ``bank[i]`` is member ``i`` (a
    ``ReactorRef``); an attribute is one port of every member, in member
    order (``Ports``; a multiport channel by channel), for
    ``Program.connect``."""

    def __init__(self, program: Program, name: str, placement: str, members: list[ReactorRef], federates: list[Federate]) -> None:
        self._program = program
        self.name = name
        self.placement = placement
        self.members = members
        self.federates = federates

    @property
    def width(self) -> int:
        return len(self.members)

    def __len__(self) -> int:
        return len(self.members)

    def __getitem__(self, i: int) -> ReactorRef:
        return self.members[i]

    def __iter__(self) -> Iterator[ReactorRef]:
        return iter(self.members)

    def _ports(self, port: str, interleaved: bool) -> Ports:
        lists = []
        for m in self.__dict__["members"]:
            p = m._port(port)
            if p is None:
                raise AttributeError(f"the members of bank {self.__dict__['name']} have no port {port!r}")
            lists.append(list(p) if isinstance(p, Ports) else [p])
        if interleaved:
            flat = [ch[c] for c in range(max(len(x) for x in lists)) for ch in lists if c < len(ch)]
        else:
            flat = [p for ch in lists for p in ch]
        return Ports(flat, f"{self.__dict__['name']}.{port}", flat[0].kind)

    def __getattr__(self, port: str) -> Ports:
        if port.startswith("_") or "members" not in self.__dict__:
            raise AttributeError(port)
        return self._ports(port, interleaved=False)

    def interleaved(self, port: str) -> Ports:
        """A multiport of every member, channel by channel, each member by
        member (LF's ``interleaved(bank.port)``)."""
        return self._ports(port, interleaved=True)

    def restart_on_failure(self, max_restarts: int | None = None) -> Bank:
        """Each member restarts alone when its process fails (the others
        go on); process placement only."""
        if self.placement != "processes":
            raise ValueError(f"bank {self.name}: restart_on_failure restarts a member's process, but the bank's placement is {self.placement!r}; use placement=\"processes\"")
        for f in self.federates:
            f.restart_on_failure(max_restarts)
        return self

    def on(self, hosts: str | list[str]) -> Bank:
        """Spreads a process bank's members over hosts (``Program.host``'s):
        member ``i`` runs on ``hosts[i % len(hosts)]`` (round robin; a list
        as long as the bank places each member), or all on one host."""
        if isinstance(hosts, str):
            hosts = [hosts]
        if not hosts or not all(isinstance(h, str) for h in hosts):
            raise ValueError(f"bank {self.name}: hosts is a host name or a non-empty list of them, not {hosts!r}")
        if self.placement != "processes" and len(set(hosts)) > 1:
            raise ValueError(f"bank {self.name}: its placement {self.placement!r} runs every member in one process, which cannot span hosts; use placement=\"processes\"")
        for i, f in enumerate(self.federates):
            f.on(hosts[i % len(hosts)])
        return self

    def realtime(
        self,
        priority: int | None = None,
        cpus: str | None = None,
        policy: str = "fifo",
        best_effort: bool = False,
        socket_priority: int | None = None,
        dscp: int | str | None = None,
    ) -> Bank:
        """``Federate.realtime`` for the bank's federates (each member's
        process, or the one federate of a thread bank)."""
        for f in {id(f): f for f in self.federates}.values():
            f.realtime(priority, cpus, policy, best_effort, socket_priority, dscp)
        return self


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

    def bank(
        self,
        name: str,
        cls: type[Reactor],
        width: int,
        *args: Any,
        placement: str = "processes",
        member_args: list[dict[str, Any]] | Callable[[int], dict[str, Any]] | None = None,
        hosts: str | list[str] | None = None,
        **kwargs: Any,
    ) -> Bank:
        """Adds a bank: ``width`` reactors of class ``cls`` (LF's
        ``new[width]``), member ``i`` named ``name[i]``, with
        ``bank_index`` = i and ``bank_width`` set before its ``__init__``
        runs. Each gets the arguments, plus its own keyword arguments from
        ``member_args`` (a list, one dict per member, or a callable
        ``i -> dict``).

        ``placement``: "processes" (default), one federate ``name[i]``
        each (isolation, restart of one member); or "threads", all in one
        federate ``name`` (reactions on the runtime's worker threads,
        values between them passed by reference). The graph is the one a
        program writing the members out by hand has.

        ``hosts``: in a program with hosts, where the members run
        (``Bank.on``: round robin over the list, or one host per member)."""
        if not isinstance(width, int) or isinstance(width, bool) or width < 1:
            raise ValueError(f"bank {name} has width {width!r}; a bank needs at least one member (width >= 1)")
        if placement not in ("processes", "threads"):
            raise ValueError(f"bank {name}: placement {placement!r} is neither \"processes\" nor \"threads\"")
        if isinstance(member_args, list) and len(member_args) != width:
            raise ValueError(f"bank {name}: member_args has {len(member_args)} entries but the bank has {width} members; give one dict per member")

        def extra(i: int) -> dict[str, Any]:
            if member_args is None:
                return {}
            got = member_args(i) if callable(member_args) else member_args[i]
            if not isinstance(got, dict):
                raise TypeError(f"bank {name}: member_args for member {i} is {got!r}, not a dict of keyword arguments")
            return got

        members: list[ReactorRef] = []
        federates: list[Federate] = []
        if placement == "threads":
            federates.append(self.federate(name))
        for i in range(width):
            member = f"{name}[{i}]"
            if placement == "processes":
                federates.append(self.federate(member))
            fed = federates[-1]
            r = self._add_reactor(fed, member, cls, args, {**kwargs, **extra(i)}, bank=(i, width))
            fed.reactors.append(r)
            members.append(r)
        bank = Bank(self, name, placement, members, federates)
        return bank if hosts is None else bank.on(hosts)

    def _add_reactor(
        self,
        fed: Federate,
        name: str,
        cls: type[Reactor],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        bank: tuple[int, int] | None = None,
    ) -> ReactorRef:
        if not (isinstance(cls, type) and issubclass(cls, Reactor)):
            raise TypeError(f"{cls!r} is not a subclass of hprm.Reactor")
        # A member knows its place before its __init__ runs (LF's bank_index).
        instance = cls.__new__(cls)
        if bank is not None:
            instance.bank_index, instance.bank_width = bank
        declared = _declared(cls)
        params = Params(cls, args, kwargs)
        label = f"reactor {fed.name}.{name}"
        # Timers and actions declared in the class: each reactor its own
        # (the runtime's index is per reactor), parameters resolved, in
        # place before __init__ runs (which may read them).
        for attr, v in declared.items():
            if isinstance(v, (Timer, LogicalAction, PhysicalAction)):
                instance.__dict__[attr] = v._bind(params, f"{cls.__name__}.{attr}")
        # Every process builds the whole program (the same script runs as
        # each federate and, first, to describe it), and a reactor's
        # __init__ runs only in the process that runs it, so that one
        # opening a camera, a GPU model or an emulator does so once:
        # - "eager": constructed now; in its own federate's process, and
        #   wherever its description needs __init__ (a width or a name of
        #   a reaction that only __init__ declares);
        # - "deferred": in a process no launcher started (`python
        #   script.py`, the describing run of `hprm launch`), a reactor
        #   described from its class and arguments: ports, class-level
        #   timers and actions, reactions, all declared now, in the order
        #   an eager one's are; its __init__ runs when this process runs
        #   its federate (`run`) or reads `ReactorRef.instance`. A launcher
        #   or a describer never does: it runs no reaction;
        # - "stub": another federate's reactor in a launched federate's
        #   process: its ports only (a width only __init__ knows comes from
        #   the launcher's manifest), as Rust federates built from a
        #   manifest have (`Program::from_manifest`, port-only stubs);
        #   constructed only if `ReactorRef.instance` is read.
        local = os.environ.get("HPRM_FEDERATE")
        widths: dict[str, int | None] | None = None
        if local is None:
            if _class_names(declared):
                widths = _port_widths(declared, instance, params, None)
            mode = "eager" if widths is None else "deferred"
        elif local == fed.name:
            mode = "eager"
        else:
            widths = _port_widths(declared, instance, params, (fed.name, name))
            mode = "eager" if widths is None else "stub"
        if mode == "eager":
            _construct(instance, args, kwargs, label, described=False)
        else:
            # Arguments that do not fit __init__ are refused here, where
            # the program names them, as if it had run.
            params.check()
        n = self._native
        r = ReactorRef(self, n.reactor(fed._index, name, instance), instance, f"{fed.name}.{name}")
        names: dict[str, int | list[int]] = {}
        bound: dict[str, _BoundPort | _BoundMultiport] = {}
        for attr, v in declared.items():
            if not isinstance(v, (Input, Output)):
                continue
            if isinstance(v, Output):
                declare = lambda reactor, name, v=v: n.output(reactor, name, v.backpressure)  # noqa: E731
            else:
                declare = n.input
            width = v._width_of(instance, params) if widths is None else widths[attr]
            if width is None:
                index = declare(r._index, attr)
                names[attr] = index
                bound[attr] = _BoundPort(instance, index, attr)
            else:
                # A multiport is its channels: ports attr[0], attr[1], ...
                channels = [declare(r._index, f"{attr}[{k}]") for k in range(width)]
                names[attr] = channels
                bound[attr] = _BoundMultiport([_BoundPort(instance, c, f"{attr}[{k}]") for k, c in enumerate(channels)], attr)
            r._ports[attr] = names[attr]
            r._kinds[attr] = "input" if isinstance(v, Input) else "output"
        instance.__dict__["_hprm_bound"] = bound
        if mode == "stub":
            r._pending_init = lambda: _construct(instance, args, kwargs, label, described=False)
            return r
        physical = []
        for attr, v in list(vars(instance).items()):
            if isinstance(v, (Timer, LogicalAction, PhysicalAction)) and v._index is None and _has_param(v):
                # One created in __init__ with hprm.param: resolved as a class-level one is.
                v = instance.__dict__[attr] = v._bind(params, f"{cls.__name__}.{attr}")
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
        if mode == "deferred":
            r._pending_init = lambda: _construct(instance, args, kwargs, label, described=True)
        reactions = [v for v in declared.values() if isinstance(v, _Reaction)]
        for rx in reactions:

            def resolve(ns: list[str], what: str, rx: _Reaction = rx) -> list[int]:
                out: list[int] = []
                for nm in ns:
                    if nm in ("startup", "shutdown"):
                        if nm not in names:
                            names[nm] = n.startup(r._index) if nm == "startup" else n.shutdown(r._index)
                    elif nm not in names:
                        raise ValueError(f"reaction {cls.__name__}.{rx.name} names {nm!r} as a {what}, but the reactor has no such port, timer or action")
                    # A multiport stands for all its channels.
                    found = names[nm]
                    out.extend(found if isinstance(found, list) else [found])
                return out

            effects = resolve(rx.effects, "effect")
            outputs = [i for nm in rx.effects if nm in r._ports and isinstance(i := names[nm], int)]
            n.reaction(
                r._index,
                rx.name,
                resolve(rx.triggers, "trigger"),
                resolve(rx.sources, "source"),
                effects,
                _invoker(rx.fn, instance, outputs, rx.deadline_ns),
                deadline_ns=rx.deadline_ns,
                deadline_handler=None if rx.on_deadline is None else _invoker(rx.on_deadline, instance, outputs, rx.deadline_ns),
                tardy_handler=None if rx.on_tardy is None else _invoker(rx.on_tardy, instance, outputs),
            )
        return r

    def connect(
        self,
        source: PortRef | Ports,
        target: PortRef | Ports,
        after: Duration | None = None,
        physical: bool = False,
        broadcast: bool = False,
    ) -> None:
        """Connects an output to an input: with no ``after``, at the same tag;
        ``after="0ms"``, one microstep later; ``after="5ms"``, 5 ms later;
        ``physical=True``, stamped with the receiver's physical time.

        Either side may be several ports (``Ports``: a bank's port, a
        multiport): the i-th output goes to the i-th input, and both sides
        must have the same width. ``broadcast=True`` (LF's ``(x)+``)
        repeats the outputs until every input has one: one value to every
        member of a bank."""
        sides = []
        for port, kind, role in ((source, "output", "from"), (target, "input", "to")):
            if not isinstance(port, (PortRef, Ports)):
                raise TypeError(f"connect takes ports of the program's reactors (e.g. prog.connect(camera.out, detector.inp)), not {port!r}")
            if port.kind != kind:
                raise ValueError(f"connect goes from an output to an input, but {port.path} (the {role} side) is an {port.kind}")
            sides.append(list(port) if isinstance(port, Ports) else [port])
        outs, ins = sides
        fits = (len(outs) > 0 and len(ins) % len(outs) == 0) if broadcast else len(outs) == len(ins)
        if not fits:
            how = (
                f"a broadcast needs {target.path}'s width to be a multiple of {source.path}'s"
                if broadcast
                else "connect equal widths (a bank of N to a multiport of width N), or pass broadcast=True to send each value to several inputs"
            )
            raise ValueError(f"connection {source.path} -> {target.path}: {source.path} has width {len(outs)} but {target.path} has width {len(ins)}; {how}")
        for j, t in enumerate(ins):
            self._connect_one(outs[j % len(outs)], t, after, physical)

    def _connect_one(self, source: PortRef, target: PortRef, after: Duration | None, physical: bool) -> None:
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
        # Its reactors declared from their classes are constructed now, in
        # the order the program added them (see _add_reactor, "deferred").
        # The federate run_federate runs: the one named, else the first.
        local = federate or os.environ.get("HPRM_FEDERATE") or (self.federates[0].name if self.federates else None)
        for f in self.federates:
            if f.name == local:
                for r in f.reactors:
                    r.instance  # noqa: B018 (reading it constructs it)
        _init_logging()
        return self._native.run_federate(federate, fast)

    def host(self, name: str, address: str, link: str | None = None) -> Program:
        """Adds a host: the program then spans several computers, each
        running its own store and ``hprm-link``, and every federate must be
        placed on one (``Federate.on``). ``address``: its IP address;
        ``link``: the Zenoh endpoint its link listens on (default
        ``tcp/ADDRESS:7447``). Launch each host's share there with
        ``hprm launch --host NAME program.py`` (or ``launch(host=NAME)``)."""
        self._native.host(name, address, link)
        return self

    def rti_on(self, host: str, port: int | None = None) -> Program:
        """Runs the RTI on ``host`` (default: the first host), on TCP port
        ``port`` there (default 15045)."""
        self._native.rti_on(host, port)
        return self

    def launch(
        self,
        fast: bool = False,
        timeout: Duration | None = None,
        store_memory: str = "256m",
        commands: dict[str, list[str]] | None = None,
        trace: str | os.PathLike[str] | None = None,
        store_args: list[str] | None = None,
        rti_args: list[str] | None = None,
        host: str | None = None,
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
        ``rti_args``: more arguments for hprm-rti, e.g.
        ``["--realtime-priority", "10"]``.
        ``host``: in a program with hosts (``Program.host``), start only this
        host's share (its store, link and federates, and the RTI if it runs
        there); also ``HPRM_LAUNCH_HOST``.

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
                    rti_args=[str(a) for a in (rti_args or [])],
                    host=host or os.environ.get("HPRM_LAUNCH_HOST") or None,
                )
        except RuntimeError as e:
            # It never ran: no daemon, or the program or a flag is wrong.
            code, summary = 2, str(e)
        if summary:
            print(f"error: {summary}", file=sys.stderr)
        if code:
            raise LaunchFailed(code, summary or f"program {self.name} failed (exit code {code})")
