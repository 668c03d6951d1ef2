"""Which PAUSE markers are set, and which prompts wait unclaimed: for ``hopper status``.

Read without the models (``store/markers.py`` writes the markers and the
watcher reads them with ``read_pause``, both through the scheduling types):
``<root>/PAUSE`` holds the whole queue, ``<root>/inbox/<group>/PAUSE`` one
group. A link at ``PAUSE`` counts as a marker, as it does for the watcher
(``lexists``); nothing is followed or opened.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hopper.core.jobid import prompt_stem
from hopper.store.inbox import scan
from hopper.store.layout import Layout

PAUSE_FILE = "PAUSE"  # the name store/markers.py writes


@dataclass(frozen=True)
class Paused:
    whole: Path | None  # <root>/PAUSE when it is there
    groups: tuple[str, ...]  # inbox sub-folders holding a PAUSE, by name


def read_paused(layout: Layout) -> Paused:
    whole = layout.root / PAUSE_FILE
    groups: list[str] = []
    try:
        with os.scandir(layout.inbox) as it:
            folders = [e.name for e in it if not e.name.startswith(".") and _is_folder(e)]
    except OSError:
        folders = []
    for name in sorted(folders):
        if os.path.lexists(layout.inbox / name / PAUSE_FILE):
            groups.append(name)
    return Paused(whole if os.path.lexists(whole) else None, tuple(groups))


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def waiting_prompts(layout: Layout) -> list[str]:
    """Every prompt in the inbox, as ``group/name`` (``name`` at the top), in scan order.

    A prompt is claimed within a rescan of being dropped; one listed here has
    not been yet (no watcher serves the root, or it is settling)."""
    found = []
    for candidate in scan(layout.inbox):
        rel = candidate.path.relative_to(layout.inbox)
        found.append(
            str(rel.parent / prompt_stem(rel.name)) if rel.parent.parts else prompt_stem(rel.name)
        )
    return found
