"""``hopper pause [GROUP]`` / ``hopper resume [GROUP]``: the PAUSE marker, nothing more.

``<root>/PAUSE`` holds every queued job; ``<root>/inbox/GROUP/PAUSE`` the
jobs of one group. Running jobs finish (a drain); prompts are still claimed.
``--json``: ``{"paused", "group", "marker", "changed"}`` — the state now, the group
(null: all), the marker's path, and whether this command changed anything.
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
    print_json,
    warn,
)
from hopper.core.terminal import terminal_safe
from hopper.store.layout import NotARealFolder
from hopper.store.markers import BadGroup, pause_path, set_pause


def register(sub: Any) -> None:
    for name, text in (
        ("pause", "stop starting queued jobs (all, or one group); running jobs finish"),
        ("resume", "remove the PAUSE marker (all, or one group)"),
    ):
        p = sub.add_parser(name, help=text)
        add_root_args(p)
        p.add_argument("group", nargs="?", help="inbox sub-folder / group (default: everything)")
        add_json_arg(p, '{"paused", "group", "marker", "changed"}')
        p.set_defaults(handler=handle, pause=name == "pause")


def handle(args: argparse.Namespace) -> int:
    layout, _ = context(args)
    try:
        marker, existed = set_pause(layout, args.group, args.pause)
    except BadGroup as exc:
        warn(str(exc))
        return EXIT_USAGE
    except NotARealFolder as exc:
        warn(exc.render())
        return EXIT_FAILED
    except OSError as exc:
        doing = "create" if args.pause else "remove"
        warn(
            f"{pause_path(layout, args.group)}: cannot {doing} the PAUSE marker: "
            f"{exc.strerror or exc}; check the folder's permissions and try again"
        )
        return EXIT_FAILED
    what = f"group {args.group}" if args.group else "all groups"
    if args.json:
        print_json(
            {
                "paused": args.pause,
                "group": args.group,
                "marker": str(marker),
                "changed": existed != args.pause,
            }
        )
    elif args.pause:
        print(terminal_safe(f"paused {what}: {marker}"))
    else:
        print(
            terminal_safe(
                f"resumed {what}" + ("" if existed else f" (it was not paused: no {marker})")
            )
        )
    return 0
