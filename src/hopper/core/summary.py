"""A job at a glance: the few fields listings, filters and tallies need.

:class:`JobSummary` is what the status index stores per run directory and
hands back without re-reading job.json, so a listing of 100,000 jobs never
parses 100,000 records. It is derived from a :class:`JobRecord` by
:func:`summarize`, and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from hopper.core.states import JobState

if TYPE_CHECKING:  # the read path never imports the models (see core/jobview.py)
    from datetime import datetime

    from hopper.core.record import JobRecord, Usage


@dataclass(frozen=True)
class UsageFigures:
    """job.json's ``usage``: what the agent reported (a plain copy of :class:`Usage`)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_usd: float | None = None


@dataclass(frozen=True)
class JobSummary:
    id: str
    name: str
    agent: str
    state: JobState
    reason: str | None
    group: str
    attempt: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    heartbeat_at: float | None
    duration_seconds: float | None
    usage: UsageFigures | None


def group_of(inbox_path: str) -> str:
    """The inbox sub-folder a prompt was dropped in: ``inbox/team/a/x.prompt.md`` -> ``team``.

    A prompt dropped at the top of the inbox has no group (``""``).
    """
    if inbox_path.startswith("/"):
        parts: tuple[str, ...] = PurePosixPath(inbox_path).parts
    else:  # PurePosixPath's parts without building one: empty and "." pieces dropped
        parts = tuple(p for p in inbox_path.split("/") if p and p != ".")
    if parts[:1] == ("inbox",):
        parts = parts[1:]
    return parts[0] if len(parts) > 1 else ""


def job_group(group: str | None, inbox_path: str) -> str:
    """The job's group as status, usage and budgets see it: the record's scheduling group
    (front matter ``group``, the route's, else the first inbox sub-folder); a record that
    names none (top of the inbox, or written before hopper kept the field) falls back to
    its inbox folder (``""`` at the top)."""
    return group if group is not None else group_of(inbox_path)


def epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def summarize(record: JobRecord) -> JobSummary:
    return JobSummary(
        id=record.id,
        name=record.name,
        agent=record.agent,
        state=record.state,
        reason=record.reason.value if record.reason else None,
        group=job_group(record.group, record.inbox_path),
        attempt=record.attempt,
        created_at=record.created_at.timestamp(),
        started_at=epoch(record.started_at),
        finished_at=epoch(record.finished_at),
        heartbeat_at=epoch(record.heartbeat_at),
        duration_seconds=record.duration_seconds,
        usage=usage_figures(record.usage),
    )


def usage_figures(usage: Usage | None) -> UsageFigures | None:
    if usage is None:
        return None
    return UsageFigures(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=usage.cost_usd,
    )
