"""The HPRM program of the bridge tests: federate "ros" is hprm-ros2-bridge
(an external federate), the others are Python.

  program.py BRIDGE CONFIG OUT [--record PORT ...] [--send PORT:KIND ...]
             [--relay IN:OUT ...] [--respond REQ:RESP ...] [--count N] [--timeout S]

--record: the bridge's output PORT goes to federate "sink", which records
the first N values of each such port to OUT (pickle, rewritten at each
value) and stops the program once it has N of each.
--send: federate "source" sends samples.as_hprm(KIND, k), k = 1, 2, ...,
every 100 ms to the bridge's input PORT. --relay: federate "relay" sends
what arrives on the bridge's output IN back to its input OUT. --respond:
federate "server" answers the k-th service request arriving on the bridge's
output REQ with {"success": True, "message": "served by hprm k"} on its
input RESP.
"""

import argparse
import os
import pickle
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hprm  # noqa: E402

import samples  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("bridge")
ap.add_argument("config")
ap.add_argument("out")
ap.add_argument("--record", nargs="*", default=[])
ap.add_argument("--send", nargs="*", default=[])
ap.add_argument("--relay", nargs="*", default=[])
ap.add_argument("--respond", nargs="*", default=[])
ap.add_argument("--count", type=int, default=3)
ap.add_argument("--timeout", default="60s")
ap.add_argument("--restartable", action="store_true", help="the launcher restarts the bridge when it fails")
ap.add_argument("--zero-delay", action="store_true", help="no `after` on the relay's way back into the bridge")
args = ap.parse_args()

send = [s.split(":") for s in args.send]
relay = [r.split(":") for r in args.relay]
respond = [r.split(":") for r in args.respond]


def copy(v):
    """A private copy of a received value (arrays leave the store)."""
    if isinstance(v, dict):
        return {k: copy(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [copy(x) for x in v]
    if isinstance(v, np.ndarray):
        return np.array(v, copy=True)
    return v


def sink_class(ports, count, out):
    def record(self, ctx):
        for p in ports:
            if ctx.is_present(getattr(self, p)) and len(self.got[p]) < count:
                self.got[p].append(copy(ctx.get(getattr(self, p))))
        with open(out + ".tmp", "wb") as f:
            pickle.dump(self.got, f)
        os.replace(out + ".tmp", out)
        if all(len(v) >= count for v in self.got.values()):
            print(f"sink: recorded {count} of {', '.join(ports)}", flush=True)
            ctx.request_stop()

    def init(self):
        self.got = {p: [] for p in ports}

    attrs = {p: hprm.Input() for p in ports}
    attrs["__init__"] = init
    attrs["record"] = hprm.reaction(triggers=ports)(record)
    return type("Sink", (hprm.Reactor,), attrs)


def source_class(pairs):
    def init(self):
        self.tick = hprm.Timer(offset="500ms", period="100ms")
        self.k = 0

    def emit(self, ctx):
        self.k += 1
        for port, kind in pairs:
            ctx.set(getattr(self, port), samples.as_hprm(kind, self.k))

    attrs = {p: hprm.Output() for p, _ in pairs}
    attrs["__init__"] = init
    attrs["emit"] = hprm.reaction(triggers="tick", effects=[p for p, _ in pairs])(emit)
    return type("Source", (hprm.Reactor,), attrs)


def relay_class(pairs):
    attrs = {}
    for i, (src, dst) in enumerate(pairs):
        attrs[f"in_{src}"] = hprm.Input()
        attrs[f"out_{dst}"] = hprm.Output()

        def forward(self, ctx, src=src, dst=dst):
            ctx.set(getattr(self, f"out_{dst}"), ctx.get(getattr(self, f"in_{src}")))

        attrs[f"forward{i}"] = hprm.reaction(triggers=f"in_{src}", effects=f"out_{dst}")(forward)
    return type("Relay", (hprm.Reactor,), attrs)


def server_class(pairs):
    attrs = {}
    for i, (req, resp) in enumerate(pairs):
        attrs[f"req_{req}"] = hprm.Input()
        attrs[f"resp_{resp}"] = hprm.Output()

        def answer(self, ctx, req=req, resp=resp):
            self.n += 1
            ctx.set(getattr(self, f"resp_{resp}"), {"success": True, "message": f"served by hprm {self.n}"})

        attrs[f"answer{i}"] = hprm.reaction(triggers=f"req_{req}", effects=f"resp_{resp}")(answer)

    def init(self):
        self.n = 0

    attrs["__init__"] = init
    return type("Server", (hprm.Reactor,), attrs)


prog = hprm.Program("ros2_bridge_test", timeout=args.timeout)
outputs = args.record + [s for s, _ in relay] + [q for q, _ in respond]
inputs = [p for p, _ in send] + [d for _, d in relay] + [r for _, r in respond]
ros = prog.federate("ros", hprm.external(inputs=inputs, outputs=outputs))
if args.restartable:
    ros.restart_on_failure()
if args.record:
    sink = prog.federate("sink", sink_class(args.record, args.count, args.out))
    for p in args.record:
        prog.connect(getattr(ros, p), getattr(sink, p))
if send:
    source = prog.federate("source", source_class(send))
    for p, _ in send:
        prog.connect(getattr(source, p), getattr(ros, p))
if relay:
    rl = prog.federate("relay", relay_class(relay))
    for src, dst in relay:
        prog.connect(getattr(ros, src), getattr(rl, f"in_{src}"))
        # "after 0" (one microstep) on the way back. Without it the loop
        # ros -> relay -> ros is a zero-delay cycle between federates, which
        # centralized coordination resolves with provisional grants
        # (hprm-node/tests/physical.rs runs such a loop, with HPRM federates).
        prog.connect(getattr(rl, f"out_{dst}"), getattr(ros, dst), after=None if args.zero_delay else "0ms")
if respond:
    server = prog.federate("server", server_class(respond))
    for req, resp in respond:
        prog.connect(getattr(ros, req), getattr(server, f"req_{req}"))
        prog.connect(getattr(server, f"resp_{resp}"), getattr(ros, resp), after="0ms")

if __name__ == "__main__":
    prog.launch(commands={"ros": [args.bridge, "--config", args.config]})
