"""inotify (through watchdog) as hints: which inbox paths to look at now.

Events are hints; the periodic rescan in the watcher is the truth. A prompt
that appeared by rename (``IN_MOVED_TO``, from inside the inbox or from
outside it) is complete; one created, modified or closed after writing in
place is only pending: it is whole once it has not changed for ``settle``
seconds (store/inbox_settle.py). Directory moves and overflows trigger a full
rescan.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
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
from watchdog.observers.inotify import InotifyFullEmitter, InotifyObserver, InotifyWatchGroup
from watchdog.observers.inotify_c import InotifyConstants, InotifyEvent, Mask
from watchdog.observers.inotify_move_event_grouper import InotifyMoveEventGrouper

from hopper.store.inbox import MAX_DEPTH, is_prompt_name

log = logging.getLogger(__name__)

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
        if isinstance(event, FileMovedEvent):  # dest "" (moved out of the inbox): no prompt
            self._add(Path(_text(event.dest_path)), complete=True)
        elif isinstance(event, FileCreatedEvent | FileModifiedEvent | FileClosedEvent):
            # Written in place: a close is not the end (`echo b >> x.prompt.md` may follow).
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


class _BoundedWatchGroup(InotifyWatchGroup):
    """watchdog's recursive inotify watches, kept to MAX_DEPTH folders below the inbox.

    Stock watchdog walks the whole tree with ``os.walk`` (recursive in this
    Python): a folder tree 1000 deep raised RecursionError in
    ``Observer.start`` and, created live, killed the inotify thread silently
    (claims then waited for the rescan: 0.009 s -> 24-30 s). Prompts deeper
    than MAX_DEPTH are ignored anyway (store/inbox.py), so their folders are
    not watched, and the walks here are iterative.
    """

    def _depth(self, path: bytes) -> int:
        return path[len(self.path) :].count(b"/")

    def _add_all_callbacks(self, path: bytes) -> None:
        depth = self._depth(path)
        if depth > MAX_DEPTH:
            return
        self._add_callback(path)
        if self.is_recursive and os.path.isdir(path):
            for root, dirnames, _ in _walk(path, MAX_DEPTH - depth):
                for dirname in dirnames:
                    self._add_callback(os.path.join(root, dirname))

    def _recursive_simulate(self, src_path: bytes) -> list[InotifyEvent]:
        events = []
        for root, dirnames, filenames in _walk(src_path, MAX_DEPTH - self._depth(src_path)):
            wd_root = self._active_callbacks_by_path.get(root)
            if wd_root is None:
                continue
            for dirname in dirnames:
                mask = Mask(InotifyConstants.IN_CREATE | InotifyConstants.IN_ISDIR)
                events.append(InotifyEvent(wd_root, mask, 0, dirname))
            for filename in filenames:
                mask = Mask(InotifyConstants.IN_CREATE)
                events.append(InotifyEvent(wd_root, mask, 0, filename))
        return events


def _walk(top: bytes, levels: int) -> Iterator[tuple[bytes, list[bytes], list[bytes]]]:
    """``os.walk`` without recursion or links: ``top`` and folders less than ``levels`` below."""
    stack = [(top, 0)]
    while stack:
        folder, level = stack.pop()
        if level >= levels:
            continue
        dirs: list[bytes] = []
        files: list[bytes] = []
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    try:
                        (dirs if entry.is_dir(follow_symlinks=False) else files).append(entry.name)
                    except OSError:
                        continue
        except OSError:
            continue  # gone, unreadable, or a path past PATH_MAX: not watched
        yield folder, dirs, files
        stack.extend((os.path.join(folder, d), level + 1) for d in dirs)


class _BoundedEmitter(InotifyFullEmitter):
    """Full events: a file renamed in from outside the inbox (an ``IN_MOVED_TO`` with no
    ``IN_MOVED_FROM`` to pair) is a move, as it is, not the creation stock watchdog
    reports; so it is claimed at once like any rename, not after ``settle``."""

    def on_thread_start(self) -> None:
        self._inotify = _BoundedWatchGroup(
            self._inotify_fd,
            os.fsencode(self.watch.path),
            is_recursive=self.watch.is_recursive,
            event_mask=self.get_event_mask_from_filter(),
            follow_symlink=self.watch.follow_symlink,
        )


class _BoundedObserver(InotifyObserver):
    def __init__(self) -> None:
        super().__init__()
        self._emitter_class = _BoundedEmitter


class InboxObserver:
    """Owns the watchdog observer thread for one inbox."""

    def __init__(self, inbox: Path, handler: InboxEvents) -> None:
        self._inbox = inbox
        self._observer = _BoundedObserver()
        self._observer.schedule(handler, str(inbox), recursive=True)
        self._observer.daemon = True

    def start(self) -> bool:
        """Start watching; False (logged) if inotify is unavailable: rescans still find prompts."""
        try:
            self._observer.start()
        except (OSError, RecursionError) as exc:
            log.error(
                "inbox %s: cannot watch with inotify (%s); new prompts are found by the "
                "periodic rescan only (raise fs.inotify.max_user_watches if it says so)",
                self._inbox,
                exc,
            )
            return False
        return True

    def stop(self) -> None:
        # watchdog logs a harmless "called when the thread is inactive" error
        # when an event races the stop; it is not an error of ours.
        logging.getLogger("watchdog.observers.inotify").setLevel(logging.CRITICAL)
        self._observer.stop()
        self._observer.join(timeout=5)
