"""One run directory as a row of the status index: its job.json read, summarized, judged final.

A job.json in the shape hopper writes is read with the standard library
(``core/jobview.py``); anything else is validated with the model, exactly as
before, and a record the model refuses is reported, not indexed.

*Final* means nothing will write this job.json again, so the index may keep
the row without looking at the file: the job is terminal and finalized
(``store/finalize.py`` writes the terminal record, then moves prompt.md to
the ``processed_path`` it names, and never writes job.json after the move).
So: terminal, no prompt.md in the run directory, and something at
``processed_path``; and job.json still the file that was read (a write
racing the check shows as a changed inode). A job whose prompt went missing
(``processed_path`` null) is never final: it is stat'ed on each refresh.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hopper.core.jobview import JobView, view_of_record
from hopper.core.states import TERMINAL_STATES, JobState
from hopper.store.jobfile import JOB_FILE, PROMPT_FILE
from hopper.store.jobread import parse_view
from hopper.store.saferead import RECORD_LIMIT, UnreadableFile, read_stat

Stat = Any  # (path: str) -> os.stat_result; tests pass a counting one


@dataclass
class RefreshResult:
    listed: int = 0  # run directories listed (0: runs/ unchanged, not listed)
    read: int = 0  # job.json files read and (re)indexed
    removed: int = 0
    stated: int = 0  # job.json files stat'ed (the jobs not yet final)
    corrupt: list[str] = field(default_factory=list)


def identity(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def read_row(
    root: Path,
    runs: str,
    name: str,
    dir_ino: int,
    stat: Stat,
    result: RefreshResult,
    *,
    bulk: bool = False,
) -> tuple[Any, ...] | None:
    """The index row of ``runs/name`` (None: no usable job.json; a problem goes to
    ``result.corrupt``). Its stat is taken from the open file, so it matches the text.

    ``bulk``: many files to read (a cold build): the model validates them, which
    costs ~0.3 s to load and then less per file than the standard-library check
    (both give the same view: tests/test_jobview.py)."""
    path = f"{runs}/{name}/{JOB_FILE}"
    try:
        data, st = read_stat(Path(path), RECORD_LIMIT)  # no link, FIFO, huge file: saferead
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        result.corrupt.append(exc.render().replace("\n", ";"))
        return None
    view = None if bulk else parse_view(data)
    if view is None:
        view = _validated(data, path, result)
        if view is None:
            return None
    if view.id != name:
        result.corrupt.append(f"{path}: records id {view.id!r}, not its directory's name")
    final = finalized(root, runs, name, view.state, view.processed_path) and _unchanged(
        f"{runs}/{name}/{JOB_FILE}", identity(st), stat
    )
    s = view.summary
    u = s.usage
    return (
        name,
        dir_ino,
        st.st_ino,
        st.st_mtime_ns,
        st.st_size,
        int(final),
        view.processed_path,
        s.name,
        s.agent,
        s.state.value,
        s.reason,
        s.group,
        s.attempt,
        s.created_at,
        s.started_at,
        s.finished_at,
        s.heartbeat_at,
        s.duration_seconds,
        u is not None,
        u.input_tokens if u else None,
        u.output_tokens if u else None,
        u.cache_read_tokens if u else None,
        u.cache_write_tokens if u else None,
        u.cost_usd if u else None,
        data.decode("utf-8", "replace"),
    )


def _validated(data: bytes, path: str, result: RefreshResult) -> JobView | None:
    """The model's road, for a job.json not in hopper's own shape."""
    from pydantic import ValidationError

    from hopper.core.record import JobRecord

    try:
        return view_of_record(JobRecord.model_validate_json(data))
    except ValidationError as exc:
        result.corrupt.append(f"{path}: not a valid job record: {exc.errors()[0]['msg']}")
        return None


def finalized(
    root: Path, runs: str, name: str, state: JobState, processed_path: str | None
) -> bool:
    """Terminal, prompt.md moved to ``processed_path``: nothing writes job.json again.
    (Check this before the stat that confirms job.json is still the one read.)"""
    if state not in TERMINAL_STATES or not processed_path:
        return False
    if os.path.lexists(f"{runs}/{name}/{PROMPT_FILE}"):
        return False  # not moved yet: finalize may still write job.json
    return os.path.lexists(os.path.join(root, processed_path))


def _unchanged(path: str, read: tuple[int, int, int], stat: Stat) -> bool:
    try:
        return identity(stat(path)) == read
    except OSError:
        return False
