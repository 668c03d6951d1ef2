"""Which jobs a listing shows: the filters of ``hopper status``, ``usage`` and ``logs``.

Pure: a :class:`JobFilter` and a :class:`JobSummary` in, a bool out. ``since``
means "touched the window": created or finished at or after it, or still
active (a job queued or running since last week is news this morning too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from hopper.core.states import TERMINAL_STATES, JobState
from hopper.core.summary import JobSummary


@dataclass(frozen=True)
class JobFilter:
    states: frozenset[JobState] = field(default_factory=frozenset)
    since: float | None = None  # epoch seconds
    agents: frozenset[str] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    names: tuple[str, ...] = ()  # globs, matched against the name or the id, any letter case
    reasons: frozenset[str] = field(default_factory=frozenset)  # why a job ended
    text: str = ""  # a piece of the name or the id, any letter case (the dashboard's search)

    def matches(self, job: JobSummary) -> bool:
        if self.states and job.state not in self.states:
            return False
        if self.agents and job.agent not in self.agents:
            return False
        if self.groups and job.group not in self.groups:
            return False
        if self.names and not any(_named(job, g.casefold()) for g in self.names):
            return False
        if self.reasons and job.reason not in self.reasons:
            return False
        if self.text and not contains(job, self.text):
            return False
        return self.since is None or touched_since(job, self.since)


def _named(job: JobSummary, folded_glob: str) -> bool:
    """Ids are lower case and names are matched without regard to case."""
    return fnmatchcase(job.name.casefold(), folded_glob) or fnmatchcase(job.id, folded_glob)


def contains(job: JobSummary, text: str) -> bool:
    """``text`` is a piece of the job's name (any letter case) or id (lower case)."""
    folded = text.casefold()
    return folded in job.name.casefold() or folded in job.id


def touched_since(job: JobSummary, since: float) -> bool:
    if job.state not in TERMINAL_STATES:
        return True
    if job.created_at >= since:
        return True
    return job.finished_at is not None and job.finished_at >= since


def select(jobs: list[JobSummary], wanted: JobFilter) -> list[JobSummary]:
    return [j for j in jobs if wanted.matches(j)]
