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
from pathlib import Path

from hopper.core.jobview import JobView, view_of, view_of_record
from hopper.errors import JobFileCorrupt
from hopper.store.jobfile import _RECORD_HINT, JOB_FILE, read_record
from hopper.store.saferead import RECORD_LIMIT, UnreadableFile, read_bytes, read_fast

# A \\uD800-\\uDFFF escape: json.loads takes a lone one, pydantic refuses it.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def read_job_file(path: str) -> tuple[bytes, os.stat_result]:
    """job.json's bytes and its ``fstat`` (:func:`hopper.store.saferead.read_fast`
    within :data:`RECORD_LIMIT`): the status index's cold build reads 100,000."""
    return read_fast(path, RECORD_LIMIT)


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
