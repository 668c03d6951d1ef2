"""Which finished jobs ``hopper prune`` removes, and why it keeps the others.

Pure: it takes the records read from ``runs/`` (and what the shell saw of each
run directory) and ``now``, and returns a :class:`PrunePlan`. ``store/prune.py``
gathers the values and carries the plan out.

A job is pruned only if all of these hold:

* its record is readable and its state is terminal (never a queued or running
  job, never a run directory without a usable job.json: a claim in progress or
  a corrupt record is a person's to look at);
* it is finalized: its prompt.md is no longer in the run directory. A terminal
  job.json beside its prompt.md is a job a watcher is finalizing right now
  (``store/finalize.py`` writes the terminal record, then files the prompt) or
  one recovery will finish: it is not ours to take;
* its state is one of the states asked for (all three terminal states by default);
* it ended (``finished_at``, else ``created_at``) at least ``older_than`` ago;
* no queued job names it (by id or name) in ``after``: removing it would leave
  that job waiting for a name nobody knows, to fail ``dependency_unknown``
  when its ``dependency_timeout`` runs out. Such a job is kept until the jobs
  waiting on it have left the queue.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from hopper.core.states import TERMINAL_STATES, JobState

if TYPE_CHECKING:
    from hopper.core.record import JobRecord

# Why a job was kept: the words --json reports (and the summary counts by).
KEPT_ACTIVE = "active"  # queued or running
KEPT_FINALIZING = "finalizing"  # terminal, its prompt.md still in the run directory
KEPT_UNREADABLE = "unreadable"  # no usable job.json
KEPT_STATE = "state"  # a terminal state not asked for
KEPT_RECENT = "recent"  # ended less than older_than ago
KEPT_DEPENDENCY = "dependency"  # a queued job's `after` names it


@dataclass(frozen=True)
class Kept:
    id: str
    why: str  # one of the KEPT_* words
    detail: str  # a sentence for a person


@dataclass(frozen=True)
class PrunePlan:
    prune: list[JobRecord] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)

    def kept_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for kept in self.kept:
            counts[kept.why] = counts.get(kept.why, 0) + 1
        return counts


def ended_at(record: JobRecord) -> datetime:
    """When a finished job ended: ``finished_at``, else (never started) ``created_at``."""
    return record.finished_at or record.created_at


def plan_prune(
    records: Sequence[JobRecord],
    *,
    now: datetime,
    older_than: float,
    states: Collection[JobState] = TERMINAL_STATES,
    unfiled: Collection[str] = (),
    unreadable: Mapping[str, str] | None = None,
) -> PrunePlan:
    """The jobs to prune among ``records`` and why each other one stays.

    ``unfiled``: ids whose run directory still holds prompt.md; ``unreadable``:
    run directory name -> why its job.json could not be read; ``older_than``:
    seconds; ``states``: the terminal states asked for (others are refused by
    the caller, not here: a non-terminal state never prunes anyway).
    """
    plan = PrunePlan()
    for name, why in sorted((unreadable or {}).items()):
        plan.kept.append(Kept(name, KEPT_UNREADABLE, why))
    waited_on: dict[str, str] = {}  # id or name -> the queued job waiting on it
    for record in records:
        if record.state is JobState.QUEUED:
            for ref in record.after:
                waited_on.setdefault(ref, record.id)
    for record in records:
        kept = _why_kept(record, now, older_than, states, unfiled, waited_on)
        if kept is None:
            plan.prune.append(record)
        else:
            plan.kept.append(kept)
    return plan


def _why_kept(
    record: JobRecord,
    now: datetime,
    older_than: float,
    states: Collection[JobState],
    unfiled: Collection[str],
    waited_on: Mapping[str, str],
) -> Kept | None:
    if record.state not in TERMINAL_STATES:
        return Kept(record.id, KEPT_ACTIVE, f"{record.state}: never pruned")
    if record.id in unfiled:
        return Kept(
            record.id,
            KEPT_FINALIZING,
            f"{record.state} but its prompt.md is still in the run directory: "
            "a watcher is finalizing it (or recovery will)",
        )
    if record.state not in states:
        return Kept(record.id, KEPT_STATE, f"{record.state}: not a state asked for")
    age = (now - ended_at(record)).total_seconds()
    if age < older_than:
        return Kept(record.id, KEPT_RECENT, f"ended {_ago(age)} ago")
    waiter = waited_on.get(record.id) or waited_on.get(record.name)
    if waiter is not None:
        return Kept(record.id, KEPT_DEPENDENCY, f"queued job {waiter} waits on it (`after`)")
    return None


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds >= 86400:
        return f"{seconds / 86400:.1f}d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.0f}s"


def age_text(now: datetime, record: JobRecord) -> str:
    """How long ago ``record`` ended, for a person: ``35.0d``, ``4.2h``, ``12m``."""
    return _ago((now - ended_at(record)).total_seconds())
