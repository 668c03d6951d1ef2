"""The last lines of a file, read backwards from its end.

:func:`tail_lines` seeks to the end and reads fixed-size blocks towards the
start until it holds ``n`` complete lines, so the bytes read (and the memory
held) grow with ``n`` and the line length, never with the file: the last ten
events of a 1 GB events.jsonl cost one or two 64 KiB reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from hopper.store.saferead import open_regular

BLOCK = 64 * 1024

# pread(fd, length, offset) -> bytes; tests pass a counting one.
Reader = Callable[[int, int, int], bytes]


def tail_lines(
    path: Path, n: int, *, reader: Reader = os.pread, block: int = BLOCK
) -> tuple[list[bytes], int]:
    """The last ``n`` complete lines of ``path`` (without newlines) and the end offset.

    The end offset is where a follower continues reading; a last line without
    its newline (being written, or cut by a crash) is not returned and the
    offset stops before it. A missing file gives ``([], 0)``; a link, FIFO or
    other non-regular file raises :class:`hopper.store.saferead.UnreadableFile`.
    """
    try:
        fd = open_regular(path)  # no link, no FIFO: a job can replace its job.log
    except FileNotFoundError:
        return [], 0
    try:
        size = os.fstat(fd).st_size
        pos = size
        chunks: list[bytes] = []
        newlines = 0
        end: int | None = None  # offset just past the last newline
        while pos > 0:
            step = min(block, pos)
            pos -= step
            chunk = reader(fd, step, pos)
            if end is None:
                last = chunk.rfind(b"\n")
                if last < 0:
                    continue  # all of it belongs to an unterminated last line
                end = pos + last + 1
                chunk = chunk[: last + 1]
                if n <= 0:
                    break
            chunks.append(chunk)
            newlines += chunk.count(b"\n")
            if n > 0 and newlines > n:
                break  # n full lines, plus the newline that ends the line before them
        if end is None or n <= 0:
            return [], end if end is not None else 0
        data = b"".join(reversed(chunks))
        lines = data.split(b"\n")[:-1]  # the text ends with a newline
        if pos > 0:
            lines = lines[1:]  # the first piece is a fragment of an earlier line
        return lines[-n:], end
    finally:
        os.close(fd)


def read_new_lines(path: Path, offset: int, *, limit: int = 1 << 20) -> tuple[list[bytes], int]:
    """Complete lines written to ``path`` past ``offset`` (up to ``limit`` bytes) and the new
    offset. A trailing partial line is left for the next call; a missing file reads as empty.
    """
    try:
        fd = open_regular(path)  # no link, no FIFO: a job can replace its job.log
    except FileNotFoundError:
        return [], offset
    try:
        data = os.pread(fd, limit, offset)
    finally:
        os.close(fd)
    cut = data.rfind(b"\n")
    if cut < 0:
        if len(data) >= limit:  # one line longer than limit: hand it over in pieces
            return [data], offset + len(data)
        return [], offset
    return data[:cut].split(b"\n"), offset + cut + 1
