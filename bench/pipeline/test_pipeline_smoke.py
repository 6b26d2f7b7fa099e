"""Smoke test of the driving-pipeline benchmark (bench/pipeline/run.py), so
that it cannot rot between benchmark runs: the runner's own code paths
with the smallest plan (1 warm-up + 2 measured steps, one round).

Every HPRM variant always runs (it fails, saying how to get it, when the
SDK or onnxruntime is missing: scripts/test-all.sh installs both). Each
baseline (ROS 2 + SM, ROS 2, dora-rs) has its own test, skipped with the
runner's reason and install hint when it is not installed here.

    python -m pytest bench/pipeline
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402

PLAN = bench.PLANS["smoke"]


@pytest.fixture(scope="module", autouse=True)
def models():
    missing = [m for m in ("onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not installed: pip install onnx onnxruntime (scripts/test-all.sh does)")


def check(name, r):
    assert r["system"] == name
    assert r["steps"] == PLAN["steps"] and len(r["controls"]) == PLAN["warmup"] + PLAN["steps"]
    assert len(r["loop_ms"]) == PLAN["steps"] and all(ms > 0 for ms in r["loop_ms"])
    assert all(s["detector"] > 0 and s["agent"] > 0 for s in r["stage_ms"])


def test_every_hprm_variant_and_the_report(tmp_path):
    rep = bench.run(("hprm-centralized", "hprm-decentralized"), PLAN)
    assert not rep["failed"] and not rep["skipped"], (rep["failed"], rep["skipped"])
    for name in ("hprm-centralized", "hprm-decentralized"):
        r = rep["results"][name]
        assert r["rounds"] == 1
        check(name, {**r, "controls": r["controls"][0]})
        assert r["summary"]["median_fps"] > 0
    # One seed, one world: both coordinations apply the same controls.
    assert rep["results"]["hprm-centralized"]["controls"] == rep["results"]["hprm-decentralized"]["controls"]
    stem = tmp_path / "pipeline-smoke"
    bench.write(rep, stem)
    assert json.loads(Path(f"{stem}.json").read_text())["reference"] == "hprm-centralized"
    md = Path(f"{stem}.md").read_text()
    assert "| HPRM centralized |" in md and "| HPRM decentralized |" in md
    if importlib.util.find_spec("matplotlib") is not None:
        assert Path(f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert not Path(f"{stem}.png").exists()


@pytest.mark.parametrize("name", ["ros2-sm", "ros2", "dora"])
def test_baseline(name, tmp_path):
    try:
        r = bench.run_system(name, PLAN, 0, tmp_path, None)
    except bench.Skip as e:
        pytest.skip(f"{bench.LABELS[name]}: {e}")
    check(name, r)


def test_bad_only_is_one_clear_error(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--quick", "--out", "/tmp", "--only", "hprm,ros3"])
    assert e.value.code == 2
    assert "unknown system(s) hprm, ros3" in capsys.readouterr().err
