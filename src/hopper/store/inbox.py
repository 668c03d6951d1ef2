"""Finding prompts in the inbox.

A ``*.prompt.md`` is complete when it appeared by rename (inotify
IN_MOVED_TO), or, written in place or found by a rescan, once it has not
changed for ``settle`` seconds and no process holds it open for writing
(store/inbox_settle.py, claims.py). Dot-names are never prompts, and directories
are descended into (a directory named ``x.prompt.md`` is a folder, not a prompt).
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hopper.store.layout import PROMPT_SUFFIX

# How many folders below the inbox a prompt may be (inbox/a/b/x.prompt.md is 2).
# Deeper folders are neither searched nor watched: a tree 1000 deep must not
# cost the watcher its inotify thread or its rescans (issue 13).
MAX_DEPTH = 16

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    path: Path
    mode: int
    size: int
    mtime: float

    @property
    def is_regular(self) -> bool:
        return stat.S_ISREG(self.mode)


def is_prompt_name(name: str) -> bool:
    return (
        name.endswith(PROMPT_SUFFIX) and not name.startswith(".") and len(name) > len(PROMPT_SUFFIX)
    )


def scan(inbox: Path) -> Iterator[Candidate]:
    """Every non-directory ``*.prompt.md`` below ``inbox``; symlinked folders not followed.

    Folders deeper than :data:`MAX_DEPTH` are not entered (logged once each);
    a folder or entry that cannot be listed or looked at (a path longer than
    PATH_MAX, permission denied, an I/O error) is skipped with one log line.
    """
    stack: list[tuple[Path, int]] = [(inbox, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            _skip_once(folder, f"cannot list this folder: {exc.strerror or exc}")
            continue
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.startswith("."):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                _skip_once(Path(entry.path), f"cannot look at it: {exc.strerror or exc}")
                continue
            if stat.S_ISDIR(st.st_mode):
                if depth < MAX_DEPTH:
                    stack.append((Path(entry.path), depth + 1))
                else:
                    _skip_once(
                        Path(entry.path),
                        f"deeper than {MAX_DEPTH} folders below the inbox: not searched",
                    )
            elif is_prompt_name(entry.name):
                yield Candidate(Path(entry.path), st.st_mode, st.st_size, st.st_mtime)


_reported: set[Path] = set()
_REPORTED_MAX = 10_000


def _skip_once(path: Path, why: str) -> None:
    """Log a skipped inbox path once per process (rescans repeat every few seconds)."""
    if path in _reported:
        return
    if len(_reported) >= _REPORTED_MAX:
        _reported.clear()  # bounded memory; at worst a line is repeated
    _reported.add(path)
    log.warning("inbox: skipping %s: %s", path, why)


def candidate(path: Path) -> Candidate | None:
    """``path`` as :func:`scan` would report it; None if gone, a directory or unreachable."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        _skip_once(path, f"cannot look at it: {exc.strerror or exc}")
        return None
    if stat.S_ISDIR(st.st_mode):
        return None
    return Candidate(path, st.st_mode, st.st_size, st.st_mtime)


def in_scope(inbox: Path, path: Path) -> bool:
    """Would :func:`scan` find ``path``? (No dot-folder on the way, at most MAX_DEPTH deep.)

    inotify hints come from every watched folder; this keeps them to the same
    rules as the rescan.
    """
    try:
        parts = path.relative_to(inbox).parts
    except ValueError:
        return False
    folders = parts[:-1]
    return (
        bool(parts)
        and len(folders) <= MAX_DEPTH
        and not any(part.startswith(".") for part in folders)
        and is_prompt_name(parts[-1])
    )
