"""Watcher heartbeat files: ``<root>/.hopper/watchers/<host>--<pid>.json``.

Each ``hopper run`` rewrites its file every ``heartbeat_interval`` (atomic
replace, no fsync: a lost beat is the next one's job) with its host, pid,
start time, boot id, version and counts, and removes it on a clean exit —
unless it leaves jobs running (``on_stop = "detach"``), in which case the
last beat says ``stopped`` and stays, so other hosts do not take those jobs
over. Readers: the watchers themselves (core/hosts.py judges hosts dead),
``hopper watchers``. A dead watcher's file is removed by :func:`prune_beats`
once it is stale (core/watcherview.py): by every live watcher, and by
``hopper watchers --prune``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hopper import __version__
from hopper.core.hosts import Beat
from hopper.core.states import is_terminal
from hopper.core.watcherview import stale
from hopper.errors import HopperError
from hopper.store.atomic import write_atomic
from hopper.store.jobfile import read_record
from hopper.store.layout import Layout
from hopper.store.saferead import SMALL_LIMIT, UnreadableFile, read_stat

WATCHERS_DIR = "watchers"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def beat_path(layout: Layout, host: str, pid: int) -> Path:
    return layout.state_dir / WATCHERS_DIR / f"{quote(host, safe='-_.')}--{pid}.json"


def write_beat(
    layout: Layout,
    *,
    host: str,
    pid: int,
    owner: str,
    started: float,
    running: int,
    queued: int,
    jobs: Iterable[str] = (),
    stopped: bool = False,
) -> Path:
    path = beat_path(layout, host, pid)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "host": host,
        "pid": pid,
        "owner": owner,
        "started_at": datetime.fromtimestamp(started, UTC).isoformat(),
        "written_at": datetime.now(UTC).isoformat(),
        "boot_id": boot_id(),
        "version": __version__,
        "running": running,
        "queued": queued,
        "jobs": sorted(jobs),
        "stopped": stopped,
    }
    write_atomic(path, json.dumps(payload, indent=2).encode() + b"\n", durable=False)
    return path


def remove_beat(layout: Layout, host: str, pid: int) -> None:
    beat_path(layout, host, pid).unlink(missing_ok=True)


def beat_files(layout: Layout) -> list[Path]:
    """Every heartbeat file under the root, by name (temporary dot-names left out)."""
    folder = layout.state_dir / WATCHERS_DIR
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".json") and not n.startswith(".")]
    except FileNotFoundError:
        return []
    return [folder / name for name in sorted(names)]


def read_beats(layout: Layout, now: float | None = None) -> list[Beat]:
    """Every watcher's latest heartbeat (unreadable files skipped)."""
    now = time.time() if now is None else now
    out: list[Beat] = []
    for path in beat_files(layout):
        raw = read_raw(path)
        if raw is not None:
            out.append(beat_of(raw, now))
    return out


def beat_of(raw: dict[str, Any], now: float) -> Beat:
    """A heartbeat file's JSON (from :func:`read_raw`) as a :class:`Beat`."""
    return Beat(
        host=str(raw.get("host", "")),
        pid=int(raw.get("pid", 0)),
        owner=str(raw.get("owner", "")),
        age=max(0.0, now - float(raw["_mtime"])),
        stopped=bool(raw.get("stopped", False)),
        running=int(raw.get("running", 0)),
        queued=int(raw.get("queued", 0)),
        boot_id=raw.get("boot_id"),
        version=raw.get("version"),
        jobs=tuple(str(j) for j in raw.get("jobs", ())),
    )


def read_raw(path: Path) -> dict[str, Any] | None:
    """The file's JSON plus ``_mtime``; None if gone or torn."""
    try:
        data, st = read_stat(path, SMALL_LIMIT)  # no link, FIFO or huge file: see saferead
        mtime = st.st_mtime
        raw = json.loads(data)
    except (OSError, ValueError, RecursionError, UnreadableFile):
        return None
    if not isinstance(raw, dict):
        return None
    raw["_mtime"] = mtime
    return raw


def job_owners(layout: Layout, jobs: Iterable[str]) -> dict[str, str | None]:
    """Who holds each job now (None: it ended, or cannot be read)."""
    owners: dict[str, str | None] = {}
    for job_id in jobs:
        try:
            record = read_record(layout.run_dir(job_id))
        except (OSError, ValueError, HopperError):
            owners[job_id] = None
            continue
        owners[job_id] = None if is_terminal(record.state) else record.owner
    return owners


def prune_beats(
    layout: Layout, now: float, older_than: float, *, keep_owner: str = ""
) -> list[tuple[Path, Beat]]:
    """Remove every heartbeat file that is stale (core/watcherview.py: not stopped, no
    beat for ``older_than`` seconds, none of its jobs still its own), except
    ``keep_owner``'s; the files removed, each with what it said. Files of the wrong
    shape are left for a person (``hopper watchers`` lists them as unreadable)."""
    removed: list[tuple[Path, Beat]] = []
    for path in beat_files(layout):
        raw = read_raw(path)
        if raw is None:
            continue
        try:
            beat = beat_of(raw, now)
        except (ValueError, TypeError):
            continue
        if beat.owner == keep_owner or beat.stopped or beat.age < older_than:
            continue  # read no job files for a live or stopped watcher
        if stale(beat, older_than, job_owners(layout, beat.jobs)):
            path.unlink(missing_ok=True)  # a path under the root: unlink never follows it
            removed.append((path, beat))
    return removed
