"""``hopper usage``: tokens and cost the agents reported, summed by agent, group or day."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from typing import Any

from hopper.cli.common import EXIT_USAGE, add_root_args, context, warn
from hopper.cli.status import add_filter_args, job_filter, load_jobs, table
from hopper.core.durations import BadDuration
from hopper.core.tally import GroupBy, UsageTotal, tally

COLUMNS = ("", "JOBS", "WITH USAGE", "INPUT", "OUTPUT", "CACHE READ", "CACHE WRITE", "COST USD")


def register(sub: Any) -> None:
    p = sub.add_parser("usage", help="sum the tokens and cost agents reported")
    add_root_args(p)
    add_filter_args(p)
    p.add_argument(
        "--by",
        choices=[g.value for g in GroupBy],
        default=GroupBy.AGENT.value,
        help="one line per agent (default), inbox group, or UTC day the job finished",
    )
    p.add_argument("--json", action="store_true", help="JSON: {by, rows, total}")
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
    index.close()
    by = GroupBy(args.by)
    rows, total = tally([j for j in jobs if wanted.matches(j)], by)
    if args.json:
        print(
            json.dumps(
                {"by": by.value, "rows": [asdict(r) for r in rows], "total": asdict(total)},
                indent=2,
            )
        )
        return 0
    header = (by.value.upper(), *COLUMNS[1:])
    print(table([header, *(usage_row(r) for r in rows), usage_row(total)]))
    return 0
