"""Counts by state, watcher liveness judged from job heartbeats, heartbeat ages.

Pure. Judged from the jobs alone: a watcher refreshes ``heartbeat_at`` of
the jobs it runs, so the freshest heartbeat among running jobs within
``stale_after`` seconds is ``alive``, older is ``stale``, and with nothing
running it is ``unknown``. Whether a watcher serves the root at all is told
by its own heartbeat file (cli/watcherlist.py: ``hopper watchers``,
``hopper doctor``, ``hopper status``'s footer and ``hopper watch``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import StrEnum

from hopper.core.states import JobState
from hopper.core.summary import JobSummary


class Liveness(StrEnum):
    ALIVE = "alive"
    STALE = "stale"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Overview:
    counts: dict[JobState, int]
    watcher: Liveness
    freshest_heartbeat_age: float | None
    oldest_heartbeat_age: float | None


def overview(jobs: list[JobSummary], now: float, stale_after: float) -> Overview:
    counts = Counter(j.state for j in jobs)
    ages = [
        max(0.0, now - j.heartbeat_at)
        for j in jobs
        if j.state is JobState.RUNNING and j.heartbeat_at is not None
    ]
    if not ages:
        watcher = Liveness.UNKNOWN
    else:
        watcher = Liveness.ALIVE if min(ages) <= stale_after else Liveness.STALE
    return Overview(
        counts={s: counts.get(s, 0) for s in JobState},
        watcher=watcher,
        freshest_heartbeat_age=min(ages) if ages else None,
        oldest_heartbeat_age=max(ages) if ages else None,
    )
