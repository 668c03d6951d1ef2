"""Adopted supervisors watched through pidfds (executors/adopted.py).

Real processes: a pidfd is about a process's exit, so the tests start and end
processes; nothing waits on time but for the child's own exit.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime

import psutil
import pytest

from hopper.config import Config
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.executors.adopted import AdoptedWatch
from hopper.executors.protocol import Ended, Tick
from hopper.executors.supervised import Supervised
from hopper.proc import identity
from hopper.running import Running
from hopper.store.jobfile import read_record, write_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher
from inprocess import FakeClock


@pytest.fixture
def watch() -> Iterator[AdoptedWatch]:
    w = AdoptedWatch()
    yield w
    w.close()


def sleeper() -> tuple[subprocess.Popen[bytes], float]:
    proc = subprocess.Popen(["sleep", "300"])
    started = identity.start_time(proc.pid)
    assert started is not None
    return proc, started


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_live_supervisor_is_not_ended_until_it_exits(watch: AdoptedWatch) -> None:
    proc, started = sleeper()
    try:
        assert watch.watch("j1", proc.pid, started)
        assert watch.watching("j1")
        assert watch.ended() == set()
        assert watch.ended() == set()  # asked again: still one poll, still alive
    finally:
        proc.kill()
        proc.wait()
    assert watch.ended() == {"j1"}


def test_one_poll_tells_which_of_many_ended(watch: AdoptedWatch) -> None:
    procs = [sleeper() for _ in range(5)]
    try:
        for n, (proc, started) in enumerate(procs):
            assert watch.watch(f"j{n}", proc.pid, started)
        for proc, _ in procs[1:4]:
            proc.kill()
            proc.wait()
        assert watch.ended() == {"j1", "j2", "j3"}
    finally:
        for proc, _ in procs:
            proc.kill()
            proc.wait()


def test_a_reused_pid_is_gone_at_once(watch: AdoptedWatch) -> None:
    proc, started = sleeper()
    try:  # a record's start time that is not this process's: the pid was reused
        assert watch.watch("j1", proc.pid, started - 100)
        assert watch.ended() == {"j1"}
        assert proc.poll() is None  # never signalled, never waited on
    finally:
        proc.kill()
        proc.wait()


def test_a_pid_that_no_longer_exists_is_gone_at_once(watch: AdoptedWatch) -> None:
    proc, started = sleeper()
    proc.kill()
    proc.wait()
    assert watch.watch("j1", proc.pid, started)
    assert watch.ended() == {"j1"}


def test_no_pid_in_the_record_is_not_watched(watch: AdoptedWatch) -> None:
    assert not watch.watch("j1", None, None)
    assert not watch.watching("j1")
    assert watch.ended() == set()


def test_dropped_jobs_close_their_pidfd(watch: AdoptedWatch) -> None:
    proc, started = sleeper()
    try:
        before = open_fds()
        watch.watch("j1", proc.pid, started)
        assert open_fds() == before + 1
        watch.keep_only({"other"})
        assert open_fds() == before and not watch.watching("j1")
        watch.watch("j1", proc.pid, started)
        watch.drop("j1")
        watch.drop("j1")  # twice: nothing left to close
        assert open_fds() == before
    finally:
        proc.kill()
        proc.wait()


def test_without_pidfds_the_job_is_left_to_the_old_check(
    watch: AdoptedWatch, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    proc, started = sleeper()
    try:
        with caplog.at_level("INFO"):
            assert not watch.watch("j1", proc.pid, started)
            assert not watch.watch("j2", proc.pid, started)
        assert not watch.watching("j1")
        said = [r for r in caplog.records if "checked by pid each sweep" in r.getMessage()]
        assert len(said) == 1  # said once, not per job
    finally:
        proc.kill()
        proc.wait()


def test_out_of_descriptors_is_tried_again_next_sweep(
    watch: AdoptedWatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.pidfd_open
    calls: list[int] = []

    def emfile_once(pid: int, flags: int = 0) -> int:
        calls.append(pid)
        if len(calls) == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return real(pid, flags)

    monkeypatch.setattr(os, "pidfd_open", emfile_once)
    proc, started = sleeper()
    try:
        assert not watch.watch("j1", proc.pid, started)
        assert watch.watch("j1", proc.pid, started)  # the next sweep
        assert watch.ended() == set()
    finally:
        proc.kill()
        proc.wait()


def test_a_live_watched_supervisor_costs_no_proc_reads_per_sweep(
    watch: AdoptedWatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, started = sleeper()
    looked: list[int] = []
    real = psutil.Process

    def counting(pid: int | None = None) -> psutil.Process:
        looked.append(pid or 0)
        return real(pid)

    try:
        watch.watch("j1", proc.pid, started)
        monkeypatch.setattr(psutil, "Process", counting)
        for _ in range(10):
            watch.watch("j1", proc.pid, started)  # every sweep asks again
            assert watch.ended() == set()
        assert looked == []
    finally:
        proc.kill()
        proc.wait()


def test_it_is_empty_until_a_job_is_looked_after(watch: AdoptedWatch) -> None:
    """A fresh watcher's sweeps skip it while it is empty (its forked jobs are never in it)."""
    assert not watch
    watch.watch("no-pid", None, None)  # unwatchable: still looked after, the old way
    assert watch
    watch.keep_only(set())
    assert not watch
    proc, started = sleeper()
    try:
        watch.watch("j1", proc.pid, started)
        assert watch
        watch.drop("j1")
        assert not watch
    finally:
        proc.kill()
        proc.wait()


def test_a_sweep_skips_an_adopted_job_its_pidfd_says_is_alive(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart every job is adopted: a sweep (twice a second) looks at none of
    them one by one until its supervisor's pidfd says it exited (1,000 adopted jobs:
    2,000 per-job steps a second before)."""
    clock = FakeClock()
    watcher = Watcher(layout, Config(), clock=clock, host="h")
    proc, started = sleeper()
    try:
        job_id = "20260101-000000-000-alive-0000"
        run_dir = layout.runs / job_id
        run_dir.mkdir(parents=True)
        record = JobRecord(
            id=job_id,
            name="alive",
            state=JobState.RUNNING,
            agent="bash",
            host="h",
            inbox_path="inbox/alive.prompt.md",
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            supervisor_pid=proc.pid,
            supervisor_start_time=started,
        )
        write_record(run_dir, record)
        watcher.runner.adopt(record)
        polled: list[str] = []
        real = Supervised._poll_one

        def counting(
            self: Supervised, job: Running, tick: Tick, found: list[Ended], ended: set[str]
        ) -> None:
            polled.append(job.record.id)
            real(self, job, tick, found, ended)

        monkeypatch.setattr(Supervised, "_poll_one", counting)
        for _ in range(4):
            clock.advance(0.6)  # a sweep each turn
            watcher.turn()
        assert polled == []
        proc.kill()
        proc.wait()
        clock.advance(0.6)
        watcher.turn()
        assert polled == [job_id]  # looked at once its supervisor exited: lost, no exit.json
        assert read_record(run_dir).state is not JobState.RUNNING
    finally:
        proc.kill()
        proc.wait()
