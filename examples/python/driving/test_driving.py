"""The driving example end to end: four federate processes, a real store
and RTI, the real networks (random weights) on onnxruntime.

Centralized coordination makes it deterministic: two runs with one seed
apply the same sequence of controls, bit for bit; a run with another seed
(other weights, another world) applies others, so the comparison can
fail. Skipped, saying how to install them, when onnx or onnxruntime is
missing (scripts/test-all.sh installs both).

    python -m pytest examples/python/driving
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
STEPS, WARMUP = 4, 1

missing = [m for m in ("onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"{' and '.join(missing)} not installed: pip install onnx onnxruntime")


def drive(tmp_path, name, *args):
    report = tmp_path / f"{name}.json"
    cmd = [sys.executable, str(HERE / "driving.py"), "--steps", str(STEPS), "--warmup", str(WARMUP), "--report", str(report), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"driving.py {' '.join(args)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return json.loads(report.read_text())


def test_same_seed_same_controls_centralized(tmp_path):
    first = drive(tmp_path, "a", "--seed", "3")
    second = drive(tmp_path, "b", "--seed", "3")
    assert len(first["controls"]) == STEPS + WARMUP
    assert first["controls"] == second["controls"]
    # The state feeds back: the controls change from step to step.
    assert len({tuple(c) for c in first["controls"]}) > 1
    other = drive(tmp_path, "c", "--seed", "4")
    assert other["controls"] != first["controls"]


def test_decentralized_runs_every_step(tmp_path):
    r = drive(tmp_path, "d", "--coordination", "decentralized", "--seed", "3")
    assert r["system"] == "hprm-decentralized"
    assert len(r["controls"]) == STEPS + WARMUP and r["steps"] == STEPS
    assert all(ms > 0 for ms in r["loop_ms"])


@pytest.mark.parametrize("args, message", [
    (["--steps", "0"], "--steps and --warmup must be at least 1"),
    (["--carla", "nohost"], "give the server as HOST:PORT"),
    (["--detector-width", "3"], "--detector-width must be in (0, 1]"),
])
def test_bad_flag_is_one_clear_error(args, message):
    r = subprocess.run([sys.executable, str(HERE / "driving.py"), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert message in r.stderr
