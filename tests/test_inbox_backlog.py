"""The claim order of a backlog: a prompt dropped during a flood is claimed in the next batch.

The first tests drive store/inbox_backlog.py alone; the last ones the watcher
in-process (tests/inprocess.py: a fake clock and executor, no processes), with
small batches so a "flood" of a few dozen prompts spans several turns. The
assertions are on the order of claims and on turn counts, never on the wall
clock. Before the backlog had an order of its own, a prompt dropped after a
flood waited behind every prompt of it (134 s behind 65,000).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hopper import claims as claims_module
from hopper.intake import Intake
from hopper.store.inbox_backlog import Backlog
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from hopper.watcher import Watcher
from inprocess import FakeClock, FakeExecutor, exit_status, in_process, submit, watch_inbox


def paths(*names: str) -> list[Path]:
    return [Path(f"/inbox/{n}.prompt.md") for n in names]


def taken(backlog: Backlog, limit: int) -> list[str]:
    return [p.name.removesuffix(".prompt.md") for p in backlog.batch(limit)]


# -- the order alone --------------------------------------------------------------------
def test_a_backlog_that_fits_one_batch_is_claimed_as_it_arrived() -> None:
    backlog = Backlog()
    backlog.add(paths("a", "b"))
    backlog.add(paths("c"))
    assert taken(backlog, 8) == ["a", "b", "c"]
    assert len(backlog) == 0


def test_a_newer_arrival_takes_half_the_batch_the_oldest_the_rest() -> None:
    backlog = Backlog()
    backlog.add(paths(*(f"old{i}" for i in range(10))))  # the start-up scan
    backlog.add(paths("new"))  # one inotify hint, a turn later
    assert taken(backlog, 4) == ["new", "old0", "old1", "old2"]
    assert taken(backlog, 4) == [f"old{i}" for i in range(3, 7)]


def test_oldest_prompts_move_on_while_new_ones_keep_coming() -> None:
    backlog = Backlog()
    backlog.add(paths(*(f"old{i}" for i in range(6))))
    for turn in range(3):  # each turn brings more than a batch
        backlog.add(paths(*(f"t{turn}-{i}" for i in range(6))))
        batch = taken(backlog, 4)
        assert batch[:2] == [f"t{turn}-0", f"t{turn}-1"], batch  # the newest group first
        assert batch[2:] == [f"old{2 * turn}", f"old{2 * turn + 1}"], batch  # then the oldest


def test_a_batch_stopped_early_leaves_the_rest_in_place() -> None:
    backlog = Backlog()
    backlog.add(paths("a", "b", "c"))
    batch = backlog.batch(3)
    assert next(batch).name == "a.prompt.md"
    batch.close()  # the claim budget ran out
    assert len(backlog) == 2
    assert taken(backlog, 3) == ["b", "c"]


def test_a_path_already_waiting_is_not_added_twice() -> None:
    backlog = Backlog()
    backlog.add(paths("a", "b"))
    backlog.add(paths("b", "a"))  # a rescan or a second hint: no new group
    assert len(backlog) == 2 and paths("a")[0] in backlog
    assert taken(backlog, 8) == ["a", "b"]
    backlog.add([])
    assert not backlog and taken(backlog, 8) == []


# -- the watcher in-process -------------------------------------------------------------
FLOOD = 40
BATCH = 8


def flood(layout: Layout, clock: FakeClock, n: int = FLOOD) -> None:
    for i in range(n):
        submit(layout, clock, f"flood-{i:03d}", '+++\nagent = "bash"\n+++\ntrue\n')


def drop_urgent(layout: Layout, clock: FakeClock) -> Path:
    """The urgent prompt, renamed into the inbox (the watcher's inotify watch sees it)."""
    return submit(layout, clock, "urgent", '+++\nagent = "bash"\npriority = 10\n+++\ntrue\n')


@pytest.fixture
def claimed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the prompts the watcher claims, in the order it claims them."""
    order: list[str] = []
    real_take = Intake.take

    def take(self: Intake, path: Path, *, behind: bool = False) -> object:
        order.append(path.name.removesuffix(".prompt.md"))
        return real_take(self, path, behind=behind)

    monkeypatch.setattr(Intake, "take", take)
    return order


def run_urgent(watcher: Watcher, fake: FakeExecutor, clock: FakeClock) -> str:
    """Turn, ending each running job, until the urgent job starts; its id."""
    for _ in range(FLOOD):
        for job_id in list(watcher.runner.running_ids()):
            fake.exits[job_id] = exit_status(clock)
        watcher.turn()
        names = {read_record(watcher.layout.run_dir(i)).name: i for i in fake.started}
        if "urgent" in names:
            return names["urgent"]
    raise AssertionError("the urgent job never started")


def test_a_prompt_dropped_during_a_flood_is_claimed_in_the_next_batch_and_starts_first(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, claimed: list[str]
) -> None:
    monkeypatch.setattr(claims_module, "CLAIM_BATCH", BATCH)
    watcher, fake, clock = in_process(layout, max_parallel=1)
    flood(layout, clock)
    watch_inbox(watcher)  # after the flood: the start-up rescan finds it, not inotify
    watcher.turn()  # the start-up rescan finds the flood; one batch claimed
    assert claimed == [f"flood-{i:03d}" for i in range(BATCH)]
    drop_urgent(layout, clock)
    watcher.turn()
    assert claimed.index("urgent") == BATCH, claimed  # first of the next batch
    assert len(claimed) == 2 * BATCH
    urgent = run_urgent(watcher, fake, clock)
    assert fake.started[1] == urgent, "the urgent job starts at the first free slot"


def test_a_prompt_dropped_after_an_inotify_flood_is_claimed_in_the_next_batch(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, claimed: list[str]
) -> None:
    monkeypatch.setattr(claims_module, "CLAIM_BATCH", BATCH)
    watcher, _fake, clock = in_process(layout, max_parallel=1)
    watch_inbox(watcher)
    watcher.turn()  # the start-up rescan: an empty inbox
    for start in range(0, FLOOD, FLOOD // 4):  # the flood arrives by hints over four turns
        for i in range(start, start + FLOOD // 4):
            submit(layout, clock, f"flood-{i:03d}", '+++\nagent = "bash"\n+++\ntrue\n')
        watcher.turn()
    before = len(claimed)
    assert before == 4 * BATCH
    drop_urgent(layout, clock)
    watcher.turn()
    assert claimed.index("urgent") == before, claimed
    assert len(claimed) == before + BATCH
    assert "flood-000" in claimed[:BATCH], "the oldest prompts were claimed all along"


def test_claims_stop_at_the_time_budget_and_go_on_next_turn(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, claimed: list[str]
) -> None:
    """A slow disk: each claim takes over a fifth of the budget; a turn claims five."""
    watcher, fake, clock = in_process(layout, max_parallel=1)
    flood(layout, clock, 12)
    real_take = Intake.take

    def slow_take(self: Intake, path: Path, *, behind: bool = False) -> object:
        clock.advance(claims_module.CLAIM_BUDGET / 4.5)
        return real_take(self, path, behind=behind)

    monkeypatch.setattr(Intake, "take", slow_take)
    seen = []
    for _ in range(3):
        watcher.turn()
        seen.append((len(claimed), len(fake.started)))
    assert seen == [(5, 1), (10, 1), (12, 1)]  # the first job started after five claims


def test_a_claim_batch_ends_once_the_loop_is_woken_and_the_end_is_handled_at_once(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, claimed: list[str]
) -> None:
    """A job's end wakes the loop (SIGCHLD's byte on the wake-up pipe) in the middle
    of a claim batch: the batch stops after the claim under way, and the same turn
    files the end and starts the next job, instead of claiming on while the slot
    waits (up to CLAIM_BUDGET, 0.2 s a turn, before this)."""
    monkeypatch.setattr(claims_module, "CLAIM_BATCH", BATCH)
    watcher, fake, clock = in_process(layout, max_parallel=1)
    flood(layout, clock, 30)
    watcher.turn()  # the start-up rescan: a batch claimed (nothing runs to wake the loop)
    assert len(claimed) == BATCH and len(fake.started) == 1
    first = fake.started[0]
    real_take = Intake.take

    def take(self: Intake, path: Path, *, behind: bool = False) -> object:
        if len(claimed) == BATCH + 2:  # the job ends while the turn's third claim runs
            fake.exits[first] = exit_status(clock)
            watcher.waker.wake()
        return real_take(self, path, behind=behind)

    monkeypatch.setattr(Intake, "take", take)
    watcher.turn()
    assert len(claimed) == BATCH + 3, "the batch stops after the claim under way"
    assert first not in watcher.runner.running_ids(), "the end is handled in that turn"
    assert len(fake.started) == 2, "and the next job started in it"
    watcher.waker.wait(0)  # the loop's sleep drains the pipe
    watcher.turn()
    assert len(claimed) == 2 * BATCH + 3, "not woken: a whole batch again"


def test_a_start_that_reported_ends_a_claim_batch_too(
    layout: Layout, monkeypatch: pytest.MonkeyPatch, claimed: list[str]
) -> None:
    """A start's descriptor ready (a supervisor's pid line: the start can be
    committed and released) ends the batch the same way."""
    monkeypatch.setattr(claims_module, "CLAIM_BATCH", BATCH)
    watcher, _fake, clock = in_process(layout, max_parallel=1)
    flood(layout, clock, 30)
    reported, writer = socket.socketpair()
    monkeypatch.setattr(watcher.runner, "waiting_on", lambda: [reported])
    real_take = Intake.take

    def take(self: Intake, path: Path, *, behind: bool = False) -> object:
        if len(claimed) == 1:  # while the second claim runs
            writer.send(b'{"pid": 1}\n')
        return real_take(self, path, behind=behind)

    monkeypatch.setattr(Intake, "take", take)
    try:
        watcher.turn()
        assert len(claimed) == 2
    finally:
        reported.close()
        writer.close()
