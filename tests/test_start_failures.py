"""One policy for a start that fails, in-process (fake clock, fake executor).

A start can fail before its job ever runs: the run directory deleted under a
queued job, a write refused, the fork refused, the ``running`` record not
committed. What each costs is one policy (pending_starts.py, core/retry.py),
never the loop: a cause that passes (a full disk, the process or file limit,
a lost fork server) leaves the job queued and its start tried again after a
backoff, costing none of its ``retries``; a cause that will not pass fails it
``spawn_failed``; a job whose run directory vanished is filed ``lost`` in a
fresh one at once. Its slot and leases are freed whichever it is.
"""

from __future__ import annotations

import errno
import shutil

import pytest

from hopper.core.record import ExitStatus
from hopper.core.recovery import Action, decide
from hopper.core.retry import START_RETRY_MAX, StartCause, start_retry
from hopper.core.states import JobState, Reason
from hopper.executors.protocol import Launch, Start
from hopper.proc.forkclient import Lost, SpawnFailed
from hopper.reconcile import snapshot
from hopper.store import ledger
from hopper.store.jobfile import EXIT_FILE, read_events, read_record
from hopper.store.layout import Layout
from inprocess import in_process, leases, names, started_job, submit, turns

BASH = '+++\nagent = "bash"\n+++\necho hi\n'


def test_a_start_whose_run_directory_vanishes_is_filed_lost_and_its_slot_freed(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    real = fake.start

    def deleted_under_it(launch: Launch) -> Start:
        shutil.rmtree(launch.run_dir)  # by another job, as the start begins
        return real(launch)  # its running record has nowhere to go

    monkeypatch.setattr(fake, "start", deleted_under_it)
    submit(layout, clock, "victim", BASH)
    turns(watcher, clock, lambda: bool(fake.asked))
    (victim,) = fake.asked
    record = read_record(layout.run_dir(victim))  # a fresh run directory
    assert (record.state, record.reason) == (JobState.FAILED, Reason.LOST)
    assert "deleted while it was queued" in (record.detail or "")
    assert names(layout, victim).count("finalized") == 1
    assert watcher.runner.busy == 0 and leases(layout) == []
    monkeypatch.setattr(fake, "start", real)
    submit(layout, clock, "next", BASH)
    turns(watcher, clock, lambda: bool(fake.started))  # the one slot is free at once


def test_a_queued_job_whose_run_directory_vanishes_is_filed_lost_by_the_sweep(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    blocker = started_job(layout, watcher, fake, clock)
    submit(layout, clock, "victim", BASH)
    turns(watcher, clock, lambda: bool(watcher.queued))
    (victim,) = watcher.queued
    shutil.rmtree(layout.run_dir(victim))
    turns(watcher, clock, lambda: not watcher.queued, n=3)  # within a sweep (1 s)
    record = read_record(layout.run_dir(victim))
    assert (record.state, record.reason) == (JobState.FAILED, Reason.LOST)
    assert "deleted while it was queued" in (record.detail or "")
    assert fake.asked == [blocker]  # never started
    assert blocker in watcher.runner.running_ids()


def start_failures(layout: Layout, job_id: str) -> list[dict[str, object]]:
    return [e for e in read_events(layout.run_dir(job_id)) if e["event"] == "start_failed"]


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.EAGAIN, "Resource temporarily unavailable"),  # fork at the process limit
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EMFILE, "Too many open files"),
        SpawnFailed(errno.EAGAIN, "cannot start the supervisor: Resource temporarily unavailable"),
        Lost("it did not answer within 10s"),  # the fork server
    ],
    ids=["EAGAIN", "ENOSPC", "EMFILE", "SpawnFailed-EAGAIN", "lost-fork-server"],
)
def test_a_start_that_fails_for_a_passing_cause_stays_queued_and_is_tried_again(
    layout: Layout, error: Exception
) -> None:
    """Was: filed failed/spawn_failed at the first refusal, never retried."""
    watcher, fake, clock = in_process(layout, max_parallel=1, retry_backoff="2s")
    fake.fail.extend([error, error])
    submit(layout, clock, "job", BASH)
    turns(watcher, clock, lambda: bool(fake.asked))
    (job_id,) = set(fake.asked)
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.reason, record.attempt) == (JobState.QUEUED, None, 1)
    assert "could not start (try 1)" in (record.detail or "") and str(error) in (
        record.detail or ""
    )
    assert watcher.runner.busy == 0 and leases(layout) == []  # its slot is free meanwhile
    asked = len(fake.asked)
    clock.advance(1.9)  # the first wait: retry_backoff
    watcher.turn()
    assert len(fake.asked) == asked  # not before its time
    turns(watcher, clock, lambda: len(fake.asked) > asked)  # the second try fails too
    turns(watcher, clock, lambda: bool(fake.started), n=6)  # the third, 4 s later, runs
    assert fake.asked == [job_id] * 3
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.attempt) == (JobState.RUNNING, 1)  # no retry was spent
    tries = start_failures(layout, job_id)
    assert [(e["tries"], e["delay_seconds"]) for e in tries] == [(1, 2.0), (2, 4.0)]
    assert all(e["why"] == str(error) for e in tries)


@pytest.mark.parametrize(
    "error",
    [
        FileNotFoundError(errno.ENOENT, "No such file or directory", "bash"),
        PermissionError(errno.EACCES, "Permission denied"),
        RuntimeError("the executor broke"),
    ],
    ids=["ENOENT", "EACCES", "bug"],
)
def test_a_start_that_fails_for_a_cause_that_will_not_pass_is_filed_spawn_failed(
    layout: Layout, error: Exception
) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    fake.fail.append(error)
    submit(layout, clock, "job", BASH)
    turns(watcher, clock, lambda: bool(fake.asked))
    (job_id,) = fake.asked
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.reason) == (JobState.FAILED, Reason.SPAWN_FAILED)
    assert (record.detail or "").startswith(f"could not start: {error}")
    assert start_failures(layout, job_id) == []
    assert watcher.runner.busy == 0 and leases(layout) == []


def test_a_start_that_fails_for_an_unseen_cause_is_tried_three_times_then_failed(
    layout: Layout,
) -> None:
    """A supervisor that died before its pid line: its cause (the process limit,
    a bad spec) is not seen, so its start is tried a few times, not for ever."""
    watcher, fake, clock = in_process(layout, max_parallel=1)
    silent = SpawnFailed(0, "the supervisor broke the handshake (said b'')")
    fake.fail.extend([silent] * 3)
    submit(layout, clock, "job", BASH)
    turns(watcher, clock, lambda: len(fake.asked) == 3, n=20)
    (job_id,) = set(fake.asked)
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.reason) == (JobState.FAILED, Reason.SPAWN_FAILED)
    assert "could not start (try 3): the supervisor broke the handshake" in (record.detail or "")
    assert len(start_failures(layout, job_id)) == 2
    assert watcher.runner.busy == 0 and leases(layout) == []


def test_a_start_failure_on_a_disk_too_full_to_record_it_still_leaves_the_job_queued(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    full = OSError(errno.ENOSPC, "No space left on device")
    fake.fail.append(full)
    submit(layout, clock, "job", BASH)
    turns(watcher, clock, lambda: bool(fake.asked))  # claimed and tried while the disk had room
    real = ledger.commit_batch

    def no_room(entries: list[ledger.Entry], *, crash: str | None = None) -> list[ledger.Failed]:
        return [ledger.Failed(e, full) for e in entries]

    monkeypatch.setattr(ledger, "commit_batch", no_room)
    turns(watcher, clock, lambda: len(fake.asked) >= 2)  # the fake's own writes fail too
    (job_id,) = set(fake.asked)
    assert job_id in watcher.queued or watcher.runner.has_requeued()  # kept, in memory
    record = read_record(layout.run_dir(job_id))  # the first try's record: no later one fit
    assert record.state is JobState.QUEUED and "(try 1)" in (record.detail or "")
    monkeypatch.setattr(ledger, "commit_batch", real)  # room again
    turns(watcher, clock, lambda: bool(fake.started))
    assert read_record(layout.run_dir(job_id)).state is JobState.RUNNING


def test_the_wait_between_tries_of_a_start_doubles_and_is_capped() -> None:
    full = StartCause(errno.ENOSPC)
    assert [start_retry(full, n, 2.0) for n in (1, 2, 3)] == [2.0, 4.0, 8.0]
    assert start_retry(full, 50, 2.0) == START_RETRY_MAX  # tried for as long as it lasts
    assert start_retry(full, 1, 0.0) == 0.5  # never at once: an abandoned start ends first
    assert start_retry(StartCause(None, lost_server=True), 1, 2.0) == 2.0
    assert start_retry(StartCause(errno.ENOENT), 1, 2.0) is None
    assert start_retry(StartCause(None, bug=True), 1, 2.0) is None
    unseen = StartCause(0)
    assert [start_retry(unseen, n, 2.0) for n in (1, 2, 3)] == [2.0, 4.0, None]


def test_recovery_never_reads_an_abandoned_starts_exit_record_as_the_running_ones(
    layout: Layout,
) -> None:
    """A start abandoned (its running record not committed) and tried again leaves
    the first supervisor's started=false exit.json beside the second's running job:
    recovery must adopt that job, not requeue it (it would run twice)."""
    watcher, fake, clock = in_process(layout)
    job_id = started_job(layout, watcher, fake, clock)
    run_dir = layout.run_dir(job_id)
    mine = read_record(run_dir).supervisor_pid
    assert mine is not None
    for writer, seen in ((mine + 1, False), (mine, True)):
        status = ExitStatus(started=False, supervisor_pid=writer, finished_at=clock.now())
        (run_dir / EXIT_FILE).write_text(status.model_dump_json())
        snap = snapshot(run_dir, "h", watcher.ident.owner, clock.time())  # after a restart
        assert (snap.exit is not None) is seen
        assert decide(snap) is (Action.REQUEUE if seen else Action.ADOPT)
