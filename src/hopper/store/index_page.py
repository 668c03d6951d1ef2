"""One page of the status index, newest first, with the counts that go with it.

The dashboard never holds every job: it asks for a page (the filters of
:class:`~hopper.core.selection.JobFilter`, newest id first, at most ``size``
rows older than a cursor id), and the counts by state come from the same
query's other filters over every indexed job. So the badge "failed 1,414" and
the list that clicking it shows (the same filters, state ``failed``) are one
number, at any size. All of it is SQL over the index: name globs through a
function with :func:`fnmatch.fnmatchcase`'s rules (as ``JobFilter.matches``),
so a page of the newest 50 of 100,000 jobs builds 50 rows.

Call :meth:`JobIndex.refresh` first, as for every query.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any

from hopper.core.selection import JobFilter
from hopper.core.states import JobState
from hopper.core.summary import JobSummary
from hopper.store.index import _COLUMNS, JobIndex, _summary, _where

PAGE_MAX = 500  # rows one page may hold: an answer stays bounded however many jobs match


@dataclass(frozen=True)
class Page:
    jobs: list[JobSummary]  # newest id first
    counts: dict[str, int]  # every state: jobs the filters other than state let through
    total: int  # jobs the whole filter lets through (the sum of the counts it selects)
    next: str | None  # the cursor of the following page (its ``before``), None at the end


def page(index: JobIndex, wanted: JobFilter, *, before: str | None = None, size: int = 50) -> Page:
    """The newest ``size`` (at most :data:`PAGE_MAX`) jobs ``wanted`` lets through whose id
    sorts below ``before`` (all when None), and the counts over every page."""
    size = max(0, min(size, PAGE_MAX))
    conn = index.conn
    conn.create_function("hopper_named", 3, _named, deterministic=True)
    where, params = _where_named(replace(wanted, states=frozenset()))
    found = dict(
        conn.execute(
            f"SELECT state, count(*) FROM jobs{where} GROUP BY state",  # noqa: S608 - our text
            params,
        )
    )
    counts = {s.value: int(found.get(s.value, 0)) for s in JobState}
    total = sum(n for s, n in counts.items() if not wanted.states or JobState(s) in wanted.states)
    where, params = _where_named(wanted)
    if before is not None:
        where += (" AND " if where else " WHERE ") + "id < ?"
        params.append(before)
    rows = [
        _summary(row)
        for row in conn.execute(
            f"SELECT {_COLUMNS} FROM jobs{where} ORDER BY id DESC LIMIT ?",  # noqa: S608
            [*params, size + 1],
        )
    ]
    more = len(rows) > size
    rows = rows[:size]
    return Page(rows, counts, total, rows[-1].id if more and rows else None)


def _where_named(wanted: JobFilter) -> tuple[str, list[Any]]:
    """:func:`~hopper.store.index._where` with the name globs in SQL too."""
    where, params = _where(wanted)
    if not wanted.names:
        return where, params
    any_glob = " OR ".join("hopper_named(?, name_key, id)" for _ in wanted.names)
    where += (" AND " if where else " WHERE ") + f"({any_glob})"
    return where, [*params, *(g.casefold() for g in wanted.names)]


def _named(folded_glob: str, name_key: str, job_id: str) -> bool:
    """core/selection's name test: the name (casefolded: ``name_key``) or the id."""
    return fnmatchcase(name_key, folded_glob) or fnmatchcase(job_id, folded_glob)
