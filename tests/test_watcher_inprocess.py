"""The watcher's loop in-process: admission, scheduling, retries, timeouts, takeover.

Each test drives :meth:`Watcher.turn` over a real root with a fake clock and
a fake executor (tests/inprocess.py): no processes, no sleeps, no wall-clock
waits. Assertions are on what a person sees (job.json, events.jsonl,
processed/) and on the calls the watcher made to its executor.
"""

from __future__ import annotations

from datetime import timedelta

import psutil
import pytest

from hopper.core.states import JobState, Reason
from hopper.store.jobfile import ABORT_FILE, read_record
from hopper.store.layout import Layout
from hopper.store.markers import pause_path, request_priority
from hopper.store.takeover import effective_owner, try_take
from hopper.watcher import Watcher
from inprocess import (
    FakeClock,
    FakeExecutor,
    exit_status,
    in_process,
    leases,
    names,
    started_job,
    submit,
    turns,
)

BASH = '+++\nagent = "bash"\n{}+++\necho hi\n'


def job(**options: str | int) -> str:
    """A bash prompt with these front-matter keys (strings quoted, numbers bare)."""
    lines = "".join(
        f'{k} = "{v}"\n' if isinstance(v, str) and not v.startswith("[") else f"{k} = {v}\n"
        for k, v in options.items()
    )
    return BASH.format(lines)


def by_name(watcher: Watcher, fake: FakeExecutor, name: str) -> str:
    """The id of the started or queued job called ``name``."""
    ids = [*fake.started, *watcher.queued]
    (found,) = {i for i in ids if read_record(watcher.layout.run_dir(i)).name == name}
    return found


def state(layout: Layout, job_id: str) -> tuple[JobState, Reason | None]:
    record = read_record(layout.run_dir(job_id))
    return record.state, record.reason


def end(watcher: Watcher, fake: FakeExecutor, clock: FakeClock, job_id: str, code: int = 0) -> None:
    """The executor reports the job exited with ``code``; one turn handles it."""
    fake.exits[job_id] = exit_status(clock, code)
    clock.advance(1.0)
    watcher.turn()
    assert job_id not in watcher.runner.running_ids()


# -- admission --------------------------------------------------------------------------
def test_a_dropped_prompt_is_claimed_admitted_and_started_once(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout)
    job_id = started_job(layout, watcher, fake, clock)
    for _ in range(5):
        clock.advance(1.0)
        watcher.turn()
    assert fake.asked == fake.started == [job_id]
    assert list(layout.inbox.iterdir()) == []  # the prompt moved into its run directory
    assert (layout.run_dir(job_id) / "prompt.md").read_text().endswith("echo hi\n")
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.agent, record.owner) == (
        JobState.RUNNING,
        "bash",
        watcher.ident.owner,
    )
    assert record.started_at == clock.now() - timedelta(seconds=5)
    assert names(layout, job_id)[:3] == ["claimed", "queued", "started"]
    assert fake.launches[job_id].prep.argv[0].endswith("bash")


def test_a_bad_prompt_is_filed_bad_prompt_and_never_reaches_the_executor(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout)
    submit(layout, clock, "bad", job(priority="high"))
    turns(watcher, clock, lambda: not list(layout.inbox.iterdir()))
    for _ in range(3):
        clock.advance(1.0)
        watcher.turn()
    (run_dir,) = layout.runs.iterdir()
    record = read_record(run_dir)
    assert (record.state, record.reason) == (JobState.FAILED, Reason.BAD_PROMPT)
    assert "bad.prompt.md" in record.detail and "priority" in record.detail
    assert record.processed_path and (layout.root / record.processed_path).is_file()
    assert names(layout, record.id).count("rejected") == 1
    assert fake.asked == [] and watcher.queued == {} and watcher.idle()


# -- scheduling -------------------------------------------------------------------------
def test_max_parallel_holds_the_second_job_queued_until_the_first_ends(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    submit(layout, clock, "a", job())
    submit(layout, clock, "b", job())
    turns(watcher, clock, lambda: len(watcher.queued) + len(fake.started) == 2)
    for _ in range(5):
        clock.advance(1.0)
        watcher.turn()
    (first,) = fake.started
    (second,) = watcher.queued
    assert state(layout, second) == (JobState.QUEUED, None)
    end(watcher, fake, clock, first)  # the freed slot is filled in the same turn
    assert fake.started == [first, second]
    assert state(layout, first) == (JobState.SUCCEEDED, Reason.COMPLETED)


def test_front_matter_priority_orders_the_starts(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    submit(layout, clock, "a-low", job())
    submit(layout, clock, "b-mid", job(priority=5))
    submit(layout, clock, "c-high", job(priority=9))
    turns(watcher, clock, lambda: bool(fake.started))
    for _ in range(2):
        end(watcher, fake, clock, fake.started[-1])
    order = [read_record(layout.run_dir(i)).name for i in fake.started]
    assert order == ["c-high", "b-mid", "a-low"]  # not claim order


def test_a_priority_marker_moves_a_queued_job_ahead(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    blocker = started_job(layout, watcher, fake, clock)
    submit(layout, clock, "a-first", job())
    submit(layout, clock, "b-second", job())
    turns(watcher, clock, lambda: len(watcher.queued) == 2)
    second = by_name(watcher, fake, "b-second")
    request_priority(layout.run_dir(second), 10)
    turns(watcher, clock, lambda: "priority_changed" in names(layout, second))
    assert read_record(layout.run_dir(second)).priority == 10
    assert not (layout.run_dir(second) / "PRIORITY").exists()
    end(watcher, fake, clock, blocker)
    assert fake.started == [blocker, second]


def test_after_waits_for_its_dependency_to_succeed(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout)
    submit(layout, clock, "base", job())
    submit(layout, clock, "child", job(after='["base"]'))
    turns(watcher, clock, lambda: bool(fake.started))
    base = by_name(watcher, fake, "base")
    child = by_name(watcher, fake, "child")
    for _ in range(5):  # slots are free; only `after` holds it
        clock.advance(1.0)
        watcher.turn()
    assert fake.started == [base] and child in watcher.queued
    end(watcher, fake, clock, base)
    turns(watcher, clock, lambda: child in fake.started)
    assert state(layout, child) == (JobState.RUNNING, None)


def test_a_failed_dependency_files_the_dependant_without_starting_it(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout)
    submit(layout, clock, "base", job())
    submit(layout, clock, "child", job(after='["base"]'))
    turns(watcher, clock, lambda: bool(fake.started))
    base = by_name(watcher, fake, "base")
    child = by_name(watcher, fake, "child")
    end(watcher, fake, clock, base, code=3)
    turns(watcher, clock, lambda: child not in watcher.queued)
    assert state(layout, base) == (JobState.FAILED, Reason.EXIT_NONZERO)
    record = read_record(layout.run_dir(child))
    assert (record.state, record.reason) == (JobState.FAILED, Reason.DEPENDENCY_FAILED)
    assert f"base ({base}, failed)" in record.detail
    assert record.processed_path and (layout.root / record.processed_path).is_file()
    assert fake.asked == [base]


def test_a_sessions_jobs_run_one_at_a_time_in_claim_order(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout)
    submit(layout, clock, "s-0", job(session="s"))
    turns(watcher, clock, lambda: bool(fake.started))
    (zero,) = fake.started
    for name in ("zz-first", "aa-second"):  # claimed in this order, which names do not sort
        submit(layout, clock, name, job(session="s"))
        turns(watcher, clock, lambda: not list(layout.inbox.iterdir()))
    submit(layout, clock, "other", job())  # no session: free to start
    turns(watcher, clock, lambda: len(fake.started) == 2)
    for _ in range(3):
        clock.advance(1.0)
        watcher.turn()
    first = by_name(watcher, fake, "zz-first")
    second = by_name(watcher, fake, "aa-second")
    assert fake.started == [zero, by_name(watcher, fake, "other")]
    end(watcher, fake, clock, zero)
    turns(watcher, clock, lambda: first in fake.started)
    for _ in range(3):
        clock.advance(1.0)
        watcher.turn()
    assert second in watcher.queued and second not in fake.asked
    end(watcher, fake, clock, first)
    turns(watcher, clock, lambda: second in fake.started)


def test_a_pause_marker_holds_starts_until_removed(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout)
    pause_path(layout).touch()
    submit(layout, clock, "held", job())
    turns(watcher, clock, lambda: bool(watcher.queued))
    for _ in range(5):
        clock.advance(1.0)
        watcher.turn()
    (held,) = watcher.queued
    assert fake.asked == [] and state(layout, held) == (JobState.QUEUED, None)
    assert watcher.idle()  # paused: drained, nothing left to do
    pause_path(layout).unlink()
    turns(watcher, clock, lambda: fake.started == [held])


# -- retries, deferrals, timeouts ---------------------------------------------------------
def test_a_retry_backs_off_by_the_configured_delay_on_the_clock(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout, retry_backoff=30)
    submit(layout, clock, "flaky", job(retries=2))
    turns(watcher, clock, lambda: bool(fake.started))
    (job_id,) = fake.started
    end(watcher, fake, clock, job_id, code=3)
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.attempt) == (JobState.QUEUED, 2)
    assert record.not_before == clock.now() + timedelta(seconds=30)
    for _ in range(29):  # 29 s: still backing off
        clock.advance(1.0)
        watcher.turn()
    assert fake.started == [job_id]
    turns(watcher, clock, lambda: len(fake.started) == 2, n=2)
    end(watcher, fake, clock, job_id, code=3)  # the second backoff doubles
    again = read_record(layout.run_dir(job_id))
    assert again.attempt == 3 and again.not_before == clock.now() + timedelta(seconds=60)
    delays = [e for e in names(layout, job_id) if e == "retry_scheduled"]
    assert len(delays) == 2 and "finalized" not in names(layout, job_id)


def test_a_deferred_start_goes_back_to_the_queue_and_is_tried_again_later(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout)
    fake.defer, fake.defer_for = 1, 20.0
    submit(layout, clock, "later", job())
    turns(watcher, clock, lambda: bool(fake.asked))
    (job_id,) = fake.asked
    assert fake.started == [] and leases(layout) == []  # its slot was given back
    record = read_record(layout.run_dir(job_id))
    assert record.state is JobState.QUEUED and "submit_deferred" in names(layout, job_id)
    for _ in range(18):
        clock.advance(1.0)
        watcher.turn()
    assert fake.asked == [job_id]  # not before its not_before
    turns(watcher, clock, lambda: fake.started == [job_id], n=3)
    assert fake.asked == [job_id, job_id]
    assert read_record(layout.run_dir(job_id)).attempt == 1  # a deferral is not an attempt


def test_a_timeout_cancels_through_the_executor_once_and_the_job_ends_timed_out(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout)
    submit(layout, clock, "slow", job(timeout="10s"))
    turns(watcher, clock, lambda: bool(fake.started))
    (job_id,) = fake.started
    for _ in range(9):
        clock.advance(1.0)
        watcher.turn()
    assert fake.cancelled == []
    turns(watcher, clock, lambda: bool(fake.cancelled), n=2)
    for _ in range(3):  # reported on every poll; asked once
        clock.advance(1.0)
        watcher.turn()
    assert fake.cancelled == [(job_id, Reason.TIMEOUT)]
    assert read_record(layout.run_dir(job_id)).stop_requested is Reason.TIMEOUT
    assert names(layout, job_id).count("stop_requested") == 1
    fake.exits[job_id] = exit_status(clock, None, 15)
    turns(watcher, clock, lambda: not watcher.runner.running_count())
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.reason) == (JobState.FAILED, Reason.TIMEOUT)
    assert record.signal == 15


# -- markers, heartbeats, takeover, restart ---------------------------------------------
def test_abort_of_a_queued_job_files_it_aborted_without_starting_it(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    blocker = started_job(layout, watcher, fake, clock)
    submit(layout, clock, "victim", job())
    turns(watcher, clock, lambda: bool(watcher.queued))
    (victim,) = watcher.queued
    (layout.run_dir(victim) / ABORT_FILE).touch()
    turns(watcher, clock, lambda: not watcher.queued)
    record = read_record(layout.run_dir(victim))
    assert (record.state, record.reason) == (JobState.ABORTED, Reason.ABORTED)
    assert record.processed_path and (layout.root / record.processed_path).is_file()
    assert names(layout, victim).count("abort_requested") == 1
    end(watcher, fake, clock, blocker)
    for _ in range(3):
        clock.advance(1.0)
        watcher.turn()
    assert fake.asked == [blocker] and fake.cancelled == []


def test_a_heartbeat_is_written_on_the_configured_interval(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout, heartbeat_interval=10)
    job_id = started_job(layout, watcher, fake, clock)
    started_at = read_record(layout.run_dir(job_id)).heartbeat_at
    assert started_at == clock.now()
    for _ in range(9):
        clock.advance(1.0)
        watcher.turn()
    assert read_record(layout.run_dir(job_id)).heartbeat_at == started_at
    clock.advance(1.0)
    watcher.turn()
    assert read_record(layout.run_dir(job_id)).heartbeat_at == clock.now()
    assert clock.now() - started_at == timedelta(seconds=10)
    for _ in range(10):  # and again, one interval later
        clock.advance(1.0)
        watcher.turn()
    assert read_record(layout.run_dir(job_id)).heartbeat_at == started_at + timedelta(seconds=20)
    assert "heartbeat" not in names(layout, job_id)  # job.json only: no event per beat


def test_a_queued_job_another_watcher_took_over_is_never_started_here(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    blocker = started_job(layout, watcher, fake, clock)
    submit(layout, clock, "theirs", job())
    turns(watcher, clock, lambda: bool(watcher.queued))
    (theirs,) = watcher.queued
    run_dir = layout.run_dir(theirs)
    record = read_record(run_dir)
    assert record.owner == watcher.ident.owner
    _, chain = effective_owner(run_dir, record.owner)
    assert try_take(run_dir, chain, "other-host:1:1.0")
    end(watcher, fake, clock, blocker)  # a slot frees: it would start now
    for _ in range(3):
        clock.advance(1.0)
        watcher.turn()
    assert fake.asked == [blocker] and theirs not in watcher.queued
    assert state(layout, theirs) == (JobState.QUEUED, None)  # the new owner's to run
    assert names(layout, theirs).count("started") == 0


def test_a_start_that_raises_is_rejected_and_the_loop_goes_on(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout)
    fake.fail.append(RuntimeError("the executor broke"))
    submit(layout, clock, "doomed", job())
    turns(watcher, clock, lambda: bool(fake.asked))
    (doomed,) = fake.asked
    record = read_record(layout.run_dir(doomed))
    assert (record.state, record.reason) == (JobState.FAILED, Reason.SPAWN_FAILED)
    assert "the executor broke" in record.detail and "a bug in hopper" in record.detail
    assert record.processed_path and (layout.root / record.processed_path).is_file()
    assert leases(layout) == []
    submit(layout, clock, "fine", job())
    turns(watcher, clock, lambda: bool(fake.started))
    assert state(layout, fake.started[0]) == (JobState.RUNNING, None)


def test_a_restarted_watcher_adopts_a_running_job_through_its_executor(layout: Layout) -> None:
    first, fake, clock = in_process(layout)
    job_id = started_job(layout, first, fake, clock)
    clock.advance(5.0)  # the first watcher is gone; its job's supervisor (this process) is not
    # The same owner string (host, pid, start), as after a SIGHUP re-exec.
    second, fake2, _ = in_process(layout, clock)
    second.turn()
    assert fake2.adopted == [job_id] and fake2.asked == []
    assert job_id in second.runner.running_ids()
    assert names(layout, job_id).count("adopted") == 1
    fake2.exits[job_id] = exit_status(clock, 0)
    turns(second, clock, lambda: not second.runner.running_count())
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED)
    assert names(layout, job_id).count("finalized") == 1
    assert leases(layout) == [] and second.idle()


def test_a_bash_jobs_own_agent_state_file_never_sets_agent_fields(layout: Layout) -> None:
    """agent.state.json is the driver's; in a bash job's run directory it is the
    job's own file, and a heartbeat must not fold it into the record."""
    watcher, fake, clock = in_process(layout, heartbeat_interval=1)
    job_id = started_job(layout, watcher, fake, clock)
    state_file = layout.run_dir(job_id) / "agent.state.json"
    state_file.write_text(
        '{"agent_state": "api_error", "error_kind": "auth", "detail": "forged by the job"}\n'
    )
    before = read_record(layout.run_dir(job_id)).heartbeat_at
    for _ in range(3):
        clock.advance(1.0)
        watcher.turn()
    record = read_record(layout.run_dir(job_id))
    assert record.heartbeat_at is not None and before is not None
    assert record.heartbeat_at > before  # the heartbeats ran
    assert record.agent_state is None and record.agent_detail is None
    assert record.error_kind is None


def test_a_restart_lists_the_process_table_once_for_all_queued_jobs_it_takes(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery ends a crashed watcher's stale supervisors before it takes each
    queued job; the processes are listed once per pass, not once per job (12,000
    orphans took minutes with a pass over /proc each)."""
    first, fake, clock = in_process(layout, max_parallel=1)
    started_job(layout, first, fake, clock)
    for n in range(6):
        submit(layout, clock, f"q{n}", job())
    turns(first, clock, lambda: len(first.queued) == 6)
    listed: list[int] = []
    real = psutil.process_iter

    def counting(*args: object, **kwargs: object) -> object:
        listed.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(psutil, "process_iter", counting)
    clock.advance(5.0)
    second, _, _ = in_process(layout, clock, max_parallel=1)
    second.turn()
    assert len(second.queued) == 6
    assert len(listed) <= 1
