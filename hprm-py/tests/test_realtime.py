"""Real-time placement (``Federate.realtime``), with real processes: the
federate's reactions run at the priority and on the CPUs asked for; without
the right to, it stops with an error that says what it needs, or, with
``best_effort``, warns and runs as a normal process."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hprm

PROGRAM = Path(__file__).parent / "programs" / "realtime.py"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="setting a real-time priority needs root or CAP_SYS_NICE; run as root to test it")
needs_setpriv = pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is needed to drop CAP_SYS_NICE")


def run(priority, cpus, policy="fifo", best_effort=False, drop_sys_nice=False, **env_extra):
    argv = [sys.executable, str(PROGRAM), str(priority or "-"), cpus or "-", policy, "1" if best_effort else "0"]
    if drop_sys_nice:
        # Root without CAP_SYS_NICE, and no RLIMIT_RTPRIO either: what a
        # service account has. The bounding set limits what exec grants.
        argv = ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", "--", "sh", "-c", 'ulimit -r 0 && exec "$@"', "sh", *argv]
    env = {**os.environ, "NO_COLOR": "1", "RUST_LOG": "warn", **env_extra}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def said(r, who):
    return [l.split("] ", 1)[1] for l in r.stderr.splitlines() if l.startswith(f"[{who}]") and "policy=" in l]


@needs_root
@pytest.mark.parametrize("policy", ["fifo", "rr"])
def test_a_federate_runs_its_reactions_at_its_priority_on_its_cpus(policy, daemons_built):
    r = run(7, "0", policy)
    assert r.returncode == 0, r.stderr
    assert said(r, "source") == [f"source: policy={policy} priority=7 cpus=0"], r.stderr
    # The other federate is untouched.
    assert said(r, "sink")[0].startswith("sink: policy=other priority=0"), r.stderr
    assert "sink: got 20 in order True" in r.stderr, r.stderr


@needs_root
def test_a_real_time_federate_polls_its_inbox_for_the_bound_it_is_given(daemons_built):
    # HPRM_SPIN_US is the bound on polling, at a real-time priority too.
    r = run(7, "0", RUST_LOG="warn,hprm_node::federate=debug", HPRM_SPIN_US="50")
    assert r.returncode == 0, r.stderr
    bounds = [l for l in r.stderr.splitlines() if "inbox polling bound" in l]
    assert any("realtime=true" in l and "spin_us=50" in l for l in bounds), r.stderr
    assert any("realtime=false" in l and "spin_us=50" in l for l in bounds), r.stderr


def test_a_bad_polling_bound_stops_the_federate_saying_why(daemons_built):
    r = run(None, "0", HPRM_SPIN_US="2000000")
    assert r.returncode != 0
    assert 'HPRM_SPIN_US="2000000" is not a whole number of microseconds from 0 to 1000000' in r.stderr, r.stderr


@needs_root
@needs_setpriv
def test_without_the_right_the_federate_stops_saying_what_it_needs(daemons_built):
    r = run(7, None, drop_sys_nice=True)
    assert r.returncode != 0, r.stderr
    # One clear error: which federate, what it asked for, what it needs, the way out.
    line = next((l for l in r.stderr.splitlines() if "cannot run at real-time priority 7" in l), None)
    assert line is not None, r.stderr
    assert "federate source" in line and "CAP_SYS_NICE" in line and "best_effort" in line, line


@needs_root
@needs_setpriv
def test_best_effort_warns_and_runs_as_a_normal_process(daemons_built):
    r = run(7, None, best_effort=True, drop_sys_nice=True)
    assert r.returncode == 0, r.stderr
    assert any("running without real-time placement (best_effort)" in l for l in r.stderr.splitlines()), r.stderr
    assert said(r, "source")[0].startswith("source: policy=other priority=0"), r.stderr
    assert "sink: got 20 in order True" in r.stderr, r.stderr


def test_cpus_alone_need_no_privilege_and_pin_the_federate(daemons_built):
    cpu = max(os.sched_getaffinity(0))
    r = run(None, str(cpu))
    assert r.returncode == 0, r.stderr
    assert said(r, "source") == [f"source: policy=other priority=0 cpus={cpu}"], r.stderr


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"priority": 0}, "priority 0 is out of range"),
        ({"priority": 100}, "priority 100 is out of range"),
        ({"cpus": "3-1"}, "is not a CPU list"),
        ({"priority": 5, "policy": "deadline"}, "not one of fifo, rr"),
        ({}, "give a priority"),
    ],
)
def test_bad_placements_are_refused_where_they_are_written(kwargs, message):
    prog = hprm.Program("bad-realtime")
    with pytest.raises(ValueError, match=message):
        prog.federate("f").realtime(**kwargs)


def test_the_manifest_carries_the_placement():
    prog = hprm.Program("placed")
    prog.federate("control").realtime(priority=80, cpus="0", policy="rr")
    manifest = prog.manifest()
    control = manifest["federate"][0]
    assert (control["priority"], control["policy"], control["cpus"]) == (80, "rr", "0"), control


MARKED = Path(__file__).parent / "programs" / "marked.py"


def run_marked(socket_priority, dscp, best_effort=False, drop_net_admin=False):
    argv = [sys.executable, str(MARKED), str(socket_priority if socket_priority is not None else "-"), str(dscp or "-"), "1" if best_effort else "0"]
    if drop_net_admin:
        # Linux lets CAP_NET_RAW set high priorities too: drop both.
        argv = ["setpriv", "--inh-caps=-net_admin,-net_raw", "--bounding-set=-net_admin,-net_raw", "--", *argv]
    # Over TCP even on one host: the connections the marks are for.
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", HPRM_LOCAL_TRANSPORT="tcp")
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def marks_said(r, who):
    return next((l.split("] ", 1)[1] for l in r.stderr.splitlines() if l.startswith(f"[{who}] {who}: ") and "marks" in l), None)


def test_a_federates_tcp_connections_carry_its_marks_and_only_its(daemons_built):
    r = run_marked(5, "EF")
    assert r.returncode == 0, r.stderr
    # Read from the sockets themselves: the RTI connection and the peer connection.
    said = marks_said(r, "source")
    assert said is not None and said.startswith("source: marks [(5, 46)] on "), r.stderr
    assert int(said.split(" on ")[1].split()[0]) >= 2, said
    sink = marks_said(r, "sink")
    assert sink is not None and sink.startswith("sink: got ") and "marks [(0, 0)]" in sink, r.stderr


@needs_root
@needs_setpriv
def test_a_socket_priority_above_6_without_cap_net_admin_is_one_clear_error(daemons_built):
    r = run_marked(7, None, drop_net_admin=True)
    assert r.returncode != 0, r.stderr
    line = next((l for l in r.stderr.splitlines() if "cannot give connections socket priority 7" in l), None)
    assert line is not None, r.stderr
    assert "federate source" in line and "CAP_NET_ADMIN" in line and "best_effort" in line, line
    r = run_marked(7, None, best_effort=True, drop_net_admin=True)
    assert r.returncode == 0, r.stderr
    assert any("its connections stay unmarked (best_effort)" in l for l in r.stderr.splitlines()), r.stderr
    assert "marks [(0, 0)]" in (marks_said(r, "source") or ""), r.stderr


@pytest.mark.parametrize(
    "kwargs, message",
    [({"socket_priority": 16}, "socket_priority 16 is out of range"), ({"dscp": "XX"}, "neither a number 0 to 63"), ({"dscp": 64}, "not 0 to 63")],
)
def test_bad_marks_are_refused_where_they_are_written(kwargs, message):
    prog = hprm.Program("bad-marks")
    with pytest.raises(ValueError, match=message):
        prog.federate("f").realtime(**kwargs)


def test_the_manifest_carries_the_marks():
    prog = hprm.Program("marked")
    prog.federate("control").realtime(socket_priority=6, dscp="AF41")
    control = prog.manifest()["federate"][0]
    assert (control["socket_priority"], control["dscp"]) == (6, 34), control
