"""The ends one poll reports are filed with one group commit (issue 16).

Every terminal record of the batch is durable before any prompt moves to
processed/; an end whose record cannot be written is kept running and tried
again, without holding back the others. In-process, fake executor and clock.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from datetime import datetime

import pytest

from hopper.core.record import JobRecord
from hopper.core.states import JobState, Reason
from hopper.intake import Intake, Terminal
from hopper.store import ledger
from hopper.store.jobfile import ABORT_FILE, read_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher
from inprocess import FakeClock, FakeExecutor, exit_status, in_process, names, submit, turns


def start_three(layout: Layout) -> tuple[Watcher, FakeExecutor, FakeClock, list[str]]:
    watcher, fake, clock = in_process(layout, max_parallel=4)
    for i in range(3):
        submit(layout, clock, f"job{i}", '+++\nagent = "bash"\n+++\ntrue\n')
    turns(watcher, clock, lambda: len(fake.started) == 3)
    return watcher, fake, clock, list(fake.started)


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, str]]]:
    """(job id, state) of each entry of each ledger batch, one list per batch."""
    seen: list[list[tuple[str, str]]] = []
    real = ledger.commit_batch

    def spy(entries: list[ledger.Entry], *, crash: str | None = None) -> list[ledger.Failed]:
        seen.append([(e.step.record.id, str(e.step.record.state)) for e in entries])
        return real(entries, crash=crash)

    monkeypatch.setattr(ledger, "commit_batch", spy)
    return seen


def test_the_ends_of_one_poll_share_one_commit_then_each_is_finalized(
    layout: Layout, batches: list[list[tuple[str, str]]]
) -> None:
    watcher, fake, clock, jobs = start_three(layout)
    batches.clear()
    for job_id in jobs:
        fake.exits[job_id] = exit_status(clock, 0)
    watcher.turn()
    terminal = [b for b in batches if any(state == "succeeded" for _, state in b)]
    assert terminal == [[(j, "succeeded") for j in jobs]]  # one group commit
    for job_id in jobs:
        record = read_record(layout.run_dir(job_id))
        assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED)
        assert record.processed_path and (layout.root / record.processed_path).exists()
        assert names(layout, job_id).count("finalized") == 1
    assert watcher.runner.running_count() == 0


def test_an_end_that_cannot_be_filed_is_kept_and_does_not_hold_back_the_others(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, fake, clock, jobs = start_three(layout)
    victim = jobs[1]
    real = ledger.commit_batch
    refused: list[str] = []

    def full(entries: list[ledger.Entry], *, crash: str | None = None) -> list[ledger.Failed]:
        bad = [e for e in entries if e.step.record.id == victim and not refused]
        if bad:
            refused.append(victim)
        error = OSError(errno.ENOSPC, "No space left on device")
        failed = real([e for e in entries if e not in bad], crash=crash)
        return [*failed, *(ledger.Failed(e, error) for e in bad)]

    monkeypatch.setattr(ledger, "commit_batch", full)
    for job_id in jobs:
        fake.exits[job_id] = exit_status(clock, 0)
    watcher.turn()
    assert refused == [victim]
    assert set(watcher.runner.running_ids()) == {victim}  # kept, tried again
    assert read_record(layout.run_dir(victim)).state is JobState.RUNNING
    for job_id in (jobs[0], jobs[2]):
        assert read_record(layout.run_dir(job_id)).state is JobState.SUCCEEDED
    fake.exits[victim] = exit_status(clock, 0)  # reported again at the next look
    turns(watcher, clock, lambda: not watcher.runner.running_count())
    assert read_record(layout.run_dir(victim)).state is JobState.SUCCEEDED
    assert names(layout, victim).count("finalized") == 1


def test_every_way_a_job_ends_is_filed_through_one_typed_path(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reject at claim, an abort while queued and a poll's exits all reach
    Intake.file_terminals: a single end is a batch of one, a poll's ends one batch."""
    calls: list[list[tuple[str, Reason]]] = []
    real = Intake.file_terminals

    def spy(self: Intake, ends: Sequence[Terminal], now: datetime) -> list[JobRecord | OSError]:
        calls.append([(t.record.id, t.reason) for t in ends])
        return real(self, ends, now)

    monkeypatch.setattr(Intake, "file_terminals", spy)
    watcher, fake, clock, jobs = start_three(layout)
    assert calls == []
    submit(layout, clock, "bad", '+++\nagent = "nobody"\n+++\nx\n')  # refused at claim
    turns(watcher, clock, lambda: bool(calls))
    assert [[reason for _, reason in call] for call in calls] == [[Reason.UNKNOWN_AGENT]]
    (layout.root / "PAUSE").touch()  # nothing more starts: the next job stays queued
    submit(layout, clock, "waiting", '+++\nagent = "bash"\n+++\ntrue\n')
    turns(watcher, clock, lambda: bool(watcher.queued))
    (waiting,) = watcher.queued
    calls.clear()
    (layout.run_dir(waiting) / ABORT_FILE).touch()
    turns(watcher, clock, lambda: bool(calls))
    assert calls == [[(waiting, Reason.ABORTED)]]
    for job_id in jobs:
        fake.exits[job_id] = exit_status(clock, 0)
    calls.clear()
    watcher.turn()
    assert calls == [[(j, Reason.COMPLETED) for j in jobs]]
