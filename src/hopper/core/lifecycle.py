"""How a job record changes: one function per transition, nothing else changes it.

Each transition takes the current :class:`JobRecord` and a typed fact (a
frozen dataclass saying what happened) and returns a :class:`Step`: the new
record and the events to append to events.jsonl after it. Pure: no files,
no clock; the shell's ledger (store/ledger.py) writes what a step says.

Every new record is built by :func:`revise`, which validates it strictly
(pydantic's ``model_copy(update=…)`` does not: an unknown key would vanish
and a wrongly typed value would be written). A state change is checked
against the table in core/states.py; a transition that keeps the state says
which states it applies to and refuses the others with
:class:`IllegalTransition`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hopper.core.record import JobRecord, Resources
from hopper.core.states import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    IllegalTransition,
    JobState,
    Reason,
    check_transition,
    state_for,
)


@dataclass(frozen=True)
class Event:
    """One line of events.jsonl: ``{"ts": at, "event": name, **fields}``."""

    name: str
    at: datetime
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """What a transition decided: the record to write, then the events to append."""

    record: JobRecord
    events: tuple[Event, ...] = ()


# Fields only the lifecycle sets; admission (settings from front matter, route
# and config) may not.
LIFECYCLE_FIELDS = frozenset(
    {
        "schema_version",
        "id",
        "state",
        "reason",
        "exit_code",
        "signal",
        "attempt",
        "not_before",
        "waiting",
        "pid",
        "pid_start_time",
        "supervisor_pid",
        "supervisor_start_time",
        "host",
        "owner",
        "inbox_path",
        "processed_path",
        "stop_requested",
        "created_at",
        "started_at",
        "finished_at",
        "heartbeat_at",
        "duration_seconds",
        "slurm_job_id",
    }
)
# What an agent's summary (agent.json) and live state (agent.state.json) set.
AGENT_FIELDS = frozenset(
    {
        "session_id",
        "result_path",
        "usage",
        "turns",
        "error_kind",
        "permission_denials",
        "nudges",
        "agent_state",
        "agent_detail",
        "last_activity_at",
        "session_paused",
    }
)
# What a job back in the queue must not carry over from a start: the processes
# (or Slurm job) of the attempt that is over.
NOT_STARTED: Mapping[str, object] = {
    "pid": None,
    "pid_start_time": None,
    "supervisor_pid": None,
    "supervisor_start_time": None,
    "slurm_job_id": None,
}


def revise(record: JobRecord, **update: object) -> JobRecord:
    """``record`` with ``update`` applied, validated strictly as a whole.

    Raises pydantic's ValidationError for an unknown field or a value of the
    wrong type (a string where a state or a number belongs). Private to this
    module in spirit: the shell changes records through the transitions below.

    The fields are taken from the record's ``__dict__``: the same mapping
    ``dict(record)`` builds (a JobRecord forbids extras and has no private
    fields), without pydantic's per-field iterator, which cost more than the
    validation itself (~35 of ~75 µs per transition; tests/test_revise_fast.py
    checks the two agree byte for byte).
    """
    data: dict[str, Any] = {**record.__dict__, **update}
    return JobRecord.model_validate(data, strict=True)


def _require(record: JobRecord, allowed: Collection[JobState], what: str) -> None:
    if record.state not in allowed:
        raise IllegalTransition(f"{what} does not apply to a {record.state} job ({record.id})")


def _only(keys: Mapping[str, object], allowed: frozenset[str], what: str) -> None:
    stray = sorted(set(keys) - allowed)
    if stray:
        raise ValueError(f"{what}: {', '.join(stray)} cannot be set this way")


# -- queued -------------------------------------------------------------------------
@dataclass(frozen=True)
class Admitted:
    """The job's settings, merged from front matter, route and config."""

    at: datetime
    settings: Mapping[str, object]


def admitted(record: JobRecord, fact: Admitted) -> Step:
    _require(record, {JobState.QUEUED}, "admission")
    bad = sorted(set(fact.settings) & LIFECYCLE_FIELDS)
    if bad:
        raise ValueError(f"admission: {', '.join(bad)} is set by the lifecycle, not by settings")
    new = revise(record, **fact.settings)
    return Step(new, (Event("queued", fact.at, {"name": new.name, "agent": new.agent}),))


@dataclass(frozen=True)
class WorkspaceReady:
    """The folder or worktree made for the job."""

    path: str
    branch: str | None
    ref: str | None
    repo: str | None


def workspace_ready(record: JobRecord, fact: WorkspaceReady) -> Step:
    _require(record, {JobState.QUEUED}, "a workspace")
    return Step(
        revise(
            record,
            workspace_path=fact.path,
            branch=fact.branch,
            ref=fact.ref,
            repo=fact.repo if fact.repo is not None else record.repo,
        )
    )


@dataclass(frozen=True)
class PriorityChange:
    at: datetime
    priority: int


def priority_changed(record: JobRecord, fact: PriorityChange) -> Step:
    _require(record, {JobState.QUEUED}, "a priority change")
    event = Event("priority_changed", fact.at, {"old": record.priority, "new": fact.priority})
    return Step(revise(record, priority=fact.priority), (event,))


@dataclass(frozen=True)
class Deferred:
    """The executor could not take the job now (Slurm did not answer): try later."""

    at: datetime
    not_before: datetime
    why: str
    delay_seconds: float


def deferred(record: JobRecord, fact: Deferred) -> Step:
    _require(record, {JobState.QUEUED}, "deferring a start")
    new = revise(record, not_before=fact.not_before, detail=f"waiting for Slurm: {fact.why}")
    event = Event(
        "submit_deferred", fact.at, {"why": fact.why, "delay_seconds": fact.delay_seconds}
    )
    return Step(new, (event,))


@dataclass(frozen=True)
class StartFailed:
    """A start failed for a cause that passes (core/retry.py): the job stays queued."""

    at: datetime
    why: str
    tries: int  # failed starts in a row, this one included
    delay_seconds: float
    not_before: datetime


def start_failed(record: JobRecord, fact: StartFailed) -> Step:
    _require(record, {JobState.QUEUED}, "trying a start again")
    detail = (
        f"could not start (try {fact.tries}): {fact.why}; trying again in {fact.delay_seconds:g}s"
    )
    new = revise(record, not_before=fact.not_before, detail=detail, **NOT_STARTED)
    event = Event(
        "start_failed",
        fact.at,
        {"why": fact.why, "tries": fact.tries, "delay_seconds": fact.delay_seconds},
    )
    return Step(new, (event,))


@dataclass(frozen=True)
class Held:
    """Why a queued job is held back now (a budget reached); None: no longer held."""

    at: datetime
    why: str | None


def held(record: JobRecord, fact: Held) -> Step:
    _require(record, {JobState.QUEUED}, "holding a job")
    if fact.why is None:
        event = Event("budget_released", fact.at, {"was": record.waiting})
    else:
        event = Event("budget_held", fact.at, {"why": fact.why})
    return Step(revise(record, waiting=fact.why), (event,))


# -- running ------------------------------------------------------------------------
@dataclass(frozen=True)
class Started:
    """The job runs: a local supervisor (pids) or a Slurm job (its id)."""

    at: datetime
    owner: str
    workdir: str
    argv0: str
    pid: int | None = None
    pid_start_time: float | None = None
    supervisor_pid: int | None = None
    supervisor_start_time: float | None = None
    host: str | None = None  # a retry taken over from a dead host runs here
    slurm_job_id: str | None = None


def started(record: JobRecord, fact: Started) -> Step:
    check_transition(record.state, JobState.RUNNING)  # QUEUED -> RUNNING
    update: dict[str, object] = {
        "state": JobState.RUNNING,
        "waiting": None,
        "started_at": fact.at,
        "heartbeat_at": fact.at,
        "workdir": fact.workdir,
        "owner": fact.owner,
    }
    if fact.slurm_job_id is not None:
        update["slurm_job_id"] = fact.slurm_job_id
        about: dict[str, object] = {"executor": "slurm", "slurm_job_id": fact.slurm_job_id}
    else:
        update.update(
            pid=fact.pid,
            pid_start_time=fact.pid_start_time,
            supervisor_pid=fact.supervisor_pid,
            supervisor_start_time=fact.supervisor_start_time,
        )
        about = {"pid": fact.pid, "supervisor_pid": fact.supervisor_pid}
    if fact.host is not None:
        update["host"] = fact.host
    event = Event("started", fact.at, {**about, "argv0": fact.argv0, "workdir": fact.workdir})
    return Step(revise(record, **update), (event,))


@dataclass(frozen=True)
class Adopted:
    """A running job's supervisor outlived its watcher; this one watches it now."""

    at: datetime
    owner: str


def adopted(record: JobRecord, fact: Adopted) -> Step:
    _require(record, {JobState.RUNNING}, "adopting")
    event = Event("adopted", fact.at, {"owner": fact.owner, "pid": record.pid})
    return Step(revise(record, owner=fact.owner), (event,))


@dataclass(frozen=True)
class Respawned:
    """A running job's agent process was replaced under the same supervisor (an
    interactive session's ``on_dead = "resume"``): ``pid`` names the new one."""

    at: datetime
    pid: int
    pid_start_time: float | None
    why: str = ""


def respawned(record: JobRecord, fact: Respawned) -> Step:
    _require(record, {JobState.RUNNING}, "a respawn")
    fields = {"pid": fact.pid, "old_pid": record.pid, "why": fact.why}
    event = Event("respawned", fact.at, fields)
    return Step(revise(record, pid=fact.pid, pid_start_time=fact.pid_start_time), (event,))


@dataclass(frozen=True)
class TakenOver:
    """This watcher won the takeover marker of another host's job."""

    at: datetime
    owner: str
    from_owner: str


def taken_over(record: JobRecord, fact: TakenOver) -> Step:
    _require(record, ACTIVE_STATES, "a takeover")
    event = Event(
        "taken_over",
        fact.at,
        {
            "from_host": record.host,
            "from_owner": fact.from_owner,
            "owner": fact.owner,
            "state": record.state,
        },
    )
    return Step(revise(record, owner=fact.owner), (event,))


@dataclass(frozen=True)
class Heartbeat:
    """A running job is still watched; its latest figures and agent state, if any."""

    at: datetime
    resources: Resources | None = None  # None: keep the last ones
    live: Mapping[str, object] = field(default_factory=dict)  # AGENT_FIELDS


def heartbeat(record: JobRecord, fact: Heartbeat) -> Step:
    _require(record, {JobState.RUNNING}, "a heartbeat")
    _only(fact.live, AGENT_FIELDS, "heartbeat")
    update: dict[str, object] = {"heartbeat_at": fact.at}
    if fact.resources is not None:
        update["resources"] = fact.resources
    update.update(fact.live)
    return Step(revise(record, **update))


@dataclass(frozen=True)
class StopRequested:
    at: datetime
    reason: Reason  # aborted, timeout or shutdown


def stop_requested(record: JobRecord, fact: StopRequested) -> Step:
    _require(record, {JobState.RUNNING}, "a stop request")
    name = "abort_requested" if fact.reason is Reason.ABORTED else "stop_requested"
    event = Event(name, fact.at, {"reason": fact.reason})
    return Step(revise(record, stop_requested=fact.reason), (event,))


@dataclass(frozen=True)
class Exited:
    """What the job left behind once its process ended: agent fields, final figures."""

    agent: Mapping[str, object] = field(default_factory=dict)  # AGENT_FIELDS
    resources: Resources | None = None  # None: keep the last ones


def exited(record: JobRecord, fact: Exited) -> Step:
    _require(record, {JobState.RUNNING}, "recording an exit")
    _only(fact.agent, AGENT_FIELDS, "exit")
    update: dict[str, object] = dict(fact.agent)
    if fact.resources is not None:
        update["resources"] = fact.resources
    return Step(revise(record, **update))


# -- back to queued -----------------------------------------------------------------
@dataclass(frozen=True)
class RetryScheduled:
    at: datetime
    reason: Reason
    detail: str
    delay_seconds: float
    not_before: datetime
    exit_code: int | None
    signal: int | None


def retry_scheduled(record: JobRecord, fact: RetryScheduled) -> Step:
    check_transition(record.state, JobState.QUEUED)  # RUNNING -> QUEUED (retry)
    n = record.attempt
    new = revise(
        record,
        state=JobState.QUEUED,
        attempt=n + 1,
        not_before=fact.not_before,
        detail=f"attempt {n} {fact.reason}: {fact.detail}; retrying in {fact.delay_seconds:g}s",
        **NOT_STARTED,
        stop_requested=None,
        exit_code=fact.exit_code,
        signal=fact.signal,
    )
    event = Event(
        "retry_scheduled",
        fact.at,
        {
            "attempt": n,
            "next_attempt": n + 1,
            "reason": fact.reason,
            "delay_seconds": fact.delay_seconds,
        },
    )
    return Step(new, (event,))


@dataclass(frozen=True)
class Requeued:
    """Recovery: recorded running but never released to run."""

    at: datetime
    owner: str
    why: str


def requeued(record: JobRecord, fact: Requeued) -> Step:
    check_transition(record.state, JobState.QUEUED)  # RUNNING -> QUEUED
    new = revise(record, state=JobState.QUEUED, **NOT_STARTED, started_at=None, owner=fact.owner)
    return Step(new, (Event("requeued", fact.at, {"why": fact.why}),))


# -- terminal -----------------------------------------------------------------------
@dataclass(frozen=True)
class ExitFigures:
    exit_code: int | None
    signal: int | None


@dataclass(frozen=True)
class Ended:
    """The job is over: why, and where its prompt is to be filed."""

    reason: Reason
    detail: str
    processed_path: str
    finished_at: datetime
    duration_seconds: float | None = None
    exit: ExitFigures | None = None  # None: keep what the record says


def ended(record: JobRecord, fact: Ended) -> Step:
    new_state = state_for(fact.reason)
    check_transition(record.state, new_state)
    update: dict[str, object] = {
        "state": new_state,
        "reason": fact.reason,
        "detail": fact.detail,
        "processed_path": fact.processed_path,
        "finished_at": fact.finished_at,
        "duration_seconds": fact.duration_seconds,
    }
    if fact.exit is not None:
        update.update(exit_code=fact.exit.exit_code, signal=fact.exit.signal)
    return Step(revise(record, **update))


@dataclass(frozen=True)
class Filed:
    """The prompt went somewhere else than planned (or was gone): say so."""

    processed_path: str | None
    note: str


def filed(record: JobRecord, fact: Filed) -> Step:
    _require(record, TERMINAL_STATES, "filing a prompt")
    detail = (record.detail or "") + fact.note
    return Step(revise(record, processed_path=fact.processed_path, detail=detail))
