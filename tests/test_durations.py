"""core/durations.py: human durations in, seconds out; and back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopper.core.durations import BadDuration, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("45m", 2700.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("2d", 172800.0),
        ("250ms", 0.25),
        ("0.5s", 0.5),
        ("1.5h", 5400.0),
        ("300", 300.0),
        (" 12 ", 12.0),
        ("0", 0.0),
        ("1m1m", 120.0),
        (300, 300.0),
        (0.25, 0.25),
    ],
)
def test_parse(text: str | int | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "soon",
        "5 parsecs",
        "m",
        "1x",
        "-5s",
        "-1",
        "h1",
        "1h-",
        "1.s",
        "s5",
        True,
        False,
        -1,
        -0.5,
    ],
    ids=repr,
)
def test_bad(value: str | int | float) -> None:
    with pytest.raises(BadDuration):
        parse_duration(value)


def test_bad_duration_is_a_value_error_with_examples() -> None:
    with pytest.raises(ValueError, match="examples"):
        parse_duration("soon")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4, "0.4s"), (9.95, "9.9s"), (12, "12s"), (59.9, "59s"), (185, "3m05s"), (7620, "2h07m")],
)
def test_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=10**7))
def test_integer_seconds_round_trip_through_units(n: int) -> None:
    h, rest = divmod(n, 3600)
    m, s = divmod(rest, 60)
    assert parse_duration(f"{h}h{m}m{s}s") == n
    assert parse_duration(n) == n
