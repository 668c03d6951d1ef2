"""``hopper watchers [--json]``: every watcher of the root, from its heartbeat file.

Reads ``<root>/.hopper/watchers/*.json`` (docs/scale-out.md) and says of each
what core/watcherview.py judges: ``alive``, ``stopped`` (exited, its jobs
left running for that host's next watcher), ``dead`` (no beat for
``host_dead_after``, or its process is gone) or ``taken_over`` (dead, its
jobs now another watcher's). Only an alive watcher's counts are current: the
others show ``-`` (``--json`` keeps the file's fields as written).

``--prune`` removes the files of watchers with no beat for ``host_dead_after``
and none of whose jobs is still their own (the live watchers do the same by
themselves once such a file is an hour old), then lists what is left.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from hopper.cli.common import EXIT_OK, add_root_args, context
from hopper.cli.watcherlist import watcher_rows
from hopper.core.terminal import terminal_safe
from hopper.store.watchers import prune_beats


def register(sub: Any) -> None:
    p = sub.add_parser("watchers", help="list the watchers serving this root (their heartbeats)")
    add_root_args(p)
    p.add_argument("--json", action="store_true", help="one JSON array of heartbeat records")
    p.add_argument(
        "--prune",
        action="store_true",
        help="first remove the files of watchers dead for host_dead_after whose jobs "
        "are no longer theirs",
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout, config = context(args)
    removed = []
    if args.prune:
        removed = prune_beats(layout, time.time(), config.host_dead_after)
    rows = watcher_rows(layout, time.time(), config.host_dead_after)
    if args.json:
        if args.prune:
            gone = [{"file": str(path), "host": b.host, "pid": b.pid} for path, b in removed]
            print(json.dumps({"removed": gone, "watchers": rows}, indent=2))
        else:
            print(json.dumps(rows, indent=2))
        return EXIT_OK
    for path, beat in removed:
        print(terminal_safe(f"removed {path.name}: {beat.host} pid {beat.pid}, dead"))
    if not rows:
        print(terminal_safe(f"no watcher heartbeats under {layout.state_dir / 'watchers'}"))
        return EXIT_OK
    header = ("HOST", "PID", "STATE", "AGE", "RUNNING", "QUEUED", "VERSION", "DETAIL")
    table = [header] + [_cells(r) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    current = row.get("state") in ("alive", "stopped")  # a dead watcher's counts are old
    cells = (
        str(row.get("host")),
        str(row.get("pid")),
        str(row.get("state")),
        f"{row.get('age_seconds', '?')}s",
        str(row.get("running")) if current else "-",
        str(row.get("queued")) if current else "-",
        str(row.get("version")),
        str(row.get("detail", "")),
    )
    return tuple(terminal_safe(c) for c in cells)  # heartbeat files sit where jobs can write
