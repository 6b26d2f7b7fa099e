"""How a reaction's exception is told: in Python's words.

The runtime (``hprm._native``) calls :func:`describe` when a reaction
raises, prints the traceback once, and fails the federate with the one
line.
"""

from __future__ import annotations

import os
import traceback

_PACKAGE = os.path.dirname(os.path.abspath(__file__))

READ_ONLY_NOTE = (
    "hprm: this array is shared read-only memory: a value received from another federate, or an array this "
    "federate already sent, is a view of the store's shared memory that every receiver reads; "
    "write into a private copy instead (copy = array.copy())"
)


def describe(exc: BaseException) -> tuple[str, str]:
    """``(traceback, line)``: the exception's traceback as Python prints it,
    without hprm's own frames, and its last line (``ValueError: ...``),
    which the federate fails with."""
    if isinstance(exc, ValueError) and "read-only" in str(exc) and READ_ONLY_NOTE not in getattr(exc, "__notes__", []):
        exc.add_note(READ_ONLY_NOTE)
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    # hprm's own frames (its wrapper around the reaction, the inside of
    # ctx.set) say nothing to the user: the user's line is where it failed.
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if os.path.dirname(os.path.abspath(f.filename)) != _PACKAGE])
    text = "".join(te.format())
    only = "".join(te.format_exception_only()).strip().splitlines()
    return text, only[0] if only else type(exc).__name__
