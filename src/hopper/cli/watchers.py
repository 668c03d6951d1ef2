"""``hopper watchers [--json]``: every watcher serving the root, from its heartbeat file.

Reads ``<root>/.hopper/watchers/*.json`` (docs/scale-out.md). ``state`` is
``alive`` (beat within ``host_dead_after``), ``stopped`` (exited, its jobs
left running for that host's next watcher) or ``dead``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from hopper.cli.common import add_root_args, context
from hopper.core.terminal import terminal_safe
from hopper.scaleout import describe


def register(sub: Any) -> None:
    p = sub.add_parser("watchers", help="list the watchers serving this root (their heartbeats)")
    add_root_args(p)
    p.add_argument("--json", action="store_true", help="one JSON array of heartbeat records")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout, config = context(args)
    rows = describe(layout, time.time(), config.host_dead_after)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(terminal_safe(f"no watcher heartbeats under {layout.state_dir / 'watchers'}"))
        return 0
    header = ("HOST", "PID", "STATE", "AGE", "RUNNING", "QUEUED", "VERSION")
    table = [header] + [
        tuple(  # heartbeat files sit where jobs can write: their text is escaped
            terminal_safe(cell)
            for cell in (
                str(r.get("host")),
                str(r.get("pid")),
                str(r.get("state")),
                f"{r.get('age_seconds')}s",
                str(r.get("running")),
                str(r.get("queued")),
                str(r.get("version")),
            )
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0
