"""``hopper web``: the dashboard, in the foreground (docs/web.md).

The server lives in ``hopper.web`` and needs the ``web`` extra; it is
imported only here, when the command runs, so the rest of hopper never
loads Starlette or uvicorn.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hopper.cli.common import EXIT_FAILED, add_root_args, context, warn

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642
MISSING_EXTRA = (
    "the web dashboard needs the 'web' extra ({missing} is not installed): re-run "
    "./install.sh --web in the hopper checkout, or there: {python} -m pip install '.[web]' "
    "(not 'pip install hopper[web]': 'hopper' on PyPI is another project)"
)


def register(sub: Any) -> None:
    p = sub.add_parser("web", help="serve the web dashboard (needs the 'web' extra)")
    add_root_args(p)
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument(
        "--new-token",
        action="store_true",
        help="replace the token first: every script's token and every signed-in browser "
        "stop working (revokes a leaked token or session cookie)",
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        from hopper.web.server import serve
    except ImportError as exc:
        warn(MISSING_EXTRA.format(missing=exc.name or "starlette", python=sys.executable))
        return EXIT_FAILED
    layout, config = context(args)
    layout.ensure()
    return serve(layout, config, args.host, args.port, new_token=args.new_token)
