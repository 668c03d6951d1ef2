"""``hopper status``: a table of jobs, or ``--json`` with job.json's exact fields.

Listings come from the status index (``store/index.py``), refreshed from the
run directories on every call (every job not yet final is checked; final ones
are trusted), so they stay fast with 100,000 jobs; filters run in SQL.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from hopper.cli.activity import agent_activity, describe, pause_lines, queued_activity
from hopper.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_root_args, read_context, warn
from hopper.cli.status_table import ellipsis_for, fit_width, painter, render, use_color
from hopper.configfile import has_table
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
    p.add_argument("--limit", type=positive, metavar="N", help="only the newest N jobs")
    p.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour states: auto (a terminal, NO_COLOR unset), always, never",
    )
    p.add_argument("--json", action="store_true", help="JSON array of job records (job.json)")
    p.set_defaults(handler=handle)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of jobs, 1 or more")
    return value


def add_filter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--since",
        metavar="DURATION|DATE",
        help="only jobs created or finished in the last DURATION (12h, 1d) or since DATE "
        "(2026-11-25, 2026-11-25T08:00, local time), or still active",
    )
    p.add_argument("--agent", action="append", help="only jobs run by this agent (repeatable)")
    p.add_argument(
        "--group", action="append", help="only jobs dropped in this inbox sub-folder (repeatable)"
    )


def since_epoch(value: str | None, now: float) -> float | None:
    """``--since 12h`` or ``--since 2026-11-25[T08:00]`` (local time unless it says
    otherwise) as epoch seconds; raises :class:`BadDuration` saying both forms."""
    if value is None:
        return None
    try:
        return now - parse_duration(value)
    except BadDuration as exc:
        try:
            return datetime.fromisoformat(value.strip()).timestamp()
        except ValueError:
            raise BadDuration(f"{exc}; nor a date (2026-11-25, 2026-11-25T08:00)") from None


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


def summary_row(
    job: JobSummary, now: float, activity: str = "-", wait: str | None = None
) -> tuple[str, ...]:
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
        job.reason or (f"waits: {wait}" if wait else "-"),
        started,
        took,
        str(job.attempt),
    )


def row(record: JobRecord, now: datetime) -> tuple[str, ...]:
    return summary_row(summarize(record), now.timestamp(), describe(record))


def table(rows: list[tuple[str, ...]]) -> str:
    """Aligned columns, full width, no colour; every cell's control characters escaped
    (a name is the dropper's choice: a newline in it must not forge a row)."""
    return render(rows, width=None, paint=painter(False))


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
        if args.limit is not None:
            matched, jobs = jobs, jobs[-args.limit :]
        else:
            matched = jobs
        budget_lines = [] if args.json else budget_news(layout, args.config, index)
        if args.json:
            for line in pending:
                warn(terminal_safe(line))
            write_json_array(index.raw(j.id for j in jobs), sys.stdout)
            return code
        waits = {}
        if fit_width(sys.stdout.isatty(), os.environ, _columns) is not None:  # for people
            from hopper.cli import status_footer as foot

            seconds = foot.seconds_from_config(args.config, dict(os.environ))
            waits = foot.queued_waits(layout, index, jobs, args.config, now, seconds)
    for line in (*pending, *pause_lines(layout), *budget_lines):
        print(terminal_safe(line))
    show(args, layout, now, jobs, matched, pending, waits)
    return code


def _columns() -> int:
    return shutil.get_terminal_size().columns


def show(
    args: argparse.Namespace,
    layout: Layout,
    now: float,
    jobs: list[JobSummary],
    matched: list[JobSummary],
    pending: list[str],
    waits: dict[str, str] | None = None,
) -> None:
    """The table; for people (a terminal, or COLUMNS set) fitted, with its footer, and a
    queued job's REASON says why it waits (``waits``: core/waits.py's words)."""
    from hopper.cli import status_footer as foot

    isatty = sys.stdout.isatty()
    width = fit_width(isatty, os.environ, _columns)
    paint = painter(use_color(args.color, isatty, os.environ))
    inbox = None if args.ids else foot.inbox_line(layout)
    if jobs:
        queued = queued_activity(
            layout,
            [j.id for j in jobs if j.state is JobState.QUEUED],
            [j.id for j in jobs if j.state is JobState.RUNNING],
        )
        rows = [
            summary_row(
                j,
                now,
                agent_activity(layout, j.id)
                if j.state is JobState.RUNNING
                # REASON says why a queued job waits where the scheduler was asked: not twice
                else ("-" if j.id in (waits or {}) else queued.get(j.id, "-")),
                (waits or {}).get(j.id),
            )
            for j in jobs
        ]
        print(
            render(
                [COLUMNS, *rows],
                width=width,
                paint=paint,
                state_column=COLUMNS.index("STATE"),
                ellipsis=ellipsis_for(sys.stdout.encoding),
            )
        )
    elif inbox is not None and not _filtered(args):
        print(paint("warn", inbox))  # the news, where "no jobs" would be wrong
        inbox = None  # said once
    elif not pending:
        print(terminal_safe(f"no jobs under {layout.runs}" + (" match" if _filtered(args) else "")))
    if width is None:
        return
    seconds = foot.seconds_from_config(args.config, dict(os.environ))
    for line in foot.footer(
        layout,
        matched,
        len(jobs),
        filtered=_filtered(args),
        inbox=inbox,
        watcher=lambda: foot.watcher_line(layout, now, seconds, paint),
        paint=paint,
    ):
        print(line)


def budget_news(layout: Layout, cli_config: str | None, index: JobIndex) -> list[str]:
    """A line per reached budget; the budgets' models load only when the config has some."""
    if not has_table("budgets", cli_config):
        return []
    from hopper.budgetreport import held_news

    return held_news(layout, cli_config, index)


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
