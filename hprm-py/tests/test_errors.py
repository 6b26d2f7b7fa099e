"""A failing Python reaction reads as a Python error: one traceback per
federate, in Python's words, the right federate blamed, every failed
federate named at the end, and no Rust panic text whatever RUST_BACKTRACE
says. Real launches: a store, an RTI, one process per federate."""

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
PROGRAM = HERE / "programs" / "raising.py"


def launch(mode):
    env = dict(os.environ, NO_COLOR="1", RUST_LOG="warn", RUST_BACKTRACE="1")
    return subprocess.run([sys.executable, str(PROGRAM), mode], capture_output=True, text=True, timeout=120, env=env)


def assert_pythonic(err):
    assert "panicked" not in err and "stack backtrace" not in err and "src/runtime.rs" not in err, err
    assert "hprm/__init__.py" not in err, "hprm's own frames are left out of the traceback"


def test_writing_into_a_received_array_fails_both_receivers_in_pythons_words(daemons_built):
    r = launch("readonly")
    err = r.stderr
    assert r.returncode == 1, err
    assert_pythonic(err)
    for name in ("left", "right"):
        mine = [l.split("] ", 1)[1] for l in err.splitlines() if l.startswith(f"[{name}] ")]
        assert mine.count("Traceback (most recent call last):") == 1, "\n".join(mine)
        assert f"federate {name}, reaction {name}.{name}.scale raised:" in mine, mine
        assert "    frame *= 2" in mine, mine
        assert "ValueError: output array is read-only" in mine, mine
        assert any("shared read-only memory" in l and "array.copy()" in l for l in mine), mine
    # The end names every failed federate with its error, one a line.
    tail = err.splitlines()[-3:]
    assert tail[0] == "error: program raising failed; federates that failed:", err
    # (A federate failing just as the launcher stops the others may meet
    # its SIGTERM on the way out: the status varies, the reason does not.)
    assert sorted(re.sub(r" \((exit status: 1|signal: 15 \(SIGTERM\))\):", ":", l) for l in tail[1:]) == [
        "  - left: reaction left.left.scale failed: ValueError: output array is read-only",
        "  - right: reaction right.right.scale failed: ValueError: output array is read-only",
    ], err


def test_setting_an_undeclared_output_fails_its_own_federate_naming_the_port(daemons_built):
    r = launch("undeclared")
    err = r.stderr
    assert r.returncode == 1, err
    assert_pythonic(err)
    why = ('ValueError: reaction source.source.send sets output "other", which it does not declare as an effect; '
           "add it to the reaction's effects: @hprm.reaction(..., effects=[..., \"other\"])")
    assert f"[source] {why}" in err, err
    assert err.splitlines()[-2:] == [
        "error: program raising failed; federates that failed:",
        f"  - source (exit status: 1): reaction source.source.send failed: {why}",
    ], err
