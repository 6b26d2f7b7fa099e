"""Recording (`hprm launch --record FILE.mcap`) with real processes: a
Python program's messages are written into MCAP, read back with the public
`mcap` package and compared with what was sent; the backlog policies lose
exactly what they say; a recorder killed outright leaves a readable file;
`hprm bag info|echo` read it."""

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

mcap_reader = pytest.importorskip("mcap.reader", reason="the `mcap` package reads recordings back (pip install mcap)")
from mcap.stream_reader import StreamReader  # noqa: E402
from mcap.records import Message  # noqa: E402

from hprm import _native  # noqa: E402

PROGRAMS = Path(__file__).parent / "programs"
PROGRAM = PROGRAMS / "recorded.py"


@pytest.fixture(scope="module")
def program_values():
    """`value(n, big)` of recorded.py, without running the program."""
    spec = importlib.util.spec_from_file_location("recorded_values", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.value


@pytest.fixture
def env():
    # A short runtime directory: socket paths have a length limit.
    runtime = tempfile.mkdtemp(prefix="rec-", dir="/tmp")
    # The program's federates run in this interpreter.
    return dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=runtime, HPRM_PYTHON=sys.executable)


def launch(hprm_cli, env, out, *args, record_args=(), timeout=180):
    cmd = [str(hprm_cli), "launch", "--fast", "--record", str(out), *record_args, str(PROGRAM), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def read_back(path):
    """(summary metadata, {topic: [(log_time, sequence, publish_time, value)]}) via the mcap package."""
    codec = _native.Codec()
    with open(path, "rb") as f:
        reader = mcap_reader.make_reader(f)
        summary = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
        by_topic = {}
        for schema, channel, message in reader.iter_messages(log_time_order=False):
            assert schema.name == "hprm.value" and channel.message_encoding == "msgpack"
            value = codec.decode(message.data, copy=True)
            by_topic.setdefault(channel.topic, []).append((message.log_time, message.sequence, message.publish_time, value))
    return summary, by_topic


def same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def test_every_message_with_large_arrays_is_recorded_and_reads_back_identical(hprm_cli, env, program_values, tmp_path):
    out = tmp_path / "run.mcap"
    count = 6
    r = launch(hprm_cli, env, out, count, "10ms", 1)
    assert r.returncode == 0, r.stderr
    assert f"recorded {count} messages" in r.stderr and "nothing lost" in r.stderr, r.stderr
    # The recorder did not change what the program computed.
    assert f"[sink] sink: got {count} values, sum {sum(range(count))}" in r.stderr, r.stderr
    summary, by_topic = read_back(out)
    assert list(by_topic) == ["source.source.out"]
    got = by_topic["source.source.out"]
    assert [v["n"] for _, _, _, v in got] == list(range(count))
    start = int(summary["hprm.summary"]["start"])
    for n, (log_time, microstep, sent, v) in enumerate(got):
        assert same(v, program_values(n, True)), f"message {n} differs"
        # The tag: the n-th period after the start (the timer's first tick is at the start).
        assert (log_time - start, microstep) == (n * 10_000_000, 0)
        assert sent >= start
    s = summary["hprm.summary"]
    assert (s["messages"], s["lost"], s["complete"]) == (str(count), "0", "true")
    assert s["lost.source.source.out"] == "0"
    manifest = summary["hprm.program"]["manifest"]
    assert '"sink"' in manifest and '"logger"' in manifest and "source.out" in manifest
    assert summary["hprm.run"]["program"] == "recorded"

    info = subprocess.run([str(hprm_cli), "bag", "info", str(out)], capture_output=True, text=True, env=env, timeout=60)
    assert info.returncode == 0, info.stderr
    assert f"messages:    {count} (" in info.stdout and "losses:      none" in info.stdout, info.stdout
    assert "source.source.out" in info.stdout and "lost 0" in info.stdout, info.stdout
    echo = subprocess.run([str(hprm_cli), "bag", "echo", str(out), "source.out", "-n", "2"], capture_output=True, text=True, env=env, timeout=60)
    assert echo.returncode == 0, echo.stderr
    lines = echo.stdout.splitlines()
    assert lines[0] == "--- tag 0.000000000 s/0" and lines[2] == "--- tag 0.010000000 s/0", echo.stdout
    assert lines[1].startswith('{"n": 0, "name": "frame-0", "nested": {"list": [0, 0'), echo.stdout
    assert '"", null, true], "small": <buffer <i4 [4] 16 bytes inline: 00 00 00 00 01 00' in lines[1], echo.stdout
    assert "<buffer |u1 [1000000] 1000000 bytes inline: 00 01 02" in lines[1], echo.stdout
    bad = subprocess.run([str(hprm_cli), "bag", "echo", str(out), "source.nothing"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode != 0 and "has no connection" in bad.stderr and "source.source.out" in bad.stderr, bad.stderr


def test_topics_select_what_is_recorded_and_unknown_ones_are_refused(hprm_cli, env, tmp_path):
    bad = launch(hprm_cli, env, tmp_path / "x.mcap", 3, record_args=["--topics", "sink.out"])
    assert bad.returncode != 0 and '--topics "sink.out"' in bad.stderr and "source.out" in bad.stderr, bad.stderr
    policy = launch(hprm_cli, env, tmp_path / "y.mcap", 3, record_args=["--record-policy", "keep-last-3"])
    assert policy.returncode != 0 and "`block`" in policy.stderr and "`fail`" in policy.stderr, policy.stderr
    out = tmp_path / "z.mcap"
    ok = launch(hprm_cli, env, out, 3, record_args=["--topics", "source.out", "--record-compression", "lz4"])
    assert ok.returncode == 0 and "recorded 3 messages" in ok.stderr, ok.stderr
    _, by_topic = read_back(out)
    assert [v["n"] for *_, v in by_topic["source.source.out"]] == [0, 1, 2]


@pytest.mark.parametrize(("policy", "throttle"), [("block:60s", "1ms"), ("fail", "10ms")])
def test_a_slow_recorder_blocks_or_loses_exactly_what_it_reports(hprm_cli, env, tmp_path, policy, throttle):
    """The writer sleeps per message (a slow disk) while the program sends
    1500 as fast as it can: under `block` the program waits and everything
    is recorded; under `fail` messages are lost (the backlog holds a few
    hundred), and recorded + lost = sent, per connection."""
    out = tmp_path / "slow.mcap"
    count = 1500
    flags = ["--record-policy", policy, "--record-throttle", throttle, "--record-compression", "none"]
    r = launch(hprm_cli, env, out, count, "1us", 0, record_args=flags)
    assert r.returncode == 0, r.stderr
    assert f"[sink] sink: got {count} values" in r.stderr, r.stderr
    summary, by_topic = read_back(out)
    s = summary["hprm.summary"]
    recorded = [v["n"] for *_, v in by_topic["source.source.out"]]
    lost = int(s["lost.source.source.out"])
    assert int(s["messages"]) == len(recorded) and int(s["lost"]) == lost
    assert len(recorded) + lost == count
    assert recorded == sorted(set(recorded))
    if policy == "fail":
        assert lost > 0, "the writer is slower than the program: some messages must be given up"
        assert s["complete"] == "false"
        assert f"recorded {len(recorded)} messages" in r.stderr and f"LOST {lost} (source.source.out: {lost})" in r.stderr, r.stderr
        info = subprocess.run([str(hprm_cli), "bag", "info", str(out)], capture_output=True, text=True, env=env, timeout=60)
        assert f"losses:      {lost} messages lost" in info.stdout, info.stdout
    else:
        assert lost == 0 and recorded == list(range(count)) and s["complete"] == "true"


def test_a_backlog_left_when_the_program_ends_is_recorded_before_the_store_stops(hprm_cli, env, program_values, tmp_path):
    """Large values (through the store) sent faster than a slow writer
    (the throttle) takes them, under `block`: the program ends with
    messages still in the recorder's feeds, whose store objects the
    recorder takes before the launcher stops the store; every one is
    recorded, nothing lost. (The launcher used to stop the store first:
    the backlog was lost, and counted.)"""
    out = tmp_path / "backlog.mcap"
    # More than the recorder queues between its feeds and its writer (64):
    # the rest waits in the feeds when the program ends.
    count = 160
    flags = ["--record-policy", "block:60s", "--record-throttle", "40ms", "--record-compression", "none"]
    r = launch(hprm_cli, env, out, count, "1us", "s", record_args=flags)
    assert r.returncode == 0, r.stderr
    assert f"recorded {count} messages" in r.stderr and "nothing lost" in r.stderr, r.stderr
    _, by_topic = read_back(out)
    got = by_topic["source.source.out"]
    assert [v["n"] for *_, v in got] == list(range(count))
    assert all(same(v, program_values(v["n"], "s")) for *_, v in got)


def test_a_recorder_killed_outright_leaves_a_file_readable_to_its_last_chunk(hprm_cli, env, program_values, tmp_path):
    out = tmp_path / "killed.mcap"
    # Real time: 1 MB to 10 MB every 50 ms for 20 s, killed after a few chunks.
    cmd = [str(hprm_cli), "launch", "--record", str(out), "--record-compression", "none", str(PROGRAM), "400", "50ms", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.stat().st_size > 30_000_000):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    check_cut(hprm_cli, env, program_values, out)


def check_cut(hprm_cli, env, program_values, out):
    """`out`, whose recorder was killed outright, reads back with the
    `mcap` package's stream reader (which needs no summary) up to its last
    complete chunk, every message intact; `hprm bag info` counts the same."""
    codec = _native.Codec()
    values, ended = [], None
    with open(out, "rb") as f:
        try:
            for record in StreamReader(f).records:
                if isinstance(record, Message):
                    values.append(codec.decode(record.data, copy=True))
        except Exception as e:  # noqa: BLE001 - the file ends mid-record: that is the point
            ended = e
    assert ended is not None, "a killed recorder leaves no footer"
    assert len(values) >= 3
    for n, v in enumerate(values):
        assert same(v, program_values(n, True)), f"message {n} differs"
    info = subprocess.run([str(hprm_cli), "bag", "info", str(out)], capture_output=True, text=True, env=env, timeout=60)
    assert info.returncode == 0 and "the file ends early" in info.stdout and f"messages:    {len(values)} (" in info.stdout, info.stdout


def test_a_full_disk_ends_the_recording_cleanly(hprm_cli, env, program_values):
    """A 16 MiB tmpfs holds values 0 (1 MB) and 1 (3 MB) but not value 2
    (10 MB) with the room the recorder keeps for closing the file: the
    recording is closed there, complete and readable, the rest counted as
    lost, and the launch says so and fails; the program itself runs on."""
    disk = Path(tempfile.mkdtemp(prefix="full-", dir="/tmp"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        disk.rmdir()
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        out = disk / "full.mcap"
        r = launch(hprm_cli, env, out, 6, "10ms", 1, record_args=["--record-compression", "none"])
        assert r.returncode == 1, r.stderr
        assert "[sink] sink: got 6 values" in r.stderr, r.stderr
        assert f"the recording {out} ended early: the disk is full (" in r.stderr, r.stderr
        assert "closed at tag 0.020000000 s/0, complete and readable up to there" in r.stderr, r.stderr
        assert "recorded 2 messages" in r.stderr and "LOST 4 (source.source.out: 4)" in r.stderr, r.stderr
        summary, by_topic = read_back(out)
        s = summary["hprm.summary"]
        assert (s["messages"], s["lost"], s["complete"]) == ("2", "4", "false")
        assert "the disk is full" in s["disk_full"]
        got = [v for *_, v in by_topic["source.source.out"]]
        assert len(got) == 2 and all(same(v, program_values(n, True)) for n, v in enumerate(got))
    finally:
        subprocess.run(["umount", str(disk)], check=False)
        disk.rmdir()


@pytest.mark.parametrize("rotate", ["size=5m", "duration=25ms"])
def test_a_recording_rotates_into_complete_files(hprm_cli, env, program_values, tmp_path, rotate):
    """Values of 1, 3 and 10 MB every 10 ms: a part is full after its third
    value either way (4 MB < 5 MB before it, 14 MB after; 20 ms < 25 ms
    before, 30 ms after), so six values make two parts, each a complete
    file with its own summary."""
    out = tmp_path / "rot.mcap"
    r = launch(hprm_cli, env, out, 6, "10ms", 1, record_args=["--record-rotate", rotate, "--record-compression", "none"])
    assert r.returncode == 0, r.stderr
    first, second = tmp_path / "rot-0000.mcap", tmp_path / "rot-0001.mcap"
    assert "recorded 6 messages" in r.stderr and f"into 2 files, {first} to {second}: nothing lost" in r.stderr, r.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["rot-0000.mcap", "rot-0001.mcap"]
    values = []
    for n, part in enumerate((first, second)):
        summary, by_topic = read_back(part)
        s = summary["hprm.summary"]
        assert (s["messages"], s["lost"], summary["hprm.run"]["part"]) == ("3", "0", str(n)), summary
        values += [v for *_, v in by_topic["source.source.out"]]
    assert "last.source" in summary["hprm.summary"], summary
    assert len(values) == 6 and all(same(v, program_values(n, True)) for n, v in enumerate(values))
    bad = launch(hprm_cli, env, tmp_path / "x.mcap", 1, record_args=["--record-rotate", "every=3"])
    assert bad.returncode == 2 and 'expected size=SIZE (e.g. 512m) or duration=DURATION' in bad.stderr, bad.stderr


def recorded_manifest(directory, record_table, source_args=None):
    """recorded.py as a TOML manifest (a source, a sink and a logger; 6
    small values 10 ms apart, or with `source_args` the source runs
    recorded.py with those), with `record_table` appended."""
    manifest = directory / "recorded.toml"
    source = f'module = "{PROGRAM}"' if source_args is None else f"command = {[sys.executable, str(PROGRAM), *source_args]!r}".replace("'", '"')
    manifest.write_text(
        f"""name = "recorded"
coordination = "centralized"

[[federate]]
name = "source"
{source}
  [[federate.reactor]]
  name = "source"
  class = "Source"
  outputs = ["out"]

[[federate]]
name = "sink"
module = "{PROGRAM}"
  [[federate.reactor]]
  name = "sink"
  class = "Sink"
  args = {{ name = "sink" }}
  inputs = ["inp"]

[[federate]]
name = "logger"
module = "{PROGRAM}"
  [[federate.reactor]]
  name = "logger"
  class = "Sink"
  args = {{ name = "logger" }}
  inputs = ["inp"]

[[connection]]
from = "source.out"
to = "sink.inp"

[[connection]]
from = "source.out"
to = "logger.inp"

{record_table}
"""
    )
    return manifest


def test_a_manifest_with_a_record_table_records_itself(hprm_cli, env, program_values, tmp_path):
    """`[record]` records the program as --record would, into a path
    relative to the manifest; a flag overrides it, --no-record turns it
    off, and a bad setting is refused with its place in the file."""
    (tmp_path / "runs").mkdir()
    manifest = recorded_manifest(tmp_path, '[record]\npath = "runs/run.mcap"\ncompression = "lz4"\npolicy = "block:60s"\n')

    def hprm(*args):
        return subprocess.run([str(hprm_cli), *map(str, args)], capture_output=True, text=True, timeout=120, env=env, cwd="/")

    r = hprm("launch", "--fast", manifest)
    out = tmp_path / "runs" / "run.mcap"
    assert r.returncode == 0 and "recorded 6 messages" in r.stderr and f"into {out}: nothing lost" in r.stderr, r.stderr
    summary, by_topic = read_back(out)
    got = [v for *_, v in by_topic["source.source.out"]]
    assert len(got) == 6 and all(same(v, program_values(n, False)) for n, v in enumerate(got))
    assert summary["hprm.run"]["policy"] == "block:60s" and summary["hprm.summary"]["complete"] == "true", summary

    other = tmp_path / "other.mcap"
    r = hprm("launch", "--fast", "--record", other, "--topics", "source.out", manifest)
    assert r.returncode == 0 and f"into {other}: nothing lost" in r.stderr, r.stderr
    out.unlink()
    r = hprm("launch", "--fast", "--no-record", manifest)
    assert r.returncode == 0 and "hprm: recorded" not in r.stderr and not out.exists(), r.stderr
    r = hprm("launch", "--fast", "--no-record", "--topics", "source.out", manifest)
    assert r.returncode == 2 and "--topics applies to a recording" in r.stderr, r.stderr

    bad = recorded_manifest(tmp_path, '[record]\npath = "x.mcap"\npolicy = "sometimes"\ntopics = ["sink.inp"]\n')
    r = hprm("launch", "--fast", bad)
    assert r.returncode == 2, r.stderr
    assert f"{bad}:40:10: record: policy: " in r.stderr and f'{bad}:41:10: record: topics: "sink.inp": no output' in r.stderr, r.stderr
    check = hprm("check", bad)
    assert check.returncode == 1 and "record: policy: " in check.stdout + check.stderr, check.stdout + check.stderr


def test_the_deployed_recorder_records_the_program_and_ends_with_it(hprm_cli, env, program_values, tmp_path):
    """`hprm recorder`, what hprm-record@PROGRAM.service runs after `hprm
    deploy`: a process of its own that the federates feed (HPRM_RECORD),
    which closes the recording once every federate has ended."""
    out = tmp_path / "deployed.mcap"
    manifest = recorded_manifest(tmp_path, f'[record]\npath = "{out}"\n')
    socket = Path(env["XDG_RUNTIME_DIR"]) / "rec.sock"
    recorder = subprocess.Popen(
        [str(hprm_cli), "recorder", "--manifest", str(manifest), "--socket", str(socket)], stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            assert recorder.poll() is None and time.monotonic() < deadline, recorder.stderr.read()
            time.sleep(0.05)
        fed = dict(env, HPRM_RECORD=str(socket), HPRM_RECORD_POLICY="block:30s")
        r = subprocess.run([str(hprm_cli), "launch", "--fast", "--no-record", str(manifest)], capture_output=True, text=True, timeout=120, env=fed)
        assert r.returncode == 0, r.stderr
        said = recorder.communicate(timeout=30)[1]
    finally:
        if recorder.poll() is None:
            recorder.kill()
            recorder.wait()
    assert recorder.returncode == 0 and "recorded 6 messages" in said and "nothing lost" in said, said
    summary, by_topic = read_back(out)
    got = [v for *_, v in by_topic["source.source.out"]]
    assert len(got) == 6 and all(same(v, program_values(n, False)) for n, v in enumerate(got))
    assert summary["hprm.summary"]["complete"] == "true", summary


def test_a_deployed_recorder_killed_outright_leaves_a_file_readable_to_its_last_chunk(hprm_cli, env, program_values, tmp_path):
    """kill -9 of `hprm recorder` (the deployed recorder, a process of its
    own) mid-run: the file reads back up to its last complete chunk; the
    federates run on, counting what they can no longer record."""
    out = tmp_path / "killed.mcap"
    manifest = recorded_manifest(tmp_path, f'[record]\npath = "{out}"\ncompression = "none"\n', source_args=["400", "50ms", "1"])
    socket = Path(env["XDG_RUNTIME_DIR"]) / "rec.sock"
    recorder = subprocess.Popen([str(hprm_cli), "recorder", "--manifest", str(manifest), "--socket", str(socket)], stderr=subprocess.DEVNULL, env=env)
    fed = dict(env, HPRM_RECORD=str(socket), HPRM_RECORD_POLICY="fail")
    launch = None
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            assert recorder.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        log = tmp_path / "launch.log"
        with open(log, "w") as sink:
            launch = subprocess.Popen([str(hprm_cli), "launch", "--no-record", str(manifest)], stdout=subprocess.DEVNULL, stderr=sink, env=fed)
        deadline = time.monotonic() + 60
        while not (out.exists() and out.stat().st_size > 30_000_000):
            assert launch.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        recorder.send_signal(signal.SIGKILL)
        recorder.wait(timeout=30)
        # The federates run on: the source's next value meets the dead
        # recorder, is counted, and says so; only then is the program stopped.
        deadline = time.monotonic() + 60
        while "the recorder went away" not in log.read_text():
            assert launch.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        launch.send_signal(signal.SIGTERM)
        launch.wait(timeout=60)
    finally:
        for p in (recorder, launch):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    check_cut(hprm_cli, env, program_values, out)
