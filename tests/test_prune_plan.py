"""core/prune.py: which finished jobs ``hopper prune`` takes, and why it keeps the others."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hopper.core.prune import (
    KEPT_ACTIVE,
    KEPT_DEPENDENCY,
    KEPT_FINALIZING,
    KEPT_RECENT,
    KEPT_STATE,
    KEPT_UNREADABLE,
    plan_prune,
)
from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
DAY = 86400.0


def job(
    name: str,
    state: JobState,
    days_ago: float,
    *,
    after: list[str] | None = None,
    finished: bool = True,
) -> JobRecord:
    created = NOW - timedelta(days=days_ago, hours=1)
    terminal = state in (JobState.SUCCEEDED, JobState.FAILED, JobState.ABORTED)
    return JobRecord(
        id=f"{created:%Y%m%d-%H%M%S}-000-{name}-0001",
        name=name,
        state=state,
        reason={
            JobState.SUCCEEDED: Reason.COMPLETED,
            JobState.FAILED: Reason.EXIT_NONZERO,
            JobState.ABORTED: Reason.ABORTED,
        }.get(state),
        agent="bash",
        host="h",
        inbox_path=f"inbox/{name}.prompt.md",
        created_at=created,
        finished_at=NOW - timedelta(days=days_ago) if terminal and finished else None,
        after=after or [],
    )


def why(plan_kept: list[object], job_id: str) -> str:
    return next(k.why for k in plan_kept if k.id == job_id)  # type: ignore[attr-defined]


def test_only_finished_jobs_past_the_age_are_pruned() -> None:
    old_ok = job("old-ok", JobState.SUCCEEDED, 40)
    old_bad = job("old-bad", JobState.FAILED, 31)
    old_stop = job("old-stop", JobState.ABORTED, 35)
    young = job("young", JobState.FAILED, 29.9)
    running = job("busy", JobState.RUNNING, 60)
    queued = job("waits", JobState.QUEUED, 60)
    plan = plan_prune(
        [old_ok, old_bad, old_stop, young, running, queued], now=NOW, older_than=30 * DAY
    )
    assert [r.id for r in plan.prune] == [old_ok.id, old_bad.id, old_stop.id]
    assert why(plan.kept, young.id) == KEPT_RECENT
    assert why(plan.kept, running.id) == KEPT_ACTIVE
    assert why(plan.kept, queued.id) == KEPT_ACTIVE
    assert plan.kept_counts() == {KEPT_RECENT: 1, KEPT_ACTIVE: 2}


def test_age_is_counted_from_the_end_else_from_the_claim() -> None:
    # created 41 days ago, ended 1 day ago: recent
    late = job("late", JobState.SUCCEEDED, 1).model_copy(
        update={"created_at": NOW - timedelta(days=41)}
    )
    never_started = job("bad-prompt", JobState.FAILED, 40, finished=False)
    plan = plan_prune([late, never_started], now=NOW, older_than=30 * DAY)
    assert [r.id for r in plan.prune] == [never_started.id]
    assert why(plan.kept, late.id) == KEPT_RECENT


def test_zero_age_takes_every_finished_job_and_no_active_one() -> None:
    done = job("done", JobState.SUCCEEDED, 0)
    running = job("busy", JobState.RUNNING, 0)
    plan = plan_prune([done, running], now=NOW, older_than=0)
    assert [r.id for r in plan.prune] == [done.id]


def test_states_filter_keeps_the_other_finished_states() -> None:
    ok = job("ok", JobState.SUCCEEDED, 40)
    bad = job("bad", JobState.FAILED, 40)
    stop = job("stop", JobState.ABORTED, 40)
    plan = plan_prune(
        [ok, bad, stop], now=NOW, older_than=DAY, states={JobState.FAILED, JobState.ABORTED}
    )
    assert [r.id for r in plan.prune] == [bad.id, stop.id]
    assert why(plan.kept, ok.id) == KEPT_STATE


def test_a_terminal_job_with_its_prompt_in_the_run_dir_is_being_finalized() -> None:
    mid = job("mid", JobState.FAILED, 40)
    plan = plan_prune([mid], now=NOW, older_than=DAY, unfiled={mid.id})
    assert plan.prune == []
    assert why(plan.kept, mid.id) == KEPT_FINALIZING


def test_unreadable_run_dirs_are_kept_and_said() -> None:
    plan = plan_prune([], now=NOW, older_than=0, unreadable={"20261001-x": "not JSON at line 1"})
    assert plan.prune == []
    (kept,) = plan.kept
    assert (kept.id, kept.why, kept.detail) == ("20261001-x", KEPT_UNREADABLE, "not JSON at line 1")


def test_a_job_a_queued_job_waits_on_is_kept_by_name_or_id() -> None:
    by_name = job("build", JobState.SUCCEEDED, 40)
    by_id = job("test", JobState.SUCCEEDED, 40)
    free = job("other", JobState.SUCCEEDED, 40)
    waiter = job("deploy", JobState.QUEUED, 0, after=["build", by_id.id])
    gone_waiter = job("old-deploy", JobState.FAILED, 40, after=["other"])  # not queued
    plan = plan_prune([by_name, by_id, free, waiter, gone_waiter], now=NOW, older_than=DAY)
    assert {r.id for r in plan.prune} == {free.id, gone_waiter.id}
    assert why(plan.kept, by_name.id) == KEPT_DEPENDENCY
    assert why(plan.kept, by_id.id) == KEPT_DEPENDENCY
    detail = next(k.detail for k in plan.kept if k.id == by_name.id)
    assert waiter.id in detail
