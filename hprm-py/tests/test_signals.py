"""SIGINT and SIGTERM stop a Python program cleanly, whatever its
federates imported: the program stops at one common tag, every shutdown
reaction runs, and everything exits 0.

numpy (OpenBLAS), torch and onnxruntime start threads when imported,
before hprm's runtime runs; a signal the kernel hands to one of those
threads must still stop the federate cleanly (see hprm-node's
`signal` module). Each way a signal reaches a program is tried several
times: which thread gets a signal varies from run to run.
"""

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
PROGRAM = HERE / "programs" / "stoppable.py"
HPRM = Path(sys.executable).parent / "hprm"
FEDERATES = ("source", "left", "right")


def children(pid, daemons=False):
    """The federate processes a launcher started: {name: pid}; with
    `daemons`, its hprm-store and hprm-rti too."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (d / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid != pid:
            continue
        if daemons:
            try:
                exe = (d / "cmdline").read_bytes().split(b"\0")[0].decode()
            except OSError:
                continue
            if exe.endswith(("/hprm-store", "/hprm-rti")):
                found[exe.rsplit("/", 1)[1]] = int(d.name)
        for e in env:
            if e.startswith(b"HPRM_FEDERATE="):
                found[e.split(b"=", 1)[1].decode()] = int(d.name)
    return found


def running(pid):
    """Whether `pid` runs (a zombie waiting for its new parent to reap it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def start(libs, *, via_cli=False, extra=()):
    # A short base: socket paths under it must fit in 107 bytes.
    runtime = Path(tempfile.mkdtemp(prefix="hprm-sig-", dir="/tmp"))
    # Two OpenBLAS threads whatever the machine's cores: the threads a
    # signal may land on exist in every run.
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=str(runtime), OPENBLAS_NUM_THREADS="2", PYTHONUNBUFFERED="1")
    argv = [sys.executable, str(PROGRAM), ",".join(libs), *extra]
    if via_cli:
        argv = [str(HPRM), "launch", str(PROGRAM), ",".join(libs), *extra]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    seen = wait_for_output(p, {"left receiving", "right receiving"}, 180, "the program did not start")
    return p, seen, runtime


def wait_for_output(p, waiting, within_s, failure):
    """Reads `p`'s output until every string of `waiting` has appeared in
    it; fails the test with `failure` and the output after `within_s`.
    Returns the lines read."""
    seen = []
    deadline = time.monotonic() + within_s
    for line in p.stdout:
        seen.append(line)
        waiting = {w for w in waiting if w not in line}
        if not waiting or time.monotonic() > deadline:
            break
    if waiting:
        p.kill()
        pytest.fail(f"{failure} (still waiting for {waiting}):\n{''.join(seen)}{p.communicate()[0]}")
    return seen


def finish(p, seen, timeout=60):
    try:
        rest, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        for pid in children(p.pid).values():
            os.kill(pid, signal.SIGKILL)
        pytest.fail(f"the program did not stop within {timeout} s:\n{''.join(seen)}{p.communicate()[0]}")
    return "".join(seen) + rest


def send(how, p):
    feds = children(p.pid)
    assert set(feds) == set(FEDERATES), feds
    if how == "launcher-SIGINT":
        p.send_signal(signal.SIGINT)
    elif how == "launcher-SIGTERM":
        p.send_signal(signal.SIGTERM)
    elif how == "group-SIGINT":
        # What a terminal's Ctrl-C does: the foreground process group.
        os.killpg(p.pid, signal.SIGINT)
    elif how == "one-federate-SIGTERM":
        os.kill(feds["left"], signal.SIGTERM)
    elif how == "every-process-SIGTERM":
        # What `systemctl stop` does to a launcher's unit (KillMode=control-group).
        # A federate may be gone by its turn: the launcher, signalled
        # first, stops it at once (systemd, too, signals only what is still
        # in the unit's cgroup).
        for pid in [p.pid, *feds.values()]:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    else:
        raise AssertionError(how)


def check_clean(out, p, runtime, libs):
    assert p.returncode == 0, out
    for f in FEDERATES:
        assert f"{f} shutdown after" in out, f"{f}'s shutdown reaction did not run:\n{out}"
    assert "Traceback" not in out and "panicked" not in out, out
    if "numpy" in libs:
        threads = int(next(l for l in out.splitlines() if "source started with" in l).split("started with ")[1].split()[0])
        assert threads >= 1, f"numpy started no thread: the run proves nothing\n{out}"
    assert list(runtime.iterdir()) == [], "the runtime directory was left behind"
    runtime.rmdir()


WAYS = ["launcher-SIGINT", "launcher-SIGTERM", "group-SIGINT", "one-federate-SIGTERM", "every-process-SIGTERM"]


def have(*libs):
    return all(importlib.util.find_spec(l) is not None for l in libs)


@pytest.mark.parametrize("run", range(3))
@pytest.mark.parametrize("how", WAYS)
def test_signals_stop_a_numpy_program_cleanly(daemons_built, how, run):
    p, seen, runtime = start(["numpy"])
    send(how, p)
    check_clean(finish(p, seen), p, runtime, ["numpy"])


@pytest.mark.parametrize("how", WAYS)
def test_signals_stop_a_torch_and_onnxruntime_program_cleanly(daemons_built, how):
    if not have("torch", "onnxruntime"):
        pytest.skip("torch and onnxruntime are not installed in this environment")
    libs = ["numpy", "torch", "onnxruntime"]
    p, seen, runtime = start(libs)
    send(how, p)
    check_clean(finish(p, seen), p, runtime, libs)


def test_a_launched_federate_keeps_sigterm_handled_until_its_process_exits(daemons_built):
    # Only `left` hears a signal; `source` and `right` stop at the common tag
    # it asks for. Each federate's process must still catch (and drop) the
    # SIGTERM a launcher sends once it has stopped: the launcher stops the
    # others when one fails, at any moment, and the default disposition
    # would turn a clean exit (or a failed federate's own error) into
    # "killed by signal 15".
    p, seen, runtime = start(["numpy"], extra=["--report-sigterm"])
    send("one-federate-SIGTERM", p)
    out = finish(p, seen)
    check_clean(out, p, runtime, ["numpy"])
    for f in FEDERATES:
        assert f"{f} exits with SIGTERM caught" in out, out


@pytest.mark.parametrize("how", ["launcher-SIGTERM", "one-federate-SIGTERM"])
def test_libraries_imported_after_hprm_do_not_matter(daemons_built, how):
    p, seen, runtime = start(["numpy"], extra=["--after"])
    send(how, p)
    check_clean(finish(p, seen), p, runtime, ["numpy"])


@pytest.mark.parametrize("run", range(2))
def test_ctrl_c_to_hprm_launch_stops_a_numpy_program_cleanly(daemons_built, run):
    p, seen, runtime = start(["numpy"], via_cli=True)
    os.killpg(p.pid, signal.SIGINT)
    out = finish(p, seen)
    check_clean(out, p, runtime, ["numpy"])
    assert "federates exited cleanly" in out, out


def test_a_second_ctrl_c_stops_at_once(daemons_built):
    # The source's shutdown reaction takes a minute: the first Ctrl-C
    # starts a stop that would wait for it; the second ends it now.
    p, seen, runtime = start(["numpy"], extra=["--slow-shutdown"])
    p.send_signal(signal.SIGINT)
    for line in p.stdout:
        seen.append(line)
        if "source shutdown after" in line:
            break
    time.sleep(0.5)
    began = time.monotonic()
    p.send_signal(signal.SIGINT)
    out = finish(p, seen, timeout=50)
    assert time.monotonic() - began < 50
    assert p.returncode != 0, out
    assert children(p.pid) == {}, "federates outlived their launcher"
    assert "source shutdown after" in out, out
    shutil.rmtree(runtime, ignore_errors=True)


def test_a_launcher_killed_with_sigkill_leaves_nothing_running(daemons_built):
    # SIGKILL cannot be handled: the launcher's children learn of its death
    # from the kernel (the parent-death signal), and stop.
    p, seen, runtime = start(["numpy"])
    left = children(p.pid, daemons=True)
    assert {"source", "left", "right", "hprm-store", "hprm-rti"} <= set(left), left
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    deadline = time.monotonic() + 60
    alive = dict(left)
    while alive and time.monotonic() < deadline:
        alive = {n: pid for n, pid in alive.items() if running(pid)}
        time.sleep(0.2)
    for pid in alive.values():
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"still running a minute after their launcher died: {sorted(alive)}"
    shutil.rmtree(runtime, ignore_errors=True)
