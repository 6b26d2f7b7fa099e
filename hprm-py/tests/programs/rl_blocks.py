"""hprm.rl's blocks in real programs (an RTI, a store, one process per
federate), each printing what it saw for tests/test_rl.py.

    python rl_blocks.py rollout ENV PLACEMENT ROUNDS   a driver ticks 2 workers; prints each batch's digest
    python rl_blocks.py weights PLACEMENT              a 3-member bank gets one weights message
    python rl_blocks.py replay MEMORY                  2 workers fill a replay buffer of MEMORY bytes
"""

import hashlib
import sys

import numpy as np

import hprm
from hprm.rl import ReplayBuffer, RolloutWorker, WeightBroadcast, unpack_weights, weights_digest


def batch_digest(b):
    h = hashlib.sha256()
    for k in sorted(k for k, v in b.items() if isinstance(v, np.ndarray)):
        h.update(k.encode() + b[k].dtype.str.encode() + str(b[k].shape).encode() + np.ascontiguousarray(b[k]).tobytes())
    return h.hexdigest()[:16]


class Driver(hprm.Reactor):
    """Ticks the workers ROUNDS times, printing each round's batches."""

    go = hprm.Output()
    batches = hprm.Input(width="workers")

    def __init__(self, workers, rounds):
        self.workers, self.rounds, self.round = workers, rounds, 0

    @hprm.reaction(triggers="startup", effects="go")
    def start(self, ctx):
        ctx.set(self.go, 0)

    @hprm.reaction(triggers="batches", effects="go")
    def gather(self, ctx):
        for b in ctx.get(self.batches):
            shapes = {k: list(v.shape) for k, v in sorted(b.items()) if isinstance(v, np.ndarray)}
            print(f"batch worker={b['worker']} round={b['round']} digest={batch_digest(b)} shapes={shapes}", flush=True)
        self.round += 1
        if self.round == self.rounds:
            ctx.request_stop()
        else:
            ctx.set(self.go, self.round)


class Learner(hprm.Reactor):
    params = hprm.Output()

    @hprm.reaction(triggers="startup", effects="params")
    def start(self, ctx):
        rng = np.random.default_rng(3)
        p = {"w1": rng.standard_normal((256, 512)).astype(np.float32), "b1": np.arange(512, dtype=np.float64), "steps": np.array([7], np.int64)}
        print(f"sent {weights_digest(p)}", flush=True)
        ctx.set(self.params, p)


class Reader(hprm.Reactor):
    weights = hprm.Input()

    @hprm.reaction(triggers="weights")
    def read(self, ctx):
        msg = ctx.get(self.weights)
        p = unpack_weights(msg)
        views = all(not v.flags.writeable for v in p.values())
        # One write: the members of a thread bank print at the same time.
        sys.stdout.write(f"member={ctx.bank_index} version={msg['version']} digest={weights_digest(p)} object={hprm.store_object_id(msg['data'])} readonly={views}\n")
        sys.stdout.flush()


class Sink(hprm.Reactor):
    sample = hprm.Input()

    @hprm.reaction(triggers="sample")
    def show(self, ctx):
        s = ctx.get(self.sample)
        print(f"replay size={s['size']} samples={len(s['samples'])} losses={s['losses']}", flush=True)


class Replay(ReplayBuffer):
    @hprm.reaction(triggers="shutdown")
    def report(self, ctx):
        st = self.storage
        print(f"final size={len(st)} nbytes={st.nbytes} memory={st.memory} batches={len(st.batches)} losses={st.losses}", flush=True)


mode = sys.argv[1]
prog = hprm.Program(f"rl-{mode}", coordination="centralized")
if mode == "rollout":
    env, placement, rounds = sys.argv[2], sys.argv[3], int(sys.argv[4])
    drv = prog.federate("driver", Driver, 2, rounds)
    w = prog.bank("worker", RolloutWorker, 2, placement=placement, env=env, steps=50, envs=2, seed=10)
    prog.connect(drv.go, w.weights, broadcast=True)
    prog.connect(w.batch, drv.batches, after="0ms")
elif mode == "weights":
    lf = prog.federate("learner")
    learner = lf.reactor("learner", Learner)
    bcast = lf.reactor("broadcast", WeightBroadcast)
    prog.connect(learner.params, bcast.params)
    readers = prog.bank("reader", Reader, 3, placement=sys.argv[2])
    prog.connect(bcast.weights, readers.weights, broadcast=True)
elif mode == "replay":
    drv = prog.federate("driver", Driver, 2, 6)
    w = prog.bank("worker", RolloutWorker, 2, placement="threads", env="CartPole-v1", steps=500, envs=1, seed=20)
    replay = prog.federate("replay", Replay, 2, batch_size=32, memory=int(sys.argv[2]), seed=1)
    sink = prog.federate("sink", Sink)
    prog.connect(drv.go, w.weights, broadcast=True)
    prog.connect(w.batch, drv.batches, after="0ms")
    prog.connect(w.batch, replay.batches)
    prog.connect(replay.sample, sink.sample)
else:
    sys.exit(f"unknown mode {mode!r}: rollout, weights or replay")

if __name__ == "__main__":
    prog.launch(fast=True)
