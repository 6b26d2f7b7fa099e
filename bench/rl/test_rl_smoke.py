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


def test_multi_agent_inference_takes_the_actions_of_the_loop_without_middleware(tmp_path):
    import marl_core

    agents, steps, warmup = 3, 40, 5
    # The same world and policies stepped in this process: the trajectory every system must take.
    world = marl_core.World(agents, seed=0)
    policies = [marl_core.Policy(world.obs_dim, i, 0) for i in range(agents)]
    for _ in range(warmup + steps):
        world.step([p.act(o) for p, o in zip(policies, world.observations())])
    for placement in ("threads", "processes"):
        out = tmp_path / f"marl-{placement}.json"
        run("marl_hprm.py", "--placement", placement, "--agents", agents, "--steps", steps, "--warmup", warmup, "--out", out)
        got = json.loads(out.read_text())
        assert (got["digest"], got["reward"], got["steps"]) == (world.digest.hexdigest(), round(world.reward, 6), steps)


def test_traffic_junction_moves_cars_along_their_routes_and_counts_collisions():
    from traffic_junction import BRAKE, GAS, TrafficJunction

    env = TrafficJunction(n_max=4, seed=3)
    start = list(env.pos)
    assert len(set(start)) == 4 and all(env.on_road)  # four cars, one at each gate
    _, rewards, done, _ = env.step([BRAKE] * 4)
    assert env.pos == start and rewards == [-0.01] * 4 and done == [False] * 4
    env.step([GAS] * 4)
    # Every car moved one cell along its direction of travel (no car ahead of another at the start).
    assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in zip(env.pos, start))
    with pytest.raises(ValueError, match="actions are 0"):
        env.step([2, 0, 0, 0])
    # The same seed, the same episode.
    a, b = TrafficJunction(n_max=10, seed=5), TrafficJunction(n_max=10, seed=5)
    for _ in range(150):
        oa, ra, da, ca = a.step([GAS] * 10)
        ob, rb, db, cb = b.step([GAS] * 10)
        assert all((x == y).all() for x, y in zip(oa, ob)) and (ra, da, ca) == (rb, db, cb)
    assert a.steps == 150 and all(a.done)  # max_steps (100) ended the episode
