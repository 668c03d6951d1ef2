"""``hopper sessions [--json] [--all]`` and ``hopper sessions close NAME``.

The live interactive sessions of the root, from each host's session.json
(store/sessions.py): name, agent, state (``dead``: the record says live but
its host is gone), the host's pid, age, time since the last turn, turns and
the cost the agent reported. ``close`` asks the session's host to end it
(SIGTERM to the agent's process group, a grace, SIGKILL); the next message
to the session starts a new one that resumes the conversation.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hopper.cli.common import EXIT_OK, add_root_args, fail, read_context
from hopper.core.durations import format_duration
from hopper.core.terminal import terminal_safe
from hopper.sessionhost.client import HostUnreachable, request
from hopper.store.sessions import SessionView, list_sessions, seconds_since, session_dir, view


def register(sub: Any) -> None:
    p = sub.add_parser("sessions", help="list the live interactive sessions; close one")
    add_root_args(p)
    p.add_argument("--json", action="store_true", help="one JSON array, a session an object")
    p.add_argument("--all", action="store_true", help="ended sessions too")
    p.set_defaults(handler=handle)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    close = actions.add_parser("close", help="end a live session (its agent process)")
    add_root_args(close)
    close.add_argument("name", metavar="NAME", help="the session's name")
    close.set_defaults(handler=handle_close)


def row(seen: SessionView) -> dict[str, Any]:
    rec = seen.record
    cost = rec.usage.get("cost_usd")
    return {
        "name": rec.name,
        "agent": rec.agent,
        "state": seen.state,
        "pid": rec.host_pid,
        "agent_pid": rec.agent_pid,
        "age_seconds": _round(seconds_since(rec.started_at)),
        "idle_seconds": None
        if rec.state == "busy"
        else _round(seconds_since(rec.last_turn_at or rec.started_at)),
        "turns": rec.turns,
        "cost_usd": cost,
        "usage": rec.usage,
        "job": rec.job,
        "session_id": rec.session_id,
        "ended_reason": rec.ended_reason,
        "detail": rec.detail,
        "path": str(seen.path),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def handle(args: argparse.Namespace) -> int:
    layout = read_context(args)
    rows = [row(s) for s in list_sessions(layout) if args.all or s.live or s.state == "dead"]
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not rows:
        print("no live sessions" + ("" if args.all else " (--all: ended ones too)"))
        return EXIT_OK
    header = ("NAME", "AGENT", "STATE", "PID", "AGE", "IDLE", "TURNS", "COST")
    table = [header] + [_cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    return EXIT_OK


def _cells(r: dict[str, Any]) -> tuple[str, ...]:
    def ago(value: float | None) -> str:
        return "-" if value is None else format_duration(value)

    cost = r["cost_usd"]
    cells = (
        r["name"],
        r["agent"],
        r["state"] + (f" ({r['ended_reason']})" if r["ended_reason"] else ""),
        str(r["pid"]),
        ago(r["age_seconds"]),
        ago(r["idle_seconds"]),
        str(r["turns"]),
        "-" if cost is None else f"${cost:.4f}",
    )
    return tuple(terminal_safe(str(c)) for c in cells)  # session.json sits where jobs write


def handle_close(args: argparse.Namespace) -> int:
    layout = read_context(args)
    try:
        folder = session_dir(layout, args.name)
    except ValueError as exc:
        return fail(str(exc))
    seen = view(folder)
    if seen is None or not seen.live:
        state = "no such session" if seen is None else f"not live ({seen.state})"
        return fail(f"session {args.name}: {state}; nothing to close (hopper sessions --all)")
    try:
        request(folder, "close")
    except HostUnreachable as exc:
        return fail(f"session {args.name}: {exc}")
    print(terminal_safe(f"session {args.name}: closing (pid {seen.record.host_pid})"))
    return EXIT_OK
