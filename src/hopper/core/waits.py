"""Why a queued job has not started, in words: the one home of that wording.

Pure. The scheduler (``core/schedule.py``) already decides, for every queued
job it does not start, why it waits (``Decision.waiting``: an ``after`` job
not done, a session's earlier job or its pause, a retry backing off, no free
slot; any hold a later rule adds there too), which jobs only a PAUSE marker
holds (``Decision.paused``), which start now and which are about to fail.
:func:`explain` turns that decision into one line per queued job, for
``hopper status`` and the dashboard alike, so both say the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence

from hopper.core.record import JobRecord
from hopper.core.schedule import Decision, Pause

PAUSED_ALL = "paused: the whole queue (PAUSE; hopper resume)"
STARTS_NEXT = "starts at the watcher's next turn"
NO_WATCHER = "its turn, but no watcher serves this root to start it"


def paused_group(group: str) -> str:
    return f"paused: group {group} (inbox/{group}/PAUSE; hopper resume {group})"


def explain(
    decision: Decision, queued: Sequence[JobRecord], pause: Pause, *, serving: bool
) -> dict[str, str]:
    """Each of ``queued``'s ids -> why it has not started (``serving``: a watcher's
    heartbeat here is fresh, so a job free to start will)."""
    out: dict[str, str] = {}
    failing = {f.job_id: f.detail for f in decision.fail}
    starting = set(decision.start)
    for record in queued:
        job_id = record.id
        if job_id in failing:
            out[job_id] = f"about to fail: {failing[job_id]}"
        elif record.waiting:  # the watcher's own word: a budget holds it (job.json)
            out[job_id] = record.waiting
        elif job_id in decision.waiting:
            out[job_id] = decision.waiting[job_id]
        elif job_id in decision.paused:
            out[job_id] = PAUSED_ALL if pause.all else paused_group(record.group or "")
        elif job_id in starting:
            out[job_id] = STARTS_NEXT if serving else NO_WATCHER
    return out
