"""``hopper wait [ID…|--all]``: block until those jobs end; exit 1 if any did not succeed.

Exit codes: 0 every job succeeded, 1 one failed or was aborted, 2 usage, 3
``--timeout`` ran out first (whatever the jobs did so far).

A job named by a prompt still in the inbox (not claimed yet) is waited for
too. ``--all`` waits until the inbox holds no prompt and no job is queued or
running, and judges every job that was active at some point while it
waited. Polls the files (the only truth); ``--timeout`` bounds the wait.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from hopper.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    add_root_args,
    all_records,
    context,
    find_job,
    warn,
)
from hopper.core.record import JobRecord
from hopper.core.states import JobState, is_terminal
from hopper.core.terminal import terminal_safe
from hopper.errors import JobNotFound
from hopper.store.inbox import scan
from hopper.store.jobfile import JOB_FILE, PROMPT_FILE, iter_run_dirs, read_record
from hopper.store.layout import Layout
from hopper.store.lookup import JobNotClaimed

POLL = 0.2
IN_TRANSIT = 5.0  # seconds a prompt seen waiting may be nowhere while it is claimed


def register(sub: Any) -> None:
    p = sub.add_parser("wait", help="wait until jobs end; exit 1 if any failed")
    add_root_args(p)
    p.add_argument("ids", nargs="*", metavar="ID", help="job id, id prefix or name")
    p.add_argument("--all", action="store_true", help="every job, and every prompt in the inbox")
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="give up after this many seconds (exit 3)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    layout, _ = context(args)
    if bool(args.ids) == bool(args.all):
        warn("give job ids, or --all")
        return EXIT_USAGE
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    if args.all:
        ended = _wait_all(layout, deadline, args.quiet)
    else:
        try:
            ids = [claimed_id(layout, ref, deadline) for ref in args.ids]
        except JobNotClaimed as exc:
            warn(f"timed out waiting: {exc}")
            return EXIT_TIMEOUT
        if not args.quiet:
            print(f"waiting for {len(ids)} job(s)", file=sys.stderr, flush=True)
        ended = wait_ids(layout, ids, deadline)
    return verdict(ended, args.timeout, args.quiet)


def verdict(ended: list[JobRecord] | None, timeout: float | None, quiet: bool) -> int:
    """The exit code of a wait that ended with ``ended`` (None: ``timeout`` ran out),
    each job's outcome printed unless ``quiet`` (``hopper submit --wait`` too)."""
    if ended is None:
        warn(f"timed out waiting: {timeout or 0:g}s passed and not every job has ended")
        return EXIT_TIMEOUT
    bad = [r for r in ended if r.state is not JobState.SUCCEEDED]
    if not quiet:
        for record in ended:
            print(terminal_safe(f"{record.id}  {record.state}  {record.reason or ''}".rstrip()))
    return EXIT_FAILED if bad else EXIT_OK


def _expired(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


def claimed_id(
    layout: Layout,
    ref: str,
    deadline: float | None,
    find: Callable[[Layout, str], JobRecord] = find_job,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The job ``ref`` names; a prompt still in the inbox is waited for until it is
    claimed (``hopper submit x && hopper wait x`` must not race the watcher).

    A prompt seen waiting may be found nowhere for a moment: one look at the runs
    missed its job.json and the next look, for a claim in progress, saw it written.
    Not found within ``IN_TRANSIT`` seconds of last being seen waiting is looked for
    again, not reported as unknown.
    """
    seen_waiting: float | None = None
    while True:
        try:
            return find(layout, ref).id
        except JobNotClaimed:
            seen_waiting = time.monotonic()
            if _expired(deadline):
                raise
        except JobNotFound:
            if seen_waiting is None or time.monotonic() - seen_waiting > IN_TRANSIT:
                raise
        sleep(POLL)


def wait_ids(layout: Layout, ids: list[str], deadline: float | None) -> list[JobRecord] | None:
    while True:
        records = [read_record(layout.run_dir(i)) for i in ids]
        if all(is_terminal(r.state) for r in records):
            return records
        if _expired(deadline):
            return None
        time.sleep(POLL)


def _claiming(layout: Layout) -> bool:
    """A prompt renamed into its run dir whose job.json is not written yet."""
    return any(
        (d / PROMPT_FILE).exists() and not (d / JOB_FILE).exists()
        for d in iter_run_dirs(layout.runs)
    )


def _wait_all(layout: Layout, deadline: float | None, quiet: bool) -> list[JobRecord] | None:
    watched: set[str] = set()
    first = True
    while True:
        records = all_records(layout)
        active = {r.id for r in records if not is_terminal(r.state)}
        watched |= active
        if first and not quiet:
            print(f"waiting for {len(active)} active job(s)", file=sys.stderr, flush=True)
        first = False
        if not active and not _claiming(layout) and not any(True for _ in scan(layout.inbox)):
            return [r for r in records if r.id in watched]
        if _expired(deadline):
            return None
        time.sleep(POLL)
