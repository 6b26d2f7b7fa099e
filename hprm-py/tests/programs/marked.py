"""A source whose TCP connections are marked (SO_PRIORITY, DSCP) sends 5
ticks to an unmarked sink over TCP (HPRM_LOCAL_TRANSPORT=tcp); each prints
the marks its own process's TCP sockets carry, read from the sockets
themselves (checked by test_realtime.py).

Usage: python marked.py SOCKET_PRIORITY DSCP BEST_EFFORT
"""

import os
import socket
import sys

import hprm

SOCKET_PRIORITY, DSCP, BEST_EFFORT = sys.argv[1:4]


def marks():
    """(SO_PRIORITY, DSCP) of every TCP socket of this process."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            s = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue  # not a socket
        with s:
            if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            tos = s.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) if s.family == socket.AF_INET else s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS)
            try:
                s.getpeername()
            except OSError:
                continue  # a listener: its accepted connections are marked on accept
            found.append((s.getsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY), tos >> 2))
    return sorted(set(found)), len(found)


class Source(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="2ms")
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        ctx.set(self.out, self.n)
        self.n += 1

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        found, n = marks()
        print(f"source: marks {found} on {n} connections", flush=True)


class Sink(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self):
        self.got = 0

    @hprm.reaction(triggers="inp")
    def take(self, ctx):
        self.got += 1

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        found, n = marks()
        print(f"sink: got {self.got}; marks {found} on {n} connections", flush=True)


prog = hprm.Program("marked", timeout="8ms")
src = prog.federate("source", Source)
src.realtime(
    socket_priority=None if SOCKET_PRIORITY == "-" else int(SOCKET_PRIORITY),
    dscp=None if DSCP == "-" else DSCP,
    best_effort=BEST_EFFORT == "1",
)
sink = prog.federate("sink", Sink)
prog.connect(src.out, sink.inp)

if __name__ == "__main__":
    prog.launch()
