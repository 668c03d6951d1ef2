"""Why each queued job waits, gathered from the root: for ``hopper status`` and the dashboard.

Gathers what the watcher's scheduler is given — the queued and running
records (from the status index: their job.json as last read), every job's
id, name and state when an ``after`` needs them, the PAUSE markers and paused
sessions (``store/markers.read_pause``, the watcher's own reading), the
limits — asks ``core/schedule.schedule`` what it would do now and has
``core/waits.explain`` word it. A job.json the model refuses is left out
(``hopper status`` reports it). The cost is the active jobs' records, not
the history's.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import ValidationError

from hopper.core.record import JobRecord
from hopper.core.schedule import KnownJob, SlotLimits, schedule
from hopper.core.selection import JobFilter
from hopper.core.states import JobState
from hopper.core.waits import explain
from hopper.store.index import JobIndex
from hopper.store.layout import Layout
from hopper.store.markers import read_pause

ACTIVE = frozenset({JobState.QUEUED, JobState.RUNNING})


def queue_waits(
    layout: Layout,
    index: JobIndex,
    limits: SlotLimits,
    dependency_timeout: float,
    *,
    serving: bool,
    now: float,
) -> dict[str, str]:
    """Every queued job's id -> why it has not started (see ``core/waits.py``). The index
    must have been refreshed."""
    active = index.jobs(JobFilter(states=ACTIVE))
    if not any(j.state is JobState.QUEUED for j in active):
        return {}
    records: list[JobRecord] = []
    for text in index.raw_of(j.id for j in active).values():
        try:
            records.append(JobRecord.model_validate_json(text))
        except ValidationError:
            continue
    queued = [r for r in records if r.state is JobState.QUEUED]
    running = [r for r in records if r.state is JobState.RUNNING]
    known = (
        [KnownJob(j.id, j.name, j.state) for j in index.jobs()]
        if any(r.after for r in queued)
        else []
    )
    pause = read_pause(layout, {r.group for r in queued}, {r.session for r in queued})
    decision = schedule(
        queued,
        running,
        limits,
        pause,
        known,
        datetime.fromtimestamp(now, UTC),
        dependency_timeout,
    )
    return explain(decision, queued, pause, serving=serving)
