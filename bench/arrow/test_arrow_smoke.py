"""The Arrow benchmark's programs run (tiny sizes, real processes) and their
values arrive whole, so the harness cannot rot unnoticed: the Python hop,
the Rust hop (hprm-node's arrow-hop example) and dora-rs's (when dora is
installed; the benchmark's venv has it, the test venv does not)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def measured(out: Path, kind: str, n: int) -> None:
    got = json.loads(out.read_text())
    assert got["kind"] == kind and len(got["latency_ms"]) == n and all(x > 0 for x in got["latency_ms"]), got


@pytest.mark.parametrize("kind", ["arrow", "numpy"])
def test_one_hop_program_measures_every_message(kind, tmp_path):
    out = tmp_path / "hop.json"
    cmd = [sys.executable, str(HERE / "arrow_hop.py"), "--kind", kind, "--mb", "0.5", "--messages", "4", "--warmup", "1", "--period", "20ms", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ, NO_COLOR="1", RUST_LOG="warn"))
    assert r.returncode == 0, r.stderr[-3000:]
    measured(out, kind, 4)


@pytest.mark.parametrize("kind", ["arrow", "buffer"])
def test_the_rust_hop_measures_every_message(kind):
    build = ["cargo", "build", "--locked", "-p", "hprm-node", "--features", "arrow", "--example", "arrow-hop"]
    hop = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug" / "examples" / "arrow-hop"
    if not hop.exists():
        # Compiling the arrow crates takes minutes: a run that has not
        # built the example skips this test, except in CI.
        missing = f"{hop} is not built: `{' '.join(build)}` at the repository root"
        if os.environ.get("CI"):
            pytest.fail(f"{missing} (scripts/test-all.sh builds it)")
        pytest.skip(missing)
    subprocess.run(build, cwd=ROOT, check=True)
    # XDG_RUNTIME_DIR must be short (a Unix socket path lives in it).
    d = Path(tempfile.mkdtemp(prefix="arrow-hop-", dir="/tmp"))
    try:
        out = d / "hop.json"
        env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=str(d), HOP_KIND=kind, HOP_MB="0.5",
                   HOP_MESSAGES="4", HOP_WARMUP="1", HOP_PERIOD_MS="20", HOP_OUT=str(out))
        r = subprocess.run([str(hop)], capture_output=True, text=True, timeout=120, env=env, cwd=d)
        assert r.returncode == 0, r.stderr[-3000:]
        measured(out, kind, 4)
        bad = subprocess.run([str(hop)], capture_output=True, text=True, timeout=60, env=dict(env, HOP_KIND="tensor"), cwd=d)
        assert bad.returncode == 2 and "HOP_KIND is `tensor`: expected arrow or buffer" in bad.stderr, bad.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_the_dora_hop_measures_every_message(tmp_path):
    pytest.importorskip("dora", reason="dora-rs is not installed here (bench/run.sh installs it into the benchmark's venv)")
    out = tmp_path / "hop.json"
    cmd = [sys.executable, str(HERE / "arrow_dora.py"), "--mb", "0.5", "--messages", "4", "--warmup", "1", "--period-ms", "50", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}"))
    assert r.returncode == 0, (r.stderr or r.stdout)[-3000:]
    measured(out, "dora", 4)
