"""A plain job's end is filed after the turn's starts (runner.py, ``Runner._defer``).

At one slot, the turn that sees a job's end frees its slot at once (out of the
running set, its leases given back), starts, commits and releases the next
job, and only then files the ended one (its terminal record and its prompt
under processed/): the next job runs while this one is filed. Jobs whose filed
record a start may read are filed first, as before: a session's turn, a job
with a workspace, and any job while budgets are set (its spend must count
before the next start). In-process, fake executor and clock.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence

import pytest

from hopper.core.states import JobState, is_terminal
from hopper.executors.protocol import Ended
from hopper.store import ledger
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher
from inprocess import FakeClock, FakeExecutor, exit_status, in_process, submit, turns

PLAIN = '+++\nagent = "bash"\n+++\ntrue\n'
SESSION = '+++\nagent = "bash"\nsession = "s"\n+++\ntrue\n'


def two_queued(
    layout: Layout, first: str = PLAIN, second: str = PLAIN, **config: object
) -> tuple[Watcher, FakeExecutor, FakeClock, str]:
    """One slot: the first job running, the second queued behind it; the first's id."""
    watcher, fake, clock = in_process(layout, max_parallel=1, **config)
    submit(layout, clock, "a", first)
    turns(watcher, clock, lambda: len(fake.started) == 1)
    submit(layout, clock, "b", second)
    turns(watcher, clock, lambda: len(watcher.queued) == 1)
    return watcher, fake, clock, fake.started[0]


def filings(watcher: Watcher, fake: FakeExecutor, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many jobs had been started each time an end was filed (one entry per end)."""
    seen: list[int] = []
    real = watcher.runner.endings.file_many

    def file_many(ends: Sequence[Ended]) -> list[object]:
        seen.extend(len(fake.started) for _ in ends)
        return real(ends)  # type: ignore[return-value]

    monkeypatch.setattr(watcher.runner.endings, "file_many", file_many)
    return seen


def test_the_next_job_starts_before_a_plain_jobs_end_is_filed_in_the_same_turn(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, fake, clock, first = two_queued(layout)
    seen = filings(watcher, fake, monkeypatch)
    fake.exits[first] = exit_status(clock, 0)
    clock.advance(1.0)
    watcher.turn()
    assert seen == [2], "the second job was started when the first was filed"
    filed = read_record(layout.run_dir(first))
    assert filed.state is JobState.SUCCEEDED, "filed in that turn"
    assert filed.processed_path is not None and (layout.root / filed.processed_path).exists()
    assert watcher.runner.running_ids() == {fake.started[1]}


def test_a_sessions_end_is_filed_before_the_next_start(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, fake, clock, first = two_queued(layout, SESSION, SESSION)
    seen = filings(watcher, fake, monkeypatch)
    fake.exits[first] = exit_status(clock, 0)
    turns(watcher, clock, lambda: len(fake.started) == 2)
    assert seen == [1], "filed while the session's next turn waited"


def test_with_budgets_set_an_end_is_filed_before_the_next_start(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its spend (none for bash, but the watcher does not tell) counts before a start."""
    watcher, fake, clock, first = two_queued(layout, budgets={"daily_usd": 100.0})
    seen = filings(watcher, fake, monkeypatch)
    fake.exits[first] = exit_status(clock, 0)
    turns(watcher, clock, lambda: len(fake.started) == 2)
    assert seen == [1]


def test_a_deferred_end_that_cannot_be_filed_is_kept_and_filed_next_tick(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk refuses the terminal record: the job is back in the running set (the
    next job runs beside it: its slot was given back when it exited), its record as
    it was; the next tick files it. Its leases went back when it exited (giving
    them back again on the next try finds none): only the next job holds one."""
    watcher, fake, clock, first = two_queued(layout)
    real_commit = ledger.commit_batch
    refuse = [True]

    def commit_batch(entries: Sequence[ledger.Entry], **kw: object) -> list[ledger.Failed]:
        if refuse[0] and any(
            e.step.record.id == first and is_terminal(e.step.record.state) for e in entries
        ):
            error = OSError(errno.ENOSPC, "No space left on device")
            return [ledger.Failed(e, error) for e in entries]
        return real_commit(entries, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ledger, "commit_batch", commit_batch)
    fake.exits[first] = exit_status(clock, 0)
    clock.advance(1.0)
    watcher.turn()
    assert len(fake.started) == 2
    assert first in watcher.runner.running_ids(), "kept, to be filed again"
    assert read_record(layout.run_dir(first)).state is JobState.RUNNING
    assert [h.job_id for h in watcher.scale.leases.holders("all", clock.time())] == [
        fake.started[1]
    ]
    refuse[0] = False
    fake.exits[first] = exit_status(clock, 0)  # reported again at the next look
    turns(watcher, clock, lambda: first not in watcher.runner.running_ids())
    assert read_record(layout.run_dir(first)).state is JobState.SUCCEEDED
    holders = watcher.scale.leases.holders("all", clock.time())
    assert [lease.job_id for lease in holders] == [fake.started[1]]


def test_an_end_waiting_for_its_filing_is_left_alone_by_recovery(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the poll that saw the end and its filing the job is in no running set;
    the runner still says it tracks it, so a recovery pass in between would not file
    it a second time from its exit.json."""
    watcher, fake, clock, first = two_queued(layout)
    seen: list[bool] = []
    real = watcher.runner.start

    def start(record: object) -> bool:
        seen.append(watcher.runner.is_tracking(first))
        return real(record)  # type: ignore[arg-type]

    monkeypatch.setattr(watcher.runner, "start", start)
    fake.exits[first] = exit_status(clock, 0)
    clock.advance(1.0)
    watcher.turn()
    assert seen == [True], "tracked while the next job started, before its filing"
    assert first not in watcher.runner.running_ids()
    assert not watcher.runner.is_tracking(first), "filed: no longer tracked"
