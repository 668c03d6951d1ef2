"""``hopper logs [-f] ID`` and ``hopper logs -f --all``: print or follow job output.

One job: its job.log; ``-f`` follows until the job is terminal and then exits
with the job's outcome (0 succeeded, 1 failed or aborted; 3 when ``--timeout``
runs out first), so ``hopper logs -f ID && next`` chains like a shell. ``--all``:
every running job, each line prefixed with the job's name; with ``-f`` it keeps
going (until Ctrl+C), picking up jobs that start while it follows — including
ones that start and finish between two looks, whose whole log is printed once.
Jobs already running when it starts show their last ``BACKLOG`` lines first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hopper.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    add_root_args,
    find_view,
    read_context,
    warn,
)
from hopper.core.jobview import JobView
from hopper.core.states import JobState, is_terminal
from hopper.core.terminal import terminal_safe
from hopper.store.jobfile import LOG_FILE
from hopper.store.jobread import read_view
from hopper.store.layout import Layout
from hopper.store.saferead import open_regular
from hopper.store.tail import read_new_lines, tail_lines

if TYPE_CHECKING:
    from hopper.store.index import JobIndex

FOLLOW_INTERVAL = 0.2
ALL_INTERVAL = 0.5
BACKLOG = 10


def register(sub: Any) -> None:
    p = sub.add_parser("logs", help="print (or follow) a job's job.log, or every running job's")
    add_root_args(p)
    p.add_argument("id", nargs="?", metavar="ID", help="job id, id prefix or name")
    p.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new output until the job ends"
    )
    p.add_argument(
        "--all", action="store_true", help="every running job, lines prefixed with the job name"
    )
    p.add_argument(
        "--json", action="store_true", help='JSON lines: {"id", "name", "line"} per output line'
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="with -f: stop following after this many seconds (exit 3)",
    )
    p.set_defaults(handler=handle)


def copy_new(path: Path, offset: int) -> int:
    """Write whatever ``path`` holds past ``offset`` to stdout; the new offset."""
    try:
        with os.fdopen(open_regular(path), "rb") as fh:  # no link, no FIFO
            fh.seek(offset)
            while chunk := fh.read(1 << 16):
                sys.stdout.buffer.write(chunk)
                offset += len(chunk)
    except FileNotFoundError:
        return offset
    sys.stdout.buffer.flush()
    return offset


def never_ran(record: JobView, run_dir: Path) -> str | None:
    """Why a job has no output at all (it never started), or None if it has or may have some."""
    if record.started_at is not None or (run_dir / LOG_FILE).exists():
        return None
    who = terminal_safe(f"job {record.id} ({record.name})")
    if is_terminal(record.state):
        why = terminal_safe(f": {record.detail}") if record.detail else ""
        return f"{who} never ran, so it has no output: {record.state} ({record.reason}){why}"
    return (
        f"{who} is {record.state} and has not started yet, so it has no output\n"
        f"  hint: hopper logs -f {record.id} waits for it; hopper status {record.id} shows it"
    )


def follow(run_dir: Path, stop: threading.Event, deadline: float | None = None) -> bool:
    """Copy job.log as it grows until the job ends (True) or ``deadline`` passes (False)."""
    offset = 0
    while True:
        offset = copy_new(run_dir / LOG_FILE, offset)
        if _ended(run_dir):
            copy_new(run_dir / LOG_FILE, offset)
            return True
        if _expired(deadline) or stop.wait(FOLLOW_INTERVAL):
            return False


def _ended(run_dir: Path) -> bool:
    try:
        return is_terminal(read_view(run_dir).state)
    except FileNotFoundError:
        return False


def _expired(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


@dataclass
class Followed:
    id: str
    name: str
    offset: int
    state: JobState = JobState.RUNNING


class Prefixer:
    """Writes lines as ``name | text`` (or JSON lines), one job at a time."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def write(self, job: Followed, lines: list[bytes]) -> None:
        out = sys.stdout
        for raw in lines:
            text = raw.decode("utf-8", "replace")
            if self.as_json:
                out.write(json.dumps({"id": job.id, "name": job.name, "line": text}) + "\n")
            else:
                out.write(f"{terminal_safe(job.name)} | {text}\n")  # the job's text as written
        out.flush()


def drain(layout: Layout, f: Followed, sink: Prefixer, final: bool) -> None:
    path = layout.run_dir(f.id) / LOG_FILE
    while True:
        lines, offset = read_new_lines(path, f.offset)
        if offset == f.offset:
            break
        sink.write(f, lines)
        f.offset = offset
    if final:  # the job is over: its last line may lack a newline
        tail = _unterminated(path, f.offset)
        if tail:
            sink.write(f, [tail])
            f.offset += len(tail)


def _unterminated(path: Path, offset: int) -> bytes:
    try:
        with os.fdopen(open_regular(path), "rb") as fh:  # no link, no FIFO
            fh.seek(offset)
            return fh.read(1 << 20)
    except FileNotFoundError:
        return b""


def follow_all(layout: Layout, sink: Prefixer, follow: bool, stop: threading.Event) -> None:
    from hopper.cli.status import load_jobs  # --all only: `logs ID` needs no index

    index: JobIndex
    index, jobs = load_jobs(layout)
    with index:
        known = {j.id for j in jobs}
        followed: dict[str, Followed] = {}
        for job in jobs:
            if job.state is JobState.RUNNING:
                lines, end = tail_lines(layout.run_dir(job.id) / LOG_FILE, BACKLOG)
                f = Followed(job.id, job.name, end)
                sink.write(f, lines)
                followed[job.id] = f
        while True:
            for f in followed.values():
                drain(layout, f, sink, final=False)
            if not follow or stop.wait(ALL_INTERVAL):
                for f in followed.values():
                    drain(layout, f, sink, final=True)
                return
            index.refresh()
            for job in index.jobs():
                seen = followed.get(job.id)
                if seen is not None:
                    seen.state = job.state
                elif job.id not in known and job.state is not JobState.QUEUED:
                    followed[job.id] = Followed(job.id, job.name, 0, job.state)  # new since start
                known.add(job.id)
            for job_id, f in list(followed.items()):
                if is_terminal(f.state):
                    drain(layout, f, sink, final=True)
                    del followed[job_id]


def handle(args: argparse.Namespace) -> int:
    layout = read_context(args)
    if args.timeout is not None and (args.all or not args.follow):
        warn("--timeout goes with -f ID (following one job until it ends)")
        return EXIT_USAGE
    if args.all:
        if args.id:
            warn("give a job ID or --all, not both")
            return EXIT_USAGE
        follow_all(layout, Prefixer(args.json), args.follow, threading.Event())
        return EXIT_OK
    if not args.id:
        warn("which job? give an ID (or --all for every running job)")
        return EXIT_USAGE
    record = find_view(layout, args.id)
    run_dir = layout.run_dir(record.id)
    silent = never_ran(record, run_dir)
    if silent is not None and (is_terminal(record.state) or not args.follow):
        warn(silent)
        return EXIT_FAILED
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    if args.json:
        sink, one, stop = Prefixer(True), Followed(record.id, record.name, 0), threading.Event()
        while True:
            drain(layout, one, sink, final=False)
            done = _ended(run_dir)
            if not args.follow or done or _expired(deadline) or stop.wait(FOLLOW_INTERVAL):
                drain(layout, one, sink, final=True)
                if not args.follow:
                    return EXIT_OK
                return outcome(run_dir) if done else timed_out(record, args.timeout)
    if args.follow:
        if follow(run_dir, threading.Event(), deadline):
            return outcome(run_dir)
        return timed_out(record, args.timeout)
    copy_new(run_dir / LOG_FILE, 0)
    return EXIT_OK


def outcome(run_dir: Path) -> int:
    """Followed a job to its end: 0 if it succeeded; else 1, saying how it ended on stderr."""
    try:
        record = read_view(run_dir)
    except FileNotFoundError:  # the run directory went away under us (pruned by hand)
        warn(f"{run_dir / 'job.json'} is gone: cannot tell how the job ended")
        return EXIT_FAILED
    if record.state is JobState.SUCCEEDED:
        return EXIT_OK
    silent = never_ran(record, run_dir)
    if silent is not None:
        warn(silent)
        return EXIT_FAILED
    detail = f": {record.detail}" if record.detail else ""
    warn(f"job {record.id} ({record.name}) {record.state} ({record.reason}){detail}")
    return EXIT_FAILED


def timed_out(record: JobView, timeout: float) -> int:
    warn(
        f"timed out after {timeout:g}s following job {record.id} ({record.name}): it has not "
        f"ended\n  hint: hopper logs -f {record.id} follows it again; "
        f"hopper abort {record.id} stops it"
    )
    return EXIT_TIMEOUT
