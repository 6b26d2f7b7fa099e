"""The `hprm` command (the Rust binary install.sh puts in the venv) on
Python programs and TOML manifests of Python federates: real daemons, one
process per federate."""

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path


HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"
ROOT = HERE.parents[1]
HPRM = Path(sys.executable).parent / "hprm"


def hprm(*args, timeout=120):
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn")
    return subprocess.run([str(HPRM), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def lines(r, prefix):
    return [l.split("] ", 1)[1] for l in r.stderr.splitlines() if l.startswith(prefix)]


def test_the_hprm_command_is_installed():
    assert HPRM.exists(), "install.sh stages the hprm binary into the venv"
    r = hprm("--version")
    assert r.returncode == 0 and r.stdout.startswith("hprm "), r.stdout + r.stderr


def test_launch_a_toml_manifest_of_python_federates():
    r = hprm("launch", "--fast", ROOT / "examples" / "manifest" / "pipeline.toml")
    assert r.returncode == 0, r.stderr
    planned = lines(r, "[planner] planned")
    # 50 ms frames for 1 s of logical time; the planner is 10 ms behind.
    assert [p.split()[1] for p in planned] == [f"seq={k}" for k in range(1, 21)], r.stderr
    assert "program pipeline finished: 3 federates exited cleanly" in r.stderr


def test_check_and_graph_a_python_program(tmp_path):
    r = hprm("check", PROGRAMS / "pipeline.py", "decentralized", "3")
    assert r.returncode == 0, r.stderr
    assert "program pipeline is valid: 3 federates, 3 reactors, 2 connections, Decentralized coordination" in r.stdout
    r = hprm("graph", PROGRAMS / "pipeline.py", "-o", tmp_path / "p.dot")
    assert r.returncode == 0, r.stderr
    dot = (tmp_path / "p.dot").read_text()
    assert '"camera.camera":"out_frame":e -> "detector.detector":"in_frame":w' in dot, dot


def test_a_crashing_federate_stops_the_program_and_is_named():
    r = hprm("launch", PROGRAMS / "crash.toml")
    assert r.returncode == 1, r.stderr
    assert "program crash failed; federates that failed:" in r.stderr
    failed = [l for l in r.stderr.splitlines() if l.startswith("  - relay")]
    assert failed and "cannot handle 3" in failed[0], r.stderr
    # The others were asked to stop: a clean stop, shutdown reactions ran.
    assert lines(r, "[sink] sink got") == ["sink got 1", "sink got 2"], r.stderr
    assert "sink shutdown" in lines(r, "[sink]"), r.stderr
    assert not any(l.startswith("  - source") or l.startswith("  - sink") for l in r.stderr.splitlines()), r.stderr


def restartable_crash(tmp_path, relay_args, max_restarts=None):
    """crash.toml with the relay restarted on failure, running 3 s."""
    manifest = (PROGRAMS / "crash.toml").read_text().replace('"10s"', '"3s"').replace("args = { crash_on = 3 }", f"args = {relay_args}")
    policy = 'restart = "on-failure"' + (f"\nmax_restarts = {max_restarts}" if max_restarts is not None else "")
    manifest = manifest.replace('name = "relay"\nmodule = "crashing.py"', f'name = "relay"\nmodule = "crashing.py"\n{policy}')
    manifest = manifest.replace('module = "crashing.py"', f'module = "{PROGRAMS / "crashing.py"}"')
    assert policy in manifest
    (tmp_path / "restart.toml").write_text(manifest)
    return tmp_path / "restart.toml"


def test_a_restartable_federate_is_restarted_and_the_program_goes_on(tmp_path):
    r = hprm("launch", restartable_crash(tmp_path, "{ crash_on = 3, once = true }"))
    assert r.returncode == 0, r.stderr
    restarting = [l for l in r.stderr.splitlines() if "restarting it (1 of 3 restarts)" in l]
    assert restarting and "cannot handle 3" in restarting[0], r.stderr
    assert "rejoined the running program after a restart" in r.stderr, r.stderr
    got = [int(l.split()[-1]) for l in lines(r, "[sink] sink got")]
    # 3 died with the first relay, and what the source sent while the relay
    # was down is lost; the sink was held, not released: what it got after
    # the restart comes in order, without repeats.
    assert got[:2] == [1, 2] and 3 not in got, got
    assert len(got) > 3 and got == sorted(set(got)), got
    assert "sink shutdown" in lines(r, "[sink]"), r.stderr
    assert "program crash finished: 3 federates exited cleanly (relay restarted 1 time)" in r.stderr, r.stderr


def test_a_federate_failing_past_max_restarts_stops_the_program(tmp_path):
    r = hprm("launch", restartable_crash(tmp_path, "{ crash_on = 3 }", max_restarts=1))
    assert r.returncode == 1, r.stderr
    assert "restarting it (1 of 1 restarts)" in r.stderr, r.stderr
    assert "after 1 restarts (max_restarts); giving up" in r.stderr, r.stderr
    assert "program crash failed (relay restarted 1 time); federates that failed:" in r.stderr, r.stderr
    assert "sink shutdown" in lines(r, "[sink]"), r.stderr


def test_ctrl_c_stops_a_launched_python_program_cleanly(tmp_path):
    # The crash program, but nothing crashes and it would run for a minute.
    manifest = (PROGRAMS / "crash.toml").read_text().replace("crash_on = 3", "crash_on = 0").replace('"10s"', '"60s"')
    manifest = manifest.replace('module = "crashing.py"', f'module = "{PROGRAMS / "crashing.py"}"')
    (tmp_path / "endless.toml").write_text(manifest)
    # A short base: socket paths under it must fit in 107 bytes.
    runtime = Path(tempfile.mkdtemp(prefix="hprm-test-", dir="/tmp"))
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=str(runtime))
    shm_before = set(os.listdir("/dev/shm"))
    p = subprocess.Popen([str(HPRM), "launch", str(tmp_path / "endless.toml")], stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "sink got 1" in line:
            break
    p.send_signal(signal.SIGINT)
    _, rest = p.communicate(timeout=60)
    out = "".join(seen) + rest
    assert p.returncode == 0, out
    assert "[sink] sink shutdown" in out and "federates exited cleanly" in out, out
    assert list(runtime.iterdir()) == [], "the runtime directory was left behind"
    runtime.rmdir()
    assert set(os.listdir("/dev/shm")) <= shm_before, "shared memory was left in /dev/shm"
    # No federate process is left.
    leftover = subprocess.run(["pgrep", "-f", "hprm.federate"], capture_output=True, text=True).stdout.split()
    assert leftover == [], leftover


def test_a_federate_failing_before_the_start_stops_the_others(tmp_path):
    # The relay's class does not exist: it fails before joining, while the
    # others wait at the RTI for the whole federation.
    manifest = (PROGRAMS / "crash.toml").read_text().replace('class = "Relay"', 'class = "NoSuchRelay"').replace('"10s"', '"600s"')
    manifest = manifest.replace('module = "crashing.py"', f'module = "{PROGRAMS / "crashing.py"}"')
    (tmp_path / "bad.toml").write_text(manifest)
    r = hprm("launch", tmp_path / "bad.toml", timeout=120)
    assert r.returncode == 1, r.stderr
    failed = [l for l in r.stderr.splitlines() if l.startswith("  - ")]
    assert len(failed) == 1 and failed[0].startswith("  - relay") and "has no hprm.Reactor class 'NoSuchRelay'" in failed[0], r.stderr
