"""Every watcher heartbeat file of a root, judged: what ``hopper watchers`` lists and
what ``hopper doctor`` trusts (core/watcherview.py decides; this gathers).

Only the files say which watcher serves *this* root: a ``hopper run`` process
on the host may serve another root, and one on another host cannot be seen.
Whether a watcher's process still runs is looked at only on the machine it
ran on (same host name and boot id); elsewhere the file's age decides.
"""

from __future__ import annotations

import socket
from typing import Any

from hopper.core.owner import parse_owner
from hopper.core.watcherview import WatcherState, judge
from hopper.proc import identity
from hopper.store.layout import Layout
from hopper.store.watchers import beat_files, beat_of, boot_id, job_owners, read_raw

ORDER = {s: i for i, s in enumerate(WatcherState)}


def watcher_rows(layout: Layout, now: float, dead_after: float) -> list[dict[str, Any]]:
    """Each heartbeat file's fields plus ``file``, ``age_seconds``, ``state`` and
    ``detail``; the alive first. A file of the wrong shape is listed as ``unreadable``."""
    here = (socket.gethostname(), boot_id())
    rows: list[dict[str, Any]] = []
    for path in beat_files(layout):
        raw = read_raw(path)
        if raw is None:
            continue  # gone meanwhile, or torn: the next beat rewrites it
        try:
            beat = beat_of(raw, now)
        except (ValueError, TypeError) as exc:  # the file is writable by jobs: trust nothing
            raw.pop("_mtime", None)
            rows.append({**raw, "file": str(path), "state": "unreadable", "detail": str(exc)})
            continue
        owner = parse_owner(beat.owner)
        process_alive = (
            identity.is_alive(owner.pid, owner.start)
            if owner is not None and (beat.host, beat.boot_id) == here
            else None
        )
        late = process_alive is False or beat.age >= dead_after
        owners = job_owners(layout, beat.jobs) if late and not beat.stopped else {}
        verdict = judge(beat, dead_after, process_alive=process_alive, job_owners=owners)
        raw.pop("_mtime", None)
        raw.update(
            file=str(path),
            age_seconds=round(beat.age, 1),
            state=verdict.state.value,
            detail=verdict.detail,
        )
        rows.append(raw)
    rows.sort(key=lambda r: ORDER.get(r["state"], len(ORDER)))
    return rows
