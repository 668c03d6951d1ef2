"""Operator requests as files: PAUSE markers and priority changes.

``<root>/PAUSE`` holds every queued job; ``<root>/inbox/<group>/PAUSE`` holds
the jobs of that group. Running jobs are never touched by either: a PAUSE
drains. Remove the file (``hopper resume``) to go on.

``runs/<id>/PRIORITY`` asks the watcher to change a queued job's priority.
job.json has one writer, the watcher that owns the job; so ``hopper
priority`` writes this small request (atomically) and the watcher applies it
at its next scheduling pass: it renames the request aside (a request written
meanwhile is kept for the pass after), writes job.json with the new
priority, appends a ``priority_changed`` event, and removes the request.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from hopper.agents.sessionmap import read_pause_why
from hopper.core.schedule import Pause
from hopper.store.atomic import write_atomic
from hopper.store.layout import Layout, open_folder
from hopper.store.saferead import UnreadableFile, read_bytes

PAUSE_FILE = "PAUSE"
PRIORITY_FILE = "PRIORITY"
PRIORITY_RANGE = (-1000, 1000)
PRIORITY_LIMIT = 64  # bytes: "-1000\n" with room to spare; never more is read


class BadGroup(ValueError):
    """A group name that is not one inbox folder."""


def pause_path(layout: Layout, group: str | None = None) -> Path:
    if group is None:
        return layout.root / PAUSE_FILE
    if not group or "/" in group or "\0" in group or group.startswith("."):
        raise BadGroup(f"{group!r} is not a group (one inbox sub-folder name)")
    return layout.inbox / group / PAUSE_FILE


def set_pause(layout: Layout, group: str | None, paused: bool) -> tuple[Path, bool]:
    """Create (``paused``) or remove the PAUSE marker of ``group`` (None: the root's);
    the marker's path and whether it was there before.

    The folder is reached one ``O_NOFOLLOW`` folder at a time from the root and
    the marker made or removed relative to it, so an inbox folder a job swapped
    for a link is refused (:class:`~hopper.store.layout.NotARealFolder`), never
    written or unlinked through. A link at ``PAUSE`` itself counts as a marker
    (the watcher's ``lexists`` does too) and is never followed. Raises
    :class:`BadGroup` for a name that is not one inbox folder, ``OSError`` as
    the system gave it.
    """
    marker = pause_path(layout, group)
    parts = ("inbox", group) if group is not None else ()
    try:
        dir_fd = open_folder(layout.root, parts, create=paused)
    except FileNotFoundError:
        return marker, False  # resume of a group with no folder: nothing to remove
    try:
        there = _lexists(PAUSE_FILE, dir_fd)
        if paused and not there:
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            os.close(os.open(PAUSE_FILE, flags, 0o644, dir_fd=dir_fd))
        elif not paused and there:
            os.unlink(PAUSE_FILE, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    return marker, there


def _lexists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def read_pause(
    layout: Layout, groups: Iterable[str | None], sessions: Iterable[str | None] = ()
) -> Pause:
    """The PAUSE markers that matter for jobs of ``groups``, and paused ``sessions``."""
    if os.path.lexists(pause_path(layout)):
        return Pause(all=True)
    held_sessions = {}
    for session in {s for s in sessions if s}:
        why = read_pause_why(layout.root / "sessions", session)
        if why is not None:
            held_sessions[session] = why
    held = set()
    for group in {g for g in groups if g}:
        try:
            if os.path.lexists(pause_path(layout, group)):
                held.add(group)
        except BadGroup:
            continue
    return Pause(groups=frozenset(held), sessions=held_sessions)


def request_priority(run_dir: Path, priority: int) -> Path:
    path = run_dir / PRIORITY_FILE
    write_atomic(path, f"{priority}\n".encode())
    return path


_TAKEN = f".{PRIORITY_FILE}.taken"


def take_priority_request(run_dir: Path) -> int | str | None:
    """The requested priority; a string saying what was wrong; None if there is no request."""
    # Looked for in every queued job once a pass: the names as strings, Paths only
    # for a request that is there.
    folder = os.fspath(run_dir)
    try:
        os.rename(f"{folder}/{PRIORITY_FILE}", f"{folder}/{_TAKEN}")
    except FileNotFoundError:
        return None
    taken = run_dir / _TAKEN
    try:
        text = read_bytes(taken, PRIORITY_LIMIT).decode("utf-8", errors="replace").strip()
    except FileNotFoundError:
        return None  # taken by another reader meanwhile
    except UnreadableFile as exc:
        return f"PRIORITY {exc.message} (write it with: hopper priority ID N)"
    finally:
        _remove(taken)
    try:
        value = int(text)
    except ValueError:
        return f"PRIORITY must hold an integer, not {text[:40]!r}"
    low, high = PRIORITY_RANGE
    if not low <= value <= high:
        return f"priority {value} is outside {low}..{high}"
    return value


def _remove(path: Path) -> None:
    """Unlink a taken request, whatever was planted there (a directory too)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass  # left behind; the next request renames over it
