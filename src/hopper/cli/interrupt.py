"""``hopper interrupt NAME|ID``: interrupt a live session's turn, as Esc/Ctrl+C would.

The message job in progress ends ``aborted`` with reason ``interrupted``; the
session lives on and takes the next message. A second interrupt within two
seconds ends the session.
"""

from __future__ import annotations

import argparse
from typing import Any

from hopper.cli.common import EXIT_OK, add_root_args, fail, read_context
from hopper.core.terminal import terminal_safe
from hopper.sessionhost.client import HostUnreachable, request
from hopper.store.sessions import find_session


def register(sub: Any) -> None:
    p = sub.add_parser("interrupt", help="interrupt a live session's turn (the session lives on)")
    add_root_args(p)
    p.add_argument("ref", metavar="ID", help="a session's name, or a job (id, prefix or name)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout = read_context(args)
    folder = find_session(layout, args.ref)
    try:
        reply = request(folder, "interrupt")
    except HostUnreachable as exc:
        return fail(f"{args.ref}: {exc} (hopper sessions lists the live ones)")
    if reply.get("closed"):
        print(terminal_safe(f"{folder.name}: second interrupt within 2 s: session closing"))
    elif reply.get("job"):
        print(terminal_safe(f"{folder.name}: interrupted job {reply['job']}"))
    else:
        print(terminal_safe(f"{folder.name}: interrupted (no message was in progress)"))
    return EXIT_OK
