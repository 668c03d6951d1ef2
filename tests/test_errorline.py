"""The line of a failed job's log shown beside it in the dashboard's list."""

from __future__ import annotations

from hopper.core.errorline import WIDTH, error_line


def test_the_first_line_that_looks_like_an_error() -> None:
    text = "compiling\nwarning: unused\nmain.c:3: Error: expected ';'\nfatal: build failed\n"
    assert error_line(text) == "main.c:3: Error: expected ';'"


def test_else_the_last_line_that_is_not_blank() -> None:
    assert error_line("one\ntwo\n\n   \n") == "two"
    assert error_line("") is None
    assert error_line("\n \n") is None


def test_escapes_and_control_characters_are_taken_out() -> None:
    text = "\x1b[31mTraceback (most recent call last):\x1b[0m\x07\nx\n"
    assert error_line(text) == "Traceback (most recent call last):"
    assert error_line("50%\r80%\r\x1b[2Kdone: no such file\n") == "done: no such file"
    assert error_line("\x1b]0;title\x07panic: nil map\n") == "panic: nil map"


def test_a_long_line_is_cut() -> None:
    line = error_line("error " + "x" * 500)
    assert line is not None and len(line) == WIDTH and line.endswith("…")
