"""``hopper usage``: tokens and cost the agents reported, summed by agent, group or day."""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from hopper.budgetreport import COLUMNS as BUDGET_COLUMNS
from hopper.budgetreport import (
    BudgetReport,
    budgets_from_config,
    cells,
    queued_job_texts,
    report,
)
from hopper.cli.common import EXIT_USAGE, add_root_args, context, warn
from hopper.cli.status import add_filter_args, job_filter, load_jobs, table
from hopper.core.durations import BadDuration
from hopper.core.tally import GroupBy, UsageTotal, tally
from hopper.core.terminal import terminal_safe
from hopper.store.index import JobIndex
from hopper.store.layout import Layout

COLUMNS = ("", "JOBS", "WITH USAGE", "INPUT", "OUTPUT", "CACHE READ", "CACHE WRITE", "COST USD")


def register(sub: Any) -> None:
    p = sub.add_parser("usage", help="sum the tokens and cost agents reported")
    add_root_args(p)
    add_filter_args(p)
    p.add_argument(
        "--by",
        choices=[g.value for g in GroupBy],
        default=GroupBy.AGENT.value,
        help="one line per agent (default), group (front matter, route, else inbox folder), "
        "or UTC day the job finished",
    )
    p.add_argument(
        "--json", action="store_true", help="JSON: {by, rows, total, budgets (when set)}"
    )
    p.set_defaults(handler=handle)


def usage_row(t: UsageTotal) -> tuple[str, ...]:
    return (
        t.key,
        str(t.jobs),
        str(t.jobs_with_usage),
        f"{t.input_tokens:,}",
        f"{t.output_tokens:,}",
        f"{t.cache_read_tokens:,}",
        f"{t.cache_write_tokens:,}",
        f"{t.cost_usd:.4f}",
    )


def handle(args: argparse.Namespace) -> int:
    layout, _ = context(args)
    try:
        wanted = job_filter(args, time.time())
    except BadDuration as exc:
        warn(f"--since: {exc}")
        return EXIT_USAGE
    index, jobs = load_jobs(layout)
    with index:
        found = budget_report(layout, args.config, index)
    by = GroupBy(args.by)
    rows, total = tally([j for j in jobs if wanted.matches(j)], by)
    if args.json:
        out: dict[str, Any] = {
            "by": by.value,
            "rows": [asdict(r) for r in rows],
            "total": asdict(total),
        }
        if found is not None:
            out["budgets"] = found.as_json()
        print(json.dumps(out, indent=2))
        return 0
    header = (by.value.upper(), *COLUMNS[1:])
    print(table([header, *(usage_row(r) for r in rows), usage_row(total)]))
    if found is not None:
        print()
        print(table([BUDGET_COLUMNS, *(cells(r) for r in found.rows)]))
        for line in found.held_lines():
            print(terminal_safe(line))
    return 0


def budget_report(layout: Layout, cli_config: str | None, index: JobIndex) -> BudgetReport | None:
    """The budgets beside the usage, from the same ledger the watchers hold jobs by."""
    budgets = budgets_from_config(cli_config, os.environ)
    if budgets is None:
        return None
    return report(layout, budgets, datetime.now(UTC), queued_job_texts(index))
