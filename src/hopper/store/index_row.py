"""One run directory as a row of the status index: its job.json read, summarized, judged final.

A job.json in the shape hopper writes is read with the standard library
(``core/jobview.py``); anything else is validated with the model, exactly as
before, and a record the model refuses is reported, not indexed. A cold
build (``bulk``: thousands of files) validates every file with the model: its
parser and checks in C cost about what ``json.loads`` alone does, and the row
is taken from the record's attributes, with nothing else built. A final row
keeps no text: :func:`final_text` reads it when ``--json`` asks.

*Final* means nothing will write this job.json again, so the index may keep
the row without looking at the file: the job is terminal and finalized
(``store/finalize.py`` writes the terminal record, then moves prompt.md to
the ``processed_path`` it names, and never writes job.json after the move).
So: terminal, no prompt.md in the run directory, and something at
``processed_path``. The order of the checks makes the text read the last
one: prompt.md is found gone *before* job.json is read, so the move, and
every write of job.json before it, came first. (A row already read is
judged the other way round: prompt.md gone, then a ``stat`` showing job.json
is still the file that was read; see :func:`finalized`.) A job whose prompt
went missing (``processed_path`` null) is never final: it is stat'ed on each
refresh.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hopper.core.states import TERMINAL_STATES, JobState
from hopper.core.summary import group_of
from hopper.store.jobfile import JOB_FILE, PROMPT_FILE
from hopper.store.jobread import parse_view, read_job_file
from hopper.store.saferead import UnreadableFile

if TYPE_CHECKING:
    from pydantic import ValidationError

    from hopper.core.record import JobRecord

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
    result: RefreshResult,
    *,
    bulk: bool = False,
) -> tuple[Any, ...] | None:
    """The index row of ``runs/name`` (None: no usable job.json; a problem goes to
    ``result.corrupt``). Its stat is taken from the open file, so it matches the text.

    ``bulk``: many files to read (a cold build): the model validates them, which
    costs ~0.3 s to load and then less per file than the standard-library check
    (both give the same row: tests/test_index_trust.py)."""
    run_dir = f"{runs}/{name}"
    path = f"{run_dir}/{JOB_FILE}"
    unfiled = _lexists(f"{run_dir}/{PROMPT_FILE}")  # before the read: see the module doc
    try:
        data, st = read_job_file(path)  # no link, FIFO, device, huge file: saferead's rules
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        result.corrupt.append(exc.render().replace("\n", ";"))
        return None
    fields = _record_fields(data, path, result) if bulk else _view_fields(data, path, result)
    if fields is None:
        return None
    if fields[0] != name:
        result.corrupt.append(f"{path}: records id {fields[0]!r}, not its directory's name")
    processed = fields[1]
    final = (
        not unfiled
        and fields[4] in _TERMINAL
        and bool(processed)
        and _lexists(os.path.join(root, processed))
    )
    return (
        name,
        dir_ino,
        st.st_ino,
        st.st_mtime_ns,
        st.st_size,
        int(final),
        *fields[1:],
        None if final else data.decode("utf-8", "replace"),  # a final one's: final_text
        fields[2].casefold(),  # name_key: hopper status NAME looks it up
    )


_TERMINAL = frozenset(s.value for s in TERMINAL_STATES)
# A row's fields after the file's stat and finality, in the index's column order, led
# by the record's own id: (id, processed_path, name, agent, state, reason, group,
# attempt, created_at, started_at, finished_at, heartbeat_at, duration_seconds,
# has_usage, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd)
Fields = tuple[Any, ...]


def _view_fields(data: bytes, path: str, result: RefreshResult) -> Fields | None:
    """The standard library's road (the model's if the file is not in hopper's shape)."""
    view = parse_view(data)
    if view is None:
        return _record_fields(data, path, result)
    s = view.summary
    u = s.usage
    return (
        s.id,
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
    )


def _record_fields(data: bytes, path: str, result: RefreshResult) -> Fields | None:
    """The model's road: what ``summarize`` would take from the record, nothing built
    on the way (no summary, no view)."""
    r = _validated(data, path, result)
    if r is None:
        return None
    u = r.usage
    started, finished, beat = r.started_at, r.finished_at, r.heartbeat_at
    return (
        r.id,
        r.processed_path,
        r.name,
        r.agent,
        r.state.value,
        r.reason.value if r.reason else None,
        r.group if r.group is not None else _group(r.inbox_path),
        r.attempt,
        r.created_at.timestamp(),
        None if started is None else started.timestamp(),
        None if finished is None else finished.timestamp(),
        None if beat is None else beat.timestamp(),
        r.duration_seconds,
        u is not None,
        u.input_tokens if u else None,
        u.output_tokens if u else None,
        u.cache_read_tokens if u else None,
        u.cache_write_tokens if u else None,
        u.cost_usd if u else None,
    )


def final_text(runs: str, name: str, stamp: tuple[int, ...]) -> str | None:
    """job.json's text for a final row (the index keeps none: nothing rewrites it), read
    now with saferead's rules. If it is no longer the file the row was read from (edited
    by hand), only a record that still passes the row's checks; None if gone or unusable."""
    path = f"{runs}/{name}/{JOB_FILE}"
    try:
        data, st = read_job_file(path)
    except (FileNotFoundError, UnreadableFile):
        return None
    if identity(st) != stamp and _view_fields(data, path, RefreshResult()) is None:
        return None
    return data.decode("utf-8", "replace")


def _lexists(path: str) -> bool:
    """``os.path.lexists`` without its wrapper (a stat that is not a link's target)."""
    try:
        os.lstat(path)
    except (OSError, ValueError):
        return False
    return True


_GROUPS: dict[tuple[str, bool], str] = {}


def _group(inbox_path: str) -> str:
    """:func:`~hopper.core.summary.group_of`, remembered per folder: a relative path's
    group depends only on its folder and on whether a last piece follows it."""
    if inbox_path.startswith("/"):
        return group_of(inbox_path)
    folder, _, last = inbox_path.rpartition("/")
    key = (folder, last not in ("", "."))
    group = _GROUPS.get(key)
    if group is None:
        if len(_GROUPS) >= 4096:  # hostile records, a folder each: stay small
            _GROUPS.clear()
        group = _GROUPS[key] = group_of(inbox_path)
    return group


def _validated(data: bytes, path: str, result: RefreshResult) -> JobRecord | None:
    """The record as the model reads it, or None (reported) if the model refuses it."""
    validate, refused = _model()
    try:
        return validate(data)
    except refused as exc:
        result.corrupt.append(f"{path}: not a valid job record: {exc.errors()[0]['msg']}")
        return None


def prepare() -> None:
    """Load the model now (a bulk read's workers then share it)."""
    _model()


@cache
def _model() -> tuple[Callable[[bytes], JobRecord], type[ValidationError]]:
    """``JobRecord.model_validate_json`` without its wrapper, and the error it raises;
    pydantic loads on first use (the read path's warm refreshes never get here)."""
    from pydantic import ValidationError

    from hopper.core.record import JobRecord

    validate: Callable[[bytes], JobRecord] = JobRecord.__pydantic_validator__.validate_json
    return validate, ValidationError


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
