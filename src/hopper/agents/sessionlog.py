"""Reading an agent CLI's own JSONL session log as it grows. Standard library only.

An interactive agent writes its conversation to a log of its own (Claude Code:
``<config dir>/projects/<project>/<session id>.jsonl``), one JSON object a
line, appended as the conversation goes. The session host reads the new part
after each look: :func:`read_slice` returns the complete lines after
``offset``, parsed, and the offset to read from next time. The log belongs to
the CLI (and through it to whatever a job did in its HOME), so it is read as
hopper reads anything a job can touch: never through a link, never blocking,
at most ``cap`` bytes a look.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hopper.store.saferead import open_regular

# What one look reads at most; a longer tail is read by the next looks.
SLICE_CAP = 4 * 1024 * 1024


@dataclass(frozen=True)
class LogSlice:
    """The complete entries after an offset, and where the next look starts.

    ``entries`` are the lines that parsed as JSON objects, in order;
    ``skipped`` counts lines that did not (or were longer than the cap, which
    are passed over whole). ``path`` is the log read, None while there is none yet.
    """

    entries: list[dict[str, Any]] = field(default_factory=list)
    offset: int = 0
    path: Path | None = None
    skipped: int = 0


def read_slice(path: Path, offset: int, cap: int = SLICE_CAP) -> LogSlice:
    """The whole lines of ``path`` after ``offset`` (at most ``cap`` bytes of them).

    A missing file is an empty slice at the same offset. A line still being
    written (no newline yet) is left for the next look. A file shorter than
    ``offset`` (the CLI rewrote it) is read again from the start. Raises
    :class:`hopper.store.saferead.UnreadableFile` for a link, a FIFO, a directory.
    """
    try:
        fd = open_regular(path, hint="the agent CLI's session log should be a regular file")
    except FileNotFoundError:
        return LogSlice(offset=offset, path=None)
    try:
        size = os.fstat(fd).st_size
        if size < offset:
            offset = 0
        data = os.pread(fd, min(cap, size - offset), offset) if size > offset else b""
    finally:
        os.close(fd)
    end = data.rfind(b"\n")
    if end < 0:
        if len(data) >= cap:  # one line longer than the cap: passed over whole
            return _skip_long_line(path, offset + len(data), cap)
        return LogSlice(offset=offset, path=path)
    entries, skipped = parse_lines(data[: end + 1])
    return LogSlice(entries=entries, offset=offset + end + 1, path=path, skipped=skipped)


def parse_lines(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """JSON objects of the lines in ``data``; how many lines were not objects."""
    entries: list[dict[str, Any]] = []
    skipped = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            skipped += 1
            continue
        if isinstance(obj, dict):
            entries.append(obj)
        else:
            skipped += 1
    return entries, skipped


def _skip_long_line(path: Path, offset: int, cap: int) -> LogSlice:
    """Past the rest of an over-long line: to its newline, a cap's bytes at a time
    (a line still being written is passed over as far as it goes)."""
    fd = open_regular(path)
    try:
        while True:
            chunk = os.pread(fd, cap, offset)
            end = chunk.find(b"\n")
            if end >= 0:
                return LogSlice(offset=offset + end + 1, path=path, skipped=1)
            offset += len(chunk)
            if len(chunk) < cap:
                return LogSlice(offset=offset, path=path)
    finally:
        os.close(fd)
