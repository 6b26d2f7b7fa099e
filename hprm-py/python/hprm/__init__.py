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

from . import _native
from ._context import Context
from ._durations import Duration, Tag, duration_ns
from ._launch import LaunchFailed
from ._launch import _fail_federate as _fail_federate
from ._params import param
from ._ports import Input, LogicalAction, Output, PhysicalAction, Timer
from ._program import Bank, Federate, PortRef, Ports, Program, ReactorRef
from ._program import _FederateRef as _FederateRef  # the name Federate had before it was public
from ._program import _PortRef as _PortRef
from ._program import _ReactorRef as _ReactorRef
from ._reactor import Reactor, external, reaction
from ._store import store_object_id

PayloadError = _native.PayloadError
StoreLostError = _native.StoreLostError

__all__ = [
    "PayloadError",
    "StoreLostError",
    "LaunchFailed",
    "Reactor",
    "Input",
    "Output",
    "Timer",
    "LogicalAction",
    "PhysicalAction",
    "param",
    "reaction",
    "Program",
    "Federate",
    "Bank",
    "ReactorRef",
    "PortRef",
    "Ports",
    "Context",
    "Tag",
    "Duration",
    "duration_ns",
    "external",
    "store_object_id",
]
