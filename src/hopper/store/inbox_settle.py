"""Prompts written in place, and when each is whole: ``settle`` seconds after its last change.

Theory of operation. A prompt renamed into the inbox is whole the moment it
appears and is claimed at once. One written in place is not: ``echo a >
x.prompt.md; sleep 0.3; echo b >> x.prompt.md`` closes the file twice, and
claiming it at the first close ran two jobs, the first with half a script and
the second with the rest (the append made x.prompt.md anew after the claim had
renamed it away). So a prompt written in place is claimed only once it has not
changed for ``settle`` seconds and no process holds it open for writing.

When it last changed is judged on the watcher's own monotonic clock:

- an inotify hint (created, modified, closed after writing) is a change now
  (or later, if the mtime the next look finds says so);
- a look that finds another size or mtime than the last look is a change now:
  it happened since that look, and an mtime may come from another clock;
- a path seen first is as old as its mtime says, up to ``settle`` (a prompt
  dropped while the watcher was down is claimed at once), and never older than
  now when its mtime is in the future (another host's clock).

Pure bookkeeping: the caller stats the files and asks /proc who writes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

Stamp = tuple[int, float]  # (size, mtime): what a look at the file saw


@dataclass
class _Entry:
    changed_at: float  # monotonic: the latest change known
    stamp: Stamp | None  # at the last look; None: not looked at since the last hint
    due_at: float  # monotonic: when a look may find it whole


class Settling:
    """Prompts being written in place: each one's last change, and when to look again."""

    def __init__(self, settle: float) -> None:
        self.settle = settle
        self._entries: dict[Path, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, path: object) -> bool:
        return path in self._entries

    def __iter__(self) -> Iterator[Path]:
        return iter(self._entries)

    def touched(self, paths: Iterable[Path], mono: float) -> None:
        """inotify said ``paths`` were created, written or closed after writing: just now."""
        for path in paths:
            entry = self._entries.get(path)
            if entry is None:
                self._entries[path] = _Entry(mono, None, mono + self.settle)
            else:
                entry.changed_at = max(entry.changed_at, mono)
                entry.stamp = None
                entry.due_at = max(entry.due_at, mono + self.settle)

    def due(self, mono: float) -> list[Path]:
        """Paths a look may now find whole, in name order."""
        return sorted(p for p, e in self._entries.items() if e.due_at <= mono)

    def next_due(self) -> float | None:
        """The monotonic time of the earliest :meth:`due` path; None if none waits."""
        return min((e.due_at for e in self._entries.values()), default=None)

    def look(self, path: Path, stamp: Stamp, now: float, mono: float) -> bool:
        """Record what a look at ``path`` found (``now`` wall, ``mono`` monotonic seconds);
        True if it has been still for ``settle`` (whether a writer holds it open is the
        caller's to ask next)."""
        entry = self._entries.get(path)
        by_mtime = mono - min(max(now - stamp[1], 0.0), self.settle)
        if entry is None:
            entry = self._entries[path] = _Entry(by_mtime, stamp, 0.0)
        elif entry.stamp is None:  # the first look since a hint, which dated the change
            entry.changed_at = max(entry.changed_at, by_mtime)
            entry.stamp = stamp
        elif entry.stamp != stamp:  # changed since the last look: count from now, to be safe
            entry.changed_at = mono
            entry.stamp = stamp
        entry.due_at = entry.changed_at + self.settle
        return mono >= entry.due_at

    def held(self, path: Path, mono: float) -> None:
        """A process holds ``path`` open for writing: look again in ``settle`` seconds
        (its close is a hint that comes sooner where inotify works)."""
        entry = self._entries.get(path)
        if entry is not None:
            entry.due_at = mono + self.settle

    def forget(self, paths: Iterable[Path]) -> None:
        """Claimed, renamed in, or gone: no longer waited on."""
        for path in paths:
            self._entries.pop(path, None)

    def keep_only(self, paths: set[Path]) -> None:
        """A full rescan found only ``paths``: the others went away."""
        for path in [p for p in self._entries if p not in paths]:
            del self._entries[path]
