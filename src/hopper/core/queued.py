"""The watcher's queued jobs by id, with their start order kept as they change. Pure.

Theory of operation. A start needs only the first few queued jobs in start
order (priority, higher first; then claim order, which the id sorts by), plus
every job with a session or ``after`` (their verdicts depend on the rest).
Selecting those from the whole queue on every start costs O(n): 0.11 s per
call over 65,000 queued jobs on the 2-core machine of record. Here every
record set into the mapping also goes on a heap (or, for a session or
``after``, into a set), so :meth:`QueuedJobs.first` costs O(k log n).

The heap is lazy: an entry whose job left the queue, or whose record now has
another priority or a session, is dropped when it reaches the top; a record
set again pushes a fresh entry, and duplicates are dropped the same way. The
mapping itself is the truth; the heap only orders it.

The entries :meth:`QueuedJobs.first` took off the heap stay off it, in a
sorted list (the front) that the next call walks first: a start asks for the
same first 64 jobs turn after turn, and popping and pushing them all back
each time cost more than the scheduling they feed. Every entry in the front
sorts before every live entry on the heap (a record set with a key that
sorts before the front's last goes into the front, by bisection), so the
front followed by the heap's pops is the start order. The front's entries
are checked like the heap's (a job gone, or its record changed, is dropped).
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Iterable, Mapping

from hopper.core.record import JobRecord


def _special(record: JobRecord) -> bool:
    return bool(record.session or record.after)


class QueuedJobs(dict[str, JobRecord]):
    """``{job id: queued record}``; every write goes through ``__setitem__``."""

    def __init__(self, records: Mapping[str, JobRecord] | None = None) -> None:
        super().__init__()
        self._heap: list[tuple[int, str]] = []  # (-priority, id) of plain jobs, maybe stale
        self._front: list[tuple[int, str]] = []  # sorted; each <= any live heap entry; maybe stale
        self._special: set[str] = set()  # ids with a session or `after`, maybe stale
        self.update(records or {})

    def __setitem__(self, job_id: str, record: JobRecord) -> None:
        super().__setitem__(job_id, record)
        if _special(record):
            self._special.add(job_id)
            return
        entry = (-record.priority, job_id)
        if self._front and entry < self._front[-1]:
            insort(self._front, entry)  # before the front's last: the front keeps the order
        else:
            heapq.heappush(self._heap, entry)

    def update(self, *args: Mapping[str, JobRecord] | Iterable[tuple[str, JobRecord]]) -> None:  # type: ignore[override]
        for arg in args:
            pairs = arg.items() if isinstance(arg, Mapping) else arg
            for job_id, record in pairs:
                self[job_id] = record

    def setdefault(self, job_id: str, record: JobRecord) -> JobRecord:
        if job_id not in self:
            self[job_id] = record
        return self[job_id]

    def first(self, k: int) -> list[JobRecord]:
        """The first ``k`` jobs without a session or ``after``, in start order."""
        out: list[JobRecord] = []
        seen: set[str] = set()
        front: list[tuple[int, str]] = []  # the entries kept: checked, or not reached
        entries = self._front
        get = self.get
        for n, entry in enumerate(entries):
            if len(out) >= k:
                front.extend(entries[n:])  # not reached this time: checked when they are
                break
            key, job_id = entry
            record = get(job_id)
            if record is None or record.session or record.after or -record.priority != key:
                continue  # stale: dropped for good
            if job_id in seen:
                continue  # a duplicate
            seen.add(job_id)
            out.append(record)
            front.append(entry)
        heap = self._heap
        while heap and len(out) < k:
            entry = heapq.heappop(heap)
            key, job_id = entry
            record = get(job_id)
            if record is None or _special(record) or -record.priority != key or job_id in seen:
                continue  # stale or a duplicate: dropped for good
            seen.add(job_id)
            out.append(record)
            front.append(entry)
        self._front = front
        return out

    def special(self) -> list[JobRecord]:
        """Every job with a session or ``after``, in claim order."""
        self._prune_special()
        return [self[i] for i in sorted(self._special)]

    def has_after(self) -> bool:
        """Does some queued job wait on ``after``? O(jobs with a session or ``after``)."""
        self._prune_special()
        return any(self[i].after for i in self._special)

    def _prune_special(self) -> None:
        self._special = {i for i in self._special if i in self and _special(self[i])}
