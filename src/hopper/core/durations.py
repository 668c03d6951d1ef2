"""Parse human durations ("45m", "1h30m", "90s", 300) into seconds."""

from __future__ import annotations

import math
import re

MAX_SECONDS = 3660 * 86400.0  # ten years: past it a duration is a typo (and overflows waits)
_NOT_FINITE = frozenset({"nan", "inf", "infinity"})
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


class BadDuration(ValueError):
    """A duration string that is not a number followed by ms, s, m, h or d."""


def parse_duration(value: str | int | float) -> float:
    """Seconds in ``value``; plain numbers are seconds. Raises :class:`BadDuration`.

    Zero is allowed here (some keys mean "at once" by it); NaN, infinities,
    negatives and anything past :data:`MAX_SECONDS` (ten years) are not.
    """
    if isinstance(value, bool):
        raise BadDuration(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        return _checked(float(value), value)
    text = value.strip().replace(" ", "")
    if not text:
        raise BadDuration("empty duration")
    if text.lower().lstrip("+-") in _NOT_FINITE:
        raise BadDuration(f"{value!r} is not a finite duration (examples: 90s, 45m, 1h30m)")
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return _checked(seconds, value)
    pos = 0
    total = 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise BadDuration(f"{value!r} is not a duration (examples: 90s, 45m, 1h30m)")
    return _checked(total, value)


def parse_positive_duration(value: str | int | float) -> float:
    """Like :func:`parse_duration`, but zero is refused too (a limit of 0 s fires at once)."""
    seconds = parse_duration(value)
    if seconds <= 0:
        raise BadDuration(f"{value!r} is not more than 0 (leave the key out for no limit)")
    return seconds


def _checked(seconds: float, value: object) -> float:
    if math.isnan(seconds) or math.isinf(seconds):
        raise BadDuration(f"{value!r} is not a finite duration (examples: 90s, 45m, 1h30m)")
    if seconds < 0:
        raise BadDuration(f"{value!r} is negative")
    if seconds > MAX_SECONDS:
        raise BadDuration(f"{value!r} is longer than ten years")
    return seconds


def format_duration(seconds: float) -> str:
    """A short human form: 0.4s, 12s, 3m05s, 2h07m."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
