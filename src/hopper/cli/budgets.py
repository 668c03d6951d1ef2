"""``hopper budgets``: each budget's limit, spend this period, what it holds, when it resets."""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from typing import Any

from hopper.budgetreport import COLUMNS, budgets_from_config, cells, queued_job_texts, report
from hopper.cli.common import add_root_args, read_context
from hopper.cli.status import open_index, table


def register(sub: Any) -> None:
    p = sub.add_parser(
        "budgets", help="each budget: limit, spent this period, held jobs, reset time"
    )
    add_root_args(p)
    p.add_argument("--json", action="store_true", help="JSON: {timezone, on_budget, budgets}")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout = read_context(args)
    budgets = budgets_from_config(args.config, dict(os.environ))
    if budgets is None:
        if args.json:
            print(json.dumps({"timezone": None, "on_budget": None, "budgets": []}, indent=2))
        else:
            print("no budgets: add a [budgets] table to the config (docs/budgets.md)")
        return 0
    with open_index(layout) as index:
        queued = queued_job_texts(index)
    found = report(layout, budgets, datetime.now(UTC), queued)
    if args.json:
        print(json.dumps(found.as_json(), indent=2))
        return 0
    print(table([COLUMNS, *(cells(r) for r in found.rows)]))
    print(f"days begin at 00:00 {found.timezone}; on_budget = {found.on_budget}")
    for line in found.held_lines():
        print(line)
    return 0
