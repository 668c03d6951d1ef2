"""Which queued jobs start now, and which can never start. Pure.

Theory of operation. The watcher gathers plain values — its queued and
running records, the limits, the PAUSE markers, what it knows of every other
job (id, name, state), and ``now`` — and :func:`schedule` returns a
:class:`Decision`: ids to start, in order, and jobs to fail with a reason.

A queued job may start when all of these hold:

- no PAUSE marker covers it (the root's, or its group's), and its session is
  not paused (an agent job of the session failed with ``on_error = "pause"``;
  ``<root>/sessions/<name>.paused`` holds all its later jobs until removed);
- a retry's ``not_before`` has passed;
- no budget of its scope is reached (``[budgets]``, core/budgets.py): an agent
  job of a group, agent or session that spent its budget this period waits
  (``held``, with the reason), while bash jobs and other scopes run on;
- every job named in ``after`` has succeeded;
- no job of its ``session`` runs, and none was claimed before it and is
  still queued (sessions run one at a time, in claim order);
- a slot is free: fewer than ``max_parallel`` running in all, fewer than
  its agent's limit of that agent, fewer than its group's limit of that group.

Eligible jobs take slots in priority order (higher first), ties by claim
time (the id sorts by it). A job that does not fit is skipped, not waited
for: a lower-priority job that fits a free slot takes it, so no slot stays
idle while a job fits it.

A job fails instead of starting when a job in ``after`` failed or was
aborted (``dependency_failed``), when its ``after`` jobs wait on each other
or on itself (``dependency_cycle``), or when an ``after`` name matched no
job for ``dependency_timeout`` seconds after the claim
(``dependency_unknown``). A name refers to the newest job of that name that
is still active, else the newest finished one; an id refers to that job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter

from hopper.core.budgets import Holds
from hopper.core.record import JobRecord
from hopper.core.sessions import turn_wait
from hopper.core.states import ACTIVE_STATES, JobState, Reason

BASH = "bash"
ALL_BUSY = "all slots busy"


@dataclass(frozen=True)
class SlotLimits:
    """How many jobs may run at once: in all, per agent, per group.

    Built from the config by :meth:`hopper.config.Config.slot_limits` (its
    ``max_parallel`` and ``[limits]``), the one place the two meet.
    """

    max_parallel: int
    agents: Mapping[str, int] = field(default_factory=dict)
    agent_default: int = 1
    groups: Mapping[str, int] = field(default_factory=dict)
    group_default: int | None = None

    def for_agent(self, agent: str) -> int:
        if agent in self.agents:
            return self.agents[agent]
        return self.max_parallel if agent == BASH else self.agent_default

    def for_group(self, group: str | None) -> int | None:
        if group is None:
            return None
        return self.groups.get(group, self.group_default)


@dataclass(frozen=True)
class Pause:
    """PAUSE markers: the root's (everything) and those of inbox groups."""

    all: bool = False
    groups: frozenset[str] = frozenset()
    sessions: Mapping[str, str] = field(default_factory=dict)  # paused session -> why

    def covers(self, group: str | None) -> bool:
        return self.all or (group is not None and group in self.groups)


@dataclass(frozen=True)
class KnownJob:
    """What the scheduler needs to know of any job, ours or not."""

    id: str
    name: str
    state: JobState


@dataclass(frozen=True)
class Elsewhere:
    """Slots and sessions other watchers on the root hold (from their leases).

    Counted with this watcher's own running jobs against the same limits, so
    the limits are global (docs/scale-out.md).
    """

    total: int = 0
    agents: Mapping[str, int] = field(default_factory=dict)
    groups: Mapping[str, int] = field(default_factory=dict)
    sessions: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Failure:
    job_id: str
    reason: Reason
    detail: str


@dataclass(frozen=True)
class Decision:
    start: list[str]
    fail: list[Failure]
    paused: frozenset[str]  # queued ids held only by a PAUSE marker or a paused session
    waiting: dict[str, str]  # queued id -> why it waits (dependencies, session, slots …)
    held: dict[str, str] = field(default_factory=dict)  # queued id -> the budget that holds it


def resolve(ref: str, known: Sequence[KnownJob]) -> KnownJob | None:
    """An exact id; else the newest active job of that name; else the newest of that name."""
    named: list[KnownJob] = []
    for job in known:
        if job.id == ref:
            return job
        if job.name == ref:
            named.append(job)
    if not named:
        return None
    active = [j for j in named if j.state in ACTIVE_STATES]
    return max(active or named, key=lambda j: j.id)


def cycles(edges: Mapping[str, Iterable[str]]) -> set[str]:
    """Nodes on a cycle of ``edges`` (including self-loops). Tarjan's SCC, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: set[str] = set()
    counter = 0
    for root in edges:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, list(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in edges:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, list(edges.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1 or node in set(edges.get(node, ())):
                    out.update(component)
    return out


def _dependencies(
    queued: Sequence[JobRecord],
    known: Sequence[KnownJob],
    now: datetime,
    dependency_timeout: float,
) -> tuple[list[Failure], dict[str, str]]:
    """Failures for broken ``after`` lists, and why the others still wait."""
    failures: list[Failure] = []
    waiting: dict[str, str] = {}
    edges: dict[str, list[str]] = {}
    queued_ids = {r.id for r in queued}
    for record in queued:
        if not record.after:
            continue
        edges[record.id] = []
        unmet: list[str] = []
        failed: list[str] = []
        unknown: list[str] = []
        for ref in record.after:
            dep = resolve(ref, known)
            if dep is None:
                unknown.append(ref)
                continue
            if dep.id in queued_ids:
                edges[record.id].append(dep.id)
            if dep.state is JobState.SUCCEEDED:
                continue
            if dep.state in (JobState.FAILED, JobState.ABORTED):
                failed.append(f"{ref} ({dep.id}, {dep.state})")
            else:
                unmet.append(ref)
        if failed:
            failures.append(
                Failure(
                    record.id,
                    Reason.DEPENDENCY_FAILED,
                    f"dependency {', '.join(failed)} did not succeed",
                )
            )
        elif unknown and (now - record.created_at).total_seconds() >= dependency_timeout:
            failures.append(
                Failure(
                    record.id,
                    Reason.DEPENDENCY_UNKNOWN,
                    f"no job named {', '.join(unknown)} appeared within "
                    f"{dependency_timeout:g}s (dependency_timeout); check the names in `after`",
                )
            )
        elif unknown or unmet:
            waiting[record.id] = "waiting for " + ", ".join(unmet + unknown)
    failing = {f.job_id for f in failures}
    looped = cycles({k: v for k, v in edges.items() if k not in failing})
    for job_id in sorted(looped):
        others = sorted(looped - {job_id}) or [job_id]
        failures.append(
            Failure(
                job_id,
                Reason.DEPENDENCY_CYCLE,
                f"`after` forms a cycle with {', '.join(others)}; none of them can start",
            )
        )
        waiting.pop(job_id, None)
    return failures, waiting


def schedule(
    queued: Sequence[JobRecord],
    running: Sequence[JobRecord],
    limits: SlotLimits,
    pause: Pause,
    known: Sequence[KnownJob],
    now: datetime,
    dependency_timeout: float,
    elsewhere: Elsewhere | None = None,
    budgets: Holds | None = None,
) -> Decision:
    """Decide which of ``queued`` start now (in start order) and which fail."""
    other = elsewhere or Elsewhere()
    holds = budgets or Holds()
    held: dict[str, str] = {}
    failures, waiting = _dependencies(queued, known, now, dependency_timeout)
    failing = {f.job_id for f in failures}
    busy = {r.session for r in running if r.session} | set(other.sessions)
    paused: set[str] = set()
    eligible: list[JobRecord] = []
    covers = pause.covers
    why_held = holds.why
    for record in sorted(queued, key=_claim_order):  # claim order, for sessions
        job_id = record.id
        if job_id in failing:
            continue
        session = record.session
        if session:  # a job of no session is never held by one
            if session in pause.sessions:
                busy.add(session)
                paused.add(job_id)
                why = pause.sessions[session]
                waiting[job_id] = f"session {session} paused: {why}"
                continue
            session_busy = session in busy
            busy.add(session)  # later jobs of this session wait behind this one
            if job_id in waiting:
                continue
            if session_busy:
                waiting[job_id] = turn_wait(session)
                continue
        elif job_id in waiting:
            continue
        if covers(record.group):
            paused.add(job_id)
            continue
        hold = why_held(record.agent, record.group, session)  # None for bash
        if hold is not None:
            waiting[job_id] = held[job_id] = hold
            continue
        if record.not_before is not None and record.not_before > now:
            waiting[job_id] = "retry backing off"
            continue
        eligible.append(record)

    total = len(running) + other.total
    per_agent = Counter(r.agent for r in running) + Counter(other.agents)
    per_group: Counter[str | None] = Counter(r.group for r in running)
    per_group.update(other.groups)
    start: list[str] = []
    # eligible is in claim order: a stable sort by priority, higher first, keeps it
    # among equals, which is the start order (priority, then claim order)
    ordered = sorted(eligible, key=_priority, reverse=True)
    for n, record in enumerate(ordered):
        if total >= limits.max_parallel:  # and so for every job after it: no slot is left
            for rest in ordered[n:]:
                waiting[rest.id] = ALL_BUSY
            break
        group_limit = limits.for_group(record.group)
        if per_agent[record.agent] >= limits.for_agent(record.agent):
            waiting[record.id] = f"agent {record.agent} at its limit"
        elif group_limit is not None and per_group[record.group] >= group_limit:
            waiting[record.id] = f"group {record.group} at its limit"
        else:
            start.append(record.id)
            total += 1
            per_agent[record.agent] += 1
            per_group[record.group] += 1
    return Decision(start, failures, frozenset(paused), waiting, held)


_claim_order = attrgetter("id")  # the id sorts by claim time
_priority = attrgetter("priority")
