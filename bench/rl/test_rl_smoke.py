"""The RL benchmark's HPRM programs run (tiny sizes, real processes), and
its DQN trains exactly what the same algorithm trains sequentially in one
process, without middleware: the property that lets the report compare
HPRM's and Ray's learning curves (Ray itself is not installed in CI)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def run(script, *args):
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn")
    r = subprocess.run([sys.executable, str(HERE / script), *map(str, args)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]


def test_collection_runs_in_both_placements_and_counts_its_transitions(tmp_path):
    for placement in ("threads", "processes"):
        out = tmp_path / f"{placement}.json"
        run("rl_hprm.py", "--env", "CartPole-v1", "--placement", placement, "--workers", 2, "--steps", 50, "--rounds", 3, "--warmup", 1, "--out", out)
        got = json.loads(out.read_text())
        assert got["transitions"] == 2 * 50 * 3 and got["rate"] > 0


def test_hprm_dqn_trains_the_weights_of_the_sequential_algorithm(tmp_path):
    import collect
    import dqn_core

    from hprm.rl import weights_digest

    workers, steps, batch, updates = 3, 16, 64, 24
    out = tmp_path / "dqn.json"
    run("dqn_hprm.py", "--placement", "processes", "--workers", workers, "--steps", steps, "--batch", batch, "--updates", updates, "--out", out)
    got = json.loads(out.read_text())
    # The same rounds, one worker after another, in this process.
    learner, replay = dqn_core.Learner(seed=0), dqn_core.Replay(100_000, seed=7)
    actors = [collect.Collector("Blackjack-v1", i, steps, policy=dqn_core.policy) for i in range(workers)]
    curve = []
    while learner.updates < updates:
        returns = []
        for a in actors:
            a.params = learner.params
            b = a.collect()
            replay.add(b)
            returns += b["returns"]
        if replay.size >= batch:
            for _ in range(4):
                learner.update(replay.sample(batch))
        curve.append([learner.updates, sum(returns) / len(returns) if returns else 0.0])
    assert got["digest"] == weights_digest(learner.params)
    assert [c[:2] for c in got["curve"]] == curve
