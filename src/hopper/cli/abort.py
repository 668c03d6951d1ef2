"""``hopper abort ID``: create the ABORT marker (exactly what ``touch`` would do)."""

from __future__ import annotations

import argparse
from typing import Any

from hopper.cli.common import EXIT_FAILED, add_root_args, context, find_job, warn
from hopper.core.states import is_terminal
from hopper.core.terminal import terminal_safe
from hopper.store.jobfile import ABORT_FILE


def register(sub: Any) -> None:
    p = sub.add_parser("abort", help="cancel a queued or running job")
    add_root_args(p)
    p.add_argument("ids", nargs="+", metavar="ID", help="job id, id prefix or name")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout, _ = context(args)
    code = 0
    for ref in args.ids:
        record = find_job(layout, ref)
        if is_terminal(record.state):
            warn(f"{record.id} already finished ({record.state}); nothing to abort")
            code = EXIT_FAILED
            continue
        marker = layout.run_dir(record.id) / ABORT_FILE
        marker.touch()
        print(terminal_safe(f"abort requested: {record.id} ({marker})"))
    return code
