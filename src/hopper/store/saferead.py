"""Reading a file hopper did not write this instant: no links, no blocking, no ballooning.

Everything under the root can be touched by a user or a running job: a prompt
in the inbox, a PRIORITY request, a job's agent.json, even exit.json and
job.json. So every such read goes through here:

* ``lstat`` first, so a FIFO, socket or device is refused without opening it
  (opening some devices has side effects);
* ``open(O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)``, optionally relative
  to a directory fd, so a symlink is never followed and a FIFO swapped in
  between the ``lstat`` and the ``open`` cannot block;
* ``fstat`` on the open descriptor must say "regular file" (what was checked
  is what is read);
* at most ``limit + 1`` bytes are read, in chunks: a 4 GiB sparse file costs
  one ``fstat``, never 4 GiB of memory;
* decoding, JSON and schema errors become :class:`UnreadableFile` too.

A missing file raises ``FileNotFoundError`` (callers treat "not there (yet)"
as a normal case); anything else wrong raises :class:`UnreadableFile`, whose
message says what is wrong and whose hint says what to do. Nothing else
escapes: no ``RecursionError`` from a deeply nested JSON document, no
``UnicodeDecodeError``, no hang.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hopper.errors import HopperError

if TYPE_CHECKING:  # pydantic loads with the first model read, not with this module
    from pydantic import BaseModel

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CHUNK = 1 << 20
# Small files hopper writes itself and reads back (claim.json, exit.json,
# resources.json, agent.json); job.json gets more room for long details.
SMALL_LIMIT = 1 << 20
RECORD_LIMIT = 4 << 20

M = TypeVar("M", bound="BaseModel")


class UnreadableFile(HopperError):
    """A file hopper reads is not a regular file, too big, or not what it should hold."""

    def __init__(self, message: str, *, path: Path, hint: str = "", problem: str) -> None:
        self.problem = problem  # not_regular | too_big | denied | io | decode | invalid
        super().__init__(message, path=path, hint=hint)


def file_kind(mode: int) -> str:
    """ "" for a regular file, else what it is ("a FIFO", "a symbolic link" …)."""
    if stat.S_ISREG(mode):
        return ""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


_NOT_REGULAR_HINT = (
    "hopper never follows links or reads special files; replace it with a plain file"
)


def read_bytes(
    path: Path, limit: int, *, dir_fd: int | None = None, hint: str = "", truncate: bool = False
) -> bytes:
    """The bytes of the regular file ``path``: at most ``limit`` of them (see :func:`read_stat`;
    by :func:`read_fast`'s five system calls where that applies)."""
    if dir_fd is None and not truncate:
        return read_fast(os.fspath(path), limit, hint=hint)[0]
    return read_stat(path, limit, dir_fd=dir_fd, hint=hint, truncate=truncate)[0]


def open_regular(path: Path, *, dir_fd: int | None = None, hint: str = "") -> int:
    """An fd (O_RDONLY, O_NONBLOCK) on the regular file ``path``, for callers that
    read it their own way (a tail, a follower); close it. Errors as :func:`read_stat`."""
    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        kind = file_kind(st.st_mode)
        if kind:
            raise UnreadableFile(
                f"is {kind}, not a regular file",
                path=path,
                hint=hint or _NOT_REGULAR_HINT,
                problem="not_regular",
            )
        fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _os_error(path, exc, hint) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnreadableFile(
                "changed into something other than a regular file while being read",
                path=path,
                hint=hint or _NOT_REGULAR_HINT,
                problem="not_regular",
            )
    except OSError as exc:
        os.close(fd)
        raise _os_error(path, exc, hint) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_stat(
    path: Path, limit: int, *, dir_fd: int | None = None, hint: str = "", truncate: bool = False
) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``path`` (at most ``limit``), and its ``fstat``.

    ``dir_fd``: ``path`` is then a name relative to that open directory.
    ``truncate``: a longer file yields its first ``limit`` bytes instead of an error.
    Raises ``FileNotFoundError`` if it does not exist, :class:`UnreadableFile`
    for anything else (a link, a FIFO, a directory, too big, permission denied,
    an I/O error). Never blocks, never allocates more than ``limit + 1`` bytes.
    """
    fd = open_regular(path, dir_fd=dir_fd, hint=hint)
    try:
        st = os.fstat(fd)
        if st.st_size > limit and not truncate:
            raise _too_big(path, f"is {st.st_size} bytes", limit, hint)
        chunks: list[bytes] = []
        remaining = limit if truncate else limit + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        raise _os_error(path, exc, hint) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise _too_big(path, "grew", limit, hint, grew=True)
    return data, st


# O_NOCTTY: a terminal device swapped in after the lstat never becomes our terminal.
_FAST_FLAGS = READ_FLAGS | os.O_NOCTTY


def read_fast(path: str, limit: int, *, hint: str = "") -> tuple[bytes, os.stat_result]:
    """:func:`read_stat`'s bytes and ``fstat`` of ``path``, with its guarantees and
    errors, in five system calls for the usual small file: ``lstat`` (a FIFO, socket
    or device is never opened), ``open`` with ``O_NOFOLLOW | O_NONBLOCK``, ``fstat``
    (a regular file, within ``limit``), one ``read`` of its size plus one byte,
    ``close``. Anything else (an error, a file that is not regular, too big, or not
    the size ``fstat`` gave) is read again by ``read_stat``, which says what is wrong
    in its own words. Raises ``FileNotFoundError`` or :class:`UnreadableFile`.

    For the files read by the thousand: job.json in the status index's cold build,
    each running job's resources.json at its heartbeat. ``read_stat``'s ``Path``
    objects, second ``fstat`` and read to EOF cost four times this."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return read_stat(Path(path), limit, hint=hint)  # refuses it, in its words
        fd = os.open(path, _FAST_FLAGS)
    except FileNotFoundError:
        raise
    except OSError:
        return read_stat(Path(path), limit, hint=hint)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size <= limit:
            data = os.read(fd, st.st_size + 1)
            if len(data) == st.st_size:  # a short read is the end: regular files read in full
                return data, st
    except OSError:
        pass
    finally:
        os.close(fd)
    return read_stat(Path(path), limit, hint=hint)  # swapped, grown, shrunk, failed: look again


def _too_big(path: Path, what: str, limit: int, hint: str, grew: bool = False) -> UnreadableFile:
    message = (
        f"grew past the limit of {limit} bytes while being read"
        if grew
        else f"{what}, over the limit of {limit} bytes"
    )
    return UnreadableFile(
        message,
        path=path,
        hint=hint or "hopper writes this file small; something else wrote it: remove it",
        problem="too_big",
    )


def _os_error(path: Path, exc: OSError, hint: str) -> UnreadableFile:
    if exc.errno == errno.ELOOP:
        return UnreadableFile(
            "is a symbolic link, not a regular file",
            path=path,
            hint=hint or _NOT_REGULAR_HINT,
            problem="not_regular",
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return UnreadableFile(
            "cannot be read: permission denied",
            path=path,
            hint="make it readable by the user hopper runs as",
            problem="denied",
        )
    return UnreadableFile(
        f"cannot be read: {exc.strerror or exc}",
        path=path,
        hint=hint or "check the file system (dmesg, df)",
        problem="io",
    )


def read_text(path: Path, limit: int, *, dir_fd: int | None = None, hint: str = "") -> str:
    """The file's UTF-8 text (see :func:`read_bytes`); bad UTF-8 is an :class:`UnreadableFile`."""
    data = read_bytes(path, limit, dir_fd=dir_fd, hint=hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(
            f"is not valid UTF-8 (byte {exc.start})",
            path=path,
            hint=hint or "it should be UTF-8 text",
            problem="decode",
        ) from None


def parse_json(data: bytes, path: Path, hint: str = "") -> object:
    """``data`` as JSON; malformed or absurdly nested input is an :class:`UnreadableFile`."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise UnreadableFile(
            f"is not valid JSON: {why}",
            path=path,
            hint=hint or "hopper writes this file atomically; was it edited?",
            problem="decode",
        ) from None


def read_json(path: Path, limit: int, *, dir_fd: int | None = None, hint: str = "") -> object:
    """The file's JSON value (see :func:`read_bytes` and :func:`parse_json`)."""
    return parse_json(read_bytes(path, limit, dir_fd=dir_fd, hint=hint), path, hint)


def parse_model(model: type[M], data: bytes, path: Path, hint: str = "") -> M:
    """``data`` validated as ``model``; the first error names the field."""
    from pydantic import ValidationError

    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        what = f"{where}: {err['msg']}" if where else str(err["msg"])
        raise UnreadableFile(
            f"not a valid {model.__name__}: {what}",
            path=path,
            hint=hint or "hopper writes this file atomically; was it edited?",
            problem="invalid",
        ) from None
    except RecursionError:
        raise UnreadableFile(
            f"not a valid {model.__name__}: nested too deeply",
            path=path,
            hint=hint or "hopper writes this file atomically; was it edited?",
            problem="invalid",
        ) from None


def read_model(
    model: type[M], path: Path, limit: int, *, dir_fd: int | None = None, hint: str = ""
) -> M:
    """The file validated as ``model`` (see :func:`read_bytes` and :func:`parse_model`)."""
    return parse_model(model, read_bytes(path, limit, dir_fd=dir_fd, hint=hint), path, hint)
