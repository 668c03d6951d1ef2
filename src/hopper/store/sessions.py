"""Live sessions on the root: where each one's directory is, and what its host says.

A named session's directory is ``<root>/sessions/<name>/`` (beside the
session map ``<name>.json`` of agents/sessionmap.py); an interactive job
with no session name gets one of its own, ``runs/<id>/session/``. The host
writes ``session.json`` there (sessionhost/contract.py); a record that says
live while its host (pid + start time) is gone is reported ``dead``.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hopper.errors import HopperError
from hopper.proc import identity
from hopper.sessionhost import contract
from hopper.sessionhost.contract import SessionState
from hopper.store.layout import Layout
from hopper.store.lookup import find_job

SESSIONS_DIR = "sessions"
OWN_SESSION_DIR = "session"  # runs/<id>/session: an interactive job's own
DEAD = "dead"  # session.json says live, but its host is gone
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def sessions_root(layout: Layout) -> Path:
    return layout.root / SESSIONS_DIR


def session_dir(layout: Layout, name: str) -> Path:
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not a session name")
    return sessions_root(layout) / name


def job_session_dir(layout: Layout, job_id: str, session: str | None) -> Path:
    """The directory of the session a job's message goes to."""
    return session_dir(layout, session) if session else layout.run_dir(job_id) / OWN_SESSION_DIR


@dataclass(frozen=True)
class SessionView:
    path: Path
    record: SessionState
    state: str  # the record's, or DEAD

    @property
    def live(self) -> bool:
        return self.state in contract.LIVE_STATES


def host_alive(record: SessionState) -> bool:
    return identity.is_alive(record.host_pid, record.host_start)


def view(path: Path) -> SessionView | None:
    record = contract.read_session(path)
    if record is None:
        return None
    state = record.state
    if record.live and not host_alive(record):
        state = DEAD
    return SessionView(path, record, state)


def list_sessions(layout: Layout) -> list[SessionView]:
    """Every named session with a session.json, by name."""
    root = sessions_root(layout)
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    found = []
    for name in names:
        if not _NAME.match(name) or not (root / name).is_dir() or (root / name).is_symlink():
            continue
        seen = view(root / name)
        if seen is not None:
            found.append(seen)
    return found


def seconds_since(stamp: str | None, now: float | None = None) -> float | None:
    """Seconds from an ISO time the host wrote to ``now`` (the wall clock)."""
    if not stamp:
        return None
    try:
        then = datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None
    return max(0.0, (time.time() if now is None else now) - then)


class NoSession(HopperError):
    """Neither a session of that name nor a job with a session."""


def find_session(layout: Layout, ref: str) -> Path:
    """The session directory ``ref`` names: a session's name, else a job (id, prefix or
    name) whose session it is. Raises :class:`NoSession` (or JobNotFound)."""
    if _NAME.match(ref) and (sessions_root(layout) / ref / contract.SESSION_FILE).exists():
        return sessions_root(layout) / ref
    record = find_job(layout, ref)
    folder = job_session_dir(layout, record.id, record.session)
    if not (folder / contract.SESSION_FILE).exists():
        raise NoSession(
            f"job {record.id} has no live session (it is not an interactive job, "
            "or its session has not started)",
            hint="hopper sessions lists the live ones",
        )
    return folder
