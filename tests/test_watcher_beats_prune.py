"""Heartbeat files of dead watchers do not stay listed forever.

A watcher dead for ``keep_after`` (an hour, or twice ``host_dead_after``) whose
jobs are no longer its own has nothing left to tell: the live watchers remove
its file (core/watcherview.py ``stale``, store/watchers.py ``prune_beats``). A
stopped watcher's file, and a dead one whose jobs still name it, stay.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from hopper.core.hosts import Beat
from hopper.core.watcherview import KEEP_DEAD, keep_after, stale
from hopper.store.layout import Layout
from hopper.store.watchers import beat_files, prune_beats, write_beat
from inprocess import in_process


def beat(age: float, jobs: tuple[str, ...] = (), stopped: bool = False) -> Beat:
    return Beat(host="h1", pid=7, owner="h1:7:1.0", age=age, stopped=stopped, jobs=jobs)


def test_keep_after_is_an_hour_or_twice_host_dead_after() -> None:
    assert keep_after(60) == KEEP_DEAD == 3600
    assert keep_after(7200) == 14400


def test_a_file_is_stale_only_when_old_not_stopped_and_its_jobs_are_not_its_own() -> None:
    assert stale(beat(3600), 3600, {})
    assert not stale(beat(3599), 3600, {})  # young
    assert not stale(beat(9000, stopped=True), 3600, {})  # holds its host's jobs back
    still = beat(9000, jobs=("a", "b"))
    assert not stale(still, 3600, {"a": None, "b": "h1:7:1.0"})  # b still names it
    assert stale(still, 3600, {"a": None, "b": "h2:3:4.0"})  # ended, taken over
    assert stale(still, 3600, {})  # its jobs are gone (pruned)


def plant(layout: Layout, host: str, pid: int, mtime: float, **kw: object) -> Path:
    path = write_beat(
        layout,
        host=host,
        pid=pid,
        owner=f"{host}:{pid}:1.0",
        started=1.0,
        running=0,
        queued=0,
        **kw,  # type: ignore[arg-type]
    )
    os.utime(path, (mtime, mtime))
    return path


def test_the_live_watcher_removes_dead_files_after_keep_after(layout: Layout) -> None:
    watcher, _fake, clock = in_process(layout)
    dead = plant(layout, "retired", 11, clock.time())
    stopped = plant(layout, "detached", 12, clock.time(), stopped=True)
    watcher.turn()
    mine = watcher.scale.my_beat()
    assert set(beat_files(layout)) == {dead, stopped, mine}

    clock.advance(3599)  # dead by host_dead_after, not yet stale
    watcher.turn()
    assert dead.exists()

    clock.advance(61)  # an hour and a minute: the next look removes it
    watcher.turn()
    assert set(beat_files(layout)) == {stopped, mine}


def test_prune_beats_keeps_the_callers_own_and_unreadable_files(layout: Layout) -> None:
    now = 10_000_000.0
    own = plant(layout, "me", 1, now - 9000)
    old = plant(layout, "old", 2, now - 9000)
    torn = layout.state_dir / "watchers" / "x--3.json"
    torn.write_text('{"pid": "not a number"}')
    os.utime(torn, (now - 9000, now - 9000))
    removed = prune_beats(layout, now, 3600, keep_owner="me:1:1.0")
    assert [(p, b.host) for p, b in removed] == [(old, "old")]
    assert set(beat_files(layout)) == {own, torn}


def test_a_host_is_judged_dead_before_its_file_is_pruned_and_only_once(
    layout: Layout, caplog: pytest.LogCaptureFixture
) -> None:
    """One long gap (a suspended laptop): the host is seen dead (the watcher reconciles at
    once) in the same turn its file goes, and not again once the file is gone."""
    watcher, _fake, clock = in_process(layout)
    gone = plant(layout, "retired", 11, clock.time())
    watcher.turn()
    clock.advance(7200)
    with caplog.at_level(logging.WARNING, logger="hopper.scaleout"):
        watcher.turn()
        assert not gone.exists()
        clock.advance(120)
        watcher.turn()
    taken = [r.getMessage() for r in caplog.records if "taking over" in r.getMessage()]
    assert taken == ["host(s) retired: no watcher heartbeat for 60s; taking over their jobs"]
