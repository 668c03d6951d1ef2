"""Watcher health for the dashboard, judged as ``hopper doctor`` and ``hopper watchers`` do.

The truth is the root's watcher heartbeat files (``store/watchers.py``),
judged per file by ``cli/watcherlist.watcher_rows`` (alive, stopped, dead,
taken_over) and for the root by the doctor's ``served_by``: a watcher serves
this root only if its heartbeat file here is fresh (within three heartbeat
intervals, at least 30 s). Nothing is judged from job heartbeats or from
``hopper run`` processes on the host, and there is no "unknown": with no
file, no watcher serves the root.

The page shows a banner when none serves it (or the one alive is late) while
work waits: queued or "running" jobs, or prompts in the inbox.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hopper.cli.doctor.watcher import MIN_STALE_SECONDS, STALE_HEARTBEATS, served_by
from hopper.cli.watcherlist import watcher_rows
from hopper.config import Config
from hopper.store.layout import Layout
from hopper.store.pauses import waiting_prompts

START = "Start one: hopper run (or systemctl start hopper); hopper doctor says more."
STATES = {"ok": "serving", "warn": "late", "fail": "none"}


@dataclass(frozen=True)
class Health:
    state: str  # serving, late or none
    detail: str  # the doctor's sentence
    watchers: dict[str, int]  # heartbeat files by state (alive, stopped, dead, taken_over …)
    banner: str | None  # for the page: set when work waits that no watcher looks after


def watcher_health(layout: Layout, config: Config, now: float, queued: int, running: int) -> Health:
    rows = watcher_rows(layout, now, config.host_dead_after)
    stale_after = max(STALE_HEARTBEATS * config.heartbeat_interval, MIN_STALE_SECONDS)
    served = served_by(rows, stale_after, config.heartbeat_interval)
    state = STATES[served.status]
    files = Counter(str(r.get("state")) for r in rows)
    banner = None
    if state != "serving":
        inbox = len(waiting_prompts(layout))
        work = [
            f"{n} {what}"
            for n, what in ((running, '"running"'), (queued, "queued"), (inbox, "in the inbox"))
            if n
        ]
        if work:
            lead = (
                f"The watcher is late ({served.message})"
                if state == "late"
                else "No watcher serves this root"
            )
            banner = (
                f"{lead}: {', '.join(work)}; nothing is claimed, started or looked after. {START}"
            )
    return Health(state, served.message, dict(files), banner)
