"""A job claimed and started in one turn has its files written behind its start.

Its admission.json and queued record are written after its executor was asked
to begin (its supervisor forks meanwhile), where the executor records nothing
before it reports (``begins_unrecorded``: the local one); a job that does not
start in its claim's turn is written as the turn's starts end, and one the
turn revises otherwise (held, failed at schedule) first. A write that fails
drops the job, its start withdrawn, and recovery completes the claim.
In-process, with a fake executor and a fake clock.
"""

from __future__ import annotations

import errno
import os
import stat
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import FAST_CONFIG
from hopper import intake
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.lifecycle import Started, Step
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.executors.protocol import Ended, Launch, Start, Starting
from hopper.running import Running
from hopper.store import ledger
from hopper.store.admission import ADMISSION_FILE
from hopper.store.jobfile import JOB_FILE, read_events, read_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher
from inprocess import FakeClock, FakeExecutor, exit_status, submit


class Begun(Starting):
    """A start that reports once the test says so, running nothing."""

    def __init__(self, fake: Behind, launch: Launch) -> None:
        super().__init__(launch.record, launch.run_dir, time.monotonic() + 3600)
        self.fake, self.launch = fake, launch
        self.r, self.w = os.pipe()

    def fileno(self) -> int:
        return self.r

    def report(self) -> Step | Ended:
        os.read(self.r, 1)
        fact = Started(self.fake.clock.now(), self.fake.owner, str(self.launch.workdir), "bash", 1)
        return lifecycle.started(self.record, fact)

    def release(self, record: JobRecord) -> Running:
        self.fake.started.append(record.id)
        return Running(record, self.run_dir, self.fake.clock.monotonic() + 3600)

    def abandon(self) -> None:
        self.fake.abandoned.append(self.record.id)


@dataclass
class Behind(FakeExecutor):
    """Begins starts as the local executor does; notes what the run held at each begin."""

    begins_unrecorded: bool = True
    pending: dict[str, Begun] = field(default_factory=dict)
    abandoned: list[str] = field(default_factory=list)
    at_begin: dict[str, tuple[bool, bool]] = field(default_factory=dict)  # admission, job.json
    begins: list[str] = field(default_factory=list)

    def start(self, launch: Launch) -> Start:
        if launch.ahead:
            return super().start(launch)  # Deferred: no start ahead here
        run_dir = launch.run_dir
        self.begins.append(launch.record.id)
        self.at_begin[launch.record.id] = (
            (run_dir / ADMISSION_FILE).exists(),
            (run_dir / JOB_FILE).exists(),
        )
        begun = Begun(self, launch)
        self.pending[launch.record.id] = begun
        return begun

    def report(self, job_id: str) -> None:
        os.write(self.pending[job_id].w, b"x")


def in_process(
    layout: Layout, slots: int, *, behind: bool = True
) -> tuple[Watcher, Behind, FakeClock]:
    clock = FakeClock()
    config = Config.model_validate(tomllib.loads(FAST_CONFIG) | {"max_parallel": slots})
    fake = Behind(clock, heartbeat_interval=config.heartbeat_interval, begins_unrecorded=behind)
    watcher = Watcher(layout, config, clock=clock, host="h", executors={"local": fake})
    fake.owner = watcher.ident.owner
    return watcher, fake, clock


def job(layout: Layout, clock: FakeClock, name: str, front: str = "") -> None:
    submit(layout, clock, name, f'+++\nagent = "bash"\n{front}+++\ntrue\n')


def run_dir_of(layout: Layout, name: str) -> Path:
    (found,) = [d for d in layout.runs.iterdir() if d.name.split("-", 3)[-1].startswith(name)]
    return found


def names(run_dir: Path) -> list[str]:
    return [str(e["event"]) for e in read_events(run_dir)]


def test_a_job_started_in_its_claims_turn_is_begun_before_its_files_are_written(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout, slots=1)
    job(layout, clock, "first")
    watcher.turn()
    (job_id,) = fake.pending
    assert fake.at_begin[job_id] == (False, False)  # begun first: nothing written yet
    run_dir = layout.run_dir(job_id)
    assert read_record(run_dir).state is JobState.QUEUED  # then written, in the same turn
    assert stat.S_IMODE((run_dir / ADMISSION_FILE).stat().st_mode) == 0o600
    assert names(run_dir) == ["claimed", "queued"]
    assert watcher.runner.intake.unwritten == {}
    fake.report(job_id)
    watcher.turn()
    assert fake.started == [job_id]
    assert read_record(run_dir).state is JobState.RUNNING
    assert names(run_dir) == ["claimed", "queued", "started"]


def test_an_executor_that_records_at_start_is_begun_after_the_queued_record(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout, slots=1, behind=False)
    job(layout, clock, "first")
    watcher.turn()
    (job_id,) = fake.pending
    assert fake.at_begin[job_id] == (True, True)


def test_jobs_that_do_not_start_in_their_claims_turn_are_written_as_it_ends(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout, slots=1)
    for name in ("first", "second", "third"):
        job(layout, clock, name)
    watcher.turn()
    assert len(fake.pending) == 1 and len(watcher.queued) == 2
    assert watcher.runner.intake.unwritten == {}
    for job_id in watcher.queued:
        run_dir = layout.run_dir(job_id)
        assert read_record(run_dir).state is JobState.QUEUED
        assert (run_dir / ADMISSION_FILE).exists()
        assert names(run_dir) == ["claimed", "queued"]


def test_jobs_failed_at_schedule_in_their_claims_turn_are_written_before_they_are_filed(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout, slots=1)
    job(layout, clock, "ping", front='after = ["pong"]\n')
    job(layout, clock, "pong", front='after = ["ping"]\n')  # a cycle: both fail at once
    watcher.turn()
    for name in ("ping", "pong"):
        run_dir = run_dir_of(layout, name)
        record = read_record(run_dir)
        assert record.state is JobState.FAILED and record.reason == "dependency_cycle"
        assert names(run_dir)[:2] == ["claimed", "queued"]
        assert (run_dir / ADMISSION_FILE).exists()
    assert fake.pending == {} and not watcher.queued


@pytest.mark.parametrize("which", ["admission", "record"])
def test_a_write_behind_that_fails_withdraws_the_start_and_recovery_completes_the_claim(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    watcher, fake, clock = in_process(layout, slots=1)
    full = OSError(errno.ENOSPC, "No space left on device")
    real_admission, real_commit = intake.write_admission_bytes, ledger.commit
    failing = {"on": True}

    def admission(run_dir: Path, data: bytes, *, dir_fd: int | None = None) -> None:
        if failing["on"] and which == "admission":
            raise full
        real_admission(run_dir, data, dir_fd=dir_fd)

    def commit(run_dir: Path, step: Step, **kw: object) -> JobRecord:
        if failing["on"] and which == "record" and step.record.state is JobState.QUEUED:
            raise full
        return real_commit(run_dir, step, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(intake, "write_admission_bytes", admission)
    monkeypatch.setattr(intake.ledger, "commit", commit)
    watcher._next_reconcile = clock.monotonic() + 60  # recovery not in this turn
    job(layout, clock, "first")
    watcher.turn()
    (job_id,) = fake.pending
    assert fake.abandoned == [job_id]  # its start withdrawn
    assert job_id not in watcher.queued and watcher.runner.busy == 0
    run_dir = layout.run_dir(job_id)
    assert not (run_dir / JOB_FILE).exists()
    assert names(run_dir) == ["claimed"]  # on disk: a claimed prompt, as after a crash
    failing["on"] = False
    clock.advance(61)  # recovery's turn: it completes the claim
    watcher.turn()
    assert read_record(run_dir).state is JobState.QUEUED
    assert (run_dir / ADMISSION_FILE).exists()
    watcher.turn()
    assert fake.begins == [job_id, job_id]  # begun again, after recovery queued it
    assert fake.at_begin[job_id] == (True, True)  # recovery wrote its files at once
    fake.report(job_id)
    watcher.turn()
    assert fake.started == [job_id]
    assert read_record(run_dir).state is JobState.RUNNING
    fake.exits[job_id] = exit_status(clock)
    for _ in range(3):
        watcher.turn()
    assert read_record(run_dir).state is JobState.SUCCEEDED
    assert names(run_dir).count("started") == 1


def test_a_job_not_started_whose_write_fails_leaves_the_queue_for_recovery(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, fake, clock = in_process(layout, slots=1)
    real = intake.write_admission_bytes
    failing = {"on": True}

    def admission(run_dir: Path, data: bytes, *, dir_fd: int | None = None) -> None:
        if failing["on"] and fake.pending:  # the second job's: the first was begun
            raise OSError(errno.EROFS, "Read-only file system")
        real(run_dir, data, dir_fd=dir_fd)

    monkeypatch.setattr(intake, "write_admission_bytes", admission)
    watcher._next_reconcile = clock.monotonic() + 60  # recovery not in this turn
    job(layout, clock, "first")
    job(layout, clock, "second")
    watcher.turn()
    second = run_dir_of(layout, "second")
    assert len(fake.pending) == 1 and not watcher.queued  # the second dropped
    assert not (second / JOB_FILE).exists()
    failing["on"] = False
    clock.advance(61)  # recovery's turn: it completes the claim
    watcher.turn()
    assert read_record(second).state is JobState.QUEUED
    assert second.name in watcher.queued
