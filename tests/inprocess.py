"""Drive a Watcher in-process: a fake clock, a fake executor, no processes, no sleeps.

Time moves only when a test advances the :class:`FakeClock`; the
:class:`FakeExecutor` runs nothing and records every call the watcher makes,
and a job ends when the test puts its exit status in ``exits``. Each turn is
:meth:`Watcher.turn`, so a test sees exactly what one loop pass decides.
"""

from __future__ import annotations

import os
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import FAST_CONFIG, drop
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.lifecycle import Adopted, Started
from hopper.core.outcome import classify
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.recovery import RunSnapshot
from hopper.core.states import JobState, Reason
from hopper.executors.protocol import Deferred, Ended, How, Launch, Polled, Start, Tick
from hopper.proc import identity
from hopper.running import Running
from hopper.store import ledger
from hopper.store.inbox_watch import InboxWatch
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher


class FakeClock:
    """Time that moves only when a test says so."""

    def __init__(self) -> None:
        self.wall = time.time()
        self.mono = 1000.0

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.wall, UTC)

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


@dataclass
class FakeExecutor:
    """Runs nothing: records a job running, and ends it when the test says so.

    Like a real executor it commits the ``started`` (or deferred, or adopted)
    record itself, reports a job past its ``timeout_seconds`` (on the fake
    monotonic clock) for a stop on every poll, as Slurm's own deadline does,
    and names this test process as each job's supervisor, so recovery after a
    "restart" finds the supervisor alive and adopts the job.
    """

    clock: FakeClock
    owner: str = ""  # the watcher's, once it has one
    name: str = "local"
    begins_unrecorded: bool = False  # it records its jobs running at start()
    heartbeat_interval: float = 3600.0  # the config's, set by in_process
    exits: dict[str, ExitStatus] = field(default_factory=dict)  # job id -> its exit, to report
    defer: int = 0  # the next this many starts are deferred ...
    defer_for: float = 20.0  # ... by this many seconds
    fail: list[Exception] = field(default_factory=list)  # raised by the next starts, in turn
    asked: list[str] = field(default_factory=list)  # every start call, by job id
    launches: dict[str, Launch] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    cancelled: list[tuple[str, Reason]] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    since: dict[str, float] = field(default_factory=dict)  # job id -> monotonic start

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    def start(self, launch: Launch) -> Start:
        if launch.ahead:
            return Deferred(launch.record)  # it cannot begin a start that records nothing
        job_id = launch.record.id
        self.asked.append(job_id)
        self.launches[job_id] = launch
        if self.fail:
            raise self.fail.pop(0)
        now = self.clock.now()
        if self.defer:
            self.defer -= 1
            later = lifecycle.Deferred(now, now + timedelta(seconds=self.defer_for), "busy", 1.0)
            return Deferred(ledger.commit(launch.run_dir, lifecycle.deferred(launch.record, later)))
        me = os.getpid()
        fact = Started(
            now,
            self.owner,
            str(launch.workdir),
            launch.prep.argv[0],
            pid=me,
            pid_start_time=identity.start_time(me),
            supervisor_pid=me,  # alive for as long as the test runs
            supervisor_start_time=identity.start_time(me),
        )
        record = ledger.commit(launch.run_dir, lifecycle.started(launch.record, fact))
        self.started.append(job_id)
        self.since[job_id] = self.clock.monotonic()
        return Running(record, launch.run_dir, self.clock.monotonic() + self.heartbeat_interval)

    def poll(self, jobs: Sequence[Running], tick: Tick) -> Polled:
        polled = Polled()
        for job in jobs:
            rec = job.record
            status = self.exits.pop(rec.id, None)
            if status is not None:
                out = classify(status, rec.stop_requested)
                polled.ended.append(
                    Ended(rec, job.run_dir, How.EXITED, out.reason, out.detail, status)
                )
                continue
            since = self.since.get(rec.id)
            limit = rec.timeout_seconds
            if since is not None and limit is not None and tick.monotonic - since >= limit:
                polled.stop.append((job, Reason.TIMEOUT))  # every poll: the runner asks once
        return polled

    def cancel(self, job: Running, reason: Reason) -> None:
        self.cancelled.append((job.record.id, reason))

    def forget(self, job: Running, *, end: bool = False) -> None:
        if not end:
            self.forgotten.append(job.record.id)

    def adopt(self, record: JobRecord, run_dir: Path) -> Running:
        self.adopted.append(record.id)
        step = lifecycle.adopted(record, Adopted(self.clock.now(), self.owner))
        owned = ledger.commit(run_dir, step, durable=False)
        return Running(owned, run_dir, self.clock.monotonic() + self.heartbeat_interval)

    def recovery(self) -> FakeRecovery:
        return FakeRecovery()


class FakeRecovery:
    """Recovery's questions to the fake executor: nothing to add, clear or settle."""

    def observe(self, snap: RunSnapshot, run_dir: Path) -> RunSnapshot:
        return snap

    def clear(self, record: JobRecord, run_dir: Path, local: bool) -> bool:
        return True

    def settle(self, snap: RunSnapshot, run_dir: Path, lost: bool) -> Ended | None:
        return None


def exit_status(clock: FakeClock, code: int | None = 0, sig: int | None = None) -> ExitStatus:
    return ExitStatus(started=True, exit_code=code, signal=sig, finished_at=clock.now())


def in_process(
    layout: Layout, clock: FakeClock | None = None, **config: object
) -> tuple[Watcher, FakeExecutor, FakeClock]:
    """A Watcher over ``layout`` on the fast test config (``config`` overrides its keys)."""
    clock = clock or FakeClock()
    conf = Config.model_validate({**tomllib.loads(FAST_CONFIG), **config})
    fake = FakeExecutor(clock, heartbeat_interval=conf.heartbeat_interval)
    watcher = Watcher(layout, conf, clock=clock, host="h", executors={"local": fake})
    fake.owner = watcher.ident.owner
    return watcher, fake, clock


def watch_inbox(watcher: Watcher) -> InboxWatch:
    """The inbox's real inotify watch, read by the in-process watcher's turns (as ``run``
    does); the kernel queues an event before the call that caused it returns."""
    watch = InboxWatch(watcher.layout.inbox)
    assert watch.start(), "inotify is needed here"
    watcher.events.watch = watch
    return watch


def submit(layout: Layout, clock: FakeClock, name: str, text: str, sub: str = "") -> Path:
    """Drop a prompt, complete (its mtime well past ``settle``: nobody writes it)."""
    path = drop(layout, name, text, sub)
    old = clock.time() - 60
    os.utime(path, (old, old))
    return path


def started_job(layout: Layout, watcher: Watcher, fake: FakeExecutor, clock: FakeClock) -> str:
    """Drop a prompt and turn until the fake executor has started it."""
    submit(layout, clock, "job", '+++\nagent = "bash"\n+++\necho hi\n')
    for _ in range(3):
        watcher.turn()
        if fake.started:
            break
    (job_id,) = fake.started
    assert read_record(layout.run_dir(job_id)).state is JobState.RUNNING
    return job_id


def turns(watcher: Watcher, clock: FakeClock, until: Callable[[], bool], n: int = 10) -> None:
    for _ in range(n):
        clock.advance(1.0)  # past a sweep
        watcher.turn()
        if until():
            return
    raise AssertionError("the watcher never got there")


def names(layout: Layout, job_id: str) -> list[str]:
    return [e["event"] for e in read_events(layout.run_dir(job_id))]


def leases(layout: Layout) -> list[Path]:
    """The slot leases held: a watcher's kept spares (``.spare.*``, dot-names) are not leases."""
    slots = layout.root / ".hopper" / "slots"
    return [p for p in slots.rglob("*") if p.is_file() and not p.name.startswith(".")]


def marker_looks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The queued jobs whose markers (PRIORITY, ABORT, takeover) the sweep looks at from
    now on, in order: every call of ``Starts._apply_priority`` is recorded, then run."""
    from hopper.starting import Starts

    looked: list[str] = []
    real = Starts._apply_priority

    def counting(self: Starts, job_id: str, run_dir: Path) -> None:
        looked.append(job_id)
        real(self, job_id, run_dir)

    monkeypatch.setattr(Starts, "_apply_priority", counting)
    return looked
