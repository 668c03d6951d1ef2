"""Reading a run directory's files for the dashboard: never a link, never a FIFO.

A job runs as the same user and can replace its own job.log (or plant
``result.md``) with a symbolic link to any file that user can read, or with a
FIFO. So the dashboard opens each file with ``O_NOFOLLOW | O_NONBLOCK``,
checks ``fstat`` says "regular file", and reads at most a cap.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotPlainFile(OSError):
    """The path is a link, FIFO, device or directory: hopper does not read it."""


def open_regular(path: Path) -> int:
    """A read-only fd of the regular file ``path``; FileNotFoundError, NotPlainFile, OSError."""
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symbolic link
            raise NotPlainFile(f"{path} is a symbolic link; hopper does not follow it") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotPlainFile(f"{path} is not a regular file; hopper does not read it")
    return fd


def read_capped(path: Path, limit: int, *, tail: bool = False) -> tuple[bytes, int]:
    """Up to ``limit`` bytes of ``path`` (its start, or with ``tail`` its end) and its size."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit) if tail else 0
        chunks: list[bytes] = []
        want = min(limit, size - start)
        while want > 0:
            chunk = os.pread(fd, min(want, 1 << 20), start)
            if not chunk:
                break
            chunks.append(chunk)
            start += len(chunk)
            want -= len(chunk)
        return b"".join(chunks), size
    finally:
        os.close(fd)
