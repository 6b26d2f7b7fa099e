"""What launching a program needs from its environment: logging, the
daemons' directory, and how a launch or a launched federate fails."""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
from collections.abc import Iterator
from typing import NoReturn

from . import _native


class LaunchFailed(SystemExit):
    """``Program.launch()`` did not end cleanly. ``code`` is the launcher's
    exit code (``hprm_node::launch::exit_code``): 1 a federate failed, 2 the
    program never ran (not valid, or a daemon could not be started), 3 a
    daemon died during the run; ``summary`` says what went wrong (the
    launcher has printed it as ``error: ...`` on stderr).

    A SystemExit: uncaught, it ends the script quietly with that code;
    ``except hprm.LaunchFailed`` handles it."""

    code: int

    def __init__(self, code: int, summary: str) -> None:
        super().__init__(code)
        self.summary = summary

    def __str__(self) -> str:
        return self.summary


_logging = False


def _init_logging() -> None:
    """The runtime's logs go to stderr (RUST_LOG filters them), from the
    first run or launch of a program on."""
    global _logging
    if not _logging:
        _native.init_logging()
        _logging = True


def _daemon_dir() -> str | None:
    """This environment's scripts directory when hprm-store lies there (the
    wheel installs the daemons as scripts), else None."""
    for d in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        if d and os.path.exists(os.path.join(d, "hprm-store")):
            return d
    return None


@contextlib.contextmanager
def _daemons_found() -> Iterator[None]:
    """For the launch inside: the launcher looks for hprm-store and hprm-rti
    in $HPRM_BIN_DIR, so point it at this environment's daemons unless it
    is set; it is restored afterwards."""
    d = None if os.environ.get("HPRM_BIN_DIR") else _daemon_dir()
    if d is None:
        yield
        return
    os.environ["HPRM_BIN_DIR"] = d
    try:
        yield
    finally:
        os.environ.pop("HPRM_BIN_DIR", None)


def _fail_federate(name: str, e: BaseException) -> NoReturn:
    """Exits a launched federate that failed, with its error line. The
    launcher, seeing another federate fail, may send SIGTERM meanwhile: this
    one is on its way out with its own status, which the stop must not
    replace (the launcher names it by that status and this line)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"error: federate {name}: {e}", file=sys.stderr)
    sys.exit(1)
