"""kill -9 of the store in the middle of a Python program (programs/
frames.py: a camera sending 100 kB numpy frames through the store every
2 ms to two receivers), with real processes: the launcher's store and RTI,
one process per federate. Each federate says once that the store went
away, the launcher restarts it, the federates reconnect and the frames
flow again; every frame lost is counted (exactly the frames the receivers
missed), the launch ends with exit code 3 and a summary saying so, and
nothing is left behind."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from test_signals import children, finish, wait_for_output

PROGRAM = Path(__file__).parent / "programs" / "frames.py"
RECEIVERS = ("left", "right")


def store_of(launcher):
    """The pid of the hprm-store the launcher `launcher` started."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == launcher and cmd.endswith(b"hprm-store"):
            found.append(int(d.name))
    assert len(found) == 1, found
    return found[0]


def shm():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def test_a_killed_store_is_restarted_and_the_program_goes_on_counting_what_was_lost(daemons_built):
    runtime = Path(tempfile.mkdtemp(prefix="hprm-sd-", dir="/tmp"))
    shm_before = shm()
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=str(runtime), PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, str(PROGRAM), "5"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env, start_new_session=True)
    seen = wait_for_output(p, {f"{r} receiving" for r in RECEIVERS}, 120, "frames never flowed")
    store = store_of(p.pid)
    os.kill(store, signal.SIGKILL)
    out = finish(p, seen)

    # The launcher says the store died and what was lost; exit code 3 (a daemon died).
    assert p.returncode == 3, out
    summary = [l for l in out.splitlines() if l.startswith("error: program frames: ")]
    m = re.fullmatch(r"error: program frames: hprm-store died during the run \(signal: 9 \(SIGKILL\)\) and was restarted; "
                     r"(\d+) deliveries were lost with it \((.*)\)", summary[-1] if summary else "")
    assert m, out
    counted = int(m.group(1))
    per_federate = {name: int(n) for name, n in (part.split() for part in m.group(2).split(", "))}
    assert sum(per_federate.values()) == counted, summary

    # The program went on, and what was counted is exactly what the receivers missed.
    sent = int(re.search(r"^\[camera\] camera sent (\d+)$", out, re.M).group(1))
    missed = 0
    for r in RECEIVERS:
        got = [int(n) for n in re.search(rf"^\[{r}\] {r} got ([\d ]+)$", out, re.M).group(1).split()]
        gap = sorted(set(range(1, sent + 1)) - set(got))
        assert gap, f"{r} missed nothing: was the store killed while frames flowed?\n{out}"
        assert max(got) > gap[-1], f"{r} got nothing after the store's restart (missed {gap}):\n{out}"
        missed += len(gap)
    assert counted == missed, out

    # One clear line per federate, not one per message; no Python traceback.
    for f in ("camera", *RECEIVERS):
        said = [l for l in out.splitlines() if l.startswith(f"[{f}] ") and "hprm-store went away" in l]
        assert len(said) == 1, f"{f}:\n{out}"
    assert "could not send the value" not in out and "Traceback" not in out, out

    # Nothing left behind: no process, no runtime directory, nothing in /dev/shm.
    assert children(p.pid) == {}, "federates outlived their launcher"
    assert list(runtime.iterdir()) == [], f"left in the runtime directory: {list(runtime.iterdir())}"
    assert shm() - shm_before == set(), f"left in /dev/shm: {shm() - shm_before}"
    shutil.rmtree(runtime, ignore_errors=True)
