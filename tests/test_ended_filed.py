"""An end's ``filed`` (executors/protocol.py) is called once that end is filed and the
job has left the running set: never before, never twice, never for a job handed over
to another watcher. The fork server gives a supervisor its next job only then
(proc/forkserver.py), so a stop meant for a job cannot reach the next one.
In-process, fake executor and clock.
"""

from __future__ import annotations

import errno
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import pytest

from conftest import FAST_CONFIG
from hopper.config import Config
from hopper.core.states import JobState
from hopper.executors.protocol import Ended, Polled, Tick
from hopper.running import Running
from hopper.store import ledger
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from hopper.store.takeover import effective_owner, try_take
from hopper.watcher import Watcher
from inprocess import FakeClock, FakeExecutor, exit_status, submit, turns


@dataclass
class FilingExecutor(FakeExecutor):
    """The fake executor, each end it reports carrying ``filed``; each call records the
    job, its state on disk and whether the watcher still counts it running."""

    watcher: Watcher | None = None
    calls: list[tuple[str, JobState, bool]] = field(default_factory=list)

    def poll(self, jobs: Sequence[Running], tick: Tick) -> Polled:
        polled = super().poll(jobs, tick)
        polled.ended = [replace(end, filed=partial(self._filed, end)) for end in polled.ended]
        return polled

    def _filed(self, end: Ended) -> None:
        assert self.watcher is not None
        running = end.job_id in self.watcher.runner.running_ids()
        self.calls.append((end.job_id, read_record(end.run_dir).state, running))


def watcher_with(layout: Layout, **config: object) -> tuple[Watcher, FilingExecutor, FakeClock]:
    clock = FakeClock()
    conf = Config.model_validate({**tomllib.loads(FAST_CONFIG), **config})
    fake = FilingExecutor(clock, heartbeat_interval=conf.heartbeat_interval)
    watcher = Watcher(layout, conf, clock=clock, host="h", executors={"local": fake})
    fake.owner = watcher.ident.owner
    fake.watcher = watcher
    return watcher, fake, clock


def start(
    layout: Layout, n: int = 1, text: str = ""
) -> tuple[Watcher, FilingExecutor, FakeClock, list[str]]:
    watcher, fake, clock = watcher_with(layout, max_parallel=4)
    for i in range(n):
        submit(layout, clock, f"job{i}", f'+++\nagent = "bash"\n{text}+++\ntrue\n')
    turns(watcher, clock, lambda: len(fake.started) == n)
    return watcher, fake, clock, list(fake.started)


def test_filed_is_called_once_after_the_terminal_record_is_on_disk(layout: Layout) -> None:
    watcher, fake, clock, (job_id,) = start(layout)
    fake.exits[job_id] = exit_status(clock, 0)
    turns(watcher, clock, lambda: not watcher.runner.running_count())
    for _ in range(3):
        clock.advance(5.0)
        watcher.turn()
    assert fake.calls == [(job_id, JobState.SUCCEEDED, False)]


def test_filed_is_called_for_a_retry_once_it_is_queued_again(layout: Layout) -> None:
    watcher, fake, clock, (job_id,) = start(layout, text="retries = 1\n")
    fake.exits[job_id] = exit_status(clock, 1)
    turns(watcher, clock, lambda: bool(fake.calls))
    assert fake.calls == [(job_id, JobState.QUEUED, False)]


def test_filed_is_not_called_while_the_end_cannot_be_filed_and_once_it_is(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, fake, clock, (job_id,) = start(layout)
    real = ledger.commit_batch
    refused: list[str] = []

    def full(entries: list[ledger.Entry], *, crash: str | None = None) -> list[ledger.Failed]:
        if refused:
            return real(entries, crash=crash)
        refused.append(job_id)
        error = OSError(errno.ENOSPC, "No space left on device")
        return [ledger.Failed(e, error) for e in entries]

    monkeypatch.setattr(ledger, "commit_batch", full)
    fake.exits[job_id] = exit_status(clock, 0)
    watcher.turn()
    assert refused == [job_id]
    assert read_record(layout.run_dir(job_id)).state is JobState.RUNNING
    assert fake.calls == []  # not filed: what served it is not to be reused yet
    fake.exits[job_id] = exit_status(clock, 0)  # reported again at the next look
    turns(watcher, clock, lambda: not watcher.runner.running_count())
    assert fake.calls == [(job_id, JobState.SUCCEEDED, False)]


def test_filed_is_never_called_for_a_job_handed_over(layout: Layout) -> None:
    watcher, fake, clock, (job_id,) = start(layout)
    run_dir = layout.run_dir(job_id)
    owner = read_record(run_dir).owner
    assert owner is not None
    _, chain = effective_owner(run_dir, owner)
    assert try_take(run_dir, chain, "other-host:1:1.0")
    fake.exits[job_id] = exit_status(clock, 0)  # the other watcher's to finish
    clock.advance(1.0)
    watcher.turn()
    assert job_id not in watcher.runner.running_ids()
    for _ in range(3):
        clock.advance(5.0)
        watcher.turn()
    assert read_record(run_dir).state is JobState.RUNNING
    assert fake.calls == []
