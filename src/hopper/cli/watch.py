"""``hopper watch``: a live terminal view over the same files.

A status bar pinned at the top (counts by state, whether a watcher serves
this root — from its heartbeat file, as ``hopper watchers`` and ``hopper
doctor`` judge it — the oldest heartbeat of a running job), the running jobs with the
selected one marked, and below them the live tail of the selected job's
job.log. Keys: j/k or the arrows switch job, ``a`` aborts the selected job
(after ``abort NAME (ID)? y/N``: only ``y`` aborts, and only a key pressed after
the question is asked counts; abort is ``touch runs/<id>/ABORT``), ``c`` toggles
copy mode (the output stops scrolling so it can be selected), ``q`` quits.

``curses.wrapper`` restores the terminal on every way out: ``q``, Ctrl+C
(cbreak mode keeps SIGINT) and an exception.
"""

from __future__ import annotations

import argparse
import curses
import time
from datetime import UTC, datetime
from typing import Any

from hopper.budget_config import Budgets
from hopper.budgetreport import queued_job_texts, report
from hopper.cli.activity import agent_activity
from hopper.cli.common import add_root_args, context
from hopper.cli.doctor.watcher import MIN_STALE_SECONDS, STALE_HEARTBEATS
from hopper.cli.watcherlist import watcher_rows
from hopper.core.durations import format_duration
from hopper.core.overview import Overview, overview
from hopper.core.states import JobState
from hopper.core.summary import JobSummary
from hopper.core.terminal import terminal_safe
from hopper.store.index import JobIndex
from hopper.store.jobfile import ABORT_FILE, LOG_FILE
from hopper.store.layout import Layout
from hopper.store.tail import tail_lines

TICK_MS = 250
JOBS_EVERY = 1.0  # seconds between index refreshes
HELP = "j/k switch job  a abort  c copy mode  q quit"


def register(sub: Any) -> None:
    p = sub.add_parser("watch", help="a live view: status bar and the selected job's output")
    add_root_args(p)
    p.set_defaults(handler=handle)


def watcher_health(rows: list[dict[str, Any]], stale_after: float) -> str:
    """The status bar's word for the root's watchers (``watcher_rows``): ``alive`` when
    one beat within ``stale_after``, ``LATE (…)`` when the freshest alive one is older,
    ``NONE`` when no file is alive (nothing is claimed or started)."""
    ages = [float(r["age_seconds"]) for r in rows if r.get("state") == "alive"]
    if not ages:
        return "NONE"
    if min(ages) <= stale_after:
        return "alive"
    return f"LATE ({format_duration(min(ages))} ago)"


def status_bar(ov: Overview, copy_mode: bool, watcher: str) -> str:
    counts = " ".join(f"{s.value} {ov.counts[s]}" for s in JobState)
    oldest = (
        format_duration(ov.oldest_heartbeat_age) if ov.oldest_heartbeat_age is not None else "-"
    )
    mode = " [COPY MODE]" if copy_mode else ""
    # Liveness first: on a narrow terminal the counts are what gets clipped.
    return f" hopper{mode} | watcher {watcher} | oldest heartbeat {oldest} | {counts}"


class View:
    def __init__(
        self, layout: Layout, index: JobIndex, stale_after: float, dead_after: float
    ) -> None:
        self.layout = layout
        self.index = index
        self.stale_after = stale_after
        self.dead_after = dead_after
        self.watcher = "?"
        self.jobs: list[JobSummary] = []
        self.running: list[JobSummary] = []
        self.selected: str | None = None
        self.copy_mode = False
        self.frozen: list[str] = []
        self.confirm: JobSummary | None = None
        self.message = ""
        self.next_jobs = 0.0
        self.budgets: Budgets | None = None  # [budgets], when the config sets some
        self.held: list[str] = []  # a line per reached budget: why its agent jobs wait

    def load_jobs(self) -> None:
        self.index.refresh()
        self.jobs = self.index.jobs()
        if self.budgets is not None:
            found = report(self.layout, self.budgets, datetime.now(UTC))
            queued = queued_job_texts(self.index) if any(r.reached for r in found.rows) else []
            self.held = report(self.layout, self.budgets, datetime.now(UTC), queued).short_lines()
        self.running = [j for j in self.jobs if j.state is JobState.RUNNING]
        rows = watcher_rows(self.layout, time.time(), self.dead_after)
        self.watcher = watcher_health(rows, self.stale_after)
        ids = [j.id for j in self.running]
        if self.selected not in ids:
            self.selected = ids[0] if ids else None

    def current(self) -> JobSummary | None:
        return next((j for j in self.running if j.id == self.selected), None)

    def move(self, step: int) -> None:
        if not self.running:
            return
        ids = [j.id for j in self.running]
        at = ids.index(self.selected) if self.selected in ids else 0
        self.selected = ids[(at + step) % len(ids)]
        self.frozen = []

    def key(self, ch: int) -> bool:
        """Act on one key; False to quit."""
        if self.confirm is not None:
            job, self.confirm = self.confirm, None
            if ch in (ord("y"), ord("Y")):
                (self.layout.run_dir(job.id) / ABORT_FILE).touch()
                self.message = f"abort requested: {terminal_safe(job.name)} ({job.id})"
            else:
                self.message = "abort cancelled"
            return True
        if ch in (ord("q"), ord("Q")):
            return False
        if ch in (ord("j"), curses.KEY_DOWN, curses.KEY_RIGHT):
            self.move(1)
        elif ch in (ord("k"), curses.KEY_UP, curses.KEY_LEFT):
            self.move(-1)
        elif ch == ord("a"):
            self.confirm = self.current()
            self.message = "" if self.confirm else "no running job selected"
            if self.confirm is not None:
                # keys typed ahead (a paste, 'ay', a held key) never answer a question
                # not yet on the screen
                curses.flushinp()
        elif ch == ord("c"):
            self.copy_mode = not self.copy_mode
            self.frozen = []
        return True

    def output(self, rows: int) -> list[str]:
        if self.copy_mode and self.frozen:
            return self.frozen
        job = self.current()
        if job is None or rows <= 0:
            return []
        lines, _ = tail_lines(self.layout.run_dir(job.id) / LOG_FILE, rows)
        text = [
            terminal_safe(ln.decode("utf-8", "replace").replace("\r", "").expandtabs())
            for ln in lines
        ]
        if self.copy_mode:
            self.frozen = text
        return text

    def draw(self, scr: Any) -> None:
        height, width = scr.getmaxyx()
        scr.erase()
        ov = overview(self.jobs, time.time(), self.stale_after)
        bar = status_bar(ov, self.copy_mode, self.watcher)
        put(scr, 0, bar.ljust(width), width, curses.A_REVERSE)
        if self.running:
            tabs = "  ".join(
                (f"[{terminal_safe(j.name)}]" if j.id == self.selected else terminal_safe(j.name))
                for j in self.running
            )
            job = self.current()
            where = f"{self.running.index(job) + 1}/{len(self.running)}" if job else ""
            state = f"  agent: {agent_activity(self.layout, job.id)}" if job else ""
            put(scr, 1, f" running {where}: {tabs}{state}", width, curses.A_BOLD)
        else:
            put(scr, 1, " no running jobs", width, curses.A_BOLD)
        held = self.held[: max(0, height - 4)]
        for i, line in enumerate(self.output(height - 3 - len(held))):
            put(scr, 2 + i, line, width, 0)
        for i, line in enumerate(held):  # budgets reached: above the footer, in bold
            put(scr, height - 1 - len(held) + i, f" {terminal_safe(line)}", width, curses.A_BOLD)
        if self.confirm is not None:
            footer = f" abort {terminal_safe(self.confirm.name)} ({self.confirm.id})? y/N"
            put(scr, height - 1, footer.ljust(width), width, curses.A_REVERSE)
        else:
            put(scr, height - 1, f" {self.message or HELP}", width, curses.A_DIM)
        scr.refresh()

    def run(self, scr: Any) -> None:
        try:
            curses.curs_set(0)
        except curses.error:
            pass
        scr.timeout(TICK_MS)
        while True:
            now = time.monotonic()
            if now >= self.next_jobs:
                self.load_jobs()
                self.next_jobs = now + JOBS_EVERY
            self.draw(scr)
            ch = scr.getch()
            if ch == -1:
                continue
            if ch == curses.KEY_RESIZE:
                continue
            if not self.key(ch):
                return
            if ch in (ord("y"), ord("Y")):
                self.next_jobs = 0.0  # show the abort's effect without waiting a tick


def put(scr: Any, y: int, text: str, width: int, attr: int) -> None:
    """Write one clipped line; curses refuses the bottom-right cell, so stop short of it."""
    try:
        scr.addnstr(y, 0, text, max(0, width - 1), attr)
    except curses.error:
        pass


def handle(args: argparse.Namespace) -> int:
    layout, config = context(args)
    with JobIndex.open(layout) as index:
        stale_after = max(STALE_HEARTBEATS * config.heartbeat_interval, MIN_STALE_SECONDS)
        view = View(layout, index, stale_after=stale_after, dead_after=config.host_dead_after)
        view.budgets = config.budgets if config.budgets.all_rules() else None
        try:
            curses.wrapper(view.run)
        except KeyboardInterrupt:
            pass  # Ctrl+C is a way to quit; wrapper has already restored the terminal
    return 0
