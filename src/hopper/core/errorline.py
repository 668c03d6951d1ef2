"""The line of a failed job's log that says what went wrong, for a one-line listing. Pure.

Given the end of job.log (text), the first line that looks like an error
(``error``, ``fatal``, ``Traceback``, ``exception``, ``panic``, ``No such file``,
``not found``, ``denied``, ``cannot`` …, any letter case); else the last line
that is not blank. Terminal escapes (colours, cursor moves) and other control
characters are taken out; the line is cut to :data:`WIDTH` characters.
"""

from __future__ import annotations

import re

WIDTH = 200
_ERROR = re.compile(
    r"error|fatal|traceback|exception|panic|failed|failure|denied|not found|no such|"
    r"cannot|can't|could not|refused|killed|segmentation fault|abort",
    re.IGNORECASE,
)
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def error_line(text: str) -> str | None:
    """What to show beside a failed job: see the module doc. None for an empty log."""
    lines = [_clean(line) for line in text.split("\n")]
    lines = [line for line in lines if line]
    if not lines:
        return None
    found = next((line for line in lines if _ERROR.search(line)), lines[-1])
    return found if len(found) <= WIDTH else found[: WIDTH - 1] + "…"


def _clean(line: str) -> str:
    line = line.rsplit("\r", 1)[-1] if "\r" in line.rstrip("\r") else line  # a redrawn line
    return _CONTROL.sub("", _ESCAPE.sub("", line)).strip()
