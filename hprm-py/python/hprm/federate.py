"""``python -m hprm.federate``: runs one Python federate of a TOML manifest.

``hprm launch MANIFEST.toml`` starts this for every federate with a
``module``: the launcher's environment names the federate
(``HPRM_FEDERATE``) and the manifest's JSON form (``HPRM_MANIFEST``). The
federate's reactors are the manifest's ``class`` names in its module (a
Python file relative to the manifest, or an importable module), built with
the manifest's ``args``; every other federate is a port-only stand-in, so
the program has the same connections, in the same order, as in every
other process. A class whose ports differ from the manifest's is an error
that names both lists.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from typing import Any

from . import Input, Output, Program, Reactor, external
from ._launch import _fail_federate
from ._program import _port_names, _split_channel
from ._reactor import _declared


def _base(name: str) -> str:
    """A multiport's name without its width (``frames[4]`` -> ``frames``)."""
    return _split_channel(name)[0]


def _member(name: str, names: list[str]) -> tuple[int, int] | None:
    """(index, width) of ``name`` in its bank among ``names`` (the names
    at its level): ``rollout[3]`` is member 3 of bank ``rollout``, whose
    width is its number of members (see the Rust ``manifest::bank``)."""
    base, bracket, rest = name.partition("[")
    if not bracket or not rest.endswith("]") or not rest[:-1].isdigit():
        return None
    return int(rest[:-1]), sum(1 for n in names if n.partition("[")[0] == base and n.endswith("]"))


def _load_module(name: str) -> Any:
    if name.endswith(".py"):
        path = os.path.abspath(name)
        if not os.path.isfile(path):
            raise SystemExit(f"error: the manifest names module {name!r}, but there is no file {path}")
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise SystemExit(f"error: cannot import module {name!r} named by the manifest: {e}") from e


def _class_ports(cls: type) -> tuple[list[str], list[str]]:
    ins, outs = [], []
    for attr, v in _declared(cls).items():
        if isinstance(v, Input):
            ins.append(attr)
        elif isinstance(v, Output):
            outs.append(attr)
    return ins, outs


def build(manifest: dict, local: str) -> Program:
    """The manifest's program, with federate ``local``'s reactors real."""
    prog = Program(
        manifest["name"],
        coordination=manifest.get("coordination", "centralized"),
        stp=manifest.get("stp", "20ms"),
        timeout=manifest.get("timeout"),
        threshold=manifest.get("threshold", 65536),
    )
    reactors: dict[tuple[str, str], Any] = {}
    federate_names = [f["name"] for f in manifest.get("federate", [])]
    for f in manifest.get("federate", []):
        fed = prog.federate(f["name"])
        module = _load_module(f["module"]) if f["name"] == local and f.get("module") else None
        for r in f.get("reactor", []):
            ins, outs = _port_names(r.get("inputs", [])), _port_names(r.get("outputs", []))
            if f["name"] != local:
                stand_in = external(inputs=ins, outputs=outs)
                reactors[(f["name"], r["name"])] = fed.reactor(r["name"], stand_in)
                continue
            if module is None:
                raise SystemExit(f"error: federate {local} has no module in the manifest; give module = \"file.py\"")
            cls = getattr(module, r.get("class") or "", None)
            if not (isinstance(cls, type) and issubclass(cls, Reactor)):
                raise SystemExit(f"error: reactor {local}.{r['name']}: module {f['module']} has no hprm.Reactor class {r.get('class')!r}")
            cins, couts = _class_ports(cls)
            if sorted(cins) != sorted(map(_base, ins)) or sorted(couts) != sorted(map(_base, outs)):
                raise SystemExit(
                    f"error: reactor {local}.{r['name']}: class {cls.__name__} has inputs {cins} and outputs {couts}, "
                    f"but the manifest declares inputs {ins} and outputs {outs}; make them agree"
                )
            # A member of a thread bank is a reactor name[i]; of a process bank, a federate name[i].
            bank = _member(r["name"], [x["name"] for x in f["reactor"]]) if _member(f["name"], federate_names) is None else _member(f["name"], federate_names)
            ref = prog._add_reactor(fed, r["name"], cls, (), r.get("args", {}), bank=bank)
            fed.reactors.append(ref)
            reactors[(f["name"], r["name"])] = ref

    def port(path: str) -> Any:
        parts = path.split(".")
        if len(parts) == 2:
            fed = next(f for f in manifest["federate"] if f["name"] == parts[0])
            parts = [parts[0], fed["reactor"][0]["name"], parts[1]]
        return getattr(reactors[(parts[0], parts[1])], parts[2])

    for c in manifest.get("connection", []):
        prog.connect(port(c["from"]), port(c["to"]), after=c.get("after"), physical=c.get("physical", False))
    return prog


def main() -> None:
    local = os.environ.get("HPRM_FEDERATE")
    path = os.environ.get("HPRM_MANIFEST")
    if not local or not path:
        raise SystemExit("error: python -m hprm.federate runs a federate for `hprm launch MANIFEST.toml`, which sets HPRM_FEDERATE and HPRM_MANIFEST; run that instead")
    with open(path) as f:
        manifest = json.load(f)
    prog = build(manifest, local)
    try:
        prog.run(fast=os.environ.get("HPRM_FAST") == "1")
    except RuntimeError as e:
        _fail_federate(local, e)


if __name__ == "__main__":
    main()
