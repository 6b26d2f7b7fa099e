"""The Arrow benchmark's program runs (tiny sizes, real processes) and its
record batches arrive whole, so the harness cannot rot unnoticed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("kind", ["arrow", "numpy"])
def test_one_hop_program_measures_every_message(kind, tmp_path):
    out = tmp_path / "hop.json"
    cmd = [sys.executable, str(HERE / "arrow_hop.py"), "--kind", kind, "--mb", "0.5", "--messages", "4", "--warmup", "1", "--period", "20ms", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ, NO_COLOR="1", RUST_LOG="warn"))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["kind"] == kind and len(got["latency_ms"]) == 4 and all(x > 0 for x in got["latency_ms"])
