"""Durations and tags: logical time as HPRM counts it (ns)."""

from __future__ import annotations

import datetime
import re
from typing import NamedTuple, TypeAlias

Duration: TypeAlias = str | int | float | datetime.timedelta
"""A duration: "50ms", "2 s", "100us" (units ns, us, µs, ms, s, sec, min), a
number of seconds, or a ``datetime.timedelta``."""

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "sec": 1_000_000_000, "min": 60_000_000_000}
_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d*)?)\s*(ns|us|µs|ms|s|sec|min)\s*$")


def duration_ns(d: Duration | None) -> int:
    """A duration in nanoseconds from "50ms", "2 s", a timedelta, or a
    number of seconds."""
    if d is None:
        return 0
    if isinstance(d, datetime.timedelta):
        return int(d.total_seconds() * 1e9)
    if isinstance(d, (int, float)):
        return int(d * 1e9)
    m = _DURATION.match(str(d))
    if not m:
        raise ValueError(f"cannot read {d!r} as a duration; write e.g. '50ms', '2s', '100us'")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


class Tag(NamedTuple):
    """A point of logical time: ns since the epoch, and a microstep."""

    time: int
    microstep: int
