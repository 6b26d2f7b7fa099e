"""Observing Python programs: `--trace` (Chrome trace of every reaction,
grant and store transfer) and taps (`hprm topic echo|hz`) work for Python
federates as for Rust ones: both run on hprm-node's scheduler."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path


PROGRAMS = Path(__file__).parent / "programs"
ROOT = Path(__file__).resolve().parents[2]


def run(script, *args, env=None, timeout=120):
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", **(env or {}))
    return subprocess.run([sys.executable, str(PROGRAMS / script), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def test_a_python_program_traces_every_reaction(daemons_built, tmp_path):
    trace = tmp_path / "trace.json"
    r = run("pipeline.py", "centralized", 5, env={"HPRM_LAUNCH_TRACE": str(trace)})
    assert r.returncode == 0, r.stderr
    events = json.loads(trace.read_text())["traceEvents"]

    def count(name):
        return sum(1 for e in events if e.get("cat") == "reaction" and e["name"] == name)

    lines = r.stderr.splitlines()
    assert count("camera.camera.capture") == sum(l.startswith("[camera] captured") for l in lines) == 5
    assert count("detector.detector.detect") == sum(l.startswith("[detector] received") for l in lines) == 5
    assert count("planner.planner.plan") == sum(l.startswith("[planner] planned") for l in lines) == 4
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["ts"], (int, float)), e
    grants = {e["pid"] for e in events if e.get("cat") == "grant"}
    assert len(grants) >= 2, "grants sent by the RTI and received by federates"
    # Frames allocated in the store by the camera, taken by the detector.
    assert sum(e["name"] == "store put" for e in events) >= 5
    assert sum(e["name"] == "store get" for e in events) >= 5


def test_a_tap_on_a_python_federate(hprm_cli, runtime_base):
    ticks = 300
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=runtime_base)
    prog = subprocess.Popen([sys.executable, str(PROGRAMS / "ticker.py"), str(ticks)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            echo = subprocess.run([str(hprm_cli), "topic", "echo", "source.out", "-n", "3"], capture_output=True, text=True, env=env, timeout=60)
            if echo.returncode == 0:
                break
            assert time.monotonic() < deadline, echo.stderr
            time.sleep(0.2)
        # A tap drops what a slow reader cannot take, and says so on a line of
        # its own; on a loaded machine the program may also end before the
        # third message. Each message shown must be whole and at its tag.
        lines = echo.stdout.splitlines()
        shown = [l for l in lines if not re.fullmatch(r"\(\d+ messages dropped: this tap read too slowly\)", l)]
        assert 2 <= len(shown) <= 6 and len(shown) % 2 == 0, echo.stdout
        seen = []
        for tag, value in zip(shown[0::2], shown[1::2]):
            m = re.match(r'\{"n": (\d+),', value)
            assert m, f"not a value of the ticker: {value!r}\n{echo.stdout}"
            n = int(m.group(1))
            assert tag == f"--- tag {n // 100}.{(n % 100) * 10_000_000:09d} s/0", echo.stdout
            assert value.startswith(f'{{"n": {n}, "arr": <buffer <i8 [4] 32 bytes inline: '), echo.stdout
            seen.append(n)
        assert seen == sorted(set(seen)), echo.stdout
        if len(lines) == len(shown) == 6:
            # Nothing dropped: three messages in a row.
            assert seen == list(range(seen[0], seen[0] + 3)), echo.stdout
        hz = subprocess.run([str(hprm_cli), "topic", "hz", "source.out", "-n", "20"], capture_output=True, text=True, env=env, timeout=60)
        assert hz.returncode == 0 and "messages: 20" in hz.stdout.splitlines()[-1], hz
        _, err = prog.communicate(timeout=60)
    finally:
        prog.kill()
    assert prog.returncode == 0, err
    # The taps did not change what the program computes.
    assert f"[sink] sink: got {ticks + 1} values, sum {ticks * (ticks + 1) // 2}" in err.splitlines(), err
