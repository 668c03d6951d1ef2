"""The lines under ``hopper status``'s table for people: counts, watcher, PAUSE, inbox.

- counts per state of the jobs the filters let through (``--limit`` says how
  many of them are shown);
- watcher health for this root, from its heartbeat files (``store/watchers.py``
  ``beat_files``/``beat_of``, judged by ``cli/watcherlist.py`` as ``hopper
  watchers`` and ``hopper doctor`` judge them): a watcher serves the root only
  if its heartbeat file there is fresh;
- PAUSE, for the whole queue or per group, when set;
- prompts waiting unclaimed in the inbox, named (up to :data:`NAMED`).

The config's ``heartbeat_interval`` and ``host_dead_after`` are read plainly
(as ``configfile.py`` reads ``root``): a status never loads the models, and a
config it cannot read gets the defaults here (``hopper config check`` says
what is wrong with it).
"""

from __future__ import annotations

import tomllib
from collections import Counter
from collections.abc import Callable
from typing import Any

from hopper.cli.status_table import Paint
from hopper.cli.watcherlist import watcher_rows
from hopper.configfile import CONFIG_LIMIT, config_path
from hopper.core.durations import BadDuration, parse_duration
from hopper.core.states import JobState
from hopper.core.summary import JobSummary
from hopper.store.index import JobIndex
from hopper.store.layout import Layout
from hopper.store.pauses import read_paused, waiting_prompts
from hopper.store.saferead import UnreadableFile, read_text

NAMED = 5  # unclaimed prompts named in the footer; the rest counted
STALE_HEARTBEATS = 3  # as hopper doctor: a beat older than 3 intervals (at least 30 s) is late
MIN_STALE_SECONDS = 30.0
DEFAULTS = {"heartbeat_interval": 5.0, "host_dead_after": 60.0}  # config.py's defaults
ORDER = (JobState.RUNNING, JobState.QUEUED, JobState.FAILED, JobState.ABORTED, JobState.SUCCEEDED)


def count_line(jobs: list[JobSummary], shown: int, filtered: bool, paint: Paint) -> str:
    counts = Counter(j.state for j in jobs)
    parts = [paint(s.value, f"{counts[s]} {s.value}") for s in ORDER if counts[s]]
    noun = f"{len(jobs)} job{'s' if len(jobs) != 1 else ''}" + (" match" if filtered else "")
    head = f"showing the newest {shown} of {noun}" if shown < len(jobs) else noun
    return head + (": " + ", ".join(parts) if parts else "")


def seconds_from_config(cli_config: str | None, env: dict[str, str]) -> dict[str, float]:
    found = dict(DEFAULTS)
    path = config_path(cli_config, env)
    if path is None:
        return found
    try:
        raw: Any = tomllib.loads(read_text(path.resolve(), CONFIG_LIMIT))
    except (OSError, UnreadableFile, tomllib.TOMLDecodeError, RecursionError):
        return found
    for key in found:
        try:
            value = parse_duration(raw.get(key, found[key]))
        except (BadDuration, TypeError, AttributeError):
            continue
        if value > 0:
            found[key] = value
    return found


def serving(layout: Layout, now: float, seconds: dict[str, float]) -> bool:
    """A watcher's heartbeat file here is fresh (what :func:`watcher_line` calls serving)."""
    stale_after = max(STALE_HEARTBEATS * seconds["heartbeat_interval"], MIN_STALE_SECONDS)
    return any(
        r.get("state") == "alive" and float(r["age_seconds"]) <= stale_after
        for r in watcher_rows(layout, now, seconds["host_dead_after"])
    )


def queued_waits(
    layout: Layout,
    index: JobIndex,
    jobs: list[JobSummary],
    cli_config: str | None,
    now: float,
    seconds: dict[str, float],
) -> dict[str, str]:
    """Why each queued job of ``jobs`` waits, in ``core/waits.py``'s words (the dashboard's
    too); empty when none is queued or the config cannot be loaded (``hopper config
    check`` says why). Loads the models: only for a table that shows queued jobs."""
    if not any(j.state is JobState.QUEUED for j in jobs):
        return {}
    from hopper.config import load_config
    from hopper.errors import HopperError
    from hopper.store.queue_waits import queue_waits

    try:
        config = load_config(cli_config)
    except (HopperError, OSError, ValueError):
        return {}
    return queue_waits(
        layout,
        index,
        config.slot_limits(),
        config.dependency_timeout,
        serving=serving(layout, now, seconds),
        now=now,
    )


def watcher_line(layout: Layout, now: float, seconds: dict[str, float], paint: Paint) -> str:
    interval = seconds["heartbeat_interval"]
    rows = watcher_rows(layout, now, seconds["host_dead_after"])
    stale_after = max(STALE_HEARTBEATS * interval, MIN_STALE_SECONDS)
    alive = sorted(
        (r for r in rows if r.get("state") == "alive"), key=lambda r: float(r["age_seconds"])
    )
    others = Counter(str(r.get("state")) for r in rows if r.get("state") != "alive")
    also = "".join(f"; {n} {s}" for s, n in sorted(others.items()))
    if alive:
        best = alive[0]
        who = f"{best.get('host')} pid {best.get('pid')}"
        age = float(best["age_seconds"])
        if age <= stale_after:
            many = f"{len(alive)} watchers, " if len(alive) > 1 else ""
            return paint("", f"watcher: serving this root ({many}{who} beat {age:.0f}s ago{also})")
        return paint(
            "warn",
            f"watcher: LATE: {who} last beat {age:.0f}s ago (expected every {interval:g}s): "
            f"hung or its disk slow? (hopper watchers; hopper doctor){also.replace(';', ',')}",
        )
    why = "no heartbeat file" if not rows else "no heartbeat file is fresh"
    return paint(
        "bad",
        f"watcher: NONE serves this root ({why}{also}): nothing is claimed or started; "
        "start one (hopper run, or systemctl start hopper)",
    )


def pause_footer(layout: Layout, paint: Paint) -> list[str]:
    paused = read_paused(layout)
    lines = []
    if paused.whole is not None:
        lines.append(
            f"PAUSED: the whole queue ({paused.whole}): queued jobs wait, running ones finish; "
            "hopper resume"
        )
    if paused.groups:
        lines.append(
            f"PAUSED groups: {', '.join(paused.groups)}: their queued jobs wait; "
            "hopper resume GROUP"
        )
    return [paint("warn", line) for line in lines]


def inbox_line(layout: Layout) -> str | None:
    """``N prompts wait unclaimed in INBOX: a, b, …``; None when the inbox is empty."""
    names = waiting_prompts(layout)
    if not names:
        return None
    more = f" (and {len(names) - NAMED} more)" if len(names) > NAMED else ""
    noun = "prompt waits" if len(names) == 1 else "prompts wait"
    return f"{len(names)} {noun} unclaimed in {layout.inbox}: {', '.join(names[:NAMED])}{more}"


def footer(
    layout: Layout,
    jobs: list[JobSummary],
    shown: int,
    *,
    filtered: bool,
    inbox: str | None,
    watcher: Callable[[], str],
    paint: Paint,
) -> list[str]:
    """Each line escaped (terminal_safe) and painted: print as they are."""
    lines = [count_line(jobs, shown, filtered, paint), watcher(), *pause_footer(layout, paint)]
    if inbox is not None:
        lines.append(paint("warn", inbox))
    return lines
