"""Reading a run directory's files by descriptor: never a link, never a FIFO.

Whole small files (job.json, result.md) are read with ``store/saferead.py``.
What the dashboard reads by offset — the end of a big job.log or
events.jsonl, a log it follows — needs the descriptor itself, so
:func:`open_regular` opens it the same way (``lstat`` first, then
``O_NOFOLLOW | O_NONBLOCK``, ``fstat`` must say "regular file") and raises the
same :class:`~hopper.store.saferead.UnreadableFile`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from hopper.store.saferead import READ_FLAGS, UnreadableFile, file_kind

_HINT = "hopper never follows links or reads special files in a run directory"


def open_regular(path: Path) -> int:
    """A read-only fd of the regular file ``path``: FileNotFoundError or UnreadableFile."""
    try:
        kind = file_kind(os.lstat(path).st_mode)
        if kind:
            raise UnreadableFile(
                f"is {kind}, not a regular file", path=path, hint=_HINT, problem="not_regular"
            )
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        link = exc.errno == errno.ELOOP
        raise UnreadableFile(
            "is a symbolic link, not a regular file"
            if link
            else f"cannot be read: {exc.strerror or exc}",
            path=path,
            hint=_HINT,
            problem="not_regular" if link else "io",
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnreadableFile(
            "changed into something other than a regular file",
            path=path,
            hint=_HINT,
            problem="not_regular",
        )
    return fd


def read_tail(path: Path, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes (at most) of ``path``, and its size."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        chunks: list[bytes] = []
        while start < size:
            chunk = os.pread(fd, min(size - start, 1 << 20), start)
            if not chunk:
                break
            chunks.append(chunk)
            start += len(chunk)
        return b"".join(chunks), size
    finally:
        os.close(fd)
