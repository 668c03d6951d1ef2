"""Reading job.json on the CLI's read path: the standard library first, the model if need be.

:func:`read_view` reads job.json through the safe reader (no links, no
FIFOs, a size cap: ``store/saferead.py``) and checks it with
:func:`hopper.core.jobview.view_of`. A record in the shape hopper writes
never loads pydantic; anything else (a hand edit, a field the check does
not know, a corrupt file) goes to :func:`hopper.store.jobfile.read_record`,
so it is accepted or refused exactly as before, with the same message.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from hopper.core.jobview import JobView, view_of, view_of_record
from hopper.errors import JobFileCorrupt
from hopper.store.jobfile import _RECORD_HINT, JOB_FILE, read_record
from hopper.store.saferead import READ_FLAGS, RECORD_LIMIT, UnreadableFile, read_bytes, read_stat

# A \\uD800-\\uDFFF escape: json.loads takes a lone one, pydantic refuses it.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


# O_NOCTTY: a terminal device swapped in after the lstat never becomes our terminal.
_FAST_FLAGS = READ_FLAGS | os.O_NOCTTY


def read_job_file(path: str) -> tuple[bytes, os.stat_result]:
    """job.json's bytes and its ``fstat``, with :func:`hopper.store.saferead.read_stat`'s
    guarantees and errors, in five system calls for the usual file: ``lstat`` (a FIFO,
    socket or device is never opened), ``open`` with ``O_NOFOLLOW | O_NONBLOCK``,
    ``fstat`` (a regular file, within :data:`RECORD_LIMIT`), one ``read`` of its size
    plus one byte, ``close``. Anything else (an error, a file that is not regular, too
    big, or not the size ``fstat`` gave) is read again by ``read_stat``, which says what
    is wrong in its own words. Raises ``FileNotFoundError`` or :class:`UnreadableFile`.

    The cold build of the status index reads 100,000 of these; the careful reader's
    ``Path`` objects, second ``fstat`` and read to EOF cost four times this."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return read_stat(Path(path), RECORD_LIMIT)  # refuses it, in its words
        fd = os.open(path, _FAST_FLAGS)
    except FileNotFoundError:
        raise
    except OSError:
        return read_stat(Path(path), RECORD_LIMIT)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size <= RECORD_LIMIT:
            data = os.read(fd, st.st_size + 1)
            if len(data) == st.st_size:  # a short read is the end: regular files read in full
                return data, st
    except OSError:
        pass
    finally:
        os.close(fd)
    return read_stat(Path(path), RECORD_LIMIT)  # swapped, grown, shrunk, failed: look again


def parse_view(data: bytes) -> JobView | None:
    """``data`` (job.json's bytes) as a view, or None: validate it with the model."""
    if _SURROGATE.search(data):
        return None
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_refuse)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError too
        return None
    return view_of(doc)


def _refuse(constant: str) -> object:
    raise ValueError(constant)  # NaN, Infinity: the model's road decides


def read_view(run_dir: Path) -> JobView:
    """The job's view; raises FileNotFoundError or :class:`JobFileCorrupt` as
    :func:`hopper.store.jobfile.read_record` does."""
    try:
        data = read_bytes(run_dir / JOB_FILE, RECORD_LIMIT, hint=_RECORD_HINT)
    except UnreadableFile as exc:  # a link, a FIFO, too big: as read_record words it
        raise JobFileCorrupt(exc.message, path=exc.path, hint=exc.hint) from None
    view = parse_view(data)
    return view if view is not None else view_of_record(read_record(run_dir))
