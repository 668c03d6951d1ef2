"""A start ahead waits at a spawned gate, and is begun afresh before that gate can give way.

A spawned job (proc/gate.py) waits at its gate on a lease the kernel breaks
after lease-break-time (45 s by default); a start ahead may wait for as long as
the slots stay busy. So a start ahead is begun with ``Launch.held_for`` (half
the lease-break-time: pending_starts.py ``ahead_hold``), withdrawn once it has
waited that long and begun again; one found that old when its slot frees (a
loop held up) is withdrawn and the job started afresh, never released. Where
no hold fits, ``held_for`` is None and the job waits at a forked gate, as
before. In-process: the fake executor, with starts ahead, and the fake clock.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest

from hopper import pending_starts
from hopper.core.record import JobRecord
from hopper.core.states import JobState
from hopper.executors.protocol import Launch, Report, Running, Start, Starting
from hopper.pending_starts import ahead_hold
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher
from inprocess import FakeClock, FakeExecutor, exit_status, in_process, submit, turns

PLAIN = '+++\nagent = "bash"\n+++\ntrue\n'


class FakeAhead(Starting):
    """A start begun ahead: ready at once; its report starts the job (the fake's way)."""

    def __init__(self, fake: AheadExecutor, launch: Launch) -> None:
        super().__init__(launch.record, launch.run_dir, deadline=float("inf"))
        self.fake, self.launch = fake, launch
        self.fd = os.open(os.devnull, os.O_RDONLY)  # always readable
        fake.fds.append(self.fd)

    def fileno(self) -> int:
        return self.fd

    def report(self) -> Report:
        started = FakeExecutor.start(self.fake, replace(self.launch, ahead=False))
        assert isinstance(started, Running)
        self.fake.from_ahead.append(self.record.id)
        return started

    def release(self, record: JobRecord) -> Running:
        raise AssertionError("a fake start ahead reports a job that runs already")

    def abandon(self) -> None:
        self.fake.withdrawn.append(self.record.id)


@dataclass
class AheadExecutor(FakeExecutor):
    """The fake executor, beginning starts ahead (as the local one does)."""

    aheads: list[Launch] = field(default_factory=list)  # every start begun ahead
    withdrawn: list[str] = field(default_factory=list)
    from_ahead: list[str] = field(default_factory=list)  # jobs started by their start ahead
    fds: list[int] = field(default_factory=list)

    def start(self, launch: Launch) -> Start:
        if launch.ahead:
            self.aheads.append(launch)
            return FakeAhead(self, launch)
        return super().start(launch)


@pytest.fixture
def lease_break(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """The lease-break-time the watcher reads (10 s unless a test says otherwise)."""
    value: list[float | None] = [10.0]
    monkeypatch.setattr(pending_starts, "lease_break_time", lambda: value[0])
    return value


def one_slot_two_jobs(layout: Layout) -> tuple[Watcher, AheadExecutor, FakeClock, str, str]:
    """One slot: "a" running, "b" queued behind it with its start ahead begun."""
    clock = FakeClock()
    watcher, plain, _ = in_process(layout, clock, max_parallel=1, poll_interval="0.25s")
    fake = AheadExecutor(clock, owner=plain.owner, heartbeat_interval=plain.heartbeat_interval)
    watcher.runner.executors["local"] = fake  # type: ignore[index]
    submit(layout, clock, "a", PLAIN)
    turns(watcher, clock, lambda: len(fake.started) == 1)
    submit(layout, clock, "b", PLAIN)
    turns(watcher, clock, lambda: len(fake.aheads) == 1)
    (first,) = fake.started
    second = fake.aheads[0].record.id
    return watcher, fake, clock, first, second


@pytest.fixture
def closing() -> Iterator[list[AheadExecutor]]:
    made: list[AheadExecutor] = []
    yield made
    for fake in made:
        for fd in fake.fds:
            os.close(fd)


def test_the_hold_is_half_the_lease_break_time_when_the_loop_turns_often_enough() -> None:
    assert ahead_hold(45.0, 0.25) == 22.5
    assert ahead_hold(10.0, 0.5) == 5.0
    assert ahead_hold(None, 0.25) is None  # unreadable: a forked gate
    assert ahead_hold(3.0, 0.1) is None  # 1.5 s: begun afresh too often
    assert ahead_hold(45.0, 10.0) is None  # the loop may not look again in time


def test_a_start_ahead_is_withdrawn_and_begun_afresh_once_it_has_waited_its_hold(
    layout: Layout, lease_break: list[float | None], closing: list[AheadExecutor]
) -> None:
    watcher, fake, clock, first, second = one_slot_two_jobs(layout)
    closing.append(fake)
    assert fake.aheads[0].held_for == 5.0
    clock.advance(3.0)  # 3 s into its 5 s hold
    watcher.turn()
    assert fake.withdrawn == [] and len(fake.aheads) == 1
    clock.advance(2.0)  # past it
    watcher.turn()
    assert fake.withdrawn == [second]
    assert [a.record.id for a in fake.aheads] == [second, second]  # begun again, same job
    assert read_record(layout.run_dir(second)).state is JobState.QUEUED
    fake.exits[first] = exit_status(clock)
    turns(watcher, clock, lambda: second in fake.started)
    assert fake.from_ahead == [second]  # the fresh start ahead ran it
    assert fake.started == [first, second]


def test_a_start_ahead_found_past_its_hold_when_the_slot_frees_is_not_released(
    layout: Layout, lease_break: list[float | None], closing: list[AheadExecutor]
) -> None:
    """The loop held up past the hold (the ahead's spawned gate may have given way):
    the job is started afresh, not from its start ahead."""
    watcher, fake, clock, first, second = one_slot_two_jobs(layout)
    closing.append(fake)
    clock.advance(60.0)  # no turn meanwhile
    fake.exits[first] = exit_status(clock)
    watcher.turn()
    assert second in fake.started
    assert fake.withdrawn == [second]
    assert fake.from_ahead == []
    assert fake.started == [first, second]


def test_without_a_lease_break_time_a_start_ahead_waits_at_a_forked_gate_for_as_long_as_it_takes(
    layout: Layout, lease_break: list[float | None], closing: list[AheadExecutor]
) -> None:
    lease_break[0] = None
    watcher, fake, clock, first, second = one_slot_two_jobs(layout)
    closing.append(fake)
    assert fake.aheads[0].held_for is None
    for _ in range(5):
        clock.advance(60.0)
        watcher.turn()
    assert fake.withdrawn == [] and len(fake.aheads) == 1
    fake.exits[first] = exit_status(clock)
    turns(watcher, clock, lambda: second in fake.started)
    assert fake.from_ahead == [second]
