"""The status index, served to the dashboard from one thread.

The index (``store/index.py``) is the CLI's: SQLite, refreshed from the run
directories before every query, so the dashboard is never staler than the
files and never a second truth. A SQLite connection belongs to the thread
that opened it, so every index call runs on one worker thread; the event
loop awaits it.

:meth:`Catalog.changes` is how the hub learns what to push: it refreshes and
compares each job.json's ``(inode, mtime_ns, size)`` with the last call's,
and returns the texts of the jobs that changed and the ids that went away.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from hopper.core.schedule import SlotLimits
from hopper.core.selection import JobFilter
from hopper.core.states import TERMINAL_STATES, JobState
from hopper.core.summary import JobSummary
from hopper.store.index import JobIndex
from hopper.store.index_page import page
from hopper.store.layout import Layout
from hopper.store.logline import log_error_line
from hopper.store.queue_waits import queue_waits

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Waits:
    """What a page needs to say why its queued jobs wait (``store/queue_waits.py``)."""

    limits: SlotLimits
    dependency_timeout: float
    serving: bool  # a watcher's heartbeat here is fresh
    now: float


@dataclass
class Changes:
    changed: dict[str, str] = field(default_factory=dict)  # id -> job.json text
    removed: list[str] = field(default_factory=list)
    active: set[str] = field(default_factory=set)  # every queued or running job now


class Catalog:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hopper-web-index")
        self._index: JobIndex | None = None
        self._stamps: dict[str, tuple[int, int, int]] = {}
        self._active: set[str] = set()

    async def call(self, fn: Callable[[JobIndex], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._run, fn)

    def _run(self, fn: Callable[[JobIndex], T]) -> T:
        if self._index is None:
            self._index = JobIndex.open(self.layout)
        return fn(self._index)

    def close(self) -> None:
        def shut(index: JobIndex) -> None:
            index.close()

        if self._index is not None:
            self._pool.submit(self._run, shut).result()
        self._pool.shutdown(wait=True)

    # -- run on the index thread ------------------------------------------------

    @staticmethod
    def _refresh_only(index: JobIndex) -> None:
        for problem in index.refresh().corrupt:
            log.warning("%s", problem)

    @staticmethod
    def _refresh(index: JobIndex) -> list[JobSummary]:
        Catalog._refresh_only(index)
        return index.jobs()

    def listing(self, wanted: JobFilter, limit: int | None) -> Callable[[JobIndex], str]:
        """A JSON array of the matching jobs' job.json texts (the newest ``limit``)."""

        def run(index: JobIndex) -> str:
            jobs = [j for j in self._refresh(index) if wanted.matches(j)]
            if limit is not None:
                jobs = jobs[-limit:] if limit else []
            return "[" + ",".join(t.rstrip() for t in index.raw(j.id for j in jobs)) + "]"

        return run

    def paged(
        self, wanted: JobFilter, before: str | None, size: int, waits: Waits
    ) -> Callable[[JobIndex], str]:
        """``GET /api/page``'s body: the newest ``size`` matching jobs' job.json texts below
        ``before``, the counts by state over every page, the total, the next cursor, and
        ``why`` for the rows that have one (a queued job's wait, a failed one's error line)."""

        def run(index: JobIndex) -> str:
            self._refresh_only(index)
            got = page(index, wanted, before=before, size=size)
            texts = index.raw_of(j.id for j in got.jobs)
            jobs = ",".join(texts[j.id].rstrip() for j in got.jobs if j.id in texts)
            why = self._why(index, got.jobs, waits)
            head = json.dumps(
                {"counts": got.counts, "total": got.total, "next": got.next, "why": why}
            )
            return head[:-1] + ', "jobs": [' + jobs + "]}"

        return run

    def _why(self, index: JobIndex, jobs: list[JobSummary], waits: Waits) -> dict[str, str]:
        why: dict[str, str] = {}
        if any(j.state is JobState.QUEUED for j in jobs):
            every = queue_waits(
                self.layout,
                index,
                waits.limits,
                waits.dependency_timeout,
                serving=waits.serving,
                now=waits.now,
            )
            why.update((j.id, every[j.id]) for j in jobs if j.id in every)
        for j in jobs:
            if j.state in (JobState.FAILED, JobState.ABORTED):
                line = log_error_line(self.layout.run_dir(j.id))
                if line:
                    why[j.id] = line
        return why

    @staticmethod
    def tallies(now: float) -> Callable[[JobIndex], tuple[dict[str, int], float | None]]:
        """Every job's count by state, and the age of the freshest running job's heartbeat."""

        def run(index: JobIndex) -> tuple[dict[str, int], float | None]:
            Catalog._refresh_only(index)
            counts = page(index, JobFilter(), size=0).counts
            beats = [
                max(0.0, now - j.heartbeat_at)
                for j in index.jobs(JobFilter(states=frozenset({JobState.RUNNING})))
                if j.heartbeat_at is not None
            ]
            return counts, min(beats, default=None)

        return run

    @staticmethod
    def summaries(index: JobIndex) -> list[JobSummary]:
        return Catalog._refresh(index)

    def changes(self, index: JobIndex) -> Changes:
        for problem in index.refresh().corrupt:
            log.warning("%s", problem)
        stamps = index.stamps()
        out = Changes()
        changed = [k for k, v in stamps.items() if self._stamps.get(k) != v]
        out.removed = [k for k in self._stamps if k not in stamps]
        out.changed = index.raw_of(changed)
        if not self._stamps:  # the first look: every job is "changed"; find the active ones
            self._active = {j.id for j in index.jobs() if j.state not in TERMINAL_STATES}
        else:
            for job_id, text in out.changed.items():
                if state_of(text) in TERMINAL_STATES:
                    self._active.discard(job_id)
                else:
                    self._active.add(job_id)
            self._active.difference_update(out.removed)
        self._stamps = stamps
        out.active = set(self._active)
        return out


def state_of(text: str) -> JobState | None:
    try:
        value = json.loads(text).get("state")
        return JobState(value)
    except (ValueError, AttributeError):
        return None


def counts(jobs: list[JobSummary]) -> dict[str, int]:
    c = Counter(j.state.value for j in jobs)
    return {s.value: c.get(s.value, 0) for s in JobState}


def now() -> float:
    return time.time()
