"""job.json, exit.json and events.jsonl: the only code that reads or writes them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hopper.core.record import ExitStatus, JobRecord, Resources
from hopper.errors import JobFileCorrupt
from hopper.store.atomic import append_line, write_atomic

JOB_FILE = "job.json"
EXIT_FILE = "exit.json"
EVENTS_FILE = "events.jsonl"
LOG_FILE = "job.log"
PROMPT_FILE = "prompt.md"
CLAIM_FILE = "claim.json"
ABORT_FILE = "ABORT"
RESOURCES_FILE = "resources.json"  # live figures from the supervisor


def read_record(run_dir: Path) -> JobRecord:
    """The job record; raises FileNotFoundError or :class:`JobFileCorrupt`."""
    path = run_dir / JOB_FILE
    data = path.read_bytes()
    try:
        return JobRecord.model_validate_json(data)
    except ValidationError as exc:
        raise JobFileCorrupt(
            f"not a valid job record: {exc.errors()[0]['msg']}",
            path=path,
            hint="hopper writes this file atomically; was it edited by hand?",
        ) from None


def write_record(run_dir: Path, record: JobRecord, *, durable: bool = True) -> None:
    write_atomic(
        run_dir / JOB_FILE, record.model_dump_json(indent=2).encode() + b"\n", durable=durable
    )


def read_exit(run_dir: Path) -> ExitStatus | None:
    """What the supervisor recorded, or None if it has not (yet)."""
    try:
        data = (run_dir / EXIT_FILE).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return ExitStatus.model_validate_json(data)
    except ValidationError as exc:
        raise JobFileCorrupt(
            f"not a valid exit record: {exc.errors()[0]['msg']}", path=run_dir / EXIT_FILE
        ) from None


def read_resources(run_dir: Path) -> Resources | None:
    """The supervisor's latest measurement of the job's tree, or None (none yet, or torn)."""
    try:
        return Resources.model_validate_json((run_dir / RESOURCES_FILE).read_bytes())
    except (OSError, ValidationError):
        return None


def utcnow() -> datetime:
    return datetime.now(UTC)


def append_event(run_dir: Path, event: str, now: datetime, **fields: Any) -> None:
    """One JSON object on one line: ``{"ts": …, "event": …, …fields}``."""
    payload = {"ts": now.isoformat(), "event": event, **fields}
    append_line(run_dir / EVENTS_FILE, json.dumps(payload, default=str).encode())


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
