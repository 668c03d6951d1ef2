"""The session map: ``<root>/sessions/<name>.json``, and a session's pause marker.

Standard library only (the job driver uses it; so does the adapter that
prepares an agent job in the watcher). A session is one agent conversation
with **one working directory** for all its prompts: the first prompt's
workdir, else ``<root>/sessions/<name>/work``. The map records the agent's
session id and that directory; the driver writes it (atomically) after a
successful turn. Everything under the root can be written by a user or a job,
so the map is read with a size cap, as JSON, and checked field by field: a
map that is not what hopper writes counts as no map.

``<root>/sessions/<name>.paused`` holds the session's later prompts (an
agent job with ``on_error = "pause"`` failed); removing it lets them run.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from hopper.store.atomic import write_atomic

MAP_LIMIT = 64 * 1024
PAUSE_SUFFIX = ".paused"


@dataclass(frozen=True)
class SessionEntry:
    agent: str
    session_id: str | None
    workdir: str | None


def map_path(sessions_dir: Path, name: str) -> Path:
    return sessions_dir / f"{name}.json"


def session_workdir(sessions_dir: Path, name: str) -> Path:
    """The directory a session without a workdir of its own runs in."""
    return sessions_dir / name / "work"


def pause_path(sessions_dir: Path, name: str) -> Path:
    return sessions_dir / f"{name}{PAUSE_SUFFIX}"


def _read_small(path: Path, limit: int) -> bytes | None:
    """The bytes of a small regular file (no symlink, FIFO or device), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def read_entry(sessions_dir: Path, name: str) -> SessionEntry | None:
    """The recorded session, or None (none yet, or not a map hopper wrote)."""
    data = _read_small(map_path(sessions_dir, name), MAP_LIMIT)
    if data is None:
        return None
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("agent"), str):
        return None
    sid, workdir = obj.get("session_id"), obj.get("workdir")
    return SessionEntry(
        agent=obj["agent"],
        session_id=sid if isinstance(sid, str) and sid else None,
        workdir=workdir if isinstance(workdir, str) and workdir.startswith("/") else None,
    )


def write_entry(
    sessions_dir: Path, name: str, agent: str, session_id: str, workdir: str, job_id: str | None
) -> None:
    sessions_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "name": name,
        "agent": agent,
        "session_id": session_id,
        "workdir": workdir,
        "job_id": job_id,
        "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_atomic(map_path(sessions_dir, name), json.dumps(data, indent=2).encode() + b"\n")


def write_pause(sessions_dir: Path, name: str, job_id: str | None, why: str) -> Path:
    """Hold the session's later prompts; the file says which job paused it and why."""
    sessions_dir.mkdir(parents=True, exist_ok=True)
    path = pause_path(sessions_dir, name)
    data = {"session": name, "job_id": job_id, "why": why}
    write_atomic(path, json.dumps(data, indent=2).encode() + b"\n")
    return path


def read_pause_why(sessions_dir: Path, name: str) -> str | None:
    """Why the session is paused, or None when it is not."""
    path = pause_path(sessions_dir, name)
    if not os.path.lexists(path):
        return None
    data = _read_small(path, MAP_LIMIT)
    try:
        obj = json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        obj = None
    why = obj.get("why") if isinstance(obj, dict) else None
    job = obj.get("job_id") if isinstance(obj, dict) else None
    text = str(why)[:300] if isinstance(why, str) else "paused"
    if isinstance(job, str):
        text = f"job {job[:80]} {text}"
    return f"{text}; to go on: rm {path}"


def paused_sessions(sessions_dir: Path) -> dict[str, str]:
    """Every paused session -> why (for ``hopper status``)."""
    try:
        names = sorted(os.listdir(sessions_dir))
    except OSError:
        return {}
    out: dict[str, str] = {}
    for entry in names:
        if entry.endswith(PAUSE_SUFFIX) and not entry.startswith("."):
            name = entry[: -len(PAUSE_SUFFIX)]
            why = read_pause_why(sessions_dir, name)
            if why:
                out[name] = why
    return out
