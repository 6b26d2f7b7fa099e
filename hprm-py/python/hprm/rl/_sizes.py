"""Byte sizes as users write them: 1048576, "64m", "2g"."""

from __future__ import annotations

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "m": 2**20, "mb": 2**20, "g": 2**30, "gb": 2**30}


def byte_size(size: int | str, what: str) -> int:
    """``size`` in bytes; a bad one raises naming ``what`` and the forms accepted."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    if isinstance(size, str):
        s = size.strip().lower()
        digits = s.rstrip("kmgb")
        unit = s[len(digits) :]
        if digits.isdigit() and unit in _UNITS and int(digits) > 0:
            return int(digits) * _UNITS[unit]
    raise ValueError(f"{what}: {size!r} is not a size; give a positive number of bytes or a string such as '64m', '512k' or '2g'")
