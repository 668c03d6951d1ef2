"""The sweep of queued jobs' ABORT and PRIORITY markers is spread over turns.

Over 65,000 queued jobs one pass took ~7 s, and it came due every second:
the watcher did little else. Now a pass spends at most SWEEP_BUDGET per turn,
rests SWEEP_REST times as long, and goes on at a later turn. In-process
(tests/inprocess.py): each marker check moves the fake clock on, as a slow
disk would; assertions are on how many jobs each turn looked at and on the
turn the ABORT took effect.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hopper import claims as claims_module
from hopper import starting as starting_module
from hopper.core.states import JobState
from hopper.starting import Starts
from hopper.store.jobfile import ABORT_FILE, read_record
from hopper.store.layout import Layout
from inprocess import in_process, marker_looks, submit

QUEUE = 40
SLICE = 8  # the budget is looked at every SLICE jobs (CLAIM_BATCH, patched)


def test_a_pass_over_a_large_queue_is_spread_over_turns_and_still_sees_abort(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claims_module, "CLAIM_BATCH", SLICE)
    watcher, fake, clock = in_process(layout, max_parallel=1)
    for i in range(QUEUE):
        submit(layout, clock, f"q{i:03d}", '+++\nagent = "bash"\n+++\ntrue\n')
    while len(watcher.queued) + len(fake.started) < QUEUE:
        watcher.turn()  # the fake clock stands still: each pass is one turn
    last = max(watcher.queued)  # the sweep goes in claim (id) order: this one is looked at last
    (layout.run_dir(last) / ABORT_FILE).touch()

    looked: list[str] = []
    real_apply = Starts._apply_priority

    def slow_apply(self: Starts, job_id: str, run_dir: Path) -> None:
        looked.append(job_id)
        clock.advance(starting_module.SWEEP_BUDGET / 10)
        real_apply(self, job_id, run_dir)

    monkeypatch.setattr(Starts, "_apply_priority", slow_apply)
    clock.advance(starting_module.QUEUE_SWEEP_INTERVAL)  # a pass is due
    per_turn = []
    for _ in range(4):
        before = len(looked)
        watcher.turn()
        per_turn.append(len(looked) - before)
        watcher.turn()  # right after a slice the sweep rests (SWEEP_REST times the slice's cost)
        assert len(looked) == before + per_turn[-1]
        if last not in watcher.queued:
            break
        # past the rest after the slice (a slice stops within two budget checks)
        rest = starting_module.SWEEP_REST * 2 * starting_module.SWEEP_BUDGET
        clock.advance(max(starting_module.QUEUE_SWEEP_INTERVAL, rest))
    queued_then = QUEUE - 1  # one job runs
    assert sum(per_turn) == queued_then - 1  # every queued job but the aborted one
    assert max(per_turn) < queued_then / 2, per_turn  # no turn did the whole pass
    assert len(per_turn) == 3, per_turn  # and the ABORT took effect at the pass's end
    assert read_record(layout.run_dir(last)).state is JobState.ABORTED


def test_the_verdicts_over_the_whole_queue_rest_in_proportion_to_their_cost(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass ends with core/schedule.py over every queued job (O(n)); over 100,000
    queued jobs that costs as much as the pass, so the next pass waits SWEEP_REST
    times that cost as well, not just QUEUE_SWEEP_INTERVAL."""
    watcher, fake, clock = in_process(layout, max_parallel=1)
    for i in range(6):
        submit(layout, clock, f"q{i}", '+++\nagent = "bash"\n+++\ntrue\n')
    while len(watcher.queued) + len(fake.started) < 6:
        watcher.turn()
    cost = 2 * starting_module.QUEUE_SWEEP_INTERVAL  # the whole-queue verdicts, on a slow box
    real_schedule = starting_module.schedule

    def slow_schedule(**kw: object) -> object:
        if len(kw["queued"]) == len(watcher.queued):  # type: ignore[arg-type]
            clock.advance(cost)
        return real_schedule(**kw)  # type: ignore[arg-type]

    monkeypatch.setattr(starting_module, "schedule", slow_schedule)
    looked = marker_looks(monkeypatch)
    clock.advance(starting_module.QUEUE_SWEEP_INTERVAL)
    watcher.turn()  # a pass, then its verdicts over the whole queue
    assert len(looked) == 5
    looked.clear()
    clock.advance(starting_module.SWEEP_REST * cost - 1.0)  # long past the interval
    watcher.turn()
    assert looked == []  # still resting after the verdicts' cost
    clock.advance(2.0)
    watcher.turn()
    assert len(looked) == 5
