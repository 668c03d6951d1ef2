"""Durable writes: temp file in the same directory, flush, fsync, os.replace.

A reader of a file written here sees the old content or the new content,
never a mix. Temporary names start with a dot and end with ``.tmp`` so
every reader in hopper skips them.

Writes never go through a symlink a job planted: the temporary file is
created with ``O_EXCL`` (which refuses any existing name, links included),
``os.replace`` replaces a link at the target rather than writing through it,
and an append opens with ``O_NOFOLLOW``. A run directory's files are written
relative to a descriptor of the directory opened with ``O_NOFOLLOW``
(``follow_parent=False``), so a run directory swapped for a link to
elsewhere is refused (ELOOP) rather than written into.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from hopper.proc.writeall import write_all

# What open(2) says when something that is not a regular file sits at a name
# we append to: a symlink (O_NOFOLLOW), a FIFO with no reader (O_NONBLOCK), a
# directory.
_NOT_A_FILE = frozenset({errno.ELOOP, errno.ENXIO, errno.EISDIR})


def temp_name(path: Path) -> Path:
    return path.with_name(temp_name_of(path.name))


def temp_name_of(name: str) -> str:
    """A fresh hidden name beside ``name`` to write it under before the rename."""
    return f".{name}.{os.urandom(4).hex()}.tmp"


def open_dir(path: Path, *, follow: bool) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    return os.open(path, flags)


def write_atomic(
    path: Path,
    data: bytes,
    *,
    durable: bool = True,
    follow_parent: bool = True,
    mode: int = 0o644,
) -> None:
    """Replace ``path`` with ``data`` atomically.

    ``durable`` fsyncs the file before the rename (and the directory after),
    so the new content survives a power cut; without it the replace is still
    atomic for readers. On error the temporary file is removed and the old
    content stays; the OSError (ENOSPC, EACCES …) propagates. A directory
    planted at ``path`` is moved aside (see :func:`displace`).
    ``follow_parent=False``: ``path``'s directory must not be a symlink (ELOOP).
    ``mode`` is the new file's (0o600 for one holding secrets): it is created
    with it, never readable by others for an instant (the umask can only narrow it).
    """
    dir_fd = open_dir(path.parent, follow=follow_parent)
    try:
        tmp = temp_name(path).name
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        try:
            try:
                write_all(fd, data)
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except IsADirectoryError:
                displace(path.name, dir_fd)
                os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise
        if durable:
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_files(folder: Path, files: Mapping[str, str]) -> None:
    """Each of ``files`` (name -> text) written into ``folder``, atomic, not fsynced:
    an agent's files (a bash job's script.sh) where no supervisor writes them."""
    for name, text in files.items():
        write_atomic(folder / name, text.encode(), durable=False)


def displace(name: str, dir_fd: int) -> str:
    """Rename whatever sits at ``name`` to a hidden name beside it; that name.

    For things a job planted where hopper keeps a file of its own (a
    symlink, a FIFO, a directory): moved, never followed, never deleted.
    """
    aside = f".{name}.displaced.{os.urandom(4).hex()}"
    os.rename(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    return aside


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
    Never through a link: the directory is opened ``O_NOFOLLOW`` and so is
    the file; a symlink, FIFO or directory at ``path`` is moved aside and a
    fresh file started.
    """
    append_line_in(path.parent, path.name, line)


def append_line_in(folder: Path, name: str, line: bytes) -> None:
    """:func:`append_line` to ``folder``/``name`` (no Path made for the file)."""
    if not line.endswith(b"\n"):
        line += b"\n"
    dir_fd = open_dir(folder, follow=False)
    try:
        fd = open_regular(name, dir_fd, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def open_regular(name: str, dir_fd: int, flags: int) -> int:
    """Open ``name`` under ``dir_fd`` as a regular file, never through a link.

    Anything else at the name is moved aside (:func:`displace`) and, with
    ``O_CREAT`` in ``flags``, a fresh file is made; O_NONBLOCK keeps a FIFO
    from blocking the open.
    """
    base = flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(3):
        try:
            fd = os.open(name, base, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in _NOT_A_FILE:
                raise
        else:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.set_blocking(fd, True)
                return fd
            os.close(fd)
        displace(name, dir_fd)
    raise OSError(errno.EEXIST, "cannot be opened as a regular file", name)
