"""The sweep of queued jobs' markers skips run directories with nothing made in them since.

Over 100,000 queued jobs the pass (an ``lstat`` of ABORT and a ``rename`` of
PRIORITY per job, every second) was a quarter of the watcher's time. Now one
``lstat`` of the run directory answers for most: a directory found quiet,
with an mtime older than the clock's slack, is not looked into again until
its mtime moves (store/quiet_dirs.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hopper import starting as starting_module
from hopper.core.states import JobState
from hopper.store.jobfile import ABORT_FILE, read_record
from hopper.store.layout import Layout
from hopper.store.markers import PRIORITY_FILE
from hopper.store.quiet_dirs import SLACK_NS, QuietDirs
from hopper.store.takeover import try_take
from inprocess import in_process, marker_looks, submit


def age(path: Path, seconds: float = 60.0) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old), follow_symlinks=False)


def test_quiet_only_when_looked_at_with_an_old_mtime_and_unchanged_since(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    quiet = QuietDirs(str(runs))
    fresh, mtime = quiet.look("a")
    assert not fresh and mtime is not None
    quiet.looked("a", mtime)  # made just now: within the slack, never trusted
    assert quiet.look("a") == (False, mtime)
    age(runs / "a")
    _, mtime = quiet.look("a")
    quiet.looked("a", mtime)
    assert quiet.look("a") == (True, mtime)
    (runs / "a" / ABORT_FILE).touch()  # a marker moves the directory's mtime
    assert quiet.look("a")[0] is False
    age(runs / "a", 120)  # moved back by hand: not the mtime remembered either
    assert quiet.look("a")[0] is False
    assert mtime is not None and time.time_ns() - mtime > SLACK_NS


def test_gone_links_and_files_are_never_quiet(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "d").mkdir(parents=True)
    age(runs / "d")
    quiet = QuietDirs(str(runs))
    quiet.looked("d", quiet.look("d")[1])
    assert quiet.look("d")[0]
    (runs / "d").rmdir()
    assert quiet.look("d") == (False, None)
    (runs / "d").symlink_to(tmp_path)  # a link to an old directory: not a run directory
    age(runs / "d")
    assert quiet.look("d") == (False, None)
    quiet.looked("d", None)
    assert quiet.look("d") == (False, None)
    (runs / "f").write_text("")
    age(runs / "f")
    assert quiet.look("f") == (False, None)
    quiet.keep(set())
    assert quiet.look("d")[0] is False


def test_a_second_pass_skips_quiet_run_dirs_and_still_sees_new_markers(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, fake, clock = in_process(layout, max_parallel=1)
    for i in range(6):
        submit(layout, clock, f"q{i}", '+++\nagent = "bash"\n+++\ntrue\n')
    while len(watcher.queued) + len(fake.started) < 6:
        watcher.turn()
    queued = sorted(watcher.queued)
    assert len(queued) == 5  # one runs: the others wait for its slot
    for job_id in queued:
        age(layout.run_dir(job_id))

    looked = marker_looks(monkeypatch)

    def one_pass() -> list[str]:
        looked.clear()
        clock.advance(starting_module.QUEUE_SWEEP_INTERVAL)
        watcher.turn()
        return sorted(looked)

    assert one_pass() == queued  # first look: every one, and each found quiet
    assert one_pass() == []  # nothing made in them since: one lstat each
    (layout.run_dir(queued[1]) / PRIORITY_FILE).write_text("7\n")
    assert one_pass() == [queued[1]]
    assert read_record(layout.run_dir(queued[1])).priority == 7
    (layout.run_dir(queued[3]) / ABORT_FILE).touch()
    one_pass()
    assert queued[3] not in watcher.queued
    assert read_record(layout.run_dir(queued[3])).state is JobState.ABORTED


def test_dropping_taken_jobs_skips_quiet_dirs_and_sees_a_new_takeover(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reconcile pass drops queued jobs other watchers took: over 100,000 queued
    jobs a takeover-marker open each, every reconcile_interval. A run directory the
    sweep found quiet (its takeover checked then) costs one lstat; a takeover made
    since moves its mtime and is seen."""
    watcher, fake, clock = in_process(layout, max_parallel=1)
    for i in range(4):
        submit(layout, clock, f"q{i}", '+++\nagent = "bash"\n+++\ntrue\n')
    while len(watcher.queued) + len(fake.started) < 4:
        watcher.turn()
    queued = sorted(watcher.queued)
    for job_id in queued:
        age(layout.run_dir(job_id))
    clock.advance(starting_module.QUEUE_SWEEP_INTERVAL)
    watcher.turn()  # a pass: each found quiet, and still ours

    asked: list[str] = []
    real_taken_by = starting_module.taken_by

    def counting(run_dir: Path, owner: str | None, me: str) -> str | None:
        asked.append(run_dir.name)
        return real_taken_by(run_dir, owner, me)

    monkeypatch.setattr(starting_module, "taken_by", counting)
    watcher.starts.drop_taken()
    assert asked == []
    taken = queued[2]
    record = read_record(layout.run_dir(taken))
    assert record.owner is not None
    assert try_take(layout.run_dir(taken), record.owner, "elsewhere:1:1")
    watcher.starts.drop_taken()
    assert asked == [taken]
    assert taken not in watcher.queued
    assert sorted(watcher.queued) == [j for j in queued if j != taken]
