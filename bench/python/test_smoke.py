"""Smoke test of the Python benchmark harness (bench/python/pybench.py), so that
it cannot rot between benchmark runs: the same functions the benchmark runs,
with tiny arrays (100 KB: over the codec's 64 KiB threshold, so they still
go through the store) and one round.

HPRM is required: the tests fail, saying how to get it, when the hprm SDK or
the hprm-store daemon is missing (found through $HPRM_BIN_DIR, the venv's
bin/ where hprm-py/install.sh puts it, target/release, or PATH). Each
baseline (Plasma from pyarrow 11, ROS 2 rclpy) has its own test, skipped
with the reason when it is not installed; the standard library's
shared_memory and pickle always run.

    python -m pytest bench/python
"""

import importlib.util
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

import pybench as pb

SIZE = 100_000
TINY_PLAN = dict(warmup=0, rounds=1, ser_warmup=0, ser_rounds=1, slow_rounds=1, scaling_warmup=0, scaling_rounds=1)


@pytest.fixture(scope="module")
def hprm_store():
    try:
        import hprm  # noqa: F401
    except ImportError as e:
        pytest.fail(f"the hprm SDK is not importable ({e}); install it with `hprm-py/install.sh VENV` and run pytest from that venv")
    try:
        binary = pb.find_hprm_store()
    except pb.BenchError as e:
        pytest.fail(str(e))
    with tempfile.TemporaryDirectory(prefix="pybench-smoke-") as tmp:
        store = pb.start_hprm_store(binary, Path(tmp), "64M")
        try:
            yield store
        finally:
            store.stop()


@pytest.fixture(scope="module")
def codec(hprm_store):
    c = pb.hprm_codec(hprm_store.socket)
    assert pb.prime_codec(c) >= 0
    return c


@pytest.fixture(scope="module")
def reader(hprm_store):
    r = pb.Reader(hprm_store.socket)
    try:
        yield r
    finally:
        r.close()


def check_write_points(results, keys):
    assert set(results) == set(keys), results.keys()
    for key in keys:
        [point] = results[key]
        assert point["size_bytes"] == SIZE
        assert point["n"] == 1 and point["median_us"] > 0
        assert point["read_check"]["ok"], point["read_check"]


def check_ser(results, keys):
    assert set(results) == set(keys), results.keys()
    for key in keys:
        assert results[key]["ser"]["median_us"] > 0 and results[key]["de"]["median_us"] > 0


# ---------------------------------------------------------------------------
# HPRM


def test_hprm_write_delay_is_read_by_another_process(codec, reader, hprm_store):
    systems = [pb.HprmWrite(codec), pb.HprmColdWrite(hprm_store.socket), pb.MemcpyFloor()]
    results = pb.measure_write_delay(systems, [SIZE], warmup=0, rounds=1, reader=reader)
    check_write_points(results, ["hprm", "hprm_cold", "memcpy"])
    assert reader.pid != __import__("os").getpid()


def test_hprm_serialization(codec):
    results = pb.measure_serialization([pb.HprmSer(codec), pb.HprmRelaySer(codec), pb.MemcpySer()], SIZE, 0, 1, 1)
    check_ser(results, ["hprm", "hprm_relay", "memcpy"])


def test_hprm_alloc_array_serialization(codec):
    if not hasattr(codec, "alloc_array"):
        pytest.skip("this hprm SDK has no Codec.alloc_array")
    results = pb.measure_serialization([pb.HprmAllocSer(codec)], SIZE, 0, 1, 1)
    check_ser(results, ["hprm_alloc"])


def test_hprm_born_in_the_store_serialization(codec):
    results = pb.measure_serialization([pb.HprmBornSer(codec)], SIZE, 0, 1, 1)
    check_ser(results, ["hprm_born"])


def test_hprm_decode_is_a_read_only_view_of_the_store(codec):
    arr = pb.make_array(SIZE)
    got = codec.decode(codec.encode(arr, 1))
    assert np.array_equal(got, arr) and not got.flags.writeable  # zero-copy views are read-only


def test_hprm_deserialization_scaling(codec):
    results = pb.measure_deserialization_scaling([pb.HprmSer(codec), pb.HprmRelaySer(codec)], [SIZE, 2 * SIZE], 0, 1)
    assert list(results) == ["hprm"]  # the relay variant is not in the scaling series
    assert [p["size_bytes"] for p in results["hprm"]] == [SIZE, 2 * SIZE]


def test_whole_run_hprm_only_writes_report(tmp_path):
    """run() end to end with every baseline skipped: JSON and markdown
    written, the baselines named as skipped, the targets judged or said
    not to be."""
    try:
        import hprm  # noqa: F401
    except ImportError as e:
        pytest.fail(f"the hprm SDK is not importable ({e})")
    report = pb.run("quick", tmp_path, skip=pb.BASELINES, sizes=[SIZE], ser_size=SIZE, deser_sizes=[SIZE, 2 * SIZE],
                    plan=TINY_PLAN, store_memory="64M")
    stem = tmp_path / f"python-{report['date']}"
    saved = json.loads(Path(f"{stem}.json").read_text())
    md = Path(f"{stem}.md").read_text()
    assert set(saved["write_delay"]["systems"]) == {"hprm", "hprm_cold", "memcpy", "hprm_rt"}
    assert set(saved["serialization"]["systems"]) - {"hprm_alloc", "hprm_born"} == {"hprm", "hprm_relay", "memcpy"}
    assert set(saved["skipped"]) == set(pb.BASELINES)
    targets = {t["name"]: t for t in saved["targets"]}
    assert len(targets) == 3
    # Without Plasma and pickle the first two cannot be judged; O(1) can.
    assert [t["met"] is None for t in saved["targets"]] == [True, True, False]
    for heading in ("## Targets", "## Workload 1", "## Workload 2", "## Deserialization time by array size", "## Baselines not measured"):
        assert heading in md
    assert "NOT JUDGED" in md

    plot = tmp_path / "plot"
    plot.mkdir()
    if importlib.util.find_spec("matplotlib") is None:
        return  # the plots are covered by test_plot when matplotlib is there
    plot_python = load_plot_python()
    report = json.loads(Path(f"{stem}.json").read_text())
    for plot, path in plot_python.figures(report, stem):
        plot(report, path)
    for suffix in ("write-delay", "serialization", "deserialization"):
        assert Path(f"{stem}-{suffix}.png").stat().st_size > 0


def load_plot_python():
    path = Path(__file__).resolve().parent / "plot.py"
    spec = importlib.util.spec_from_file_location("plot_python", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plot_needs_matplotlib():
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed here (bench/python/run.sh installs it); the plots are not drawn")
    assert load_plot_python().STYLE["hprm"]


# ---------------------------------------------------------------------------
# Baselines


def skip_unless(name):
    ok, skipped = pb.available_baselines()
    if name not in ok:
        pytest.skip(f"baseline {name} not available: {skipped[name]}")


def test_baseline_shared_memory(reader):
    results = pb.measure_write_delay([pb.ShmWrite()], [SIZE], warmup=0, rounds=1, reader=reader)
    check_write_points(results, ["shm"])


def test_baseline_pickle():
    results = pb.measure_serialization([pb.PickleInband(), pb.PickleOutOfBand()], SIZE, 0, 1, 1)
    check_ser(results, ["pickle_inband", "pickle_oob"])


def test_baseline_plasma(hprm_store):
    skip_unless("plasma")
    with tempfile.TemporaryDirectory(prefix="pybench-smoke-plasma-") as tmp:
        store = pb.start_plasma_store(Path(tmp), 64 * 1_000_000)
        r = None
        try:
            r = pb.Reader(hprm_store.socket, store.socket)
            plasma = pb.import_plasma()
            client = plasma.connect(store.socket)
            results = pb.measure_write_delay([pb.PlasmaPut(plasma, client), pb.PlasmaCreate(plasma, client)], [SIZE], 0, 1, r)
            check_write_points(results, ["plasma_put", "plasma_create"])
        finally:
            if r:
                r.close()
            store.stop()


def test_baseline_rclpy():
    skip_unless("rclpy")
    results = pb.measure_serialization([pb.RclpyFast(), pb.RclpyNaive()], SIZE, 0, 1, 1)
    check_ser(results, ["rclpy", "rclpy_naive"])
