"""Each reactor's ``__init__`` runs in the process that runs it (and in the
one process that describes the whole program), not in every federate's
process: a reactor that opens a camera or loads a model in ``__init__`` does
so once where it runs (tests/programs/init_once.py, launched for real)."""

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"
REACTORS = ["src[0]", "src[1]", "src[2]", "sink"]


def where(log):
    """From the program's log: {reactor: [pids that ran its __init__]},
    {reactor: [pids that ran its startup reaction]}, and the sink's values."""
    inits, runs, got = defaultdict(list), defaultdict(list), []
    for line in log.read_text().splitlines():
        what, *rest = line.split()
        if what == "got":
            got.append(rest)
        else:
            (inits if what == "init" else runs)[rest[0]].append(int(rest[1]))
    return inits, runs, got


@pytest.mark.parametrize(
    "placement,launcher",
    [("processes", "script"), ("threads", "script"), ("processes", "hprm launch")],
)
def test_each_reactor_is_constructed_only_where_it_runs(placement, launcher, tmp_path, daemons_built, hprm_cli, runtime_base):
    log = tmp_path / "init.log"
    # HPRM_PYTHON: `hprm launch` runs the script with this test's Python (the
    # one with hprm installed), not whatever python3 is first on PATH.
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=runtime_base, HPRM_PYTHON=sys.executable)
    script = [str(PROGRAMS / "init_once.py"), placement, str(log)]
    # `python init_once.py` launches from the script's own process;
    # `hprm launch init_once.py` runs the script once to describe the
    # program (HPRM_DESCRIBE), then once per federate.
    cmd = [sys.executable, *script] if launcher == "script" else [str(hprm_cli), "launch", *script]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    inits, runs, got = where(log)
    # The sources' values crossed to the sink (so a stub's multiport, its
    # width read from the manifest, is wired as the real one).
    assert got == [["0", "1", "2"]], got
    assert sorted(runs) == sorted(REACTORS), runs
    assert all(len(runs[name]) == 1 for name in REACTORS), runs
    runners = {runs[name][0] for name in REACTORS}
    assert len(runners) == (4 if placement == "processes" else 2), runs
    # One process describes the whole program, timers and reactions
    # included, which only __init__ declares: the launcher (the script) or
    # the describing run of `hprm launch`. It runs no reactor.
    describers = {pid for pid in set().union(*inits.values()) if pid not in runners}
    assert len(describers) == 1, (describers, inits, runs)
    if launcher == "script":
        assert describers == {proc.pid}, (describers, proc.pid)
    for name in REACTORS:
        # Once there and once in the one process that runs it: in no other
        # federate's process.
        assert sorted(inits[name]) == sorted([*describers, runs[name][0]]), (name, inits, runs)
