"""``hopper status``: a table of jobs, or ``--json`` with job.json's fields."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from hopper.cli.common import add_root_args, all_records, context, find_job
from hopper.core.durations import format_duration
from hopper.core.record import JobRecord
from hopper.core.states import JobState

COLUMNS = ("ID", "NAME", "AGENT", "STATE", "REASON", "STARTED", "DURATION", "ATTEMPT")


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="show jobs (all, or the ones named)")
    add_root_args(p)
    p.add_argument("ids", nargs="*", metavar="ID", help="job id, id prefix or name")
    p.add_argument(
        "--state",
        choices=[s.value for s in JobState],
        action="append",
        help="only jobs in this state (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="JSON array of job records")
    p.set_defaults(handler=handle)


def duration(record: JobRecord, now: datetime) -> str:
    if record.duration_seconds is not None:
        return format_duration(record.duration_seconds)
    if record.started_at is not None:
        return format_duration((now - record.started_at).total_seconds())
    return "-"


def row(record: JobRecord, now: datetime) -> tuple[str, ...]:
    started = (
        record.started_at.astimezone().strftime("%m-%d %H:%M:%S") if record.started_at else "-"
    )
    return (
        record.id,
        record.name,
        record.agent,
        record.state.value,
        record.reason.value if record.reason else "-",
        started,
        duration(record, now),
        str(record.attempt),
    )


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def handle(args: argparse.Namespace) -> int:
    layout, _ = context(args)
    records = [find_job(layout, ref) for ref in args.ids] if args.ids else all_records(layout)
    if args.state:
        records = [r for r in records if r.state.value in args.state]
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
        return 0
    if not records:
        print(f"no jobs under {layout.runs}")
        return 0
    now = datetime.now(UTC)
    print(table([COLUMNS, *(row(r, now) for r in records)]))
    return 0
