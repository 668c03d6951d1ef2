"""job.json, exit.json and events.jsonl: reading them, and the low-level writers.

:func:`write_record` and :func:`append_event` are for store/ledger.py, the one
writer of job state (tests/test_one_writer.py), and for tests that set up files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hopper.errors import JobFileCorrupt
from hopper.store.atomic import append_line_in, open_regular, write_atomic
from hopper.store.saferead import (
    RECORD_LIMIT,
    SMALL_LIMIT,
    UnreadableFile,
    parse_model,
    read_fast,
    read_model,
)
from hopper.store.saferead import open_regular as open_fd

if TYPE_CHECKING:  # the models load on first read: `hopper status` never needs them
    from hopper.core.record import ExitStatus, JobRecord, Resources

JOB_FILE = "job.json"
EXIT_FILE = "exit.json"
EVENTS_FILE = "events.jsonl"
LOG_FILE = "job.log"
PROMPT_FILE = "prompt.md"
CLAIM_FILE = "claim.json"
ABORT_FILE = "ABORT"
RESOURCES_FILE = "resources.json"  # live figures from the supervisor


def read_record(run_dir: Path) -> JobRecord:
    """The job record; raises FileNotFoundError or :class:`JobFileCorrupt`.

    Read safely (store/saferead.py): a FIFO, a link, a huge or unreadable
    job.json is a :class:`JobFileCorrupt`, never a hang or another exception.
    """
    from hopper.core.record import JobRecord

    path = run_dir / JOB_FILE
    try:
        return read_model(JobRecord, path, RECORD_LIMIT, hint=_RECORD_HINT)
    except UnreadableFile as exc:
        raise _corrupt(exc, "not a valid job record") from None


_RECORD_HINT = "hopper writes this file atomically; was it edited by hand?"


def _corrupt(exc: UnreadableFile, what: str) -> JobFileCorrupt:
    message = exc.message
    if (
        exc.problem == "invalid"
    ):  # "not a valid JobRecord: field: msg" -> "not a valid job record: …"
        message = f"{what}: {message.partition(': ')[2]}"
    return JobFileCorrupt(message, path=exc.path, hint=exc.hint)


def write_record(run_dir: Path, record: JobRecord, *, durable: bool = True) -> None:
    write_atomic(
        run_dir / JOB_FILE,
        record.model_dump_json(indent=2).encode() + b"\n",
        durable=durable,
        follow_parent=False,  # a run directory swapped for a link is refused
    )


def read_exit(run_dir: Path) -> ExitStatus | None:
    """What the supervisor recorded, or None if it has not (yet).

    Raises :class:`JobFileCorrupt` when exit.json is there but is not a
    regular file holding a valid exit record (a job can write into its run
    directory); the message says which.
    """
    from hopper.core.record import ExitStatus

    try:
        return read_model(ExitStatus, run_dir / EXIT_FILE, SMALL_LIMIT, hint=_EXIT_HINT)
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        raise _corrupt(exc, "not a valid exit record") from None


_EXIT_HINT = (
    "exit.json is written by the job's supervisor; a job that writes its own is not trusted"
)


def read_resources(run_dir: Path) -> Resources | None:
    """The supervisor's latest measurement of the job's tree, or None (none yet, or torn)."""
    from hopper.core.record import Resources

    path = f"{run_dir}/{RESOURCES_FILE}"  # read at every heartbeat of every running job
    try:
        return parse_model(Resources, read_fast(path, SMALL_LIMIT)[0], Path(path))
    except (OSError, UnreadableFile):
        return None


def append_event(run_dir: Path, event: str, now: datetime, **fields: Any) -> None:
    """One JSON object on one line: ``{"ts": …, "event": …, …fields}``."""
    append_line_in(run_dir, EVENTS_FILE, event_line(event, now, fields))


def event_line(event: str, now: datetime, fields: Mapping[str, Any]) -> bytes:
    """The line :func:`append_event` writes, without its newline."""
    payload = {"ts": now.isoformat(), "event": event, **fields}
    return json.dumps(payload, default=str).encode()


def append_events(dir_fd: int, lines: Sequence[bytes]) -> None:
    """Append several event lines to the events.jsonl of the run directory
    ``dir_fd`` (opened ``O_NOFOLLOW``) with one open and one write(2).

    O_APPEND: the lines land together, after whatever is there, never
    interleaved with another writer's line; the file is opened as
    :func:`hopper.store.atomic.append_line` opens it (never through a link).
    """
    if not lines:
        return
    data = b"".join(line + b"\n" for line in lines)
    fd = open_regular(EVENTS_FILE, dir_fd, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


_HEAD = 16 << 10  # the most read of events.jsonl to find its first line


def first_event(run_dir: Path) -> dict[str, Any] | None:
    """events.jsonl's first line as an object, read safely and only that far; None if
    there is none, it is cut (a crash mid-write) or not an object, or the file is not
    a regular file."""
    try:
        fd = open_fd(run_dir / EVENTS_FILE)
    except (FileNotFoundError, UnreadableFile):
        return None
    try:
        head = os.read(fd, _HEAD)
    except OSError:
        return None
    finally:
        os.close(fd)
    line, newline, _ = head.partition(b"\n")
    if not newline:
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    try:
        text = (run_dir / EVENTS_FILE).read_text()
    except FileNotFoundError:
        return []
    events = []
    for line in text.splitlines():
        if line.strip():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash mid-append: skip it, keep the rest
    return events


def iter_run_dirs(runs: Path) -> Iterator[Path]:
    """Run directories, oldest id first; temporary and hidden names skipped."""
    try:
        with os.scandir(runs) as it:
            names = sorted(
                e.name for e in it if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
            )
    except FileNotFoundError:
        return
    for name in names:
        yield runs / name
