"""One policy for a start that fails, in-process (fake clock, fake executor).

A start can fail before its job ever runs: the run directory deleted under a
queued job, a write refused, the fork refused, the ``running`` record not
committed. What each costs is decided here, never the loop: a job whose run
directory vanished is filed ``lost`` in a fresh one at once and its slot freed.
"""

from __future__ import annotations

import shutil

import pytest

from hopper.core.states import JobState, Reason
from hopper.executors.protocol import Launch, Start
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from inprocess import in_process, leases, names, started_job, submit, turns

BASH = '+++\nagent = "bash"\n+++\necho hi\n'


def test_a_start_whose_run_directory_vanishes_is_filed_lost_and_its_slot_freed(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    real = fake.start

    def deleted_under_it(launch: Launch) -> Start:
        shutil.rmtree(launch.run_dir)  # by another job, as the start begins
        return real(launch)  # its running record has nowhere to go

    monkeypatch.setattr(fake, "start", deleted_under_it)
    submit(layout, clock, "victim", BASH)
    turns(watcher, clock, lambda: bool(fake.asked))
    (victim,) = fake.asked
    record = read_record(layout.run_dir(victim))  # a fresh run directory
    assert (record.state, record.reason) == (JobState.FAILED, Reason.LOST)
    assert "deleted while it was queued" in (record.detail or "")
    assert names(layout, victim).count("finalized") == 1
    assert watcher.runner.busy == 0 and leases(layout) == []
    monkeypatch.setattr(fake, "start", real)
    submit(layout, clock, "next", BASH)
    turns(watcher, clock, lambda: bool(fake.started))  # the one slot is free at once


def test_a_queued_job_whose_run_directory_vanishes_is_filed_lost_by_the_sweep(
    layout: Layout,
) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    blocker = started_job(layout, watcher, fake, clock)
    submit(layout, clock, "victim", BASH)
    turns(watcher, clock, lambda: bool(watcher.queued))
    (victim,) = watcher.queued
    shutil.rmtree(layout.run_dir(victim))
    turns(watcher, clock, lambda: not watcher.queued, n=3)  # within a sweep (1 s)
    record = read_record(layout.run_dir(victim))
    assert (record.state, record.reason) == (JobState.FAILED, Reason.LOST)
    assert "deleted while it was queued" in (record.detail or "")
    assert fake.asked == [blocker]  # never started
    assert blocker in watcher.runner.running_ids()
