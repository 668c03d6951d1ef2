"""core/terminal.py: the one escape for text printed on a terminal."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from hopper.core.terminal import terminal_safe


def test_each_kind_of_control_is_written_as_python_would() -> None:
    assert terminal_safe("a\x1b]0;t\x07b") == "a\\x1b]0;t\\x07b"
    assert terminal_safe("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert terminal_safe("\x00\x7f\x9b") == "\\x00\\x7f\\x9b"
    assert terminal_safe("bidi\u202etxt\u2066\u2028") == "bidi\\u202etxt\\u2066\\u2028"
    assert terminal_safe("caf\udce9") == "caf\\xe9"  # a non-UTF-8 byte, as records show it
    assert terminal_safe("\ud800") == "\\ud800"


def test_lines_keeps_newlines_only() -> None:
    assert terminal_safe("error\n  hint: \x1b[8m", lines=True) == "error\n  hint: \\x1b[8m"


def test_plain_text_is_unchanged() -> None:
    for text in ("", "nightly-build 2", "café ✓ 日本", "back\\slash \\x1b"):
        assert terminal_safe(text) == text


@given(st.text())
def test_nothing_a_terminal_acts_on_survives_and_escaping_twice_changes_nothing(
    text: str,
) -> None:
    out = terminal_safe(text)
    assert all(unicodedata.category(c) not in ("Cc", "Cs", "Zl", "Zp") for c in out)
    assert not set(out) & {"\u200e", "\u200f", "\u061c", *map(chr, range(0x202A, 0x202F))}
    assert terminal_safe(out) == out
    out.encode("utf-8")  # raises on a lone surrogate: none reaches a terminal
