"""``hopper budgets``, and budgets beside ``hopper usage`` and in ``hopper status``: the same
ledger, the same figures, to the cent."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hopper.core.record import JobRecord, Usage
from hopper.core.states import JobState, Reason
from hopper.store.jobfile import write_record
from hopper.store.layout import Layout
from hopper.store.spend import file_spends, missing, rebuild

Run = Callable[..., subprocess.CompletedProcess[str]]
BUDGETS = """
[budgets]
daily_usd = 100
timezone = "UTC"
[budgets.groups.app]
daily_usd = 0.5
[budgets.agents.codex]
daily_tokens = 1_000_000
"""


def job(
    layout: Layout,
    n: int,
    *,
    agent: str,
    group: str,
    usage: Usage | None,
    state: JobState = JobState.SUCCEEDED,
) -> JobRecord:
    now = datetime.now(UTC)
    terminal = state is JobState.SUCCEEDED
    record = JobRecord(
        id=f"{now:%Y%m%d-%H%M%S}-{n:03d}-job{n}-0001",
        name=f"job{n}",
        state=state,
        reason=Reason.COMPLETED if terminal else None,
        agent=agent,
        host="h",
        inbox_path=f"inbox/{group}/job{n}.prompt.md",
        group=group,
        created_at=now - timedelta(seconds=5),
        finished_at=now if terminal else None,
        usage=usage,
    )
    run_dir = layout.run_dir(record.id)
    run_dir.mkdir(parents=True)
    write_record(run_dir, record, durable=False)
    return record


def finished_jobs(layout: Layout) -> list[JobRecord]:
    costs = [0.1234567, 0.2, 0.3333333, None, 0.05]  # awkward cents on purpose
    out = [
        job(
            layout,
            n,
            agent="codex" if cost is None else "claude",
            group="app" if n % 2 else "web",
            usage=Usage(
                input_tokens=1000 * (n + 1), output_tokens=77, cache_read_tokens=5, cost_usd=cost
            ),
        )
        for n, cost in enumerate(costs)
    ]
    out.append(job(layout, 9, agent="bash", group="app", usage=None))
    file_spends(layout, out)  # what finalizing files, job by job
    return out


def with_budgets(config_file: Path) -> None:
    config_file.write_text(config_file.read_text() + BUDGETS)


def test_usage_and_budgets_agree_to_the_cent(
    layout: Layout, config_file: Path, hopper: Run
) -> None:
    with_budgets(config_file)
    finished_jobs(layout)
    assert missing(layout, rebuild(layout)) == []  # the ledger holds what the records say
    usage = json.loads(hopper("usage", "--json", "--by", "group").stdout)
    budgets = json.loads(hopper("budgets", "--json").stdout)
    rows = {b["scope"]: b for b in budgets["budgets"]}
    assert usage["budgets"] == budgets
    assert f"{rows['all']['spent']:.6f}" == f"{usage['total']['cost_usd']:.6f}"
    by_group = {r["key"]: r for r in usage["rows"]}
    assert f"{rows['group:app']['spent']:.6f}" == f"{by_group['app']['cost_usd']:.6f}"
    assert rows["all"]["uncounted"] == 1  # codex reported tokens only
    codex_tokens = 4000 + 77 + 5
    assert rows["agent:codex"]["spent"] == codex_tokens
    assert (rows["group:app"]["reached"], rows["all"]["reached"]) == (False, False)


def test_a_reached_budget_is_shown_with_what_it_holds(
    layout: Layout, config_file: Path, hopper: Run
) -> None:
    with_budgets(config_file)
    finished_jobs(layout)
    extra = job(layout, 11, agent="claude", group="app", usage=Usage(cost_usd=0.3))
    file_spends(layout, [extra])  # app: 0.2 + 0.3 (n = 1, 3 are app; 3 is codex, unknown)
    queued = job(layout, 20, agent="claude", group="app", usage=None, state=JobState.QUEUED)
    job(layout, 21, agent="bash", group="app", usage=None, state=JobState.QUEUED)
    out = hopper("budgets")
    assert out.returncode == 0, out.stderr
    assert "group:app" in out.stdout
    assert "raise [budgets.groups.app] daily_usd (1 queued agent job held)" in out.stdout
    rows = {b["scope"]: b for b in json.loads(hopper("budgets", "--json").stdout)["budgets"]}
    assert (rows["group:app"]["reached"], rows["group:app"]["held"]) == (True, 1)
    assert rows["group:app"]["reason"].startswith("waiting: group app spent $0.")
    status = hopper("status")
    assert "waiting: group app spent" in status.stdout
    assert queued.id in status.stdout


def test_no_budgets_says_how_to_set_them(hopper: Run) -> None:
    out = hopper("budgets")
    assert out.returncode == 0
    assert "no budgets: add a [budgets] table to the config (docs/budgets.md)" in out.stdout
    assert json.loads(hopper("budgets", "--json").stdout)["budgets"] == []


def test_a_bad_budgets_table_is_named_with_its_key(
    layout: Layout, config_file: Path, hopper: Run
) -> None:
    config_file.write_text(config_file.read_text() + "[budgets.groups.app]\ndaily_usd = -1\n")
    out = hopper("budgets")
    assert out.returncode == 1  # as every command whose config is refused
    assert str(config_file) in out.stderr
    assert "'budgets.groups.app.daily_usd'" in out.stderr
    job(layout, 1, agent="bash", group="app", usage=None)
    status = hopper("status")  # the job list is not hidden by it
    assert status.returncode == 0
    assert "job1" in status.stdout
    assert "budgets:" in status.stdout and "daily_usd" in status.stdout
