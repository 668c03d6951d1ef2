"""``hopper web``: the dashboard, in the foreground (docs/web.md).

The server lives in ``hopper.web`` and needs the ``web`` extra; it is
imported only here, when the command runs, so the rest of hopper never
loads Starlette or uvicorn.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hopper.cli.common import EXIT_FAILED, EXIT_USAGE, add_root_args, context, warn

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
    p.add_argument(
        "--print-url",
        action="store_true",
        help="print the sign-in URL (with the token) for --host/--port and exit; a "
        "'hopper web' not on a terminal (a service, a pipe) does not print it",
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.print_url and args.new_token:
        warn(
            "--print-url with --new-token would print a token the running "
            "dashboard does not know: restart it with --new-token, then --print-url"
        )
        return EXIT_USAGE
    try:
        from hopper.web.listen import PortInUse
        from hopper.web.server import serve, url_for
        from hopper.web.token import load_or_create
    except ImportError as exc:
        warn(MISSING_EXTRA.format(missing=exc.name or "starlette", python=sys.executable))
        return EXIT_FAILED
    layout, config = context(args)
    layout.ensure()
    if args.print_url:
        print(url_for(args.host, args.port, load_or_create(layout)))
        return 0
    try:
        return serve(layout, config, args.host, args.port, new_token=args.new_token)
    except PortInUse as exc:
        print(f"hopper web: {exc}", file=sys.stderr)
        return EXIT_FAILED
