"""``hopper logs [-f] ID``: print a job's output; ``-f`` follows until the job ends."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

from hopper.cli.common import add_root_args, context, find_job
from hopper.core.states import is_terminal
from hopper.store.jobfile import LOG_FILE, read_record

FOLLOW_INTERVAL = 0.2


def register(sub: Any) -> None:
    p = sub.add_parser("logs", help="print (or follow) a job's job.log")
    add_root_args(p)
    p.add_argument("id", metavar="ID", help="job id, id prefix or name")
    p.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new output until the job ends"
    )
    p.set_defaults(handler=handle)


def copy_new(path: Path, offset: int) -> int:
    """Write whatever ``path`` holds past ``offset`` to stdout; the new offset."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            while chunk := fh.read(1 << 16):
                sys.stdout.buffer.write(chunk)
                offset += len(chunk)
    except FileNotFoundError:
        return offset
    sys.stdout.buffer.flush()
    return offset


def follow(run_dir: Path, stop: threading.Event) -> None:
    offset = 0
    while True:
        offset = copy_new(run_dir / LOG_FILE, offset)
        try:
            done = is_terminal(read_record(run_dir).state)
        except FileNotFoundError:
            done = False
        if done:
            copy_new(run_dir / LOG_FILE, offset)
            return
        if stop.wait(FOLLOW_INTERVAL):
            return


def handle(args: argparse.Namespace) -> int:
    layout, _ = context(args)
    record = find_job(layout, args.id)
    run_dir = layout.run_dir(record.id)
    if args.follow:
        follow(run_dir, threading.Event())
    else:
        copy_new(run_dir / LOG_FILE, 0)
    return 0
