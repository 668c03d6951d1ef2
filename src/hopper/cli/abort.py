"""``hopper abort ID``: create the ABORT marker (exactly what ``touch`` would do).

``--json``: ``{"requested": [{"id", "name", "marker"}], "finished": [{"id", "name",
"state"}]}`` — the jobs asked to stop, and those that had already ended (exit 1).
"""

from __future__ import annotations

import argparse
from typing import Any

from hopper.cli.common import (
    EXIT_FAILED,
    add_json_arg,
    add_root_args,
    context,
    find_job,
    print_json,
    warn,
)
from hopper.core.states import is_terminal
from hopper.core.terminal import terminal_safe
from hopper.store.jobfile import ABORT_FILE


def register(sub: Any) -> None:
    p = sub.add_parser("abort", help="cancel a queued or running job")
    add_root_args(p)
    p.add_argument("ids", nargs="+", metavar="ID", help="job id, id prefix or name")
    add_json_arg(p, '{"requested": [...], "finished": [...]}')
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout, _ = context(args)
    code = 0
    requested: list[dict[str, str]] = []
    finished: list[dict[str, str]] = []
    for ref in args.ids:
        record = find_job(layout, ref)
        if is_terminal(record.state):
            warn(f"{record.id} already finished ({record.state}); nothing to abort")
            finished.append({"id": record.id, "name": record.name, "state": str(record.state)})
            code = EXIT_FAILED
            continue
        marker = layout.run_dir(record.id) / ABORT_FILE
        marker.touch()
        requested.append({"id": record.id, "name": record.name, "marker": str(marker)})
        if not args.json:
            print(terminal_safe(f"abort requested: {record.id} ({marker})"))
    if args.json:
        print_json({"requested": requested, "finished": finished})
    return code
