"""``hopper usage`` and the pure tally and overview behind it and the watch status bar."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from hopper.core.overview import Liveness, overview
from hopper.core.record import JobRecord, Usage
from hopper.core.states import JobState
from hopper.core.summary import JobSummary, summarize
from hopper.core.tally import GroupBy, tally
from hopper.store.jobfile import write_record
from hopper.store.jobread import parse_view
from hopper.store.layout import Layout
from test_cli_status import make, names

BASE = JobSummary(
    id="1",
    name="n",
    agent="claude",
    state=JobState.SUCCEEDED,
    reason="completed",
    group="team",
    attempt=1,
    created_at=86400.0 * 10,
    started_at=None,
    finished_at=None,
    heartbeat_at=None,
    duration_seconds=None,
    usage=None,
)


def test_tally_by_agent_and_day() -> None:
    jobs = [
        replace(BASE, usage=Usage(input_tokens=10, output_tokens=2, cost_usd=0.5)),
        replace(BASE, usage=Usage(input_tokens=5, cost_usd=0.25)),
        replace(BASE, agent="bash"),
        replace(BASE, agent="codex", created_at=86400.0 * 11, usage=Usage(output_tokens=7)),
    ]
    rows, total = tally(jobs, GroupBy.AGENT)
    by = {r.key: r for r in rows}
    assert (by["claude"].jobs, by["claude"].input_tokens, by["claude"].cost_usd) == (2, 15, 0.75)
    assert (by["bash"].jobs, by["bash"].jobs_with_usage) == (1, 0)
    assert (total.jobs, total.output_tokens) == (4, 9)
    days, _ = tally(jobs, GroupBy.DAY)
    assert [d.key for d in days] == ["1970-01-11", "1970-01-12"]


def test_overview_liveness() -> None:
    now = 1000.0
    running = replace(BASE, state=JobState.RUNNING, heartbeat_at=now - 2)
    old = replace(BASE, state=JobState.RUNNING, heartbeat_at=now - 60)
    ov = overview([running, old, BASE], now, stale_after=15)
    assert ov.watcher is Liveness.ALIVE and ov.oldest_heartbeat_age == 60
    assert ov.counts[JobState.RUNNING] == 2 and ov.counts[JobState.SUCCEEDED] == 1
    assert overview([old], now, 15).watcher is Liveness.STALE
    assert overview([BASE], now, 15).watcher is Liveness.UNKNOWN


def test_usage_command(layout: Layout, hopper) -> None:
    rec = make(layout, "agentic", agent="claude", group="team")
    write_record(
        layout.run_dir(rec.id),
        rec.model_copy(update={"usage": Usage(input_tokens=100, output_tokens=5, cost_usd=0.2)}),
        durable=False,
    )
    make(layout, "scripted", agent="bash")
    make(layout, "ancient", agent="claude", age=timedelta(days=400))
    out = hopper("usage", "--json", "--since", "3650d")
    data = json.loads(out.stdout)
    assert data["total"]["input_tokens"] == 100 and data["total"]["jobs"] == 3
    by_group = json.loads(hopper("usage", "--json", "--by", "group").stdout)
    assert {r["key"] for r in by_group["rows"]} == {"team", "-"}
    assert "claude" in hopper("usage").stdout
    assert hopper("usage", "--by", "color").returncode == 2


def test_group_is_the_records_scheduling_group_where_it_names_one(layout: Layout, hopper) -> None:
    """Front matter or a route's ``group`` is the group budgets and limits use: status's
    --group and usage --by group say the same (the inbox folder only where the record
    names none), on the index's road and on the standard library's alike."""
    named = make(layout, "routed", agent="claude", group="team")
    write_record(
        layout.run_dir(named.id),
        named.model_copy(update={"group": "app", "usage": Usage(cost_usd=0.5)}),
        durable=False,
    )
    top = make(layout, "fronted", agent="claude")
    write_record(layout.run_dir(top.id), top.model_copy(update={"group": "nightly"}), durable=False)
    make(layout, "foldered", agent="claude", group="team")
    by_group = json.loads(hopper("usage", "--json", "--by", "group").stdout)
    assert {r["key"]: r["jobs"] for r in by_group["rows"]} == {"app": 1, "nightly": 1, "team": 1}
    assert names(hopper("status", "--json", "--group", "app").stdout) == ["routed"]
    assert names(hopper("status", "--json", "--group", "nightly").stdout) == ["fronted"]
    assert names(hopper("status", "--json", "--group", "team").stdout) == ["foldered"]
    for rec in (named, top):
        text = (layout.run_dir(rec.id) / "job.json").read_bytes()
        view = parse_view(text)
        assert view is not None and view.summary.group == ("app" if rec is named else "nightly")
        assert summarize(JobRecord.model_validate_json(text)).group == view.summary.group
