"""``hopper inbox init``: create the inbox folders the config's routes name.

A route key's folders up to its first ``{placeholder}`` are created (a
placeholder stands for folders only you can name). Existing folders are fine.
``--json``: ``{"folders": [{"path", "created", "route"}]}``.
"""

from __future__ import annotations

import argparse
from typing import Any

from hopper.cli.common import add_json_arg, add_root_args, context, print_json
from hopper.core.routing import literal_prefix
from hopper.core.terminal import terminal_safe


def register(sub: Any) -> None:
    p = sub.add_parser("inbox", help="inbox housekeeping (init: make the routed folders)")
    inner = p.add_subparsers(dest="inbox_command", metavar="ACTION", required=True)
    init = inner.add_parser("init", help="create the inbox sub-folders of the configured routes")
    add_root_args(init)
    add_json_arg(init, '{"folders": [{"path", "created", "route"}]}')
    init.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout, config = context(args)
    layout.ensure()
    folders: list[dict[str, object]] = []
    for key in sorted(config.routes):
        prefix = literal_prefix(key)
        folder = layout.inbox.joinpath(*prefix)
        existed = folder.is_dir()
        folder.mkdir(parents=True, exist_ok=True)
        folders.append({"path": str(folder), "created": not existed, "route": key})
        note = "exists" if existed else "created"
        if len(prefix) < len(key.strip("/").split("/")):
            note += f" (make the {{…}} folders below it yourself: {key})"
        if not args.json:
            print(terminal_safe(f"{folder}  {note}"))
    if args.json:
        print_json({"folders": folders})
    elif not config.routes:
        print(terminal_safe(f"{layout.inbox}  (no routes in the config)"))
    return 0
