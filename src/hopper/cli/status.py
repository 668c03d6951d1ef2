"""``hopper status``: a table of jobs, or ``--json`` with job.json's exact fields.

Listings come from the status index (``store/index.py``), refreshed from the
run directories on every call (every job not yet final is checked; final ones
are trusted), so they stay fast with 100,000 jobs; filters run in SQL.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from hopper.cli.activity import agent_activity, describe, pause_lines
from hopper.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_root_args, read_context, warn
from hopper.core.durations import BadDuration, format_duration, parse_duration
from hopper.core.selection import JobFilter
from hopper.core.states import JobState
from hopper.core.summary import JobSummary, summarize
from hopper.core.terminal import terminal_safe
from hopper.store.index import JobIndex
from hopper.store.layout import Layout
from hopper.store.lookup import indexed_suggestion, unclaimed

if TYPE_CHECKING:
    from hopper.core.record import JobRecord

COLUMNS = (
    "ID",
    "NAME",
    "AGENT",
    "STATE",
    "AGENT_STATE",  # running agent jobs: working, retrying:rate_limit, api_error:auth …
    "REASON",
    "STARTED",
    "DURATION",
    "ATTEMPT",
)
GLOB_CHARS = frozenset("*?[")


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="show jobs (all, or the ones named)")
    add_root_args(p)
    p.add_argument(
        "ids", nargs="*", metavar="ID", help="job id, id prefix, name, or a name glob ('nightly-*')"
    )
    p.add_argument(
        "--state",
        choices=[s.value for s in JobState],
        action="append",
        help="only jobs in this state (repeatable)",
    )
    add_filter_args(p)
    p.add_argument("--name", action="append", metavar="GLOB", help="only names matching GLOB")
    p.add_argument("--json", action="store_true", help="JSON array of job records (job.json)")
    p.set_defaults(handler=handle)


def add_filter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--since",
        metavar="DURATION",
        help="only jobs created or finished in the last DURATION (12h, 1d), or still active",
    )
    p.add_argument("--agent", action="append", help="only jobs run by this agent (repeatable)")
    p.add_argument(
        "--group", action="append", help="only jobs dropped in this inbox sub-folder (repeatable)"
    )


def since_epoch(value: str | None, now: float) -> float | None:
    """``--since 12h`` as epoch seconds; raises :class:`BadDuration`."""
    return None if value is None else now - parse_duration(value)


def job_filter(args: argparse.Namespace, now: float) -> JobFilter:
    return JobFilter(
        states=frozenset(JobState(s) for s in (getattr(args, "state", None) or ())),
        since=since_epoch(args.since, now),
        agents=frozenset(args.agent or ()),
        groups=frozenset(args.group or ()),
        names=tuple(getattr(args, "name", None) or ()),
    )


def load_jobs(layout: Layout, wanted: JobFilter | None = None) -> tuple[JobIndex, list[JobSummary]]:
    """The refreshed index (caller closes it) and the jobs ``wanted`` (all by default)
    lets through, oldest first; the filter runs in SQL."""
    index = open_index(layout)
    return index, index.jobs(wanted)


def open_index(layout: Layout) -> JobIndex:
    """The refreshed index (caller closes it); its problems are warned about."""
    index = JobIndex.open(layout)
    for problem in index.refresh().corrupt:
        warn(problem)
    return index


def resolve(jobs: list[JobSummary], ref: str) -> list[JobSummary]:
    """Jobs a command-line reference names: a glob, else an id, id prefix or name."""
    if GLOB_CHARS & set(ref):
        glob = JobFilter(names=(ref,))
        return [j for j in jobs if glob.matches(j)]
    key, folded = ref.lower(), ref.casefold()
    exact = [j for j in jobs if j.id == key]
    return exact or [j for j in jobs if j.id.startswith(key) or j.name.casefold() == folded]


def summary_row(job: JobSummary, now: float, activity: str = "-") -> tuple[str, ...]:
    started = (
        datetime.fromtimestamp(job.started_at).strftime("%m-%d %H:%M:%S")
        if job.started_at is not None
        else "-"
    )
    if job.duration_seconds is not None:
        took = format_duration(job.duration_seconds)
    elif job.started_at is not None:
        took = format_duration(max(0.0, now - job.started_at))
    else:
        took = "-"
    return (
        job.id,
        job.name,
        job.agent,
        job.state.value,
        activity,
        job.reason or "-",
        started,
        took,
        str(job.attempt),
    )


def row(record: JobRecord, now: datetime) -> tuple[str, ...]:
    return summary_row(summarize(record), now.timestamp(), describe(record))


def table(rows: list[tuple[str, ...]]) -> str:
    """Aligned columns; every cell's control characters escaped (a name is the
    dropper's choice: a newline in it must not forge a row)."""
    rows = [tuple(terminal_safe(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def write_json_array(texts: Iterable[str], out: TextIO) -> None:
    """job.json texts, verbatim, as one JSON array, written as they come."""
    sep = "[\n"
    for text in texts:
        out.write(sep)
        out.write(text.rstrip())
        sep = ",\n"
    out.write("[]\n" if sep == "[\n" else "\n]\n")


def handle(args: argparse.Namespace) -> int:
    layout = read_context(args)
    now = time.time()
    try:
        wanted = job_filter(args, now)
    except BadDuration as exc:
        warn(f"--since: {exc}")
        return EXIT_USAGE
    index, jobs = load_jobs(layout, wanted) if not args.ids else (open_index(layout), [])
    with index:
        code = 0
        pending: list[str] = []  # prompts named but still in the inbox
        if args.ids:
            named: dict[str, JobSummary] = {}
            for ref in args.ids:
                if GLOB_CHARS & set(ref):
                    jobs = jobs or index.jobs()  # a glob looks at every row, once
                    found = resolve(jobs, ref)
                else:  # an id, id prefix or name: looked up, not every row loaded
                    found = index.named(ref)
                    code = max(code, report_unclaimed(layout, ref, bool(found), pending))
                named.update((j.id, j) for j in found)
            jobs = [j for j in sorted(named.values(), key=lambda j: j.id) if wanted.matches(j)]
        if args.json:
            for line in pending:
                warn(terminal_safe(line))
            write_json_array(index.raw(j.id for j in jobs), sys.stdout)
            return code
    for line in (*pending, *pause_lines(layout)):
        print(terminal_safe(line))
    if not jobs and pending:
        return code
    if not jobs:
        print(terminal_safe(f"no jobs under {layout.runs}" + (" match" if _filtered(args) else "")))
        return code
    rows = [
        summary_row(j, now, agent_activity(layout, j.id) if j.state is JobState.RUNNING else "-")
        for j in jobs
    ]
    print(table([COLUMNS, *rows]))
    return code


def report_unclaimed(layout: Layout, ref: str, found: bool, pending: list[str]) -> int:
    """Inbox prompts named ``ref`` go to ``pending``; the exit code ``ref`` deserves.

    A prompt of that name still in the inbox is news, not an error (a job just
    retried or submitted again shows beside its earlier runs): 0. A reference
    that names neither a job nor a prompt is 1.
    """
    waiting = unclaimed(layout, ref)
    pending.extend(f"{ref}: not claimed yet: {path}" for path in waiting)
    if waiting or found:
        return EXIT_OK
    warn(
        f"no job with id, id prefix or name {ref!r} under {layout.runs}"
        + indexed_suggestion(layout, ref)
    )
    return EXIT_FAILED


def _filtered(args: argparse.Namespace) -> bool:
    return bool(args.ids or args.state or args.since or args.agent or args.group or args.name)
