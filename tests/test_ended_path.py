"""One way a job ends: executors report an ``Ended``, the runner handles it in one place.

In-process tests drive a Watcher with a fake executor and a fake clock (no
processes, no sleeps); one real-process test checks that a job recovery
finishes after a restart goes through the same path as a polled one.
"""

from __future__ import annotations

import os
import subprocess
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from conftest import FAST_CONFIG, bash, drop, wait_for
from hopper.config import Config
from hopper.core import lifecycle
from hopper.core.lifecycle import Started
from hopper.core.outcome import classify
from hopper.core.record import ExitStatus, JobRecord
from hopper.core.recovery import RunSnapshot
from hopper.core.states import JobState, Reason
from hopper.executors.protocol import Ended, How, Launch, Polled, Start, Tick
from hopper.proc import identity
from hopper.running import Running
from hopper.store import ledger
from hopper.store.jobfile import ABORT_FILE, EXIT_FILE, read_events, read_record
from hopper.store.layout import Layout
from hopper.store.takeover import effective_owner, try_take
from hopper.watcher import Watcher
from test_workspaces import git, make_repo


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
    """Runs nothing: records a job running, and ends it when the test says so."""

    clock: FakeClock
    owner: str = ""  # the watcher's, once it has one
    name: str = "local"
    exits: dict[str, ExitStatus] = field(default_factory=dict)  # job id -> its exit, to report
    started: list[str] = field(default_factory=list)
    cancelled: list[tuple[str, Reason]] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    def start(self, launch: Launch) -> Start:
        fact = Started(self.clock.now(), self.owner, str(launch.workdir), launch.prep.argv[0], 1)
        record = ledger.commit(launch.run_dir, lifecycle.started(launch.record, fact))
        self.started.append(record.id)
        return Running(record, launch.run_dir, None, self.clock.monotonic() + 3600)

    def poll(self, jobs: Sequence[Running], tick: Tick) -> Polled:
        polled = Polled()
        for job in jobs:
            status = self.exits.pop(job.record.id, None)
            if status is not None:
                out = classify(status, job.record.stop_requested)
                polled.ended.append(
                    Ended(job.record, job.run_dir, How.EXITED, out.reason, out.detail, status)
                )
        return polled

    def cancel(self, job: Running, reason: Reason) -> None:
        self.cancelled.append((job.record.id, reason))

    def abandon(self, job: Running) -> None:
        return None

    def forget(self, job: Running) -> None:
        self.forgotten.append(job.record.id)

    def begin_recovery(self) -> None:
        return None

    def observe(self, snap: RunSnapshot, run_dir: Path) -> RunSnapshot:
        return snap

    def clear_strays(self, record: JobRecord, run_dir: Path, local: bool) -> bool:
        return True

    def adopt(self, record: JobRecord, run_dir: Path) -> Running:
        return Running(record, run_dir, None)

    def settle(self, job: Running, snap: RunSnapshot, lost: bool) -> Ended | None:
        return None


def exit_status(clock: FakeClock, code: int | None = 0, sig: int | None = None) -> ExitStatus:
    return ExitStatus(started=True, exit_code=code, signal=sig, finished_at=clock.now())


def in_process(layout: Layout) -> tuple[Watcher, FakeExecutor, FakeClock]:
    clock = FakeClock()
    config = Config.model_validate(tomllib.loads(FAST_CONFIG))
    fake = FakeExecutor(clock)
    watcher = Watcher(layout, config, clock=clock, host="h", executors={"local": fake})
    fake.owner = watcher.ident.owner
    return watcher, fake, clock


def started_job(layout: Layout, watcher: Watcher, fake: FakeExecutor, clock: FakeClock) -> str:
    """Drop a prompt and turn until the fake executor has started it."""
    path = drop(layout, "job", '+++\nagent = "bash"\n+++\necho hi\n')
    old = clock.time() - 60
    os.utime(path, (old, old))  # complete: nobody writes it
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
    return [p for p in (layout.root / ".hopper" / "slots").rglob("*") if p.is_file()]


def test_a_job_the_executor_reports_ended_is_finalized_once_and_its_lease_released(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout)
    job_id = started_job(layout, watcher, fake, clock)
    assert leases(layout), "a running job holds its slot"
    fake.exits[job_id] = exit_status(clock, 0)
    turns(watcher, clock, lambda: not watcher.runner.running)
    for _ in range(3):
        clock.advance(5.0)
        watcher.turn()  # nothing more happens to it
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.reason) == (JobState.SUCCEEDED, Reason.COMPLETED)
    assert names(layout, job_id).count("finalized") == 1
    assert record.processed_path and (layout.root / record.processed_path).exists()
    assert leases(layout) == []
    assert watcher.idle()


def test_abort_cancels_through_the_executor_once_and_the_job_ends_aborted(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout)
    job_id = started_job(layout, watcher, fake, clock)
    (layout.run_dir(job_id) / ABORT_FILE).touch()
    turns(watcher, clock, lambda: bool(fake.cancelled))
    for _ in range(3):
        clock.advance(1.0)
        watcher.turn()  # the stop was sent: not again
    assert fake.cancelled == [(job_id, Reason.ABORTED)]
    assert read_record(layout.run_dir(job_id)).stop_requested is Reason.ABORTED
    fake.exits[job_id] = exit_status(clock, None, 15)
    turns(watcher, clock, lambda: not watcher.runner.running)
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.reason) == (JobState.ABORTED, Reason.ABORTED)
    assert names(layout, job_id).count("abort_requested") == 1


def test_a_failing_exit_with_retries_goes_back_to_the_queue_and_starts_again(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout)
    path = drop(layout, "job", '+++\nagent = "bash"\nretries = 1\n+++\nexit 3\n')
    old = clock.time() - 60
    os.utime(path, (old, old))
    turns(watcher, clock, lambda: bool(fake.started))
    (job_id,) = fake.started
    fake.exits[job_id] = exit_status(clock, 3)
    turns(watcher, clock, lambda: len(fake.started) == 2, n=30)  # after the backoff
    record = read_record(layout.run_dir(job_id))
    assert (record.state, record.attempt) == (JobState.RUNNING, 2)
    assert "retry_scheduled" in names(layout, job_id)
    assert "finalized" not in names(layout, job_id)


def test_a_job_another_watcher_took_over_is_dropped_not_finished(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout)
    job_id = started_job(layout, watcher, fake, clock)
    run_dir = layout.run_dir(job_id)
    record = read_record(run_dir)
    assert record.owner is not None
    _, chain = effective_owner(run_dir, record.owner)
    assert try_take(run_dir, chain, "other-host:1:1.0")
    running = watcher.runner.running[job_id]
    running.next_heartbeat = 0.0  # a heartbeat is due: checked before writing
    fake.exits[job_id] = exit_status(clock, 0)  # too late: not ours to finish
    clock.advance(1.0)
    watcher.turn()
    assert job_id not in watcher.runner.running
    assert fake.forgotten == [job_id]
    assert read_record(run_dir).state is JobState.RUNNING  # the new owner finishes it
    assert "finalized" not in names(layout, job_id)


def test_a_worktree_job_that_succeeded_while_the_watcher_was_down_is_cleaned_at_next_start(
    layout: Layout, tmp_path: Path, watchers, hopper
) -> None:
    repo = make_repo(tmp_path / "repo")
    go = tmp_path / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.05; done\n"
    drop(layout, "wt", bash(script, workdir=str(repo), workspace="worktree"))
    proc = watchers.start()

    def running() -> JobRecord | None:
        for run_dir in layout.runs.iterdir():
            if (run_dir / "job.json").exists():
                rec = read_record(run_dir)
                if rec.state is JobState.RUNNING:
                    return rec
        return None

    wait_for(running, what="the worktree job running")
    rec = running()
    assert rec is not None and rec.workspace_path and Path(rec.workspace_path).is_dir()
    proc.kill()  # the watcher dies; the job's supervisor does not
    proc.wait()
    go.touch()
    wait_for(lambda: (layout.run_dir(rec.id) / EXIT_FILE).exists(), what="the job's exit")
    sup = (rec.supervisor_pid, rec.supervisor_start_time)
    wait_for(lambda: not identity.is_alive(*sup), what="its supervisor gone")  # not adopted
    assert hopper("run", "--until-idle").returncode == 0
    final = read_record(layout.run_dir(rec.id))
    assert final.state is JobState.SUCCEEDED, final.detail
    assert not Path(rec.workspace_path).exists()  # removed, as after a live success
    assert git(repo, "rev-parse", "--verify", f"hopper/{rec.id}")  # the branch stays
    assert "workspace_removed" in names(layout, rec.id)
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], check=True)
