"""Two real watchers on one root share a budget: once the group's spend (filed by either)
reaches it, neither starts another agent job of the group; a bash job of it runs on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import Watchers, drop, wait_for
from hopper.core.states import JobState
from hopper.errors import JobFileCorrupt
from hopper.store.jobfile import iter_run_dirs, read_record
from hopper.store.layout import Layout
from hopper.store.spend import SpendLedger

AGENT = textwrap.dedent(
    """\
    import json
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                      "num_turns": 1, "result": "done", "total_cost_usd": 0.6,
                      "usage": {"input_tokens": 100, "output_tokens": 20}}), flush=True)
    """
)


def configure(config_file: Path, tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    argv = json.dumps([sys.executable, str(script)])
    config_file.write_text(
        config_file.read_text()
        + "max_parallel = 4\n"
        + f'[agents.fake]\nargv = {argv}\nformat = "claude-jsonl"\nstdin = false\n'
        + "[limits]\nagent_default = 4\n"
        + '[budgets]\ntimezone = "UTC"\n[budgets.groups.app]\ndaily_usd = 1.0\n'
    )


def by_name(layout: Layout) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for run_dir in iter_run_dirs(layout.runs):
        try:
            rec = read_record(run_dir)
        except (OSError, JobFileCorrupt):  # a record mid-write: the next look
            continue
        out.setdefault(rec.name, []).append(f"{rec.state}:{rec.waiting or ''}")
    return out


def test_two_watchers_start_no_agent_job_of_a_group_past_its_shared_budget(
    layout: Layout,
    config_file: Path,
    tmp_path: Path,
    watchers: Watchers,
    hopper: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    configure(config_file, tmp_path)
    watchers.start()
    watchers.start()
    for n in (1, 2):
        drop(layout, f"spend{n}", f'+++\nagent = "fake"\nname = "spend{n}"\n+++\ngo\n', "app")

    def done(names: list[str]) -> bool:
        jobs = by_name(layout)
        return all(jobs.get(n) == [f"{JobState.SUCCEEDED}:"] for n in names)

    wait_for(lambda: done(["spend1", "spend2"]), 60, "the two spending jobs")
    # their spend is filed a moment after their terminal record (before the prompt moves)
    day = datetime.now(UTC) - timedelta(days=1), datetime.now(UTC) + timedelta(days=1)
    wait_for(lambda: len(SpendLedger(layout).spends(*day)) == 2, 30, "the spend in the ledger")
    for n in (3, 4, 5):
        drop(layout, f"late{n}", f'+++\nagent = "fake"\nname = "late{n}"\n+++\ngo\n', "app")
    drop(layout, "script", '+++\nagent = "bash"\nname = "script"\n+++\necho ran\n', "app")
    drop(layout, "elsewhere", '+++\nagent = "fake"\nname = "elsewhere"\n+++\ngo\n', "web")
    wait_for(lambda: done(["script", "elsewhere"]), 60, "the bash job and the other group")

    def all_held() -> bool:
        jobs = by_name(layout)
        return all(
            (jobs.get(f"late{n}") or [""])[0].startswith(f"{JobState.QUEUED}:waiting: group app")
            for n in (3, 4, 5)
        )

    wait_for(all_held, 30, "the late agent jobs held with the reason")
    budgets = json.loads(hopper("budgets", "--json").stdout)["budgets"]
    (app,) = [b for b in budgets if b["scope"] == "group:app"]
    assert (app["spent"], app["jobs"], app["reached"], app["held"]) == (1.2, 2, True, 3)
    status = hopper("status").stdout
    assert "waiting: group app spent $1.20 of $1.00 today" in status
    assert "(3 queued agent jobs held)" in status
    (row,) = [line for line in status.splitlines() if "late3" in line]
    assert "waiting: group app spent $1.20 of $1.00 today" in row  # the job's own row says why
    jobs = by_name(layout)
    assert all(len(jobs[f"late{n}"]) == 1 for n in (3, 4, 5))
