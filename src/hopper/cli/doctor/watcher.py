"""Checks of the watcher: is one up, does it look after its jobs, is it degraded."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable

import psutil

from hopper.cli.doctor.check import Check, ok
from hopper.config import Config
from hopper.core.states import JobState
from hopper.store.inbox import scan
from hopper.store.index import JobIndex
from hopper.store.layout import Layout

#: A running job's heartbeat older than this many heartbeat intervals (at
#: least MIN_STALE_SECONDS) means no watcher is looking after it.
STALE_HEARTBEATS = 3
MIN_STALE_SECONDS = 30.0


def watcher_processes() -> list[tuple[int, list[str]]]:
    """(pid, argv) of processes that look like ``hopper run`` on this host."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        argv = proc.info.get("cmdline") or []
        if proc.info["pid"] != os.getpid() and _is_watcher(argv):
            found.append((proc.info["pid"], list(argv)))
    return found


def _is_watcher(argv: list[str]) -> bool:
    for i, arg in enumerate(argv[:-1]):
        if os.path.basename(arg) == "hopper" and argv[i + 1] == "run":
            return True
    return False


def check_watcher(
    layout: Layout,
    config: Config,
    now: float | None = None,
    processes: Callable[[], list[tuple[int, list[str]]]] = watcher_processes,
) -> Check:
    """Alive: a running job's heartbeat is fresh, or a ``hopper run`` process exists."""
    now = time.time() if now is None else now
    stale_after = max(STALE_HEARTBEATS * config.heartbeat_interval, MIN_STALE_SECONDS)
    with JobIndex.open(layout) as index:
        index.refresh()
        jobs = index.jobs()
    running = [j for j in jobs if j.state is JobState.RUNNING]
    queued = [j for j in jobs if j.state is JobState.QUEUED]
    fix = (
        "start it: systemctl start hopper (or systemctl --user start hopper, or hopper run); "
        "journalctl -u hopper says why it stopped. A new watcher adopts running jobs"
    )
    if running:
        beats = [(now - j.heartbeat_at, j) for j in running if j.heartbeat_at is not None]
        fresh = [(age, j) for age, j in beats if age <= stale_after]
        if fresh:
            age, job = min(fresh, key=lambda x: x[0])
            return ok(
                "watcher",
                f"alive: {len(running)} running, job {job.id} heartbeat {age:.0f}s ago",
            )
        oldest = min((age for age, _ in beats), default=None)
        when = f"last heartbeat {oldest:.0f}s ago" if oldest is not None else "no heartbeat"
        return Check(
            "watcher",
            "fail",
            f"{len(running)} jobs are running but none has a fresh heartbeat ({when}, "
            f"expected every {config.heartbeat_interval:g}s): no watcher is looking after them",
            fix,
        )
    procs = processes()
    if procs:
        pids = ", ".join(str(pid) for pid, _ in procs[:5])
        return ok("watcher", f"a hopper run process is up (pid {pids}); no job running to time")
    waiting = sum(1 for _ in scan(layout.inbox)) if layout.inbox.is_dir() else 0
    if waiting or queued:
        return Check(
            "watcher",
            "fail",
            f"no watcher on this host, and {waiting} prompts wait in the inbox, "
            f"{len(queued)} jobs are queued",
            fix,
        )
    return Check(
        "watcher",
        "warn",
        "no hopper run process on this host (fine if another host serves this root)",
        fix,
    )


def check_watcher_degraded(
    layout: Layout,
    config: Config,
    processes: Callable[[], list[tuple[int, list[str]]]] = watcher_processes,
) -> Check:
    """:func:`check_watcher`, or on a root that takes no writes (the job index cannot
    be opened there) at least whether a watcher process is up."""
    try:
        return check_watcher(layout, config, processes=processes)
    except (OSError, sqlite3.Error) as exc:
        procs = processes()
        found = (
            f"a hopper run process is up (pid {', '.join(str(p) for p, _ in procs[:5])})"
            if procs
            else "no hopper run process is up"
        )
        return Check(
            "watcher",
            "warn" if procs else "fail",
            f"{found}; job heartbeats unreadable: the job index cannot be opened ({exc})",
            "free space or make the root writable (see the writable and degraded checks)",
        )


def check_degraded(
    writable: Check,
    processes: Callable[[], list[tuple[int, list[str]]]] | None = None,
) -> Check:
    """A watcher up on a root that takes no writes runs degraded: it claims nothing.

    The watcher cannot write that down anywhere under the root, so this is
    judged from here: the write probe of :func:`check_writable` failed and a
    ``hopper run`` process is up (its sd_notify STATUS and log say the same).
    """
    if writable.status != "fail":
        return ok("degraded", "no: the root takes writes")
    procs = (processes or watcher_processes)()
    if not procs:
        return ok("degraded", "no watcher is up (see the watcher check)")
    pids = ", ".join(str(pid) for pid, _ in procs[:5])
    return Check(
        "degraded",
        "fail",
        f"DEGRADED: the watcher (pid {pids}) is up but the root takes no writes "
        f"({writable.message}); it claims and starts nothing until it can write again; "
        "running jobs go on",
        "free space (hopper prune, delete old runs/ and processed/) or remount the root "
        "read-write; the watcher leaves degraded mode by itself within a second, no restart",
    )
