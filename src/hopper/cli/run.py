"""``hopper run``: the watcher, in the foreground (what systemd runs)."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from hopper.cli.common import add_root_args, context
from hopper.cli.logsetup import lean_records, stderr_handler
from hopper.watcher import Watcher


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run the watcher in the foreground")
    add_root_args(p)
    p.add_argument(
        "--until-idle",
        action="store_true",
        help="exit once the inbox is empty and no job is queued or running",
    )
    p.add_argument("--host-id", help="name this watcher's host (default: the hostname)")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    p.set_defaults(handler=handle)


def setup_logging(verbose: bool) -> None:
    """Log to stderr, one line a record (cli/logsetup.py: priorities for the journal)."""
    handler = stderr_handler(os.environ)
    lean_records()
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    logging.getLogger("watchdog").setLevel(logging.WARNING)


def handle(args: argparse.Namespace) -> int:
    layout, config = context(args)
    setup_logging(args.verbose)
    return Watcher(layout, config, host=args.host_id).run(until_idle=args.until_idle)
