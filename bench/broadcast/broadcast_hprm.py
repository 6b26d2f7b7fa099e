"""Broadcast and gather with HPRM (BENCHMARKS.md workload 3): a real HPRM
Python program, a source federate and 4 receiver federates (one process
each), launched with ``prog.launch()`` (its own store and RTI), fast mode.

The source sends ``{"round": r, "data": payload}``: the payload, a plain
numpy array, is copied into the store by the send (that copy is timed, as
ROS 2's serialization is). Echo receivers set the array they received: HPRM
sends it on by reference (the same store object, no copy). Fresh receivers
allocate a new array in the store (``ctx.alloc_array``) and fill it. The
replies come back one microstep later (``after="0ms"``); the next round is
sent from the reaction that received the round's last reply.

``--payload reference`` (echo only) measures the same round with nothing
copied at all: the source copies its array into a store array once and
sends that same array every round, by reference; its ends keep round 0's
mark, which the replies are checked against. The source also times a warm
memcpy of the payload's size (two private arrays, both touched before)
after the last round, in the same process, while the receivers wait idle
for the next tag (``memcpy_ns``): issue 23's target
compares the private round with the by-reference one plus 3 such copies.

Decentralized in fast mode every tag has the start time (only microsteps
advance), so the STP window is closed after the first tag: replies after
the first of a round may arrive tardy, at a later tag. The source counts
replies by round number across tags, so a tardy reply is counted when it
arrives (no tardy handler: the reaction's body runs for it).

    python broadcast_hprm.py --coordination centralized|decentralized \
        --size BYTES --variant echo|fresh --rounds N --warmup N --out FILE.json
"""

from __future__ import annotations

import resource
import time

import numpy as np

import hprm
from broadcast_common import RECEIVERS, ROUND_TIMEOUT_S, fresh_reply, make_payload, mark, parse_args, reply_problem, write_result



def _args(p):
    p.add_argument("--coordination", choices=("centralized", "decentralized"), required=True)
    p.add_argument(
        "--store",
        choices=("sized", "default", "default-populated"),
        default="sized",
        help="sized: an arena of 12 payloads (at least 256 MiB), pre-faulted (--populate), as a robot's store "
        "would run; default: what a new user gets (256 MiB, not pre-faulted); default-populated: 256 MiB, pre-faulted",
    )
    p.add_argument(
        "--payload",
        choices=("private", "reference"),
        default="private",
        help="private: the source copies its own array into the store each round; reference: it sends one store "
        "array every round, by reference (no copy; echo only)",
    )
    p.add_argument(
        "--hosts",
        metavar="ADDRESS_A,ADDRESS_B",
        help="span two hosts (bench/hosts): the source and the RTI on host a, the receivers on host b; "
        "launch each host's share there with HPRM_LAUNCH_HOST=a|b",
    )
    p.add_argument("--socket-priority", type=int, help="SO_PRIORITY on every federate's connections (.realtime(socket_priority=))")
    p.add_argument("--dscp", help="DSCP on every federate's connections (.realtime(dscp=)), e.g. EF")
    p.add_argument("--rti-arg", action="append", default=[], help="one more argument for hprm-rti (repeat), e.g. --rti-arg=--dscp=EF")


ARGS = parse_args(extra=_args)
SIZE, VARIANT, WARMUP, TOTAL = ARGS.size, ARGS.variant, ARGS.warmup, ARGS.warmup + ARGS.rounds
BY_REFERENCE = ARGS.payload == "reference"
if BY_REFERENCE and VARIANT != "echo":
    raise SystemExit("--payload reference needs --variant echo (fresh replies copy nothing from the source)")
MEMCPY_SAMPLES = 30


def warm_memcpy_ns(src: np.ndarray) -> list[int]:
    """One copy of `src` into a private array, both already touched, timed
    MEMCPY_SAMPLES times after 3 untimed."""
    dst = np.empty_like(src)
    samples = []
    for i in range(3 + MEMCPY_SAMPLES):
        t0 = time.perf_counter_ns()
        np.copyto(dst, src)
        if i >= 3:
            samples.append(time.perf_counter_ns() - t0)
    return samples


def minor_faults() -> int:
    """This process's minor page faults so far (a write to a store page not
    yet in its page table is one; so is each page a pre-fault maps)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Source(hprm.Reactor):
    out = hprm.Output()
    reply0 = hprm.Input()
    reply1 = hprm.Input()
    reply2 = hprm.Input()
    reply3 = hprm.Input()

    def __init__(self):
        self.payload = make_payload(SIZE)
        self.round = 0
        self.replies = 0
        self.stamp = 0
        self.latency: list[int] = []
        self.first: list[int] = []
        # Time spent in the send itself (the copy into the store), to show
        # where the latency goes.
        self.set_ns: list[int] = []
        # The warm-up rounds' latencies: where a store's cold pages show
        # (the first rounds land on blocks no process has written yet).
        self.warmup_ns: list[int] = []
        # Minor page faults of this process over the measured rounds (from
        # the first measured send to the last reply): 0 a round once every
        # block in use has been written before (issue 23).
        self.faults_at_warmup: int | None = None
        self.faults = 0
        self.memcpy_ns: list[int] = []
        self.error: str | None = None
        # --payload reference: the store array sent every round (made in the
        # first round: store arrays come from a reaction's context).
        self.shared = None

    def send(self, ctx):
        if self.round == WARMUP:
            self.faults_at_warmup = minor_faults()
        if BY_REFERENCE:
            if self.shared is None:
                self.shared = ctx.alloc_array((SIZE,), np.uint8)
                np.copyto(self.shared, self.payload)
                mark(self.shared, 0)
            data = self.shared
        else:
            mark(self.payload, self.round)
            data = self.payload
        self.replies = 0
        self.stamp = time.perf_counter_ns()
        ctx.set(self.out, {"round": self.round, "stamp": self.stamp, "data": data})
        if self.round >= WARMUP:
            self.set_ns.append(time.perf_counter_ns() - self.stamp)

    @hprm.reaction(triggers="startup", effects="out")
    def start(self, ctx):
        self.send(ctx)

    @hprm.reaction(triggers=["reply0", "reply1", "reply2", "reply3"], effects="out")
    def gather(self, ctx):
        now = time.perf_counter_ns()
        before = self.replies
        for port in (self.reply0, self.reply1, self.reply2, self.reply3):
            if not port.is_present:
                continue
            v = port.value
            if v["round"] != self.round:
                continue
            problem = reply_problem(v["data"], SIZE, 0 if BY_REFERENCE else self.round, VARIANT)
            if problem:
                self.error = problem
                ctx.request_stop()
                return
            self.replies += 1
        if self.round >= WARMUP and before == 0 and self.replies > 0:
            self.first.append(now - self.stamp)
        if self.replies < RECEIVERS:
            if now - self.stamp > ROUND_TIMEOUT_S * 1e9:
                self.error = f"round {self.round} timed out after {ROUND_TIMEOUT_S:g} s"
                ctx.request_stop()
            return
        if self.round >= WARMUP:
            self.latency.append(now - self.stamp)
        else:
            self.warmup_ns.append(now - self.stamp)
        self.round += 1
        if self.round >= TOTAL:
            if self.faults_at_warmup is not None:
                self.faults = minor_faults() - self.faults_at_warmup
            self.memcpy_ns = warm_memcpy_ns(self.payload)
            ctx.request_stop()
            return
        self.send(ctx)

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        if self.error is None and len(self.latency) < ARGS.rounds:
            self.error = f"stopped after {len(self.latency)} of {ARGS.rounds} measured rounds"
        write_result(ARGS.out, self.latency, self.first, self.error, send_ns=self.set_ns, warmup_ns=self.warmup_ns,
                     minor_faults=self.faults, payload=ARGS.payload, memcpy_ns=self.memcpy_ns)


class Receiver(hprm.Reactor):
    """Replies to every round; records, by the source's stamp (one clock on
    the host), when its reaction started and when its reply was set, to
    show where a round's time goes."""

    inp = hprm.Input()
    reply = hprm.Output()

    def __init__(self, index):
        self.index = index
        self.started: list[int] = []
        self.replied: list[int] = []
        self.faults_at_warmup: int | None = None

    @hprm.reaction(triggers="inp", effects="reply")
    def answer(self, ctx):
        now = time.perf_counter_ns()
        v = self.inp.value
        r = v["round"]
        if r == WARMUP:
            self.faults_at_warmup = minor_faults()
        if VARIANT == "echo":
            data = v["data"]  # the received store object, sent on by reference
        else:
            data = fresh_reply(ctx.alloc_array((SIZE,), np.uint8), r)
        ctx.set(self.reply, {"round": r, "data": data})
        if r >= WARMUP:
            self.started.append(now - v["stamp"])
            self.replied.append(time.perf_counter_ns() - v["stamp"])

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        faults = 0 if self.faults_at_warmup is None else minor_faults() - self.faults_at_warmup
        write_result(f"{ARGS.out}.recv{self.index}", self.replied, self.started, minor_faults=faults)


prog = hprm.Program(f"bcast-{ARGS.coordination}", coordination=ARGS.coordination, stp="5ms")
src = prog.federate("source", Source)
if ARGS.hosts:
    address_a, address_b = ARGS.hosts.split(",")
    prog.host("a", address_a).host("b", address_b).rti_on("a")
    src.on("a")
feds = [src]
for i in range(RECEIVERS):
    rx = prog.federate(f"recv{i}", Receiver, i)
    feds.append(rx)
    if ARGS.hosts:
        rx.on("b")
    prog.connect(src.out, rx.inp)
    prog.connect(rx.reply, getattr(src, f"reply{i}"), after="0ms")
if ARGS.socket_priority is not None or ARGS.dscp:
    for f in feds:
        f.realtime(socket_priority=ARGS.socket_priority, dscp=ARGS.dscp)

if __name__ == "__main__":
    # The round's source object and up to four fresh replies are live at
    # once, plus the previous round's until they are released.
    mib = max(256, 12 * SIZE // 2**20) if ARGS.store == "sized" else 256
    prog.launch(fast=True, store_memory=f"{mib}m", store_args=[] if ARGS.store == "default" else ["--populate"], rti_args=ARGS.rti_arg)
