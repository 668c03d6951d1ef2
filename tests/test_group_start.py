"""Starts without a blocking handshake, committed together per turn (issue 16).

An executor may hand back a :class:`Starting` instead of waiting for its
job's pid: the loop selects on it, commits the running records of every
start that reported in one group commit, and releases each job only after
that commit. In-process, with a fake executor and a fake clock.
"""

from __future__ import annotations

import errno
import os
import time
import tomllib
from dataclasses import dataclass, field

import pytest

from conftest import FAST_CONFIG
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.lifecycle import Started, Step
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.states import JobState
from hopper.executors.protocol import Deferred, Ended, Launch, Start, Starting
from hopper.running import Running
from hopper.store import ledger
from hopper.store.jobfile import EXIT_FILE, read_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher
from inprocess import FakeClock, FakeExecutor, submit


class FakeStart(Starting):
    """A start whose report is readable once the test writes to its pipe."""

    def __init__(self, fake: AsyncFake, launch: Launch) -> None:
        super().__init__(launch.record, launch.run_dir, time.monotonic() + 3600)
        self.fake, self.launch = fake, launch
        self.r, self.w = os.pipe()

    def fileno(self) -> int:
        return self.r

    def report(self) -> Step | Ended:
        os.read(self.r, 1)
        clock = self.fake.clock
        fact = Started(clock.now(), self.fake.owner, str(self.launch.workdir), "bash", 1)
        return lifecycle.started(self.record, fact)

    def release(self, record: JobRecord) -> Running:
        # Released only once its record is durable: what the job would see.
        self.fake.released.append((record.id, read_record(self.run_dir).state))
        return Running(record, self.run_dir, self.fake.clock.monotonic() + 3600)

    def abandon(self) -> None:
        self.fake.abandoned.append(self.record.id)


@dataclass
class AsyncFake(FakeExecutor):
    pending: dict[str, FakeStart] = field(default_factory=dict)
    released: list[tuple[str, JobState]] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    ahead: list[str] = field(default_factory=list)  # the jobs asked to start ahead

    def start(self, launch: Launch) -> Start:
        if launch.ahead:  # like every executor but the local one: starts with a slot only
            self.ahead.append(launch.record.id)
            return Deferred(launch.record)
        start = FakeStart(self, launch)
        self.pending[launch.record.id] = start
        return start

    def report(self, *job_ids: str) -> None:
        for job_id in job_ids:
            os.write(self.pending[job_id].w, b"x")


def in_process(layout: Layout, slots: int) -> tuple[Watcher, AsyncFake, FakeClock]:
    clock = FakeClock()
    config = Config.model_validate(tomllib.loads(FAST_CONFIG) | {"max_parallel": slots})
    fake = AsyncFake(clock, heartbeat_interval=config.heartbeat_interval)
    watcher = Watcher(layout, config, clock=clock, host="h", executors={"local": fake})
    fake.owner = watcher.ident.owner
    return watcher, fake, clock


def drop_jobs(layout: Layout, clock: FakeClock, n: int) -> None:
    for i in range(n):
        submit(layout, clock, f"job{i}", '+++\nagent = "bash"\n+++\ntrue\n')


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The states each ledger batch commits, one list per batch."""
    seen: list[list[str]] = []
    real = ledger.commit_batch

    def spy(entries: list[ledger.Entry], *, crash: str | None = None) -> list[ledger.Failed]:
        seen.append([str(e.step.record.state) for e in entries])
        return real(entries, crash=crash)

    monkeypatch.setattr(ledger, "commit_batch", spy)
    return seen


def test_a_start_returns_at_once_and_holds_its_slot_until_it_reports(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout, slots=2)
    drop_jobs(layout, clock, 3)
    watcher.turn()
    assert len(fake.pending) == 2  # two slots, two starts begun, none waited for
    assert watcher.runner.running_count() == 0 and watcher.runner.busy == 2
    assert len(watcher.queued) == 1  # the third waits: the starting jobs hold the slots
    for job_id in fake.pending:
        assert read_record(layout.run_dir(job_id)).state is JobState.QUEUED
    watcher.turn()
    assert fake.released == [] and not watcher.idle()


def test_starts_that_reported_are_committed_in_one_batch_then_released(
    layout: Layout, batches: list[list[str]]
) -> None:
    watcher, fake, clock = in_process(layout, slots=4)
    drop_jobs(layout, clock, 3)
    watcher.turn()
    batches.clear()  # the claims
    fake.report(*fake.pending)
    watcher.turn()
    assert batches == [["running"] * 3]  # one group commit for the turn's starts
    assert sorted(fake.released) == sorted((j, JobState.RUNNING) for j in fake.pending)
    assert set(watcher.runner.running_ids()) == set(fake.pending)
    assert watcher.runner.waiting_on() == []


def test_a_start_whose_record_cannot_be_committed_is_never_released_and_tried_again(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: filed failed/spawn_failed, while the same ENOSPC on a running job keeps it."""
    watcher, fake, clock = in_process(layout, slots=1)
    drop_jobs(layout, clock, 1)
    watcher.turn()
    (job_id,) = fake.pending
    real = ledger.commit_batch

    def full(entries: list[ledger.Entry], *, crash: str | None = None) -> list[ledger.Failed]:
        if any(e.step.record.state is JobState.RUNNING for e in entries):
            error = OSError(errno.ENOSPC, "No space left on device")
            return [ledger.Failed(e, error) for e in entries]
        return real(entries, crash=crash)

    monkeypatch.setattr(ledger, "commit_batch", full)
    fake.report(job_id)
    watcher.turn()
    assert fake.released == [] and fake.abandoned == [job_id]
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.reason) == (JobState.QUEUED, None)
    assert "No space left on device" in (record.detail or "")
    assert watcher.runner.busy == 0
    # What the abandoned supervisor, told no, leaves: never read as the next start's.
    stale = ExitStatus(started=False, supervisor_pid=1, finished_at=clock.now())
    (layout.run_dir(job_id) / EXIT_FILE).write_text(stale.model_dump_json())
    monkeypatch.setattr(ledger, "commit_batch", real)  # room again
    del fake.pending[job_id]
    for _ in range(3):
        clock.advance(1.0)  # past its backoff
        watcher.turn()
        if job_id in fake.pending:
            break
    assert not (layout.run_dir(job_id) / EXIT_FILE).exists()
    fake.report(job_id)
    watcher.turn()
    assert fake.released == [(job_id, JobState.RUNNING)]


def test_stopping_settles_starts_on_their_way_before_stopping_the_jobs(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout, slots=2)
    drop_jobs(layout, clock, 2)
    watcher.turn()
    fake.report(*fake.pending)  # reported, not yet settled
    watcher.flags.stop = True
    watcher.turn()
    assert sorted(j for j, _ in fake.cancelled) == sorted(fake.pending)
    assert all(state is JobState.RUNNING for _, state in fake.released)


def test_the_loop_wakes_for_a_start_that_reports(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout, slots=1)
    drop_jobs(layout, clock, 1)
    watcher.turn()
    (job_id,) = fake.pending
    fake.report(job_id)
    began = time.monotonic()
    watcher.waker.wait(30.0, watcher.runner.waiting_on())  # returns at once: readable
    assert time.monotonic() - began < 10.0
    watcher.turn()
    assert fake.released == [(job_id, JobState.RUNNING)]


def test_an_executor_that_cannot_start_ahead_starts_a_job_only_with_a_slot(
    layout: Layout,
) -> None:
    """A start ahead (pending_starts.py) forks a local supervisor; an executor
    that cannot begin a start that records nothing (one that submits or
    creates something) answers Deferred, and starts the job only when the
    scheduler gives it a slot: the job stays queued, once, and nothing begins."""
    watcher, fake, clock = in_process(layout, slots=1)
    drop_jobs(layout, clock, 2)
    watcher.turn()
    watcher.turn()  # the slot busy: a local executor would begin the next job here
    assert len(fake.pending) == 1 and len(watcher.queued) == 1
    (waiting,) = watcher.queued
    assert fake.ahead == [waiting]  # asked once (not every turn), and it said no
    watcher.turn()
    assert fake.ahead == [waiting] and len(watcher.queued) == 1
