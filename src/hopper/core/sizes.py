"""Parse human sizes ("512M", "6G", "1.5G", 1048576) into bytes, and print them. Pure.

Units are binary, as in systemd's ``MemoryMax=``: K = 1024, M = 1024², G = 1024³,
T = 1024⁴; an optional ``B`` or ``iB`` is accepted (``512MB``, ``512MiB``) and
case does not matter. A plain number is bytes. ``"none"`` (or ``"off"``,
``"unlimited"``) means no limit, for the keys that take one.
"""

from __future__ import annotations

import math
import re

MAX_SIZE = 1 << 60  # 1 EiB: past it a size is a typo (and overflows rlimits and C ints)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([kmgt]?)(?:i?b)?")
NO_LIMIT = frozenset({"none", "off", "unlimited"})


class BadSize(ValueError):
    """A size that is not a number with an optional K, M, G or T suffix."""


def parse_size(value: str | int | float) -> int:
    """Bytes in ``value``; plain numbers are bytes. Raises :class:`BadSize`."""
    if isinstance(value, bool):
        raise BadSize(f"{value!r} is not a size")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise BadSize(f"{value!r} is not a finite size (examples: 512M, 6G, 1.5G)")
        if value < 0:
            raise BadSize(f"{value!r} is negative")
        return _capped(int(value), value)
    text = value.strip().replace(" ", "").lower()
    match = _SIZE.fullmatch(text)
    if not match:
        raise BadSize(f"{value!r} is not a size (examples: 512M, 6G, 1.5G)")
    return _capped(float(match.group(1)) * _UNITS[match.group(2)], value)


def _capped(size: int | float, value: object) -> int:
    if size > MAX_SIZE:  # also a float that overflowed to inf ("9" * 400)
        raise BadSize(f"{value!r} is more than 1 EiB, larger than any machine")
    return int(size)


def parse_limit(value: str | int | float | None) -> int | None:
    """A size limit: bytes, or None for no limit (``None``, ``"none"``, ``"off"``)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in NO_LIMIT):
        return None
    size = parse_size(value)
    if size == 0:
        raise BadSize('a limit of 0 bytes stops every job (write "none" for no limit)')
    return size


def format_size(n: int | float) -> str:
    """A short human form: 512B, 1.5K, 300M, 6.0G (binary units)."""
    size = float(n)
    for unit in ("B", "K", "M", "G"):
        if abs(size) < 1024:
            return f"{int(size)}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}T"
