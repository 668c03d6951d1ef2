"""Durable writes: temp file in the same directory, flush, fsync, os.replace.

A reader of a file written here sees the old content or the new content,
never a mix. Temporary names start with a dot and end with ``.tmp`` so
every reader in hopper skips them.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically.

    ``durable`` fsyncs the file before the rename (and the directory after),
    so the new content survives a power cut; without it the replace is still
    atomic for readers. On error the temporary file is removed and the old
    content stays; the OSError (ENOSPC, EACCES …) propagates.
    """
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_line(path: Path, line: bytes) -> None:
    """Append one line with a single write(2) on an O_APPEND descriptor.

    Concurrent appenders never interleave within a line of up to PIPE_BUF
    bytes on a local filesystem, and readers see whole lines or nothing new.
    """
    if not line.endswith(b"\n"):
        line += b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
