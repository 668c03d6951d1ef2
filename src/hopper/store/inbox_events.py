"""inotify hints gathered for the claims: which inbox paths to look at now.

Events are hints; the periodic rescan in the watcher is the truth. A prompt
that appeared by rename (``IN_MOVED_TO``, from inside the inbox or from
outside it) is complete; one created, modified or closed after writing in
place is only pending: it is whole once it has not changed for ``settle``
seconds (store/inbox_settle.py). Folder moves and overflows ask for a full
rescan. The hints come from the inbox's watch (store/inbox_watch.py), read
in the loop's own thread once a turn (:meth:`InboxEvents.pull`); tests hand
them in with :meth:`InboxEvents.hint`.
"""

from __future__ import annotations

from pathlib import Path

from hopper.store.inbox import is_prompt_name
from hopper.store.inbox_watch import Hints, InboxWatch


class InboxEvents:
    """Hints since the last :meth:`drain`: complete paths, pending paths, rescan wanted."""

    def __init__(self) -> None:
        self._complete: set[Path] = set()
        self._pending: set[Path] = set()
        self._rescan = False
        self.watch: InboxWatch | None = None  # the inbox's inotify watch, while the loop runs

    @property
    def fresh(self) -> bool:
        """Hints not drained yet."""
        return bool(self._complete or self._pending or self._rescan)

    def pull(self) -> None:
        """Read the watch's queued events (without blocking) into the hints."""
        if self.watch is not None and self.watch.live:
            self.add(self.watch.read())

    def add(self, hints: Hints) -> None:
        """Merge one read's hints: a rename in makes a path complete, whatever came before."""
        self._complete |= hints.complete
        self._pending -= hints.complete
        self._pending |= hints.pending - self._complete
        self._rescan = self._rescan or hints.rescan

    def hint(self, path: Path, *, complete: bool) -> None:
        """One path seen: renamed in (``complete``) or written in place."""
        if is_prompt_name(path.name):
            self.add(Hints(complete={path}) if complete else Hints(pending={path}))

    def drain(self) -> tuple[set[Path], set[Path], bool]:
        """(complete paths, pending paths, rescan wanted) since the last drain."""
        out = (self._complete, self._pending, self._rescan)
        self._complete, self._pending, self._rescan = set(), set(), False
        return out
