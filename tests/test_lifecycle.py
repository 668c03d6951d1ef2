"""core/lifecycle.py: every transition follows core/states' table and validates its record."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from hopper.core import lifecycle
from hopper.core.lifecycle import (
    Admitted,
    Adopted,
    Deferred,
    Ended,
    Exited,
    ExitFigures,
    Filed,
    Heartbeat,
    PriorityChange,
    Requeued,
    RetryScheduled,
    Started,
    Step,
    StopRequested,
    TakenOver,
    WorkspaceReady,
)
from hopper.core.record import JobRecord, Resources
from hopper.core.states import (
    REASON_STATE,
    TERMINAL_STATES,
    IllegalTransition,
    JobState,
    Reason,
    check_transition,
)

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def allowed(old: JobState, new: JobState) -> bool:
    try:
        check_transition(old, new)
    except IllegalTransition:
        return False
    return True


def record(state: JobState = JobState.QUEUED, **fields: Any) -> JobRecord:
    reason = next((r for r, s in REASON_STATE.items() if s is state), None)
    base: dict[str, Any] = {
        "id": "20261123-120000-000-job-0001",
        "name": "job",
        "state": state,
        "reason": reason,
        "agent": "bash",
        "host": "h1",
        "owner": "h1:10:1.0",
        "inbox_path": "inbox/team/job.prompt.md",
        "created_at": NOW,
    }
    if state is JobState.RUNNING:
        base.update(pid=100, pid_start_time=1.0, supervisor_pid=99, started_at=NOW)
    return JobRecord(**{**base, **fields})


# Every transition with a fact that is valid for it in some state.
TRANSITIONS: dict[str, Callable[[JobRecord], Step]] = {
    "admitted": lambda r: lifecycle.admitted(r, Admitted(NOW, {"priority": 3})),
    "workspace_ready": lambda r: lifecycle.workspace_ready(
        r, WorkspaceReady("/w", "hopper/job", "main", None)
    ),
    "priority_changed": lambda r: lifecycle.priority_changed(r, PriorityChange(NOW, 5)),
    "deferred": lambda r: lifecycle.deferred(
        r, Deferred(NOW, NOW + timedelta(seconds=5), "no answer", 5.0)
    ),
    "started": lambda r: lifecycle.started(r, Started(NOW, "h2:1:1.0", "/tmp", "bash", pid=7)),
    "adopted": lambda r: lifecycle.adopted(r, Adopted(NOW, "h1:11:2.0")),
    "taken_over": lambda r: lifecycle.taken_over(r, TakenOver(NOW, "h2:1:1.0", "h1:10:1.0")),
    "heartbeat": lambda r: lifecycle.heartbeat(r, Heartbeat(NOW)),
    "stop_requested": lambda r: lifecycle.stop_requested(r, StopRequested(NOW, Reason.TIMEOUT)),
    "exited": lambda r: lifecycle.exited(r, Exited({"turns": 3})),
    "retry_scheduled": lambda r: lifecycle.retry_scheduled(
        r, RetryScheduled(NOW, Reason.EXIT_NONZERO, "exit 1", 2.0, NOW, 1, None)
    ),
    "requeued": lambda r: lifecycle.requeued(r, Requeued(NOW, "h2:1:1.0", "never released")),
    "ended": lambda r: lifecycle.ended(
        r, Ended(Reason.ABORTED, "aborted", "processed/job.prompt.md", NOW)
    ),
    "filed": lambda r: lifecycle.filed(r, Filed("processed/job.2.prompt.md", "; moved")),
}


@given(
    state=st.sampled_from(list(JobState)),
    name=st.sampled_from(sorted(TRANSITIONS)),
)
def test_every_transition_respects_the_table(state: JobState, name: str) -> None:
    old = record(state)
    try:
        step = TRANSITIONS[name](old)
    except IllegalTransition:
        return
    new = step.record
    assert new.state is old.state or allowed(old.state, new.state)
    assert new.id == old.id
    assert (new.reason is not None) == (new.state in TERMINAL_STATES)


@given(reason=st.sampled_from(list(Reason)), state=st.sampled_from(list(JobState)))
def test_ended_lands_in_the_reasons_state_or_refuses(reason: Reason, state: JobState) -> None:
    fact = Ended(reason, "why", "processed/job.prompt.md", NOW)
    try:
        new = lifecycle.ended(record(state), fact).record
    except IllegalTransition:
        assert not allowed(state, REASON_STATE[reason])
        return
    assert new.state is REASON_STATE[reason]
    assert new.reason is reason


@pytest.mark.parametrize(
    ("name", "states"),
    [
        ("admitted", {JobState.QUEUED}),
        ("workspace_ready", {JobState.QUEUED}),
        ("priority_changed", {JobState.QUEUED}),
        ("deferred", {JobState.QUEUED}),
        ("adopted", {JobState.RUNNING}),
        ("heartbeat", {JobState.RUNNING}),
        ("stop_requested", {JobState.RUNNING}),
        ("exited", {JobState.RUNNING}),
        ("taken_over", {JobState.QUEUED, JobState.RUNNING}),
        ("filed", TERMINAL_STATES),
    ],
)
def test_transitions_that_keep_the_state_apply_only_where_they_should(
    name: str, states: set[JobState]
) -> None:
    for state in JobState:
        if state in states:
            assert TRANSITIONS[name](record(state)).record.state is state
        else:
            with pytest.raises(IllegalTransition, match=f"a {state} job"):
                TRANSITIONS[name](record(state))


@pytest.mark.parametrize(
    "update",
    [
        {"bogus": 1},  # model_copy would drop it silently
        {"attempt": "2"},  # model_copy would write a string
        {"state": "running"},  # a string where a JobState belongs
        {"reason": "completed"},
        {"after": ("a",)},
        {"created_at": "2026-11-23T12:00:00Z"},
    ],
)
def test_revise_refuses_an_unknown_field_or_a_wrong_type(update: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        lifecycle.revise(record(), **update)


def test_admission_validates_its_settings_and_leaves_the_lifecycle_fields_alone() -> None:
    with pytest.raises(ValidationError):
        lifecycle.admitted(record(), Admitted(NOW, {"priority": "high"}))
    with pytest.raises(ValidationError):
        lifecycle.admitted(record(), Admitted(NOW, {"timeout": 5.0}))
    with pytest.raises(ValueError, match="state is set by the lifecycle"):
        lifecycle.admitted(record(), Admitted(NOW, {"state": JobState.RUNNING}))
    step = lifecycle.admitted(record(), Admitted(NOW, {"name": "renamed", "timeout_seconds": 5}))
    assert step.record.name == "renamed"
    assert step.record.timeout_seconds == 5.0
    assert [(e.name, dict(e.fields)) for e in step.events] == [
        ("queued", {"name": "renamed", "agent": "bash"})
    ]


def test_heartbeat_and_exit_take_only_agent_fields() -> None:
    running = record(JobState.RUNNING)
    with pytest.raises(ValueError, match="priority cannot be set this way"):
        lifecycle.heartbeat(running, Heartbeat(NOW, live={"priority": 9}))
    with pytest.raises(ValueError, match="state cannot be set this way"):
        lifecycle.exited(running, Exited({"state": JobState.SUCCEEDED}))
    with pytest.raises(ValidationError):
        lifecycle.heartbeat(running, Heartbeat(NOW, live={"agent_state": "dancing"}))
    used = Resources(cpu_seconds=1.5)
    beat = lifecycle.heartbeat(
        running, Heartbeat(NOW + timedelta(seconds=1), used, {"agent_state": "working"})
    ).record
    assert (beat.heartbeat_at, beat.resources, beat.agent_state) == (
        NOW + timedelta(seconds=1),
        used,
        "working",
    )
    # no figures this time: the last ones stay
    assert lifecycle.heartbeat(beat, Heartbeat(NOW)).record.resources == used


def test_started_locally_and_on_slurm() -> None:
    local = lifecycle.started(
        record(),
        Started(NOW, "h2:1:1.0", "/w", "bash", pid=7, supervisor_pid=6, host="h2"),
    )
    assert (local.record.state, local.record.pid, local.record.host) == (
        JobState.RUNNING,
        7,
        "h2",
    )
    assert local.record.started_at == local.record.heartbeat_at == NOW
    assert [dict(e.fields) for e in local.events] == [
        {"pid": 7, "supervisor_pid": 6, "argv0": "bash", "workdir": "/w"}
    ]
    slurm = lifecycle.started(record(), Started(NOW, "h2:1:1.0", "/w", "bash", slurm_job_id="42"))
    assert (slurm.record.slurm_job_id, slurm.record.host) == ("42", "h1")
    assert [dict(e.fields) for e in slurm.events] == [
        {"executor": "slurm", "slurm_job_id": "42", "argv0": "bash", "workdir": "/w"}
    ]


def test_retry_clears_the_attempt_and_counts_up() -> None:
    running = record(JobState.RUNNING, stop_requested=Reason.TIMEOUT, slurm_job_id="9", attempt=2)
    later = NOW + timedelta(seconds=4)
    step = lifecycle.retry_scheduled(
        running, RetryScheduled(NOW, Reason.TIMEOUT, "too slow", 4.0, later, None, 15)
    )
    new = step.record
    assert (new.state, new.attempt, new.not_before) == (JobState.QUEUED, 3, later)
    assert (new.pid, new.supervisor_pid, new.slurm_job_id, new.stop_requested) == (
        None,
        None,
        None,
        None,
    )
    assert (new.exit_code, new.signal) == (None, 15)
    assert new.detail == "attempt 2 timeout: too slow; retrying in 4s"
    assert [(e.name, dict(e.fields)) for e in step.events] == [
        (
            "retry_scheduled",
            {"attempt": 2, "next_attempt": 3, "reason": Reason.TIMEOUT, "delay_seconds": 4.0},
        )
    ]


def test_requeue_forgets_the_start_and_takes_ownership() -> None:
    step = lifecycle.requeued(record(JobState.RUNNING), Requeued(NOW, "h2:1:1.0", "lost gate"))
    assert (step.record.state, step.record.started_at, step.record.pid) == (
        JobState.QUEUED,
        None,
        None,
    )
    assert step.record.owner == "h2:1:1.0"
    assert [e.name for e in step.events] == ["requeued"]


def test_ended_keeps_the_exit_figures_unless_given() -> None:
    running = record(JobState.RUNNING, exit_code=3)
    fact = Ended(Reason.LOST, "gone", "processed/job.prompt.md", NOW, 2.5)
    kept = lifecycle.ended(running, fact).record
    assert (kept.state, kept.exit_code, kept.duration_seconds) == (JobState.FAILED, 3, 2.5)
    fact = Ended(Reason.COMPLETED, "done", "p/x.prompt.md", NOW, exit=ExitFigures(0, None))
    done = lifecycle.ended(running, fact).record
    assert (done.state, done.exit_code, done.processed_path) == (
        JobState.SUCCEEDED,
        0,
        "p/x.prompt.md",
    )


def test_filed_appends_its_note_and_taken_over_names_the_old_owner() -> None:
    done = record(JobState.FAILED, detail="exit 1")
    new = lifecycle.filed(done, Filed(None, "; prompt gone")).record
    assert (new.processed_path, new.detail) == (None, "exit 1; prompt gone")
    step = lifecycle.taken_over(record(), TakenOver(NOW, "h2:1:1.0", "h1:10:1.0"))
    assert step.record.owner == "h2:1:1.0"
    assert dict(step.events[0].fields) == {
        "from_host": "h1",
        "from_owner": "h1:10:1.0",
        "owner": "h2:1:1.0",
        "state": JobState.QUEUED,
    }


def test_priority_and_stop_events() -> None:
    step = lifecycle.priority_changed(record(priority=1), PriorityChange(NOW, 7))
    assert step.record.priority == 7
    assert dict(step.events[0].fields) == {"old": 1, "new": 7}
    abort = lifecycle.stop_requested(record(JobState.RUNNING), StopRequested(NOW, Reason.ABORTED))
    assert abort.record.stop_requested is Reason.ABORTED
    assert [e.name for e in abort.events] == ["abort_requested"]
    stop = lifecycle.stop_requested(record(JobState.RUNNING), StopRequested(NOW, Reason.SHUTDOWN))
    assert [e.name for e in stop.events] == ["stop_requested"]
