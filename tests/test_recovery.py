"""core/recovery.decide: one test per crash point of docs/contract.md, and every Action."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hopper.core.record import ExitStatus, JobRecord
from hopper.core.recovery import STALE_CLAIM_SECONDS, Action, RunSnapshot, decide
from hopper.core.states import JobState, Reason
from hopper.reconcile import _finished_fast
from hopper.store.jobfile import JOB_FILE, PROMPT_FILE

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def record(state: JobState, **kw: object) -> JobRecord:
    return JobRecord(
        id="20260101-000000-000-x-abcd",
        name="x",
        state=state,
        agent="bash",
        host="h",
        inbox_path="inbox/x.prompt.md",
        created_at=NOW,
        **kw,  # type: ignore[arg-type]
    )


def exit_status(*, started: bool = True, error: str | None = None) -> ExitStatus:
    return ExitStatus(
        started=started, exit_code=0 if started else None, error=error, finished_at=NOW
    )


# A snapshot as a dead watcher on this host leaves it: nothing alive, not stale.
BASE = RunSnapshot(
    record=None,
    corrupt=False,
    has_prompt=False,
    exit=None,
    dir_age=1.0,
    owner_alive=False,
    same_host=True,
    supervisor_alive=False,
)


def snap(**kw: object) -> RunSnapshot:
    return replace(BASE, **kw)  # type: ignore[arg-type]


TERMINAL = record(JobState.FAILED, reason=Reason.BAD_PROMPT, processed_path="processed/x.p.md")

# (crash after, what is on disk, expected action): the contract's recovery table, row by row.
CRASH_POINTS = [
    ("claim-mkdir-fresh", snap(dir_age=1.0), Action.NOTHING),
    ("claim-mkdir-stale", snap(dir_age=STALE_CLAIM_SECONDS), Action.REMOVE_EMPTY_CLAIM),
    ("claim-mkdir-very-stale", snap(dir_age=3600.0), Action.REMOVE_EMPTY_CLAIM),
    ("claim-rename", snap(has_prompt=True), Action.COMPLETE_CLAIM),
    ("claim-rename-stale", snap(has_prompt=True, dir_age=3600.0), Action.COMPLETE_CLAIM),
    (
        "claim-job-json-queued",
        snap(record=record(JobState.QUEUED), has_prompt=True),
        Action.TAKE_QUEUED,
    ),
    (
        "start-spawned-not-recorded",
        snap(record=record(JobState.QUEUED), has_prompt=True, exit=exit_status(started=False)),
        Action.TAKE_QUEUED,
    ),
    (
        "start-running-not-released",
        snap(record=record(JobState.RUNNING), has_prompt=True, exit=exit_status(started=False)),
        Action.REQUEUE,
    ),
    (
        "running-watcher-killed",
        snap(record=record(JobState.RUNNING), has_prompt=True, supervisor_alive=True),
        Action.ADOPT,
    ),
    (
        "running-job-ended-while-down",
        snap(record=record(JobState.RUNNING), has_prompt=True, exit=exit_status()),
        Action.FINISH,
    ),
    (
        "running-supervisor-killed-too",
        snap(record=record(JobState.RUNNING), has_prompt=True),
        Action.LOST,
    ),
    ("finalize-terminal-record", snap(record=TERMINAL, has_prompt=True), Action.COMPLETE_FINALIZE),
    ("finalize-moved", snap(record=TERMINAL, has_prompt=False), Action.NOTHING),
]


@pytest.mark.parametrize(
    ("snapshot", "action"), [c[1:] for c in CRASH_POINTS], ids=[c[0] for c in CRASH_POINTS]
)
def test_crash_point(snapshot: RunSnapshot, action: Action) -> None:
    assert decide(snapshot) is action


def test_every_action_is_reachable() -> None:
    reached = {a for _, _, a in CRASH_POINTS} | {
        decide(snap(record=record(JobState.QUEUED), same_host=False))
    }
    assert reached == set(Action)


def test_spawn_error_recorded_before_start_is_finished_not_requeued() -> None:
    s = snap(record=record(JobState.RUNNING), exit=exit_status(started=False, error="no bash"))
    assert decide(s) is Action.FINISH


def test_exit_record_wins_over_live_supervisor() -> None:
    s = snap(record=record(JobState.RUNNING), exit=exit_status(), supervisor_alive=True)
    assert decide(s) is Action.FINISH


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.RUNNING])
@pytest.mark.parametrize(
    "extra",
    [{}, {"supervisor_alive": True}, {"exit": exit_status()}, {"exit": exit_status(started=False)}],
    ids=["bare", "supervisor-alive", "exited", "never-started"],
)
def test_other_hosts_job_is_not_mine(state: JobState, extra: dict[str, object]) -> None:
    s = snap(record=record(state), has_prompt=True, same_host=False, **extra)
    assert decide(s) is Action.NOT_MINE


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.RUNNING])
@pytest.mark.parametrize(
    "extra",
    [{}, {"exit": exit_status()}, {"exit": exit_status(started=False)}],
    ids=["bare", "exited", "never-started"],
)
def test_live_owners_job_is_not_mine(state: JobState, extra: dict[str, object]) -> None:
    s = snap(record=record(state), has_prompt=True, owner_alive=True, **extra)
    assert decide(s) is Action.NOT_MINE


@pytest.mark.parametrize("has_prompt", [True, False])
@pytest.mark.parametrize("dir_age", [0.0, 3600.0])
def test_corrupt_record_is_left_alone(has_prompt: bool, dir_age: float) -> None:
    assert decide(snap(corrupt=True, has_prompt=has_prompt, dir_age=dir_age)) is Action.NOTHING


def test_fresh_empty_claim_dir_is_being_claimed_right_now() -> None:
    assert decide(snap(dir_age=0.0)) is Action.NOTHING
    assert decide(snap(dir_age=STALE_CLAIM_SECONDS - 0.001)) is Action.NOTHING


@pytest.mark.parametrize("same_host", [True, False])
@pytest.mark.parametrize("owner_alive", [True, False])
def test_terminal_job_finalize_is_completed_by_anyone(same_host: bool, owner_alive: bool) -> None:
    """Moving a terminal job's prompt is idempotent, so whoever sees it may do it."""
    s = snap(record=TERMINAL, has_prompt=True, same_host=same_host, owner_alive=owner_alive)
    assert decide(s) is Action.COMPLETE_FINALIZE


@pytest.mark.parametrize("has_prompt", [True, False])
@pytest.mark.parametrize("dir_age", [0.0, 3600.0])
@pytest.mark.parametrize(
    "who", [{"owner_alive": True}, {"same_host": False}], ids=["live-owner", "other-host"]
)
def test_claim_in_progress_elsewhere_is_not_mine(
    has_prompt: bool, dir_age: float, who: dict[str, object]
) -> None:
    """No job.json yet, but a live watcher (or another host) is mid-claim: hands off."""
    assert decide(snap(has_prompt=has_prompt, dir_age=dir_age, **who)) is Action.NOT_MINE


@pytest.mark.parametrize(
    ("job_json", "filed"),
    [
        (b'{\n  "id": "j",\n  "state": "succeeded"\n}', True),  # pydantic's indent=2
        (b'{"id":"j","state":"failed"}', True),  # compact
        (b'{"id": "j", "state" :\t"aborted"}', True),
        (b'{"id": "j", "state": "running"}', False),
        (b'{"detail": "\\"state\\": \\"succeeded\\"", "state": "running"}', False),
    ],
)
def test_finished_fast_reads_the_state_whatever_the_spacing(
    tmp_path: Path, job_json: bytes, filed: bool
) -> None:
    (tmp_path / JOB_FILE).write_bytes(job_json)
    assert _finished_fast(tmp_path) is filed
    (tmp_path / PROMPT_FILE).write_text("still here: not filed\n")
    assert _finished_fast(tmp_path) is False
