"""``hopper priority ID N``: ask the watcher to change a queued job's priority.

job.json has one writer (the watcher that owns the job), so this writes the
request ``runs/<id>/PRIORITY``; the watcher applies it at its next scheduling
pass and records a ``priority_changed`` event. See docs/scheduling.md.
``--json``: ``{"id", "name", "from", "to", "request"}`` (``request``: the file written).
"""

from __future__ import annotations

import argparse
from typing import Any

from hopper.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    add_json_arg,
    add_root_args,
    context,
    find_job,
    print_json,
    warn,
)
from hopper.core.states import JobState
from hopper.core.terminal import terminal_safe
from hopper.store.markers import PRIORITY_RANGE, request_priority


def register(sub: Any) -> None:
    p = sub.add_parser("priority", help="change a queued job's priority (higher starts first)")
    add_root_args(p)
    p.add_argument("id", metavar="ID", help="job id, id prefix or name")
    p.add_argument("priority", type=int, metavar="N", help="-1000 .. 1000; default 0")
    add_json_arg(p, '{"id", "name", "from", "to", "request"}')
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout, _ = context(args)
    low, high = PRIORITY_RANGE
    if not low <= args.priority <= high:
        warn(f"priority {args.priority} is outside {low}..{high}")
        return EXIT_USAGE
    record = find_job(layout, args.id)
    if record.state is not JobState.QUEUED:
        warn(f"{record.id} is {record.state}; only a queued job can be reordered")
        return EXIT_FAILED
    path = request_priority(layout.run_dir(record.id), args.priority)
    if args.json:
        answer = {"id": record.id, "name": record.name, "from": record.priority}
        print_json({**answer, "to": args.priority, "request": str(path)})
        return 0
    print(
        terminal_safe(
            f"priority {record.priority} -> {args.priority} requested: {record.id} ({path})"
        )
    )
    return 0
