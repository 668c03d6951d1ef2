"""Checks of the watcher: does one serve this root (its heartbeat file under the root
is fresh), does it look after its jobs, is it degraded."""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from hopper.cli.doctor.check import FIX_FREE_SPACE, Check, ok
from hopper.cli.watcherlist import watcher_rows
from hopper.config import Config
from hopper.core.owner import parse_owner
from hopper.core.states import JobState
from hopper.proc import identity
from hopper.store.inbox import scan
from hopper.store.index import JobIndex
from hopper.store.layout import Layout, resolve_root
from hopper.store.watchers import beat_files, beat_of, boot_id, read_raw

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


def root_watcher_processes(
    layout: Layout, config_root: str | None = None
) -> list[tuple[int, list[str]]]:
    """(pid, argv) of this host's live watchers of *this* root: a heartbeat file under
    the root (however old: a degraded watcher cannot rewrite it) names a process that
    still runs here (same host name and boot id, pid and start time); or a ``hopper
    run`` here whose own root (its --root, else its $HOPPER_ROOT, else ``config_root``)
    is this root — a watcher that came up on a full or read-only root never wrote a
    heartbeat file at all."""
    found = _beating_watchers(layout)
    known = {pid for pid, _ in found}
    for pid, argv in watcher_processes():
        if pid not in known and _root_of(pid, argv, config_root) == layout.root:
            found.append((pid, argv))
    return found


def _root_of(pid: int, argv: list[str], config_root: str | None) -> Path | None:
    """The root a ``hopper run`` process serves, as store/layout.resolve_root picks it
    (None when its environment or working directory cannot be read)."""
    named = None
    for i, arg in enumerate(argv):
        if arg == "--root" and i + 1 < len(argv):
            named = argv[i + 1]
        elif arg.startswith("--root="):
            named = arg.split("=", 1)[1]
    try:
        proc = psutil.Process(pid)
        env = proc.environ()
        cwd = proc.cwd()
    except (psutil.Error, OSError):
        return None
    root = resolve_root(named, env, config_root)
    return Path(os.path.normpath(os.path.join(cwd, root)))


def _beating_watchers(layout: Layout) -> list[tuple[int, list[str]]]:
    here = (socket.gethostname(), boot_id())
    found = []
    for path in beat_files(layout):
        raw = read_raw(path)
        if raw is None:
            continue
        try:
            beat = beat_of(raw, time.time())
        except (ValueError, TypeError):
            continue
        owner = parse_owner(beat.owner)
        if owner is None or (beat.host, beat.boot_id) != here:
            continue
        if identity.is_alive(owner.pid, owner.start):
            found.append((owner.pid, ["hopper", "run"]))
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
    """A watcher serves this root only if its heartbeat file under the root is fresh
    (a ``hopper run`` on this host may serve another root); running jobs need fresh
    job heartbeats too."""
    now = time.time() if now is None else now
    stale_after = max(STALE_HEARTBEATS * config.heartbeat_interval, MIN_STALE_SECONDS)
    with JobIndex.open(layout) as index:
        index.refresh()
        jobs = index.jobs()
    running = [j for j in jobs if j.state is JobState.RUNNING]
    queued = [j for j in jobs if j.state is JobState.QUEUED]
    if running:
        beats = [(now - j.heartbeat_at, j) for j in running if j.heartbeat_at is not None]
        if not any(age <= stale_after for age, _ in beats):
            oldest = min((age for age, _ in beats), default=None)
            when = f"last heartbeat {oldest:.0f}s ago" if oldest is not None else "no heartbeat"
            return Check(
                "watcher",
                "fail",
                f"{len(running)} jobs are running but none has a fresh heartbeat ({when}, "
                f"expected every {config.heartbeat_interval:g}s): no watcher is looking after them",
                FIX_START,
            )
    rows = watcher_rows(layout, now, config.host_dead_after)
    served = served_by(rows, stale_after, config.heartbeat_interval)
    if served.status == "ok":
        return ok("watcher", f"{served.message}; {len(running)} running, {len(queued)} queued")
    if served.status == "warn":
        return served
    waiting = sum(1 for _ in scan(layout.inbox)) if layout.inbox.is_dir() else 0
    message = served.message + _elsewhere(processes())
    if waiting or queued or running:
        return Check(
            "watcher",
            "fail",
            f"{message}; {waiting} prompts wait in the inbox, {len(queued)} jobs are queued, "
            f"{len(running)} running",
            FIX_START,
        )
    return Check("watcher", "warn", f"{message}; nothing waits yet", FIX_START)


FIX_START = (
    "start it: systemctl start hopper (or systemctl --user start hopper, or hopper run "
    "--root ROOT); journalctl -u hopper says why it stopped; hopper watchers lists the "
    "heartbeat files. A new watcher adopts running jobs"
)


def served_by(rows: list[dict[str, Any]], stale_after: float, interval: float) -> Check:
    """ok: a watcher beat here within ``stale_after``; warn: one is alive but late;
    fail: none serves this root (the message says what the files say)."""
    alive = sorted(
        (r for r in rows if r.get("state") == "alive"), key=lambda r: float(r["age_seconds"])
    )
    others = Counter(str(r.get("state")) for r in rows if r.get("state") != "alive")
    also = (
        " (also " + ", ".join(f"{n} {state}" for state, n in sorted(others.items())) + ")"
        if others
        else ""
    )
    if alive:
        best = alive[0]
        who = f"{best.get('host')} pid {best.get('pid')}"
        if float(best["age_seconds"]) <= stale_after:
            return ok(
                "watcher",
                f"serving this root: {len(alive)} watcher(s) beating, {who} "
                f"{best['age_seconds']:.0f}s ago{also}",
            )
        return Check(
            "watcher",
            "warn",
            f"watcher {who} last beat {best['age_seconds']:.0f}s ago (expected every "
            f"{interval:g}s): it may be hung or its disk slow{also}",
            "see its log (journalctl -u hopper); it is judged dead after host_dead_after",
        )
    if not rows:
        return Check("watcher", "fail", "no watcher serves this root: no heartbeat file", "")
    return Check(
        "watcher",
        "fail",
        f"no watcher serves this root: no heartbeat file is fresh{also}",
        "",
    )


def _elsewhere(procs: list[tuple[int, list[str]]]) -> str:
    """A ``hopper run`` up on this host that does not beat here serves another root."""
    if not procs:
        return ""
    pids = ", ".join(str(pid) for pid, _ in procs[:5])
    if len(procs) > 5:
        pids += f" and {len(procs) - 5} more"
    return (
        f"; a hopper run process on this host (pid {pids}) writes no heartbeat here: "
        "it serves another root (its --root, $HOPPER_ROOT or config)"
    )


def check_watcher_degraded(
    layout: Layout,
    config: Config,
    processes: Callable[[], list[tuple[int, list[str]]]] = watcher_processes,
) -> Check:
    """:func:`check_watcher`, or on a root that takes no writes (the job index cannot
    be opened there) what the watcher heartbeat files say."""
    try:
        return check_watcher(layout, config, processes=processes)
    except (OSError, sqlite3.Error) as exc:
        try:
            rows = watcher_rows(layout, time.time(), config.host_dead_after)
        except OSError:
            rows = []
        stale_after = max(STALE_HEARTBEATS * config.heartbeat_interval, MIN_STALE_SECONDS)
        served = served_by(rows, stale_after, config.heartbeat_interval)
        return Check(
            "watcher",
            "warn" if served.status == "ok" else "fail",
            f"{served.message}; job heartbeats unreadable: the job index cannot be opened ({exc})",
            "free space or make the root writable (see the writable and degraded checks)",
        )


def check_degraded(
    writable: Check,
    processes: Callable[[], list[tuple[int, list[str]]]] | None = None,
) -> Check:
    """A watcher up on a root that takes no writes runs degraded: it claims nothing.

    The watcher cannot write that down anywhere under the root, so this is
    judged from here: the write probe of :func:`check_writable` failed and a
    watcher is up (``processes``: doctor passes :func:`root_watcher_processes`,
    this root's; its sd_notify STATUS and log say the same).
    """
    if writable.status != "fail":
        return ok("degraded", "no: the root takes writes")
    procs = (processes or watcher_processes)()
    if not procs:
        return ok("degraded", "no watcher is up (see the watcher check)")
    pids = ", ".join(str(pid) for pid, _ in procs[:5])
    if len(procs) > 5:
        pids += f" and {len(procs) - 5} more"
    return Check(
        "degraded",
        "fail",
        f"DEGRADED: the watcher (pid {pids}) is up but the root takes no writes "
        f"({writable.message}); it claims and starts nothing until it can write again; "
        "running jobs go on",
        f"{FIX_FREE_SPACE}, or remount the root read-write; the watcher leaves degraded mode "
        "by itself within a second, no restart",
    )
