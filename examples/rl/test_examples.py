"""The RL examples run end to end (real store, RTI and processes): the
parallel DQN trains and prints its weights digest, the same on two runs
(centralized coordination and fixed seeds), whatever the placement. Small:
two workers, the --quick number of updates."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gymnasium", reason="pip install 'hprm[rl]' (the test command does)")
pytest.importorskip("torch", reason="the example's learner is a torch network")

DQN = Path(__file__).parent / "dqn.py"


def digest(placement):
    r = subprocess.run([sys.executable, str(DQN), "--quick", "--workers", "2", "--placement", placement], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"weights digest ([0-9a-f]+)", r.stderr + r.stdout)
    assert m, r.stderr[-3000:]
    return m.group(1)


def test_the_parallel_dqn_trains_to_the_same_weights_in_either_placement():
    assert digest("threads") == digest("processes")
