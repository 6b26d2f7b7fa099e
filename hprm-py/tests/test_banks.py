"""Banks and multiports, with real processes: an RTI, a store and one
process per federate (tests/programs/banks.py), and errors of programs
whose widths do not fit."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import hprm

PROGRAMS = Path(__file__).parent / "programs"


def launch(*args, timeout=240, env=None):
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", **(env or {}))
    return subprocess.run([sys.executable, str(PROGRAMS / "banks.py"), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def lines(stderr, prefix):
    """The lines of `prefix`'s federate output, without the `[federate]` prefix."""
    return [l.split("] ", 1)[1] for l in stderr.splitlines() if l.startswith(prefix)]


def expected_checksum(n, k):
    a = (np.arange(n, dtype=np.uint64) * 7 + k).astype(np.uint8)
    return int(a[::4099].astype(np.uint64).sum()) + int(a[-1])


@pytest.mark.parametrize("placement", ["threads", "processes"])
def test_a_16_member_bank_gets_one_10mb_broadcast_and_replies(placement, daemons_built):
    width, rounds, n = 16, 2, 10_000_000
    r = launch("broadcast", placement, "centralized", width, 10, rounds)
    assert r.returncode == 0, r.stderr
    sent = {int(l.split("round=")[1].split()[0]): l.split("object=")[1] for l in lines(r.stderr, "[learner]") if l.startswith("sent")}
    replies = [l for l in lines(r.stderr, "[learner]") if l.startswith("reply")]
    # Every member replied to every round, in member order, values exact.
    want = [
        f"reply round={k} member={i}/{width} seed={100 + i} checksum={expected_checksum(n, k)} object={sent[k]}"
        for k in range(1, rounds + 1)
        for i in range(width)
    ]
    assert replies == want, r.stderr[-3000:]
    # One allocation per round, N deliveries: every member read the very
    # object the learner wrote.
    assert len(set(sent.values())) == rounds and "None" not in sent.values()


@pytest.mark.parametrize("placement", ["threads", "processes"])
@pytest.mark.parametrize("after", ["none", "0ms", "10ms"])
def test_four_cameras_into_a_four_wide_multiport(placement, after, daemons_built):
    r = launch("cameras", placement, "centralized", after)
    assert r.returncode == 0, r.stderr
    fused = lines(r.stderr, "[fusion]")
    offset, micro = {"none": (0, 0), "0ms": (0, 1), "10ms": (10, 0)}[after]
    want = [
        f"fused at={20 * (k - 1) + offset}ms micro={micro} present=[0, 1, 2, 3] frames={[(i, f'/dev/video{i}', k, i) for i in range(4)]}"
        for k in range(1, 5)
    ]
    assert fused == want, r.stderr[-3000:]


@pytest.mark.parametrize("placement", ["threads", "processes"])
@pytest.mark.parametrize("order", ["interleaved", "plain"])
def test_multiport_to_bank_and_interleaved_back(placement, order, daemons_built):
    r = launch("interleaved", placement, order)
    assert r.returncode == 0, r.stderr
    # Member m got channel m of the scatter (100 + m) and sent, on its
    # channel c, (100 + m) * 100 + 10 * m + c.
    value = {(m, c): (100 + m) * 100 + 10 * m + c for m in range(3) for c in range(2)}
    if order == "interleaved":  # channel by channel, each member by member
        want = [value[m, c] for c in range(2) for m in range(3)]
    else:  # member by member
        want = [value[m, c] for m in range(3) for c in range(2)]
    assert lines(r.stderr, "[join]") == [f"joined {want}"], r.stderr[-3000:]


def test_cameras_decentralized(daemons_built):
    r = launch("cameras", "processes", "decentralized", "10ms")
    assert r.returncode == 0, r.stderr
    fused = lines(r.stderr, "[fusion]")
    assert fused == [f"fused at={20 * (k - 1) + 10}ms micro=0 present=[0, 1, 2, 3] frames={[(i, f'/dev/video{i}', k, i) for i in range(4)]}" for k in range(1, 5)], r.stderr[-3000:]


def trace_reactions(path):
    """(federate, reaction, tag) of every reaction in a launch's trace, in
    a canonical order: what a program did, without when."""
    events = json.loads(Path(path).read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    out = []
    for e in events:
        if e.get("cat") == "reaction":
            out.append((e["name"], json.dumps(e.get("args", {}), sort_keys=True)))
    return sorted(out)


@pytest.mark.parametrize("mode", ["centralized", "decentralized"])
@pytest.mark.parametrize("placement", ["threads", "processes"])
def test_a_bank_and_the_same_program_written_by_hand_trace_the_same(mode, placement, tmp_path, daemons_built):
    traces, totals = [], []
    for hand in ("bank", "hand"):
        trace = tmp_path / f"{hand}.json"
        r = launch("pool", placement, mode, hand, env={"HPRM_LAUNCH_TRACE": str(trace)})
        assert r.returncode == 0, r.stderr
        totals.append(lines(r.stderr, "[sum]"))
        traces.append(trace_reactions(trace))
    assert totals[0] == [f"pool total={6 * k} at={10 * (k - 1)}ms" for k in range(1, 6)], totals
    assert totals[0] == totals[1]
    assert traces[0] and traces[0] == traces[1]


def test_a_process_bank_member_killed_is_restarted_while_the_others_go_on(tmp_path, daemons_built):
    marker = tmp_path / "died"
    r = launch("restart", env={"BANKS_MARKER": str(marker)})
    assert r.returncode == 0, r.stderr
    assert marker.exists() and "member 1 dies" in r.stderr
    got = lines(r.stderr, "[count]")
    ks = {m: [int(l.split("k=")[1]) for l in got if l.startswith(f"got member={m} ")] for m in range(3)}
    # The others never stopped; member 1 came back (with fresh state: its
    # count starts again), and the program stopped after its second message.
    assert len(ks[0]) >= 3 and ks[0] == list(range(1, len(ks[0]) + 1)), got
    assert ks[2] == list(range(1, len(ks[2]) + 1)), got
    assert ks[1][:2] == [1, 2] and ks[1][2:4] == [1, 2], got


class Cam(hprm.Reactor):
    frame = hprm.Output()


class Fuse(hprm.Reactor):
    frames = hprm.Input(width=3)


def test_widths_that_differ_are_refused_naming_both_sides():
    prog = hprm.Program("m")
    cams = prog.bank("cam", Cam, 4)
    fusion = prog.federate("fusion", Fuse)
    with pytest.raises(ValueError, match=r"connection cam\.frame -> fusion\.fusion\.frames: cam\.frame has width 4 but fusion\.fusion\.frames has width 3; connect equal widths"):
        prog.connect(cams.frame, fusion.frames)
    with pytest.raises(ValueError, match="a broadcast needs fusion.fusion.frames's width to be a multiple of cam.frame's"):
        prog.connect(cams.frame, fusion.frames, broadcast=True)
    with pytest.raises(ValueError, match=r"bank empty has width 0; a bank needs at least one member \(width >= 1\)"):
        prog.bank("empty", Cam, 0)
    with pytest.raises(ValueError, match="member_args has 2 entries but the bank has 4 members"):
        prog.bank("more", Cam, 4, member_args=[{}, {}])


def test_a_process_bank_spreads_over_hosts_round_robin_or_one_per_member():
    prog = hprm.Program("m")
    prog.host("a", "10.0.0.1").host("b", "10.0.0.2")
    prog.bank("cam", Cam, 3, hosts=["a", "b"])
    prog.bank("two", Cam, 2).on(["b", "a"])
    prog.federate("fusion", Fuse).on("a")
    hosts = {f["name"]: f["host"] for f in prog.manifest()["federate"]}
    assert hosts == {"cam[0]": "a", "cam[1]": "b", "cam[2]": "a", "two[0]": "b", "two[1]": "a", "fusion": "a"}
    with pytest.raises(ValueError, match='bank t: its placement .threads. runs every member in one process, which cannot span hosts; use placement="processes"'):
        prog.bank("t", Cam, 2, placement="threads", hosts=["a", "b"])
    with pytest.raises(ValueError, match=r"bank e: hosts is a host name or a non-empty list of them, not \[\]"):
        prog.bank("e", Cam, 2, hosts=[])


def test_check_refuses_a_manifest_whose_widths_differ(tmp_path):
    hprm_cmd = Path(sys.executable).parent / "hprm"
    m = tmp_path / "m.toml"
    m.write_text(
        'name = "m"\n'
        '[[federate]]\nname = "cam"\nwidth = 4\nplacement = "threads"\nmodule = "x.py"\n[[federate.reactor]]\nname = "cam"\nclass = "Cam"\noutputs = ["frame"]\n'
        '[[federate]]\nname = "fusion"\nmodule = "x.py"\n[[federate.reactor]]\nname = "fusion"\nclass = "Fuse"\ninputs = ["frames[3]"]\n'
        '[[federate]]\nname = "none"\nwidth = 0\nmodule = "x.py"\n[[federate.reactor]]\nname = "n"\nclass = "Cam"\noutputs = ["o"]\n'
        '[[connection]]\nfrom = "cam.frame"\nto = "fusion.frames"\n'
    )
    r = subprocess.run([str(hprm_cmd), "check", str(m)], capture_output=True, text=True)
    assert r.returncode != 0
    assert f"{m}:26: connection cam.frame -> fusion.frames: cam.frame has width 4 but fusion.frames has width 3" in r.stderr + r.stdout, r.stderr
    assert f"{m}:20:9: bank none has width 0; a bank needs at least one member" in r.stderr + r.stdout, r.stderr


def test_ps_and_topic_name_bank_members(daemons_built, runtime_base):
    hprm_cmd = Path(daemons_built) / "hprm"
    if not hprm_cmd.exists():
        hprm_cmd = Path(sys.executable).parent / "hprm"
    ticks = 400
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", XDG_RUNTIME_DIR=runtime_base)
    prog = subprocess.Popen([sys.executable, str(PROGRAMS / "banks.py"), "live", str(ticks)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            echo = subprocess.run([str(hprm_cmd), "topic", "echo", "cam[2].out", "-n", "2"], capture_output=True, text=True, env=env, timeout=60)
            if echo.returncode == 0:
                break
            assert time.monotonic() < deadline, echo.stderr
            time.sleep(0.2)
        assert echo.stdout.count('"member": 2') == 2, echo.stdout
        ps = subprocess.run([str(hprm_cmd), "ps"], capture_output=True, text=True, env=env, timeout=60)
        assert ps.returncode == 0, ps.stderr
        for i in range(3):
            assert f"cam[{i}]" in ps.stdout, ps.stdout
        _, err = prog.communicate(timeout=60)
    finally:
        prog.kill()
    assert prog.returncode == 0, err
    assert f"[sink] sink got {3 * ticks}" in err, err
