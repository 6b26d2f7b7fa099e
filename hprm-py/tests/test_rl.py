"""hprm.rl's building blocks with real environments and real processes (an
RTI, a store, one process per federate: tests/programs/rl_blocks.py and
rl_train.py): rollout workers, the weights broadcast, the replay buffer at
its memory budget, determinism of a training run whatever the number of
workers and the order their batches arrive in, and the deadline-driven
batch size."""

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

import hprm  # noqa: E402
from hprm.rl import BatchSizeController, ReplayStorage, RolloutWorker  # noqa: E402

PROGRAMS = Path(__file__).parent / "programs"


def launch(program, *args, timeout=240):
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn")
    return subprocess.run([sys.executable, str(PROGRAMS / program), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def lines(stderr, prefix):
    return [l.split("] ", 1)[1] for l in stderr.splitlines() if l.startswith(prefix)]


def digest(b):
    h = hashlib.sha256()
    for k in sorted(k for k, v in b.items() if isinstance(v, np.ndarray)):
        h.update(k.encode() + b[k].dtype.str.encode() + str(b[k].shape).encode() + np.ascontiguousarray(b[k]).tobytes())
    return h.hexdigest()[:16]


class Member(RolloutWorker):
    """A worker outside any program, as bank member i (the class attribute
    the bank sets before __init__)."""

    def __init__(self, index, **kw):
        self.bank_index = index
        super().__init__(**kw)


@pytest.mark.parametrize("env,placement", [("CartPole-v1", "processes"), ("Pendulum-v1", "threads"), ("Blackjack-v1", "threads")])
def test_rollout_workers_send_the_transitions_their_seeds_give(env, placement, daemons_built):
    r = launch("rl_blocks.py", "rollout", env, placement, 3)
    assert r.returncode == 0, r.stderr[-3000:]
    got = lines(r.stderr, "[driver]")
    # The same workers stepped here, in this process: what arrived is
    # exactly what the seeds give, batch by batch, in channel order.
    local = [Member(i, env=env, steps=50, envs=2, seed=10) for i in range(2)]
    want = []
    for k in range(3):
        for i, w in enumerate(local):
            b = w.collect()
            shapes = {key: list(v.shape) for key, v in sorted(b.items()) if isinstance(v, np.ndarray)}
            want.append(f"batch worker={i} round={k} digest={digest(b)} shapes={shapes}")
    assert got == want, r.stderr[-3000:]
    assert "'reward': [100]" in got[0]


def test_a_rollout_worker_makes_its_environments_on_its_first_round():
    # Only the process that steps them makes them, even where __init__
    # runs and no reaction does (a subclass that needs __init__ to be
    # described is constructed in the describing process too).
    made = []

    def factory():
        made.append(1)
        return gymnasium.make("CartPole-v1")

    w = Member(0, env=factory, steps=5, envs=2, seed=3)
    assert made == []
    b = w.collect()
    assert len(made) == 2 and len(b["reward"]) == 10
    w.collect()
    assert len(made) == 2
    # The same transitions as a worker whose environments were touched before its first round.
    early = Member(0, env="CartPole-v1", steps=5, envs=2, seed=3)
    assert len(early.envs) == 2
    assert digest(early.collect()) == digest(b)


@pytest.mark.parametrize("placement", ["threads", "processes"])
def test_weights_are_written_once_and_read_zero_copy_by_every_member(placement, daemons_built):
    r = launch("rl_blocks.py", "weights", placement)
    assert r.returncode == 0, r.stderr[-3000:]
    sent = lines(r.stderr, "[learner]")
    assert len(sent) == 1 and sent[0].startswith("sent ")
    want = sent[0].split()[1]
    got = sorted(l for l in r.stderr.splitlines() if "] member=" in l)
    assert len(got) == 3, r.stderr[-3000:]
    fields = [dict(kv.split("=") for kv in l.split("] ", 1)[1].split()) for l in got]
    assert {f["member"] for f in fields} == {"0", "1", "2"}
    assert all(f["digest"] == want and f["version"] == "0" and f["readonly"] == "True" for f in fields)
    # One store object, the very one each member read.
    objects = {f["object"] for f in fields}
    assert len(objects) == 1 and "None" not in objects


def test_the_replay_buffer_keeps_to_its_memory_budget_and_counts_what_it_drops(daemons_built):
    # CartPole batches of 500 transitions: obs and next_obs 8000 B each,
    # action 4000, reward 2000, the flags 500 each: 23000 B a batch.
    per_batch, budget = 23_000, 100_000
    r = launch("rl_blocks.py", "replay", budget)
    assert r.returncode == 0, r.stderr[-3000:]
    final = lines(r.stderr, "[replay]")
    m = re.fullmatch(r"final size=(\d+) nbytes=(\d+) memory=(\d+) batches=(\d+) losses=\{'evicted': (\d+), 'refused': (\d+)\}", final[-1])
    assert m, final
    size, nbytes, memory, batches, evicted, refused = map(int, m.groups())
    # 12 batches arrived (2 workers, 6 rounds); 4 fit the budget.
    assert (memory, batches, size, nbytes) == (budget, 4, 2000, 4 * per_batch)
    assert (evicted, refused) == (8 * 500, 0)
    seen = lines(r.stderr, "[sink]")
    assert seen[-1] == "replay size=2000 samples=1 losses={'evicted': 4000, 'refused': 0}", seen


def test_replay_storage_refuses_under_drop_newest_and_rejects_what_cannot_fit():
    st = ReplayStorage(capacity=250, memory="1m", seed=0, policy="drop-newest")
    batch = {"obs": np.zeros((100, 4), np.float32), "reward": np.zeros(100, np.float32)}
    for _ in range(4):
        st.add(batch)
    assert (len(st), st.losses) == (200, {"evicted": 0, "refused": 200})
    with pytest.raises(ValueError, match="does not fit a buffer of 250 transitions"):
        st.add({"obs": np.zeros((300, 4)), "reward": np.zeros(300)})
    with pytest.raises(ValueError, match="policy 'lifo' is not one of drop-oldest, drop-newest"):
        ReplayStorage(policy="lifo")
    with pytest.raises(ValueError, match="'64q' is not a size"):
        ReplayStorage(memory="64q")


def test_replay_storage_samples_by_arrival_position_however_batches_are_cut():
    rng = np.random.default_rng(0)
    rows = {"obs": rng.standard_normal((3000, 4)).astype(np.float32), "action": rng.integers(0, 2, 3000), "reward": rng.standard_normal(3000).astype(np.float32)}
    samples = []
    for cut in (25, 400, 1500):  # small ones go into chunks, large ones stay whole
        st = ReplayStorage(capacity=10_000, memory="1m", seed=3, chunk_bytes="16k")
        for i in range(0, 3000, cut):
            st.add({k: v[i : i + cut] for k, v in rows.items()})
        # 28 bytes a row: a 16 KiB chunk holds 585 rows (23 batches of 25).
        assert len(st) == 3000 and len(st.batches) == {25: 6, 400: 8, 1500: 2}[cut]
        samples.append(st.sample(512))
    picks = np.random.default_rng(3).integers(0, 3000, 512)
    for s in samples:
        assert all(np.array_equal(s[k], rows[k][picks]) for k in rows)
    # Evicting whole chunks keeps the count and the bound.
    st = ReplayStorage(capacity=1000, memory="1m", seed=0, chunk_bytes="4k")
    for i in range(0, 3000, 25):
        st.add({k: v[i : i + 25] for k, v in rows.items()})
    assert len(st) <= 1000 and len(st) + st.losses["evicted"] == 3000


class Frames(gymnasium.Env):
    """80x80 frames whose every pixel is the step count since the start
    (mod 251): a stack's frames say which steps they are."""

    observation_space = gymnasium.spaces.Box(0, 255, (80, 80), np.uint8)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((80, 80), np.uint8), {}

    def step(self, action):
        self.t += 1
        return np.full((80, 80), self.t % 251, np.uint8), 1.0, self.t % 37 == 0, False, {}


def test_stacked_frames_are_stored_once_and_sampled_as_stacks():
    w = Member(0, env=Frames, steps=100, envs=2, seed=0, frame_stack=4)
    st = ReplayStorage(capacity=10_000, memory="64m", seed=5)
    for _ in range(3):
        b = w.collect()
        # Each step adds one frame; each env's round adds its 4-frame
        # stack; each episode's end adds its first frame.
        assert len(b["frames"]) < 100 * 2 + 2 * 4 + 2 * 3 + 1
        st.add(b)
    full = 3 * 200 * 2 * 4 * 80 * 80  # obs and next_obs stacked per transition
    assert st.nbytes * 7 < full  # about 8x less than stacks stored per transition
    s = st.sample(256)
    assert s["obs"].shape == (256, 4, 80, 80) and s["next_obs"].shape == (256, 4, 80, 80)
    steps, nxt = s["obs"][:, :, 0, 0].astype(int), s["next_obs"][:, :, 0, 0].astype(int)
    # next_obs is obs shifted by one step, its new frame one step later,
    # or, after the episode's end, a fresh episode's repeated first frame.
    assert (nxt[:, :3] == steps[:, 1:]).all()
    assert ((nxt[:, 3] - steps[:, 3]) % 251 == 1).all()
    # Within an episode, a stack's frames are consecutive steps (or its
    # first frame repeated at the episode's start).
    d = np.diff(steps, axis=1)
    assert np.isin(d, [0, 1]).all() and ((d == 1) | (steps[:, 1:] == 0) | (steps[:, :-1] == 0)).all()


def run_training(workers, placement, jitter=True, seed=1000):
    args = ["--workers", workers, "--placement", placement, "--seed", seed] + (["--jitter"] if jitter else [])
    r = launch("rl_train.py", *args)
    assert r.returncode == 0, r.stderr[-3000:]
    out = [l for l in lines(r.stderr, "[learner]") if l.startswith("digest ")]
    assert len(out) == 1, r.stderr[-3000:]
    return out[0]


def test_training_gives_bit_identical_weights_with_1_4_and_16_workers_in_any_order(daemons_built):
    runs = [run_training(1, "threads", jitter=False), run_training(4, "processes"), run_training(16, "threads"), run_training(4, "processes")]
    assert len(set(runs)) == 1, runs
    assert "updates=20" in runs[0]
    # The digest is the weights': other environment seeds train other ones.
    assert run_training(4, "threads", seed=2000).split()[1] != runs[0].split()[1]


class SyntheticLearner(hprm.Reactor):
    """A step every 100 ms with a 100 ms deadline that takes 0.1 ms per
    sample of its batch (sleeping: the test is of the controller, not the
    CPU). Records, per step, whether it ended past its deadline (or the
    deadline handler ran instead) and the batch size it used."""

    runs: dict = {}

    def __init__(self, name, control, steps):
        self.tick = hprm.Timer(period="100ms")
        self.control = BatchSizeController(2000, maximum=4000, target=0.5) if control else None
        self.size, self.steps = 2000, steps
        self.late, self.sizes = [], []
        SyntheticLearner.runs[name] = self

    @hprm.reaction(triggers="tick", deadline="100ms")
    def step(self, ctx):
        self.sizes.append(self.size)
        time.sleep(self.size * 1e-4)
        self.finish(ctx)

    @step.deadline_handler
    def missed(self, ctx):
        self.sizes.append(0)
        self.finish(ctx, ran=False)

    def finish(self, ctx, ran=True):
        self.late.append(ctx.slack < 0)
        if self.control:
            self.size = self.control.update(ctx.slack, ctx.deadline, ran=ran)
        if len(self.late) == self.steps:
            ctx.request_stop()


def test_the_batch_size_controller_keeps_a_synthetic_learner_under_its_deadline():
    for name, control, steps in (("fixed", False, 8), ("controlled", True, 30)):
        prog = hprm.Program(f"deadline-{name}")
        prog.federate("learner", SyntheticLearner, name, control, steps)
        prog.run()
    fixed, controlled = SyntheticLearner.runs["fixed"], SyntheticLearner.runs["controlled"]
    # A fixed batch of 2000 (200 ms a step) misses every deadline.
    assert all(fixed.late), fixed.late
    # The controller starts there, misses, shrinks, and after its first 10
    # steps keeps to the deadline, with batches that fill half of it (its
    # target: 50 ms, 500 samples) rather than tiny ones. A loaded machine
    # may deschedule one step by tens of ms: one miss in 20 is allowed, the
    # fixed batch's 20 in 20 are not. Such a step also counts as slow, and
    # the controller sizes for the slowest step of its window (32 steps:
    # the rest of this run), so its batches may stay well under 500 after
    # one; a fifth of the target still tells them from a controller that
    # collapses to tiny batches to keep its deadline.
    assert controlled.late[0] and sum(controlled.late[10:]) <= 1, controlled.late
    assert all(100 <= s <= 800 for s in controlled.sizes[10:] if s), controlled.sizes


def test_the_controller_sizes_for_the_worst_recent_step_so_a_recurring_slow_step_misses_once():
    # A step takes 1 ms a sample, and every 10th 1.6 ms (another process
    # took the CPU): a deadline of 100 ms, 70% of it targeted. Sized from
    # the last step alone (window=1) the batch grows back to 70 samples
    # after each slow step, and every slow one (112 ms) misses; sized from
    # the worst of the window, only the first slow step misses.
    deadline = 100_000_000
    for window, misses in ((1, 10), (32, 1)):
        c = BatchSizeController(50, window=window)
        for step in range(1, 101):
            used = c.size * (1_600_000 if step % 10 == 0 else 1_000_000)
            c.update(slack=deadline - used, deadline=deadline)
        assert c.misses == misses, (window, c.misses)
    # A step its deadline handler replaced counts as a miss and changes nothing else.
    c = BatchSizeController(50)
    assert (c.update(slack=-5, deadline=deadline, ran=False), c.misses) == (50, 1)
    with pytest.raises(ValueError, match="window 0 must be at least 1"):
        BatchSizeController(10, window=0)


def test_the_controller_stays_within_its_memory_budget_and_reports_bad_settings():
    c = BatchSizeController(100, memory="1m", bytes_per_sample=4096)
    for _ in range(50):
        c.update(slack=90_000_000, deadline=100_000_000)
    assert c.size == 256  # 1 MiB / 4 KiB: it would grow further without the budget
    c.update(slack=-1, deadline=100_000_000)
    assert (c.size, c.misses) == (128, 1)
    with pytest.raises(ValueError, match="memory needs bytes_per_sample"):
        BatchSizeController(10, memory="1m")
    with pytest.raises(ValueError, match="need 0 < target < 1"):
        BatchSizeController(10, target=1.5)
