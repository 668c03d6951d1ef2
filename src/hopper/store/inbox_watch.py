"""The inbox's inotify watches, read in the watcher loop's own thread.

Theory of operation. One inotify descriptor (watchdog's libc bindings and
``InotifyConstants``) watches the inbox and every folder below it down to
MAX_DEPTH, links not followed. The descriptor is non-blocking and is one of
the descriptors the loop's ``select`` waits on (wake.py), so a prompt renamed
into the inbox wakes the loop directly: no reader thread, no queue, no pairing
delay. Each turn :meth:`InboxWatch.read` drains it and returns hints:

* a file renamed in (``IN_MOVED_TO``, from inside the inbox or outside it) is
  *complete*; one created, modified or closed after writing in place is
  *pending* (whole once still for ``settle``: store/inbox_settle.py);
* a folder made later is watched at once, and the files already in it (made
  before its watch was) are hinted as pending;
* a folder moved in, out or within the inbox, a queue overflow
  (``IN_Q_OVERFLOW``) and a lost watch on the inbox itself ask for a full
  rescan; the watches follow the move (a folder moved out is no longer
  watched; an overflow rebuilds them all), and an inbox that was removed or
  replaced is watched again at the next read once it is back.

Events are hints; the watcher's periodic rescan is the truth and catches
whatever they miss (a folder that could not be watched: no watches left,
``fs.inotify.max_user_watches``). The pairs of a rename need no waiting: a
moved-out file or folder is all a lone ``IN_MOVED_FROM`` can mean, and the
folder case is settled at the end of the read that brought it.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from watchdog.observers import inotify_c
from watchdog.observers.inotify_c import InotifyConstants as C

from hopper.store.inbox import MAX_DEPTH, is_prompt_name

log = logging.getLogger(__name__)

_FILE_MASK = C.IN_CREATE | C.IN_MODIFY | C.IN_CLOSE_WRITE | C.IN_MOVED_FROM | C.IN_MOVED_TO
MASK = _FILE_MASK | C.IN_DELETE_SELF | C.IN_MOVE_SELF | C.IN_ONLYDIR | C.IN_DONT_FOLLOW
_ROOT_GONE = C.IN_IGNORED | C.IN_DELETE_SELF | C.IN_MOVE_SELF | C.IN_UNMOUNT
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name
_READ_SIZE = 64 * 1024
_MAX_READS = 16  # per call: ~1 MB of events (~30,000); the rest at the next turn


@dataclass
class Hints:
    """What one read saw: prompts renamed in, prompts written in place, rescan wanted."""

    complete: set[Path] = field(default_factory=set)
    pending: set[Path] = field(default_factory=set)
    rescan: bool = False


class InboxWatch:
    """The inbox's inotify descriptor and its watches; see the module doc."""

    def __init__(self, inbox: Path) -> None:
        self.inbox = inbox
        self._root = os.fsencode(inbox)
        self._fd: int | None = None
        self._paths: dict[int, bytes] = {}  # watch -> folder
        self._wds: dict[bytes, int] = {}  # folder -> watch
        self._root_lost = False  # the inbox's own watch is gone: watch it again when it is back
        self._watch_errno = 0  # why the last watch could not be added

    # -- life cycle -------------------------------------------------------------------
    def start(self) -> bool:
        """Watch the inbox; False (logged) if inotify is unavailable: rescans still find prompts."""
        try:
            fd = inotify_c.inotify_init()
            if fd < 0:
                raise _error()
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)
            self._fd = fd
            self._add_tree(self._root, 0)
            if self._root not in self._wds:
                raise _error(self._watch_errno)
        except OSError as exc:
            self.close()
            log.error(
                "inbox %s: cannot watch with inotify (%s); new prompts are found by the "
                "periodic rescan only (raise fs.inotify.max_user_watches if it says so)",
                self.inbox,
                exc.strerror or exc,
            )
            return False
        return True

    def fileno(self) -> int:
        """The descriptor to wait on (readable: events to read); -1 when closed."""
        return -1 if self._fd is None else self._fd

    @property
    def live(self) -> bool:
        return self._fd is not None

    def watched(self) -> list[Path]:
        """The folders watched now (for tests and diagnostics)."""
        return sorted(Path(os.fsdecode(p)) for p in self._wds)

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)  # the kernel drops every watch with it
            except OSError:
                pass  # closed under us already (EBADF): nothing left to drop
            self._fd = None
        self._paths.clear()
        self._wds.clear()

    # -- reading ----------------------------------------------------------------------
    def read(self) -> Hints:
        """Every event queued since the last read (without blocking), as hints."""
        hints = Hints()
        if self._fd is None:
            return hints
        if self._root_lost and self._rewatch_root():
            hints.rescan = True
        moved_out: dict[int, bytes] = {}  # cookie -> folder moved from, not (yet) moved to
        for _ in range(_MAX_READS):
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:  # not expected from an inotify descriptor: stop trusting it
                log.error(
                    "inbox %s: reading inotify failed (%s); new prompts are found by the "
                    "periodic rescan only until the watcher restarts",
                    self.inbox,
                    exc.strerror or exc,
                )
                self.close()
                hints.rescan = True
                return hints
            self.parse(data, hints, moved_out)
            if len(data) < _READ_SIZE // 2:
                break  # drained (a full read is at least half a buffer): no extra syscall
        for folder in moved_out.values():  # moved out of the inbox: no longer ours
            self._drop_tree(folder)
        return hints

    def parse(self, data: bytes, hints: Hints, moved_out: dict[int, bytes]) -> None:
        """Turn one ``read(2)``'s events into ``hints``, keeping the watches in step."""
        pos, end = 0, len(data)
        while pos + _EVENT.size <= end:
            wd, mask, cookie, size = _EVENT.unpack_from(data, pos)
            name = data[pos + _EVENT.size : pos + _EVENT.size + size].rstrip(b"\0")
            pos += _EVENT.size + size
            if mask & C.IN_Q_OVERFLOW:
                log.warning("inbox %s: inotify queue overflowed; rescanning it", self.inbox)
                hints.rescan = True
                moved_out.clear()  # their pairs may be among the lost events
                self._rebuild()
                continue
            folder = self._paths.get(wd)
            if folder is None:
                continue  # a watch dropped since (its events were queued before)
            if not name:
                self._self_event(wd, folder, mask, hints)
            elif mask & C.IN_ISDIR:
                self._folder_event(os.path.join(folder, name), mask, cookie, hints, moved_out)
            elif mask & C.IN_MOVED_TO:
                _hint(hints.complete, folder, name)
            elif mask & (C.IN_CREATE | C.IN_MODIFY | C.IN_CLOSE_WRITE):
                _hint(hints.pending, folder, name)
            # IN_MOVED_FROM of a file: moved out or renamed; its new name has its own event

    def _self_event(self, wd: int, folder: bytes, mask: int, hints: Hints) -> None:
        """An event about a watched folder itself: it went away, or its watch did."""
        if not mask & _ROOT_GONE:
            return
        if folder == self._root:
            # The inbox itself was removed or renamed (its watch follows the old folder):
            # forget every watch; the inbox is watched again once it is back.
            hints.rescan = True
            self._drop_tree(self._root)
            self._root_lost = True
        elif mask & C.IN_IGNORED:
            self._forget(wd)

    def _folder_event(
        self, path: bytes, mask: int, cookie: int, hints: Hints, moved_out: dict[int, bytes]
    ) -> None:
        if mask & C.IN_CREATE:
            # Made now: watch it (and what `mkdir -p` made below it before the watch was
            # there); the files already in it are pending hints.
            for folder, name in self._add_tree(path, self._depth(path)):
                _hint(hints.pending, folder, name)
        elif mask & C.IN_MOVED_FROM:
            hints.rescan = True
            moved_out[cookie] = path
        elif mask & C.IN_MOVED_TO:
            hints.rescan = True
            source = moved_out.pop(cookie, None)
            if source is not None:
                self._move_tree(source, path)
            else:  # from outside the inbox
                self._add_tree(path, self._depth(path))

    # -- watches ----------------------------------------------------------------------
    def _depth(self, path: bytes) -> int:
        return path[len(self._root) :].count(b"/")

    def _add_tree(self, top: bytes, depth: int) -> list[tuple[bytes, bytes]]:
        """Watch ``top`` and the folders below it (MAX_DEPTH at most, links and dot-folders
        not followed, as the rescan); (folder, name) of each prompt-named file in them."""
        found: list[tuple[bytes, bytes]] = []
        stack = [(top, depth)]
        while stack:
            folder, level = stack.pop()
            hidden = folder != self._root and os.path.basename(folder).startswith(b".")
            if level > MAX_DEPTH or hidden or not self._watch(folder):
                continue
            try:
                with os.scandir(folder) as it:
                    entries = list(it)
            except OSError:
                continue  # gone, unreadable, or a path past PATH_MAX: its rescan decides
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir:
                    stack.append((os.path.join(folder, entry.name), level + 1))
                elif is_prompt_name(os.fsdecode(entry.name)):
                    found.append((folder, entry.name))
        return found

    def _watch(self, folder: bytes) -> bool:
        assert self._fd is not None
        wd = inotify_c.inotify_add_watch(self._fd, folder, MASK)
        if wd < 0:
            self._watch_errno = ctypes.get_errno()
            return False
        old = self._paths.get(wd)
        if old is not None and old != folder:  # the same folder under its new name
            self._wds.pop(old, None)
        self._paths[wd] = folder
        self._wds[folder] = wd
        return True

    def _under(self, top: bytes) -> list[bytes]:
        prefix = top + b"/"
        return [p for p in self._wds if p == top or p.startswith(prefix)]

    def _move_tree(self, source: bytes, dest: bytes) -> None:
        """A folder renamed within the inbox: its watches (the kernel's) now have new paths."""
        for old in self._under(source):
            wd = self._wds.pop(old)
            new = dest + old[len(source) :]
            self._paths[wd] = new
            self._wds[new] = wd
        self._add_tree(dest, self._depth(dest))  # folders that came within MAX_DEPTH
        for path in self._under(dest):
            if self._depth(path) > MAX_DEPTH or b"/." in path[len(self._root) :]:
                self._drop_tree(path)  # moved too deep, or into a dot-folder

    def _drop_tree(self, top: bytes) -> None:
        for path in self._under(top):
            wd = self._wds.pop(path)
            self._paths.pop(wd, None)
            if self._fd is not None:
                inotify_c.inotify_rm_watch(
                    self._fd, inotify_c.WatchDescriptor(wd)
                )  # fails only if it is gone already

    def _forget(self, wd: int) -> None:
        path = self._paths.pop(wd, None)
        if path is not None and self._wds.get(path) == wd:
            del self._wds[path]

    def _rebuild(self) -> None:
        """After an overflow: events were lost, so the watches are made again from the disk."""
        self._drop_tree(self._root)
        self._root_lost = not self._rewatch_root()

    def _rewatch_root(self) -> bool:
        """Watch the inbox again if it is a real folder now; True if it is watched."""
        try:
            st = os.lstat(self._root)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            return False
        self._add_tree(self._root, 0)
        self._root_lost = self._root not in self._wds
        return not self._root_lost


def _hint(into: set[Path], folder: bytes, name: bytes) -> None:
    text = os.fsdecode(name)
    if is_prompt_name(text):
        into.add(Path(os.fsdecode(folder), text))


def _error(err: int = 0) -> OSError:
    err = err or ctypes.get_errno() or errno.EIO
    return OSError(err, os.strerror(err))
