"""Each reactor's ``__init__`` runs once, in the process that runs it: not
in another federate's process, and not in the process that describes the
whole program (the launcher, or the describing run of ``hprm launch``),
unless only ``__init__`` can say what the reactor declares (a width read
from an attribute it sets). A reactor that opens a camera or loads a model
in ``__init__`` does so once where it runs (tests/programs/init_once.py,
launched for real)."""

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import hprm

PROGRAMS = Path(__file__).parent / "programs"
# The program's reactors by their log names. The sources (a bank) and the
# sinks "sink" (a multiport's width in the class) and "psink" (the width
# from a constructor argument, hprm.param) are described from their class;
# "asink" takes its width from an attribute __init__ sets.
DESCRIBED = ["src[0]", "src[1]", "src[2]", "sink", "psink"]
REACTORS = [*DESCRIBED, "asink"]


def where(log):
    """From the program's log: {reactor: [pids that ran its __init__]},
    {reactor: [pids that ran its first reaction]}, and what the sinks got."""
    inits, runs, got = defaultdict(list), defaultdict(list), []
    for line in log.read_text().splitlines():
        what, *rest = line.split()
        if what == "got":
            got.append(rest)
        elif what in ("init", "run"):
            (inits if what == "init" else runs)[rest[0]].append(int(rest[1]))
        else:
            raise AssertionError(f"unexpected line {line!r}")
    return inits, runs, got


def env_for(runtime_base):
    # HPRM_PYTHON: `hprm launch` runs the script with this test's Python (the
    # one with hprm installed), not whatever python3 is first on PATH.
    return dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=runtime_base, HPRM_PYTHON=sys.executable)


@pytest.mark.parametrize(
    "placement,launcher",
    [("processes", "script"), ("threads", "script"), ("processes", "hprm launch"), ("threads", "hprm launch")],
)
def test_each_reactor_is_constructed_only_where_it_runs(placement, launcher, tmp_path, daemons_built, hprm_cli, runtime_base):
    log = tmp_path / "init.log"
    script = [str(PROGRAMS / "init_once.py"), placement, str(log)]
    # `python init_once.py` launches from the script's own process;
    # `hprm launch init_once.py` runs the script once to describe the
    # program (HPRM_DESCRIBE), then once per federate.
    cmd = [sys.executable, *script] if launcher == "script" else [str(hprm_cli), "launch", *script]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env_for(runtime_base))
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    inits, runs, got = where(log)
    # Every source's value crossed to every sink: the ports of the reactors
    # described from their class (and of stubs, in the other federates'
    # processes) are wired as the real ones.
    assert sorted(got) == [[s, "0", "1", "2"] for s in ("asink", "psink", "sink")], got
    assert sorted(runs) == sorted(REACTORS), runs
    assert all(len(runs[name]) == 1 for name in REACTORS), runs
    runners = {runs[name][0] for name in REACTORS}
    assert len(runners) == (6 if placement == "processes" else 4), runs
    for name in DESCRIBED:
        # Once in all the program's processes: in the one that runs it.
        assert inits[name] == runs[name], (name, inits, runs)
    # The one whose width only __init__ knows: also once in the process
    # that describes the program (a process that runs no reactor: the
    # launcher, which is the script, or the describing run of `hprm launch`).
    assert len(inits["asink"]) == 2 and runs["asink"][0] in inits["asink"], (inits, runs)
    (describer,) = set(inits["asink"]) - set(runs["asink"])
    assert describer not in runners, (describer, runs)
    if launcher == "script":
        assert describer == proc.pid, (describer, proc.pid)


def test_a_program_run_in_one_process_constructs_each_reactor_once(tmp_path, daemons_built, runtime_base):
    # One federate: `launch()` runs it in the script's process, which
    # constructs every reactor there, described from its class or not.
    log = tmp_path / "init.log"
    proc = subprocess.Popen([sys.executable, str(PROGRAMS / "init_once.py"), "one", str(log)], stderr=subprocess.PIPE, text=True, env=env_for(runtime_base))
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    inits, runs, got = where(log)
    assert sorted(got) == [[s, "0", "1", "2"] for s in ("asink", "psink", "sink")], got
    assert dict(inits) == {name: [proc.pid] for name in REACTORS}, inits
    assert dict(runs) == {name: [proc.pid] for name in REACTORS}, runs


def test_the_description_from_the_class_is_the_one_init_gives(tmp_path, hprm_cli, runtime_base):
    # `hprm manifest` runs the script only to describe the program: no
    # __init__ runs but asink's, and the sinks described from their class
    # have what the constructed one has (ports and widths, the class's
    # action, reactions with their deadline); the sources' timer has the
    # offset their argument gives.
    log = tmp_path / "init.log"
    proc = subprocess.run(
        [str(hprm_cli), "manifest", str(PROGRAMS / "init_once.py"), "processes", str(log)],
        capture_output=True,
        text=True,
        env=env_for(runtime_base),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    inits, runs, _ = where(log)
    assert sorted(inits) == ["asink"] and len(inits["asink"]) == 1 and not runs, (inits, runs)
    reactors = {r["name"]: r for f in json.loads(proc.stdout)["federate"] for r in f["reactor"]}
    constructed = {k: v for k, v in reactors["asink"].items() if k != "name"}
    assert constructed["inputs"] == ["inp[3]"] and constructed["action"] == [{"name": "done", "physical": False, "min_delay": "1ms"}], constructed
    assert [rx.get("deadline") for rx in constructed["reaction"]] == [None, "10s", None], constructed
    for name in ("sink", "psink"):
        assert {k: v for k, v in reactors[name].items() if k != "name"} == constructed, (name, reactors[name])
    for i in range(3):
        src = reactors[f"src[{i}]"]
        assert src["timer"] == [{"name": "tick", "offset": "1ms", "period": "0ms"}], src
        assert src["reaction"] == [{"name": "start", "triggers": ["tick"], "effects": ["out"]}], src


class Counted(hprm.Reactor):
    """Counts its constructions (in this process)."""

    made = 0
    out = hprm.Output(width=hprm.param("n"))
    tick = hprm.Timer(period=hprm.param("period"))

    def __init__(self, n, period="10ms"):
        type(self).made += 1

    @hprm.reaction(triggers="tick", effects="out")
    def send(self, ctx):
        pass


def test_a_reactor_described_from_its_class_is_constructed_when_its_instance_is_read(monkeypatch):
    # Outside a launched federate's process, the reactor is declared from
    # its class, and its __init__ runs when user code reads the instance.
    monkeypatch.delenv("HPRM_FEDERATE", raising=False)
    Counted.made = 0
    prog = hprm.Program("lazy")
    ref = prog.federate("a", Counted, 2, period="5ms").reactors[0]
    assert Counted.made == 0
    assert len(ref.out) == 2
    assert prog.manifest()["federate"][0]["reactor"][0]["timer"] == [{"name": "tick", "offset": "0ms", "period": "5ms"}]
    assert isinstance(ref.instance, Counted) and ref.instance is ref.instance
    assert Counted.made == 1
    # Each reactor has its own timer (the runtime's index is per reactor).
    other = prog.federate("b", Counted, 1).reactors[0].instance
    assert other.tick is not ref.instance.tick and other.tick.period_ns == 10_000_000


def test_what_the_class_cannot_declare_is_refused_where_the_program_names_it(monkeypatch):
    monkeypatch.delenv("HPRM_FEDERATE", raising=False)
    prog = hprm.Program("refused")
    # Arguments that do not fit __init__, though it has not run.
    with pytest.raises(TypeError, match="Counted"):
        prog.federate("a", Counted, 2, 3, 4)
    # A parameter __init__ does not have.
    class Wrong(hprm.Reactor):
        inp = hprm.Input(width=hprm.param("m"))

        def __init__(self, n):
            pass

    with pytest.raises(ValueError, match="Wrong.inp's width is hprm.param\\('m'\\), but Wrong\\(...\\) has no parameter 'm'"):
        prog.federate("b", Wrong, 3)


def test_a_timer_init_creates_that_the_description_lacks_is_an_error(monkeypatch):
    # A reactor declared from its class has the class's timers and actions;
    # one that __init__ creates (and no reaction names) would be a timer the
    # program does not have: constructing it says so.
    monkeypatch.delenv("HPRM_FEDERATE", raising=False)

    class Sly(hprm.Reactor):
        out = hprm.Output()

        def __init__(self):
            self.tick = hprm.Timer(period="1s")

    prog = hprm.Program("sly")
    ref = prog.federate("a", Sly).reactors[0]
    with pytest.raises(ValueError, match="__init__ creates Timer 'tick', which no reaction names"):
        ref.instance  # noqa: B018 (reading it constructs it)


class Twice(hprm.Reactor):
    tick = hprm.Timer(period="1s")

    def __init__(self):
        self.tick = hprm.Timer(period="2s")

    @hprm.reaction(triggers="tick")
    def fire(self, ctx):
        pass


@pytest.mark.parametrize("process", ["describing", "its own federate's"])
def test_a_timer_declared_twice_is_an_error_wherever_init_runs(process, monkeypatch):
    # The class's timer is the one the program declares, whether __init__
    # runs later (a describing process: when the instance is read) or at
    # once (the reactor's own federate's process).
    if process == "describing":
        monkeypatch.delenv("HPRM_FEDERATE", raising=False)
    else:
        monkeypatch.setenv("HPRM_FEDERATE", "a")
    prog = hprm.Program("twice")
    with pytest.raises(ValueError, match="__init__ sets tick to a new Timer, but the class declares tick already"):
        prog.federate("a", Twice).reactors[0].instance  # noqa: B018 (reading it constructs it)
