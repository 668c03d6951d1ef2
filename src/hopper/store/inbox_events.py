"""inotify (through watchdog) as hints: which inbox paths to look at now.

Events are hints; the periodic rescan in the watcher is the truth. A prompt
that appeared by rename (moved_to) or was closed after writing (closed) is
complete; a created or modified one is only pending until it closes or
settles. Directory moves and overflows trigger a full rescan.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.inotify_move_event_grouper import InotifyMoveEventGrouper

from hopper.store.inbox import is_prompt_name

# watchdog holds every IN_MOVED_FROM for up to 0.5 s waiting for its
# IN_MOVED_TO, and its reader *sleeps* through that wait even when the pair
# arrives at once: a prompt renamed into place (the safe way to drop one)
# would wait ~0.3 s before hopper saw it. The two halves of a rename inside
# the inbox arrive in the same read(2) batch, so a short wait pairs them just
# as well; an unpaired move-in is reported as a creation and found by the
# pending check, so nothing is missed either way.
MOVE_PAIRING_DELAY = 0.02
InotifyMoveEventGrouper.delay = MOVE_PAIRING_DELAY


class InboxEvents(FileSystemEventHandler):
    """Collects hints from the observer thread; the main loop drains them."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._complete: set[Path] = set()
        self._pending: set[Path] = set()
        self._rescan = False
        self._wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        if isinstance(event, DirMovedEvent):
            self._mark_rescan()
            return
        if isinstance(event, FileMovedEvent):
            self._add(Path(_text(event.dest_path)), complete=True)
        elif isinstance(event, FileClosedEvent):
            self._add(Path(_text(event.src_path)), complete=True)
        elif isinstance(event, FileCreatedEvent | FileModifiedEvent):
            self._add(Path(_text(event.src_path)), complete=False)

    def _add(self, path: Path, *, complete: bool) -> None:
        if not is_prompt_name(path.name):
            return
        with self._lock:
            if complete:
                self._complete.add(path)
                self._pending.discard(path)
            elif path not in self._complete:
                self._pending.add(path)
        self._wake()

    def _mark_rescan(self) -> None:
        with self._lock:
            self._rescan = True
        self._wake()

    def drain(self) -> tuple[set[Path], set[Path], bool]:
        """(complete paths, pending paths, rescan wanted) since the last drain."""
        with self._lock:
            out = (self._complete, self._pending, self._rescan)
            self._complete, self._pending, self._rescan = set(), set(), False
        return out


def _text(path: str | bytes) -> str:
    return path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path


class InboxObserver:
    """Owns the watchdog observer thread for one inbox."""

    def __init__(self, inbox: Path, handler: InboxEvents) -> None:
        self._observer = Observer()
        self._observer.schedule(handler, str(inbox), recursive=True)
        self._observer.daemon = True

    def start(self) -> None:
        self._observer.start()

    def stop(self) -> None:
        # watchdog logs a harmless "called when the thread is inactive" error
        # when an event races the stop; it is not an error of ours.
        logging.getLogger("watchdog.observers.inotify").setLevel(logging.CRITICAL)
        self._observer.stop()
        self._observer.join(timeout=5)
