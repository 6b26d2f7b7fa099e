"""Smoke test of the side-by-side benchmark harness (bench/suite/suite.py and
its workloads: broadcast_bench.py, small_bench.py), so that it cannot rot
between benchmark runs: the same programs bench/run.sh runs, with tiny
sizes and one round.

HPRM is required: every HPRM variant (centralized and decentralized; echo
and fresh) runs as real federate processes with their own store and RTI.
Each baseline (ROS 2 rclpy, ROS 2 + shared memory, dora-rs, iceoryx2) has
its own test, skipped with the reason when it is not installed; the Unix
socket floor and the memcpy floor always run.

    python -m pytest bench/suite/test_broadcast_smoke.py
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

# The workloads' directories beside this one (bench/README.md: the layout).
BENCH = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(BENCH / d) for d in ("broadcast", "small", "python", "common")]

import broadcast_bench as bb  # noqa: E402
import small_bench as sb  # noqa: E402
import suite  # noqa: E402

# Under and over the 64 KiB out-of-band threshold: inline and through the store.
SIZES = [1_000, 100_000]
SMALL_SIZES = [8, 70_000]
BASELINE_WHY = bb.unavailable()
SMALL_WHY = sb.unavailable()


@pytest.fixture(autouse=True)
def _own_ros_domain(monkeypatch):
    # Keep ROS 2 traffic of this test away from other ROS 2 processes on the host.
    monkeypatch.setenv("ROS_DOMAIN_ID", str(150 + os.getpid() % 80))


def system(key, table=bb.systems):
    return next(s for s in table() if s.key == key)


def check_point(p, size, variant):
    assert "error" not in p, p.get("error")
    assert p["n"] == 1 and p["median_us"] > 0
    assert p["median_us"] == p["p99_us"]  # one round: one sample


@pytest.mark.parametrize("variant", ["echo", "fresh"])
@pytest.mark.parametrize("key", ["hprm_centralized", "hprm_decentralized"])
def test_hprm_broadcast(tmp_path, key, variant):
    for size in SIZES:
        p = bb.run_point(system(key), size, variant, rounds=1, warmup=0, workdir=tmp_path)
        check_point(p, size, variant)
        assert p["send"]["n"] == 1  # the source reports its send calls too


@pytest.mark.parametrize("key", ["ros2", "ros2_shm", "dora"])
def test_baseline_broadcast(tmp_path, key):
    if key in BASELINE_WHY:
        pytest.skip(BASELINE_WHY[key])
    for variant in ("echo", "fresh"):
        check_point(bb.run_point(system(key), SIZES[-1], variant, rounds=1, warmup=0, workdir=tmp_path), SIZES[-1], variant)


def test_hprm_failure_fails_the_run(tmp_path):
    """A required system that cannot run raises (the run fails) with its reason."""
    broken = bb.System("hprm_centralized", "HPRM centralized", [*system("hprm_centralized").argv[:2], "--coordination", "nonsense"], True)
    p = bb.run_point(broken, SIZES[0], "echo", rounds=1, warmup=0, workdir=tmp_path)
    assert "error" in p and "nonsense" in p["error"]


def test_memcpy_floor():
    m = bb.memcpy_floor(100_000, 3)
    assert m["n"] == 3 and m["median_us"] > 0


def small_plan(**kw):
    return dict(sizes=SMALL_SIZES, rounds=1, warmup=0, passes=1, rate_messages=50, rate_warmup=5, **kw)


def test_small_hprm_and_socket_floor():
    skip = [k for k in ("iceoryx2", "rclpy", "dora")]
    r = sb.measure(small_plan(), skip=skip, progress=lambda _: None)
    for key in ("hprm_py_decentralized", "hprm_py_centralized", "socket"):
        pts = r["systems"][key]["points"]
        assert [p["size_bytes"] for p in pts] == SMALL_SIZES, r["systems"][key]
        for p in pts:
            assert p["one_way"]["n"] == 1 and 0 < p["one_way"]["median_us"] <= p["rtt"]["median_us"]
    assert set(r["skipped"]) == set(skip)
    # The sustained-rate stream: every message of a lossless path arrives.
    for key in ("hprm_py_decentralized", "hprm_py_centralized", "socket"):
        rate = r["rate"][key]
        assert "error" not in rate, rate
        assert rate["received"] == rate["sent"] == 50 and rate["msgs_per_s"] > 0


@pytest.mark.parametrize("key", ["iceoryx2", "rclpy", "dora"])
def test_small_baseline(key):
    if key in SMALL_WHY:
        pytest.skip(SMALL_WHY[key])
    others = [s.key for s in sb.systems() if s.key != key]
    r = sb.measure(small_plan(), skip=others, progress=lambda _: None)
    assert "error" not in r["systems"][key], r["systems"][key].get("error")
    assert [p["size_bytes"] for p in r["systems"][key]["points"]] == SMALL_SIZES
    assert "error" not in r["rate"][key] and r["rate"][key]["received"] >= 1, r["rate"][key]
    if key == "iceoryx2":  # lossless: the publisher retries while the buffer is full
        assert r["rate"][key]["received"] == r["rate"][key]["sent"] == 50, r["rate"][key]


@pytest.fixture(scope="module")
def tiny_report():
    """A tiny real run of the broadcast workload (HPRM only, the baselines
    skipped on request), judged as bench/run.sh judges a run."""
    plan = dict(sizes=[1_000, 1_000_000], variants=["echo"], rounds=1, warmup=0, memcpy_rounds=3)
    b = bb.measure(plan, skip=["ros2", "ros2_shm", "dora"], progress=lambda _: None)
    report = {"date": "smoke", "mode": "quick", "machine": suite.machine_info(), "versions": suite.versions(),
              "loadavg_start": None, "loadavg_end": None, "seconds": 0, "broadcast": b}
    report["targets"] = suite.judge(report)
    return report


def test_report(tiny_report):
    """The report renders and judges every target; a target whose baseline
    did not run says "not measured", with the reason."""
    assert set(tiny_report["broadcast"]["skipped"]) == {"ros2", "ros2_shm", "dora"}
    names = {t["name"]: t for t in tiny_report["targets"]}
    assert set(names) == {"broadcast_10mb", "broadcast_1mb", "broadcast_50mb"}
    assert names["broadcast_1mb"]["met"] is None and "skipped on request" in names["broadcast_1mb"]["line"]
    assert names["broadcast_10mb"]["met"] is None  # 10 MB not in this run
    md = suite.render(tiny_report)
    assert "| 1 MB |" in md and "HPRM decentralized" in md and "receivers start" in md


def test_plots(tiny_report, tmp_path):
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed: the plots are not drawn (bench/run.sh installs it)")
    paths = suite.plot(tiny_report, Path(tmp_path) / "smoke")
    assert paths and all(p.stat().st_size > 0 for p in paths)
