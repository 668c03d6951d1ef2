"""Budgets per scope in the watcher: held agent jobs, bash and other scopes running on,
the reason in job.json, and a new day releasing the hold (in-process, fake clock)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hopper.core import lifecycle
from hopper.core.lifecycle import Ended, Exited
from hopper.core.record import JobRecord, Usage
from hopper.core.states import JobState, Reason
from hopper.store import ledger
from hopper.store.jobfile import read_events, read_record
from hopper.store.layout import Layout
from hopper.store.spend import SpendLedger, file_spends
from hopper.watcher import Watcher
from inprocess import FakeClock, FakeExecutor, exit_status, in_process, submit
from test_webhook import Receiver, verify

BUDGETS = {
    "max_parallel": 4,
    "limits": {"agent_default": 4},
    "budgets": {"timezone": "Europe/Berlin", "groups": {"app": {"daily_usd": 1.0}}},
}


def agent_prompt(name: str) -> str:
    return f'+++\nagent = "claude"\nname = "{name}"\n+++\nsay hi\n'


def turns(w: Watcher, clock: FakeClock, n: int) -> None:
    """``n`` turns a second apart (rescans come round on the fake clock)."""
    for _ in range(n):
        clock.advance(1.0)
        w.turn()


def run_until_started(w: Watcher, fake: FakeExecutor, n: int) -> None:
    for _ in range(10):
        fake.clock.advance(1.0)
        w.turn()
        if len(fake.started) >= n:
            return
    raise AssertionError(f"started {fake.started}, wanted {n}")


def end_with_usage(
    layout: Layout, fake: FakeExecutor, clock: FakeClock, job_id: str, cost: float
) -> None:
    """The job ends as a driven agent does: agent.json with its usage, then its exit."""
    summary = {
        "outcome": "success",
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": cost},
    }
    (layout.run_dir(job_id) / "agent.json").write_text(json.dumps(summary))
    fake.exits[job_id] = exit_status(clock)


def by_name(layout: Layout, name: str) -> JobRecord:
    for run_dir in layout.runs.iterdir():
        record = read_record(run_dir)
        if record.name == name:
            return record
    raise AssertionError(name)


def at_noon_berlin(clock: FakeClock) -> None:
    clock.wall = datetime(2026, 11, 26, 11, 0, tzinfo=UTC).timestamp()  # 12:00 in Berlin


def test_a_reached_group_budget_holds_its_agent_jobs_until_the_next_day(layout: Layout) -> None:
    clock = FakeClock()
    at_noon_berlin(clock)
    w, fake, clock = in_process(layout, clock, **BUDGETS)
    submit(layout, clock, "first", agent_prompt("first"), "app")
    run_until_started(w, fake, 1)
    (first,) = fake.started
    end_with_usage(layout, fake, clock, first, 1.02)  # past the group's $1.00
    w.turn()
    assert read_record(layout.run_dir(first)).state is JobState.SUCCEEDED
    assert [
        s.cost_usd
        for s in SpendLedger(layout).spends(datetime(2026, 11, 26, tzinfo=UTC), clock.now())
    ] == [1.02]

    submit(layout, clock, "second", agent_prompt("second"), "app")
    submit(
        layout,
        clock,
        "script",
        '+++\nagent = "bash"\nname = "script"\n+++\necho hi\n',
        "app",
    )
    submit(layout, clock, "other", agent_prompt("other"), "web")
    turns(w, clock, 5)
    started = {read_record(layout.run_dir(i)).name for i in fake.started}
    assert started == {"first", "script", "other"}  # bash and the other group run on
    held = by_name(layout, "second")
    assert held.state is JobState.QUEUED
    assert held.waiting == (
        "waiting: group app spent $1.02 of $1.00 today; resets 00:00 Europe/Berlin; "
        "raise [budgets.groups.app] daily_usd"
    )
    assert [e["event"] for e in read_events(layout.run_dir(held.id))][-1] == "budget_held"
    assert w.starts.held == {held.id}  # like PAUSE: --until-idle does not wait for it

    clock.advance(11 * 3600)  # 23:00 in Berlin: still today
    turns(w, clock, 3)
    assert read_record(layout.run_dir(held.id)).state is JobState.QUEUED
    clock.advance(3600)  # past 00:00 the next day in Berlin: no restart
    turns(w, clock, 3)
    released = read_record(layout.run_dir(held.id))
    assert released.state is JobState.RUNNING
    assert released.waiting is None
    told = [e["event"] for e in read_events(layout.run_dir(held.id))]
    assert told.count("budget_held") == 1  # written once, not every turn
    assert "budget_released" not in told  # it started: its running record clears it


def test_the_job_that_crosses_the_budget_holds_the_next_one_at_once(layout: Layout) -> None:
    """One slot: the job ending and the next start share a turn; the new spend is counted."""
    clock = FakeClock()
    at_noon_berlin(clock)
    w, fake, clock = in_process(layout, clock, **{**BUDGETS, "max_parallel": 1})
    for name in ("a", "b"):
        submit(layout, clock, f"{name}.prompt.md", agent_prompt(name), "app")
    run_until_started(w, fake, 1)
    end_with_usage(layout, fake, clock, fake.started[0], 1.5)
    turns(w, clock, 3)
    assert len(fake.started) == 1
    assert by_name(layout, "b").waiting is not None


def test_without_budgets_nothing_is_held_or_read(layout: Layout) -> None:
    w, fake, clock = in_process(layout)
    submit(layout, clock, "a", agent_prompt("a"), "app")
    run_until_started(w, fake, 1)
    assert not (layout.state_dir / "spend").exists()
    assert read_record(layout.run_dir(fake.started[0])).waiting is None


def test_a_job_filed_before_a_crash_has_its_spend_filed_by_recovery(layout: Layout) -> None:
    """Terminal job.json written, the watcher died before the ledger and the move:
    the next watcher completes the finalize and files the spend (once)."""
    clock = FakeClock()
    at_noon_berlin(clock)
    w, fake, clock = in_process(layout, clock, **BUDGETS)
    submit(layout, clock, "a", agent_prompt("a"), "app")
    run_until_started(w, fake, 1)
    job_id = fake.started[0]
    run_dir = layout.run_dir(job_id)
    rec = read_record(run_dir)
    rec = lifecycle.exited(rec, Exited(agent={"usage": Usage(cost_usd=0.75)})).record
    planned = f"processed/app/a.{job_id}.prompt.md"
    step = lifecycle.ended(rec, Ended(Reason.COMPLETED, "ok", planned, clock.now(), 1.0))
    ledger.commit(run_dir, step)  # the crash: no spend filed, prompt.md not moved
    assert SpendLedger(layout).spends(datetime(2026, 11, 26, tzinfo=UTC), clock.now()) == []
    w2, _, _ = in_process(layout, clock, **BUDGETS)
    w2.turn()
    (spent,) = SpendLedger(layout).spends(datetime(2026, 11, 26, tzinfo=UTC), clock.now())
    assert (spent.job_id, spent.cost_usd) == (job_id, 0.75)
    assert (layout.root / planned).exists()
    assert not Path(run_dir / "prompt.md").exists()


def test_on_budget_stop_stops_the_scopes_running_agent_jobs(layout: Layout) -> None:
    clock = FakeClock()
    at_noon_berlin(clock)
    budgets = {**BUDGETS["budgets"], "on_budget": "stop"}  # type: ignore[dict-item]
    w, fake, clock = in_process(layout, clock, **{**BUDGETS, "budgets": budgets})
    for name, sub in (("a", "app"), ("b", "app"), ("c", "web")):
        submit(layout, clock, name, agent_prompt(name), sub)
    submit(layout, clock, "script", '+++\nagent = "bash"\nname = "script"\n+++\necho hi\n', "app")
    run_until_started(w, fake, 4)
    ids = {read_record(layout.run_dir(i)).name: i for i in fake.started}
    end_with_usage(layout, fake, clock, ids["a"], 1.25)
    turns(w, clock, 2)
    assert fake.cancelled == [(ids["b"], Reason.BUDGET_EXCEEDED)]  # not c (web), not bash
    events = read_events(layout.run_dir(ids["b"]))
    stop = next(e for e in events if e["event"] == "budget_stop")
    assert stop["why"].startswith("group app spent $1.25 of $1.00 today")
    fake.exits[ids["b"]] = exit_status(clock, None, 15)
    turns(w, clock, 2)
    stopped = read_record(layout.run_dir(ids["b"]))
    assert (stopped.state, stopped.reason) == (JobState.FAILED, Reason.BUDGET_EXCEEDED)
    assert "on_budget" in (stopped.detail or "")
    assert read_record(layout.run_dir(ids["c"])).state is JobState.RUNNING


def test_on_budget_finish_lets_running_jobs_finish(layout: Layout) -> None:
    clock = FakeClock()
    at_noon_berlin(clock)
    w, fake, clock = in_process(layout, clock, **BUDGETS)
    for name in ("a", "b"):
        submit(layout, clock, name, agent_prompt(name), "app")
    run_until_started(w, fake, 2)
    end_with_usage(layout, fake, clock, fake.started[0], 1.25)
    turns(w, clock, 2)
    assert fake.cancelled == []
    assert read_record(layout.run_dir(fake.started[1])).state is JobState.RUNNING


@pytest.fixture
def sink() -> Iterator[Receiver]:
    rec = Receiver()
    rec.start()
    yield rec
    rec.stop()


def test_a_budget_reached_fires_its_hook_and_webhook_once_across_watchers(
    layout: Layout, tmp_path: Path, sink: Receiver
) -> None:
    receiver = sink
    out = tmp_path / "told.txt"
    hook = [
        sys.executable,
        "-c",
        HOOK,
        str(out),
        "${budget.scope}",
        "${budget.reason}",
        "${job.name}",
    ]
    hooks = {"on_budget": hook, "webhook": receiver.url, "webhook_secret": "s3"}
    clock = FakeClock()
    at_noon_berlin(clock)
    w, fake, clock = in_process(layout, clock, **BUDGETS, hooks=hooks)
    other, _, _ = in_process(layout, clock, **BUDGETS, hooks=hooks)  # a second watcher
    for name in ("a", "b"):
        submit(layout, clock, name, agent_prompt(name), "app")
    run_until_started(w, fake, 1)
    end_with_usage(layout, fake, clock, fake.started[0], 1.5)
    turns(w, clock, 3)
    for _ in range(3):
        clock.advance(1.0)
        other.turn()
    w.hooks.close()
    other.hooks.close()
    lines = out.read_text().splitlines()
    assert lines == [
        "group:app|waiting: group app spent $1.50 of $1.00 today; resets 00:00 Europe/Berlin; "
        "raise [budgets.groups.app] daily_usd|a"
    ]
    budget_posts = [g for g in receiver.got if json.loads(g.body)["event"] == "budget_reached"]
    (posted,) = budget_posts
    sent = json.loads(posted.body)
    assert (sent["event"], sent["budget"]["scope"], sent["job"]["id"]) == (
        "budget_reached",
        "group:app",
        fake.started[0],
    )
    assert verify("s3", posted.headers, posted.body)
    told = [e["event"] for e in read_events(layout.run_dir(fake.started[0]))]
    assert told.count("budget_reached") == 1
    assert "webhook_delivered" in told and "hook_ok" in told


HOOK = "import sys; open(sys.argv[1], 'a').write('|'.join(sys.argv[2:]) + '\\n')"


def test_a_start_looks_at_the_ledger_then_not_a_moment_before(layout: Layout) -> None:
    """Another watcher's job spent the budget a moment ago (within CHECK_INTERVAL of this
    watcher's last look): the agent job about to start is held all the same."""
    clock = FakeClock()
    at_noon_berlin(clock)
    w, fake, clock = in_process(layout, clock, **BUDGETS, rescan_interval="0.001s")
    turns(w, clock, 2)
    assert w.starts.budgets.holds().budgets == ()  # looked: nothing spent
    other_job = JobRecord(
        id="20261126-105900-000-elsewhere-0001",
        name="elsewhere",
        state=JobState.SUCCEEDED,
        reason=Reason.COMPLETED,
        agent="claude",
        host="other",
        inbox_path="inbox/app/elsewhere.prompt.md",
        group="app",
        created_at=clock.now(),
        finished_at=clock.now(),
        usage=Usage(cost_usd=3.0),
    )
    file_spends(layout, [other_job])  # as the other watcher files it
    submit(layout, clock, "mine", agent_prompt("mine"), "app")
    for _ in range(20):  # a few turns, the clock never past CHECK_INTERVAL
        clock.advance(0.005)
        w.turn()
        found = by_name_or_none(layout, "mine")
        if found is not None and (found.waiting or fake.asked):
            break
    assert fake.asked == []
    mine = by_name_or_none(layout, "mine")
    assert mine is not None and (mine.waiting or "").startswith("waiting: group app spent $3.00")


def by_name_or_none(layout: Layout, name: str) -> JobRecord | None:
    try:
        return by_name(layout, name)
    except AssertionError:
        return None
