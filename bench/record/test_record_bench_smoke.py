"""The recording benchmark's program runs under `hprm launch --record` (tiny
frames, real processes): every frame reaches the sink and the recorder, and
the launcher's report parses, so the harness cannot rot unnoticed."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_the_camera_program_is_measured_and_recorded_whole(tmp_path):
    hprm = Path(sys.executable).parent / "hprm"
    out, rec = tmp_path / "sink.json", tmp_path / "run.mcap"
    runtime = tempfile.mkdtemp(prefix="recb-", dir="/tmp")
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", HPRM_PYTHON=sys.executable, XDG_RUNTIME_DIR=runtime)
    cmd = [str(hprm), "launch", "--store-memory", "64m", "--record", str(rec), "--record-compression", "none",
           str(HERE / "record_program.py"), "--mb", "0.2", "--fps", "50", "--frames", "6", "--warmup", "2", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["received"] == got["sent"] == 8 and len(got["latency_ms"]) == 6 and all(x > 0 for x in got["latency_ms"])
    spec = importlib.util.spec_from_file_location("record_bench_parse", HERE / "record_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    report = bench.recorder_line(r.stderr)
    assert report["messages"] == 8 and report["lost"] == 0 and report["bytes"] >= 8 * got["frame_bytes"], report


def test_the_dora_side_runs_and_its_recorder_is_read():
    """dora-rs's side of the benchmark (record_dora.py), where its wheels are installed: tiny frames,
    without and with `dora record --proxy`; every frame reaches the sink, and the recorder's count parses
    (what it records is the benchmark's finding, not checked here)."""
    import shutil

    import pytest

    beside = Path(sys.executable).parent / "dora"
    if not beside.exists() and shutil.which("dora") is None:
        pytest.skip("dora-rs is not installed in this environment (bench/run.sh installs it: pip install dora-rs-cli dora-rs)")
    sys.path.insert(0, str(HERE))
    import record_dora

    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with record_dora.Coordinator():
        for record in (None, "run.drec"):
            out = Path(tempfile.mkdtemp(prefix="recd-")) / "sink.json"
            cmd = [sys.executable, str(HERE / "record_dora.py"), "--mb", "0.001", "--fps", "50", "--frames", "6", "--warmup", "2", "--out", str(out)]
            if record:
                cmd += ["--record", str(out.parent / record)]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
            assert r.returncode == 0, (r.stderr or r.stdout)[-3000:]
            got = json.loads(out.read_text())
            assert got["received"] == got["sent"] == 8 and len(got["latency_ms"]) == 6, got
            if record:
                assert isinstance(got["recorded"], int) and got["recorder_line"].startswith("Recording finished"), got
