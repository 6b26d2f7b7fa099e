"""Replay (`hprm replay FILE.mcap PROGRAM`) with real processes: a recorded
program's federates, run again on the recorded inputs, send exactly what
they sent (`--check` prints `identical`); a changed reaction is caught at
its first difference, with the tag and the port; a program mixing Python
and Rust federates replays the same; bad input gets one clear error."""

import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("mcap", reason="recordings are read back with the `mcap` package (pip install mcap)")

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = Path(__file__).parent / "programs" / "replayed.py"
COUNT = 5


def environment(**extra):
    # A short runtime directory: socket paths have a length limit.
    runtime = tempfile.mkdtemp(prefix="rpl-", dir="/tmp")
    return dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=runtime, HPRM_PYTHON=sys.executable, **extra)


def hprm(exe, *args, env=None, timeout=120):
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env or environment())


@pytest.fixture(scope="module")
def recording(hprm_cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "run.mcap"
    r = hprm(hprm_cli, "launch", "--fast", "--record", out, PROGRAM, COUNT)
    assert r.returncode == 0, r.stderr
    assert "nothing lost" in r.stderr and f"sink: {COUNT} results, {COUNT} acks" in r.stderr, r.stderr
    return out


def summary_line(r):
    lines = [l for l in r.stdout.splitlines() if l.startswith("replay:")]
    assert len(lines) == 1, (r.stdout, r.stderr)
    return lines[0]


@pytest.mark.parametrize(
    ("federates", "expected"),
    [
        # Default: every federate that received a recorded message (worker and
        # sink); the worker's results and acks are compared, 2 per value.
        ((), f"replay: federates=2 messages={2 * COUNT} identical"),
        (("source",), f"replay: federates=1 messages={COUNT} identical"),
        (("worker",), f"replay: federates=1 messages={2 * COUNT} identical"),
        # At the recorded speed (50 ms of logical time): the same.
        (("worker", "--realtime"), f"replay: federates=1 messages={2 * COUNT} identical"),
    ],
)
def test_each_federate_replays_identical(hprm_cli, recording, federates, expected):
    flags = [a for f in federates for a in (("--federate", f) if not f.startswith("--") else (f,))]
    r = hprm(hprm_cli, "replay", recording, PROGRAM, *flags, "--check", COUNT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary_line(r) == expected
    if not federates:
        # The sink, fed by the recording alone, saw everything it saw live.
        assert f"sink: {COUNT} results, {COUNT} acks" in r.stderr, r.stderr


def test_a_changed_reaction_is_caught_at_its_first_difference(hprm_cli, recording):
    r = hprm(hprm_cli, "replay", recording, PROGRAM, "--federate", "worker", "--check", COUNT, env=environment(REPLAY_CHANGE="3"))
    assert r.returncode == 1, r.stdout + r.stderr
    line = summary_line(r)
    # Value 3 is sent at 30 ms; the sum is one more than recorded.
    assert line.startswith('replay: first difference at tag 0.030000000 s/0 on worker.worker.out: ["sum"]: recorded '), line
    recorded, replayed = line.split("recorded ")[1].split(", replayed ")
    assert int(replayed) == int(recorded) + 1, line
    # Left out of the comparison, the changed field makes no difference.
    r = hprm(hprm_cli, "replay", recording, PROGRAM, "--federate", "worker", "--check", "--ignore", "sum", COUNT, env=environment(REPLAY_CHANGE="3"))
    assert r.returncode == 0 and summary_line(r) == f"replay: federates=1 messages={2 * COUNT} identical", r.stdout + r.stderr


def test_only_the_window_and_topics_asked_for_are_delivered(hprm_cli, recording):
    # Values 1 and 2 (10 and 20 ms) only: the sink gets their results.
    r = hprm(hprm_cli, "replay", recording, PROGRAM, "--federate", "worker", "--federate", "sink", "--from", "10ms", "--to", "25ms", COUNT)
    assert r.returncode == 0, r.stderr
    assert "sink: 2 results, 2 acks" in r.stderr, r.stderr
    # The worker's acknowledgements only: the sink gets no result.
    r = hprm(hprm_cli, "replay", recording, PROGRAM, "--federate", "sink", "--topics", "worker.ack", COUNT)
    assert r.returncode == 0 and f"sink: 0 results, {COUNT} acks" in r.stderr, r.stderr
    bad = hprm(hprm_cli, "replay", recording, PROGRAM, "--topics", "source.nothing", COUNT)
    assert bad.returncode == 2 and '--topics "source.nothing": the recording has no such connection' in bad.stderr, bad.stderr


def test_bad_input_gets_one_clear_error(hprm_cli, recording, tmp_path):
    def error(*args):
        r = hprm(hprm_cli, "replay", *args)
        assert r.returncode == 2, r.stdout + r.stderr
        errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
        assert len(errors) == 1, r.stderr
        return errors[0]

    assert "cannot open the recording" in error(tmp_path / "missing.mcap", PROGRAM)
    text = tmp_path / "notes.mcap"
    text.write_text("not a recording\n")
    assert "not an MCAP file" in error(text, PROGRAM)
    foreign = tmp_path / "foreign.mcap"
    from mcap.writer import Writer

    with open(foreign, "wb") as f:
        w = Writer(f)
        w.start()
        w.finish()
    assert "not an HPRM recording" in error(foreign, PROGRAM)
    e = error(recording, PROGRAM, "--federate", "planner", COUNT)
    assert "--federate planner: the recorded program replayed has no such federate; its federates are source, worker, sink" in e, e
    other = ROOT / "hprm-py" / "tests" / "programs" / "recorded.py"
    assert "does not have the recorded program's graph" in error(recording, other, 3)


def test_a_rust_federate_replays_identical(hprm_cli, daemons_built, tmp_path):
    """examples/python/mixed.py: a Python source, the Rust doubler
    (examples/src/bin/mixed-doubler.rs), a Python sink; as a manifest, so
    that `hprm launch` runs the doubler's binary."""
    doubler = Path(daemons_built) / "mixed-doubler"
    if not doubler.exists():
        subprocess.run(["cargo", "build", "--locked", "-p", "hprm-examples", "--bin", "mixed-doubler"], cwd=ROOT, check=True)
        doubler = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug" / "mixed-doubler"
    mixed = ROOT / "examples" / "python" / "mixed.py"
    manifest = tmp_path / "mixed.toml"
    manifest.write_text(
        f"""name = "mixed"
coordination = "centralized"
timeout = "30ms"

[[federate]]
name = "source"
module = "{mixed}"
  [[federate.reactor]]
  name = "source"
  class = "Source"
  outputs = ["out"]

[[federate]]
name = "doubler"
command = ["{doubler}"]
  [[federate.reactor]]
  name = "doubler"
  inputs = ["inp"]
  outputs = ["out"]

[[federate]]
name = "sink"
module = "{mixed}"
  [[federate.reactor]]
  name = "sink"
  class = "Sink"
  inputs = ["inp"]

[[connection]]
from = "source.out"
to = "doubler.inp"

[[connection]]
from = "doubler.out"
to = "sink.inp"
"""
    )
    out = tmp_path / "mixed.mcap"
    r = hprm(hprm_cli, "launch", "--fast", "--record", out, manifest)
    assert r.returncode == 0 and "nothing lost" in r.stderr, r.stderr
    assert "[sink] sink: n=8 data=float64[16384] all=8.0 shared=True" in r.stderr, r.stderr
    r = hprm(hprm_cli, "replay", out, manifest, "--federate", "doubler", "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary_line(r) == "replay: federates=1 messages=4 identical"


DEADLINED = Path(__file__).parent / "programs" / "deadlined.py"
SLOW = (1, 3)


def test_deadline_decisions_are_recorded_and_replayed(hprm_cli, tmp_path):
    """Deadlines depend on physical time: the live run (real time) misses
    the worker's deadline where its earlier reaction sleeps (values 1 and
    3, at least); the replay (fast, no sleep, so the clock alone would miss
    none) runs the deadline handler at exactly the recorded tags."""
    from mcap.reader import make_reader

    from hprm import _native

    out = tmp_path / "deadlines.mcap"
    r = hprm(hprm_cli, "launch", "--record", out, DEADLINED, COUNT, env=environment(DEADLINE_SLOW=",".join(map(str, SLOW))))
    assert r.returncode == 0, r.stderr
    assert f"and {COUNT} deadline decisions into" in r.stderr and "nothing lost" in r.stderr, r.stderr
    late = [l for l in r.stderr.splitlines() if "sink: late " in l]
    assert len(late) == 1, r.stderr
    live_late = ast.literal_eval(late[0].split("sink: late ")[1])
    assert set(SLOW) <= set(live_late), r.stderr

    # One decision per value, on the worker's decisions channel, read back with the `mcap` package.
    codec = _native.Codec()
    with open(out, "rb") as f:
        reader = make_reader(f)
        start = int(next(m for m in reader.iter_metadata() if m.name == "hprm.summary").metadata["start"])
        decisions = []
        for schema, channel, m in reader.iter_messages(topics=["deadlines/worker"]):
            assert schema.name == "hprm.deadline_decision" and channel.metadata["federate"] == "worker"
            decisions.append((m.log_time - start, codec.decode(m.data, copy=True)))
    assert [d["reaction"] for _, d in decisions] == ["worker.worker.work"] * COUNT
    # Value n is sent at (n + 1) * 200 ms.
    assert [t for t, d in decisions if d["missed"]] == [(n + 1) * 200_000_000 for n in live_late], decisions

    info = hprm(hprm_cli, "bag", "info", out)
    assert info.returncode == 0, info.stderr
    assert f"decisions:   {COUNT} deadline decisions ({len(live_late)} missed)" in info.stdout, info.stdout
    assert "deadlines/worker" in info.stdout.split("deadline decisions:")[1], info.stdout

    # Replayed (worker and sink; fast, no sleep): the same values, the same decisions.
    r = hprm(hprm_cli, "replay", out, DEADLINED, "--check", COUNT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary_line(r) == f"replay: federates=2 messages={COUNT} deadline_decisions={COUNT} identical"
    assert f"sink: late {live_late}" in r.stderr, r.stderr
    # The clock alone, in the same fast run without the sleep, misses none: the
    # replay's misses are the recorded decisions.
    r = hprm(hprm_cli, "launch", "--fast", DEADLINED, COUNT)
    assert r.returncode == 0 and "sink: late []" in r.stderr, r.stderr


def test_a_rotated_recording_replays_as_a_whole(hprm_cli, tmp_path):
    """`--record-rotate size=3m` with 2 MB values: a part is full after two
    of them, so the 5 values, 5 results and 5 acks make at least 3 parts.
    Named by the base name given to --record, or by its first part, the
    parts read as one recording: `bag info` counts every message, and the
    replay of the whole is identical."""
    out = tmp_path / "rot.mcap"
    r = hprm(hprm_cli, "launch", "--fast", "--record", out, "--record-rotate", "size=3m", "--record-compression", "none", PROGRAM, COUNT)
    assert r.returncode == 0 and "nothing lost" in r.stderr, r.stderr
    parts = sorted(tmp_path.glob("rot-*.mcap"))
    assert len(parts) >= 3 and parts[0].name == "rot-0000.mcap" and not out.exists(), parts
    info = hprm(hprm_cli, "bag", "info", parts[0])
    assert info.returncode == 0, info.stderr
    assert f"files:       {len(parts)} parts, {parts[0]} to {parts[-1]}" in info.stdout, info.stdout
    assert f"messages:    {3 * COUNT} (" in info.stdout and "losses:      none" in info.stdout, info.stdout
    echo = hprm(hprm_cli, "bag", "echo", out, "worker.ack")
    assert echo.returncode == 0 and f"{COUNT} messages" in echo.stderr, echo.stderr
    r = hprm(hprm_cli, "replay", out, PROGRAM, "--check", COUNT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary_line(r) == f"replay: federates=2 messages={2 * COUNT} identical"
    assert "only its own messages are replayed" not in r.stderr, r.stderr


SENSED = Path(__file__).parent / "programs" / "sensed.py"
READING = "physical/sensor.sensor.reading"


def sink_got(stderr):
    lines = [l for l in stderr.splitlines() if "sink: got " in l]
    assert len(lines) == 1, stderr
    return ast.literal_eval(lines[0].split("sink: got ")[1])


def record_sensed(hprm_cli, out, physical, env=None):
    """sensed.py with COUNT readings, recorded into `out` with `physical`
    physical action values and nothing lost; what its sink got."""
    r = hprm(hprm_cli, "launch", "--record", out, SENSED, COUNT, env=env)
    assert r.returncode == 0, r.stderr
    assert f"and {physical} physical action values into" in r.stderr and "nothing lost" in r.stderr, r.stderr
    live = sink_got(r.stderr)
    assert [n for n, _, _ in live] == list(range(1, COUNT + 1)), live
    return live


def test_physical_action_values_are_recorded_and_replayed(hprm_cli, tmp_path):
    """A sensor thread schedules readings made from physical time (no two
    live runs read the same): the recording holds each value at the tag it
    took, and the replay feeds them back at those tags while the live
    thread's own readings are dropped, so the sensor sends again exactly
    what it sent and the sink gets it at the same tags."""
    import numpy as np
    from mcap.reader import make_reader

    from hprm import _native

    out = tmp_path / "sensed.mcap"
    live = record_sensed(hprm_cli, out, COUNT)

    # One channel for the action, read back with the `mcap` package: each
    # value (its 160 KB array went through the store) at its tag.
    codec = _native.Codec()
    with open(out, "rb") as f:
        reader = make_reader(f)
        start = int(next(m for m in reader.iter_metadata() if m.name == "hprm.summary").metadata["start"])
        readings = []
        for schema, channel, m in reader.iter_messages(topics=[READING]):
            assert schema.name == "hprm.value" and channel.metadata["federate"] == "sensor"
            readings.append((m.log_time - start, codec.decode(m.data, copy=True)))
    assert [(elapsed, v["t"]) for elapsed, v in readings] == [(elapsed, t) for _, t, elapsed in live], readings
    for _, v in readings:
        assert np.array_equal(v["data"], np.random.default_rng(v["t"]).random(20_000))

    info = hprm(hprm_cli, "bag", "info", out)
    assert info.returncode == 0, info.stderr
    assert f"physical:    {COUNT} physical action values" in info.stdout, info.stdout
    assert READING in info.stdout.split("physical actions:")[1], info.stdout

    # Replayed (sensor and sink, fast): the recorded readings, not the live thread's.
    r = hprm(hprm_cli, "replay", out, SENSED, "--check", COUNT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary_line(r) == f"replay: federates=2 messages={COUNT} physical_values={COUNT} identical"
    assert sink_got(r.stderr) == live, r.stderr


def test_a_physical_action_value_past_the_stop_tag_is_recorded_and_reaches_no_reaction(hprm_cli, tmp_path):
    """A value that arrives as the program stops (here scheduled by the
    reaction that asks for the stop) takes a tag past the stop tag: the
    recording holds it, since the world did send it, after the sensor's
    last tag (`last.sensor`), and no reaction sees it, live or replayed."""
    from mcap.reader import make_reader

    from hprm import _native

    out = tmp_path / "extra.mcap"
    live = record_sensed(hprm_cli, out, COUNT + 1, env=environment(SENSED_EXTRA="1"))

    codec = _native.Codec()
    with open(out, "rb") as f:
        reader = make_reader(f)
        summary = next(m for m in reader.iter_metadata() if m.name == "hprm.summary").metadata
        tags = [(m.log_time, m.sequence, codec.decode(m.data, copy=True)["t"]) for _, _, m in reader.iter_messages(topics=[READING])]
    last = tuple(map(int, summary["last.sensor"].split("/")))
    assert len(tags) == COUNT + 1, tags
    assert all((t, s) <= last for t, s, _ in tags[:COUNT]) and tags[COUNT][:2] > last, (tags, last)
    assert [t for _, _, t in tags[:COUNT]] == [t for _, t, _ in live], (tags, live)

    r = hprm(hprm_cli, "replay", out, SENSED, "--check", COUNT, env=environment(SENSED_EXTRA="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary_line(r) == f"replay: federates=2 messages={COUNT} physical_values={COUNT + 1} identical"
    assert sink_got(r.stderr) == live, r.stderr


def test_a_physical_action_value_that_cannot_be_encoded_stops_the_recording(hprm_cli, tmp_path):
    """A Python physical action's values have no declared type: the first
    one the codec cannot encode (here a lock) stops the recorded program
    with one error naming the federate and the action."""
    r = hprm(hprm_cli, "launch", "--record", tmp_path / "locked.mcap", SENSED, COUNT, env=environment(SENSED_LOCK="1"))
    assert r.returncode != 0, r.stderr
    assert (
        "cannot record physical action sensor.sensor.reading of federate sensor: it was scheduled with a value "
        "the payload codec cannot encode (" in r.stderr
    ), r.stderr
    assert "lock" in r.stderr.split("cannot encode (")[1], r.stderr
    # Unrecorded, the same program runs: the lock never leaves the sensor.
    r = hprm(hprm_cli, "launch", SENSED, COUNT, env=environment(SENSED_LOCK="1"))
    assert r.returncode == 0 and len(sink_got(r.stderr)) == COUNT, r.stderr


def test_an_opaque_physical_action_is_refused_before_anything_runs(hprm_cli, tmp_path):
    """A Rust `opaque_physical_action` (its type cannot be encoded) shows in
    the manifest: `--record` refuses the program before starting anything."""
    ran = tmp_path / "ran"
    manifest = tmp_path / "opaque.toml"
    manifest.write_text(
        f"""name = "opaque"

[[federate]]
name = "camera"
command = ["sh", "-c", "touch {ran}"]
  [[federate.reactor]]
  name = "cam"
  [[federate.reactor.action]]
  name = "handle"
  physical = true
  opaque = true
"""
    )
    out = tmp_path / "opaque.mcap"
    r = hprm(hprm_cli, "launch", "--record", out, manifest)
    assert r.returncode == 2, r.stderr
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and "cannot record physical actions camera.cam.handle: their values cannot be encoded" in errors[0], r.stderr
    assert not ran.exists() and not out.exists()
