"""ABORT markers of running jobs through inotify, with sweeps as the fallback (issue 16).

In-process (fake executor, fake clock): a marker touched between sweeps stops
its job at the next turn; a sweep with every run directory watched looks at
no marker; a job whose directory cannot be watched, a lost watch, a queue
overflow and a network file system all fall back to stat-ing markers.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopper import abort_watch, runner
from hopper.abort_watch import AbortWatch, fs_type, shared
from hopper.core.states import Reason
from hopper.heartbeats_due import HeartbeatsDue
from hopper.running import Running
from hopper.store.layout import Layout
from hopper.watcher import Watcher
from inprocess import FakeClock, FakeExecutor, in_process, submit, turns

SLEEP = '+++\nagent = "bash"\n+++\nsleep 1\n'


@pytest.fixture
def no_sweeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweeps once at the first poll, then never (nor the belt-and-braces one)."""
    monkeypatch.setattr(runner, "SWEEP_INTERVAL", 3600.0)
    monkeypatch.setattr(abort_watch, "FULL_SWEEP", 3600.0)


@pytest.fixture
def opened(layout: Layout) -> Iterator[tuple[Watcher, FakeExecutor, FakeClock]]:
    watcher, fake, clock = in_process(layout, max_parallel=3, heartbeat_interval="1h")
    watcher.runner.open()  # inotify on the run directories, as `hopper run` does
    yield watcher, fake, clock
    watcher.runner.close()


def run_jobs(
    layout: Layout, watcher: Watcher, fake: FakeExecutor, clock: FakeClock, n: int
) -> None:
    for i in range(n):
        submit(layout, clock, f"job{i}", SLEEP)
    turns(watcher, clock, lambda: len(fake.started) == n)
    watcher.turn()  # the new jobs' first look at their markers


def test_a_marker_touched_between_sweeps_stops_its_job_at_the_next_turn(
    layout: Layout, no_sweeps: None, opened: tuple[Watcher, FakeExecutor, FakeClock]
) -> None:
    watcher, fake, clock = opened
    run_jobs(layout, watcher, fake, clock, 3)
    target = fake.started[1]
    (layout.run_dir(target) / "ABORT").touch()
    watcher.turn()  # the clock stands still: no sweep is due
    assert fake.cancelled == [(target, Reason.ABORTED)]


def test_a_marker_renamed_into_place_stops_its_job(
    layout: Layout, no_sweeps: None, opened: tuple[Watcher, FakeExecutor, FakeClock]
) -> None:
    watcher, fake, clock = opened
    run_jobs(layout, watcher, fake, clock, 1)
    (job_id,) = fake.started
    tmp = layout.run_dir(job_id) / ".abort.tmp"
    tmp.touch()
    os.rename(tmp, layout.run_dir(job_id) / "ABORT")
    watcher.turn()
    assert fake.cancelled == [(job_id, Reason.ABORTED)]


def test_a_sweep_looks_at_no_marker_while_inotify_watches_them(
    layout: Layout,
    opened: tuple[Watcher, FakeExecutor, FakeClock],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    watcher, fake, clock = opened
    run_jobs(layout, watcher, fake, clock, 3)
    looked: list[str] = []
    watch = watcher.runner._watch
    monkeypatch.setattr(watch, "_check_abort", lambda job: looked.append(job.record.id))
    clock.advance(abort_watch.FULL_SWEEP / 2)  # past a sweep, not the full one
    watcher.turn()
    assert looked == []
    (layout.run_dir(fake.started[0]) / "job.log").write_text("output\n")  # no marker
    watcher.turn()
    assert looked == []
    clock.advance(abort_watch.FULL_SWEEP)  # belt and braces: every marker once
    watcher.turn()
    assert sorted(looked) == sorted(fake.started)


def test_a_marker_made_before_its_watch_is_found_when_the_job_is_watched(
    layout: Layout, no_sweeps: None
) -> None:
    watcher, fake, clock = in_process(layout, heartbeat_interval="1h")
    run_jobs(layout, watcher, fake, clock, 1)  # not opened yet: no watches
    (job_id,) = fake.started
    (layout.run_dir(job_id) / "ABORT").touch()
    watcher.runner.open()  # the job is watched now, and its marker looked at once
    try:
        watcher.turn()
        assert fake.cancelled == [(job_id, Reason.ABORTED)]
    finally:
        watcher.runner.close()


def _enospc(fd: int, path: bytes, mask: int) -> int:
    ctypes.set_errno(errno.ENOSPC)
    return -1


def test_a_job_whose_directory_cannot_be_watched_is_swept(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    init, _, rm = abort_watch._inotify()
    monkeypatch.setattr(abort_watch, "_inotify", lambda: (init, _enospc, rm))
    monkeypatch.setattr(abort_watch, "FULL_SWEEP", 3600.0)
    watcher, fake, clock = in_process(layout, heartbeat_interval="1h")
    watcher.runner.open()
    try:
        with caplog.at_level(logging.WARNING, logger="hopper.abort_watch"):
            run_jobs(layout, watcher, fake, clock, 1)
        (job_id,) = fake.started
        assert "max_user_watches" in caplog.text and str(layout.run_dir(job_id)) in caplog.text
        (layout.run_dir(job_id) / "ABORT").touch()
        watcher.turn()  # no watch, no sweep due: not seen yet
        assert fake.cancelled == []
        clock.advance(runner.SWEEP_INTERVAL)
        watcher.turn()  # the sweep stats the unwatched job's marker
        assert fake.cancelled == [(job_id, Reason.ABORTED)]
    finally:
        watcher.runner.close()


def test_on_a_network_file_system_every_sweep_looks_at_every_marker(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(abort_watch, "fs_type", lambda path: "nfs4")
    watch = AbortWatch(layout.runs)
    assert not watch.live and watch.why_not is not None and "nfs4" in watch.why_not
    watch.add("a", layout.runs)
    assert watch.due(0.0, sweep=False) == set()
    assert watch.due(0.1, sweep=True) is None  # None: every running job


def test_fs_type_reads_the_deepest_mount(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        f"40 22 0:50 / {tmp_path}/a\\040b rw - nfs4 server:/x rw\n"
    )
    (tmp_path / "a b" / "runs").mkdir(parents=True)
    assert fs_type(tmp_path / "a b" / "runs", str(info)) == "nfs4"
    assert fs_type(tmp_path, str(info)) == "ext4"
    assert fs_type(tmp_path, str(tmp_path / "missing")) is None
    assert shared("nfs4") and shared("fuse.sshfs") and shared(None)
    assert not shared("ext4") and not shared("tmpfs")


def _event(wd: int, mask: int, name: bytes = b"") -> bytes:
    padded = name + b"\0" * (16 - len(name) % 16) if name else b""
    return struct.pack("iIII", wd, mask, 0, len(padded)) + padded


def test_an_overflow_or_a_lost_watch_falls_back_to_stat(layout: Layout) -> None:
    watch = AbortWatch(layout.runs)
    assert watch.live, watch.why_not
    try:
        for name in ("a", "b"):
            layout.run_dir(name).mkdir(parents=True)
            watch.add(name, layout.run_dir(name))
        assert watch.due(0.0, sweep=False) is None  # the first look is a full one
        assert watch.due(0.1, sweep=True) == set()
        watch._parse(_event(-1, abort_watch.IN_Q_OVERFLOW))
        assert watch.due(0.2, sweep=False) is None  # events were lost: look at every job
        os.rmdir(layout.run_dir("b"))  # IN_IGNORED: its watch is gone
        assert watch.due(0.3, sweep=False) == {"b"}
        assert watch.due(0.4, sweep=False) == set()
        assert watch.due(0.5, sweep=True) == {"b"}  # unwatched: on every sweep
        watch.remove("b")
        assert watch.due(0.6, sweep=True) == set()
    finally:
        watch.close()


def test_heartbeats_due_pops_only_what_is_due() -> None:
    due = HeartbeatsDue()
    for at, job in ((3.0, "c"), (1.0, "a"), (2.0, "b")):
        due.add(at, job)
    assert due.next_due() == 1.0
    assert due.pop_due(2.0) == [(1.0, "a"), (2.0, "b")]
    assert len(due) == 1 and due.next_due() == 3.0
    assert due.pop_due(2.5) == []


def test_a_turn_writes_only_the_heartbeats_that_are_due(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=5, heartbeat_interval="10s")
    for i in range(5):
        submit(layout, clock, f"job{i}", SLEEP)
        turns(watcher, clock, lambda i=i: len(fake.started) == i + 1)  # type: ignore[misc]
    beats: list[str] = []
    real = watcher.runner._watch._heartbeat

    def heartbeat(job: Running, mono: float) -> None:
        beats.append(job.record.id)
        real(job, mono)

    monkeypatch.setattr(watcher.runner._watch, "_heartbeat", heartbeat)
    jobs = sorted(watcher.runner.running_jobs(), key=lambda j: j.next_heartbeat)
    clock.mono = jobs[0].next_heartbeat  # the first job's heartbeat falls due, no other
    watcher.turn()
    assert beats == [jobs[0].record.id]
    assert jobs[0].next_heartbeat == clock.mono + 10
    watcher.turn()
    assert beats == [jobs[0].record.id]
