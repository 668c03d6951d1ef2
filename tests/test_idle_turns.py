"""A turn with nothing due does no per-job work, however many jobs run (issue 16).

ABORT markers are looked at on a sweep, heartbeats when due; a turn woken for
anything else (a claim, a start reporting, an inotify hint) leaves the
running jobs alone. In-process, fake executor and clock.
"""

from __future__ import annotations

import pytest

from hopper.running import Running
from hopper.store.layout import Layout
from inprocess import in_process, submit, turns


def test_a_turn_with_nothing_due_does_not_watch_the_running_jobs(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=3)
    for i in range(3):
        submit(layout, clock, f"job{i}", '+++\nagent = "bash"\n+++\nsleep 1\n')
    turns(watcher, clock, lambda: len(fake.started) == 3)
    aborts: list[str] = []
    beats: list[str] = []

    def check_abort(job: Running) -> None:
        aborts.append(job.record.id)

    def heartbeat(job: Running, mono: float) -> None:
        beats.append(job.record.id)
        job.next_heartbeat = mono + 3600  # written: not due again in this test

    monkeypatch.setattr(watcher.runner._watch, "_check_abort", check_abort)
    monkeypatch.setattr(watcher.runner._watch, "_heartbeat", heartbeat)
    for _ in range(5):
        watcher.turn()  # the clock stands still: no sweep, no heartbeat due
    assert aborts == [] and beats == []
    clock.advance(1.0)  # past a sweep (no inotify here: every marker is looked at once)
    watcher.turn()  # ... and past every heartbeat: each written once
    assert sorted(aborts) == sorted(fake.started)
    assert sorted(beats) == sorted(fake.started)


def test_a_heartbeat_falls_due_between_sweeps_and_is_written(layout: Layout) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1, heartbeat_interval="0.2s")
    submit(layout, clock, "job", '+++\nagent = "bash"\n+++\nsleep 1\n')
    turns(watcher, clock, lambda: len(fake.started) == 1)
    (job,) = watcher.runner.running_jobs()
    before = job.record.heartbeat_at
    clock.advance(0.3)  # a heartbeat is due, a sweep (0.5 s) is not
    watcher.turn()
    assert job.record.heartbeat_at is not None and job.record.heartbeat_at != before
