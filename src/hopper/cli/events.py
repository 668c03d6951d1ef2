"""``hopper events ID [--tail N] [-f] [--json]``: a job's trajectory from events.jsonl.

``--tail N`` reads backwards from the end of the file (``store/tail.py``), so
it costs the same on a 1 GB file as on a 1 KB one. ``-f`` keeps printing new
events until the job is terminal and its ``finalized`` event (or a quiet
moment after the terminal state) has been seen.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from hopper.cli.common import EXIT_USAGE, add_root_args, find_view, read_context, warn
from hopper.core.states import is_terminal
from hopper.core.terminal import terminal_safe
from hopper.store.jobfile import EVENTS_FILE
from hopper.store.jobread import read_view
from hopper.store.tail import read_new_lines, tail_lines

FOLLOW_INTERVAL = 0.2
QUIET_POLLS = 3  # empty polls after the terminal state before giving up on `finalized`


def register(sub: Any) -> None:
    p = sub.add_parser("events", help="print (or follow) a job's events.jsonl")
    add_root_args(p)
    p.add_argument("id", metavar="ID", help="job id, id prefix or name")
    p.add_argument("--tail", type=int, metavar="N", help="only the last N events")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--json", action="store_true", help="JSON lines, as in events.jsonl")
    p.set_defaults(handler=handle)


def render(event: dict[str, Any]) -> str:
    """``13:35:40.042  started  pid=1234 …`` in local time: one line, whatever the
    fields hold (control characters escaped: ``inbox_path=inbox/a\\x1b]0;…``)."""
    ts = event.get("ts")
    try:
        when = datetime.fromisoformat(str(ts)).astimezone().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except ValueError:
        when = str(ts)
    rest = " ".join(
        f"{k}={json.dumps(v) if not isinstance(v, str) or ' ' in v else v}"
        for k, v in event.items()
        if k not in ("ts", "event")
    )
    return terminal_safe(f"{when}  {event.get('event', '?'):<16} {rest}".rstrip())


def emit(lines: list[bytes], as_json: bool) -> bool:
    """Print the parseable events among ``lines``; True if one was ``finalized``."""
    finalized = False
    out = sys.stdout
    for line in lines:
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue  # cut short by a crash: skip, as every reader does
        if not isinstance(event, dict):
            continue
        finalized = finalized or event.get("event") == "finalized"
        out.write((json.dumps(event) if as_json else render(event)) + "\n")
    out.flush()
    return finalized


def print_all(path: Path, as_json: bool) -> tuple[int, bool]:
    offset, finalized = 0, False
    while True:
        lines, new = read_new_lines(path, offset)
        if new == offset:
            return offset, finalized
        finalized = emit(lines, as_json) or finalized
        offset = new


def follow(
    run_dir: Path, offset: int, finalized: bool, as_json: bool, stop: threading.Event
) -> None:
    path = run_dir / EVENTS_FILE
    quiet = 0
    while True:
        lines, offset = read_new_lines(path, offset)
        finalized = emit(lines, as_json) or finalized
        try:
            done = is_terminal(read_view(run_dir).state)
        except FileNotFoundError:
            done = False
        if done:
            quiet = 0 if lines else quiet + 1
            if finalized or quiet >= QUIET_POLLS:
                return
        if stop.wait(FOLLOW_INTERVAL):
            return


def handle(args: argparse.Namespace) -> int:
    if args.tail is not None and args.tail < 0:
        warn("--tail must be 0 or more")
        return EXIT_USAGE
    layout = read_context(args)
    record = find_view(layout, args.id)
    run_dir = layout.run_dir(record.id)
    path = run_dir / EVENTS_FILE
    if args.tail is not None:
        lines, offset = tail_lines(path, args.tail)
        finalized = emit(lines, args.json)
    else:
        offset, finalized = print_all(path, args.json)
    if args.follow:
        follow(run_dir, offset, finalized, args.json, threading.Event())
    return 0
