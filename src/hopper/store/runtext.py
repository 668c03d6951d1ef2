"""Bounded reads of a run's text files (job.log's end, result.md's start) for others to see.

A job can replace any file of its run directory with a link, a FIFO or a
sparse 4 GiB file; these reads open the name relative to the run directory
(itself opened without following a link) through :mod:`hopper.store.saferead`,
so a link is refused, nothing blocks, and at most ``limit`` bytes are read.
"""

from __future__ import annotations

import os
from pathlib import Path

from hopper.store.saferead import CHUNK, open_regular, read_bytes


def _run_dir_fd(run_dir: Path) -> int:
    return os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def read_end(run_dir: Path, name: str, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes (at most) of ``run_dir/name`` and the file's size.

    Raises ``FileNotFoundError`` or :class:`~hopper.store.saferead.UnreadableFile`
    (a link, a FIFO, a directory …); ``OSError`` if the run directory cannot be opened."""
    dir_fd = _run_dir_fd(run_dir)
    try:
        fd = open_regular(Path(name), dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    try:
        size = os.fstat(fd).st_size
        pos = max(0, size - limit)
        chunks: list[bytes] = []
        while pos < size:
            chunk = os.pread(fd, min(size - pos, CHUNK), pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        return b"".join(chunks), size
    finally:
        os.close(fd)


def read_start(run_dir: Path, name: str, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes (at most) of ``run_dir/name``, and whether it holds more.

    Errors as :func:`read_end`."""
    dir_fd = _run_dir_fd(run_dir)
    try:
        data = read_bytes(Path(name), limit + 1, dir_fd=dir_fd, truncate=True)
    finally:
        os.close(dir_fd)
    return data[:limit], len(data) > limit
