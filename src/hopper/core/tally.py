"""Summing agent usage (tokens, cost) over jobs, grouped by agent, group or day.

Pure. Jobs without usage (bash jobs, agents that report none) count in
``jobs`` but add nothing; a figure an agent did not report stays unknown
rather than becoming zero, unless some job in the bucket reported it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum

from hopper.core.summary import JobSummary


class GroupBy(StrEnum):
    AGENT = "agent"
    GROUP = "group"
    DAY = "day"


@dataclass(frozen=True)
class UsageTotal:
    key: str
    jobs: int = 0
    jobs_with_usage: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, job: JobSummary) -> UsageTotal:
        u = job.usage
        if u is None:
            return replace(self, jobs=self.jobs + 1)
        return replace(
            self,
            jobs=self.jobs + 1,
            jobs_with_usage=self.jobs_with_usage + 1,
            input_tokens=self.input_tokens + (u.input_tokens or 0),
            output_tokens=self.output_tokens + (u.output_tokens or 0),
            cache_read_tokens=self.cache_read_tokens + (u.cache_read_tokens or 0),
            cache_write_tokens=self.cache_write_tokens + (u.cache_write_tokens or 0),
            cost_usd=self.cost_usd + (u.cost_usd or 0.0),
        )


def key_of(job: JobSummary, by: GroupBy) -> str:
    if by is GroupBy.AGENT:
        return job.agent
    if by is GroupBy.GROUP:
        return job.group or "-"
    moment = job.finished_at or job.started_at or job.created_at
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d")


def tally(jobs: list[JobSummary], by: GroupBy) -> tuple[list[UsageTotal], UsageTotal]:
    """Per-key totals sorted by key, and the grand total."""
    buckets: dict[str, UsageTotal] = {}
    total = UsageTotal("total")
    for job in jobs:
        key = key_of(job, by)
        buckets[key] = buckets.get(key, UsageTotal(key)).add(job)
        total = total.add(job)
    return [buckets[k] for k in sorted(buckets)], total
