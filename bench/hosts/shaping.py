"""How the hosts benchmarks shape the veth between their two namespaces:
the one place for the tc commands (hosts_bench.py, priority_bench.py).

A tbf qdisc limits each end's egress (this kernel has no netem), and its
child is a pfifo_fast, not tbf's default FIFO: pfifo_fast keeps three
bands by each packet's priority, which Linux derives from the TOS byte, so
hprm-link's bulk data (marked AF11 by default) waits in the low band while
unmarked small packets (the RTI's, the peers') go first. Behind a plain
FIFO they queue behind the bulk data, and tbf drops them when its queue
is full.
"""

from __future__ import annotations

import subprocess

BURST, LATENCY = "128kb", "50ms"
DESCRIPTION = f"a tbf qdisc (rate RATE, burst {BURST}, latency {LATENCY}) whose child is a pfifo_fast (three bands by the TOS byte)"


def describe(rate: str) -> str:
    """The shaping, in words, for a results file."""
    return DESCRIPTION.replace("RATE", rate)


def shape(netns: str, dev: str, rate: str | None) -> None:
    """Shapes `dev`'s egress in namespace `netns` to `rate` (tbf +
    pfifo_fast), or takes any shaping off (None)."""
    tc = ["ip", "netns", "exec", netns, "tc", "qdisc"]
    subprocess.run([*tc, "del", "dev", dev, "root"], capture_output=True)
    if rate is None:
        return
    subprocess.run([*tc, "add", "dev", dev, "root", "handle", "1:", "tbf", "rate", rate, "burst", BURST, "latency", LATENCY], check=True)
    subprocess.run([*tc, "add", "dev", dev, "parent", "1:1", "handle", "10:", "pfifo_fast"], check=True)
