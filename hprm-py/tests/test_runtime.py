"""Python reactors on the Rust runtime, inside one federate (no RTI needed):
tags and delays, actions, shutdown, deadlines, errors in reactions."""

import gc
import sys
import threading
import time

import pytest

import hprm


def run(prog, fast=True):
    return prog.run(fast=fast)


class Counter(hprm.Reactor):
    out = hprm.Output()

    def __init__(self, period="10ms"):
        self.tick = hprm.Timer(period=period)
        self.n = 0

    @hprm.reaction(triggers="tick", effects="out")
    def count(self, ctx):
        self.n += 1
        ctx.set(self.out, {"n": self.n, "at": ctx.elapsed})


class Recorder(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self, log):
        self.log = log
        self.echo = hprm.LogicalAction(min_delay="1ms")

    @hprm.reaction(triggers="inp", effects="echo")
    def got(self, ctx):
        self.log.append(("got", self.inp.value["n"], self.inp.value["at"], ctx.elapsed, ctx.tag.microstep))
        self.echo.schedule(self.inp.value["n"] * 10)

    @hprm.reaction(triggers="echo")
    def echoed(self, ctx):
        self.log.append(("echo", self.echo.value, ctx.elapsed))

    @hprm.reaction(triggers="shutdown")
    def bye(self, ctx):
        self.log.append(("shutdown", ctx.elapsed))


def counter_to_recorder(name, log):
    """A counter every 10 ms into a recorder 5 ms later, for 20 ms."""
    prog = hprm.Program(name, timeout="20ms")
    f = prog.federate("f")
    c = f.reactor("counter", Counter)
    r = f.reactor("recorder", Recorder, log)
    prog.connect(c.out, r.inp, after="5ms")
    return prog


def test_values_arrive_at_the_tags_their_delays_say():
    log = []
    report = run(counter_to_recorder("delays", log))
    ms = 1_000_000
    assert log == [
        ("got", 1, 0, 5 * ms, 0),
        ("echo", 10, 6 * ms),
        ("got", 2, 10 * ms, 15 * ms, 0),
        ("echo", 20, 16 * ms),
        ("shutdown", 20 * ms),
    ]
    assert report["tags"] == 7


def test_after_zero_is_one_microstep_and_no_delay_is_the_same_tag():
    log = []
    prog = hprm.Program("micro", timeout="1ms")
    f = prog.federate("f")
    c = f.reactor("counter", Counter)
    a = f.reactor("a", Recorder, log)
    b = f.reactor("b", Recorder, log)
    prog.connect(c.out, a.inp)
    prog.connect(c.out, b.inp, after="0ms")
    run(prog)
    got = [e for e in log if e[0] == "got"]
    assert got == [("got", 1, 0, 0, 0), ("got", 1, 0, 0, 1)]


class Slow(hprm.Reactor):
    def __init__(self, log):
        self.log = log

    @hprm.reaction(triggers="startup")
    def hog(self, ctx):
        time.sleep(0.003)

    @hprm.reaction(triggers="startup", deadline="1ms")
    def tight(self, ctx):
        self.log.append("on time")

    @tight.deadline_handler
    def late(self, ctx):
        self.log.append("late")


def test_a_missed_deadline_runs_its_handler():
    log = []
    prog = hprm.Program("deadline", timeout=0)
    prog.federate("f", Slow, log)
    report = run(prog, fast=False)
    assert log == ["late"]
    assert report["deadline_misses"] == 1


class Raiser(hprm.Reactor):
    def __init__(self, log):
        self.log = log
        self.tick = hprm.Timer(period="1ms")

    @hprm.reaction(triggers="tick")
    def boom(self, ctx):
        self.log.append(ctx.elapsed)
        if len(self.log) == 2:
            raise ValueError("sensor unplugged")


def test_a_raising_reaction_stops_its_federate_with_names_and_traceback(capfd, monkeypatch):
    monkeypatch.setenv("RUST_BACKTRACE", "1")
    log = []
    prog = hprm.Program("raise", timeout="10ms")
    prog.federate("f", Raiser, log)
    with pytest.raises(RuntimeError) as e:
        run(prog)
    assert str(e.value) == "reaction f.f.boom failed: ValueError: sensor unplugged"
    assert len(log) == 2
    err = capfd.readouterr().err
    # One Python traceback, headed by federate and reaction; no Rust panic.
    assert err.count("Traceback (most recent call last)") == 1, err
    assert "federate f, reaction f.f.boom raised:" in err and 'in boom\n    raise ValueError("sensor unplugged")' in err, err
    assert "panicked" not in err and "stack backtrace" not in err and "hprm/__init__.py" not in err, err


def test_on_error_continue_logs_and_goes_on():
    log = []
    prog = hprm.Program("raise", timeout="10ms", on_error="continue")
    prog.federate("f", Raiser, log)
    run(prog)
    assert len(log) == 11


class Sensor(hprm.Reactor):
    def __init__(self, log):
        self.log = log
        self.reading = hprm.PhysicalAction()

    @hprm.reaction(triggers="startup")
    def start(self, ctx):
        def feed():
            for k in range(3):
                time.sleep(0.002)
                self.reading.schedule(k)

        threading.Thread(target=feed, daemon=True).start()

    @hprm.reaction(triggers="reading")
    def read(self, ctx):
        self.log.append(self.reading.value)
        assert ctx.logical_time <= ctx.physical_time
        if len(self.log) == 3:
            ctx.request_stop()


def test_physical_actions_from_another_thread():
    log = []
    prog = hprm.Program("sensor")
    prog.federate("f", Sensor, log)
    run(prog, fast=False)
    assert log == [0, 1, 2]


def test_bad_declarations_are_reported():
    class Typo(hprm.Reactor):
        @hprm.reaction(triggers="tick")
        def r(self, ctx):
            pass

    prog = hprm.Program("bad")
    with pytest.raises(ValueError, match="names 'tick' as a trigger, but the reactor has no such port"):
        prog.federate("f", Typo)
    with pytest.raises(ValueError, match="cannot read '5 parsecs' as a duration"):
        hprm.duration_ns("5 parsecs")

    # Refused where the mistake is made, not at launch.
    prog = hprm.Program("dup")
    f = prog.federate("f", Counter)
    with pytest.raises(ValueError, match="program dup already has a federate named 'f'"):
        prog.federate("f", Counter)
    with pytest.raises(ValueError, match="federate f already has a reactor named 'f'"):
        f.reactor("f", Counter)
    g = prog.federate("g")
    a = g.reactor("a", Recorder, [])
    b = g.reactor("b", Recorder, [])
    with pytest.raises(ValueError, match="is an input"):
        prog.connect(a.inp, b.inp)
    prog.connect(f.out, a.inp)
    with pytest.raises(ValueError, match="input g.a.inp is already connected from f.f.out"):
        prog.connect(f.out, a.inp)
    with pytest.raises(TypeError, match="connect takes ports"):
        prog.connect("f.out", b.inp)
    with pytest.raises(ValueError, match="restart_on_failure needs centralized coordination"):
        hprm.Program("d", coordination="decentralized").federate("x").restart_on_failure()


def test_ports_are_only_usable_inside_reactions():
    prog = hprm.Program("outside")
    f = prog.federate("f")
    r = f.reactor("r", Recorder, [])
    with pytest.raises(RuntimeError, match="only inside a reaction"):
        _ = r.instance.inp.value


class Base(hprm.Reactor):
    inp = hprm.Input()

    def __init__(self, log):
        self.log = log
        self.tick = hprm.Timer(period="10ms")

    @hprm.reaction(triggers="tick")
    def first(self, ctx):
        self.log.append(("base first", ctx.elapsed))

    @hprm.reaction(triggers="tick")
    def second(self, ctx):
        self.log.append(("base second", ctx.elapsed))


class Derived(Base):
    inp = hprm.Input()  # redeclared: still one port

    @hprm.reaction(triggers="tick")
    def first(self, ctx):
        self.log.append(("derived first", ctx.elapsed))


def test_a_subclass_that_redefines_a_reaction_or_port_replaces_it_in_its_place():
    log = []
    prog = hprm.Program("override", timeout="0ms")
    f = prog.federate("f")
    d = f.reactor("d", Derived, log)
    assert d.inp is not None
    run(prog)
    # The redefined reaction runs instead of its parent's, and keeps its
    # parent's place (its LF priority): before `second`.
    assert log == [("derived first", 0), ("base second", 0)]


def in_thread(fn):
    """fn() on a new thread; its result, or its exception raised here."""
    out = {}

    def call():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 (re-raised below, on the test's thread)
            out["error"] = e

    t = threading.Thread(target=call)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_program_declared_on_one_thread_runs_on_another():
    # An application may declare its program on its main thread and run it
    # on a worker (a GUI's, an executor's): the program is not pinned to
    # the thread that made it.
    log = []
    prog = counter_to_recorder("moved", log)
    report = in_thread(lambda: run(prog))
    assert report["tags"] == 7
    assert [e[:2] for e in log if e[0] == "got"] == [("got", 1), ("got", 2)]


def test_a_program_made_on_a_thread_that_ended_is_freed_cleanly_on_another():
    # A program dropped on another thread than its maker's (the maker has
    # ended; a garbage cycle collected wherever the collector runs) is
    # freed, not leaked with an unraisable "dropped on another thread".
    def declare():
        prog = hprm.Program("dropped", timeout="1ms")
        f = prog.federate("f")
        f.reactor("counter", Counter)
        prog.validate()
        return prog

    unraisable = []
    old, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        progs = [in_thread(declare) for _ in range(3)]
        progs[0].validate()
        run(progs[1])
        del progs
        gc.collect()
    finally:
        sys.unraisablehook = old
    assert [str(u.exc_value) for u in unraisable] == []
