"""When each running job's heartbeat falls due, earliest first.

A heap of (due, job id): a turn pops only the heartbeats that are due, so
with 1,000 jobs and heartbeats spread over ``heartbeat_interval`` a turn
touches the few whose time has come instead of visiting every running job
to compare its time with the clock. Entries are hints: the caller keeps the
truth (``Running.next_heartbeat``) and skips an entry that no longer matches
it (the job ended, or its heartbeat was moved), so nothing is ever removed
from the middle of the heap.

Heartbeats are also paced: at most ``rate`` a second in all
(:meth:`HeartbeatsDue.schedule`), so with more jobs running than ``rate ×
interval`` each job's heartbeat comes every ``running / rate`` seconds
instead of every ``interval`` (each is a job.json rewrite: ~0.6 ms of CPU),
never later than ``longest`` after the last; heartbeats that fell due
together (jobs adopted at a restart) spread out over the following turns.
"""

from __future__ import annotations

import heapq
import math


class HeartbeatsDue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []
        self._last = -math.inf  # the latest due time handed out by schedule

    def schedule(
        self, job_id: str, now: float, *, interval: float, rate: float, longest: float
    ) -> float:
        """``job_id``'s next heartbeat: ``interval`` from ``now``, later if heartbeats
        already handed out would then come faster than ``rate`` a second, never
        more than ``longest`` (or ``interval``, if that is longer) from ``now``."""
        due = min(max(now + interval, self._last + 1.0 / rate), now + max(interval, longest))
        self._last = max(self._last, due)
        self.add(due, job_id)
        return due

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, due: float, job_id: str) -> None:
        """``job_id``'s heartbeat falls due at ``due`` (monotonic seconds)."""
        heapq.heappush(self._heap, (due, job_id))

    def next_due(self) -> float:
        """The earliest time any heartbeat falls due (infinity: none)."""
        return self._heap[0][0] if self._heap else math.inf

    def pop_due(self, now: float) -> list[tuple[float, str]]:
        """Every (due, job id) due at ``now``, earliest first; they leave the heap."""
        out: list[tuple[float, str]] = []
        while self._heap and self._heap[0][0] <= now:
            out.append(heapq.heappop(self._heap))
        return out
