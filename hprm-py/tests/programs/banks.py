"""Banks and multiports, launched for real (tests/test_banks.py).

    banks.py broadcast PLACEMENT MODE WIDTH MB ROUNDS
        a learner broadcasts an MB-megabyte array to a bank of WIDTH
        workers; each replies; the learner gathers the replies through a
        multiport and prints them.
    banks.py cameras PLACEMENT MODE AFTER
        a bank of 4 cameras into a 4-wide multiport of a fusion reactor,
        with `after` AFTER ("none" for no delay).
    banks.py pool PLACEMENT MODE HAND
        a small worker pool; HAND=hand writes the members out by hand with
        the same names (the trace test compares the two).
    banks.py interleaved PLACEMENT interleaved|plain
        a 3-wide multiport into a bank of 3 (one channel each), each member's
        2-wide multiport back into one 6-wide multiport, interleaved(bank.parts)
        or member by member.
    banks.py restart
        a process bank of 3 whose member 1 kills itself once; it is
        restarted while the others go on.
    banks.py live TICKS
        a process bank of 3 beacons ticking every 10 ms into a sink, in real
        time (for `hprm ps` and `hprm topic`).
"""

import os
import sys

import numpy as np

import hprm

SCENARIO = sys.argv[1]


class Learner(hprm.Reactor):
    weights = hprm.Output()

    def __init__(self, mb, rounds):
        self.n = int(mb * 1_000_000)
        self.rounds = rounds
        self.tick = hprm.Timer(period="50ms")
        self.k = 0

    @hprm.reaction(triggers="tick", effects="weights")
    def send(self, ctx):
        self.k += 1
        if self.k > self.rounds:
            ctx.request_stop()
            return
        a = ctx.alloc_array(self.n, np.uint8)
        a[:] = (np.arange(self.n, dtype=np.uint64) * 7 + self.k).astype(np.uint8)
        print(f"sent round={self.k} object={hprm.store_object_id(a)}", file=sys.stderr, flush=True)
        ctx.set(self.weights, {"round": self.k, "w": a})


class Worker(hprm.Reactor):
    weights = hprm.Input()
    reply = hprm.Output()

    def __init__(self, seed):
        # bank_index is set before __init__ runs.
        assert seed == 100 + self.bank_index, (seed, self.bank_index)
        self.seed = seed

    @hprm.reaction(triggers="weights", effects="reply")
    def work(self, ctx):
        v = ctx.get(self.weights)
        w = v["w"]
        checksum = int(w[:: 4099].astype(np.uint64).sum()) + int(w[-1])
        ctx.set(self.reply, {"member": ctx.bank_index, "width": ctx.bank_width, "seed": self.seed, "round": v["round"], "checksum": checksum, "object": str(hprm.store_object_id(w))})


class Gather(hprm.Reactor):
    def __init__(self, n):
        self.n = n

    replies = hprm.Input(width="n")

    @hprm.reaction(triggers="replies")
    def gather(self, ctx):
        got = ctx.get(self.replies)
        assert all(self.replies[i].is_present for i in range(len(self.replies)))
        for r in got:
            print(f"reply round={r['round']} member={r['member']}/{r['width']} seed={r['seed']} checksum={r['checksum']} object={r['object']}", file=sys.stderr, flush=True)


class Camera(hprm.Reactor):
    frame = hprm.Output()

    def __init__(self, device):
        self.device = device
        self.tick = hprm.Timer(period="20ms")
        self.seq = 0

    @hprm.reaction(triggers="tick", effects="frame")
    def capture(self, ctx):
        self.seq += 1
        if self.seq > 4:
            ctx.request_stop()
            return
        ctx.set(self.frame, {"cam": ctx.bank_index, "device": self.device, "seq": self.seq, "pixels": np.full((64, 64), self.bank_index, np.uint8)})


class Fusion(hprm.Reactor):
    frames = hprm.Input(width=4)

    @hprm.reaction(triggers="frames")
    def fuse(self, ctx):
        t = ctx.tag
        got = ctx.get(self.frames)
        present = [i for i in range(len(self.frames)) if self.frames[i].is_present]
        cams = [(f["cam"], f["device"], f["seq"], int(f["pixels"][0, 0])) for f in got]
        print(f"fused at={(t.time - ctx.start_time) // 1_000_000}ms micro={t.microstep} present={present} frames={cams}", file=sys.stderr, flush=True)


class Task(hprm.Reactor):
    job = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="10ms")
        self.k = 0

    @hprm.reaction(triggers="tick", effects="job")
    def emit(self, ctx):
        self.k += 1
        if self.k > 5:
            ctx.request_stop()
            return
        ctx.set(self.job, self.k)


class PoolWorker(hprm.Reactor):
    job = hprm.Input()
    done = hprm.Output()

    def __init__(self, seed):
        self.seed = seed

    @hprm.reaction(triggers="job", effects="done")
    def work(self, ctx):
        ctx.set(self.done, ctx.get(self.job) * self.seed)


class Sum(hprm.Reactor):
    done = hprm.Input(width=3)

    @hprm.reaction(triggers="done")
    def total(self, ctx):
        print(f"pool total={sum(ctx.get(self.done))} at={ctx.elapsed // 1_000_000}ms", file=sys.stderr, flush=True)


class Scatter(hprm.Reactor):
    """Sends channel c of its 3-wide multiport to bank member c."""

    outs = hprm.Output(width=3)

    @hprm.reaction(triggers="startup", effects="outs")
    def scatter(self, ctx):
        for c in range(3):
            self.outs[c].set(100 + c)


class Splitter(hprm.Reactor):
    """A member: from the value it gets, one value per channel of its
    2-wide output multiport: 10 * member + channel, offset by the input."""

    inp = hprm.Input()
    parts = hprm.Output(width=2)

    @hprm.reaction(triggers="inp", effects="parts")
    def split(self, ctx):
        for c in range(2):
            self.parts[c].set(ctx.get(self.inp) * 100 + 10 * ctx.bank_index + c)


class Joiner(hprm.Reactor):
    """Gets the members' channels through one 6-wide multiport."""

    ins = hprm.Input(width=6)

    @hprm.reaction(triggers="ins")
    def join(self, ctx):
        print(f"joined {ctx.get(self.ins)}", file=sys.stderr, flush=True)


class Flaky(hprm.Reactor):
    out = hprm.Output()

    def __init__(self):
        self.tick = hprm.Timer(period="30ms")
        self.k = 0

    @hprm.reaction(triggers="tick", effects="out")
    def emit(self, ctx):
        self.k += 1
        marker = os.environ.get("BANKS_MARKER", "")
        if ctx.bank_index == 1 and self.k == 3 and marker and not os.path.exists(marker):
            open(marker, "w").close()
            print("member 1 dies", file=sys.stderr, flush=True)
            os._exit(9)
        # A bound for a restart that never comes; Count stops the program.
        if self.k > 300:
            ctx.request_stop()
            return
        ctx.set(self.out, (ctx.bank_index, self.k))


class Count(hprm.Reactor):
    """Stops the program once member 1 has come back and sent twice.

    (Stopping at a fixed tick instead would race the restart: a loaded
    machine takes longer than a few ticks to start a Python process.)
    """

    ins = hprm.Input(width=3)

    def __init__(self):
        self.member1 = []

    @hprm.reaction(triggers="ins")
    def count(self, ctx):
        for i in range(3):
            if self.ins[i].is_present:
                m, k = self.ins[i].value
                print(f"got member={m} k={k}", file=sys.stderr, flush=True)
                if m == 1:
                    self.member1.append(k)
        if self.member1.count(1) == 2 and self.member1[-1] >= 2:
            ctx.request_stop()


class Beacon(hprm.Reactor):
    out = hprm.Output()

    def __init__(self, ticks):
        self.ticks = ticks
        self.tick = hprm.Timer(period="10ms")
        self.k = 0

    @hprm.reaction(triggers="tick", effects="out")
    def emit(self, ctx):
        self.k += 1
        if self.k > self.ticks:
            ctx.request_stop()
            return
        ctx.set(self.out, {"member": ctx.bank_index, "k": self.k})


class Sink(hprm.Reactor):
    ins = hprm.Input(width="bank_width_of_source")

    def __init__(self, n):
        self.bank_width_of_source = n
        self.got = 0

    @hprm.reaction(triggers="ins")
    def take(self, ctx):
        self.got += len(ctx.get(self.ins))

    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        print(f"sink got {self.got}", file=sys.stderr, flush=True)


def main():
    if SCENARIO == "broadcast":
        placement, mode, width, mb, rounds = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
        prog = hprm.Program("broadcast", coordination=mode, stp="300ms")
        learner = prog.federate("learner")
        src = learner.reactor("learner", Learner, mb, rounds)
        gather = learner.reactor("gather", Gather, width)
        workers = prog.bank("worker", Worker, width, placement=placement, member_args=lambda i: {"seed": 100 + i})
        prog.connect(src.weights, workers.weights, broadcast=True)
        prog.connect(workers.reply, gather.replies)
        prog.launch(store_memory="1g")
    elif SCENARIO == "cameras":
        placement, mode, after = sys.argv[2], sys.argv[3], sys.argv[4]
        prog = hprm.Program("cameras", coordination=mode, stp="100ms")
        cams = prog.bank("cam", Camera, 4, placement=placement, member_args=[{"device": f"/dev/video{i}"} for i in range(4)])
        fusion = prog.federate("fusion", Fusion)
        prog.connect(cams.frame, fusion.frames, after=None if after == "none" else after)
        prog.launch()
    elif SCENARIO == "pool":
        placement, mode, hand = sys.argv[2], sys.argv[3], sys.argv[4] == "hand"
        prog = hprm.Program("pool", coordination=mode, stp="100ms")
        task = prog.federate("task", Task)
        total = prog.federate("sum", Sum)
        if not hand:
            pool = prog.bank("w", PoolWorker, 3, placement=placement, member_args=lambda i: {"seed": i + 1})
            prog.connect(task.job, pool.job, broadcast=True)
            prog.connect(pool.done, total.done, after="0ms")
        else:
            # The same graph, written out member by member.
            if placement == "threads":
                shared = prog.federate("w")
                members = [shared.reactor(f"w[{i}]", PoolWorker, seed=i + 1) for i in range(3)]
            else:
                members = [prog.federate(f"w[{i}]", PoolWorker, seed=i + 1) for i in range(3)]
            for m in members:
                prog.connect(task.job, m.job)
            for i, m in enumerate(members):
                prog.connect(m.done, total.done[i], after="0ms")
        prog.launch()
    elif SCENARIO == "interleaved":
        # A multiport to a bank (one channel per member), and the bank's
        # multiports back, interleaved or member by member.
        placement, order = sys.argv[2], sys.argv[3]
        prog = hprm.Program("interleaved")
        scatter = prog.federate("scatter", Scatter)
        split = prog.bank("split", Splitter, 3, placement=placement)
        join = prog.federate("join", Joiner)
        prog.connect(scatter.outs, split.inp)
        prog.connect(split.interleaved("parts") if order == "interleaved" else split.parts, join.ins)
        prog.launch()
    elif SCENARIO == "restart":
        prog = hprm.Program("restart")
        bank = prog.bank("flaky", Flaky, 3).restart_on_failure(max_restarts=2)
        count = prog.federate("count", Count)
        prog.connect(bank.out, count.ins)
        prog.launch()
    elif SCENARIO == "live":
        prog = hprm.Program("live")
        beacons = prog.bank("cam", Beacon, 3, int(sys.argv[2]))
        sink = prog.federate("sink", Sink, 3)
        prog.connect(beacons.out, sink.ins)
        prog.launch()
    else:
        raise SystemExit(f"unknown scenario {SCENARIO}")


if __name__ == "__main__":
    main()
