"""Heartbeats are paced: at most ``heartbeat_rate`` a second per watcher.

Each heartbeat rewrites a job.json (~0.6 ms of CPU); 1,000 running jobs at
``heartbeat_interval`` 5 s would be 200 a second. Beyond ``heartbeat_rate ×
heartbeat_interval`` running jobs each job's heartbeat comes every
``running / heartbeat_rate`` seconds, never more than ``host_dead_after / 2``
apart; heartbeats that fell due together spread out.
"""

from __future__ import annotations

from collections import Counter

import pytest

from hopper.heartbeats_due import HeartbeatsDue
from hopper.running import Running
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher
from inprocess import FakeClock, FakeExecutor, in_process, submit, turns

SLEEP = '+++\nagent = "bash"\n+++\nsleep 1\n'
JOBS = 12


def test_heartbeats_due_together_are_spread_at_the_rate() -> None:
    beats = HeartbeatsDue()
    dues = [beats.schedule(f"j{i}", 0.0, interval=1.0, rate=4.0, longest=100.0) for i in range(6)]
    assert dues == [1.0, 1.25, 1.5, 1.75, 2.0, 2.25]
    # a later heartbeat that the rate does not hold back comes on its interval
    assert beats.schedule("j0", 10.0, interval=1.0, rate=4.0, longest=100.0) == 11.0


def test_a_paced_heartbeat_is_never_later_than_longest() -> None:
    beats = HeartbeatsDue()
    dues = [beats.schedule(f"j{i}", 0.0, interval=1.0, rate=0.01, longest=20.0) for i in range(3)]
    assert dues == [1.0, 20.0, 20.0]
    # and an interval longer than longest wins over it
    assert beats.schedule("j3", 0.0, interval=30.0, rate=100.0, longest=20.0) == 30.0


def _running(layout: Layout, **config: object) -> tuple[Watcher, FakeExecutor, FakeClock]:
    watcher, fake, clock = in_process(layout, max_parallel=JOBS, **config)
    for i in range(JOBS):
        submit(layout, clock, f"job{i}", SLEEP)
    turns(watcher, clock, lambda: len(fake.started) == JOBS)
    return watcher, fake, clock


def _count_beats(
    watcher: Watcher, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, seconds: float
) -> Counter[str]:
    beats: Counter[str] = Counter()
    real = watcher.runner._watch._heartbeat

    def heartbeat(job: Running, mono: float) -> None:
        beats[job.record.id] += 1
        real(job, mono)

    monkeypatch.setattr(watcher.runner._watch, "_heartbeat", heartbeat)
    for _ in range(int(seconds / 0.25)):
        clock.advance(0.25)
        watcher.turn()
    return beats


def test_more_jobs_than_the_rate_allows_are_beaten_less_often(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12 jobs, heartbeat_interval 1 s, heartbeat_rate 4: 4 a second in all, each
    job every 3 s (unpaced: 12 a second, each job every second)."""
    watcher, _, clock = _running(
        layout, heartbeat_interval="1s", heartbeat_rate=4, host_dead_after="60s"
    )
    _count_beats(watcher, clock, monkeypatch, 10)  # past the start's clump
    beats = _count_beats(watcher, clock, monkeypatch, 30)
    assert 4 * 30 - JOBS <= sum(beats.values()) <= 4 * 30 + 1
    assert set(beats) == {j.record.id for j in watcher.runner.running_jobs()}
    assert all(9 <= n <= 11 for n in beats.values()), beats  # every ~3 s, none starved
    for job in watcher.runner.running_jobs():
        beat = read_record(job.run_dir).heartbeat_at
        assert beat is not None and (clock.now() - beat).total_seconds() <= 3.25


def test_under_the_rate_every_job_is_beaten_on_its_interval(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12 jobs at 1 s need 12 a second, under heartbeat_rate 40: not stretched. Due
    together, they are handed out 1/40 s apart, so with this test's turns 0.25 s
    apart one may wait a turn: every 1 to 1.25 s (paced at 4 a second, every 3 s)."""
    watcher, _, clock = _running(layout, heartbeat_interval="1s", heartbeat_rate=40)
    _count_beats(watcher, clock, monkeypatch, 10)
    beats = _count_beats(watcher, clock, monkeypatch, 30)
    assert len(beats) == JOBS
    assert all(30 / 1.25 <= n <= 31 for n in beats.values()), beats


def test_paced_heartbeats_stay_within_half_of_host_dead_after(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """heartbeat_rate 0.2 would space 12 jobs 60 s apart; host_dead_after 30 s caps it
    at 15 s: two heartbeats within host_dead_after, however many jobs run."""
    watcher, _, clock = _running(
        layout, heartbeat_interval="1s", heartbeat_rate=0.2, host_dead_after="30s"
    )
    _count_beats(watcher, clock, monkeypatch, 20)
    beats = _count_beats(watcher, clock, monkeypatch, 40)
    assert set(beats) == {j.record.id for j in watcher.runner.running_jobs()}
    assert all(2 <= n <= 3 for n in beats.values()), beats  # every 15 s (a third: 4-5)
    for job in watcher.runner.running_jobs():
        beat = read_record(job.run_dir).heartbeat_at
        assert beat is not None and (clock.now() - beat).total_seconds() <= 15.25
